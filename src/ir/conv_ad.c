/* jvp, transpose and batching rules of conv_general_dilated, as JAX's
 * (jax/_src/lax/convolution.py): the transposes are convolutions again
 * (_conv_general_dilated_transpose_lhs/_rhs, with the feature and batch
 * group counts trading places), and vmap folds the mapped axis into the
 * batch, feature or group dimensions (_conv_general_dilated_batch_rule). */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static kiln_status emit_conv(kir_program *p, const kir_p_conv *c, kir_vid lhs, kir_vid rhs,
                             kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.conv = *c;
  kir_vid in[2] = {lhs, rhs};
  return kir_emit(p, KIR_PRIM_CONV_GENERAL_DILATED, &pr, 2, in, out);
}

/* JAX's _reshape_axis_out_of: axis src of x split into (size1, rest). */
static kiln_status axis_out_of(kir_program *p, kir_vid x, int src, int64_t size1, kir_vid *out) {
  const kir_aval *a = kir_var_aval(p, x);
  if (a->rank + 1 > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "conv_general_dilated: rank %d is too high to split an axis",
                      a->rank);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  kir_sizes *s = &pr.reshape.new_sizes;
  for (int i = 0; i < a->rank; i++) {
    if (i == src) s->v[s->n++] = size1, s->v[s->n++] = a->shape[i] / size1;
    else s->v[s->n++] = a->shape[i];
  }
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &x, out);
}

/* JAX's _reshape_axis_into: axis src of x merged (as the major part) into
 * axis dst, dst counted after src is taken out. */
static kiln_status axis_into(kir_program *p, kir_vid x, int src, int dst, kir_vid *out) {
  const kir_aval a = *kir_var_aval(p, x);
  int perm[KIR_MAX_RANK], n = 0;
  for (int i = 0; i < a.rank; i++)
    if (i != src) perm[n++] = i;
  memmove(perm + dst + 1, perm + dst, (size_t)(n - dst) * sizeof perm[0]);
  perm[dst] = src;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  bool ident = true;
  pr.transpose.permutation.n = a.rank;
  for (int i = 0; i < a.rank; i++) {
    pr.transpose.permutation.v[i] = (int8_t)perm[i];
    ident &= perm[i] == i;
  }
  kir_vid t = x;
  if (!ident) TRY(kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, &x, &t));
  memset(&pr, 0, sizeof pr);
  kir_sizes *s = &pr.reshape.new_sizes;
  for (int i = 0; i < a.rank; i++) {
    if (i == dst + 1) s->v[s->n - 1] *= a.shape[perm[i]];
    else s->v[s->n++] = a.shape[perm[i]];
  }
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &t, out);
}

static int64_t dilate(int64_t d, int64_t k) { return d == 0 ? 0 : 1 + k * (d - 1); }

/* (spec[1], spec[0], *spec[2:]) */
static kir_dims spec_swap(kir_dims d) {
  int8_t t = d.v[0];
  d.v[0] = d.v[1], d.v[1] = t;
  return d;
}

static kiln_status jvp_conv(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                            const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid a = KIR_NO_VAR, b = KIR_NO_VAR;
  if (tx[0] != KIR_NO_VAR) TRY(emit_conv(p, &e->params.conv, tx[0], x[1], &a));
  if (tx[1] != KIR_NO_VAR) TRY(emit_conv(p, &e->params.conv, x[0], tx[1], &b));
  return kir_emit_add_any(p, a, b, ty);
}

/* The cotangent of the lhs: g convolved with the spatially reversed rhs,
 * strides and lhs dilation trading places. */
static kiln_status transpose_lhs(kir_program *p, const kir_p_conv *c, kir_vid g, kir_vid rhs,
                                 const kir_aval *lhs_aval, kir_vid *out) {
  const kir_conv_dims *d = &c->dimension_numbers;
  const kir_aval *ga = kir_var_aval(p, g);
  int n_sp = ga->rank - 2;
  kir_p_conv t = *c;
  int64_t groups = c->feature_group_count > 1 ? c->feature_group_count : c->batch_group_count;
  if (groups > 1) { /* the groups move into the transposed rhs's output features */
    TRY(axis_out_of(p, rhs, d->rhs_spec.v[0], groups, &rhs));
    TRY(axis_into(p, rhs, d->rhs_spec.v[0], d->rhs_spec.v[1], &rhs));
  }
  const kir_aval *ra = kir_var_aval(p, rhs);
  t.dimension_numbers = (kir_conv_dims){d->out_spec, spec_swap(d->rhs_spec), d->lhs_spec};
  t.feature_group_count = groups;
  t.batch_group_count = 1;
  t.window_strides = c->lhs_dilation;
  t.lhs_dilation = c->window_strides;
  kir_params rv;
  memset(&rv, 0, sizeof rv);
  rv.dims.dimensions.n = n_sp;
  for (int s = 0; s < n_sp; s++) {
    int64_t in_d = dilate(lhs_aval->shape[d->lhs_spec.v[2 + s]], c->lhs_dilation.v[s]);
    int64_t win = dilate(ra->shape[d->rhs_spec.v[2 + s]], c->rhs_dilation.v[s]);
    int64_t od = dilate(ga->shape[d->out_spec.v[2 + s]], c->window_strides.v[s]);
    t.padding.lo[s] = win - c->padding.lo[s] - 1;
    t.padding.hi[s] = in_d + win - 1 - od - t.padding.lo[s];
    t.padding.interior[s] = 0;
    rv.dims.dimensions.v[s] = d->rhs_spec.v[2 + s];
  }
  kir_vid rev = rhs;
  if (n_sp) TRY(kir_emit(p, KIR_PRIM_REV, &rv, 1, &rhs, &rev));
  TRY(emit_conv(p, &t, g, rev, out));
  if (c->batch_group_count > 1) {
    TRY(axis_out_of(p, *out, d->lhs_spec.v[1], c->batch_group_count, out));
    TRY(axis_into(p, *out, d->lhs_spec.v[1], d->lhs_spec.v[0], out));
  }
  return KILN_OK;
}

/* The cotangent of the rhs: the lhs convolved with g, batch and features
 * trading places (and the group counts with them). */
static kiln_status transpose_rhs(kir_program *p, const kir_p_conv *c, kir_vid g, kir_vid lhs,
                                 const kir_aval *rhs_aval, kir_vid *out) {
  const kir_conv_dims *d = &c->dimension_numbers;
  const kir_aval *ga = kir_var_aval(p, g), *la = kir_var_aval(p, lhs);
  if (kir_aval_size(ga) == 0) return kir_emit_zeros(p, rhs_aval, out);
  int n_sp = ga->rank - 2;
  kir_p_conv t = *c;
  t.feature_group_count = c->batch_group_count;
  t.batch_group_count = c->feature_group_count;
  t.dimension_numbers = (kir_conv_dims){spec_swap(d->lhs_spec), spec_swap(d->out_spec),
                                        spec_swap(d->rhs_spec)};
  t.window_strides = c->rhs_dilation;
  t.rhs_dilation = c->window_strides;
  for (int s = 0; s < n_sp; s++) {
    int64_t in_d = dilate(la->shape[d->lhs_spec.v[2 + s]], c->lhs_dilation.v[s]);
    int64_t win = dilate(rhs_aval->shape[d->rhs_spec.v[2 + s]], c->rhs_dilation.v[s]);
    int64_t od = dilate(ga->shape[d->out_spec.v[2 + s]], c->window_strides.v[s]);
    t.padding.hi[s] = (od - in_d) + (win - c->padding.lo[s] - 1);
  }
  return emit_conv(p, &t, lhs, g, out);
}

static kiln_status tr_conv(kir_program *p, const kir_program *src, const kir_eqn *e,
                           const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  if (lin[0] == lin[1])
    return kcore_fail(KILN_ERR_INTERNAL,
                      "autodiff: conv_general_dilated must be linear in exactly one operand");
  int k = lin[0] ? 0 : 1;
  const kir_aval *xa = kir_var_aval(src, e->in[k]);
  kir_vid other, g = ct[0];
  /* under a preferred_element_type the other operand joins the cotangent's
   * dtype, as JAX's rules convert it */
  TRY(kir_emit_convert(p, x[1 - k], kir_var_aval(p, g)->dtype, &other));
  if (k == 0) TRY(transpose_lhs(p, &e->params.conv, g, other, xa, &ct_x[0]));
  else TRY(transpose_rhs(p, &e->params.conv, g, other, xa, &ct_x[1]));
  return kir_emit_convert(p, ct_x[k], xa->dtype, &ct_x[k]);
}

/* Mapped axis b of x (of size n) moved next to group axis `at` (split into
 * `groups` first when groups > 1) so that the groups stay outermost: JAX's
 * three-reshape dance for grouped convolutions. */
static kiln_status fold_into_groups(kir_program *p, kir_vid x, int b, int at, int64_t groups,
                                    kir_vid *out) {
  TRY(axis_out_of(p, x, at + (b <= at), groups, &x));
  TRY(axis_into(p, x, b + (at < b), at + 1, &x));
  return axis_into(p, x, at, at, out);
}

static kiln_status batch_conv(kir_program *p, const kir_program *src, const kir_eqn *e,
                              int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                              int *ybd) {
  (void)src;
  kir_p_conv c = e->params.conv;
  const kir_conv_dims *d = &e->params.conv.dimension_numbers;
  int l0 = d->lhs_spec.v[0], l1 = d->lhs_spec.v[1], r0 = d->rhs_spec.v[0];
  int o0 = d->out_spec.v[0], o1 = d->out_spec.v[1];
  kir_vid lhs = x[0], rhs = x[1], o;
  if (bd[0] >= 0 && bd[1] >= 0) {
    if (c.batch_group_count > 1) {
      TRY(axis_into(p, lhs, bd[0], l0, &lhs));
      c.batch_group_count *= size;
    } else {
      TRY(axis_into(p, lhs, bd[0], l1, &lhs));
      c.feature_group_count *= size;
    }
    TRY(axis_into(p, rhs, bd[1], r0, &rhs));
    TRY(emit_conv(p, &c, lhs, rhs, &o));
    *ybd = o1;
    return axis_out_of(p, o, o1, size, y);
  }
  if (bd[0] >= 0) {
    if (c.batch_group_count == 1) TRY(axis_into(p, lhs, bd[0], l0, &lhs));
    else TRY(fold_into_groups(p, lhs, bd[0], l0, c.batch_group_count, &lhs));
    TRY(emit_conv(p, &c, lhs, rhs, &o));
    *ybd = o0;
    return axis_out_of(p, o, o0, size, y);
  }
  int64_t groups = c.feature_group_count > 1 ? c.feature_group_count : c.batch_group_count;
  *ybd = o1;
  if (groups == 1) {
    TRY(axis_into(p, rhs, bd[1], r0, &rhs));
    TRY(emit_conv(p, &c, lhs, rhs, &o));
    return axis_out_of(p, o, o1, size, y);
  }
  TRY(fold_into_groups(p, rhs, bd[1], r0, groups, &rhs));
  TRY(emit_conv(p, &c, lhs, rhs, &o));
  TRY(axis_out_of(p, o, o1, groups, &o));
  TRY(axis_out_of(p, o, o1 + 1, size, &o));
  return axis_into(p, o, o1, o1 + 1, y);
}

void kir_conv_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_CONV_GENERAL_DILATED] = jvp_conv;
  r->transpose[KIR_PRIM_CONV_GENERAL_DILATED] = tr_conv;
  r->batch[KIR_PRIM_CONV_GENERAL_DILATED] = batch_conv;
}
