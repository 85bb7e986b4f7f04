/* C shims over backend/cuda's internals for the C++ tests: the backend's door
 * includes runtime/runtime.h, which uses C11 atomics that C++ cannot read, so
 * the tests reach the internals through these plain-typed functions. */
#ifndef KILN_TESTS_CUDA_TEST_SUPPORT_H
#define KILN_TESTS_CUDA_TEST_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error translation (no GPU needed) ---- */
size_t kct_staging_bytes(void);
kiln_status kct_driver_status(int cu_result);
kiln_status kct_nvrtc_status(int nvrtc_result);
kiln_status kct_cublas_status(int cublas_status);
kiln_status kct_nccl_status(int nccl_result);
/* The translators with no driver table (names fall back to numbers). */
kiln_status kct_driver_fail(int cu_result, const char *call, const char *where);
kiln_status kct_nvrtc_fail(int nvrtc_result, const char *call, const char *where);
kiln_status kct_cublas_fail(int cublas_status, const char *call, const char *where);
kiln_status kct_nccl_fail(int nccl_result, const char *call, const char *where);

/* Runs KCUDA_CU over a fake driver table whose cuInit returns `cu_result` and
 * whose error functions name it, the way the real driver would. Sets
 * *reached_cleanup when the macro jumped to the cleanup label. */
kiln_status kct_driver_macro(int cu_result, const char *where, bool *reached_cleanup);

/* The other macros on real library calls. */
kiln_status kct_cublas_create(void); /* cublasCreate + cublasDestroy */
kiln_status kct_nccl_version(int *version);
kiln_status kct_nccl_comm_count_null(void); /* ncclCommCount(NULL, ...) */

/* kcuda_driver_load on `library`, then unload. */
kiln_status kct_driver_load(const char *library);

kiln_status kct_nvrtc_compile(const char *name, const char *source, const char *arch, bool cubin,
                              char **code, size_t *size);

/* ---- a device's operations (kiln_device is opaque in C++) ---- */
typedef struct kct_buffer kct_buffer;
kiln_status kct_buffer_new(kiln_device *dev, size_t nbytes, kct_buffer **out);
void kct_buffer_free(kiln_device *dev, kct_buffer *buf);
bool kct_buffer_has_ready(const kct_buffer *buf);
kiln_status kct_upload(kiln_device *dev, kct_buffer *dst, const void *src, size_t nbytes,
                       bool direct);
kiln_status kct_download(kiln_device *dev, const kct_buffer *src, void *dst, size_t nbytes,
                         bool direct);
kiln_status kct_wait(kiln_device *dev, const kct_buffer *buf);
kiln_status kct_copy(kiln_device *dst_dev, kct_buffer *dst, kiln_device *src_dev,
                     const kct_buffer *src, size_t nbytes);
kiln_status kct_order_after_ready(kiln_device *dev, const kct_buffer *buf);

/* An array of `elements` bytes (u8) allocated through the runtime, unfilled. */
kiln_status kct_array_alloc(kiln_device *dev, int64_t elements, kiln_array **out);
kiln_status kct_pool_usage(kiln_device *dev, uint64_t *reserved, uint64_t *used);
kiln_status kct_pool_trim(kiln_device *dev);

#ifdef __cplusplus
}

#include <stdlib.h>

#include <string>

/* Sets an environment variable for one scope, restoring the old value. */
class KctScopedEnv {
 public:
  KctScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    setenv(name, value, 1);
  }
  ~KctScopedEnv() {
    if (had_old_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  KctScopedEnv(const KctScopedEnv &) = delete;
  KctScopedEnv &operator=(const KctScopedEnv &) = delete;

 private:
  std::string name_, old_;
  bool had_old_ = false;
};
#endif
#endif
