/* jvp and transpose rules of the elementwise primitives, registered from
 * their records (prims.def's jvp and transpose columns): the generic rules
 * (a unary derivative, a binary op's partials, linear, zero), the binary
 * partials with JAX's conventions at the edges (max/min ties splitting the
 * tangent, pow at 0), the rules of their own and the transposes. The unary
 * derivatives are elementwise_jvp_unary.c's. */
#include <string.h>

#include "ir/elementwise_ad.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)
#define lit_op kir_ew_lit_op

/* y x^(y-1), as JAX's _integer_pow_jvp (zero for y = 0). */
kiln_status kir_ew_jvp_integer_pow(kir_program *p, const kir_eqn *e, const kir_vid *x,
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

/* The records' derivatives and partials, by primitive. */
#define KIR_EW_COEFF_COEFF(ID, name) [KIR_PRIM_##ID] = kir_ew_d_##name,
#define KIR_EW_PARTIALS_PARTIALS(ID, name) [KIR_PRIM_##ID] = kir_ew_partials_##name,
#define KIR_EW_NO_ENTRY(ID, name)
#define KIR_EW_COEFF_ZERO KIR_EW_NO_ENTRY
#define KIR_EW_COEFF_LINEAR KIR_EW_NO_ENTRY
#define KIR_EW_COEFF_PARTIALS KIR_EW_NO_ENTRY
#define KIR_EW_COEFF_OWN KIR_EW_NO_ENTRY
#define KIR_EW_PARTIALS_ZERO KIR_EW_NO_ENTRY
#define KIR_EW_PARTIALS_LINEAR KIR_EW_NO_ENTRY
#define KIR_EW_PARTIALS_COEFF KIR_EW_NO_ENTRY
#define KIR_EW_PARTIALS_OWN KIR_EW_NO_ENTRY
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
static const kir_ew_coeff_fn coeff[KIR_NUM_PRIMS] = {
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_COEFF_##jvp(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
};
static const kir_ew_partials_fn partials[KIR_NUM_PRIMS] = {
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_PARTIALS_##jvp(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
};

/* COEFF: the tangent times the derivative. */
static kiln_status jvp_unary(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                             const kir_vid *tx, kir_vid *ty) {
  kir_vid c;
  TRY(coeff[e->prim](p, x[0], y[0], &c));
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

/* PARTIALS: ty = ta * ca + tb * cb, each term broadcast to y's shape. */
static kiln_status jvp_binary(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  kir_vid ta = tx[0], tb = tx[1], ca = KIR_NO_VAR, cb = KIR_NO_VAR;
  TRY(partials[e->prim](p, x[0], x[1], y[0], &ta, &tb, &ca, &cb));
  return sum_terms(p, y[0], ta, ca, tb, cb, ty);
}

kiln_status kir_ew_partials_add(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  (void)p, (void)a, (void)b, (void)y, (void)ta, (void)tb, (void)ca, (void)cb;
  return KILN_OK;
}

kiln_status kir_ew_partials_sub(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  (void)a, (void)b, (void)y, (void)ta, (void)ca, (void)cb;
  return *tb == KIR_NO_VAR ? KILN_OK : kir_emit1(p, KIR_PRIM_NEG, *tb, tb);
}

kiln_status kir_ew_partials_mul(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  (void)p, (void)y, (void)ta, (void)tb;
  *ca = b, *cb = a;
  return KILN_OK;
}

/* ta / b - tb * y / b */
kiln_status kir_ew_partials_div(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  (void)a, (void)ca;
  if (*ta != KIR_NO_VAR) TRY(kir_emit2(p, KIR_PRIM_DIV, *ta, b, ta));
  if (*tb != KIR_NO_VAR) {
    TRY(kir_emit2(p, KIR_PRIM_DIV, y, b, cb));
    TRY(kir_emit1(p, KIR_PRIM_NEG, *cb, cb));
  }
  return KILN_OK;
}

kiln_status kir_ew_partials_max(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  if (*ta != KIR_NO_VAR) TRY(balanced_eq(p, a, y, b, ca));
  if (*tb != KIR_NO_VAR) TRY(balanced_eq(p, b, y, a, cb));
  return KILN_OK;
}

kiln_status kir_ew_partials_min(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  return kir_ew_partials_max(p, a, b, y, ta, tb, ca, cb);
}

/* (ta b - tb a) / (a^2 + b^2) */
kiln_status kir_ew_partials_atan2(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                  kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  kir_vid t;
  (void)y, (void)ta, (void)tb;
  TRY(kir_emit2(p, KIR_PRIM_MUL, a, a, &t));
  TRY(kir_emit2(p, KIR_PRIM_MUL, b, b, ca));
  TRY(kir_emit2(p, KIR_PRIM_ADD, t, *ca, &t));
  TRY(kir_emit2(p, KIR_PRIM_DIV, b, t, ca));
  TRY(kir_emit2(p, KIR_PRIM_DIV, a, t, cb));
  return kir_emit1(p, KIR_PRIM_NEG, *cb, cb);
}

/* d/db = -trunc(a / b) */
kiln_status kir_ew_partials_rem(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  kir_vid t;
  (void)y, (void)ta, (void)ca;
  if (*tb == KIR_NO_VAR) return KILN_OK;
  TRY(kir_emit2(p, KIR_PRIM_DIV, a, b, &t));
  TRY(kir_emit1(p, KIR_PRIM_SIGN, t, cb));
  TRY(kir_emit1(p, KIR_PRIM_ABS, t, &t));
  TRY(kir_emit1(p, KIR_PRIM_FLOOR, t, &t));
  TRY(kir_emit2(p, KIR_PRIM_MUL, *cb, t, cb));
  return kir_emit1(p, KIR_PRIM_NEG, *cb, cb);
}

/* d/da = b a^(b-1) (for an integer b, 0 where b == 0); d/db =
 * log(a == 0 ? 1 : a) y, as JAX's _pow_jvp_lhs/_rhs */
kiln_status kir_ew_partials_pow(kir_program *p, kir_vid a, kir_vid b, kir_vid y, kir_vid *ta,
                                kir_vid *tb, kir_vid *ca, kir_vid *cb) {
  const kir_aval *ya = kir_var_aval(p, y);
  kir_vid t, z, one;
  if (*ta != KIR_NO_VAR) {
    TRY(lit_op(p, KIR_PRIM_SUB, b, 1.0, &t));
    TRY(kir_emit2(p, KIR_PRIM_POW, a, t, &t));
    TRY(kir_emit_convert(p, b, ya->dtype, ca));
    TRY(kir_emit2(p, KIR_PRIM_MUL, *ca, t, ca));
    if (!kiln_dtype_is_float(kir_var_aval(p, b)->dtype)) {
      TRY(kir_emit_scalar(p, b, 0, &z));
      TRY(kir_emit2(p, KIR_PRIM_EQ, b, z, &z));
      TRY(kir_emit_zeros(p, ya, &t));
      TRY(kir_emit_select(p, z, *ca, t, ya, ca));
    }
  }
  if (*tb != KIR_NO_VAR) {
    TRY(kir_emit_scalar(p, a, 0, &z));
    TRY(kir_emit2(p, KIR_PRIM_EQ, a, z, &z));
    TRY(kir_emit_scalar(p, a, 1, &one));
    TRY(kir_emit_select(p, z, a, one, kir_var_aval(p, a), &t));
    TRY(kir_emit1(p, KIR_PRIM_LOG, t, &t));
    TRY(kir_emit2(p, KIR_PRIM_MUL, t, y, cb));
  }
  return KILN_OK;
}

kiln_status kir_ew_jvp_select_n(kir_program *p, const kir_eqn *e, const kir_vid *x,
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
kiln_status kir_ew_jvp_clamp(kir_program *p, const kir_eqn *e, const kir_vid *x,
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

kiln_status kir_ew_jvp_convert_element_type(kir_program *p, const kir_eqn *e, const kir_vid *x,
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

kiln_status kir_ew_tr_neg(kir_program *p, const kir_program *src, const kir_eqn *e,
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

kiln_status kir_ew_tr_select_n(kir_program *p, const kir_program *src, const kir_eqn *e,
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

kiln_status kir_ew_tr_convert_element_type(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  (void)lin, (void)x;
  return kir_emit_convert(p, ct[0], kir_var_aval(src, e->in[0])->dtype, &ct_x[0]);
}

kiln_status kir_ew_tr_add(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  return tr_add_sub(p, src, e, lin, x, ct, ct_x);
}

kiln_status kir_ew_tr_sub(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  return tr_add_sub(p, src, e, lin, x, ct, ct_x);
}

kiln_status kir_ew_tr_mul(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  return tr_mul_div(p, src, e, lin, x, ct, ct_x);
}

kiln_status kir_ew_tr_div(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  return tr_mul_div(p, src, e, lin, x, ct, ct_x);
}

/* Each record's jvp and transpose rule. */
#define KIR_EW_JVP_ZERO(name) kir_ad_jvp_zero
#define KIR_EW_JVP_LINEAR(name) jvp_linear
#define KIR_EW_JVP_COEFF(name) jvp_unary
#define KIR_EW_JVP_PARTIALS(name) jvp_binary
#define KIR_EW_JVP_OWN(name) kir_ew_jvp_##name
#define KIR_EW_TR_NONE(name) NULL
#define KIR_EW_TR_LIKE(name) tr_like
#define KIR_EW_TR_OWN(name) kir_ew_tr_##name
void kir_elementwise_ad(kir_ad_rules *r) {
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp_col, transpose_col)                         \
  r->jvp[KIR_PRIM_##ID] = KIR_EW_JVP_##jvp_col(name);                                          \
  r->transpose[KIR_PRIM_##ID] = KIR_EW_TR_##transpose_col(name);
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
#undef KIR_PRIM
}
