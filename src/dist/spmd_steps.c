/* A shard_map body as a list of steps for a backend that runs collectives
 * itself over device memory (kdev_coll_ops): the equations between two
 * collectives become one program of their own, compiled once per device
 * (the kernel cache shares the kernels between devices of one target), and
 * each collective (axis_index too) is a step of its own that the lockstep
 * driver (spmd_lockstep.c) issues for every device at once. Reshapes next
 * to those steps are device copies (see is_copy). A cond, while or scan
 * whose bodies hold collectives is a control step: each of its
 * sub-programs is split the same way, into a plan of its own that the
 * driver runs per branch taken or per iteration (spmd_control.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"
#include "transform/transform.h"

static bool is_collective(kir_prim p) {
  return kir_prim_get(p)->family == KIR_FAMILY_COLLECTIVE;
}

/* A reshape, squeeze or expand_dims keeps the row-major bytes: a copy step
 * where its operand is an argument of the body or comes from a step of its
 * own (pmap's squeeze before a collective and expand_dims after), which
 * spares a kernel; elsewhere it fuses with its neighbours. */
static bool is_copy(const kir_program *body, const kir_eqn *e, const bool *own) {
  if (e->prim != KIR_PRIM_RESHAPE && e->prim != KIR_PRIM_SQUEEZE && e->prim != KIR_PRIM_EXPAND_DIMS)
    return false;
  const kir_var *v = &body->vars[e->in[0]];
  return v->kind == KIR_VAR_INVAR || (v->kind == KIR_VAR_EQN && own[v->eqn]);
}

typedef struct nested_scan {
  kir_prim found;
} nested_scan;

static void find_collective(kir_program *sub, void *user) {
  nested_scan *s = user;
  for (int i = 0; i < sub->n_eqns && s->found == KIR_NUM_PRIMS; i++) {
    const kir_eqn *e = &sub->eqns[i];
    if (is_collective(e->prim)) s->found = e->prim;
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, find_collective, user);
  }
}

/* The collective equation e's sub-programs hold (KIR_NUM_PRIMS: none). */
static kir_prim nested_collective(const kir_eqn *e) {
  nested_scan s = {KIR_NUM_PRIMS};
  kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, find_collective, &s);
  return s.found;
}

static bool is_control(kir_prim p) {
  return p == KIR_PRIM_COND || p == KIR_PRIM_WHILE || p == KIR_PRIM_SCAN;
}

/* What the lockstep driver cannot run: effects (they need the host, in
 * device order), a nested shard_map, and collectives inside other
 * equations than cond, while and scan (whose bodies become plans of their
 * own, run per iteration: spmd_control.c). */
static kiln_status check_body(const kir_program *body) {
  if (kir_program_has_effect(body))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "shard_map over CUDA devices: the body has effects "
                      "(a host callback or debug print), which run only on CPU devices");
  for (int i = 0; i < body->n_eqns; i++) {
    const kir_eqn *e = &body->eqns[i];
    kir_prim found = e->prim == KIR_PRIM_SHARD_MAP ? e->prim
                     : is_collective(e->prim) || is_control(e->prim) ? KIR_NUM_PRIMS
                                                                      : nested_collective(e);
    if (found != KIR_NUM_PRIMS)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED, "shard_map over CUDA devices: equation %d (%s) "
                        "holds a %s, and collectives run only at the body's top level or inside "
                        "cond, while and scan there (on CPU devices they run anywhere)", i,
                        kir_prim_name(e->prim), kir_prim_name(found));
  }
  return KILN_OK;
}

static void push_var(kir_vid v, int *n, kir_vid *list) {
  for (int k = 0; k < *n; k++)
    if (list[k] == v) return;
  list[(*n)++] = v;
}

/* The vars equations [from, to) read from outside and those read after
 * them (by later equations or as the body's results). */
static kiln_status step_vars(const kir_program *body, int from, int to, kdist_step *s) {
  size_t cap = 1;
  for (int i = from; i < body->n_eqns; i++) cap += (size_t)(body->eqns[i].n_in + body->eqns[i].n_out);
  cap += (size_t)body->n_outvars;
  s->in = calloc(cap, sizeof *s->in);
  s->out = calloc(cap, sizeof *s->out);
  if (!s->in || !s->out) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int i = from; i < to; i++) {
    const kir_eqn *e = &body->eqns[i];
    for (int k = 0; k < e->n_in; k++) {
      const kir_var *v = &body->vars[e->in[k]];
      if (v->kind != KIR_VAR_LITERAL && (v->kind != KIR_VAR_EQN || v->eqn < from))
        push_var(e->in[k], &s->n_in, s->in);
    }
  }
  for (int i = to; i <= body->n_eqns; i++) {
    int n = i < body->n_eqns ? body->eqns[i].n_in : body->n_outvars;
    const kir_vid *vs = i < body->n_eqns ? body->eqns[i].in : body->outvars;
    for (int k = 0; k < n; k++) {
      const kir_var *v = &body->vars[vs[k]];
      if (v->kind == KIR_VAR_EQN && v->eqn >= from && v->eqn < to) push_var(vs[k], &s->n_out, s->out);
    }
  }
  return KILN_OK;
}

/* Equations [from, to) as a root program of their own. */
static kiln_status step_program(const kir_program *body, int from, int to, kdist_step *s) {
  const char *op = "shard_map";
  ktf_map m = {0};
  int w = s->n_out + 1;
  for (int i = from; i < to; i++) w = body->eqns[i].n_in > w ? body->eqns[i].n_in : w;
  kir_vid *buf = malloc((size_t)w * sizeof *buf);
  kiln_status st = buf ? kir_program_new(&s->prog)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, body->n_vars, &m);
  for (int k = 0; !st && k < s->n_in; k++)
    st = kir_add_invar(s->prog, kir_var_aval(body, s->in[k]), &m.v[s->in[k]]);
  for (int i = from; !st && i < to; i++) st = ktf_copy_eqn(op, s->prog, body, &body->eqns[i], &m, buf);
  for (int k = 0; !st && k < s->n_out; k++) st = ktf_map_get(op, &m, s->prog, body, s->out[k], &buf[k]);
  if (!st) st = kir_set_outputs(s->prog, s->n_out, buf);
  free(buf);
  free(m.v);
  return st;
}

static kiln_status step_compile(kiln_ctx *ctx, const kdist_plan *p, kdist_step *s) {
  int64_t n = p->n;
  kcache *cache = NULL;
  kiln_status st = krt_ctx_kcache(ctx, &cache);
  s->donated = calloc((size_t)s->n_in + 1, sizeof *s->donated);
  s->x = calloc((size_t)n, sizeof *s->x);
  if (!st && (!s->donated || !s->x))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  char name[96];
  snprintf(name, sizeof name, "shard_map body%s step %d", p->where, p->n_steps);
  for (int64_t d = 0; !st && d < n; d++) {
    kir_eval_env env;
    kir_eval_env_init(&env, kir_reference_evals());
    kdev_build b = {.name = name, .prog = s->prog, .donated = s->donated, .env = &env,
                    .cache = cache, .config = &ctx->config};
    st = ctx->be.exec->build(&ctx->be.devices[d], &b, &s->x[d]);
    if (!st && !s->x[d])
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "shard_map: the %s backend declined to compile %s",
                      kiln_backend_name(ctx->be.kind), name);
  }
  return st;
}

static kiln_status add_step(kdist_plan *p, kdist_step **out) {
  kdist_step *grown = realloc(p->steps, (size_t)(p->n_steps + 1) * sizeof *grown);
  if (!grown) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  p->steps = grown;
  *out = memset(&p->steps[p->n_steps++], 0, sizeof **out);
  return KILN_OK;
}

/* The equations [from, to) as a compute step, when later steps need any
 * of their results (the body has no effects: the others are dead). */
static kiln_status add_compute(kiln_ctx *ctx, kdist_plan *p, int from, int to) {
  if (from == to) return KILN_OK;
  kdist_step s = {.kind = KDIST_STEP_COMPUTE}, *slot;
  kiln_status st = step_vars(p->body, from, to, &s);
  if (!st && s.n_out) st = step_program(p->body, from, to, &s);
  if (!st && s.n_out) st = step_compile(ctx, p, &s);
  if (!st && s.n_out && !(st = add_step(p, &slot))) *slot = s;
  if (st || !s.n_out) kdist_step_free(ctx, p->n, &s);
  return st;
}

void kdist_step_free(kiln_ctx *ctx, int64_t n, kdist_step *s) {
  for (int64_t d = 0; s->x && d < n; d++)
    if (s->x[d]) ctx->be.exec->free(s->x[d]);
  for (int k = 0; s->sub && k < s->n_sub; k++) kdist_plan_free(ctx, s->sub[k]);
  kir_program_free(s->prog);
  free(s->x), free(s->donated), free(s->in), free(s->out), free(s->sub);
}

void kdist_plan_free(kiln_ctx *ctx, kdist_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n_steps; i++) kdist_step_free(ctx, p->n, &p->steps[i]);
  kir_program_free(p->prog);
  free(p->steps), free(p->text), free(p);
}

static kiln_status plan_program(kiln_ctx *ctx, kdist_plan *p);

typedef struct sub_list {
  kiln_ctx *ctx;
  const kdist_plan *p;
  kdist_step *s;
  kiln_status st;
} sub_list;

/* One sub-program of a control step (cond's branch k, while's cond then
 * body, scan's body) as a plan of its own. */
static void add_sub(kir_program *prog, void *user) {
  sub_list *l = user;
  kdist_plan **grown = l->st ? NULL : realloc(l->s->sub, (size_t)(l->s->n_sub + 1) * sizeof *grown);
  kdist_plan *q = grown ? calloc(1, sizeof *q) : NULL;
  if (grown) l->s->sub = grown;
  if (!q) {
    if (!l->st) l->st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
    return;
  }
  l->s->sub[l->s->n_sub++] = q;
  q->n = l->p->n, q->body = prog;
  snprintf(q->where, sizeof q->where, "%.40s.%d.%d", l->p->where, l->p->n_steps, l->s->n_sub - 1);
  l->st = plan_program(l->ctx, q);
}

/* A cond, while or scan holding collectives: its sub-programs planned. */
static kiln_status add_control(kiln_ctx *ctx, kdist_plan *p, const kir_eqn *e) {
  kdist_step s = {.kind = KDIST_STEP_CONTROL, .e = e}, *slot;
  sub_list l = {ctx, p, &s, KILN_OK};
  if (e->prim == KIR_PRIM_WHILE) { /* cond first, whatever order the params list them in */
    add_sub(e->params.while_loop.cond_jaxpr, &l);
    add_sub(e->params.while_loop.body_jaxpr, &l);
  } else {
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, add_sub, &l);
  }
  kiln_status st = l.st;
  if (!st && !(st = add_step(p, &slot))) *slot = s;
  if (st) kdist_step_free(ctx, p->n, &s);
  return st;
}

/* Splits p->body into steps: compute between collectives, copies, and
 * control steps for cond/while/scan holding collectives. */
static kiln_status plan_program(kiln_ctx *ctx, kdist_plan *p) {
  kiln_status st = check_body(p->body);
  int from = 0;
  bool *own = st ? NULL : calloc((size_t)p->body->n_eqns + 1, sizeof *own);
  if (!st && !own) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int i = 0; !st && i < p->body->n_eqns; i++) {
    const kir_eqn *e = &p->body->eqns[i];
    bool control = is_control(e->prim) && nested_collective(e) != KIR_NUM_PRIMS;
    if (!control && !is_collective(e->prim) && !is_copy(p->body, e, own)) continue;
    own[i] = true;
    kdist_step *s;
    if ((st = add_compute(ctx, p, from, i))) break;
    if (control) st = add_control(ctx, p, e);
    else if (!(st = add_step(p, &s))) {
      s->kind = is_collective(e->prim) ? KDIST_STEP_COLLECTIVE : KDIST_STEP_COPY;
      s->e = e;
    }
    from = i + 1;
  }
  free(own);
  if (!st) st = add_compute(ctx, p, from, p->body->n_eqns);
  return st;
}

kiln_status kdist_plan_build(kiln_ctx *ctx, const char *text, int64_t n, kdist_plan **out) {
  kdist_plan *p = calloc(1, sizeof *p);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  p->n = n;
  kiln_status st = (p->text = kcore_strdup(text))
                       ? kir_parse(text, &p->prog)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) p->body = p->prog->eqns[0].params.shard_map.jaxpr;
  if (!st) st = plan_program(ctx, p);
  if (st) {
    kdist_plan_free(ctx, p);
    return kcore_fail_wrap(st, "compiling a shard_map body");
  }
  *out = p;
  return KILN_OK;
}
