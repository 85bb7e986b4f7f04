/* Public reductions, cumulative ops, sort and dot_general. */
#include <string.h>
#include "trace/trace.h"

/* Axes normalised (negative from the end), sorted and unique, as lax wants. */
static bool ktr_axes(kiln_trace *t, const char *op, kiln_val *x, int n, const int *axes,
                     kir_dims *out) {
  int r = ktr_aval(x)->rank;
  if (n < 0 || n > r || (n > 0 && !axes)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d axes for rank %d%s", op, n, r,
              n > 0 && !axes ? " but axes is NULL" : "");
    return false;
  }
  bool seen[KIR_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if (ktr_axis(op, axes[i], r, &a)) {
      ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
      return false;
    }
    if (seen[a]) {
      ktr_failf(t, KILN_ERR_ARGUMENT, "%s: axis %d appears twice", op, axes[i]);
      return false;
    }
    seen[a] = true;
  }
  out->n = 0;
  for (int a = 0; a < r; a++)
    if (seen[a]) out->v[out->n++] = (int8_t)a;
  return true;
}

static kiln_val *ktr_reduce(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x, int n,
                            const int *axes) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  if (!ktr_axes(t, op, x, n, axes, &p.axes.axes)) return NULL;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

#define KTR_REDUCTIONS(X) \
  X(sum, SUM) X(max, MAX) X(min, MIN) X(prod, PROD) X(and, AND) X(or, OR)
#define KTR_DEFINE_REDUCE(name, ID)                                                        \
  kiln_val *kiln_reduce_##name(kiln_trace *t, kiln_val *x, int n, const int *axes) {       \
    return ktr_reduce(t, "kiln_reduce_" #name, KIR_PRIM_REDUCE_##ID, x, n, axes);          \
  }
KTR_REDUCTIONS(KTR_DEFINE_REDUCE)
#undef KTR_DEFINE_REDUCE

static kiln_val *ktr_arg(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x, int axis,
                         kiln_dtype index_dtype) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  int a;
  if (ktr_axis(op, axis, ktr_aval(x)->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  p.argminmax.axes.n = 1;
  p.argminmax.axes.v[0] = (int8_t)a;
  p.argminmax.index_dtype = index_dtype;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_argmax(kiln_trace *t, kiln_val *x, int axis, kiln_dtype index_dtype) {
  return ktr_arg(t, "kiln_argmax", KIR_PRIM_ARGMAX, x, axis, index_dtype);
}

kiln_val *kiln_argmin(kiln_trace *t, kiln_val *x, int axis, kiln_dtype index_dtype) {
  return ktr_arg(t, "kiln_argmin", KIR_PRIM_ARGMIN, x, axis, index_dtype);
}

static kiln_val *ktr_cumulative(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                                int axis, int reverse) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  int a;
  if (ktr_axis(op, axis, ktr_aval(x)->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  p.cumulative.axis = a;
  p.cumulative.reverse = reverse != 0;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_cumsum(kiln_trace *t, kiln_val *x, int axis, int reverse) {
  return ktr_cumulative(t, "kiln_cumsum", KIR_PRIM_CUMSUM, x, axis, reverse);
}
kiln_val *kiln_cumprod(kiln_trace *t, kiln_val *x, int axis, int reverse) {
  return ktr_cumulative(t, "kiln_cumprod", KIR_PRIM_CUMPROD, x, axis, reverse);
}
kiln_val *kiln_cummax(kiln_trace *t, kiln_val *x, int axis, int reverse) {
  return ktr_cumulative(t, "kiln_cummax", KIR_PRIM_CUMMAX, x, axis, reverse);
}
kiln_val *kiln_cummin(kiln_trace *t, kiln_val *x, int axis, int reverse) {
  return ktr_cumulative(t, "kiln_cummin", KIR_PRIM_CUMMIN, x, axis, reverse);
}

kiln_val *kiln_cumlogsumexp(kiln_trace *t, kiln_val *x, int axis, int reverse) {
  return ktr_cumulative(t, "kiln_cumlogsumexp", KIR_PRIM_CUMLOGSUMEXP, x, axis, reverse);
}

kiln_val *kiln_sort(kiln_trace *t, kiln_val *x, int dimension, kiln_val **indices) {
  static const char op[] = "kiln_sort";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *a = ktr_aval(x);
  int d;
  if (ktr_axis(op, dimension, a->rank, &d)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  kir_params p;
  memset(&p, 0, sizeof p);
  p.sort.dimension = d;
  p.sort.is_stable = true;
  p.sort.num_keys = 1;
  if (!indices) return ktr_bind(t, op, KIR_PRIM_SORT, &p, 1, &x, 1, NULL);
  /* argsort: sort (x, iota) by x, as jnp.argsort does. */
  kiln_val *v[2] = {x, kiln_iota(t, KILN_I32, a->rank, a->shape, d)};
  kiln_val *outs[2] = {NULL, NULL};
  if (!v[1] || !ktr_bind(t, op, KIR_PRIM_SORT, &p, 2, v, 2, outs)) return NULL;
  *indices = outs[1];
  return outs[0];
}

static bool ktr_dims_from(kiln_trace *t, const char *op, const char *what, int n, const int *v,
                          kir_dims *out) {
  if (n < 0 || n > KIR_MAX_RANK) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d %s dimensions", op, n, what);
    return false;
  }
  out->n = n;
  for (int i = 0; i < n; i++) out->v[i] = (int8_t)v[i];
  return true;
}

kiln_val *kiln_dot_general(kiln_trace *t, kiln_val *a, kiln_val *b, const kiln_dot_dims *dims,
                           kiln_dtype preferred) {
  static const char op[] = "kiln_dot_general";
  kiln_val *v[2] = {a, b};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  if (!dims) return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: dims is NULL", op);
  kir_params p;
  memset(&p, 0, sizeof p);
  kir_dot_dims *d = &p.dot.dimension_numbers;
  if (!ktr_dims_from(t, op, "contracting", dims->n_contract, dims->lhs_contract, &d->lhs_contracting) ||
      !ktr_dims_from(t, op, "contracting", dims->n_contract, dims->rhs_contract, &d->rhs_contracting) ||
      !ktr_dims_from(t, op, "batch", dims->n_batch, dims->lhs_batch, &d->lhs_batch) ||
      !ktr_dims_from(t, op, "batch", dims->n_batch, dims->rhs_batch, &d->rhs_batch))
    return NULL;
  p.dot.preferred_element_type = preferred;
  /* jnp.dot promotes its operands first; lax.dot_general needs one dtype. */
  kiln_wdtype wa = {ktr_aval(a)->dtype, ktr_aval(a)->weak}, w;
  kiln_status st = kiln_promote_types(wa, (kiln_wdtype){ktr_aval(b)->dtype, ktr_aval(b)->weak},
                                      t->promotion, &w);
  if (st) return ktr_fail(t, kcore_fail_wrap(st, "%s", op));
  for (int i = 0; i < 2; i++)
    if (!(v[i] = ktr_convert(t, op, v[i], w.dtype, w.weak != 0))) return NULL;
  return ktr_bind(t, op, KIR_PRIM_DOT_GENERAL, &p, 2, v, 1, NULL);
}
