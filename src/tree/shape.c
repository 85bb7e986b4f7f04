/* Node shapes: a node with its children left out, as both trees and treedefs
 * see it, so that comparing, hashing and explaining a difference are written
 * once. */
#include <string.h>
#include "tree/tree.h"

ktree_shape ktree_shape_of_tree(const kiln_tree *t) {
  ktree_shape s = {.kind = t->kind,
                   .arity = t->n,
                   .keys = (const char *const *)t->keys,
                   .type = t->type,
                   .aux = t->aux,
                   .aux_size = t->aux_size};
  return s;
}

ktree_shape ktree_shape_of_def(const kiln_treedef *d, size_t node) {
  const ktree_defnode *n = &d->nodes[node];
  ktree_shape s = {.kind = n->kind,
                   .arity = n->arity,
                   .type = n->type,
                   .aux = n->aux_size ? d->bytes + n->aux_off : NULL,
                   .aux_size = n->aux_size};
  if (n->kind == KILN_NODE_DICT) s.keys = d->keys + n->first_key;
  return s;
}

kiln_key ktree_child_key(const ktree_shape *s, size_t i) {
  kiln_key k = {.kind = KILN_KEY_INDEX, .index = i};
  if (s->kind == KILN_NODE_DICT) {
    k.kind = KILN_KEY_DICT;
    k.name = s->keys[i];
  } else if (s->kind == KILN_NODE_CUSTOM && s->type->dataclass) {
    k.kind = KILN_KEY_ATTR;
    k.name = s->type->fields[i];
  } else if (s->kind == KILN_NODE_CUSTOM) {
    k.kind = KILN_KEY_FLAT;
  }
  return k;
}

/* Index of the first key at which two dicts differ, or SIZE_MAX. */
static size_t ktree_first_key_diff(const ktree_shape *a, const ktree_shape *b) {
  size_t n = a->arity < b->arity ? a->arity : b->arity;
  for (size_t i = 0; i < n; i++)
    if (strcmp(a->keys[i], b->keys[i]) != 0) return i;
  return a->arity == b->arity ? SIZE_MAX : n;
}

static bool ktree_aux_equal(const ktree_shape *a, const ktree_shape *b) {
  return a->aux_size == b->aux_size &&
         (a->aux_size == 0 || memcmp(a->aux, b->aux, a->aux_size) == 0);
}

bool ktree_shape_equal(const ktree_shape *a, const ktree_shape *b) {
  if (a->kind != b->kind || a->arity != b->arity) return false;
  if (a->kind == KILN_NODE_DICT) return ktree_first_key_diff(a, b) == SIZE_MAX;
  if (a->kind == KILN_NODE_CUSTOM) return a->type == b->type && ktree_aux_equal(a, b);
  return true;
}

uint64_t ktree_shape_hash(uint64_t h, const ktree_shape *s) {
  h = kcore_hash_u64(h, (uint64_t)s->kind);
  h = kcore_hash_u64(h, (uint64_t)s->arity);
  if (s->kind == KILN_NODE_DICT)
    for (size_t i = 0; i < s->arity; i++) h = kcore_hash_str(h, s->keys[i]);
  if (s->kind == KILN_NODE_CUSTOM) {
    /* The name, not the pointer: a hash stable across processes. */
    h = kcore_hash_str(h, s->type->name);
    h = kcore_hash_u64(h, (uint64_t)s->aux_size);
    h = kcore_hash_bytes(h, s->aux, s->aux_size);
  }
  return h;
}

void ktree_shape_name(const ktree_shape *s, char *buf, size_t cap) {
  static const char *const names[] = {
      [KILN_NODE_NONE] = "None", [KILN_NODE_LEAF] = "leaf", [KILN_NODE_TUPLE] = "tuple",
      [KILN_NODE_LIST] = "list", [KILN_NODE_DICT] = "dict", [KILN_NODE_CUSTOM] = "CustomNode"};
  ktree_sb sb;
  ktree_sb_init(&sb, buf, cap);
  ktree_sb_puts(&sb, names[s->kind]);
  if (s->kind == KILN_NODE_CUSTOM) ktree_sb_printf(&sb, " %s", s->type->name);
}

static void ktree_sb_key_list(ktree_sb *sb, const ktree_shape *s) {
  ktree_sb_puts(sb, "[");
  for (size_t i = 0; i < s->arity; i++) {
    if (i) ktree_sb_puts(sb, ",");
    ktree_sb_repr(sb, s->keys[i]);
  }
  ktree_sb_puts(sb, "]");
}

void ktree_shape_explain(const ktree_shape *a, const ktree_shape *b, char *why, size_t cap,
                         kiln_key *key, bool *has_key) {
  char an[160], bn[160];
  ktree_shape_name(a, an, sizeof an);
  ktree_shape_name(b, bn, sizeof bn);
  ktree_sb sb;
  ktree_sb_init(&sb, why, cap);
  *has_key = false;
  if (a->kind != b->kind || (a->kind == KILN_NODE_CUSTOM && a->type != b->type)) {
    ktree_sb_printf(&sb, "%s vs %s", an, bn);
  } else if (a->kind == KILN_NODE_DICT && ktree_first_key_diff(a, b) != SIZE_MAX) {
    size_t i = ktree_first_key_diff(a, b);
    *has_key = true;
    *key = ktree_child_key(i < a->arity ? a : b, i);
    ktree_sb_puts(&sb, "dict keys ");
    ktree_sb_key_list(&sb, a);
    ktree_sb_puts(&sb, " vs ");
    ktree_sb_key_list(&sb, b);
  } else if (a->arity != b->arity) {
    ktree_sb_printf(&sb, "%s of %zu children vs %zu", an, a->arity, b->arity);
  } else if (a->kind == KILN_NODE_CUSTOM && !ktree_aux_equal(a, b)) {
    ktree_sb_printf(&sb, "%s with aux [", an);
    ktree_sb_aux(&sb, a->type, a->aux, a->aux_size);
    ktree_sb_puts(&sb, "] vs [");
    ktree_sb_aux(&sb, b->type, b->aux, b->aux_size);
    ktree_sb_puts(&sb, "]");
  }
}

void ktree_sb_diff(ktree_sb *sb, const ktree_shape *a, const ktree_shape *b, kiln_key *path,
                   size_t depth) {
  char why[2048];
  bool has_key = false;
  ktree_shape_explain(a, b, why, sizeof why, &path[depth], &has_key);
  ktree_sb_where(sb, path, depth + has_key);
  ktree_sb_puts(sb, ": ");
  ktree_sb_puts(sb, why);
}
