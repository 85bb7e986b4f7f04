// The host C compiler: compile, load and call; compiler errors with their
// log and source; the cache in front of it; no compiler at all.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "codegen/codegen.h"
#include "kiln/kiln.h"
#include "support/test_files.h"
#include "support/scoped_env.h"
#include "support/test_kcache_shims.h"
#include "support/text.h"

namespace fs = std::filesystem;

namespace {

using kiln_test::Contains;

// The first line a shell command prints.
std::string FirstLine(const char *command) {
  FILE *p = popen(command, "r");
  if (!p) return "";
  char buf[1024] = "";
  if (!fgets(buf, sizeof buf, p)) buf[0] = '\0';
  pclose(p);
  std::string s = buf;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The source path a compile error names: "... compiling <path>:\n<log>".
std::string SourcePathIn(const std::string &msg) {
  size_t at = msg.find(" compiling ");
  size_t end = msg.find(":\n", at);
  if (at == std::string::npos || end == std::string::npos) return "";
  return msg.substr(at + 11, end - at - 11);
}

const char *const kAddSource =
    "int kiln_add(int a, int b) { return a + b; }\n"
    "double kiln_scale(double x) { return x * 2.5; }\n";

class CcJitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cc_test_available()) GTEST_SKIP() << "no host C compiler";
    ASSERT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, &cc_), KILN_OK) << kiln_last_error();
  }
  void TearDown() override { cc_test_free(cc_); }

  // Loads the bytes and calls `int symbol(void)`.
  int CallIntFn(const void *so, size_t size, const char *symbol, const char *dir = nullptr) {
    kcpu_cc_module *m = nullptr;
    EXPECT_EQ(cc_test_load(cc_, dir, symbol, so, size, &m), KILN_OK) << kiln_last_error();
    if (!m) return -1;
    void *fn = nullptr;
    EXPECT_EQ(cc_test_symbol(m, symbol, &fn), KILN_OK) << kiln_last_error();
    int v = fn ? reinterpret_cast<int (*)(void)>(fn)() : -1;
    cc_test_unload(m);
    return v;
  }

  kcpu_cc *cc_ = nullptr;
};

TEST_F(CcJitTest, KnowsWhoItIs) {
  std::string version = cc_test_version(cc_);
  EXPECT_FALSE(version.empty());
  EXPECT_FALSE(Contains(version, "\n"));
  const char *env_cc = getenv("CC");
  std::string command = env_cc && *env_cc ? env_cc : "cc";
  EXPECT_EQ(version, FirstLine((command + " --version").c_str()));
  std::string triple = FirstLine((command + " -dumpmachine").c_str());
  EXPECT_TRUE(Contains(cc_test_target(cc_), triple + " -march=native cpu:")) << cc_test_target(cc_);
  EXPECT_STREQ(cc_test_flags(cc_),
               "-O3 -march=native -fPIC -shared -std=c11 -fno-math-errno -pipe");
}

TEST_F(CcJitTest, CompilesLoadsAndCalls) {
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc_, "add", kAddSource, nullptr, 0, &so, &size), KILN_OK)
      << kiln_last_error();
  ASSERT_GT(size, 4u);
  EXPECT_EQ(memcmp(so, "\x7f" "ELF", 4), 0);
  kcpu_cc_module *m = nullptr;
  ASSERT_EQ(cc_test_load(cc_, nullptr, "add", so, size, &m), KILN_OK) << kiln_last_error();
  void *add = nullptr, *scale = nullptr;
  ASSERT_EQ(cc_test_symbol(m, "kiln_add", &add), KILN_OK) << kiln_last_error();
  ASSERT_EQ(cc_test_symbol(m, "kiln_scale", &scale), KILN_OK) << kiln_last_error();
  EXPECT_EQ(reinterpret_cast<int (*)(int, int)>(add)(2, 40), 42);
  EXPECT_EQ(reinterpret_cast<double (*)(double)>(scale)(4.0), 10.0);

  void *missing = &m;
  EXPECT_EQ(cc_test_symbol(m, "kiln_sub", &missing), KILN_ERR_ARGUMENT);
  EXPECT_EQ(missing, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_symbol: kernel module add has no symbol "
                                          "'kiln_sub'"))
      << kiln_last_error();

  // A second load of the same bytes is a separate object with its own state.
  kcpu_cc_module *m2 = nullptr;
  ASSERT_EQ(cc_test_load(cc_, nullptr, "add", so, size, &m2), KILN_OK) << kiln_last_error();
  void *add2 = nullptr;
  ASSERT_EQ(cc_test_symbol(m2, "kiln_add", &add2), KILN_OK);
  EXPECT_NE(add2, add);
  cc_test_unload(m2);
  cc_test_unload(m);
  free(so);
}

TEST_F(CcJitTest, OptionsReachTheCompilerAndTheKey) {
  const char *src = "int value(void) { return VALUE; }\n";
  const char *o42[] = {"-DVALUE=42"}, *o43[] = {"-DVALUE=43"};
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc_, "value", src, o42, 1, &so, &size), KILN_OK) << kiln_last_error();
  EXPECT_EQ(CallIntFn(so, size, "value"), 42);
  free(so);

  uint8_t k42[16], k43[16], k42b[16], k_none[16];
  ASSERT_EQ(cc_test_key(cc_, src, o42, 1, k42), KILN_OK);
  ASSERT_EQ(cc_test_key(cc_, src, o43, 1, k43), KILN_OK);
  ASSERT_EQ(cc_test_key(cc_, src, o42, 1, k42b), KILN_OK);
  ASSERT_EQ(cc_test_key(cc_, src, nullptr, 0, k_none), KILN_OK);
  EXPECT_EQ(memcmp(k42, k42b, 16), 0);
  EXPECT_NE(memcmp(k42, k43, 16), 0);
  EXPECT_NE(memcmp(k42, k_none, 16), 0);
}

// The link's flags (no C runtime files; libm and libmvec named, or global in
// the process) change what the object is, so they are part of the key as
// the compile flags are.
TEST_F(CcJitTest, KeyHoldsTheCompileAndLinkFlags) {
  const char *src = "int value(void) { return 7; }\n";
  const char *flags[32];
  int n = cc_test_key_flags(cc_, flags, 32);
  int compile = 0;  // the base flags end with -pipe
  while (compile < n && strcmp(flags[compile], "-pipe") != 0) compile++;
  ASSERT_LT(compile + 1, n);
  EXPECT_STREQ(flags[compile + 1], "-nostdlib");
  EXPECT_STREQ(flags[n - 1], "-lgcc");
  uint8_t key[16], all[16], compile_only[16];
  ASSERT_EQ(cc_test_key(cc_, src, nullptr, 0, key), KILN_OK) << kiln_last_error();
  kcache_test_key(src, cc_test_target(cc_), cc_test_version(cc_), flags, n, all);
  kcache_test_key(src, cc_test_target(cc_), cc_test_version(cc_), flags, compile + 1,
                  compile_only);
  EXPECT_EQ(memcmp(key, all, 16), 0);
  EXPECT_NE(memcmp(key, compile_only, 16), 0);
  void *so = nullptr;  // and the object links and loads without the C runtime's files
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc_, "value", src, nullptr, 0, &so, &size), KILN_OK) << kiln_last_error();
  EXPECT_EQ(CallIntFn(so, size, "value"), 7);
  free(so);
}

TEST_F(CcJitTest, SyntaxErrorIsACompileErrorWithLogAndSource) {
  const char *src = "int broken(void) {\n  return 1 +;\n}\n";
  void *so = &so;
  size_t size = 7;
  ASSERT_EQ(cc_test_compile(cc_, "broken kernel", src, nullptr, 0, &so, &size), KILN_ERR_COMPILE);
  EXPECT_EQ(so, nullptr);
  EXPECT_EQ(size, 0u);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kcpu_cc_compile: broken kernel: ")) << msg;
  EXPECT_TRUE(Contains(msg, "exited with status 1 compiling ")) << msg;
  EXPECT_TRUE(Contains(msg, "error")) << msg;
  std::string path = SourcePathIn(msg);
  ASSERT_FALSE(path.empty()) << msg;
  EXPECT_TRUE(Contains(msg, path + ":2:")) << msg;  // the compiler's own line reference
  EXPECT_EQ(fs::path(path).filename(), "broken_kernel.c");
  EXPECT_EQ(ReadFile(path), src);  // kept for inspection
  std::string log = path.substr(0, path.size() - 2) + ".log";
  EXPECT_TRUE(Contains(ReadFile(log), "error")) << log;
  EXPECT_FALSE(fs::exists(path.substr(0, path.size() - 2) + ".so"));
  fs::remove_all(fs::path(path).parent_path());
}

TEST_F(CcJitTest, LongLogIsCutAndSavedWhole) {
  std::string src;
  for (int i = 0; i < 200; i++)
    src += "int f" + std::to_string(i) + "(void) { return x" + std::to_string(i) + "; }\n";
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc_, "noisy", src.c_str(), nullptr, 0, &so, &size), KILN_ERR_COMPILE);
  std::string msg = kiln_last_error();
  std::string path = SourcePathIn(msg);
  ASSERT_FALSE(path.empty()) << msg;
  std::string log_path = path.substr(0, path.size() - 2) + ".log";
  EXPECT_TRUE(Contains(msg, "[... the log goes on: " + log_path + "]")) << msg;
  EXPECT_LT(msg.size(), 4000u);
  EXPECT_TRUE(Contains(msg, "x0")) << msg;  // the first error is shown
  std::string log = ReadFile(log_path);
  EXPECT_GT(log.size(), msg.size());
  EXPECT_TRUE(Contains(log, "x199"));
  fs::remove_all(fs::path(path).parent_path());
}

TEST(CcJitDump, DumpDirReceivesSourcesAndFailedLogs) {
  if (!cc_test_available()) GTEST_SKIP() << "no host C compiler";
  TempDir tmp;
  std::string dump = tmp / "dump";  // created on first use
  kcpu_cc *cc = nullptr;
  ASSERT_EQ(cc_test_new(dump.c_str(), KILN_LOG_WARN, &cc), KILN_OK) << kiln_last_error();
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc, "good", kAddSource, nullptr, 0, &so, &size), KILN_OK)
      << kiln_last_error();
  free(so);
  std::vector<std::string> names;
  for (const auto &e : fs::directory_iterator(dump)) names.push_back(e.path().filename());
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].rfind("good.", 0), 0u);
  EXPECT_EQ(names[0].size(), strlen("good.") + 16 + 2);
  EXPECT_EQ(ReadFile(dump + "/" + names[0]), kAddSource);

  ASSERT_EQ(cc_test_compile(cc, "bad", "int bad(void) { return y; }\n", nullptr, 0, &so, &size),
            KILN_ERR_COMPILE);
  std::string msg = kiln_last_error();
  std::string path = SourcePathIn(msg);
  EXPECT_EQ(fs::path(path).parent_path(), dump) << msg;
  EXPECT_TRUE(Contains(msg, path + ":1:24: error: ")) << msg;  // gcc and clang agree on this
  EXPECT_TRUE(Contains(msg, "undeclared")) << msg;
  EXPECT_TRUE(fs::exists(path.substr(0, path.size() - 2) + ".log"));
  cc_test_free(cc);
}

TEST_F(CcJitTest, CompileThroughTheCacheHitsTheSecondTime) {
  TempDir tmp;
  kcache *cache = nullptr;
  ASSERT_EQ(kcache_test_new(tmp.path().c_str(), KILN_LOG_WARN, &cache), KILN_OK);
  const char *src = "int seven(void) { return 7; }\n";
  const void *so1 = nullptr, *so2 = nullptr;
  size_t size1 = 0, size2 = 0;
  ASSERT_EQ(cc_test_compile_cached(cc_, cache, "seven", src, nullptr, 0, &so1, &size1), KILN_OK)
      << kiln_last_error();
  ASSERT_EQ(cc_test_compile_cached(cc_, cache, "seven", src, nullptr, 0, &so2, &size2), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(so1, so2);
  kcache_test_stats s;
  kcache_test_stats_get(cache, &s);
  EXPECT_EQ(s.builds, 1u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(CallIntFn(so1, size1, "seven", kcache_test_dir(cache)), 7);
  kcache_test_free(cache);

  // After a restart the shared object comes from disk, and loads.
  ASSERT_EQ(kcache_test_new(tmp.path().c_str(), KILN_LOG_WARN, &cache), KILN_OK);
  kcpu_cc_module *m = nullptr;
  ASSERT_EQ(cc_test_jit(cc_, cache, "seven", src, nullptr, 0, &m), KILN_OK) << kiln_last_error();
  kcache_test_stats_get(cache, &s);
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.builds, 0u);
  void *fn = nullptr;
  ASSERT_EQ(cc_test_symbol(m, "seven", &fn), KILN_OK);
  EXPECT_EQ(reinterpret_cast<int (*)(void)>(fn)(), 7);
  cc_test_unload(m);
  kcache_test_free(cache);
  size_t entries = 0;
  for (const auto &e : fs::directory_iterator(tmp.path()))
    entries += e.path().extension() == ".kiln";
  EXPECT_EQ(entries, 1u);  // loading left no shared object behind
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
}

TEST_F(CcJitTest, ThreadsCompileDifferentKernelsAtOnce) {
  const int n = 3;
  std::vector<int> got(n, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++)
    threads.emplace_back([&, i] {
      std::string src = "int k(void) { return " + std::to_string(100 + i) + "; }\n";
      void *so = nullptr;
      size_t size = 0;
      if (cc_test_compile(cc_, "k", src.c_str(), nullptr, 0, &so, &size) != KILN_OK) return;
      got[i] = CallIntFn(so, size, "k");
      free(so);
    });
  for (auto &t : threads) t.join();
  for (int i = 0; i < n; i++) EXPECT_EQ(got[i], 100 + i);
}

TEST(CcJitCompiler, CcMayCarryArguments) {
  if (!cc_test_available()) GTEST_SKIP() << "no host C compiler";
  const char *env_cc = getenv("CC");
  std::string command = std::string(env_cc && *env_cc ? env_cc : "cc") + "  -DEXTRA=5\t-DMORE=6";
  ScopedEnv cc_env("CC", command.c_str());
  kcpu_cc *cc = nullptr;
  ASSERT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, &cc), KILN_OK) << kiln_last_error();
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc, "extra", "int extra(void) { return EXTRA * MORE; }\n", nullptr, 0,
                            &so, &size),
            KILN_OK)
      << kiln_last_error();
  kcpu_cc_module *m = nullptr;
  ASSERT_EQ(cc_test_load(cc, nullptr, "extra", so, size, &m), KILN_OK) << kiln_last_error();
  void *fn = nullptr;
  ASSERT_EQ(cc_test_symbol(m, "extra", &fn), KILN_OK);
  EXPECT_EQ(reinterpret_cast<int (*)(void)>(fn)(), 30);
  cc_test_unload(m);
  free(so);
  cc_test_free(cc);
}

TEST(CcJitCompiler, NoCompilerIsACompileError) {
  {
    ScopedEnv cc_env("CC", "/nonexistent/kiln-cc -O2");
    EXPECT_FALSE(cc_test_available());
    kcpu_cc *cc = reinterpret_cast<kcpu_cc *>(&cc_env);  // overwritten with NULL
    EXPECT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, &cc), KILN_ERR_COMPILE);
    EXPECT_EQ(cc, nullptr);
    EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_new: no host C compiler: "
                                            "$CC='/nonexistent/kiln-cc -O2' names no executable"))
        << kiln_last_error();
  }
  {
    ScopedEnv cc_env("CC", nullptr), path_env("PATH", "/nonexistent-kiln-dir");
    EXPECT_FALSE(cc_test_available());
    kcpu_cc *cc = nullptr;
    EXPECT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, &cc), KILN_ERR_COMPILE);
    EXPECT_TRUE(Contains(kiln_last_error(), "no host C compiler: `cc` is not on PATH"))
        << kiln_last_error();
  }
  {
    // A "compiler" that exists but fails when asked its version.
    ScopedEnv cc_env("CC", "false");
    kcpu_cc *cc = nullptr;
    EXPECT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, &cc), KILN_ERR_COMPILE);
    EXPECT_TRUE(Contains(kiln_last_error(), "--version` exited with status 1"))
        << kiln_last_error();
  }
}

TEST_F(CcJitTest, LoadErrorsNameThePathAndReason) {
  TempDir tmp;
  std::string missing = tmp / "missing";
  kcpu_cc_module *m = nullptr;
  const char junk[] = "not an ELF file";
  EXPECT_EQ(cc_test_load(cc_, missing.c_str(), "k", junk, sizeof junk, &m), KILN_ERR_IO);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kcpu_cc_load: " + missing + "/k.kiln.tmp-")) << msg;
  EXPECT_TRUE(Contains(msg, "mkostemp failed: No such file or directory")) << msg;
  EXPECT_TRUE(Contains(msg, "No such file or directory")) << msg;

  EXPECT_EQ(cc_test_load(cc_, tmp.path().c_str(), "k", junk, sizeof junk, &m), KILN_ERR_IO);
  msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kcpu_cc_load: dlopen failed: " + tmp.path() + "/k.kiln.tmp-")) << msg;
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 0);
}

TEST_F(CcJitTest, BadArgumentsNameTheCall) {
  void *so = nullptr;
  size_t size = 0;
  EXPECT_EQ(cc_test_compile(cc_, "k", nullptr, nullptr, 0, &so, &size), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_compile")) << kiln_last_error();
  EXPECT_EQ(cc_test_compile(cc_, "k", "int x;", nullptr, 2, &so, &size), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_compile: 2 options")) << kiln_last_error();
  const char *null_option[] = {"-O2", nullptr};
  EXPECT_EQ(cc_test_compile(cc_, "k", "int x;", null_option, 2, &so, &size), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_compile: option 1 is NULL"))
      << kiln_last_error();
  kcache *cache = nullptr;
  ASSERT_EQ(kcache_test_new(nullptr, KILN_LOG_WARN, &cache), KILN_OK);
  const void *cso = nullptr;
  EXPECT_EQ(cc_test_compile_cached(cc_, cache, "k", "int x;", nullptr, -1, &cso, &size),
            KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_compile_cached: k: kcpu_cc_key: -1 options"))
      << kiln_last_error();
  EXPECT_EQ(cc_test_compile_cached(cc_, nullptr, "k", "int x;", nullptr, 0, &cso, &size),
            KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_compile_cached")) << kiln_last_error();
  kcache_test_free(cache);
  EXPECT_EQ(cc_test_new(nullptr, KILN_LOG_WARN, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_new")) << kiln_last_error();
  kcpu_cc_module *m = nullptr;
  EXPECT_EQ(cc_test_load(cc_, nullptr, "k", nullptr, 0, &m), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_load")) << kiln_last_error();
  EXPECT_EQ(cc_test_jit(cc_, nullptr, "k", "int x;", nullptr, 0, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_jit")) << kiln_last_error();
  void *fn = nullptr;
  EXPECT_EQ(cc_test_symbol(nullptr, "k", &fn), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_symbol")) << kiln_last_error();
  uint8_t key[16];
  EXPECT_EQ(cc_test_key(cc_, nullptr, nullptr, 0, key), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcpu_cc_key")) << kiln_last_error();
}

}  // namespace

// A host kernel's prelude declares libm itself instead of including
// <math.h> (kernels/prelude.h); kernels/host.h must still see glibc and
// declare the vector forms, or every exp loop silently runs one scalar call
// per element: the compiled object must import a libmvec symbol (_ZGV...).
TEST_F(CcJitTest, HostKernelLoopsCallTheVectorForms) {
#if defined(__GLIBC__) && defined(__x86_64__)
  if (Contains(cc_test_version(cc_), "clang"))
    GTEST_SKIP() << "the simd declarations are for GCC: " << cc_test_version(cc_);
  std::string src = KCG_HOST_KERNEL_MARK;
  src += kcg_embedded_source("prelude.h");
  src += kcg_embedded_source("special.h");
  src += kcg_embedded_source("host.h");
  src += "void kiln_exp_all(const float *restrict x, float *restrict y, int64_t n) {\n"
         "  for (int64_t i = 0; i < n; ++i) y[i] = expf(x[i]);\n}\n";
  void *so = nullptr;
  size_t size = 0;
  ASSERT_EQ(cc_test_compile(cc_, "exp_all", src.c_str(), nullptr, 0, &so, &size), KILN_OK)
      << kiln_last_error();
  std::string bytes(static_cast<const char *>(so), size);
  free(so);
  EXPECT_TRUE(Contains(bytes, "_ZGV") && Contains(bytes, "_expf"))
      << "the exp loop calls no vector form of expf";
#else
  GTEST_SKIP() << "libmvec is glibc's, declared on x86-64 only";
#endif
}
