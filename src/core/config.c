/* Options: explicit values over KILN_* variables over defaults, read once. */
#include <errno.h>
#include <math.h>
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
static const char *const kcore_precision_names[] = {"default", "highest", "tensorfloat32"};
static const char *const kcore_determinism_names[] = {"default", "off", "on"};
static const char *const kcore_debug_nans_names[] = {"default", "off", "on"};

const char *kiln_backend_name(kiln_backend b) {
  return (unsigned)b < 4 ? kcore_backend_names[b] : "invalid";
}

const char *kiln_log_level_name(kiln_log_level l) {
  return (unsigned)l < 6 ? kcore_log_names[l] : "invalid";
}

const char *kiln_executor_name(kiln_executor e) {
  return (unsigned)e < 4 ? kcore_executor_names[e] : "invalid";
}

const char *kiln_matmul_precision_name(kiln_matmul_precision p) {
  return (unsigned)p < 3 ? kcore_precision_names[p] : "invalid";
}

const char *kiln_determinism_name(kiln_determinism d) {
  return (unsigned)d < 3 ? kcore_determinism_names[d] : "invalid";
}

const char *kiln_debug_nans_name(kiln_debug_nans d) {
  return (unsigned)d < 3 ? kcore_debug_nans_names[d] : "invalid";
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

/* An enum option: the explicit value, else its KILN_* variable (a name of
 * names[1..count)), else `fallback`; 0 (DEFAULT) means unset. */
typedef struct kcore_enum_option {
  const char *field, *type, *env;
  const char *const *names;
  int count, fallback;
  const char *expected; /* the valid names, for messages */
} kcore_enum_option;

static const kcore_enum_option kcore_backend_option = {
    "backend", "kiln_backend", "KILN_BACKEND", kcore_backend_names, 4, KILN_BACKEND_AUTO,
    "auto, cpu or cuda"};
static const kcore_enum_option kcore_log_option = {
    "log_level", "kiln_log_level", "KILN_LOG", kcore_log_names, 6, KILN_LOG_WARN,
    "off, error, warn, info or debug"};
static const kcore_enum_option kcore_executor_option = {
    "executor", "kiln_executor", "KILN_EXECUTOR", kcore_executor_names, 4, KILN_EXECUTOR_FUSED,
    "fused, unfused or reference"};
static const kcore_enum_option kcore_precision_option = {
    "matmul_precision", "kiln_matmul_precision", "KILN_MATMUL_PRECISION", kcore_precision_names, 3,
    KILN_MATMUL_HIGHEST, "highest or tensorfloat32"};
static const kcore_enum_option kcore_determinism_option = {
    "deterministic", "kiln_determinism", "KILN_DETERMINISTIC", kcore_determinism_names, 3,
    KILN_DETERMINISM_OFF, "off or on"};

static const kcore_enum_option kcore_debug_nans_option = {
    "debug_nans", "kiln_debug_nans", "KILN_DEBUG_NANS", kcore_debug_nans_names, 3,
    KILN_DEBUG_NANS_OFF, "off or on"};

static kiln_status kcore_resolve_enum(const kcore_enum_option *o, int given, int *out) {
  if (given < 0 || given >= o->count)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: options.%s %d is not a %s", o->field, given,
                      o->type);
  if (given != 0) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env(o->env);
  int i = env ? kcore_lookup(env, o->names, 1, o->count) : o->fallback;
  if (i < 0)
    return kcore_fail(KILN_ERR_CONFIG, "kiln_ctx_new: %s='%s' is invalid (expected %s)", o->env,
                      env, o->expected);
  *out = i;
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

/* Seconds: the explicit value (finite and > 0; 0 means unset), else the
 * variable (a finite decimal > 0), else the default. */
static kiln_status kcore_resolve_seconds(double given, const char *field, const char *var,
                                         double fallback, double *out) {
  if (given != 0) {
    if (!isfinite(given) || given < 0)
      return kcore_fail(KILN_ERR_CONFIG,
                        "kiln_ctx_new: options.%s=%g is invalid (expected a finite number of "
                        "seconds > 0, or 0 for %s)",
                        field, given, var);
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env(var);
  if (!env) {
    *out = fallback;
    return KILN_OK;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(env, &end);
  if (errno || end == env || *end != '\0' || !isfinite(v) || v <= 0)
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: %s='%s' is invalid (expected a finite number of seconds > 0; "
                      "default %g)",
                      var, env, fallback);
  *out = v;
  return KILN_OK;
}

/* A byte count: the explicit value (> 0; 0 means unset), else the variable
 * (a decimal integer > 0), else the default. */
static kiln_status kcore_resolve_bytes(uint64_t given, const char *var, uint64_t fallback,
                                       uint64_t *out) {
  if (given) {
    *out = given;
    return KILN_OK;
  }
  const char *env = kcore_env(var);
  if (!env) {
    *out = fallback;
    return KILN_OK;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(env, &end, 10);
  if (errno || end == env || *end != '\0' || v == 0 || env[0] == '-')
    return kcore_fail(KILN_ERR_CONFIG,
                      "kiln_ctx_new: %s='%s' is invalid (expected a number of bytes > 0; "
                      "default %llu)",
                      var, env, (unsigned long long)fallback);
  *out = (uint64_t)v;
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
  int backend = 0, log = 0, executor = 0, precision = 0, determinism = 0, debug_nans = 0;
  if ((st = kcore_resolve_enum(&kcore_backend_option, (int)in.backend, &backend)) ||
      (st = kcore_resolve_enum(&kcore_log_option, (int)in.log_level, &log)) ||
      (st = kcore_resolve_devices(in.num_cpu_devices, &out->opts.num_cpu_devices)) ||
      (st = kcore_resolve_promotion(in.promotion, &out->opts.promotion)) ||
      (st = kcore_resolve_enum(&kcore_executor_option, (int)in.executor, &executor)) ||
      (st = kcore_resolve_enum(&kcore_precision_option, (int)in.matmul_precision, &precision)) ||
      (st = kcore_resolve_enum(&kcore_determinism_option, (int)in.deterministic, &determinism)) ||
      (st = kcore_resolve_enum(&kcore_debug_nans_option, (int)in.debug_nans, &debug_nans)) ||
      (st = kcore_resolve_seconds(in.collective_timeout_s, "collective_timeout_s",
                                  "KILN_COLLECTIVE_TIMEOUT", KCORE_DEFAULT_COLLECTIVE_TIMEOUT_S,
                                  &out->opts.collective_timeout_s)) ||
      (st = kcore_resolve_dir(in.cache_dir, "KILN_CACHE_DIR", true, &out->cache_dir)) ||
      (st = kcore_resolve_dir(in.dump_dir, "KILN_DUMP_DIR", false, &out->dump_dir)) ||
      (st = kcore_resolve_dir(in.nccl_library, "KILN_NCCL_LIBRARY", false, &out->nccl_library)) ||
      (st = kcore_resolve_bytes(in.collective_bucket_bytes, "KILN_COLLECTIVE_BUCKET_BYTES",
                                KCORE_DEFAULT_COLLECTIVE_BUCKET_BYTES,
                                &out->opts.collective_bucket_bytes))) {
    kcore_config_free(out);
    return st;
  }
  out->opts.backend = (kiln_backend)backend;
  out->opts.log_level = (kiln_log_level)log;
  out->opts.executor = (kiln_executor)executor;
  out->opts.matmul_precision = (kiln_matmul_precision)precision;
  out->opts.deterministic = (kiln_determinism)determinism;
  out->opts.debug_nans = (kiln_debug_nans)debug_nans;
  out->opts.cache_dir = out->cache_dir;
  out->opts.dump_dir = out->dump_dir;
  out->opts.nccl_library = out->nccl_library;
  out->opts.cpu_device_memory = in.cpu_device_memory;
  return KILN_OK;
}

void kcore_config_free(kcore_config *c) {
  free(c->cache_dir);
  free(c->dump_dir);
  free(c->nccl_library);
  memset(c, 0, sizeof *c);
}
