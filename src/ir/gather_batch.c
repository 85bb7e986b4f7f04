/* Batching rules of gather and the scatters (JAX's _gather_batching_rule,
 * _scatter_batching_rule). With only the operand mapped, the mapped axis
 * becomes a leading window (offset) dimension of full size; with the
 * indices mapped, it becomes a new leading operand/indices batching
 * dimension pair (the operand broadcast if it was unmapped), so one gather
 * (scatter) serves every lane. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

kiln_status kir_batch_gather(kir_program *p, const kir_params *params, const kir_aval *op_elem,
                             const kir_aval *idx_elem, int64_t size, const kir_vid *x,
                             const int *bd, kir_vid *y) {
  kir_params pr = *params;
  kir_gather_dims *d = &pr.gather.dimension_numbers;
  kir_sizes *ss = &pr.gather.slice_sizes;
  if (ss->n + 1 > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "vmap: gather of a rank-%d operand exceeds the rank limit", ss->n);
  kir_vid in[2];
  bool idx_mapped = bd[1] >= 0;
  TRY(kir_batch_front(p, x[0], bd[0], size, op_elem, &in[0]));
  if (idx_mapped)
    TRY(kir_batch_front(p, x[1], bd[1], size, idx_elem, &in[1]));
  else
    in[1] = x[1];
  kir_batch_shift(&d->collapsed_slice_dims);
  kir_batch_shift(&d->start_index_map);
  memmove(ss->v + 1, ss->v, (size_t)ss->n * sizeof ss->v[0]);
  ss->n++;
  if (idx_mapped) {
    ss->v[0] = 1;
    kir_batch_shift(&d->offset_dims);
    TRY(kir_batch_dims_front(&d->operand_batching_dims));
    TRY(kir_batch_dims_front(&d->start_indices_batching_dims));
  } else {
    ss->v[0] = size;
    kir_batch_shift(&d->operand_batching_dims);
    TRY(kir_batch_dims_front(&d->offset_dims));
  }
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, in, y);
}

static kiln_status batch_gather(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd) {
  ybd[0] = 0;
  return kir_batch_gather(p, &e->params, kir_var_aval(src, e->in[0]), kir_var_aval(src, e->in[1]),
                          size, x, bd, &y[0]);
}

static kiln_status batch_scatter(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                     int *ybd) {
  kir_params pr = e->params;
  kir_scatter_dims *d = &pr.scatter.dimension_numbers;
  kir_vid in[3];
  bool idx_mapped = bd[1] >= 0;
  TRY(kir_batch_front(p, x[0], bd[0], size, kir_var_aval(src, e->in[0]), &in[0]));
  TRY(kir_batch_front(p, x[2], bd[2], size, kir_var_aval(src, e->in[2]), &in[2]));
  if (idx_mapped)
    TRY(kir_batch_front(p, x[1], bd[1], size, kir_var_aval(src, e->in[1]), &in[1]));
  else
    in[1] = x[1];
  kir_batch_shift(&d->inserted_window_dims);
  kir_batch_shift(&d->scatter_dims_to_operand_dims);
  if (idx_mapped) {
    kir_batch_shift(&d->update_window_dims);
    TRY(kir_batch_dims_front(&d->operand_batching_dims));
    TRY(kir_batch_dims_front(&d->scatter_indices_batching_dims));
  } else {
    kir_batch_shift(&d->operand_batching_dims);
    TRY(kir_batch_dims_front(&d->update_window_dims));
  }
  ybd[0] = 0;
  return kir_emit(p, e->prim, &pr, 3, in, &y[0]);
}

void kir_gather_batch(kir_ad_rules *r) {
  r->batch[KIR_PRIM_GATHER] = batch_gather;
  r->batch[KIR_PRIM_SCATTER_ADD] = batch_scatter;
  r->batch[KIR_PRIM_SCATTER] = batch_scatter;
  r->batch[KIR_PRIM_SCATTER_MUL] = batch_scatter;
  r->batch[KIR_PRIM_SCATTER_MIN] = batch_scatter;
  r->batch[KIR_PRIM_SCATTER_MAX] = batch_scatter;
}
