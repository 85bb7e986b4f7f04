/* jvp and transpose rules of the reductions: reduce_sum is linear (its
 * transpose a broadcast_in_dim); reduce_max/min split the tangent among
 * the tied maxima, as JAX's _reduce_chooser_jvp_rule; argmax/argmin have no
 * tangent; cumsum is linear (its transpose the reversed cumsum); sort
 * gathers the tangents with its permutation, cummax/cummin with the
 * position of the running extreme; cumprod contracts with the products
 * that leave one factor out; reduce_prod multiplies pairwise (JAX's
 * _reduce_jvp), so zeros never divide. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

/* y of a reduction over `axes` broadcast back to the operand's aval. */
static kiln_status unreduce(kir_program *p, kir_vid y, const kir_dims *axes, const kir_aval *to,
                            kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.broadcast.shape.n = to->rank;
  memcpy(pr.broadcast.shape.v, to->shape, (size_t)to->rank * sizeof(int64_t));
  for (int i = 0; i < to->rank; i++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == i;
    if (!reduced) pr.broadcast.broadcast_dimensions.v[pr.broadcast.broadcast_dimensions.n++] = (int8_t)i;
  }
  return kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &pr, 1, &y, out);
}

static kiln_status jvp_reduce_sum(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                  const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status tr_reduce_sum(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 const bool *lin, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *ct_x) {
  (void)lin, (void)x;
  return unreduce(p, ct[0], &e->params.axes.axes, kir_var_aval(src, e->in[0]), &ct_x[0]);
}

/* sum(tx * loc) / sum(loc) with loc = (x == broadcast(y)) */
static kiln_status jvp_reduce_chooser(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                      const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *xa = kir_var_aval(p, x[0]);
  kir_vid b, loc, cnt, t;
  TRY(unreduce(p, y[0], &e->params.axes.axes, xa, &b));
  TRY(kir_emit2(p, KIR_PRIM_EQ, x[0], b, &loc));
  TRY(kir_emit_convert(p, loc, xa->dtype, &loc));
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.axes = e->params.axes;
  TRY(kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &loc, &cnt));
  TRY(unreduce(p, cnt, &e->params.axes.axes, xa, &cnt));
  TRY(kir_emit2(p, KIR_PRIM_DIV, loc, cnt, &loc));
  TRY(kir_emit2(p, KIR_PRIM_MUL, tx[0], loc, &t));
  return kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &t, ty);
}

static kiln_status jvp_cumsum(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status tr_cumsum(kir_program *p, const kir_program *src, const kir_eqn *e,
                             const bool *lin, const kir_vid *x, const kir_vid *ct,
                             kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  kir_params pr = e->params;
  pr.cumulative.reverse = !pr.cumulative.reverse;
  return kir_emit(p, KIR_PRIM_CUMSUM, &pr, 1, ct, &ct_x[0]);
}

/* take_along_axis's gather (as jnp's): operand a's dimension d indexed by
 * an index array of a's shape with a trailing 1, the other dimensions
 * batching. */
static void take_along_params(const kir_aval *a, int d, kir_params *pr) {
  memset(pr, 0, sizeof *pr);
  kir_gather_dims *gd = &pr->gather.dimension_numbers;
  gd->collapsed_slice_dims = (kir_dims){1, {(int8_t)d}};
  gd->start_index_map = gd->collapsed_slice_dims;
  for (int i = 0; i < a->rank; i++)
    if (i != d) gd->operand_batching_dims.v[gd->operand_batching_dims.n++] = (int8_t)i;
  gd->start_indices_batching_dims = gd->operand_batching_dims;
  pr->gather.slice_sizes.n = a->rank;
  for (int i = 0; i < a->rank; i++) pr->gather.slice_sizes.v[i] = 1;
  pr->gather.mode = KIR_GATHER_PROMISE_IN_BOUNDS;
}

/* idx (of a's shape) with a trailing 1, the index array of take_along_params */
static kiln_status index_column(kir_program *p, const kir_aval *a, kir_vid idx, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = a->rank + 1;
  memcpy(pr.reshape.new_sizes.v, a->shape, (size_t)a->rank * sizeof(int64_t));
  pr.reshape.new_sizes.v[a->rank] = 1;
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &idx, out);
}

/* An i32 iota of shape (rank, shape) along dimension d. */
static kiln_status iota(kir_program *p, int rank, const int64_t *shape, int d, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.iota.dimension = d;
  pr.iota.dtype = KILN_I32;
  pr.iota.shape.n = rank;
  memcpy(pr.iota.shape.v, shape, (size_t)rank * sizeof(int64_t));
  return kir_emit(p, KIR_PRIM_IOTA, &pr, 0, NULL, out);
}

/* sort carries the permutation: the operands are sorted again together with
 * an iota along the dimension, and each tangent is gathered with the
 * resulting permutation (a take_along_axis), as JAX's _sort_jvp. */
static kiln_status jvp_sort(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                            const kir_vid *tx, kir_vid *ty) {
  (void)y;
  const kir_aval *a = kir_var_aval(p, x[0]);
  int n = e->n_in, d = (int)e->params.sort.dimension, idx;
  kir_vid *in = kir_alloc(p, (size_t)(n + 1) * sizeof *in), perm;
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "sort: autodiff out of host memory");
  memcpy(in, x, (size_t)n * sizeof *in);
  TRY(iota(p, a->rank, a->shape, d, &in[n]));
  TRY(kir_add_eqn(p, KIR_PRIM_SORT, &e->params, n + 1, in, &idx));
  TRY(index_column(p, a, p->eqns[idx].out[n], &perm));
  kir_params pr;
  take_along_params(a, d, &pr);
  for (int i = 0; i < n; i++) {
    ty[i] = KIR_NO_VAR;
    if (tx[i] == KIR_NO_VAR) continue;
    kir_vid g[2] = {tx[i], perm};
    TRY(kir_emit(p, KIR_PRIM_GATHER, &pr, 2, g, &ty[i]));
  }
  return KILN_OK;
}

/* cummax/cummin: the tangent at the position the running extreme came from
 * (the latest in scan order where x equals it), gathered along the axis;
 * with distinct values this is JAX's associative-scan jvp, at ties JAX's
 * scan tree splits the tangent where this picks one position. */
static kiln_status jvp_cumchooser(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                  const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *a = kir_var_aval(p, x[0]);
  int d = (int)e->params.cumulative.axis;
  bool rev = e->params.cumulative.reverse;
  kir_vid at, io, fill, pos;
  TRY(kir_emit2(p, KIR_PRIM_EQ, x[0], y[0], &at));
  TRY(iota(p, a->rank, a->shape, d, &io));
  /* forward: the largest matching index so far (0 if none, as NaN);
   * reversed: the smallest from the end */
  TRY(kir_emit_scalar(p, io, rev ? (double)(a->shape[d] - 1) : 0.0, &fill));
  kir_aval ia = *a;
  ia.dtype = KILN_I32;
  TRY(kir_emit_select(p, at, fill, io, &ia, &pos));
  TRY(kir_emit(p, rev ? KIR_PRIM_CUMMIN : KIR_PRIM_CUMMAX, &e->params, 1, &pos, &pos));
  TRY(index_column(p, a, pos, &pos));
  kir_params pr;
  take_along_params(a, d, &pr);
  kir_vid g[2] = {tx[0], pos};
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, g, ty);
}

/* cumprod: ty_i = sum_j t_j prod_{k <= i, k != j} x_k (k >= i reversed),
 * without dividing by x (zeros are exact, as JAX's associative-scan jvp):
 * a cumprod over [.., j, k, ..] of x with x_j replaced by 1, masked to
 * k >= j and contracted with t over j. Costs n times the operand in
 * memory, for an axis of n. */
static kiln_status jvp_cumprod(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  const kir_aval *a = kir_var_aval(p, x[0]);
  int d = (int)e->params.cumulative.axis, r = a->rank + 1;
  if (r > KIR_MAX_RANK) {
    char buf[128];
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "cumprod: jvp of %s along axis %d needs a rank-%d intermediate; at most %d",
                      kir_aval_str(a, buf, sizeof buf), d, r, KIR_MAX_RANK);
  }
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < r; i++) shape[i] = a->shape[i <= d ? i : i - 1];
  kir_aval big = *a;
  big.rank = r;
  memcpy(big.shape, shape, (size_t)r * sizeof(int64_t));
  kir_params br;
  memset(&br, 0, sizeof br);
  br.broadcast.shape.n = r;
  memcpy(br.broadcast.shape.v, shape, (size_t)r * sizeof(int64_t));
  br.broadcast.broadcast_dimensions.n = a->rank;
  for (int i = 0; i < a->rank; i++) /* x along k (dimension d + 1) */
    br.broadcast.broadcast_dimensions.v[i] = (int8_t)(i < d ? i : i + 1);
  kir_vid j, k, eye, xb, one, c, zero, keep, tb, m;
  TRY(iota(p, r, shape, d, &j));
  TRY(iota(p, r, shape, d + 1, &k));
  TRY(kir_emit2(p, KIR_PRIM_EQ, j, k, &eye));
  TRY(kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &br, 1, &x[0], &xb));
  TRY(kir_emit_scalar(p, x[0], 1.0, &one));
  TRY(kir_emit_select(p, eye, xb, one, &big, &c));
  kir_params cp = e->params;
  cp.cumulative.axis = d + 1;
  TRY(kir_emit(p, KIR_PRIM_CUMPROD, &cp, 1, &c, &c));
  TRY(kir_emit2(p, e->params.cumulative.reverse ? KIR_PRIM_LE : KIR_PRIM_GE, k, j, &keep));
  TRY(kir_emit_zeros(p, &big, &zero));
  TRY(kir_emit_select(p, keep, zero, c, &big, &m));
  for (int i = 0; i < a->rank; i++) /* t along j (dimension d) */
    br.broadcast.broadcast_dimensions.v[i] = (int8_t)(i <= d ? i : i + 1);
  TRY(kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &br, 1, &tx[0], &tb));
  TRY(kir_emit2(p, KIR_PRIM_MUL, tb, m, &tb));
  kir_params sp;
  memset(&sp, 0, sizeof sp);
  sp.axes.axes = (kir_dims){1, {(int8_t)d}};
  return kir_emit(p, KIR_PRIM_REDUCE_SUM, &sp, 1, &tb, ty);
}

/* The rows [lo, hi) of x along dimension 0. */
static kiln_status rows(kir_program *p, kir_vid x, int64_t lo, int64_t hi, kir_vid *out) {
  const kir_aval *a = kir_var_aval(p, x);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  kir_p_slice *s = &pr.slice;
  s->start_indices.n = s->limit_indices.n = s->strides.n = a->rank;
  for (int i = 0; i < a->rank; i++) {
    s->start_indices.v[i] = i ? 0 : lo;
    s->limit_indices.v[i] = i ? a->shape[i] : hi;
    s->strides.v[i] = 1;
  }
  return kir_emit(p, KIR_PRIM_SLICE, &pr, 1, &x, out);
}

/* x with one row of v appended along dimension 0. */
static kiln_status pad_row(kir_program *p, kir_vid x, double v, kir_vid *out) {
  const kir_aval *a = kir_var_aval(p, x);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.pad.padding_config.n = a->rank;
  pr.pad.padding_config.hi[0] = 1;
  kir_vid in[2] = {x};
  TRY(kir_emit_scalar(p, x, v, &in[1]));
  return kir_emit(p, KIR_PRIM_PAD, &pr, 2, in, out);
}

/* reduce_prod as JAX's _reduce_jvp: the reduced axes moved to the front
 * and flattened to one of n, then halved until one row is left, the
 * halves multiplied (the shorter padded with a row of ones, its tangent
 * with zeros): tangent t1 * x2 + x1 * t2. No division, so a zero factor
 * gives the exact product of the others. */
static kiln_status jvp_reduce_prod(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                   const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *a = kir_var_aval(p, x[0]);
  const kir_dims *axes = &e->params.axes.axes;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  kir_dims *perm = &pr.transpose.permutation;
  int64_t n = 1;
  bool moved = false;
  for (int k = 0; k < axes->n; k++) {
    n *= a->shape[axes->v[k]];
    moved |= axes->v[k] != k;
    perm->v[perm->n++] = axes->v[k];
  }
  for (int i = 0; i < a->rank; i++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == i;
    if (!reduced) perm->v[perm->n++] = (int8_t)i;
  }
  const kir_aval *ya = kir_var_aval(p, y[0]);
  if (!axes->n) { /* the product of one factor */
    *ty = tx[0];
    return KILN_OK;
  }
  if (n == 0) return kir_emit_zeros(p, ya, ty);
  kir_vid xs = x[0], ts = tx[0];
  if (moved) {
    TRY(kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, &xs, &xs));
    TRY(kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, &ts, &ts));
  }
  memset(&pr, 0, sizeof pr); /* reshape to [n, kept dims...] */
  pr.reshape.new_sizes.v[pr.reshape.new_sizes.n++] = n;
  for (int i = 0; i < ya->rank; i++) pr.reshape.new_sizes.v[pr.reshape.new_sizes.n++] = ya->shape[i];
  TRY(kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &xs, &xs));
  TRY(kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &ts, &ts));
  for (int64_t m = n; m > 1; m = (m + 1) / 2) {
    int64_t n1 = (m + 1) / 2;
    kir_vid x1, x2, t1, t2, a1, a2;
    TRY(rows(p, xs, 0, n1, &x1));
    TRY(rows(p, xs, n1, m, &x2));
    TRY(rows(p, ts, 0, n1, &t1));
    TRY(rows(p, ts, n1, m, &t2));
    if (m - n1 != n1) {
      TRY(pad_row(p, x2, 1.0, &x2));
      TRY(pad_row(p, t2, 0.0, &t2));
    }
    TRY(kir_emit2(p, KIR_PRIM_MUL, t1, x2, &a1));
    TRY(kir_emit2(p, KIR_PRIM_MUL, x1, t2, &a2));
    TRY(kir_emit2(p, KIR_PRIM_ADD, a1, a2, &ts));
    if (n1 > 1) TRY(kir_emit2(p, KIR_PRIM_MUL, x1, x2, &xs));
  }
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = ya->rank;
  memcpy(pr.reshape.new_sizes.v, ya->shape, (size_t)ya->rank * sizeof(int64_t));
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &ts, ty);
}

void kir_reduce_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_REDUCE_PROD] = jvp_reduce_prod;
  r->jvp[KIR_PRIM_REDUCE_SUM] = jvp_reduce_sum;
  r->transpose[KIR_PRIM_REDUCE_SUM] = tr_reduce_sum;
  r->jvp[KIR_PRIM_REDUCE_MAX] = jvp_reduce_chooser;
  r->jvp[KIR_PRIM_REDUCE_MIN] = jvp_reduce_chooser;
  r->jvp[KIR_PRIM_ARGMAX] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_ARGMIN] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_REDUCE_AND] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_REDUCE_OR] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_CUMSUM] = jvp_cumsum;
  r->transpose[KIR_PRIM_CUMSUM] = tr_cumsum;
  r->jvp[KIR_PRIM_SORT] = jvp_sort;
  r->jvp[KIR_PRIM_CUMPROD] = jvp_cumprod;
  r->jvp[KIR_PRIM_CUMMAX] = jvp_cumchooser;
  r->jvp[KIR_PRIM_CUMMIN] = jvp_cumchooser;
}
