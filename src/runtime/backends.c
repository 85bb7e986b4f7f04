/* The registered backends: the one place the runtime names them. A new
 * backend is its folder under src/backend plus one row here; everything
 * else reaches it through the device, executable and collective ops and its
 * capabilities (src/device/device.h). */
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "runtime/runtime.h"

/* In the order `auto` tries them: the first that opens serves. */
static const krt_backend_entry krt_backends[] = {
    {"cuda", KILN_BACKEND_CUDA, kcuda_backend_open, kcuda_lowered_text, "sm_90"},
    {"cpu", KILN_BACKEND_CPU, kcpu_backend_open, kcpu_lowered_text, "host"},
};

#define KRT_N_BACKENDS ((int)(sizeof krt_backends / sizeof krt_backends[0]))

const krt_backend_entry *krt_backend_find(const char *name, size_t len) {
  for (int i = 0; i < KRT_N_BACKENDS; i++)
    if (strlen(krt_backends[i].name) == len && strncmp(krt_backends[i].name, name, len) == 0)
      return &krt_backends[i];
  return NULL;
}

static const krt_backend_entry *krt_backend_of(kiln_backend kind) {
  for (int i = 0; i < KRT_N_BACKENDS; i++)
    if (krt_backends[i].kind == kind) return &krt_backends[i];
  return NULL;
}

/* auto: the first backend that opens (each refusal logged at info). */
kiln_status krt_open_backend(kiln_ctx *ctx) {
  kiln_backend want = ctx->config.opts.backend;
  if (want != KILN_BACKEND_AUTO) {
    const krt_backend_entry *e = krt_backend_of(want);
    if (!e)
      return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: no backend %s is registered",
                        kiln_backend_name(want));
    return e->open(&ctx->config, &ctx->be);
  }
  kiln_status st = KILN_ERR_DEVICE;
  for (int i = 0; i < KRT_N_BACKENDS; i++) {
    if ((st = krt_backends[i].open(&ctx->config, &ctx->be)) == KILN_OK) return KILN_OK;
    if (i + 1 < KRT_N_BACKENDS) {
      KRT_LOG(ctx, KILN_LOG_INFO, "backend auto: %s is unavailable (%s); trying %s",
              krt_backends[i].name, kiln_last_error(), krt_backends[i + 1].name);
      kiln_clear_error();
    }
  }
  return st;
}

/* "<backend>:<arch>" (e.g. "cuda:sm_90"): the backend's lowering for that
 * architecture, which needs no device. */
kiln_status krt_lower_text(krt_program *p, const char *target, char **text) {
  const char *colon = strchr(target, ':');
  size_t len = colon ? (size_t)(colon - target) : strlen(target);
  const krt_backend_entry *e = krt_backend_find(target, len);
  if (!e)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "target '%s' names no registered backend (expected cuda:sm_<XY> or cpu:host)",
                      target);
  if (!e->lower_text)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "target '%s': the %s backend lowers only when compiling for one of its "
                      "devices (kiln_lowered_compile, then kiln_compiled_as_text)",
                      target, e->name);
  if (!colon || !colon[1])
    return kcore_fail(KILN_ERR_ARGUMENT, "target '%s' names no architecture (e.g. %s:%s)",
                      target, e->name, e->example_arch);
  /* The passes compile runs for a fusing executor (they are idempotent). */
  kiln_status st = krt_run_passes(p, true);
  kcache *cache = NULL;
  if (!st) st = krt_ctx_kcache(p->ctx, &cache);
  if (!st) st = e->lower_text(&p->ctx->config, cache, p->prog, p->donated, colon + 1, text);
  return st;
}
