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
kiln_status kct_blaslt_create(void); /* the real cuBLASLt's cublasLtCreate + Destroy */
kiln_status kct_nccl_version(int *version);
kiln_status kct_nccl_comm_count_null(void); /* ncclCommCount(NULL, ...) */

/* kcuda_driver_load on `library`, then unload. */
kiln_status kct_driver_load(const char *library);

/* Opens NVRTC from `library` into a table of its own (not the process's);
 * *major is its version's major. */
kiln_status kct_nvrtc_open(const char *library, int *major);
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

/* ---- cuBLASLt (blaslt.c) ---- */
typedef struct kir_program kir_program;
typedef struct kfuse_group kfuse_group;
typedef struct kct_blaslt kct_blaslt;
/* kcuda_blaslt_open_library(library), or kcuda_blaslt_open() for NULL. */
kiln_status kct_blaslt_open(const char *library, kct_blaslt **out);
void kct_blaslt_close(kct_blaslt *lt);
size_t kct_blaslt_version(const kct_blaslt *lt);

/* kcuda_gemm_plan's answer, flattened. compute: 0 32F, 1 32F_FAST_TF32, 2 64F. */
typedef struct kct_gemm_info {
  int64_t batch, m, n, k;
  bool a_trans, b_trans;
  int64_t lda, ldb, a_batch_stride, b_batch_stride;
  int compute;
  int epilogue; /* kfuse_epilogue */
} kct_gemm_info;
kiln_status kct_gemm_plan(const kir_program *p, const kfuse_group *g, kct_gemm_info *info);

/* One dot group run through cuBLASLt on a device: the host data of its
 * operands (bias NULL without an epilogue) and where its result goes. */
typedef struct kct_gemm_case {
  const void *lhs, *rhs, *bias;
  size_t lhs_bytes, rhs_bytes, bias_bytes;
  void *out;
  size_t out_bytes;
  bool tf32;             /* run with KCUDA_GEMM_COMPUTE_32F_TF32 */
  size_t c_offset;       /* hand C over this many bytes past its 256-byte aligned start */
  size_t c_bytes_short;  /* allocate C this many bytes too small */
} kct_gemm_case;
/* Plans g, makes a gemm stream on the device's compute stream, prepares,
 * uploads the operands into fresh device buffers (256-byte aligned), runs,
 * downloads C and frees everything. */
kiln_status kct_gemm_eval(kiln_device *dev, kct_blaslt *lt, const kir_program *p,
                          const kfuse_group *g, const kct_gemm_case *c);
/* Makes the context's CUDA backend use cuBLASLt from `library` (NULL: the
 * default list) instead of opening the default one on first use. Call right
 * after kiln_ctx_new: it is how tests on the stand-in driver use the
 * stand-in cuBLASLt (libcublas brings the real one into every process, so
 * the soname cannot select the stand-in). */
kiln_status kct_ctx_use_blaslt(kiln_ctx *ctx, const char *library);
/* kct_ctx_use_blaslt, then the device's lazy gemm stream
 * (kcuda_device_gemm), for the teardown to free; *same is whether a second
 * call returns the same stream. */
kiln_status kct_device_gemm_attach(kiln_device *dev, const char *library, bool *same);
/* ---- end of cuBLASLt ---- */

/* The fault trail of device `dev` (on the stand-in driver): marks the step
 * "first" (and its end, when `finish_first`), queues a copy into memory the
 * device does not have -- a fault when it runs -- then marks `after` more
 * steps behind it, synchronises the compute stream and returns what
 * kcuda_trail_blame makes of the failure (its message is the thread's). */
kiln_status kct_trail_fault(kiln_device *dev, bool finish_first, int after);

#ifdef __cplusplus
}

#include <stdlib.h>

#include <string>

/* A context on the CUDA backend with `executor` and `precision`; where the
 * test is built against the stand-ins, their cuBLASLt computes its DOT
 * groups. KILN_ERR_DEVICE: no usable GPU (the caller skips). */
inline kiln_status KctCudaContext(kiln_executor executor, kiln_matmul_precision precision,
                                  kiln_ctx **out) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CUDA;
  o.executor = executor;
  o.matmul_precision = precision;
  kiln_status st = kiln_ctx_new(&o, out);
#ifdef KILN_FAKE_CUBLASLT_LIBRARY
  if (!st && (st = kct_ctx_use_blaslt(*out, KILN_FAKE_CUBLASLT_LIBRARY))) {
    kiln_ctx_free(*out);
    *out = NULL;
  }
#endif
  return st;
}

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
