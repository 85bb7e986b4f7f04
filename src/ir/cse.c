/* Common subexpression elimination: one forward sweep per program with a
 * hash table of the equations kept so far. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* Operands are compared as atoms: vars by id, literals by type and value
 * (each literal use may be its own var). */
static bool kir_atom_equal(const kir_program *p, kir_vid a, kir_vid b) {
  if (a == b) return true;
  const kir_var *x = &p->vars[a], *y = &p->vars[b];
  return x->kind == KIR_VAR_LITERAL && y->kind == KIR_VAR_LITERAL &&
         kir_aval_equal(&x->aval, &y->aval) &&
         kir_scalar_equal(x->aval.dtype, x->u.literal, y->u.literal);
}

static uint64_t kir_atom_hash(const kir_program *p, kir_vid v, uint64_t h) {
  const kir_var *x = &p->vars[v];
  if (x->kind != KIR_VAR_LITERAL) return kcore_hash_u64(h, (uint64_t)v);
  h = kcore_hash_u64(h, ((uint64_t)x->aval.dtype << 1 | x->aval.weak) + (1ull << 40));
  return kcore_hash_u64(h, x->u.literal.u);
}

static uint64_t kir_eqn_hash(const kir_program *p, const kir_eqn *e) {
  uint64_t h = kcore_hash_u64(KCORE_HASH_SEED, (uint64_t)e->prim);
  h = kcore_hash_u64(h, (uint64_t)e->n_in);
  for (int i = 0; i < e->n_in; i++) h = kir_atom_hash(p, e->in[i], h);
  return kir_params_hash(kir_prim_get(e->prim)->params, &e->params, h);
}

static bool kir_eqn_same(const kir_program *p, const kir_eqn *a, const kir_eqn *b) {
  if (a->prim != b->prim || a->n_in != b->n_in || a->n_out != b->n_out) return false;
  for (int i = 0; i < a->n_in; i++)
    if (!kir_atom_equal(p, a->in[i], b->in[i])) return false;
  return kir_params_equal(kir_prim_get(a->prim)->params, &a->params, &b->params);
}

typedef struct kir_cse_table {
  int *slots; /* equation index, -1 when empty */
  uint64_t *hashes; /* per equation */
  size_t mask;
} kir_cse_table;

/* The kept equation equal to eqns[i], or -1 after recording i. */
static int kir_cse_find_or_add(kir_cse_table *t, const kir_program *p, int i) {
  size_t s = (size_t)t->hashes[i] & t->mask;
  for (; t->slots[s] >= 0; s = (s + 1) & t->mask) {
    int j = t->slots[s];
    if (t->hashes[j] == t->hashes[i] && kir_eqn_same(p, &p->eqns[j], &p->eqns[i])) return j;
  }
  t->slots[s] = i;
  return -1;
}

typedef struct kir_cse_sub {
  int removed;
  kiln_status st;
} kir_cse_sub;

static kiln_status kir_cse_program(kir_program *p, int *removed);

static void kir_cse_visit(kir_program *sub, void *user) {
  kir_cse_sub *s = user;
  if (s->st == KILN_OK) s->st = kir_cse_program(sub, &s->removed);
}

static kiln_status kir_cse_sweep(kir_program *p, kir_vid *subst, bool *drop, kir_cse_table *t,
                                 int *removed) {
  for (int i = 0; i < p->n_eqns; i++) {
    kir_eqn *e = &p->eqns[i];
    for (int k = 0; k < e->n_in; k++) e->in[k] = subst[e->in[k]];
    kir_cse_sub sub = {0, KILN_OK};
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_cse_visit, &sub);
    *removed += sub.removed;
    if (sub.st != KILN_OK) return sub.st;
    if (kir_eqn_has_effect(e)) continue;
    t->hashes[i] = kir_eqn_hash(p, e);
    int j = kir_cse_find_or_add(t, p, i);
    if (j < 0) continue;
    for (int k = 0; k < e->n_out; k++) subst[e->out[k]] = p->eqns[j].out[k];
    drop[i] = true;
    (*removed)++;
  }
  for (int i = 0; i < p->n_outvars; i++) p->outvars[i] = subst[p->outvars[i]];
  return KILN_OK;
}

static kiln_status kir_cse_program(kir_program *p, int *removed) {
  size_t cap = 16;
  while (cap < 2 * (size_t)p->n_eqns) cap *= 2;
  kir_cse_table t = {malloc(cap * sizeof(int)), malloc(((size_t)p->n_eqns + 1) * sizeof(uint64_t)),
                     cap - 1};
  kir_vid *subst = malloc(((size_t)p->n_vars + 1) * sizeof *subst);
  bool *drop = calloc((size_t)p->n_eqns + 1, sizeof *drop);
  kiln_status st;
  if (!t.slots || !t.hashes || !subst || !drop) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_cse: out of memory");
    goto done;
  }
  for (size_t i = 0; i < cap; i++) t.slots[i] = -1;
  for (int v = 0; v < p->n_vars; v++) subst[v] = v;
  st = kir_cse_sweep(p, subst, drop, &t, removed);
  if (st == KILN_OK) kir_remove_eqns(p, drop);
done:
  free(t.slots);
  free(t.hashes);
  free(subst);
  free(drop);
  return st;
}

kiln_status kir_cse(kir_program *p, int *removed) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kir_cse: program is NULL");
  int n = 0;
  kiln_status st = kir_cse_program(p, &n);
  if (removed) *removed = n;
  return st;
}
