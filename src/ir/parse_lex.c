/* The parser's lexer: errors with line and column, whitespace, words,
 * numbers and types. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/parse.h"

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

kiln_status kir_perr_at(const kir_parser *ps, size_t pos, const char *fmt, ...) {
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
kiln_status kir_perr_wrap(const kir_parser *ps, size_t pos, kiln_status st) {
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

kiln_status kir_expected(const kir_parser *ps, const char *what) {
  char buf[32];
  return kir_perr_at(ps, ps->pos, "expected %s, found %s", what, kir_found(ps, buf, sizeof buf));
}

/* ---- lexing ---- */

void kir_skip_ws(kir_parser *ps) {
  while (isspace((unsigned char)ps->s[ps->pos])) ps->pos++;
}

char kir_peek(kir_parser *ps) {
  kir_skip_ws(ps);
  return ps->s[ps->pos];
}

bool kir_accept(kir_parser *ps, char c) {
  if (kir_peek(ps) != c) return false;
  ps->pos++;
  return true;
}

kiln_status kir_expect(kir_parser *ps, char c, const char *context) {
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
const char *kir_ident(kir_parser *ps, size_t *len) {
  kir_skip_ws(ps);
  const char *start = ps->s + ps->pos;
  size_t n = 0;
  if (kir_is_ident_start(start[0]))
    while (kir_is_ident_char(start[n])) n++;
  *len = n;
  return start;
}

bool kir_word_is(const char *w, size_t len, const char *kw) {
  return strlen(kw) == len && memcmp(w, kw, len) == 0;
}

bool kir_accept_word(kir_parser *ps, const char *kw) {
  size_t len;
  const char *w = kir_ident(ps, &len);
  if (!kir_word_is(w, len, kw)) return false;
  ps->pos += len;
  return true;
}

kiln_status kir_expect_word(kir_parser *ps, const char *kw) {
  if (kir_accept_word(ps, kw)) return KILN_OK;
  char what[64];
  snprintf(what, sizeof what, "'%s'", kw);
  return kir_expected(ps, what);
}

/* Words that are never variable names. */
bool kir_word_reserved(const char *w, size_t len) {
  static const char *const words[] = {"lambda", "let", "in", "True", "False", "None", "nan",
                                      "inf"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (kir_word_is(w, len, words[i])) return true;
  kir_prim p;
  return kir_prim_lookup(w, len, &p);
}

/* A number token: [-](digits[.digits][e[+-]digits] | inf | nan). */
size_t kir_number_len(const char *c) {
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

bool kir_number_is_integer(const char *c, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!isdigit((unsigned char)c[i]) && !(i == 0 && c[i] == '-')) return false;
  return true;
}

kiln_status kir_parse_int(kir_parser *ps, const char *what, int64_t *out) {
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
kiln_status kir_parse_float(kir_parser *ps, const char *what, double *out) {
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

kiln_status kir_parse_type(kir_parser *ps, kir_aval *out) {
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
