/* kir_simplify: shape equations that move no data become reshapes, and
 * reshapes that undo each other disappear; a reduction of a broadcast over
 * the axes it made reads the operand instead (simplify_reduce.c). Transposition writes many of
 * them (the transpose of broadcasting a [n] bias to [1, n] is a reduce_sum
 * over the size-1 axis, followed by a reshape back): left in, each is a
 * kernel of its own at run time. Transposes feeding a dot_general fold into
 * its dimension numbers (dot_layout.c) for the same reason. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

static void kir_to_reshape(kir_program *p, kir_eqn *e) {
  const kir_aval *out = kir_var_aval(p, e->out[0]);
  memset(&e->params, 0, sizeof e->params);
  e->prim = KIR_PRIM_RESHAPE;
  e->params.reshape.new_sizes.n = out->rank;
  memcpy(e->params.reshape.new_sizes.v, out->shape, (size_t)out->rank * sizeof(int64_t));
}

/* Whether e keeps its operand's elements in order: a reduction over size-1
 * axes only, a broadcast that adds only size-1 axes, squeeze, expand_dims. */
static bool kir_moves_no_data(const kir_program *p, const kir_eqn *e) {
  const kir_aval *in = kir_var_aval(p, e->in[0]);
  switch (e->prim) {
    case KIR_PRIM_REDUCE_SUM: case KIR_PRIM_REDUCE_MAX: case KIR_PRIM_REDUCE_MIN:
    case KIR_PRIM_REDUCE_PROD: case KIR_PRIM_REDUCE_AND: case KIR_PRIM_REDUCE_OR:
      for (int k = 0; k < e->params.axes.axes.n; k++)
        if (in->shape[e->params.axes.axes.v[k]] != 1) return false;
      return true;
    case KIR_PRIM_BROADCAST_IN_DIM: {
      const kir_p_broadcast *b = &e->params.broadcast;
      for (int k = 0; k < b->broadcast_dimensions.n; k++)
        if ((k && b->broadcast_dimensions.v[k] <= b->broadcast_dimensions.v[k - 1]) ||
            in->shape[k] != b->shape.v[b->broadcast_dimensions.v[k]])
          return false;
      int64_t n_in = 1, n_out = 1;
      for (int k = 0; k < in->rank; k++) n_in *= in->shape[k];
      for (int k = 0; k < b->shape.n; k++) n_out *= b->shape.v[k];
      return n_in == n_out;
    }
    case KIR_PRIM_SQUEEZE: case KIR_PRIM_EXPAND_DIMS: return true;
    default: return false;
  }
}

static kiln_status kir_simplify_program(kir_program *p, int *n);

typedef struct {
  int n;
  kiln_status st;
} kir_simplify_sub;

static void kir_simplify_visit(kir_program *sub, void *user) {
  kir_simplify_sub *s = user;
  if (s->st == KILN_OK) s->st = kir_simplify_program(sub, &s->n);
}

static kiln_status kir_simplify_program(kir_program *p, int *n) {
  kir_vid *subst = malloc(((size_t)p->n_vars + 1) * sizeof *subst);
  bool *drop = calloc((size_t)p->n_eqns + 1, sizeof *drop);
  if (!subst || !drop) {
    free(subst);
    free(drop);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_simplify: out of memory");
  }
  for (int v = 0; v < p->n_vars; v++) subst[v] = v;
  kiln_status st = KILN_OK;
  for (int i = 0; i < p->n_eqns && st == KILN_OK; i++) {
    kir_eqn *e = &p->eqns[i];
    for (int k = 0; k < e->n_in; k++) e->in[k] = subst[e->in[k]];
    kir_simplify_sub sub = {0, KILN_OK};
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_simplify_visit, &sub);
    *n += sub.n;
    st = sub.st;
    if (e->prim == KIR_PRIM_DOT_GENERAL) *n += kir_dot_fold_transposes(p, e);
    if (e->n_in != 1 || e->n_out != 1) continue;
    kir_vid lit;
    int folded = kir_simplify_reduce_of_broadcast(p, i, &lit, &st);
    if (st != KILN_OK) break;
    e = &p->eqns[i];
    *n += folded > 0;
    if (folded == 2) {
      subst[e->out[0]] = lit;
      drop[i] = true;
      continue;
    }
    if (kir_moves_no_data(p, e)) {
      kir_to_reshape(p, e);
      (*n)++;
    }
    if (e->prim != KIR_PRIM_RESHAPE) continue;
    /* reshape(reshape(x)) is one reshape of x */
    const kir_var *src = &p->vars[e->in[0]];
    if (src->kind == KIR_VAR_EQN && src->eqn >= 0 && p->eqns[src->eqn].prim == KIR_PRIM_RESHAPE) {
      e->in[0] = p->eqns[src->eqn].in[0];
      (*n)++;
    }
    const kir_aval *a = kir_var_aval(p, e->in[0]), *b = kir_var_aval(p, e->out[0]);
    if (a->rank == b->rank && a->dtype == b->dtype && a->weak == b->weak &&
        !memcmp(a->shape, b->shape, (size_t)a->rank * sizeof(int64_t))) {
      subst[e->out[0]] = e->in[0];
      drop[i] = true;
    }
  }
  for (int i = 0; i < p->n_outvars; i++) p->outvars[i] = subst[p->outvars[i]];
  if (st == KILN_OK) kir_remove_eqns(p, drop);
  free(subst);
  free(drop);
  return st;
}

kiln_status kir_simplify(kir_program *p, int *simplified) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kir_simplify: program is NULL");
  int n = 0;
  kiln_status st = kir_simplify_program(p, &n);
  if (simplified) *simplified = n;
  return st;
}
