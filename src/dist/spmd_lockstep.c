/* Running a shard_map where the backend runs the collectives over device
 * memory (CUDA, through NCCL): one host thread walks the body's steps
 * (spmd_steps.c) for every device of the mesh in lockstep. A compute step
 * is each device's compiled program, run on its arrays; a collective step
 * is one call of the backend's collective for all devices at once (as
 * spmd_collective.c maps the equation); a copy step is a reshape done as a
 * device copy; a control step (a cond, while or scan holding collectives,
 * spmd_control.c) runs its sub-plans in scopes of their own. Every
 * step only enqueues, so all devices' work is queued without waiting for
 * any (a control step waits where it reads an index or predicate back);
 * the call waits once, for the collectives (bounded by
 * KILN_COLLECTIVE_TIMEOUT), and then for the results it copies back. A
 * collective failure drops the mesh's communicators, so the next call
 * starts afresh and the context stays usable. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"

struct kdist_lockstep {
  kiln_ctx *ctx;
  pthread_mutex_t mu; /* guards plans and meshes */
  kdist_plan *plans;
  struct coll_mesh *meshes;
};

/* The backend's collective mesh (NCCL communicators) of one IR mesh,
 * "data=2,model=4", made on first use: each axis group of it gets its
 * communicators once. */
typedef struct coll_mesh {
  char *text;
  void *mesh;
  struct coll_mesh *next;
} coll_mesh;

typedef kdist_lock_call lock_call;

kiln_status kdist_lockstep_new(kiln_ctx *ctx, kdist_lockstep **out) {
  kiln_status st = ctx->be.coll->probe(&ctx->be);
  if (st) return st;
  kdist_lockstep *ls = calloc(1, sizeof *ls);
  if (!ls) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_shard_map: out of host memory");
  ls->ctx = ctx;
  pthread_mutex_init(&ls->mu, NULL);
  *out = ls;
  return KILN_OK;
}

void kdist_lockstep_free(kdist_lockstep *ls) {
  if (!ls) return;
  while (ls->plans) {
    kdist_plan *next = ls->plans->next;
    kdist_plan_free(ls->ctx, ls->plans);
    ls->plans = next;
  }
  while (ls->meshes) {
    coll_mesh *next = ls->meshes->next;
    ls->ctx->be.coll->mesh_free(ls->meshes->mesh);
    free(ls->meshes->text), free(ls->meshes);
    ls->meshes = next;
  }
  pthread_mutex_destroy(&ls->mu);
  free(ls);
}

/* The collective mesh of IR mesh `text` over n devices; called holding mu. */
static kiln_status mesh_get(kdist_lockstep *ls, const char *text, int64_t n, coll_mesh **out) {
  coll_mesh *m = ls->meshes;
  while (m && strcmp(m->text, text)) m = m->next;
  if (!m) {
    if (!(m = calloc(1, sizeof *m)) || !(m->text = kcore_strdup(text))) {
      free(m);
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
    }
    m->next = ls->meshes;
    ls->meshes = m;
  }
  *out = m;
  return m->mesh ? KILN_OK
                 : ls->ctx->be.coll->mesh_new(&ls->ctx->be, (int)n,
                                              ls->ctx->config.opts.collective_timeout_s, &m->mesh);
}

/* The body's plan, built on first use; called holding mu. */
static kiln_status plan_get(kdist_lockstep *ls, const kir_eqn *e, const kir_buffer *in,
                            const kir_buffer *out, int64_t n, kdist_plan **found) {
  char *text = kdist_shard_map_text(e, in, out);
  if (!text) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  kiln_status st = KILN_OK;
  kdist_plan *p = ls->plans;
  while (p && (p->n != n || strcmp(p->text, text))) p = p->next;
  if (!p && !(st = kdist_plan_build(ls->ctx, text, n, &p))) {
    p->next = ls->plans;
    ls->plans = p;
  }
  free(text);
  *found = st ? NULL : p;
  return st;
}

static kiln_array **slot(lock_call *c, int64_t d, kir_vid v) {
  return &c->vals[d * c->p->body->n_vars + v];
}

void kdist_lock_set(kdist_lock_call *c, int64_t d, kir_vid v, kiln_array *a) {
  kiln_array **s = slot(c, d, v);
  kiln_array_release(*s);
  *s = a;
}

/* Device d's value of v (a literal is uploaded on first use). */
kiln_status kdist_lock_value(kdist_lock_call *c, int64_t d, kir_vid v, kiln_array **out) {
  kiln_array **s = slot(c, d, v);
  const kir_var *var = &c->p->body->vars[v];
  if (!*s && var->kind == KIR_VAR_LITERAL) {
    char bytes[16];
    kir_scalar_store(var->aval.dtype, var->u.literal, bytes);
    kiln_status st = kiln_array_from_host(&c->ctx->be.devices[d], var->aval.dtype, 0, NULL,
                                          bytes, kiln_dtype_size(var->aval.dtype), s);
    if (st) return st;
  }
  if (!*s) return kcore_fail(KILN_ERR_INTERNAL, "shard_map: body var %d has no value on device %lld",
                             v, (long long)d);
  *out = *s;
  return KILN_OK;
}

static kiln_status run_compute(lock_call *c, const kdist_step *s) {
  const kdev_exec_ops *ops = c->ctx->be.exec;
  kiln_array **args = calloc((size_t)s->n_in + 1, sizeof *args);
  kiln_array **outs = calloc((size_t)s->n_out + 1, sizeof *outs);
  kiln_status st = args && outs ? KILN_OK
                                : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    for (int k = 0; !st && k < s->n_in; k++) st = kdist_lock_value(c, d, s->in[k], &args[k]);
    if (!st) st = ops->run(s->x[d], args, outs);
    for (int k = 0; !st && k < s->n_out; k++) *slot(c, d, s->out[k]) = outs[k];
    if (st) st = kcore_fail_wrap(st, "shard_map: device %lld", (long long)d);
  }
  free(args), free(outs);
  return st;
}

static kiln_status run_copy(lock_call *c, const kir_eqn *e) {
  const kir_aval *o = kir_var_aval(c->p->body, e->out[0]);
  kiln_status st = KILN_OK;
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    kiln_device *dev = &c->ctx->be.devices[d];
    kiln_array *x, **y = slot(c, d, e->out[0]);
    if (!(st = kdist_lock_value(c, d, e->in[0], &x)) &&
        !(st = kdev_array_alloc(kir_prim_name(e->prim), dev, o->dtype, o->rank, o->shape, y)))
      st = dev->ops->copy(dev, &(*y)->buf, dev, &x->buf, (*y)->buf.nbytes);
  }
  return st;
}

static kiln_status run_axis_index(lock_call *c, const kir_eqn *e, const kdist_coll_groups *g) {
  kiln_status st = KILN_OK;
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    int32_t v = g->rank[d];
    st = kiln_array_from_host(&c->ctx->be.devices[d], KILN_I32, 0, NULL, &v, sizeof v,
                              slot(c, d, e->out[0]));
  }
  return st;
}

typedef struct coll_scratch {
  kdist_coll_groups g;
  int (*pairs)[2];
  kdev_buffer **in, **out;
} coll_scratch;

/* Operand k of collective e for every device at once. */
static kiln_status run_operand(lock_call *c, const kir_eqn *e, int k, coll_scratch *sc) {
  const kir_program *body = c->p->body;
  const kir_aval *o = kir_var_aval(body, e->out[k]);
  kdev_coll cc;
  kiln_status st = kdist_coll_describe(e, kir_var_aval(body, e->in[k]), o, &sc->g, sc->pairs, &cc);
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    kiln_array *x, **y = slot(c, d, e->out[k]);
    if (!(st = kdist_lock_value(c, d, e->in[k], &x)) &&
        !(st = kdev_array_alloc(cc.name, &c->ctx->be.devices[d], o->dtype, o->rank, o->shape, y)))
      sc->in[d] = &x->buf, sc->out[d] = &(*y)->buf;
  }
  *c->used_mesh = true;
  if (!st) st = c->ctx->be.coll->run(c->mesh, &cc, sc->in, sc->out);
  return st;
}

static bool is_reduction(kir_prim p) {
  return p == KIR_PRIM_PSUM || p == KIR_PRIM_PMAX || p == KIR_PRIM_PMIN;
}

/* The end of the run of collective steps from i that reduce together:
 * the same reduction over the same axes, none reading another's result (a
 * pytree's psum is one equation per leaf). */
static int reduce_run_end(const kdist_plan *p, int i) {
  const kir_eqn *e = p->steps[i].e;
  int j = i + 1;
  while (is_reduction(e->prim) && j < p->n_steps && p->steps[j].kind == KDIST_STEP_COLLECTIVE) {
    const kir_eqn *f = p->steps[j].e;
    bool reads = false;
    for (int k = 0; k < f->n_in; k++) {
      const kir_var *v = &p->body->vars[f->in[k]];
      reads |= v->kind == KIR_VAR_EQN && v->eqn >= (int)(e - p->body->eqns);
    }
    if (reads || f->prim != e->prim || strcmp(kir_collective_axes(f, NULL), kir_collective_axes(e, NULL)))
      break;
    j++;
  }
  return j;
}

/* Steps [i, j) with n_ops operands as one bucketed all-reduce: each result
 * starts as a device copy of its operand and is reduced in place. */
static kiln_status run_reduce_many(lock_call *c, int i, int j, int n_ops, const kdev_coll *cc) {
  int64_t n = c->m.n_devices;
  kdev_buffer **bufs = calloc((size_t)(n_ops * n), sizeof *bufs);
  kiln_dtype *dtypes = calloc((size_t)n_ops, sizeof *dtypes);
  int64_t *counts = calloc((size_t)n_ops, sizeof *counts);
  kiln_status st = bufs && dtypes && counts
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int s = i, o = 0; !st && s < j; s++) {
    const kir_eqn *e = c->p->steps[s].e;
    for (int k = 0; !st && k < e->n_in; k++, o++) {
      const kir_aval *a = kir_var_aval(c->p->body, e->out[k]);
      dtypes[o] = a->dtype, counts[o] = kir_aval_size(a);
      for (int64_t d = 0; !st && d < n; d++) {
        kiln_device *dev = &c->ctx->be.devices[d];
        kiln_array *x, **y = slot(c, d, e->out[k]);
        if (!(st = kdist_lock_value(c, d, e->in[k], &x)) &&
            !(st = kdev_array_alloc(cc->name, dev, a->dtype, a->rank, a->shape, y)) &&
            !(st = dev->ops->copy(dev, &(*y)->buf, dev, &x->buf, (*y)->buf.nbytes)))
          bufs[o * n + d] = &(*y)->buf;
      }
    }
  }
  *c->used_mesh = true;
  if (!st) st = c->ctx->be.coll->all_reduce_many(c->mesh, cc, n_ops, dtypes, counts, bufs);
  free(bufs), free(dtypes), free(counts);
  return st;
}

/* Collective steps [i, j) (one, or a run of reductions). */
static kiln_status run_collectives(lock_call *c, int i, int j) {
  const kir_eqn *e = c->p->steps[i].e;
  int na, ax[KIR_MESH_MAX_AXES];
  int64_t n = c->m.n_devices;
  coll_scratch sc = {.pairs = NULL};
  kiln_status st = kdist_coll_axes(&c->m, e, &na, ax);
  if (!st) st = kdist_coll_groups_new(&c->m, na, ax, &sc.g);
  if (st) return st;
  if (e->prim == KIR_PRIM_AXIS_INDEX) {
    st = run_axis_index(c, e, &sc.g);
    kdist_coll_groups_free(&sc.g);
    return st;
  }
  sc.pairs = calloc((size_t)n, sizeof *sc.pairs);
  sc.in = calloc((size_t)n, sizeof *sc.in), sc.out = calloc((size_t)n, sizeof *sc.out);
  if (!sc.pairs || !sc.in || !sc.out)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  int n_ops = 0;
  for (int s = i; s < j; s++) n_ops += c->p->steps[s].e->n_in;
  bool many = n_ops > 1 && is_reduction(e->prim);
  if (!st && many) {
    kdev_coll cc;
    const kir_aval *a = kir_var_aval(c->p->body, e->in[0]);
    if (!(st = kdist_coll_describe(e, a, a, &sc.g, sc.pairs, &cc)))
      st = run_reduce_many(c, i, j, n_ops, &cc);
  }
  for (int k = 0; !st && !many && k < e->n_in; k++) st = run_operand(c, e, k, &sc);
  kdist_coll_groups_free(&sc.g);
  free(sc.pairs), free(sc.in), free(sc.out);
  return st;
}

/* Uploads device d's shard of every input. */
static kiln_status upload_inputs(lock_call *c, const kir_spec *specs, const kir_buffer *in) {
  const kir_program *body = c->p->body;
  kiln_status st = KILN_OK;
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    int64_t coord[KIR_MESH_MAX_AXES];
    kir_mesh_coords(&c->m, d, coord);
    for (int k = 0; !st && k < body->n_invars; k++) {
      kir_buffer b = {.aval = *kir_var_aval(body, body->invars[k])};
      b.nbytes = (size_t)kir_aval_size(&b.aval) * kiln_dtype_size(b.aval.dtype);
      if (!(b.data = malloc(b.nbytes + 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
      kir_shard_copy(&c->m, coord, &specs[k], &in[k], &b, false);
      st = kiln_array_from_host(&c->ctx->be.devices[d], b.aval.dtype, b.aval.rank,
                                b.aval.shape, b.data, b.nbytes, slot(c, d, body->invars[k]));
      free(b.data);
    }
  }
  return st;
}

/* Copies each device's results into the global outputs. */
static kiln_status download_outputs(lock_call *c, const kir_spec *specs, kir_buffer *out) {
  const kir_program *body = c->p->body;
  kiln_status st = KILN_OK;
  for (int k = 0; !st && k < body->n_outvars; k++)
    for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
      int64_t coord[KIR_MESH_MAX_AXES];
      kir_mesh_coords(&c->m, d, coord);
      if (!kir_shard_writes_back(&c->m, coord, &specs[k])) continue;
      kiln_array *y;
      kir_buffer b = {.aval = *kir_var_aval(body, body->outvars[k])};
      b.nbytes = (size_t)kir_aval_size(&b.aval) * kiln_dtype_size(b.aval.dtype);
      if ((st = kdist_lock_value(c, d, body->outvars[k], &y))) break;
      if (!(b.data = malloc(b.nbytes + 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
      if (!(st = kiln_array_to_host(y, b.data, b.nbytes)))
        kir_shard_copy(&c->m, coord, &specs[k], &out[k], &b, true);
      free(b.data);
    }
  return st;
}

/* The steps of c's plan, its invars bound. */
static kiln_status run_plan(lock_call *c) {
  const kdist_plan *p = c->p;
  kiln_status st = KILN_OK;
  for (int i = 0, j; !st && i < p->n_steps; i = j) {
    const kdist_step *s = &p->steps[i];
    j = s->kind == KDIST_STEP_COLLECTIVE ? reduce_run_end(p, i) : i + 1;
    st = s->kind == KDIST_STEP_COMPUTE  ? run_compute(c, s)
         : s->kind == KDIST_STEP_COPY    ? run_copy(c, s->e)
         : s->kind == KDIST_STEP_CONTROL ? kdist_control_run(c, s)
                                         : run_collectives(c, i, j);
  }
  return st;
}

kiln_status kdist_lock_run_sub(kdist_lock_call *c, const kdist_plan *sub, kiln_array *const *args,
                               kiln_array **res) {
  const kir_program *b = sub->body;
  int64_t n = c->m.n_devices;
  lock_call s = *c;
  s.p = sub;
  s.vals = calloc((size_t)(n * b->n_vars) + 1, sizeof *s.vals);
  kiln_status st = s.vals ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int64_t d = 0; !st && d < n; d++)
    for (int k = 0; k < b->n_invars; k++) {
      kiln_array *a = args[d * b->n_invars + k];
      kiln_array_retain(a);
      kdist_lock_set(&s, d, b->invars[k], a);
    }
  if (!st) st = run_plan(&s);
  for (int64_t d = 0; !st && d < n; d++)
    for (int k = 0; !st && k < b->n_outvars; k++) {
      kiln_array **r = &res[d * b->n_outvars + k];
      if (!(st = kdist_lock_value(&s, d, b->outvars[k], r))) kiln_array_retain(*r);
      else *r = NULL;
    }
  for (int64_t i = 0; s.vals && i < n * b->n_vars; i++) kiln_array_release(s.vals[i]);
  free(s.vals);
  return st;
}

kiln_status kdist_lock_sync(kdist_lock_call *c) {
  return *c->used_mesh ? c->ctx->be.coll->wait(c->mesh) : KILN_OK;
}

static kiln_status run_steps(lock_call *c, const kir_spec *specs, const kir_buffer *in,
                             kir_buffer *out) {
  kiln_status st = upload_inputs(c, specs, in);
  if (!st) st = run_plan(c);
  /* Waiting here bounds the collectives by the timeout; downloads would
   * wait for a stalled one forever. */
  kiln_status w = kdist_lock_sync(c);
  if (!st) st = w;
  if (!st) st = download_outputs(c, specs + c->p->body->n_invars, out);
  return st;
}

kiln_status kdist_lockstep_run(kdist_lockstep *ls, const kir_eqn *e, const kir_buffer *in,
                               kir_buffer *out) {
  const kir_p_shard_map *sm = &e->params.shard_map;
  bool used_mesh = false;
  coll_mesh *cm = NULL;
  lock_call c = {.ctx = ls->ctx, .used_mesh = &used_mesh};
  kiln_status st = kir_mesh_parse("shard_map", sm->mesh, &c.m);
  if (st) return st;
  if (c.m.n_devices > ls->ctx->be.num_devices)
    return kcore_fail(KILN_ERR_ARGUMENT, "shard_map over %s: the context has %d devices", sm->mesh,
                      ls->ctx->be.num_devices);
  int n_in = sm->jaxpr->n_invars, n_out = sm->jaxpr->n_outvars;
  kir_spec *specs = calloc((size_t)(n_in + n_out) + 1, sizeof *specs);
  if (!specs) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  st = kir_specs_parse("shard_map", sm->in_specs, &c.m, n_in, specs);
  if (!st) st = kir_specs_parse("shard_map", sm->out_specs, &c.m, n_out, specs + n_in);
  /* One call at a time per context: one thread drives the mesh's
   * communicators. */
  pthread_mutex_lock(&ls->mu);
  kdist_plan *p = NULL;
  if (!st) st = plan_get(ls, e, in, out, c.m.n_devices, &p);
  if (!st) st = mesh_get(ls, sm->mesh, c.m.n_devices, &cm);
  if (!st) c.mesh = cm->mesh;
  const kir_program *body = p ? p->body : NULL;
  c.p = p;
  if (!st && !(c.vals = calloc((size_t)(c.m.n_devices * body->n_vars) + 1, sizeof *c.vals)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) st = run_steps(&c, specs, in, out);
  if (st && used_mesh && st == KILN_ERR_COLLECTIVE) {
    ls->ctx->be.coll->mesh_free(cm->mesh); /* aborted or unusable: the next call makes a new one */
    cm->mesh = NULL;
  }
  for (int64_t i = 0; c.vals && i < c.m.n_devices * body->n_vars; i++) kiln_array_release(c.vals[i]);
  pthread_mutex_unlock(&ls->mu);
  free(c.vals);
  free(specs);
  if (st) return kcore_fail_wrap(st, "shard_map over %s", sm->mesh);
  return KILN_OK;
}
