/* Opening the backend: every visible GPU with its primary context, a compute
 * and a copy stream, a stream-ordered memory pool and pinned staging buffers.
 * Also the device operations that are not copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

/* ---- contexts and ordering ---- */

kiln_status kcuda_enter(kcuda_device *d) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuCtxPushCurrent, (d->context), out);
out:
  return st;
}

void kcuda_leave(kcuda_device *d) {
  CUcontext popped;
  CUresult rc = d->drv->cuCtxPopCurrent(&popped);
  if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuCtxPopCurrent");
}

void kcuda_log_failure(const kcuda_device *d, CUresult rc, const char *call) {
  char what[256];
  kcore_log(d->log_level, KILN_LOG_WARN, "%s: %s failed: %s", d->where, call,
            kcuda_driver_describe(d->drv, rc, what, sizeof what));
}

kiln_status kcuda_after_compute(kcuda_device *d, CUstream stream) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuEventRecord, (d->handoff, d->compute), out);
  KCUDA_CU(d->drv, d->where, cuStreamWaitEvent, (stream, d->handoff, 0), out);
out:
  return st;
}

kiln_status kcuda_after_ready(kcuda_device *d, CUstream stream, const kdev_buffer *buf) {
  kiln_status st = KILN_OK;
  /* A stream is already ordered after its own work. */
  if (buf->ready && buf->ready_on != (void *)stream)
    KCUDA_CU(d->drv, d->where, cuStreamWaitEvent, (stream, (CUevent)buf->ready, 0), out);
out:
  return st;
}

/* A spare event, or a new one. Re-recording a spare is safe: a wait
 * enqueued on it earlier keeps referring to the record it saw. */
kiln_status kcuda_event_take(kcuda_device *d, CUevent *ev) {
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&d->events.lock);
  *ev = d->events.n > 0 ? d->events.spare[--d->events.n] : NULL;
  pthread_mutex_unlock(&d->events.lock);
  if (!*ev) KCUDA_CU(d->drv, d->where, cuEventCreate, (ev, CU_EVENT_DISABLE_TIMING), out);
out:
  return st;
}

/* Keeps the event as a spare, or destroys it (allowed while it is pending:
 * the driver frees it once it completes). Inside the device's context. */
void kcuda_event_give(kcuda_device *d, CUevent ev) {
  pthread_mutex_lock(&d->events.lock);
  bool kept = d->events.n < KCUDA_EVENT_SPARES;
  if (kept) d->events.spare[d->events.n++] = ev;
  pthread_mutex_unlock(&d->events.lock);
  CUresult rc = kept ? CUDA_SUCCESS : d->drv->cuEventDestroy(ev);
  if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuEventDestroy");
}

kiln_status kcuda_mark_ready(kcuda_device *d, kdev_buffer *buf, CUstream stream) {
  kiln_status st = KILN_OK;
  if (!buf->ready) {
    CUevent ev;
    if ((st = kcuda_event_take(d, &ev))) return st;
    buf->ready = ev;
  }
  KCUDA_CU(d->drv, d->where, cuEventRecord, ((CUevent)buf->ready, stream), out);
  buf->ready_on = stream;
out:
  return st;
}

kiln_status kcuda_order_after_ready(kiln_device *dev, const kdev_buffer *buf) {
  kcuda_device *d = kcuda_impl(dev);
  if (!buf->ready) return KILN_OK;
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  st = kcuda_after_ready(d, d->compute, buf);
  kcuda_leave(d);
  return st;
}

/* ---- device operations ---- */

static kiln_status kcuda_try_alloc(kcuda_device *d, size_t nbytes, CUdeviceptr *ptr) {
  CUresult rc = d->drv->cuMemAllocFromPoolAsync(ptr, nbytes, d->pool, d->compute);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    /* Frees still queued on the streams hold memory the pool could reuse:
     * let them finish and try once more before giving up. */
    if (d->drv->cuStreamSynchronize(d->copy) == CUDA_SUCCESS &&
        d->drv->cuStreamSynchronize(d->compute) == CUDA_SUCCESS)
      rc = d->drv->cuMemAllocFromPoolAsync(ptr, nbytes, d->pool, d->compute);
  }
  if (rc == CUDA_SUCCESS) return KILN_OK;
  kiln_status st = kcuda_driver_fail(d->drv, rc, "cuMemAllocFromPoolAsync", NULL);
  return kcore_fail_wrap(st, "%s: %sallocating %zu bytes", d->where,
                         st == KILN_ERR_OUT_OF_MEMORY ? "out of device memory " : "", nbytes);
}

static kiln_status kcuda_alloc(kiln_device *dev, size_t nbytes, kdev_buffer *out) {
  kcuda_device *d = kcuda_impl(dev);
  memset(out, 0, sizeof *out);
  if (nbytes == 0) return KILN_OK;
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  CUdeviceptr ptr = 0;
  st = kcuda_try_alloc(d, nbytes, &ptr);
  kcuda_leave(d);
  if (st) return st;
  out->ptr = (uintptr_t)ptr;
  out->nbytes = nbytes;
  return KILN_OK;
}

/* Frees in stream order after the buffer's last write. Errors cannot be
 * returned from here, and must not replace the thread's message (release runs
 * on error paths): they are logged. */
static void kcuda_release(kiln_device *dev, kdev_buffer *buf) {
  kcuda_device *d = kcuda_impl(dev);
  CUresult rc = d->drv->cuCtxPushCurrent(d->context);
  if (rc != CUDA_SUCCESS) {
    kcuda_log_failure(d, rc, "cuCtxPushCurrent (buffer leaked)");
    return;
  }
  if (buf->ready) {
    CUevent ready = (CUevent)buf->ready;
    if ((rc = d->drv->cuStreamWaitEvent(d->compute, ready, 0)) != CUDA_SUCCESS)
      kcuda_log_failure(d, rc, "cuStreamWaitEvent");
    kcuda_event_give(d, ready);
  }
  if (buf->ptr && (rc = d->drv->cuMemFreeAsync((CUdeviceptr)buf->ptr, d->compute)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuMemFreeAsync");
  kcuda_leave(d);
  buf->ptr = 0;
  buf->ready = NULL;
  buf->ready_on = NULL;
}

static kiln_status kcuda_wait(kiln_device *dev, const kdev_buffer *buf) {
  kcuda_device *d = kcuda_impl(dev);
  if (!buf->ready) return KILN_OK;
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  KCUDA_CU(d->drv, d->where, cuEventSynchronize, ((CUevent)buf->ready), out);
  kcuda_foreign_poll(d);
out:
  st = kcuda_trail_blame(d, st);
  kcuda_leave(d);
  if (st && buf->origin[0]) kcore_fail_wrap(st, "waiting for the work of %s", buf->origin);
  return st;
}

static kiln_status kcuda_synchronize(kiln_device *dev) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->copy), out);
  kcuda_foreign_poll(d);
out:
  st = kcuda_trail_blame(d, st);
  kcuda_leave(d);
  return st;
}

/* Foreign streams (DLPack's stream handshake). */
static int64_t kcuda_stream(kiln_device *dev) {
  return (int64_t)(uintptr_t)kcuda_impl(dev)->compute;
}

static kiln_status kcuda_order_stream(kiln_device *dev, const kdev_buffer *buf, int64_t stream) {
  if (buf->nbytes == 0) return KILN_OK;
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  st = kcuda_after_ready(d, (CUstream)(uintptr_t)stream, buf);
  kcuda_leave(d);
  return st;
}

static kiln_status kcuda_mark_written(kiln_device *dev, kdev_buffer *buf, int64_t stream) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  st = kcuda_mark_ready(d, buf, (CUstream)(uintptr_t)stream);
  kcuda_leave(d);
  return st;
}

static const kdev_ops kcuda_ops = {
    .alloc = kcuda_alloc,
    .release = kcuda_release,
    .upload = kcuda_upload,
    .download = kcuda_download,
    .wait = kcuda_wait,
    .copy = kcuda_copy,
    .synchronize = kcuda_synchronize,
    .release_foreign = kcuda_release_foreign,
    .stream = kcuda_stream,
    .order_stream = kcuda_order_stream,
    .mark_written = kcuda_mark_written,
};

kiln_status kcuda_pool_usage(kiln_device *dev, uint64_t *reserved, uint64_t *used) {
  kcuda_device *d = kcuda_impl(dev);
  cuuint64_t r = 0, u = 0;
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  KCUDA_CU(d->drv, d->where, cuMemPoolGetAttribute,
           (d->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r), out);
  KCUDA_CU(d->drv, d->where, cuMemPoolGetAttribute, (d->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u),
           out);
  *reserved = r;
  *used = u;
out:
  kcuda_leave(d);
  return st;
}

kiln_status kcuda_pool_trim(kiln_device *dev) {
  kiln_status st = kcuda_synchronize(dev);
  if (st) return st;
  kcuda_device *d = kcuda_impl(dev);
  if ((st = kcuda_enter(d))) return st;
  KCUDA_CU(d->drv, d->where, cuMemPoolTrimTo, (d->pool, 0), out);
out:
  kcuda_leave(d);
  return st;
}

/* ---- opening and closing one device ---- */

static kiln_status kcuda_device_info(kcuda_device *d, kiln_device_info *info) {
  kiln_status st = KILN_OK;
  const kcuda_driver *drv = d->drv;
  size_t total = 0;
  info->platform = KILN_BACKEND_CUDA;
  KCUDA_CU(drv, d->where, cuDeviceGetName, (info->name, (int)sizeof info->name, d->device), out);
  KCUDA_CU(drv, d->where, cuDeviceGetAttribute,
           (&info->compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->device), out);
  KCUDA_CU(drv, d->where, cuDeviceGetAttribute,
           (&info->compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->device), out);
  KCUDA_CU(drv, d->where, cuDeviceGetAttribute,
           (&info->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->device), out);
  KCUDA_CU(drv, d->where, cuDeviceTotalMem, (&total, d->device), out);
  info->total_memory = total;
  snprintf(d->where, sizeof d->where, "cuda:%d (%s)", d->ordinal, info->name);
out:
  return st;
}

/* A pool of our own rather than the device's default one, so that other
 * libraries in the process neither see nor trim kiln's cached memory. */
static kiln_status kcuda_pool_create(kcuda_device *d) {
  kiln_status st = KILN_OK;
  int supported = 0;
  KCUDA_CU(d->drv, d->where, cuDeviceGetAttribute,
           (&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d->device), out);
  if (!supported)
    return kcore_fail(KILN_ERR_DEVICE, "%s does not support stream-ordered memory pools", d->where);
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = d->ordinal;
  KCUDA_CU(d->drv, d->where, cuMemPoolCreate, (&d->pool, &props), out);
  /* Keep freed memory cached in the pool instead of returning it to the
   * driver at every synchronisation; kcuda_pool_trim gives it back. */
  cuuint64_t threshold = UINT64_MAX;
  KCUDA_CU(d->drv, d->where, cuMemPoolSetAttribute,
           (d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), out);
out:
  return st;
}

static kiln_status kcuda_staging_create(kcuda_device *d) {
  kiln_status st = KILN_OK;
  if (pthread_mutex_init(&d->staging_lock, NULL) != 0)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: pthread_mutex_init failed", d->where);
  d->staging_lock_ready = true;
  for (int k = 0; k < 2; k++) {
    KCUDA_CU(d->drv, d->where, cuMemHostAlloc, (&d->staging[k], KCUDA_STAGING_BYTES, 0), out);
    KCUDA_CU(d->drv, d->where, cuEventCreate, (&d->staging_done[k], CU_EVENT_DISABLE_TIMING), out);
    /* Recorded once so that every later wait on it has work to refer to. */
    KCUDA_CU(d->drv, d->where, cuEventRecord, (d->staging_done[k], d->copy), out);
  }
out:
  return st;
}

static kiln_status kcuda_device_setup(kcuda_device *d) {
  kiln_status st = KILN_OK;
  const kcuda_driver *drv = d->drv;
  KCUDA_CU(drv, d->where, cuStreamCreate, (&d->compute, CU_STREAM_NON_BLOCKING), out);
  KCUDA_CU(drv, d->where, cuStreamCreate, (&d->copy, CU_STREAM_NON_BLOCKING), out);
  KCUDA_CU(drv, d->where, cuEventCreate, (&d->handoff, CU_EVENT_DISABLE_TIMING), out);
  if (pthread_mutex_init(&d->events.lock, NULL) != 0)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: pthread_mutex_init failed", d->where);
  d->events.lock_ready = true;
  if ((st = kcuda_foreign_open(d)) || (st = kcuda_pool_create(d)) ||
      (st = kcuda_staging_create(d)) || (st = kcuda_trail_open(d)))
    goto out;
out:
  return st;
}

/* Releases whatever kcuda_device_open got to, in reverse order. */
static void kcuda_device_close(kcuda_device *d) {
  const kcuda_driver *drv = d->drv;
  if (!d->context) return;
  /* Handles carry their context, so teardown goes on even if the context
   * cannot be made current. */
  CUresult rc = drv->cuCtxPushCurrent(d->context);
  bool entered = rc == CUDA_SUCCESS;
  if (!entered) kcuda_log_failure(d, rc, "cuCtxPushCurrent");
#define KCUDA_TEARDOWN(fn, args) \
  if ((rc = drv->fn args) != CUDA_SUCCESS) kcuda_log_failure(d, rc, #fn)
  kcuda_gemm_stream_free(d->gemm); /* its workspace's free completes in the sync below */
  if (d->copy) KCUDA_TEARDOWN(cuStreamSynchronize, (d->copy));
  if (d->compute) KCUDA_TEARDOWN(cuStreamSynchronize, (d->compute));
  kcuda_foreign_close(d); /* deleters owed (their events are spares until below) */
  kcuda_trail_close(d);
  for (int k = 0; k < d->events.n; k++) KCUDA_TEARDOWN(cuEventDestroy, (d->events.spare[k]));
  if (d->events.lock_ready) pthread_mutex_destroy(&d->events.lock);
  for (int k = 0; k < 2; k++) {
    if (d->staging_done[k]) KCUDA_TEARDOWN(cuEventDestroy, (d->staging_done[k]));
    if (d->staging[k]) KCUDA_TEARDOWN(cuMemFreeHost, (d->staging[k]));
  }
  /* Buffers still alive keep the pool's memory until the context goes. */
  if (d->pool) KCUDA_TEARDOWN(cuMemPoolDestroy, (d->pool));
  if (d->handoff) KCUDA_TEARDOWN(cuEventDestroy, (d->handoff));
  if (d->copy) KCUDA_TEARDOWN(cuStreamDestroy, (d->copy));
  if (d->compute) KCUDA_TEARDOWN(cuStreamDestroy, (d->compute));
  if (entered) kcuda_leave(d);
  KCUDA_TEARDOWN(cuDevicePrimaryCtxRelease, (d->device));
#undef KCUDA_TEARDOWN
  if (d->staging_lock_ready) pthread_mutex_destroy(&d->staging_lock);
  memset(d, 0, sizeof *d);
}

static kiln_status kcuda_device_open(const kcuda_driver *drv, kiln_log_level log_level, int ordinal,
                                     kcuda_device *d, kiln_device_info *info) {
  kiln_status st = KILN_OK;
  memset(d, 0, sizeof *d);
  d->drv = drv;
  d->log_level = log_level;
  d->ordinal = ordinal;
  snprintf(d->where, sizeof d->where, "cuda:%d", ordinal);
  KCUDA_CU(drv, d->where, cuDeviceGet, (&d->device, ordinal), out);
  if ((st = kcuda_device_info(d, info))) goto out;
  KCUDA_CU(drv, d->where, cuDevicePrimaryCtxRetain, (&d->context, d->device), out);
  if ((st = kcuda_enter(d))) goto out;
  st = kcuda_device_setup(d);
  kcuda_leave(d);
out:
  if (st) kcuda_device_close(d);
  return st;
}

/* Lets each pool's memory be read and written by every peer that can reach
 * it directly, so that copies between GPUs need no trip through the host.
 * Without it copies still work (the driver stages them), hence a warning. */
static void kcuda_enable_peers(kcuda_state *s) {
  const kcuda_driver *drv = &s->drv;
  for (int i = 0; i < s->num_devices; i++) {
    kcuda_device *owner = &s->devices[i];
    for (int j = 0; j < s->num_devices; j++) {
      int can = 0;
      CUresult rc = j == i ? CUDA_SUCCESS
                           : drv->cuDeviceCanAccessPeer(&can, s->devices[j].device, owner->device);
      if (rc != CUDA_SUCCESS) kcuda_log_failure(owner, rc, "cuDeviceCanAccessPeer");
      if (!can) continue;
      CUmemAccessDesc access;
      memset(&access, 0, sizeof access);
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = s->devices[j].ordinal;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if ((rc = drv->cuMemPoolSetAccess(owner->pool, &access, 1)) != CUDA_SUCCESS)
        kcuda_log_failure(owner, rc, "cuMemPoolSetAccess");
    }
  }
}

/* ---- the backend ---- */

static void kcuda_state_free(kcuda_state *s) {
  for (int i = s->num_devices - 1; i >= 0; i--) kcuda_device_close(&s->devices[i]);
  kcuda_blaslt_close(s->blaslt);
  free(s->devices);
  kcuda_driver_unload(&s->drv);
  free(s);
}

static void kcuda_backend_close(kdev_backend *b) {
  kcuda_state_free(b->state);
  free(b->devices);
  b->state = NULL;
  b->devices = NULL;
  b->num_devices = 0;
}

static kiln_status kcuda_open_devices(kcuda_state *s, kiln_log_level log_level, kiln_device *devs,
                                      int count) {
  for (int i = 0; i < count; i++) {
    kiln_status st = kcuda_device_open(&s->drv, log_level, i, &s->devices[i], &devs[i].info);
    if (st) return st;
    s->num_devices = i + 1;
    devs[i].impl = &s->devices[i];
    devs[i].ops = &kcuda_ops;
    devs[i].ordinal = s->devices[i].ordinal;
    devs[i].info.index = i;
  }
  return KILN_OK;
}

kiln_status kcuda_backend_open(const kcore_config *config, kdev_backend *b) {
  kiln_status st = KILN_OK;
  kiln_device *devs = NULL;
  kcuda_state *s = calloc(1, sizeof *s);
  if (!s) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
  if ((st = kcuda_driver_load(KCUDA_DRIVER_LIBRARY, &s->drv))) {
    free(s);
    return kcore_fail_wrap(st, "kiln_ctx_new: CUDA backend");
  }
  int count = 0;
  KCUDA_CU(&s->drv, NULL, cuDeviceGetCount, (&count), fail);
  if (count <= 0) {
    st = kcore_fail(KILN_ERR_DEVICE, "no CUDA device");
    goto fail;
  }
  s->devices = calloc((size_t)count, sizeof *s->devices);
  devs = calloc((size_t)count, sizeof *devs);
  if (!s->devices || !devs) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
    goto fail;
  }
  if ((st = kcuda_open_devices(s, config->opts.log_level, devs, count))) goto fail;
  kcuda_enable_peers(s);
  s->config = config;
  b->kind = KILN_BACKEND_CUDA;
  b->caps = KDEV_CAP_STREAMS | KDEV_CAP_GRAPHS;
  b->device_kind = "GPU";
  b->dlpack_device_type = 2; /* kDLCUDA */
  b->devices = devs;
  b->num_devices = count;
  b->state = s;
  b->close = kcuda_backend_close;
  b->exec = &kcuda_exec_ops;
  b->coll = &kcuda_coll_ops;
  kcore_log(config->opts.log_level, KILN_LOG_INFO, "cuda: driver %d.%d, %d device(s)",
            s->drv.version / 1000, s->drv.version % 1000 / 10, count);
  return KILN_OK;
fail:
  free(devs);
  kcuda_state_free(s);
  return kcore_fail_wrap(st, "kiln_ctx_new: CUDA backend");
}
