/* kiln_pmap: jax.pmap as JAX implements it today, a shard_map over a
 * one-axis mesh. Each call builds the specs for its arguments (the mapped
 * axis of every leaf of argument i at in_axes[i]), and a wrapper that drops
 * the size-1 shard axis before f and puts it back at out_axes after. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "trace/trace.h"

typedef struct kdist_pmap {
  const kiln_func *f;
  kiln_mesh *mesh; /* owned: one axis over the devices */
  char axis[KDIST_NAME_MAX];
  int n_in_axes;
  int *in_axes; /* NULL: 0 for every argument */
  int out_axes;
} kdist_pmap;

static void pmap_drop(void *user) {
  kdist_pmap *p = user;
  if (!p) return;
  kiln_mesh_free(p->mesh);
  free(p->in_axes);
  free(p);
}

/* One call: the mapped axis of every argument leaf (-1: not mapped). */
typedef struct pmap_call {
  const kdist_pmap *p;
  int *leaf_axis;
  int n;
} pmap_call;

/* Moves the mapped axis of every leaf: drop (inside) or restore (outside). */
static kiln_tree *wrap_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const pmap_call *c = user;
  kiln_val **vals = NULL, **outs = NULL;
  kiln_treedef *def = NULL, *out_def = NULL;
  kiln_tree *in = NULL, *res = NULL, *out = NULL;
  kiln_leaf *leaves = NULL;
  int n = 0, n_out = 0;
  kiln_status st = ktr_flatten_vals(t, "pmap", args, &vals, &n, &def);
  if (!st && n != c->n)
    st = kcore_fail(KILN_ERR_ARGUMENT, "pmap: %d argument leaves where %d were mapped", n, c->n);
  if (!st && !(leaves = calloc((size_t)n + 1, sizeof *leaves)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "pmap: out of host memory");
  for (int i = 0; !st && i < n; i++) {
    kiln_val *v = vals[i];
    if (c->leaf_axis[i] >= 0) v = kiln_squeeze(t, v, 1, &c->leaf_axis[i]);
    if (!v) st = t->status;
    leaves[i] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = v};
  }
  if (!st) st = kiln_tree_unflatten(def, leaves, (size_t)n, &in);
  if (!st && !(res = kiln_call(t, c->p->f, in))) st = t->status ? t->status : KILN_ERR_ARGUMENT;
  if (!st) st = ktr_flatten_vals(t, "pmap", res, &outs, &n_out, &out_def);
  free(leaves);
  leaves = st ? NULL : calloc((size_t)n_out + 1, sizeof *leaves);
  if (!st && !leaves) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "pmap: out of host memory");
  for (int k = 0; !st && k < n_out; k++) {
    kiln_val *v = outs[k];
    if (c->p->out_axes != KILN_PMAP_NONE) {
      if (c->p->out_axes > ktr_aval(v)->rank)
        st = kcore_fail(KILN_ERR_ARGUMENT, "pmap: out_axes=%d for a result of rank %d",
                        c->p->out_axes, ktr_aval(v)->rank);
      else if (!(v = kiln_expand_dims(t, v, 1, &c->p->out_axes)))
        st = t->status;
    }
    leaves[k] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = v};
  }
  if (!st) st = kiln_tree_unflatten(out_def, leaves, (size_t)n_out, &out);
  if (st && !t->status) ktr_fail(t, st);
  free(vals), free(outs), free(leaves);
  kiln_treedef_free(def), kiln_treedef_free(out_def);
  kiln_tree_free(in), kiln_tree_free(res);
  return st ? NULL : out;
}

/* The spec putting the mesh axis at dimension `axis` ("" when unmapped). */
static kiln_status axis_spec(const char *name, int axis, kiln_pspec **out) {
  kiln_status st = kiln_pspec_new(out);
  for (int d = 0; !st && d < axis; d++) st = kiln_pspec_append_none(*out);
  if (!st && axis >= 0) st = kiln_pspec_append(*out, 1, &name);
  return st;
}

static kiln_tree *pmap_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const kdist_pmap *p = user;
  pmap_call c = {p, NULL, 0};
  kiln_val **vals = NULL;
  kiln_treedef *def = NULL;
  kiln_pspec **specs = NULL, *out_spec = NULL;
  kiln_leaf *leaves = NULL;
  kiln_tree *in_specs = NULL, *out_specs = NULL, *res = NULL;
  kiln_func *wrap = NULL, *sm = NULL;
  size_t n_args = kiln_tree_num_children(args);
  int64_t ndev = kiln_mesh_device_count(p->mesh);
  kiln_status st = ktr_flatten_vals(t, "pmap", args, &vals, &c.n, &def);
  if (!st && p->in_axes && (size_t)p->n_in_axes != n_args)
    st = kcore_fail(KILN_ERR_ARGUMENT, "pmap: %d in_axes for %zu arguments", p->n_in_axes, n_args);
  c.leaf_axis = st ? NULL : calloc((size_t)c.n + 1, sizeof *c.leaf_axis);
  specs = st ? NULL : calloc((size_t)c.n + 1, sizeof *specs);
  leaves = st ? NULL : calloc((size_t)c.n + 1, sizeof *leaves);
  if (!st && (!c.leaf_axis || !specs || !leaves))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "pmap: out of host memory");
  /* Leaves of argument i follow those of arguments before it. */
  for (size_t i = 0, leaf = 0; !st && i < n_args; i++) {
    size_t count = 0;
    st = kiln_tree_flatten(kiln_tree_child(args, i), NULL, NULL, NULL, &count, NULL);
    int axis = p->in_axes ? p->in_axes[i] : 0;
    for (size_t k = 0; !st && k < count; k++, leaf++) {
      const kir_aval *a = ktr_aval(vals[leaf]);
      int ax = axis == KILN_PMAP_NONE ? -1 : axis < 0 ? axis + a->rank : axis;
      if (axis != KILN_PMAP_NONE && (ax < 0 || ax >= a->rank))
        st = kcore_fail(KILN_ERR_ARGUMENT, "pmap: in_axes[%zu]=%d for an argument of rank %d", i,
                        axis, a->rank);
      else if (ax >= 0 && a->shape[ax] != ndev)
        st = kcore_fail(KILN_ERR_SHAPE, "pmap: argument %zu has size %lld on its mapped axis %d, "
                        "but axis_size must equal the device count %lld", i,
                        (long long)a->shape[ax], ax, (long long)ndev);
      c.leaf_axis[leaf] = ax;
      if (!st) st = axis_spec(p->axis, ax, &specs[leaf]);
      leaves[leaf] = (kiln_leaf){.kind = KILN_LEAF_PTR, .u.ptr = specs[leaf]};
    }
  }
  if (!st) st = kiln_tree_unflatten(def, leaves, (size_t)c.n, &in_specs);
  if (!st) st = axis_spec(p->axis, p->out_axes == KILN_PMAP_NONE ? -1 : p->out_axes, &out_spec);
  if (!st && !(out_specs = kiln_tree_ptr(out_spec)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "pmap: out of host memory");
  char name[128];
  snprintf(name, sizeof name, "pmap(%s)", kiln_func_name(p->f));
  if (!st) st = kiln_func_new(wrap_fn, &c, name, &wrap);
  if (!st) st = kiln_shard_map(wrap, p->mesh, in_specs, out_specs, 1, &sm);
  if (!st && !(res = kiln_call(t, sm, args))) st = t->status ? t->status : KILN_ERR_ARGUMENT;
  if (st && !t->status) ktr_fail(t, st);
  kiln_func_free(sm);
  kiln_func_free(wrap);
  kiln_tree_free(in_specs);
  kiln_tree_free(out_specs);
  for (int i = 0; specs && i < c.n; i++) kiln_pspec_free(specs[i]);
  kiln_pspec_free(out_spec);
  free(specs), free(leaves), free(vals), free(c.leaf_axis);
  kiln_treedef_free(def);
  return st ? NULL : res;
}

kiln_status kiln_pmap(kiln_ctx *ctx, const kiln_func *f, const char *axis_name, int n_in_axes,
                      const int *in_axes, int out_axes, int n_devices,
                      kiln_device *const *devices, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pmap: out is NULL");
  *out = NULL;
  if (!ctx || !f) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pmap: %s is NULL", !ctx ? "ctx" : "f");
  /* axis_name=None: the mesh still needs a name (an identifier, as the IR
   * spells meshes); one per pmap, one no user's axis is likely to have. */
  static atomic_ullong anonymous;
  char anon[KDIST_NAME_MAX];
  if (!axis_name) {
    snprintf(anon, sizeof anon, "_kiln_unnamed_pmap_%llu", (unsigned long long)atomic_fetch_add(&anonymous, 1));
    axis_name = anon;
  }
  if (out_axes < 0 && out_axes != KILN_PMAP_NONE)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pmap: out_axes=%d (must be >= 0 or KILN_PMAP_NONE)",
                      out_axes);
  if (n_in_axes < 0 || (n_in_axes > 0 && !in_axes))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_pmap: %d in_axes and in_axes %s", n_in_axes,
                      in_axes ? "given" : "NULL");
  kdist_pmap *p = calloc(1, sizeof *p);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_pmap: out of host memory");
  p->f = f, p->out_axes = out_axes, p->n_in_axes = n_in_axes;
  kiln_status st = kdist_copy_name("kiln_pmap", axis_name, p->axis);
  if (!st && n_in_axes > 0) {
    if (!(p->in_axes = malloc((size_t)n_in_axes * sizeof *p->in_axes)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_pmap: out of host memory");
    else
      memcpy(p->in_axes, in_axes, (size_t)n_in_axes * sizeof *in_axes);
  }
  int64_t n = devices ? n_devices : kiln_device_count(ctx);
  const char *names[1] = {p->axis};
  if (!st) st = kiln_mesh_new(ctx, 1, &n, names, devices, &p->mesh);
  char name[128];
  snprintf(name, sizeof name, "pmap(%s)", kiln_func_name(f));
  if (!st) st = kiln_func_new(pmap_fn, p, name, out);
  if (st) {
    pmap_drop(p);
    return st;
  }
  (*out)->drop = pmap_drop;
  return KILN_OK;
}

bool kdist_is_pmap(const kiln_func *f) { return f->fn == pmap_fn; }
