/* jvp of while (JAX's _while_loop_jvp): the loop carries the tangents of
 * the carries next to them. Which carries have non-zero tangents is a fixed
 * point: a carry whose tangent starts zero gets one if the body gives it
 * one from the others or from the body's consts. The rule needs the jvp of
 * the body, so it lives here rather than among the per-primitive rules. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

kiln_status ktf_nonzero_outs(const char *op, const kir_program *prog, const bool *nz,
                                    bool *out_nz) {
  kir_program *s = NULL;
  int ni = prog->n_invars, no = prog->n_outvars;
  kir_vid *v = malloc((size_t)(2 * ni + 2 * no + 1) * sizeof *v);
  kiln_status st = v ? kir_program_new(&s) : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < ni; i++) {
    st = kir_add_invar(s, kir_var_aval(prog, prog->invars[i]), &v[i]);
    v[ni + i] = KIR_NO_VAR;
    if (!st && nz[i]) st = kir_add_invar(s, kir_var_aval(prog, prog->invars[i]), &v[ni + i]);
  }
  if (!st) st = ktf_jvp(op, s, prog, v, v + ni, v + 2 * ni, v + 2 * ni + no);
  for (int i = 0; !st && i < no; i++) out_nz[i] = v[2 * ni + no + i] != KIR_NO_VAR;
  kir_program_free(s);
  free(v);
  return st;
}

kiln_status ktf_jvp_while(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                          const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_p_while *w = &e->params.while_loop;
  int ncc = (int)w->cond_nconsts, nbc = (int)w->body_nconsts, nk = e->n_in - ncc - nbc;
  int nb = nbc + nk; /* body invars */
  bool *nz = calloc((size_t)(2 * nb + 1), sizeof *nz), *onz = nz + nb;
  kir_vid *v = malloc((size_t)(4 * nb + 2 * e->n_in + 1) * sizeof *v);
  kiln_status st = nz && v ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < nb; i++) nz[i] = tx[ncc + i] != KIR_NO_VAR;
  for (bool changed = true; !st && changed;) { /* the fixed point */
    changed = false;
    st = ktf_nonzero_outs(op, w->body_jaxpr, nz, onz);
    for (int i = 0; !st && i < nk; i++)
      if (onz[i] && !nz[nbc + i]) nz[nbc + i] = changed = true;
  }
  /* the new body: (body consts, their tangents, carry, carry tangents) */
  kir_program *body = NULL, *cond = NULL;
  kir_vid *bx = v, *btx = v + nb, *by = v + 2 * nb, *bty = v + 3 * nb, *in = v + 4 * nb;
  if (!st) st = kir_program_new_sub(dst, &body);
  int nbt = 0, nkt = 0;
  for (int i = 0; !st && i < nbc; i++) st = kir_add_invar(body, kir_var_aval(dst, x[ncc + i]), &bx[i]);
  for (int i = 0; !st && i < nbc; i++) {
    btx[i] = KIR_NO_VAR;
    if (nz[i] && !(st = kir_add_invar(body, kir_var_aval(dst, x[ncc + i]), &btx[i]))) nbt++;
  }
  for (int i = nbc; !st && i < nb; i++) st = kir_add_invar(body, kir_var_aval(dst, x[ncc + i]), &bx[i]);
  for (int i = nbc; !st && i < nb; i++) {
    btx[i] = KIR_NO_VAR;
    if (nz[i] && !(st = kir_add_invar(body, kir_var_aval(dst, x[ncc + i]), &btx[i]))) nkt++;
  }
  if (!st) st = ktf_jvp(op, body, w->body_jaxpr, bx, btx, by, bty);
  int n_out = nk;
  for (int i = 0; !st && i < nk; i++)
    if (nz[nbc + i]) {
      if (bty[i] == KIR_NO_VAR) st = kir_emit_zeros(body, kir_var_aval(body, by[i]), &bty[i]);
      by[n_out++] = bty[i];
    }
  if (!st) st = kir_set_outputs(body, n_out, by);
  /* the new cond ignores the tangents */
  if (!st) st = ktf_copy_sub(dst, w->cond_jaxpr, &cond);
  for (int i = 0; !st && i < nk; i++) {
    kir_vid unused;
    if (nz[nbc + i]) st = kir_add_invar(cond, kir_var_aval(dst, x[ncc + nbc + i]), &unused);
  }
  /* operands: cond consts, body consts, their tangents, carry, carry tangents */
  int n = 0;
  for (int i = 0; i < ncc + nbc; i++) in[n++] = x[i];
  for (int i = 0; i < nbc; i++)
    if (nz[i]) in[n++] = tx[ncc + i];
  for (int i = 0; i < nk; i++) in[n++] = x[ncc + nbc + i];
  for (int i = 0; !st && i < nk; i++)
    if (nz[nbc + i]) {
      in[n] = tx[ncc + nbc + i];
      if (in[n] == KIR_NO_VAR) st = kir_emit_zeros(dst, kir_var_aval(dst, x[ncc + nbc + i]), &in[n]);
      n++;
    }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.while_loop = (kir_p_while){body, nbc + nbt, cond, ncc};
  int idx;
  if (!st) st = kir_add_eqn(dst, KIR_PRIM_WHILE, &pr, n, in, &idx);
  for (int i = 0, k = nk; !st && i < nk; i++) {
    y[i] = dst->eqns[idx].out[i];
    ty[i] = nz[nbc + i] ? dst->eqns[idx].out[k++] : KIR_NO_VAR;
  }
  (void)nkt;
  free(nz);
  free(v);
  return st;
}
