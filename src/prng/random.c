/* Random draws on host buffers: bits, uniform, normal and bernoulli, with the
 * arithmetic jax.random uses, in the rounding XLA:CPU applies to it. */
#include <math.h>
#include <string.h>
#include "core/core.h"
#include "prng/prng.h"
#include "../../kernels/threefry.h"

/* ---- argument checks ---- */

/* Validates a draw of `dtype` over `shape` into `out` and yields its element
 * count. `op` names the caller in messages. */
static kiln_status draw_check(const char *op, const uint32_t key[2], kiln_dtype dtype, int rank,
                              const int64_t *shape, const void *out, size_t *count) {
  if (!key) return kcore_fail(KILN_ERR_ARGUMENT, "%s: key is NULL", op);
  int64_t n;
  kiln_status s = kcore_shape_bytes(op, dtype, rank, shape, &n, NULL);
  if (s != KILN_OK) return s;
  if (n > 0 && !out) {
    char t[160];
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: output buffer for %s is NULL", op,
                      kcore_format_type(dtype, rank, shape, t, sizeof t));
  }
  *count = (size_t)n;
  return KILN_OK;
}

static kiln_status float_check(const char *op, kiln_dtype dtype) {
  if (dtype == KILN_F16 || dtype == KILN_BF16 || dtype == KILN_F32 || dtype == KILN_F64)
    return KILN_OK;
  if (!kiln_dtype_is_valid(dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  return kcore_fail(KILN_ERR_DTYPE, "%s: dtype %s is not float16, bfloat16, float32 or float64", op,
                    kiln_dtype_name(dtype));
}

/* ---- random bits ---- */

kiln_status kprng_random_bits(const uint32_t key[2], int bit_width, int rank, const int64_t *shape,
                              void *out) {
  kiln_dtype dtype;
  switch (bit_width) {
    case 8: dtype = KILN_U8; break;
    case 16: dtype = KILN_U16; break;
    case 32: dtype = KILN_U32; break;
    case 64: dtype = KILN_U64; break;
    default:
      return kcore_fail(KILN_ERR_ARGUMENT, "random_bits: bit width %d is not 8, 16, 32 or 64",
                        bit_width);
  }
  size_t n;
  kiln_status s = draw_check("random_bits", key, dtype, rank, shape, out, &n);
  if (s != KILN_OK) return s;
  const uint32_t k0 = key[0], k1 = key[1];
  /* Narrow widths truncate the 32-bit draw, as JAX's convert does. */
  for (size_t i = 0; i < n; i++) {
    switch (bit_width) {
      case 8: ((uint8_t *)out)[i] = (uint8_t)kiln_threefry_bits32_at(k0, k1, i); break;
      case 16: ((uint16_t *)out)[i] = (uint16_t)kiln_threefry_bits32_at(k0, k1, i); break;
      case 32: ((uint32_t *)out)[i] = kiln_threefry_bits32_at(k0, k1, i); break;
      default: ((uint64_t *)out)[i] = kiln_threefry_bits64_at(k0, k1, i); break;
    }
  }
  return KILN_OK;
}

/* ---- float helpers ---- */

static float f32_from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static double f64_from_bits(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

/* x rounded to dtype, widened back to double (exact). Half types round
 * through f32, as JAX does with a Python float under x64=False; the result
 * then differs from a direct rounding only next to a half-way point. */
static double round_to(kiln_dtype dtype, double x) {
  switch (dtype) {
    case KILN_F16: return kiln_f16_to_f32(kiln_f32_to_f16((float)x));
    case KILN_BF16: return kiln_bf16_to_f32(kiln_f32_to_bf16((float)x));
    case KILN_F32: return (float)x;
    default: return x;
  }
}

/* Stores v, already representable in dtype, as element i of out. */
static void store(kiln_dtype dtype, void *out, size_t i, double v) {
  switch (dtype) {
    case KILN_F16: ((uint16_t *)out)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_BF16: ((uint16_t *)out)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_F32: ((float *)out)[i] = (float)v; break;
    default: ((double *)out)[i] = v; break;
  }
}

/* ---- uniform ---- */

/* The affine map of a uniform draw, with both ends rounded to the dtype. */
typedef struct uniform_range {
  double lo;   /* minval in dtype */
  double span; /* maxval - minval, computed in dtype as XLA folds it */
} uniform_range;

static uniform_range uniform_range_of(kiln_dtype dtype, double minval, double maxval) {
  uniform_range r;
  r.lo = round_to(dtype, minval);
  r.span = round_to(dtype, round_to(dtype, maxval) - r.lo);
  return r;
}

/* A float in [0, 1): the draw's top bits become the mantissa of a number in
 * [1, 2), whose subtraction of 1 is exact. Half types use 16 and 8 bits,
 * since JAX draws at least 8 bits and bf16 has only 7 mantissa bits. */
static double unit_at(kiln_dtype dtype, uint32_t k0, uint32_t k1, uint64_t i) {
  switch (dtype) {
    case KILN_F16: {
      uint16_t b = (uint16_t)kiln_threefry_bits32_at(k0, k1, i);
      return kiln_f16_to_f32((uint16_t)((b >> 6) | 0x3c00u)) - 1.0f;
    }
    case KILN_BF16: {
      uint16_t b = (uint8_t)kiln_threefry_bits32_at(k0, k1, i);
      return kiln_bf16_to_f32((uint16_t)((b >> 1) | 0x3f80u)) - 1.0f;
    }
    case KILN_F32:
      return f32_from_bits((kiln_threefry_bits32_at(k0, k1, i) >> 9) | 0x3f800000u) - 1.0f;
    default:
      return f64_from_bits((kiln_threefry_bits64_at(k0, k1, i) >> 12) | 0x3ff0000000000000ull) -
             1.0;
  }
}

/* lax.max(minval, u * span + minval) in dtype. XLA:CPU contracts the
 * multiply-add into an FMA for f16 (widened to f32), f32 and f64, but rounds
 * bf16 to bf16 after each operation. */
static double uniform_at(kiln_dtype dtype, uint32_t k0, uint32_t k1, uint64_t i, uniform_range r) {
  double u = unit_at(dtype, k0, k1, i), v;
  switch (dtype) {
    case KILN_F16: v = round_to(dtype, fmaf((float)u, (float)r.span, (float)r.lo)); break;
    case KILN_BF16: v = round_to(dtype, (float)round_to(dtype, u * r.span) + (float)r.lo); break;
    case KILN_F32: v = fmaf((float)u, (float)r.span, (float)r.lo); break;
    default: v = fma(u, r.span, r.lo); break;
  }
  return v < r.lo ? r.lo : v; /* a NaN v stays NaN, as lax.max propagates it */
}

kiln_status kprng_uniform(const uint32_t key[2], kiln_dtype dtype, int rank, const int64_t *shape,
                          double minval, double maxval, void *out) {
  size_t n;
  kiln_status s = float_check("random_uniform", dtype);
  if (s == KILN_OK) s = draw_check("random_uniform", key, dtype, rank, shape, out, &n);
  if (s != KILN_OK) return s;
  const uniform_range r = uniform_range_of(dtype, minval, maxval);
  for (size_t i = 0; i < n; i++) store(dtype, out, i, uniform_at(dtype, key[0], key[1], i, r));
  return KILN_OK;
}

/* ---- normal ---- */

/* sqrt(2) * erf_inv(u) for u uniform on [nextafter(-1, 0), 1) in dtype. Half
 * types run erf_inv in f32 (XLA widens them) and round after each step. */
static double normal_at(kiln_dtype dtype, uint32_t k0, uint32_t k1, uint64_t i, uniform_range r,
                        double sqrt2) {
  double u = uniform_at(dtype, k0, k1, i, r);
  double e = dtype == KILN_F64 ? kprng_erf_inv_f64(u) : (double)kprng_erf_inv_f32((float)u);
  return round_to(dtype, sqrt2 * round_to(dtype, e));
}

/* nextafter(-1, 0) in dtype: -1 + 2^-(nmant + 1). */
static double open_minus_one(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_F16: return -1.0 + 0x1p-11;
    case KILN_BF16: return -1.0 + 0x1p-8;
    case KILN_F32: return -1.0 + 0x1p-24;
    default: return -1.0 + 0x1p-53;
  }
}

kiln_status kprng_normal(const uint32_t key[2], kiln_dtype dtype, int rank, const int64_t *shape,
                         void *out) {
  size_t n;
  kiln_status s = float_check("random_normal", dtype);
  if (s == KILN_OK) s = draw_check("random_normal", key, dtype, rank, shape, out, &n);
  if (s != KILN_OK) return s;
  const uniform_range r = uniform_range_of(dtype, open_minus_one(dtype), 1.0);
  const double sqrt2 = round_to(dtype, sqrt(2.0));
  for (size_t i = 0; i < n; i++)
    store(dtype, out, i, normal_at(dtype, key[0], key[1], i, r, sqrt2));
  return KILN_OK;
}

/* ---- bernoulli ---- */

kiln_status kprng_bernoulli(const uint32_t key[2], kiln_dtype p_dtype, double p, int rank,
                            const int64_t *shape, bool *out) {
  size_t n;
  kiln_status s = float_check("random_bernoulli", p_dtype);
  if (s == KILN_OK) s = draw_check("random_bernoulli", key, KILN_BOOL, rank, shape, out, &n);
  if (s != KILN_OK) return s;
  const uniform_range r = uniform_range_of(p_dtype, 0.0, 1.0);
  const double pt = round_to(p_dtype, p); /* JAX converts p to its own dtype */
  for (size_t i = 0; i < n; i++) out[i] = uniform_at(p_dtype, key[0], key[1], i, r) < pt;
  return KILN_OK;
}
