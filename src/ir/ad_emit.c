/* The autodiff rule table and the helpers rules use to emit equations. */
#include <pthread.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

static kir_ad_rules g_rules;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void kir_ad_build(void) {
  kir_elementwise_ad(&g_rules);
  kir_reduce_ad(&g_rules);
  kir_shape_ad(&g_rules);
  kir_scatter_ad(&g_rules);
  kir_dot_ad(&g_rules);
  kir_elementwise_batch(&g_rules);
  kir_reduce_batch(&g_rules);
  kir_shape_batch(&g_rules);
  kir_dot_batch(&g_rules);
  kir_gather_batch(&g_rules);
  kir_window_ad(&g_rules);
  kir_window_batch(&g_rules);
  kir_topk_rules(&g_rules);
  kir_cumlogsumexp_rules(&g_rules);
  kir_barrier_rules(&g_rules);
  kir_conv_ad(&g_rules);
  kir_collective_ad(&g_rules);
  kir_collective_batch(&g_rules);
}

const kir_ad_rules *kir_ad_rules_get(void) {
  pthread_once(&g_once, kir_ad_build);
  return &g_rules;
}

kiln_status kir_emit(kir_program *p, kir_prim prim, const kir_params *params, int n,
                     const kir_vid *in, kir_vid *out) {
  int idx;
  kiln_status st = kir_add_eqn(p, prim, params, n, in, &idx);
  if (!st) *out = p->eqns[idx].out[0];
  return st;
}

kiln_status kir_emit1(kir_program *p, kir_prim prim, kir_vid x, kir_vid *out) {
  return kir_emit(p, prim, NULL, 1, &x, out);
}

kiln_status kir_emit2(kir_program *p, kir_prim prim, kir_vid a, kir_vid b, kir_vid *out) {
  kir_vid in[2] = {a, b};
  return kir_emit(p, prim, NULL, 2, in, out);
}

kiln_status kir_emit_scalar(kir_program *p, kir_vid like, double v, kir_vid *out) {
  kiln_dtype d = kir_var_aval(p, like)->dtype;
  kir_scalar s;
  if (kiln_dtype_is_float(d))
    s = kir_scalar_f(v);
  else if (kiln_dtype_is_unsigned(d))
    s = kir_scalar_u((uint64_t)v);
  else
    s = kir_scalar_i((int64_t)v);
  return kir_add_literal(p, d, false, s, out);
}

kiln_status kir_emit_broadcast_to(kir_program *p, kir_vid x, const kir_aval *aval,
                                  kir_vid *out) {
  const kir_aval *a = kir_var_aval(p, x);
  if (kir_aval_same_shape(a, aval)) {
    *out = x;
    return KILN_OK;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.broadcast.shape.n = aval->rank;
  memcpy(pr.broadcast.shape.v, aval->shape, (size_t)aval->rank * sizeof(int64_t));
  if (a->rank == aval->rank) {
    pr.broadcast.broadcast_dimensions.n = a->rank;
    for (int i = 0; i < a->rank; i++) pr.broadcast.broadcast_dimensions.v[i] = (int8_t)i;
  } else if (a->rank != 0) {
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "autodiff: cannot broadcast %s to %s",
                      kir_aval_str(a, t1, sizeof t1), kir_aval_str(aval, t2, sizeof t2));
  }
  return kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &pr, 1, &x, out);
}

kiln_status kir_emit_zeros(kir_program *p, const kir_aval *aval, kir_vid *out) {
  kir_vid z;
  kir_scalar s = kiln_dtype_is_float(aval->dtype) ? kir_scalar_f(0) : kir_scalar_i(0);
  kiln_status st = kir_add_literal(p, aval->dtype, false, s, &z);
  if (!st) st = kir_emit_broadcast_to(p, z, aval, out);
  return st;
}

kiln_status kir_emit_convert(kir_program *p, kir_vid x, kiln_dtype dtype, kir_vid *out) {
  if (kir_var_aval(p, x)->dtype == dtype) {
    *out = x;
    return KILN_OK;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.convert.new_dtype = dtype;
  return kir_emit(p, KIR_PRIM_CONVERT_ELEMENT_TYPE, &pr, 1, &x, out);
}

kiln_status kir_emit_add_any(kir_program *p, kir_vid a, kir_vid b, kir_vid *out) {
  if (a == KIR_NO_VAR || b == KIR_NO_VAR) {
    *out = a == KIR_NO_VAR ? b : a;
    return KILN_OK;
  }
  /* an accumulated cotangent may be a broadcastable rank-0 or size-1
   * operand of the other's shape: add broadcasts it */
  return kir_emit2(p, KIR_PRIM_ADD, a, b, out);
}

kiln_status kir_emit_unbroadcast(kir_program *p, kir_vid ct, const kir_aval *to, kir_vid *out) {
  const kir_aval *c = kir_var_aval(p, ct);
  if (kir_aval_same_shape(c, to)) {
    *out = ct;
    return KILN_OK;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  for (int i = 0; i < c->rank; i++)
    if (to->rank == 0 || (to->shape[i] == 1 && c->shape[i] != 1))
      pr.axes.axes.v[pr.axes.axes.n++] = (int8_t)i;
  kir_vid s;
  kiln_status st = kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &ct, &s);
  if (st || to->rank == 0) {
    *out = s;
    return st;
  }
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = to->rank;
  memcpy(pr.reshape.new_sizes.v, to->shape, (size_t)to->rank * sizeof(int64_t));
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &s, out);
}

kiln_status kir_emit_select(kir_program *p, kir_vid pred, kir_vid on_false, kir_vid on_true,
                            const kir_aval *aval, kir_vid *out) {
  kir_vid in[3];
  kir_aval pa = *aval;
  pa.dtype = kir_var_aval(p, pred)->dtype;
  kiln_status st = kir_var_aval(p, pred)->rank == 0 ? (in[0] = pred, KILN_OK)
                                                     : kir_emit_broadcast_to(p, pred, &pa, &in[0]);
  if (!st) st = kir_emit_broadcast_to(p, on_false, aval, &in[1]);
  if (!st) st = kir_emit_broadcast_to(p, on_true, aval, &in[2]);
  if (!st) st = kir_emit(p, KIR_PRIM_SELECT_N, NULL, 3, in, out);
  return st;
}

kiln_status kir_emit_like(kir_program *p, const kir_eqn *e, int n, const kir_vid *x,
                          kir_vid *out) {
  return kir_emit(p, e->prim, &e->params, n, x, out);
}

kiln_status kir_ad_jvp_zero(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                            const kir_vid *tx, kir_vid *ty) {
  (void)p, (void)x, (void)y, (void)tx;
  for (int i = 0; i < e->n_out; i++) ty[i] = KIR_NO_VAR;
  return KILN_OK;
}
