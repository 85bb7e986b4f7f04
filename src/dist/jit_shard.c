/* jit over sharded arguments: the hooks src/runtime's jit calls when a
 * call has sharded leaves or the jit has in/out shardings. Every leaf runs
 * with its in_sharding, else its own sharding. A program with a shard_map
 * runs on the jit's device: its arguments are moved there first (device to
 * device) and each shard_map splits them by its in_specs; a program that is
 * one shard_map over CPU devices runs over its shards instead
 * (jit_shard_map.c). A program
 * without one, over named-sharded leaves, runs shard by shard: one
 * executable per mesh device (the kernels compiled once, through the
 * kernel cache), every device on its own thread over its own shards, the
 * results wrapped as sharded arrays; unsharded leaves are replicated over
 * the mesh first. Results then move to out_shardings where given. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"
#include "tree/tree.h"

typedef struct shard_opts {
  int n_in, n_out;
  kiln_sharding **in, **out; /* copies; an entry may be NULL */
} shard_opts;

typedef struct shard_plan {
  bool per_shard;
  kiln_ctx *ctx;
  int n_in, n_out;
  kiln_sharding **target;  /* per leaf: where it must be before the call; NULL: as it is */
  kiln_sharding **out_own; /* per result (per shard): the computed sharding */
  kiln_sharding **out_want;/* per result: out_shardings' entry, or NULL */
  kir_aval *out_avals;     /* global result types */
  kir_program *shard_prog; /* per shard, until compile takes it */
  const kiln_mesh *mesh;   /* per shard: borrowed from target shardings */
  kdev_exec **x;           /* per mesh device past the first (x[0] unused) */
  kdist_smap_plan *smap;   /* a lone shard_map run over its shards (jit_shard_map.c) */
} shard_plan;

/* ---- options ---- */

static void opts_free(void *p) {
  shard_opts *o = p;
  if (!o) return;
  for (int i = 0; i < o->n_in; i++) kiln_sharding_free(o->in[i]);
  for (int i = 0; i < o->n_out; i++) kiln_sharding_free(o->out[i]);
  free(o->in), free(o->out), free(o);
}

static kiln_status copy_list(kiln_ctx *ctx, const char *what, int n, const kiln_sharding *const *src,
                             kiln_sharding ***dst) {
  if (n < 0 || (n > 0 && !src))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_new: %d %s and the list %s", n, what,
                      src ? "given" : "NULL");
  if (!(*dst = calloc((size_t)n + 1, sizeof **dst)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_new: out of host memory");
  for (int i = 0; i < n; i++) {
    if (!src[i]) continue;
    for (int64_t d = 0; d < kiln_sharding_device_count(src[i]); d++)
      if (kiln_device_ctx(kiln_sharding_device(src[i], d)) != ctx)
        return kcore_fail(KILN_ERR_WRONG_DEVICE, "kiln_jit_new: %s[%d] lays out over a device of "
                          "another context", what, i);
    kiln_status st = kiln_sharding_copy(src[i], &(*dst)[i]);
    if (st) return st;
  }
  return KILN_OK;
}

static kiln_status opts_copy(kiln_ctx *ctx, const kiln_jit_options *o, void **out) {
  *out = NULL;
  shard_opts *s = calloc(1, sizeof *s);
  if (!s) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_new: out of host memory");
  kiln_status st = copy_list(ctx, "in_shardings", o->num_in_shardings, o->in_shardings, &s->in);
  if (!st) s->n_in = o->num_in_shardings;
  if (!st) st = copy_list(ctx, "out_shardings", o->num_out_shardings, o->out_shardings, &s->out);
  if (!st) s->n_out = o->num_out_shardings;
  if (st) {
    s->n_in = s->in ? o->num_in_shardings : 0; /* copy_list zeroed what it did not copy */
    s->n_out = s->out ? o->num_out_shardings : 0;
    opts_free(s);
    return st;
  }
  *out = s;
  return KILN_OK;
}

/* ---- the leaves' shardings ---- */

/* tops[i]: the top-level entry (argument or result) leaf i belongs to. */
static kiln_status top_entries(const kiln_tree *t, size_t n, int *tops, size_t *n_tops) {
  bool leaf = kiln_tree_kind(t) == KILN_NODE_LEAF;
  size_t nc = leaf ? 1 : kiln_tree_num_children(t), at = 0;
  for (size_t c = 0; c < nc; c++) {
    size_t count = leaf ? 1 : kiln_tree_num_leaves(kiln_tree_child(t, c));
    for (size_t k = 0; k < count && at < n; k++) tops[at++] = (int)c;
  }
  *n_tops = nc;
  return at == n ? KILN_OK : kcore_fail(KILN_ERR_INTERNAL, "jit: %zu of %zu leaves placed", at, n);
}

/* The entry of a list of shardings for top-level entry `top` (one entry
 * applies to all); checks the list's length. */
static kiln_status pick(const char *what, kiln_sharding *const *list, int n, size_t n_tops, int top,
                        const kiln_sharding **out) {
  *out = NULL;
  if (n == 0) return KILN_OK;
  if (n != 1 && (size_t)n != n_tops)
    return kcore_fail(KILN_ERR_TREE, "jit: %d %s for %zu top-level %s", n, what, n_tops,
                      what[0] == 'i' ? "arguments" : "results");
  *out = list[n == 1 ? 0 : top];
  return KILN_OK;
}

/* The borrowed array leaves of args and the sharding each runs with (its
 * in_sharding, else a sharded array's own; NULL: an ordinary array). */
static kiln_status leaf_shardings(const shard_opts *o, const kiln_tree *args, size_t n,
                                  kiln_array **arrays, const kiln_sharding **eff) {
  const kiln_leaf **leaves = calloc(n + 1, sizeof *leaves);
  int *tops = calloc(n + 1, sizeof *tops);
  size_t n_tops = 0;
  kiln_status st = leaves && tops ? KILN_OK
                                  : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!st) ktree_leaves_borrow(args, leaves, n);
  if (!st) st = top_entries(args, n, tops, &n_tops);
  for (size_t i = 0; !st && i < n; i++) {
    if (leaves[i]->kind != KILN_LEAF_ARRAY) {
      st = kcore_fail(KILN_ERR_TREE, "jit: argument leaf %zu is not an array", i);
      break;
    }
    arrays[i] = leaves[i]->u.array;
    if (o) st = pick("in_shardings", o->in, o->n_in, n_tops, tops[i], &eff[i]);
    if (!st && !eff[i]) eff[i] = kdist_array_sharding(arrays[i]);
  }
  free(leaves), free(tops);
  return st;
}

/* "P('data', None) over mesh(data=4, model=2) of devices 0,1,...": what a
 * cache key must tell apart. */
static size_t describe(const kiln_sharding *s, char *buf, size_t cap) {
  if (s->kind == KDIST_SINGLE)
    return (size_t)snprintf(buf, cap, "device %d", kiln_device_index(s->device));
  char spec[512];
  size_t n = (size_t)snprintf(buf, cap, "%s over mesh(", kiln_pspec_format(&s->spec, spec, sizeof spec));
  for (int a = 0; a < s->mesh->ndim && n < cap; a++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s=%lld", a ? ", " : "", s->mesh->names[a],
                          (long long)s->mesh->shape[a]);
  for (int64_t d = 0; d < s->mesh->ndevices && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%d", d ? "," : ") of devices ",
                          kiln_device_index(s->mesh->devices[d]));
  return n < cap ? n : cap;
}

static kiln_status layout(const void *opts, const kiln_func *f, const kiln_tree *args,
                          kiln_device *dev, char **out) {
  *out = NULL;
  size_t n = kiln_tree_num_leaves(args), cap = 64 + n * 1200, len = 0;
  kiln_array **arrays = calloc(n + 1, sizeof *arrays);
  const kiln_sharding **eff = calloc(n + 1, sizeof *eff);
  char *text = malloc(cap);
  kiln_status st = arrays && eff && text
                       ? leaf_shardings(opts, args, n, arrays, eff)
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  /* jit(shard_map) and jit(pmap) on host-memory (CPU) devices run over the mesh and
   * return sharded results even for ordinary arguments (jit_shard_map.c). */
  bool spmd = f && (kdist_is_shard_map(f) || kdist_is_pmap(f)) &&
              (kiln_device_ctx(dev)->be.caps & KDEV_CAP_HOST_MEMORY) != 0;
  bool any = opts != NULL || spmd;
  len = text ? (size_t)snprintf(text, cap, "%s%s", spmd ? "over its mesh, " : "",
                                opts ? "with in/out shardings: " : "")
             : 0;
  for (size_t i = 0; !st && i < n && len + 1 < cap; i++) {
    any = any || eff[i];
    len += (size_t)snprintf(text + len, cap - len, "%sleaf %zu: ", i ? "; " : "", i);
    if (len + 1 >= cap) break;
    if (eff[i]) len += describe(eff[i], text + len, cap - len);
    else len += (size_t)snprintf(text + len, cap - len, "as it is");
  }
  if (!st && any) *out = text, text = NULL;
  free(arrays), free(eff), free(text);
  return st;
}

/* ---- planning ---- */

static void plan_free(void *p) {
  shard_plan *pl = p;
  if (!pl) return;
  /* The executables first: the mesh lives as long as the target shardings. */
  for (int64_t d = 1; pl->x && pl->mesh && d < pl->mesh->ndevices; d++)
    if (pl->x[d]) pl->ctx->be.exec->free(pl->x[d]);
  for (int i = 0; pl->target && i < pl->n_in; i++) kiln_sharding_free(pl->target[i]);
  for (int k = 0; pl->out_own && k < pl->n_out; k++) kiln_sharding_free(pl->out_own[k]);
  for (int k = 0; pl->out_want && k < pl->n_out; k++) kiln_sharding_free(pl->out_want[k]);
  kir_program_free(pl->shard_prog);
  kdist_smap_plan_free(pl->smap);
  free(pl->target), free(pl->out_own), free(pl->out_want), free(pl->out_avals), free(pl->x);
  free(pl);
}

static void find_shard_map(kir_program *p, void *user) {
  for (int i = 0; i < p->n_eqns && !*(bool *)user; i++) {
    const kir_eqn *e = &p->eqns[i];
    if (e->prim == KIR_PRIM_SHARD_MAP) *(bool *)user = true;
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, find_shard_map, user);
  }
}

static bool same_mesh(const kiln_mesh *a, const kiln_mesh *b) {
  if (a == b) return true;
  if (a->ndim != b->ndim || a->ndevices != b->ndevices) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i] || strcmp(a->names[i], b->names[i])) return false;
  return !memcmp(a->devices, b->devices, (size_t)a->ndevices * sizeof *a->devices);
}

/* The named sharding of a split over mesh. */
static kiln_status split_sharding(kiln_mesh *mesh, const kdist_split *s, int rank,
                                  kiln_sharding **out) {
  kiln_pspec *spec = NULL;
  kiln_status st = kiln_pspec_new(&spec);
  for (int d = 0; !st && d < rank; d++) {
    const char *names[KILN_MESH_MAX_AXES];
    for (int k = 0; k < s->na[d]; k++) names[k] = mesh->names[s->ax[d][k]];
    st = kiln_pspec_append(spec, s->na[d], names);
  }
  if (!st) st = kiln_sharding_named(mesh, spec, out);
  kiln_pspec_free(spec);
  return st;
}

/* ---- shard_map operands laid out otherwise: a device_put each ---- */

/* Whether s lays a value out as ks over m, the mesh of a shard_map (the
 * context's first devices, in order). */
static bool laid_out_as(const kiln_sharding *s, const kir_mesh *m, const kir_spec *ks,
                        kiln_ctx *ctx) {
  if (s->kind != KDIST_NAMED || s->mesh->ndim != m->ndim) return false;
  for (int a = 0; a < m->ndim; a++)
    if (s->mesh->shape[a] != m->size[a] || strcmp(s->mesh->names[a], m->name[a])) return false;
  for (int64_t d = 0; d < s->mesh->ndevices; d++)
    if (s->mesh->devices[d] != &ctx->be.devices[d]) return false;
  int r = s->spec.rank > ks->rank ? s->spec.rank : ks->rank;
  for (int d = 0; d < r; d++) {
    int na = d < s->spec.rank ? s->spec.dims[d].naxes : 0, nk = d < ks->rank ? ks->n_axes[d] : 0;
    if (na != nk) return false;
    for (int k = 0; k < na; k++)
      if (s->axis_of[d][k] != ks->axes[d][k]) return false;
  }
  return true;
}

void kdist_nth_spec(const char *specs, int k, char *buf, size_t cap) {
  const char *p = specs, *end;
  for (int i = 0; i < k && p; i++) p = (p = strstr(p, " | ")) ? p + 3 : NULL;
  if (!p) p = "";
  end = strstr(p, " | ");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

int kdist_invar_index(const kir_program *g, kir_vid v) {
  for (int i = 0; i < g->n_invars; i++)
    if (g->invars[i] == v) return i;
  return -1;
}

/* Moves the equations from n0 on (they read invars only) to the front. */
static kiln_status rotate_front(kir_program *g, int n0) {
  int n = g->n_eqns, added = n - n0;
  kir_eqn *tmp = malloc((size_t)n * sizeof *tmp);
  if (!tmp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  memcpy(tmp, g->eqns + n0, (size_t)added * sizeof *tmp);
  memcpy(tmp + added, g->eqns, (size_t)n0 * sizeof *tmp);
  memcpy(g->eqns, tmp, (size_t)n * sizeof *tmp);
  free(tmp);
  for (kir_vid v = 0; v < g->n_vars; v++)
    if (g->vars[v].kind == KIR_VAR_EQN) g->vars[v].eqn += g->vars[v].eqn >= n0 ? -n0 : added;
  return KILN_OK;
}

/* A device_put[mesh spec] before every top-level shard_map operand that is
 * an argument laid out otherwise than the operand's in_spec: the transfer
 * the IR shows (the call moves the argument to the jit's device, and the
 * shard_map splits it by its in_specs). */
static kiln_status put_before_shard_maps(krt_program *p, const kiln_sharding *const *eff) {
  kir_program *g = p->prog;
  int n0 = g->n_eqns;
  kiln_status st = KILN_OK;
  for (int i = 0; !st && i < n0; i++) {
    if (g->eqns[i].prim != KIR_PRIM_SHARD_MAP) continue;
    const char *mesh = g->eqns[i].params.shard_map.mesh, *in_specs = g->eqns[i].params.shard_map.in_specs;
    int n_in = g->eqns[i].n_in;
    kir_mesh m;
    kir_spec *specs = malloc((size_t)(n_in + 1) * sizeof *specs);
    st = specs ? kir_mesh_parse("jit", mesh, &m)
               : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
    if (!st) st = kir_specs_parse("jit", in_specs, &m, n_in, specs);
    for (int k = 0; !st && k < n_in; k++) {
      kir_vid v = g->eqns[i].in[k];
      int leaf = kdist_invar_index(g, v);
      if (leaf < 0 || !eff[leaf] || laid_out_as(eff[leaf], &m, &specs[k], p->ctx)) continue;
      char spec[1024];
      kdist_nth_spec(in_specs, k, spec, sizeof spec);
      kir_params prm;
      memset(&prm, 0, sizeof prm);
      prm.device_put = (kir_p_device_put){mesh, spec};
      int at;
      if (!(st = kir_add_eqn(g, KIR_PRIM_DEVICE_PUT, &prm, 1, &v, &at)))
        g->eqns[i].in[k] = g->eqns[at].out[0];
    }
    free(specs);
  }
  if (!st && g->n_eqns > n0) st = rotate_front(g, n0);
  return st ? st : kir_verify(g);
}

/* Per shard: every leaf over the one mesh of the named ones (the others
 * replicated over it), the per-shard program and the results' shardings. */
static kiln_status plan_per_shard(shard_plan *pl, krt_program *p, const kiln_sharding **eff,
                                  kiln_mesh *mesh) {
  const kir_program *g = p->prog;
  kdist_split *in = calloc((size_t)pl->n_in + 1, sizeof *in);
  kdist_split *outs = calloc((size_t)pl->n_out + 1, sizeof *outs);
  pl->x = calloc((size_t)mesh->ndevices, sizeof *pl->x);
  kiln_status st = in && outs && pl->x ? KILN_OK
                   : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  char s1[1200], s2[1200];
  int first = 0;
  while (!eff[first] || eff[first]->kind != KDIST_NAMED) first++;
  for (int i = 0; !st && i < pl->n_in; i++) {
    const kiln_sharding *e = eff[i];
    const kir_aval *a = kir_var_aval(g, g->invars[i]);
    int64_t shard[KILN_MAX_RANK];
    if (e && e->kind == KDIST_NAMED && !same_mesh(e->mesh, mesh)) {
      describe(e, s1, sizeof s1);
      describe(eff[first], s2, sizeof s2);
      st = kcore_fail(KILN_ERR_ARGUMENT, "jit(%s): argument leaf %d is laid out as %s and leaf %d "
                      "as %s: per-shard execution needs one mesh", p->f->name, i, s1, first, s2);
      break;
    }
    if (e && e->kind == KDIST_NAMED) {
      st = kiln_sharding_copy(e, &pl->target[i]);
      for (int d = 0; !st && d < e->spec.rank && d < a->rank; d++) {
        in[i].na[d] = (int8_t)e->spec.dims[d].naxes;
        for (int k = 0; k < in[i].na[d]; k++) in[i].ax[d][k] = (int8_t)e->axis_of[d][k];
      }
    } else {
      st = kiln_sharding_replicated(mesh, &pl->target[i]);
    }
    if (!st && (st = kiln_sharding_shard_shape(pl->target[i], a->rank, a->shape, shard)))
      st = kcore_fail_wrap(st, "jit(%s): argument leaf %d", p->f->name, i);
  }
  if (!st) st = kdist_shard_program(p->f->name, mesh, g, in, outs, &pl->shard_prog);
  for (int k = 0; !st && k < pl->n_out; k++)
    st = split_sharding(mesh, &outs[k], pl->out_avals[k].rank, &pl->out_own[k]);
  pl->mesh = mesh;
  free(in), free(outs);
  return st;
}

/* Donation needs the argument's own memory where the program reads it:
 * per shard, its shards as they are; on the jit's device, the array
 * itself. Donated leaves moved first are not donated (one warning, as
 * JAX's "Some donated buffers were not usable"). */
static void keep_donations(const shard_plan *pl, krt_program *p, kiln_array *const *arrays) {
  char list[256] = "";
  size_t len = 0;
  int dropped = 0;
  for (int i = 0; !pl->smap && i < pl->n_in; i++) {
    const kiln_sharding *own = kdist_array_sharding(arrays[i]);
    bool keep = pl->per_shard ? own && kiln_sharding_equal(own, pl->target[i]) : !pl->target[i];
    if (!p->donated[i] || keep) continue;
    p->donated[i] = false;
    if (len < sizeof list - 16)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", dropped ? ", " : "", i);
    dropped++;
  }
  if (dropped)
    KRT_LOG(p->ctx, KILN_LOG_WARN, "jit(%s): %d donated argument leaves (%s%s) are moved or "
            "resharded before the call: not donated", p->f->name, dropped, list,
            len >= sizeof list - 16 ? ", ..." : "");
}

static kiln_status prepare(const void *opts, const kiln_tree *args, krt_program *p) {
  const shard_opts *o = opts;
  shard_plan *pl = calloc(1, sizeof *pl);
  size_t n = (size_t)p->sig.n;
  kiln_array **arrays = calloc(n + 1, sizeof *arrays);
  const kiln_sharding **eff = calloc(n + 1, sizeof *eff);
  kiln_status st = pl && arrays && eff ? KILN_OK
                   : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!st) {
    pl->ctx = p->ctx, pl->n_in = p->sig.n, pl->n_out = p->n_out;
    pl->target = calloc(n + 1, sizeof *pl->target);
    pl->out_own = calloc((size_t)pl->n_out + 1, sizeof *pl->out_own);
    pl->out_want = calloc((size_t)pl->n_out + 1, sizeof *pl->out_want);
    pl->out_avals = calloc((size_t)pl->n_out + 1, sizeof *pl->out_avals);
    if (!pl->target || !pl->out_own || !pl->out_want || !pl->out_avals)
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  }
  if (!st) st = leaf_shardings(o, args, n, arrays, eff);
  for (int k = 0; !st && k < pl->n_out; k++)
    pl->out_avals[k] = *kir_var_aval(p->prog, p->prog->outvars[k]);
  /* out_shardings: one per top-level result (or one for all). */
  kiln_leaf *dummy = st ? NULL : calloc((size_t)pl->n_out + 1, sizeof *dummy);
  kiln_tree *res = NULL;
  int *tops = st ? NULL : calloc((size_t)pl->n_out + 1, sizeof *tops);
  size_t n_tops = 0;
  if (!st && (!dummy || !tops)) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  for (int k = 0; !st && k < pl->n_out; k++) dummy[k] = (kiln_leaf){.kind = KILN_LEAF_PTR};
  if (!st) st = kiln_tree_unflatten(p->out_def, dummy, (size_t)pl->n_out, &res);
  if (!st) st = top_entries(res, (size_t)pl->n_out, tops, &n_tops);
  for (int k = 0; !st && o && k < pl->n_out; k++) {
    const kiln_sharding *w = NULL;
    if (!(st = pick("out_shardings", o->out, o->n_out, n_tops, tops[k], &w)) && w)
      st = kiln_sharding_copy(w, &pl->out_want[k]);
  }
  kiln_tree_free(res), free(dummy), free(tops);
  bool smap = false;
  if (!st) find_shard_map(p->prog, &smap);
  kiln_mesh *mesh = NULL;
  for (size_t i = 0; !st && i < n && !mesh; i++)
    if (eff[i] && eff[i]->kind == KDIST_NAMED) mesh = eff[i]->mesh;
  if (!st && smap) st = kdist_smap_plan_new(p, eff, &pl->smap);
  pl->per_shard = !st && !smap && mesh;
  if (pl->per_shard) {
    st = plan_per_shard(pl, p, eff, mesh);
  } else { /* on the jit's device (unless over the shards): the leaves with a sharding come there */
    for (size_t i = 0; !st && !pl->smap && i < n; i++)
      if (eff[i]) st = kiln_sharding_single(p->dev, &pl->target[i]);
    if (!st && smap) st = put_before_shard_maps(p, eff);
  }
  if (!st) keep_donations(pl, p, arrays);
  free(arrays), free(eff);
  if (st) {
    plan_free(pl);
    return st;
  }
  p->shard_state = pl;
  return KILN_OK;
}

/* ---- compiling ---- */

static kiln_status compile(krt_program *p, kiln_compiled *c) {
  shard_plan *pl = p->shard_state;
  if (!pl->per_shard) return krt_compile(p, c, true);
  kir_program_free(p->prog); /* the global program's types were planned; the shards run this */
  p->prog = pl->shard_prog;
  pl->shard_prog = NULL;
  p->dev = pl->mesh->devices[0];
  for (int i = 0; i < p->sig.n; i++) /* what each device's call is checked against */
    p->sig.avals[i] = *kir_var_aval(p->prog, p->prog->invars[i]);
  kiln_status st = krt_compile(p, c, true);
  if (st || !c->exec) return st; /* the reference executor needs nothing per device */
  kcache *cache = NULL;
  st = krt_ctx_kcache(pl->ctx, &cache);
  char name[160];
  snprintf(name, sizeof name, "jit(%s) per shard", p->f ? p->f->name : "f");
  kdev_build b = {.name = name, .prog = c->p.prog, .donated = c->p.donated, .env = &c->env,
                  .cache = cache, .config = &pl->ctx->config};
  for (int64_t d = 1; !st && d < pl->mesh->ndevices; d++)
    st = pl->ctx->be.exec->build(pl->mesh->devices[d], &b, &pl->x[d]);
  if (st) {
    krt_compiled_release(c);
    return kcore_fail_wrap(st, "%s", name);
  }
  return KILN_OK;
}

/* ---- calling ---- */

typedef struct device_call {
  kiln_compiled c; /* the program's, with this device and executable */
  kiln_array **in, **out;
  kiln_status st;
  char msg[1024];
} device_call;

static void *device_main(void *arg) {
  device_call *dc = arg;
  dc->st = krt_execute(&dc->c, dc->in, dc->out);
  if (dc->st) snprintf(dc->msg, sizeof dc->msg, "%s", kiln_last_error());
  return NULL;
}

/* Runs every device's shards on its own thread; outs[k * nd + d] gets
 * device d's result k. */
static kiln_status run_shards(const kiln_compiled *c, const shard_plan *pl, kiln_array *const *moved,
                              kiln_array **outs) {
  int64_t nd = pl->mesh->ndevices;
  int n_in = pl->n_in, n_out = pl->n_out;
  device_call *dc = calloc((size_t)nd, sizeof *dc);
  kiln_array **ins = calloc((size_t)(nd * n_in) + 1, sizeof *ins);
  kiln_array **o = calloc((size_t)(nd * n_out) + 1, sizeof *o);
  pthread_t *th = calloc((size_t)nd, sizeof *th);
  kiln_status st = dc && ins && o && th ? KILN_OK
                   : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  int64_t started = 0;
  for (int64_t d = 0; !st && d < nd; d++, started++) {
    dc[d].c = *c;
    dc[d].c.p.dev = pl->mesh->devices[d];
    dc[d].c.exec = d ? pl->x[d] : c->exec;
    dc[d].in = ins + d * n_in, dc[d].out = o + d * n_out;
    for (int i = 0; i < n_in; i++) dc[d].in[i] = moved[i]->shards->arrays[d];
    if (pthread_create(&th[d], NULL, device_main, &dc[d])) {
      st = kcore_fail(KILN_ERR_INTERNAL, "jit: cannot start the thread of device %lld", (long long)d);
      break;
    }
  }
  for (int64_t d = 0; d < started; d++) pthread_join(th[d], NULL);
  for (int64_t d = 0; !st && d < nd; d++)
    if (dc[d].st) st = kcore_fail(dc[d].st, "jit per shard, on %s: %s", pl->mesh->devices[d]->info.name, dc[d].msg);
  for (int64_t d = 0; o && d < nd; d++)
    for (int k = 0; k < n_out; k++) {
      if (!st) outs[k * nd + d] = o[d * n_out + k];
      else kiln_array_release(o[d * n_out + k]);
    }
  free(dc), free(ins), free(o), free(th);
  return st;
}

/* Result k from the devices' pieces, sharded as the plan computed. */
static kiln_status wrap_result(const shard_plan *pl, int k, kiln_array *const *pieces, kiln_array **out) {
  const kir_aval *a = &pl->out_avals[k];
  kdist_layout l;
  kiln_status st = kdist_layout_new("jit", pl->out_own[k], a->rank, a->shape, &l);
  if (!st) st = kdist_wrap_shards("jit", pl->out_own[k], &l, a->dtype, a->shape, pieces, out);
  kdist_layout_free(&l);
  return st;
}

static kiln_status call(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out) {
  const shard_plan *pl = c->p.shard_state;
  int n = pl->n_in, n_out = pl->n_out;
  int64_t nd = pl->per_shard ? pl->mesh->ndevices : 1;
  const kiln_leaf **leaves = calloc((size_t)n + 1, sizeof *leaves);
  kiln_array **moved = calloc((size_t)n + 1, sizeof *moved);
  kiln_array **pieces = calloc((size_t)(n_out * nd) + 1, sizeof *pieces);
  kiln_array **res = calloc((size_t)n_out + 1, sizeof *res);
  kiln_leaf *ol = calloc((size_t)n_out + 1, sizeof *ol);
  kiln_status st = leaves && moved && pieces && res && ol
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit: out of host memory");
  if (!st) ktree_leaves_borrow(args, leaves, (size_t)n);
  for (int i = 0; !st && i < n; i++) {
    kiln_array *a = leaves[i]->u.array;
    if (pl->target[i]) st = kiln_device_put_sharded(a, pl->target[i], &moved[i]);
    else kiln_array_retain(moved[i] = a);
    if (st) st = kcore_fail_wrap(st, "jit(%s): resharding argument leaf %d", c->p.f->name, i);
  }
  if (!st && pl->smap) st = kdist_smap_call(pl->smap, &c->env, moved, res);
  else if (!st && pl->per_shard) st = run_shards(c, pl, moved, pieces);
  else if (!st) st = krt_execute(c, moved, res);
  for (int i = 0; !st && pl->per_shard && i < n; i++) /* its shards went with each device's call */
    if (c->p.donated[i]) kiln_array_delete(leaves[i]->u.array);
  for (int k = 0; !st && pl->per_shard && k < n_out; k++) st = wrap_result(pl, k, pieces + k * nd, &res[k]);
  for (int k = 0; !st && k < n_out; k++) {
    kiln_array *r = NULL;
    if (pl->out_want[k] && (st = kiln_device_put_sharded(res[k], pl->out_want[k], &r)))
      st = kcore_fail_wrap(st, "jit(%s): putting result leaf %d where out_shardings say", c->p.f->name, k);
    if (r) kiln_array_release(res[k]), res[k] = r;
    ol[k] = (kiln_leaf){.kind = KILN_LEAF_ARRAY, .u.array = res[k]};
  }
  if (!st) st = kiln_tree_unflatten(c->p.out_def, ol, (size_t)n_out, out);
  for (int i = 0; moved && i < n; i++) kiln_array_release(moved[i]);
  for (int k = 0; pieces && k < n_out * nd; k++) kiln_array_release(pieces[k]);
  for (int k = 0; res && k < n_out; k++) kiln_array_release(res[k]);
  free(leaves), free(moved), free(pieces), free(res), free(ol);
  return st;
}

static const krt_shard_hooks hooks = {opts_copy, opts_free, layout, prepare, compile, call, plan_free};

void kdist_jit_install(kiln_ctx *ctx) { atomic_store(&ctx->shard_hooks, &hooks); }
