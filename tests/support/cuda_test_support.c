/* C shims over backend/cuda's internals for the C++ tests. */
#include "cuda_test_support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

size_t kct_staging_bytes(void) { return KCUDA_STAGING_BYTES; }

kiln_status kct_driver_status(int rc) { return kcuda_driver_status((CUresult)rc); }
kiln_status kct_nvrtc_status(int rc) { return kcuda_nvrtc_status((nvrtcResult)rc); }
kiln_status kct_cublas_status(int rc) { return kcuda_cublas_status((cublasStatus_t)rc); }
kiln_status kct_nccl_status(int rc) { return kcuda_nccl_status((ncclResult_t)rc); }

kiln_status kct_driver_fail(int rc, const char *call, const char *where) {
  return kcuda_driver_fail(NULL, (CUresult)rc, call, where);
}
kiln_status kct_nvrtc_fail(int rc, const char *call, const char *where) {
  return kcuda_nvrtc_fail((nvrtcResult)rc, call, where);
}
kiln_status kct_cublas_fail(int rc, const char *call, const char *where) {
  return kcuda_cublas_fail((cublasStatus_t)rc, call, where);
}
kiln_status kct_nccl_fail(int rc, const char *call, const char *where) {
  return kcuda_nccl_fail((ncclResult_t)rc, call, where);
}

/* A stand-in driver: cuInit returns its argument as the error, and the error
 * functions know two codes, as the real ones know all. */
static CUresult kct_fake_init(unsigned int code) { return (CUresult)code; }

static CUresult kct_fake_error_name(CUresult rc, const char **out) {
  switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      *out = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *out = "CUDA_ERROR_NO_DEVICE";
      return CUDA_SUCCESS;
    default:
      *out = NULL;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult kct_fake_error_string(CUresult rc, const char **out) {
  switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      *out = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *out = "no CUDA-capable device is detected";
      return CUDA_SUCCESS;
    default:
      *out = NULL;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

kiln_status kct_driver_macro(int cu_result, const char *where, bool *reached_cleanup) {
  kcuda_driver drv;
  memset(&drv, 0, sizeof drv);
  drv.cuInit = kct_fake_init;
  drv.cuGetErrorName = kct_fake_error_name;
  drv.cuGetErrorString = kct_fake_error_string;
  kiln_status st = KILN_OK;
  *reached_cleanup = false;
  KCUDA_CU(&drv, where, cuInit, ((unsigned)cu_result), cleanup);
  return st;
cleanup:
  *reached_cleanup = true;
  return st;
}

kiln_status kct_blaslt_create(void) {
  kcuda_blaslt *lt = NULL;
  kiln_status st = kcuda_blaslt_open(&lt);
  if (st) return st;
  cublasLtHandle_t handle = NULL;
  KCUDA_LT(lt, NULL, cublasLtCreate, (&handle), out);
  KCUDA_LT(lt, NULL, cublasLtDestroy, (handle), out);
  handle = NULL;
out:
  if (handle) lt->cublasLtDestroy(handle);
  kcuda_blaslt_close(lt);
  return st;
}

kiln_status kct_nccl_version(int *version) {
  kiln_status st = KILN_OK;
  KCUDA_NCCL_CHECK(NULL, ncclGetVersion(version), out);
out:
  return st;
}

kiln_status kct_nccl_comm_count_null(void) {
  kiln_status st = KILN_OK;
  int count = 0;
  KCUDA_NCCL_CHECK("a test", ncclCommCount(NULL, &count), out);
out:
  return st;
}

kiln_status kct_driver_load(const char *library) {
  kcuda_driver drv;
  kiln_status st = kcuda_driver_load(library, &drv);
  if (st == KILN_OK) kcuda_driver_unload(&drv);
  return st;
}

kiln_status kct_nvrtc_compile(const char *name, const char *source, const char *arch, bool cubin,
                              char **code, size_t *size) {
  const char *options[] = {arch};
  return kcuda_nvrtc_compile(name, source, options, arch ? 1 : 0, cubin, code, size);
}

struct kct_buffer {
  kdev_buffer buf;
};

kiln_status kct_buffer_new(kiln_device *dev, size_t nbytes, kct_buffer **out) {
  kct_buffer *b = calloc(1, sizeof *b);
  if (!b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kct_buffer_new: out of host memory");
  kiln_status st = dev->ops->alloc(dev, nbytes, &b->buf);
  if (st) {
    free(b);
    return st;
  }
  *out = b;
  return KILN_OK;
}

void kct_buffer_free(kiln_device *dev, kct_buffer *buf) {
  if (!buf) return;
  dev->ops->release(dev, &buf->buf);
  free(buf);
}

bool kct_buffer_has_ready(const kct_buffer *buf) { return buf->buf.ready != NULL; }

kiln_status kct_upload(kiln_device *dev, kct_buffer *dst, const void *src, size_t nbytes,
                       bool direct) {
  return dev->ops->upload(dev, &dst->buf, src, nbytes,
                          direct ? KDEV_COPY_DIRECT : KDEV_COPY_STAGED);
}

kiln_status kct_download(kiln_device *dev, const kct_buffer *src, void *dst, size_t nbytes,
                         bool direct) {
  return dev->ops->download(dev, &src->buf, dst, nbytes,
                            direct ? KDEV_COPY_DIRECT : KDEV_COPY_STAGED);
}

kiln_status kct_wait(kiln_device *dev, const kct_buffer *buf) {
  return dev->ops->wait(dev, &buf->buf);
}

kiln_status kct_copy(kiln_device *dst_dev, kct_buffer *dst, kiln_device *src_dev,
                     const kct_buffer *src, size_t nbytes) {
  return dst_dev->ops->copy(dst_dev, &dst->buf, src_dev, &src->buf, nbytes);
}

kiln_status kct_order_after_ready(kiln_device *dev, const kct_buffer *buf) {
  return kcuda_order_after_ready(dev, &buf->buf);
}

kiln_status kct_array_alloc(kiln_device *dev, int64_t elements, kiln_array **out) {
  return kdev_array_alloc("kct_array_alloc", dev, KILN_U8, 1, &elements, out);
}

kiln_status kct_pool_usage(kiln_device *dev, uint64_t *reserved, uint64_t *used) {
  return kcuda_pool_usage(dev, reserved, used);
}

kiln_status kct_pool_trim(kiln_device *dev) { return kcuda_pool_trim(dev); }

/* ---- cuBLASLt (blaslt.c) ---- */

struct kct_blaslt {
  kcuda_blaslt *lt;
};

kiln_status kct_blaslt_open(const char *library, kct_blaslt **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kct_blaslt_open: out of host memory");
  kiln_status st = library ? kcuda_blaslt_open_library(library, &(*out)->lt)
                           : kcuda_blaslt_open(&(*out)->lt);
  if (st) {
    free(*out);
    *out = NULL;
  }
  return st;
}

void kct_blaslt_close(kct_blaslt *lt) {
  if (!lt) return;
  kcuda_blaslt_close(lt->lt);
  free(lt);
}

size_t kct_blaslt_version(const kct_blaslt *lt) { return lt->lt->version; }

kiln_status kct_gemm_plan(const kir_program *p, const kfuse_group *g, kct_gemm_info *info) {
  kcuda_gemm gm;
  kcuda_gemm_desc desc;
  kiln_status st = kcuda_gemm_desc_of_group(p, g, &desc);
  if (!st) st = kcuda_gemm_plan(&desc, &gm);
  *info = (kct_gemm_info){.batch = gm.batch, .m = gm.m, .n = gm.n, .k = gm.k,
                          .a_trans = gm.a.trans, .b_trans = gm.b.trans, .lda = gm.a.ld,
                          .ldb = gm.b.ld, .a_batch_stride = gm.a.batch_stride,
                          .b_batch_stride = gm.b.batch_stride, .compute = (int)gm.compute,
                          .epilogue = (int)gm.epilogue};
  return st;
}

/* A device buffer of n bytes (plus slack to align it), filled from host. */
typedef struct kct_dev_buf {
  kdev_buffer buf;
  CUdeviceptr ptr; /* 256-byte aligned, inside buf */
} kct_dev_buf;

static kiln_status kct_dev_buf_new(kiln_device *dev, size_t n, kct_dev_buf *b) {
  kiln_status st = dev->ops->alloc(dev, n + KCUDA_GEMM_ALIGN, &b->buf);
  if (!st) b->ptr = (CUdeviceptr)((b->buf.ptr + KCUDA_GEMM_ALIGN - 1) & ~(uintptr_t)(KCUDA_GEMM_ALIGN - 1));
  return st;
}

static kiln_status kct_gemm_io(kcuda_device *d, const kct_gemm_case *c, kct_dev_buf *bufs,
                               kcuda_gemm_stream *gs, const kcuda_gemm_op *op) {
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  const void *host[3] = {c->lhs, c->rhs, c->bias};
  size_t bytes[3] = {c->lhs_bytes, c->rhs_bytes, c->bias_bytes};
  for (int i = 0; i < 3; i++)
    if (bytes[i]) KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, (bufs[i].ptr, host[i], bytes[i], d->compute), out);
  st = kcuda_gemm_run(gs, op, gs->stream, bufs[0].ptr, bufs[1].ptr, c->bias ? bufs[2].ptr : 0,
                      bufs[3].ptr + c->c_offset);
  if (st) goto out;
  if (c->out_bytes && !c->c_bytes_short) /* a short C is not read back */
    KCUDA_CU(d->drv, d->where, cuMemcpyDtoHAsync, (c->out, bufs[3].ptr, c->out_bytes, d->compute), out);
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
out:
  kcuda_leave(d);
  return st;
}

kiln_status kct_gemm_eval(kiln_device *dev, kct_blaslt *lt, const kir_program *p,
                          const kfuse_group *g, const kct_gemm_case *c) {
  kcuda_device *d = kcuda_impl(dev);
  kcuda_gemm gm;
  kcuda_gemm_stream *gs = NULL;
  kcuda_gemm_op *op = NULL;
  kct_dev_buf bufs[4];
  memset(bufs, 0, sizeof bufs);
  kcuda_gemm_desc desc;
  kiln_status st = kcuda_gemm_desc_of_group(p, g, &desc);
  if (!st) st = kcuda_gemm_plan(&desc, &gm);
  if (st) return st;
  if (c->tf32) gm.compute = KCUDA_GEMM_COMPUTE_32F_TF32;
  if ((st = kcuda_gemm_stream_new(lt->lt, d, d->compute, &gs)) ||
      (st = kcuda_gemm_prepare(gs, &gm, &op)))
    goto out;
  size_t bytes[4] = {c->lhs_bytes, c->rhs_bytes, c->bias_bytes, c->out_bytes - c->c_bytes_short};
  for (int i = 0; i < 4 && !st; i++) st = kct_dev_buf_new(dev, bytes[i], &bufs[i]);
  if (!st) st = kct_gemm_io(d, c, bufs, gs, op);
out:
  for (int i = 0; i < 4; i++)
    if (bufs[i].buf.ptr) dev->ops->release(dev, &bufs[i].buf);
  kcuda_gemm_op_free(op);
  kcuda_gemm_stream_free(gs);
  return st;
}

kiln_status kct_ctx_use_blaslt(kiln_ctx *ctx, const char *library) {
  kiln_device *d0;
  kiln_status st = kiln_device_get(ctx, 0, &d0);
  if (st) return st;
  kcuda_state *s = d0->backend->state;
  if (s->blaslt) return KILN_OK;
  return library ? kcuda_blaslt_open_library(library, &s->blaslt) : kcuda_blaslt_open(&s->blaslt);
}

kiln_status kct_device_gemm_attach(kiln_device *dev, const char *library, bool *same) {
  kcuda_state *s = dev->backend->state;
  kiln_status st = kct_ctx_use_blaslt(dev->ctx, library);
  kcuda_gemm_stream *first = NULL, *second = NULL;
  if (!st) st = kcuda_device_gemm(s, kcuda_impl(dev), &first);
  if (!st) st = kcuda_device_gemm(s, kcuda_impl(dev), &second);
  *same = first && first == second;
  return st;
}
/* ---- end of cuBLASLt ---- */

kiln_status kct_trail_fault(kiln_device *dev, bool finish_first, int after) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  if ((st = kcuda_trail_enter(d, "first"))) goto out;
  kcuda_trail_leave(d);
  if (finish_first && (st = kcuda_trail_finish(d))) goto out;
  /* Work other than a marked step settles the trail first, as kiln's does. */
  if ((st = kcuda_trail_settle(d))) goto out;
  static char nowhere[64];
  KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, ((CUdeviceptr)64, nowhere, 64, d->compute), out);
  for (int i = 0; i < after; i++) {
    char what[32];
    snprintf(what, sizeof what, "later %d", i);
    if ((st = kcuda_trail_enter(d, what))) goto out;
    kcuda_trail_leave(d);
  }
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), blame);
  st = kcore_fail(KILN_ERR_INTERNAL, "the faulting copy did not fault");
  goto out;
blame:
  st = kcuda_trail_blame(d, st);
out:
  kcuda_leave(d);
  return st;
}

kiln_status kct_nvrtc_open(const char *library, int *major) {
  kcuda_nvrtc *nv = NULL;
  kiln_status st = kcuda_nvrtc_open_library(library, &nv);
  if (st == KILN_OK) *major = nv->major;
  kcuda_nvrtc_close(nv);
  return st;
}
