/* Structural primitives: broadcast, reshape, transpose, squeeze,
 * expand_dims, rev, slices, concatenate, pad, iota, gather and the scatters:
 * their shape/dtype rules (lax semantics). The reference evaluators are in
 * shape_eval.c. */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define TSTR(a, buf) kir_aval_str((a), (buf), sizeof(buf))

static kiln_status kir_nonnegative_sizes(kir_prim prim, const char *param, const kir_sizes *s) {
  for (int i = 0; i < s->n; i++) {
    if (s->v[i] < 0) {
      char ss[256];
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s=%s has a negative entry", kir_prim_name(prim),
                        param, kir_sizes_str(s, ss, sizeof ss));
    }
  }
  return KILN_OK;
}

kiln_status kir_rule_broadcast_in_dim(kir_prim prim, const kir_params *params, int n_in,
                                      const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_broadcast *p = &params->broadcast;
  const kir_aval *x = &in[0];
  char t[KIR_AVAL_STR_CAP], ds[128], ss[256];
  kiln_status st = kir_nonnegative_sizes(prim, "shape", &p->shape);
  if (st != KILN_OK) return st;
  if (p->broadcast_dimensions.n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE,
                      "broadcast_in_dim: broadcast_dimensions=%s must have one entry per "
                      "dimension of operand %s",
                      kir_dims_str(&p->broadcast_dimensions, ds, sizeof ds), TSTR(x, t));
  if (p->shape.n < x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "broadcast_in_dim: shape=%s has lower rank than operand %s",
                      kir_sizes_str(&p->shape, ss, sizeof ss), TSTR(x, t));
  st = kir_check_dims(prim, "broadcast_dimensions", &p->broadcast_dimensions, p->shape.n, false,
                      x);
  if (st != KILN_OK) return st;
  for (int i = 0; i < x->rank; i++) {
    int64_t target = p->shape.v[p->broadcast_dimensions.v[i]];
    if (x->shape[i] != 1 && x->shape[i] != target)
      return kcore_fail(KILN_ERR_SHAPE,
                        "broadcast_in_dim: operand %s cannot broadcast to shape=%s with "
                        "broadcast_dimensions=%s (dimension %d is neither 1 nor %lld)",
                        TSTR(x, t), kir_sizes_str(&p->shape, ss, sizeof ss),
                        kir_dims_str(&p->broadcast_dimensions, ds, sizeof ds), i,
                        (long long)target);
  }
  return kir_push(out, x->dtype, p->shape.n, p->shape.v, x->weak);
}

kiln_status kir_rule_reshape(kir_prim prim, const kir_params *params, int n_in,
                             const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_sizes *s = &params->reshape.new_sizes;
  kiln_status st = kir_nonnegative_sizes(prim, "new_sizes", s);
  if (st != KILN_OK) return st;
  int64_t count = 1;
  for (int i = 0; i < s->n; i++) count *= s->v[i];
  if (count != kir_aval_size(&in[0])) {
    char t[KIR_AVAL_STR_CAP], ss[256];
    return kcore_fail(KILN_ERR_SHAPE, "reshape: cannot reshape %s to new_sizes=%s (%lld elements)",
                      TSTR(&in[0], t), kir_sizes_str(s, ss, sizeof ss), (long long)count);
  }
  return kir_push(out, in[0].dtype, s->n, s->v, in[0].weak);
}

kiln_status kir_rule_transpose(kir_prim prim, const kir_params *params, int n_in,
                               const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_dims *perm = &params->transpose.permutation;
  const kir_aval *x = &in[0];
  if (perm->n != x->rank) {
    char t[KIR_AVAL_STR_CAP], ds[128];
    return kcore_fail(KILN_ERR_SHAPE,
                      "transpose: permutation=%s is not a permutation of the dimensions of %s",
                      kir_dims_str(perm, ds, sizeof ds), TSTR(x, t));
  }
  kiln_status st = kir_check_dims(prim, "permutation", perm, x->rank, false, x);
  if (st != KILN_OK) return st;
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < x->rank; i++) shape[i] = x->shape[perm->v[i]];
  return kir_push(out, x->dtype, x->rank, shape, x->weak);
}

kiln_status kir_rule_squeeze(kir_prim prim, const kir_params *params, int n_in,
                             const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_dims *d = &params->dims.dimensions;
  const kir_aval *x = &in[0];
  kiln_status st = kir_check_dims(prim, "dimensions", d, x->rank, false, x);
  if (st != KILN_OK) return st;
  bool drop[KIR_MAX_RANK] = {false};
  for (int i = 0; i < d->n; i++) {
    if (x->shape[d->v[i]] != 1) {
      char t[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "squeeze: dimension %d of %s has size %lld, not 1",
                        d->v[i], TSTR(x, t), (long long)x->shape[d->v[i]]);
    }
    drop[d->v[i]] = true;
  }
  int64_t shape[KIR_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) shape[rank++] = x->shape[i];
  return kir_push(out, x->dtype, rank, shape, x->weak);
}

/* kiln's own primitive (lax.expand_dims is a broadcast_in_dim): dimensions
 * are positions in the result where size-1 axes are inserted. */
kiln_status kir_rule_expand_dims(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_dims *d = &params->dims.dimensions;
  const kir_aval *x = &in[0];
  int rank = x->rank + d->n;
  if (rank > KIR_MAX_RANK) {
    char t[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "expand_dims: %s with %d new axes exceeds rank %d",
                      TSTR(x, t), d->n, KIR_MAX_RANK);
  }
  kiln_status st = kir_check_dims(prim, "dimensions", d, rank, false, x);
  if (st != KILN_OK) return st;
  bool inserted[KIR_MAX_RANK] = {false};
  for (int i = 0; i < d->n; i++) inserted[d->v[i]] = true;
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0, k = 0; i < rank; i++) shape[i] = inserted[i] ? 1 : x->shape[k++];
  return kir_push(out, x->dtype, rank, shape, x->weak);
}

kiln_status kir_rule_rev(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                         kir_avals *out) {
  (void)n_in;
  kiln_status st = kir_check_dims(prim, "dimensions", &params->dims.dimensions, in[0].rank, false,
                                  &in[0]);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, in[0].rank, in[0].shape, in[0].weak);
}

kiln_status kir_rule_slice(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)prim;
  (void)n_in;
  const kir_p_slice *p = &params->slice;
  const kir_aval *x = &in[0];
  char t[KIR_AVAL_STR_CAP], s0[256], s1[256], s2[256];
  kir_sizes_str(&p->start_indices, s0, sizeof s0);
  kir_sizes_str(&p->limit_indices, s1, sizeof s1);
  kir_sizes_str(&p->strides, s2, sizeof s2);
  if (p->start_indices.n != x->rank || p->limit_indices.n != x->rank || p->strides.n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE,
                      "slice: start_indices=%s, limit_indices=%s and strides=%s need one entry "
                      "per dimension of operand %s",
                      s0, s1, s2, TSTR(x, t));
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    int64_t lo = p->start_indices.v[i], hi = p->limit_indices.v[i], s = p->strides.v[i];
    if (lo < 0 || hi < lo || hi > x->shape[i] || s <= 0)
      return kcore_fail(KILN_ERR_SHAPE,
                        "slice: start_indices=%s limit_indices=%s strides=%s do not fit operand %s "
                        "(need 0 <= start <= limit <= size and stride >= 1; dimension %d)",
                        s0, s1, s2, TSTR(x, t), i);
    shape[i] = hi == lo ? 0 : (hi - lo - 1) / s + 1;
  }
  return kir_push(out, x->dtype, x->rank, shape, x->weak);
}

/* Start indices: one scalar per dimension, all of one integer dtype. */
static kiln_status kir_check_start_indices(kir_prim prim, int first, int n_in, const kir_aval *in,
                                           const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  if (n_in - first != x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "%s: operand %s needs %d start indices, got %d", name,
                      TSTR(x, t), x->rank, n_in - first);
  for (int i = first; i < n_in; i++) {
    if (in[i].rank != 0)
      return kcore_fail(KILN_ERR_SHAPE, "%s: start index %d has type %s, not a scalar", name,
                        i - first, TSTR(&in[i], t));
    if (!kiln_dtype_is_integer(in[i].dtype) || in[i].dtype != in[first].dtype)
      return kcore_fail(KILN_ERR_DTYPE,
                        "%s: start indices must be integers of one dtype, got %s and %s", name,
                        TSTR(&in[first], t), TSTR(&in[i], t1));
  }
  return KILN_OK;
}

kiln_status kir_rule_dynamic_slice(kir_prim prim, const kir_params *params, int n_in,
                                   const kir_aval *in, kir_avals *out) {
  const kir_sizes *s = &params->dynamic_slice.slice_sizes;
  char t[KIR_AVAL_STR_CAP], ss[256];
  if (n_in < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "dynamic_slice: needs an operand and start indices");
  const kir_aval *x = &in[0];
  if (s->n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE,
                      "dynamic_slice: slice_sizes=%s needs one entry per dimension of operand %s",
                      kir_sizes_str(s, ss, sizeof ss), TSTR(x, t));
  for (int i = 0; i < x->rank; i++)
    if (s->v[i] < 0 || s->v[i] > x->shape[i])
      return kcore_fail(KILN_ERR_SHAPE, "dynamic_slice: slice_sizes=%s do not fit operand %s",
                        kir_sizes_str(s, ss, sizeof ss), TSTR(x, t));
  kiln_status st = kir_check_start_indices(prim, 1, n_in, in, x);
  if (st != KILN_OK) return st;
  return kir_push(out, x->dtype, s->n, s->v, x->weak);
}

kiln_status kir_rule_dynamic_update_slice(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)params;
  char t[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (n_in < 2)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "dynamic_update_slice: needs an operand, an update and start indices");
  const kir_aval *x = &in[0], *u = &in[1];
  if (u->rank != x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "dynamic_update_slice: update %s and operand %s differ in rank",
                      TSTR(u, t1), TSTR(x, t));
  for (int i = 0; i < x->rank; i++)
    if (u->shape[i] > x->shape[i])
      return kcore_fail(KILN_ERR_SHAPE,
                        "dynamic_update_slice: update %s is larger than operand %s in dimension %d",
                        TSTR(u, t1), TSTR(x, t), i);
  kiln_status st = kir_check_start_indices(prim, 2, n_in, in, x);
  if (st == KILN_OK) st = kir_check_same_dtypes(prim, 2, in);
  if (st != KILN_OK) return st;
  return kir_push(out, x->dtype, x->rank, x->shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_concatenate(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  int64_t dim = params->concatenate.dimension;
  if (n_in < 1) return kcore_fail(KILN_ERR_ARGUMENT, "concatenate: needs at least one operand");
  if (dim < 0 || dim >= in[0].rank)
    return kcore_fail(KILN_ERR_SHAPE, "concatenate: dimension=%lld is outside [0, %d) for %s",
                      (long long)dim, in[0].rank, TSTR(&in[0], t0));
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, in[0].shape, sizeof shape);
  for (int i = 1; i < n_in; i++) {
    bool ok = in[i].rank == in[0].rank;
    for (int d = 0; ok && d < in[0].rank; d++) ok = d == dim || in[i].shape[d] == in[0].shape[d];
    if (!ok)
      return kcore_fail(KILN_ERR_SHAPE,
                        "concatenate: operand types %s and %s differ in more than dimension %lld",
                        TSTR(&in[0], t0), TSTR(&in[i], t1), (long long)dim);
    shape[dim] += in[i].shape[dim];
  }
  kiln_status st = kir_check_same_dtypes(prim, n_in, in);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, in[0].rank, shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_pad(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                         kir_avals *out) {
  const kir_padding *c = &params->pad.padding_config;
  const kir_aval *x = &in[0], *v = &in[1];
  char t[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (v->rank != 0)
    return kcore_fail(KILN_ERR_SHAPE, "pad: padding value %s is not a scalar", TSTR(v, t1));
  kiln_status st = kir_check_same_dtypes(prim, 2, in);
  if (st != KILN_OK) return st;
  if (c->n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE,
                      "pad: padding_config has %d entries for operand %s of rank %d", c->n,
                      TSTR(x, t), x->rank);
  int64_t shape[KIR_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    int64_t d = x->shape[i], in_ = c->interior[i];
    if (in_ < 0)
      return kcore_fail(KILN_ERR_ARGUMENT, "pad: interior padding %lld of dimension %d is negative",
                        (long long)in_, i);
    int64_t dilated = d == 0 ? 0 : 1 + (in_ + 1) * (d - 1);
    shape[i] = c->lo[i] + c->hi[i] + dilated;
    if (shape[i] < 0)
      return kcore_fail(KILN_ERR_SHAPE,
                        "pad: padding (%lld, %lld, %lld) leaves dimension %d of %s negative",
                        (long long)c->lo[i], (long long)c->hi[i], (long long)in_, i, TSTR(x, t));
  }
  return kir_push(out, x->dtype, x->rank, shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_iota(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)n_in;
  (void)in;
  const kir_p_iota *p = &params->iota;
  char ss[256];
  if (!kiln_dtype_is_valid(p->dtype) || !kir_dtype_in(p->dtype, KIR_DT_NUM))
    return kcore_fail(KILN_ERR_DTYPE, "iota: dtype %s is not accepted (iota takes %s dtypes)",
                      kiln_dtype_name(p->dtype), kir_dtype_class_name(KIR_DT_NUM));
  kiln_status st = kir_nonnegative_sizes(prim, "shape", &p->shape);
  if (st != KILN_OK) return st;
  if (p->dimension < 0 || p->dimension >= p->shape.n)
    return kcore_fail(KILN_ERR_SHAPE, "iota: dimension=%lld is outside [0, %d) for shape=%s",
                      (long long)p->dimension, p->shape.n, kir_sizes_str(&p->shape, ss, sizeof ss));
  return kir_push(out, p->dtype, p->shape.n, p->shape.v, false);
}

/* ---- gather / scatter-add (XLA's dimension checks, as JAX runs them) ---- */

bool kir_dims_contains(const kir_dims *d, int v) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == v) return true;
  return false;
}

static kiln_status kir_check_disjoint(kir_prim prim, const char *n1, const kir_dims *a,
                                      const char *n2, const kir_dims *b) {
  for (int i = 0; i < a->n; i++) {
    if (kir_dims_contains(b, a->v[i])) {
      char s1[128], s2[128];
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s=%s and %s=%s must be disjoint",
                        kir_prim_name(prim), n1, kir_dims_str(a, s1, sizeof s1), n2,
                        kir_dims_str(b, s2, sizeof s2));
    }
  }
  return KILN_OK;
}

/* Checks shared by gather and scatter: the batching dims pair up. */
static kiln_status kir_check_batching(kir_prim prim, const kir_aval *x, const kir_aval *idx,
                                      const kir_dims *operand_batching, const char *idx_name,
                                      const kir_dims *idx_batching) {
  char t[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  kiln_status st = kir_check_dims(prim, idx_name, idx_batching, idx->rank, false, idx);
  if (st != KILN_OK) return st;
  if (kir_dims_contains(idx_batching, idx->rank - 1))
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: %s cannot contain the index vector dimension %d of indices %s", name,
                      idx_name, idx->rank - 1, TSTR(idx, t));
  if (operand_batching->n != idx_batching->n)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: operand_batching_dims and %s must have equal lengths", name, idx_name);
  for (int i = 0; i < idx_batching->n; i++)
    if (x->shape[operand_batching->v[i]] != idx->shape[idx_batching->v[i]])
      return kcore_fail(KILN_ERR_SHAPE,
                        "%s: batching dimensions of operand %s and indices %s differ in size",
                        name, TSTR(x, t), TSTR(idx, t1));
  return KILN_OK;
}

/* Indices: integers of rank >= 1, the last dimension holding the index
 * vector of `map_len` entries. */
static kiln_status kir_check_indices(kir_prim prim, const kir_aval *idx, int map_len,
                                     const char *map_name) {
  char t[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  if (!kiln_dtype_is_integer(idx->dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: indices %s must have an integer dtype", name,
                      TSTR(idx, t));
  if (idx->rank < 1)
    return kcore_fail(KILN_ERR_SHAPE,
                      "%s: indices %s need rank >= 1 (the last dimension is the index vector)",
                      name, TSTR(idx, t));
  if (idx->shape[idx->rank - 1] != map_len)
    return kcore_fail(KILN_ERR_SHAPE,
                      "%s: %s has %d entries but the index vectors of indices %s have %lld", name,
                      map_name, map_len, TSTR(idx, t), (long long)idx->shape[idx->rank - 1]);
  return KILN_OK;
}

static kiln_status kir_check_gather_mode(kir_prim prim, kir_gather_mode mode) {
  if (mode == KIR_GATHER_CLIP || mode == KIR_GATHER_FILL_OR_DROP ||
      mode == KIR_GATHER_PROMISE_IN_BOUNDS)
    return KILN_OK;
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: invalid mode %d", kir_prim_name(prim), (int)mode);
}

kiln_status kir_rule_gather(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                            kir_avals *out) {
  (void)n_in;
  const kir_p_gather *p = &params->gather;
  const kir_gather_dims *g = &p->dimension_numbers;
  const kir_aval *x = &in[0], *idx = &in[1];
  char t[KIR_AVAL_STR_CAP], ss[256];
  kiln_status st = kir_check_gather_mode(prim, p->mode);
  if (st == KILN_OK) st = kir_check_indices(prim, idx, g->start_index_map.n, "start_index_map");
  if (st != KILN_OK) return st;
  int out_rank = g->offset_dims.n + idx->rank - 1;
  if (out_rank > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "gather: the result would have rank %d > %d", out_rank,
                      KIR_MAX_RANK);
  st = kir_check_dims(prim, "offset_dims", &g->offset_dims, out_rank, true, NULL);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "start_index_map", &g->start_index_map, x->rank, false, x);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "collapsed_slice_dims", &g->collapsed_slice_dims, x->rank, true, x);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "operand_batching_dims", &g->operand_batching_dims, x->rank, true,
                        x);
  if (st == KILN_OK)
    st = kir_check_disjoint(prim, "collapsed_slice_dims", &g->collapsed_slice_dims,
                            "operand_batching_dims", &g->operand_batching_dims);
  if (st == KILN_OK)
    st = kir_check_disjoint(prim, "start_index_map", &g->start_index_map,
                            "operand_batching_dims", &g->operand_batching_dims);
  if (st == KILN_OK)
    st = kir_check_batching(prim, x, idx, &g->operand_batching_dims, "start_indices_batching_dims",
                            &g->start_indices_batching_dims);
  if (st != KILN_OK) return st;
  const kir_sizes *s = &p->slice_sizes;
  if (s->n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "gather: slice_sizes=%s needs one entry per dimension of %s",
                      kir_sizes_str(s, ss, sizeof ss), TSTR(x, t));
  if (s->n != g->offset_dims.n + g->collapsed_slice_dims.n + g->operand_batching_dims.n)
    return kcore_fail(KILN_ERR_SHAPE,
                      "gather: every operand dimension must be an offset, collapsed or batching "
                      "dimension (%d slice sizes, %d + %d + %d dims)",
                      s->n, g->offset_dims.n, g->collapsed_slice_dims.n,
                      g->operand_batching_dims.n);
  bool empty_indices = kir_aval_size(idx) == 0;
  for (int i = 0; i < s->n; i++) {
    bool squeezed = kir_dims_contains(&g->collapsed_slice_dims, i) ||
                    kir_dims_contains(&g->operand_batching_dims, i);
    if ((!empty_indices && (s->v[i] < 0 || s->v[i] > x->shape[i])) || (squeezed && s->v[i] > 1) ||
        (kir_dims_contains(&g->collapsed_slice_dims, i) && s->v[i] != 1))
      return kcore_fail(KILN_ERR_SHAPE,
                        "gather: slice size %lld of dimension %d does not fit operand %s (collapsed "
                        "dims need 1, batching dims 0 or 1)",
                        (long long)s->v[i], i, TSTR(x, t));
  }
  /* Result: offset dims take the kept slice sizes, the rest the indices' batch shape. */
  int64_t shape[KIR_MAX_RANK];
  int next_slice = 0, next_idx = 0;
  for (int d = 0; d < out_rank; d++) {
    if (kir_dims_contains(&g->offset_dims, d)) {
      while (kir_dims_contains(&g->collapsed_slice_dims, next_slice) ||
             kir_dims_contains(&g->operand_batching_dims, next_slice))
        next_slice++;
      shape[d] = s->v[next_slice++];
    } else {
      shape[d] = idx->shape[next_idx++];
    }
  }
  return kir_push(out, x->dtype, out_rank, shape, x->weak);
}

kiln_status kir_rule_scatter_add(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_scatter *p = &params->scatter;
  const kir_scatter_dims *g = &p->dimension_numbers;
  const kir_aval *x = &in[0], *idx = &in[1], *u = &in[2];
  char t[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  kiln_status st = kir_check_gather_mode(prim, p->mode);
  if (st == KILN_OK)
    st = kir_check_indices(prim, idx, g->scatter_dims_to_operand_dims.n,
                           "scatter_dims_to_operand_dims");
  /* As JAX: add and mul do not accept bool. */
  if (st == KILN_OK) st = kir_check_dtype_class(prim, 0, in, kir_scatter_dtypes(prim));
  if (st == KILN_OK) {
    kir_aval pair[2] = {*x, *u};
    st = kir_check_same_dtypes(prim, 2, pair);
  }
  if (st != KILN_OK) return st;
  int ivd = idx->rank - 1;
  if (u->rank != ivd + g->update_window_dims.n)
    return kcore_fail(KILN_ERR_SHAPE, "%s: updates %s must have rank %d for indices %s", name,
                      TSTR(u, t), ivd + g->update_window_dims.n, TSTR(idx, t1));
  st = kir_check_dims(prim, "update_window_dims", &g->update_window_dims, u->rank, true, u);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "inserted_window_dims", &g->inserted_window_dims, x->rank, true, x);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "operand_batching_dims", &g->operand_batching_dims, x->rank, true,
                        x);
  if (st == KILN_OK)
    st = kir_check_disjoint(prim, "inserted_window_dims", &g->inserted_window_dims,
                            "operand_batching_dims", &g->operand_batching_dims);
  if (st == KILN_OK)
    st = kir_check_disjoint(prim, "scatter_dims_to_operand_dims",
                            &g->scatter_dims_to_operand_dims, "operand_batching_dims",
                            &g->operand_batching_dims);
  if (st == KILN_OK)
    st = kir_check_batching(prim, x, idx, &g->operand_batching_dims,
                            "scatter_indices_batching_dims", &g->scatter_indices_batching_dims);
  if (st == KILN_OK)
    st = kir_check_dims(prim, "scatter_dims_to_operand_dims", &g->scatter_dims_to_operand_dims,
                        x->rank, false, x);
  if (st != KILN_OK) return st;
  if (x->rank != g->update_window_dims.n + g->inserted_window_dims.n + g->operand_batching_dims.n)
    return kcore_fail(KILN_ERR_SHAPE,
                      "%s: operand %s must have one dimension per window, inserted or batching "
                      "dimension (%d + %d + %d)",
                      name, TSTR(x, t), g->update_window_dims.n, g->inserted_window_dims.n,
                      g->operand_batching_dims.n);
  /* Updates' scatter dims (the non-window ones) follow the indices' batch
   * dims in order; this also pairs the updates' batching dims with the
   * operand's. Window dims may not exceed the operand's kept dims. */
  int window = 0, scatter = 0;
  for (int d = 0; d < u->rank; d++) {
    if (kir_dims_contains(&g->update_window_dims, d)) {
      int od = 0;
      for (int k = 0, seen = -1; k < x->rank; k++) {
        if (kir_dims_contains(&g->inserted_window_dims, k) ||
            kir_dims_contains(&g->operand_batching_dims, k))
          continue;
        if (++seen == window) {
          od = k;
          break;
        }
      }
      window++;
      if (u->shape[d] > x->shape[od])
        return kcore_fail(KILN_ERR_SHAPE,
                          "%s: window dimension %d of updates %s exceeds dimension %d of operand %s",
                          name, d, TSTR(u, t), od, TSTR(x, t1));
    } else {
      if (u->shape[d] != idx->shape[scatter])
        return kcore_fail(KILN_ERR_SHAPE,
                          "%s: scatter dimension %d of updates %s differs from dimension %d of "
                          "indices %s",
                          name, d, TSTR(u, t), scatter, TSTR(idx, t1));
      scatter++;
    }
  }
  return kir_push(out, x->dtype, x->rank, x->shape, x->weak);
}
