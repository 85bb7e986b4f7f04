// Contexts and array leaves for the tests that build pytrees of arrays: a
// context on the CPU backend, and an array leaf of a device holding host
// bytes. Each fails the test, with kiln's message, where kiln refuses.
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

}  // namespace kiln_test

#endif  // KILN_TESTS_SUPPORT_ARRAYS_H
