/* Public collectives (jax.lax's psum, pmax, pmin, pmean, all_gather,
 * psum_scatter, ppermute, all_to_all, axis_index, axis_size): each looks its
 * axes up among those the enclosing shard_maps bind, then binds its
 * primitive with the axes' size fixed in its params. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

/* Finds `name` (len bytes) among the frames around t. */
static bool axis_find(const kiln_trace *t, const char *name, size_t len, int64_t *size) {
  for (; t; t = t->parent)
    for (const ktr_axis_frame *f = t->axes; f; f = f->prev)
      for (int a = 0; a < f->mesh->ndim; a++)
        if (strlen(f->mesh->name[a]) == len && memcmp(f->mesh->name[a], name, len) == 0) {
          *size = f->mesh->size[a];
          return true;
        }
  return false;
}

static void bound_names(const kiln_trace *t, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (; t; t = t->parent)
    for (const ktr_axis_frame *f = t->axes; f; f = f->prev)
      for (int a = 0; a < f->mesh->ndim && n < cap; a++)
        n += (size_t)snprintf(buf + n, cap - n, "%s'%s'", n ? ", " : "", f->mesh->name[a]);
  if (!buf[0]) snprintf(buf, cap, "none: no enclosing shard_map or pmap");
}

kiln_status ktr_axes_lookup(kiln_trace *t, const char *op, const char *names, char *buf,
                            size_t cap, int64_t *size) {
  size_t n = 0;
  *size = 1;
  if (!names) return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis name is NULL", op);
  buf[0] = '\0';
  for (const char *s = names; *s;) {
    if (isspace((unsigned char)*s) || *s == '(' || *s == ')' || *s == ',' || *s == '\'') {
      s++;
      continue;
    }
    size_t len = 0;
    while (isalnum((unsigned char)s[len]) || s[len] == '_') len++;
    int64_t sz;
    if (!len || !axis_find(t, s, len, &sz)) {
      char bound[512];
      bound_names(t, bound, sizeof bound);
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: unbound axis name '%.*s' (bound axes: %s)", op,
                        (int)(len ? len : 1), s, bound);
    }
    if (n + len + 2 > cap) return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis names too long", op);
    n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", n ? "," : "", (int)len, s);
    *size *= sz;
    s += len;
  }
  if (!n) return kcore_fail(KILN_ERR_ARGUMENT, "%s: no axis name in \"%s\"", op, names);
  return KILN_OK;
}

/* The axes for op, or NULL with the trace failed. */
static const char *axes_of(kiln_trace *t, const char *op, const char *names, char *buf, size_t cap,
                           int64_t *size) {
  if (t->status) {
    ktr_sticky(t, op);
    return NULL;
  }
  kiln_status st = ktr_axes_lookup(t, op, names, buf, cap, size);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  return buf;
}

#define AXES_CAP 512

static kiln_val *all_reduce(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                            const char *names) {
  char buf[AXES_CAP];
  kir_params p = {0};
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  if (!(p.collective.axis_name = axes_of(t, op, names, buf, sizeof buf, &p.collective.axis_size)))
    return NULL;
  /* lax.psum sums booleans as int32. */
  if (ktr_aval(x)->dtype == KILN_BOOL && !(x = ktr_convert(t, op, x, KILN_I32, ktr_aval(x)->weak)))
    return NULL;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_psum(kiln_trace *t, kiln_val *x, const char *axes) {
  return all_reduce(t, "psum", KIR_PRIM_PSUM, x, axes);
}

kiln_val *kiln_pmax(kiln_trace *t, kiln_val *x, const char *axes) {
  return all_reduce(t, "pmax", KIR_PRIM_PMAX, x, axes);
}

kiln_val *kiln_pmin(kiln_trace *t, kiln_val *x, const char *axes) {
  return all_reduce(t, "pmin", KIR_PRIM_PMIN, x, axes);
}

/* lax.pmean: psum(x) / psum(1), a true division (jnp's, so integers and
 * booleans come out as float32). */
kiln_val *kiln_pmean(kiln_trace *t, kiln_val *x, const char *axes) {
  if (!ktr_ok(t, "pmean", 1, &x)) return NULL;
  int64_t n = kiln_axis_size(t, axes);
  if (n < 0) return NULL;
  kiln_val *s = kiln_psum(t, x, axes);
  if (s && !kiln_dtype_is_float(ktr_aval(s)->dtype))
    s = ktr_convert(t, "pmean", s, KILN_F32, false);
  return s ? kiln_div(t, s, kiln_scalar_i(t, n)) : NULL;
}

kiln_val *kiln_all_gather(kiln_trace *t, kiln_val *x, const char *axes, int axis, int tiled) {
  char buf[AXES_CAP];
  kir_params p = {0};
  int ax;
  if (!ktr_ok(t, "all_gather", 1, &x)) return NULL;
  kiln_status st = ktr_axis("all_gather", axis, ktr_aval(x)->rank + (tiled ? 0 : 1), &ax);
  if (st) return ktr_fail(t, st);
  if (!(p.all_gather.axis_name = axes_of(t, "all_gather", axes, buf, sizeof buf,
                                         &p.all_gather.axis_size)))
    return NULL;
  p.all_gather.all_gather_dimension = ax;
  p.all_gather.tiled = tiled != 0;
  return ktr_bind(t, "all_gather", KIR_PRIM_ALL_GATHER, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_psum_scatter(kiln_trace *t, kiln_val *x, const char *axes, int scatter_dimension,
                            int tiled) {
  char buf[AXES_CAP];
  kir_params p = {0};
  int ax;
  if (!ktr_ok(t, "psum_scatter", 1, &x)) return NULL;
  kiln_status st = ktr_axis("psum_scatter", scatter_dimension, ktr_aval(x)->rank, &ax);
  if (st) return ktr_fail(t, st);
  if (!(p.psum_scatter.axis_name = axes_of(t, "psum_scatter", axes, buf, sizeof buf,
                                           &p.psum_scatter.axis_size)))
    return NULL;
  p.psum_scatter.scatter_dimension = ax;
  p.psum_scatter.tiled = tiled != 0;
  return ktr_bind(t, "psum_scatter", KIR_PRIM_PSUM_SCATTER, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_ppermute(kiln_trace *t, kiln_val *x, const char *axes, int n_pairs,
                        const int (*perm)[2]) {
  char buf[AXES_CAP];
  kir_params p = {0};
  if (!ktr_ok(t, "ppermute", 1, &x)) return NULL;
  if (n_pairs < 0 || (n_pairs && !perm))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "ppermute: %d pairs and perm %s", n_pairs,
                     perm ? "given" : "NULL");
  if (!(p.ppermute.axis_name = axes_of(t, "ppermute", axes, buf, sizeof buf, &p.ppermute.axis_size)))
    return NULL;
  /* JAX's spelling of the pairs: ((0, 1), (1, 2)) */
  size_t cap = 16 + (size_t)n_pairs * 48, n = 0;
  char *text = malloc(cap);
  if (!text) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "ppermute: out of host memory");
  n += (size_t)snprintf(text + n, cap - n, "(");
  for (int i = 0; i < n_pairs; i++)
    n += (size_t)snprintf(text + n, cap - n, "%s(%d, %d)", i ? ", " : "", perm[i][0], perm[i][1]);
  snprintf(text + n, cap - n, "%s)", n_pairs == 1 ? "," : "");
  p.ppermute.perm = text;
  kiln_val *y = ktr_bind(t, "ppermute", KIR_PRIM_PPERMUTE, &p, 1, &x, 1, NULL);
  free(text);
  return y;
}

kiln_val *kiln_all_to_all(kiln_trace *t, kiln_val *x, const char *axes, int split_axis,
                          int concat_axis, int tiled) {
  char buf[AXES_CAP];
  kir_params p = {0};
  int sa, ca;
  if (!ktr_ok(t, "all_to_all", 1, &x)) return NULL;
  kiln_status st = ktr_axis("all_to_all", split_axis, ktr_aval(x)->rank, &sa);
  if (!st) st = ktr_axis("all_to_all", concat_axis, ktr_aval(x)->rank, &ca);
  if (st) return ktr_fail(t, st);
  if (!(p.all_to_all.axis_name = axes_of(t, "all_to_all", axes, buf, sizeof buf,
                                         &p.all_to_all.axis_size)))
    return NULL;
  p.all_to_all.split_axis = sa;
  p.all_to_all.concat_axis = ca;
  p.all_to_all.tiled = tiled != 0;
  return ktr_bind(t, "all_to_all", KIR_PRIM_ALL_TO_ALL, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_axis_index(kiln_trace *t, const char *axes) {
  char buf[AXES_CAP];
  kir_params p = {0};
  if (!ktr_ok(t, "axis_index", 0, NULL)) return NULL;
  if (!(p.collective.axis_name = axes_of(t, "axis_index", axes, buf, sizeof buf,
                                         &p.collective.axis_size)))
    return NULL;
  return ktr_bind(t, "axis_index", KIR_PRIM_AXIS_INDEX, &p, 0, NULL, 1, NULL);
}

int64_t kiln_axis_size(kiln_trace *t, const char *axes) {
  char buf[AXES_CAP];
  int64_t size;
  if (!t || !axes_of(t, "axis_size", axes, buf, sizeof buf, &size)) return -1;
  return size;
}

/* ---- over trees ---- */

typedef struct tree_op {
  kiln_trace *t;
  const char *axes;
  kiln_val *(*fn)(kiln_trace *, kiln_val *, const char *);
} tree_op;

static kiln_status tree_leaf(const kiln_leaf *const *leaves, size_t n_trees, void *user,
                             kiln_leaf *out) {
  (void)n_trees;
  tree_op *op = user;
  if (leaves[0]->kind != KILN_LEAF_VAL)
    return kcore_fail(KILN_ERR_ARGUMENT, "psum_tree: a leaf is not a traced value");
  kiln_val *y = op->fn(op->t, leaves[0]->u.val, op->axes);
  if (!y) return op->t->status ? op->t->status : KILN_ERR_ARGUMENT;
  *out = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = y};
  return KILN_OK;
}

static kiln_tree *tree_apply(kiln_trace *t, const char *name, const kiln_tree *x,
                             const char *axes,
                             kiln_val *(*fn)(kiln_trace *, kiln_val *, const char *)) {
  if (!t || t->status) {
    ktr_sticky(t, name);
    return NULL;
  }
  tree_op op = {t, axes, fn};
  kiln_tree *out = NULL;
  kiln_status st = kiln_tree_map(tree_leaf, &op, 1, &x, &out);
  if (st && !t->status) ktr_fail(t, st);
  return st ? NULL : out;
}

kiln_tree *kiln_psum_tree(kiln_trace *t, const kiln_tree *x, const char *axes) {
  return tree_apply(t, "kiln_psum_tree", x, axes, kiln_psum);
}

kiln_tree *kiln_pmean_tree(kiln_trace *t, const kiln_tree *x, const char *axes) {
  return tree_apply(t, "kiln_pmean_tree", x, axes, kiln_pmean);
}
