/* Tree nodes: building (with the ownership checks), reading, cloning and
 * freeing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

kiln_tree *ktree_alloc(const char *op, kiln_node_kind kind, size_t n) {
  kiln_tree *t = calloc(1, sizeof *t);
  if (!t) goto oom;
  t->kind = kind;
  t->n = n;
  if (n > 0) {
    t->children = calloc(n, sizeof *t->children);
    if (!t->children) goto oom;
  }
  if (kind == KILN_NODE_DICT && n > 0) {
    t->keys = calloc(n, sizeof *t->keys);
    if (!t->keys) goto oom;
  }
  return t;
oom:
  if (t) free(t->children);
  free(t);
  kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for a node of %zu children", op, n);
  return NULL;
}

void ktree_free_node(kiln_tree *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) ktree_free_node(t->children[i]);
  if (t->keys)
    for (size_t i = 0; i < t->n; i++) free(t->keys[i]);
  if (t->kind == KILN_NODE_LEAF && t->leaf.kind == KILN_LEAF_ARRAY)
    kiln_array_release(t->leaf.u.array);
  free(t->keys);
  free(t->children);
  free(t->aux);
  free(t);
}

kiln_status ktree_seal(const char *op, kiln_tree *t) {
  uint32_t height = 0;
  t->num_leaves = t->kind == KILN_NODE_LEAF;
  t->num_nodes = 1;
  t->num_keys = t->kind == KILN_NODE_DICT ? t->n : 0;
  t->num_bytes = t->aux_size;
  for (size_t i = 0; i < t->n; i++) {
    const kiln_tree *c = t->children[i];
    KCORE_ASSERT(c && !c->attached);
    if (c->height > height) height = c->height;
    t->num_leaves += c->num_leaves;
    t->num_nodes += c->num_nodes;
    t->num_keys += c->num_keys;
    t->num_bytes += c->num_bytes;
    if (t->keys) t->num_bytes += strlen(t->keys[i]) + 1;
  }
  t->height = height + 1;
  if (t->height > KILN_TREE_MAX_DEPTH) {
    ktree_free_node(t);
    return kcore_fail(KILN_ERR_TREE, "%s: the tree would nest deeper than %d levels", op,
                      KILN_TREE_MAX_DEPTH);
  }
  for (size_t i = 0; i < t->n; i++) t->children[i]->attached = true;
  return KILN_OK;
}

/* ---- the ownership protocol of builders ---- */

/* Frees, once each, the children that ktree_claim marked. Nothing is freed
 * before the list is complete, so a child given twice is never read after
 * being freed. */
static void ktree_drop_claimed(size_t n, kiln_tree *const *children) {
  kiln_tree *list = NULL;
  for (size_t i = 0; i < n; i++) {
    kiln_tree *c = children ? children[i] : NULL;
    if (!c || c->attached || !c->claimed) continue;
    c->claimed = false;
    c->link = list;
    list = c;
  }
  while (list) {
    kiln_tree *next = list->link;
    list->link = NULL;
    ktree_free_node(list);
    list = next;
  }
}

static size_t ktree_first_index_of(size_t n, kiln_tree *const *children, const kiln_tree *c) {
  size_t j = 0;
  while (j < n && children[j] != c) j++;
  return j;
}

/* Checks that the children are n distinct free-standing trees and marks
 * them. On failure frees the free-standing ones (once each) and sets the
 * message from the first problem. */
static kiln_status ktree_claim(const char *op, size_t n, kiln_tree *const *children) {
  if (n > 0 && !children)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: children is NULL for n = %zu", op, n);
  kiln_status st = KILN_OK;
  for (size_t i = 0; i < n; i++) {
    kiln_tree *c = children[i];
    if (!c) {
      if (!st) st = kcore_fail_wrap(KILN_ERR_ARGUMENT, "%s: child %zu is NULL", op, i);
    } else if (c->attached) {
      if (!st)
        st = kcore_fail(KILN_ERR_TREE, "%s: child %zu already belongs to another tree", op, i);
    } else if (c->claimed) {
      if (!st)
        st = kcore_fail(KILN_ERR_TREE, "%s: child %zu is the same tree as child %zu", op, i,
                        ktree_first_index_of(n, children, c));
    } else {
      c->claimed = true;
    }
  }
  if (st) ktree_drop_claimed(n, children);
  return st;
}

/* After a successful claim: the node takes the children (ktree_seal marks
 * them attached) or, on a later failure, they are dropped. */
static void ktree_unclaim(size_t n, kiln_tree *const *children) {
  for (size_t i = 0; i < n; i++) children[i]->claimed = false;
}

/* A tuple, list or custom node over claimed children. */
static kiln_tree *ktree_adopt(const char *op, kiln_node_kind kind, size_t n,
                              kiln_tree *const *children) {
  if (ktree_claim(op, n, children)) return NULL;
  kiln_tree *t = ktree_alloc(op, kind, n);
  if (!t) {
    ktree_drop_claimed(n, children);
    return NULL;
  }
  ktree_unclaim(n, children);
  if (n > 0) memcpy(t->children, children, n * sizeof *children);
  return t;
}

/* ---- leaves ---- */

kiln_status ktree_leaf_check(const char *op, const kiln_leaf *leaf, size_t i, bool take) {
  switch (leaf->kind) {
    case KILN_LEAF_ARRAY:
    case KILN_LEAF_VAL:
    case KILN_LEAF_TREE:
      if (!leaf->u.ptr)
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: leaf %zu of kind %d holds NULL", op, i,
                          (int)leaf->kind);
      if (take && leaf->kind == KILN_LEAF_TREE && leaf->u.tree->attached)
        return kcore_fail(KILN_ERR_TREE, "%s: the tree of leaf %zu belongs to another tree", op, i);
      return KILN_OK;
    case KILN_LEAF_PTR: return KILN_OK;
  }
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: leaf %zu has an invalid kind %d", op, i,
                    (int)leaf->kind);
}

kiln_tree *ktree_leaf_copy(const char *op, const kiln_leaf *leaf) {
  if (leaf->kind == KILN_LEAF_TREE) {
    kiln_tree *t = kiln_tree_clone(leaf->u.tree);
    if (!t) kcore_fail_wrap(KILN_ERR_OUT_OF_MEMORY, "%s", op);
    return t;
  }
  kiln_tree *t = ktree_alloc(op, KILN_NODE_LEAF, 0);
  if (!t) return NULL;
  t->leaf = *leaf;
  if (leaf->kind == KILN_LEAF_ARRAY) kiln_array_retain(leaf->u.array);
  ktree_seal(op, t); /* cannot fail: no children */
  return t;
}

kiln_tree *kiln_tree_leaf(kiln_leaf leaf) {
  const char *op = "kiln_tree_leaf";
  if (ktree_leaf_check(op, &leaf, 0, true)) return NULL;
  if (leaf.kind == KILN_LEAF_TREE) return leaf.u.tree;
  return ktree_leaf_copy(op, &leaf);
}

kiln_tree *kiln_tree_array(kiln_array *a) {
  if (!a) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_array: the array is NULL");
    return NULL;
  }
  kiln_leaf leaf = {.kind = KILN_LEAF_ARRAY, .u.array = a};
  return ktree_leaf_copy("kiln_tree_array", &leaf);
}

kiln_tree *kiln_tree_val(kiln_val *v) {
  if (!v) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_val: the value is NULL");
    return NULL;
  }
  kiln_leaf leaf = {.kind = KILN_LEAF_VAL, .u.val = v};
  return ktree_leaf_copy("kiln_tree_val", &leaf);
}

kiln_tree *kiln_tree_ptr(void *p) {
  kiln_leaf leaf = {.kind = KILN_LEAF_PTR, .u.ptr = p};
  return ktree_leaf_copy("kiln_tree_ptr", &leaf);
}

/* ---- containers ---- */

kiln_tree *kiln_tree_none(void) {
  kiln_tree *t = ktree_alloc("kiln_tree_none", KILN_NODE_NONE, 0);
  if (t) ktree_seal("kiln_tree_none", t);
  return t;
}

static kiln_tree *ktree_sequence(const char *op, kiln_node_kind kind, size_t n,
                                 kiln_tree *const *children) {
  kiln_tree *t = ktree_adopt(op, kind, n, children);
  if (!t || ktree_seal(op, t)) return NULL;
  return t;
}

kiln_tree *kiln_tree_tuple(size_t n, kiln_tree *const *children) {
  return ktree_sequence("kiln_tree_tuple", KILN_NODE_TUPLE, n, children);
}

kiln_tree *kiln_tree_list(size_t n, kiln_tree *const *children) {
  return ktree_sequence("kiln_tree_list", KILN_NODE_LIST, n, children);
}

/* Sorts a dict's (key, child) pairs by key. Insertion sort: dicts are small,
 * and it keeps the pairs together without a scratch array. */
static void ktree_sort_dict(kiln_tree *t) {
  for (size_t i = 1; i < t->n; i++) {
    char *k = t->keys[i];
    kiln_tree *c = t->children[i];
    size_t j = i;
    for (; j > 0 && strcmp(t->keys[j - 1], k) > 0; j--) {
      t->keys[j] = t->keys[j - 1];
      t->children[j] = t->children[j - 1];
    }
    t->keys[j] = k;
    t->children[j] = c;
  }
}

static kiln_status ktree_dict_keys(const char *op, kiln_tree *t, const char *const *keys) {
  if (t->n > 0 && !keys) return kcore_fail(KILN_ERR_ARGUMENT, "%s: keys is NULL", op);
  for (size_t i = 0; i < t->n; i++) {
    if (!keys[i]) return kcore_fail(KILN_ERR_ARGUMENT, "%s: key %zu is NULL", op, i);
    t->keys[i] = kcore_strdup(keys[i]);
    if (!t->keys[i]) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  }
  ktree_sort_dict(t);
  for (size_t i = 1; i < t->n; i++) {
    if (strcmp(t->keys[i - 1], t->keys[i]) == 0) {
      char k[256];
      ktree_sb sb;
      ktree_sb_init(&sb, k, sizeof k);
      ktree_sb_repr(&sb, t->keys[i]);
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: key %s appears more than once", op, k);
    }
  }
  return KILN_OK;
}

kiln_tree *kiln_tree_dict(size_t n, const char *const *keys, kiln_tree *const *children) {
  const char *op = "kiln_tree_dict";
  kiln_tree *t = ktree_adopt(op, KILN_NODE_DICT, n, children);
  if (!t) return NULL;
  if (ktree_dict_keys(op, t, keys)) {
    ktree_free_node(t); /* the children are the node's now */
    return NULL;
  }
  if (ktree_seal(op, t)) return NULL;
  return t;
}

/* ---- custom nodes ---- */

static kiln_tree *ktree_custom(const char *op, const kiln_node_type *type, size_t n,
                               kiln_tree *const *children, const void *aux, size_t aux_size) {
  /* Take the children first: whatever fails next, the node frees them. */
  kiln_tree *t = ktree_adopt(op, KILN_NODE_CUSTOM, n, children);
  if (!t) return NULL;
  if (!type) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: the node type is NULL", op);
    goto fail;
  }
  if (aux_size > 0 && !aux) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: aux is NULL with aux_size %zu", op, aux_size);
    goto fail;
  }
  if (type->dataclass && n != type->n_fields) {
    kcore_fail(KILN_ERR_TREE, "%s: dataclass %s has %zu data fields, got %zu children", op,
               type->name, type->n_fields, n);
    goto fail;
  }
  if (ktree_aux_check(op, type, aux, aux_size)) goto fail;
  t->type = type;
  if (aux_size > 0) {
    t->aux = malloc(aux_size);
    if (!t->aux) {
      kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu aux bytes", op, aux_size);
      goto fail;
    }
    memcpy(t->aux, aux, aux_size);
    t->aux_size = aux_size;
  }
  if (ktree_seal(op, t)) return NULL;
  return t;
fail:
  ktree_free_node(t);
  return NULL;
}

kiln_tree *kiln_tree_custom(const kiln_node_type *type, size_t n, kiln_tree *const *children,
                            const void *aux, size_t aux_size) {
  return ktree_custom("kiln_tree_custom", type, n, children, aux, aux_size);
}

kiln_tree *kiln_tree_from_object(const kiln_node_type *type, const void *obj) {
  const char *op = "kiln_tree_from_object";
  if (!type) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: the node type is NULL", op);
    return NULL;
  }
  if (!type->cb.flatten) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: %s has no flatten callback (build it with kiln_tree_custom)",
               op, type->name);
    return NULL;
  }
  kiln_tree **children = NULL;
  size_t n = 0, aux_size = 0;
  void *aux = NULL;
  kiln_status st = type->cb.flatten(obj, type->cb.user, &children, &n, &aux, &aux_size);
  if (st) {
    kcore_fail_wrap(st, "%s: the flatten callback of %s failed (%s)", op, type->name,
                    kiln_status_str(st));
    return NULL;
  }
  kiln_tree *t = ktree_custom(op, type, n, children, aux, aux_size);
  free(children);
  free(aux);
  return t;
}

kiln_status kiln_tree_to_object(const kiln_tree *t, void **obj) {
  const char *op = "kiln_tree_to_object";
  if (!t || !obj) return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op, t ? "obj" : "t");
  if (t->kind != KILN_NODE_CUSTOM)
    return kcore_fail(KILN_ERR_TREE, "%s: the tree is no custom node", op);
  if (!t->type->cb.unflatten)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s has no unflatten callback", op, t->type->name);
  kiln_status st = t->type->cb.unflatten(t->aux, t->aux_size, (const kiln_tree *const *)t->children,
                                         t->n, t->type->cb.user, obj);
  if (st)
    return kcore_fail_wrap(st, "%s: the unflatten callback of %s failed (%s)", op, t->type->name,
                           kiln_status_str(st));
  return KILN_OK;
}

/* The kind's name, for messages about a node that is not what was asked. */
static const char *ktree_kind_name(const kiln_tree *t) {
  if (!t) return "NULL";
  switch (t->kind) {
    case KILN_NODE_NONE: return "None";
    case KILN_NODE_LEAF: return "a leaf";
    case KILN_NODE_TUPLE: return "a tuple";
    case KILN_NODE_LIST: return "a list";
    case KILN_NODE_DICT: return "a dict";
    case KILN_NODE_CUSTOM: return "a custom node";
  }
  return "an unknown node";
}

const kiln_node_type *kiln_tree_node_type(const kiln_tree *t) {
  if (t && t->kind == KILN_NODE_CUSTOM) return t->type;
  kcore_fail(KILN_ERR_TREE, "kiln_tree_node_type: the tree is %s, not a custom node",
             ktree_kind_name(t));
  return NULL;
}

const void *kiln_tree_aux(const kiln_tree *t, size_t *aux_size) {
  bool custom = t && t->kind == KILN_NODE_CUSTOM;
  if (aux_size) *aux_size = custom ? t->aux_size : 0;
  if (!custom)
    kcore_fail(KILN_ERR_TREE, "kiln_tree_aux: the tree is %s, not a custom node",
               ktree_kind_name(t));
  else if (!t->aux)
    kcore_fail(KILN_ERR_TREE, "kiln_tree_aux: the %s node has no aux data", t->type->name);
  return custom ? t->aux : NULL;
}

/* ---- copying and freeing ---- */

static kiln_tree *ktree_clone_node(const kiln_tree *t) {
  const char *op = "kiln_tree_clone";
  if (t->kind == KILN_NODE_LEAF) return ktree_leaf_copy(op, &t->leaf);
  kiln_tree *c = ktree_alloc(op, t->kind, t->n);
  if (!c) return NULL;
  c->type = t->type;
  if (t->aux_size > 0) {
    c->aux = malloc(t->aux_size);
    if (!c->aux) goto oom;
    memcpy(c->aux, t->aux, t->aux_size);
    c->aux_size = t->aux_size;
  }
  for (size_t i = 0; i < t->n; i++) {
    if (t->keys && !(c->keys[i] = kcore_strdup(t->keys[i]))) goto oom;
    if (!(c->children[i] = ktree_clone_node(t->children[i]))) goto fail;
  }
  ktree_seal(op, c); /* cannot fail: the same depth as t */
  return c;
oom:
  kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
fail:
  ktree_free_node(c);
  return NULL;
}

kiln_tree *kiln_tree_clone(const kiln_tree *t) {
  if (!t) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_clone: the tree is NULL");
    return NULL;
  }
  return ktree_clone_node(t);
}

void kiln_tree_free(kiln_tree *t) {
  if (!t) return;
  if (t->attached) {
    kcore_fail(KILN_ERR_TREE, "kiln_tree_free: the tree is a child of another tree; free its root");
    return;
  }
  ktree_free_node(t);
}

/* ---- reading ---- */

kiln_node_kind kiln_tree_kind(const kiln_tree *t) { return t ? t->kind : KILN_NODE_NONE; }

size_t kiln_tree_num_children(const kiln_tree *t) { return t ? t->n : 0; }

/* Child i, or NULL with a message naming op. */
static bool ktree_child_ok(const char *op, const kiln_tree *t, size_t i) {
  if (t && i < t->n) return true;
  if (!t)
    kcore_fail(KILN_ERR_ARGUMENT, "%s: the tree is NULL", op);
  else
    kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: child %zu is out of range (%s of %zu children)", op, i,
               ktree_kind_name(t), t->n);
  return false;
}

const kiln_tree *kiln_tree_child(const kiln_tree *t, size_t i) {
  return ktree_child_ok("kiln_tree_child", t, i) ? t->children[i] : NULL;
}

const char *kiln_tree_key(const kiln_tree *t, size_t i) {
  if (!ktree_child_ok("kiln_tree_key", t, i)) return NULL;
  if (t->kind == KILN_NODE_DICT) return t->keys[i];
  if (t->kind == KILN_NODE_CUSTOM && t->type->dataclass) return t->type->fields[i];
  kcore_fail(KILN_ERR_TREE, "kiln_tree_key: the children of %s have no keys (only dicts and "
             "dataclasses name theirs)", ktree_kind_name(t));
  return NULL;
}

const kiln_leaf *kiln_tree_leaf_get(const kiln_tree *t) {
  if (t && t->kind == KILN_NODE_LEAF) return &t->leaf;
  kcore_fail(KILN_ERR_TREE, "kiln_tree_leaf_get: the tree is %s, not a leaf", ktree_kind_name(t));
  return NULL;
}

kiln_array *kiln_tree_leaf_array(const kiln_tree *t) {
  const kiln_leaf *l = t && t->kind == KILN_NODE_LEAF ? &t->leaf : NULL;
  if (l && l->kind == KILN_LEAF_ARRAY) return l->u.array;
  kcore_fail(KILN_ERR_TREE, "kiln_tree_leaf_array: the tree is %s, not an array leaf",
             !l ? ktree_kind_name(t) : l->kind == KILN_LEAF_VAL ? "a traced-value leaf"
                                                              : "a pointer leaf");
  return NULL;
}

const kiln_tree *kiln_tree_get(const kiln_tree *t, const char *key) {
  if (!key) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_get: the key is NULL");
    return NULL;
  }
  if (!t || t->kind != KILN_NODE_DICT) {
    kcore_fail(KILN_ERR_TREE, "kiln_tree_get: the tree is %s, not a dict (looking up '%s')",
               ktree_kind_name(t), key);
    return NULL;
  }
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(t->keys[mid], key);
    if (c == 0) return t->children[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  char keys[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < t->n && used < sizeof keys; i++)
    used += (size_t)snprintf(keys + used, sizeof keys - used, "%s'%s'", i ? ", " : "", t->keys[i]);
  kcore_fail(KILN_ERR_TREE, "kiln_tree_get: no key '%s' in the dict (keys: %s)", key, keys);
  return NULL;
}

size_t kiln_tree_num_leaves(const kiln_tree *t) { return t ? t->num_leaves : 0; }
