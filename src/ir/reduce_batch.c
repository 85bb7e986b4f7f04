/* Batching rules of the reductions, cumulative ops and sort: the mapped
 * axis moves to the front and the reduced (scanned, sorted) axes shift by
 * one; sort's unmapped operands are broadcast to the batched shape. */
#include "core/core.h"
#include "ir/ir.h"

static kiln_status batch_reduce(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd) {
  (void)src, (void)size;
  kir_vid v;
  kiln_status st = kir_batch_moveaxis(p, x[0], bd[0], 0, &v);
  if (st) return st;
  kir_params pr = e->params;
  switch (kir_prim_get(e->prim)->params) {
    case KIR_PARAMS_AXES: kir_batch_shift(&pr.axes.axes); break;
    case KIR_PARAMS_ARGMINMAX: kir_batch_shift(&pr.argminmax.axes); break;
    default: pr.cumulative.axis++; break;
  }
  ybd[0] = 0;
  return kir_emit(p, e->prim, &pr, 1, &v, &y[0]);
}

static kiln_status batch_sort(kir_program *p, const kir_program *src, const kir_eqn *e,
                              int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                              int *ybd) {
  kir_vid in[KIR_MAX_RANK * 4];
  if (e->n_in > (int)(sizeof in / sizeof in[0]))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "vmap: sort of %d operands", e->n_in);
  for (int k = 0; k < e->n_in; k++) {
    kiln_status st = kir_batch_front(p, x[k], bd[k], size, kir_var_aval(src, e->in[k]), &in[k]);
    if (st) return st;
  }
  kir_params pr = e->params;
  pr.sort.dimension++;
  int idx;
  kiln_status st = kir_add_eqn(p, e->prim, &pr, e->n_in, in, &idx);
  for (int j = 0; !st && j < e->n_out; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = 0;
  }
  return st;
}

void kir_reduce_batch(kir_ad_rules *r) {
  static const kir_prim red[] = {KIR_PRIM_REDUCE_SUM, KIR_PRIM_REDUCE_MAX, KIR_PRIM_REDUCE_MIN,
                                 KIR_PRIM_REDUCE_PROD, KIR_PRIM_REDUCE_AND, KIR_PRIM_REDUCE_OR,
                                 KIR_PRIM_ARGMAX, KIR_PRIM_ARGMIN, KIR_PRIM_CUMSUM,
                                 KIR_PRIM_CUMPROD, KIR_PRIM_CUMMAX, KIR_PRIM_CUMMIN,
                                 KIR_PRIM_CUMLOGSUMEXP};
  for (size_t i = 0; i < sizeof red / sizeof red[0]; i++) r->batch[red[i]] = batch_reduce;
  r->batch[KIR_PRIM_SORT] = batch_sort;
}
