/* Key paths: the path of every leaf (tree_flatten_with_path) and lookup of a
 * subtree by path. Paths come from treedefs, so that is_leaf is asked once,
 * by the flatten that made the treedef. */
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

static size_t ktree_key_bytes(const kiln_key *k) {
  return k->kind == KILN_KEY_DICT || k->kind == KILN_KEY_ATTR ? strlen(k->name) + 1 : 0;
}

/* Fills, or when `paths` is NULL only measures, the paths of the leaves of
 * the subtree at nodes[*i]; stack[0..depth) is the path down to it. */
typedef struct ktree_path_walk {
  const kiln_treedef *def;
  size_t node;      /* the next node of def */
  kiln_path *paths; /* NULL while measuring */
  size_t n_paths;
  size_t n_keys;  /* keys used (or needed) */
  size_t n_bytes; /* name bytes used (or needed) */
  kiln_key *keys;
  char *bytes;
  kiln_key stack[KILN_TREE_MAX_DEPTH];
} ktree_path_walk;

static void ktree_path_emit(ktree_path_walk *w, size_t depth) {
  if (!w->paths) {
    for (size_t i = 0; i < depth; i++) w->n_bytes += ktree_key_bytes(&w->stack[i]);
    w->n_keys += depth;
    w->n_paths++;
    return;
  }
  kiln_path *p = &w->paths[w->n_paths++];
  p->len = depth;
  p->keys = depth ? w->keys + w->n_keys : NULL;
  for (size_t i = 0; i < depth; i++) {
    kiln_key k = w->stack[i];
    size_t n = ktree_key_bytes(&k);
    if (n) {
      memcpy(w->bytes + w->n_bytes, k.name, n);
      k.name = w->bytes + w->n_bytes;
      w->n_bytes += n;
    }
    w->keys[w->n_keys++] = k;
  }
}

static void ktree_path_walk_node(ktree_path_walk *w, size_t depth) {
  ktree_shape s = ktree_shape_of_def(w->def, w->node++);
  if (s.kind == KILN_NODE_LEAF) {
    ktree_path_emit(w, depth);
    return;
  }
  for (size_t i = 0; i < s.arity; i++) {
    w->stack[depth] = ktree_child_key(&s, i);
    ktree_path_walk_node(w, depth + 1);
  }
}

kiln_status kiln_treedef_leaf_paths(const kiln_treedef *d, kiln_path **paths, size_t *n) {
  const char *op = "kiln_treedef_leaf_paths";
  if (!d || !paths || !n)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op, !d ? "d" : !paths ? "paths" : "n");
  ktree_path_walk *w = calloc(1, sizeof *w);
  if (!w) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  w->def = d;
  ktree_path_walk_node(w, 0);
  /* One block, [paths][keys][names], so one free releases it all; names come
   * last, the other parts are multiples of the pointer size. */
  size_t head = w->n_paths * sizeof(kiln_path), keys = w->n_keys * sizeof(kiln_key);
  char *block = malloc(head + keys + w->n_bytes + 1);
  if (!block) {
    free(w);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu paths", op, d->n_leaves);
  }
  w->paths = (kiln_path *)(void *)block;
  w->keys = (kiln_key *)(void *)(block + head);
  w->bytes = block + head + keys;
  w->node = w->n_paths = w->n_keys = w->n_bytes = 0;
  ktree_path_walk_node(w, 0);
  KCORE_ASSERT(w->n_paths == d->n_leaves && w->node == d->n_nodes);
  free(w);
  *paths = (kiln_path *)(void *)block;
  *n = d->n_leaves;
  return KILN_OK;
}

kiln_status kiln_tree_flatten_with_path(const kiln_tree *t, kiln_is_leaf_fn is_leaf, void *user,
                                        kiln_leaf **leaves, kiln_path **paths, size_t *n) {
  kiln_treedef *def = NULL;
  kiln_leaf *got = NULL;
  size_t count = 0;
  kiln_status st = kiln_tree_flatten(t, is_leaf, user, leaves ? &got : NULL, &count, &def);
  if (st) return kcore_fail_wrap(st, "kiln_tree_flatten_with_path");
  if (paths && (st = kiln_treedef_leaf_paths(def, paths, &count))) {
    kiln_leaves_free(got, count);
  } else {
    if (leaves) *leaves = got;
    if (n) *n = count;
  }
  kiln_treedef_free(def);
  return st;
}

kiln_status kiln_tree_leaf_paths(const kiln_tree *t, kiln_path **paths, size_t *n) {
  if (!t || !paths || !n)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_leaf_paths: %s is NULL",
                      !t       ? "t"
                      : !paths ? "paths"
                               : "n");
  return kiln_tree_flatten_with_path(t, NULL, NULL, NULL, paths, n);
}

void kiln_paths_free(kiln_path *paths, size_t n) {
  (void)n; /* one block holds them all */
  free(paths);
}

/* ---- lookup ---- */

static const char *ktree_key_kind_fits(const kiln_tree *t, const kiln_key *k) {
  switch (k->kind) {
    case KILN_KEY_DICT: return t->kind == KILN_NODE_DICT ? NULL : "a dict";
    case KILN_KEY_INDEX:
      return t->kind == KILN_NODE_LIST || t->kind == KILN_NODE_TUPLE ? NULL : "a list or tuple";
    case KILN_KEY_ATTR:
      return t->kind == KILN_NODE_CUSTOM && t->type->dataclass ? NULL : "a dataclass";
    case KILN_KEY_FLAT: return t->kind == KILN_NODE_CUSTOM ? NULL : "a custom node";
  }
  return "a valid key kind";
}

/* The child of t that k names, or SIZE_MAX. */
static size_t ktree_key_child(const kiln_tree *t, const kiln_key *k) {
  if (k->kind == KILN_KEY_INDEX || k->kind == KILN_KEY_FLAT)
    return k->index < t->n ? k->index : SIZE_MAX;
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(kiln_tree_key(t, i), k->name) == 0) return i;
  return SIZE_MAX;
}

static kiln_status ktree_at_fail(const kiln_path *path, size_t depth, const kiln_tree *t,
                                 const char *needs) {
  char text[1024];
  ktree_sb sb;
  ktree_sb_init(&sb, text, sizeof text);
  ktree_sb_puts(&sb, "kiln_tree_at: key ");
  ktree_sb_key(&sb, &path->keys[depth]);
  ktree_sb_puts(&sb, " ");
  ktree_sb_where(&sb, path->keys, depth);
  char kind[160];
  ktree_shape s = ktree_shape_of_tree(t);
  ktree_shape_name(&s, kind, sizeof kind);
  if (needs)
    ktree_sb_printf(&sb, " needs %s, found a %s", needs, kind);
  else if (path->keys[depth].kind == KILN_KEY_INDEX || path->keys[depth].kind == KILN_KEY_FLAT)
    ktree_sb_printf(&sb, " is out of range for a %s of %zu children", kind, t->n);
  else
    ktree_sb_printf(&sb, " is missing from a %s of %zu children", kind, t->n);
  return kcore_fail(KILN_ERR_TREE, "%s", text);
}

kiln_status kiln_tree_at(const kiln_tree *t, const kiln_path *path, const kiln_tree **out) {
  if (!t || !path || !out || (path->len > 0 && !path->keys))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_at: %s is NULL",
                      !t      ? "t"
                      : !path ? "path"
                      : !out  ? "out"
                              : "path->keys");
  for (size_t d = 0; d < path->len; d++) {
    const kiln_key *k = &path->keys[d];
    if ((k->kind == KILN_KEY_DICT || k->kind == KILN_KEY_ATTR) && !k->name)
      return kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_at: key %zu has a NULL name", d);
    const char *needs = ktree_key_kind_fits(t, k);
    size_t i = needs ? SIZE_MAX : ktree_key_child(t, k);
    if (i == SIZE_MAX) return ktree_at_fail(path, d, t, needs);
    t = t->children[i];
  }
  *out = t;
  return KILN_OK;
}
