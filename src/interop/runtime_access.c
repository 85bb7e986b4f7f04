/* Every use of runtime and device internals by interop lives here, so that
 * moving struct kiln_array changes this file only. Backends are reached
 * through their device ops and capabilities (foreign streams), never by
 * platform. */
#include "interop/interop.h"
#include "runtime/runtime.h"

uintptr_t kinterop_array_address(const kiln_array *a) { return a->buf.ptr; }

kiln_status kinterop_array_wait(const kiln_array *a) {
  if (a->buf.nbytes == 0) return KILN_OK;
  return a->device->ops->wait(a->device, &a->buf);
}

static bool kinterop_has_streams(const kiln_device *dev) {
  return (dev->backend->caps & KDEV_CAP_STREAMS) != 0;
}

/* The consumer's stream waits on the buffer's pending writes: the host does
 * not, and kiln's streams go on. Without streams, the host waits. */
kiln_status kinterop_array_order(const kiln_array *a, int64_t stream) {
  if (!kinterop_has_streams(a->device)) return kinterop_array_wait(a);
  return a->device->ops->order_stream(a->device, &a->buf, stream);
}

int kinterop_device_type(const kiln_device *dev) { return dev->backend->dlpack_device_type; }

int kinterop_device_ordinal(const kiln_device *dev) { return dev->ordinal; }

int64_t kinterop_device_stream(const kiln_device *dev) {
  return kinterop_has_streams(dev) ? dev->ops->stream((kiln_device *)dev) : 0;
}

bool kinterop_host_memory(const kiln_device *dev) {
  return (dev->backend->caps & KDEV_CAP_HOST_MEMORY) != 0;
}

kiln_status kinterop_wrap(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                          const int64_t *shape, uintptr_t ptr, void (*release)(void *),
                          void *managed, kiln_array **out) {
  kiln_status st = kdev_array_wrap(op, dev, dtype, rank, shape, ptr, release, managed, out);
  if (st || !kinterop_has_streams(dev)) return st;
  /* The producer made the data ready on the device's stream (the stream
   * handshake); a marker there orders kiln's other streams (copies) after it. */
  if ((st = dev->ops->mark_written(dev, &(*out)->buf, dev->ops->stream(dev)))) {
    kiln_array_release(*out);
    *out = NULL;
  }
  return st;
}
