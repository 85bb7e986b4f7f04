// Checkpoints: pytrees of arrays as safetensors files (src/data).
#include <zlib.h>

#include <cmath>

#include "checkpoint_fixture.h"

namespace {

TEST_F(Checkpoint, RoundTripOntoTheGivenDevice) {
  kiln_tree *state = train_state(1.25f);
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), state), KILN_OK) << kiln_last_error();
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev1, &back), KILN_OK)
      << kiln_last_error();
  keep(back);
  char a[512], b[512];
  kiln_tree_str(state, a, sizeof a);
  kiln_tree_str(back, b, sizeof b);
  kiln_treedef *da = nullptr, *db = nullptr;
  ASSERT_EQ(kiln_tree_flatten(state, nullptr, nullptr, nullptr, nullptr, &da), KILN_OK);
  ASSERT_EQ(kiln_tree_flatten(back, nullptr, nullptr, nullptr, nullptr, &db), KILN_OK);
  EXPECT_TRUE(kiln_treedef_equal(da, db));
  kiln_treedef_free(da);
  kiln_treedef_free(db);
  expect_same_values(state, back);
  EXPECT_EQ(kiln_array_device(kiln_tree_leaf_array(kiln_tree_get(back, "step"))), dev1);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"state.safetensors"});
}

// A tree without leaves is a file of metadata only, which restores.
TEST_F(Checkpoint, EmptyTreeRoundTrips) {
  kiln_tree *empty = keep(dict({}, {}));
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), empty), KILN_OK) << kiln_last_error();
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), empty, dev0, &back), KILN_OK) << kiln_last_error();
  keep(back);
  EXPECT_EQ(kiln_tree_num_children(back), 0u);
}

TEST_F(Checkpoint, HeaderFollowsTheSafetensorsFormat) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK) << kiln_last_error();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);  // data 8-byte aligned
  // 8 + u32[2] + f32[2,3] + bf16[3] + f32[2,3] + i32[] bytes
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 24 + 6 + 24 + 4);
  std::string h = bytes.substr(8, n);
  EXPECT_EQ(h.rfind("{\"['key']\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[0,8]},", 0), 0u)
      << h;
  EXPECT_NE(h.find("\"['opt'][0]['mu']\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]}"),
            std::string::npos) << h;
  EXPECT_NE(h.find("\"['params']['b']\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[32,38]}"),
            std::string::npos) << h;
  EXPECT_NE(h.find("\"['step']\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[62,66]}"),
            std::string::npos) << h;
  EXPECT_NE(h.find("\"__metadata__\":{\"format\":\"kiln\",\"treedef\":\""), std::string::npos) << h;
}

// A save that fails after writing part of the file (a donated array, read
// last) leaves the previous checkpoint as it was and no temporary file.
TEST_F(Checkpoint, FailedWriteKeepsThePreviousCheckpoint) {
  kiln_tree *old_state = train_state(3);
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), old_state), KILN_OK) << kiln_last_error();
  kiln_tree *next = train_state(4);
  ASSERT_EQ(kiln_array_delete(kiln_tree_leaf_array(kiln_tree_get(next, "step"))), KILN_OK);
  EXPECT_EQ(kiln_checkpoint_save(path.c_str(), next), KILN_ERR_DELETED);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"state.safetensors"});
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &back), KILN_OK)
      << kiln_last_error();
  keep(back);
  expect_same_values(old_state, back);
  // An unwritable destination fails cleanly too.
  std::string bad = dir + "/missing/state.safetensors";
  EXPECT_EQ(kiln_checkpoint_save(bad.c_str(), old_state), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("missing/state.safetensors.tmp."), std::string::npos)
      << kiln_last_error();
}

TEST_F(Checkpoint, RestoreNamesTheFirstMismatchByKeyPath) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK) << kiln_last_error();
  kiln_tree *out = nullptr;
  float w[6] = {0};
  uint16_t b[3] = {0};
  int32_t step = 0;
  uint32_t key[2] = {0, 0};
  auto expect = [&](kiln_tree *params, kiln_status code, const char *what) {
    kiln_tree *mu = dict({"mu"}, {arr(KILN_F32, {2, 3}, w)});
    kiln_tree *t = keep(dict({"key", "opt", "params", "step"},
                             {arr(KILN_U32, {2}, key), kiln_tree_list(1, &mu), params,
                              arr(KILN_I32, {}, &step)}));
    EXPECT_EQ(kiln_checkpoint_restore(path.c_str(), t, dev0, &out), code);
    EXPECT_NE(std::string(kiln_last_error()).find(what), std::string::npos) << kiln_last_error();
    EXPECT_EQ(out, nullptr);
  };
  expect(dict({"b", "w"}, {arr(KILN_BF16, {3}, b), arr(KILN_F32, {3, 2}, w)}), KILN_ERR_TREE,
         "['params']['w'] is f32[2,3] in the checkpoint, the expected tree has f32[3,2]");
  expect(dict({"b", "w"}, {arr(KILN_F16, {3}, b), arr(KILN_F32, {2, 3}, w)}), KILN_ERR_TREE,
         "['params']['b'] is bf16[3] in the checkpoint, the expected tree has f16[3]");
  expect(dict({"b", "v", "w"}, {arr(KILN_BF16, {3}, b), arr(KILN_F32, {1}, w),
                                arr(KILN_F32, {2, 3}, w)}),
         KILN_ERR_TREE, "has no tensor ['params']['v'] (expected f32[1])");
  expect(dict({"w"}, {arr(KILN_F32, {2, 3}, w)}), KILN_ERR_TREE,
         "tensor ['params']['b'] is not in the expected tree");
}

TEST_F(Checkpoint, MalformedFilesAreIoErrors) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  kiln_tree *out = nullptr;
  std::string p = dir + "/bad.safetensors";
  std::ofstream(p, std::ios::binary).write(bytes.data(), 100);  // header cut short
  EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("does not fit"), std::string::npos)
      << kiln_last_error();
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 3));
  EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("data section"), std::string::npos)
      << kiln_last_error();
  std::string broken = bytes;
  broken[9] = '[';  // the JSON object's first key no longer a string
  std::ofstream(p, std::ios::binary).write(broken.data(), static_cast<std::streamsize>(broken.size()));
  EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("bad safetensors header"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(out, nullptr);
}

// Files Python's safetensors wrote (tests/golden/checkpoint.py).
TEST_F(Checkpoint, RestoresAFilePythonSafetensorsWrote) {
  float w[6];
  for (int i = 0; i < 6; i++) w[i] = static_cast<float>(i) * 0.25f - 1;
  int64_t b[3] = {-3, 0, int64_t(1) << 40};
  double mu[2] = {1e-300, -2.5};
  int32_t step = 7;
  uint32_t key[2] = {0, 42};
  kiln_tree *mu_d = dict({"mu"}, {arr(KILN_F64, {2}, mu)});
  kiln_tree *want = keep(dict({"key", "opt", "params", "step"},
                              {arr(KILN_U32, {2}, key), kiln_tree_list(1, &mu_d),
                               dict({"b", "w"}, {arr(KILN_I64, {3}, b), arr(KILN_F32, {2, 3}, w)}),
                               arr(KILN_I32, {}, &step)}));
  // Without checksums (loaded unchecked), and with the ones Python's
  // zlib.crc32 computed (checked).
  for (const char *name : {"checkpoint_py.safetensors", "checkpoint_py_crc.safetensors"}) {
    kiln_tree *back = nullptr;
    std::string golden = std::string(KILN_GOLDEN_DIR) + "/" + name;
    ASSERT_EQ(kiln_checkpoint_restore(golden.c_str(), want, dev0, &back), KILN_OK)
        << kiln_last_error();
    keep(back);
    expect_same_values(want, back);
  }
  // Python put ['params']['b'] first in the data section: flip its last bit.
  std::string bytes = read_bytes(std::string(KILN_GOLDEN_DIR) + "/checkpoint_py_crc.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  bytes[8 + n + 23] = static_cast<char>(bytes[8 + n + 23] ^ 0x80);
  std::string p = dir + "/py_flipped.safetensors";
  write_bytes(p, bytes);
  kiln_tree *back = nullptr;
  EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), want, dev0, &back), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("tensor ['params']['b'] is corrupt"),
            std::string::npos) << kiln_last_error();
}

// The other way: Python's safetensors (load_file) reads kiln's file with
// equal values, the user's metadata, and a checksum per tensor that Python's
// zlib.crc32 of its bytes reproduces.
TEST_F(Checkpoint, PythonSafetensorsLoadsKilnsFile) {
  if (system("python3 -c 'import safetensors, numpy, ml_dtypes' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with safetensors, numpy and ml_dtypes is not available";
  kiln_tree *state = train_state(2.5f);
  const char *keys[] = {"run"}, *values[] = {"lr=0.1 \xc3\xa9"};
  kiln_checkpoint_options o;
  kiln_checkpoint_options_init(&o);
  o.n_metadata = 1;
  o.metadata_keys = keys;
  o.metadata_values = values;
  ASSERT_EQ(kiln_checkpoint_save_with(path.c_str(), state, &o), KILN_OK) << kiln_last_error();
  // Each tensor as "name dtype shape hex-bytes", sorted by name.
  std::string script =
      "import sys, zlib\n"
      "import ml_dtypes  # registers bfloat16 with numpy\n"
      "from safetensors import safe_open\n"
      "from safetensors.numpy import load_file\n"
      "tensors = load_file(sys.argv[1])\n"
      "with safe_open(sys.argv[1], 'np') as f:\n"
      "  meta = f.metadata()\n"
      "assert meta['format'] == 'kiln' and meta['run'] == 'lr=0.1 \\u00e9', meta\n"
      "assert sum(k.startswith('crc32:') for k in meta) == len(tensors), meta\n"
      "for k in sorted(tensors):\n"
      "  t = tensors[k]\n"
      "  assert meta['crc32:' + k] == '%08x' % zlib.crc32(t.tobytes()), k\n"
      "  print(k, t.dtype, list(t.shape), t.tobytes().hex())\n";
  std::string sp = dir + "/check.py";
  std::ofstream(sp) << script;
  FILE *p = popen(("python3 '" + sp + "' '" + path + "' 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  auto hex = [](const std::vector<char> &v) {
    std::string s;
    char h[3];
    for (char c : v) snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(c)), s += h;
    return s;
  };
  const kiln_tree *params = kiln_tree_get(state, "params");
  std::string want =
      "['key'] uint32 [2] " + hex(host(kiln_tree_get(state, "key"))) + "\n" +
      "['opt'][0]['mu'] float32 [2, 3] " +
      hex(host(kiln_tree_get(kiln_tree_child(kiln_tree_get(state, "opt"), 0), "mu"))) + "\n" +
      "['params']['b'] bfloat16 [3] " + hex(host(kiln_tree_get(params, "b"))) + "\n" +
      "['params']['w'] float32 [2, 3] " + hex(host(kiln_tree_get(params, "w"))) + "\n" +
      "['step'] int32 [] " + hex(host(kiln_tree_get(state, "step"))) + "\n";
  EXPECT_EQ(out, want);
}

// ---- NaN and infinity ----

// One floating leaf of each width with a non-finite value at flat index 4:
// the save fails naming the key path and the index, and the previous file
// at path is untouched, with no temporary left; allow_nonfinite saves it.
TEST_F(Checkpoint, NonFiniteLeavesAreRefused) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK) << kiln_last_error();
  const std::string before = read_bytes(path);
  struct Case {
    kiln_dtype dt;
    uint64_t bits;  // the bad element's bit pattern
    const char *what;
  } cases[] = {{KILN_F32, 0x7FC00000u, "NaN"},          {KILN_F32, 0xFF800000u, "-inf"},
               {KILN_F64, 0x7FF0000000000000ull, "inf"}, {KILN_F16, 0x7E00, "NaN"},
               {KILN_F16, 0xFC00, "-inf"},               {KILN_BF16, 0x7F81, "NaN"}};
  for (const Case &c : cases) {
    size_t es = kiln_dtype_size(c.dt);
    std::vector<unsigned char> data(6 * es, 0);
    data[0] = 0x3c;  // other elements finite (0 and a small value)
    memcpy(&data[4 * es], &c.bits, es);
    int32_t zero = 0;
    kiln_tree *t = keep(dict({"a", "params"}, {arr(KILN_I32, {}, &zero),
                                               dict({"w"}, {arr(c.dt, {2, 3}, data.data())})}));
    EXPECT_EQ(kiln_checkpoint_save(path.c_str(), t), KILN_ERR_NONFINITE) << c.what;
    std::string msg = kiln_last_error();
    EXPECT_NE(msg.find("['params']['w']"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("holds ") + c.what + " at flat index 4"), std::string::npos) << msg;
    EXPECT_EQ(read_bytes(path), before) << c.what;
    EXPECT_EQ(dir_entries(), std::vector<std::string>{"state.safetensors"});
  }
  // Finite extremes pass: the largest f16, a bf16 subnormal, -0.
  uint16_t ok16[3] = {0x7BFF, 0x0001, 0x8000};
  EXPECT_EQ(kiln_checkpoint_save(path.c_str(), keep(arr(KILN_F16, {3}, ok16))), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(kiln_checkpoint_save(path.c_str(), keep(arr(KILN_BF16, {3}, ok16))), KILN_OK)
      << kiln_last_error();
  // allow_nonfinite: saved, and restored bit for bit.
  float w[6] = {1, 2, 3, 4, NAN, -INFINITY};
  kiln_tree *t = keep(dict({"w"}, {arr(KILN_F32, {2, 3}, w)}));
  kiln_checkpoint_options o;
  kiln_checkpoint_options_init(&o);
  o.allow_nonfinite = 1;
  ASSERT_EQ(kiln_checkpoint_save_with(path.c_str(), t, &o), KILN_OK) << kiln_last_error();
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), t, dev0, &back), KILN_OK) << kiln_last_error();
  keep(back);
  expect_same_values(t, back);
}

// ---- user metadata ----

TEST_F(Checkpoint, UserMetadataIsStoredAndReadBack) {
  const char *keys[] = {"flags", "note"};
  const char *values[] = {"--lr=0.1 --batch=32", "quote \" backslash \\ newline \n \xe2\x82\xac"};
  kiln_checkpoint_options o;
  kiln_checkpoint_options_init(&o);
  o.n_metadata = 2;
  o.metadata_keys = keys;
  o.metadata_values = values;
  ASSERT_EQ(kiln_checkpoint_save_with(path.c_str(), train_state(1), &o), KILN_OK)
      << kiln_last_error();
  for (int i = 0; i < 2; i++) {
    char *v = nullptr;
    ASSERT_EQ(kiln_checkpoint_read_metadata(path.c_str(), keys[i], &v), KILN_OK) << kiln_last_error();
    EXPECT_STREQ(v, values[i]);
    free(v);
  }
  char *v = nullptr;
  ASSERT_EQ(kiln_checkpoint_read_metadata(path.c_str(), "format", &v), KILN_OK);
  EXPECT_STREQ(v, "kiln");
  free(v);
  v = nullptr;
  EXPECT_EQ(kiln_checkpoint_read_metadata(path.c_str(), "missing", &v), KILN_ERR_NOT_FOUND);
  EXPECT_NE(std::string(kiln_last_error()).find("no __metadata__ key 'missing'"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(v, nullptr);
  std::string nofile = dir + "/none.safetensors";
  EXPECT_EQ(kiln_checkpoint_read_metadata(nofile.c_str(), "flags", &v), KILN_ERR_IO);
  // The checkpoint still restores (the user's keys are not checksums).
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &back), KILN_OK)
      << kiln_last_error();
  keep(back);
  // kiln's own keys, a duplicate, an empty key or bad UTF-8 are refused and
  // nothing is written.
  const std::string before = read_bytes(path);
  struct Bad {
    std::vector<const char *> k, v;
    const char *what;
  } bad[] = {{{"format"}, {"x"}, "'format' is kiln's own"},
             {{"treedef"}, {"x"}, "'treedef' is kiln's own"},
             {{"crc32:['step']"}, {"00000000"}, "is kiln's own"},
             {{"kiln.step"}, {"3"}, "is kiln's own"},
             {{"a", "a"}, {"1", "2"}, "'a' is given twice"},
             {{""}, {"x"}, "empty key"},
             {{"bad"}, {"\xff"}, "not valid UTF-8"}};
  for (const Bad &b : bad) {
    o.n_metadata = b.k.size();
    o.metadata_keys = b.k.data();
    o.metadata_values = b.v.data();
    EXPECT_EQ(kiln_checkpoint_save_with(path.c_str(), train_state(2), &o), KILN_ERR_ARGUMENT);
    EXPECT_NE(std::string(kiln_last_error()).find(b.what), std::string::npos) << kiln_last_error();
    EXPECT_EQ(read_bytes(path), before);
  }
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"state.safetensors"});
}

// ---- checksums ----

// The offsets [begin, end) of each tensor's bytes in the file, from its header.
std::vector<std::pair<std::string, std::pair<size_t, size_t>>> tensor_spans(const std::string &b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | static_cast<unsigned char>(b[static_cast<size_t>(i)]);
  std::string h = b.substr(8, n);
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> out;
  for (size_t at = h.find("\"data_offsets\":["); at != std::string::npos;
       at = h.find("\"data_offsets\":[", at + 1)) {
    size_t name_end = h.rfind("\":{\"dtype\"", at), name_start = h.rfind("\"['", name_end);
    unsigned long long lo = 0, hi = 0;
    sscanf(h.c_str() + at, "\"data_offsets\":[%llu,%llu]", &lo, &hi);
    out.push_back({h.substr(name_start + 1, name_end - name_start - 1),
                   {8 + n + lo, 8 + n + hi}});
  }
  return out;
}

// Each tensor's checksum is zlib's CRC-32 of its bytes; one flipped bit in
// any tensor is KILN_ERR_IO naming the tensor and the file.
TEST_F(Checkpoint, ChecksumsCatchAFlippedBit) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1.5f)), KILN_OK) << kiln_last_error();
  const std::string good = read_bytes(path);
  auto spans = tensor_spans(good);
  ASSERT_EQ(spans.size(), 5u);
  for (const auto &[name, span] : spans) {
    uLong crc = crc32(0, reinterpret_cast<const Bytef *>(good.data() + span.first),
                      static_cast<uInt>(span.second - span.first));
    char want[64];
    snprintf(want, sizeof want, "\"crc32:%s\":\"%08lx\"", name.c_str(), crc);
    EXPECT_NE(good.find(want), std::string::npos) << want;
    for (size_t byte : {span.first, span.second - 1}) {
      std::string bad = good;
      bad[byte] = static_cast<char>(bad[byte] ^ 0x10);
      std::string p = dir + "/flipped.safetensors";
      write_bytes(p, bad);
      kiln_tree *out = nullptr;
      EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
      std::string msg = kiln_last_error();
      EXPECT_NE(msg.find("'" + p + "': tensor " + name + " is corrupt"), std::string::npos) << msg;
      EXPECT_EQ(out, nullptr);
    }
  }
}

// Checksums are all or nothing, each names a tensor and is 8 hex digits; a
// file without any (Python's, kiln's before them) loads unchecked.
TEST_F(Checkpoint, ChecksumMetadataIsChecked) {
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK) << kiln_last_error();
  const std::string good = read_bytes(path);
  auto edit = [&](const std::string &from, const std::string &to) {
    std::string b = good;
    size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);
    write_bytes(path, b);
  };
  kiln_tree *out = nullptr;
  // Same length, so the header length and offsets stay right.
  edit("\"crc32:['step']\"", "\"crc32:['stap']\"");
  EXPECT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("checksum for ['stap'], which is not a tensor"),
            std::string::npos) << kiln_last_error();
  edit("\"crc32:['step']\"", "\"xxxxx:['step']\"");
  EXPECT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("tensor ['step'] has no checksum (4 of the 5"),
            std::string::npos) << kiln_last_error();
  size_t at = good.find("\"crc32:['step']\":\"") + strlen("\"crc32:['step']\":\"");
  edit(good.substr(at, 8), "ABCDEF01");
  EXPECT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("is not 8 lowercase hex digits"), std::string::npos)
      << kiln_last_error();
  // No checksum at all: every "crc32:" key renamed (same length).
  std::string b = good;
  for (size_t p = b.find("\"crc32:"); p != std::string::npos; p = b.find("\"crc32:", p))
    b.replace(p, 7, "\"other:");
  write_bytes(path, b);
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &out), KILN_OK)
      << kiln_last_error();
  keep(out);
}

// ---- layout: as strict as safetensors' reader ----

// A safetensors file from a header's text and `data` bytes of data; `len`
// overrides the header length field.
std::string st_bytes(const std::string &header, size_t data, uint64_t len = UINT64_MAX) {
  if (len == UINT64_MAX) len = header.size();
  std::string b;
  for (int i = 0; i < 8; i++) b.push_back(static_cast<char>(len >> (8 * i)));
  return b + header + std::string(data, '\x01');
}

std::string tensor(const char *name, const char *dtype, const char *shape, int begin, int end) {
  return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + shape +
         "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

struct LayoutCase {
  const char *name;
  std::string file;
  const char *error;  // nullptr: a valid file
  bool python_refuses;  // what Python's safetensors does with it
};

std::vector<LayoutCase> layout_cases() {
  // Named as kiln names the leaves of {'a': f32[2], 'b': i32[1]}.
  const std::string a = tensor("['a']", "F32", "2", 0, 8), b = tensor("['b']", "I32", "1", 8, 12);
  const std::string ab = "{" + a + "," + b + "}";
  return {
      {"valid", st_bytes(ab, 12), nullptr, false},
      {"valid_any_order", st_bytes("{" + b + "," + a + "}", 12), nullptr, false},
      {"valid_null_metadata", st_bytes("{\"__metadata__\":null," + a + "}", 8), nullptr, false},
      {"trailing_bytes", st_bytes(ab, 13), "1 trailing bytes after the last tensor's data", true},
      {"overlap", st_bytes("{" + a + "," + tensor("['b']", "I32", "1", 4, 8) + "}", 8),
       "tensor ['b']'s data_offsets [4, 8] overlap tensor ['a']'s [0, 8]", true},
      {"gap", st_bytes("{" + a + "," + tensor("['b']", "I32", "1", 12, 16) + "}", 16),
       "a gap of 4 bytes before tensor ['b']", true},
      {"late_start", st_bytes("{" + tensor("a", "F32", "2", 4, 12) + "}", 12),
       "a gap of 4 bytes before tensor a", true},
      {"wrong_size", st_bytes("{" + tensor("a", "F32", "2", 0, 12) + "}", 12),
       "tensor a is f32[2] (8 bytes) but its data_offsets [0, 12] hold 12", true},
      {"truncated", st_bytes(ab, 10), "the data section has 10 bytes, the tensors need 12", true},
      {"shape_overflow",
       st_bytes("{" + tensor("a", "F32", "4294967296,4294967296,4294967296", 0, 8) + "}", 8),
       "the byte count of its shape overflows", true},
      {"reversed_offsets", st_bytes("{" + tensor("a", "F32", "2", 8, 0) + "}", 8),
       "bad data_offsets", true},
      {"header_too_large", st_bytes(ab, 12, 100000001), "exceeds safetensors' limit", true},
      {"header_past_end", st_bytes(ab, 12, 1000), "header length 1000 does not fit", true},
      {"invalid_utf8", st_bytes("{" + tensor("\xff", "F32", "2", 0, 8) + "}", 8), "invalid UTF-8",
       true},
      {"lone_surrogate", st_bytes("{" + tensor("\\ud800", "F32", "2", 0, 8) + "}", 8),
       "lone surrogate", true},
      {"leading_zero", st_bytes("{" + tensor("a", "F32", "02", 0, 8) + "}", 8), "leading zero", true},
      {"fraction", st_bytes("{" + tensor("a", "F32", "2.0", 0, 8) + "}", 8), "expected an integer",
       true},
      {"negative", st_bytes("{" + tensor("a", "F32", "-2", 0, 8) + "}", 8), "expected an integer",
       true},
      {"metadata_not_string", st_bytes("{\"__metadata__\":{\"x\":1}," + a + "}", 8),
       "__metadata__ value is not a string", true},
      {"duplicate_field",
       st_bytes("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
       "duplicate field", true},
      {"bad_literal", st_bytes("{\"a\":{\"x\":nul,\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
       "bad safetensors header", true},
      {"trailing_characters", st_bytes(ab + " x", 12), "trailing characters", true},
      {"missing_offsets", st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
       "tensor 'a' lacks data_offsets", true},
      {"not_an_object", st_bytes("[]", 0), "expected an object", true},
      {"unknown_dtype", st_bytes("{" + tensor("a", "F8_E4M3", "8", 0, 8) + "}", 8),
       "has dtype 'F8_E4M3', which kiln does not have", true},
      {"control_character", st_bytes("{" + tensor("a\x01", "F32", "2", 0, 8) + "}", 8),
       "control character in a string", true},
      {"bad_escape", st_bytes("{" + tensor("a\\x", "F32", "2", 0, 8) + "}", 8),
       "bad escape in a string", true},
      // Stricter than the reference, which keeps the last of duplicate keys.
      {"duplicate_tensor", st_bytes("{" + a + "," + a + "}", 8), "tensor ['a'] appears twice",
       false},
  };
}

// Each damaged file is KILN_ERR_IO naming the file and what is wrong; the
// valid ones read (here: their metadata, which lacks the key asked for).
TEST_F(Checkpoint, LayoutIsCheckedAsSafetensorsDoes) {
  for (const LayoutCase &c : layout_cases()) {
    std::string p = dir + "/" + c.name + ".safetensors";
    write_bytes(p, c.file);
    char *v = nullptr;
    kiln_status s = kiln_checkpoint_read_metadata(p.c_str(), "k", &v);
    std::string msg = kiln_last_error();
    if (!c.error) {
      EXPECT_EQ(s, KILN_ERR_NOT_FOUND) << c.name << ": " << msg;
      continue;
    }
    EXPECT_EQ(s, KILN_ERR_IO) << c.name;
    EXPECT_NE(msg.find("'" + p + "'"), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.error), std::string::npos) << c.name << ": " << msg;
  }
  // Restore refuses them the same way.
  std::string p = dir + "/trailing_bytes.safetensors";
  float w[2] = {0, 0};
  int32_t i = 0;
  kiln_tree *out = nullptr;
  kiln_tree *want = keep(dict({"a", "b"}, {arr(KILN_F32, {2}, w), arr(KILN_I32, {1}, &i)}));
  EXPECT_EQ(kiln_checkpoint_restore(p.c_str(), want, dev0, &out), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find("trailing bytes"), std::string::npos);
  p = dir + "/valid_any_order.safetensors";
  ASSERT_EQ(kiln_checkpoint_restore(p.c_str(), want, dev0, &out), KILN_OK) << kiln_last_error();
  keep(out);
}

// The reference reader agrees on every case it has a rule for.
TEST_F(Checkpoint, LayoutVerdictsMatchPythonSafetensors) {
  if (system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with safetensors and numpy is not available";
  std::string args, want;
  for (const LayoutCase &c : layout_cases()) {
    std::string p = dir + "/" + c.name + ".safetensors";
    write_bytes(p, c.file);
    args += " '" + p + "'";
    want += std::string(c.name) + (c.python_refuses ? " refused\n" : " ok\n");
  }
  std::string sp = dir + "/verdicts.py";
  std::ofstream(sp) << "import os, sys\n"
                       "from safetensors.numpy import load_file\n"
                       "for p in sys.argv[1:]:\n"
                       "  try:\n"
                       "    load_file(p); v = 'ok'\n"
                       "  except Exception:\n"
                       "    v = 'refused'\n"
                       "  print(os.path.basename(p)[:-len('.safetensors')], v)\n";
  FILE *f = popen(("python3 '" + sp + "'" + args + " 2>&1").c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, f)) out += buf;
  ASSERT_EQ(pclose(f), 0) << out;
  EXPECT_EQ(out, want);
}

}  // namespace
