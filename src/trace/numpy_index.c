/* jnp.take / jnp.take_along_axis with JAX's index modes, jnp.argsort
 * (stable, either direction) and lax.top_k, over kiln's gather and sort. */
#include <math.h>
#include <string.h>
#include "trace/trace.h"

/* jnp's fill value for out-of-range gathers. */
static kiln_val *ktr_np_fill_value(kiln_trace *t, kiln_dtype d) {
  if (kiln_dtype_is_float(d)) return kiln_scalar(t, d, NAN);
  if (kiln_dtype_is_bool(d)) return kiln_scalar(t, d, 1);
  kiln_val *zero = kiln_scalar(t, d, 0);
  /* The minimum of a signed type is ~max; the maximum of an unsigned one is ~0. */
  if (kiln_dtype_is_unsigned(d)) return kiln_not(t, zero);
  return kiln_shift_left(t, kiln_scalar(t, d, 1), kiln_scalar(t, d, (double)kiln_dtype_size(d) * 8 - 1));
}

static bool ktr_np_mode_ok(kiln_trace *t, const char *op, kiln_index_mode mode) {
  if (mode >= KILN_INDEX_FILL && mode <= KILN_INDEX_PROMISE_IN_BOUNDS) return true;
  ktr_failf(t, KILN_ERR_ARGUMENT, "%s: unknown mode %d", op, (int)mode);
  return false;
}

/* The checks kiln_take would make, done first so the mode's index
 * arithmetic reports them (and the axis is normalised). */
static bool ktr_np_take_args(kiln_trace *t, const char *op, kiln_val *x, kiln_val *idx, int axis,
                             kiln_index_mode mode, int *a) {
  kiln_val *v[2] = {x, idx};
  if (!ktr_ok(t, op, 2, v) || !ktr_np_mode_ok(t, op, mode)) return false;
  if (ktr_axis(op, axis, ktr_aval(x)->rank, a)) {
    ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
    return false;
  }
  return ktr_int_indices(t, op, idx);
}

/* Indices outside [-n, n) (bool, the indices' shape). */
static kiln_val *ktr_np_out_of_range(kiln_trace *t, kiln_val *idx, int64_t n) {
  kiln_dtype d = ktr_aval(idx)->dtype;
  kiln_val *high = kiln_ge(t, idx, kiln_scalar(t, d, (double)n));
  if (!kiln_dtype_is_signed(d)) return high;
  return kiln_or(t, high, kiln_lt(t, idx, kiln_scalar(t, d, -(double)n)));
}

/* Indices rewritten for a gather that wraps negatives and clamps: clip
 * (take's form, no wrap of negatives) and wrap modes. */
static kiln_val *ktr_np_mode_indices(kiln_trace *t, kiln_val *idx, int64_t n, kiln_index_mode mode,
                                     bool wrap_negative) {
  kiln_dtype d = ktr_aval(idx)->dtype;
  if (mode == KILN_INDEX_WRAP) return kiln_remainder(t, idx, kiln_scalar(t, d, (double)n));
  if (mode == KILN_INDEX_CLIP && !wrap_negative)
    return kiln_max(t, idx, kiln_scalar(t, d, 0));
  return idx;
}

kiln_val *kiln_take_mode(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis,
                         kiln_index_mode mode) {
  static const char op[] = "kiln_take_mode";
  int a;
  if (!ktr_np_take_args(t, op, x, indices, axis, mode, &a)) return NULL;
  int64_t n = ktr_aval(x)->shape[a];
  kiln_val *r = kiln_take(t, x, ktr_np_mode_indices(t, indices, n, mode, false), a);
  if (mode != KILN_INDEX_FILL || !r) return r;
  /* The mask has the indices' shape, which sits at axis a of the result. */
  int ir = kiln_val_rank(indices), dims[KIR_MAX_RANK];
  for (int i = 0; i < ir; i++) dims[i] = a + i;
  kiln_val *bad = kiln_broadcast_in_dim(t, ktr_np_out_of_range(t, indices, n), kiln_val_rank(r),
                                        kiln_val_shape(r), dims);
  return kiln_where(t, bad, ktr_np_fill_value(t, kiln_val_dtype(r)), r);
}

kiln_val *kiln_take_along_axis_mode(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis,
                                    kiln_index_mode mode) {
  static const char op[] = "kiln_take_along_axis_mode";
  int a;
  if (!ktr_np_take_args(t, op, x, indices, axis, mode, &a)) return NULL;
  if (mode == KILN_INDEX_WRAP) /* as jnp.take_along_axis, which has no wrap mode */
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: mode wrap is not a gather mode (fill, clip or "
                     "promise_in_bounds)", op);
  int64_t n = ktr_aval(x)->shape[a];
  kiln_val *r = kiln_take_along_axis(t, x, ktr_np_mode_indices(t, indices, n, mode, true), a);
  if (mode != KILN_INDEX_FILL || !r) return r;
  return kiln_where(t, ktr_np_out_of_range(t, indices, n), ktr_np_fill_value(t, kiln_val_dtype(r)), r);
}

kiln_val *kiln_argsort(kiln_trace *t, kiln_val *x, int axis, int descending) {
  static const char op[] = "kiln_argsort";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  int a;
  if (ktr_axis(op, axis, ktr_aval(x)->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  kiln_val *idx = NULL;
  if (!descending) return kiln_sort(t, x, a, &idx) ? idx : NULL;
  /* As jnp: sort the reversed keys (a position j there is last - j here)
   * and reverse the result, so ties keep their original order. */
  kiln_val *rev = kiln_rev(t, x, 1, &a);
  if (!kiln_sort(t, rev, a, &idx)) return NULL;
  int64_t last = ktr_aval(x)->shape[a] - 1;
  kiln_val *orig = kiln_sub(t, kiln_scalar(t, KILN_I32, (double)last), idx);
  return kiln_rev(t, orig, 1, &a);
}

kiln_val *kiln_top_k(kiln_trace *t, kiln_val *x, int64_t k, kiln_val **indices) {
  static const char op[] = "kiln_top_k";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *xa = ktr_aval(x);
  char ty[KIR_AVAL_STR_CAP];
  if (xa->rank < 1 || k < 0 || k > xa->shape[xa->rank - 1])
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: k=%lld is out of range for %s (0 to the last "
                     "axis' size)", op, (long long)k, kir_aval_str(xa, ty, sizeof ty));
  kir_params p;
  memset(&p, 0, sizeof p);
  p.top_k.axis = xa->rank - 1;
  p.top_k.k = k;
  kiln_val *outs[2] = {NULL, NULL};
  if (!ktr_bind(t, op, KIR_PRIM_TOP_K, &p, 1, &x, 2, outs)) return NULL;
  if (indices) *indices = outs[1];
  return outs[0];
}
