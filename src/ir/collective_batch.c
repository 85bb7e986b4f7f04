/* Batching rules (vmap) of the collectives over mesh axes: the vmapped
 * axis is not one of the axes they name (kiln_vmap's axis_name cannot be
 * named by a collective), so each member applies the collective to its
 * whole batch, as JAX's batchers do for a frame outside the collective's
 * axes. psum/pmax/pmin and ppermute act elementwise across members and keep
 * the mapped axis where it is; the collectives that move dimensions get it
 * in front and their dimensions shifted past it. */
#include "core/core.h"
#include "ir/ir.h"

static kiln_status batch_same(kir_program *p, const kir_program *src, const kir_eqn *e,
                              int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                              int *ybd) {
  (void)src, (void)size;
  *ybd = bd[0];
  return kir_emit_like(p, e, 1, x, y);
}

/* all_gather, reduce_scatter, all_to_all over x with its mapped axis moved
 * to 0 and every dimension parameter one further. */
static kiln_status batch_front(kir_program *p, const kir_program *src, const kir_eqn *e,
                               int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                               int *ybd) {
  (void)src, (void)size;
  kir_vid v;
  kiln_status st = kir_batch_moveaxis(p, x[0], bd[0], 0, &v);
  if (st) return st;
  kir_params pr = e->params;
  switch (e->prim) {
    case KIR_PRIM_ALL_GATHER: pr.all_gather.all_gather_dimension++; break;
    case KIR_PRIM_PSUM_SCATTER: pr.psum_scatter.scatter_dimension++; break;
    default:
      pr.all_to_all.split_axis++;
      pr.all_to_all.concat_axis++;
  }
  *ybd = 0;
  return kir_emit(p, e->prim, &pr, 1, &v, y);
}

void kir_collective_batch(kir_ad_rules *r) {
  r->batch[KIR_PRIM_PSUM] = batch_same;
  r->batch[KIR_PRIM_PMAX] = batch_same;
  r->batch[KIR_PRIM_PMIN] = batch_same;
  r->batch[KIR_PRIM_PPERMUTE] = batch_same;
  r->batch[KIR_PRIM_ALL_GATHER] = batch_front;
  r->batch[KIR_PRIM_PSUM_SCATTER] = batch_front;
  r->batch[KIR_PRIM_ALL_TO_ALL] = batch_front;
}
