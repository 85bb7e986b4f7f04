/* Reductions, arg-reductions, cumulative reductions and sort: shape/dtype
 * rules (lax semantics). Their reference evaluators (XLA:CPU's arithmetic)
 * are in reduce_eval.c and reduce_scan.c over reduce_wide.c. */

#include "core/core.h"
#include "ir/ir.h"

/* reduce_sum/prod take numbers, reduce_max/min anything, reduce_and/or
 * bools and integers and drop the weak flag (lax's _strip_weak_type). */
kiln_status kir_rule_reduce(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                            kir_avals *out) {
  (void)n_in;
  const kir_dims *axes = &params->axes.axes;
  const kir_aval *x = &in[0];
  unsigned accepts = KIR_DT_ANY;
  bool logical = prim == KIR_PRIM_REDUCE_AND || prim == KIR_PRIM_REDUCE_OR;
  if (prim == KIR_PRIM_REDUCE_SUM || prim == KIR_PRIM_REDUCE_PROD) accepts = KIR_DT_NUM;
  if (logical) accepts = KIR_DT_BOOL | KIR_DT_INT;
  kiln_status st = kir_check_dtype_class(prim, 0, in, accepts);
  if (st == KILN_OK) st = kir_check_dims(prim, "axes", axes, x->rank, false, x);
  if (st != KILN_OK) return st;
  int64_t shape[KIR_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < x->rank; d++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == d;
    if (!reduced) shape[rank++] = x->shape[d];
  }
  return kir_push(out, x->dtype, rank, shape, logical ? false : x->weak);
}

/* argmax/argmin over exactly one non-empty axis; any operand dtype; an
 * integer index dtype; never weak. */
kiln_status kir_rule_argminmax(kir_prim prim, const kir_params *params, int n_in,
                               const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_argminmax *p = &params->argminmax;
  const kir_aval *x = &in[0];
  char t[KIR_AVAL_STR_CAP], ds[128];
  const char *name = kir_prim_name(prim);
  if (p->axes.n != 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: axes=%s must name exactly one axis", name,
                      kir_dims_str(&p->axes, ds, sizeof ds));
  kiln_status st = kir_check_dims(prim, "axes", &p->axes, x->rank, false, x);
  if (st != KILN_OK) return st;
  int axis = p->axes.v[0];
  if (x->shape[axis] < 1)
    return kcore_fail(KILN_ERR_SHAPE, "%s: axis %d of %s is empty", name, axis, kir_aval_str(x, t, sizeof t));
  if (!kiln_dtype_is_valid(p->index_dtype) || !kiln_dtype_is_integer(p->index_dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: index_dtype %s is not an integer dtype", name,
                      kiln_dtype_name(p->index_dtype));
  int64_t shape[KIR_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) shape[rank++] = x->shape[d];
  return kir_push(out, p->index_dtype, rank, shape, false);
}

kiln_status kir_rule_cumulative(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_aval *x = &in[0];
  int64_t axis = params->cumulative.axis;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_NUM);
  if (st != KILN_OK) return st;
  if (axis < 0 || axis >= x->rank) {
    char t[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "%s: axis=%lld is outside [0, %d) for operand %s",
                      kir_prim_name(prim), (long long)axis, x->rank, kir_aval_str(x, t, sizeof t));
  }
  return kir_push(out, x->dtype, x->rank, x->shape, x->weak);
}

/* lax.sort over n operands of one shape: the results have the operands'
 * types, weak flags included. */
kiln_status kir_rule_sort(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)prim;
  const kir_p_sort *p = &params->sort;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (n_in < 1) return kcore_fail(KILN_ERR_ARGUMENT, "sort: needs at least one operand");
  for (int i = 1; i < n_in; i++)
    if (!kir_aval_same_shape(&in[i], &in[0]))
      return kcore_fail(KILN_ERR_SHAPE, "sort: operand types %s and %s have different shapes",
                        kir_aval_str(&in[0], t0, sizeof t0), kir_aval_str(&in[i], t1, sizeof t1));
  if (p->dimension < 0 || p->dimension >= in[0].rank)
    return kcore_fail(KILN_ERR_SHAPE, "sort: dimension=%lld is outside [0, %d) for operand %s",
                      (long long)p->dimension, in[0].rank, kir_aval_str(&in[0], t0, sizeof t0));
  if (p->num_keys < 1 || p->num_keys > n_in)
    return kcore_fail(KILN_ERR_ARGUMENT, "sort: num_keys=%lld is outside [1, %d]",
                      (long long)p->num_keys, n_in);
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_avals_push(out, &in[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}
