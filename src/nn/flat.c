/* Flat views of trees of traced values, for leaf-by-leaf optimizer math. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "nn/nn.h"

static void fail(kiln_trace *t, kiln_status s, const char *fmt, ...) KCORE_PRINTF(3, 4);
static void fail(kiln_trace *t, kiln_status s, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kiln_trace_fail(t, s, msg);
}

int knn_flatten(kiln_trace *t, const char *op, const char *what, const kiln_tree *tree,
                knn_flat *f) {
  memset(f, 0, sizeof *f);
  if (kiln_trace_status(t) != KILN_OK) return 0;
  if (!tree) {
    fail(t, KILN_ERR_ARGUMENT, "%s: %s is NULL", op, what);
    return 0;
  }
  kiln_leaf *leaves = NULL;
  kiln_path *paths = NULL;
  size_t n = 0;
  if (kiln_tree_flatten(tree, NULL, NULL, NULL, NULL, &f->def) != KILN_OK ||
      kiln_tree_flatten_with_path(tree, NULL, NULL, &leaves, &paths, &n) != KILN_OK) {
    fail(t, KILN_ERR_TREE, "%s: %s: %s", op, what, kiln_last_error());
    knn_flat_free(f);
    return 0;
  }
  f->vals = calloc(n ? n : 1, sizeof *f->vals);
  f->n = n;
  int ok = f->vals != NULL;
  if (!ok) fail(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  for (size_t i = 0; ok && i < n; i++) {
    if (leaves[i].kind != KILN_LEAF_VAL) {
      char p[256];
      kiln_path_str(&paths[i], p, sizeof p);
      fail(t, KILN_ERR_TREE, "%s: %s leaf %s is not a traced value", op, what, p);
      ok = 0;
    } else {
      f->vals[i] = leaves[i].u.val;
    }
  }
  kiln_leaves_free(leaves, n);
  kiln_paths_free(paths, n);
  if (!ok) knn_flat_free(f);
  return ok;
}

int knn_like(kiln_trace *t, const char *op, const knn_flat *like, knn_flat *out) {
  memset(out, 0, sizeof *out);
  out->def = kiln_treedef_clone(like->def);
  out->vals = calloc(like->n ? like->n : 1, sizeof *out->vals);
  out->n = like->n;
  if (!out->def || !out->vals) {
    fail(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
    knn_flat_free(out);
    return 0;
  }
  return 1;
}

int knn_same_structure(kiln_trace *t, const char *op, const char *a_name, const knn_flat *a,
                       const char *b_name, const knn_flat *b) {
  if (kiln_treedef_equal(a->def, b->def)) return 1;
  char diff[384];
  kiln_treedef_diff(a->def, b->def, diff, sizeof diff);
  fail(t, KILN_ERR_TREE, "%s: %s and %s differ in structure: %s", op, a_name, b_name, diff);
  return 0;
}

kiln_tree *knn_unflatten(kiln_trace *t, const knn_flat *f) {
  if (kiln_trace_status(t) != KILN_OK || !f->def) return NULL;
  kiln_leaf *leaves = calloc(f->n ? f->n : 1, sizeof *leaves);
  if (!leaves) {
    fail(t, KILN_ERR_OUT_OF_MEMORY, "kiln optimizer: out of memory");
    return NULL;
  }
  for (size_t i = 0; i < f->n; i++) {
    leaves[i].kind = KILN_LEAF_VAL;
    leaves[i].u.val = f->vals[i];
  }
  kiln_tree *out = NULL;
  if (kiln_tree_unflatten(f->def, leaves, f->n, &out) != KILN_OK)
    fail(t, KILN_ERR_TREE, "kiln optimizer: %s", kiln_last_error());
  free(leaves);
  return out;
}

void knn_flat_free(knn_flat *f) {
  free(f->vals);
  kiln_treedef_free(f->def);
  memset(f, 0, sizeof *f);
}

kiln_val *knn_safe_increment(kiln_trace *t, kiln_val *count) {
  kiln_val *max = kiln_scalar(t, kiln_val_dtype(count), 2147483646.0);
  return kiln_add(t, kiln_min(t, count, max), kiln_scalar(t, kiln_val_dtype(count), 1));
}
