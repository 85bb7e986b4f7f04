/* tree: pytree nodes, treedefs, key paths, map and the custom node registry.
 * The only door of src/tree; prefix ktree_. */
#ifndef KILN_SRC_TREE_H
#define KILN_SRC_TREE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/core.h"
#include "kiln/tree.h"

/* A node. Children are owned; a node given to a builder becomes `attached`
 * and from then on belongs to its parent. The subtree counts are cached at
 * construction (nodes never change after it), so sizing a flatten or a
 * treedef needs no extra walk. */
struct kiln_tree {
  kiln_node_kind kind;
  bool attached;   /* a child of another node */
  bool claimed;    /* transient: seen once by the builder now checking it */
  uint32_t height; /* 1 for a node without children */
  size_t n;        /* children */
  kiln_tree **children;
  char **keys;                /* DICT: n keys, sorted by strcmp */
  kiln_leaf leaf;             /* LEAF: never of kind TREE */
  const kiln_node_type *type; /* CUSTOM */
  void *aux;                  /* CUSTOM: aux_size bytes, owned */
  size_t aux_size;
  size_t num_leaves; /* in the subtree */
  size_t num_nodes;  /* in the subtree, this node included */
  size_t num_keys;   /* dict keys in the subtree */
  size_t num_bytes;  /* key bytes (NULs included) and aux bytes in the subtree */
  kiln_tree *link;   /* transient: the list a failing builder frees */
};

struct kiln_node_type {
  char *name;
  kiln_node_callbacks cb;
  bool dataclass;
  size_t n_fields; /* dataclass data fields, in child order */
  char **fields;
  size_t n_meta; /* string meta fields (kiln_register_dataclass_meta) */
  char **meta;
  struct kiln_node_type *next; /* the registry's list */
};

/* A treedef is its nodes in pre-order. Dict keys and aux bytes live in one
 * byte block; `keys` points into it. */
typedef struct ktree_defnode {
  kiln_node_kind kind;
  size_t arity;
  size_t num_leaves; /* in the subtree */
  size_t num_nodes;  /* in the subtree, this node included: skips it */
  size_t first_key;  /* DICT: index of its first key in the treedef's `keys` */
  const kiln_node_type *type;
  size_t aux_off; /* CUSTOM: offset of its aux data in `bytes` */
  size_t aux_size;
} ktree_defnode;

struct kiln_treedef {
  size_t n_nodes, n_leaves, n_keys, n_bytes;
  ktree_defnode *nodes;
  const char **keys;
  char *bytes;
  uint64_t hash;
};

/* Appends into a fixed buffer, counting the full length as snprintf does. */
typedef struct ktree_sb {
  char *buf;
  size_t cap;
  size_t len;
} ktree_sb;

/* ---- nodes (node.c) ---- */
/* A node of `kind` with room for n children (zeroed), or NULL with the
 * message set naming op. */
kiln_tree *ktree_alloc(const char *op, kiln_node_kind kind, size_t n);
/* Marks the children attached, fills the cached counts and checks the depth;
 * on failure frees t (children included). */
kiln_status ktree_seal(const char *op, kiln_tree *t);
/* Frees a node and its subtree, attached or not. */
void ktree_free_node(kiln_tree *t);
/* A leaf node holding a copy of leaf (ARRAY retained; TREE cloned). */
kiln_tree *ktree_leaf_copy(const char *op, const kiln_leaf *leaf);
/* Checks that leaf i is well formed; a TREE leaf that kiln will `take` must
 * be free-standing. */
kiln_status ktree_leaf_check(const char *op, const kiln_leaf *leaf, size_t i, bool take);

/* ---- node shapes (shape.c): what a node is, children aside ---- */
typedef struct ktree_shape {
  kiln_node_kind kind;
  size_t arity;
  const char *const *keys; /* DICT */
  const kiln_node_type *type;
  const void *aux;
  size_t aux_size;
} ktree_shape;

ktree_shape ktree_shape_of_tree(const kiln_tree *t);
ktree_shape ktree_shape_of_def(const kiln_treedef *d, size_t node);
/* The key that names child i of a node of this shape. */
kiln_key ktree_child_key(const ktree_shape *s, size_t i);
bool ktree_shape_equal(const ktree_shape *a, const ktree_shape *b);
/* Mixes the shape into a structure hash (kcore_hash_*). */
uint64_t ktree_shape_hash(uint64_t h, const ktree_shape *s);
/* Describes how b differs from a into `why` (e.g. "list vs tuple"); for a
 * dict key mismatch *key is the first differing key and *has_key is set. */
void ktree_shape_explain(const ktree_shape *a, const ktree_shape *b, char *why, size_t cap,
                         kiln_key *key, bool *has_key);
/* "at <path>: <how b differs from a>", the path (path[0..depth), with room
 * for one more key) extended by the differing dict key if there is one. */
void ktree_sb_diff(ktree_sb *sb, const ktree_shape *a, const ktree_shape *b, kiln_key *path,
                   size_t depth);
/* "leaf", "None", "tuple", "list", "dict", "CustomNode P". */
void ktree_shape_name(const ktree_shape *s, char *buf, size_t cap);

/* ---- text (print.c) ---- */
void ktree_sb_init(ktree_sb *sb, char *buf, size_t cap);
void ktree_sb_put(ktree_sb *sb, const char *s, size_t n);
void ktree_sb_puts(ktree_sb *sb, const char *s);
void ktree_sb_printf(ktree_sb *sb, const char *fmt, ...) KCORE_PRINTF(2, 3);
/* Python's repr of a str: 'w', "it's", 'x\ny'. */
void ktree_sb_repr(ktree_sb *sb, const char *s);
/* How a treedef prints a custom node's aux data (see tree.h). */
void ktree_sb_aux(ktree_sb *sb, const kiln_node_type *type, const void *aux, size_t size);
void ktree_sb_key(ktree_sb *sb, const kiln_key *k);
/* keystr of keys[0..len): "['params']['w']"; "" for the root. */
void ktree_sb_path(ktree_sb *sb, const kiln_key *keys, size_t len);
/* "at ['params']['w']" or "at the root", for messages. */
void ktree_sb_where(ktree_sb *sb, const kiln_key *keys, size_t len);
/* The treedef's text cut to cap with "..." (for messages). */
void ktree_def_brief(const kiln_treedef *d, char *buf, size_t cap);

/* ---- treedefs (treedef.c) ---- */
/* Builds a tree from def and leaves, copying each leaf (ktree_leaf_copy). */
kiln_status ktree_build(const char *op, const kiln_treedef *def, const kiln_leaf *leaves,
                        kiln_tree **out);
/* The structure hash of a tree, equal to kiln_treedef_hash of its treedef,
 * computed without building one (for caches keyed by structure). */
uint64_t ktree_structure_hash(const kiln_tree *t);
/* Whether t has exactly the structure d, without building a treedef. */
bool ktree_structure_matches(const kiln_treedef *d, const kiln_tree *t);
/* Leaf pointers in flatten order, borrowed, without allocating: writes up to
 * cap of them and returns the leaf count. */
size_t ktree_leaves_borrow(const kiln_tree *t, const kiln_leaf **out, size_t cap);

/* ---- registry (registry.c) ---- */
/* Validates aux data for a node of this type (dataclass meta strings). */
kiln_status ktree_aux_check(const char *op, const kiln_node_type *type, const void *aux,
                            size_t size);

#endif
