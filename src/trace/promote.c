/* numpy-style broadcasting and JAX's promotion at the API level: the IR
 * receives explicit converts and rank-aligning broadcasts. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "trace/trace.h"

/* Wraps an integer to the width of `to`, as convert_element_type does. */
static kir_scalar ktr_wrap_int(uint64_t bits, kiln_dtype to) {
  unsigned width = (unsigned)kiln_dtype_size(to) * 8;
  if (width < 64) bits &= (UINT64_C(1) << width) - 1;
  if (kiln_dtype_is_unsigned(to)) return kir_scalar_u(bits);
  if (width < 64 && (bits >> (width - 1)) & 1) bits |= ~((UINT64_C(1) << width) - 1);
  return kir_scalar_i((int64_t)bits);
}

/* Float to integer: truncation toward zero, saturating at the target's
 * range, NaN to 0 (XLA:CPU's convert). */
static kir_scalar ktr_float_to_int(double f, kiln_dtype to) {
  unsigned w = (unsigned)kiln_dtype_size(to) * 8;
  if (f != f) return ktr_wrap_int(0, to);
  if (kiln_dtype_is_unsigned(to)) {
    double hi = ldexp(1.0, (int)w); /* 2^w, exact */
    return kir_scalar_u(f <= 0 ? 0 : f >= hi ? (w == 64 ? UINT64_MAX : (UINT64_C(1) << w) - 1)
                                             : (uint64_t)f);
  }
  double lim = ldexp(1.0, (int)w - 1); /* 2^(w-1) */
  int64_t max = w == 64 ? INT64_MAX : (INT64_C(1) << (w - 1)) - 1;
  return kir_scalar_i(f <= -lim ? -max - 1 : f >= lim ? max : (int64_t)f);
}

/* A literal's value as the target dtype's scalar (JAX converts Python
 * scalars at trace time). A weak integer must fit its new type (JAX raises
 * OverflowError; kir_add_literal refuses it); a strong one wraps. */
static kir_scalar ktr_literal_cast(kiln_dtype from, bool weak, kir_scalar v, kiln_dtype to) {
  double f;
  if (kiln_dtype_is_float(from))
    f = v.f;
  else if (kiln_dtype_is_unsigned(from))
    f = (double)v.u;
  else
    f = (double)v.i;
  if (kiln_dtype_is_float(to)) return kir_scalar_f(f);
  if (kiln_dtype_is_bool(to)) return kir_scalar_i(f != 0);
  if (kiln_dtype_is_float(from)) return ktr_float_to_int(f, to);
  if (weak) return kiln_dtype_is_unsigned(to) && !kiln_dtype_is_unsigned(from) ? kir_scalar_u((uint64_t)v.i) : v;
  return ktr_wrap_int(kiln_dtype_is_unsigned(from) ? v.u : (uint64_t)v.i, to);
}

kiln_val *ktr_convert(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype dtype, bool weak) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *a = ktr_aval(x);
  if (a->dtype == dtype && a->weak == weak) return x;
  const kir_var *var = &x->trace->prog->vars[x->vid];
  if (var->kind == KIR_VAR_LITERAL && x->trace == t) {
    kir_vid vid;
    kiln_status st = kir_add_literal(t->prog, dtype, weak,
                                     ktr_literal_cast(a->dtype, a->weak, var->u.literal, dtype), &vid);
    if (st) return ktr_fail(t, kcore_fail_wrap(st, "%s", op));
    return ktr_val(t, vid);
  }
  kir_params p;
  memset(&p, 0, sizeof p);
  p.convert.new_dtype = dtype;
  p.convert.weak_type = weak;
  return ktr_bind(t, op, KIR_PRIM_CONVERT_ELEMENT_TYPE, &p, 1, &x, 1, NULL);
}

/* "f32[4,8], ~f32[]" into buf. */
static void ktr_types_str(int n, kiln_val *const *vals, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++) {
    char t[KIR_AVAL_STR_CAP];
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                            kir_aval_str(ktr_aval(vals[i]), t, sizeof t));
  }
}

kiln_status ktr_broadcast_shape(const char *op, int n, kiln_val *const *vals, int *rank,
                                int64_t *shape) {
  int r = 0;
  for (int i = 0; i < n; i++)
    if (ktr_aval(vals[i])->rank > r) r = ktr_aval(vals[i])->rank;
  for (int d = 0; d < r; d++) shape[d] = 1;
  for (int i = 0; i < n; i++) {
    const kir_aval *a = ktr_aval(vals[i]);
    for (int d = 0; d < a->rank; d++) {
      int64_t *s = &shape[r - a->rank + d], k = a->shape[d];
      if (k == *s || k == 1) continue;
      if (*s != 1) {
        char types[512];
        ktr_types_str(n, vals, types, sizeof types);
        return kcore_fail(KILN_ERR_SHAPE, "%s: shapes do not broadcast: %s", op, types);
      }
      *s = k;
    }
  }
  *rank = r;
  return KILN_OK;
}

kiln_val *ktr_to_rank(kiln_trace *t, const char *op, kiln_val *x, int rank) {
  const kir_aval *a = ktr_aval(x);
  if (a->rank == rank || a->rank == 0) return x;
  kir_params p;
  memset(&p, 0, sizeof p);
  int lead = rank - a->rank;
  p.broadcast.shape.n = rank;
  p.broadcast.broadcast_dimensions.n = a->rank;
  for (int d = 0; d < rank; d++) p.broadcast.shape.v[d] = d < lead ? 1 : a->shape[d - lead];
  for (int d = 0; d < a->rank; d++) p.broadcast.broadcast_dimensions.v[d] = (int8_t)(d + lead);
  return ktr_bind(t, op, KIR_PRIM_BROADCAST_IN_DIM, &p, 1, &x, 1, NULL);
}

kiln_status ktr_promote_args(kiln_trace *t, const char *op, int n, kiln_val **vals) {
  if (!ktr_ok(t, op, n, vals)) return t ? t->status : KILN_ERR_ARGUMENT;
  const kir_aval *a0 = ktr_aval(vals[0]);
  kiln_wdtype w = {a0->dtype, a0->weak};
  for (int i = 1; i < n; i++) {
    const kir_aval *a = ktr_aval(vals[i]);
    kiln_wdtype next;
    kiln_status st = kiln_promote_types(w, (kiln_wdtype){a->dtype, a->weak}, t->promotion, &next);
    if (st) {
      char types[512];
      ktr_types_str(n, vals, types, sizeof types);
      kcore_fail_wrap(st, "%s: cannot promote operands %s", op, types);
      ktr_fail(t, st);
      return st;
    }
    w = next;
  }
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = ktr_broadcast_shape(op, n, vals, &rank, shape);
  if (st) {
    ktr_fail(t, st);
    return st;
  }
  for (int i = 0; i < n; i++) {
    kiln_val *v = ktr_convert(t, op, vals[i], w.dtype, w.weak != 0);
    if (v) v = ktr_to_rank(t, op, v, rank);
    if (!v) return t->status;
    vals[i] = v;
  }
  return KILN_OK;
}
