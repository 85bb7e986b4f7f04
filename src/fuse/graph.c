/* The planning graph: who reads each value, the candidate sets of
 * equations, merging two sets when the rules admit the union and no cycle
 * appears, and the final topological order of the sets. */
#include <stdlib.h>
#include <string.h>

#include "fuse/fuse.h"

static kiln_status kfuse_oom(void) {
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kfuse_plan_build: out of memory");
}

/* Consumers of every var, one entry per operand slot (CSR). */
static kiln_status kfuse_build_uses(kfuse_graph *g) {
  const kir_program *p = g->p;
  g->use_start = calloc((size_t)g->n_vars + 1, sizeof *g->use_start);
  if (!g->use_start) return kfuse_oom();
  size_t total = 0;
  for (int i = 0; i < p->n_eqns; i++) {
    for (int k = 0; k < p->eqns[i].n_in; k++) g->use_start[p->eqns[i].in[k] + 1]++;
    total += (size_t)p->eqns[i].n_in;
  }
  for (int v = 0; v < g->n_vars; v++) g->use_start[v + 1] += g->use_start[v];
  g->uses = malloc((total ? total : 1) * sizeof *g->uses);
  int *fill = malloc(((size_t)g->n_vars + 1) * sizeof *fill);
  if (!g->uses || !fill) {
    free(fill);
    return kfuse_oom();
  }
  memcpy(fill, g->use_start, (size_t)g->n_vars * sizeof *fill);
  for (int i = 0; i < p->n_eqns; i++)
    for (int k = 0; k < p->eqns[i].n_in; k++) g->uses[fill[p->eqns[i].in[k]]++] = i;
  free(fill);
  return KILN_OK;
}

/* Equations with effects run in program order: each points at the next. */
static void kfuse_link_effects(kfuse_graph *g) {
  int last = -1;
  for (int i = 0; i < g->n_eqns; i++) {
    g->effect_next[i] = g->effect_prev[i] = -1;
    if (!kir_eqn_has_effect(&g->p->eqns[i])) continue;
    if (last >= 0) g->effect_next[last] = i;
    g->effect_prev[i] = last;
    last = i;
  }
}

kiln_status kfuse_graph_init(kfuse_graph *g, const kir_program *p, const kfuse_options *o) {
  memset(g, 0, sizeof *g);
  g->p = p;
  g->opt = *o;
  g->n_eqns = p->n_eqns;
  g->n_vars = p->n_vars;
  size_t ne = (size_t)p->n_eqns + 1, nv = (size_t)p->n_vars + 1;
  /* No trial holds more equations than the cap or the program. */
  size_t cap = (size_t)(o->max_group_eqns < p->n_eqns ? o->max_group_eqns : p->n_eqns) + 1;
  g->cls = calloc(ne, sizeof *g->cls);
  g->outvar = calloc(nv, sizeof *g->outvar);
  g->effect_next = calloc(ne, sizeof *g->effect_next);
  g->effect_prev = calloc(ne, sizeof *g->effect_prev);
  g->pos = calloc(ne, sizeof *g->pos);
  g->set_of = calloc(ne, sizeof *g->set_of);
  g->sets = calloc(ne, sizeof *g->sets);
  g->eqn_mark = calloc(ne, sizeof *g->eqn_mark);
  g->var_mark = calloc(nv, sizeof *g->var_mark);
  g->set_mark = calloc(ne, sizeof *g->set_mark);
  g->eqn_local = calloc(ne, sizeof *g->eqn_local);
  g->stack = calloc(ne, sizeof *g->stack);
  g->ahead = calloc(ne, sizeof *g->ahead);
  g->loc = calloc(cap, sizeof *g->loc);
  g->trial = calloc(cap, sizeof *g->trial);
  if (!g->cls || !g->outvar || !g->effect_next || !g->effect_prev || !g->pos ||
      !g->set_of || !g->sets || !g->eqn_mark || !g->var_mark || !g->set_mark || !g->eqn_local ||
      !g->stack || !g->ahead || !g->loc || !g->trial)
    return kfuse_oom();
  kiln_status st = kfuse_build_uses(g);
  if (st != KILN_OK) return st;
  for (int i = 0; i < p->n_outvars; i++) g->outvar[p->outvars[i]] = true;
  kfuse_link_effects(g);
  for (int i = 0; i < p->n_eqns; i++) {
    kfuse_set *s = &g->sets[i];
    g->cls[i] = (uint8_t)kfuse_classify(p, &p->eqns[i]);
    g->set_of[i] = g->pos[i] = i; /* program order is topological */
    s->eqns = malloc(sizeof *s->eqns);
    if (!s->eqns) return kfuse_oom();
    s->eqns[0] = i;
    s->n = 1;
    s->alive = true;
    s->kind = KFUSE_OPAQUE;
    s->bias = KIR_NO_VAR;
    s->n_items = 1;
  }
  return KILN_OK;
}

void kfuse_graph_free(kfuse_graph *g) {
  if (g->sets)
    for (int i = 0; i < g->n_eqns; i++) free(g->sets[i].eqns);
  free(g->cls);
  free(g->use_start);
  free(g->uses);
  free(g->outvar);
  free(g->effect_next);
  free(g->effect_prev);
  free(g->pos);
  free(g->set_of);
  free(g->sets);
  free(g->eqn_mark);
  free(g->var_mark);
  free(g->set_mark);
  free(g->eqn_local);
  free(g->stack);
  free(g->ahead);
  free(g->loc);
  free(g->trial);
  memset(g, 0, sizeof *g);
}

/* ---- neighbours of a set: readers of its values, producers of its
 * operands, the next and previous effects ---- */

typedef struct kfuse_walk {
  int skip;   /* a set not to enter (the merge partner, on the first step) */
  int target; /* the set searched for, or -1 */
  int lo, hi; /* only sets at positions strictly between are entered */
  int n;      /* sets entered, in g->stack */
  bool found;
} kfuse_walk;

static void kfuse_visit(kfuse_graph *g, int from, int t, kfuse_walk *w) {
  if (t == from || t == w->skip || g->set_mark[t] == g->set_gen) return;
  if (t == w->target) {
    w->found = true;
    return;
  }
  if (g->pos[t] <= w->lo || g->pos[t] >= w->hi) return;
  g->set_mark[t] = g->set_gen;
  g->stack[w->n++] = t;
}

static void kfuse_visit_succs(kfuse_graph *g, int s, kfuse_walk *w) {
  const kfuse_set *set = &g->sets[s];
  for (int i = 0; i < set->n; i++) {
    int e = set->eqns[i];
    const kir_eqn *eq = &g->p->eqns[e];
    for (int k = 0; k < eq->n_out; k++) {
      kir_vid x = eq->out[k];
      for (int u = g->use_start[x]; u < g->use_start[x + 1]; u++)
        kfuse_visit(g, s, g->set_of[g->uses[u]], w);
    }
    if (g->effect_next[e] >= 0) kfuse_visit(g, s, g->set_of[g->effect_next[e]], w);
  }
}

static void kfuse_visit_preds(kfuse_graph *g, int s, kfuse_walk *w) {
  const kfuse_set *set = &g->sets[s];
  for (int i = 0; i < set->n; i++) {
    int e = set->eqns[i];
    const kir_eqn *eq = &g->p->eqns[e];
    for (int k = 0; k < eq->n_in; k++) {
      const kir_var *v = &g->p->vars[eq->in[k]];
      if (v->kind == KIR_VAR_EQN && v->eqn >= 0) kfuse_visit(g, s, g->set_of[v->eqn], w);
    }
    if (g->effect_prev[e] >= 0) kfuse_visit(g, s, g->set_of[g->effect_prev[e]], w);
  }
}

/* The sets strictly between first and second (by position) reachable from
 * first (forward) or reaching second (backward), into g->stack; stops early
 * when forward search reaches second through one of them. Any such path
 * lies inside that window, since positions follow every edge. */
static kfuse_walk kfuse_window(kfuse_graph *g, int first, int second, bool forward) {
  /* The direct edge between the two is skipped on the first step. */
  kfuse_walk w = {forward ? second : first, forward ? second : -1, g->pos[first], g->pos[second],
                  0, false};
  int from = forward ? first : second;
  g->set_gen++;
  g->set_mark[from] = g->set_gen;
  if (forward)
    kfuse_visit_succs(g, from, &w);
  else
    kfuse_visit_preds(g, from, &w);
  w.skip = -1;
  for (int i = 0; i < w.n && !w.found; i++) {
    if (forward)
      kfuse_visit_succs(g, g->stack[i], &w);
    else
      kfuse_visit_preds(g, g->stack[i], &w);
  }
  return w;
}

/* ---- merging ---- */

/* Moves b's equations into a (kept ascending). */
kiln_status kfuse_set_absorb(kfuse_graph *g, int a, int b) {
  kfuse_set *sa = &g->sets[a], *sb = &g->sets[b];
  int n = sa->n + sb->n;
  int *merged = malloc((size_t)n * sizeof *merged);
  if (!merged) return kfuse_oom();
  int i = 0, j = 0, k = 0;
  while (i < sa->n || j < sb->n)
    merged[k++] =
        (j >= sb->n || (i < sa->n && sa->eqns[i] < sb->eqns[j])) ? sa->eqns[i++] : sb->eqns[j++];
  for (j = 0; j < sb->n; j++) g->set_of[sb->eqns[j]] = a;
  free(sa->eqns);
  free(sb->eqns);
  sa->eqns = merged;
  sa->n = n;
  sb->eqns = NULL;
  sb->n = 0;
  sb->alive = false;
  return KILN_OK;
}

static int kfuse_by_pos_cmp(const void *x, const void *y) {
  const int *a = x, *b = y; /* (position, set) pairs */
  return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Keeps positions topological when first and second become one set: the
 * window's sets reaching second move before it, those reached from first
 * after it (Pearce and Kelly's reordering), each group in its old order,
 * over the positions they held. `ahead` holds the nb sets reaching second,
 * then the nf sets reached from first. */
static kiln_status kfuse_reorder(kfuse_graph *g, int first, int second, int merged,
                                 const int *ahead, int nb, int nf) {
  int n = nb + nf + 2;
  int *pairs = malloc((size_t)n * 2 * sizeof *pairs), *slots = malloc((size_t)n * sizeof *slots);
  if (!pairs || !slots) {
    free(pairs);
    free(slots);
    return kfuse_oom();
  }
  for (int i = 0; i < nb + nf; i++) {
    pairs[(size_t)i * 2] = g->pos[ahead[i]];
    pairs[(size_t)i * 2 + 1] = ahead[i];
    slots[i] = g->pos[ahead[i]];
  }
  slots[nb + nf] = g->pos[first];
  slots[nb + nf + 1] = g->pos[second];
  qsort(pairs, (size_t)nb, 2 * sizeof *pairs, kfuse_by_pos_cmp);
  qsort(pairs + (size_t)nb * 2, (size_t)nf, 2 * sizeof *pairs, kfuse_by_pos_cmp);
  qsort(slots, (size_t)n, sizeof *slots, kfuse_by_pos_cmp);
  int *order = pairs; /* reuse: the sets in their new order, one slot left empty */
  for (int i = 0; i < nb + nf; i++) order[i] = pairs[(size_t)i * 2 + 1];
  for (int i = 0; i < n; i++) {
    int s = i < nb ? order[i] : i == nb ? merged : i == nb + 1 ? -1 : order[i - 2];
    if (s >= 0) g->pos[s] = slots[i];
  }
  free(pairs);
  free(slots);
  return KILN_OK;
}

kiln_status kfuse_join(kfuse_graph *g, int a, int b, bool *joined) {
  *joined = false;
  int first = g->pos[a] < g->pos[b] ? a : b, second = first == a ? b : a;
  kfuse_walk fwd = kfuse_window(g, first, second, true);
  if (fwd.found) return KILN_OK;
  /* The two searches meet no common set (that would be a path), so both
   * lists fit in n_eqns entries: backward first, then forward. */
  int *ahead = g->ahead + g->n_eqns - fwd.n;
  memcpy(ahead, g->stack, (size_t)fwd.n * sizeof *ahead);
  kfuse_walk bwd = kfuse_window(g, first, second, false);
  KCORE_ASSERT(bwd.n + fwd.n <= g->n_eqns);
  memcpy(g->ahead, g->stack, (size_t)bwd.n * sizeof *g->ahead);
  memmove(g->ahead + bwd.n, ahead, (size_t)fwd.n * sizeof *ahead);
  kiln_status st = kfuse_reorder(g, first, second, a, g->ahead, bwd.n, fwd.n);
  if (st == KILN_OK) st = kfuse_set_absorb(g, a, b);
  *joined = st == KILN_OK;
  return st;
}

/* The union of a and b, ascending, into g->trial; false if too big. */
static bool kfuse_trial_union(kfuse_graph *g, int a, int b, int *n) {
  const kfuse_set *sa = &g->sets[a], *sb = &g->sets[b];
  *n = sa->n + sb->n;
  if (*n > g->opt.max_group_eqns) return false;
  int i = 0, j = 0, k = 0;
  while (i < sa->n || j < sb->n)
    g->trial[k++] =
        (j >= sb->n || (i < sa->n && sa->eqns[i] < sb->eqns[j])) ? sa->eqns[i++] : sb->eqns[j++];
  return true;
}

kiln_status kfuse_try_merge(kfuse_graph *g, int a, int b, bool *merged) {
  *merged = false;
  if (a == b || !g->sets[a].fusible || !g->sets[b].fusible) return KILN_OK;
  int n;
  kfuse_verdict v;
  if (!kfuse_trial_union(g, a, b, &n) || !kfuse_rules_check(g, g->trial, n, &v)) return KILN_OK;
  kiln_status st = kfuse_join(g, a, b, merged);
  if (st != KILN_OK || !*merged) return st;
  g->sets[a].kind = v.kind;
  g->sets[a].n_items = v.n_items;
  g->sets[a].row_length = v.row_length;
  return KILN_OK;
}

/* ---- the final order ---- */

/* Distinct successors of s, each once, into g->stack[0 .. return). */
static int kfuse_succs(kfuse_graph *g, int s) {
  kfuse_walk w = {-1, -1, -1, g->n_eqns, 0, false};
  g->set_gen++;
  kfuse_visit_succs(g, s, &w);
  return w.n;
}

static bool kfuse_heap_less(const kfuse_graph *g, int a, int b) {
  return g->sets[a].eqns[0] < g->sets[b].eqns[0];
}

static void kfuse_heap_push(const kfuse_graph *g, int *heap, int *n, int s) {
  int i = (*n)++;
  heap[i] = s;
  while (i > 0 && kfuse_heap_less(g, heap[i], heap[(i - 1) / 2])) {
    int parent = (i - 1) / 2, t = heap[i];
    heap[i] = heap[parent];
    heap[parent] = t;
    i = parent;
  }
}

static int kfuse_heap_pop(const kfuse_graph *g, int *heap, int *n) {
  int top = heap[0];
  heap[0] = heap[--*n];
  for (int i = 0;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && kfuse_heap_less(g, heap[l], heap[m])) m = l;
    if (r < *n && kfuse_heap_less(g, heap[r], heap[m])) m = r;
    if (m == i) break;
    int t = heap[i];
    heap[i] = heap[m];
    heap[m] = t;
    i = m;
  }
  return top;
}

/* The live sets in a topological order (Kahn), the set holding the
 * earliest equation first among those ready: close to program order. */
kiln_status kfuse_graph_order(kfuse_graph *g, int **order, int *n_order) {
  size_t ne = (size_t)g->n_eqns + 1;
  int *indeg = calloc(ne, sizeof *indeg), *heap = malloc(ne * sizeof *heap);
  int *out = malloc(ne * sizeof *out);
  int n_heap = 0, n = 0, alive = 0;
  if (!indeg || !heap || !out) {
    free(indeg);
    free(heap);
    free(out);
    return kfuse_oom();
  }
  for (int s = 0; s < g->n_eqns; s++) {
    if (!g->sets[s].alive) continue;
    alive++;
    int k = kfuse_succs(g, s);
    for (int i = 0; i < k; i++) indeg[g->stack[i]]++;
  }
  for (int s = 0; s < g->n_eqns; s++)
    if (g->sets[s].alive && indeg[s] == 0) kfuse_heap_push(g, heap, &n_heap, s);
  while (n_heap > 0) {
    int s = kfuse_heap_pop(g, heap, &n_heap);
    out[n++] = s;
    int k = kfuse_succs(g, s);
    for (int i = 0; i < k; i++)
      if (--indeg[g->stack[i]] == 0) kfuse_heap_push(g, heap, &n_heap, g->stack[i]);
  }
  KCORE_ASSERT(n == alive); /* merges never close a cycle */
  free(indeg);
  free(heap);
  *order = out;
  *n_order = n;
  return KILN_OK;
}
