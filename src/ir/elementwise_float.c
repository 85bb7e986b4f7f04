/* The elementwise reference evaluators' float ops, as XLA:CPU computes them
 * (see elementwise_eval.h), and their rows. */
#include "ir/elementwise_eval.h"
#include "prng/prng.h"
#include "../../kernels/special.h"

/* ---- float ops ---- */

static inline double kir_ew_f_neg(const kir_ew_op *op, double a) {
  (void)op;
  return -a;
}

static inline double kir_ew_f_stop_gradient(const kir_ew_op *op, double a) {
  (void)op;
  return a;
}

static inline double kir_ew_f_copy(const kir_ew_op *op, double a) {
  (void)op;
  return a;
}

static inline double kir_ew_f_abs(const kir_ew_op *op, double a) {
  (void)op;
  return fabs(a);
}

static inline double kir_ew_f_sign(const kir_ew_op *op, double a) {
  a = kir_ew_daz(op->dtype, a);
  return isnan(a) || a == 0 ? a : copysign(1.0, a);
}

static inline double kir_ew_f_floor(const kir_ew_op *op, double a) {
  return floor(kir_ew_daz(op->dtype, a));
}

static inline double kir_ew_f_ceil(const kir_ew_op *op, double a) {
  return ceil(kir_ew_daz(op->dtype, a));
}

/* lax.RoundingMethod 0: half away from zero; 1: half to even. */
static inline double kir_ew_f_round(const kir_ew_op *op, double a) {
  a = kir_ew_daz(op->dtype, a);
  double r = round(a);
  if (op->params->round.rounding_method == 1 && fabs(r - a) == 0.5) r = 2.0 * round(a / 2.0);
  return r;
}

static inline double kir_ew_f_sqrt(const kir_ew_op *op, double a) {
  return sqrt(kir_ew_daz(op->dtype, a)); /* never subnormal: no FTZ */
}

static inline double kir_ew_f_rsqrt(const kir_ew_op *op, double a) {
  return kir_ew_math(op->dtype, 1.0 / sqrt(kir_ew_daz(op->dtype, a)));
}

/* JAX lowers exp2(x) to exp(log(2) * x) in x's dtype. */
static inline double kir_ew_f_exp2(const kir_ew_op *op, double a) {
  kiln_dtype dt = op->dtype;
  double t = kir_ew_to_dtype(dt, kir_ew_to_dtype(dt, 0.69314718055994530942) * a);
  return kir_ew_math(dt, exp(kir_ew_daz(dt, t)));
}

/* JAX lowers logistic(x) to 1 / (1 + exp(-x)), each step in x's dtype. */
static inline double kir_ew_f_logistic(const kir_ew_op *op, double a) {
  kiln_dtype dt = op->dtype;
  double e = kir_ew_to_dtype(dt, kir_ew_math(dt, exp(-kir_ew_daz(dt, a))));
  return kir_ew_to_dtype(dt, 1.0 / kir_ew_to_dtype(dt, 1.0 + e));
}

/* XLA's own erf_inv (src/prng); half types use the f32 one. */
static inline double kir_ew_f_erf_inv(const kir_ew_op *op, double a) {
  a = kir_ew_daz(op->dtype, a);
  return op->dtype == KILN_F64 ? kprng_erf_inv_f64(a) : (double)kprng_erf_inv_f32((float)a);
}

/* The libm-backed transcendentals: f(a) with DAZ, rounded as XLA rounds. */
/* clang-format off */
#define KIR_EW_LIBM(X)                                                                         \
  X(exp) X(expm1) X(log) X(log1p) X(cbrt) X(tanh) X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) \
  X(asinh) X(acosh) X(atanh) X(erf) X(erfc) X(lgamma)
/* clang-format on */
#define KIR_EW_DEFINE_LIBM(fn)                                        \
  static inline double kir_ew_f_##fn(const kir_ew_op *op, double a) { \
    return kir_ew_math(op->dtype, fn(kir_ew_daz(op->dtype, a)));      \
  }
KIR_EW_LIBM(KIR_EW_DEFINE_LIBM)
#undef KIR_EW_DEFINE_LIBM

/* JAX lowers sinh and cosh through chlo, which computes them from
 * e^(x + log(1/2)) and e^(log(1/2) - x); rounding the sums costs a few ulps
 * for large |x|, so the same steps are taken here (in f32 for the half
 * types). For |x| < 1 sinh is (m + m / (m + 1)) / 2 with m = expm1(x). */
static inline double kir_ew_f_sinh(const kir_ew_op *op, double a) {
  kiln_dtype dt = op->dtype;
  a = kir_ew_daz(dt, a);
  if (fabs(a) < 1) {
    double m = kir_ew_math(dt, expm1(a));
    double r = kir_ew_math(dt, m / kir_ew_math(dt, m + 1.0));
    return kir_ew_math(dt, 0.5 * kir_ew_math(dt, m + r));
  }
  double h = kir_ew_math(dt, -0.69314718055994530942); /* log(1/2) */
  double up = kir_ew_math(dt, exp(kir_ew_math(dt, a + h)));
  return kir_ew_math(dt, up - kir_ew_math(dt, exp(kir_ew_math(dt, h - a))));
}

static inline double kir_ew_f_cosh(const kir_ew_op *op, double a) {
  kiln_dtype dt = op->dtype;
  a = kir_ew_daz(dt, a);
  double h = kir_ew_math(dt, -0.69314718055994530942);
  double up = kir_ew_math(dt, exp(kir_ew_math(dt, a + h)));
  return kir_ew_math(dt, up + kir_ew_math(dt, exp(kir_ew_math(dt, h - a))));
}

static inline uint64_t kir_ew_f_is_finite(const kir_ew_op *op, double a) {
  (void)op;
  return isfinite(a) != 0;
}

/* IEEE arithmetic under DAZ and FTZ. */
#define KIR_EW_ARITH(X) X(add, +) X(sub, -) X(mul, *) X(div, /)
#define KIR_EW_DEFINE_ARITH(name, OP)                                             \
  static inline double kir_ew_f_##name(const kir_ew_op *op, double a, double b) { \
    kiln_dtype dt = op->dtype;                                                    \
    return kir_ew_ftz(dt, kir_ew_daz(dt, a) OP kir_ew_daz(dt, b));                \
  }
KIR_EW_ARITH(KIR_EW_DEFINE_ARITH)
#undef KIR_EW_DEFINE_ARITH

static inline double kir_ew_f_square(const kir_ew_op *op, double a) {
  return kir_ew_f_mul(op, a, a);
}

/* integer_pow as JAX lowers it: repeated squaring, each product rounded to
 * x's dtype; a negative power is 1 / x^-y, y = 0 gives 1. */
static inline double kir_ew_f_integer_pow(const kir_ew_op *op, double a) {
  int64_t y = op->params->integer_pow.y;
  uint64_t k = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
  double acc = 1.0;
  for (bool first = true; k; k >>= 1) {
    if (k & 1) {
      acc = first ? a : kir_ew_to_dtype(op->dtype, kir_ew_f_mul(op, acc, a));
      first = false;
    }
    if (k > 1) a = kir_ew_to_dtype(op->dtype, kir_ew_f_mul(op, a, a));
  }
  return y < 0 ? kir_ew_f_div(op, 1.0, acc) : acc;
}

/* XLA's digamma in double (kernels/special.h), rounded as XLA rounds. */
static inline double kir_ew_f_digamma(const kir_ew_op *op, double a) {
  return kir_ew_math(op->dtype, kiln_digamma_f64(kir_ew_daz(op->dtype, a)));
}

/* On the dtype's own format: f16 and bf16 are exact in the double. */
static inline double kir_ew_f_reduce_precision(const kir_ew_op *op, double a) {
  const kir_p_reduce_precision *r = &op->params->reduce_precision;
  int e = op->dtype == KILN_F64 ? 11 : op->dtype == KILN_F16 ? 5 : 8;
  int m = op->dtype == KILN_F64 ? 52 : op->dtype == KILN_F16 ? 10 : op->dtype == KILN_BF16 ? 7 : 23;
  return kiln_reduce_precision_f64(a, e, m, (int)r->exponent_bits, (int)r->mantissa_bits);
}

/* fmod is exact. XLA's (libm's, which tests the divisor for zero as a
 * float but computes on bits) reads a subnormal divisor as zero, and keeps
 * a subnormal dividend or remainder. */
static inline double kir_ew_f_rem(const kir_ew_op *op, double a, double b) {
  return fmod(a, kir_ew_daz(op->dtype, b));
}

/* NaN if either is NaN, and -0 < +0 (IEEE 754-2019 maximum/minimum). */
static inline double kir_ew_f_max(const kir_ew_op *op, double a, double b) {
  a = kir_ew_daz(op->dtype, a);
  b = kir_ew_daz(op->dtype, b);
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static inline double kir_ew_f_min(const kir_ew_op *op, double a, double b) {
  a = kir_ew_daz(op->dtype, a);
  b = kir_ew_daz(op->dtype, b);
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

static inline double kir_ew_f_atan2(const kir_ew_op *op, double a, double b) {
  kiln_dtype dt = op->dtype;
  return kir_ew_math(dt, atan2(kir_ew_daz(dt, a), kir_ew_daz(dt, b)));
}

/* The bits of a value of float dtype dt, and back. */
static inline uint64_t kir_ew_float_bits(kiln_dtype dt, double v) {
  switch (dt) {
    case KILN_F16: return kir_ew_f64_to_f16(v);
    case KILN_BF16: return kcore_f32_to_bf16((float)v);
    case KILN_F32: return kcore_f32_bits((float)v);
    default: {
      uint64_t b;
      memcpy(&b, &v, sizeof b);
      return b;
    }
  }
}

static inline double kir_ew_bits_float(kiln_dtype dt, uint64_t b) {
  switch (dt) {
    case KILN_F16: return kcore_f16_to_f32((uint16_t)b);
    case KILN_BF16: return kcore_bf16_to_f32((uint16_t)b);
    case KILN_F32: return kcore_bits_f32((uint32_t)b);
    default: {
      double v;
      memcpy(&v, &b, sizeof v);
      return v;
    }
  }
}

/* XLA's nextafter: equal operands (compared as floats, so under DAZ) give
 * b; otherwise a steps one ulp toward b on its bit pattern, and a zero a
 * becomes the smallest subnormal signed like b. */
static inline double kir_ew_f_nextafter(const kir_ew_op *op, double a, double b) {
  kiln_dtype dt = op->dtype;
  if (isnan(a) || isnan(b)) return NAN;
  if (kir_ew_daz(dt, a) == kir_ew_daz(dt, b)) return b;
  uint64_t sign = 1ull << (kiln_dtype_size(dt) * 8 - 1);
  uint64_t x = kir_ew_float_bits(dt, a), y = kir_ew_float_bits(dt, b), r;
  if ((x & ~sign) == 0)
    r = (y & sign) | 1u;
  else if ((x & sign) != (y & sign) || (x & ~sign) > (y & ~sign))
    r = x - 1;
  else
    r = x + 1;
  return kir_ew_bits_float(dt, r);
}

/* Comparisons read operands under DAZ. */
#define KIR_EW_DEFINE_FCMP(name, OP)                                                \
  static inline uint64_t kir_ew_f_##name(const kir_ew_op *op, double a, double b) { \
    return kir_ew_daz(op->dtype, a) OP kir_ew_daz(op->dtype, b);                    \
  }
KIR_EW_COMPARE(KIR_EW_DEFINE_FCMP)
#undef KIR_EW_DEFINE_FCMP

/* ---- rows ---- */

/* X(PRIM, scalar op, row shape) */
/* clang-format off */
#define KIR_EW_FLOAT_OPS(X)                                                                 \
  X(NEG, f_neg, F1) X(ABS, f_abs, F1) X(SIGN, f_sign, F1) X(FLOOR, f_floor, F1)             \
  X(CEIL, f_ceil, F1) X(ROUND, f_round, F1) X(EXP, f_exp, F1) X(EXP2, f_exp2, F1)           \
  X(EXPM1, f_expm1, F1) X(LOG, f_log, F1) X(LOG1P, f_log1p, F1) X(SQRT, f_sqrt, F1)         \
  X(RSQRT, f_rsqrt, F1) X(CBRT, f_cbrt, F1) X(TANH, f_tanh, F1) X(LOGISTIC, f_logistic, F1) \
  X(SIN, f_sin, F1) X(COS, f_cos, F1) X(TAN, f_tan, F1) X(ASIN, f_asin, F1)                 \
  X(ACOS, f_acos, F1) X(ATAN, f_atan, F1) X(SINH, f_sinh, F1) X(COSH, f_cosh, F1)           \
  X(ASINH, f_asinh, F1) X(ACOSH, f_acosh, F1) X(ATANH, f_atanh, F1) X(ERF, f_erf, F1)       \
  X(ERF_INV, f_erf_inv, F1) X(IS_FINITE, f_is_finite, FB1) X(ADD, f_add, F2)                \
  X(SUB, f_sub, F2) X(MUL, f_mul, F2) X(DIV, f_div, F2) X(REM, f_rem, F2) X(MAX, f_max, F2) \
  X(MIN, f_min, F2) X(ATAN2, f_atan2, F2) X(NEXTAFTER, f_nextafter, F2) X(EQ, f_eq, FB2)    \
  X(NE, f_ne, FB2) X(LT, f_lt, FB2) X(LE, f_le, FB2) X(GT, f_gt, FB2) X(GE, f_ge, FB2)    \
  X(STOP_GRADIENT, f_stop_gradient, F1) X(SQUARE, f_square, F1)                             \
  X(INTEGER_POW, f_integer_pow, F1) X(ERFC, f_erfc, F1) X(LGAMMA, f_lgamma, F1)             \
  X(DIGAMMA, f_digamma, F1) X(REDUCE_PRECISION, f_reduce_precision, F1) X(COPY, f_copy, F1)
/* clang-format on */

KIR_EW_FLOAT_OPS(KIR_EW_DEFINE_ROW)

/* clamp(lo, x, hi) = min(max(lo, x), hi), NaN from any operand. */
static void kir_ew_row_f_clamp(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  for (int64_t i = 0; i < n; i++)
    y[i].f = kir_ew_f_min(op, kir_ew_f_max(op, x[0][i].f, x[1][i].f), x[2][i].f);
}

/* pow(x, y): an integer exponent is first converted to x's dtype (JAX's
 * lowering), then XLA's float pow, which reads subnormal operands as they
 * are (but see the golden script about negative subnormal bases) and
 * flushes a subnormal result. */
static void kir_ew_row_pow(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                           kir_ew_val *y) {
  kiln_dtype dt = op->dtype, et = op->aux_dtype;
  bool int_exponent = !kiln_dtype_is_float(et), signed_exponent = kiln_dtype_is_signed(et);
  for (int64_t i = 0; i < n; i++) {
    double e = x[1][i].f;
    if (int_exponent) e = kir_ew_to_dtype(dt, kir_ew_int_to_float(x[1][i], signed_exponent, dt));
    y[i].f = kir_ew_ftz(dt, kir_ew_math(dt, pow(x[0][i].f, e)));
  }
}

/* The row of each primitive for float operands (NULL where the rule refuses
 * floats). */
const kir_ew_row_fn kir_ew_float_rows[KIR_NUM_PRIMS] = {
    KIR_EW_FLOAT_OPS(KIR_EW_ENTRY)
    [KIR_PRIM_POW] = kir_ew_row_pow,
    [KIR_PRIM_CLAMP] = kir_ew_row_f_clamp,
};
