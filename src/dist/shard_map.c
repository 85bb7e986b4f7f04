/* kiln_shard_map (jax.shard_map): the body is traced once over per-shard
 * types, with the mesh's axes bound for its collectives, and becomes one
 * shard_map equation of the calling trace. Spec trees are matched as
 * prefixes of the argument and result trees; with check_rep, a result
 * whose out_spec leaves an axis out must be provably replicated over it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "trace/trace.h"

typedef struct kdist_smap {
  const kiln_func *f; /* borrowed */
  kiln_mesh *mesh;    /* borrowed */
  kiln_tree *in_specs, *out_specs; /* clones; their PTR leaves point into specs */
  kiln_pspec **specs;
  int n_specs;
  bool check_rep;
  kir_mesh km;   /* the mesh's axes as the IR spells them */
  char mesh_text[KILN_MESH_MAX_AXES * (KDIST_NAME_MAX + 24)];
} kdist_smap;

static void smap_drop(void *user) {
  kdist_smap *s = user;
  if (!s) return;
  kiln_tree_free(s->in_specs);
  kiln_tree_free(s->out_specs);
  for (int i = 0; i < s->n_specs; i++) kiln_pspec_free(s->specs[i]);
  free(s->specs);
  free(s);
}

/* ---- spec trees ---- */

/* Replaces every spec leaf of a cloned tree by an owned copy. */
static kiln_status copy_spec_leaf(const kiln_leaf *const *leaves, size_t n_trees, void *user,
                                  kiln_leaf *out) {
  (void)n_trees;
  kdist_smap *s = user;
  if (leaves[0]->kind != KILN_LEAF_PTR || !leaves[0]->u.ptr)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_shard_map: a spec leaf is not a kiln_pspec pointer");
  kiln_pspec **grown = realloc(s->specs, (size_t)(s->n_specs + 1) * sizeof *grown);
  if (!grown) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_shard_map: out of host memory");
  s->specs = grown;
  kiln_pspec *copy = malloc(sizeof *copy);
  if (!copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_shard_map: out of host memory");
  memcpy(copy, leaves[0]->u.ptr, sizeof *copy);
  s->specs[s->n_specs++] = copy;
  *out = (kiln_leaf){.kind = KILN_LEAF_PTR, .u.ptr = copy};
  return KILN_OK;
}

/* Spreads a spec tree (a prefix of `full`) over full's leaves: out[i] is
 * the spec of full's leaf i. */
typedef struct spread {
  const kiln_pspec **out;
  size_t n, cap;
} spread;

static kiln_status spread_leaf(const kiln_leaf *const *leaves, size_t n_trees, void *user,
                               kiln_leaf *out) {
  (void)n_trees;
  spread *sp = user;
  size_t count = 1;
  if (leaves[1]->kind == KILN_LEAF_TREE) {
    kiln_status st = kiln_tree_flatten(leaves[1]->u.tree, NULL, NULL, NULL, &count, NULL);
    if (st) return st;
  }
  for (size_t k = 0; k < count; k++) {
    if (sp->n == sp->cap) return kcore_fail(KILN_ERR_TREE, "shard_map: spec tree has too many leaves");
    sp->out[sp->n++] = leaves[0]->u.ptr;
  }
  *out = (kiln_leaf){.kind = KILN_LEAF_PTR, .u.ptr = NULL};
  return KILN_OK;
}

static kiln_status spread_specs(const char *what, const kiln_tree *specs, const kiln_tree *full,
                                size_t n, const kiln_pspec **out) {
  spread sp = {out, 0, n};
  kiln_tree *ignored = NULL;
  const kiln_tree *trees[2] = {specs, full};
  kiln_status st = kiln_tree_map(spread_leaf, &sp, 2, trees, &ignored);
  kiln_tree_free(ignored);
  if (st) return kcore_fail_wrap(st, "shard_map: %s do not match the %s", what,
                                 what[0] == 'i' ? "arguments" : "results");
  if (sp.n != n)
    return kcore_fail(KILN_ERR_TREE, "shard_map: %s cover %zu of %zu leaves", what, sp.n, n);
  return KILN_OK;
}

/* The spec as kir_specs_parse reads it: "data, None", "(data, model)". */
static void spec_text(const kiln_pspec *p, char *buf, size_t cap, size_t *n) {
  for (int d = 0; d < kiln_pspec_rank(p); d++) {
    int na = kiln_pspec_entry_axes(p, d);
    *n += (size_t)snprintf(buf + *n, cap - *n, "%s%s", d ? ", " : "", na == 0 ? "None" : na > 1 ? "(" : "");
    for (int k = 0; k < na; k++)
      *n += (size_t)snprintf(buf + *n, cap - *n, "%s%s", k ? ", " : "", kiln_pspec_entry_axis(p, d, k));
    if (na > 1) *n += (size_t)snprintf(buf + *n, cap - *n, ")");
  }
}

static char *specs_text(int n, const kiln_pspec *const *specs) {
  size_t cap = 16 + (size_t)n * (KILN_SPEC_MAX_RANK * (KILN_MESH_MAX_AXES * (KDIST_NAME_MAX + 2) + 8) + 4);
  char *buf = malloc(cap);
  if (!buf) return NULL;
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) len += (size_t)snprintf(buf + len, cap - len, " | ");
    spec_text(specs[i], buf, cap, &len);
  }
  return buf;
}

/* How many ways spec entry d splits (the product of its axes' sizes);
 * names the leaf, the spec and the shape when the dimension does not divide. */
static kiln_status split_dim(const kdist_smap *s, const kiln_pspec *p, const char *path,
                             const kir_aval *a, int d, bool divide, int64_t *ways) {
  char sp[512], t[KIR_AVAL_STR_CAP];
  *ways = 1;
  for (int k = 0; d < kiln_pspec_rank(p) && k < kiln_pspec_entry_axes(p, d); k++) {
    int ax = kiln_mesh_axis_index(s->mesh, kiln_pspec_entry_axis(p, d, k));
    if (ax < 0)
      return kcore_fail(KILN_ERR_ARGUMENT, "shard_map: %s at %s names axis '%s', which the mesh "
                        "lacks", kiln_pspec_format(p, sp, sizeof sp), path,
                        kiln_pspec_entry_axis(p, d, k));
    *ways *= kiln_mesh_axis_size(s->mesh, ax);
  }
  if (divide && d < a->rank && a->shape[d] % *ways)
    return kcore_fail(KILN_ERR_SHAPE, "shard_map: %s at %s splits dimension %d of %s (size %lld) "
                      "%lld ways, which does not divide it", kiln_pspec_format(p, sp, sizeof sp),
                      path, d, kir_aval_str(a, t, sizeof t), (long long)a->shape[d],
                      (long long)*ways);
  if (kiln_pspec_rank(p) > a->rank)
    return kcore_fail(KILN_ERR_SHAPE, "shard_map: %s at %s has more entries than %s has "
                      "dimensions", kiln_pspec_format(p, sp, sizeof sp), path,
                      kir_aval_str(a, t, sizeof t));
  return KILN_OK;
}

static kiln_status resize(const kdist_smap *s, const kiln_pspec *p, const char *path,
                          const kir_aval *a, bool shrink, kir_aval *out) {
  *out = *a;
  for (int d = 0; d < a->rank || d < kiln_pspec_rank(p); d++) {
    int64_t ways;
    kiln_status st = split_dim(s, p, path, a, d, shrink, &ways);
    if (st) return st;
    if (d < a->rank) out->shape[d] = shrink ? a->shape[d] / ways : a->shape[d] * ways;
  }
  return KILN_OK;
}

/* ---- the replication check ---- */

static unsigned axes_mask(const kir_mesh *m, const char *names) {
  int n, axes[KIR_MESH_MAX_AXES];
  unsigned mask = 0;
  if (kir_axes_parse("shard_map", names, m, &n, axes)) {
    kiln_clear_error();
    return 0; /* an axis of an inner shard_map: not ours */
  }
  for (int k = 0; k < n; k++) mask |= 1u << axes[k];
  return mask;
}

typedef struct nested_axes {
  const kir_mesh *m;
  unsigned mask;
} nested_axes;

static void nested_visit(kir_program *sub, void *user) {
  nested_axes *na = user;
  for (int i = 0; i < sub->n_eqns; i++) {
    const kir_eqn *e = &sub->eqns[i];
    const char *names = kir_collective_axes(e, NULL);
    if (names) na->mask |= axes_mask(na->m, names);
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, nested_visit, user);
  }
}

/* vary[v]: the mesh axes over which body var v may differ between devices. */
static void vary_axes(const kir_mesh *m, const kir_program *body, unsigned *vary) {
  for (int i = 0; i < body->n_eqns; i++) {
    const kir_eqn *e = &body->eqns[i];
    unsigned in = 0, out;
    for (int k = 0; k < e->n_in; k++) in |= vary[e->in[k]];
    const char *names = kir_collective_axes(e, NULL);
    unsigned ax = names ? axes_mask(m, names) : 0;
    switch (e->prim) {
      case KIR_PRIM_PSUM:
      case KIR_PRIM_PMAX:
      case KIR_PRIM_PMIN: out = in & ~ax; break;
      /* JAX's all_gather keeps its result varying (all_gather_invariant
       * does not), so its replication check rejects an out_spec that
       * leaves the gathered axes out; kiln's does as well. */
      case KIR_PRIM_ALL_GATHER: out = in; break;
      case KIR_PRIM_AXIS_INDEX:
      case KIR_PRIM_PSUM_SCATTER:
      case KIR_PRIM_PPERMUTE:
      case KIR_PRIM_ALL_TO_ALL: out = in | ax; break;
      default: {
        nested_axes na = {m, 0};
        kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, nested_visit, &na);
        out = in | na.mask;
      }
    }
    for (int k = 0; k < e->n_out; k++) vary[e->out[k]] = out;
  }
}

static kiln_status check_rep(const kdist_smap *s, const kir_program *body, int n_caps,
                             const kiln_pspec *const *in, const kiln_pspec *const *out,
                             const kiln_path *paths) {
  unsigned *vary = calloc((size_t)body->n_vars + 1, sizeof *vary);
  if (!vary) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int i = n_caps; i < body->n_invars; i++) {
    const kiln_pspec *p = in[i - n_caps];
    for (int d = 0; d < kiln_pspec_rank(p); d++)
      for (int k = 0; k < kiln_pspec_entry_axes(p, d); k++)
        vary[body->invars[i]] |= 1u << kiln_mesh_axis_index(s->mesh, kiln_pspec_entry_axis(p, d, k));
  }
  vary_axes(&s->km, body, vary);
  kiln_status st = KILN_OK;
  for (int k = 0; !st && k < body->n_outvars; k++) {
    unsigned named = 0;
    for (int d = 0; d < kiln_pspec_rank(out[k]); d++)
      for (int j = 0; j < kiln_pspec_entry_axes(out[k], d); j++)
        named |= 1u << kiln_mesh_axis_index(s->mesh, kiln_pspec_entry_axis(out[k], d, j));
    unsigned bad = vary[body->outvars[k]] & ~named;
    if (!bad) continue;
    int a = 0;
    while (!(bad & (1u << a))) a++;
    char sp[512], path[256];
    kiln_path_str(&paths[k], path, sizeof path);
    st = kcore_fail(KILN_ERR_ARGUMENT, "shard_map: out_specs at result%s is %s, which implies "
                    "the value is replicated over mesh axis '%s', but it is not provably "
                    "replicated over it (use psum/all_gather over '%s', mention the axis in the "
                    "spec, or pass check_rep=0)", path, kiln_pspec_format(out[k], sp, sizeof sp),
                    s->km.name[a], s->km.name[a]);
  }
  free(vary);
  return st;
}

/* ---- tracing ---- */

typedef struct smap_call {
  kiln_val **vals, **ops, **outs;
  kiln_treedef *def;
  kiln_path *in_paths, *out_paths;
  size_t n_in, n_out;
  const kiln_pspec **in, **out;
  kir_aval *avals;
  ktr_closed body;
  char *in_text, *out_text;
  kiln_tree *out_tree;
} smap_call;

static void smap_call_free(smap_call *c) {
  free(c->vals), free(c->ops), free(c->outs), free(c->in), free(c->out), free(c->avals);
  free(c->in_text), free(c->out_text);
  kiln_treedef_free(c->def);
  kiln_paths_free(c->in_paths, c->n_in);
  kiln_paths_free(c->out_paths, c->n_out);
  ktr_closed_free(&c->body);
  kiln_tree_free(c->out_tree);
}

static kiln_status smap_trace(kiln_trace *t, const kdist_smap *s, const kiln_tree *args,
                              smap_call *c) {
  int n = 0;
  kiln_status st = ktr_flatten_vals(t, "shard_map", args, &c->vals, &n, &c->def);
  c->n_in = (size_t)n;
  if (!st) st = kiln_treedef_leaf_paths(c->def, &c->in_paths, &c->n_in);
  c->in = calloc(c->n_in + 1, sizeof *c->in);
  c->avals = calloc(c->n_in + 1, sizeof *c->avals);
  if (!st && (!c->in || !c->avals)) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) st = spread_specs("in_specs", s->in_specs, args, c->n_in, c->in);
  for (size_t i = 0; !st && i < c->n_in; i++) {
    char path[256];
    kiln_path_str(&c->in_paths[i], path, sizeof path);
    st = resize(s, c->in[i], path[0] ? path : "args", ktr_aval(c->vals[i]), true, &c->avals[i]);
  }
  if (st) return st;
  ktr_axis_frame frame = {&s->km, t->axes};
  t->axes = &frame;
  st = ktr_trace_closed(t, "shard_map", s->f, c->def, n, c->avals, &c->body);
  t->axes = frame.prev;
  if (st) return st;
  /* The result tree, to match out_specs against. */
  c->n_out = (size_t)c->body.n_out;
  c->out = calloc(c->n_out + 1, sizeof *c->out);
  kiln_leaf *dummy = calloc(c->n_out + 1, sizeof *dummy);
  if (!c->out || !dummy) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (size_t k = 0; !st && k < c->n_out; k++) dummy[k] = (kiln_leaf){.kind = KILN_LEAF_PTR};
  if (!st) st = kiln_tree_unflatten(c->body.out_def, dummy, c->n_out, &c->out_tree);
  free(dummy);
  if (!st) st = kiln_treedef_leaf_paths(c->body.out_def, &c->out_paths, &c->n_out);
  if (!st) st = spread_specs("out_specs", s->out_specs, c->out_tree, c->n_out, c->out);
  if (!st && s->check_rep)
    st = check_rep(s, c->body.prog, c->body.n_captures, c->in, c->out, c->out_paths);
  for (size_t k = 0; !st && k < c->n_out; k++) {
    char path[256];
    kiln_path_str(&c->out_paths[k], path, sizeof path);
    kir_aval g;
    st = resize(s, c->out[k], path[0] ? path : "result",
                kir_var_aval(c->body.prog, c->body.prog->outvars[k]), false, &g);
  }
  return st;
}

/* The shard_map equation: captures (replicated) first, then the leaves. */
static kiln_status smap_bind(kiln_trace *t, const kdist_smap *s, smap_call *c) {
  int nc = c->body.n_captures, n_ops = nc + (int)c->n_in;
  const kiln_pspec **in_all = calloc((size_t)n_ops + 1, sizeof *in_all);
  kiln_pspec *rep = NULL;
  c->ops = calloc((size_t)n_ops + 1, sizeof *c->ops);
  c->outs = calloc(c->n_out + 1, sizeof *c->outs);
  kiln_status st = kiln_pspec_new(&rep);
  if (!st && (!in_all || !c->ops || !c->outs))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int i = 0; !st && i < n_ops; i++) {
    in_all[i] = i < nc ? rep : c->in[i - nc];
    c->ops[i] = i < nc ? c->body.captures[i] : c->vals[i - nc];
  }
  if (!st && (!(c->in_text = specs_text(n_ops, in_all)) ||
              !(c->out_text = specs_text((int)c->n_out, c->out))))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) {
    kir_params p = {0};
    p.shard_map = (kir_p_shard_map){s->check_rep, c->in_text, c->body.prog, s->mesh_text,
                                    c->out_text};
    ktr_bind(t, "shard_map", KIR_PRIM_SHARD_MAP, &p, n_ops, c->ops, (int)c->n_out, c->outs);
    st = t->status;
  }
  kiln_pspec_free(rep);
  free(in_all);
  return st;
}

static kiln_tree *smap_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const kdist_smap *s = user;
  smap_call c = {0};
  kiln_tree *res = NULL;
  kiln_status st = smap_trace(t, s, args, &c);
  if (!st) st = smap_bind(t, s, &c);
  kiln_leaf *leaves = st ? NULL : calloc(c.n_out + 1, sizeof *leaves);
  if (!st && !leaves) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (size_t k = 0; !st && k < c.n_out; k++)
    leaves[k] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = c.outs[k]};
  if (!st) st = kiln_tree_unflatten(c.body.out_def, leaves, c.n_out, &res);
  free(leaves);
  if (st && !t->status) ktr_fail(t, st);
  smap_call_free(&c);
  return st ? NULL : res;
}

kiln_status kiln_shard_map(const kiln_func *f, kiln_mesh *mesh, const kiln_tree *in_specs,
                           const kiln_tree *out_specs, int check_rep, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_shard_map: out is NULL");
  *out = NULL;
  if (!f || !mesh || !in_specs || !out_specs)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_shard_map: %s is NULL",
                      !f ? "f" : !mesh ? "mesh" : !in_specs ? "in_specs" : "out_specs");
  kiln_status st = kdist_spmd_install(mesh->ctx);
  if (st) return st;
  kdist_smap *s = calloc(1, sizeof *s);
  if (!s) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_shard_map: out of host memory");
  s->f = f, s->mesh = mesh, s->check_rep = check_rep != 0;
  size_t n = 0;
  for (int a = 0; a < mesh->ndim; a++)
    n += (size_t)snprintf(s->mesh_text + n, sizeof s->mesh_text - n, "%s%s=%lld", a ? "," : "",
                          mesh->names[a], (long long)mesh->shape[a]);
  st = kir_mesh_parse("kiln_shard_map", s->mesh_text, &s->km);
  if (!st) st = kiln_tree_map(copy_spec_leaf, s, 1, &in_specs, &s->in_specs);
  if (!st) st = kiln_tree_map(copy_spec_leaf, s, 1, &out_specs, &s->out_specs);
  char name[128];
  snprintf(name, sizeof name, "shard_map(%s)", kiln_func_name(f));
  if (!st) st = kiln_func_new(smap_fn, s, name, out);
  if (st) {
    smap_drop(s);
    return st;
  }
  (*out)->drop = smap_drop;
  return KILN_OK;
}

bool kdist_is_shard_map(const kiln_func *f) { return f->fn == smap_fn;
}
