/* jvp and transpose rules of dot_general. The transposes are dot_generals
 * with permuted dimension numbers (JAX's _dot_general_transpose_lhs/rhs);
 * where JAX follows the dot with a transpose, the operands are swapped
 * instead when that gives the operand's layout directly. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static kiln_status jvp_dot(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                           const kir_vid *tx, kir_vid *ty) {
  kir_vid a = KIR_NO_VAR, b = KIR_NO_VAR;
  (void)y;
  kir_vid in[2] = {tx[0], x[1]};
  if (tx[0] != KIR_NO_VAR) TRY(kir_emit_like(p, e, 2, in, &a));
  in[0] = x[0], in[1] = tx[1];
  if (tx[1] != KIR_NO_VAR) TRY(kir_emit_like(p, e, 2, in, &b));
  return kir_emit_add_any(p, a, b, ty);
}

static bool in_dims(const kir_dims *d, int v) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == v) return true;
  return false;
}

/* dims of [0, rank) in neither a nor b, ascending */
static kir_dims remaining(int rank, const kir_dims *a, const kir_dims *b) {
  kir_dims r = {0, {0}};
  for (int i = 0; i < rank; i++)
    if (!in_dims(a, i) && !in_dims(b, i)) r.v[r.n++] = (int8_t)i;
  return r;
}

static kir_dims range_dims(int start, int n) {
  kir_dims r = {n, {0}};
  for (int i = 0; i < n; i++) r.v[i] = (int8_t)(start + i);
  return r;
}

/* perm (a permutation of x's dims, as the dot leaves them) -> the
 * transpose's permutation, argsort(perm); true if it is the identity */
static bool argsort_dims(const int *order, int n, kir_dims *out) {
  bool ident = true;
  out->n = n;
  for (int i = 0; i < n; i++) {
    out->v[order[i]] = (int8_t)i;
    ident &= order[i] == i;
  }
  return ident;
}

/* The cotangent of operand x of dot(x, y) (swap: of dot(y, x)). */
static kiln_status dot_transpose_one(kir_program *p, kir_vid g, kir_vid yv, int x_rank,
                                     int y_rank, kir_dims xc, kir_dims yc, kir_dims xb,
                                     kir_dims yb, bool swap, kiln_dtype pref, kir_vid *out) {
  kir_dims x_kept = remaining(x_rank, &xc, &xb), y_kept = remaining(y_rank, &yc, &yb);
  kir_dims ans_batch = range_dims(0, xb.n), ans_y;
  ans_y = swap ? range_dims(xb.n, y_kept.n) : range_dims(xb.n + x_kept.n, y_kept.n);
  kir_dims ans_x = swap ? range_dims(xb.n + y_kept.n, x_kept.n) : range_dims(xb.n, x_kept.n);
  (void)ans_x;
  /* x's contracting dims in the order of y's (sorted) contracting dims */
  int xc_by_y[KIR_MAX_RANK];
  for (int k = 0, m = 0; k < y_rank; k++)
    for (int j = 0; j < yc.n; j++)
      if (yc.v[j] == k) xc_by_y[m++] = xc.v[j];
  int order[KIR_MAX_RANK], n = 0;
  /* dot(g, y): batch, x_kept (g's free dims), x contracting */
  for (int i = 0; i < xb.n; i++) order[n++] = xb.v[i];
  for (int i = 0; i < x_kept.n; i++) order[n++] = x_kept.v[i];
  for (int i = 0; i < xc.n; i++) order[n++] = xc_by_y[i];
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.dot.preferred_element_type = pref;
  kir_dims perm;
  bool ident = argsort_dims(order, n, &perm);
  kir_vid in[2] = {g, yv};
  if (ident) {
    pr.dot.dimension_numbers = (kir_dot_dims){ans_y, y_kept, ans_batch, yb};
    return kir_emit(p, KIR_PRIM_DOT_GENERAL, &pr, 2, in, out);
  }
  /* dot(y, g): batch, x contracting (y's free dims), x_kept */
  n = 0;
  for (int i = 0; i < xb.n; i++) order[n++] = xb.v[i];
  for (int i = 0; i < xc.n; i++) order[n++] = xc_by_y[i];
  for (int i = 0; i < x_kept.n; i++) order[n++] = x_kept.v[i];
  kir_dims perm2;
  if (argsort_dims(order, n, &perm2)) {
    pr.dot.dimension_numbers = (kir_dot_dims){y_kept, ans_y, yb, ans_batch};
    in[0] = yv, in[1] = g;
    return kir_emit(p, KIR_PRIM_DOT_GENERAL, &pr, 2, in, out);
  }
  kir_vid d;
  pr.dot.dimension_numbers = (kir_dot_dims){ans_y, y_kept, ans_batch, yb};
  TRY(kir_emit(p, KIR_PRIM_DOT_GENERAL, &pr, 2, in, &d));
  memset(&pr, 0, sizeof pr);
  pr.transpose.permutation = perm;
  return kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, &d, out);
}

static kiln_status tr_dot(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  const kir_dot_dims *dn = &e->params.dot.dimension_numbers;
  int r0 = kir_var_aval(src, e->in[0])->rank, r1 = kir_var_aval(src, e->in[1])->rank;
  kiln_dtype pref = e->params.dot.preferred_element_type;
  kir_vid g = ct[0];
  if (lin[0] && lin[1])
    return kcore_fail(KILN_ERR_INTERNAL, "autodiff: dot_general is not linear in both operands");
  if (lin[0]) {
    TRY(dot_transpose_one(p, g, x[1], r0, r1, dn->lhs_contracting, dn->rhs_contracting,
                          dn->lhs_batch, dn->rhs_batch, false, pref, &ct_x[0]));
    return kir_emit_convert(p, ct_x[0], kir_var_aval(src, e->in[0])->dtype, &ct_x[0]);
  }
  TRY(dot_transpose_one(p, g, x[0], r1, r0, dn->rhs_contracting, dn->lhs_contracting,
                        dn->rhs_batch, dn->lhs_batch, true, pref, &ct_x[1]));
  return kir_emit_convert(p, ct_x[1], kir_var_aval(src, e->in[1])->dtype, &ct_x[1]);
}

void kir_dot_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_DOT_GENERAL] = jvp_dot;
  r->transpose[KIR_PRIM_DOT_GENERAL] = tr_dot;
}
