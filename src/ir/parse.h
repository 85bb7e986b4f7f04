/* The parser's shared state and lexer, private to its files (parse.c:
 * programs and equations; parse_lex.c: errors, words, numbers, types;
 * parse_params.c: parameter values). The ir module's door stays ir.h. */
#ifndef KILN_IR_PARSE_H
#define KILN_IR_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"
#include "ir/ir.h"

#define KIR_PARSE_MAX_DEPTH 64

typedef struct kir_parser {
  const char *s;
  size_t pos;
  int depth;
} kir_parser;

typedef struct kir_scope_slot {
  const char *name;
  size_t len;
  kir_vid v;
} kir_scope_slot;

typedef struct kir_scope {
  kir_scope_slot *slots;
  size_t cap, n;
} kir_scope;

typedef struct kir_ctx {
  kir_parser *ps;
  kir_program *p;
  kir_scope scope;
} kir_ctx;

/* Temporary storage a param value needs until kir_add_eqn copies it. */
typedef struct kir_param_temps {
  char **strings; /* every string field parsed (a kind may have several) */
  kir_program **programs;
  kir_aval *avals;
  int n_strings;
} kir_param_temps;

/* parse_lex.c */
bool kir_accept(kir_parser *ps, char c);
bool kir_accept_word(kir_parser *ps, const char *kw);
kiln_status kir_expect(kir_parser *ps, char c, const char *context);
kiln_status kir_expect_word(kir_parser *ps, const char *kw);
kiln_status kir_expected(const kir_parser *ps, const char *what);
const char *kir_ident(kir_parser *ps, size_t *len);
bool kir_number_is_integer(const char *c, size_t len);
size_t kir_number_len(const char *c);
kiln_status kir_parse_float(kir_parser *ps, const char *what, double *out);
kiln_status kir_parse_int(kir_parser *ps, const char *what, int64_t *out);
kiln_status kir_parse_type(kir_parser *ps, kir_aval *out);
char kir_peek(kir_parser *ps);
kiln_status kir_perr_at(const kir_parser *ps, size_t pos, const char *fmt, ...) KCORE_PRINTF(3, 4);
kiln_status kir_perr_wrap(const kir_parser *ps, size_t pos, kiln_status st);
void kir_skip_ws(kir_parser *ps);
bool kir_word_is(const char *w, size_t len, const char *kw);
bool kir_word_reserved(const char *w, size_t len);

/* parse.c */
kiln_status kir_oom(void);
kiln_status kir_parse_program_into(kir_parser *ps, kir_program *p);

/* parse_params.c */
void kir_param_temps_free(kir_param_temps *t);
kiln_status kir_parse_params(kir_ctx *c, kir_prim prim, kir_params *p, kir_param_temps *tmp);

#endif
