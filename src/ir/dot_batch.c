/* Batching rule of dot_general: with both operands mapped, the mapped axes
 * become a new leading batch dimension of the dimension numbers; with one
 * mapped, its mapped axis is a free dimension (at the front of that
 * operand's free dims in the result). No transpose is materialised: the
 * dimension numbers are renumbered around the mapped axis. */
#include "core/core.h"
#include "ir/ir.h"

/* d's entries renumbered for an operand whose axis `b` was inserted. */
static void renumber(kir_dims *d, int b) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] >= b) d->v[i]++;
}

static int count_below(const kir_dims *a, const kir_dims *c, int b) {
  int n = 0;
  for (int i = 0; i < a->n; i++) n += a->v[i] < b;
  for (int i = 0; i < c->n; i++) n += c->v[i] < b;
  return n;
}

static kiln_status batch_dot(kir_program *p, const kir_program *src, const kir_eqn *e,
                             int64_t size, const kir_vid *x, const int *bd, kir_vid *y, int *ybd) {
  (void)size;
  kir_params pr = e->params;
  kir_dot_dims *d = &pr.dot.dimension_numbers;
  int lr = kir_var_aval(src, e->in[0])->rank;
  if (bd[0] >= 0) {
    renumber(&d->lhs_contracting, bd[0]);
    renumber(&d->lhs_batch, bd[0]);
  }
  if (bd[1] >= 0) {
    renumber(&d->rhs_contracting, bd[1]);
    renumber(&d->rhs_batch, bd[1]);
  }
  if (bd[0] >= 0 && bd[1] >= 0) {
    if (d->lhs_batch.n + 1 > KIR_MAX_RANK)
      return kcore_fail(KILN_ERR_SHAPE, "vmap: dot_general with too many batch dimensions");
    for (int i = d->lhs_batch.n; i > 0; i--) {
      d->lhs_batch.v[i] = d->lhs_batch.v[i - 1];
      d->rhs_batch.v[i] = d->rhs_batch.v[i - 1];
    }
    d->lhs_batch.v[0] = (int8_t)bd[0];
    d->rhs_batch.v[0] = (int8_t)bd[1];
    d->lhs_batch.n++;
    d->rhs_batch.n++;
    ybd[0] = 0;
  } else if (bd[0] >= 0) {
    /* free lhs dims keep their order after the batch dims */
    ybd[0] = d->lhs_batch.n + bd[0] - count_below(&d->lhs_batch, &d->lhs_contracting, bd[0]);
  } else {
    int lfree = lr - d->lhs_batch.n - d->lhs_contracting.n;
    ybd[0] = d->rhs_batch.n + lfree + bd[1] - count_below(&d->rhs_batch, &d->rhs_contracting, bd[1]);
  }
  return kir_emit(p, KIR_PRIM_DOT_GENERAL, &pr, 2, x, &y[0]);
}

void kir_dot_batch(kir_ad_rules *r) { r->batch[KIR_PRIM_DOT_GENERAL] = batch_dot; }
