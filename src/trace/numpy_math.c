/* numpy's elementwise functions that lax has no primitive for: clip,
 * floor_divide and remainder (numpy's sign rules). */
#include "trace/trace.h"

kiln_val *kiln_clip(kiln_trace *t, kiln_val *x, kiln_val *lo, kiln_val *hi) {
  static const char op[] = "kiln_clip";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  if (lo) x = kiln_max(t, lo, x);
  if (hi) x = kiln_min(t, hi, x);
  return x;
}

/* Promoted operands; bool is refused (numpy has no bool division). */
static bool ktr_np_divmod_args(kiln_trace *t, const char *op, kiln_val *a, kiln_val *b,
                               kiln_val **v) {
  v[0] = a, v[1] = b;
  if (!ktr_ok(t, op, 2, v) || ktr_promote_args(t, op, 2, v)) return false;
  if (!kiln_dtype_is_bool(ktr_aval(v[0])->dtype)) return true;
  ktr_failf(t, KILN_ERR_DTYPE, "%s: bool operands are not supported", op);
  return false;
}

/* x < 0 as bool (false for unsigned). */
static kiln_val *ktr_np_negative(kiln_trace *t, kiln_val *x) {
  return kiln_lt(t, x, ktr_np_like(t, x, 0));
}

kiln_val *kiln_floor_divide(kiln_trace *t, kiln_val *a, kiln_val *b) {
  static const char op[] = "kiln_floor_divide";
  kiln_val *v[2];
  if (!ktr_np_divmod_args(t, op, a, b, v)) return NULL;
  kiln_dtype d = ktr_aval(v[0])->dtype;
  if (kiln_dtype_is_unsigned(d)) return kiln_div(t, v[0], v[1]);
  if (kiln_dtype_is_integer(d)) {
    /* Truncating division, one less where the signs differ and it was inexact. */
    kiln_val *q = kiln_div(t, v[0], v[1]);
    kiln_val *fix = kiln_and(t, kiln_ne(t, ktr_np_negative(t, v[0]), ktr_np_negative(t, v[1])),
                             kiln_ne(t, kiln_rem(t, v[0], v[1]), ktr_np_like(t, v[0], 0)));
    return kiln_where(t, fix, kiln_sub(t, q, ktr_np_like(t, q, 1)), q);
  }
  /* jnp's float divmod: (a - fmod(a, b)) / b, less one where fmod's sign
   * differs from b's, rounded. */
  kiln_val *mod = kiln_rem(t, v[0], v[1]);
  kiln_val *by_zero = kiln_eq(t, v[1], ktr_np_like(t, v[1], 0));
  kiln_val *q = kiln_div(t, kiln_where(t, by_zero, v[0], kiln_sub(t, v[0], mod)), v[1]);
  kiln_val *fix = kiln_and(t, kiln_ne(t, mod, ktr_np_like(t, mod, 0)),
                           kiln_ne(t, kiln_sign(t, v[1]), kiln_sign(t, mod)));
  q = kiln_where(t, fix, kiln_sub(t, q, ktr_np_like(t, q, 1)), q);
  return kiln_round(t, q);
}

kiln_val *kiln_remainder(kiln_trace *t, kiln_val *a, kiln_val *b) {
  static const char op[] = "kiln_remainder";
  kiln_val *v[2];
  if (!ktr_np_divmod_args(t, op, a, b, v)) return NULL;
  kiln_dtype d = ktr_aval(v[0])->dtype;
  /* jnp divides integers by 1 where the divisor is 0 (the result is 0). */
  if (kiln_dtype_is_integer(d))
    v[1] = kiln_where(t, kiln_eq(t, v[1], ktr_np_like(t, v[1], 0)), ktr_np_like(t, v[1], 1), v[1]);
  kiln_val *r = kiln_rem(t, v[0], v[1]);
  if (kiln_dtype_is_unsigned(d)) return r;
  /* The truncated remainder plus b where it is non-zero and its sign
   * differs from b's. */
  kiln_val *fix = kiln_and(t, kiln_ne(t, ktr_np_negative(t, r), ktr_np_negative(t, v[1])),
                           kiln_ne(t, r, ktr_np_like(t, r, 0)));
  return kiln_where(t, fix, kiln_add(t, r, v[1]), r);
}
