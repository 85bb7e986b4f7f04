// The fixture of the checkpoint tests (test_data_checkpoint*.cc): a CPU
// context with two devices, a fresh directory per test, and small trees.
#ifndef KILN_TESTS_CHECKPOINT_FIXTURE_H
#define KILN_TESTS_CHECKPOINT_FIXTURE_H

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/arrays.h"

inline std::string read_bytes(const std::string &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string &p, const std::string &b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx = kiln_test::NewCpuContext(2);
    ASSERT_NE(ctx, nullptr);
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
    return kiln_test::ArrayLeaf(dev0, dt, shape, data,
                                static_cast<size_t>(n) * kiln_dtype_size(dt));
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
  std::vector<std::string> dir_entries() { return entries_of(dir); }
  static std::vector<std::string> entries_of(const std::string &where) {
    std::vector<std::string> out;
    DIR *d = opendir(where.c_str());
    while (dirent *e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    if (d) closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }

  kiln_ctx *ctx = nullptr;
  kiln_device *dev0 = nullptr, *dev1 = nullptr;
  std::string dir, path;
  std::vector<kiln_tree *> trees;
};

#endif
