/* Public gather and scatter forms: take (embedding lookup), take_along_axis,
 * one_hot (the scatters are in scatter.c). Like JAX's indexing, negative
 * indices count from the end, then a gather clamps indices still out of
 * range. */
#include <string.h>
#include "trace/trace.h"

bool ktr_int_indices(kiln_trace *t, const char *op, kiln_val *idx) {
  if (kiln_dtype_is_integer(ktr_aval(idx)->dtype)) return true;
  char ty[KIR_AVAL_STR_CAP];
  ktr_failf(t, KILN_ERR_DTYPE, "%s: indices must be integers, got %s", op,
            kir_aval_str(ktr_aval(idx), ty, sizeof ty));
  return false;
}

/* jnp's index normalisation: idx < 0 becomes idx + dim (signed types). */
kiln_val *ktr_wrap_negative(kiln_trace *t, kiln_val *idx, int64_t dim) {
  kiln_dtype d = ktr_aval(idx)->dtype;
  if (!kiln_dtype_is_signed(d)) return idx;
  kiln_val *neg = kiln_lt(t, idx, kiln_scalar(t, d, 0));
  return kiln_where(t, neg, kiln_add(t, idx, kiln_scalar(t, d, (double)dim)), idx);
}

/* indices with a trailing index-vector dimension of size 1. */
kiln_val *ktr_index_vector(kiln_trace *t, const char *op, kiln_val *idx) {
  const kir_aval *a = ktr_aval(idx);
  if (a->rank >= KIR_MAX_RANK)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: indices of rank %d leave no room for the index "
                     "vector", op, a->rank);
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, a->shape, (size_t)a->rank * sizeof *shape);
  shape[a->rank] = 1;
  return kiln_reshape(t, idx, a->rank + 1, shape);
}

kiln_val *kiln_take(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis) {
  static const char op[] = "kiln_take";
  kiln_val *v[2] = {x, indices};
  if (!ktr_ok(t, op, 2, v) || !ktr_int_indices(t, op, indices)) return NULL;
  const kir_aval *xa = ktr_aval(x);
  int ir = ktr_aval(indices)->rank, a;
  if (ktr_axis(op, axis, xa->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  if (xa->rank - 1 + ir > KIR_MAX_RANK)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: the result would have rank %d", op, xa->rank - 1 + ir);
  if (!(v[1] = ktr_index_vector(t, op, ktr_wrap_negative(t, indices, xa->shape[a])))) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  kir_gather_dims *g = &p.gather.dimension_numbers;
  /* Result: x.shape[:a] + indices.shape + x.shape[a+1:]. */
  for (int d = 0; d < xa->rank; d++)
    if (d != a) g->offset_dims.v[g->offset_dims.n++] = (int8_t)(d < a ? d : d - 1 + ir);
  g->collapsed_slice_dims.n = g->start_index_map.n = 1;
  g->collapsed_slice_dims.v[0] = g->start_index_map.v[0] = (int8_t)a;
  p.gather.slice_sizes.n = xa->rank;
  for (int d = 0; d < xa->rank; d++) p.gather.slice_sizes.v[d] = d == a ? 1 : xa->shape[d];
  p.gather.mode = KIR_GATHER_CLIP;
  return ktr_bind(t, op, KIR_PRIM_GATHER, &p, 2, v, 1, NULL);
}

kiln_val *kiln_take_along_axis(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis) {
  static const char op[] = "kiln_take_along_axis";
  kiln_val *v[2] = {x, indices};
  if (!ktr_ok(t, op, 2, v) || !ktr_int_indices(t, op, indices)) return NULL;
  const kir_aval *xa = ktr_aval(x), *ia = ktr_aval(indices);
  int a;
  if (ktr_axis(op, axis, xa->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  char tx[KIR_AVAL_STR_CAP], ti[KIR_AVAL_STR_CAP];
  bool fits = ia->rank == xa->rank;
  for (int d = 0; fits && d < xa->rank; d++) fits = d == a || ia->shape[d] == xa->shape[d];
  if (!fits)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: indices %s must match x %s off axis %d", op,
                     kir_aval_str(ia, ti, sizeof ti), kir_aval_str(xa, tx, sizeof tx), a);
  if (!(v[1] = ktr_index_vector(t, op, ktr_wrap_negative(t, indices, xa->shape[a])))) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  kir_gather_dims *g = &p.gather.dimension_numbers;
  g->collapsed_slice_dims.n = g->start_index_map.n = 1;
  g->collapsed_slice_dims.v[0] = g->start_index_map.v[0] = (int8_t)a;
  for (int d = 0; d < xa->rank; d++)
    if (d != a) {
      g->operand_batching_dims.v[g->operand_batching_dims.n++] = (int8_t)d;
      g->start_indices_batching_dims.v[g->start_indices_batching_dims.n++] = (int8_t)d;
    }
  p.gather.slice_sizes.n = xa->rank;
  for (int d = 0; d < xa->rank; d++) p.gather.slice_sizes.v[d] = 1;
  p.gather.mode = KIR_GATHER_CLIP;
  return ktr_bind(t, op, KIR_PRIM_GATHER, &p, 2, v, 1, NULL);
}

kiln_val *kiln_one_hot(kiln_trace *t, kiln_val *indices, int64_t num_classes, kiln_dtype dtype) {
  static const char op[] = "kiln_one_hot";
  if (!ktr_ok(t, op, 1, &indices) || !ktr_int_indices(t, op, indices)) return NULL;
  if (num_classes < 0)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: num_classes=%lld is negative", op,
                     (long long)num_classes);
  /* jax.nn.one_hot: (indices[..., None] == arange(n)).astype(dtype). */
  kiln_val *col = ktr_index_vector(t, op, indices);
  kiln_val *classes = kiln_iota(t, ktr_aval(indices)->dtype, 1, &num_classes, 0);
  return kiln_convert(t, kiln_eq(t, col, classes), dtype);
}
