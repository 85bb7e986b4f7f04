// Contexts and arrays for the tests: a context on the CPU backend, an array
// leaf of a device holding host bytes, and a fixture on one CPU device. Each
// fails the test, with kiln's message, where kiln refuses.
#ifndef KILN_TESTS_SUPPORT_ARRAYS_H
#define KILN_TESTS_SUPPORT_ARRAYS_H

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kiln/kiln.h"

namespace kiln_test {

// A context on the CPU backend with n_devices virtual devices (0: kiln's
// default, KILN_NUM_CPU_DEVICES or 1).
inline kiln_ctx *NewCpuContext(int n_devices) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  if (n_devices > 0) o.num_cpu_devices = n_devices;
  kiln_ctx *ctx = nullptr;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  return ctx;
}

// A leaf holding a new array of dev: nbytes of host data, row-major.
inline kiln_tree *ArrayLeaf(kiln_device *dev, kiln_dtype dt, const std::vector<int64_t> &shape,
                            const void *data, size_t nbytes) {
  kiln_array *a = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, dt, (int)shape.size(), shape.data(), data, nbytes, &a),
            KILN_OK)
      << kiln_last_error();
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

// A test on one CPU device (ctx_, dev_), freed after it.
class CpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = NewCpuContext(1);
    ASSERT_NE(ctx_, nullptr);
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
  }
  void TearDown() override { kiln_ctx_free(ctx_); }

  // An f32 array of dev_ holding start, start + 1, ... in row-major order.
  kiln_array *Floats(std::vector<int64_t> shape, float start = 1.0f) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = start + static_cast<float>(i);
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev_, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * sizeof(float), &a),
              KILN_OK)
        << kiln_last_error();
    return a;
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
};

}  // namespace kiln_test

#endif  // KILN_TESTS_SUPPORT_ARRAYS_H
