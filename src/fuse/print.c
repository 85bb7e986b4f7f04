/* The plan as text, for KILN_DUMP_DIR and for tests: one line per group,
 * then one per slot and per donated buffer. Vars are named by id (v12), so
 * the text depends on the plan alone and stays stable. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuse/fuse.h"

typedef struct kfuse_text {
  char *buf;
  size_t len, cap;
  bool oom;
} kfuse_text;

static void kfuse_printf(kfuse_text *t, const char *fmt, ...) KCORE_PRINTF(2, 3);

static void kfuse_printf(kfuse_text *t, const char *fmt, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap + (size_t)n + 1) * 2;
    char *b = realloc(t->buf, cap);
    if (!b) {
      t->oom = true;
      return;
    }
    t->buf = b;
    t->cap = cap;
  }
}

static void kfuse_put_place(kfuse_text *t, kfuse_place pl) {
  switch (pl.home) {
    case KFUSE_HOME_INPUT: kfuse_printf(t, "@in%d", pl.index); break;
    case KFUSE_HOME_CONST: kfuse_printf(t, "@const"); break;
    case KFUSE_HOME_OUTPUT: kfuse_printf(t, "@out%d", pl.index); break;
    case KFUSE_HOME_SLOT: kfuse_printf(t, "@slot%d", pl.index); break;
    case KFUSE_HOME_NONE: kfuse_printf(t, "@none"); break;
  }
}

static void kfuse_put_vars(kfuse_text *t, const kfuse_plan *plan, const kir_program *p,
                           const char *label, int n, const kir_vid *vars) {
  char type[KIR_AVAL_STR_CAP];
  kfuse_printf(t, " | %s", label);
  for (int i = 0; i < n; i++) {
    kfuse_printf(t, " v%d:%s", vars[i], kir_aval_str(kir_var_aval(p, vars[i]), type, sizeof type));
    kfuse_put_place(t, plan->places[vars[i]]);
  }
}

static void kfuse_put_group(kfuse_text *t, const kfuse_plan *plan, const kir_program *p, int gi) {
  const kfuse_group *g = &plan->groups[gi];
  kfuse_printf(t, "g%d %s", gi, kfuse_kind_name(g->kind));
  if (g->kind == KFUSE_LOOP) kfuse_printf(t, " items=%lld", (long long)g->n_items);
  if (g->kind == KFUSE_REDUCE || g->kind == KFUSE_ROW)
    kfuse_printf(t, " rows=%lldx%lld", (long long)g->n_items, (long long)g->row_length);
  if (g->kind == KFUSE_DOT && g->epilogue != KFUSE_EPILOGUE_NONE)
    kfuse_printf(t, " epilogue=%s(v%d)", kfuse_epilogue_name(g->epilogue), g->bias);
  kfuse_printf(t, ":");
  for (int i = 0; i < g->n_eqns; i++)
    kfuse_printf(t, " %s#%d", kir_prim_name(p->eqns[g->eqns[i]].prim), g->eqns[i]);
  kfuse_put_vars(t, plan, p, "in", g->n_in, g->in);
  kfuse_put_vars(t, plan, p, "out", g->n_out, g->out);
  kfuse_printf(t, "\n");
}

/* Each slot's values (not aliases), ascending, with their lives (producing group - last
 * reader). `group_of` maps equations to groups, `end` is scratch. */
static void kfuse_put_slots(kfuse_text *t, const kfuse_plan *plan, const kir_program *p,
                            const int *group_of, int *end) {
  for (kir_vid v = 0; v < p->n_vars; v++) end[v] = -1;
  for (int i = 0; i < p->n_eqns; i++)
    for (int k = 0; k < p->eqns[i].n_in; k++)
      if (group_of[i] > end[p->eqns[i].in[k]]) end[p->eqns[i].in[k]] = group_of[i];
  for (int s = 0; s < plan->n_slots; s++) {
    kfuse_printf(t, "slot%d %zu bytes at %zu:", s, plan->slot_bytes[s], plan->slot_offset[s]);
    for (kir_vid v = 0; v < p->n_vars; v++) {
      if (plan->places[v].home != KFUSE_HOME_SLOT || plan->places[v].index != s) continue;
      int start = group_of[p->vars[v].eqn];
      if (start < 0) continue; /* an alias, living as its operand does */
      kfuse_printf(t, " v%d g%d-g%d", v, start, end[v] > start ? end[v] : start);
    }
    kfuse_printf(t, "\n");
  }
}

kiln_status kfuse_plan_print(const kfuse_plan *plan, const kir_program *p, char **text) {
  if (!text) return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_print: text is NULL");
  *text = NULL;
  if (!plan || !p)
    return kcore_fail(KILN_ERR_ARGUMENT, "kfuse_plan_print: plan or program is NULL");
  if (plan->n_places != p->n_vars || plan->n_outputs != p->n_outvars)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "kfuse_plan_print: the plan has %d places and %d outputs, the program "
                      "%d vars and %d outputs (not the planned program)",
                      plan->n_places, plan->n_outputs, p->n_vars, p->n_outvars);
  int *group_of = malloc(((size_t)p->n_eqns + 1) * sizeof *group_of);
  int *end = malloc(((size_t)p->n_vars + 1) * sizeof *end);
  kfuse_text t = {malloc(1024), 0, 1024, false};
  t.oom = !group_of || !end || !t.buf;
  for (int i = 0; !t.oom && i < p->n_eqns; i++) group_of[i] = -1; /* aliases: no group */
  for (int gi = 0; !t.oom && gi < plan->n_groups; gi++)
    for (int i = 0; i < plan->groups[gi].n_eqns; i++) group_of[plan->groups[gi].eqns[i]] = gi;
  kfuse_printf(&t, "plan: %d groups, %d slots, %zu temp bytes\n", plan->n_groups, plan->n_slots,
               plan->temp_bytes);
  for (int gi = 0; gi < plan->n_groups; gi++) kfuse_put_group(&t, plan, p, gi);
  if (!t.oom) kfuse_put_slots(&t, plan, p, group_of, end);
  for (int k = 0; k < plan->n_outputs; k++)
    if (plan->output_donor[k] >= 0)
      kfuse_printf(&t, "out%d reuses donated in%d\n", k, plan->output_donor[k]);
  free(end);
  free(group_of);
  if (t.oom) {
    free(t.buf);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kfuse_plan_print: out of memory");
  }
  *text = t.buf;
  return KILN_OK;
}
