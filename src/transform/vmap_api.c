/* kiln_vmap: in_axes/out_axes prefixes resolved against the argument and
 * output trees, f traced on the per-example types, its program batched
 * into the calling trace (so vmap composes with jit, grad and itself). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/transform.h"
#include "transform/transform.h"

#define KTF_NOT_MAPPED (-1000)
#define KTF_AXIS_LO (-KILN_MAX_RANK - 1)

/* kiln_axis leaves point into this table: a pointer identity nobody else
 * can forge by accident. */
static const int g_axes[2 * KILN_MAX_RANK + 2];

kiln_tree *kiln_axis(int a) {
  if (a < KTF_AXIS_LO || a > KILN_MAX_RANK) {
    kcore_fail(KILN_ERR_OUT_OF_RANGE, "kiln_axis: axis %d is out of range [%d, %d]", a, KTF_AXIS_LO,
               KILN_MAX_RANK);
    return NULL;
  }
  return kiln_tree_ptr((void *)&g_axes[a - KTF_AXIS_LO]);
}

typedef struct ktf_vm {
  const kiln_func *f;
  kiln_tree *in_axes, *out_axes; /* owned; NULL: axis 0 everywhere */
  int64_t size;
  char *name;
} ktf_vm;

static void ktf_vm_drop(void *user) {
  ktf_vm *g = user;
  kiln_tree_free(g->in_axes);
  kiln_tree_free(g->out_axes);
  free(g->name);
  free(g);
}

static const char *kind_name(kiln_node_kind k) {
  switch (k) {
    case KILN_NODE_NONE: return "None";
    case KILN_NODE_LEAF: return "leaf";
    case KILN_NODE_TUPLE: return "tuple";
    case KILN_NODE_LIST: return "list";
    case KILN_NODE_DICT: return "dict";
    default: return "custom node";
  }
}

/* Walks the prefix ax over t, writing one axis (or KTF_NOT_MAPPED) per leaf
 * of t to axes[*k...]. path holds the key path so far (for errors). */
static kiln_status resolve(const char *which, const kiln_tree *ax, const kiln_tree *t, char *path,
                           size_t len, int *axes, int *k) {
  kiln_node_kind ak = kiln_tree_kind(ax), tk = kiln_tree_kind(t);
  if (!ax || ak == KILN_NODE_NONE || ak == KILN_NODE_LEAF) {
    int a = ax ? KTF_NOT_MAPPED : 0;
    if (ak == KILN_NODE_LEAF) {
      const kiln_leaf *l = kiln_tree_leaf_get(ax);
      const int *q = l->kind == KILN_LEAF_PTR ? l->u.ptr : NULL;
      if (!q || q < g_axes || q >= g_axes + sizeof g_axes / sizeof g_axes[0])
        return kcore_fail(KILN_ERR_TREE, "kiln_vmap: %s%s is a leaf that is not an axis (make "
                          "axes with kiln_axis, unmapped entries with kiln_tree_none)", which, path);
      a = (int)(q - g_axes) + KTF_AXIS_LO;
    }
    size_t n = kiln_tree_num_leaves(t);
    for (size_t i = 0; i < n; i++) axes[(*k)++] = a;
    return KILN_OK;
  }
  size_t na = kiln_tree_num_children(ax), nt = kiln_tree_num_children(t);
  if (ak != tk || na != nt)
    return kcore_fail(KILN_ERR_TREE, "kiln_vmap: %s%s is a %s of %zu entries but the value there "
                      "is a %s of %zu (%s must be a tree prefix)", which, path, kind_name(ak), na,
                      kind_name(tk), nt, which);
  for (size_t i = 0; i < na; i++) {
    const char *key = kiln_tree_key(ax, i), *tkey = kiln_tree_key(t, i);
    if (ak == KILN_NODE_DICT && (!key || !tkey || strcmp(key, tkey)))
      return kcore_fail(KILN_ERR_TREE, "kiln_vmap: %s%s has key '%s' where the value has '%s'",
                        which, path, key ? key : "?", tkey ? tkey : "?");
    if (key)
      snprintf(path + len, 512 - len, "['%s']", key);
    else
      snprintf(path + len, 512 - len, "[%zu]", i);
    kiln_status st = resolve(which, kiln_tree_child(ax, i), kiln_tree_child(t, i), path,
                             strlen(path), axes, k);
    path[len] = 0;
    if (st) return st;
  }
  return KILN_OK;
}

static kiln_status resolve_all(const char *which, const kiln_tree *ax, const kiln_tree *t,
                               int n, int **axes) {
  char path[512] = "";
  int k = 0;
  *axes = malloc((size_t)(n ? n : 1) * sizeof **axes);
  if (!*axes) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_vmap: out of host memory");
  kiln_status st = resolve(which, ax, t, path, 0, *axes, &k);
  if (!st && k != n)
    st = kcore_fail(KILN_ERR_INTERNAL, "kiln_vmap: %s gave %d axes for %d leaves", which, k, n);
  return st;
}

/* The key path of leaf i of def ("[0]['w']"), for errors. */
static void leaf_path(const kiln_treedef *def, int i, char *buf, size_t cap) {
  kiln_path *paths = NULL;
  size_t n = 0;
  buf[0] = 0;
  if (!kiln_treedef_leaf_paths(def, &paths, &n) && (size_t)i < n) kiln_path_str(&paths[i], buf, cap);
  kiln_paths_free(paths, n);
  if (!buf[0]) snprintf(buf, cap, "(root)");
}

/* The mapped size and the per-example types of the n argument leaves;
 * axes are normalised (negative ones counted from the end). */
static kiln_status mapped_types(const ktf_vm *g, const kiln_treedef *def, kiln_val **vals, int n,
                                int *axes, int64_t *size, kir_aval *elem) {
  char ty[KIR_AVAL_STR_CAP], p1[256], p2[256];
  int first = -1;
  *size = g->size > 0 ? g->size : -1;
  for (int i = 0; i < n; i++) {
    const kir_aval *a = ktr_aval(vals[i]);
    elem[i] = *a;
    if (axes[i] == KTF_NOT_MAPPED) continue;
    int ax = axes[i] < 0 ? axes[i] + a->rank : axes[i];
    if (ax < 0 || ax >= a->rank) {
      leaf_path(def, i, p1, sizeof p1);
      return kcore_fail(KILN_ERR_SHAPE, "kiln_vmap(%s): in_axes gives axis %d for the argument at "
                        "%s, of type %s (rank %d)", kiln_func_name(g->f), axes[i], p1,
                        kir_aval_str(a, ty, sizeof ty), a->rank);
    }
    axes[i] = ax;
    if (*size >= 0 && a->shape[ax] != *size) {
      char t2[KIR_AVAL_STR_CAP];
      leaf_path(def, i, p1, sizeof p1);
      if (first >= 0) leaf_path(def, first, p2, sizeof p2);
      return kcore_fail(KILN_ERR_SHAPE, "kiln_vmap(%s): mapped axis sizes disagree: the argument "
                        "at %s (type %s, axis %d) has size %lld but %s%s%s%s has %lld",
                        kiln_func_name(g->f), p1, kir_aval_str(a, ty, sizeof ty), ax,
                        (long long)a->shape[ax], first >= 0 ? "the argument at " : "axis_size",
                        first >= 0 ? p2 : "", first >= 0 ? " of type " : "",
                        first >= 0 ? kir_aval_str(ktr_aval(vals[first]), t2, sizeof t2) : "",
                        (long long)*size);
    }
    if (first < 0 && g->size <= 0) first = i;
    *size = a->shape[ax];
    elem[i].rank--;
    for (int d = ax; d < elem[i].rank; d++) elem[i].shape[d] = a->shape[d + 1];
    elem[i].shape[elem[i].rank] = 0;
  }
  if (*size < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_vmap(%s): no argument is mapped (every in_axes "
                      "entry is None) and axis_size is not given", kiln_func_name(g->f));
  return KILN_OK;
}

/* Output i (mapped at ybd, or -1) placed at out_axes' axis oa. */
static kiln_status place_out(kiln_trace *t, const ktf_vm *g, const kiln_treedef *def, int i,
                             int64_t size, int oa, kir_vid *y, int ybd) {
  char ty[KIR_AVAL_STR_CAP], p1[256];
  if (oa == KTF_NOT_MAPPED) {
    if (ybd < 0) return KILN_OK;
    leaf_path(def, i, p1, sizeof p1);
    return kcore_fail(KILN_ERR_SHAPE, "kiln_vmap(%s): out_axes is None for the output at %s, but "
                      "it depends on the mapped arguments (batched type %s)", kiln_func_name(g->f),
                      p1, kir_aval_str(kir_var_aval(t->prog, *y), ty, sizeof ty));
  }
  kir_aval elem = *kir_var_aval(t->prog, *y);
  if (ybd >= 0) {
    elem.rank--;
    for (int d = ybd; d < elem.rank; d++) elem.shape[d] = elem.shape[d + 1];
  }
  int r = elem.rank + 1, ax = oa < 0 ? oa + r : oa;
  if (ax < 0 || ax >= r) {
    leaf_path(def, i, p1, sizeof p1);
    return kcore_fail(KILN_ERR_SHAPE, "kiln_vmap(%s): out_axes gives axis %d for the output at %s, "
                      "of per-example type %s (batched rank %d)", kiln_func_name(g->f), oa, p1,
                      kir_aval_str(&elem, ty, sizeof ty), r);
  }
  kiln_status st = KILN_OK;
  if (ybd < 0) {
    st = kir_batch_front(t->prog, *y, -1, size, &elem, y);
    ybd = 0;
  }
  if (!st) st = kir_batch_moveaxis(t->prog, *y, ybd, ax, y);
  return st;
}

/* A tree of def's shape with placeholder leaves (to walk out_axes over). */
static kiln_tree *shape_tree(const kiln_treedef *def, int n) {
  kiln_leaf *ph = calloc((size_t)(n ? n : 1), sizeof *ph);
  kiln_tree *s = NULL;
  if (!ph) return NULL;
  for (int i = 0; i < n; i++) ph[i] = (kiln_leaf){.kind = KILN_LEAF_PTR};
  if (kiln_tree_unflatten(def, ph, (size_t)n, &s)) s = NULL;
  free(ph);
  return s;
}

static kiln_tree *ktf_vmap_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_vm *g = user;
  static const char op[] = "kiln_vmap";
  kiln_val **vals = NULL;
  int n = 0, *axes = NULL, *oaxes = NULL, *bd = NULL;
  kiln_treedef *def = NULL;
  kir_aval *elem = NULL;
  kir_vid *x = NULL, *y = NULL;
  kiln_tree *otree = NULL, *res = NULL;
  ktr_closed cl;
  memset(&cl, 0, sizeof cl);
  int64_t size = 0;
  kiln_status st = ktr_flatten_vals(t, op, args, &vals, &n, &def);
  if (!st) st = resolve_all("in_axes", g->in_axes, args, n, &axes);
  if (!st && !(elem = malloc((size_t)(n ? n : 1) * sizeof *elem)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = mapped_types(g, def, vals, n, axes, &size, elem);
  if (!st) st = ktr_trace_closed(t, op, g->f, def, n, elem, &cl);
  int nc = st ? 0 : cl.n_captures, nx = nc + n, no = st ? 0 : cl.n_out;
  if (!st) {
    x = malloc((size_t)(nx + 1) * sizeof *x);
    y = malloc((size_t)(no + 1) * sizeof *y);
    bd = malloc((size_t)(nx + no + 1) * sizeof *bd);
    if (!x || !y || !bd) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (int i = 0; !st && i < nc; i++) {
    st = ktr_use(t, op, cl.captures[i], &x[i]);
    bd[i] = -1;
  }
  for (int i = 0; !st && i < n; i++) {
    x[nc + i] = vals[i]->vid;
    bd[nc + i] = axes[i] == KTF_NOT_MAPPED ? -1 : axes[i];
  }
  if (!st) st = ktf_vmap(op, t->prog, cl.prog, size, x, bd, y, bd + nx);
  if (!st && !(otree = shape_tree(cl.out_def, no)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = resolve_all("out_axes", g->out_axes, otree, no, &oaxes);
  for (int i = 0; !st && i < no; i++) st = place_out(t, g, cl.out_def, i, size, oaxes[i], &y[i], bd[nx + i]);
  if (st)
    ktr_fail(t, st);
  else
    res = ktf_tree(t, cl.out_def, no, y);
  kiln_tree_free(otree);
  ktr_closed_free(&cl);
  kiln_treedef_free(def);
  free(vals);
  free(axes);
  free(oaxes);
  free(elem);
  free(x);
  free(y);
  free(bd);
  return res;
}

kiln_status kiln_vmap(const kiln_func *f, const kiln_tree *in_axes, const kiln_tree *out_axes,
                      int64_t axis_size, const char *axis_name, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_vmap: out is NULL");
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_vmap: the function is NULL");
  ktf_vm *g = calloc(1, sizeof *g);
  if (!g) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_vmap: out of host memory");
  g->f = f;
  g->size = axis_size;
  if ((in_axes && !(g->in_axes = kiln_tree_clone(in_axes))) ||
      (out_axes && !(g->out_axes = kiln_tree_clone(out_axes))) ||
      (axis_name && !(g->name = strdup(axis_name)))) {
    ktf_vm_drop(g);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_vmap: out of host memory");
  }
  char name[256];
  snprintf(name, sizeof name, "vmap(%s)", kiln_func_name(f));
  kiln_status st = kiln_func_new(ktf_vmap_fn, g, name, out);
  if (st) {
    ktf_vm_drop(g);
    return st;
  }
  (*out)->drop = ktf_vm_drop;
  return KILN_OK;
}
