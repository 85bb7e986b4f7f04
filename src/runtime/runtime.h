/* runtime: contexts, devices, arrays and the interface every backend
 * implements. The only door of src/runtime; prefix krt_. */
#ifndef KILN_SRC_RUNTIME_H
#define KILN_SRC_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/core.h"
#include "kiln/kiln.h"

/* Device memory. `ptr` is a host pointer on CPU and a CUdeviceptr on CUDA.
 * `ready` is the backend's completion marker for the last write (a CUevent on
 * CUDA, NULL when the data is known to be ready). */
typedef struct krt_buffer {
  uintptr_t ptr;
  size_t nbytes;
  void *ready;
} krt_buffer;

/* How host data crosses to a device: through the device's pinned staging
 * buffers (the default), or straight from pageable memory. */
typedef enum krt_copy_mode { KRT_COPY_STAGED = 0, KRT_COPY_DIRECT = 1 } krt_copy_mode;

/* What a backend does for one of its devices. Every function returns a status
 * and sets the message (naming the device and the bytes) on failure. */
typedef struct krt_device_ops {
  /* Out of memory is KILN_ERR_OUT_OF_MEMORY; the device stays usable. */
  kiln_status (*alloc)(kiln_device *dev, size_t nbytes, krt_buffer *out);
  /* Frees once pending work on the buffer is done (stream-ordered). */
  void (*release)(kiln_device *dev, krt_buffer *buf);
  /* Host -> device; may return before the copy ends (then sets buf->ready);
   * src may be reused at once. */
  kiln_status (*upload)(kiln_device *dev, krt_buffer *dst, const void *src, size_t nbytes,
                        krt_copy_mode mode);
  /* Device -> host; waits for pending writes and for the copy itself. */
  kiln_status (*download)(kiln_device *dev, const krt_buffer *src, void *dst, size_t nbytes,
                          krt_copy_mode mode);
  /* Waits until the buffer's pending writes are done. */
  kiln_status (*wait)(kiln_device *dev, const krt_buffer *buf);
  /* Copy between two devices of this backend (dst allocated by the caller). */
  kiln_status (*copy)(kiln_device *dst_dev, krt_buffer *dst, kiln_device *src_dev,
                      const krt_buffer *src, size_t nbytes);
  kiln_status (*synchronize)(kiln_device *dev);
} krt_device_ops;

struct kiln_device {
  kiln_ctx *ctx;
  int index;
  const krt_device_ops *ops;
  void *impl; /* the backend's per-device state */
  kiln_device_info info;
  _Atomic uint64_t bytes_in_use;
};

struct kiln_ctx {
  kcore_config config;
  kiln_backend backend; /* KILN_BACKEND_CPU or KILN_BACKEND_CUDA */
  int num_devices;
  kiln_device *devices;
  void *backend_state;
  void (*backend_close)(kiln_ctx *ctx); /* frees devices' impl and backend_state */
  _Atomic int64_t live_arrays;
};

/* Opening a backend fills ctx->devices, num_devices, backend_state and
 * backend_close. On failure nothing is left allocated. */
kiln_status kcpu_backend_open(kiln_ctx *ctx);
/* Reports why CUDA cannot be used (no driver library, no device, driver too
 * old) as KILN_ERR_DEVICE. */
kiln_status kcuda_backend_open(kiln_ctx *ctx);

/* Logs through the context's level. */
#define KRT_LOG(ctx, level, ...) kcore_log((ctx)->config.opts.log_level, (level), __VA_ARGS__)

/* An array: one buffer on one device, shared by reference count. */
struct kiln_array {
  _Atomic int refs;
  _Atomic bool deleted;
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t size;
  kiln_device *device;
  krt_buffer buf;
};

/* Allocates an array (buffer uninitialised) for backends and later modules. */
kiln_status krt_array_alloc(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                            const int64_t *shape, kiln_array **out);
/* KILN_ERR_DELETED / KILN_ERR_ARGUMENT checks shared by array entry points. */
kiln_status krt_array_check(const char *op, const kiln_array *a);

#endif
