/* Dead code elimination: a backward liveness sweep per program. */
#include <stdlib.h>

#include "core/core.h"
#include "ir/ir.h"

typedef struct kir_dce_sub {
  int removed;
  kiln_status st;
} kir_dce_sub;

static kiln_status kir_dce_program(kir_program *p, int *removed);

static void kir_dce_visit(kir_program *sub, void *user) {
  kir_dce_sub *s = user;
  if (s->st == KILN_OK) s->st = kir_dce_program(sub, &s->removed);
}

/* Unused constvars leave the list (and drop their array reference). */
static void kir_drop_dead_constvars(kir_program *p, const bool *live) {
  int n = 0;
  for (int i = 0; i < p->n_constvars; i++) {
    kir_var *v = &p->vars[p->constvars[i]];
    if (live[p->constvars[i]]) {
      p->constvars[n++] = p->constvars[i];
      continue;
    }
    if (v->u.constant.source == KIR_CONST_ARRAY) kiln_array_release(v->u.constant.array);
    v->u.constant.source = KIR_CONST_ABSTRACT;
    v->u.constant.array = NULL;
  }
  p->n_constvars = n;
}

static kiln_status kir_dce_program(kir_program *p, int *removed) {
  bool *live = calloc((size_t)p->n_vars + 1, sizeof *live);
  bool *drop = calloc((size_t)p->n_eqns + 1, sizeof *drop);
  kiln_status st = KILN_OK;
  if (!live || !drop) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_dce: out of memory");
    goto done;
  }
  for (int i = 0; i < p->n_outvars; i++) live[p->outvars[i]] = true;
  for (int i = p->n_eqns - 1; i >= 0; i--) {
    const kir_eqn *e = &p->eqns[i];
    bool needed = kir_eqn_has_effect(e);
    for (int k = 0; k < e->n_out && !needed; k++) needed = live[e->out[k]];
    if (!needed) {
      drop[i] = true;
      (*removed)++;
      continue;
    }
    for (int k = 0; k < e->n_in; k++) live[e->in[k]] = true;
  }
  kir_drop_dead_constvars(p, live);
  kir_remove_eqns(p, drop);
  /* Sub-programs keep their signatures, so they are swept independently. */
  kir_dce_sub sub = {0, KILN_OK};
  for (int i = 0; i < p->n_eqns && sub.st == KILN_OK; i++)
    kir_params_for_each_program(kir_prim_get(p->eqns[i].prim)->params, &p->eqns[i].params,
                                kir_dce_visit, &sub);
  *removed += sub.removed;
  st = sub.st;
done:
  free(live);
  free(drop);
  return st;
}

kiln_status kir_dce(kir_program *p, int *removed) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kir_dce: program is NULL");
  int n = 0;
  kiln_status st = kir_dce_program(p, &n);
  if (removed) *removed = n;
  return st;
}
