/* Contexts: resolve the options, open a backend, hand out devices. */
#include <stdlib.h>
#include "runtime/runtime.h"

kiln_status kiln_ctx_new(const kiln_options *opts, kiln_ctx **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_ctx_new: out is NULL");
  *out = NULL;
  kiln_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
  kiln_status st = kcore_config_resolve(opts, &ctx->config);
  if (st == KILN_OK) st = krt_open_backend(ctx);
  if (st != KILN_OK) {
    kcore_config_free(&ctx->config);
    free(ctx);
    return st;
  }
  kdev_backend_adopt(&ctx->be, ctx);
  KRT_LOG(ctx, KILN_LOG_INFO, "context: backend %s, %d device(s)", kiln_backend_name(ctx->be.kind),
          ctx->be.num_devices);
  *out = ctx;
  return KILN_OK;
}

void kiln_ctx_free(kiln_ctx *ctx) {
  if (!ctx) return;
  for (int i = 0; i < ctx->be.num_devices; i++) kiln_device_synchronize(&ctx->be.devices[i]);
  int64_t live = atomic_load(&ctx->be.live_arrays);
  if (live != 0)
    KRT_LOG(ctx, KILN_LOG_WARN, "kiln_ctx_free: %lld array(s) still alive; their buffers are lost",
            (long long)live);
  if (ctx->spmd_free) ctx->spmd_free(ctx->spmd_state);
  krt_ctx_kcache_free(ctx);
  if (ctx->be.close) ctx->be.close(&ctx->be);
  kcore_config_free(&ctx->config);
  free(ctx);
}

const kiln_options *kiln_ctx_options(const kiln_ctx *ctx) {
  if (!ctx) kcore_fail(KILN_ERR_ARGUMENT, "kiln_ctx_options: the context is NULL");
  return ctx ? &ctx->config.opts : NULL;
}

kiln_backend kiln_ctx_backend(const kiln_ctx *ctx) {
  return ctx ? ctx->be.kind : KILN_BACKEND_DEFAULT;
}

int kiln_device_count(const kiln_ctx *ctx) { return ctx ? ctx->be.num_devices : 0; }

kiln_status kiln_device_get(kiln_ctx *ctx, int index, kiln_device **out) {
  if (!ctx || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_get: ctx or out is NULL");
  if (index < 0 || index >= ctx->be.num_devices)
    return kcore_fail(KILN_ERR_OUT_OF_RANGE,
                      "kiln_device_get: device index %d is out of range (the %s backend has %d "
                      "device(s))",
                      index, kiln_backend_name(ctx->be.kind), ctx->be.num_devices);
  *out = &ctx->be.devices[index];
  return KILN_OK;
}
