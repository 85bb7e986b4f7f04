/* jax.tree.map: match every tree against tree 0 (which may be a prefix of
 * them), call f once per leaf of tree 0, and build the result with tree 0's
 * structure. */
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

typedef struct ktree_map {
  size_t n_trees, n_leaves;
  const kiln_leaf **rows; /* rows[i * n_trees + k]: leaf i of tree k */
  kiln_leaf *subtrees;    /* the same layout: borrowed TREE leaves for prefix matches */
  size_t next;            /* the leaf of tree 0 reached so far */
  kiln_key path[KILN_TREE_MAX_DEPTH + 1];
} ktree_map;

/* Matches tree k's subtree b against tree 0's subtree a. */
static kiln_status ktree_map_match(ktree_map *m, size_t k, const kiln_tree *a, const kiln_tree *b,
                                   size_t depth) {
  if (a->kind == KILN_NODE_LEAF) {
    size_t slot = m->next++ * m->n_trees + k;
    if (b->kind == KILN_NODE_LEAF) {
      m->rows[slot] = &b->leaf;
    } else {
      m->subtrees[slot].kind = KILN_LEAF_TREE;
      m->subtrees[slot].u.tree = (kiln_tree *)b; /* borrowed: f gets it const */
      m->rows[slot] = &m->subtrees[slot];
    }
    return KILN_OK;
  }
  ktree_shape sa = ktree_shape_of_tree(a), sb = ktree_shape_of_tree(b);
  if (!ktree_shape_equal(&sa, &sb)) {
    char text[2048];
    ktree_sb out;
    ktree_sb_init(&out, text, sizeof text);
    ktree_sb_diff(&out, &sa, &sb, m->path, depth);
    return kcore_fail(KILN_ERR_TREE, "kiln_tree_map: tree %zu differs from tree 0 %s", k, text);
  }
  for (size_t c = 0; c < a->n; c++) {
    m->path[depth] = ktree_child_key(&sa, c);
    kiln_status st = ktree_map_match(m, k, a->children[c], b->children[c], depth + 1);
    if (st) return st;
  }
  return KILN_OK;
}

/* Releases the leaves f returned (their trees are held as attached). */
static void ktree_map_drop(kiln_leaf *outs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (outs[i].kind == KILN_LEAF_ARRAY) kiln_array_release(outs[i].u.array);
    if (outs[i].kind == KILN_LEAF_TREE) ktree_free_node(outs[i].u.tree);
  }
  free(outs);
}

/* Calls f on every row; on failure releases what it returned so far. */
static kiln_status ktree_map_call(ktree_map *m, kiln_map_fn f, void *user, kiln_leaf *outs) {
  const char *op = "kiln_tree_map";
  for (size_t i = 0; i < m->n_leaves; i++) {
    kiln_leaf out = {0};
    kiln_status st = f(&m->rows[i * m->n_trees], m->n_trees, user, &out);
    if (st) {
      kcore_fail_wrap(st, "%s: the function failed at leaf %zu (%s)", op, i, kiln_status_str(st));
    } else if ((st = ktree_leaf_check(op, &out, i, true)) == KILN_OK) {
      if (out.kind == KILN_LEAF_TREE) out.u.tree->attached = true; /* held until built */
      outs[i] = out;
      continue;
    }
    ktree_map_drop(outs, i);
    return st;
  }
  return KILN_OK;
}

static kiln_status ktree_map_check(size_t n_trees, const kiln_tree *const *trees, kiln_map_fn f,
                                   kiln_tree **out) {
  const char *op = "kiln_tree_map";
  if (!f || !trees || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op, !f ? "f" : !trees ? "trees" : "out");
  if (n_trees == 0) return kcore_fail(KILN_ERR_ARGUMENT, "%s: no trees to map over", op);
  for (size_t k = 0; k < n_trees; k++)
    if (!trees[k]) return kcore_fail(KILN_ERR_ARGUMENT, "%s: tree %zu is NULL", op, k);
  return KILN_OK;
}

kiln_status kiln_tree_map(kiln_map_fn f, void *user, size_t n_trees, const kiln_tree *const *trees,
                          kiln_tree **out) {
  const char *op = "kiln_tree_map";
  kiln_status st = ktree_map_check(n_trees, trees, f, out);
  if (st) return st;
  kiln_treedef *def = NULL;
  kiln_leaf *outs = NULL;
  ktree_map *m = calloc(1, sizeof *m);
  size_t cells = 0;
  if (!m || !kcore_mul_size(trees[0]->num_leaves, n_trees, &cells)) goto oom;
  m->n_trees = n_trees;
  m->n_leaves = trees[0]->num_leaves;
  m->rows = calloc(cells ? cells : 1, sizeof *m->rows);
  m->subtrees = calloc(cells ? cells : 1, sizeof *m->subtrees);
  outs = calloc(m->n_leaves ? m->n_leaves : 1, sizeof *outs);
  if (!m->rows || !m->subtrees || !outs) goto oom;
  for (size_t k = 0; k < n_trees; k++) {
    m->next = 0;
    if ((st = ktree_map_match(m, k, trees[0], trees[k], 0))) goto done;
  }
  if ((st = kiln_tree_flatten(trees[0], NULL, NULL, NULL, NULL, &def))) goto done;
  st = ktree_map_call(m, f, user, outs);
  if (st)
    outs = NULL; /* ktree_map_call released them */
  else
    st = ktree_build(op, def, outs, out); /* copies the leaves: outs is released below */
  goto done;
oom:
  st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu trees", op, n_trees);
done:
  if (outs) ktree_map_drop(outs, m ? m->n_leaves : 0);
  kiln_treedef_free(def);
  if (m) {
    free(m->rows);
    free(m->subtrees);
  }
  free(m);
  return st;
}
