/* Structural primitives: broadcast, reshape, transpose, squeeze,
 * expand_dims, rev, slices, concatenate, pad, iota, gather, scatter-add.
 * Shape/dtype rules (lax semantics), then their reference evaluators. */
#include <math.h>
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

static bool kir_dims_contains(const kir_dims *d, int v) {
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

/* ---- reference evaluators ----
 *
 * Every structural primitive is data movement over strided views, so they
 * share one tool: a box of indices walked in C order over two arrays at once
 * (array 0 written, array 1 read), each with its own element strides and
 * base offset. A zero stride broadcasts, a negative one reverses, a scaled
 * one steps (slice strides, interior padding). Gather and scatter-add walk
 * the index batch with the same walker and move one window box per index
 * vector. The rules have validated shapes and params. */

/* A box walked over two strided arrays; strides and bases in elements. */
typedef struct kir_box {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  int64_t stride[2][KIR_MAX_RANK];
  int64_t base[2];
} kir_box;

/* Odometer over the first n dims of a box, carrying both arrays' offsets. */
typedef struct kir_walk {
  const kir_box *box;
  int n;
  int64_t idx[KIR_MAX_RANK];
  int64_t off[2];
} kir_walk;

static void kir_c_strides(int rank, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
}

/* All strides and bases zero; a NULL shape leaves the sizes zero too. */
static void kir_box_init(kir_box *b, int rank, const int64_t *shape) {
  memset(b, 0, sizeof *b);
  b->rank = rank;
  if (shape && rank) memcpy(b->shape, shape, (size_t)rank * sizeof *shape);
}

static bool kir_box_empty(const kir_box *b) {
  for (int d = 0; d < b->rank; d++)
    if (b->shape[d] == 0) return true;
  return false;
}

/* Starts at the box's first index; false if the whole box is empty (so the
 * row form never runs a row of zero length either). */
static bool kir_walk_start(kir_walk *w, const kir_box *b, int n) {
  w->box = b;
  w->n = n;
  memset(w->idx, 0, sizeof w->idx);
  w->off[0] = b->base[0];
  w->off[1] = b->base[1];
  return !kir_box_empty(b);
}

static bool kir_walk_next(kir_walk *w) {
  const kir_box *b = w->box;
  for (int d = w->n - 1; d >= 0; d--) {
    w->off[0] += b->stride[0][d];
    w->off[1] += b->stride[1][d];
    if (++w->idx[d] < b->shape[d]) return true;
    w->off[0] -= b->stride[0][d] * b->shape[d];
    w->off[1] -= b->stride[1][d] * b->shape[d];
    w->idx[d] = 0;
  }
  return false;
}

/* Row form: the walk covers all dims but the last, which callers loop over
 * themselves (a rank-0 box is one row of one element). */
static bool kir_rows_start(kir_walk *w, const kir_box *b) {
  return kir_walk_start(w, b, b->rank ? b->rank - 1 : 0);
}
static int64_t kir_row_len(const kir_box *b) { return b->rank ? b->shape[b->rank - 1] : 1; }
static int64_t kir_row_stride(const kir_box *b, int a) {
  return b->rank ? b->stride[a][b->rank - 1] : 0;
}

/* n elements of size es, strided; constant sizes let memcpy become moves. */
static void kir_copy_row(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n,
                         size_t es) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
#define KIR_COPY_ROW(ES)                                                        \
  for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * ES, src + i * ss * ES, ES); \
  break
  switch (es) {
    case 1: KIR_COPY_ROW(1);
    case 2: KIR_COPY_ROW(2);
    case 4: KIR_COPY_ROW(4);
    case 8: KIR_COPY_ROW(8);
    default: KCORE_ASSERT(!"kir_copy_row: element size");
  }
#undef KIR_COPY_ROW
}

/* dst (array 0) <- src (array 1) over the box. */
static void kir_box_copy(const kir_box *b, size_t es, void *dst, const void *src) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0), ss = kir_row_stride(b, 1);
  do {
    kir_copy_row((char *)dst + w.off[0] * (int64_t)es, ds,
                 (const char *)src + w.off[1] * (int64_t)es, ss, n, es);
  } while (kir_walk_next(&w));
}

/* Every element of array 0 over the box <- *elem. */
static void kir_box_fill(const kir_box *b, size_t es, void *dst, const void *elem) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0);
  do {
    kir_copy_row((char *)dst + w.off[0] * (int64_t)es, ds, elem, 0, n, es);
  } while (kir_walk_next(&w));
}

/* dst (array 0) <- dst combined with src (array 1) over the box, by the
 * update computation of the scatter primitive (scatter.c). */
static void kir_box_scatter(const kir_box *b, kir_prim prim, kiln_dtype dt, void *dst,
                            const void *src) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0), ss = kir_row_stride(b, 1);
  int64_t es = (int64_t)kiln_dtype_size(dt);
  do {
    kir_scatter_row(prim, dt, (char *)dst + w.off[0] * es, ds, (const char *)src + w.off[1] * es,
                    ss, n);
  } while (kir_walk_next(&w));
}

static size_t kir_esize(const kir_buffer *b) { return kiln_dtype_size(b->aval.dtype); }

/* A box over dst's whole shape, array 0 dense (C order) in it. */
static void kir_box_over(kir_box *b, const kir_aval *dst) {
  kir_box_init(b, dst->rank, dst->shape);
  kir_c_strides(dst->rank, dst->shape, b->stride[0]);
}

/* Reads an integer index of any dtype: true if it lies in [0, hi]; *v gets
 * it clamped into that range either way (XLA clamps dynamic-slice starts
 * and gather/scatter indices exactly, whatever their dtype). hi >= 0. */
static bool kir_index_fit(const kir_buffer *b, int64_t i, int64_t hi, int64_t *v) {
  kiln_dtype dt = b->aval.dtype;
  kir_scalar s = kir_scalar_load(dt, (const char *)b->data + i * (int64_t)kir_esize(b));
  bool neg = !kiln_dtype_is_unsigned(dt) && s.i < 0;
  bool big = !neg && s.u > (uint64_t)hi; /* a non-negative signed index has s.u == s.i */
  *v = neg ? 0 : big ? hi : (int64_t)s.u;
  return !neg && !big;
}

/* reshape, squeeze and expand_dims keep the C-order element sequence. */
static kiln_status kir_eval_same_order(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                       void *ctx) {
  (void)e;
  (void)ctx;
  if (out[0].nbytes) memcpy(out[0].data, in[0].data, out[0].nbytes); /* empty data may be NULL */
  return KILN_OK;
}

static kiln_status kir_eval_broadcast_in_dim(const kir_eqn *e, const kir_buffer *in,
                                             kir_buffer *out, void *ctx) {
  (void)ctx;
  const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
  const kir_aval *x = &in[0].aval;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  /* Size-1 operand dims stay at stride 0: they broadcast. */
  for (int i = 0; i < x->rank; i++)
    if (x->shape[i] != 1) b.stride[1][bd->v[i]] = xs[i];
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_transpose(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                      void *ctx) {
  (void)ctx;
  const kir_dims *perm = &e->params.transpose.permutation;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(in[0].aval.rank, in[0].aval.shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  for (int d = 0; d < b.rank; d++) b.stride[1][d] = xs[perm->v[d]];
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_rev(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  const kir_dims *dims = &e->params.dims.dimensions;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  kir_c_strides(b.rank, b.shape, b.stride[1]);
  /* A reversed dim reads from its far end backwards. */
  for (int i = 0; i < dims->n; i++) {
    int d = dims->v[i];
    if (b.shape[d] > 0) b.base[1] += (b.shape[d] - 1) * b.stride[1][d];
    b.stride[1][d] = -b.stride[1][d];
  }
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_slice(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                  void *ctx) {
  (void)ctx;
  const kir_p_slice *p = &e->params.slice;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(in[0].aval.rank, in[0].aval.shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  for (int d = 0; d < b.rank; d++) {
    b.base[1] += p->start_indices.v[d] * xs[d];
    b.stride[1][d] = p->strides.v[d] * xs[d];
  }
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

/* Element offset in x of the window of `size` at the clamped start indices
 * in idx[0..rank): XLA moves each start into [0, dim - size]. */
static int64_t kir_clamped_offset(const kir_aval *x, const int64_t *size, const kir_buffer *idx) {
  int64_t xs[KIR_MAX_RANK], off = 0;
  kir_c_strides(x->rank, x->shape, xs);
  for (int d = 0; d < x->rank; d++) {
    int64_t v;
    kir_index_fit(&idx[d], 0, x->shape[d] - size[d], &v);
    off += v * xs[d];
  }
  return off;
}

static kiln_status kir_eval_dynamic_slice(const kir_eqn *e, const kir_buffer *in,
                                          kir_buffer *out, void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  kir_c_strides(x->rank, x->shape, b.stride[1]);
  b.base[1] = kir_clamped_offset(x, e->params.dynamic_slice.slice_sizes.v, &in[1]);
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_dynamic_update_slice(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)e;
  (void)ctx;
  const kir_aval *x = &in[0].aval, *u = &in[1].aval;
  memcpy(out[0].data, in[0].data, out[0].nbytes);
  kir_box b;
  kir_box_init(&b, u->rank, u->shape);
  kir_c_strides(x->rank, x->shape, b.stride[0]);
  kir_c_strides(u->rank, u->shape, b.stride[1]);
  b.base[0] = kir_clamped_offset(x, u->shape, &in[2]);
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[1].data);
  return KILN_OK;
}

static kiln_status kir_eval_concatenate(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                        void *ctx) {
  (void)ctx;
  int dim = (int)e->params.concatenate.dimension;
  const kir_aval *o = &out[0].aval;
  int64_t os[KIR_MAX_RANK], at = 0;
  kir_c_strides(o->rank, o->shape, os);
  /* Each operand is a box of the result, placed along dim. */
  for (int i = 0; i < e->n_in; i++) {
    const kir_aval *x = &in[i].aval;
    kir_box b;
    kir_box_init(&b, x->rank, x->shape);
    memcpy(b.stride[0], os, (size_t)o->rank * sizeof *os);
    kir_c_strides(x->rank, x->shape, b.stride[1]);
    b.base[0] = at * os[dim];
    kir_box_copy(&b, kir_esize(&in[i]), out[0].data, in[i].data);
    at += x->shape[dim];
  }
  return KILN_OK;
}

/* pad: the result is filled with the padding value, then the operand
 * elements that land inside it (negative lo/hi crop) are placed every
 * interior+1 positions from lo. */
static kiln_status kir_eval_pad(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  const kir_padding *c = &e->params.pad.padding_config;
  const kir_aval *x = &in[0].aval, *o = &out[0].aval;
  size_t es = kir_esize(&in[0]);
  kir_box all;
  kir_box_over(&all, o);
  kir_box_fill(&all, es, out[0].data, in[1].data);
  int64_t xs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_c_strides(o->rank, o->shape, os);
  kir_box b;
  kir_box_init(&b, x->rank, x->shape);
  for (int d = 0; d < x->rank; d++) {
    int64_t step = c->interior[d] + 1, lo = c->lo[d];
    /* Operand indices k in [first, last] land at lo + k*step in [0, o->shape[d]). */
    int64_t first = lo >= 0 ? 0 : (-lo + step - 1) / step;
    int64_t room = o->shape[d] - 1 - lo;
    int64_t last = room < 0 ? -1 : room / step;
    if (last > x->shape[d] - 1) last = x->shape[d] - 1;
    b.shape[d] = last >= first ? last - first + 1 : 0;
    b.base[0] += (lo + first * step) * os[d];
    b.base[1] += first * xs[d];
    b.stride[0][d] = step * os[d];
    b.stride[1][d] = xs[d];
  }
  kir_box_copy(&b, es, out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_iota(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                 void *ctx) {
  (void)in;
  (void)ctx;
  const kir_p_iota *p = &e->params.iota;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  size_t es = kir_esize(&out[0]);
  kir_walk w;
  if (!kir_walk_start(&w, &b, b.rank)) return KILN_OK;
  /* The value is the position along `dimension`, converted as XLA's iota
   * does (integers wrap, floats round to nearest even). */
  do {
    int64_t v = w.idx[p->dimension];
    kir_scalar s = kiln_dtype_is_float(p->dtype)      ? kir_scalar_f((double)v)
                   : kiln_dtype_is_unsigned(p->dtype) ? kir_scalar_u((uint64_t)v)
                                                      : kir_scalar_i(v);
    kir_scalar_store(p->dtype, s, (char *)out[0].data + w.off[0] * (int64_t)es);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

/* ---- gather and scatter-add ----
 *
 * Both walk the batch dims of the indices (all but the trailing index
 * vector dim); per index vector they compute the operand start of a window
 * and move that window box between the operand and the result (gather) or
 * the updates (scatter). Operand dims that are not collapsed/inserted or
 * batching dims are the window dims, in order. */

/* The box over the indices' batch dims: array 1 walks the indices (offset of
 * each index vector), array 0 the `other` array's dims not in `window`
 * (the gather result's batch dims, the updates' scatter dims). */
static void kir_batch_box(kir_box *b, const kir_aval *idx, const kir_aval *other,
                          const kir_dims *window) {
  int64_t is[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_box_init(b, idx->rank - 1, idx->shape);
  kir_c_strides(idx->rank, idx->shape, is);
  kir_c_strides(other->rank, other->shape, os);
  for (int d = 0, j = 0; d < other->rank; d++)
    if (!kir_dims_contains(window, d)) b->stride[0][j++] = os[d];
  memcpy(b->stride[1], is, (size_t)b->rank * sizeof *is);
}

/* The window box: array `xa` steps through the operand's window dims (those
 * not in `skip1`/`skip2`), array 1 - xa through `other`'s `window` dims; the
 * k-th window dim of the operand pairs with window->v[k]. *size gets the
 * window size of every operand dim (1 for skipped dims). */
static void kir_window_box(kir_box *b, int xa, const kir_aval *x, const kir_dims *skip1,
                           const kir_dims *skip2, const kir_aval *other, const kir_dims *window,
                           int64_t *size) {
  int64_t xs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_c_strides(other->rank, other->shape, os);
  kir_box_init(b, window->n, NULL);
  for (int d = 0, k = 0; d < x->rank; d++) {
    size[d] = 1;
    if (kir_dims_contains(skip1, d) || kir_dims_contains(skip2, d)) continue;
    size[d] = b->shape[k] = other->shape[window->v[k]];
    b->stride[xa][k] = xs[d];
    b->stride[1 - xa][k] = os[window->v[k]];
    k++;
  }
}

/* How out-of-bounds index vectors are treated. */
typedef enum kir_oob {
  KIR_OOB_CLAMP, /* move the window inside (XLA's gather; JAX's CLIP scatter) */
  KIR_OOB_SKIP,  /* skip the window unless it fits (XLA's scatter) */
  /* JAX's FILL_OR_DROP gather: the indices are first converted (wrapping)
   * to int32, or int64 for operands with a dimension past int32, and a
   * window that does not fit is filled. */
  KIR_OOB_SKIP_I32,
  KIR_OOB_SKIP_I64
} kir_oob;

/* What turns one index vector into a window offset in the operand. */
typedef struct kir_indexing {
  const kir_aval *x;          /* the operand */
  int64_t xs[KIR_MAX_RANK];   /* its strides */
  int64_t size[KIR_MAX_RANK]; /* window size of every operand dim */
  const kir_buffer *idx;
  const kir_dims *map;        /* start_index_map / scatter_dims_to_operand_dims */
  const kir_dims *obatch;     /* operand_batching_dims */
  const kir_dims *ibatch;     /* the indices' batching dims */
  kir_oob oob;
} kir_indexing;

static bool kir_index_wrapped_fit(const kir_indexing *g, int64_t i, int64_t hi, int64_t *v) {
  kiln_dtype dt = g->idx->aval.dtype;
  const char *p = (const char *)g->idx->data + i * (int64_t)kir_esize(g->idx);
  kir_scalar s = kir_scalar_load(dt, p);
  *v = kiln_dtype_is_unsigned(dt) ? (int64_t)s.u : s.i;
  if (g->oob == KIR_OOB_SKIP_I32) *v = (int32_t)(uint32_t)*v;
  return *v >= 0 && *v <= hi;
}

/* Operand offset of the window for the index vector at w (w->off[1] is its
 * offset in the indices, w->idx the batch position, which batching dims
 * take); false if it is out of bounds and not clamped. */
static bool kir_window_offset(const kir_indexing *g, const kir_walk *w, int64_t *off) {
  *off = 0;
  for (int k = 0; k < g->map->n; k++) {
    int d = g->map->v[k];
    int64_t hi = g->x->shape[d] - g->size[d], v;
    if (hi < 0) return false; /* nothing fits (an empty operand dim) */
    bool fits = (g->oob == KIR_OOB_SKIP_I32 || g->oob == KIR_OOB_SKIP_I64)
                    ? kir_index_wrapped_fit(g, w->off[1] + k, hi, &v)
                    : kir_index_fit(g->idx, w->off[1] + k, hi, &v);
    if (!fits && g->oob != KIR_OOB_CLAMP) return false;
    *off += v * g->xs[d];
  }
  for (int i = 0; i < g->obatch->n; i++)
    *off += w->idx[g->ibatch->v[i]] * g->xs[g->obatch->v[i]];
  return true;
}

static void kir_indexing_init(kir_indexing *g, const kir_buffer *x, const kir_buffer *idx,
                              const kir_dims *map, const kir_dims *obatch, const kir_dims *ibatch,
                              kir_oob oob) {
  g->x = &x->aval;
  kir_c_strides(x->aval.rank, x->aval.shape, g->xs);
  g->idx = idx;
  g->map = map;
  g->obatch = obatch;
  g->ibatch = ibatch;
  g->oob = oob;
}

/* An integer of dt's width from a double: truncated toward zero and
 * saturated, NaN to 0 (XLA's float-to-int convert). */
static kir_scalar kir_int_from_double(kiln_dtype dt, double v) {
  int bits = (int)kiln_dtype_size(dt) * 8;
  v = isnan(v) ? 0 : trunc(v);
  if (kiln_dtype_is_signed(dt)) {
    double lim = ldexp(1, bits - 1); /* -lim is the minimum, lim - 1 the maximum */
    int64_t max = (int64_t)(UINT64_MAX >> (65 - bits));
    return kir_scalar_i(v <= -lim ? -max - 1 : v >= lim ? max : (int64_t)v);
  }
  double lim = ldexp(1, bits);
  return kir_scalar_u(v <= 0 ? 0 : v >= lim ? UINT64_MAX >> (64 - bits) : (uint64_t)v);
}

/* FILL_OR_DROP's fill element: fill_value converted to the dtype, or JAX's
 * default: NaN for floats, the minimum of signed and the maximum of
 * unsigned integers, true for bool. */
static void kir_gather_fill(kiln_dtype dt, kir_opt_f64 fill, void *elem) {
  kir_scalar s;
  if (kiln_dtype_is_float(dt))
    s = kir_scalar_f(kir_round_to_dtype(dt, fill.present ? fill.v : NAN));
  else if (kiln_dtype_is_bool(dt))
    s = kir_scalar_i(!fill.present || fill.v != 0);
  else if (fill.present)
    s = kir_int_from_double(dt, fill.v);
  else
    s = kir_int_from_double(dt, kiln_dtype_is_signed(dt) ? -INFINITY : INFINITY);
  kir_scalar_store(dt, s, elem);
}

static kir_oob kir_gather_oob(const kir_p_gather *p, const kir_aval *x) {
  if (p->mode != KIR_GATHER_FILL_OR_DROP) return KIR_OOB_CLAMP;
  for (int d = 0; d < x->rank; d++)
    if (x->shape[d] > INT32_MAX) return KIR_OOB_SKIP_I64;
  return KIR_OOB_SKIP_I32;
}

static kiln_status kir_eval_gather(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx) {
  (void)ctx;
  const kir_p_gather *p = &e->params.gather;
  const kir_gather_dims *g = &p->dimension_numbers;
  const kir_aval *x = &in[0].aval, *o = &out[0].aval;
  char t[KIR_AVAL_STR_CAP], ss[256];
  if (kir_aval_size(o) == 0) return KILN_OK;
  /* JAX's rule waives this check for empty indices; XLA does not. */
  for (int d = 0; d < x->rank; d++)
    if (p->slice_sizes.v[d] > x->shape[d])
      return kcore_fail(KILN_ERR_SHAPE,
                        "gather: slice_sizes=%s exceed operand %s in dimension %d (with empty "
                        "indices and a non-empty result)",
                        kir_sizes_str(&p->slice_sizes, ss, sizeof ss), TSTR(x, t), d);
  kir_indexing ix;
  kir_indexing_init(&ix, &in[0], &in[1], &g->start_index_map, &g->operand_batching_dims,
                    &g->start_indices_batching_dims, kir_gather_oob(p, x));
  kir_box win, batch;
  kir_window_box(&win, 1, x, &g->collapsed_slice_dims, &g->operand_batching_dims, o,
                 &g->offset_dims, ix.size);
  kir_batch_box(&batch, &in[1].aval, o, &g->offset_dims);
  size_t es = kir_esize(&in[0]);
  uint64_t fill;
  kir_gather_fill(x->dtype, p->fill_value, &fill);
  kir_walk w;
  if (!kir_walk_start(&w, &batch, batch.rank)) return KILN_OK;
  do {
    win.base[0] = w.off[0];
    if (kir_window_offset(&ix, &w, &win.base[1]))
      kir_box_copy(&win, es, out[0].data, in[0].data);
    else
      kir_box_fill(&win, es, out[0].data, &fill);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

/* The scatter family: the operand, combined with every update window that
 * fits (CLIP moves windows inside first), in index order. */
static kiln_status kir_eval_scatter(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                    void *ctx) {
  (void)ctx;
  const kir_p_scatter *p = &e->params.scatter;
  const kir_scatter_dims *s = &p->dimension_numbers;
  const kir_aval *x = &in[0].aval, *u = &in[2].aval;
  kiln_status st = kir_check_dtype_class(e->prim, 0, &in[0].aval, kir_scatter_dtypes(e->prim));
  if (st) return st;
  memcpy(out[0].data, in[0].data, out[0].nbytes);
  kir_indexing ix;
  kir_indexing_init(&ix, &in[0], &in[1], &s->scatter_dims_to_operand_dims,
                    &s->operand_batching_dims, &s->scatter_indices_batching_dims,
                    p->mode == KIR_GATHER_CLIP ? KIR_OOB_CLAMP : KIR_OOB_SKIP);
  kir_box win, batch;
  kir_window_box(&win, 0, x, &s->inserted_window_dims, &s->operand_batching_dims, u,
                 &s->update_window_dims, ix.size);
  kir_batch_box(&batch, &in[1].aval, u, &s->update_window_dims);
  kir_walk w;
  if (!kir_walk_start(&w, &batch, batch.rank)) return KILN_OK;
  do {
    win.base[1] = w.off[0];
    if (kir_window_offset(&ix, &w, &win.base[0]))
      kir_box_scatter(&win, e->prim, x->dtype, out[0].data, in[2].data);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

void kir_shape_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_BROADCAST_IN_DIM] = kir_eval_broadcast_in_dim;
  t->fn[KIR_PRIM_RESHAPE] = kir_eval_same_order;
  t->fn[KIR_PRIM_TRANSPOSE] = kir_eval_transpose;
  t->fn[KIR_PRIM_SQUEEZE] = kir_eval_same_order;
  t->fn[KIR_PRIM_EXPAND_DIMS] = kir_eval_same_order;
  t->fn[KIR_PRIM_REV] = kir_eval_rev;
  t->fn[KIR_PRIM_SLICE] = kir_eval_slice;
  t->fn[KIR_PRIM_DYNAMIC_SLICE] = kir_eval_dynamic_slice;
  t->fn[KIR_PRIM_DYNAMIC_UPDATE_SLICE] = kir_eval_dynamic_update_slice;
  t->fn[KIR_PRIM_CONCATENATE] = kir_eval_concatenate;
  t->fn[KIR_PRIM_PAD] = kir_eval_pad;
  t->fn[KIR_PRIM_IOTA] = kir_eval_iota;
  t->fn[KIR_PRIM_GATHER] = kir_eval_gather;
  t->fn[KIR_PRIM_SCATTER_ADD] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MUL] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MIN] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MAX] = kir_eval_scatter;
}
