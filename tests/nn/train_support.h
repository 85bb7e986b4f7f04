// Shared by the training-library tests (test_optim.cc, test_nn.cc): golden
// records of float32 bit patterns, JAX's float32 tolerance, and a fixture
// with one CPU device that builds array leaves.
#ifndef KILN_TESTS_TRAIN_SUPPORT_H
#define KILN_TESTS_TRAIN_SUPPORT_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/arrays.h"

// "NAME : HEX HEX ..." lines of tests/golden/<file>, keyed by NAME, each hex
// the bits of a float32; '#' lines are comments.
inline std::map<std::string, std::vector<float>> load_hex_golden(const char *file) {
  std::map<std::string, std::vector<float>> out;
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(" : ");
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    std::istringstream ss(line.substr(colon + 3));
    std::string h;
    std::vector<float> v;
    while (ss >> h) {
      uint32_t bits = static_cast<uint32_t>(std::stoul(h, nullptr, 16));
      float f;
      std::memcpy(&f, &bits, 4);
      v.push_back(f);
    }
    out[line.substr(0, colon)] = v;
  }
  return out;
}

// JAX's float32 tolerance, relative, with an absolute floor for values near 0.
inline void expect_close(const std::vector<float> &got, const std::vector<float> &want,
                         const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-6 * std::fabs(want[i])) << what << " element " << i;
}

class CpuFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx = kiln_test::NewCpuContext(0);
    ASSERT_NE(ctx, nullptr);
    ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  }
  void TearDown() override { kiln_ctx_free(ctx); }

  kiln_tree *array(kiln_dtype dt, const void *v, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev, dt, static_cast<int>(shape.size()), shape.data(), v,
                                   static_cast<size_t>(n) * kiln_dtype_size(dt), &a),
              KILN_OK);
    kiln_tree *t = kiln_tree_array(a);
    kiln_array_release(a);
    return t;
  }

  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
};

#endif
