/* Elementwise primitives' shape/dtype rules (lax semantics), with the dtypes
 * each accepts from its record (elementwise_*.def). Their reference
 * evaluators are elementwise_eval.c and its scalar ops, their autodiff rules
 * elementwise_ad.c, their batching elementwise_batch.c. */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* The dtypes each unary/n-ary primitive accepts (its record's accepts
 * column: lax's accepted_dtypes; complex types do not exist in kiln). */
#define KIR_EW_DT_ANY KIR_DT_ANY
#define KIR_EW_DT_NUM KIR_DT_NUM
#define KIR_EW_DT_FLOAT KIR_DT_FLOAT
#define KIR_EW_DT_INT KIR_DT_INT
#define KIR_EW_DT_SIGNED (KIR_DT_SINT | KIR_DT_FLOAT)
#define KIR_EW_DT_BITS (KIR_DT_BOOL | KIR_DT_INT)
#define KIR_EW_DT_OWN 0u /* the row's rule checks dtypes itself */
static const unsigned kir_accepts[KIR_NUM_PRIMS] = {
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  [KIR_PRIM_##ID] = KIR_EW_DT_##accepts,
#include "ir/prims.def"
#undef KIR_PRIM
#undef KIR_ELEMENTWISE
};

static unsigned kir_accepted(kir_prim prim) {
  unsigned c = kir_accepts[prim];
  KCORE_ASSERT(c != 0); /* a prim routed to these rules needs an accepts class */
  return c;
}

/* Same shape; dtype kept except is_finite (bool); weak kept (JAX's
 * standard weak-type rule over one operand). */
kiln_status kir_rule_unary(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)n_in;
  kiln_status st = kir_check_dtype_class(prim, 0, in, kir_accepted(prim));
  if (st != KILN_OK) return st;
  if (prim == KIR_PRIM_ROUND) {
    int64_t m = params->round.rounding_method;
    if (m != 0 && m != 1)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "round: rounding_method=%lld is neither 0 (away from zero) nor 1 (to "
                        "nearest even)",
                        (long long)m);
  }
  if (prim == KIR_PRIM_INTEGER_POW && params->integer_pow.y < 0 && !kiln_dtype_is_float(in[0].dtype))
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "integer_pow: integers cannot be raised to negative powers, got "
                      "integer_pow(%s, %lld)",
                      kiln_dtype_name(in[0].dtype), (long long)params->integer_pow.y);
  if (prim == KIR_PRIM_REDUCE_PRECISION) {
    const kir_p_reduce_precision *r = &params->reduce_precision;
    if (r->exponent_bits < 1 || r->exponent_bits > 11 || r->mantissa_bits < 0 || r->mantissa_bits > 52)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "reduce_precision: exponent_bits=%lld mantissa_bits=%lld (1 to 11 and 0 "
                        "to 52 needed) for %s",
                        (long long)r->exponent_bits, (long long)r->mantissa_bits,
                        kiln_dtype_name(in[0].dtype));
  }
  kiln_dtype dt = prim == KIR_PRIM_IS_FINITE ? KILN_BOOL : in[0].dtype;
  return kir_push(out, dt, in[0].rank, in[0].shape, in[0].weak);
}

/* lax.naryop: accepted dtypes, equal dtypes, lax broadcasting; the result
 * is weak only if every operand is. */
static kiln_status kir_nary_common(kir_prim prim, int n_in, const kir_aval *in, bool same_dtype,
                                   int *rank, int64_t *shape) {
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_check_dtype_class(prim, i, in, kir_accepted(prim));
    if (st != KILN_OK) return st;
  }
  if (same_dtype) {
    kiln_status st = kir_check_same_dtypes(prim, n_in, in);
    if (st != KILN_OK) return st;
  }
  return kir_broadcast_shapes(prim, n_in, in, rank, shape);
}

kiln_status kir_rule_nary(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)params;
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = kir_nary_common(prim, n_in, in, true, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, rank, shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_compare(kir_prim prim, const kir_params *params, int n_in,
                             const kir_aval *in, kir_avals *out) {
  (void)params;
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = kir_nary_common(prim, n_in, in, true, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, KILN_BOOL, rank, shape, kir_all_weak(n_in, in));
}

/* lax.pow: a float base with a float exponent of its dtype or any integer
 * exponent. */
kiln_status kir_rule_pow(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                         kir_avals *out) {
  (void)params;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_FLOAT);
  if (st == KILN_OK) st = kir_check_dtype_class(prim, 1, in, KIR_DT_NUM);
  if (st != KILN_OK) return st;
  if (kiln_dtype_is_float(in[1].dtype) && in[1].dtype != in[0].dtype) {
    char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_DTYPE,
                      "pow: operand types %s and %s have different float dtypes (a float "
                      "exponent must have the base's dtype)",
                      kir_aval_str(&in[0], t0, sizeof t0), kir_aval_str(&in[1], t1, sizeof t1));
  }
  int rank;
  int64_t shape[KIR_MAX_RANK];
  st = kir_broadcast_shapes(prim, n_in, in, &rank, shape);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, rank, shape, kir_all_weak(n_in, in));
}

/* lax.select_n(which, *cases): cases of one type; which is bool (at most
 * two cases) or an integer, scalar or of the cases' shape. */
kiln_status kir_rule_select_n(kir_prim prim, const kir_params *params, int n_in,
                              const kir_aval *in, kir_avals *out) {
  (void)params;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (n_in < 2)
    return kcore_fail(KILN_ERR_ARGUMENT, "select_n: needs `which` and at least one case, got %d "
                      "operand%s", n_in, n_in == 1 ? "" : "s");
  const kir_aval *which = &in[0], *cases = &in[1];
  int n_cases = n_in - 1;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_BOOL | KIR_DT_INT);
  if (st != KILN_OK) return st;
  if (kiln_dtype_is_bool(which->dtype) && n_cases > 2)
    return kcore_fail(KILN_ERR_ARGUMENT, "select_n: a bool `which` (%s) selects among at most 2 "
                      "cases, got %d", kir_aval_str(which, t0, sizeof t0), n_cases);
  for (int i = 1; i < n_cases; i++) {
    if (!kir_aval_same_shape(&cases[i], &cases[0]))
      return kcore_fail(KILN_ERR_SHAPE, "select_n: case types %s and %s have different shapes",
                        kir_aval_str(&cases[0], t0, sizeof t0),
                        kir_aval_str(&cases[i], t1, sizeof t1));
  }
  st = kir_check_same_dtypes(prim, n_cases, cases);
  if (st != KILN_OK) return st;
  if (which->rank != 0 && !kir_aval_same_shape(which, &cases[0]))
    return kcore_fail(KILN_ERR_SHAPE,
                      "select_n: `which` type %s is neither scalar nor of the cases' shape (%s)",
                      kir_aval_str(which, t0, sizeof t0), kir_aval_str(&cases[0], t1, sizeof t1));
  return kir_push(out, cases[0].dtype, cases[0].rank, cases[0].shape,
                  kir_all_weak(n_cases, cases));
}

/* lax.clamp(min, x, max): one dtype; min and max scalar or of x's shape. */
kiln_status kir_rule_clamp(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)params;
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_check_dtype_class(prim, i, in, KIR_DT_ANY);
    if (st != KILN_OK) return st;
  }
  kiln_status st = kir_check_same_dtypes(prim, n_in, in);
  if (st != KILN_OK) return st;
  for (int i = 0; i < 3; i += 2) {
    if (in[i].rank != 0 && !kir_aval_same_shape(&in[i], &in[1])) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "clamp: %s type %s is neither scalar nor of x's shape (%s)",
                        i == 0 ? "min" : "max", kir_aval_str(&in[i], t0, sizeof t0),
                        kir_aval_str(&in[1], t1, sizeof t1));
    }
  }
  return kir_push(out, in[1].dtype, in[1].rank, in[1].shape, kir_all_weak(n_in, in));
}

kiln_status kir_rule_convert_element_type(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  kiln_dtype dt = params->convert.new_dtype;
  if (!kiln_dtype_is_valid(dt))
    return kcore_fail(KILN_ERR_DTYPE, "convert_element_type: new_dtype %d is not a dtype",
                      (int)dt);
  return kir_push(out, dt, in[0].rank, in[0].shape, params->convert.weak_type);
}

/* Same width: same shape. Narrower: a new minor dimension of the ratio.
 * Wider: the minor dimension must hold exactly one new element, and goes. */
kiln_status kir_rule_bitcast_convert_type(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  char t[KIR_AVAL_STR_CAP];
  kiln_dtype to = params->bitcast.new_dtype;
  const kir_aval *x = &in[0];
  if (!kiln_dtype_is_valid(to))
    return kcore_fail(KILN_ERR_DTYPE, "bitcast_convert_type: new_dtype %d is not a dtype",
                      (int)to);
  if ((kiln_dtype_is_bool(x->dtype) || kiln_dtype_is_bool(to)) && x->dtype != to)
    return kcore_fail(KILN_ERR_DTYPE,
                      "bitcast_convert_type: cannot bitcast %s to %s (bool only to itself)",
                      kir_aval_str(x, t, sizeof t), kiln_dtype_name(to));
  size_t from_bits = kiln_dtype_size(x->dtype) * 8, to_bits = kiln_dtype_size(to) * 8;
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  int rank = x->rank;
  if (from_bits > to_bits) {
    if (rank == KIR_MAX_RANK)
      return kcore_fail(KILN_ERR_SHAPE, "bitcast_convert_type: %s to %s would exceed rank %d",
                        kir_aval_str(x, t, sizeof t), kiln_dtype_name(to), KIR_MAX_RANK);
    shape[rank++] = (int64_t)(from_bits / to_bits);
  } else if (from_bits < to_bits) {
    int64_t minor = rank ? x->shape[rank - 1] : 1;
    if (minor * (int64_t)from_bits != (int64_t)to_bits)
      return kcore_fail(KILN_ERR_SHAPE,
                        "bitcast_convert_type: %s to %s needs a last dimension of %zu",
                        kir_aval_str(x, t, sizeof t), kiln_dtype_name(to), to_bits / from_bits);
    rank--;
  }
  return kir_push(out, to, rank, shape, false);
}
