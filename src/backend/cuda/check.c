/* Translating the errors of the driver, NVRTC, cuBLAS and NCCL into kiln
 * statuses and messages. Only enumerators that exist since CUDA 12.0 are
 * named, so the file builds against every toolkit kiln accepts. */
#include <stdio.h>
#include "backend/cuda/cuda_backend.h"

/* "<where>: " or nothing. */
static const char *kcuda_where_sep(const char *where) { return where && *where ? ": " : ""; }
static const char *kcuda_where(const char *where) { return where && *where ? where : ""; }

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

kiln_status kcuda_nvrtc_fail(nvrtcResult rc, const char *call, const char *where) {
  return kcore_fail(kcuda_nvrtc_status(rc), "%s%s%s failed: %s", kcuda_where(where),
                    kcuda_where_sep(where), call, nvrtcGetErrorString(rc));
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

kiln_status kcuda_cublas_fail(cublasStatus_t rc, const char *call, const char *where) {
  return kcore_fail(kcuda_cublas_status(rc), "%s%s%s failed: %s (%s)", kcuda_where(where),
                    kcuda_where_sep(where), call, cublasGetStatusName(rc),
                    cublasGetStatusString(rc));
}

kiln_status kcuda_nccl_status(ncclResult_t rc) {
  return rc == ncclSuccess ? KILN_OK : KILN_ERR_COLLECTIVE;
}

kiln_status kcuda_nccl_fail(ncclResult_t rc, const char *call, const char *where) {
  /* NCCL's thread-local detail, when it has one, says more than the code. */
  const char *detail = ncclGetLastError(NULL);
  bool has_detail = detail && *detail;
  return kcore_fail(kcuda_nccl_status(rc), "%s%s%s failed: NCCL error %d: %s%s%s",
                    kcuda_where(where), kcuda_where_sep(where), call, (int)rc,
                    ncclGetErrorString(rc), has_detail ? ": " : "", has_detail ? detail : "");
}
