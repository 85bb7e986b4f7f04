/* Public elementwise ops and constants: promotion and broadcasting as jnp,
 * then one IR primitive as lax. Unary ops keep lax's dtype rules (exp of an
 * integer is an error, not an implicit float). */
#include <string.h>
#include "device/device.h"
#include "trace/trace.h"

/* ---- constants ---- */

kiln_val *kiln_const_array(kiln_trace *t, kiln_array *a) {
  static const char op[] = "kiln_const_array";
  if (!t || t->status) return ktr_sticky(t, op);
  kiln_status st = kdev_array_check(op, a);
  if (st) return ktr_fail(t, st);
  kir_program *root = t->root->prog;
  kir_vid vid = KIR_NO_VAR;
  for (int i = 0; i < root->n_constvars; i++) {
    const kir_var *v = &root->vars[root->constvars[i]];
    if (v->u.constant.source == KIR_CONST_ARRAY && v->u.constant.array == a) vid = root->constvars[i];
  }
  if (vid == KIR_NO_VAR && (st = kir_add_const_array(root, a, &vid))) return ktr_fail(t, st);
  kiln_val *rv = ktr_val(t->root, vid);
  if (!rv || t == t->root) return rv;
  kir_vid local;
  if ((st = ktr_use(t, op, rv, &local))) return ktr_fail(t, st);
  return ktr_val(t, local);
}

kiln_val *kiln_scalar_f(kiln_trace *t, double v) {
  return ktr_literal(t, KILN_F64, true, kir_scalar_f(v));
}

kiln_val *kiln_scalar_i(kiln_trace *t, int64_t v) {
  return ktr_literal(t, KILN_I64, true, kir_scalar_i(v));
}

static kir_scalar ktr_scalar_of(kiln_dtype dtype, double v) {
  if (kiln_dtype_is_float(dtype)) return kir_scalar_f(v);
  if (kiln_dtype_is_unsigned(dtype)) return kir_scalar_u((uint64_t)v);
  return kir_scalar_i(kiln_dtype_is_bool(dtype) ? v != 0 : (int64_t)v);
}

kiln_val *kiln_scalar(kiln_trace *t, kiln_dtype dtype, double v) {
  if (t && !t->status && !kiln_dtype_is_valid(dtype))
    return ktr_failf(t, KILN_ERR_DTYPE, "kiln_scalar: invalid dtype %d", (int)dtype);
  return ktr_literal(t, dtype, false, ktr_scalar_of(dtype, v));
}

kiln_val *kiln_full(kiln_trace *t, kiln_dtype dtype, int rank, const int64_t *shape, double v) {
  kiln_val *s = kiln_scalar(t, dtype, v);
  if (!s) return NULL;
  return kiln_broadcast_in_dim(t, s, rank, shape, NULL);
}

kiln_val *kiln_iota(kiln_trace *t, kiln_dtype dtype, int rank, const int64_t *shape, int dimension) {
  static const char op[] = "kiln_iota";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  if (rank < 0 || rank > KIR_MAX_RANK || (rank > 0 && !shape))
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: rank %d (shape %s)", op, rank, shape ? "given" : "NULL");
  kir_params p;
  memset(&p, 0, sizeof p);
  p.iota.dtype = dtype;
  p.iota.dimension = dimension;
  p.iota.shape.n = rank;
  if (rank > 0) memcpy(p.iota.shape.v, shape, (size_t)rank * sizeof *shape);
  return ktr_bind(t, op, KIR_PRIM_IOTA, &p, 0, NULL, 1, NULL);
}

/* ---- the generated builders ---- */

/* A binary builder: promote, broadcast, bind. */
static kiln_val *ktr_binary(kiln_trace *t, const char *op, kir_prim prim, kiln_val *a,
                            kiln_val *b) {
  kiln_val *v[2] = {a, b};
  if (ktr_promote_args(t, op, 2, v)) return NULL;
  return ktr_bind(t, op, prim, NULL, 2, v, 1, NULL);
}

/* The UNARY and BINARY builders of prims.def's elementwise rows (declared by
 * kiln/ops.def, which the build generates from the same rows). */
#define KTR_BUILDER_UNARY(name, ID)                                         \
  kiln_val *kiln_##name(kiln_trace *t, kiln_val *x) {                       \
    return ktr_bind(t, "kiln_" #name, KIR_PRIM_##ID, NULL, 1, &x, 1, NULL); \
  }
#define KTR_BUILDER_BINARY(name, ID)                               \
  kiln_val *kiln_##name(kiln_trace *t, kiln_val *a, kiln_val *b) { \
    return ktr_binary(t, "kiln_" #name, KIR_PRIM_##ID, a, b);      \
  }
#define KTR_BUILDER_OWN(name, ID)
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KTR_BUILDER_##builder(name, ID)
#include "ir/prims.def"
#undef KIR_PRIM
#undef KIR_ELEMENTWISE

/* ---- hand-written unary builders ---- */

/* jnp.round: halves to even (lax.round's default rounds away from zero). */
kiln_val *kiln_round(kiln_trace *t, kiln_val *x) {
  kir_params p;
  memset(&p, 0, sizeof p);
  p.round.rounding_method = 1;
  return ktr_bind(t, "kiln_round", KIR_PRIM_ROUND, &p, 1, &x, 1, NULL);
}

/* lax.integer_pow: x ** y for a static y (negative only for floats). */
kiln_val *kiln_integer_pow(kiln_trace *t, kiln_val *x, int64_t y) {
  kir_params p;
  memset(&p, 0, sizeof p);
  p.integer_pow.y = y;
  return ktr_bind(t, "kiln_integer_pow", KIR_PRIM_INTEGER_POW, &p, 1, &x, 1, NULL);
}

/* lax.reduce_precision: x rounded to a float of the given bit widths. */
kiln_val *kiln_reduce_precision(kiln_trace *t, kiln_val *x, int exponent_bits, int mantissa_bits) {
  kir_params p;
  memset(&p, 0, sizeof p);
  p.reduce_precision.exponent_bits = exponent_bits;
  p.reduce_precision.mantissa_bits = mantissa_bits;
  return ktr_bind(t, "kiln_reduce_precision", KIR_PRIM_REDUCE_PRECISION, &p, 1, &x, 1, NULL);
}

/* lax.stop_gradient: the identity on values, a constant to autodiff;
 * integer and bool values have no tangent and pass through unbound. */
kiln_val *kiln_stop_gradient(kiln_trace *t, kiln_val *x) {
  if (x && !kiln_dtype_is_float(kiln_val_dtype(x))) return x;
  return ktr_bind(t, "kiln_stop_gradient", KIR_PRIM_STOP_GRADIENT, NULL, 1, &x, 1, NULL);
}

/* ---- selection and conversion ---- */

kiln_val *kiln_select_n(kiln_trace *t, kiln_val *which, int n, kiln_val *const *cases) {
  static const char op[] = "kiln_select_n";
  if (!ktr_ok(t, op, 1, &which)) return NULL;
  if (n < 1 || n > 64 || !cases)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d cases (1 to 64 needed)", op, n);
  kiln_val *v[65];
  v[0] = which;
  memcpy(v + 1, cases, (size_t)n * sizeof *cases);
  if (ktr_promote_args(t, op, n, v + 1)) return NULL;
  /* lax.select_n wants every case in the full shape (jnp.where broadcasts
   * them); the selector may stay a scalar. */
  int rank;
  int64_t shape[KIR_MAX_RANK];
  if (ktr_broadcast_shape(op, n + 1, v, &rank, shape)) return ktr_fail(t, KILN_ERR_SHAPE);
  for (int i = 0; i <= n; i++) {
    const kir_aval *a = ktr_aval(v[i]);
    bool full = a->rank == rank && memcmp(a->shape, shape, (size_t)rank * sizeof *shape) == 0;
    if (full || (i == 0 && a->rank == 0)) continue;
    if (!(v[i] = kiln_broadcast_in_dim(t, v[i], rank, shape, NULL))) return NULL;
  }
  return ktr_bind(t, op, KIR_PRIM_SELECT_N, NULL, n + 1, v, 1, NULL);
}

kiln_val *kiln_where(kiln_trace *t, kiln_val *pred, kiln_val *on_true, kiln_val *on_false) {
  kiln_val *cases[2] = {on_false, on_true}; /* select_n picks case 1 where pred is true */
  return kiln_select_n(t, pred, 2, cases);
}

kiln_val *kiln_clamp(kiln_trace *t, kiln_val *lo, kiln_val *x, kiln_val *hi) {
  static const char op[] = "kiln_clamp";
  kiln_val *v[3] = {lo, x, hi};
  if (!ktr_ok(t, op, 3, v)) return NULL;
  /* lax.clamp: lo and hi are scalars or x's shape; the dtype is x's. */
  kiln_val *xs[3] = {x, lo, hi};
  if (ktr_promote_args(t, op, 3, xs)) return NULL;
  v[0] = xs[1], v[1] = xs[0], v[2] = xs[2];
  return ktr_bind(t, op, KIR_PRIM_CLAMP, NULL, 3, v, 1, NULL);
}

kiln_val *kiln_convert(kiln_trace *t, kiln_val *x, kiln_dtype dtype) {
  if (t && !t->status && !kiln_dtype_is_valid(dtype))
    return ktr_failf(t, KILN_ERR_DTYPE, "kiln_convert: invalid dtype %d", (int)dtype);
  return ktr_convert(t, "kiln_convert", x, dtype, false);
}

kiln_val *kiln_bitcast(kiln_trace *t, kiln_val *x, kiln_dtype dtype) {
  kir_params p;
  memset(&p, 0, sizeof p);
  p.bitcast.new_dtype = dtype;
  return ktr_bind(t, "kiln_bitcast", KIR_PRIM_BITCAST_CONVERT_TYPE, &p, 1, &x, 1, NULL);
}
