/* Argument access and result builders for traced functions: the i-th
 * argument, the subtree at a keystr-style path, and tuples/dicts of values.
 * Failures return NULL with kiln_last_error() naming the path; an op given
 * that NULL then fails the trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tree/tree.h"

/* A leaf's traced value, or NULL with a message naming `where`. */
static kiln_val *ktree_val_of(const kiln_tree *t, const char *fn, const char *where) {
  const kiln_leaf *l = kiln_tree_leaf_get(t);
  if (l && l->kind == KILN_LEAF_VAL) return l->u.val;
  kcore_fail(KILN_ERR_TREE, "%s: %s is %s, not a traced value", fn, where,
             !l ? "a subtree" : l->kind == KILN_LEAF_ARRAY ? "an array" : "a pointer leaf");
  return NULL;
}

kiln_val *kiln_arg(const kiln_tree *args, size_t i) {
  const kiln_tree *c = kiln_tree_child(args, i);
  if (!args || !c) {
    kcore_fail(KILN_ERR_TREE, "kiln_arg: argument %zu is out of range (%zu arguments)", i,
               kiln_tree_num_children(args));
    return NULL;
  }
  char where[40];
  snprintf(where, sizeof where, "argument %zu", i);
  return ktree_val_of(c, "kiln_arg", where);
}

/* Parses one key of "['a'][0].b" at *s into k (name copied into the arena
 * `names`), advancing *s; false on a malformed key. */
static bool ktree_parse_key(const char **s, kiln_key *k, char **names) {
  const char *p = *s;
  if (*p == '.') {
    size_t n = strcspn(p + 1, ".[");
    if (!n) return false;
    memcpy(*names, p + 1, n);
    (*names)[n] = '\0';
    *k = (kiln_key){.kind = KILN_KEY_ATTR, .name = *names};
    *names += n + 1;
    *s = p + 1 + n;
    return true;
  }
  if (*p != '[') return false;
  p++;
  if (*p == '\'' || *p == '"') {
    const char *end = strchr(p + 1, *p);
    if (!end || end[1] != ']') return false;
    size_t n = (size_t)(end - p - 1);
    memcpy(*names, p + 1, n);
    (*names)[n] = '\0';
    *k = (kiln_key){.kind = KILN_KEY_DICT, .name = *names};
    *names += n + 1;
    *s = end + 2;
    return true;
  }
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (end == p || *end != ']' || *p == '-') return false;
  *k = (kiln_key){.kind = KILN_KEY_INDEX, .index = (size_t)v};
  *s = end + 1;
  return true;
}

const kiln_tree *kiln_tree_at_str(const kiln_tree *t, const char *path) {
  if (!t || !path) {
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_at_str: %s is NULL", !t ? "tree" : "path");
    return NULL;
  }
  size_t len = strlen(path);
  kiln_key *keys = malloc((len + 1) * sizeof *keys);
  char *names = malloc(len + 1), *cursor = names;
  if (!keys || !names) {
    free(keys);
    free(names);
    kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_tree_at_str: out of host memory for %s", path);
    return NULL;
  }
  kiln_path kp = {0, keys};
  const char *s = path;
  const kiln_tree *out = NULL;
  while (*s && ktree_parse_key(&s, &keys[kp.len], &cursor)) kp.len++;
  if (*s)
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tree_at_str: cannot parse \"%s\" at offset %zu (keys are "
               "['name'], [index] or .field)", path, (size_t)(s - path));
  else if (kiln_tree_at(t, &kp, &out)) {
    char why[1024]; /* copied: kcore_fail rewrites the message it is given */
    snprintf(why, sizeof why, "%s", kiln_last_error());
    kcore_fail(KILN_ERR_TREE, "%s (path \"%s\")", why, path);
  }
  free(keys);
  free(names);
  return out;
}

kiln_array *kiln_get(const kiln_tree *t, const char *path) {
  const kiln_tree *sub = kiln_tree_at_str(t, path);
  if (!sub) {
    char why[1024]; /* copied: kcore_fail rewrites the message it is given */
    snprintf(why, sizeof why, "%s", kiln_last_error());
    kcore_fail(KILN_ERR_TREE, "kiln_get: %s", why);
    return NULL;
  }
  const kiln_leaf *l = sub->kind == KILN_NODE_LEAF ? &sub->leaf : NULL;
  if (l && l->kind == KILN_LEAF_ARRAY) return l->u.array;
  kcore_fail(KILN_ERR_TREE, "kiln_get: the %s at %s is not an array",
             !l ? "subtree" : l->kind == KILN_LEAF_VAL ? "traced value" : "pointer leaf",
             path[0] ? path : "the root");
  return NULL;
}

kiln_val *kiln_arg_path(const kiln_tree *args, const char *path) {
  const kiln_tree *sub = kiln_tree_at_str(args, path);
  if (!sub) {
    char why[1024]; /* copied: kcore_fail rewrites the message it is given */
    snprintf(why, sizeof why, "%s", kiln_last_error());
    kcore_fail(KILN_ERR_TREE, "kiln_arg_path: %s", why);
    return NULL;
  }
  char where[200];
  snprintf(where, sizeof where, "the leaf at %s", path);
  return ktree_val_of(sub, "kiln_arg_path", where);
}

/* Leaves for n values; on failure the ones made so far are freed. */
static bool ktree_val_leaves(const char *fn, size_t n, kiln_val *const *vals, kiln_tree **out) {
  for (size_t i = 0; i < n; i++) {
    if (!vals[i] || !(out[i] = kiln_tree_val(vals[i]))) {
      if (!vals[i]) kcore_fail(KILN_ERR_ARGUMENT, "%s: value %zu is NULL", fn, i);
      for (size_t j = 0; j < i; j++) kiln_tree_free(out[j]);
      return false;
    }
  }
  return true;
}

kiln_tree *kiln_tuple_of(size_t n, kiln_val *const *vals) {
  kiln_tree *stack[16] = {NULL}, **c = n <= 16 ? stack : malloc(n * sizeof *c);
  if (!c || (n && !vals)) {
    if (c != stack) free(c);
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_tuple_of: %s", c ? "vals is NULL" : "out of host memory");
    return NULL;
  }
  kiln_tree *t = ktree_val_leaves("kiln_tuple_of", n, vals, c) ? kiln_tree_tuple(n, c) : NULL;
  if (c != stack) free(c);
  return t;
}

kiln_tree *kiln_dict_of(size_t n, const char *const *keys, kiln_val *const *vals) {
  kiln_tree *stack[16] = {NULL}, **c = n <= 16 ? stack : malloc(n * sizeof *c);
  if (!c || (n && (!vals || !keys))) {
    if (c != stack) free(c);
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_dict_of: %s",
               c ? "keys or vals is NULL" : "out of host memory");
    return NULL;
  }
  kiln_tree *t = ktree_val_leaves("kiln_dict_of", n, vals, c) ? kiln_tree_dict(n, keys, c) : NULL;
  if (c != stack) free(c);
  return t;
}
