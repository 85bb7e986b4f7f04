// The kernel cache: keys, memory and disk hits, corrupt files, processes and
// threads sharing it, and a directory it cannot use.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "kiln/kiln.h"
#include "support/test_files.h"
#include "support/test_kcache_shims.h"
#include "support/text.h"

namespace fs = std::filesystem;

namespace {

using kiln_test::Contains;

using Key = std::array<uint8_t, 16>;

std::string Hex(const Key &k) {
  char hex[33];
  kcache_test_hex(k.data(), hex);
  return hex;
}

Key KeyOf(const char *source, const char *target = "sm_90", const char *compiler = "nvrtc 13.0",
          std::vector<const char *> options = {"-O3"}) {
  Key k;
  kcache_test_key(source, target, compiler, options.data(), (int)options.size(), k.data());
  return k;
}

void WriteFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> FileNames(const std::string &dir) {
  std::vector<std::string> names;
  for (const auto &e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// A build function: copies `payload` after an optional delay, or fails.
struct Builder {
  std::string payload = "kernel image";
  int delay_ms = 0;
  kiln_status fail = KILN_OK;
  std::atomic<int> calls{0};

  static kiln_status Build(void *user, void **blob, size_t *size) {
    Builder *b = static_cast<Builder *>(user);
    b->calls++;
    if (b->delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(b->delay_ms));
    if (b->fail != KILN_OK) return kcore_fail(b->fail, "test build: error: expected ';'");
    void *p = malloc(b->payload.size() ? b->payload.size() : 1);
    memcpy(p, b->payload.data(), b->payload.size());
    *blob = p;
    *size = b->payload.size();
    return KILN_OK;
  }
};

// Builds `key` in a cache and returns the payload (empty on failure).
std::string Get(kcache *c, const Key &key, Builder *b, kiln_status *st = nullptr) {
  const void *blob = nullptr;
  size_t size = 0;
  kiln_status s = kcache_test_get_or_build(c, key.data(), Builder::Build, b, &blob, &size);
  if (st) *st = s;
  if (s != KILN_OK) return "";
  return std::string(static_cast<const char *>(blob), size);
}

kcache_test_stats Stats(kcache *c) {
  kcache_test_stats s;
  kcache_test_stats_get(c, &s);
  return s;
}

std::string EntryPath(kcache *c, const Key &key) {
  char buf[4096];
  EXPECT_EQ(kcache_test_entry_path(c, key.data(), buf, sizeof buf), KILN_OK) << kiln_last_error();
  return buf;
}

TEST(KernelCacheDigest, IsBlake2b128) {
  // Expected digests: python3 -c "import hashlib;
  //   print(hashlib.blake2b(m, digest_size=16).hexdigest())"
  struct Case {
    std::string message;
    const char *digest;
  };
  std::string b128, b129, b1000;
  for (int i = 0; i < 128; i++) b128.push_back((char)i);
  for (int i = 0; i < 129; i++) b129.push_back((char)(i % 251));
  for (int i = 0; i < 1000; i++) b1000.push_back((char)(i % 251));
  const Case cases[] = {{"", "cae66941d9efbd404e4d88758ea67670"},
                        {"abc", "cf4ab791c62b8d2b2109c90275287816"},
                        {b128, "a74787004ef589e31149183900d0294a"},
                        {b129, "aaf1b0371f6d4ee49ee4fb5ddd9c49ef"},
                        {b1000, "bca120dfd89cd95d82898473a5b01c90"}};
  for (const Case &c : cases) {
    Key k;
    kcache_test_digest(c.message.data(), c.message.size(), k.data());
    EXPECT_EQ(Hex(k), c.digest) << c.message.size() << " bytes";
  }
}

TEST(KernelCacheKey, DependsOnEveryPart) {
  Key base = KeyOf("kernel");
  EXPECT_EQ(KeyOf("kernel"), base);
  std::set<std::string> keys = {Hex(base)};
  const Key variants[] = {
      KeyOf("kernel "),
      KeyOf("kernel", "sm_80"),
      KeyOf("kernel", nullptr),
      KeyOf("kernel", ""),
      KeyOf("kernel", "sm_90", "nvrtc 13.1"),
      KeyOf("kernel", "sm_90", "nvrtc 13.0", {}),
      KeyOf("kernel", "sm_90", "nvrtc 13.0", {"-O2"}),
      KeyOf("kernel", "sm_90", "nvrtc 13.0", {"-O3", "-lineinfo"}),
      // Parts are framed: moving text between neighbours changes the key.
      KeyOf("kernel", "sm_90", "nvrtc 13.0", {"-O", "3"}),
      KeyOf("kernel", "sm_90nvrtc 13.0", "", {"-O3"}),
  };
  for (const Key &k : variants) keys.insert(Hex(k));
  EXPECT_EQ(keys.size(), 1 + std::size(variants));
}

class KernelCacheTest : public ::testing::Test {
 protected:
  kcache *Open(kiln_log_level level = KILN_LOG_WARN) {
    kcache *c = nullptr;
    EXPECT_EQ(kcache_test_new(dir_.path().c_str(), level, &c), KILN_OK) << kiln_last_error();
    return c;
  }
  TempDir dir_;
};

TEST_F(KernelCacheTest, MissBuildsThenHitsMemory) {
  kcache *c = Open();
  EXPECT_STREQ(kcache_test_dir(c), dir_.path().c_str());
  Key key = KeyOf("extern \"C\" __global__ void k() {}");
  Builder b;
  const void *first = nullptr, *second = nullptr;
  size_t size = 0;
  ASSERT_EQ(kcache_test_get_or_build(c, key.data(), Builder::Build, &b, &first, &size), KILN_OK);
  EXPECT_EQ(std::string(static_cast<const char *>(first), size), b.payload);
  ASSERT_EQ(kcache_test_get_or_build(c, key.data(), Builder::Build, &b, &second, &size), KILN_OK);
  EXPECT_EQ(first, second);  // the same bytes, not a copy
  EXPECT_EQ(b.calls, 1);
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.builds, 1u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(s.disk_hits, 0u);
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, DiskHitAfterRestart) {
  Key key = KeyOf("restart");
  Builder b;
  b.payload = std::string(5000, 'x') + "tail";
  kcache *c = Open();
  EXPECT_EQ(Get(c, key, &b), b.payload);
  kcache_test_free(c);

  c = Open();  // a new process would see the same
  Builder never;
  never.payload = "must not be built";
  EXPECT_EQ(Get(c, key, &never), b.payload);
  EXPECT_EQ(never.calls, 0);
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.builds, 0u);
  EXPECT_EQ(Get(c, key, &never), b.payload);  // now from memory
  EXPECT_EQ(Stats(c).memory_hits, 1u);
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, FileHasHeaderPayloadAndNoTemporaries) {
  Key key = KeyOf("layout");
  Builder b;
  kcache *c = Open();
  Get(c, key, &b);
  std::string path = EntryPath(c, key);
  EXPECT_EQ(path, dir_ / (Hex(key) + ".kiln"));
  std::string bytes = ReadFile(path);
  ASSERT_EQ(bytes.size(), 64 + b.payload.size());
  EXPECT_EQ(bytes.substr(0, 8), "kilnkern");
  EXPECT_EQ(bytes.substr(16, 16), std::string(key.begin(), key.end()));
  EXPECT_EQ(bytes.substr(64), b.payload);
  EXPECT_EQ(FileNames(dir_.path()), std::vector<std::string>{Hex(key) + ".kiln"});
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, EmptyKernelIsStoredAndLoaded) {
  Key key = KeyOf("empty");
  Builder b;
  b.payload = "";
  kcache *c = Open();
  const void *blob = nullptr;
  size_t size = 1;
  ASSERT_EQ(kcache_test_get_or_build(c, key.data(), Builder::Build, &b, &blob, &size), KILN_OK);
  EXPECT_NE(blob, nullptr);
  EXPECT_EQ(size, 0u);
  kcache_test_free(c);
  c = Open();
  Builder never;
  ASSERT_EQ(kcache_test_get_or_build(c, key.data(), Builder::Build, &never, &blob, &size), KILN_OK);
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(never.calls, 0);
  kcache_test_free(c);
}

// A damaged file is detected, reported at warn, removed and rebuilt.
struct Damage {
  const char *name;
  std::function<void(const std::string &path, const std::string &other_entry)> apply;
  const char *reason;
};

class KernelCacheDamageTest : public KernelCacheTest,
                              public ::testing::WithParamInterface<Damage> {};

TEST_P(KernelCacheDamageTest, IsDetectedWarnedAndRebuilt) {
  const Damage &d = GetParam();
  Key key = KeyOf("damaged"), other = KeyOf("other kernel");
  Builder good;
  good.payload = std::string(300, 'k');
  Builder other_b;
  other_b.payload = std::string(300, 'o');
  kcache *c = Open();
  Get(c, key, &good);
  Get(c, other, &other_b);
  std::string path = EntryPath(c, key), other_path = EntryPath(c, other);
  kcache_test_free(c);

  d.apply(path, other_path);
  c = Open();
  Builder rebuild;
  rebuild.payload = good.payload;
  testing::internal::CaptureStderr();
  EXPECT_EQ(Get(c, key, &rebuild), good.payload);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rebuild.calls, 1);
  EXPECT_TRUE(Contains(err, "kiln[warn]: kernel cache: " + path)) << err;
  EXPECT_TRUE(Contains(err, d.reason)) << err;
  EXPECT_TRUE(Contains(err, "removing it and recompiling")) << err;
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.corrupt_files, 1u);
  EXPECT_EQ(s.disk_hits, 0u);
  kcache_test_free(c);

  // The rebuilt kernel replaced the damaged file.
  c = Open();
  Builder never;
  EXPECT_EQ(Get(c, key, &never), good.payload);
  EXPECT_EQ(never.calls, 0);
  kcache_test_free(c);
}

void Truncate(const std::string &path, size_t size) { fs::resize_file(path, size); }

void Patch(const std::string &path, size_t offset, const std::string &bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp((std::streamoff)offset);
  f.write(bytes.data(), (std::streamsize)bytes.size());
}

INSTANTIATE_TEST_SUITE_P(
    Damages, KernelCacheDamageTest,
    ::testing::Values(
        Damage{"TruncatedPayload", [](auto &p, auto &) { Truncate(p, 64 + 150); },
               "the header says 300 payload bytes, the file holds 150"},
        Damage{"TruncatedHeader", [](auto &p, auto &) { Truncate(p, 20); },
               "truncated: 20 bytes, shorter than the 64-byte header"},
        Damage{"Empty", [](auto &p, auto &) { Truncate(p, 0); }, "truncated: 0 bytes"},
        Damage{"FlippedPayloadByte",
               [](auto &p, auto &) {
                 std::string b = ReadFile(p);
                 Patch(p, 64 + 123, std::string(1, (char)(b[64 + 123] ^ 0x10)));
               },
               "checksum mismatch"},
        Damage{"FlippedReservedByte", [](auto &p, auto &) { Patch(p, 44, "\x01"); },
               "checksum mismatch"},
        Damage{"GarbageHeader", [](auto &p, auto &) { Patch(p, 0, std::string(64, '\xa5')); },
               "bad magic"},
        Damage{"OtherFormat", [](auto &p, auto &) { Patch(p, 8, std::string("\x07\0\0\0", 4)); },
               "format 7 with a 64-byte header, expected format 1"},
        Damage{"LengthLies", [](auto &p, auto &) { Patch(p, 32, std::string("\x2d\x01", 2)); },
               "the header says 301 payload bytes, the file holds 300"},
        Damage{"OtherKeysFile",
               [](auto &p, auto &o) { fs::copy_file(o, p, fs::copy_options::overwrite_existing); },
               "holds key "}),
    [](const ::testing::TestParamInfo<Damage> &info) { return std::string(info.param.name); });

// The build function of the two-process test: each child signals that it is
// building and waits until the other one is too, so both build for certain.
struct Rendezvous {
  int signal_fd, wait_fd;
  char fill;
  static kiln_status Build(void *user, void **blob, size_t *size) {
    Rendezvous *r = static_cast<Rendezvous *>(user);
    char one = 1;
    if (write(r->signal_fd, &one, 1) != 1) return KILN_ERR_IO;
    struct pollfd p = {r->wait_fd, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return KILN_ERR_INTERNAL;
    const size_t n = 256 * 1024;  // large enough that interleaved writes would show
    char *data = static_cast<char *>(malloc(n));
    memset(data, r->fill, n);
    *blob = data;
    *size = n;
    return KILN_OK;
  }
};

// In the child: 0 when it built and got its own bytes, else a failure code.
int ChildCompile(const std::string &dir, const Key &key, Rendezvous r) {
  kcache *c = nullptr;
  if (kcache_test_new(dir.c_str(), KILN_LOG_ERROR, &c) != KILN_OK) return 10;
  const void *blob = nullptr;
  size_t size = 0;
  int code = 0;
  if (kcache_test_get_or_build(c, key.data(), Rendezvous::Build, &r, &blob, &size) != KILN_OK)
    code = 11;
  else if (size != 256 * 1024 || static_cast<const char *>(blob)[size - 1] != r.fill)
    code = 12;
  else if (Stats(c).builds != 1)
    code = 13;
  kcache_test_free(c);
  return code;
}

TEST_F(KernelCacheTest, TwoProcessesCompileTheSameKernel) {
  std::string dir = dir_ / "shared";  // created by whichever child comes first
  Key key = KeyOf("contended");
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  const Rendezvous sides[2] = {{a[1], b[0], 'A'}, {b[1], a[0], 'B'}};
  pid_t pids[2];
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    ASSERT_GE(pids[i], 0);
    if (pids[i] == 0) _exit(ChildCompile(dir, key, sides[i]));
  }
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
  // One whole file won; nothing else is left behind.
  EXPECT_EQ(FileNames(dir), std::vector<std::string>{Hex(key) + ".kiln"});
  kcache *c = nullptr;
  ASSERT_EQ(kcache_test_new(dir.c_str(), KILN_LOG_WARN, &c), KILN_OK);
  Builder never;
  testing::internal::CaptureStderr();
  std::string got = Get(c, key, &never);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(never.calls, 0);
  ASSERT_EQ(got.size(), 256u * 1024);
  EXPECT_TRUE(got == std::string(got.size(), 'A') || got == std::string(got.size(), 'B'));
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, ThreadsAskingForOneKeyBuildItOnce) {
  kcache *c = Open();
  Key key = KeyOf("hot kernel");
  Builder b;
  b.delay_ms = 100;  // the others arrive while it builds
  const int n = 8;
  std::vector<const void *> blobs(n);
  std::vector<kiln_status> status(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++)
    threads.emplace_back([&, i] {
      size_t size = 0;
      status[i] = kcache_test_get_or_build(c, key.data(), Builder::Build, &b, &blobs[i], &size);
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(b.calls, 1);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(status[i], KILN_OK);
    EXPECT_EQ(blobs[i], blobs[0]);
  }
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.builds, 1u);
  EXPECT_EQ(s.memory_hits, (uint64_t)n - 1);
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, ThreadsOverManyKeysBuildEachOnce) {
  kcache *c = nullptr;
  ASSERT_EQ(kcache_test_new(nullptr, KILN_LOG_WARN, &c), KILN_OK);  // memory only
  EXPECT_EQ(kcache_test_dir(c), nullptr);
  const int keys = 300, n = 4;  // more keys than the table's first buckets
  std::vector<Key> key(keys);
  for (int k = 0; k < keys; k++) key[k] = KeyOf(("kernel " + std::to_string(k)).c_str());
  Builder b;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++)
    threads.emplace_back([&, t] {
      for (int i = 0; i < keys; i++) {
        int k = t % 2 ? keys - 1 - i : (i * 7 + t) % keys;
        if (Get(c, key[k], &b) != b.payload) wrong++;
      }
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(b.calls, keys);
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.builds, (uint64_t)keys);
  EXPECT_EQ(s.memory_hits, (uint64_t)(n - 1) * keys);
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, FailedBuildReachesWaitersAndIsRetried) {
  kcache *c = Open();
  Key key = KeyOf("broken");
  Builder bad;
  bad.delay_ms = 100;
  bad.fail = KILN_ERR_COMPILE;
  const int n = 4;
  std::vector<kiln_status> status(n);
  std::vector<std::string> message(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++)
    threads.emplace_back([&, i] {
      Get(c, key, &bad, &status[i]);
      message[i] = kiln_last_error();
    });
  for (auto &t : threads) t.join();
  EXPECT_GE(bad.calls, 1);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(status[i], KILN_ERR_COMPILE);
    // Waiters receive the builder's own message.
    EXPECT_EQ(message[i], "test build: error: expected ';'");
  }
  EXPECT_EQ(FileNames(dir_.path()).size(), 0u);  // nothing stored

  Builder good;
  EXPECT_EQ(Get(c, key, &good), good.payload);  // a later call builds again
  EXPECT_EQ(good.calls, 1);
  kcache_test_free(c);
}

TEST(KernelCacheDir, UncreatableDirectoryMeansMemoryOnly) {
  TempDir tmp;
  WriteFile(tmp / "file", "not a directory");
  std::string dir = tmp / "file/cache";
  kcache *c = nullptr;
  testing::internal::CaptureStderr();
  ASSERT_EQ(kcache_test_new(dir.c_str(), KILN_LOG_WARN, &c), KILN_OK);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(err, "kiln[warn]: kernel cache: " + dir)) << err;
  EXPECT_TRUE(Contains(err, "Not a directory")) << err;
  EXPECT_TRUE(Contains(err, "caching kernels in memory only")) << err;
  EXPECT_EQ(kcache_test_dir(c), nullptr);
  char buf[256];
  Key key = KeyOf("memory only");
  EXPECT_EQ(kcache_test_entry_path(c, key.data(), buf, sizeof buf), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcache_entry_path")) << kiln_last_error();

  Builder b;
  EXPECT_EQ(Get(c, key, &b), b.payload);
  EXPECT_EQ(Get(c, key, &b), b.payload);
  EXPECT_EQ(b.calls, 1);
  kcache_test_free(c);

  // Quiet below warn.
  testing::internal::CaptureStderr();
  ASSERT_EQ(kcache_test_new(dir.c_str(), KILN_LOG_ERROR, &c), KILN_OK);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(Get(c, key, &b), b.payload);
  EXPECT_EQ(b.calls, 2);  // nothing on disk to find
  kcache_test_free(c);
}

TEST(KernelCacheDir, IsCreatedPrivateWithItsParents) {
  TempDir tmp;
  std::string dir = tmp / "a/b/kernels";
  kcache *c = nullptr;
  ASSERT_EQ(kcache_test_new(dir.c_str(), KILN_LOG_WARN, &c), KILN_OK);
  EXPECT_STREQ(kcache_test_dir(c), dir.c_str());
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  kcache_test_free(c);
}

TEST_F(KernelCacheTest, UnusableEntryPathIsAWarningNotAFailure) {
  kcache *c = Open();
  Key key = KeyOf("blocked");
  std::string path = EntryPath(c, key);
  fs::create_directory(path);  // a directory where the file should be
  Builder b;
  testing::internal::CaptureStderr();
  EXPECT_EQ(Get(c, key, &b), b.payload);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(err, path + ": cannot read: not a regular file; recompiling")) << err;
  EXPECT_TRUE(Contains(err, "kernel cache: " + path + ": rename failed: Is a directory; keeping "
                            "the kernel in memory only"))
      << err;
  kcache_test_stats s = Stats(c);
  EXPECT_EQ(s.write_failures, 1u);
  EXPECT_EQ(s.corrupt_files, 0u);
  EXPECT_EQ(FileNames(dir_.path()), std::vector<std::string>{Hex(key) + ".kiln"});  // no temp
  EXPECT_EQ(Get(c, key, &b), b.payload);  // still served from memory
  EXPECT_EQ(b.calls, 1);
  kcache_test_free(c);
}

TEST(KernelCacheFiles, WriteFileNamesPathAndReason) {
  TempDir tmp;
  std::string path = tmp / "missing/file.bin";
  EXPECT_EQ(kcache_test_write_file(path.c_str(), "x", 1), KILN_ERR_IO);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kcache_write_file: " + tmp / "missing/file.bin.tmp-")) << msg;
  EXPECT_TRUE(Contains(msg, "mkstemp failed: No such file or directory")) << msg;

  path = tmp / "file.bin";
  ASSERT_EQ(kcache_test_write_file(path.c_str(), "abc", 3), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kcache_test_write_file(path.c_str(), "replaced", 8), KILN_OK) << kiln_last_error();
  EXPECT_EQ(ReadFile(path), "replaced");
  EXPECT_EQ(FileNames(tmp.path()), std::vector<std::string>{"file.bin"});

  EXPECT_EQ(kcache_test_write_file(nullptr, "x", 1), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcache_write_file")) << kiln_last_error();
}

TEST_F(KernelCacheTest, StaleTemporaryFilesAreSwept) {
  std::string stale = dir_ / "0123.kiln.tmp-abcdef", fresh = dir_ / "4567.kiln.tmp-ghijkl";
  WriteFile(stale, "left by a crash");
  WriteFile(fresh, "being written now");
  struct timespec times[2] = {{time(nullptr) - 7200, 0}, {time(nullptr) - 7200, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
  kcache *c = Open();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));
  kcache_test_free(c);
}

TEST(KernelCacheArgs, NullArgumentsNameTheCall) {
  kcache *c = nullptr;
  EXPECT_EQ(kcache_test_new(nullptr, KILN_LOG_WARN, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcache_new")) << kiln_last_error();
  ASSERT_EQ(kcache_test_new(nullptr, KILN_LOG_WARN, &c), KILN_OK);
  Key key = KeyOf("args");
  Builder b;
  const void *blob = nullptr;
  size_t size = 0;
  const struct {
    kcache *c;
    const uint8_t *key;
    kcache_test_build_fn build;
    const void **blob;
    size_t *size;
  } cases[] = {{nullptr, key.data(), Builder::Build, &blob, &size},
               {c, nullptr, Builder::Build, &blob, &size},
               {c, key.data(), nullptr, &blob, &size},
               {c, key.data(), Builder::Build, nullptr, &size},
               {c, key.data(), Builder::Build, &blob, nullptr}};
  for (const auto &k : cases) {
    EXPECT_EQ(kcache_test_get_or_build(k.c, k.key, k.build, &b, k.blob, k.size),
              KILN_ERR_ARGUMENT);
    EXPECT_TRUE(Contains(kiln_last_error(), "kcache_get_or_build")) << kiln_last_error();
  }
  EXPECT_EQ(b.calls, 0);
  kcache_test_free(c);

  TempDir tmp;
  ASSERT_EQ(kcache_test_new(tmp.path().c_str(), KILN_LOG_WARN, &c), KILN_OK);
  char small[8];
  EXPECT_EQ(kcache_test_entry_path(c, key.data(), small, sizeof small), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcache_entry_path: 8 bytes are too few"))
      << kiln_last_error();
  kcache_test_free(c);
}

}  // namespace
