// The fixture of the tests built twice, on a GPU (label cuda) and against
// the stand-ins in fake_cuda/ (label cpu): one CUDA context, the test
// skipped where there is no GPU; on the stand-ins every driver object must
// be given back when the context is freed (unless check_leaks_ is cleared).
#ifndef KILN_TESTS_CUDA_FIXTURE_H
#define KILN_TESTS_CUDA_FIXTURE_H

#include <gtest/gtest.h>

#include <vector>

#include "support/arrays.h"
#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"

#ifdef KILN_FAKE_CUDA_LIBRARY
constexpr bool kFake = true;
#else
constexpr bool kFake = false;
#endif

// Kernels the stand-in has run and graphs it has launched (zeros on a GPU).
struct KctFakeCounts {
  unsigned long long kernels = 0, graphs = 0;
};
inline KctFakeCounts FakeCounts() {
  KctFakeCounts c;
  auto fn = KctFakeSymbol<void (*)(unsigned long long *, unsigned long long *)>(
      "libcuda.so.1", "kiln_fake_cuda_kernel_counts");
  if (fn) fn(&c.kernels, &c.graphs);
  return c;
}

// Work items the stand-in's kernels named with `part` have been launched
// over (0 on a GPU, where there is no such count).
inline unsigned long long FakeKernelItems(const char *part) {
  unsigned long long runs = 0, items = 0;
  auto fn = KctFakeSymbol<void (*)(const char *, unsigned long long *, unsigned long long *)>(
      "libcuda.so.1", "kiln_fake_cuda_kernel_work");
  if (fn) fn(part, &runs, &items);
  return items;
}

// An f32 array leaf on dev.
inline kiln_tree *InputOn(kiln_device *dev, std::vector<float> v, std::vector<int64_t> shape) {
  return kiln_test::ArrayLeaf(dev, KILN_F32, shape, v.data(), v.size() * sizeof(float));
}

class KctCudaFixture : public ::testing::Test {
 protected:
  void Open(kiln_executor executor = KILN_EXECUTOR_FUSED,
            kiln_matmul_precision precision = KILN_MATMUL_DEFAULT) {
    kiln_status st = KctCudaContext(executor, precision, &ctx_);
    if (st == KILN_ERR_DEVICE) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
  }
  void TearDown() override {
    if (!ctx_) return;
    kiln_ctx_free(ctx_);
    if (kFake && check_leaks_) {
      EXPECT_EQ(KctFakeLiveObjects(), 0);
    }
  }
  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
  bool check_leaks_ = true;
};

#endif
