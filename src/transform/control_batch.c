/* Batching (vmap) of cond and scan, JAX's rules.
 *
 * cond with an unmapped index stays a cond of batched branches; with a
 * mapped index every branch runs (batched) and select_n picks each lane's
 * result (the clamped index, as lax.switch clamps). scan batches its body
 * with the carries that end up mapped found by a fixed point (a carry is
 * mapped if its init is, or if the body maps it from mapped values); the
 * xs carry their mapped axis at 1 so that each slice has it at 0, and the
 * ys come out mapped at 1. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

#define KTF_OOM(op) kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op)

kiln_status ktf_batch_cond(kir_program *p, const kir_program *src, const kir_eqn *e,
                           int64_t size, const kir_vid *x, const int *bd, kir_vid *y, int *ybd) {
  (void)src;
  static const char op[] = "vmap of cond";
  const kir_program_list *br = &e->params.cond.branches;
  int n = e->n_in, no = e->n_out;
  kir_vid *in = malloc((size_t)(n + (size_t)br->n * no + br->n + 2) * sizeof *in);
  int *b = malloc((size_t)(n + no + 1) * sizeof *b), *obd = b ? b + n : NULL;
  kiln_status st = in && b ? ktf_batch_operands_front(p, n, x, bd, in, b) : KTF_OOM(op);
  if (!st && b[0] < 0) { /* one cond of batched branches */
    kir_params pr;
    memset(&pr, 0, sizeof pr);
    kir_program **v = kir_alloc(p, (size_t)br->n * sizeof *v);
    if (!v) st = KTF_OOM(op);
    for (int k = 0; !st && k < br->n; k++) st = ktf_batch_sub(op, p, br->v[k], size, b + 1, NULL, &v[k]);
    pr.cond.branches = (kir_program_list){br->n, v};
    if (!st) st = ktf_emit_mapped(p, KIR_PRIM_COND, &pr, n, in, no, y, ybd);
  } else if (!st) { /* every branch, then a select per output */
    kir_vid *outs = in + n, *sel = outs + (size_t)br->n * no;
    for (int k = 0; !st && k < br->n; k++) {
      if (kir_program_has_effect(br->v[k]))
        st = kcore_fail(KILN_ERR_UNIMPLEMENTED,
                        "%s: a cond whose index is batched runs every branch, so its branches "
                        "must not have effects (branch %d has; as JAX)", op, k);
      kir_vid *o = outs + (size_t)k * no;
      if (!st) st = ktf_vmap(op, p, br->v[k], size, in + 1, b + 1, o, obd);
      for (int j = 0; !st && j < no; j++)
        st = kir_batch_front(p, o[j], obd[j], size, kir_var_aval(br->v[k], br->v[k]->outvars[j]), &o[j]);
    }
    kir_vid lo = KIR_NO_VAR, hi = KIR_NO_VAR, idx = KIR_NO_VAR;
    if (!st) st = kir_add_literal(p, KILN_I32, false, kir_scalar_i(0), &lo);
    if (!st) st = kir_add_literal(p, KILN_I32, false, kir_scalar_i(br->n - 1), &hi);
    kir_vid cl[3] = {lo, in[0], hi};
    if (!st) st = kir_emit(p, KIR_PRIM_CLAMP, NULL, 3, cl, &idx);
    for (int j = 0; !st && j < no; j++) {
      kir_aval el = *kir_var_aval(br->v[0], br->v[0]->outvars[j]);
      el.dtype = KILN_I32;
      el.weak = false;
      st = kir_batch_front(p, idx, 0, size, &el, &sel[0]);
      for (int k = 0; k < br->n; k++) sel[1 + k] = outs[(size_t)k * no + j];
      if (!st) st = kir_emit(p, KIR_PRIM_SELECT_N, NULL, br->n + 1, sel, &y[j]);
      ybd[j] = 0;
    }
  }
  free(in);
  free(b);
  return st;
}

kiln_status ktf_batch_scan(kir_program *p, const kir_program *src, const kir_eqn *e,
                           int64_t size, const kir_vid *x, const int *bd, kir_vid *y, int *ybd) {
  (void)src;
  static const char op[] = "vmap of scan";
  const kir_p_scan *s = &e->params.scan;
  const kir_program *B = s->jaxpr;
  int nc = (int)s->num_consts, nk = (int)s->num_carry, n = e->n_in, no = e->n_out;
  kir_vid *in = malloc((size_t)(n + 1) * sizeof *in);
  int *b = malloc((size_t)(2 * n + 2 * no + 2) * sizeof *b), *bb = b ? b + n : NULL;
  int *obd = bb ? bb + n : NULL;
  bool *force = calloc((size_t)(no + 1), sizeof *force);
  kiln_status st = in && b && force ? KILN_OK : KTF_OOM(op);
  for (int i = 0; !st && i < n; i++) {
    in[i] = x[i];
    int to = i < nc + nk ? 0 : 1; /* xs: the scan axis stays first */
    if (bd[i] >= 0 && bd[i] != to) st = kir_batch_moveaxis(p, x[i], bd[i], to, &in[i]);
    bb[i] = bd[i] < 0 ? -1 : 0;
  }
  for (bool changed = true; !st && changed;) { /* the mapped carries */
    changed = false;
    st = ktf_batched_outs(op, B, size, bb, obd);
    for (int i = 0; !st && i < nk; i++)
      if (obd[i] >= 0 && bb[nc + i] < 0) {
        bb[nc + i] = 0;
        changed = true;
      }
  }
  for (int i = 0; !st && i < nk; i++) { /* a mapped carry whose init is not */
    force[i] = bb[nc + i] >= 0;
    if (force[i] && bd[nc + i] < 0)
      st = kir_batch_front(p, in[nc + i], -1, size, kir_var_aval(B, B->invars[nc + i]), &in[nc + i]);
  }
  for (int j = nk; j < no; j++) force[j] = true;
  kir_program *body = NULL;
  if (!st) st = ktf_batch_sub(op, p, B, size, bb, force, &body);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.scan = *s;
  pr.scan.jaxpr = body;
  int idx;
  if (!st) st = kir_add_eqn(p, KIR_PRIM_SCAN, &pr, n, in, &idx);
  for (int j = 0; !st && j < no; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = j < nk ? (force[j] ? 0 : -1) : 1;
  }
  free(in);
  free(b);
  free(force);
  return st;
}
