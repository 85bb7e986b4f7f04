/* The parser's parameter values: every field type of params.c, sub-programs
 * included, and kir_params_parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/parse.h"

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

/* pad's (lo, hi, interior) triples, or reduce_window's (lo, hi) pairs. */
static kiln_status kir_parse_padding(kir_parser *ps, int arity, kir_padding *c) {
  kiln_status st = kir_expect(ps, '(', NULL);
  c->n = 0;
  while (st == KILN_OK && !kir_accept(ps, ')')) {
    if (c->n == KIR_MAX_RANK) return kir_perr_at(ps, ps->pos, "more than %d entries", KIR_MAX_RANK);
    int64_t t[KIR_MAX_RANK];
    int n;
    size_t pos = (kir_skip_ws(ps), ps->pos);
    st = kir_parse_ints(ps, '(', ')', t, &n);
    if (st != KILN_OK) return st;
    if (n != arity)
      return kir_perr_at(ps, pos, arity == 3 ? "expected a (low, high, interior) triple"
                                             : "expected a (low, high) pair");
    c->lo[c->n] = t[0], c->hi[c->n] = t[1], c->interior[c->n] = arity == 3 ? t[2] : 0;
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
    case KIR_FIELD_PAIRS: return kir_parse_padding(ps, 2, PV(p, f, kir_padding));
    case KIR_FIELD_CONV_DIMS:
      return kir_parse_named_dims(ps, "ConvDimensionNumbers", 3, kir_conv_names,
                                  PV(p, f, kir_dims));
    case KIR_FIELD_PRIM: {
      size_t len;
      const char *w = kir_ident(ps, &len);
      kir_prim prim;
      if (!len || !kir_prim_lookup(w, len, &prim)) return kir_expected(ps, "a primitive name");
      ps->pos += len;
      *PV(p, f, int64_t) = prim;
      return KILN_OK;
    }
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
kiln_status kir_parse_params(kir_ctx *c, kir_prim prim, kir_params *p,
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

void kir_param_temps_free(kir_param_temps *t) {
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
