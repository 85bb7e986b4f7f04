/* Pytrees: nested containers of leaves, as JAX's tree_util.
 *
 * A kiln_tree is a value: building, mapping and flattening never alias, and
 * one kiln_tree_free releases a whole tree (its arrays are released).
 *
 * Ownership. Builders take ownership of the children they are given. Each
 * child must be a free-standing tree (a root, not already a child of another
 * tree) and may be given once. On failure a builder returns NULL, sets
 * kiln_last_error(), and frees every distinct free-standing child it was given
 * exactly once; a child that already belongs to another tree is left to that
 * tree (giving it is KILN_ERR_TREE), and a child given twice is freed once
 * (KILN_ERR_TREE). A NULL child makes the builder fail with
 * KILN_ERR_ARGUMENT, prefixing the message of the failure that produced it,
 * so a nested expression is checked once, at the top.
 *
 * Trees nest at most KILN_TREE_MAX_DEPTH levels; deeper is KILN_ERR_TREE.
 * A tree is not synchronised: share it between threads only for reading. */
#ifndef KILN_TREE_H
#define KILN_TREE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/array.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_TREE_MAX_DEPTH 1000

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
  KILN_LEAF_TREE       /* a whole subtree taken as a leaf (flatten's is_leaf); in a
                          tree it is spliced: the subtree takes the leaf's place */
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
kiln_tree *kiln_tree_array(kiln_array *a); /* retains a; NULL fails */
kiln_tree *kiln_tree_val(kiln_val *v);     /* NULL fails */
kiln_tree *kiln_tree_ptr(void *p);         /* any pointer, NULL included */
/* An ARRAY leaf is retained. A TREE leaf's tree is taken over and returned
 * itself (it must be free-standing; if it is not, it is left alone). */
kiln_tree *kiln_tree_leaf(kiln_leaf leaf);
kiln_tree *kiln_tree_tuple(size_t n, kiln_tree *const *children);
kiln_tree *kiln_tree_list(size_t n, kiln_tree *const *children);
/* Keys are copied and sorted by byte value (Python's order for str keys, as
 * JAX sorts dict keys); a NULL or repeated key is KILN_ERR_ARGUMENT. */
kiln_tree *kiln_tree_dict(size_t n, const char *const *keys, kiln_tree *const *children);
/* Deep copy: new nodes, the same (retained) arrays. */
kiln_tree *kiln_tree_clone(const kiln_tree *t);
/* NULL is allowed. A tree that is a child of another is not freed (its root
 * owns it): the call sets kiln_last_error() and does nothing. */
void kiln_tree_free(kiln_tree *t);

/* ---- reading ---- */
kiln_node_kind kiln_tree_kind(const kiln_tree *t); /* KILN_NODE_NONE for NULL */
size_t kiln_tree_num_children(const kiln_tree *t);
const kiln_tree *kiln_tree_child(const kiln_tree *t, size_t i); /* NULL if out of range */
const char *kiln_tree_key(const kiln_tree *t, size_t i);       /* dict key or field name, else NULL */
const kiln_leaf *kiln_tree_leaf_get(const kiln_tree *t);      /* NULL unless a leaf; never TREE */
kiln_array *kiln_tree_leaf_array(const kiln_tree *t);         /* borrowed; NULL unless an array leaf */
/* Dict lookup by key; NULL if t is no dict or has no such key. */
const kiln_tree *kiln_tree_get(const kiln_tree *t, const char *key);

/* ---- custom nodes (register_pytree_node / register_dataclass) ----
 * A custom node holds children and auxiliary data (bytes, copied; treedefs
 * compare them with memcmp, as JAX compares aux data with ==). The callbacks
 * convert a user object to and from that form. Key paths name the children
 * of a registered node by position (JAX's FlattenedIndexKey, "[<flat index
 * 0>]") and those of a dataclass by field (".w"). Treedefs print a custom node
 * as JAX does, "CustomNode(name[aux], [children])", with aux rendered by
 * print_aux, else: "None" when empty, the text when it is printable (one
 * trailing NUL allowed), else "0x" and hex digits. */
typedef struct kiln_node_callbacks {
  /* Object -> children and aux bytes. *children is a malloc'ed array of n new
   * trees and *aux malloc'ed bytes (may be NULL/0): both pass to kiln. On
   * failure the callback frees what it made and returns an error status. */
  kiln_status (*flatten)(const void *obj, void *user, kiln_tree ***children, size_t *n,
                         void **aux, size_t *aux_size);
  /* Children (borrowed) and aux -> a new object in *obj. */
  kiln_status (*unflatten)(const void *aux, size_t aux_size, const kiln_tree *const *children,
                           size_t n, void *user, void **obj);
  /* Optional: prints aux data into buf (cap bytes, NUL-terminated, as
   * snprintf) for treedef printing; longer output is cut. */
  void (*print_aux)(const void *aux, size_t aux_size, char *buf, size_t cap);
  void *user;
} kiln_node_callbacks;

/* Registers a node type by unique name (flatten and unflatten required); the
 * registry is process-wide, guarded by a lock, and types live until the
 * process ends. Re-registering a name is KILN_ERR_ARGUMENT. out may be NULL. */
kiln_status kiln_register_node(const char *name, const kiln_node_callbacks *cb,
                               const kiln_node_type **out);
/* A dataclass-like node: named data fields become children (key paths
 * `.field`), meta fields are aux data (any bytes; printed "()" when empty, as
 * JAX prints a dataclass without meta fields). Field names must be distinct. */
kiln_status kiln_register_dataclass(const char *name, size_t n_fields, const char *const *fields,
                                    const kiln_node_type **out);
/* A dataclass with named meta fields whose values are strings: a node's aux
 * data is the n_meta values back to back, each NUL-terminated ("lin\0"), and
 * prints as JAX prints the meta tuple: "P[('lin',)]". */
kiln_status kiln_register_dataclass_meta(const char *name, size_t n_fields,
                                         const char *const *fields, size_t n_meta,
                                         const char *const *meta_fields,
                                         const kiln_node_type **out);
/* NULL (with kiln_last_error() set) if no type has that name. */
const kiln_node_type *kiln_node_type_find(const char *name);
const char *kiln_node_type_name(const kiln_node_type *t);

/* A custom node straight from children and aux data (copied). For a
 * dataclass, the children come in field order and must match the field count
 * (KILN_ERR_TREE). A NULL type is KILN_ERR_ARGUMENT. */
kiln_tree *kiln_tree_custom(const kiln_node_type *type, size_t n, kiln_tree *const *children,
                            const void *aux, size_t aux_size);
/* Through the type's flatten callback (a dataclass has none:
 * KILN_ERR_ARGUMENT). */
kiln_tree *kiln_tree_from_object(const kiln_node_type *type, const void *obj);
/* Through the type's unflatten callback; t must be a custom node. */
kiln_status kiln_tree_to_object(const kiln_tree *t, void **obj);
const kiln_node_type *kiln_tree_node_type(const kiln_tree *t);
const void *kiln_tree_aux(const kiln_tree *t, size_t *aux_size);

/* ---- flatten / unflatten / treedefs ---- */
/* Decides whether a subtree is a leaf (jax.tree.flatten's is_leaf). */
typedef int (*kiln_is_leaf_fn)(const kiln_tree *subtree, void *user);

/* Leaves in order (arrays retained: free with kiln_leaves_free) and the
 * structure. is_leaf (may be NULL) is asked once about every node that is not
 * a leaf, None included, before its children; the subtrees it chooses come
 * back as KILN_LEAF_TREE leaves holding copies. Any output pointer may be
 * NULL; they are written only on success. None contributes no leaf. */
kiln_status kiln_tree_flatten(const kiln_tree *t, kiln_is_leaf_fn is_leaf, void *user,
                              kiln_leaf **leaves, size_t *n_leaves, kiln_treedef **def);
void kiln_leaves_free(kiln_leaf *leaves, size_t n);
/* Rebuilds a tree from n leaves (copied: arrays retained, TREE leaves cloned
 * and spliced in, as jax.tree.unflatten puts subtrees in place). A wrong count
 * is KILN_ERR_TREE. */
kiln_status kiln_tree_unflatten(const kiln_treedef *def, const kiln_leaf *leaves, size_t n,
                                kiln_tree **out);
size_t kiln_tree_num_leaves(const kiln_tree *t);

size_t kiln_treedef_num_leaves(const kiln_treedef *d);
size_t kiln_treedef_num_nodes(const kiln_treedef *d); /* every node, leaves and None included */
int kiln_treedef_equal(const kiln_treedef *a, const kiln_treedef *b);
uint64_t kiln_treedef_hash(const kiln_treedef *d);
kiln_treedef *kiln_treedef_clone(const kiln_treedef *d);
void kiln_treedef_free(kiln_treedef *d);
/* "PyTreeDef({'b': [*, *], 'w': *})", exactly as JAX prints it (dict keys in
 * Python's repr). Returns the full length (as snprintf); buf may be NULL when
 * cap is 0. */
size_t kiln_treedef_str(const kiln_treedef *d, char *buf, size_t cap);
/* Writes where the two structures first differ (in pre-order) and how, e.g.
 * "at ['params']['w']: dict keys ['b','w'] vs ['b','x']" or "at the root:
 * list vs tuple", or "" if they are equal. A dict key mismatch names the
 * first differing key in the path. */
void kiln_treedef_diff(const kiln_treedef *a, const kiln_treedef *b, char *buf, size_t cap);

/* ---- key paths ---- */
typedef enum kiln_key_kind {
  KILN_KEY_INDEX = 1, /* SequenceKey (lists, tuples): [0] */
  KILN_KEY_DICT,      /* DictKey: ['w'] */
  KILN_KEY_ATTR,      /* GetAttrKey (dataclass fields): .w */
  KILN_KEY_FLAT       /* FlattenedIndexKey (registered nodes): [<flat index 0>] */
} kiln_key_kind;

typedef struct kiln_key {
  kiln_key_kind kind;
  size_t index;     /* INDEX, FLAT */
  const char *name; /* DICT, ATTR */
} kiln_key;

typedef struct kiln_path {
  size_t len;
  const kiln_key *keys;
} kiln_path;

/* Key paths of every leaf in flatten order (tree_flatten_with_path without
 * is_leaf), in one allocation that owns its names; free with
 * kiln_paths_free. */
kiln_status kiln_tree_leaf_paths(const kiln_tree *t, kiln_path **paths, size_t *n);
/* The same for the leaves of a treedef. */
kiln_status kiln_treedef_leaf_paths(const kiln_treedef *d, kiln_path **paths, size_t *n);
/* jax.tree_util.tree_flatten_with_path: kiln_tree_flatten's leaves (is_leaf
 * as there, asked once per node) with the path of each. leaves and paths may
 * be NULL. */
kiln_status kiln_tree_flatten_with_path(const kiln_tree *t, kiln_is_leaf_fn is_leaf, void *user,
                                        kiln_leaf **leaves, kiln_path **paths, size_t *n);
void kiln_paths_free(kiln_path *paths, size_t n);
/* jax.tree_util.keystr: "['params']['w']", "[0]", ".w", "[<flat index 0>]";
 * "" for the root. Returns the full length (as snprintf). */
size_t kiln_path_str(const kiln_path *p, char *buf, size_t cap);
/* The subtree at `path` (borrowed), or KILN_ERR_TREE naming the missing key or
 * the index out of range. Each key must suit its node: DICT a dict, INDEX a
 * list or tuple, ATTR a dataclass, FLAT a custom node. */
kiln_status kiln_tree_at(const kiln_tree *t, const kiln_path *path, const kiln_tree **out);

/* The subtree at a keystr-style path ("['params']['w']", "[0]", ".w"; ""
 * is the root), borrowed; NULL with kiln_last_error() naming the path and
 * the missing key. */
const kiln_tree *kiln_tree_at_str(const kiln_tree *t, const char *path);

/* The array at a keystr path, borrowed (it lives as long as the tree):
 * kiln_get(params, "['dense']['kernel']"); NULL with kiln_last_error()
 * naming the path and the missing key, or saying the subtree there is no
 * array leaf. */
kiln_array *kiln_get(const kiln_tree *t, const char *path);

/* jax.device_put(tree, device): a new tree of the same structure whose
 * array leaves are on dev (kiln_device_put of each: an array already there
 * is shared, not copied). A leaf that is not an array is KILN_ERR_TREE
 * naming its key path; a failed copy names the path too. */
kiln_status kiln_device_put_tree(const kiln_tree *t, kiln_device *dev, kiln_tree **out);
/* Every leaf on its own line under its key path, arrays as
 * kiln_array_format prints them (continuation lines indented under the
 * first), traced values as "<traced value>", pointers as "<pointer>":
 *   ['params']['b']: [0. 0.]
 *   ['params']['w']: [[1. 2.]
 *                     [3. 4.]]
 * buf gets at most cap bytes, NUL-terminated (NULL when cap is 0); *len
 * (may be NULL) the full length. */
kiln_status kiln_tree_format(const kiln_tree *t, char *buf, size_t cap, size_t *len);
/* kiln_tree_format to stream (NULL: stdout). */
kiln_status kiln_tree_print(const kiln_tree *t, FILE *stream);

/* ---- arguments and results of traced functions ---- */
/* The traced value of the i-th argument (args is the tuple a kiln_fn gets),
 * or the leaf at a keystr path; NULL with a message naming the index or the
 * path (an op given the NULL then fails the trace). */
kiln_val *kiln_arg(const kiln_tree *args, size_t i);
kiln_val *kiln_arg_path(const kiln_tree *args, const char *path);
/* A tuple / dict of value leaves (a kiln_fn's result); NULL if any value is
 * NULL (so a failed op flows through). */
kiln_tree *kiln_tuple_of(size_t n, kiln_val *const *vals);
kiln_tree *kiln_dict_of(size_t n, const char *const *keys, kiln_val *const *vals);

/* ---- map ---- */
/* f gets the i-th leaf of each of the n trees and returns the new leaf in
 * *out, handed over: the result tree takes an array leaf's reference and a
 * TREE leaf's tree (spliced in, as a function returning a pytree). On error f
 * returns a status and leaves *out empty. */
typedef kiln_status (*kiln_map_fn)(const kiln_leaf *const *leaves, size_t n_trees, void *user,
                                   kiln_leaf *out);
/* jax.tree.map over n_trees trees; the structure of tree 0 is the result's.
 * Every structure is checked before f is first called; f is then called in
 * leaf order, and if it fails the leaves it returned so far are released.
 * As in JAX, every other tree must have tree 0's structure or have it as a
 * prefix: where tree 0 has a leaf, the other tree's whole subtree goes to f
 * as a borrowed KILN_LEAF_TREE leaf (unless it is a leaf itself). A mismatch
 * is KILN_ERR_TREE naming the first differing key path, as
 * "kiln_tree_map: tree 1 differs from tree 0 at ['b']: None vs leaf". */
kiln_status kiln_tree_map(kiln_map_fn f, void *user, size_t n_trees,
                          const kiln_tree *const *trees, kiln_tree **out);

/* A readable rendering of a tree, leaves shown as "f32[2,3]" for arrays and
 * "*" otherwise. Returns the full length (as snprintf). */
size_t kiln_tree_str(const kiln_tree *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
