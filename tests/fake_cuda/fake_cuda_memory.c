/* The stand-in driver's memory: pools and stream-ordered allocation,
 * pinned host memory, copies and memsets, each checked against the live
 * allocations when it runs (fake_cuda_driver.c). */
#include "fake_cuda_internal.h"

/* ---- memory pools ---- */

CUresult fake_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
  FAKE_BEGIN(true);
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fake_device_ok(props->location.id))
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  if (!p) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  p->device = props->location.id;
  p->next = fake_pools;
  fake_pools = p;
  *out = p;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemPoolDestroy(CUmemoryPool pool) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  pool->destroyed = true;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  pool->threshold = *(cuuint64_t *)v;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *(cuuint64_t *)v = pool->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *(cuuint64_t *)v = fake_used[pool->device];
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *(cuuint64_t *)v = pool->threshold;
      break;
    default:
      return fake_leave(CUDA_ERROR_INVALID_VALUE);
  }
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t n) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  for (size_t i = 0; i < n; i++)
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !fake_device_ok(map[i].location.id) || map[i].location.id == pool->device ||
        map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return fake_leave(CUDA_ERROR_INVALID_VALUE);
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  unsigned long long used = fake_used[pool->device];
  if (pool->reserved > keep) pool->reserved = used > keep ? used : keep;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t n, CUmemoryPool pool,
                                      CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (n == 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  int dev = pool->device;
  if (n > fake_device_memory() - fake_used[dev]) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  fake_alloc *a = calloc(1, sizeof *a);
  /* 256-byte aligned, as the driver's allocations are (cuBLASLt relies on it). */
  char *base = a ? aligned_alloc(256, (n + 255) / 256 * 256) : NULL;
  if (!base) {
    free(a);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *a = (fake_alloc){.base = base,
                    .n = n,
                    .device = dev,
                    .pool = pool,
                    .state = FAKE_PENDING,
                    .next = fake_allocs};
  fake_op op = {.kind = FAKE_ALLOC, .alloc = a};
  CUresult rc = fake_enqueue(s, op);
  if (rc != CUDA_SUCCESS) {
    free(base);
    free(a);
    return fake_leave(rc);
  }
  fake_allocs = a;
  fake_used[dev] += n;
  if (pool->reserved < fake_used[dev]) pool->reserved = fake_used[dev];
  *out = (CUdeviceptr)(uintptr_t)base;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  for (fake_alloc *a = fake_allocs; a; a = a->next) {
    if (a->state == FAKE_FREED || a->free_queued || (CUdeviceptr)(uintptr_t)a->base != p) continue;
    a->free_queued = true;
    fake_op op = {.kind = FAKE_FREE, .alloc = a};
    return fake_leave(fake_enqueue(s, op));
  }
  fprintf(stderr, "fake libcuda: cuMemFreeAsync of %p, which is not a live allocation\n",
          (void *)(uintptr_t)p);
  return fake_leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---- pinned host memory ---- */

CUresult fake_cuMemHostAlloc(void **out, size_t n, unsigned int flags) {
  FAKE_BEGIN(true);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_host *h = calloc(1, sizeof *h);
  void *p = h ? malloc(n ? n : 1) : NULL;
  if (!p) {
    free(h);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  h->p = p;
  h->n = n;
  h->flags = flags;
  h->next = fake_hosts;
  fake_hosts = h;
  *out = p;
  return fake_leave(CUDA_SUCCESS);
}

/* Unified addressing: the device sees mapped pinned memory at its host
 * address. Only memory allocated with CU_MEMHOSTALLOC_DEVICEMAP is mapped. */
CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags) {
  FAKE_BEGIN(true);
  fake_host *h = fake_pinned(p, 1);
  if (flags != 0 || !h || !(h->flags & CU_MEMHOSTALLOC_DEVICEMAP))
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  *out = (CUdeviceptr)(uintptr_t)p;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuMemFreeHost(void *p) {
  FAKE_BEGIN(true);
  for (fake_host **link = &fake_hosts; *link; link = &(*link)->next) {
    fake_host *h = *link;
    if (h->p != p) continue;
    *link = h->next;
    free(h->p);
    free(h);
    return fake_leave(CUDA_SUCCESS);
  }
  return fake_leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---- copies ---- */

/* A device of -2 stands for the stream's own device, known once s is checked. */
#define FAKE_STREAM_DEVICE (-2)

static CUresult fake_copy(CUstream s, const char *what, void *dst, int dst_device, const void *src,
                          int src_device, size_t n) {
  CUresult rc = fake_enter(what, true);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_COPY,
                .dst = dst,
                .src = src,
                .n = n,
                .what = what,
                .dst_device = dst_device == FAKE_STREAM_DEVICE ? s->device : dst_device,
                .src_device = src_device == FAKE_STREAM_DEVICE ? s->device : src_device};
  return fake_leave(fake_enqueue(s, op));
}

CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyHtoDAsync", (void *)(uintptr_t)dst, FAKE_STREAM_DEVICE, src, -1, n);
}

CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyDtoHAsync", dst, -1, (const void *)(uintptr_t)src,
                   FAKE_STREAM_DEVICE, n);
}

CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyDtoDAsync", (void *)(uintptr_t)dst, FAKE_STREAM_DEVICE,
                   (const void *)(uintptr_t)src, FAKE_STREAM_DEVICE, n);
}

CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                CUcontext src_ctx, size_t n, CUstream s) {
  pthread_mutex_lock(&fake_lock);
  bool ok = fake_context_ok(dst_ctx) && fake_context_ok(src_ctx);
  pthread_mutex_unlock(&fake_lock);
  if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
  return fake_copy(s, "cuMemcpyPeerAsync", (void *)(uintptr_t)dst, dst_ctx->device,
                   (const void *)(uintptr_t)src, src_ctx->device, n);
}

CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_MEMSET, .dst = (char *)(uintptr_t)dst, .n = n, .seq = value,
                .dst_device = s->device};
  return fake_leave(fake_enqueue(s, op));
}
