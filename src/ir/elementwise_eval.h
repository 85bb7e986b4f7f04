/* The elementwise reference evaluators' scalar domain, shared by their
 * files only (elementwise_eval.c: loads, stores, the loop nest, conversions
 * and the evaluators; elementwise_float.c and elementwise_int.c: the scalar
 * ops and their rows). The ir module's door stays ir.h. */
#ifndef KILN_IR_ELEMENTWISE_EVAL_H
#define KILN_IR_ELEMENTWISE_EVAL_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "core/core.h"
#include "ir/ir.h"

/* ---- the domain ----
 *
 * Semantics are XLA:CPU's as JAX runs them; tests/ir/test_eval_elementwise.cc
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

/* An integer as a float of dtype `to`, as XLA converts: f64 directly, the
 * others through f32 (so bf16 rounds twice). */
static inline double kir_ew_int_to_float(kir_ew_val v, bool is_signed, kiln_dtype to) {
  if (to == KILN_F64) return is_signed ? (double)v.i : (double)v.u;
  return is_signed ? (float)v.i : (float)v.u;
}

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

#define KIR_EW_DEFINE_ROW(PRIM, name, SHAPE)                                                \
  static void kir_ew_row_##name(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x, \
                                kir_ew_val *y) {                                            \
    for (int64_t i = 0; i < n; i++) KIR_EW_ROW_##SHAPE(name);                               \
  }
#define KIR_EW_ENTRY(PRIM, name, SHAPE) [KIR_PRIM_##PRIM] = kir_ew_row_##name,

#define KIR_EW_COMPARE(X) X(eq, ==) X(ne, !=) X(lt, <) X(le, <=) X(gt, >) X(ge, >=)

/* Each primitive's row for float operands and for integer or bool ones. */
extern const kir_ew_row_fn kir_ew_float_rows[KIR_NUM_PRIMS];
extern const kir_ew_row_fn kir_ew_int_rows[KIR_NUM_PRIMS];

#endif
