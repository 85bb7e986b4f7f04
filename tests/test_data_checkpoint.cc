// Checkpoints: pytrees of arrays as safetensors files (src/data).
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.num_cpu_devices = 2;
    ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_device_get(ctx, 0, &dev0), KILN_OK);
    ASSERT_EQ(kiln_device_get(ctx, 1, &dev1), KILN_OK);
    const char *t = getenv("TMPDIR");
    dir = std::string(t && *t ? t : "/tmp") + "/kiln_ckpt_" + std::to_string(getpid()) + "_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()), 0);
    path = dir + "/state.safetensors";
  }
  void TearDown() override {
    for (kiln_tree *t : trees) kiln_tree_free(t);
    kiln_ctx_free(ctx);
    if (system(("rm -rf '" + dir + "'").c_str()) != 0) ADD_FAILURE() << "cleanup";
  }

  kiln_tree *arr(kiln_dtype dt, std::vector<int64_t> shape, const void *data) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev0, dt, static_cast<int>(shape.size()), shape.data(), data,
                                   static_cast<size_t>(n) * kiln_dtype_size(dt), &a),
              KILN_OK)
        << kiln_last_error();
    kiln_tree *t = kiln_tree_array(a);
    kiln_array_release(a);
    return t;
  }
  static kiln_tree *dict(std::vector<const char *> keys, std::vector<kiln_tree *> kids) {
    return kiln_tree_dict(keys.size(), keys.data(), kids.data());
  }
  kiln_tree *keep(kiln_tree *t) {
    trees.push_back(t);
    return t;
  }

  // {'key': u32[2], 'opt': [{'mu': f32[2,3]}], 'params': {'b': bf16[3], 'w': f32[2,3]},
  //  'step': i32[]}, values shifted by `v`.
  kiln_tree *train_state(float v) {
    float w[6], mu[6];
    for (int i = 0; i < 6; i++) w[i] = v + static_cast<float>(i) * 0.5f, mu[i] = -w[i] / 3;
    uint16_t b[3] = {kiln_f32_to_bf16(v), kiln_f32_to_bf16(1.5f), kiln_f32_to_bf16(-2)};
    int32_t step = static_cast<int32_t>(v * 10);
    uint32_t key[2] = {0, 42};
    kiln_tree *mu_d = dict({"mu"}, {arr(KILN_F32, {2, 3}, mu)});
    kiln_tree *opt = kiln_tree_list(1, &mu_d);
    return keep(dict({"key", "opt", "params", "step"},
                     {arr(KILN_U32, {2}, key), opt,
                      dict({"b", "w"}, {arr(KILN_BF16, {3}, b), arr(KILN_F32, {2, 3}, w)}),
                      arr(KILN_I32, {}, &step)}));
  }

  static std::vector<char> host(const kiln_tree *leaf) {
    kiln_array *a = kiln_tree_leaf_array(leaf);
    std::vector<char> v(kiln_array_nbytes(a));
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size()), KILN_OK);
    return v;
  }
  static void expect_same_values(const kiln_tree *a, const kiln_tree *b) {
    kiln_leaf *la = nullptr, *lb = nullptr;
    size_t na = 0, nb = 0;
    ASSERT_EQ(kiln_tree_flatten(a, nullptr, nullptr, &la, &na, nullptr), KILN_OK);
    ASSERT_EQ(kiln_tree_flatten(b, nullptr, nullptr, &lb, &nb, nullptr), KILN_OK);
    ASSERT_EQ(na, nb);
    for (size_t i = 0; i < na; i++) {
      kiln_array *x = la[i].u.array, *y = lb[i].u.array;
      EXPECT_EQ(kiln_array_dtype(x), kiln_array_dtype(y));
      std::vector<char> vx(kiln_array_nbytes(x)), vy(kiln_array_nbytes(y));
      ASSERT_EQ(vx.size(), vy.size());
      ASSERT_EQ(kiln_array_to_host(x, vx.data(), vx.size()), KILN_OK);
      ASSERT_EQ(kiln_array_to_host(y, vy.data(), vy.size()), KILN_OK);
      EXPECT_EQ(vx, vy) << "leaf " << i;
    }
    kiln_leaves_free(la, na);
    kiln_leaves_free(lb, nb);
  }
  std::vector<std::string> dir_entries() {
    std::vector<std::string> out;
    DIR *d = opendir(dir.c_str());
    while (dirent *e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    if (d) closedir(d);
    return out;
  }

  kiln_ctx *ctx = nullptr;
  kiln_device *dev0 = nullptr, *dev1 = nullptr;
  std::string dir, path;
  std::vector<kiln_tree *> trees;
};

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

// A file Python's safetensors wrote (tests/golden/checkpoint.py).
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
  kiln_tree *back = nullptr;
  std::string golden = std::string(KILN_GOLDEN_DIR) + "/checkpoint_py.safetensors";
  ASSERT_EQ(kiln_checkpoint_restore(golden.c_str(), want, dev0, &back), KILN_OK) << kiln_last_error();
  keep(back);
  expect_same_values(want, back);
}

// The other way: Python's safetensors reads kiln's file with equal values.
TEST_F(Checkpoint, PythonSafetensorsLoadsKilnsFile) {
  if (system("python3 -c 'import safetensors, numpy, ml_dtypes' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with safetensors, numpy and ml_dtypes is not available";
  kiln_tree *state = train_state(2.5f);
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), state), KILN_OK) << kiln_last_error();
  // Each tensor as "name dtype shape : hex bytes", sorted by name.
  std::string script =
      "import sys\n"
      "import ml_dtypes  # registers bfloat16 with numpy\n"
      "from safetensors import safe_open\n"
      "with safe_open(sys.argv[1], 'np') as f:\n"
      "  assert f.metadata()['format'] == 'kiln'\n"
      "  for k in sorted(f.keys()):\n"
      "    t = f.get_tensor(k)\n"
      "    print(k, t.dtype, list(t.shape), t.tobytes().hex())\n";
  std::string sp = dir + "/check.py";
  std::ofstream(sp) << script;
  FILE *p = popen(("python3 '" + sp + "' '" + path + "'").c_str(), "r");
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

}  // namespace
