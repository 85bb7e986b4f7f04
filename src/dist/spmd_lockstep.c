/* Running a shard_map where the backend runs the collectives over device
 * memory (CUDA, through NCCL): one host thread walks the body's steps
 * (spmd_steps.c) for every device of the mesh in lockstep. A compute step
 * is each device's compiled program, run on its arrays; a collective step
 * is one call of the backend's collective for all devices at once; a copy
 * step is a reshape done as a device copy. Every
 * step only enqueues, so all devices' work is queued without waiting for
 * any; the call waits once, for the collectives (bounded by
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

/* One call: every device's value of every body var. */
typedef struct lock_call {
  kdist_lockstep *ls;
  const kdist_plan *p;
  kir_mesh m;
  coll_mesh *mesh;
  kiln_array **vals; /* [d * n_vars + v] */
  bool used_mesh;
} lock_call;

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

/* Device d's value of v (a literal is uploaded on first use). */
static kiln_status value(lock_call *c, int64_t d, kir_vid v, kiln_array **out) {
  kiln_array **s = slot(c, d, v);
  const kir_var *var = &c->p->body->vars[v];
  if (!*s && var->kind == KIR_VAR_LITERAL) {
    char bytes[16];
    kir_scalar_store(var->aval.dtype, var->u.literal, bytes);
    kiln_status st = kiln_array_from_host(&c->ls->ctx->be.devices[d], var->aval.dtype, 0, NULL,
                                          bytes, kiln_dtype_size(var->aval.dtype), s);
    if (st) return st;
  }
  if (!*s) return kcore_fail(KILN_ERR_INTERNAL, "shard_map: body var %d has no value on device %lld",
                             v, (long long)d);
  *out = *s;
  return KILN_OK;
}

static kiln_status run_compute(lock_call *c, const kdist_step *s) {
  const kdev_exec_ops *ops = c->ls->ctx->be.exec;
  kiln_array **args = calloc((size_t)s->n_in + 1, sizeof *args);
  kiln_array **outs = calloc((size_t)s->n_out + 1, sizeof *outs);
  kiln_status st = args && outs ? KILN_OK
                                : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    for (int k = 0; !st && k < s->n_in; k++) st = value(c, d, s->in[k], &args[k]);
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
    kiln_device *dev = &c->ls->ctx->be.devices[d];
    kiln_array *x, **y = slot(c, d, e->out[0]);
    if (!(st = value(c, d, e->in[0], &x)) &&
        !(st = kdev_array_alloc(kir_prim_name(e->prim), dev, o->dtype, o->rank, o->shape, y)))
      st = dev->ops->copy(dev, &(*y)->buf, dev, &x->buf, (*y)->buf.nbytes);
  }
  return st;
}

static int64_t prod(const int64_t *v, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= v[i];
  return p;
}

/* The collective's kind, count and layout moves for operand a -> result o
 * over groups of n (see kdev_coll). */
static kiln_status describe(const kir_eqn *e, const kir_aval *a, const kir_aval *o, int64_t n,
                            kdev_coll *c) {
  c->count = kir_aval_size(a);
  c->in_outer = c->out_outer = 1;
  switch (e->prim) {
    case KIR_PRIM_PSUM:
    case KIR_PRIM_PMAX:
    case KIR_PRIM_PMIN:
      c->kind = KDEV_COLL_ALL_REDUCE;
      return KILN_OK;
    case KIR_PRIM_ALL_GATHER: {
      int dim = (int)e->params.all_gather.all_gather_dimension;
      c->kind = KDEV_COLL_ALL_GATHER;
      c->out_outer = prod(a->shape, 0, dim), c->out_block = prod(a->shape, dim, a->rank);
      return KILN_OK;
    }
    case KIR_PRIM_PSUM_SCATTER: {
      int dim = (int)e->params.psum_scatter.scatter_dimension;
      c->kind = KDEV_COLL_REDUCE_SCATTER;
      c->in_outer = prod(a->shape, 0, dim);
      c->in_block = a->shape[dim] / n * prod(a->shape, dim + 1, a->rank);
      return KILN_OK;
    }
    case KIR_PRIM_PPERMUTE:
      c->kind = KDEV_COLL_PPERMUTE;
      return KILN_OK;
    case KIR_PRIM_ALL_TO_ALL: {
      const kir_p_all_to_all *p = &e->params.all_to_all;
      int sa = (int)p->split_axis, ca = (int)p->concat_axis;
      c->kind = KDEV_COLL_ALL_TO_ALL;
      c->in_outer = prod(a->shape, 0, sa);
      c->in_block = a->shape[sa] / n * prod(a->shape, sa + 1, a->rank);
      /* Received blocks are chunks of the operand split along split_axis;
       * they line up along concat_axis (tiled) or stack on a new one. */
      c->out_outer = prod(o->shape, 0, ca);
      c->out_block = p->tiled ? o->shape[ca] / n * prod(o->shape, ca + 1, o->rank)
                              : prod(o->shape, ca + 1, o->rank);
      return KILN_OK;
    }
    default:
      return kcore_fail(KILN_ERR_INTERNAL, "%s: not a collective", kir_prim_name(e->prim));
  }
}

/* Device d's group (color) and rank in it over the axes ax. */
static void group_of(const kir_mesh *m, int64_t d, int na, const int *ax, int *color, int *rank) {
  int64_t coord[KIR_MESH_MAX_AXES], g = 0, r = 0;
  bool in_set[KIR_MESH_MAX_AXES] = {false};
  kir_mesh_coords(m, d, coord);
  for (int k = 0; k < na; k++) in_set[ax[k]] = true, r = r * m->size[ax[k]] + coord[ax[k]];
  for (int a = 0; a < m->ndim; a++)
    if (!in_set[a]) g = g * m->size[a] + coord[a];
  *color = (int)g, *rank = (int)r;
}

static kiln_status run_axis_index(lock_call *c, const kir_eqn *e, int na, const int *ax) {
  kiln_status st = KILN_OK;
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    int color, rank;
    group_of(&c->m, d, na, ax, &color, &rank);
    int32_t v = rank;
    st = kiln_array_from_host(&c->ls->ctx->be.devices[d], KILN_I32, 0, NULL, &v, sizeof v,
                              slot(c, d, e->out[0]));
  }
  return st;
}

typedef struct coll_scratch {
  int *color, *rank;
  int (*pairs)[2];
  kdev_buffer **in, **out;
} coll_scratch;

/* Operand k of collective e for every device at once. */
static kiln_status run_operand(lock_call *c, const kir_eqn *e, int k, kdev_coll *cc,
                               coll_scratch *sc) {
  const kir_program *body = c->p->body;
  const kir_aval *o = kir_var_aval(body, e->out[k]);
  kiln_status st = describe(e, kir_var_aval(body, e->in[k]), o,
                            c->m.n_devices / (cc->color[c->m.n_devices - 1] + 1), cc);
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    kiln_array *x, **y = slot(c, d, e->out[k]);
    if (!(st = value(c, d, e->in[k], &x)) &&
        !(st = kdev_array_alloc(cc->name, &c->ls->ctx->be.devices[d], o->dtype, o->rank, o->shape, y)))
      sc->in[d] = &x->buf, sc->out[d] = &(*y)->buf;
  }
  c->used_mesh = true;
  if (!st) st = c->ls->ctx->be.coll->run(c->mesh->mesh, cc, sc->in, sc->out);
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
        kiln_device *dev = &c->ls->ctx->be.devices[d];
        kiln_array *x, **y = slot(c, d, e->out[k]);
        if (!(st = value(c, d, e->in[k], &x)) &&
            !(st = kdev_array_alloc(cc->name, dev, a->dtype, a->rank, a->shape, y)) &&
            !(st = dev->ops->copy(dev, &(*y)->buf, dev, &x->buf, (*y)->buf.nbytes)))
          bufs[o * n + d] = &(*y)->buf;
      }
    }
  }
  c->used_mesh = true;
  if (!st) st = c->ls->ctx->be.coll->all_reduce_many(c->mesh->mesh, cc, n_ops, dtypes, counts, bufs);
  free(bufs), free(dtypes), free(counts);
  return st;
}

/* Collective steps [i, j) (one, or a run of reductions). */
static kiln_status run_collectives(lock_call *c, int i, int j) {
  const kir_eqn *e = c->p->steps[i].e;
  int na, ax[KIR_MESH_MAX_AXES];
  kiln_status st = kdist_coll_axes(&c->m, e, &na, ax);
  if (st) return st;
  if (e->prim == KIR_PRIM_AXIS_INDEX) return run_axis_index(c, e, na, ax);
  int64_t n = c->m.n_devices;
  char axes[KIR_MESH_MAX_AXES * (KIR_AXIS_NAME_MAX + 1)] = "";
  for (int k = 0; k < na; k++)
    snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s%s", k ? "," : "", c->m.name[ax[k]]);
  coll_scratch sc = {calloc((size_t)n, sizeof *sc.color), calloc((size_t)n, sizeof *sc.rank),
                     calloc((size_t)n, sizeof *sc.pairs), calloc((size_t)n, sizeof *sc.in),
                     calloc((size_t)n, sizeof *sc.out)};
  if (!sc.color || !sc.rank || !sc.pairs || !sc.in || !sc.out)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int64_t d = 0; !st && d < n; d++) group_of(&c->m, d, na, ax, &sc.color[d], &sc.rank[d]);
  kdev_coll cc = {.name = kir_prim_name(e->prim), .axes = axes, .color = sc.color,
                  .rank = sc.rank, .pairs = (const int(*)[2])sc.pairs,
                  .reduce = e->prim == KIR_PRIM_PSUM ? 0 : e->prim == KIR_PRIM_PMAX ? 1 : 2};
  if (!st && e->prim == KIR_PRIM_PPERMUTE)
    st = kir_perm_parse(e->params.ppermute.perm, n / (sc.color[n - 1] + 1), &cc.npairs, sc.pairs);
  int n_ops = 0;
  for (int s = i; s < j; s++) n_ops += c->p->steps[s].e->n_in;
  bool many = n_ops > 1 && is_reduction(e->prim);
  if (!st && many) st = run_reduce_many(c, i, j, n_ops, &cc);
  for (int k = 0; !st && !many && k < e->n_in; k++) {
    cc.dtype = kir_var_aval(c->p->body, e->in[k])->dtype;
    st = run_operand(c, e, k, &cc, &sc);
  }
  free(sc.color), free(sc.rank), free(sc.pairs), free(sc.in), free(sc.out);
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
      st = kiln_array_from_host(&c->ls->ctx->be.devices[d], b.aval.dtype, b.aval.rank,
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
      if ((st = value(c, d, body->outvars[k], &y))) break;
      if (!(b.data = malloc(b.nbytes + 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
      if (!(st = kiln_array_to_host(y, b.data, b.nbytes)))
        kir_shard_copy(&c->m, coord, &specs[k], &out[k], &b, true);
      free(b.data);
    }
  return st;
}

static kiln_status run_steps(lock_call *c, const kir_spec *specs, const kir_buffer *in,
                             kir_buffer *out) {
  const kdist_plan *p = c->p;
  kiln_status st = upload_inputs(c, specs, in);
  for (int i = 0, j; !st && i < p->n_steps; i = j) {
    j = p->steps[i].kind == KDIST_STEP_COLLECTIVE ? reduce_run_end(p, i) : i + 1;
    st = p->steps[i].kind == KDIST_STEP_COMPUTE ? run_compute(c, &p->steps[i])
         : p->steps[i].kind == KDIST_STEP_COPY  ? run_copy(c, p->steps[i].e)
                                                : run_collectives(c, i, j);
  }
  /* Waiting here bounds the collectives by the timeout; downloads would
   * wait for a stalled one forever. */
  if (c->used_mesh) {
    kiln_status w = c->ls->ctx->be.coll->wait(c->mesh->mesh);
    if (!st) st = w;
  }
  if (!st) st = download_outputs(c, specs + p->body->n_invars, out);
  return st;
}

kiln_status kdist_lockstep_run(kdist_lockstep *ls, const kir_eqn *e, const kir_buffer *in,
                               kir_buffer *out) {
  const kir_p_shard_map *sm = &e->params.shard_map;
  lock_call c = {.ls = ls};
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
  if (!st) st = mesh_get(ls, sm->mesh, c.m.n_devices, &c.mesh);
  const kir_program *body = p ? p->body : NULL;
  c.p = p;
  if (!st && !(c.vals = calloc((size_t)(c.m.n_devices * body->n_vars) + 1, sizeof *c.vals)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) st = run_steps(&c, specs, in, out);
  if (st && c.used_mesh && st == KILN_ERR_COLLECTIVE) {
    ls->ctx->be.coll->mesh_free(c.mesh->mesh); /* aborted or unusable: the next call makes a new one */
    c.mesh->mesh = NULL;
  }
  for (int64_t i = 0; c.vals && i < c.m.n_devices * body->n_vars; i++) kiln_array_release(c.vals[i]);
  pthread_mutex_unlock(&ls->mu);
  free(c.vals);
  free(specs);
  if (st) return kcore_fail_wrap(st, "shard_map over %s", sm->mesh);
  return KILN_OK;
}
