// Shared by the tests of src/dist: splitting golden lines, and a context of
// KILN_NUM_CPU_DEVICES virtual CPU devices (8 when unset; CTest runs these
// tests with 8 and with 2). Built with KILN_FAKE_CUDA_LIBRARY, the context
// is instead as many CUDA devices of the stand-in driver (tests/fake_cuda).
#ifndef KILN_TESTS_DIST_TEST_SUPPORT_H
#define KILN_TESTS_DIST_TEST_SUPPORT_H

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/text.h"

namespace dist_test {

using kiln_test::Contains;

inline std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

inline std::vector<int64_t> Ints(const std::string &s, char sep = ',') {
  std::vector<int64_t> out;
  for (const std::string &x : Split(s, sep))
    if (!x.empty()) out.push_back(std::stoll(x));
  return out;
}

class CpuDevices : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = getenv("KILN_NUM_CPU_DEVICES") ? 0 : 8;
#ifdef KILN_FAKE_CUDA_LIBRARY
    // Loaded by path, its soname is what the backend's dlopen finds; the
    // device count is read once, at the first cuInit.
    static void *driver = dlopen(KILN_FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(driver, nullptr) << dlerror();
    const char *n = getenv("KILN_NUM_CPU_DEVICES");
    setenv("KILN_FAKE_CUDA_DEVICES", n ? n : "8", 1);
    opts.backend = KILN_BACKEND_CUDA;
#endif
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_ctx_backend(ctx_), opts.backend);
    n_ = kiln_device_count(ctx_);
  }

  std::string Name(int i) {
    kiln_device_info info;
    EXPECT_EQ(kiln_device_info_get(Dev(i), &info), KILN_OK);
    return info.name;
  }
  void TearDown() override { kiln_ctx_free(ctx_); }

  kiln_device *Dev(int i) {
    kiln_device *d = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, i, &d), KILN_OK) << kiln_last_error();
    return d;
  }

  kiln_mesh *Mesh(const std::vector<int64_t> &shape, const std::vector<const char *> &names,
                  kiln_device *const *devices = nullptr) {
    kiln_mesh *m = nullptr;
    EXPECT_EQ(kiln_mesh_new(ctx_, (int)shape.size(), shape.data(), names.data(), devices, &m),
              KILN_OK)
        << kiln_last_error();
    return m;
  }

  // A named sharding over mesh for a spec as kiln_pspec_parse reads it.
  kiln_sharding *Named(kiln_mesh *mesh, const char *spec_text) {
    kiln_pspec *spec = nullptr;
    kiln_sharding *s = nullptr;
    EXPECT_EQ(kiln_pspec_parse(spec_text, &spec), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_sharding_named(mesh, spec, &s), KILN_OK) << kiln_last_error();
    kiln_pspec_free(spec);
    return s;
  }

  std::vector<float> ToHost(const kiln_array *a) {
    std::vector<float> v((size_t)kiln_array_size(a));
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(float)), KILN_OK)
        << kiln_last_error();
    return v;
  }

  kiln_ctx *ctx_ = nullptr;
  int n_ = 0;
};

}  // namespace dist_test

#endif
