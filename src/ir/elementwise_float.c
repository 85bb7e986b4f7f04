/* The elementwise reference evaluators' float ops, as XLA:CPU computes them
 * (see elementwise_eval.h), and their rows, generated from the records'
 * eval_float column. */
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

/* The SPELLED records' ops: c_float's <math.h> function, or the helper of
 * kernels/special.h in double, under DAZ, rounded as XLA rounds. */
#define KIR_EW_CALL_MATH(f) f
#define KIR_EW_CALL_HELPER(f) kiln_##f##_f64
#define KIR_EW_DEFINE_SPELLED(name, fn)                                 \
  static inline double kir_ew_f_##name(const kir_ew_op *op, double a) { \
    return kir_ew_math(op->dtype, fn(kir_ew_daz(op->dtype, a)));        \
  }

/* Each record's row function (see prims.def's eval_float column). */
#define KIR_EW_FROW_F1(ID, name, c) KIR_EW_DEFINE_ROW(ID, f_##name, F1)
#define KIR_EW_FROW_F2(ID, name, c) KIR_EW_DEFINE_ROW(ID, f_##name, F2)
#define KIR_EW_FROW_FB1(ID, name, c) KIR_EW_DEFINE_ROW(ID, f_##name, FB1)
#define KIR_EW_FROW_FB2(ID, name, c) KIR_EW_DEFINE_ROW(ID, f_##name, FB2)
#define KIR_EW_FROW_SPELLED(ID, name, c) \
  KIR_EW_DEFINE_SPELLED(name, KIR_EW_CALL_##c) KIR_EW_DEFINE_ROW(ID, f_##name, F1)
#define KIR_EW_FROW_OWN(ID, name, c)
#define KIR_EW_FROW_EQN(ID, name, c)
#define KIR_EW_FROW_NONE(ID, name, c)
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_FROW_##eval_float(ID, name, c_float)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE

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
static void kir_ew_row_f_pow(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
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
 * floats or the record evaluates the whole equation). */
#define KIR_EW_FENTRY_F1(ID, name) [KIR_PRIM_##ID] = kir_ew_row_f_##name,
#define KIR_EW_FENTRY_F2 KIR_EW_FENTRY_F1
#define KIR_EW_FENTRY_FB1 KIR_EW_FENTRY_F1
#define KIR_EW_FENTRY_FB2 KIR_EW_FENTRY_F1
#define KIR_EW_FENTRY_SPELLED KIR_EW_FENTRY_F1
#define KIR_EW_FENTRY_OWN KIR_EW_FENTRY_F1
#define KIR_EW_FENTRY_EQN(ID, name)
#define KIR_EW_FENTRY_NONE(ID, name)
const kir_ew_row_fn kir_ew_float_rows[KIR_NUM_PRIMS] = {
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_FENTRY_##eval_float(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
#undef KIR_PRIM
};
