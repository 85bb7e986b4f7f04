/* Trees of arrays as a whole: jax.device_put of every leaf, and printing
 * every leaf under its key path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

/* The leaves and their paths, or a failure naming op. */
static kiln_status ktree_leaves(const char *op, const kiln_tree *t, kiln_leaf **leaves,
                                kiln_path **paths, size_t *n, kiln_treedef **def) {
  if (!t) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the tree is NULL", op);
  kiln_status st = kiln_tree_flatten_with_path(t, NULL, NULL, leaves, paths, n);
  if (!st && def) st = kiln_tree_flatten(t, NULL, NULL, NULL, NULL, def);
  if (st) {
    kiln_leaves_free(*leaves, *n);
    kiln_paths_free(*paths, *n);
    *leaves = NULL, *paths = NULL, *n = 0;
    return kcore_fail_wrap(st, "%s", op);
  }
  return KILN_OK;
}

/* A failure naming the leaf at path (op: at ['w']: what). */
static kiln_status ktree_leaf_fail(kiln_status st, const char *op, const kiln_path *path,
                                   const char *what) {
  char p[256];
  kiln_path_str(path, p, sizeof p);
  return kcore_fail(st, "%s: at %s: %s", op, p[0] ? p : "the root", what);
}

kiln_status kiln_device_put_tree(const kiln_tree *t, kiln_device *dev, kiln_tree **out) {
  static const char op[] = "kiln_device_put_tree";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!dev) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the device is NULL", op);
  kiln_leaf *leaves = NULL;
  kiln_path *paths = NULL;
  kiln_treedef *def = NULL;
  size_t n = 0;
  kiln_status st = ktree_leaves(op, t, &leaves, &paths, &n, &def);
  if (st) return st;
  kiln_leaf *moved = calloc(n ? n : 1, sizeof *moved);
  if (!moved) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  size_t done = 0;
  for (; !st && done < n; done++) {
    if (leaves[done].kind != KILN_LEAF_ARRAY) {
      st = ktree_leaf_fail(KILN_ERR_TREE, op, &paths[done], "the leaf is not an array");
      break;
    }
    kiln_array *a = NULL;
    if ((st = kiln_device_put(leaves[done].u.array, dev, &a))) {
      char why[1024];
      snprintf(why, sizeof why, "%s", kiln_last_error());
      st = ktree_leaf_fail(st, op, &paths[done], why);
      break;
    }
    moved[done] = (kiln_leaf){.kind = KILN_LEAF_ARRAY, .u.array = a};
  }
  if (!st) st = kiln_tree_unflatten(def, moved, n, out); /* retains the arrays */
  for (size_t i = 0; moved && i < done; i++) kiln_array_release(moved[i].u.array);
  free(moved);
  kiln_treedef_free(def);
  kiln_leaves_free(leaves, n);
  kiln_paths_free(paths, n);
  return st;
}

kiln_status kiln_tree_format(const kiln_tree *t, char *buf, size_t cap, size_t *len) {
  static const char op[] = "kiln_tree_format";
  if (len) *len = 0;
  if (!buf && cap > 0) return kcore_fail(KILN_ERR_ARGUMENT, "%s: buf is NULL", op);
  kiln_leaf *leaves = NULL;
  kiln_path *paths = NULL;
  size_t n = 0;
  kiln_status st = ktree_leaves(op, t, &leaves, &paths, &n, NULL);
  if (st) return st;
  ktree_sb sb;
  ktree_sb_init(&sb, buf, cap);
  for (size_t i = 0; i < n && !st; i++) {
    char p[512];
    kiln_path_str(&paths[i], p, sizeof p);
    size_t indent = strlen(p) + 2, m = 0;
    char *text = NULL;
    if (leaves[i].kind == KILN_LEAF_ARRAY) {
      st = kiln_array_format(leaves[i].u.array, NULL, 0, &m);
      if (!st && !(text = malloc(m + 1)))
        st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
      if (!st) st = kiln_array_format(leaves[i].u.array, text, m + 1, NULL);
      if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", kiln_last_error());
        st = ktree_leaf_fail(st, op, &paths[i], why);
      }
    }
    if (st) {
      free(text);
      break;
    }
    ktree_sb_puts(&sb, p);
    ktree_sb_puts(&sb, ": ");
    /* The array's continuation lines are indented under its first. */
    const char *s = text ? text : leaves[i].kind == KILN_LEAF_VAL ? "<traced value>" : "<pointer>";
    for (const char *nl; (nl = strchr(s, '\n')); s = nl + 1) {
      ktree_sb_put(&sb, s, (size_t)(nl - s) + 1);
      for (size_t k = 0; k < indent; k++) ktree_sb_put(&sb, " ", 1);
    }
    ktree_sb_puts(&sb, s);
    ktree_sb_puts(&sb, "\n");
    free(text);
  }
  kiln_leaves_free(leaves, n);
  kiln_paths_free(paths, n);
  if (!st && len) *len = sb.len;
  return st;
}

kiln_status kiln_tree_print(const kiln_tree *t, FILE *stream) {
  size_t n = 0;
  kiln_status st = kiln_tree_format(t, NULL, 0, &n);
  char *buf = st ? NULL : malloc(n + 1);
  if (!st && !buf) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_tree_print: out of host memory");
  if (!st) st = kiln_tree_format(t, buf, n + 1, NULL);
  if (!st && fputs(buf, stream ? stream : stdout) < 0)
    st = kcore_fail(KILN_ERR_IO, "kiln_tree_print: writing failed");
  free(buf);
  return st;
}
