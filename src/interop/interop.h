/* interop: exchange of arrays with other frameworks (DLPack). The only door
 * of src/interop; prefix kinterop_. It sits above runtime. */
#ifndef KILN_SRC_INTEROP_H
#define KILN_SRC_INTEROP_H

#include <stdbool.h>
#include <stdint.h>
#include "kiln/interop.h"

/* The one place interop reaches into runtime internals (runtime_access.c):
 * the address of an array's memory (a host pointer, or a CUdeviceptr) and a
 * wait for its pending writes. */
uintptr_t kinterop_array_address(const kiln_array *a);
kiln_status kinterop_array_wait(const kiln_array *a);
/* Makes a's pending writes visible to a consumer's `stream`: on a backend
 * with streams the stream (a CUstream as an integer) waits on a's ready
 * event; elsewhere the host waits. */
kiln_status kinterop_array_order(const kiln_array *a, int64_t stream);
/* The device's memory in DLPack's words: its DLDeviceType, its ordinal (0
 * for host memory), and the stream a DLPack producer is asked to order on
 * (0 without streams); whether the host addresses its memory. */
int kinterop_device_type(const kiln_device *dev);
int kinterop_device_ordinal(const kiln_device *dev);
int64_t kinterop_device_stream(const kiln_device *dev);
bool kinterop_host_memory(const kiln_device *dev);
/* An array over a producer's memory (kdev_array_wrap); on a backend with
 * streams marked written at the current end of the device's stream.
 * release(managed) is called once: when the array is released, or at once
 * on failure. */
kiln_status kinterop_wrap(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                          const int64_t *shape, uintptr_t ptr, void (*release)(void *),
                          void *managed, kiln_array **out);

#endif
