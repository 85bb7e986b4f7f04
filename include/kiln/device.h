/* Contexts and devices. */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/config.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_ctx kiln_ctx;
typedef struct kiln_device kiln_device;

/* Creates a context: resolves the options against the KILN_* variables (an
 * invalid value is KILN_ERR_CONFIG), then opens the backend. Asking for cuda
 * where none can be used is KILN_ERR_DEVICE saying why. opts may be NULL. */
kiln_status kiln_ctx_new(const kiln_options *opts, kiln_ctx **out);
/* Waits for pending work and frees the context. Arrays must be released
 * first; the ones still alive are reported at KILN_LOG=warn. */
void kiln_ctx_free(kiln_ctx *ctx);
/* The options as resolved (strings owned by the context). */
const kiln_options *kiln_ctx_options(const kiln_ctx *ctx);
kiln_backend kiln_ctx_backend(const kiln_ctx *ctx); /* CPU or CUDA */

int kiln_device_count(const kiln_ctx *ctx);
/* Borrows device `index`; KILN_ERR_OUT_OF_RANGE if there is none. */
kiln_status kiln_device_get(kiln_ctx *ctx, int index, kiln_device **out);

typedef struct kiln_device_info {
  int index;              /* position in the context */
  kiln_backend platform;  /* KILN_BACKEND_CPU or KILN_BACKEND_CUDA */
  char name[128];         /* "cpu:0", or the GPU's name */
  int compute_major;      /* CUDA compute capability; 0 on CPU */
  int compute_minor;
  int multiprocessors;    /* SMs on CUDA; worker threads on CPU */
  uint64_t total_memory;  /* bytes; on CPU the device's limit, or host RAM */
} kiln_device_info;

kiln_status kiln_device_info_get(const kiln_device *dev, kiln_device_info *out);
/* Bytes the device currently holds for kiln's arrays. */
kiln_status kiln_device_memory_in_use(const kiln_device *dev, uint64_t *bytes);
kiln_ctx *kiln_device_ctx(const kiln_device *dev);
int kiln_device_index(const kiln_device *dev);
/* Waits until all work queued on the device has finished. */
kiln_status kiln_device_synchronize(kiln_device *dev);

#ifdef __cplusplus
}
#endif
#endif
