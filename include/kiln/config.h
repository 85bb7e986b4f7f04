/* Context options. Zero/NULL fields mean "take the KILN_* variable, else the
 * built-in default"; the variables are read once, by kiln_ctx_new. */
#ifndef KILN_CONFIG_H
#define KILN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_backend {
  KILN_BACKEND_DEFAULT = 0, /* KILN_BACKEND, else auto */
  KILN_BACKEND_AUTO = 1,    /* CUDA when a driver and a device exist, else CPU */
  KILN_BACKEND_CPU = 2,
  KILN_BACKEND_CUDA = 3
} kiln_backend;

typedef enum kiln_log_level {
  KILN_LOG_DEFAULT = 0, /* KILN_LOG, else warn */
  KILN_LOG_OFF = 1,
  KILN_LOG_ERROR = 2,
  KILN_LOG_WARN = 3,
  KILN_LOG_INFO = 4,
  KILN_LOG_DEBUG = 5
} kiln_log_level;

typedef enum kiln_promotion_option {
  KILN_PROMOTION_DEFAULT = 0, /* standard */
  KILN_PROMOTION_OPT_STANDARD = 1,
  KILN_PROMOTION_OPT_STRICT = 2
} kiln_promotion_option;

/* How compiled programs run: fused kernels (the default), one kernel per
 * primitive (the unfused baseline), or the reference executor. */
typedef enum kiln_executor {
  KILN_EXECUTOR_DEFAULT = 0, /* KILN_EXECUTOR, else fused */
  KILN_EXECUTOR_FUSED = 1,
  KILN_EXECUTOR_UNFUSED = 2,
  KILN_EXECUTOR_REFERENCE = 3
} kiln_executor;

/* How f32 matmuls (dot_general) run on GPUs: exact f32 products (the
 * default, as the reference executor and JAX's Precision.HIGHEST), or TF32
 * tensor cores (what jax.jit does by default on Ampere and newer:
 * jax_default_matmul_precision "tensorfloat32"), about 10 bits of mantissa
 * per product. f16/bf16 inputs always accumulate in f32. */
typedef enum kiln_matmul_precision {
  KILN_MATMUL_DEFAULT = 0, /* KILN_MATMUL_PRECISION, else highest */
  KILN_MATMUL_HIGHEST = 1,
  KILN_MATMUL_TENSORFLOAT32 = 2
} kiln_matmul_precision;

/* Whether a program's results are bitwise the same from run to run on
 * GPUs (XLA's --xla_gpu_deterministic_ops): on, the scatters that combine
 * (scatter-add, the gradient of gather and take) sum repeated indices in
 * index order, one result element per thread; off (the default), with
 * atomics, in the hardware's order, much faster where updates are many.
 * The CPU backend is deterministic either way. */
typedef enum kiln_determinism {
  KILN_DETERMINISM_DEFAULT = 0, /* KILN_DETERMINISTIC, else off */
  KILN_DETERMINISM_OFF = 1,
  KILN_DETERMINISM_ON = 2
} kiln_determinism;

/* Whether every jitted call checks its floating-point results for NaN and
 * infinity (jax_debug_nans / jax_debug_infs together): on, the first
 * primitive that makes one is found by running the program again unfused and
 * the call fails with KILN_ERR_NONFINITE naming that equation. Costs a scan
 * of every result, so off by default. */
typedef enum kiln_debug_nans {
  KILN_DEBUG_NANS_DEFAULT = 0, /* KILN_DEBUG_NANS, else off */
  KILN_DEBUG_NANS_OFF = 1,
  KILN_DEBUG_NANS_ON = 2
} kiln_debug_nans;

typedef struct kiln_options {
  kiln_backend backend;       /* KILN_BACKEND: auto | cpu | cuda */
  int num_cpu_devices;        /* KILN_NUM_CPU_DEVICES: 1..1024, default 1 */
  const char *cache_dir;      /* KILN_CACHE_DIR, default $XDG_CACHE_HOME/kiln or ~/.cache/kiln */
  const char *dump_dir;       /* KILN_DUMP_DIR, default none (no dumps) */
  kiln_log_level log_level;   /* KILN_LOG: off | error | warn | info | debug */
  kiln_promotion_option promotion;
  uint64_t cpu_device_memory; /* bytes each virtual CPU device may hold; 0: unlimited */
  kiln_executor executor;     /* KILN_EXECUTOR: fused | unfused | reference */
  kiln_matmul_precision matmul_precision; /* KILN_MATMUL_PRECISION: highest | tensorfloat32 */
  kiln_determinism deterministic;         /* KILN_DETERMINISTIC: off | on */
  kiln_debug_nans debug_nans;             /* KILN_DEBUG_NANS: off | on */
  /* KILN_COLLECTIVE_TIMEOUT: seconds a collective waits for the other
   * participants before it fails with KILN_ERR_COLLECTIVE, and the longest
   * a CPU shard_map device may go without progress (a step, an equation, a
   * collective) before it is abandoned as stuck; finite and > 0, 0 means the
   * variable, else 300. */
  double collective_timeout_s;
  /* KILN_COLLECTIVE_BUCKET_BYTES: on CUDA meshes a pytree's psum packs its
   * leaves into buckets of about this many bytes, one NCCL call each; an
   * integer > 0, 0 means the variable, else 32 MiB. */
  uint64_t collective_bucket_bytes;
  /* KILN_NCCL_LIBRARY: the NCCL to load for CUDA meshes (a path: another
   * NCCL build, or a stand-in); NULL means the variable, else the process's
   * libnccl.so.2. */
  const char *nccl_library;
} kiln_options;

/* All fields zero: every setting from the environment or its default. */
void kiln_options_init(kiln_options *opts);

const char *kiln_backend_name(kiln_backend b); /* "default", "auto", "cpu", "cuda" */
const char *kiln_log_level_name(kiln_log_level l);
const char *kiln_executor_name(kiln_executor e); /* "default", "fused", "unfused", "reference" */
const char *kiln_matmul_precision_name(kiln_matmul_precision p); /* "default", "highest", ... */
const char *kiln_determinism_name(kiln_determinism d);            /* "default", "off", "on" */
const char *kiln_debug_nans_name(kiln_debug_nans d);              /* "default", "off", "on" */

#ifdef __cplusplus
}
#endif
#endif
