/* core: status messages, configuration, logging, hashing, checked sizes.
 * The only door of src/core; prefix kcore_. */
#ifndef KILN_SRC_CORE_H
#define KILN_SRC_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kiln/kiln.h"

/* Internal headers are also read by the C++ tests. */
#ifdef __cplusplus
#define KCORE_NORETURN [[noreturn]]
extern "C" {
#else
#define KCORE_NORETURN _Noreturn
#endif

#if defined(__GNUC__)
#define KCORE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KCORE_PRINTF(f, a)
#endif

/* ---- libc I/O ----
 * The one check for libc calls that return -1 and set errno: on failure `st`
 * becomes KILN_ERR_IO "<op>: <path>: <what> failed: <reason>" and control
 * goes to `label`. */
#define KCORE_IO_CHECK(expr, op, path, what, label)                                                \
  do {                                                                                             \
    if ((expr) < 0) {                                                                              \
      st =                                                                                         \
          kcore_fail(KILN_ERR_IO, "%s: %s: %s failed: %s", (op), (path), (what), strerror(errno)); \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)
/* Writes all n bytes to fd, retrying short writes and EINTR: 0, or -1 with errno. */
int kcore_write_all(int fd, const void *data, size_t n);

/* ---- errors ---- */
/* Sets the thread's message and returns s, so `return kcore_fail(...)`. */
kiln_status kcore_fail(kiln_status s, const char *fmt, ...) KCORE_PRINTF(2, 3);
kiln_status kcore_vfail(kiln_status s, const char *fmt, va_list ap);
/* Prefixes the current message with more context: "<prefix>: <old message>". */
kiln_status kcore_fail_wrap(kiln_status s, const char *fmt, ...) KCORE_PRINTF(2, 3);

/* An invariant check that stays in every build type: a failure is a bug in
 * kiln, never a user error, so it aborts with the location. */
#define KCORE_ASSERT(cond)                                                \
  do {                                                                    \
    if (!(cond)) kcore_assert_failed(#cond, __FILE__, __LINE__, __func__); \
  } while (0)
KCORE_NORETURN void kcore_assert_failed(const char *expr, const char *file, int line, const char *fn);

/* ---- dtypes ---- */
/* KILN_OK for a valid dtype, else KILN_ERR_DTYPE with "<op>: invalid dtype N". */
kiln_status kcore_check_dtype(const char *op, kiln_dtype d);

/* ---- f16/bf16 <-> f32, inline for element loops ----
 * Every path is computed and the result picked by masks, with no branch, so
 * loops over these vectorize (a plain ?: on float values stays a branch
 * under -ftrapping-math). kiln_f16_to_f32 & co. are the exported wrappers.
 * Round to nearest even. NaNs as XLA and the hardware: f16 <-> f32 keeps the
 * sign and the payload bits that fit and sets the quiet bit; bf16 -> f32 is
 * the exact shift; f32 -> bf16 keeps sign and top payload, sets quiet. */
static inline uint32_t kcore_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float kcore_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* cond ? a : b as a bit mask select. */
static inline uint32_t kcore_select_u32(bool cond, uint32_t a, uint32_t b) {
  return b ^ ((a ^ b) & (0u - (uint32_t)cond));
}

static inline float kcore_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu; /* exponent and mantissa */
  /* Normal: move the fields up and rebias the exponent (127 - 15 = 112). */
  uint32_t normal = (em << 13) + (112u << 23);
  /* Subnormal (and zero): em * 2^-24, exact in f32 since em < 2^10. */
  uint32_t subnormal = kcore_f32_bits((float)(int32_t)em * 0x1p-24f);
  /* Infinity and NaN: all-ones exponent; a NaN gets the quiet bit. */
  uint32_t special = 0x7f800000u | (em << 13) | kcore_select_u32(em > 0x7c00u, 0x00400000u, 0u);
  uint32_t mag = kcore_select_u32(em < 0x0400u, subnormal, normal);
  mag = kcore_select_u32(em >= 0x7c00u, special, mag);
  return kcore_bits_f32(sign | mag);
}

static inline uint16_t kcore_f32_to_f16(float f) {
  uint32_t x = kcore_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  /* Normal f16 range: rebias, then round the 13 dropped bits to nearest even
   * (a carry out of the mantissa correctly bumps the exponent). */
  uint32_t r = a - (112u << 23);
  uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
  /* Below 2^-14: adding 0.5f makes the FPU round |f| to a multiple of 2^-24
   * (the ulp at 0.5) to nearest even; the low bits are then the f16 pattern,
   * 0x400 (the smallest normal) included. Needs the default rounding mode;
   * FTZ/DAZ are harmless (f32 subnormals round to zero either way). */
  uint32_t subnormal = kcore_f32_bits(kcore_bits_f32(a) + 0.5f) - 0x3f000000u;
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu); /* quiet, never infinity */
  uint32_t mag = kcore_select_u32(a < 0x38800000u, subnormal, normal);
  mag = kcore_select_u32(a >= 0x477ff000u, 0x7c00u, mag); /* >= 65520 overflows */
  mag = kcore_select_u32(a > 0x7f800000u, nan, mag);
  return (uint16_t)(sign | mag);
}

static inline float kcore_bf16_to_f32(uint16_t b) { return kcore_bits_f32((uint32_t)b << 16); }

static inline uint16_t kcore_f32_to_bf16(float f) {
  uint32_t x = kcore_f32_bits(f);
  /* Round the low half to nearest even; overflow carries into infinity and
   * f32 subnormals round like any other value. */
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x0040u; /* quiet, keeps sign and top payload */
  return (uint16_t)kcore_select_u32((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

/* ---- configuration (read once, by kiln_ctx_new) ---- */
#define KCORE_DEFAULT_COLLECTIVE_TIMEOUT_S 300.0
#define KCORE_DEFAULT_COLLECTIVE_BUCKET_BYTES ((uint64_t)32 << 20)

typedef struct kcore_config {
  kiln_options opts; /* every field resolved; strings point into the fields below */
  char *cache_dir;
  char *dump_dir;
  char *nccl_library;
} kcore_config;

/* Resolves explicit options (may be NULL) over the KILN_* variables over the
 * defaults. An invalid value is KILN_ERR_CONFIG naming the variable or field. */
kiln_status kcore_config_resolve(const kiln_options *explicit_opts, kcore_config *out);
void kcore_config_free(kcore_config *c);

/* ---- logging to stderr, filtered by the context's level ---- */
void kcore_log(kiln_log_level threshold, kiln_log_level level, const char *fmt, ...)
    KCORE_PRINTF(3, 4);

/* ---- hashing (FNV-1a 64, stable across runs and machines) ---- */
#define KCORE_HASH_SEED 0xcbf29ce484222325ull
uint64_t kcore_hash_bytes(uint64_t h, const void *data, size_t n);
uint64_t kcore_hash_u64(uint64_t h, uint64_t v);
uint64_t kcore_hash_str(uint64_t h, const char *s);

/* ---- checked arithmetic and small helpers ---- */
/* *out = a * b; false on overflow. */
bool kcore_mul_size(size_t a, size_t b, size_t *out);
/* Element count and byte size of a shape, checking negative dimensions
 * (KILN_ERR_SHAPE), the rank (KILN_ERR_SHAPE) and overflow
 * (KILN_ERR_SIZE_OVERFLOW); `op` names the caller in messages. */
kiln_status kcore_shape_bytes(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                              int64_t *elements, size_t *bytes);
/* Writes "f32[2,3]" into buf; returns buf. */
char *kcore_format_type(kiln_dtype dtype, int rank, const int64_t *shape, char *buf, size_t cap);
char *kcore_strdup(const char *s);
/* NVTX ranges around compile, launch, copy and library calls (nvtx.c). */
void kcore_range_push(const char *name);
void kcore_range_pop(void);

/* ---- memory held for abandoned threads (hold.c) ----
 * A runner that abandons a thread holds the ranges the thread may still
 * touch (token: the runner's handle for that thread). An allocator about to
 * free or reuse the block p of nbytes asks kcore_hold_defer_free first: true
 * means the block is now kiln's to free, once no hold overlaps it (at
 * kcore_hold_drop), and the caller must forget it. */
void kcore_hold_add(const void *token, const void *p, size_t nbytes);
bool kcore_hold_defer_free(void *p, size_t nbytes);
void kcore_hold_drop(const void *token); /* the thread came back: frees what waited */

/* Monotonic clock in nanoseconds. */
uint64_t kcore_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
