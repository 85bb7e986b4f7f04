/* Copying equations between programs: sub-programs (cond branches, while
 * cond/body, scan body) belong to one root, so an equation that carries them
 * is re-created with copies of them under the destination. */
#include <string.h>
#include "transform/transform.h"

kiln_status ktf_copy_params(kir_program *dst, const kir_eqn *e, kir_params *out) {
  *out = e->params;
  kiln_status st = KILN_OK;
  switch (e->prim) {
    case KIR_PRIM_COND: {
      int n = e->params.cond.branches.n;
      kir_program **v = kir_alloc(dst, (size_t)n * sizeof *v);
      if (!v) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "cond: out of host memory");
      for (int k = 0; k < n && !st; k++) st = ktf_copy_sub(dst, e->params.cond.branches.v[k], &v[k]);
      out->cond.branches.v = v;
      return st;
    }
    case KIR_PRIM_WHILE:
      st = ktf_copy_sub(dst, e->params.while_loop.body_jaxpr, &out->while_loop.body_jaxpr);
      if (!st) st = ktf_copy_sub(dst, e->params.while_loop.cond_jaxpr, &out->while_loop.cond_jaxpr);
      return st;
    case KIR_PRIM_SCAN: return ktf_copy_sub(dst, e->params.scan.jaxpr, &out->scan.jaxpr);
    default: return KILN_OK;
  }
}

kiln_status ktf_copy_sub(kir_program *parent, const kir_program *src, kir_program **out) {
  kir_program *s = NULL;
  kir_vid *m = NULL;
  kiln_status st = kir_program_new_sub(parent, &s);
  if (!st && !(m = kir_alloc(s, (size_t)(src->n_vars ? src->n_vars : 1) * sizeof *m)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "autodiff: out of host memory");
  for (int i = 0; !st && i < src->n_vars; i++) {
    m[i] = KIR_NO_VAR;
    const kir_var *v = &src->vars[i];
    if (v->kind == KIR_VAR_LITERAL) st = kir_add_literal(s, v->aval.dtype, v->aval.weak, v->u.literal, &m[i]);
  }
  for (int i = 0; !st && i < src->n_invars; i++) st = kir_add_invar(s, kir_var_aval(src, src->invars[i]), &m[src->invars[i]]);
  for (int i = 0; !st && i < src->n_eqns; i++) {
    const kir_eqn *e = &src->eqns[i];
    kir_params pr;
    kir_vid *in = kir_alloc(s, (size_t)(e->n_in ? e->n_in : 1) * sizeof *in);
    if (!in) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "autodiff: out of host memory");
    for (int k = 0; !st && k < e->n_in; k++) in[k] = m[e->in[k]];
    if (!st) st = ktf_copy_params(s, e, &pr);
    int idx;
    if (!st) st = kir_add_eqn(s, e->prim, &pr, e->n_in, in, &idx);
    for (int j = 0; !st && j < e->n_out; j++) m[e->out[j]] = s->eqns[idx].out[j];
  }
  kir_vid *outs = st ? NULL : kir_alloc(s, (size_t)(src->n_outvars ? src->n_outvars : 1) * sizeof *outs);
  if (!st && !outs) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "autodiff: out of host memory");
  for (int i = 0; !st && i < src->n_outvars; i++) outs[i] = m[src->outvars[i]];
  if (!st) st = kir_set_outputs(s, src->n_outvars, outs);
  if (!st) *out = s;
  return st;
}
