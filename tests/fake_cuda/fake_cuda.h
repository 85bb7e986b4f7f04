// The stand-ins of tests/fake_cuda as the C++ tests use them.
#ifndef KILN_TESTS_FAKE_CUDA_H
#define KILN_TESTS_FAKE_CUDA_H

#include <dlfcn.h>
#include <gtest/gtest.h>

// A function exported by a loaded library (a path or a soname), or null.
template <typename F>
F KctFakeSymbol(const char *library, const char *name) {
  void *h = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return nullptr;
  F f = reinterpret_cast<F>(dlsym(h, name));
  dlclose(h);
  return f;
}

// What a stand-in still holds (its kiln_fake_*_live_objects), listed on
// stderr; -1 when that library is not loaded or is the real one.
inline int KctFakeLiveObjects(const char *library = "libcuda.so.1",
                              const char *symbol = "kiln_fake_cuda_live_objects") {
  auto live = KctFakeSymbol<int (*)(int)>(library, symbol);
  return live ? live(/*verbose=*/1) : -1;
}

#ifdef KILN_FAKE_CUDA_LIBRARY
// Loaded by path before any context, the stand-in's soname (libcuda.so.1)
// is what the backend's dlopen finds in this process.
class KctFakeDriver : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_NE(dlopen(KILN_FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL), nullptr) << dlerror();
  }
};
#define KCT_USE_FAKE_DRIVER()                                        \
  const ::testing::Environment *const kct_fake_driver_environment = \
      ::testing::AddGlobalTestEnvironment(new KctFakeDriver)
#endif

#endif
