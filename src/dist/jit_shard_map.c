/* jit of a lone shard_map over sharded arguments on CPU devices, run as JAX
 * runs it: each operand is laid out as its in_spec (kept as it is when it
 * already is: replicated params stay one copy per device, no gather), every
 * device's program reads its own shards and writes new ones, and the
 * results are sharded arrays with NamedSharding(mesh, out_spec) (replicated
 * for P()), so that feeding them to the next call moves nothing. Programs
 * with anything else around the shard_map keep the path of jit_shard.c.
 * Donated operands (donate_argnums) give each device's shard to that
 * device's results, as jax.jit(shard_map, donate_argnums) does. */
#include <stdatomic.h>
#include <stdio.h>
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
  int n_leaves;
  bool *donate;       /* per operand: its leaf is donated and read by it alone */
  bool *drop;         /* per leaf: donated and read by no operand (deleted after a call) */
  atomic_bool warned; /* about a donated leaf that had to be resharded */
  kiln_sharding **in, **out; /* per operand, per result */
  kir_buffer *gin, *gout;    /* the global types (no data) */
};

void kdist_smap_plan_free(kdist_smap_plan *pl) {
  if (!pl) return;
  for (int k = 0; pl->in && k < pl->n_in; k++) kiln_sharding_free(pl->in[k]);
  for (int k = 0; pl->out && k < pl->n_out; k++) kiln_sharding_free(pl->out[k]);
  kir_program_free(pl->prog);
  free(pl->leaf), free(pl->donate), free(pl->drop), free(pl->in), free(pl->out), free(pl->gin);
  free(pl->gout), free(pl);
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
  if (!(p->ctx->be.caps & KDEV_CAP_HOST_MEMORY) || g->n_eqns != 1 || g->eqns[0].prim != KIR_PRIM_SHARD_MAP)
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
    pl->n_leaves = g->n_invars;
    pl->leaf = calloc((size_t)e->n_in + 1, sizeof *pl->leaf);
    pl->donate = calloc((size_t)e->n_in + 1, sizeof *pl->donate);
    pl->drop = calloc((size_t)g->n_invars + 1, sizeof *pl->drop);
    pl->in = calloc((size_t)e->n_in + 1, sizeof *pl->in);
    pl->out = calloc((size_t)e->n_out + 1, sizeof *pl->out);
    pl->gin = calloc((size_t)e->n_in + 1, sizeof *pl->gin);
    pl->gout = calloc((size_t)e->n_out + 1, sizeof *pl->gout);
    if (!pl->leaf || !pl->donate || !pl->drop || !pl->in || !pl->out || !pl->gin || !pl->gout)
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  }
  for (int k = 0; !st && k < e->n_in; k++) {
    pl->leaf[k] = kdist_invar_index(g, e->in[k]);
    pl->gin[k].aval = *kir_var_aval(g, e->in[k]);
    st = named(mesh, e->params.shard_map.in_specs, k, &pl->in[k]);
  }
  for (int i = 0; !st && i < g->n_invars; i++) { /* operands of one donated leaf each */
    int readers = 0, last = -1;
    for (int k = 0; k < e->n_in; k++)
      if (pl->leaf[k] == i) readers++, last = k;
    if (p->donated[i] && readers == 1) pl->donate[last] = true;
    pl->drop[i] = p->donated[i] && readers == 0;
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

/* Whether a's shards are x's, device for device (x laid out from a
 * without a copy). */
static bool same_shards(const kiln_array *a, const kiln_array *x) {
  if (a == x) return true;
  if (!a->shards || !x->shards || a->shards->count != x->shards->count) return false;
  for (int64_t d = 0; d < a->shards->count; d++)
    if (a->shards->arrays[d] != x->shards->arrays[d]) return false;
  return true;
}

/* As a single-device jit: a donated leaf passed again (or another array
 * over its shards) is an error. */
static kiln_status check_donated(const kdist_smap_plan *pl, kiln_array *const *args) {
  for (int k = 0; k < pl->n_in; k++) {
    int i = pl->leaf[k];
    for (int j = 0; pl->donate[k] && j < pl->n_leaves; j++)
      if (j != i && (args[i] == args[j] ||
                     (args[i]->shards && args[j]->shards &&
                      args[i]->shards->arrays[0] == args[j]->shards->arrays[0])))
        return kcore_fail(KILN_ERR_ARGUMENT, "jit(shard_map): donated argument leaf %d is also "
                          "passed as leaf %d", i, j);
  }
  return KILN_OK;
}

/* Donated operand k's shards are its argument's (else that was resharded:
 * the copy is donated, the argument kept, as JAX warns). */
static kiln_status own_shards(const kdist_smap_plan *pl, kiln_array *const *args,
                              kiln_array *const *moved, int k, bool *own) {
  kiln_array *a = args[pl->leaf[k]];
  *own = same_shards(a, moved[k]);
  if (!*own && !atomic_exchange(&((kdist_smap_plan *)pl)->warned, true)) {
    char t[200];
    kiln_array_describe(a, t, sizeof t);
    kcore_log(pl->ctx->config.opts.log_level, KILN_LOG_WARN, "jit(shard_map): donated argument "
              "leaf %d (%s) is laid out otherwise than its in_spec: resharded and not donated",
              pl->leaf[k], t);
  }
  for (int64_t d = 0; *own && d < pl->mesh->ndevices; d++) {
    kiln_status st =
        kdev_array_check_donation("jit(shard_map)", moved[k]->shards->arrays[d], pl->leaf[k]);
    if (st) return st;
  }
  return KILN_OK;
}

kiln_status kdist_smap_call(const kdist_smap_plan *pl, const kir_eval_env *env,
                            kiln_array *const *args, kiln_array **res) {
  const kir_eqn *e = &pl->prog->eqns[0];
  const kir_program *body = e->params.shard_map.jaxpr;
  int64_t nd = pl->mesh->ndevices, nio = pl->n_in + pl->n_out;
  kiln_array **moved = calloc((size_t)pl->n_in + 1, sizeof *moved);
  kiln_array **outs = calloc((size_t)(nd * pl->n_out) + 1, sizeof *outs);
  void **local = calloc((size_t)(nd * nio) + 1, sizeof *local);
  int *donor = calloc((size_t)pl->n_out + 1, sizeof *donor);
  bool *own = calloc((size_t)pl->n_in + 1, sizeof *own);
  kiln_status st = moved && outs && local && donor && own
                       ? check_donated(pl, args)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  for (int k = 0; !st && k < pl->n_in; k++) {
    if ((st = kiln_device_put_sharded(args[pl->leaf[k]], pl->in[k], &moved[k])))
      st = kcore_fail_wrap(st, "jit(shard_map): laying out operand %d as its in_spec", k);
    if (!st && pl->donate[k]) st = own_shards(pl, args, moved, k, &own[k]);
    for (int64_t d = 0; !st && d < nd; d++) {
      kiln_array *s = moved[k]->shards->arrays[d];
      if (!(st = kiln_array_block_until_ready(s))) local[d * nio + k] = host_ptr(s);
    }
  }
  if (!st) st = kdist_spmd_donors(pl->ctx, e, pl->gin, pl->gout, pl->donate, donor);
  for (int k = 0; !st && k < pl->n_out; k++) {
    const kir_aval *a = kir_var_aval(body, body->outvars[k]);
    for (int64_t d = 0; !st && d < nd; d++) {
      kiln_array **o = &outs[(size_t)k * (size_t)nd + (size_t)d];
      if (donor[k] >= 0 && kir_aval_size(a) > 0) /* written over the donor's shard */
        local[d * nio + pl->n_in + k] = local[d * nio + donor[k]];
      else if (!(st = kdev_array_alloc("jit(shard_map)", pl->mesh->devices[d], a->dtype, a->rank,
                                       a->shape, o)))
        local[d * nio + pl->n_in + k] = host_ptr(*o);
    }
  }
  if (!st) st = kdist_spmd_run_local(pl->ctx, env, e, pl->gin, pl->gout, pl->donate, local);
  for (int k = 0; !st && k < pl->n_out; k++) {
    const kir_aval *a = kir_var_aval(body, body->outvars[k]);
    for (int64_t d = 0; !st && d < nd; d++) {
      kiln_array **o = &outs[(size_t)k * (size_t)nd + (size_t)d];
      if (!*o) /* the donor's shard becomes the result's */
        st = kdev_array_take_buffer(moved[donor[k]]->shards->arrays[d], a->dtype, a->rank,
                                    a->shape, o);
    }
  }
  for (int k = 0; !st && k < pl->n_out; k++) {
    const kir_aval *a = &pl->gout[k].aval;
    st = kiln_array_from_shards(pl->out[k], a->dtype, a->rank, a->shape,
                                outs + (size_t)k * (size_t)nd, &res[k]);
  }
  for (int k = 0; !st && k < pl->n_in; k++)
    if (own[k]) kiln_array_delete(args[pl->leaf[k]]);
  for (int i = 0; !st && i < pl->n_leaves; i++)
    if (pl->drop[i]) kiln_array_delete(args[i]);
  for (int k = 0; moved && k < pl->n_in; k++) kiln_array_release(moved[k]);
  for (int64_t i = 0; outs && i < nd * pl->n_out; i++) kiln_array_release(outs[i]);
  free(moved), free(outs), free(local), free(donor), free(own);
  return st;
}
