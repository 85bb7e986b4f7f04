/* Elementwise primitives: shape/dtype rules (lax semantics) and reference
 * evaluators (XLA:CPU's arithmetic, as JAX runs it). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"
#include "prng/prng.h"
#include "../../kernels/special.h"

/* The dtypes each unary/n-ary primitive accepts (lax's accepted_dtypes;
 * complex types do not exist in kiln). */
static const unsigned kir_accepts[KIR_NUM_PRIMS] = {
    [KIR_PRIM_NEG] = KIR_DT_NUM,
    [KIR_PRIM_ABS] = KIR_DT_SINT | KIR_DT_FLOAT,
    [KIR_PRIM_SIGN] = KIR_DT_NUM,
    [KIR_PRIM_FLOOR] = KIR_DT_FLOAT,
    [KIR_PRIM_CEIL] = KIR_DT_FLOAT,
    [KIR_PRIM_ROUND] = KIR_DT_FLOAT,
    [KIR_PRIM_EXP] = KIR_DT_FLOAT,
    [KIR_PRIM_EXP2] = KIR_DT_FLOAT,
    [KIR_PRIM_EXPM1] = KIR_DT_FLOAT,
    [KIR_PRIM_LOG] = KIR_DT_FLOAT,
    [KIR_PRIM_LOG1P] = KIR_DT_FLOAT,
    [KIR_PRIM_SQRT] = KIR_DT_FLOAT,
    [KIR_PRIM_RSQRT] = KIR_DT_FLOAT,
    [KIR_PRIM_CBRT] = KIR_DT_FLOAT,
    [KIR_PRIM_TANH] = KIR_DT_FLOAT,
    [KIR_PRIM_LOGISTIC] = KIR_DT_FLOAT,
    [KIR_PRIM_SIN] = KIR_DT_FLOAT,
    [KIR_PRIM_COS] = KIR_DT_FLOAT,
    [KIR_PRIM_TAN] = KIR_DT_FLOAT,
    [KIR_PRIM_ASIN] = KIR_DT_FLOAT,
    [KIR_PRIM_ACOS] = KIR_DT_FLOAT,
    [KIR_PRIM_ATAN] = KIR_DT_FLOAT,
    [KIR_PRIM_SINH] = KIR_DT_FLOAT,
    [KIR_PRIM_COSH] = KIR_DT_FLOAT,
    [KIR_PRIM_ASINH] = KIR_DT_FLOAT,
    [KIR_PRIM_ACOSH] = KIR_DT_FLOAT,
    [KIR_PRIM_ATANH] = KIR_DT_FLOAT,
    [KIR_PRIM_ERF] = KIR_DT_FLOAT,
    [KIR_PRIM_ERF_INV] = KIR_DT_FLOAT,
    [KIR_PRIM_IS_FINITE] = KIR_DT_FLOAT,
    [KIR_PRIM_NOT] = KIR_DT_BOOL | KIR_DT_INT,
    [KIR_PRIM_POPULATION_COUNT] = KIR_DT_INT,
    [KIR_PRIM_STOP_GRADIENT] = KIR_DT_ANY,
    [KIR_PRIM_SQUARE] = KIR_DT_NUM,
    [KIR_PRIM_INTEGER_POW] = KIR_DT_NUM,
    [KIR_PRIM_ERFC] = KIR_DT_FLOAT,
    [KIR_PRIM_LGAMMA] = KIR_DT_FLOAT,
    [KIR_PRIM_DIGAMMA] = KIR_DT_FLOAT,
    [KIR_PRIM_REDUCE_PRECISION] = KIR_DT_FLOAT,
    [KIR_PRIM_COPY] = KIR_DT_ANY,
    [KIR_PRIM_ADD] = KIR_DT_NUM,
    [KIR_PRIM_SUB] = KIR_DT_NUM,
    [KIR_PRIM_MUL] = KIR_DT_NUM,
    [KIR_PRIM_DIV] = KIR_DT_NUM,
    [KIR_PRIM_REM] = KIR_DT_NUM,
    [KIR_PRIM_MAX] = KIR_DT_ANY,
    [KIR_PRIM_MIN] = KIR_DT_ANY,
    [KIR_PRIM_ATAN2] = KIR_DT_FLOAT,
    [KIR_PRIM_AND] = KIR_DT_BOOL | KIR_DT_INT,
    [KIR_PRIM_OR] = KIR_DT_BOOL | KIR_DT_INT,
    [KIR_PRIM_XOR] = KIR_DT_BOOL | KIR_DT_INT,
    [KIR_PRIM_SHIFT_LEFT] = KIR_DT_INT,
    [KIR_PRIM_SHIFT_RIGHT_LOGICAL] = KIR_DT_INT,
    [KIR_PRIM_SHIFT_RIGHT_ARITHMETIC] = KIR_DT_INT,
    [KIR_PRIM_NEXTAFTER] = KIR_DT_FLOAT,
    [KIR_PRIM_EQ] = KIR_DT_ANY,
    [KIR_PRIM_NE] = KIR_DT_ANY,
    [KIR_PRIM_LT] = KIR_DT_ANY,
    [KIR_PRIM_LE] = KIR_DT_ANY,
    [KIR_PRIM_GT] = KIR_DT_ANY,
    [KIR_PRIM_GE] = KIR_DT_ANY,
};

static unsigned kir_accepted(kir_prim prim) {
  unsigned c = kir_accepts[prim];
  KCORE_ASSERT(c != 0); /* a prim routed to these rules needs its row above */
  return c;
}

/* Same shape; dtype kept except is_finite (bool); weak kept (JAX's
 * standard weak-type rule over one operand). */
kiln_status kir_rule_unary(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)n_in;
  kiln_status st = kir_check_dtype_class(prim, 0, in, kir_accepted(prim));
  if (st != KILN_OK) return st;
  if (prim == KIR_PRIM_ROUND) {
    int64_t m = params->round.rounding_method;
    if (m != 0 && m != 1)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "round: rounding_method=%lld is neither 0 (away from zero) nor 1 (to "
                        "nearest even)",
                        (long long)m);
  }
  if (prim == KIR_PRIM_INTEGER_POW && params->integer_pow.y < 0 && !kiln_dtype_is_float(in[0].dtype))
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "integer_pow: integers cannot be raised to negative powers, got "
                      "integer_pow(%s, %lld)",
                      kiln_dtype_name(in[0].dtype), (long long)params->integer_pow.y);
  if (prim == KIR_PRIM_REDUCE_PRECISION) {
    const kir_p_reduce_precision *r = &params->reduce_precision;
    if (r->exponent_bits < 1 || r->exponent_bits > 11 || r->mantissa_bits < 0 || r->mantissa_bits > 52)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "reduce_precision: exponent_bits=%lld mantissa_bits=%lld (1 to 11 and 0 "
                        "to 52 needed) for %s",
                        (long long)r->exponent_bits, (long long)r->mantissa_bits,
                        kiln_dtype_name(in[0].dtype));
  }
  kiln_dtype dt = prim == KIR_PRIM_IS_FINITE ? KILN_BOOL : in[0].dtype;
  return kir_push(out, dt, in[0].rank, in[0].shape, in[0].weak);
}

/* lax.naryop: accepted dtypes, equal dtypes, lax broadcasting; the result
 * is weak only if every operand is. */
static kiln_status kir_nary_common(kir_prim prim, int n_in, const kir_aval *in, bool same_dtype,
                                   int *rank, int64_t *shape) {
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_check_dtype_class(prim, i, in, kir_accepted(prim));
    if (st != KILN_OK) return st;
  }
  if (same_dtype) {
    kiln_status st = kir_check_same_dtypes(prim, n_in, in);
    if (st != KILN_OK) return st;
  }
  return kir_broadcast_shapes(prim, n_in, in, rank, shape);
}

kiln_status kir_rule_nary(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)params;
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = kir_nary_common(prim, n_in, in, true, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, rank, shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_compare(kir_prim prim, const kir_params *params, int n_in,
                             const kir_aval *in, kir_avals *out) {
  (void)params;
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = kir_nary_common(prim, n_in, in, true, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, KILN_BOOL, rank, shape, kir_all_weak(n_in, in));
}

/* lax.pow: a float base with a float exponent of its dtype or any integer
 * exponent. */
kiln_status kir_rule_pow(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                         kir_avals *out) {
  (void)params;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_FLOAT);
  if (st == KILN_OK) st = kir_check_dtype_class(prim, 1, in, KIR_DT_NUM);
  if (st != KILN_OK) return st;
  if (kiln_dtype_is_float(in[1].dtype) && in[1].dtype != in[0].dtype) {
    char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_DTYPE,
                      "pow: operand types %s and %s have different float dtypes (a float "
                      "exponent must have the base's dtype)",
                      kir_aval_str(&in[0], t0, sizeof t0), kir_aval_str(&in[1], t1, sizeof t1));
  }
  int rank;
  int64_t shape[KIR_MAX_RANK];
  st = kir_broadcast_shapes(prim, n_in, in, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, rank, shape, kir_all_weak(n_in, in));
}

/* lax.select_n(which, *cases): cases of one type; which is bool (at most
 * two cases) or an integer, scalar or of the cases' shape. */
kiln_status kir_rule_select_n(kir_prim prim, const kir_params *params, int n_in,
                              const kir_aval *in, kir_avals *out) {
  (void)params;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (n_in < 2)
    return kcore_fail(KILN_ERR_ARGUMENT, "select_n: needs `which` and at least one case, got %d "
                      "operand%s", n_in, n_in == 1 ? "" : "s");
  const kir_aval *which = &in[0], *cases = &in[1];
  int n_cases = n_in - 1;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_BOOL | KIR_DT_INT);
  if (st != KILN_OK) return st;
  if (kiln_dtype_is_bool(which->dtype) && n_cases > 2)
    return kcore_fail(KILN_ERR_ARGUMENT, "select_n: a bool `which` (%s) selects among at most 2 "
                      "cases, got %d", kir_aval_str(which, t0, sizeof t0), n_cases);
  for (int i = 1; i < n_cases; i++) {
    if (!kir_aval_same_shape(&cases[i], &cases[0]))
      return kcore_fail(KILN_ERR_SHAPE, "select_n: case types %s and %s have different shapes",
                        kir_aval_str(&cases[0], t0, sizeof t0),
                        kir_aval_str(&cases[i], t1, sizeof t1));
  }
  st = kir_check_same_dtypes(prim, n_cases, cases);
  if (st != KILN_OK) return st;
  if (which->rank != 0 && !kir_aval_same_shape(which, &cases[0]))
    return kcore_fail(KILN_ERR_SHAPE,
                      "select_n: `which` type %s is neither scalar nor of the cases' shape (%s)",
                      kir_aval_str(which, t0, sizeof t0), kir_aval_str(&cases[0], t1, sizeof t1));
  return kir_push(out, cases[0].dtype, cases[0].rank, cases[0].shape,
                  kir_all_weak(n_cases, cases));
}

/* lax.clamp(min, x, max): one dtype; min and max scalar or of x's shape. */
kiln_status kir_rule_clamp(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)params;
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_check_dtype_class(prim, i, in, KIR_DT_ANY);
    if (st != KILN_OK) return st;
  }
  kiln_status st = kir_check_same_dtypes(prim, n_in, in);
  if (st != KILN_OK) return st;
  for (int i = 0; i < 3; i += 2) {
    if (in[i].rank != 0 && !kir_aval_same_shape(&in[i], &in[1])) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "clamp: %s type %s is neither scalar nor of x's shape (%s)",
                        i == 0 ? "min" : "max", kir_aval_str(&in[i], t0, sizeof t0),
                        kir_aval_str(&in[1], t1, sizeof t1));
    }
  }
  return kir_push(out, in[1].dtype, in[1].rank, in[1].shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_convert_element_type(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  kiln_dtype dt = params->convert.new_dtype;
  if (!kiln_dtype_is_valid(dt))
    return kcore_fail(KILN_ERR_DTYPE, "convert_element_type: new_dtype %d is not a dtype",
                      (int)dt);
  return kir_push(out, dt, in[0].rank, in[0].shape, params->convert.weak_type);
}

/* Same width: same shape. Narrower: a new minor dimension of the ratio.
 * Wider: the minor dimension must hold exactly one new element, and goes. */
kiln_status kir_rule_bitcast_convert_type(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  char t[KIR_AVAL_STR_CAP];
  kiln_dtype to = params->bitcast.new_dtype;
  const kir_aval *x = &in[0];
  if (!kiln_dtype_is_valid(to))
    return kcore_fail(KILN_ERR_DTYPE, "bitcast_convert_type: new_dtype %d is not a dtype",
                      (int)to);
  if ((kiln_dtype_is_bool(x->dtype) || kiln_dtype_is_bool(to)) && x->dtype != to)
    return kcore_fail(KILN_ERR_DTYPE,
                      "bitcast_convert_type: cannot bitcast %s to %s (bool only to itself)",
                      kir_aval_str(x, t, sizeof t), kiln_dtype_name(to));
  size_t from_bits = kiln_dtype_size(x->dtype) * 8, to_bits = kiln_dtype_size(to) * 8;
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  int rank = x->rank;
  if (from_bits > to_bits) {
    if (rank == KIR_MAX_RANK)
      return kcore_fail(KILN_ERR_SHAPE, "bitcast_convert_type: %s to %s would exceed rank %d",
                        kir_aval_str(x, t, sizeof t), kiln_dtype_name(to), KIR_MAX_RANK);
    shape[rank++] = (int64_t)(from_bits / to_bits);
  } else if (from_bits < to_bits) {
    int64_t minor = rank ? x->shape[rank - 1] : 1;
    if (minor * (int64_t)from_bits != (int64_t)to_bits)
      return kcore_fail(KILN_ERR_SHAPE,
                        "bitcast_convert_type: %s to %s needs a last dimension of %zu",
                        kir_aval_str(x, t, sizeof t), kiln_dtype_name(to), to_bits / from_bits);
    rank--;
  }
  return kir_push(out, to, rank, shape, false);
}

/* ---- reference evaluators ----
 *
 * Semantics are XLA:CPU's as JAX runs them; tests/test_eval_elementwise.cc
 * checks them against JAX.
 *
 * - Elements are loaded into one of two domains: floats as double (exact for
 *   every float dtype), bool and integers as 64-bit words (signed ones
 *   sign-extended, unsigned ones zero-extended). Ops compute in the domain;
 *   the store rounds (floats) or wraps (integers) to the result's dtype.
 * - IEEE operations (add, mul, div, sqrt, ...) computed in double and rounded
 *   once to the dtype are correctly rounded: double has at least 2p+2 bits
 *   for every precision p here, so the double rounding is innocuous. That is
 *   also what XLA computes for f16 and bf16, which it evaluates in f32.
 * - XLA:CPU runs with the x86 FTZ and DAZ flags: arithmetic on f32, f64 and
 *   bf16 (computed in f32) reads subnormal operands as zero and flushes
 *   subnormal results to zero, keeping the sign. Bit-level operations (neg,
 *   abs, select, bitcast, nextafter's step, f32 -> bf16) keep subnormals, and
 *   f16 subnormals are normal numbers in f32.
 * - Transcendental functions: libm in double, rounded to f32 for f32, f16 and
 *   bf16 (XLA computes the half types in f32 and rounds every op's result
 *   back). XLA uses its own approximations, so these agree within JAX's
 *   test tolerances, not bit for bit. Where JAX lowers a primitive to a
 *   formula (exp2, logistic, sinh, cosh), the formula is followed with the
 *   same intermediate roundings.
 * - NaN results carry no particular sign or payload (XLA's are x86's).
 * - Operands broadcast as lax allows: rank 0, or size-1 dimensions. div is
 *   one correctly rounded division even then, where XLA's simplifier turns
 *   x / broadcast(y) into x * broadcast(1 / y). */

/* One element in its domain. */
typedef union kir_ew_val {
  double f;
  int64_t i;  /* signed integers */
  uint64_t u; /* unsigned integers, bool (0 or 1), integer results before wrapping */
} kir_ew_val;

/* What an op needs besides its operands' values. */
typedef struct kir_ew_op {
  kiln_dtype dtype;     /* operand 0's dtype */
  kiln_dtype aux_dtype; /* pow: the exponent's dtype; convert: the target dtype */
  int bits;             /* integer width; 1 for bool */
  bool is_signed;       /* signed integer */
  uint64_t mask;        /* the low `bits` bits */
  const kir_params *params; /* the equation's (round, integer_pow, reduce_precision) */
} kir_ew_op;

/* Computes n results from the operands' values x[k][0..n). */
typedef void (*kir_ew_row_fn)(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                              kir_ew_val *y);

/* ---- float rounding, FTZ/DAZ ---- */

/* double -> f16 rounded once to nearest even: to f32 first, rounding to odd
 * (the last bit sticky), keeps enough bits for f32 -> f16 to round right. */
static inline uint16_t kir_ew_f64_to_f16(double v) {
  float f = (float)v;
  if ((double)f != v && !isnan(v)) {
    uint32_t b = kcore_f32_bits(f);
    if (fabs((double)f) > fabs(v)) b--; /* rounded away from zero: truncate */
    f = kcore_bits_f32(b | 1u);
  }
  return kcore_f32_to_f16(f);
}

/* v rounded to dtype, as a double. f64 -> bf16 goes through f32, as XLA
 * converts it. */
static inline double kir_ew_to_dtype(kiln_dtype dt, double v) {
  switch (dt) {
    case KILN_F16: return kcore_f16_to_f32(kir_ew_f64_to_f16(v));
    case KILN_BF16: return kcore_bf16_to_f32(kcore_f32_to_bf16((float)v));
    case KILN_F32: return (float)v;
    default: return v;
  }
}

/* A transcendental result: XLA computes f32 and the half types in f32 (the
 * store then rounds half types from there). */
static inline double kir_ew_math(kiln_dtype dt, double v) {
  return dt == KILN_F64 ? v : (double)(float)v;
}

/* DAZ: a subnormal operand of f32/bf16/f64 arithmetic reads as zero. */
static inline double kir_ew_daz(kiln_dtype dt, double v) {
  double min = dt == KILN_F64 ? DBL_MIN : dt == KILN_F16 ? 0.0 : FLT_MIN;
  return fabs(v) < min ? copysign(0.0, v) : v;
}

/* FTZ: a result that is subnormal after rounding becomes zero. x86 detects
 * tininess after rounding to the full precision, so an f32 result flushes
 * below FLT_MIN - 2^-151 (the midpoint under FLT_MIN), a double one below
 * DBL_MIN (v is already rounded there). */
static inline double kir_ew_ftz(kiln_dtype dt, double v) {
  double min = dt == KILN_F64 ? DBL_MIN : dt == KILN_F16 ? 0.0 : 0x1p-126 - 0x1p-151;
  return fabs(v) < min ? copysign(0.0, v) : v;
}

/* ---- loads and stores ---- */

static inline uint64_t kir_ew_bool(uint8_t b) { return b != 0; }

/* X(dtype, C type, domain field, conversion to the field) */
#define KIR_EW_DTYPES(X)                       \
  X(KILN_BOOL, uint8_t, u, kir_ew_bool)        \
  X(KILN_I8, int8_t, i, (int64_t))             \
  X(KILN_I16, int16_t, i, (int64_t))           \
  X(KILN_I32, int32_t, i, (int64_t))           \
  X(KILN_I64, int64_t, i, (int64_t))           \
  X(KILN_U8, uint8_t, u, (uint64_t))           \
  X(KILN_U16, uint16_t, u, (uint64_t))         \
  X(KILN_U32, uint32_t, u, (uint64_t))         \
  X(KILN_U64, uint64_t, u, (uint64_t))         \
  X(KILN_F16, uint16_t, f, kcore_f16_to_f32)   \
  X(KILN_BF16, uint16_t, f, kcore_bf16_to_f32) \
  X(KILN_F32, float, f, (double))              \
  X(KILN_F64, double, f, (double))

/* Loads v[0..n) from elements off, off + stride, ... of a dtype array. */
static void kir_ew_load(kiln_dtype dt, const void *data, int64_t off, int64_t stride, int64_t n,
                        kir_ew_val *v) {
  switch (dt) {
#define KIR_EW_LOAD(DT, T, FIELD, CONV)                               \
  case DT: {                                                          \
    const T *p = (const T *)data + off;                               \
    for (int64_t i = 0; i < n; i++) v[i].FIELD = CONV(p[i * stride]); \
    break;                                                            \
  }
    KIR_EW_DTYPES(KIR_EW_LOAD)
#undef KIR_EW_LOAD
    default: KCORE_ASSERT(!"invalid dtype");
  }
}

/* Stores v[0..n) at elements off.. of a dtype array: floats rounded to
 * nearest even, integers wrapped (signed ones written through their
 * unsigned type: the two's complement bits). */
static void kir_ew_store(kiln_dtype dt, void *data, int64_t off, int64_t n, const kir_ew_val *v) {
  switch (dt) {
#define KIR_EW_STORE(DT, T, EXPR)                     \
  case DT: {                                          \
    T *p = (T *)data + off;                           \
    for (int64_t i = 0; i < n; i++) p[i] = (T)(EXPR); \
    break;                                            \
  }
    KIR_EW_STORE(KILN_BOOL, uint8_t, v[i].u != 0)
    KIR_EW_STORE(KILN_I8, uint8_t, v[i].u)
    KIR_EW_STORE(KILN_U8, uint8_t, v[i].u)
    KIR_EW_STORE(KILN_I16, uint16_t, v[i].u)
    KIR_EW_STORE(KILN_U16, uint16_t, v[i].u)
    KIR_EW_STORE(KILN_I32, uint32_t, v[i].u)
    KIR_EW_STORE(KILN_U32, uint32_t, v[i].u)
    KIR_EW_STORE(KILN_I64, uint64_t, v[i].u)
    KIR_EW_STORE(KILN_U64, uint64_t, v[i].u)
    KIR_EW_STORE(KILN_F16, uint16_t, kir_ew_f64_to_f16(v[i].f))
    KIR_EW_STORE(KILN_BF16, uint16_t, kcore_f32_to_bf16((float)v[i].f))
    KIR_EW_STORE(KILN_F32, float, v[i].f)
    KIR_EW_STORE(KILN_F64, double, v[i].f)
#undef KIR_EW_STORE
    default: KCORE_ASSERT(!"invalid dtype");
  }
}

/* ---- the loop nest, with lax broadcasting ---- */

#define KIR_EW_MAX_IN 3  /* clamp */
#define KIR_EW_CHUNK 256 /* elements per row call */

/* The result's shape with size-1 dimensions dropped and contiguous ones
 * merged, and every operand's strides (in elements) over it: 0 where the
 * operand broadcasts. The innermost stride is then 0 or 1. */
typedef struct kir_ew_nest {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  int64_t stride[KIR_EW_MAX_IN][KIR_MAX_RANK];
} kir_ew_nest;

/* Strides of one operand over the result's dimensions. */
static void kir_ew_operand_strides(const kir_aval *x, const kir_aval *out, int64_t *stride) {
  int64_t step = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    bool broadcast = x->rank == 0 || x->shape[d] != out->shape[d];
    stride[d] = broadcast ? 0 : step;
    if (x->rank) step *= x->shape[d];
  }
}

/* Whether dimension d folds into d + 1 for every operand. */
static bool kir_ew_mergeable(const kir_ew_nest *nest, int n_in, int d) {
  for (int k = 0; k < n_in; k++)
    if (nest->stride[k][d] != nest->stride[k][d + 1] * nest->shape[d + 1]) return false;
  return true;
}

static void kir_ew_nest_init(kir_ew_nest *nest, int n_in, const kir_buffer *in,
                             const kir_aval *out) {
  int64_t full[KIR_EW_MAX_IN][KIR_MAX_RANK];
  for (int k = 0; k < n_in; k++) kir_ew_operand_strides(&in[k].aval, out, full[k]);
  nest->rank = 0;
  for (int d = 0; d < out->rank; d++) {
    if (out->shape[d] == 1) continue;
    int r = nest->rank++;
    nest->shape[r] = out->shape[d];
    for (int k = 0; k < n_in; k++) nest->stride[k][r] = full[k][d];
    if (r > 0 && kir_ew_mergeable(nest, n_in, r - 1)) {
      nest->shape[r - 1] *= nest->shape[r];
      for (int k = 0; k < n_in; k++) nest->stride[k][r - 1] = nest->stride[k][r];
      nest->rank--;
    }
  }
}

/* Moves the outer index (every dimension but the innermost) one step on,
 * updating the operands' offsets; false after the last row. */
static bool kir_ew_next_row(const kir_ew_nest *nest, int n_in, int64_t *index, int64_t *off) {
  for (int d = nest->rank - 2; d >= 0; d--) {
    index[d]++;
    for (int k = 0; k < n_in; k++) off[k] += nest->stride[k][d];
    if (index[d] < nest->shape[d]) return true;
    for (int k = 0; k < n_in; k++) off[k] -= nest->stride[k][d] * nest->shape[d];
    index[d] = 0;
  }
  return false;
}

/* out = row(in...) elementwise, a chunk of an innermost row at a time. */
static void kir_ew_map(int n_in, const kir_buffer *in, kir_buffer *out, const kir_ew_op *op,
                       kir_ew_row_fn row) {
  KCORE_ASSERT(n_in >= 1 && n_in <= KIR_EW_MAX_IN && row);
  int64_t total = kir_aval_size(&out->aval);
  KCORE_ASSERT(out->nbytes == (size_t)total * kiln_dtype_size(out->aval.dtype));
  if (total == 0) return;
  kir_ew_nest nest;
  kir_ew_nest_init(&nest, n_in, in, &out->aval);
  int64_t len = nest.rank ? nest.shape[nest.rank - 1] : 1;
  int64_t index[KIR_MAX_RANK] = {0}, off[KIR_EW_MAX_IN] = {0}, out_off = 0;
  kir_ew_val vals[KIR_EW_MAX_IN][KIR_EW_CHUNK], res[KIR_EW_CHUNK];
  const kir_ew_val *x[KIR_EW_MAX_IN];
  for (int k = 0; k < n_in; k++) x[k] = vals[k];
  do {
    for (int64_t j = 0; j < len; j += KIR_EW_CHUNK) {
      int64_t n = len - j < KIR_EW_CHUNK ? len - j : KIR_EW_CHUNK;
      for (int k = 0; k < n_in; k++) {
        int64_t s = nest.rank ? nest.stride[k][nest.rank - 1] : 0;
        kir_ew_load(in[k].aval.dtype, in[k].data, off[k] + j * s, s, n, vals[k]);
      }
      row(op, n, x, res);
      kir_ew_store(out->aval.dtype, out->data, out_off + j, n, res);
    }
    out_off += len;
  } while (kir_ew_next_row(&nest, n_in, index, off));
}

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
#define KIR_EW_COMPARE(X) X(eq, ==) X(ne, !=) X(lt, <) X(le, <=) X(gt, >) X(ge, >=)
#define KIR_EW_DEFINE_FCMP(name, OP)                                                \
  static inline uint64_t kir_ew_f_##name(const kir_ew_op *op, double a, double b) { \
    return kir_ew_daz(op->dtype, a) OP kir_ew_daz(op->dtype, b);                    \
  }
KIR_EW_COMPARE(KIR_EW_DEFINE_FCMP)
#undef KIR_EW_DEFINE_FCMP

/* ---- integer and bool ops (64-bit words; the store wraps) ---- */

#define KIR_EW_DEFINE_PURE1(name, EXPR)                                     \
  static inline uint64_t kir_ew_##name(const kir_ew_op *op, kir_ew_val a) { \
    (void)op;                                                               \
    return (EXPR);                                                          \
  }
#define KIR_EW_DEFINE_PURE2(name, EXPR)                                                   \
  static inline uint64_t kir_ew_##name(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) { \
    (void)op;                                                                             \
    return (EXPR);                                                                        \
  }
/* clang-format off */
KIR_EW_DEFINE_PURE1(i_neg, 0 - a.u)
KIR_EW_DEFINE_PURE1(i_stop_gradient, a.u)
KIR_EW_DEFINE_PURE1(i_copy, a.u)
KIR_EW_DEFINE_PURE1(i_square, a.u * a.u)
KIR_EW_DEFINE_PURE1(i_abs, a.i < 0 ? 0 - a.u : a.u)
KIR_EW_DEFINE_PURE2(i_add, a.u + b.u)
KIR_EW_DEFINE_PURE2(i_sub, a.u - b.u)
KIR_EW_DEFINE_PURE2(i_mul, a.u * b.u)
KIR_EW_DEFINE_PURE2(i_and, a.u & b.u)
KIR_EW_DEFINE_PURE2(i_or, a.u | b.u)
KIR_EW_DEFINE_PURE2(i_xor, a.u ^ b.u)
/* clang-format on */
#undef KIR_EW_DEFINE_PURE1
#undef KIR_EW_DEFINE_PURE2

/* integer_pow of an integer (y >= 0: the rule refuses negative powers),
 * wrapping as the products do. */
static inline uint64_t kir_ew_i_integer_pow(const kir_ew_op *op, kir_ew_val a) {
  uint64_t r = 1, x = a.u;
  for (int64_t k = op->params->integer_pow.y; k > 0; k >>= 1) {
    if (k & 1) r *= x;
    x *= x;
  }
  return r;
}

static inline uint64_t kir_ew_i_sign(const kir_ew_op *op, kir_ew_val a) {
  if (!op->is_signed) return a.u != 0;
  return a.i < 0 ? UINT64_MAX : a.i > 0;
}

static inline uint64_t kir_ew_i_not(const kir_ew_op *op, kir_ew_val a) {
  return a.u ^ op->mask; /* bool: logical not */
}

static inline uint64_t kir_ew_i_population_count(const kir_ew_op *op, kir_ew_val a) {
  uint64_t v = a.u & op->mask;
  v = v - ((v >> 1) & 0x5555555555555555ull);
  v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
  v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (v * 0x0101010101010101ull) >> 56;
}

/* XLA: x / 0 is -1 (all ones; unsigned too), INT_MIN / -1 is INT_MIN. */
static inline uint64_t kir_ew_i_div(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  if (op->is_signed) {
    if (b.i == 0) return UINT64_MAX;
    if (b.i == -1) return 0 - a.u;
    return (uint64_t)(a.i / b.i);
  }
  return b.u == 0 ? UINT64_MAX : a.u / b.u;
}

/* XLA: x % 0 is x, INT_MIN % -1 is 0; the sign follows the dividend. */
static inline uint64_t kir_ew_i_rem(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  if (op->is_signed) {
    if (b.i == 0) return a.u;
    if (b.i == -1) return 0;
    return (uint64_t)(a.i % b.i);
  }
  return b.u == 0 ? a.u : a.u % b.u;
}

static inline bool kir_ew_i_less(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return op->is_signed ? a.i < b.i : a.u < b.u;
}

static inline uint64_t kir_ew_i_max(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return kir_ew_i_less(op, a, b) ? b.u : a.u;
}

static inline uint64_t kir_ew_i_min(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return kir_ew_i_less(op, b, a) ? b.u : a.u;
}

/* Shift amounts are read as unsigned words of the operand's width; one at
 * or past the width shifts every bit out (the sign bit fills, for the
 * arithmetic shift, which reads unsigned operands as signed too). */
static inline uint64_t kir_ew_i_shift_left(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  return s >= (uint64_t)op->bits ? 0 : a.u << s;
}

static inline uint64_t kir_ew_i_shift_right_logical(const kir_ew_op *op, kir_ew_val a,
                                                    kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  return s >= (uint64_t)op->bits ? 0 : (a.u & op->mask) >> s;
}

static inline uint64_t kir_ew_i_shift_right_arithmetic(const kir_ew_op *op, kir_ew_val a,
                                                       kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  if (s >= (uint64_t)op->bits) s = (uint64_t)op->bits - 1;
  uint64_t top = 1ull << (op->bits - 1);
  uint64_t x = ((a.u & op->mask) ^ top) - top; /* sign-extended */
  return x >> 63 ? ~(~x >> s) : x >> s;
}

#define KIR_EW_DEFINE_ICMP(name, OP)                                                        \
  static inline uint64_t kir_ew_i_##name(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) { \
    return op->is_signed ? a.i OP b.i : a.u OP b.u;                                         \
  }
KIR_EW_COMPARE(KIR_EW_DEFINE_ICMP)
#undef KIR_EW_DEFINE_ICMP

/* ---- rows ---- */

/* One row function per scalar op and operand shape:
 *   F1/F2  float operands, float result      I1/I2  integer/bool operands
 *   FB1/FB2 float operands, bool result      (integer results and bools) */
#define KIR_EW_ROW_F1(name) y[i].f = kir_ew_##name(op, x[0][i].f)
#define KIR_EW_ROW_F2(name) y[i].f = kir_ew_##name(op, x[0][i].f, x[1][i].f)
#define KIR_EW_ROW_FB1(name) y[i].u = kir_ew_##name(op, x[0][i].f)
#define KIR_EW_ROW_FB2(name) y[i].u = kir_ew_##name(op, x[0][i].f, x[1][i].f)
#define KIR_EW_ROW_I1(name) y[i].u = kir_ew_##name(op, x[0][i])
#define KIR_EW_ROW_I2(name) y[i].u = kir_ew_##name(op, x[0][i], x[1][i])

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

#define KIR_EW_INT_OPS(X)                                                                   \
  X(NEG, i_neg, I1) X(ABS, i_abs, I1) X(SIGN, i_sign, I1) X(NOT, i_not, I1)                 \
  X(POPULATION_COUNT, i_population_count, I1) X(ADD, i_add, I2) X(SUB, i_sub, I2)           \
  X(MUL, i_mul, I2) X(DIV, i_div, I2) X(REM, i_rem, I2) X(MAX, i_max, I2) X(MIN, i_min, I2) \
  X(AND, i_and, I2) X(OR, i_or, I2) X(XOR, i_xor, I2) X(SHIFT_LEFT, i_shift_left, I2)       \
  X(SHIFT_RIGHT_LOGICAL, i_shift_right_logical, I2)                                         \
  X(SHIFT_RIGHT_ARITHMETIC, i_shift_right_arithmetic, I2) X(EQ, i_eq, I2) X(NE, i_ne, I2)   \
  X(LT, i_lt, I2) X(LE, i_le, I2) X(GT, i_gt, I2) X(GE, i_ge, I2)                          \
  X(STOP_GRADIENT, i_stop_gradient, I1) X(SQUARE, i_square, I1)                            \
  X(INTEGER_POW, i_integer_pow, I1) X(COPY, i_copy, I1)
/* clang-format on */

#define KIR_EW_DEFINE_ROW(PRIM, name, SHAPE)                                                \
  static void kir_ew_row_##name(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x, \
                                kir_ew_val *y) {                                            \
    for (int64_t i = 0; i < n; i++) KIR_EW_ROW_##SHAPE(name);                               \
  }
KIR_EW_FLOAT_OPS(KIR_EW_DEFINE_ROW)
KIR_EW_INT_OPS(KIR_EW_DEFINE_ROW)
#undef KIR_EW_DEFINE_ROW

/* clamp(lo, x, hi) = min(max(lo, x), hi), NaN from any operand. */
static void kir_ew_row_f_clamp(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  for (int64_t i = 0; i < n; i++)
    y[i].f = kir_ew_f_min(op, kir_ew_f_max(op, x[0][i].f, x[1][i].f), x[2][i].f);
}

static void kir_ew_row_i_clamp(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  for (int64_t i = 0; i < n; i++) {
    kir_ew_val m = {.u = kir_ew_i_max(op, x[0][i], x[1][i])};
    y[i].u = kir_ew_i_min(op, m, x[2][i]);
  }
}

/* An integer as a float of dtype `to`, as XLA converts: f64 directly, the
 * others through f32 (so bf16 rounds twice). */
static inline double kir_ew_int_to_float(kir_ew_val v, bool is_signed, kiln_dtype to) {
  if (to == KILN_F64) return is_signed ? (double)v.i : (double)v.u;
  return is_signed ? (float)v.i : (float)v.u;
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

#define KIR_EW_ENTRY(PRIM, name, SHAPE) [KIR_PRIM_##PRIM] = kir_ew_row_##name,
/* The row of each primitive for float operands and for integer or bool
 * ones (NULL where the rule refuses the dtype class). */
/* clang-format off */
static const kir_ew_row_fn kir_ew_float_rows[KIR_NUM_PRIMS] = {
    KIR_EW_FLOAT_OPS(KIR_EW_ENTRY)
    [KIR_PRIM_POW] = kir_ew_row_pow,
    [KIR_PRIM_CLAMP] = kir_ew_row_f_clamp,
};
static const kir_ew_row_fn kir_ew_int_rows[KIR_NUM_PRIMS] = {
    KIR_EW_INT_OPS(KIR_EW_ENTRY)
    [KIR_PRIM_CLAMP] = kir_ew_row_i_clamp,
};
/* clang-format on */
#undef KIR_EW_ENTRY

/* ---- conversions ---- */

/* Float -> float as XLA:CPU converts: f32 (and bf16, which widens to f32)
 * -> f64 under DAZ; f64 -> f32 and f64 -> bf16 (through f32) under DAZ and
 * FTZ; f64 -> f16 rounds once; the rest flush nothing visible. */
static inline double kir_ew_float_to_float(kiln_dtype from, kiln_dtype to, double v) {
  bool from_f32 = from == KILN_F32 || from == KILN_BF16;
  if (to == KILN_F64 && from_f32) return kir_ew_daz(KILN_F32, v);
  if (from == KILN_F64 && (to == KILN_F32 || to == KILN_BF16))
    return kir_ew_ftz(KILN_F32, kir_ew_daz(KILN_F64, v));
  return v;
}

/* Float -> integer: truncation toward zero, saturating, NaN -> 0. */
static inline uint64_t kir_ew_float_to_int(double v, int bits, bool is_signed) {
  if (isnan(v)) return 0;
  if (is_signed) {
    uint64_t top = 1ull << (bits - 1); /* the store wraps it to INT_MIN */
    if (v >= ldexp(1.0, bits - 1)) return top - 1;
    if (v <= -ldexp(1.0, bits - 1)) return top;
    return (uint64_t)(int64_t)v;
  }
  if (v <= 0) return 0;
  return v >= ldexp(1.0, bits) ? UINT64_MAX : (uint64_t)v;
}

/* Float -> bool is x != 0, read under DAZ from f32 and f64 (not from bf16,
 * whose widening to f32 is a bit shift). */
static inline uint64_t kir_ew_float_to_bool(kiln_dtype from, double v) {
  if (from == KILN_F32 || from == KILN_F64) v = kir_ew_daz(from, v);
  return v != 0;
}

static void kir_ew_row_convert(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  kiln_dtype from = op->dtype, to = op->aux_dtype;
  bool from_float = kiln_dtype_is_float(from), to_float = kiln_dtype_is_float(to);
  int to_bits = (int)kiln_dtype_size(to) * 8;
  bool to_signed = kiln_dtype_is_signed(to), to_bool = kiln_dtype_is_bool(to);
  for (int64_t i = 0; i < n; i++) {
    kir_ew_val v = x[0][i];
    if (from_float && to_float)
      y[i].f = kir_ew_float_to_float(from, to, v.f);
    else if (from_float && to_bool)
      y[i].u = kir_ew_float_to_bool(from, v.f);
    else if (from_float)
      y[i].u = kir_ew_float_to_int(v.f, to_bits, to_signed);
    else if (to_float)
      y[i].f = kir_ew_int_to_float(v, op->is_signed, to);
    else
      y[i].u = to_bool ? v.u != 0 : v.u; /* the store wraps */
  }
}

/* ---- evaluators ---- */

static kir_ew_op kir_ew_op_make(const kir_eqn *e, const kir_buffer *in) {
  kir_ew_op op;
  memset(&op, 0, sizeof op);
  op.dtype = in[0].aval.dtype;
  op.aux_dtype = e->n_in > 1 ? in[1].aval.dtype : KILN_INVALID_DTYPE;
  op.bits = kiln_dtype_is_bool(op.dtype) ? 1 : (int)kiln_dtype_size(op.dtype) * 8;
  op.is_signed = kiln_dtype_is_integer(op.dtype) && kiln_dtype_is_signed(op.dtype);
  op.mask = UINT64_MAX >> (64 - op.bits);
  op.params = &e->params;
  return op;
}

/* Every unary, binary and comparison primitive, and clamp. */
static kiln_status kir_eval_map(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  kir_ew_op op = kir_ew_op_make(e, in);
  bool is_float = kiln_dtype_is_float(op.dtype);
  kir_ew_map(e->n_in, in, out, &op, (is_float ? kir_ew_float_rows : kir_ew_int_rows)[e->prim]);
  return KILN_OK;
}

static kiln_status kir_eval_convert_element_type(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)ctx;
  if (in[0].aval.dtype == out->aval.dtype) { /* the identity, NaN payloads included */
    KCORE_ASSERT(in[0].nbytes == out->nbytes);
    if (out->nbytes) memcpy(out->data, in[0].data, out->nbytes);
    return KILN_OK;
  }
  kir_ew_op op = kir_ew_op_make(e, in);
  op.aux_dtype = out->aval.dtype;
  kir_ew_map(1, in, out, &op, kir_ew_row_convert);
  return KILN_OK;
}

/* Little-endian hosts, like JAX's: the narrower elements of one wide
 * element are its bytes in memory order, so the data is copied as is. */
static kiln_status kir_eval_bitcast_convert_type(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)e;
  (void)ctx;
  KCORE_ASSERT(in[0].nbytes == out->nbytes);
  if (out->nbytes) memcpy(out->data, in[0].data, out->nbytes);
  return KILN_OK;
}

/* The case `which` picks, clamped into range as XLA's lowering (a tree of
 * `which < k` selects) does for out-of-range values. */
static int kir_ew_case_index(kir_ew_val w, bool is_signed, int n_cases) {
  if (is_signed ? w.i <= 0 : w.u == 0) return 0;
  return w.u >= (uint64_t)n_cases ? n_cases - 1 : (int)w.u;
}

/* select_n(which, *cases): copies each element from the case `which`
 * names; the cases have the result's shape, `which` is scalar or too. */
static kiln_status kir_eval_select_n(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                     void *ctx) {
  (void)ctx;
  const kir_buffer *which = &in[0];
  int n_cases = e->n_in - 1;
  size_t size = kiln_dtype_size(out->aval.dtype);
  int64_t total = kir_aval_size(&out->aval);
  bool is_signed = kiln_dtype_is_integer(which->aval.dtype) &&
                   kiln_dtype_is_signed(which->aval.dtype);
  int64_t stride = which->aval.rank == 0 ? 0 : 1;
  kir_ew_val w[KIR_EW_CHUNK];
  for (int64_t j = 0; j < total; j += KIR_EW_CHUNK) {
    int64_t n = total - j < KIR_EW_CHUNK ? total - j : KIR_EW_CHUNK;
    kir_ew_load(which->aval.dtype, which->data, j * stride, stride, n, w);
    for (int64_t i = 0; i < n; i++) {
      const kir_buffer *c = &in[1 + kir_ew_case_index(w[i], is_signed, n_cases)];
      size_t at = (size_t)(j + i) * size;
      memcpy((char *)out->data + at, (const char *)c->data + at, size);
    }
  }
  return KILN_OK;
}

void kir_elementwise_evals(kir_eval_table *t) {
  for (int p = 0; p < KIR_NUM_PRIMS; p++)
    if (kir_ew_float_rows[p] || kir_ew_int_rows[p]) t->fn[p] = kir_eval_map;
  t->fn[KIR_PRIM_SELECT_N] = kir_eval_select_n;
  t->fn[KIR_PRIM_CONVERT_ELEMENT_TYPE] = kir_eval_convert_element_type;
  t->fn[KIR_PRIM_BITCAST_CONVERT_TYPE] = kir_eval_bitcast_convert_type;
}
