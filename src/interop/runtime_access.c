/* Every use of runtime and backend internals by interop lives here, so that
 * moving struct kiln_array or a backend's device state changes this file only. */
#include "backend/cuda/cuda_backend.h"
#include "interop/interop.h"
#include "runtime/runtime.h"

uintptr_t kinterop_array_address(const kiln_array *a) { return a->buf.ptr; }

kiln_status kinterop_array_wait(const kiln_array *a) {
  if (a->buf.nbytes == 0) return KILN_OK;
  return a->device->ops->wait(a->device, &a->buf);
}

static bool kinterop_is_cuda(const kiln_device *dev) {
  return dev->backend->kind == KILN_BACKEND_CUDA;
}

kiln_status kinterop_array_order(const kiln_array *a, int64_t stream) {
  if (!kinterop_is_cuda(a->device)) return kinterop_array_wait(a);
  if (a->buf.nbytes == 0) return KILN_OK;
  /* The consumer's stream waits on the buffer's ready event: the host does
   * not, and kiln's streams go on. */
  kcuda_device *d = kcuda_impl(a->device);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  st = kcuda_after_ready(d, (CUstream)(uintptr_t)stream, &a->buf);
  kcuda_leave(d);
  return st;
}

int kinterop_device_ordinal(const kiln_device *dev) {
  return kinterop_is_cuda(dev) ? kcuda_impl(dev)->ordinal : 0;
}

int64_t kinterop_device_stream(const kiln_device *dev) {
  return kinterop_is_cuda(dev) ? (int64_t)(uintptr_t)kcuda_impl(dev)->compute : 0;
}

kiln_status kinterop_wrap(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                          const int64_t *shape, uintptr_t ptr, void (*release)(void *),
                          void *managed, kiln_array **out) {
  kiln_status st = kdev_array_wrap(op, dev, dtype, rank, shape, ptr, release, managed, out);
  if (st || !kinterop_is_cuda(dev)) return st;
  /* The producer made the data ready on kiln's compute stream (the stream
   * handshake); a marker there orders kiln's other streams (copies) after it. */
  kcuda_device *d = kcuda_impl(dev);
  if (!(st = kcuda_enter(d))) {
    st = kcuda_mark_ready(d, &(*out)->buf, d->compute);
    kcuda_leave(d);
  }
  if (st) {
    kiln_array_release(*out);
    *out = NULL;
  }
  return st;
}
