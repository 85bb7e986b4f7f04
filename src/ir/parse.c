/* The parser for kir_print's text: recursive descent over the source, one
 * scope of names per program (sub-programs are closed). Errors carry the
 * line and column of the offending character. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/parse.h"

/* ---- scopes: names -> vids, keys pointing into the source ---- */

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

kiln_status kir_oom(void) { return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_parse: out of memory"); }

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

kiln_status kir_parse_program_into(kir_parser *ps, kir_program *p) {
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
