/* jax.nn.softmax, jax.nn.log_softmax and jax.nn.logsumexp, with `where`,
 * numerically stable as JAX's (the maximum is subtracted before exp). */
#include <math.h>
#include "trace/trace.h"

/* x where `where` holds, else v (x itself when where is NULL). */
static kiln_val *ktr_np_masked(kiln_trace *t, kiln_val *x, kiln_val *where, double v) {
  return where ? kiln_where(t, where, x, ktr_np_like(t, x, v)) : x;
}

/* `where` must be bool; NULL is allowed. */
static bool ktr_np_where_ok(kiln_trace *t, const char *op, kiln_val *where) {
  if (!where || kiln_dtype_is_bool(kiln_val_dtype(where))) return true;
  char ty[KIR_AVAL_STR_CAP];
  ktr_failf(t, KILN_ERR_DTYPE, "%s: where must be bool, got %s", op,
            kir_aval_str(ktr_aval(where), ty, sizeof ty));
  return false;
}

kiln_val *kiln_logsumexp(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims,
                         kiln_val *where) {
  static const char op[] = "kiln_logsumexp";
  bool red[KIR_MAX_RANK];
  kiln_dtype back;
  if (where && !ktr_ok(t, op, 1, &where)) return NULL;
  kiln_val *c = ktr_np_inexact(t, op, x, &back);
  if (!c || !ktr_np_where_ok(t, op, where)) return NULL;
  /* jax.scipy.special.logsumexp computes in the promoted inexact type. */
  if (kiln_dtype_is_float(ktr_aval(x)->dtype)) c = ktr_convert(t, op, x, back, false);
  if (!c || !ktr_np_axes(t, op, c, n, axes, red)) return NULL;
  kiln_val *amax = ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MAX, ktr_np_masked(t, c, where, -INFINITY),
                                 red, true);
  /* An all -inf (or all masked) slice shifts by 0: its result is -inf. */
  amax = kiln_where(t, kiln_is_finite(t, amax), amax, ktr_np_like(t, amax, 0));
  kiln_val *e = ktr_np_masked(t, kiln_exp(t, kiln_sub(t, c, amax)), where, 0);
  kiln_val *s = ktr_np_sum(t, op, e, red, keepdims != 0);
  if (!keepdims && amax) amax = kiln_reshape(t, amax, kiln_val_rank(s), kiln_val_shape(s));
  return kiln_add(t, kiln_log(t, s), amax);
}

/* The shared start of softmax and log_softmax: x (as an inexact type) minus
 * its maximum along `axis` (over `where`), masked entries -inf. */
static kiln_val *ktr_np_shifted(kiln_trace *t, const char *op, kiln_val *x, int axis,
                                kiln_val *where, bool red[KIR_MAX_RANK]) {
  kiln_dtype back;
  if (where && !ktr_ok(t, op, 1, &where)) return NULL;
  kiln_val *c = ktr_np_inexact(t, op, x, &back);
  if (!c || !ktr_np_where_ok(t, op, where)) return NULL;
  if (kiln_dtype_is_float(ktr_aval(x)->dtype)) c = ktr_convert(t, op, x, back, false);
  if (!c || !ktr_np_axes(t, op, c, 1, &axis, red)) return NULL;
  kiln_val *safe = ktr_np_masked(t, c, where, -INFINITY);
  kiln_val *m = ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MAX, safe, red, true);
  return kiln_sub(t, safe, m);
}

kiln_val *kiln_softmax(kiln_trace *t, kiln_val *x, int axis, kiln_val *where) {
  static const char op[] = "kiln_softmax";
  bool red[KIR_MAX_RANK];
  kiln_val *e = kiln_exp(t, ktr_np_shifted(t, op, x, axis, where, red));
  if (!e) return NULL;
  kiln_val *r = kiln_div(t, e, ktr_np_sum(t, op, e, red, true));
  return ktr_np_masked(t, r, where, 0);
}

kiln_val *kiln_log_softmax(kiln_trace *t, kiln_val *x, int axis, kiln_val *where) {
  static const char op[] = "kiln_log_softmax";
  bool red[KIR_MAX_RANK];
  kiln_val *s = ktr_np_shifted(t, op, x, axis, where, red);
  if (!s) return NULL;
  kiln_val *e = ktr_np_masked(t, kiln_exp(t, s), where, 0);
  kiln_val *r = kiln_sub(t, s, kiln_log(t, ktr_np_sum(t, op, e, red, true)));
  return ktr_np_masked(t, r, where, -INFINITY);
}
