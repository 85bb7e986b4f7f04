/* Copying equations between programs: sub-programs (cond branches, while
 * cond/body, scan body, the jaxprs of calls) belong to one root, so an
 * equation that carries them is re-created with copies of them under the
 * destination. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

kiln_status ktf_copy_params(kir_program *dst, const kir_eqn *e, kir_params *out) {
  *out = e->params;
  int n;
  const kir_field *f = kir_param_fields(kir_prim_get(e->prim)->params, &n);
  for (int i = 0; i < n; i++) {
    char *at = (char *)out + f[i].offset;
    if (f[i].type == KIR_FIELD_PROGRAM) {
      kir_program **sub = (kir_program **)(void *)at;
      kiln_status st = *sub ? ktf_copy_sub(dst, *sub, sub) : KILN_OK;
      if (st) return st;
    } else if (f[i].type == KIR_FIELD_PROGRAMS) {
      kir_program_list *l = (kir_program_list *)(void *)at;
      kir_program **v = kir_alloc(dst, (size_t)(l->n ? l->n : 1) * sizeof *v);
      if (!v) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kir_prim_name(e->prim));
      for (int k = 0; k < l->n; k++) {
        kiln_status st = ktf_copy_sub(dst, l->v[k], &v[k]);
        if (st) return st;
      }
      l->v = v;
    }
  }
  return KILN_OK;
}

kiln_status ktf_inline(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                       kir_vid *y) {
  int w = 1;
  for (int i = 0; i < src->n_eqns; i++)
    if (src->eqns[i].n_in > w) w = src->eqns[i].n_in;
  ktf_map m = {0};
  kir_vid *buf = malloc((size_t)w * sizeof *buf);
  kiln_status st = buf ? ktf_map_new(op, src->n_vars, &m)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < src->n_invars; i++) m.v[src->invars[i]] = x[i];
  for (int i = 0; !st && i < src->n_eqns; i++) st = ktf_copy_eqn(op, dst, src, &src->eqns[i], &m, buf);
  for (int i = 0; !st && i < src->n_outvars; i++) st = ktf_map_get(op, &m, dst, src, src->outvars[i], &y[i]);
  free(m.v);
  free(buf);
  return st;
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
    if (!st) st = kir_eqn_set_source(s, idx, e->source);
    for (int j = 0; !st && j < e->n_out; j++) m[e->out[j]] = s->eqns[idx].out[j];
  }
  kir_vid *outs = st ? NULL : kir_alloc(s, (size_t)(src->n_outvars ? src->n_outvars : 1) * sizeof *outs);
  if (!st && !outs) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "autodiff: out of host memory");
  for (int i = 0; !st && i < src->n_outvars; i++) outs[i] = m[src->outvars[i]];
  if (!st) st = kir_set_outputs(s, src->n_outvars, outs);
  if (!st) *out = s;
  return st;
}

void ktf_mark_live(const kir_program *J, int n, const kir_vid *outs, const bool *skip_eqn,
                          bool *live) {
  for (int i = 0; i < n; i++) live[outs[i]] = true;
  for (int i = J->n_eqns - 1; i >= 0; i--) {
    const kir_eqn *e = &J->eqns[i];
    bool need = kir_eqn_has_effect(e);
    for (int j = 0; j < e->n_out; j++) need |= live[e->out[j]];
    if (!need || (skip_eqn && skip_eqn[i])) continue;
    for (int j = 0; j < e->n_out; j++) live[e->out[j]] = true;
    for (int k = 0; k < e->n_in; k++) live[e->in[k]] = true;
  }
}

kiln_status ktf_extract(const char *op, kir_program *dst, const kir_program *J, int n,
                               const kir_vid *from, const bool *live, const bool *skip_eqn,
                               int n_out, const kir_vid *outs, kir_program **out) {
  kir_program *s = NULL;
  ktf_map m = {0};
  int w = n_out + 1;
  for (int i = 0; i < J->n_eqns; i++)
    if (J->eqns[i].n_in > w) w = J->eqns[i].n_in;
  kir_vid *buf = malloc((size_t)w * sizeof *buf);
  kiln_status st = buf ? kir_program_new_sub(dst, &s)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, J->n_vars, &m);
  for (int i = 0; !st && i < n; i++) st = kir_add_invar(s, kir_var_aval(J, from[i]), &m.v[from[i]]);
  for (int i = 0; !st && i < J->n_eqns; i++) {
    const kir_eqn *e = &J->eqns[i];
    bool need = false;
    for (int j = 0; j < e->n_out; j++) need |= live[e->out[j]];
    if (need && !(skip_eqn && skip_eqn[i])) st = ktf_copy_eqn(op, s, J, e, &m, buf);
  }
  for (int i = 0; !st && i < n_out; i++) st = ktf_map_get(op, &m, s, J, outs[i], &buf[i]);
  if (!st) st = kir_set_outputs(s, n_out, buf);
  if (!st) *out = s;
  free(buf);
  free(m.v);
  return st;
}
