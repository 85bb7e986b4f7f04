/* jit of a lone shard_map over sharded arguments on CPU devices, run as JAX
 * runs it: each operand is laid out as its in_spec (kept as it is when it
 * already is: replicated params stay one copy per device, no gather), every
 * device's program reads its own shards and writes new ones, and the
 * results are sharded arrays with NamedSharding(mesh, out_spec) (replicated
 * for P()), so that feeding them to the next call moves nothing. Programs
 * with anything else around the shard_map keep the path of jit_shard.c. */
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"

struct kdist_smap_plan {
  kiln_ctx *ctx;
  kiln_mesh *mesh;    /* kept alive by the shardings in and out */
  kir_program *prog;  /* the shard_map alone (kdist_shard_map_text), owned */
  int n_in, n_out;
  int *leaf;          /* per operand: the argument leaf it reads */
  kiln_sharding **in, **out; /* per operand, per result */
  kir_buffer *gin, *gout;    /* the global types (no data) */
};

void kdist_smap_plan_free(kdist_smap_plan *pl) {
  if (!pl) return;
  for (int k = 0; pl->in && k < pl->n_in; k++) kiln_sharding_free(pl->in[k]);
  for (int k = 0; pl->out && k < pl->n_out; k++) kiln_sharding_free(pl->out[k]);
  kir_program_free(pl->prog);
  free(pl->leaf), free(pl->in), free(pl->out), free(pl->gin), free(pl->gout), free(pl);
}

/* The equation's mesh over ctx's first devices: a leaf sharding's, or a
 * new one (*made: the caller frees it once its shardings hold it). */
static kiln_mesh *mesh_of(kiln_ctx *ctx, const char *text, const kiln_sharding *const *eff, int n,
                          kiln_mesh **made) {
  kir_mesh m;
  *made = NULL;
  if (kir_mesh_parse("jit", text, &m)) return NULL;
  for (int i = 0; i < n; i++) {
    const kiln_sharding *s = eff[i];
    bool same = s && s->kind == KDIST_NAMED && s->mesh->ndim == m.ndim;
    for (int a = 0; same && a < m.ndim; a++)
      same = s->mesh->shape[a] == m.size[a] && !strcmp(s->mesh->names[a], m.name[a]);
    for (int64_t d = 0; same && d < s->mesh->ndevices; d++)
      same = s->mesh->devices[d] == &ctx->be.devices[d];
    if (same) return s->mesh;
  }
  int64_t shape[KILN_MESH_MAX_AXES], count = 1;
  const char *names[KILN_MESH_MAX_AXES];
  for (int a = 0; a < m.ndim; a++) shape[a] = m.size[a], names[a] = m.name[a], count *= m.size[a];
  kiln_device **devs = count <= ctx->be.num_devices ? malloc((size_t)count * sizeof *devs) : NULL;
  for (int64_t d = 0; devs && d < count; d++) devs[d] = &ctx->be.devices[d];
  kiln_status st = devs ? kiln_mesh_new(ctx, m.ndim, shape, names, devs, made)
                        : kcore_fail(KILN_ERR_ARGUMENT, "jit: a mesh of %lld devices over %d",
                                     (long long)count, ctx->be.num_devices);
  free(devs);
  return st ? NULL : *made;
}

static kiln_status named(kiln_mesh *mesh, const char *specs, int k, kiln_sharding **out) {
  char text[1024];
  kdist_nth_spec(specs, k, text, sizeof text);
  kiln_pspec *spec = NULL;
  kiln_status st = kiln_pspec_parse(text, &spec);
  if (!st) st = kiln_sharding_named(mesh, spec, out);
  kiln_pspec_free(spec);
  return st;
}

kiln_status kdist_smap_plan_new(const krt_program *p, const kiln_sharding *const *eff,
                                kdist_smap_plan **out) {
  const kir_program *g = p->prog;
  *out = NULL;
  if (p->ctx->be.kind != KILN_BACKEND_CPU || g->n_eqns != 1 || g->eqns[0].prim != KIR_PRIM_SHARD_MAP)
    return KILN_OK;
  const kir_eqn *e = &g->eqns[0];
  bool lone = g->n_outvars == e->n_out;
  for (int k = 0; lone && k < e->n_out; k++) lone = g->outvars[k] == e->out[k];
  for (int k = 0; lone && k < e->n_in; k++) lone = kdist_invar_index(g, e->in[k]) >= 0;
  kiln_mesh *made = NULL;
  kiln_mesh *mesh = lone ? mesh_of(p->ctx, e->params.shard_map.mesh, eff, g->n_invars, &made) : NULL;
  if (!mesh) return lone ? kcore_fail_wrap(KILN_ERR_ARGUMENT, "jit: the mesh of %s",
                                           e->params.shard_map.mesh)
                         : KILN_OK;
  kdist_smap_plan *pl = calloc(1, sizeof *pl);
  kiln_status st = pl ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!st) {
    pl->ctx = p->ctx, pl->mesh = mesh, pl->n_in = e->n_in, pl->n_out = e->n_out;
    pl->leaf = calloc((size_t)e->n_in + 1, sizeof *pl->leaf);
    pl->in = calloc((size_t)e->n_in + 1, sizeof *pl->in);
    pl->out = calloc((size_t)e->n_out + 1, sizeof *pl->out);
    pl->gin = calloc((size_t)e->n_in + 1, sizeof *pl->gin);
    pl->gout = calloc((size_t)e->n_out + 1, sizeof *pl->gout);
    if (!pl->leaf || !pl->in || !pl->out || !pl->gin || !pl->gout)
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  }
  for (int k = 0; !st && k < e->n_in; k++) {
    pl->leaf[k] = kdist_invar_index(g, e->in[k]);
    pl->gin[k].aval = *kir_var_aval(g, e->in[k]);
    st = named(mesh, e->params.shard_map.in_specs, k, &pl->in[k]);
  }
  for (int k = 0; !st && k < e->n_out; k++) {
    pl->gout[k].aval = *kir_var_aval(g, e->out[k]);
    st = named(mesh, e->params.shard_map.out_specs, k, &pl->out[k]);
  }
  kiln_mesh_free(made); /* the shardings hold it */
  char *text = st ? NULL : kdist_shard_map_text(e, pl->gin, pl->gout);
  if (!st && !text) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!st) st = kir_parse(text, &pl->prog);
  free(text);
  if (st) kdist_smap_plan_free(pl);
  else *out = pl;
  return st;
}

static char no_data[1]; /* zero-size shards: never NULL */

static void *host_ptr(const kiln_array *a) {
  return a->buf.ptr && kiln_array_nbytes(a) ? (void *)a->buf.ptr : no_data;
}

kiln_status kdist_smap_call(const kdist_smap_plan *pl, const kir_eval_env *env,
                            kiln_array *const *args, kiln_array **res) {
  const kir_eqn *e = &pl->prog->eqns[0];
  const kir_program *body = e->params.shard_map.jaxpr;
  int64_t nd = pl->mesh->ndevices, nio = pl->n_in + pl->n_out;
  kiln_array **moved = calloc((size_t)pl->n_in + 1, sizeof *moved);
  kiln_array **outs = calloc((size_t)(nd * pl->n_out) + 1, sizeof *outs);
  void **local = calloc((size_t)(nd * nio) + 1, sizeof *local);
  kiln_status st = moved && outs && local ? KILN_OK
                   : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  for (int k = 0; !st && k < pl->n_in; k++) {
    if ((st = kiln_device_put_sharded(args[pl->leaf[k]], pl->in[k], &moved[k])))
      st = kcore_fail_wrap(st, "jit(shard_map): laying out operand %d as its in_spec", k);
    for (int64_t d = 0; !st && d < nd; d++) {
      kiln_array *s = moved[k]->shards->arrays[d];
      if (!(st = kiln_array_block_until_ready(s))) local[d * nio + k] = host_ptr(s);
    }
  }
  for (int k = 0; !st && k < pl->n_out; k++) {
    const kir_aval *a = kir_var_aval(body, body->outvars[k]);
    for (int64_t d = 0; !st && d < nd; d++) {
      kiln_array **o = &outs[(size_t)k * (size_t)nd + (size_t)d];
      st = kdev_array_alloc("jit(shard_map)", pl->mesh->devices[d], a->dtype, a->rank, a->shape, o);
      if (!st) local[d * nio + pl->n_in + k] = host_ptr(*o);
    }
  }
  if (!st) st = kdist_spmd_run_local(pl->ctx, env, e, pl->gin, pl->gout, local);
  for (int k = 0; !st && k < pl->n_out; k++) {
    const kir_aval *a = &pl->gout[k].aval;
    st = kiln_array_from_shards(pl->out[k], a->dtype, a->rank, a->shape,
                                outs + (size_t)k * (size_t)nd, &res[k]);
  }
  for (int k = 0; moved && k < pl->n_in; k++) kiln_array_release(moved[k]);
  for (int64_t i = 0; outs && i < nd * pl->n_out; i++) kiln_array_release(outs[i]);
  free(moved), free(outs), free(local);
  return st;
}
