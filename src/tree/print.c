/* Text: treedefs printed as JAX's PyTreeDef repr, trees with their array
 * types, key paths as keystr, and the small string builder they share. */
#include <stdio.h>
#include <string.h>
#include "tree/tree.h"

void ktree_sb_init(ktree_sb *sb, char *buf, size_t cap) {
  sb->buf = cap ? buf : NULL;
  sb->cap = cap;
  sb->len = 0;
  if (sb->buf) sb->buf[0] = '\0';
}

void ktree_sb_put(ktree_sb *sb, const char *s, size_t n) {
  if (sb->buf && sb->len + 1 < sb->cap) {
    size_t room = sb->cap - 1 - sb->len;
    size_t k = n < room ? n : room;
    memcpy(sb->buf + sb->len, s, k);
    sb->buf[sb->len + k] = '\0';
  }
  sb->len += n;
}

void ktree_sb_puts(ktree_sb *sb, const char *s) { ktree_sb_put(sb, s, strlen(s)); }

void ktree_sb_printf(ktree_sb *sb, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    ktree_sb_put(sb, tmp, (size_t)n);
    return;
  }
  /* Longer than the scratch: format straight into the buffer's tail. */
  size_t room = sb->buf && sb->len < sb->cap ? sb->cap - sb->len : 0;
  va_start(ap, fmt);
  vsnprintf(room ? sb->buf + sb->len : NULL, room, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

/* Latin-1 characters that Python's str.isprintable() rejects (C1 controls,
 * no-break space, soft hyphen): repr writes them as \xNN. */
static bool ktree_latin1_hidden(unsigned char lead, unsigned char next) {
  return lead == 0xc2 && ((next >= 0x80 && next <= 0xa0) || next == 0xad);
}

void ktree_sb_repr(ktree_sb *sb, const char *s) {
  char quote = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
  ktree_sb_put(sb, &quote, 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    if (c == '\\' || c == (unsigned char)quote) {
      char esc[2] = {'\\', (char)c};
      ktree_sb_put(sb, esc, 2);
    } else if (c == '\n') {
      ktree_sb_puts(sb, "\\n");
    } else if (c == '\r') {
      ktree_sb_puts(sb, "\\r");
    } else if (c == '\t') {
      ktree_sb_puts(sb, "\\t");
    } else if (c < 0x20 || c == 0x7f) {
      ktree_sb_printf(sb, "\\x%02x", c);
    } else if (ktree_latin1_hidden(c, p[1])) {
      ktree_sb_printf(sb, "\\x%02x", p[1]);
      p++;
    } else {
      ktree_sb_put(sb, (const char *)p, 1);
    }
  }
  ktree_sb_put(sb, &quote, 1);
}

/* ---- aux data ---- */

static bool ktree_is_text(const unsigned char *p, size_t size) {
  if (size > 0 && p[size - 1] == '\0') size--;
  for (size_t i = 0; i < size; i++)
    if (p[i] < 0x20 || p[i] == 0x7f) return false;
  return true;
}

/* The meta values of a dataclass as JAX prints the meta tuple: ('lin',). */
static void ktree_sb_meta(ktree_sb *sb, const kiln_node_type *type, const char *aux) {
  ktree_sb_puts(sb, "(");
  for (size_t i = 0; i < type->n_meta; i++) {
    if (i) ktree_sb_puts(sb, ", ");
    ktree_sb_repr(sb, aux);
    aux += strlen(aux) + 1;
  }
  ktree_sb_puts(sb, type->n_meta == 1 ? ",)" : ")");
}

void ktree_sb_aux(ktree_sb *sb, const kiln_node_type *type, const void *aux, size_t size) {
  const unsigned char *p = aux;
  if (type->cb.print_aux) {
    char text[1024] = "";
    type->cb.print_aux(aux, size, text, sizeof text);
    text[sizeof text - 1] = '\0';
    ktree_sb_puts(sb, text);
  } else if (type->dataclass && type->n_meta > 0) {
    ktree_sb_meta(sb, type, aux); /* well formed: checked when the node was built */
  } else if (size == 0) {
    ktree_sb_puts(sb, type->dataclass ? "()" : "None");
  } else if (ktree_is_text(p, size)) {
    ktree_sb_put(sb, aux, p[size - 1] == '\0' ? size - 1 : size);
  } else {
    ktree_sb_puts(sb, "0x");
    for (size_t i = 0; i < size; i++) ktree_sb_printf(sb, "%02x", p[i]);
  }
}

/* ---- structure ---- */

static void ktree_sb_open(ktree_sb *sb, const ktree_shape *s) {
  switch (s->kind) {
    case KILN_NODE_NONE: ktree_sb_puts(sb, "None"); break;
    case KILN_NODE_LEAF: break;
    case KILN_NODE_TUPLE: ktree_sb_puts(sb, "("); break;
    case KILN_NODE_LIST: ktree_sb_puts(sb, "["); break;
    case KILN_NODE_DICT: ktree_sb_puts(sb, "{"); break;
    case KILN_NODE_CUSTOM:
      ktree_sb_printf(sb, "CustomNode(%s[", s->type->name);
      ktree_sb_aux(sb, s->type, s->aux, s->aux_size);
      ktree_sb_puts(sb, "], [");
      break;
  }
}

/* What comes before child i: a separator, and a dict's key. */
static void ktree_sb_before_child(ktree_sb *sb, const ktree_shape *s, size_t i) {
  if (i) ktree_sb_puts(sb, ", ");
  if (s->kind == KILN_NODE_DICT) {
    ktree_sb_repr(sb, s->keys[i]);
    ktree_sb_puts(sb, ": ");
  }
}

static void ktree_sb_close(ktree_sb *sb, const ktree_shape *s) {
  switch (s->kind) {
    case KILN_NODE_NONE:
    case KILN_NODE_LEAF: break;
    case KILN_NODE_TUPLE: ktree_sb_puts(sb, s->arity == 1 ? ",)" : ")"); break;
    case KILN_NODE_LIST: ktree_sb_puts(sb, "]"); break;
    case KILN_NODE_DICT: ktree_sb_puts(sb, "}"); break;
    case KILN_NODE_CUSTOM: ktree_sb_puts(sb, "])"); break;
  }
}

/* Renders the subtree at nodes[*i] and advances *i past it. */
static void ktree_sb_def(ktree_sb *sb, const kiln_treedef *d, size_t *i) {
  ktree_shape s = ktree_shape_of_def(d, *i);
  (*i)++;
  if (s.kind == KILN_NODE_LEAF) ktree_sb_puts(sb, "*");
  ktree_sb_open(sb, &s);
  for (size_t c = 0; c < s.arity; c++) {
    ktree_sb_before_child(sb, &s, c);
    ktree_sb_def(sb, d, i);
  }
  ktree_sb_close(sb, &s);
}

size_t kiln_treedef_str(const kiln_treedef *d, char *buf, size_t cap) {
  ktree_sb sb;
  ktree_sb_init(&sb, buf, cap);
  if (!d) {
    ktree_sb_puts(&sb, "PyTreeDef(<NULL>)");
    return sb.len;
  }
  size_t i = 0;
  ktree_sb_puts(&sb, "PyTreeDef(");
  ktree_sb_def(&sb, d, &i);
  ktree_sb_puts(&sb, ")");
  return sb.len;
}

void ktree_def_brief(const kiln_treedef *d, char *buf, size_t cap) {
  size_t n = kiln_treedef_str(d, buf, cap);
  if (cap >= 4 && n >= cap) memcpy(buf + cap - 4, "...", 4);
}

static void ktree_sb_leaf(ktree_sb *sb, const kiln_leaf *l) {
  if (l->kind != KILN_LEAF_ARRAY) {
    ktree_sb_puts(sb, "*");
    return;
  }
  const kiln_array *a = l->u.array;
  char type[160];
  ktree_sb_puts(sb, kcore_format_type(kiln_array_dtype(a), kiln_array_rank(a), kiln_array_shape(a),
                                      type, sizeof type));
}

static void ktree_sb_tree(ktree_sb *sb, const kiln_tree *t) {
  ktree_shape s = ktree_shape_of_tree(t);
  if (s.kind == KILN_NODE_LEAF) ktree_sb_leaf(sb, &t->leaf);
  ktree_sb_open(sb, &s);
  for (size_t c = 0; c < s.arity; c++) {
    ktree_sb_before_child(sb, &s, c);
    ktree_sb_tree(sb, t->children[c]);
  }
  ktree_sb_close(sb, &s);
}

size_t kiln_tree_str(const kiln_tree *t, char *buf, size_t cap) {
  ktree_sb sb;
  ktree_sb_init(&sb, buf, cap);
  if (t)
    ktree_sb_tree(&sb, t);
  else
    ktree_sb_puts(&sb, "<NULL>");
  return sb.len;
}

/* ---- key paths ---- */

void ktree_sb_key(ktree_sb *sb, const kiln_key *k) {
  switch (k->kind) {
    case KILN_KEY_INDEX: ktree_sb_printf(sb, "[%zu]", k->index); return;
    case KILN_KEY_FLAT: ktree_sb_printf(sb, "[<flat index %zu>]", k->index); return;
    case KILN_KEY_DICT:
      ktree_sb_puts(sb, "[");
      ktree_sb_repr(sb, k->name ? k->name : "");
      ktree_sb_puts(sb, "]");
      return;
    case KILN_KEY_ATTR: ktree_sb_printf(sb, ".%s", k->name ? k->name : ""); return;
  }
  ktree_sb_printf(sb, "<key of kind %d>", (int)k->kind);
}

void ktree_sb_path(ktree_sb *sb, const kiln_key *keys, size_t len) {
  for (size_t i = 0; i < len; i++) ktree_sb_key(sb, &keys[i]);
}

void ktree_sb_where(ktree_sb *sb, const kiln_key *keys, size_t len) {
  if (len == 0) {
    ktree_sb_puts(sb, "at the root");
    return;
  }
  ktree_sb_puts(sb, "at ");
  ktree_sb_path(sb, keys, len);
}

size_t kiln_path_str(const kiln_path *p, char *buf, size_t cap) {
  ktree_sb sb;
  ktree_sb_init(&sb, buf, cap);
  if (p && (p->keys || p->len == 0)) ktree_sb_path(&sb, p->keys, p->len);
  return sb.len;
}
