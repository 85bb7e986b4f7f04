/* optimization_barrier (lax.optimization_barrier): the identity on a tuple
 * of arrays that keeps the compiler from moving work across it. In kiln it
 * is an opaque step of its own (the fusion planner never fuses through a
 * non-index-map shape primitive), and every rule passes through: the jvp
 * puts the tangents behind a barrier of their own, the transpose the
 * cotangents, and vmap keeps each operand's mapped axis where it is. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

kiln_status kir_rule_optimization_barrier(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim, (void)params;
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_push(out, in[i].dtype, in[i].rank, in[i].shape, in[i].weak);
    if (st) return st;
  }
  return KILN_OK;
}

static kiln_status eval_barrier(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  for (int i = 0; i < e->n_in; i++)
    if (out[i].nbytes) memcpy(out[i].data, in[i].data, out[i].nbytes);
  return KILN_OK;
}

void kir_barrier_evals(kir_eval_table *t) { t->fn[KIR_PRIM_OPTIMIZATION_BARRIER] = eval_barrier; }

/* A barrier over the non-zero entries of v[0..n) (KIR_NO_VAR: a symbolic
 * zero, left out and given back as one); results to out. */
static kiln_status barrier_of(kir_program *p, int n, const kir_vid *v, kir_vid *out) {
  kir_vid *in = kir_alloc(p, (size_t)(n ? n : 1) * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "optimization_barrier: out of host memory");
  int m = 0, idx;
  for (int i = 0; i < n; i++)
    if (v[i] != KIR_NO_VAR) in[m++] = v[i];
  for (int i = 0; i < n; i++) out[i] = KIR_NO_VAR;
  if (m == 0) return KILN_OK;
  kiln_status st = kir_add_eqn(p, KIR_PRIM_OPTIMIZATION_BARRIER, NULL, m, in, &idx);
  for (int i = 0, j = 0; !st && i < n; i++)
    if (v[i] != KIR_NO_VAR) out[i] = p->eqns[idx].out[j++];
  return st;
}

static kiln_status jvp_barrier(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return barrier_of(p, e->n_in, tx, ty);
}

static kiln_status tr_barrier(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  (void)src, (void)x;
  kir_vid *got = kir_alloc(p, (size_t)(e->n_in ? e->n_in : 1) * sizeof *got);
  if (!got) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "optimization_barrier: out of host memory");
  kiln_status st = barrier_of(p, e->n_out, ct, got);
  for (int i = 0; !st && i < e->n_in; i++)
    if (lin[i]) ct_x[i] = got[i];
  return st;
}

/* Unmapped operands stay unmapped; the mapped ones keep their axes. */
static kiln_status batch_barrier(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd) {
  (void)src, (void)size;
  for (int i = 0; i < e->n_in; i++) ybd[i] = bd[i];
  return barrier_of(p, e->n_in, x, y);
}

void kir_barrier_rules(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_OPTIMIZATION_BARRIER] = jvp_barrier;
  r->transpose[KIR_PRIM_OPTIMIZATION_BARRIER] = tr_barrier;
  r->batch[KIR_PRIM_OPTIMIZATION_BARRIER] = batch_barrier;
}
