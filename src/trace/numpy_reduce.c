/* numpy reductions: sum, prod, amax, amin with keepdims and jnp's
 * accumulation types; mean, var, std. */
#include <math.h>
#include <string.h>
#include "trace/trace.h"

bool ktr_np_axes(kiln_trace *t, const char *op, kiln_val *x, int n, const int *axes,
                 bool reduced[KIR_MAX_RANK]) {
  int r = ktr_aval(x)->rank;
  for (int d = 0; d < KIR_MAX_RANK; d++) reduced[d] = n == KILN_ALL_AXES && d < r;
  if (n == KILN_ALL_AXES) return true;
  char ty[KIR_AVAL_STR_CAP];
  if (n < 0 || n > r || (n > 0 && !axes)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d axes for %s%s", op, n,
              kir_aval_str(ktr_aval(x), ty, sizeof ty), n > 0 && !axes ? " but axes is NULL" : "");
    return false;
  }
  for (int i = 0; i < n; i++) {
    int a;
    if (ktr_axis(op, axes[i], r, &a)) {
      ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
      return false;
    }
    if (reduced[a]) {
      ktr_failf(t, KILN_ERR_ARGUMENT, "%s: axis %d appears twice for %s", op, axes[i],
                kir_aval_str(ktr_aval(x), ty, sizeof ty));
      return false;
    }
    reduced[a] = true;
  }
  return true;
}

kiln_val *ktr_np_reduce(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                        const bool reduced[KIR_MAX_RANK], bool keepdims) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *a = ktr_aval(x);
  int r = a->rank, axes[KIR_MAX_RANK], n = 0;
  int64_t kept[KIR_MAX_RANK];
  for (int d = 0; d < r; d++) {
    if (reduced[d]) axes[n++] = d;
    kept[d] = reduced[d] ? 1 : a->shape[d];
  }
  kiln_val *out;
  switch (prim) {
    case KIR_PRIM_REDUCE_SUM: out = kiln_reduce_sum(t, x, n, axes); break;
    case KIR_PRIM_REDUCE_PROD: out = kiln_reduce_prod(t, x, n, axes); break;
    case KIR_PRIM_REDUCE_MAX: out = kiln_reduce_max(t, x, n, axes); break;
    case KIR_PRIM_REDUCE_MIN: out = kiln_reduce_min(t, x, n, axes); break;
    default: return ktr_failf(t, KILN_ERR_INTERNAL, "%s: not a reduction", op);
  }
  return keepdims && out ? kiln_reshape(t, out, r, kept) : out;
}

kiln_val *ktr_np_sum(kiln_trace *t, const char *op, kiln_val *x, const bool reduced[KIR_MAX_RANK],
                     bool keepdims) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kiln_dtype d = ktr_aval(x)->dtype;
  if (d != KILN_F16 && d != KILN_BF16) return ktr_np_reduce(t, op, KIR_PRIM_REDUCE_SUM, x, reduced, keepdims);
  kiln_val *s = ktr_np_reduce(t, op, KIR_PRIM_REDUCE_SUM, ktr_convert(t, op, x, KILN_F32, false),
                              reduced, keepdims);
  return ktr_convert(t, op, s, d, false);
}

kiln_val *ktr_np_like(kiln_trace *t, kiln_val *x, double v) {
  return x ? kiln_scalar(t, ktr_aval(x)->dtype, v) : NULL;
}

kiln_val *ktr_np_inexact(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype *result) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kiln_dtype d = ktr_aval(x)->dtype;
  /* jnp's to_inexact: 64-bit integers to f64, narrower ones and bool to f32. */
  *result = kiln_dtype_is_float(d) ? d : kiln_dtype_size(d) == 8 ? KILN_F64 : KILN_F32;
  kiln_dtype compute = d == KILN_F16 || d == KILN_BF16 ? KILN_F32 : *result;
  return ktr_convert(t, op, x, compute, compute == d && ktr_aval(x)->weak);
}

/* jnp.sum / jnp.prod: bool and narrow integers accumulate in 64 bits, half
 * floats in f32 (cast back). */
static kiln_val *ktr_np_sum_like(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                                 int n, const int *axes, int keepdims) {
  bool red[KIR_MAX_RANK];
  if (!ktr_ok(t, op, 1, &x) || !ktr_np_axes(t, op, x, n, axes, red)) return NULL;
  kiln_dtype d = ktr_aval(x)->dtype, acc = d, back = d;
  if (kiln_dtype_is_bool(d) || (kiln_dtype_is_integer(d) && kiln_dtype_size(d) < 8))
    acc = back = kiln_dtype_is_unsigned(d) ? KILN_U64 : KILN_I64;
  if (d == KILN_F16 || d == KILN_BF16) acc = KILN_F32;
  bool weak = ktr_aval(x)->weak && acc == d;
  kiln_val *r = ktr_np_reduce(t, op, prim, ktr_convert(t, op, x, acc, weak), red, keepdims != 0);
  return ktr_convert(t, op, r, back, weak);
}

kiln_val *kiln_sum(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims) {
  return ktr_np_sum_like(t, "kiln_sum", KIR_PRIM_REDUCE_SUM, x, n, axes, keepdims);
}
kiln_val *kiln_prod(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims) {
  return ktr_np_sum_like(t, "kiln_prod", KIR_PRIM_REDUCE_PROD, x, n, axes, keepdims);
}

static kiln_val *ktr_np_extreme(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x, int n,
                                const int *axes, int keepdims) {
  bool red[KIR_MAX_RANK];
  if (!ktr_ok(t, op, 1, &x) || !ktr_np_axes(t, op, x, n, axes, red)) return NULL;
  for (int d = 0; d < ktr_aval(x)->rank; d++)
    if (red[d] && ktr_aval(x)->shape[d] == 0) {
      char ty[KIR_AVAL_STR_CAP];
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: zero-size axis %d of %s has no identity", op, d,
                       kir_aval_str(ktr_aval(x), ty, sizeof ty));
    }
  return ktr_np_reduce(t, op, prim, x, red, keepdims != 0);
}

kiln_val *kiln_amax(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims) {
  return ktr_np_extreme(t, "kiln_amax", KIR_PRIM_REDUCE_MAX, x, n, axes, keepdims);
}
kiln_val *kiln_amin(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims) {
  return ktr_np_extreme(t, "kiln_amin", KIR_PRIM_REDUCE_MIN, x, n, axes, keepdims);
}

/* The number of elements the marked axes hold. */
static double ktr_np_count(kiln_val *x, const bool red[KIR_MAX_RANK]) {
  double c = 1;
  for (int d = 0; d < ktr_aval(x)->rank; d++)
    if (red[d]) c *= (double)ktr_aval(x)->shape[d];
  return c;
}

kiln_val *kiln_mean(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims) {
  static const char op[] = "kiln_mean";
  bool red[KIR_MAX_RANK];
  kiln_dtype back;
  kiln_val *c = ktr_np_inexact(t, op, x, &back);
  if (!c || !ktr_np_axes(t, op, c, n, axes, red)) return NULL;
  kiln_val *s = ktr_np_reduce(t, op, KIR_PRIM_REDUCE_SUM, c, red, keepdims != 0);
  kiln_val *m = kiln_div(t, s, ktr_np_like(t, s, ktr_np_count(c, red)));
  return ktr_convert(t, op, m, back, ktr_aval(x)->weak && back == ktr_aval(x)->dtype);
}

/* jnp.var: mean of |x - mean|^2 over N - ddof (NaN when that is not
 * positive), computed in the inexact type. */
static kiln_val *ktr_np_var(kiln_trace *t, const char *op, kiln_val *x, int n, const int *axes,
                            int ddof, int keepdims, bool root) {
  bool red[KIR_MAX_RANK];
  kiln_dtype back;
  kiln_val *c = ktr_np_inexact(t, op, x, &back);
  if (!c || !ktr_np_axes(t, op, c, n, axes, red)) return NULL;
  kiln_val *mean = kiln_div(t, ktr_np_reduce(t, op, KIR_PRIM_REDUCE_SUM, c, red, true),
                            ktr_np_like(t, c, ktr_np_count(c, red)));
  kiln_val *centered = kiln_sub(t, c, mean);
  kiln_val *sq = ktr_np_reduce(t, op, KIR_PRIM_REDUCE_SUM, kiln_mul(t, centered, centered), red,
                               keepdims != 0);
  double dof = ktr_np_count(c, red) - ddof;
  kiln_val *v = kiln_div(t, sq, ktr_np_like(t, sq, dof > 0 ? dof : NAN));
  if (root) v = kiln_sqrt(t, v);
  return ktr_convert(t, op, v, back, ktr_aval(x)->weak && back == ktr_aval(x)->dtype);
}

kiln_val *kiln_var(kiln_trace *t, kiln_val *x, int n, const int *axes, int ddof, int keepdims) {
  return ktr_np_var(t, "kiln_var", x, n, axes, ddof, keepdims, false);
}
kiln_val *kiln_std(kiln_trace *t, kiln_val *x, int n, const int *axes, int ddof, int keepdims) {
  return ktr_np_var(t, "kiln_std", x, n, axes, ddof, keepdims, true);
}
