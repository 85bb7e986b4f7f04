/* The fusion planner: every equation starts as its own set; dot epilogues
 * are matched first, then row-wise chains grow around last-axis reductions,
 * then consumers absorb their producers and sets that read the same value
 * merge (multi-output), until nothing changes. The live sets, in a
 * topological order, become the plan's groups. */
#include <stdlib.h>
#include <string.h>

#include "fuse/fuse.h"

const char *kfuse_kind_name(kfuse_kind k) {
  switch (k) {
    case KFUSE_LOOP: return "LOOP";
    case KFUSE_REDUCE: return "REDUCE";
    case KFUSE_ROW: return "ROW";
    case KFUSE_DOT: return "DOT";
    case KFUSE_OPAQUE: return "OPAQUE";
  }
  return "invalid";
}

const char *kfuse_epilogue_name(kfuse_epilogue e) {
  switch (e) {
    case KFUSE_EPILOGUE_NONE: return "none";
    case KFUSE_EPILOGUE_BIAS: return "bias";
    case KFUSE_EPILOGUE_BIAS_RELU: return "bias_relu";
  }
  return "invalid";
}

/* Kernel arguments a group may take: codegen's KCG_MAX_ARGS. */
#define KFUSE_DEFAULT_ARGS 64

void kfuse_options_default(kfuse_options *o) {
  o->max_group_eqns = 64;
  o->row_max_elements = 8192;
  o->allow_row = true;
  o->fuse = true;
  o->max_group_args = KFUSE_DEFAULT_ARGS;
}

static kiln_status kfuse_oom(void) {
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kfuse_plan_build: out of memory");
}

/* ---- the starting sets ---- */

/* Each equation alone: fusible classes take the kind the rules give them
 * (OPAQUE if none admits even the single equation). */
static void kfuse_init_singletons(kfuse_graph *g) {
  for (int i = 0; i < g->n_eqns; i++) {
    kfuse_set *s = &g->sets[i];
    kfuse_class c = (kfuse_class)g->cls[i];
    kfuse_verdict v;
    if (c == KFUSE_CLASS_DOT) {
      s->kind = KFUSE_DOT;
    } else if (kfuse_class_fusible(c) && kfuse_rules_check(g, &i, 1, &v)) {
      s->kind = v.kind;
      s->n_items = v.n_items;
      s->row_length = v.row_length;
      s->fusible = true;
    }
  }
}

/* ---- dot epilogues ---- */

/* The one equation reading v, if v is read exactly once and is no output. */
static int kfuse_only_reader(const kfuse_graph *g, kir_vid v) {
  if (g->outvar[v] || g->use_start[v + 1] - g->use_start[v] != 1) return -1;
  return g->uses[g->use_start[v]];
}

static bool kfuse_zero_literal(const kir_program *p, kir_vid v) {
  const kir_var *var = &p->vars[v];
  return var->kind == KIR_VAR_LITERAL && kiln_dtype_is_float(var->aval.dtype) &&
         var->u.literal.f == 0.0;
}

/* The operand of binary e that is not v, or KIR_NO_VAR. */
static kir_vid kfuse_other_operand(const kir_eqn *e, kir_vid v) {
  if (e->n_in != 2 || (e->in[0] == v) == (e->in[1] == v)) return KIR_NO_VAR;
  return e->in[0] == v ? e->in[1] : e->in[0];
}

/* broadcast_in_dim of a rank-1 bias along the last axis of `result`, read
 * only by `adder`: the equation index, or -1. */
static int kfuse_bias_broadcast(const kfuse_graph *g, kir_vid b, const kir_aval *result,
                                int adder) {
  const kir_var *var = &g->p->vars[b];
  if (var->kind != KIR_VAR_EQN || var->eqn < 0 || kfuse_only_reader(g, b) != adder) return -1;
  const kir_eqn *e = &g->p->eqns[var->eqn];
  if (e->prim != KIR_PRIM_BROADCAST_IN_DIM || !g->sets[var->eqn].fusible) return -1;
  const kir_aval *bias = kir_var_aval(g->p, e->in[0]);
  const kir_dims *dims = &e->params.broadcast.broadcast_dimensions;
  if (bias->rank != 1 || dims->n != 1 || dims->v[0] != result->rank - 1) return -1;
  return bias->shape[0] == result->shape[result->rank - 1] ? var->eqn : -1;
}

/* dot, then add(dot, broadcast(bias)), then optionally max(., 0): one DOT
 * set. Every intermediate is read once, by the next step, so the set has
 * one output and merging cannot close a cycle. */
static kiln_status kfuse_dot_epilogue(kfuse_graph *g, int d) {
  const kir_program *p = g->p;
  kir_vid o = p->eqns[d].out[0];
  const kir_aval *result = kir_var_aval(p, o);
  if (result->rank < 1 || !kiln_dtype_is_float(result->dtype)) return KILN_OK;
  int add = kfuse_only_reader(g, o);
  if (add < 0 || p->eqns[add].prim != KIR_PRIM_ADD || !g->sets[add].fusible) return KILN_OK;
  kir_vid b = kfuse_other_operand(&p->eqns[add], o);
  int bcast = b == KIR_NO_VAR ? -1 : kfuse_bias_broadcast(g, b, result, add);
  if (bcast < 0 || !kir_aval_same_shape(result, kir_var_aval(p, p->eqns[add].out[0])))
    return KILN_OK;
  kfuse_epilogue epi = KFUSE_EPILOGUE_BIAS;
  kir_vid sum = p->eqns[add].out[0];
  int relu = kfuse_only_reader(g, sum);
  if (relu >= 0 && p->eqns[relu].prim == KIR_PRIM_MAX && g->sets[relu].fusible) {
    kir_vid zero = kfuse_other_operand(&p->eqns[relu], sum);
    if (zero != KIR_NO_VAR && kfuse_zero_literal(p, zero)) epi = KFUSE_EPILOGUE_BIAS_RELU;
  }
  int parts[3] = {bcast, add, epi == KFUSE_EPILOGUE_BIAS_RELU ? relu : -1};
  for (int i = 0; i < 3; i++) {
    if (parts[i] < 0) continue;
    bool joined;
    kiln_status st = kfuse_join(g, d, parts[i], &joined);
    if (st != KILN_OK) return st;
    KCORE_ASSERT(joined); /* each part is read only by the next */
  }
  g->sets[d].epilogue = epi;
  g->sets[d].bias = p->eqns[bcast].in[0];
  return KILN_OK;
}

static kiln_status kfuse_dot_epilogues(kfuse_graph *g) {
  for (int i = 0; i < g->n_eqns; i++) {
    if (g->cls[i] != KFUSE_CLASS_DOT) continue;
    kiln_status st = kfuse_dot_epilogue(g, i);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ---- neighbours ---- */

/* Appends t to list (distinct, live, fusible, not `self`). */
static void kfuse_note(kfuse_graph *g, int self, int t, int *list, int *n) {
  if (t == self || !g->sets[t].fusible || g->set_mark[t] == g->set_gen) return;
  g->set_mark[t] = g->set_gen;
  list[(*n)++] = t;
}

/* Sets producing s's inputs; with `readers`, also the sets reading s's
 * values. Latest equations first. */
static int kfuse_neighbours(kfuse_graph *g, int s, bool readers, int *list) {
  int n = 0;
  const kfuse_set *set = &g->sets[s];
  g->set_gen++;
  for (int i = set->n - 1; i >= 0; i--) {
    const kir_eqn *e = &g->p->eqns[set->eqns[i]];
    for (int k = 0; k < e->n_in; k++) {
      const kir_var *v = &g->p->vars[e->in[k]];
      if (v->kind == KIR_VAR_EQN && v->eqn >= 0) kfuse_note(g, s, g->set_of[v->eqn], list, &n);
    }
    if (!readers) continue;
    kir_vid x = e->out[0];
    for (int u = g->use_start[x]; u < g->use_start[x + 1]; u++)
      kfuse_note(g, s, g->set_of[g->uses[u]], list, &n);
  }
  return n;
}

/* Merges into s the first neighbour the rules admit; *merged says if any. */
static kiln_status kfuse_absorb_one(kfuse_graph *g, int s, bool readers, int *list, bool *merged) {
  int n = kfuse_neighbours(g, s, readers, list);
  *merged = false;
  for (int i = 0; i < n && !*merged; i++) {
    kiln_status st = kfuse_try_merge(g, s, list[i], merged);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static kiln_status kfuse_grow(kfuse_graph *g, int s, bool readers, int *list, bool *changed) {
  for (bool merged = true; merged;) {
    kiln_status st = kfuse_absorb_one(g, s, readers, list, &merged);
    if (st != KILN_OK) return st;
    *changed = *changed || merged;
  }
  return KILN_OK;
}

/* ---- row-wise chains ---- */

/* A reduction over the last axis of rows that fit on chip. */
static bool kfuse_row_seed(const kfuse_graph *g, int i) {
  if (g->cls[i] != KFUSE_CLASS_REDUCE || !g->sets[g->set_of[i]].fusible) return false;
  const kir_eqn *e = &g->p->eqns[i];
  const kir_aval *t = kir_var_aval(g->p, e->in[0]);
  const kir_dims *axes = &e->params.axes.axes;
  if (t->rank < 1 || axes->n != 1 || axes->v[0] != t->rank - 1) return false;
  int64_t len = t->shape[t->rank - 1];
  return len >= 2 && len <= g->opt.row_max_elements;
}

/* Grows a set around each seed in both directions, so the chain of a
 * softmax or layernorm gathers before plain producer absorption could cut
 * it (it would stop at the first expensive per-row value). */
static kiln_status kfuse_grow_rows(kfuse_graph *g, int *list) {
  bool changed = false;
  for (int i = 0; i < g->n_eqns; i++) {
    if (!kfuse_row_seed(g, i)) continue;
    kiln_status st = kfuse_grow(g, g->set_of[i], true, list, &changed);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ---- producers into consumers, siblings ---- */

/* Each set, latest first, absorbs its producers while the rules allow. */
static kiln_status kfuse_absorb_producers(kfuse_graph *g, int *list, bool *changed) {
  for (int i = g->n_eqns - 1; i >= 0; i--) {
    int s = g->set_of[i];
    if (!g->sets[s].fusible || g->sets[s].eqns[g->sets[s].n - 1] != i) continue;
    kiln_status st = kfuse_grow(g, s, false, list, changed);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* The element count of the largest value set s computes. */
static int64_t kfuse_set_extent(const kfuse_graph *g, int s) {
  int64_t most = 0;
  for (int i = 0; i < g->sets[s].n; i++) {
    int64_t n = kir_aval_size(kir_var_aval(g->p, g->p->eqns[g->sets[s].eqns[i]].out[0]));
    if (n > most) most = n;
  }
  return most;
}

/* Sets reading one array share a kernel when the array is at least as big
 * as anything they compute: reading it once is then the point. A shared
 * scalar or small parameter vector (a norm's gamma) is no reason. */
#define KFUSE_MAX_SIBLINGS 16

static kiln_status kfuse_merge_siblings(kfuse_graph *g, bool *changed) {
  int reps[KFUSE_MAX_SIBLINGS];
  for (kir_vid v = 0; v < g->n_vars; v++) {
    if (g->p->vars[v].kind == KIR_VAR_LITERAL || g->p->vars[v].aval.rank == 0) continue;
    int64_t size = kir_aval_size(&g->p->vars[v].aval);
    int n = 0;
    g->set_gen++;
    for (int u = g->use_start[v]; u < g->use_start[v + 1] && n < KFUSE_MAX_SIBLINGS; u++) {
      int s = g->set_of[g->uses[u]];
      if (!g->sets[s].fusible || g->set_mark[s] == g->set_gen) continue;
      g->set_mark[s] = g->set_gen;
      if (kfuse_set_extent(g, s) <= size) reps[n++] = g->uses[u]; /* stands for its set */
    }
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++) {
        bool merged;
        kiln_status st = kfuse_try_merge(g, g->set_of[reps[a]], g->set_of[reps[b]], &merged);
        if (st != KILN_OK) return st;
        *changed = *changed || merged;
      }
  }
  return KILN_OK;
}

static kiln_status kfuse_fuse(kfuse_graph *g) {
  int *list = malloc(((size_t)g->n_eqns + 1) * sizeof *list);
  if (!list) return kfuse_oom();
  kiln_status st = kfuse_dot_epilogues(g);
  if (st == KILN_OK && g->opt.allow_row) st = kfuse_grow_rows(g, list);
  for (bool changed = true; st == KILN_OK && changed;) {
    changed = false;
    st = kfuse_absorb_producers(g, list, &changed);
    if (st == KILN_OK) st = kfuse_merge_siblings(g, &changed);
  }
  free(list);
  return st;
}

/* ---- groups ---- */

/* Materialised: read by another set, a program output, or read by nobody;
 * an OPAQUE equation writes all its outputs. */
static bool kfuse_group_writes(const kfuse_graph *g, int s, kir_vid x) {
  if (g->sets[s].kind == KFUSE_OPAQUE || g->outvar[x] || g->use_start[x] == g->use_start[x + 1])
    return true;
  for (int u = g->use_start[x]; u < g->use_start[x + 1]; u++)
    if (g->set_of[g->uses[u]] != s) return true;
  return false;
}

static kiln_status kfuse_group_outputs(const kfuse_graph *g, int s, kfuse_group *grp) {
  const kfuse_set *set = &g->sets[s];
  int cap = 0;
  for (int i = 0; i < set->n; i++) cap += g->p->eqns[set->eqns[i]].n_out;
  grp->out = malloc(((size_t)cap + 1) * sizeof *grp->out);
  if (!grp->out) return kfuse_oom();
  for (int i = 0; i < set->n; i++) {
    const kir_eqn *e = &g->p->eqns[set->eqns[i]];
    for (int k = 0; k < e->n_out; k++)
      if (kfuse_group_writes(g, s, e->out[k])) grp->out[grp->n_out++] = e->out[k];
  }
  return KILN_OK;
}

/* Outside vars in order of first use, the literals moved last. */
static kiln_status kfuse_group_inputs(kfuse_graph *g, int s, kfuse_group *grp) {
  const kfuse_set *set = &g->sets[s];
  const kir_program *p = g->p;
  int cap = 0;
  for (int i = 0; i < set->n; i++) cap += p->eqns[set->eqns[i]].n_in;
  grp->in = malloc(((size_t)cap + 1) * sizeof *grp->in);
  if (!grp->in) return kfuse_oom();
  for (int pass = 0; pass < 2; pass++) {
    g->var_gen++;
    for (int i = 0; i < set->n; i++) {
      const kir_eqn *e = &p->eqns[set->eqns[i]];
      for (int k = 0; k < e->n_in; k++) {
        kir_vid v = e->in[k];
        const kir_var *var = &p->vars[v];
        bool inside = var->kind == KIR_VAR_EQN && var->eqn >= 0 && g->set_of[var->eqn] == s;
        if (inside || g->var_mark[v] == g->var_gen || (var->kind == KIR_VAR_LITERAL) != (pass == 1))
          continue;
        g->var_mark[v] = g->var_gen;
        grp->in[grp->n_in++] = v;
        grp->n_in_literals += pass;
      }
    }
  }
  return KILN_OK;
}

/* The final verdict of a fusible set, checked again as an invariant. */
static void kfuse_recheck(kfuse_graph *g, int s) {
  kfuse_set *set = &g->sets[s];
  kfuse_verdict v;
  KCORE_ASSERT(set->n <= g->opt.max_group_eqns);
  memcpy(g->trial, set->eqns, (size_t)set->n * sizeof *set->eqns);
  KCORE_ASSERT(kfuse_rules_check(g, g->trial, set->n, &v));
  KCORE_ASSERT(v.kind == set->kind && v.n_items == set->n_items);
}

static kiln_status kfuse_group_build(kfuse_graph *g, int s, kfuse_group *grp) {
  const kfuse_set *set = &g->sets[s];
  if (set->fusible) kfuse_recheck(g, s);
  grp->kind = set->kind;
  grp->epilogue = set->epilogue;
  grp->bias = set->bias;
  grp->n_items = set->n_items;
  grp->row_length = set->row_length;
  grp->eqns = malloc((size_t)set->n * sizeof *grp->eqns);
  if (!grp->eqns) return kfuse_oom();
  memcpy(grp->eqns, set->eqns, (size_t)set->n * sizeof *grp->eqns);
  grp->n_eqns = set->n;
  kiln_status st = kfuse_group_outputs(g, s, grp);
  return st != KILN_OK ? st : kfuse_group_inputs(g, s, grp);
}

static kiln_status kfuse_groups_build(kfuse_graph *g, kfuse_plan *plan) {
  int *order = NULL, n = 0;
  kiln_status st = kfuse_graph_order(g, &order, &n);
  if (st != KILN_OK) return st;
  plan->groups = calloc((size_t)n + 1, sizeof *plan->groups);
  if (!plan->groups) {
    free(order);
    return kfuse_oom();
  }
  plan->n_groups = n;
  for (int i = 0; i < n && st == KILN_OK; i++)
    st = kfuse_group_build(g, order[i], &plan->groups[i]);
  free(order);
  return st;
}

/* ---- entry points ---- */

static kiln_status kfuse_check_options(const kfuse_options *o) {
  if (o->max_group_eqns < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_build: max_group_eqns=%d must be at least 1",
                      o->max_group_eqns);
  if (o->max_group_args < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_build: max_group_args=%d must be at least 1",
                      o->max_group_args);
  if (o->row_max_elements < 1)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "kfuse_plan_build: row_max_elements=%lld must be at least 1",
                      (long long)o->row_max_elements);
  return KILN_OK;
}

kiln_status kfuse_plan_build(const kir_program *p, const kfuse_options *o, const bool *donated,
                             kfuse_plan **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_build: out is NULL");
  *out = NULL;
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_build: program is NULL");
  kfuse_options opt;
  kfuse_options_default(&opt);
  if (o) opt = *o;
  if (opt.max_group_args == 0) opt.max_group_args = KFUSE_DEFAULT_ARGS;
  kiln_status st = kfuse_check_options(&opt);
  if (st != KILN_OK) return st;
  st = kir_verify(p);
  if (st != KILN_OK) return kcore_fail_wrap(st, "kfuse_plan_build: invalid program");
  kfuse_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return kfuse_oom();
  kfuse_graph g;
  st = kfuse_graph_init(&g, p, &opt);
  if (st == KILN_OK) {
    kfuse_init_singletons(&g);
    if (opt.fuse) st = kfuse_fuse(&g);
  }
  if (st == KILN_OK) st = kfuse_groups_build(&g, plan);
  if (st == KILN_OK) st = kfuse_memory_plan(p, donated, plan);
  kfuse_graph_free(&g);
  if (st != KILN_OK) {
    kfuse_plan_free(plan);
    return st;
  }
  *out = plan;
  return KILN_OK;
}

void kfuse_plan_free(kfuse_plan *plan) {
  if (!plan) return;
  for (int i = 0; plan->groups && i < plan->n_groups; i++) {
    free(plan->groups[i].eqns);
    free(plan->groups[i].in);
    free(plan->groups[i].out);
  }
  free(plan->groups);
  free(plan->places);
  free(plan->slot_bytes);
  free(plan->slot_offset);
  free(plan->output_donor);
  free(plan);
}
