/* Public structure ops: thin, checked wrappers that fill the IR's params. */
#include <string.h>
#include "trace/trace.h"

static kir_params ktr_params0(void) {
  kir_params p;
  memset(&p, 0, sizeof p);
  return p;
}

/* Copies n ints into a kir_dims, refusing more than the maximal rank. */
static bool ktr_dims(kiln_trace *t, const char *op, const char *what, int n, const int *v,
                     kir_dims *out) {
  if (n < 0 || n > KIR_MAX_RANK || (n > 0 && !v)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s has %d entries%s", op, what, n,
              n > 0 && !v ? " but is NULL" : "");
    return false;
  }
  out->n = n;
  for (int i = 0; i < n; i++) {
    if (v[i] < -128 || v[i] > 127) {
      ktr_failf(t, KILN_ERR_OUT_OF_RANGE, "%s: %s[%d]=%d is out of range", op, what, i, v[i]);
      return false;
    }
    out->v[i] = (int8_t)v[i];
  }
  return true;
}

static bool ktr_sizes(kiln_trace *t, const char *op, const char *what, int n, const int64_t *v,
                      kir_sizes *out) {
  if (n < 0 || n > KIR_MAX_RANK || (n > 0 && !v)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s has %d entries%s", op, what, n,
              n > 0 && !v ? " but is NULL" : "");
    return false;
  }
  out->n = n;
  if (n > 0) memcpy(out->v, v, (size_t)n * sizeof *v);
  return true;
}

kiln_val *kiln_broadcast_in_dim(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape,
                                const int *broadcast_dimensions) {
  static const char op[] = "kiln_broadcast_in_dim";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p = ktr_params0();
  const kir_aval *a = ktr_aval(x);
  if (!ktr_sizes(t, op, "shape", rank, shape, &p.broadcast.shape)) return NULL;
  if (broadcast_dimensions) {
    if (!ktr_dims(t, op, "broadcast_dimensions", a->rank, broadcast_dimensions,
                  &p.broadcast.broadcast_dimensions))
      return NULL;
  } else { /* NULL: align trailing dimensions, as numpy broadcasting does */
    if (a->rank > rank)
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: rank %d operand into rank %d", op, a->rank, rank);
    p.broadcast.broadcast_dimensions.n = a->rank;
    for (int d = 0; d < a->rank; d++)
      p.broadcast.broadcast_dimensions.v[d] = (int8_t)(rank - a->rank + d);
  }
  return ktr_bind(t, op, KIR_PRIM_BROADCAST_IN_DIM, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_broadcast_to(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape) {
  static const char op[] = "kiln_broadcast_to";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *a = ktr_aval(x);
  if (a->rank > rank)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: cannot broadcast rank %d to rank %d", op, a->rank,
                     rank);
  for (int d = 0; d < a->rank; d++) {
    int64_t s = a->shape[d], target = shape[rank - a->rank + d];
    if (s != 1 && s != target) {
      char ty[KIR_AVAL_STR_CAP];
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: %s does not broadcast to rank %d at dimension %d",
                       op, kir_aval_str(a, ty, sizeof ty), rank, d);
    }
  }
  return kiln_broadcast_in_dim(t, x, rank, shape, NULL);
}

kiln_val *kiln_reshape(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape) {
  static const char op[] = "kiln_reshape";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p = ktr_params0();
  if (!ktr_sizes(t, op, "shape", rank, shape, &p.reshape.new_sizes)) return NULL;
  /* One -1 entry is inferred, as in numpy. */
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < rank; d++) {
    if (shape[d] == -1 && infer < 0)
      infer = d;
    else
      known *= shape[d];
  }
  if (infer >= 0) {
    int64_t total = kir_aval_size(ktr_aval(x));
    if (known <= 0 || total % known != 0) {
      char ty[KIR_AVAL_STR_CAP];
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: cannot infer dimension %d reshaping %s", op, infer,
                       kir_aval_str(ktr_aval(x), ty, sizeof ty));
    }
    p.reshape.new_sizes.v[infer] = total / known;
  }
  return ktr_bind(t, op, KIR_PRIM_RESHAPE, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_transpose(kiln_trace *t, kiln_val *x, const int *permutation) {
  static const char op[] = "kiln_transpose";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p = ktr_params0();
  int r = ktr_aval(x)->rank;
  int rev[KIR_MAX_RANK];
  if (!permutation) /* NULL: reverse the axes, as numpy's x.T */
    for (int d = 0; d < r; d++) rev[d] = r - 1 - d;
  if (!ktr_dims(t, op, "permutation", r, permutation ? permutation : rev, &p.transpose.permutation))
    return NULL;
  return ktr_bind(t, op, KIR_PRIM_TRANSPOSE, &p, 1, &x, 1, NULL);
}

/* squeeze, expand_dims and rev share one param kind: a list of dims. */
static kiln_val *ktr_dims_op(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x, int n,
                             const int *dims) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p = ktr_params0();
  if (!ktr_dims(t, op, "dimensions", n, dims, &p.dims.dimensions)) return NULL;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_squeeze(kiln_trace *t, kiln_val *x, int n, const int *dimensions) {
  return ktr_dims_op(t, "kiln_squeeze", KIR_PRIM_SQUEEZE, x, n, dimensions);
}

kiln_val *kiln_expand_dims(kiln_trace *t, kiln_val *x, int n, const int *dimensions) {
  return ktr_dims_op(t, "kiln_expand_dims", KIR_PRIM_EXPAND_DIMS, x, n, dimensions);
}

kiln_val *kiln_rev(kiln_trace *t, kiln_val *x, int n, const int *dimensions) {
  return ktr_dims_op(t, "kiln_rev", KIR_PRIM_REV, x, n, dimensions);
}

kiln_val *kiln_slice(kiln_trace *t, kiln_val *x, const int64_t *start, const int64_t *limit,
                     const int64_t *strides) {
  static const char op[] = "kiln_slice";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  int r = ktr_aval(x)->rank;
  kir_params p = ktr_params0();
  if (!ktr_sizes(t, op, "start_indices", r, start, &p.slice.start_indices) ||
      !ktr_sizes(t, op, "limit_indices", r, limit, &p.slice.limit_indices))
    return NULL;
  if (strides && !ktr_sizes(t, op, "strides", r, strides, &p.slice.strides)) return NULL;
  if (!strides) { /* lax's strides=None: unit strides */
    p.slice.strides.n = r;
    for (int d = 0; d < r; d++) p.slice.strides.v[d] = 1;
  }
  return ktr_bind(t, op, KIR_PRIM_SLICE, &p, 1, &x, 1, NULL);
}

/* Operand list: first (and second), then one start index per dimension. */
static bool ktr_with_starts(kiln_trace *t, const char *op, int lead, kiln_val **v, int rank,
                            kiln_val *const *starts) {
  if (rank > 0 && !starts) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: start indices are NULL for rank %d", op, rank);
    return false;
  }
  for (int d = 0; d < rank; d++) v[lead + d] = starts[d];
  if (!ktr_ok(t, op, lead + rank, v)) return false;
  /* lax.dynamic_slice's default: a negative start counts from the end (the
   * dimension size is added), then the primitive clamps. */
  const kir_aval *xa = ktr_aval(v[0]);
  for (int d = 0; d < rank && d < xa->rank; d++) {
    kiln_dtype dt = ktr_aval(v[lead + d])->dtype;
    if (!kiln_dtype_is_signed(dt) || kiln_dtype_is_float(dt)) continue;
    kiln_val *s = v[lead + d];
    kiln_val *neg = kiln_lt(t, s, kiln_scalar(t, dt, 0));
    v[lead + d] = kiln_where(t, neg, kiln_add(t, s, kiln_scalar(t, dt, (double)xa->shape[d])), s);
    if (!v[lead + d]) return false;
  }
  return true;
}

kiln_val *kiln_dynamic_slice(kiln_trace *t, kiln_val *x, kiln_val *const *starts,
                             const int64_t *sizes) {
  static const char op[] = "kiln_dynamic_slice";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  int r = ktr_aval(x)->rank;
  kiln_val *v[1 + KIR_MAX_RANK] = {x};
  kir_params p = ktr_params0();
  if (!ktr_with_starts(t, op, 1, v, r, starts) ||
      !ktr_sizes(t, op, "slice_sizes", r, sizes, &p.dynamic_slice.slice_sizes))
    return NULL;
  return ktr_bind(t, op, KIR_PRIM_DYNAMIC_SLICE, &p, 1 + r, v, 1, NULL);
}

kiln_val *kiln_dynamic_update_slice(kiln_trace *t, kiln_val *x, kiln_val *update,
                                    kiln_val *const *starts) {
  static const char op[] = "kiln_dynamic_update_slice";
  kiln_val *v[2 + KIR_MAX_RANK] = {x, update};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  int r = ktr_aval(x)->rank;
  if (!ktr_with_starts(t, op, 2, v, r, starts)) return NULL;
  return ktr_bind(t, op, KIR_PRIM_DYNAMIC_UPDATE_SLICE, NULL, 2 + r, v, 1, NULL);
}

kiln_val *kiln_concatenate(kiln_trace *t, int n, kiln_val *const *xs, int dimension) {
  static const char op[] = "kiln_concatenate";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  if (n < 1 || !xs) return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d operands", op, n);
  kiln_val **v = kir_alloc(t->prog, (size_t)n * sizeof *v);
  if (!v) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  memcpy(v, xs, (size_t)n * sizeof *v);
  if (!ktr_ok(t, op, n, v)) return NULL;
  int axis;
  if (ktr_axis(op, dimension, ktr_aval(v[0])->rank, &axis)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  /* jnp.concatenate promotes; shapes must agree off the axis (the rule checks). */
  kiln_wdtype w = {ktr_aval(v[0])->dtype, ktr_aval(v[0])->weak};
  for (int i = 1; i < n; i++) {
    kiln_status st = kiln_promote_types(w, (kiln_wdtype){ktr_aval(v[i])->dtype, ktr_aval(v[i])->weak},
                                        t->promotion, &w);
    if (st) return ktr_fail(t, kcore_fail_wrap(st, "%s", op));
  }
  for (int i = 0; i < n; i++)
    if (!(v[i] = ktr_convert(t, op, v[i], w.dtype, w.weak != 0))) return NULL;
  kir_params p = ktr_params0();
  p.concatenate.dimension = axis;
  return ktr_bind(t, op, KIR_PRIM_CONCATENATE, &p, n, v, 1, NULL);
}

kiln_val *kiln_pad(kiln_trace *t, kiln_val *x, kiln_val *padding_value, const int64_t *low,
                   const int64_t *high, const int64_t *interior) {
  static const char op[] = "kiln_pad";
  kiln_val *v[2] = {x, padding_value};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  int r = ktr_aval(x)->rank;
  if (r > 0 && (!low || !high))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: low or high padding is NULL", op);
  kir_params p = ktr_params0();
  p.pad.padding_config.n = r;
  for (int d = 0; d < r; d++) {
    p.pad.padding_config.lo[d] = low[d];
    p.pad.padding_config.hi[d] = high[d];
    p.pad.padding_config.interior[d] = interior ? interior[d] : 0;
  }
  /* The padding value takes the operand's dtype (a weak scalar converts). */
  const kir_aval *a = ktr_aval(x);
  if (!(v[1] = ktr_convert(t, op, v[1], a->dtype, a->weak))) return NULL;
  return ktr_bind(t, op, KIR_PRIM_PAD, &p, 2, v, 1, NULL);
}
