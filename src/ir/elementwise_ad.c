/* jvp and transpose rules of the elementwise primitives, with JAX's
 * conventions at the edges (abs and sign at 0, max/min ties splitting the
 * tangent, pow at 0, sqrt at 0 giving inf); digamma's derivative (trigamma)
 * is emitted from primitives. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)                   \
  do {                           \
    kiln_status st_ = (x);       \
    if (st_) return st_;         \
  } while (0)

/* x op literal v */
static kiln_status lit_op(kir_program *p, kir_prim prim, kir_vid x, double v, kir_vid *out) {
  kir_vid c;
  TRY(kir_emit_scalar(p, x, v, &c));
  return kir_emit2(p, prim, x, c, out);
}

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

/* d y / d x for the unary primitives whose derivative is a primal value. */
static kiln_status unary_coeff(kir_program *p, kir_prim prim, kir_vid x, kir_vid y,
                               kir_vid *c) {
  kir_vid a, b;
  switch (prim) {
    case KIR_PRIM_ABS: /* x >= 0 ? 1 : -1 (the tangent passes through at 0, as JAX) */
      TRY(kir_emit_scalar(p, x, 0.0, &a));
      TRY(kir_emit2(p, KIR_PRIM_GE, x, a, &a));
      TRY(kir_emit_scalar(p, x, -1.0, &b));
      TRY(kir_emit_scalar(p, x, 1.0, c));
      return kir_emit_select(p, a, b, *c, kir_var_aval(p, x), c);
    case KIR_PRIM_EXP: *c = y; return KILN_OK;
    case KIR_PRIM_EXP2: return lit_op(p, KIR_PRIM_MUL, y, 0.69314718055994530942, c);
    case KIR_PRIM_EXPM1: return lit_op(p, KIR_PRIM_ADD, y, 1.0, c);
    case KIR_PRIM_LOG: return lit_op(p, KIR_PRIM_POW, x, -1.0, c);
    case KIR_PRIM_LOG1P:
      TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &a));
      return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
    case KIR_PRIM_SQRT: /* 0.5 / y: inf at 0, as JAX */
      TRY(kir_emit_scalar(p, y, 0.5, &a));
      return kir_emit2(p, KIR_PRIM_DIV, a, y, c);
    case KIR_PRIM_RSQRT: /* -0.5 * y / x */
      TRY(kir_emit2(p, KIR_PRIM_DIV, y, x, &a));
      return lit_op(p, KIR_PRIM_MUL, a, -0.5, c);
    case KIR_PRIM_CBRT: /* (1/3) / y^2 */
      TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
      TRY(kir_emit_scalar(p, y, 1.0 / 3.0, &b));
      return kir_emit2(p, KIR_PRIM_DIV, b, a, c);
    case KIR_PRIM_TANH: /* 1 - y^2 */
      TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
      TRY(kir_emit_scalar(p, y, 1.0, &b));
      return kir_emit2(p, KIR_PRIM_SUB, b, a, c);
    case KIR_PRIM_LOGISTIC: /* y (1 - y) */
      TRY(kir_emit_scalar(p, y, 1.0, &b));
      TRY(kir_emit2(p, KIR_PRIM_SUB, b, y, &a));
      return kir_emit2(p, KIR_PRIM_MUL, y, a, c);
    case KIR_PRIM_SIN: return kir_emit1(p, KIR_PRIM_COS, x, c);
    case KIR_PRIM_COS:
      TRY(kir_emit1(p, KIR_PRIM_SIN, x, &a));
      return kir_emit1(p, KIR_PRIM_NEG, a, c);
    case KIR_PRIM_TAN: /* 1 + y^2 */
      TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
      return lit_op(p, KIR_PRIM_ADD, a, 1.0, c);
    case KIR_PRIM_ASIN:
    case KIR_PRIM_ACOS: /* +-rsqrt(1 - x^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
      TRY(kir_emit_scalar(p, x, 1.0, &b));
      TRY(kir_emit2(p, KIR_PRIM_SUB, b, a, &a));
      if (prim == KIR_PRIM_ASIN) return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
      TRY(kir_emit1(p, KIR_PRIM_RSQRT, a, &a));
      return kir_emit1(p, KIR_PRIM_NEG, a, c);
    case KIR_PRIM_ATAN: /* 1 / (1 + x^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
      TRY(lit_op(p, KIR_PRIM_ADD, a, 1.0, &a));
      return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
    case KIR_PRIM_SINH: return kir_emit1(p, KIR_PRIM_COSH, x, c);
    case KIR_PRIM_COSH: return kir_emit1(p, KIR_PRIM_SINH, x, c);
    case KIR_PRIM_ASINH: /* rsqrt(x^2 + 1) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
      TRY(lit_op(p, KIR_PRIM_ADD, a, 1.0, &a));
      return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
    case KIR_PRIM_ACOSH: /* rsqrt((x - 1)(x + 1)) */
      TRY(lit_op(p, KIR_PRIM_SUB, x, 1.0, &a));
      TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &b));
      TRY(kir_emit2(p, KIR_PRIM_MUL, a, b, &a));
      return kir_emit1(p, KIR_PRIM_RSQRT, a, c);
    case KIR_PRIM_ATANH: /* 1 / ((1 + x)(1 - x)) */
      TRY(lit_op(p, KIR_PRIM_ADD, x, 1.0, &a));
      TRY(kir_emit_scalar(p, x, 1.0, &b));
      TRY(kir_emit2(p, KIR_PRIM_SUB, b, x, &b));
      TRY(kir_emit2(p, KIR_PRIM_MUL, a, b, &a));
      return lit_op(p, KIR_PRIM_POW, a, -1.0, c);
    case KIR_PRIM_ERF: /* 2/sqrt(pi) exp(-x^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
      TRY(kir_emit1(p, KIR_PRIM_NEG, a, &a));
      TRY(kir_emit1(p, KIR_PRIM_EXP, a, &a));
      return lit_op(p, KIR_PRIM_MUL, a, 1.12837916709551257390 /* 2/sqrt(pi) */, c);
    case KIR_PRIM_ERFC: /* -2/sqrt(pi) exp(-x^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, x, x, &a));
      TRY(kir_emit1(p, KIR_PRIM_NEG, a, &a));
      TRY(kir_emit1(p, KIR_PRIM_EXP, a, &a));
      return lit_op(p, KIR_PRIM_MUL, a, -1.12837916709551257390, c);
    case KIR_PRIM_SQUARE: return lit_op(p, KIR_PRIM_MUL, x, 2.0, c);
    case KIR_PRIM_LGAMMA: return kir_emit1(p, KIR_PRIM_DIGAMMA, x, c);
    case KIR_PRIM_DIGAMMA: return trigamma(p, x, c);
    case KIR_PRIM_ERF_INV: /* sqrt(pi)/2 exp(y^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, y, y, &a));
      TRY(kir_emit1(p, KIR_PRIM_EXP, a, &a));
      return lit_op(p, KIR_PRIM_MUL, a, 0.88622692545275801365 /* sqrt(pi)/2 */, c);
    default: return kcore_fail(KILN_ERR_UNIMPLEMENTED, "autodiff: no jvp rule for %s", kir_prim_name(prim));
  }
}

/* y x^(y-1), as JAX's _integer_pow_jvp (zero for y = 0). */
static kiln_status jvp_integer_pow(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                   const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  int64_t n = e->params.integer_pow.y;
  kir_vid c;
  (void)y;
  if (n == 0) return kir_emit_zeros(p, kir_var_aval(p, x[0]), ty);
  if (n == 1) {
    *ty = tx[0];
    return KILN_OK;
  }
  kir_params q;
  memset(&q, 0, sizeof q);
  q.integer_pow.y = n - 1;
  TRY(kir_emit(p, KIR_PRIM_INTEGER_POW, &q, 1, &x[0], &c));
  TRY(lit_op(p, KIR_PRIM_MUL, c, (double)n, &c));
  return kir_emit2(p, KIR_PRIM_MUL, tx[0], c, ty);
}

static kiln_status jvp_unary(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                             const kir_vid *tx, kir_vid *ty) {
  kir_vid c;
  TRY(unary_coeff(p, e->prim, x[0], y[0], &c));
  return kir_emit2(p, KIR_PRIM_MUL, tx[0], c, ty);
}

/* The primitive itself is linear: apply it to the tangents (zeros filled
 * in where only some operands have one). */
static kiln_status jvp_linear(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  kir_vid in[KIR_MAX_RANK + 2];
  for (int i = 0; i < e->n_in; i++) {
    in[i] = tx[i];
    if (in[i] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, x[i]), &in[i]));
  }
  (void)y;
  return kir_emit_like(p, e, e->n_in, in, ty);
}

/* ty = tx[0] * ca + tx[1] * cb, each term broadcast to y's shape */
static kiln_status sum_terms(kir_program *p, kir_vid y, kir_vid ta, kir_vid ca, kir_vid tb,
                             kir_vid cb, kir_vid *ty) {
  kir_vid a = KIR_NO_VAR, b = KIR_NO_VAR;
  if (ta != KIR_NO_VAR) TRY(ca == KIR_NO_VAR ? (a = ta, KILN_OK) : kir_emit2(p, KIR_PRIM_MUL, ta, ca, &a));
  if (tb != KIR_NO_VAR) TRY(cb == KIR_NO_VAR ? (b = tb, KILN_OK) : kir_emit2(p, KIR_PRIM_MUL, tb, cb, &b));
  TRY(kir_emit_add_any(p, a, b, ty));
  return kir_emit_broadcast_to(p, *ty, kir_var_aval(p, y), ty);
}

/* (x == z) / (1 + (other == z)): ties split the tangent, as JAX's
 * _balanced_eq */
static kiln_status balanced_eq(kir_program *p, kir_vid x, kir_vid z, kir_vid other, kir_vid *c) {
  kiln_dtype d = kir_var_aval(p, z)->dtype;
  kir_vid a, b;
  TRY(kir_emit2(p, KIR_PRIM_EQ, x, z, &a));
  TRY(kir_emit_convert(p, a, d, &a));
  TRY(kir_emit2(p, KIR_PRIM_EQ, other, z, &b));
  TRY(kir_emit_convert(p, b, d, &b));
  TRY(lit_op(p, KIR_PRIM_ADD, b, 1.0, &b));
  return kir_emit2(p, KIR_PRIM_DIV, a, b, c);
}

static kiln_status jvp_binary(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  kir_vid a = x[0], b = x[1], ta = tx[0], tb = tx[1], ca = KIR_NO_VAR, cb = KIR_NO_VAR, t;
  switch (e->prim) {
    case KIR_PRIM_SUB:
      if (tb != KIR_NO_VAR) TRY(kir_emit1(p, KIR_PRIM_NEG, tb, &tb));
      break;
    case KIR_PRIM_MUL:
      ca = b, cb = a;
      break;
    case KIR_PRIM_DIV: /* ta / b - tb * y / b */
      if (ta != KIR_NO_VAR) TRY(kir_emit2(p, KIR_PRIM_DIV, ta, b, &ta));
      if (tb != KIR_NO_VAR) {
        TRY(kir_emit2(p, KIR_PRIM_DIV, y[0], b, &cb));
        TRY(kir_emit1(p, KIR_PRIM_NEG, cb, &cb));
      }
      break;
    case KIR_PRIM_MAX:
    case KIR_PRIM_MIN:
      if (ta != KIR_NO_VAR) TRY(balanced_eq(p, a, y[0], b, &ca));
      if (tb != KIR_NO_VAR) TRY(balanced_eq(p, b, y[0], a, &cb));
      break;
    case KIR_PRIM_ATAN2: /* (ta b - tb a) / (a^2 + b^2) */
      TRY(kir_emit2(p, KIR_PRIM_MUL, a, a, &t));
      TRY(kir_emit2(p, KIR_PRIM_MUL, b, b, &ca));
      TRY(kir_emit2(p, KIR_PRIM_ADD, t, ca, &t));
      TRY(kir_emit2(p, KIR_PRIM_DIV, b, t, &ca));
      TRY(kir_emit2(p, KIR_PRIM_DIV, a, t, &cb));
      TRY(kir_emit1(p, KIR_PRIM_NEG, cb, &cb));
      break;
    case KIR_PRIM_REM: /* d/db = -trunc(a / b) */
      if (tb != KIR_NO_VAR) {
        TRY(kir_emit2(p, KIR_PRIM_DIV, a, b, &t));
        TRY(kir_emit1(p, KIR_PRIM_SIGN, t, &cb));
        TRY(kir_emit1(p, KIR_PRIM_ABS, t, &t));
        TRY(kir_emit1(p, KIR_PRIM_FLOOR, t, &t));
        TRY(kir_emit2(p, KIR_PRIM_MUL, cb, t, &cb));
        TRY(kir_emit1(p, KIR_PRIM_NEG, cb, &cb));
      }
      break;
    case KIR_PRIM_POW: {
      /* d/da = b a^(b-1) (for an integer b, 0 where b == 0); d/db =
       * log(a == 0 ? 1 : a) y, as JAX's _pow_jvp_lhs/_rhs */
      const kir_aval *ya = kir_var_aval(p, y[0]);
      kir_vid z, one;
      if (ta != KIR_NO_VAR) {
        TRY(lit_op(p, KIR_PRIM_SUB, b, 1.0, &t));
        TRY(kir_emit2(p, KIR_PRIM_POW, a, t, &t));
        TRY(kir_emit_convert(p, b, ya->dtype, &ca));
        TRY(kir_emit2(p, KIR_PRIM_MUL, ca, t, &ca));
        if (!kiln_dtype_is_float(kir_var_aval(p, b)->dtype)) {
          TRY(kir_emit_scalar(p, b, 0, &z));
          TRY(kir_emit2(p, KIR_PRIM_EQ, b, z, &z));
          TRY(kir_emit_zeros(p, ya, &t));
          TRY(kir_emit_select(p, z, ca, t, ya, &ca));
        }
      }
      if (tb != KIR_NO_VAR) {
        TRY(kir_emit_scalar(p, a, 0, &z));
        TRY(kir_emit2(p, KIR_PRIM_EQ, a, z, &z));
        TRY(kir_emit_scalar(p, a, 1, &one));
        TRY(kir_emit_select(p, z, a, one, kir_var_aval(p, a), &t));
        TRY(kir_emit1(p, KIR_PRIM_LOG, t, &t));
        TRY(kir_emit2(p, KIR_PRIM_MUL, t, y[0], &cb));
      }
      break;
    }
    default: break; /* add */
  }
  return sum_terms(p, y[0], ta, ca, tb, cb, ty);
}

static kiln_status jvp_select_n(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  kir_vid in[16];
  if (e->n_in > 16) return kcore_fail(KILN_ERR_UNIMPLEMENTED, "select_n: jvp of >15 cases");
  in[0] = x[0];
  for (int i = 1; i < e->n_in; i++) {
    in[i] = tx[i];
    if (in[i] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, y[0]), &in[i]));
  }
  return kir_emit(p, KIR_PRIM_SELECT_N, NULL, e->n_in, in, ty);
}

/* clamp(lo, x, hi): the tangent of whichever operand the result is, as
 * JAX's rule (lo wins where lo > x and lo < hi; hi where hi < x). */
static kiln_status jvp_clamp(kir_program *p, const kir_eqn *e, const kir_vid *x,
                             const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *ya = kir_var_aval(p, y[0]);
  kir_vid lo = x[0], v = x[1], hi = x[2], m, n, acc = KIR_NO_VAR;
  (void)e;
  for (int k = 0; k < 3; k++) {
    if (tx[k] == KIR_NO_VAR) continue;
    if (k == 0) {
      TRY(kir_emit2(p, KIR_PRIM_GT, lo, v, &m));
      TRY(kir_emit2(p, KIR_PRIM_LT, lo, hi, &n));
    } else if (k == 1) {
      TRY(kir_emit2(p, KIR_PRIM_GT, v, lo, &m));
      TRY(kir_emit2(p, KIR_PRIM_LT, v, hi, &n));
    } else {
      TRY(kir_emit2(p, KIR_PRIM_LT, hi, v, &m));
      n = KIR_NO_VAR;
    }
    if (n != KIR_NO_VAR) TRY(kir_emit2(p, KIR_PRIM_AND, m, n, &m));
    TRY(kir_emit_convert(p, m, ya->dtype, &m));
    TRY(kir_emit2(p, KIR_PRIM_MUL, tx[k], m, &m));
    TRY(kir_emit_add_any(p, acc, m, &acc));
  }
  return kir_emit_broadcast_to(p, acc, ya, ty);
}

static kiln_status jvp_convert(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x;
  if (!kiln_dtype_is_float(kir_var_aval(p, y[0])->dtype)) {
    *ty = KIR_NO_VAR;
    return KILN_OK;
  }
  return kir_emit_like(p, e, 1, tx, ty);
}

/* ---- transposes ---- */

/* reduce_precision and copy are linear: the cotangent goes through them. */
static kiln_status tr_like(kir_program *p, const kir_program *src, const kir_eqn *e,
                           const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  return kir_emit_like(p, e, 1, ct, &ct_x[0]);
}

static kiln_status tr_neg(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  (void)src, (void)e, (void)lin, (void)x;
  return kir_emit1(p, KIR_PRIM_NEG, ct[0], &ct_x[0]);
}

static kiln_status tr_add_sub(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  (void)x;
  for (int i = 0; i < 2; i++) {
    if (!lin[i]) continue;
    kir_vid c = ct[0];
    if (i == 1 && e->prim == KIR_PRIM_SUB) TRY(kir_emit1(p, KIR_PRIM_NEG, c, &c));
    TRY(kir_emit_unbroadcast(p, c, kir_var_aval(src, e->in[i]), &ct_x[i]));
  }
  return KILN_OK;
}

static kiln_status tr_mul_div(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  if (lin[0] && lin[1])
    return kcore_fail(KILN_ERR_INTERNAL, "autodiff: %s is not linear in both operands",
                      e->prim == KIR_PRIM_MUL ? "mul" : "div");
  int i = lin[0] ? 0 : 1;
  if (e->prim == KIR_PRIM_DIV && i == 1)
    return kcore_fail(KILN_ERR_INTERNAL, "autodiff: div is not linear in its divisor");
  kir_vid c;
  TRY(kir_emit2(p, e->prim, ct[0], x[1 - i], &c));
  return kir_emit_unbroadcast(p, c, kir_var_aval(src, e->in[i]), &ct_x[i]);
}

static kiln_status tr_select_n(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x) {
  kir_vid z;
  (void)src;
  if (lin[0]) return kcore_fail(KILN_ERR_INTERNAL, "autodiff: select_n is not linear in `which`");
  TRY(kir_emit_zeros(p, kir_var_aval(p, ct[0]), &z));
  for (int i = 1; i < e->n_in; i++) {
    if (!lin[i]) continue;
    kir_vid in[16];
    in[0] = x[0];
    for (int k = 1; k < e->n_in; k++) in[k] = k == i ? ct[0] : z;
    TRY(kir_emit(p, KIR_PRIM_SELECT_N, NULL, e->n_in, in, &ct_x[i]));
  }
  return KILN_OK;
}

static kiln_status tr_convert(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  (void)lin, (void)x;
  return kir_emit_convert(p, ct[0], kir_var_aval(src, e->in[0])->dtype, &ct_x[0]);
}

void kir_elementwise_ad(kir_ad_rules *r) {
  static const kir_prim unary[] = {
      KIR_PRIM_ABS,  KIR_PRIM_EXP,      KIR_PRIM_EXP2,  KIR_PRIM_EXPM1, KIR_PRIM_LOG,
      KIR_PRIM_LOG1P, KIR_PRIM_SQRT,    KIR_PRIM_RSQRT, KIR_PRIM_CBRT,  KIR_PRIM_TANH,
      KIR_PRIM_LOGISTIC, KIR_PRIM_SIN,  KIR_PRIM_COS,   KIR_PRIM_TAN,   KIR_PRIM_ASIN,
      KIR_PRIM_ACOS, KIR_PRIM_ATAN,     KIR_PRIM_SINH,  KIR_PRIM_COSH,  KIR_PRIM_ASINH,
      KIR_PRIM_ACOSH, KIR_PRIM_ATANH,   KIR_PRIM_ERF,   KIR_PRIM_ERF_INV, KIR_PRIM_ERFC,
      KIR_PRIM_SQUARE, KIR_PRIM_LGAMMA, KIR_PRIM_DIGAMMA};
  for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) r->jvp[unary[i]] = jvp_unary;
  static const kir_prim zero[] = {
      KIR_PRIM_SIGN, KIR_PRIM_FLOOR, KIR_PRIM_CEIL, KIR_PRIM_ROUND, KIR_PRIM_IS_FINITE,
      KIR_PRIM_NOT, KIR_PRIM_POPULATION_COUNT, KIR_PRIM_AND, KIR_PRIM_OR, KIR_PRIM_XOR,
      KIR_PRIM_SHIFT_LEFT, KIR_PRIM_SHIFT_RIGHT_LOGICAL, KIR_PRIM_SHIFT_RIGHT_ARITHMETIC,
      KIR_PRIM_NEXTAFTER, KIR_PRIM_EQ, KIR_PRIM_NE, KIR_PRIM_LT, KIR_PRIM_LE, KIR_PRIM_GT,
      KIR_PRIM_GE, KIR_PRIM_BITCAST_CONVERT_TYPE, KIR_PRIM_STOP_GRADIENT};
  for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) r->jvp[zero[i]] = kir_ad_jvp_zero;
  static const kir_prim binary[] = {KIR_PRIM_ADD, KIR_PRIM_SUB, KIR_PRIM_MUL,   KIR_PRIM_DIV,
                                    KIR_PRIM_MAX, KIR_PRIM_MIN, KIR_PRIM_ATAN2, KIR_PRIM_REM,
                                    KIR_PRIM_POW};
  for (size_t i = 0; i < sizeof binary / sizeof *binary; i++) r->jvp[binary[i]] = jvp_binary;
  r->jvp[KIR_PRIM_NEG] = jvp_linear;
  r->jvp[KIR_PRIM_COPY] = jvp_linear;
  r->jvp[KIR_PRIM_REDUCE_PRECISION] = jvp_linear;
  r->jvp[KIR_PRIM_INTEGER_POW] = jvp_integer_pow;
  r->transpose[KIR_PRIM_COPY] = tr_like;
  r->transpose[KIR_PRIM_REDUCE_PRECISION] = tr_like;
  r->jvp[KIR_PRIM_SELECT_N] = jvp_select_n;
  r->jvp[KIR_PRIM_CLAMP] = jvp_clamp;
  r->jvp[KIR_PRIM_CONVERT_ELEMENT_TYPE] = jvp_convert;
  r->transpose[KIR_PRIM_NEG] = tr_neg;
  r->transpose[KIR_PRIM_ADD] = tr_add_sub;
  r->transpose[KIR_PRIM_SUB] = tr_add_sub;
  r->transpose[KIR_PRIM_MUL] = tr_mul_div;
  r->transpose[KIR_PRIM_DIV] = tr_mul_div;
  r->transpose[KIR_PRIM_SELECT_N] = tr_select_n;
  r->transpose[KIR_PRIM_CONVERT_ELEMENT_TYPE] = tr_convert;
}
