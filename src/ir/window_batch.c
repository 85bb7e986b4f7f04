/* Batching rules of the window ops, as JAX's: the mapped axis becomes a
 * window dimension of size 1 (stride 1, no padding or dilation). A
 * reduce_window keeps it where it is; the two-operand ops move both
 * operands' mapped axes to the front (an unmapped one is broadcast). */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

static void insert_size(kir_sizes *s, int at, int64_t v) {
  if (s->n == 0) return; /* absent: all ones */
  memmove(&s->v[at + 1], &s->v[at], (size_t)(s->n - at) * sizeof s->v[0]);
  s->v[at] = v;
  s->n++;
}

static kiln_status window_insert(const char *op, kir_p_window *w, int at) {
  if (w->window_dimensions.n >= KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "vmap: %s of rank %d leaves no room for the mapped axis", op,
                      w->window_dimensions.n);
  insert_size(&w->window_dimensions, at, 1);
  insert_size(&w->window_strides, at, 1);
  insert_size(&w->base_dilation, at, 1);
  insert_size(&w->window_dilation, at, 1);
  kir_padding *pc = &w->padding;
  size_t tail = (size_t)(pc->n - at) * sizeof pc->lo[0];
  memmove(&pc->lo[at + 1], &pc->lo[at], tail);
  memmove(&pc->hi[at + 1], &pc->hi[at], tail);
  pc->lo[at] = pc->hi[at] = 0;
  pc->n++;
  return KILN_OK;
}

static kiln_status batch_reduce_window(kir_program *p, const kir_program *src, const kir_eqn *e,
                                       int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                       int *ybd) {
  (void)src, (void)size;
  kir_params pr = e->params;
  kiln_status st = window_insert(kir_prim_name(e->prim), &pr.window, bd[0]);
  if (st) return st;
  ybd[0] = bd[0];
  return kir_emit(p, e->prim, &pr, 1, &x[0], &y[0]);
}

static kiln_status batch_select(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd) {
  kir_vid in[2];
  for (int k = 0; k < 2; k++) {
    kiln_status st = kir_batch_front(p, x[k], bd[k], size, kir_var_aval(src, e->in[k]), &in[k]);
    if (st) return st;
  }
  kir_params pr = e->params;
  kiln_status st = window_insert(kir_prim_name(e->prim), &pr.window, 0);
  if (st) return st;
  ybd[0] = 0;
  return kir_emit(p, e->prim, &pr, 2, in, &y[0]);
}

void kir_window_batch(kir_ad_rules *r) {
  r->batch[KIR_PRIM_REDUCE_WINDOW_SUM] = batch_reduce_window;
  r->batch[KIR_PRIM_REDUCE_WINDOW_MAX] = batch_reduce_window;
  r->batch[KIR_PRIM_REDUCE_WINDOW_MIN] = batch_reduce_window;
  r->batch[KIR_PRIM_SELECT_AND_GATHER_ADD] = batch_select;
  r->batch[KIR_PRIM_SELECT_AND_SCATTER_ADD] = batch_select;
}
