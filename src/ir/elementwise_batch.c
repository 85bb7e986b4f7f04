/* Batching rules of the elementwise family (JAX's broadcast_batcher): the
 * mapped axis of every operand moves to the front and the unmapped operands
 * are broadcast to the batched shape, except rank-0 operands where the
 * primitive itself accepts a scalar (binary ops, clamp's bounds, select_n's
 * predicate), which stay scalars. threefry2x32 is elementwise too. */
#include "core/core.h"
#include "ir/ir.h"

static bool scalar_ok(const kir_eqn *e, int k) {
  switch (e->prim) {
    case KIR_PRIM_SELECT_N: return k == 0;
    case KIR_PRIM_CLAMP: return k != 1;
    case KIR_PRIM_THREEFRY2X32: return false;
    default: return e->n_in == 2;
  }
}

static kiln_status batch_elementwise(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                     int *ybd) {
  const kir_aval *elem = kir_var_aval(src, e->out[0]);
  kir_vid in[KIR_MAX_RANK * 4];
  if (e->n_in > (int)(sizeof in / sizeof in[0]))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "vmap: %s with %d operands", kir_prim_name(e->prim),
                      e->n_in);
  for (int k = 0; k < e->n_in; k++) {
    in[k] = x[k];
    if (bd[k] < 0 && kir_var_aval(p, x[k])->rank == 0 && scalar_ok(e, k)) continue;
    kir_aval el = *elem;
    el.dtype = kir_var_aval(p, x[k])->dtype;
    kiln_status st = kir_batch_front(p, x[k], bd[k], size, &el, &in[k]);
    if (st) return st;
  }
  int idx;
  kiln_status st = kir_add_eqn(p, e->prim, &e->params, e->n_in, in, &idx);
  for (int j = 0; !st && j < e->n_out; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = 0;
  }
  return st;
}

/* stop_gradient is the identity: the mapped axis stays where it is. */
static kiln_status batch_stop_gradient(kir_program *p, const kir_program *src, const kir_eqn *e,
                                       int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                       int *ybd) {
  (void)src, (void)e, (void)size;
  ybd[0] = bd[0];
  return kir_emit1(p, KIR_PRIM_STOP_GRADIENT, x[0], &y[0]);
}

void kir_elementwise_batch(kir_ad_rules *r) {
  for (int i = 0; i < KIR_NUM_PRIMS; i++)
    if (kir_prim_get((kir_prim)i)->family == KIR_FAMILY_ELEMENTWISE) r->batch[i] = batch_elementwise;
  r->batch[KIR_PRIM_THREEFRY2X32] = batch_elementwise;
  r->batch[KIR_PRIM_STOP_GRADIENT] = batch_stop_gradient;
}
