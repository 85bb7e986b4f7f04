/* The memory planner: a place for every var, slots for the values that
 * cross group boundaries (shared when their lives do not overlap, greedy by
 * size, best fit), one aligned arena for the slots, the donated inputs
 * whose buffers program outputs may take, and aliases: a reshape alone in
 * its group reads the same bytes in the same order as its result, so it
 * runs no kernel and its result lives where its operand does. */
#include <stdlib.h>
#include <string.h>

#include "fuse/fuse.h"

typedef struct kfuse_life {
  kir_vid var;
  size_t bytes;
  int start, end; /* group positions, both included */
  int next;       /* the next life in the same slot, or -1 */
} kfuse_life;

typedef struct kfuse_mem {
  const kir_program *p;
  kfuse_plan *plan;
  int *group_of;     /* per equation: its group's position */
  int *last_read;    /* per var: the position of the last group reading it, or -1 */
  bool *written;     /* per var: in some group's out */
  kfuse_life *lives; /* one per SLOT value */
  int n_lives;
  int *slot_head; /* per slot: its first life */
} kfuse_mem;

static kiln_status kfuse_oom(void) {
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kfuse_plan_build: out of memory (memory plan)");
}

/* Whether group g only renames its one operand's row-major bytes: a LOOP
 * of reshapes, squeezes and expand_dims over a value that has a buffer to
 * share (not a constant or literal: their places are per var), whose result
 * is no program output (outputs are written to their own buffers). */
static bool kfuse_alias_group(const kir_program *p, const kfuse_group *g) {
  if (g->kind != KFUSE_LOOP || g->n_in != 1 || g->n_out != 1) return false;
  for (int i = 0; i < g->n_eqns; i++) {
    kir_prim prim = p->eqns[g->eqns[i]].prim;
    if (prim != KIR_PRIM_RESHAPE && prim != KIR_PRIM_SQUEEZE && prim != KIR_PRIM_EXPAND_DIMS)
      return false;
  }
  kir_var_kind k = p->vars[g->in[0]].kind;
  if (k == KIR_VAR_CONSTVAR || k == KIR_VAR_LITERAL) return false;
  for (int o = 0; o < p->n_outvars; o++)
    if (p->outvars[o] == g->out[0]) return false;
  return true;
}

/* Drops the alias groups; their equations are left in no group. */
static void kfuse_drop_aliases(const kir_program *p, kfuse_plan *plan) {
  int kept = 0;
  for (int gi = 0; gi < plan->n_groups; gi++) {
    kfuse_group *g = &plan->groups[gi];
    if (kfuse_alias_group(p, g)) {
      free(g->eqns), free(g->in), free(g->out);
      continue;
    }
    plan->groups[kept++] = *g;
  }
  plan->n_groups = kept;
}

static void kfuse_assign_homes(kfuse_mem *m) {
  const kir_program *p = m->p;
  kfuse_place *pl = m->plan->places;
  for (kir_vid v = 0; v < p->n_vars; v++) {
    kir_var_kind k = p->vars[v].kind;
    if (k == KIR_VAR_CONSTVAR || k == KIR_VAR_LITERAL)
      pl[v] = (kfuse_place){KFUSE_HOME_CONST, v};
    else if (k == KIR_VAR_EQN && m->written[v])
      pl[v] = (kfuse_place){KFUSE_HOME_SLOT, -1};
    else
      pl[v] = (kfuse_place){KFUSE_HOME_NONE, 0};
  }
  for (int i = 0; i < p->n_invars; i++) pl[p->invars[i]] = (kfuse_place){KFUSE_HOME_INPUT, i};
  for (int k = p->n_outvars - 1; k >= 0; k--) { /* the first position wins */
    kir_vid v = p->outvars[k];
    if (p->vars[v].kind == KIR_VAR_EQN) pl[v] = (kfuse_place){KFUSE_HOME_OUTPUT, k};
  }
}

/* An alias's readers read its operand: they extend the operand's life
 * (last to first, so chains of aliases reach their first operand). */
static void kfuse_find_last_reads(kfuse_mem *m) {
  const kir_program *p = m->p;
  for (kir_vid v = 0; v < p->n_vars; v++) m->last_read[v] = -1;
  for (int i = 0; i < p->n_eqns; i++)
    for (int k = 0; k < p->eqns[i].n_in; k++) {
      kir_vid v = p->eqns[i].in[k];
      if (m->group_of[i] > m->last_read[v]) m->last_read[v] = m->group_of[i];
    }
  for (int i = p->n_eqns - 1; i >= 0; i--) {
    if (m->group_of[i] >= 0) continue; /* an alias group's equation */
    kir_vid u = p->eqns[i].in[0], v = p->eqns[i].out[0];
    if (m->last_read[v] > m->last_read[u]) m->last_read[u] = m->last_read[v];
  }
}

/* Each alias takes its operand's place, first to last along chains. */
static void kfuse_place_aliases(kfuse_mem *m) {
  const kir_program *p = m->p;
  for (int i = 0; i < p->n_eqns; i++)
    if (m->group_of[i] < 0)
      m->plan->places[p->eqns[i].out[0]] = m->plan->places[p->eqns[i].in[0]];
}

/* Lives of the SLOT values: from the producing group to the last reader. */
static kiln_status kfuse_collect_lives(kfuse_mem *m) {
  const kir_program *p = m->p;
  m->lives = malloc(((size_t)p->n_vars + 1) * sizeof *m->lives);
  if (!m->lives) return kfuse_oom();
  for (kir_vid v = 0; v < p->n_vars; v++) {
    if (m->plan->places[v].home != KFUSE_HOME_SLOT) continue;
    const kir_aval *a = kir_var_aval(p, v);
    kfuse_life *l = &m->lives[m->n_lives++];
    int64_t elements;
    kiln_status st =
        kcore_shape_bytes("kfuse_plan_build", a->dtype, a->rank, a->shape, &elements, &l->bytes);
    if (st != KILN_OK) return st;
    l->var = v;
    l->start = m->group_of[p->vars[v].eqn];
    l->end = m->last_read[v] > l->start ? m->last_read[v] : l->start;
    l->next = -1;
  }
  return KILN_OK;
}

static int kfuse_life_cmp(const void *a, const void *b) {
  const kfuse_life *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->var > y->var) - (x->var < y->var);
}

static bool kfuse_slot_free(const kfuse_mem *m, int slot, const kfuse_life *l) {
  for (int i = m->slot_head[slot]; i >= 0; i = m->lives[i].next)
    if (m->lives[i].start <= l->end && l->start <= m->lives[i].end) return false;
  return true;
}

/* Largest first; each takes the smallest slot it does not overlap in, or a
 * new one. Sizes only shrink along the order, so a slot never grows. */
static kiln_status kfuse_assign_slots(kfuse_mem *m) {
  kfuse_plan *plan = m->plan;
  qsort(m->lives, (size_t)m->n_lives, sizeof *m->lives, kfuse_life_cmp);
  size_t cap = (size_t)m->n_lives + 1;
  plan->slot_bytes = calloc(cap, sizeof *plan->slot_bytes);
  plan->slot_offset = calloc(cap, sizeof *plan->slot_offset);
  m->slot_head = malloc(cap * sizeof *m->slot_head);
  if (!plan->slot_bytes || !plan->slot_offset || !m->slot_head) return kfuse_oom();
  for (int i = 0; i < m->n_lives; i++) {
    kfuse_life *l = &m->lives[i];
    int best = -1;
    for (int s = 0; s < plan->n_slots; s++)
      if (kfuse_slot_free(m, s, l) && (best < 0 || plan->slot_bytes[s] < plan->slot_bytes[best]))
        best = s;
    if (best < 0) {
      best = plan->n_slots++;
      plan->slot_bytes[best] = l->bytes;
      m->slot_head[best] = -1;
    }
    l->next = m->slot_head[best];
    m->slot_head[best] = i;
    plan->places[l->var].index = best;
  }
  for (int s = 0; s < plan->n_slots; s++) {
    plan->slot_offset[s] = plan->arena_bytes;
    plan->temp_bytes += plan->slot_bytes[s];
    plan->arena_bytes +=
        (plan->slot_bytes[s] + KFUSE_SLOT_ALIGN - 1) / KFUSE_SLOT_ALIGN * KFUSE_SLOT_ALIGN;
  }
  return KILN_OK;
}

/* Donation's scratch: per var, returned (a program output) and the
 * in-place marks; per invar, donated and taken. */
enum { KFUSE_AT_ITEM = 1, KFUSE_FEEDS_V = 2, KFUSE_OF_IN = 4 };
typedef struct kfuse_donation {
  const bool *donated;
  bool *returned, *taken;
  uint8_t *flag; /* left zeroed between checks */
} kfuse_donation;

/* Marks invar `in` and its aliases (chains run forward), or clears them
 * (backward, each alias before its operand). */
static void kfuse_mark_in(const kfuse_mem *m, kir_vid in, uint8_t *flag, bool on) {
  const kir_program *p = m->p;
  if (on) flag[in] = KFUSE_OF_IN;
  for (int n = p->n_eqns, j = 0; j < n; j++) {
    int i = on ? j : n - 1 - j;
    if (m->group_of[i] < 0 && (flag[p->eqns[i].in[0]] & KFUSE_OF_IN))
      flag[p->eqns[i].out[0]] = on ? KFUSE_OF_IN : 0;
  }
  if (!on) flag[in] = 0;
}

/* Whether output v may be written over invar `in` inside the LOOP group g
 * that reads it (in place, as XLA's input_output_alias): every read of it
 * or of an alias of it (the same bytes, the same linear index) in g is at
 * the work item's own element (identity edges all the way to the items) by
 * an equation that feeds v, so each item has loaded in[i] before it stores
 * v[i] (emitters store an item's outputs after computing them; the
 * reference runs equations in order). */
static bool kfuse_in_place(const kfuse_mem *m, const kfuse_group *g, kir_vid in, kir_vid v,
                           uint8_t *flag) {
  const kir_program *p = m->p;
  if (g->kind != KFUSE_LOOP) return false;
  kfuse_mark_in(m, in, flag, true);
  for (int i = 0; i < g->n_eqns; i++) flag[p->eqns[g->eqns[i]].out[0]] = KFUSE_AT_ITEM;
  flag[v] |= KFUSE_FEEDS_V;
  bool ok = true;
  for (int i = g->n_eqns - 1; i >= 0; i--) { /* consumers before producers */
    const kir_eqn *e = &p->eqns[g->eqns[i]];
    uint8_t out = flag[e->out[0]];
    for (int k = 0; k < e->n_in; k++) {
      kir_vid u = e->in[k];
      bool same = (out & KFUSE_AT_ITEM) && kfuse_edge_identity(p, e, k);
      if ((flag[u] & KFUSE_OF_IN) && (!same || !(out & KFUSE_FEEDS_V))) ok = false;
      if (p->vars[u].kind != KIR_VAR_EQN || m->group_of[p->vars[u].eqn] != m->group_of[g->eqns[i]])
        continue;
      if (!same) flag[u] &= (uint8_t)~KFUSE_AT_ITEM;
      if (out & KFUSE_FEEDS_V) flag[u] |= KFUSE_FEEDS_V;
    }
  }
  for (int i = 0; i < g->n_eqns; i++) flag[p->eqns[g->eqns[i]].out[0]] = 0;
  kfuse_mark_in(m, in, flag, false);
  return ok;
}

/* Output k takes a donated invar's buffer when their types match, the invar
 * is no output itself and no group after output k's reads it; on pass 1,
 * the group writing output k may read it, in place. */
static void kfuse_pick_donor(const kfuse_mem *m, kfuse_donation *d, int k, int pass) {
  const kir_program *p = m->p;
  kfuse_plan *plan = m->plan;
  kir_vid v = p->outvars[k];
  if (plan->output_donor[k] >= 0 || plan->places[v].home != KFUSE_HOME_OUTPUT ||
      plan->places[v].index != k)
    return;
  int made = m->group_of[p->vars[v].eqn];
  for (int j = 0; j < p->n_invars; j++) {
    kir_vid in = p->invars[j];
    bool live = pass ? m->last_read[in] != made : m->last_read[in] >= made;
    if (!d->donated[j] || d->taken[j] || d->returned[in] || live ||
        !kir_aval_typematch(kir_var_aval(p, in), kir_var_aval(p, v)) ||
        (pass && !kfuse_in_place(m, &plan->groups[made], in, v, d->flag)))
      continue;
    plan->output_donor[k] = j;
    d->taken[j] = true;
    plan->groups[made].in_place |= pass == 1;
    return;
  }
}

/* Inputs dead before the group first; then in place, outputs in program
 * order, so that a moment update takes its moment before the parameter
 * update that reads the new moment could. */
static kiln_status kfuse_donate(kfuse_mem *m, const bool *donated) {
  const kir_program *p = m->p;
  kfuse_plan *plan = m->plan;
  for (int k = 0; k < p->n_outvars; k++) plan->output_donor[k] = -1;
  if (!donated) return KILN_OK;
  kfuse_donation d = {donated, calloc((size_t)p->n_vars + 1, sizeof *d.returned),
                      calloc((size_t)p->n_invars + 1, sizeof *d.taken),
                      calloc((size_t)p->n_vars + 1, sizeof *d.flag)};
  kiln_status st = KILN_OK;
  if (!d.returned || !d.taken || !d.flag) {
    st = kfuse_oom();
    goto done;
  }
  for (int k = 0; k < p->n_outvars; k++) d.returned[p->outvars[k]] = true;
  for (int k = 0; k < p->n_outvars; k++) kfuse_pick_donor(m, &d, k, 0);
  for (int i = 0; i < p->n_eqns; i++)
    for (int o = 0; o < p->eqns[i].n_out; o++) {
      kfuse_place pl = plan->places[p->eqns[i].out[o]];
      if (pl.home == KFUSE_HOME_OUTPUT) kfuse_pick_donor(m, &d, pl.index, 1);
    }
done:
  free(d.returned);
  free(d.taken);
  free(d.flag);
  return st;
}

kiln_status kfuse_memory_plan(const kir_program *p, const bool *donated, kfuse_plan *plan) {
  kfuse_mem m = {p, plan, NULL, NULL, NULL, NULL, 0, NULL};
  size_t nv = (size_t)p->n_vars + 1;
  plan->n_places = p->n_vars;
  plan->n_outputs = p->n_outvars;
  plan->places = calloc(nv, sizeof *plan->places);
  plan->output_donor = calloc((size_t)p->n_outvars + 1, sizeof *plan->output_donor);
  m.group_of = malloc(((size_t)p->n_eqns + 1) * sizeof *m.group_of);
  m.last_read = malloc(nv * sizeof *m.last_read);
  m.written = calloc(nv, sizeof *m.written);
  kiln_status st = KILN_OK;
  if (!plan->places || !plan->output_donor || !m.group_of || !m.last_read || !m.written) {
    st = kfuse_oom();
    goto done;
  }
  kfuse_drop_aliases(p, plan);
  for (int i = 0; i < p->n_eqns; i++) m.group_of[i] = -1;
  for (int gi = 0; gi < plan->n_groups; gi++) {
    const kfuse_group *g = &plan->groups[gi];
    for (int i = 0; i < g->n_eqns; i++) m.group_of[g->eqns[i]] = gi;
    for (int i = 0; i < g->n_out; i++) m.written[g->out[i]] = true;
  }
  kfuse_assign_homes(&m);
  kfuse_find_last_reads(&m);
  st = kfuse_collect_lives(&m);
  if (st == KILN_OK) st = kfuse_assign_slots(&m);
  if (st == KILN_OK) kfuse_place_aliases(&m);
  if (st == KILN_OK) st = kfuse_donate(&m, donated);
done:
  free(m.group_of);
  free(m.last_read);
  free(m.written);
  free(m.lives);
  free(m.slot_head);
  return st;
}
