/* Pytrees: nested containers of leaves, as JAX's tree_util.
 *
 * A kiln_tree is a value. Builders take ownership of the children they are
 * given (so one kiln_tree_free releases a whole tree) and return NULL on
 * failure, with kiln_last_error() set and every child given to them freed; a
 * NULL child makes the builder fail, so a nested expression is checked once.
 * A tree that is already a child of another cannot be given again. */
#ifndef KILN_TREE_H
#define KILN_TREE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/array.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tree kiln_tree;
typedef struct kiln_treedef kiln_treedef;
typedef struct kiln_node_type kiln_node_type;
typedef struct kiln_val kiln_val; /* a traced value (see trace.h) */

typedef enum kiln_node_kind {
  KILN_NODE_NONE = 0, /* None: a node with no children, not a leaf */
  KILN_NODE_LEAF,
  KILN_NODE_TUPLE,
  KILN_NODE_LIST,
  KILN_NODE_DICT,
  KILN_NODE_CUSTOM
} kiln_node_kind;

typedef enum kiln_leaf_kind {
  KILN_LEAF_ARRAY = 1, /* a kiln_array, retained by the tree */
  KILN_LEAF_VAL,       /* a traced value, owned by its trace */
  KILN_LEAF_PTR,       /* an opaque user pointer, borrowed */
  KILN_LEAF_TREE       /* a whole subtree taken as a leaf (flatten's is_leaf) */
} kiln_leaf_kind;

typedef struct kiln_leaf {
  kiln_leaf_kind kind;
  union {
    kiln_array *array;
    kiln_val *val;
    void *ptr;
    kiln_tree *tree;
  } u;
} kiln_leaf;

/* ---- building ---- */
kiln_tree *kiln_tree_none(void);
kiln_tree *kiln_tree_array(kiln_array *a); /* retains a */
kiln_tree *kiln_tree_val(kiln_val *v);
kiln_tree *kiln_tree_ptr(void *p);
kiln_tree *kiln_tree_leaf(kiln_leaf leaf); /* a TREE leaf is taken over */
kiln_tree *kiln_tree_tuple(size_t n, kiln_tree *const *children);
kiln_tree *kiln_tree_list(size_t n, kiln_tree *const *children);
/* Keys are copied and sorted (as JAX sorts dict keys); a repeated key fails. */
kiln_tree *kiln_tree_dict(size_t n, const char *const *keys, kiln_tree *const *children);
/* Deep copy: new nodes, the same (retained) arrays. */
kiln_tree *kiln_tree_clone(const kiln_tree *t);
void kiln_tree_free(kiln_tree *t); /* NULL is allowed */

/* ---- reading ---- */
kiln_node_kind kiln_tree_kind(const kiln_tree *t);
size_t kiln_tree_num_children(const kiln_tree *t);
const kiln_tree *kiln_tree_child(const kiln_tree *t, size_t i); /* NULL if out of range */
const char *kiln_tree_key(const kiln_tree *t, size_t i);       /* dict key or field name, else NULL */
const kiln_leaf *kiln_tree_leaf_get(const kiln_tree *t);      /* NULL unless a leaf */
kiln_array *kiln_tree_leaf_array(const kiln_tree *t);         /* borrowed; NULL unless an array leaf */
/* Dict lookup by key; NULL if t is no dict or has no such key. */
const kiln_tree *kiln_tree_get(const kiln_tree *t, const char *key);

/* ---- custom nodes (register_pytree_node / register_dataclass) ----
 * A custom node holds children and auxiliary data (bytes, copied; treedefs
 * compare them with memcmp, as JAX compares aux data with ==). The callbacks
 * convert a user object to and from that form. */
typedef struct kiln_node_callbacks {
  /* Object -> children (new trees, ownership passes) and aux bytes (malloc'ed,
   * ownership passes; may be NULL/0). */
  kiln_status (*flatten)(const void *obj, void *user, kiln_tree ***children, size_t *n,
                         void **aux, size_t *aux_size);
  /* Children (borrowed) and aux -> a new object in *obj. */
  kiln_status (*unflatten)(const void *aux, size_t aux_size, const kiln_tree *const *children,
                           size_t n, void *user, void **obj);
  /* Optional: prints aux data into buf for treedef printing. */
  void (*print_aux)(const void *aux, size_t aux_size, char *buf, size_t cap);
  void *user;
} kiln_node_callbacks;

/* Registers a node type by unique name; the registry is process-wide and
 * guarded by a lock. Re-registering a name is KILN_ERR_ARGUMENT. */
kiln_status kiln_register_node(const char *name, const kiln_node_callbacks *cb,
                               const kiln_node_type **out);
/* A dataclass-like node: named data fields become children (key paths
 * `.field`), meta fields are aux data. */
kiln_status kiln_register_dataclass(const char *name, size_t n_fields, const char *const *fields,
                                    const kiln_node_type **out);
const kiln_node_type *kiln_node_type_find(const char *name);
const char *kiln_node_type_name(const kiln_node_type *t);

/* A custom node straight from children and aux data. For a dataclass, the
 * children come in field order. */
kiln_tree *kiln_tree_custom(const kiln_node_type *type, size_t n, kiln_tree *const *children,
                            const void *aux, size_t aux_size);
/* Through the type's flatten callback. */
kiln_tree *kiln_tree_from_object(const kiln_node_type *type, const void *obj);
/* Through the type's unflatten callback. */
kiln_status kiln_tree_to_object(const kiln_tree *t, void **obj);
const kiln_node_type *kiln_tree_node_type(const kiln_tree *t);
const void *kiln_tree_aux(const kiln_tree *t, size_t *aux_size);

/* ---- flatten / unflatten / treedefs ---- */
/* Decides whether a subtree is a leaf (jax.tree.flatten's is_leaf). */
typedef int (*kiln_is_leaf_fn)(const kiln_tree *subtree, void *user);

/* Leaves in order (arrays retained: free with kiln_leaves_free) and the
 * structure. Subtrees chosen by is_leaf come back as KILN_LEAF_TREE leaves
 * holding copies. Any output pointer may be NULL. None contributes no leaf. */
kiln_status kiln_tree_flatten(const kiln_tree *t, kiln_is_leaf_fn is_leaf, void *user,
                              kiln_leaf **leaves, size_t *n_leaves, kiln_treedef **def);
void kiln_leaves_free(kiln_leaf *leaves, size_t n);
/* Rebuilds a tree from n leaves (copied: arrays retained, TREE leaves cloned).
 * A wrong count is KILN_ERR_TREE. */
kiln_status kiln_tree_unflatten(const kiln_treedef *def, const kiln_leaf *leaves, size_t n,
                                kiln_tree **out);
size_t kiln_tree_num_leaves(const kiln_tree *t);

size_t kiln_treedef_num_leaves(const kiln_treedef *d);
size_t kiln_treedef_num_nodes(const kiln_treedef *d);
int kiln_treedef_equal(const kiln_treedef *a, const kiln_treedef *b);
uint64_t kiln_treedef_hash(const kiln_treedef *d);
kiln_treedef *kiln_treedef_clone(const kiln_treedef *d);
void kiln_treedef_free(kiln_treedef *d);
/* "PyTreeDef({'b': [*, *], 'w': *})". Returns the full length (as snprintf);
 * buf may be NULL when cap is 0. */
size_t kiln_treedef_str(const kiln_treedef *d, char *buf, size_t cap);
/* Writes the first path at which the two structures differ, or "" if equal. */
void kiln_treedef_diff(const kiln_treedef *a, const kiln_treedef *b, char *buf, size_t cap);

/* ---- key paths ---- */
typedef enum kiln_key_kind {
  KILN_KEY_INDEX = 1, /* SequenceKey / FlattenedIndexKey: [0] */
  KILN_KEY_DICT,      /* DictKey: ['w'] */
  KILN_KEY_ATTR       /* GetAttrKey (dataclass fields): .w */
} kiln_key_kind;

typedef struct kiln_key {
  kiln_key_kind kind;
  size_t index;     /* INDEX */
  const char *name; /* DICT, ATTR */
} kiln_key;

typedef struct kiln_path {
  size_t len;
  const kiln_key *keys;
} kiln_path;

/* Key paths of every leaf in flatten order; free with kiln_paths_free. */
kiln_status kiln_tree_leaf_paths(const kiln_tree *t, kiln_path **paths, size_t *n);
void kiln_paths_free(kiln_path *paths, size_t n);
/* keystr: "['params']['w']", "[0]", ".w"; "" for the root. */
size_t kiln_path_str(const kiln_path *p, char *buf, size_t cap);
/* The subtree at `path` (borrowed), or KILN_ERR_TREE naming the missing key. */
kiln_status kiln_tree_at(const kiln_tree *t, const kiln_path *path, const kiln_tree **out);

/* ---- map ---- */
/* f gets the i-th leaf of each of the n trees and returns the new leaf in
 * *out (an array leaf handed over: the result tree takes that reference). */
typedef kiln_status (*kiln_map_fn)(const kiln_leaf *const *leaves, size_t n_trees, void *user,
                                   kiln_leaf *out);
/* jax.tree.map over n_trees trees of the same structure; a mismatch is
 * KILN_ERR_TREE naming the first differing key path. */
kiln_status kiln_tree_map(kiln_map_fn f, void *user, size_t n_trees,
                          const kiln_tree *const *trees, kiln_tree **out);

/* A readable rendering of a tree, leaves shown as "f32[2,3]" for arrays and
 * "*" otherwise. Returns the full length (as snprintf). */
size_t kiln_tree_str(const kiln_tree *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
