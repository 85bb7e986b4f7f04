/* Treedefs: flatten, unflatten, equality, hashing, copies and differences. */
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

/* ---- storage ---- */

/* A treedef with room for the given counts (at least one of each, so that no
 * pointer is NULL); the counts themselves start at zero. */
static kiln_treedef *ktree_def_alloc(const char *op, size_t nodes, size_t keys, size_t bytes) {
  kiln_treedef *d = calloc(1, sizeof *d);
  if (!d) goto oom;
  d->nodes = calloc(nodes ? nodes : 1, sizeof *d->nodes);
  d->keys = calloc(keys ? keys : 1, sizeof *d->keys);
  d->bytes = malloc(bytes ? bytes : 1);
  if (!d->nodes || !d->keys || !d->bytes) goto oom;
  return d;
oom:
  kiln_treedef_free(d);
  kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a treedef of %zu nodes", op, nodes);
  return NULL;
}

void kiln_treedef_free(kiln_treedef *d) {
  if (!d) return;
  free(d->nodes);
  free(d->keys);
  free(d->bytes);
  free(d);
}

static uint64_t ktree_def_hash(const kiln_treedef *d) {
  uint64_t h = KCORE_HASH_SEED;
  for (size_t i = 0; i < d->n_nodes; i++) {
    ktree_shape s = ktree_shape_of_def(d, i);
    h = ktree_shape_hash(h, &s);
  }
  return h;
}

kiln_treedef *kiln_treedef_clone(const kiln_treedef *d) {
  const char *op = "kiln_treedef_clone";
  if (!d) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: the treedef is NULL", op);
    return NULL;
  }
  kiln_treedef *c = ktree_def_alloc(op, d->n_nodes, d->n_keys, d->n_bytes);
  if (!c) return NULL;
  c->n_nodes = d->n_nodes;
  c->n_leaves = d->n_leaves;
  c->n_keys = d->n_keys;
  c->n_bytes = d->n_bytes;
  c->hash = d->hash;
  memcpy(c->nodes, d->nodes, d->n_nodes * sizeof *d->nodes);
  memcpy(c->bytes, d->bytes, d->n_bytes);
  for (size_t i = 0; i < d->n_keys; i++) c->keys[i] = c->bytes + (d->keys[i] - d->bytes);
  return c;
}

/* ---- flatten ---- */

typedef struct ktree_flat {
  kiln_is_leaf_fn is_leaf;
  void *user;
  kiln_treedef *def;
  kiln_leaf *leaves; /* NULL when the caller wants none */
} ktree_flat;

static char *ktree_def_copy_bytes(kiln_treedef *d, const void *src, size_t n) {
  char *dst = d->bytes + d->n_bytes;
  if (n) memcpy(dst, src, n);
  d->n_bytes += n;
  return dst;
}

static kiln_status ktree_flat_leaf(ktree_flat *f, const kiln_tree *t) {
  if (f->leaves) {
    kiln_leaf *out = &f->leaves[f->def->n_leaves];
    if (t->kind == KILN_NODE_LEAF) {
      *out = t->leaf;
      if (out->kind == KILN_LEAF_ARRAY) kiln_array_retain(out->u.array);
    } else {
      kiln_tree *copy = kiln_tree_clone(t);
      if (!copy) return kcore_fail_wrap(KILN_ERR_OUT_OF_MEMORY, "kiln_tree_flatten");
      out->kind = KILN_LEAF_TREE;
      out->u.tree = copy;
    }
  }
  f->def->n_leaves++;
  return KILN_OK;
}

static kiln_status ktree_flat_walk(ktree_flat *f, const kiln_tree *t) {
  kiln_treedef *d = f->def;
  size_t at = d->n_nodes++;
  ktree_defnode *n = &d->nodes[at];
  if (t->kind == KILN_NODE_LEAF || (f->is_leaf && f->is_leaf(t, f->user))) {
    n->kind = KILN_NODE_LEAF;
    n->num_leaves = n->num_nodes = 1;
    return ktree_flat_leaf(f, t);
  }
  n->kind = t->kind;
  n->arity = t->n;
  n->type = t->type;
  n->aux_size = t->aux_size;
  n->aux_off = d->n_bytes;
  ktree_def_copy_bytes(d, t->aux, t->aux_size);
  n->first_key = d->n_keys;
  for (size_t i = 0; t->keys && i < t->n; i++)
    d->keys[d->n_keys++] = ktree_def_copy_bytes(d, t->keys[i], strlen(t->keys[i]) + 1);
  size_t leaves_before = d->n_leaves;
  for (size_t i = 0; i < t->n; i++) {
    kiln_status st = ktree_flat_walk(f, t->children[i]);
    if (st) return st;
  }
  n->num_leaves = d->n_leaves - leaves_before;
  n->num_nodes = d->n_nodes - at;
  return KILN_OK;
}

kiln_status kiln_tree_flatten(const kiln_tree *t, kiln_is_leaf_fn is_leaf, void *user,
                              kiln_leaf **leaves, size_t *n_leaves, kiln_treedef **def) {
  const char *op = "kiln_tree_flatten";
  if (!t) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the tree is NULL", op);
  /* The cached counts bound every output; is_leaf can only shrink them. */
  ktree_flat f = {.is_leaf = is_leaf, .user = user};
  f.def = ktree_def_alloc(op, t->num_nodes, t->num_keys, t->num_bytes);
  if (!f.def) return KILN_ERR_OUT_OF_MEMORY;
  kiln_status st = KILN_OK;
  if (leaves) {
    size_t cap = is_leaf ? t->num_nodes : t->num_leaves;
    f.leaves = calloc(cap ? cap : 1, sizeof *f.leaves);
    if (!f.leaves) {
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu leaves", op, cap);
      goto done;
    }
  }
  st = ktree_flat_walk(&f, t);
  if (st) goto done;
  f.def->hash = ktree_def_hash(f.def);
  if (n_leaves) *n_leaves = f.def->n_leaves;
  if (leaves) {
    *leaves = f.leaves;
    f.leaves = NULL;
  }
  if (def) {
    *def = f.def;
    f.def = NULL;
  }
done:
  if (f.leaves) kiln_leaves_free(f.leaves, f.def ? f.def->n_leaves : 0);
  kiln_treedef_free(f.def);
  return st;
}

void kiln_leaves_free(kiln_leaf *leaves, size_t n) {
  if (!leaves) return;
  for (size_t i = 0; i < n; i++) {
    if (leaves[i].kind == KILN_LEAF_ARRAY) kiln_array_release(leaves[i].u.array);
    if (leaves[i].kind == KILN_LEAF_TREE) kiln_tree_free(leaves[i].u.tree);
  }
  free(leaves);
}

/* ---- unflatten ---- */

/* Builds the subtree at nodes[*i], taking its leaves from leaves[*li]. */
static kiln_status ktree_build_node(const char *op, const kiln_treedef *d, size_t *i,
                                    const kiln_leaf *leaves, size_t *li, kiln_tree **out) {
  ktree_shape s = ktree_shape_of_def(d, (*i)++);
  if (s.kind == KILN_NODE_LEAF) {
    *out = ktree_leaf_copy(op, &leaves[(*li)++]);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  }
  kiln_tree *t = ktree_alloc(op, s.kind, s.arity);
  if (!t) return KILN_ERR_OUT_OF_MEMORY;
  kiln_status st = KILN_OK;
  t->type = s.type;
  if (s.aux_size > 0) {
    if (!(t->aux = malloc(s.aux_size))) goto oom;
    memcpy(t->aux, s.aux, s.aux_size);
    t->aux_size = s.aux_size;
  }
  for (size_t c = 0; c < s.arity; c++) {
    if (s.keys && !(t->keys[c] = kcore_strdup(s.keys[c]))) goto oom;
    st = ktree_build_node(op, d, i, leaves, li, &t->children[c]);
    if (st) goto fail;
  }
  st = ktree_seal(op, t); /* a spliced TREE leaf may make it too deep */
  *out = st ? NULL : t;
  return st;
oom:
  st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
fail:
  ktree_free_node(t);
  return st;
}

kiln_status ktree_build(const char *op, const kiln_treedef *def, const kiln_leaf *leaves,
                        kiln_tree **out) {
  size_t i = 0, li = 0;
  kiln_tree *t = NULL;
  kiln_status st = ktree_build_node(op, def, &i, leaves, &li, &t);
  if (st) return st;
  KCORE_ASSERT(i == def->n_nodes && li == def->n_leaves);
  *out = t;
  return KILN_OK;
}

kiln_status kiln_tree_unflatten(const kiln_treedef *def, const kiln_leaf *leaves, size_t n,
                                kiln_tree **out) {
  const char *op = "kiln_tree_unflatten";
  if (!def || !out || (n > 0 && !leaves))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op,
                      !def   ? "def"
                      : !out ? "out"
                             : "leaves");
  if (n != def->n_leaves) {
    char text[256];
    ktree_def_brief(def, text, sizeof text);
    return kcore_fail(KILN_ERR_TREE, "%s: %s has %zu leaves, got %zu", op, text, def->n_leaves, n);
  }
  for (size_t i = 0; i < n; i++) {
    kiln_status st = ktree_leaf_check(op, &leaves[i], i, false);
    if (st) return st;
  }
  return ktree_build(op, def, leaves, out);
}

/* ---- reading and comparing ---- */

size_t kiln_treedef_num_leaves(const kiln_treedef *d) { return d ? d->n_leaves : 0; }

size_t kiln_treedef_num_nodes(const kiln_treedef *d) { return d ? d->n_nodes : 0; }

uint64_t kiln_treedef_hash(const kiln_treedef *d) { return d ? d->hash : 0; }

int kiln_treedef_equal(const kiln_treedef *a, const kiln_treedef *b) {
  if (!a || !b) return a == b;
  if (a->hash != b->hash || a->n_nodes != b->n_nodes) return 0;
  for (size_t i = 0; i < a->n_nodes; i++) {
    ktree_shape sa = ktree_shape_of_def(a, i), sb = ktree_shape_of_def(b, i);
    if (!ktree_shape_equal(&sa, &sb)) return 0;
  }
  return 1;
}

/* Walks both treedefs from nodes *ia and *ib; writes the first difference. */
static bool ktree_def_diff(const kiln_treedef *a, size_t *ia, const kiln_treedef *b, size_t *ib,
                           kiln_key *path, size_t depth, ktree_sb *out) {
  ktree_shape sa = ktree_shape_of_def(a, (*ia)++), sb = ktree_shape_of_def(b, (*ib)++);
  if (!ktree_shape_equal(&sa, &sb)) {
    ktree_sb_diff(out, &sa, &sb, path, depth);
    return true;
  }
  for (size_t c = 0; c < sa.arity; c++) {
    path[depth] = ktree_child_key(&sa, c);
    if (ktree_def_diff(a, ia, b, ib, path, depth + 1, out)) return true;
  }
  return false;
}

void kiln_treedef_diff(const kiln_treedef *a, const kiln_treedef *b, char *buf, size_t cap) {
  ktree_sb out;
  ktree_sb_init(&out, buf, cap);
  if (!a || !b) {
    if (a != b) ktree_sb_puts(&out, "at the root: one treedef is NULL");
    return;
  }
  kiln_key path[KILN_TREE_MAX_DEPTH + 1];
  size_t ia = 0, ib = 0;
  ktree_def_diff(a, &ia, b, &ib, path, 0, &out);
}

/* ---- structure without a treedef (for callers on a hot path) ---- */

static uint64_t ktree_tree_hash(uint64_t h, const kiln_tree *t) {
  ktree_shape s = ktree_shape_of_tree(t);
  h = ktree_shape_hash(h, &s);
  for (size_t i = 0; i < t->n; i++) h = ktree_tree_hash(h, t->children[i]);
  return h;
}

uint64_t ktree_structure_hash(const kiln_tree *t) { return ktree_tree_hash(KCORE_HASH_SEED, t); }

static bool ktree_matches(const kiln_treedef *d, size_t *i, const kiln_tree *t) {
  if (*i >= d->n_nodes) return false;
  ktree_shape sd = ktree_shape_of_def(d, (*i)++), st = ktree_shape_of_tree(t);
  if (!ktree_shape_equal(&sd, &st)) return false;
  for (size_t c = 0; c < t->n; c++)
    if (!ktree_matches(d, i, t->children[c])) return false;
  return true;
}

bool ktree_structure_matches(const kiln_treedef *d, const kiln_tree *t) {
  size_t i = 0;
  return d && t && d->n_nodes == t->num_nodes && ktree_matches(d, &i, t);
}

static void ktree_borrow(const kiln_tree *t, const kiln_leaf **out, size_t cap, size_t *n) {
  if (t->kind == KILN_NODE_LEAF) {
    if (*n < cap) out[*n] = &t->leaf;
    (*n)++;
    return;
  }
  for (size_t i = 0; i < t->n; i++) ktree_borrow(t->children[i], out, cap, n);
}

size_t ktree_leaves_borrow(const kiln_tree *t, const kiln_leaf **out, size_t cap) {
  size_t n = 0;
  if (t) ktree_borrow(t, out, cap, &n);
  return n;
}
