/* The derivatives of the unary elementwise primitives whose records say
 * COEFF: d y / d x from the operand x and the result y, built from
 * primitives so that it fuses and differentiates again, with JAX's
 * conventions at the edges (abs at 0, sqrt at 0 giving inf). */
#include <string.h>

#include "ir/elementwise_ad.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)
#define lit_op kir_ew_lit_op

/* polygamma(1, x), the derivative of digamma (JAX's digamma jvp), from
 * primitives so that it fuses and differentiates again: reflection below
 * 1/2 (psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)), the recurrence up to
 * z + 10, then the asymptotic series to z^-15 (next term below 1e-15 of
 * the value). f16/bf16 compute in f32, as JAX's upcast. */
static kiln_status trigamma(kir_program *p, kir_vid x, kir_vid *c) {
  static const double bern[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66,
                                -691.0 / 2730, 7.0 / 6}; /* B_2k, over z^(2k+1) */
  kiln_dtype d = kir_var_aval(p, x)->dtype;
  bool narrow = kiln_dtype_size(d) < 4;
  kir_vid xf = x, refl, z, acc = KIR_NO_VAR, t, w, f, f2, s, r, q;
  if (narrow) TRY(kir_emit_convert(p, x, KILN_F32, &xf));
  const kir_aval *a = kir_var_aval(p, xf);
  TRY(lit_op(p, KIR_PRIM_LT, xf, 0.5, &refl));
  TRY(kir_emit_scalar(p, xf, 1.0, &t));
  TRY(kir_emit2(p, KIR_PRIM_SUB, t, xf, &t));
  TRY(kir_emit_select(p, refl, xf, t, a, &z));
  kir_params ip;
  memset(&ip, 0, sizeof ip);
  ip.integer_pow.y = -2;
  for (int k = 0; k < 10; k++) {
    TRY(k ? lit_op(p, KIR_PRIM_ADD, z, k, &t) : (t = z, KILN_OK));
    TRY(kir_emit(p, KIR_PRIM_INTEGER_POW, &ip, 1, &t, &t));
    TRY(kir_emit_add_any(p, acc, t, &acc));
  }
  TRY(lit_op(p, KIR_PRIM_ADD, z, 10.0, &w));
  TRY(kir_emit_scalar(p, w, 1.0, &f));
  TRY(kir_emit2(p, KIR_PRIM_DIV, f, w, &f));
  TRY(kir_emit2(p, KIR_PRIM_MUL, f, f, &f2));
  TRY(kir_emit_scalar(p, f2, bern[6], &s)); /* Horner in f2 */
  for (int k = 5; k >= 0; k--) {
    TRY(kir_emit2(p, KIR_PRIM_MUL, s, f2, &s));
    TRY(lit_op(p, KIR_PRIM_ADD, s, bern[k], &s));
  }
  /* f + f^2 (1/2 + f sum B_2k f^(2k-2)) */
  TRY(kir_emit2(p, KIR_PRIM_MUL, s, f, &s));
  TRY(lit_op(p, KIR_PRIM_ADD, s, 0.5, &s));
  TRY(kir_emit2(p, KIR_PRIM_MUL, s, f2, &s));
  TRY(kir_emit2(p, KIR_PRIM_ADD, s, f, &s));
  TRY(kir_emit2(p, KIR_PRIM_ADD, acc, s, &r));
  /* sin^2 has period 1 in x: reduce first so that large |x| keeps its digits */
  TRY(kir_emit1(p, KIR_PRIM_FLOOR, xf, &t));
  TRY(kir_emit2(p, KIR_PRIM_SUB, xf, t, &t));
  TRY(lit_op(p, KIR_PRIM_MUL, t, 3.14159265358979323846, &t));
  TRY(kir_emit1(p, KIR_PRIM_SIN, t, &t));
  TRY(kir_emit2(p, KIR_PRIM_MUL, t, t, &t));
  TRY(kir_emit_scalar(p, t, 9.86960440108935861883 /* pi^2 */, &q));
  TRY(kir_emit2(p, KIR_PRIM_DIV, q, t, &q));
  TRY(kir_emit2(p, KIR_PRIM_SUB, q, r, &q));
  TRY(kir_emit_select(p, refl, r, q, a, c));
  return narrow ? kir_emit_convert(p, *c, d, c) : KILN_OK;
}

/* rsqrt(1 - x^2), asin's and acos's */
static kiln_status rsqrt_one_minus_square(kir_program *p, kir_vid x, kir_vid *c) {
  kir_vid a, b;
  TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
  TRY(kir_emit_scalar(p, x, 1.0, &b));
  TRY(kir_emit2(p, KIR_PRIM_SUB, b, a, &a));
  return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
}

/* k exp(-x^2), erf's and erfc's */
static kiln_status gaussian(kir_program *p, kir_vid x, double k, kir_vid *c) {
  kir_vid a;
  TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
  TRY(kir_emit1(p, KIR_PRIM_NEG, a, &a));
  TRY(kir_emit1(p, KIR_PRIM_EXP, a, &a));
  return lit_op(p, KIR_PRIM_MUL, a, k, c);
}

/* x >= 0 ? 1 : -1 (the tangent passes through at 0, as JAX) */
kiln_status kir_ew_d_abs(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)y;
  TRY(kir_emit_scalar(p, x, 0.0, &a));
  TRY(kir_emit2(p, KIR_PRIM_GE, x, a, &a));
  TRY(kir_emit_scalar(p, x, -1.0, &b));
  TRY(kir_emit_scalar(p, x, 1.0, c));
  return kir_emit_select(p, a, b, *c, kir_var_aval(p, x), c);
}

kiln_status kir_ew_d_exp(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)p, (void)x;
  *c = y;
  return KILN_OK;
}

kiln_status kir_ew_d_exp2(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)x;
  return lit_op(p, KIR_PRIM_MUL, y, 0.69314718055994530942, c);
}

kiln_status kir_ew_d_expm1(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)x;
  return lit_op(p, KIR_PRIM_ADD, y, 1.0, c);
}

kiln_status kir_ew_d_log(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return lit_op(p, KIR_PRIM_POW, x, -1.0, c);
}

kiln_status kir_ew_d_log1p(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)y;
  TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &a));
  return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
}

/* 0.5 / y: inf at 0, as JAX */
kiln_status kir_ew_d_sqrt(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)x;
  TRY(kir_emit_scalar(p, y, 0.5, &a));
  return kir_emit2(p, KIR_PRIM_DIV, a, y, c);
}

/* -0.5 * y / x */
kiln_status kir_ew_d_rsqrt(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  TRY(kir_emit2(p, KIR_PRIM_DIV, y, x, &a));
  return lit_op(p, KIR_PRIM_MUL, a, -0.5, c);
}

/* (1/3) / y^2 */
kiln_status kir_ew_d_cbrt(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)x;
  TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
  TRY(kir_emit_scalar(p, y, 1.0 / 3.0, &b));
  return kir_emit2(p, KIR_PRIM_DIV, b, a, c);
}

/* 1 - y^2 */
kiln_status kir_ew_d_tanh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)x;
  TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
  TRY(kir_emit_scalar(p, y, 1.0, &b));
  return kir_emit2(p, KIR_PRIM_SUB, b, a, c);
}

/* y (1 - y) */
kiln_status kir_ew_d_logistic(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)x;
  TRY(kir_emit_scalar(p, y, 1.0, &b));
  TRY(kir_emit2(p, KIR_PRIM_SUB, b, y, &a));
  return kir_emit2(p, KIR_PRIM_MUL, y, a, c);
}

kiln_status kir_ew_d_sin(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return kir_emit1(p, KIR_PRIM_COS, x, c);
}

kiln_status kir_ew_d_cos(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)y;
  TRY(kir_emit1(p, KIR_PRIM_SIN, x, &a));
  return kir_emit1(p, KIR_PRIM_NEG, a, c);
}

/* 1 + y^2 */
kiln_status kir_ew_d_tan(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)x;
  TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
  return lit_op(p, KIR_PRIM_ADD, a, 1.0, c);
}

/* rsqrt(1 - x^2) */
kiln_status kir_ew_d_asin(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return rsqrt_one_minus_square(p, x, c);
}

/* -rsqrt(1 - x^2) */
kiln_status kir_ew_d_acos(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)y;
  TRY(rsqrt_one_minus_square(p, x, &a));
  return kir_emit1(p, KIR_PRIM_NEG, a, c);
}

/* 1 / (1 + x^2) */
kiln_status kir_ew_d_atan(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)y;
  TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
  TRY(lit_op(p, KIR_PRIM_ADD, a, 1.0, &a));
  return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
}

kiln_status kir_ew_d_sinh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return kir_emit1(p, KIR_PRIM_COSH, x, c);
}

kiln_status kir_ew_d_cosh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return kir_emit1(p, KIR_PRIM_SINH, x, c);
}

/* rsqrt(x^2 + 1) */
kiln_status kir_ew_d_asinh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)y;
  TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
  TRY(lit_op(p, KIR_PRIM_ADD, a, 1.0, &a));
  return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
}

/* rsqrt((x - 1)(x + 1)) */
kiln_status kir_ew_d_acosh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)y;
  TRY(lit_op(p, KIR_PRIM_SUB, x, 1.0, &a));
  TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &b));
  TRY(kir_emit2(p, KIR_PRIM_MUL, a, b, &a));
  return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
}

/* 1 / ((1 + x)(1 - x)) */
kiln_status kir_ew_d_atanh(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a, b;
  (void)y;
  TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &a));
  TRY(kir_emit_scalar(p, x, 1.0, &b));
  TRY(kir_emit2(p, KIR_PRIM_SUB, b, x, &b));
  TRY(kir_emit2(p, KIR_PRIM_MUL, a, b, &a));
  return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
}

/* 2/sqrt(pi) exp(-x^2) */
kiln_status kir_ew_d_erf(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return gaussian(p, x, 1.12837916709551257390 /* 2/sqrt(pi) */, c);
}

/* -2/sqrt(pi) exp(-x^2) */
kiln_status kir_ew_d_erfc(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return gaussian(p, x, -1.12837916709551257390, c);
}

kiln_status kir_ew_d_square(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return lit_op(p, KIR_PRIM_MUL, x, 2.0, c);
}

kiln_status kir_ew_d_lgamma(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return kir_emit1(p, KIR_PRIM_DIGAMMA, x, c);
}

kiln_status kir_ew_d_digamma(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  (void)y;
  return trigamma(p, x, c);
}

/* sqrt(pi)/2 exp(y^2) */
kiln_status kir_ew_d_erf_inv(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid a;
  (void)x;
  TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
  TRY(kir_emit1(p, KIR_PRIM_EXP, a, &a));
  return lit_op(p, KIR_PRIM_MUL, a, 0.88622692545275801365 /* sqrt(pi)/2 */, c);
}
