/* kir_inline_calls: custom_jvp_call, custom_vjp_call and checkpoint
 * replaced, in a root program, by the equations of the sub-program they
 * call. Their special meaning is for autodiff only (call.c); once a program
 * is to run, a call left in it would be one opaque host step, while its
 * body's equations fuse like any others. Runs after CSE in the compile
 * passes, so a checkpoint's recomputation, once inlined, is not merged back
 * into the forward values it was made to avoid keeping. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

static const kir_program *kir_inline_body(const kir_eqn *e) {
  switch (e->prim) {
    case KIR_PRIM_CUSTOM_JVP_CALL: return e->params.custom_jvp.call_jaxpr;
    case KIR_PRIM_CUSTOM_VJP_CALL: return e->params.custom_vjp.call_jaxpr;
    case KIR_PRIM_CHECKPOINT: return e->params.checkpoint.jaxpr;
    default: return NULL;
  }
}

/* A body's equation moves to the root: the sub-programs its params hold
 * (a scan inside a checkpoint) become the root's own. */
static void kir_inline_adopt(kir_program *sub, void *root) { sub->parent = root; }

/* The vars of p that old var v of `from` (p itself or a body) now is. */
typedef struct {
  kir_program *p;
  kir_vid *map; /* over from's vars; KIR_NO_VAR until defined */
} kir_inline_map;

static kiln_status kir_inline_get(kir_inline_map *m, const kir_program *from, kir_vid v,
                                  kir_vid *out) {
  if (m->map[v] != KIR_NO_VAR) {
    *out = m->map[v];
    return KILN_OK;
  }
  const kir_var *x = &from->vars[v];
  if (x->kind != KIR_VAR_LITERAL)
    return kcore_fail(KILN_ERR_INTERNAL, "inline: var %d of a called program is undefined", v);
  kiln_status st = kir_add_literal(m->p, x->aval.dtype, x->aval.weak, x->u.literal, &m->map[v]);
  *out = m->map[v];
  return st;
}

/* Emits e (an equation of `from`, its vars mapped through m) into m->p, a
 * called body's equations in its place (recursively). */
static kiln_status kir_inline_emit(kir_inline_map *m, const kir_program *from, const kir_eqn *e) {
  kiln_status st = KILN_OK;
  kir_vid small[16], *in = e->n_in <= 16 ? small : malloc((size_t)e->n_in * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "inline: out of host memory");
  for (int k = 0; !st && k < e->n_in; k++) st = kir_inline_get(m, from, e->in[k], &in[k]);
  const kir_program *body = kir_inline_body(e);
  if (!st && body && body->n_constvars == 0) {
    kir_inline_map inner = {m->p, malloc((size_t)(body->n_vars ? body->n_vars : 1) * sizeof(kir_vid))};
    if (!inner.map) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "inline: out of host memory");
    for (int v = 0; !st && v < body->n_vars; v++) inner.map[v] = KIR_NO_VAR;
    for (int k = 0; !st && k < body->n_invars; k++) inner.map[body->invars[k]] = in[k];
    for (int i = 0; !st && i < body->n_eqns; i++) st = kir_inline_emit(&inner, body, &body->eqns[i]);
    for (int k = 0; !st && k < e->n_out; k++)
      st = kir_inline_get(&inner, body, body->outvars[k], &m->map[e->out[k]]);
    free(inner.map);
  } else if (!st) {
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_inline_adopt, m->p);
    int idx;
    st = kir_add_eqn(m->p, e->prim, &e->params, e->n_in, in, &idx);
    if (!st) st = kir_eqn_set_source(m->p, idx, e->source);
    for (int k = 0; !st && k < e->n_out; k++) m->map[e->out[k]] = m->p->eqns[idx].out[k];
  }
  if (in != small) free(in);
  return st;
}

kiln_status kir_inline_calls(kir_program *p, int *inlined) {
  int n = 0;
  for (int i = 0; i < p->n_eqns; i++) n += kir_inline_body(&p->eqns[i]) != NULL;
  if (inlined) *inlined = n;
  if (n == 0) return KILN_OK;
  /* The equations are emitted anew in order (fresh output vars), the
   * calls' bodies in their place; the old equations are dropped. */
  int n_old = p->n_eqns, n_vars = p->n_vars;
  kir_eqn *old = malloc((size_t)n_old * sizeof *old);
  kir_inline_map m = {p, malloc((size_t)n_vars * sizeof(kir_vid))};
  kir_vid *outs = malloc((size_t)(p->n_outvars ? p->n_outvars : 1) * sizeof *outs);
  kiln_status st = old && m.map && outs ? KILN_OK
                                        : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "inline: out of host memory");
  if (!st) {
    memcpy(old, p->eqns, (size_t)n_old * sizeof *old);
    for (int v = 0; v < n_vars; v++) m.map[v] = p->vars[v].kind == KIR_VAR_EQN ? KIR_NO_VAR : v;
    for (int i = 0; i < n_old; i++)
      for (int k = 0; k < old[i].n_out; k++) p->vars[old[i].out[k]].eqn = -1;
    p->n_eqns = 0;
  }
  for (int i = 0; !st && i < n_old; i++) st = kir_inline_emit(&m, p, &old[i]);
  for (int i = 0; !st && i < p->n_outvars; i++) st = kir_inline_get(&m, p, p->outvars[i], &outs[i]);
  if (!st) st = kir_set_outputs(p, p->n_outvars, outs);
  if (st && old) { /* back to the program as it was (vars added stay unused) */
    memcpy(p->eqns, old, (size_t)n_old * sizeof *old);
    p->n_eqns = n_old;
    for (int i = 0; i < n_old; i++)
      for (int k = 0; k < old[i].n_out; k++) p->vars[old[i].out[k]].eqn = i;
  }
  free(old);
  free(m.map);
  free(outs);
  return st;
}
