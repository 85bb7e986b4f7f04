/* The parser for kir_print's text: recursive descent over the source, one
 * scope of names per program (sub-programs are closed). Errors carry the
 * line and column of the offending character. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define KIR_PARSE_MAX_DEPTH 64

typedef struct kir_parser {
  const char *s;
  size_t pos;
  int depth;
} kir_parser;

/* ---- errors ---- */

static void kir_line_col(const char *s, size_t pos, int *line, int *col) {
  *line = 1;
  size_t start = 0;
  for (size_t i = 0; i < pos; i++) {
    if (s[i] == '\n') {
      (*line)++;
      start = i + 1;
    }
  }
  *col = (int)(pos - start) + 1;
}

static kiln_status kir_perr_at(const kir_parser *ps, size_t pos, const char *fmt, ...)
    KCORE_PRINTF(3, 4);
static kiln_status kir_perr_at(const kir_parser *ps, size_t pos, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line, col;
  kir_line_col(ps->s, pos, &line, &col);
  return kcore_fail(KILN_ERR_ARGUMENT, "kir_parse: %d:%d: %s", line, col, msg);
}

/* Puts "kir_parse: L:C: " before a message set by a callee (a rule's). */
static kiln_status kir_perr_wrap(const kir_parser *ps, size_t pos, kiln_status st) {
  int line, col;
  kir_line_col(ps->s, pos, &line, &col);
  return kcore_fail_wrap(st, "kir_parse: %d:%d", line, col);
}

/* What the text holds at pos, for "expected X, found Y" messages. */
static const char *kir_found(const kir_parser *ps, char *buf, size_t cap) {
  const char *c = ps->s + ps->pos;
  if (!*c) return "the end of the text";
  size_t n = 0;
  while (c[n] && !isspace((unsigned char)c[n]) && n < 16) n++;
  snprintf(buf, cap, "'%.*s'", (int)(n ? n : 1), c);
  return buf;
}

static kiln_status kir_expected(const kir_parser *ps, const char *what) {
  char buf[32];
  return kir_perr_at(ps, ps->pos, "expected %s, found %s", what, kir_found(ps, buf, sizeof buf));
}

/* ---- lexing ---- */

static void kir_skip_ws(kir_parser *ps) {
  while (isspace((unsigned char)ps->s[ps->pos])) ps->pos++;
}

static char kir_peek(kir_parser *ps) {
  kir_skip_ws(ps);
  return ps->s[ps->pos];
}

static bool kir_accept(kir_parser *ps, char c) {
  if (kir_peek(ps) != c) return false;
  ps->pos++;
  return true;
}

static kiln_status kir_expect(kir_parser *ps, char c, const char *context) {
  if (kir_accept(ps, c)) return KILN_OK;
  char what[96];
  snprintf(what, sizeof what, "'%c'%s%s", c, context ? " " : "", context ? context : "");
  return kir_expected(ps, what);
}

static bool kir_is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool kir_is_ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/* An identifier at pos (after whitespace); *len 0 if none. */
static const char *kir_ident(kir_parser *ps, size_t *len) {
  kir_skip_ws(ps);
  const char *start = ps->s + ps->pos;
  size_t n = 0;
  if (kir_is_ident_start(start[0]))
    while (kir_is_ident_char(start[n])) n++;
  *len = n;
  return start;
}

static bool kir_word_is(const char *w, size_t len, const char *kw) {
  return strlen(kw) == len && memcmp(w, kw, len) == 0;
}

static bool kir_accept_word(kir_parser *ps, const char *kw) {
  size_t len;
  const char *w = kir_ident(ps, &len);
  if (!kir_word_is(w, len, kw)) return false;
  ps->pos += len;
  return true;
}

static kiln_status kir_expect_word(kir_parser *ps, const char *kw) {
  if (kir_accept_word(ps, kw)) return KILN_OK;
  char what[64];
  snprintf(what, sizeof what, "'%s'", kw);
  return kir_expected(ps, what);
}

/* Words that are never variable names. */
static bool kir_word_reserved(const char *w, size_t len) {
  static const char *const words[] = {"lambda", "let", "in", "True", "False", "None", "nan",
                                      "inf"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (kir_word_is(w, len, words[i])) return true;
  kir_prim p;
  return kir_prim_lookup(w, len, &p);
}

/* A number token: [-](digits[.digits][e[+-]digits] | inf | nan). */
static size_t kir_number_len(const char *c) {
  size_t n = 0;
  if (c[n] == '-') n++;
  if (strncmp(c + n, "inf", 3) == 0 || strncmp(c + n, "nan", 3) == 0)
    return kir_is_ident_char(c[n + 3]) ? 0 : n + 3;
  size_t digits = n;
  while (isdigit((unsigned char)c[n])) n++;
  if (n == digits) return 0;
  if (c[n] == '.')
    for (n++; isdigit((unsigned char)c[n]); n++) {
    }
  if (c[n] == 'e' || c[n] == 'E') {
    size_t m = n + 1;
    if (c[m] == '+' || c[m] == '-') m++;
    if (isdigit((unsigned char)c[m])) {
      while (isdigit((unsigned char)c[m])) m++;
      n = m;
    }
  }
  return n;
}

static bool kir_number_is_integer(const char *c, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!isdigit((unsigned char)c[i]) && !(i == 0 && c[i] == '-')) return false;
  return true;
}

static kiln_status kir_parse_int(kir_parser *ps, const char *what, int64_t *out) {
  kir_skip_ws(ps);
  const char *c = ps->s + ps->pos;
  size_t len = kir_number_len(c);
  if (!len || !kir_number_is_integer(c, len)) return kir_expected(ps, what);
  char buf[32];
  if (len >= sizeof buf) return kir_perr_at(ps, ps->pos, "integer %.*s is too long", 24, c);
  memcpy(buf, c, len);
  buf[len] = '\0';
  errno = 0;
  long long v = strtoll(buf, NULL, 10);
  if (errno == ERANGE) return kir_perr_at(ps, ps->pos, "integer %s does not fit in 64 bits", buf);
  ps->pos += len;
  *out = v;
  return KILN_OK;
}

/* A float value: a number token, read with strtod. */
static kiln_status kir_parse_float(kir_parser *ps, const char *what, double *out) {
  kir_skip_ws(ps);
  const char *c = ps->s + ps->pos;
  size_t len = kir_number_len(c);
  if (!len) return kir_expected(ps, what);
  char buf[128];
  if (len >= sizeof buf) return kir_perr_at(ps, ps->pos, "number is too long");
  memcpy(buf, c, len);
  buf[len] = '\0';
  *out = strtod(buf, NULL);
  ps->pos += len;
  return KILN_OK;
}

/* ---- types ---- */

static kiln_status kir_parse_type(kir_parser *ps, kir_aval *out) {
  memset(out, 0, sizeof *out);
  out->weak = kir_accept(ps, '~');
  kir_skip_ws(ps);
  size_t start = ps->pos, len = 0;
  while (isalnum((unsigned char)ps->s[start + len])) len++;
  char name[16];
  if (len == 0 || len >= sizeof name) return kir_expected(ps, "a dtype such as f32");
  memcpy(name, ps->s + start, len);
  name[len] = '\0';
  if (kiln_dtype_from_name(name, &out->dtype) != KILN_OK)
    return kir_perr_at(ps, start, "unknown dtype '%s'", name);
  ps->pos += len;
  if (ps->s[ps->pos] != '[') return kir_expected(ps, "'[' after the dtype");
  ps->pos++;
  if (kir_accept(ps, ']')) return KILN_OK;
  do {
    if (out->rank == KIR_MAX_RANK)
      return kir_perr_at(ps, ps->pos, "type has more than %d dimensions", KIR_MAX_RANK);
    int64_t d;
    kiln_status st = kir_parse_int(ps, "a dimension size", &d);
    if (st != KILN_OK) return st;
    if (d < 0) return kir_perr_at(ps, ps->pos, "dimension size %lld is negative", (long long)d);
    out->shape[out->rank++] = d;
  } while (kir_accept(ps, ','));
  return kir_expect(ps, ']', "to close the shape");
}

/* ---- scopes: names -> vids, keys pointing into the source ---- */

typedef struct kir_scope_slot {
  const char *name;
  size_t len;
  kir_vid v;
} kir_scope_slot;

typedef struct kir_scope {
  kir_scope_slot *slots;
  size_t cap, n;
} kir_scope;

static size_t kir_scope_find(const kir_scope *sc, const char *name, size_t len) {
  uint64_t h = kcore_hash_bytes(KCORE_HASH_SEED, name, len);
  size_t i = (size_t)h & (sc->cap - 1);
  while (sc->slots[i].name &&
         !(sc->slots[i].len == len && memcmp(sc->slots[i].name, name, len) == 0))
    i = (i + 1) & (sc->cap - 1);
  return i;
}

static bool kir_scope_get(const kir_scope *sc, const char *name, size_t len, kir_vid *v) {
  if (!sc->cap) return false;
  size_t i = kir_scope_find(sc, name, len);
  if (!sc->slots[i].name) return false;
  *v = sc->slots[i].v;
  return true;
}

static bool kir_scope_put(kir_scope *sc, const char *name, size_t len, kir_vid v) {
  if (2 * (sc->n + 1) > sc->cap) {
    kir_scope bigger = {calloc(sc->cap ? sc->cap * 2 : 64, sizeof(kir_scope_slot)),
                        sc->cap ? sc->cap * 2 : 64, 0};
    if (!bigger.slots) return false;
    for (size_t i = 0; i < sc->cap; i++)
      if (sc->slots[i].name) bigger.slots[kir_scope_find(&bigger, sc->slots[i].name,
                                                         sc->slots[i].len)] = sc->slots[i];
    bigger.n = sc->n;
    free(sc->slots);
    *sc = bigger;
  }
  size_t i = kir_scope_find(sc, name, len);
  sc->slots[i] = (kir_scope_slot){name, len, v};
  sc->n++;
  return true;
}

/* ---- programs ---- */

typedef struct kir_vids {
  kir_vid *v;
  int n, cap;
} kir_vids;

static bool kir_vids_push(kir_vids *l, kir_vid v) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    kir_vid *n = realloc(l->v, (size_t)cap * sizeof *n);
    if (!n) return false;
    l->v = n;
    l->cap = cap;
  }
  l->v[l->n++] = v;
  return true;
}

typedef struct kir_ctx {
  kir_parser *ps;
  kir_program *p;
  kir_scope scope;
} kir_ctx;

static kiln_status kir_oom(void) { return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_parse: out of memory"); }

/* A binder's name: an identifier that is not reserved. */
static kiln_status kir_parse_name(kir_parser *ps, const char **name, size_t *len) {
  *name = kir_ident(ps, len);
  if (!*len) return kir_expected(ps, "a variable name");
  if (kir_word_reserved(*name, *len))
    return kir_perr_at(ps, ps->pos, "'%.*s' is reserved and cannot name a variable", (int)*len,
                       *name);
  ps->pos += *len;
  return KILN_OK;
}

static kiln_status kir_parse_binder_type(kir_parser *ps, const char *name, size_t len,
                                         kir_aval *aval) {
  char ctx[96];
  snprintf(ctx, sizeof ctx, "after variable name '%.*s'", (int)(len > 32 ? 32 : len), name);
  if (ps->s[ps->pos] != ':') {
    kir_skip_ws(ps);
    return kir_expect(ps, ':', ctx);
  }
  ps->pos++;
  return kir_parse_type(ps, aval);
}

static kiln_status kir_define(kir_ctx *c, const char *name, size_t len, size_t pos, kir_vid v) {
  kir_vid old;
  if (kir_scope_get(&c->scope, name, len, &old))
    return kir_perr_at(c->ps, pos, "variable '%.*s' is defined twice", (int)len, name);
  return kir_scope_put(&c->scope, name, len, v) ? KILN_OK : kir_oom();
}

/* constvars (root only) or invars up to `end`. */
static kiln_status kir_parse_binders(kir_ctx *c, bool constvars, char end) {
  kir_parser *ps = c->ps;
  while (kir_peek(ps) != end) {
    size_t pos = ps->pos, len;
    const char *name;
    kir_aval aval;
    kiln_status st = kir_parse_name(ps, &name, &len);
    if (st == KILN_OK) st = kir_parse_binder_type(ps, name, len, &aval);
    if (st != KILN_OK) return st;
    kir_vid v;
    st = constvars ? kir_add_const(c->p, &aval, &v) : kir_add_invar(c->p, &aval, &v);
    if (st != KILN_OK) return kir_perr_wrap(ps, pos, st);
    st = kir_define(c, name, len, pos, v);
    if (st != KILN_OK) return st;
  }
  ps->pos++;
  return KILN_OK;
}

static kiln_status kir_parse_literal(kir_ctx *c, kir_vid *out) {
  kir_parser *ps = c->ps;
  size_t pos = ps->pos, len;
  const char *tok = ps->s + pos;
  bool is_bool = false, bval = false;
  const char *w = kir_ident(ps, &len);
  if (kir_word_is(w, len, "True") || kir_word_is(w, len, "False")) {
    is_bool = true;
    bval = w[0] == 'T';
  } else {
    len = kir_number_len(tok);
    if (!len) return kir_expected(ps, "an operand");
  }
  ps->pos += len;
  if (ps->s[ps->pos] != ':') return kir_expected(ps, "':' and a type after the literal");
  ps->pos++;
  kir_aval aval;
  kiln_status st = kir_parse_type(ps, &aval);
  if (st != KILN_OK) return st;
  if (aval.rank != 0) return kir_perr_at(ps, pos, "a literal must have a scalar type");
  kir_scalar v;
  char buf[128];
  if (len >= sizeof buf) return kir_perr_at(ps, pos, "literal is too long");
  memcpy(buf, tok, len);
  buf[len] = '\0';
  if (kiln_dtype_is_bool(aval.dtype) != is_bool)
    return kir_perr_at(ps, pos, "literal %s does not fit type %s", buf,
                       kiln_dtype_short_name(aval.dtype));
  if (is_bool) {
    v.i = bval;
  } else if (kiln_dtype_is_float(aval.dtype)) {
    v.f = strtod(buf, NULL);
  } else {
    if (!kir_number_is_integer(buf, len) || (kiln_dtype_is_unsigned(aval.dtype) && buf[0] == '-'))
      return kir_perr_at(ps, pos, "literal %s does not fit type %s", buf,
                         kiln_dtype_short_name(aval.dtype));
    errno = 0;
    if (kiln_dtype_is_unsigned(aval.dtype))
      v.u = strtoull(buf, NULL, 10);
    else
      v.i = strtoll(buf, NULL, 10);
    if (errno == ERANGE)
      return kir_perr_at(ps, pos, "literal %s does not fit type %s", buf,
                         kiln_dtype_short_name(aval.dtype));
  }
  st = kir_add_literal(c->p, aval.dtype, aval.weak, v, out);
  return st == KILN_OK ? st : kir_perr_wrap(ps, pos, st);
}

/* Whether an operand starts here (and not the next equation or 'in'). */
static bool kir_at_operand(kir_parser *ps) {
  char ch = kir_peek(ps);
  if (ch == '-' || isdigit((unsigned char)ch)) return true;
  size_t len;
  const char *w = kir_ident(ps, &len);
  if (!len) return false;
  if (kir_word_is(w, len, "True") || kir_word_is(w, len, "False") ||
      kir_word_is(w, len, "nan") || kir_word_is(w, len, "inf"))
    return true;
  if (w[len] == ':') return false; /* the next equation's binder */
  return !kir_word_reserved(w, len);
}

static kiln_status kir_parse_operand(kir_ctx *c, kir_vid *out) {
  kir_parser *ps = c->ps;
  size_t len;
  kir_skip_ws(ps);
  const char *w = kir_ident(ps, &len);
  bool literal_word = kir_word_is(w, len, "True") || kir_word_is(w, len, "False") ||
                      kir_word_is(w, len, "nan") || kir_word_is(w, len, "inf");
  if (!len || literal_word) return kir_parse_literal(c, out);
  if (!kir_scope_get(&c->scope, w, len, out))
    return kir_perr_at(ps, ps->pos, "variable '%.*s' is not defined", (int)len, w);
  ps->pos += len;
  return KILN_OK;
}

static kiln_status kir_parse_program_into(kir_parser *ps, kir_program *p);

/* ---- params ---- */

/* (a, b, ...) or [a, b, ...] of at most KIR_MAX_RANK integers. */
static kiln_status kir_parse_ints(kir_parser *ps, char open, char close, int64_t *v, int *n) {
  char what[16];
  snprintf(what, sizeof what, "'%c'", open);
  if (!kir_accept(ps, open)) return kir_expected(ps, what);
  *n = 0;
  while (!kir_accept(ps, close)) {
    if (*n == KIR_MAX_RANK)
      return kir_perr_at(ps, ps->pos, "more than %d entries", KIR_MAX_RANK);
    kiln_status st = kir_parse_int(ps, "an integer", &v[(*n)++]);
    if (st != KILN_OK) return st;
    if (!kir_accept(ps, ',') && kir_peek(ps) != close) {
      snprintf(what, sizeof what, "',' or '%c'", close);
      return kir_expected(ps, what);
    }
  }
  return KILN_OK;
}

static kiln_status kir_parse_dims(kir_parser *ps, char open, char close, kir_dims *d) {
  int64_t v[KIR_MAX_RANK];
  size_t pos = (kir_skip_ws(ps), ps->pos);
  kiln_status st = kir_parse_ints(ps, open, close, v, &d->n);
  if (st != KILN_OK) return st;
  for (int i = 0; i < d->n; i++) {
    if (v[i] < -128 || v[i] > 127) return kir_perr_at(ps, pos, "axis %lld is out of range", (long long)v[i]);
    d->v[i] = (int8_t)v[i];
  }
  return KILN_OK;
}

static kiln_status kir_parse_sizes(kir_parser *ps, kir_sizes *s) {
  return kir_parse_ints(ps, '(', ')', s->v, &s->n);
}

/* pad's (lo, hi, interior) triples, or conv's (lo, hi) pairs (width 2). */
static kiln_status kir_parse_padding(kir_parser *ps, int width, kir_padding *c) {
  kiln_status st = kir_expect(ps, '(', NULL);
  c->n = 0;
  while (st == KILN_OK && !kir_accept(ps, ')')) {
    if (c->n == KIR_MAX_RANK) return kir_perr_at(ps, ps->pos, "more than %d entries", KIR_MAX_RANK);
    int64_t t[KIR_MAX_RANK];
    int n;
    size_t pos = (kir_skip_ws(ps), ps->pos);
    st = kir_parse_ints(ps, '(', ')', t, &n);
    if (st != KILN_OK) return st;
    if (n != width)
      return kir_perr_at(ps, pos, width == 3 ? "expected a (low, high, interior) triple"
                                             : "expected a (low, high) pair");
    c->lo[c->n] = t[0], c->hi[c->n] = t[1], c->interior[c->n] = width == 3 ? t[2] : 0;
    c->n++;
    if (!kir_accept(ps, ',') && kir_peek(ps) != ')') return kir_expected(ps, "',' or ')'");
  }
  return st;
}

static kiln_status kir_parse_dot_dims(kir_parser *ps, kir_dot_dims *d) {
  kir_dims *pairs[2][2] = {{&d->lhs_contracting, &d->rhs_contracting},
                           {&d->lhs_batch, &d->rhs_batch}};
  kiln_status st = kir_expect(ps, '(', NULL);
  for (int i = 0; i < 2 && st == KILN_OK; i++) {
    if (i) st = kir_expect(ps, ',', NULL);
    if (st == KILN_OK) st = kir_expect(ps, '(', NULL);
    if (st == KILN_OK) st = kir_parse_dims(ps, '[', ']', pairs[i][0]);
    if (st == KILN_OK) st = kir_expect(ps, ',', NULL);
    if (st == KILN_OK) st = kir_parse_dims(ps, '[', ']', pairs[i][1]);
    if (st == KILN_OK) st = kir_expect(ps, ')', NULL);
  }
  return st == KILN_OK ? kir_expect(ps, ')', NULL) : st;
}

static kiln_status kir_parse_named_dims(kir_parser *ps, const char *type, int n,
                                        const char *const *names, kir_dims *d) {
  kiln_status st = kir_expect_word(ps, type);
  if (st == KILN_OK) st = kir_expect(ps, '(', NULL);
  for (int i = 0; i < n && st == KILN_OK; i++) {
    if (i) st = kir_expect(ps, ',', NULL);
    if (st == KILN_OK) st = kir_expect_word(ps, names[i]);
    if (st == KILN_OK) st = kir_expect(ps, '=', NULL);
    if (st == KILN_OK) st = kir_parse_dims(ps, '(', ')', &d[i]);
  }
  return st == KILN_OK ? kir_expect(ps, ')', NULL) : st;
}

static const char *const kir_gather_names[5] = {
    "offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
    "start_indices_batching_dims"};
static const char *const kir_scatter_names[5] = {
    "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
    "operand_batching_dims", "scatter_indices_batching_dims"};
static const char *const kir_conv_names[3] = {"lhs_spec", "rhs_spec", "out_spec"};

static kiln_status kir_parse_mode(kir_parser *ps, kir_gather_mode *m) {
  static const char *const modes[3] = {"CLIP", "FILL_OR_DROP", "PROMISE_IN_BOUNDS"};
  kiln_status st = kir_expect_word(ps, "GatherScatterMode");
  if (st == KILN_OK && ps->s[ps->pos] != '.') st = kir_expected(ps, "'.'");
  if (st != KILN_OK) return st;
  ps->pos++;
  for (int i = 0; i < 3; i++) {
    if (kir_accept_word(ps, modes[i])) {
      *m = (kir_gather_mode)i;
      return KILN_OK;
    }
  }
  return kir_expected(ps, "CLIP, FILL_OR_DROP or PROMISE_IN_BOUNDS");
}

static kiln_status kir_parse_dtype_word(kir_parser *ps, bool optional, kiln_dtype *out) {
  size_t len;
  const char *w = kir_ident(ps, &len);
  char name[16];
  if (optional && kir_word_is(w, len, "None")) {
    ps->pos += len;
    *out = KILN_INVALID_DTYPE;
    return KILN_OK;
  }
  if (!len || len >= sizeof name) return kir_expected(ps, optional ? "a dtype or None" : "a dtype");
  memcpy(name, w, len);
  name[len] = '\0';
  if (kiln_dtype_from_name(name, out) != KILN_OK)
    return kir_perr_at(ps, ps->pos, "unknown dtype '%s'", name);
  ps->pos += len;
  return KILN_OK;
}

static int kir_hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A double-quoted string with C escapes, decoded into a malloc'd buffer. */
static kiln_status kir_parse_string(kir_parser *ps, char **out) {
  if (!kir_accept(ps, '"')) return kir_expected(ps, "a double-quoted string");
  size_t start = ps->pos, n = 0;
  char *buf = malloc(strlen(ps->s + start) + 1);
  if (!buf) return kir_oom();
  for (;;) {
    char ch = ps->s[ps->pos];
    if (ch == '\0') {
      free(buf);
      return kir_perr_at(ps, start - 1, "unterminated string");
    }
    ps->pos++;
    if (ch == '"') break;
    if (ch != '\\') {
      buf[n++] = ch;
      continue;
    }
    char e = ps->s[ps->pos++];
    int hi, lo;
    switch (e) {
      case 'n': buf[n++] = '\n'; break;
      case 't': buf[n++] = '\t'; break;
      case 'r': buf[n++] = '\r'; break;
      case '"': buf[n++] = '"'; break;
      case '\\': buf[n++] = '\\'; break;
      case 'x':
        hi = kir_hex(ps->s[ps->pos]);
        lo = hi < 0 ? -1 : kir_hex(ps->s[ps->pos + 1]);
        if (lo < 0 || (hi == 0 && lo == 0)) {
          free(buf);
          return kir_perr_at(ps, ps->pos - 2, "expected two hex digits (not 00) after \\x");
        }
        buf[n++] = (char)(hi * 16 + lo);
        ps->pos += 2;
        break;
      default:
        free(buf);
        return kir_perr_at(ps, ps->pos - 2, "unknown escape '\\%c' in string", e ? e : '0');
    }
  }
  buf[n] = '\0';
  *out = buf;
  return KILN_OK;
}

static kiln_status kir_parse_sub(kir_ctx *c, kir_program **out) {
  kir_parser *ps = c->ps;
  if (kir_peek(ps) != '{') return kir_expected(ps, "'{' to start a sub-program");
  if (ps->depth >= KIR_PARSE_MAX_DEPTH)
    return kir_perr_at(ps, ps->pos, "sub-programs nest deeper than %d", KIR_PARSE_MAX_DEPTH);
  kiln_status st = kir_program_new_sub(c->p, out);
  if (st != KILN_OK) return st;
  ps->depth++;
  st = kir_parse_program_into(ps, *out);
  ps->depth--;
  return st;
}

/* Temporary storage a param value needs until kir_add_eqn copies it. */
typedef struct kir_param_temps {
  char **strings; /* every string field parsed (a kind may have several) */
  kir_program **programs;
  kir_aval *avals;
  int n_strings;
} kir_param_temps;

static kiln_status kir_parse_programs(kir_ctx *c, kir_program_list *l, kir_param_temps *tmp) {
  kiln_status st = kir_expect(c->ps, '(', NULL);
  int cap = 0;
  l->n = 0;
  while (st == KILN_OK && !kir_accept(c->ps, ')')) {
    if (l->n == cap) {
      cap = cap ? cap * 2 : 4;
      kir_program **n = realloc(tmp->programs, (size_t)cap * sizeof *n);
      if (!n) return kir_oom();
      tmp->programs = n;
    }
    st = kir_parse_sub(c, &tmp->programs[l->n]);
    if (st == KILN_OK) l->n++;
  }
  l->v = tmp->programs;
  return st;
}

static kiln_status kir_parse_avals(kir_parser *ps, kir_aval_list *l, kir_param_temps *tmp) {
  kiln_status st = kir_expect(ps, '(', NULL);
  int cap = 0;
  l->n = 0;
  while (st == KILN_OK && !kir_accept(ps, ')')) {
    if (l->n == cap) {
      cap = cap ? cap * 2 : 4;
      kir_aval *n = realloc(tmp->avals, (size_t)cap * sizeof *n);
      if (!n) return kir_oom();
      tmp->avals = n;
    }
    st = kir_parse_type(ps, &tmp->avals[l->n]);
    if (st != KILN_OK) return st;
    l->n++;
    if (!kir_accept(ps, ',') && kir_peek(ps) != ')') return kir_expected(ps, "',' or ')'");
  }
  l->v = tmp->avals;
  return st;
}

#define PV(p, f, type) ((type *)(void *)((char *)(p) + (f)->offset))

static kiln_status kir_parse_field(kir_ctx *c, const kir_field *f, kir_params *p,
                                   kir_param_temps *tmp) {
  kir_parser *ps = c->ps;
  switch (f->type) {
    case KIR_FIELD_INT: return kir_parse_int(ps, "an integer", PV(p, f, int64_t));
    case KIR_FIELD_BOOL:
      if (kir_accept_word(ps, "True")) *PV(p, f, bool) = true;
      else if (kir_accept_word(ps, "False")) *PV(p, f, bool) = false;
      else return kir_expected(ps, "True or False");
      return KILN_OK;
    case KIR_FIELD_DTYPE: return kir_parse_dtype_word(ps, false, PV(p, f, kiln_dtype));
    case KIR_FIELD_OPT_DTYPE: return kir_parse_dtype_word(ps, true, PV(p, f, kiln_dtype));
    case KIR_FIELD_MODE: return kir_parse_mode(ps, PV(p, f, kir_gather_mode));
    case KIR_FIELD_DIMS: return kir_parse_dims(ps, '(', ')', PV(p, f, kir_dims));
    case KIR_FIELD_SIZES: return kir_parse_sizes(ps, PV(p, f, kir_sizes));
    case KIR_FIELD_PADDING: return kir_parse_padding(ps, 3, PV(p, f, kir_padding));
    case KIR_FIELD_PAD_PAIRS: return kir_parse_padding(ps, 2, PV(p, f, kir_padding));
    case KIR_FIELD_CONV_DIMS:
      return kir_parse_named_dims(ps, "ConvDimensionNumbers", 3, kir_conv_names,
                                  PV(p, f, kir_dims));
    case KIR_FIELD_DOT_DIMS: return kir_parse_dot_dims(ps, PV(p, f, kir_dot_dims));
    case KIR_FIELD_GATHER_DIMS:
      return kir_parse_named_dims(ps, "GatherDimensionNumbers", 5, kir_gather_names,
                                  PV(p, f, kir_dims));
    case KIR_FIELD_SCATTER_DIMS:
      return kir_parse_named_dims(ps, "ScatterDimensionNumbers", 5, kir_scatter_names,
                                  PV(p, f, kir_dims));
    case KIR_FIELD_OPT_F64: {
      kir_opt_f64 *x = PV(p, f, kir_opt_f64);
      if (kir_accept_word(ps, "None")) {
        x->present = false;
        return KILN_OK;
      }
      x->present = true;
      return kir_parse_float(ps, "a number or None", &x->v);
    }
    case KIR_FIELD_STRING: {
      char **grown = realloc(tmp->strings, (size_t)(tmp->n_strings + 1) * sizeof *grown);
      if (!grown) return kir_oom();
      tmp->strings = grown;
      char *str = NULL;
      kiln_status st = kir_parse_string(ps, &str);
      if (st == KILN_OK) tmp->strings[tmp->n_strings++] = str;
      *PV(p, f, const char *) = str;
      return st;
    }
    case KIR_FIELD_PROGRAM: return kir_parse_sub(c, PV(p, f, kir_program *));
    case KIR_FIELD_PROGRAMS: return kir_parse_programs(c, PV(p, f, kir_program_list), tmp);
    case KIR_FIELD_AVALS: return kir_parse_avals(ps, PV(p, f, kir_aval_list), tmp);
  }
  return KILN_OK;
}

/* name=value ... up to `end`: every field of the prim's kind exactly once. */
static kiln_status kir_parse_param_list(kir_ctx *c, kir_prim prim, char end, kir_params *p,
                                        kir_param_temps *tmp) {
  kir_parser *ps = c->ps;
  const kir_prim_info *info = kir_prim_get(prim);
  int n;
  const kir_field *fields = kir_param_fields(info->params, &n);
  bool seen[16] = {false};
  while (kir_peek(ps) != end) {
    size_t pos = ps->pos, len;
    const char *w = kir_ident(ps, &len);
    if (!len) return kir_expected(ps, end ? "a param name or ']'" : "a param name");
    int k = 0;
    while (k < n && !kir_word_is(w, len, fields[k].name)) k++;
    if (k == n) return kir_perr_at(ps, pos, "%s has no param '%.*s'", info->name, (int)len, w);
    if (seen[k]) return kir_perr_at(ps, pos, "param '%s' is given twice", fields[k].name);
    seen[k] = true;
    ps->pos += len;
    kiln_status st = kir_expect(ps, '=', "after the param name");
    if (st == KILN_OK) st = kir_parse_field(c, &fields[k], p, tmp);
    if (st != KILN_OK) return st;
  }
  for (int k = 0; k < n; k++)
    if (!seen[k])
      return kir_perr_at(ps, ps->pos, "%s is missing param '%s'", info->name, fields[k].name);
  return KILN_OK;
}

/* [name=value ...], or nothing for a prim without params. */
static kiln_status kir_parse_params(kir_ctx *c, kir_prim prim, kir_params *p,
                                    kir_param_temps *tmp) {
  kir_parser *ps = c->ps;
  const kir_prim_info *info = kir_prim_get(prim);
  int n;
  kir_param_fields(info->params, &n);
  memset(p, 0, sizeof *p);
  if (!kir_accept(ps, '[')) {
    if (n == 0) return KILN_OK;
    return kir_perr_at(ps, ps->pos, "expected '[' and the params of %s", info->name);
  }
  if (n == 0) return kir_perr_at(ps, ps->pos - 1, "%s takes no params", info->name);
  kiln_status st = kir_parse_param_list(c, prim, ']', p, tmp);
  if (st == KILN_OK) ps->pos++;
  return st;
}

/* ---- equations ---- */

typedef struct kir_binder {
  const char *name;
  size_t len, pos;
  kir_aval aval;
} kir_binder;

typedef struct kir_eqn_parts {
  kir_binder *binders;
  int n_binders, cap_binders;
  kir_vids ins;
  kir_param_temps tmp;
} kir_eqn_parts;

static void kir_param_temps_free(kir_param_temps *t);

static void kir_eqn_parts_free(kir_eqn_parts *e) {
  free(e->binders);
  free(e->ins.v);
  kir_param_temps_free(&e->tmp);
}

static kiln_status kir_parse_eqn_binders(kir_ctx *c, kir_eqn_parts *e) {
  kir_parser *ps = c->ps;
  for (;;) {
    size_t len;
    const char *w = kir_ident(ps, &len);
    if (!len || w[len] != ':') break;
    if (e->n_binders == e->cap_binders) {
      int cap = e->cap_binders ? e->cap_binders * 2 : 4;
      kir_binder *n = realloc(e->binders, (size_t)cap * sizeof *n);
      if (!n) return kir_oom();
      e->binders = n;
      e->cap_binders = cap;
    }
    kir_binder *b = &e->binders[e->n_binders++];
    b->pos = ps->pos;
    kiln_status st = kir_parse_name(ps, &b->name, &b->len);
    if (st == KILN_OK) st = kir_parse_binder_type(ps, b->name, b->len, &b->aval);
    if (st != KILN_OK) return st;
  }
  if (e->n_binders) return kir_expect(c->ps, '=', "after the equation's outputs");
  return KILN_OK;
}

/* Checks the declared outputs against what the rule made, then names them. */
static kiln_status kir_bind_outputs(kir_ctx *c, const kir_eqn_parts *e, size_t pos, int index) {
  const kir_eqn *eq = &c->p->eqns[index];
  const char *name = kir_prim_name(eq->prim);
  if (eq->n_out != e->n_binders)
    return kir_perr_at(c->ps, pos, "%s gives %d result%s but %d %s declared", name, eq->n_out,
                       eq->n_out == 1 ? "" : "s", e->n_binders,
                       e->n_binders == 1 ? "is" : "are");
  for (int i = 0; i < eq->n_out; i++) {
    const kir_binder *b = &e->binders[i];
    const kir_aval *have = &c->p->vars[eq->out[i]].aval;
    if (!kir_aval_equal(have, &b->aval)) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      return kir_perr_at(c->ps, b->pos, "'%.*s' is declared %s but %s gives %s", (int)b->len,
                         b->name, kir_aval_str(&b->aval, t0, sizeof t0), name,
                         kir_aval_str(have, t1, sizeof t1));
    }
    kiln_status st = kir_define(c, b->name, b->len, b->pos, eq->out[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static kiln_status kir_parse_eqn(kir_ctx *c) {
  kir_parser *ps = c->ps;
  kir_eqn_parts e;
  memset(&e, 0, sizeof e);
  kir_skip_ws(ps);
  size_t start = ps->pos;
  kiln_status st = kir_parse_eqn_binders(c, &e);
  if (st != KILN_OK) goto done;
  size_t prim_pos = (kir_skip_ws(ps), ps->pos), len;
  const char *w = kir_ident(ps, &len);
  kir_prim prim;
  if (!len) {
    st = kir_expected(ps, e.n_binders ? "a primitive name" : "an equation or 'in'");
    goto done;
  }
  if (!kir_prim_lookup(w, len, &prim)) {
    st = kir_perr_at(ps, prim_pos, "unknown primitive '%.*s'", (int)len, w);
    goto done;
  }
  ps->pos += len;
  kir_params params;
  st = kir_parse_params(c, prim, &params, &e.tmp);
  while (st == KILN_OK && kir_at_operand(ps)) {
    kir_vid v;
    st = kir_parse_operand(c, &v);
    if (st == KILN_OK && !kir_vids_push(&e.ins, v)) st = kir_oom();
  }
  int index;
  if (st == KILN_OK) {
    st = kir_add_eqn(c->p, prim, &params, e.ins.n, e.ins.v, &index);
    if (st != KILN_OK) st = kir_perr_wrap(ps, start, st);
  }
  if (st == KILN_OK) st = kir_bind_outputs(c, &e, start, index);
done:
  kir_eqn_parts_free(&e);
  return st;
}

static kiln_status kir_parse_outputs(kir_ctx *c) {
  kir_parser *ps = c->ps;
  kir_vids outs = {0};
  kiln_status st = kir_expect(ps, '(', "to start the outputs");
  while (st == KILN_OK && !kir_accept(ps, ')')) {
    kir_vid v;
    st = kir_parse_operand(c, &v);
    if (st == KILN_OK && !kir_vids_push(&outs, v)) st = kir_oom();
    if (st == KILN_OK && !kir_accept(ps, ',') && kir_peek(ps) != ')')
      st = kir_expected(ps, "',' or ')' in the outputs");
  }
  if (st == KILN_OK) st = kir_set_outputs(c->p, outs.n, outs.v);
  free(outs.v);
  return st;
}

static kiln_status kir_parse_body(kir_ctx *c) {
  kir_parser *ps = c->ps;
  kiln_status st = kir_expect(ps, '{', "to start a program");
  if (st == KILN_OK) st = kir_expect_word(ps, "lambda");
  if (st == KILN_OK) st = kir_parse_binders(c, true, ';');
  if (st == KILN_OK) st = kir_parse_binders(c, false, '.');
  if (st == KILN_OK) st = kir_expect_word(ps, "let");
  while (st == KILN_OK && !kir_accept_word(ps, "in")) st = kir_parse_eqn(c);
  if (st == KILN_OK) st = kir_parse_outputs(c);
  if (st == KILN_OK) st = kir_expect(ps, '}', "to end the program");
  return st;
}

static kiln_status kir_parse_program_into(kir_parser *ps, kir_program *p) {
  kir_ctx c = {ps, p, {NULL, 0, 0}};
  kiln_status st = kir_parse_body(&c);
  free(c.scope.slots);
  return st;
}

kiln_status kir_parse(const char *text, kir_program **out) {
  if (!text || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_parse: %s is NULL", text ? "out" : "text");
  kir_program *p;
  kiln_status st = kir_program_new(&p);
  if (st != KILN_OK) return st;
  kir_parser ps = {text, 0, 0};
  st = kir_parse_program_into(&ps, p);
  if (st == KILN_OK && kir_peek(&ps) != '\0') st = kir_expected(&ps, "the end of the text");
  if (st == KILN_OK) st = kir_verify(p);
  if (st != KILN_OK) {
    kir_program_free(p);
    return st;
  }
  *out = p;
  return KILN_OK;
}

kiln_status kir_aval_parse(const char *text, kir_aval *out) {
  if (!text || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_aval_parse: %s is NULL", text ? "out" : "text");
  kir_parser ps = {text, 0, 0};
  kiln_status st = kir_parse_type(&ps, out);
  if (st == KILN_OK && kir_peek(&ps) != '\0') st = kir_expected(&ps, "the end of the type");
  return st;
}

static void kir_param_temps_free(kir_param_temps *t) {
  for (int i = 0; i < t->n_strings; i++) free(t->strings[i]);
  free(t->strings);
  free(t->programs);
  free(t->avals);
}

kiln_status kir_params_parse(kir_program *p, kir_prim prim, const char *text, kir_params *out) {
  if (!p || !text || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_params_parse: an argument is NULL");
  if (!kir_prim_get(prim))
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_params_parse: invalid primitive %d", (int)prim);
  kir_parser ps = {text, 0, 0};
  kir_ctx c = {&ps, p, {NULL, 0, 0}};
  kir_param_temps tmp = {NULL, NULL, NULL, 0};
  kir_params parsed;
  memset(&parsed, 0, sizeof parsed);
  kiln_status st = kir_parse_param_list(&c, prim, '\0', &parsed, &tmp);
  if (st == KILN_OK) st = kir_params_import(p, prim, &parsed, out);
  kir_param_temps_free(&tmp);
  return st;
}
