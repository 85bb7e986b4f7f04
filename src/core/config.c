/* Options: explicit values over KILN_* variables over defaults, read once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/core.h"

#define KCORE_MAX_CPU_DEVICES 1024

void kiln_options_init(kiln_options *opts) {
  if (opts) memset(opts, 0, sizeof *opts);
}

static const char *const kcore_backend_names[] = {"default", "auto", "cpu", "cuda"};
static const char *const kcore_log_names[] = {"default", "off", "error", "warn", "info", "debug"};
static const char *const kcore_executor_names[] = {"default", "fused", "unfused", "reference"};

const char *kiln_backend_name(kiln_backend b) {
  return (unsigned)b < 4 ? kcore_backend_names[b] : "invalid";
}

const char *kiln_log_level_name(kiln_log_level l) {
  return (unsigned)l < 6 ? kcore_log_names[l] : "invalid";
}

const char *kiln_executor_name(kiln_executor e) {
  return (unsigned)e < 4 ? kcore_executor_names[e] : "invalid";
}

/* An unset or empty variable yields NULL. */
static const char *kcore_env(const char *name) {
  const char *v = getenv(name);
  return (v && *v) ? v : NULL;
}

/* Looks `text` up in names[first..count); -1 if absent. */
static int kcore_lookup(const char *text, const char *const *names, int first, int count) {
  for (int i = first; i < count; i++)
    if (strcasecmp(text, names[i]) == 0) return i;
  return -1;
}

static kiln_status kcore_resolve_backend(kiln_backend given, kiln_backend *out) {
  if ((unsigned)given > KILN_BACKEND_CUDA)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: options.backend %d is not a kiln_backend",
                      (int)given);
  if (given != KILN_BACKEND_DEFAULT) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env("KILN_BACKEND");
  if (!env) {
    *out = KILN_BACKEND_AUTO;
    return KILN_OK;
  }
  int i = kcore_lookup(env, kcore_backend_names, 1, 4);
  if (i < 0)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: KILN_BACKEND='%s' is invalid (expected auto, cpu or cuda)", env);
  *out = (kiln_backend)i;
  return KILN_OK;
}

static kiln_status kcore_resolve_log(kiln_log_level given, kiln_log_level *out) {
  if ((unsigned)given > KILN_LOG_DEBUG)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: options.log_level %d is not a kiln_log_level",
                      (int)given);
  if (given != KILN_LOG_DEFAULT) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env("KILN_LOG");
  if (!env) {
    *out = KILN_LOG_WARN;
    return KILN_OK;
  }
  int i = kcore_lookup(env, kcore_log_names, 1, 6);
  if (i < 0)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: KILN_LOG='%s' is invalid (expected off, error, warn, info or "
                      "debug)",
                      env);
  *out = (kiln_log_level)i;
  return KILN_OK;
}

static kiln_status kcore_resolve_devices(int given, int *out) {
  if (given < 0 || given > KCORE_MAX_CPU_DEVICES)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: options.num_cpu_devices=%d is outside [1, %d] (0: default)",
                      given, KCORE_MAX_CPU_DEVICES);
  if (given > 0) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env("KILN_NUM_CPU_DEVICES");
  if (!env) {
    *out = 1;
    return KILN_OK;
  }
  char *end = NULL;
  errno = 0;
  long v = strtol(env, &end, 10);
  if (errno || end == env || *end != '\0' || v < 1 || v > KCORE_MAX_CPU_DEVICES)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: KILN_NUM_CPU_DEVICES='%s' is invalid (expected an integer in "
                      "[1, %d])",
                      env, KCORE_MAX_CPU_DEVICES);
  *out = (int)v;
  return KILN_OK;
}

/* The cache lives under $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. */
static char *kcore_default_cache_dir(void) {
  const char *base = kcore_env("XDG_CACHE_HOME");
  const char *home = kcore_env("HOME");
  const char *suffix = base ? "/kiln" : "/.cache/kiln";
  if (!base) base = home ? home : "/tmp";
  size_t n = strlen(base) + strlen(suffix) + 1;
  char *s = malloc(n);
  if (s) {
    strcpy(s, base);
    strcat(s, suffix);
  }
  return s;
}

static kiln_status kcore_resolve_dir(const char *given, const char *var, bool has_default,
                                     char **out) {
  const char *src = given ? given : kcore_env(var);
  if (given && !*given)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: the %s option is an empty path", var);
  *out = src ? kcore_strdup(src) : (has_default ? kcore_default_cache_dir() : NULL);
  if ((src || has_default) && !*out)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory for %s", var);
  return KILN_OK;
}

static kiln_status kcore_resolve_executor(kiln_executor given, kiln_executor *out) {
  if ((unsigned)given > KILN_EXECUTOR_REFERENCE)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: options.executor %d is not a kiln_executor",
                      (int)given);
  if (given != KILN_EXECUTOR_DEFAULT) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env("KILN_EXECUTOR");
  int i = env ? kcore_lookup(env, kcore_executor_names, 1, 4) : KILN_EXECUTOR_FUSED;
  if (i < 0)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: KILN_EXECUTOR='%s' is invalid (expected fused, unfused or "
                      "reference)",
                      env);
  *out = (kiln_executor)i;
  return KILN_OK;
}

static kiln_status kcore_resolve_promotion(kiln_promotion_option given, kiln_promotion_option *out) {
  if ((unsigned)given > KILN_PROMOTION_OPT_STRICT)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: options.promotion %d is invalid", (int)given);
  *out = given == KILN_PROMOTION_DEFAULT ? KILN_PROMOTION_OPT_STANDARD : given;
  return KILN_OK;
}

kiln_status kcore_config_resolve(const kiln_options *explicit_opts, kcore_config *out) {
  kiln_options in;
  kiln_options_init(&in);
  if (explicit_opts) in = *explicit_opts;
  memset(out, 0, sizeof *out);
  kiln_status st;
  if ((st = kcore_resolve_backend(in.backend, &out->opts.backend)) ||
      (st = kcore_resolve_log(in.log_level, &out->opts.log_level)) ||
      (st = kcore_resolve_devices(in.num_cpu_devices, &out->opts.num_cpu_devices)) ||
      (st = kcore_resolve_promotion(in.promotion, &out->opts.promotion)) ||
      (st = kcore_resolve_executor(in.executor, &out->opts.executor)) ||
      (st = kcore_resolve_dir(in.cache_dir, "KILN_CACHE_DIR", true, &out->cache_dir)) ||
      (st = kcore_resolve_dir(in.dump_dir, "KILN_DUMP_DIR", false, &out->dump_dir))) {
    kcore_config_free(out);
    return st;
  }
  out->opts.cache_dir = out->cache_dir;
  out->opts.dump_dir = out->dump_dir;
  out->opts.cpu_device_memory = in.cpu_device_memory;
  return KILN_OK;
}

void kcore_config_free(kcore_config *c) {
  free(c->cache_dir);
  free(c->dump_dir);
  memset(c, 0, sizeof *c);
}
