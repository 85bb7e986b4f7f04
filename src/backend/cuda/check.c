/* Translating the errors of the driver, NVRTC, cuBLAS and NCCL into kiln
 * statuses and messages. Only enumerators that exist since CUDA 12.0 are
 * named, so the file builds against every toolkit kiln accepts. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <stdio.h>
#include "backend/cuda/cuda_backend.h"

/* "<where>: " or nothing. */
static const char *kcuda_where_sep(const char *where) { return where && *where ? ": " : ""; }
static const char *kcuda_where(const char *where) { return where && *where ? where : ""; }

kiln_status kcuda_call_fail(kiln_status st, const char *where, const char *call,
                            const char *what) {
  return kcore_fail(st, "%s%s%s failed: %s", kcuda_where(where), kcuda_where_sep(where), call,
                    what);
}

kiln_status kcuda_driver_status(CUresult rc) {
  switch (rc) {
    case CUDA_SUCCESS:
      return KILN_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return KILN_ERR_OUT_OF_MEMORY;
    /* A module that does not load is a compilation problem. */
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_INVALID_SOURCE:
      return KILN_ERR_COMPILE;
    /* Handles and values come from kiln, never from the user: these are bugs. */
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
    case CUDA_ERROR_ILLEGAL_STATE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
      return KILN_ERR_INTERNAL;
    /* No device, no or a stub driver, a crashed kernel, ECC, MPS, ... */
    default:
      return KILN_ERR_DEVICE;
  }
}

char *kcuda_driver_describe(const kcuda_driver *drv, CUresult rc, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (drv && drv->cuGetErrorName && drv->cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = NULL;
  if (drv && drv->cuGetErrorString && drv->cuGetErrorString(rc, &text) != CUDA_SUCCESS) text = NULL;
  if (name && text)
    snprintf(buf, cap, "%s (%s)", name, text);
  else if (name)
    snprintf(buf, cap, "%s", name);
  else
    snprintf(buf, cap, "CUresult %d", (int)rc);
  return buf;
}

kiln_status kcuda_driver_fail(const kcuda_driver *drv, CUresult rc, const char *call,
                              const char *where) {
  char what[256];
  return kcore_fail(kcuda_driver_status(rc), "%s%s%s failed: %s", kcuda_where(where),
                    kcuda_where_sep(where), call,
                    kcuda_driver_describe(drv, rc, what, sizeof what));
}

kiln_status kcuda_nvrtc_status(nvrtcResult rc) {
  switch (rc) {
    case NVRTC_SUCCESS:
      return KILN_OK;
    case NVRTC_ERROR_OUT_OF_MEMORY:
      return KILN_ERR_OUT_OF_MEMORY;
    case NVRTC_ERROR_INVALID_INPUT:
    case NVRTC_ERROR_INVALID_PROGRAM:
    case NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION:
    case NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION:
    case NVRTC_ERROR_INTERNAL_ERROR:
      return KILN_ERR_INTERNAL;
    /* The source, an option or a name expression was rejected. */
    default:
      return KILN_ERR_COMPILE;
  }
}


kiln_status kcuda_cublas_status(cublasStatus_t rc) {
  switch (rc) {
    case CUBLAS_STATUS_SUCCESS:
      return KILN_OK;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return KILN_ERR_OUT_OF_MEMORY;
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return KILN_ERR_INTERNAL;
    /* A valid problem that this cuBLAS, on this GPU, has no algorithm for. */
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return KILN_ERR_UNIMPLEMENTED;
    /* Not initialised (no driver or device), wrong architecture, failed launch. */
    default:
      return KILN_ERR_DEVICE;
  }
}

/* cuBLAS and cuBLASLt share these statuses. kiln names them itself rather
 * than through libcublas, which it does not link (cuBLASLt is dlopen'ed). */
static const struct {
  cublasStatus_t rc;
  const char *name, *text;
} kcuda_cublas_errors[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "a resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid value was passed"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "the device lacks a required feature"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "access to GPU memory failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "a GPU program failed to run"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the operation is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "a license error"},
};

kiln_status kcuda_cublas_fail(cublasStatus_t rc, const char *call, const char *where) {
  const char *name = NULL, *text = "unknown status";
  for (size_t i = 0; i < sizeof kcuda_cublas_errors / sizeof kcuda_cublas_errors[0]; i++)
    if (kcuda_cublas_errors[i].rc == rc) {
      name = kcuda_cublas_errors[i].name;
      text = kcuda_cublas_errors[i].text;
    }
  char number[32];
  if (!name) {
    snprintf(number, sizeof number, "cublasStatus_t %d", (int)rc);
    name = number;
  }
  return kcore_fail(kcuda_cublas_status(rc), "%s%s%s failed: %s (%s)", kcuda_where(where),
                    kcuda_where_sep(where), call, name, text);
}

kiln_status kcuda_nccl_status(ncclResult_t rc) {
  return rc == ncclSuccess ? KILN_OK : KILN_ERR_COLLECTIVE;
}

/* NCCL's own words for a failure, from the NCCL already in the process
 * (RTLD_NOLOAD: an NCCL call failed, so it is loaded; kiln does not link it). */
typedef const char *(*kcuda_nccl_error_string_fn)(ncclResult_t);
typedef const char *(*kcuda_nccl_last_error_fn)(ncclComm_t);

kiln_status kcuda_nccl_fail(ncclResult_t rc, const char *call, const char *where) {
  const char *text = NULL, *detail = NULL;
  void *nccl = dlopen(KCUDA_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (nccl) {
    kcuda_nccl_error_string_fn error_string =
        (kcuda_nccl_error_string_fn)dlsym(nccl, "ncclGetErrorString");
    kcuda_nccl_last_error_fn last_error = (kcuda_nccl_last_error_fn)dlsym(nccl, "ncclGetLastError");
    if (error_string) text = error_string(rc);
    /* NCCL's thread-local detail, when it has one, says more than the code. */
    if (last_error) detail = last_error(NULL);
  }
  bool has_detail = detail && *detail;
  kiln_status st = kcore_fail(kcuda_nccl_status(rc), "%s%s%s failed: NCCL error %d%s%s%s%s",
                              kcuda_where(where), kcuda_where_sep(where), call, (int)rc,
                              text ? ": " : "", text ? text : "", has_detail ? ": " : "",
                              has_detail ? detail : "");
  if (nccl) dlclose(nccl);
  return st;
}
