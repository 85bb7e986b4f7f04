/* Compiling a traced program: the pass pipeline (kir_run_passes), cost and
 * memory analyses, then the backend's executable (or, where the backend
 * declines, the optimized program for the reference executor). */
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

static double krt_elements(const kir_aval *a) { return (double)kir_aval_size(a); }

static double krt_bytes(const kir_aval *a) {
  return krt_elements(a) * (double)kiln_dtype_size(a->dtype);
}

static void krt_cost_program(const kir_program *p, double times, kiln_cost_analysis *c);

/* One equation's share, XLA-style: an elementwise op is one flop (or one
 * transcendental) per result element, a reduction one per input element, a
 * dot two per multiply-add; bytes are every operand read and result written. */
static void krt_cost_eqn(const kir_program *p, const kir_eqn *e, double times,
                         kiln_cost_analysis *c) {
  const kir_prim_info *info = kir_prim_get(e->prim);
  double in_bytes = 0, out_bytes = 0, out_elems = 0;
  for (int i = 0; i < e->n_in; i++) in_bytes += krt_bytes(kir_var_aval(p, e->in[i]));
  for (int i = 0; i < e->n_out; i++) {
    out_bytes += krt_bytes(kir_var_aval(p, e->out[i]));
    out_elems += krt_elements(kir_var_aval(p, e->out[i]));
  }
  c->bytes_accessed += times * (in_bytes + out_bytes);
  if (info->family == KIR_FAMILY_ELEMENTWISE && e->prim != KIR_PRIM_CONVERT_ELEMENT_TYPE &&
      e->prim != KIR_PRIM_BITCAST_CONVERT_TYPE) {
    if (kir_prim_cost(e->prim) == KIR_COST_TRANSCENDENTAL)
      c->transcendentals += times * out_elems;
    else
      c->flops += times * out_elems;
  } else if (info->family == KIR_FAMILY_REDUCE) {
    c->flops += times * krt_elements(kir_var_aval(p, e->in[0]));
  } else if (e->prim == KIR_PRIM_DOT_GENERAL) {
    const kir_aval *lhs = kir_var_aval(p, e->in[0]);
    const kir_dims *k = &e->params.dot.dimension_numbers.lhs_contracting;
    double contracted = 1;
    for (int i = 0; i < k->n; i++) contracted *= (double)lhs->shape[k->v[i]];
    c->flops += times * 2 * out_elems * contracted;
  } else if (e->prim == KIR_PRIM_SCAN) {
    krt_cost_program(e->params.scan.jaxpr, times * (double)e->params.scan.length, c);
  } else if (e->prim == KIR_PRIM_WHILE) { /* the trip count is unknown: one trip */
    krt_cost_program(e->params.while_loop.cond_jaxpr, times, c);
    krt_cost_program(e->params.while_loop.body_jaxpr, times, c);
  } else if (e->prim == KIR_PRIM_COND) { /* the costliest branch */
    kiln_cost_analysis best = {0, 0, 0};
    for (int b = 0; b < e->params.cond.branches.n; b++) {
      kiln_cost_analysis one = {0, 0, 0};
      krt_cost_program(e->params.cond.branches.v[b], times, &one);
      if (one.flops + one.transcendentals > best.flops + best.transcendentals) best = one;
    }
    c->flops += best.flops;
    c->transcendentals += best.transcendentals;
    c->bytes_accessed += best.bytes_accessed;
  }
}

static void krt_cost_program(const kir_program *p, double times, kiln_cost_analysis *c) {
  for (int i = 0; i < p->n_eqns; i++) krt_cost_eqn(p, &p->eqns[i], times, c);
}

/* Peak bytes of intermediate results alive at once, walking the top-level
 * equations in order: a result lives from its equation to its last use. */
static uint64_t krt_peak_temp_bytes(const kir_program *p) {
  int *last = malloc((size_t)(p->n_vars ? p->n_vars : 1) * sizeof *last);
  bool *is_out = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *is_out);
  uint64_t live = 0, peak = 0;
  if (!last || !is_out) goto done;
  for (int v = 0; v < p->n_vars; v++) last[v] = -1;
  for (int i = 0; i < p->n_outvars; i++) is_out[p->outvars[i]] = true;
  for (int i = 0; i < p->n_eqns; i++)
    for (int j = 0; j < p->eqns[i].n_in; j++) last[p->eqns[i].in[j]] = i;
  for (int i = 0; i < p->n_eqns; i++) {
    const kir_eqn *e = &p->eqns[i];
    for (int j = 0; j < e->n_out; j++)
      if (!is_out[e->out[j]]) live += (uint64_t)krt_bytes(kir_var_aval(p, e->out[j]));
    if (live > peak) peak = live;
    for (int j = 0; j < e->n_in; j++) {
      kir_vid v = e->in[j];
      const kir_var *var = &p->vars[v];
      if (var->kind == KIR_VAR_EQN && !is_out[v] && last[v] == i) {
        live -= (uint64_t)krt_bytes(&var->aval);
        last[v] = -2; /* counted once even if used twice by this equation */
      }
    }
  }
done:
  free(last);
  free(is_out);
  return peak;
}

static void krt_memory(const kir_program *p, kiln_memory_analysis *m) {
  memset(m, 0, sizeof *m);
  for (int i = 0; i < p->n_invars; i++)
    m->argument_bytes += (uint64_t)krt_bytes(kir_var_aval(p, p->invars[i]));
  for (int i = 0; i < p->n_outvars; i++)
    m->output_bytes += (uint64_t)krt_bytes(kir_var_aval(p, p->outvars[i]));
  m->temp_bytes = krt_peak_temp_bytes(p);
}

kiln_status krt_run_passes(krt_program *p, bool fusing) {
  const kiln_options *o = &p->ctx->config.opts;
  kir_pass_opts po = {.fusing = fusing,
                      .dump_dir = o->dump_dir,
                      .name = p->f && p->f->name ? p->f->name : "program",
                      .log_level = o->log_level};
  return kir_run_passes(p->prog, &po);
}

static kiln_status krt_compile_unranged(krt_program *p, kiln_compiled *c, bool fuse) {
  memset(c, 0, sizeof *c);
  /* Calls (custom derivative rules, checkpoints) fuse once inlined; the
   * reference executor keeps them as written. */
  kiln_status st = krt_run_passes(p, fuse);
  if (st) return kcore_fail_wrap(st, "compiling %s", p->f ? p->f->name : "program");
  c->p = *p;
  memset(p, 0, sizeof *p);
  krt_cost_program(c->p.prog, 1, &c->cost);
  krt_memory(c->p.prog, &c->memory);
  krt_reference_env(c, &c->env);
  if (fuse && (st = krt_build_exec(c))) {
    *p = c->p; /* the caller still owns the program */
    memset(&c->p, 0, sizeof c->p);
  }
  return st;
}

void krt_compiled_release(kiln_compiled *c) {
  if (c->exec) c->exec_ops->free(c->exec);
  c->exec = NULL;
  krt_program_free(&c->p);
}

kiln_status krt_compile(krt_program *p, kiln_compiled *c, bool fuse) {
  kcore_range_push("kiln compile");
  kiln_status st = krt_compile_unranged(p, c, fuse);
  kcore_range_pop();
  return st;
}
