/* The jaxpr-style printer. Names are assigned in one pre-pass (so layout
 * decisions, which render pieces twice, never renumber); each program or
 * equation is printed on one line when that fits in KIR_PRINT_WIDTH
 * columns and broken the way jaxprs break otherwise. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define KIR_PRINT_WIDTH 80

/* ---- a growable string ---- */

typedef struct kir_sb {
  char *buf;
  size_t len, cap;
  bool oom;
} kir_sb;

static void kir_sb_reserve(kir_sb *s, size_t extra) {
  if (s->oom || s->len + extra + 1 <= s->cap) return;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->len + extra + 1) cap *= 2;
  char *n = realloc(s->buf, cap);
  if (!n) {
    s->oom = true;
    return;
  }
  s->buf = n;
  s->cap = cap;
}

static void kir_sb_putn(kir_sb *s, const char *str, size_t n) {
  kir_sb_reserve(s, n);
  if (s->oom) return;
  memcpy(s->buf + s->len, str, n);
  s->len += n;
  s->buf[s->len] = '\0';
}

static void kir_sb_puts(kir_sb *s, const char *str) { kir_sb_putn(s, str, strlen(str)); }

static void kir_sb_printf(kir_sb *s, const char *fmt, ...) KCORE_PRINTF(2, 3);
static void kir_sb_printf(kir_sb *s, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  KCORE_ASSERT((size_t)n < sizeof tmp); /* callers print short pieces */
  kir_sb_putn(s, tmp, (size_t)n);
}

static void kir_sb_indent(kir_sb *s, int n) {
  for (int i = 0; i < n; i++) kir_sb_putn(s, " ", 1);
}

/* Column of the end of the buffer (for layout decisions). */
static int kir_sb_column(const kir_sb *s) {
  size_t i = s->len;
  while (i > 0 && s->buf[i - 1] != '\n') i--;
  return (int)(s->len - i);
}

/* ---- names ---- */

typedef struct kir_printer {
  int **names; /* names[program index][vid]: a name number, -1 for none */
  int n_programs;
  int counter;
  bool oom;
  bool typed; /* operands print with their types (kir_print_eqn) */
} kir_printer;

/* JAX's scheme: a, ..., z, ba, bb, ... (base 26, 'a' is the zero digit). */
static void kir_name_encode(int n, char *buf) {
  char tmp[16];
  int len = 0;
  do {
    tmp[len++] = (char)('a' + n % 26);
    n /= 26;
  } while (n > 0);
  for (int i = 0; i < len; i++) buf[i] = tmp[len - 1 - i];
  buf[len] = '\0';
}

/* Names the parser would read as something else. */
static bool kir_name_reserved(const char *name) {
  static const char *const words[] = {"lambda", "let", "in", "nan", "inf"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strcmp(name, words[i]) == 0) return true;
  kir_prim p;
  return kir_prim_lookup(name, strlen(name), &p);
}

static void kir_name_next(kir_printer *pr, const kir_program *p, kir_vid v) {
  char buf[16];
  for (;;) {
    kir_name_encode(pr->counter, buf);
    if (!kir_name_reserved(buf)) break;
    pr->counter++;
  }
  pr->names[p->index][v] = pr->counter++;
}

static void kir_names_assign(kir_printer *pr, const kir_program *p);

static void kir_names_visit_sub(kir_program *sub, void *user) {
  kir_names_assign(user, sub);
}

static void kir_names_assign(kir_printer *pr, const kir_program *p) {
  int *names = malloc(((size_t)p->n_vars + 1) * sizeof *names);
  if (!names) {
    pr->oom = true;
    return;
  }
  for (int i = 0; i < p->n_vars; i++) names[i] = -1;
  pr->names[p->index] = names;
  for (int i = 0; i < p->n_constvars; i++) kir_name_next(pr, p, p->constvars[i]);
  for (int i = 0; i < p->n_invars; i++) kir_name_next(pr, p, p->invars[i]);
  for (int i = 0; i < p->n_eqns; i++) {
    const kir_eqn *e = &p->eqns[i];
    for (int k = 0; k < e->n_out; k++) kir_name_next(pr, p, e->out[k]);
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_names_visit_sub,
                                pr);
  }
}

/* ---- atoms ---- */

/* The shortest decimal that reads back to v once rounded to dtype, in a
 * form that reads as a float (Python's repr style: "1.0", "1e-05"). */
static void kir_format_float(kiln_dtype dtype, double v, char *buf, size_t cap) {
  if (isnan(v)) {
    snprintf(buf, cap, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, cap, v < 0 ? "-inf" : "inf");
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (kir_round_to_dtype(dtype, strtod(buf, NULL)) == v) break;
  }
  if (!strpbrk(buf, ".e")) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, ".0");
  }
}

static void kir_put_aval(kir_sb *s, const kir_aval *a) {
  char t[KIR_AVAL_STR_CAP];
  kir_sb_puts(s, kir_aval_str(a, t, sizeof t));
}

static void kir_put_literal(kir_sb *s, const kir_var *v) {
  char buf[64];
  kiln_dtype dt = v->aval.dtype;
  if (kiln_dtype_is_float(dt))
    kir_format_float(dt, v->u.literal.f, buf, sizeof buf);
  else if (kiln_dtype_is_bool(dt))
    snprintf(buf, sizeof buf, "%s", v->u.literal.i ? "True" : "False");
  else if (kiln_dtype_is_unsigned(dt))
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v->u.literal.u);
  else
    snprintf(buf, sizeof buf, "%lld", (long long)v->u.literal.i);
  kir_sb_puts(s, buf);
  kir_sb_puts(s, ":");
  kir_put_aval(s, &v->aval);
}

static void kir_put_name(kir_sb *s, const kir_printer *pr, const kir_program *p, kir_vid v) {
  char buf[16];
  int n = pr->names[p->index][v];
  KCORE_ASSERT(n >= 0); /* every non-literal operand of a verified program is named */
  kir_name_encode(n, buf);
  kir_sb_puts(s, buf);
}

static void kir_put_binder(kir_sb *s, const kir_printer *pr, const kir_program *p, kir_vid v) {
  kir_put_name(s, pr, p, v);
  kir_sb_puts(s, ":");
  kir_put_aval(s, &p->vars[v].aval);
}

static void kir_put_operand(kir_sb *s, const kir_printer *pr, const kir_program *p, kir_vid v) {
  if (p->vars[v].kind == KIR_VAR_LITERAL)
    kir_put_literal(s, &p->vars[v]);
  else if (pr->typed)
    kir_put_binder(s, pr, p, v);
  else
    kir_put_name(s, pr, p, v);
}

/* ---- params ---- */

static void kir_put_dims(kir_sb *s, const kir_dims *d) {
  char buf[128];
  kir_sb_puts(s, kir_dims_str(d, buf, sizeof buf));
}

static void kir_put_dims_list(kir_sb *s, const kir_dims *d) {
  kir_sb_puts(s, "[");
  for (int i = 0; i < d->n; i++) kir_sb_printf(s, "%s%d", i ? ", " : "", d->v[i]);
  kir_sb_puts(s, "]");
}

static void kir_put_named_dims(kir_sb *s, const char *type, int n, const char *const *names,
                               const kir_dims *d) {
  kir_sb_printf(s, "%s(", type);
  for (int i = 0; i < n; i++) {
    kir_sb_printf(s, "%s%s=", i ? ", " : "", names[i]);
    kir_put_dims(s, &d[i]);
  }
  kir_sb_puts(s, ")");
}

static const char *const kir_gather_dim_names[5] = {
    "offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
    "start_indices_batching_dims"};
static const char *const kir_scatter_dim_names[5] = {
    "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
    "operand_batching_dims", "scatter_indices_batching_dims"};
static const char *const kir_conv_dim_names[3] = {"lhs_spec", "rhs_spec", "out_spec"};
static const char *const kir_mode_names[3] = {"GatherScatterMode.CLIP",
                                              "GatherScatterMode.FILL_OR_DROP",
                                              "GatherScatterMode.PROMISE_IN_BOUNDS"};

static void kir_put_string(kir_sb *s, const char *str) {
  kir_sb_puts(s, "\"");
  for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
    switch (*c) {
      case '"': kir_sb_puts(s, "\\\""); break;
      case '\\': kir_sb_puts(s, "\\\\"); break;
      case '\n': kir_sb_puts(s, "\\n"); break;
      case '\t': kir_sb_puts(s, "\\t"); break;
      case '\r': kir_sb_puts(s, "\\r"); break;
      default:
        if (*c < 0x20 || *c >= 0x7f)
          kir_sb_printf(s, "\\x%02x", *c);
        else
          kir_sb_putn(s, (const char *)c, 1);
    }
  }
  kir_sb_puts(s, "\"");
}

static void kir_put_program(kir_sb *s, const kir_printer *pr, const kir_program *p, int indent,
                            bool flat);

/* A sub-program at the current column: flat if it fits, else broken with
 * its body indented from `indent`. */
static void kir_put_sub(kir_sb *s, const kir_printer *pr, const kir_program *p, int indent,
                        bool flat) {
  if (!flat) {
    kir_sb probe = {0};
    kir_put_program(&probe, pr, p, 0, true);
    flat = !probe.oom && kir_sb_column(s) + (int)probe.len <= KIR_PRINT_WIDTH;
    free(probe.buf);
  }
  kir_put_program(s, pr, p, indent, flat);
}

typedef const char *kir_cstr;
typedef const kir_program *kir_cprogram;

#define PF(p, f, type) ((const type *)(const void *)((const char *)(p) + (f)->offset))

static void kir_put_field(kir_sb *s, const kir_printer *pr, const kir_field *f,
                          const kir_params *p, int indent, bool flat) {
  char buf[64];
  switch (f->type) {
    case KIR_FIELD_INT: kir_sb_printf(s, "%lld", (long long)*PF(p, f, int64_t)); break;
    case KIR_FIELD_BOOL: kir_sb_puts(s, *PF(p, f, bool) ? "True" : "False"); break;
    case KIR_FIELD_DTYPE: kir_sb_puts(s, kiln_dtype_name(*PF(p, f, kiln_dtype))); break;
    case KIR_FIELD_OPT_DTYPE: {
      kiln_dtype d = *PF(p, f, kiln_dtype);
      kir_sb_puts(s, d == KILN_INVALID_DTYPE ? "None" : kiln_dtype_name(d));
      break;
    }
    case KIR_FIELD_MODE: {
      int m = (int)*PF(p, f, kir_gather_mode);
      KCORE_ASSERT(m >= 0 && m < 3);
      kir_sb_puts(s, kir_mode_names[m]);
      break;
    }
    case KIR_FIELD_DIMS: kir_put_dims(s, PF(p, f, kir_dims)); break;
    case KIR_FIELD_SIZES: {
      char sz[256];
      kir_sb_puts(s, kir_sizes_str(PF(p, f, kir_sizes), sz, sizeof sz));
      break;
    }
    case KIR_FIELD_PRIM: kir_sb_puts(s, kir_prim_name((kir_prim)*PF(p, f, int64_t))); break;
    case KIR_FIELD_PADDING:
    case KIR_FIELD_PAIRS: {
      const kir_padding *c = PF(p, f, kir_padding);
      kir_sb_puts(s, "(");
      for (int i = 0; i < c->n; i++) {
        kir_sb_printf(s, "%s(%lld, %lld", i ? ", " : "", (long long)c->lo[i], (long long)c->hi[i]);
        if (f->type == KIR_FIELD_PADDING) kir_sb_printf(s, ", %lld", (long long)c->interior[i]);
        kir_sb_puts(s, ")");
      }
      kir_sb_puts(s, c->n == 1 ? ",)" : ")");
      break;
    }
    case KIR_FIELD_CONV_DIMS:
      kir_put_named_dims(s, "ConvDimensionNumbers", 3, kir_conv_dim_names, PF(p, f, kir_dims));
      break;
    case KIR_FIELD_DOT_DIMS: {
      const kir_dot_dims *d = PF(p, f, kir_dot_dims);
      kir_sb_puts(s, "((");
      kir_put_dims_list(s, &d->lhs_contracting);
      kir_sb_puts(s, ", ");
      kir_put_dims_list(s, &d->rhs_contracting);
      kir_sb_puts(s, "), (");
      kir_put_dims_list(s, &d->lhs_batch);
      kir_sb_puts(s, ", ");
      kir_put_dims_list(s, &d->rhs_batch);
      kir_sb_puts(s, "))");
      break;
    }
    case KIR_FIELD_GATHER_DIMS:
      kir_put_named_dims(s, "GatherDimensionNumbers", 5, kir_gather_dim_names, PF(p, f, kir_dims));
      break;
    case KIR_FIELD_SCATTER_DIMS:
      kir_put_named_dims(s, "ScatterDimensionNumbers", 5, kir_scatter_dim_names,
                         PF(p, f, kir_dims));
      break;
    case KIR_FIELD_OPT_F64: {
      const kir_opt_f64 *x = PF(p, f, kir_opt_f64);
      if (!x->present) {
        kir_sb_puts(s, "None");
        break;
      }
      kir_format_float(KILN_F64, x->v, buf, sizeof buf);
      kir_sb_puts(s, buf);
      break;
    }
    case KIR_FIELD_STRING: kir_put_string(s, *PF(p, f, kir_cstr)); break;
    case KIR_FIELD_PROGRAM: kir_put_sub(s, pr, *PF(p, f, kir_cprogram), indent, flat); break;
    case KIR_FIELD_PROGRAMS: {
      const kir_program_list *l = PF(p, f, kir_program_list);
      kir_sb_puts(s, "(");
      for (int i = 0; i < l->n; i++) {
        if (flat) {
          if (i) kir_sb_puts(s, " ");
          kir_put_program(s, pr, l->v[i], 0, true);
        } else {
          kir_sb_puts(s, "\n");
          kir_sb_indent(s, indent + 2);
          kir_put_sub(s, pr, l->v[i], indent + 2, false);
        }
      }
      if (!flat && l->n) {
        kir_sb_puts(s, "\n");
        kir_sb_indent(s, indent);
      }
      kir_sb_puts(s, ")");
      break;
    }
    case KIR_FIELD_AVALS: {
      const kir_aval_list *l = PF(p, f, kir_aval_list);
      kir_sb_puts(s, "(");
      for (int i = 0; i < l->n; i++) {
        if (i) kir_sb_puts(s, ", ");
        kir_put_aval(s, &l->v[i]);
      }
      kir_sb_puts(s, l->n == 1 ? ",)" : ")");
      break;
    }
  }
}

/* Whether a param value fits flat on the rest of the current line. */
static bool kir_field_fits(const kir_sb *s, const kir_printer *pr, const kir_field *f,
                           const kir_params *p) {
  kir_sb probe = {0};
  kir_put_field(&probe, pr, f, p, 0, true);
  bool fits = !probe.oom && kir_sb_column(s) + (int)probe.len <= KIR_PRINT_WIDTH;
  free(probe.buf);
  return fits;
}

/* ---- equations and programs ---- */

static void kir_put_eqn(kir_sb *s, const kir_printer *pr, const kir_program *p, const kir_eqn *e,
                        int indent, bool flat) {
  const kir_prim_info *info = kir_prim_get(e->prim);
  for (int k = 0; k < e->n_out; k++) {
    if (k) kir_sb_puts(s, " ");
    kir_put_binder(s, pr, p, e->out[k]);
  }
  if (e->n_out) kir_sb_puts(s, " = ");
  kir_sb_puts(s, info->name);
  int n;
  const kir_field *fields = kir_param_fields(info->params, &n);
  if (n) {
    kir_sb_puts(s, "[");
    for (int i = 0; i < n; i++) {
      if (flat) {
        if (i) kir_sb_puts(s, " ");
      } else {
        kir_sb_puts(s, "\n");
        kir_sb_indent(s, indent + 2);
      }
      kir_sb_printf(s, "%s=", fields[i].name);
      kir_put_field(s, pr, &fields[i], &e->params, indent + 2,
                    flat || kir_field_fits(s, pr, &fields[i], &e->params));
    }
    if (!flat) {
      kir_sb_puts(s, "\n");
      kir_sb_indent(s, indent);
    }
    kir_sb_puts(s, "]");
  }
  for (int i = 0; i < e->n_in; i++) {
    kir_sb_puts(s, " ");
    kir_put_operand(s, pr, p, e->in[i]);
  }
}

static void kir_put_eqn_line(kir_sb *s, const kir_printer *pr, const kir_program *p,
                             const kir_eqn *e, int indent) {
  kir_sb probe = {0};
  kir_put_eqn(&probe, pr, p, e, 0, true);
  bool flat = !probe.oom && indent + (int)probe.len <= KIR_PRINT_WIDTH;
  free(probe.buf);
  int n;
  kir_param_fields(kir_prim_get(e->prim)->params, &n);
  kir_put_eqn(s, pr, p, e, indent, flat || n == 0);
}

static void kir_put_program(kir_sb *s, const kir_printer *pr, const kir_program *p, int indent,
                            bool flat) {
  kir_sb_puts(s, "{ lambda ");
  for (int i = 0; i < p->n_constvars; i++) {
    if (i) kir_sb_puts(s, " ");
    kir_put_binder(s, pr, p, p->constvars[i]);
  }
  kir_sb_puts(s, "; ");
  for (int i = 0; i < p->n_invars; i++) {
    if (i) kir_sb_puts(s, " ");
    kir_put_binder(s, pr, p, p->invars[i]);
  }
  kir_sb_puts(s, ". let");
  if (flat) {
    kir_sb_puts(s, " ");
    for (int i = 0; i < p->n_eqns; i++) {
      if (i) kir_sb_puts(s, " ");
      kir_put_eqn(s, pr, p, &p->eqns[i], 0, true);
    }
    kir_sb_puts(s, " in (");
  } else {
    for (int i = 0; i < p->n_eqns; i++) {
      kir_sb_puts(s, "\n");
      kir_sb_indent(s, indent + 4);
      kir_put_eqn_line(s, pr, p, &p->eqns[i], indent + 4);
    }
    kir_sb_puts(s, "\n");
    kir_sb_indent(s, indent + 2);
    kir_sb_puts(s, "in (");
  }
  for (int i = 0; i < p->n_outvars; i++) {
    if (i) kir_sb_puts(s, ", ");
    kir_put_operand(s, pr, p, p->outvars[i]);
  }
  kir_sb_puts(s, p->n_outvars == 1 ? ",) }" : ") }");
}

kiln_status kir_print(const kir_program *p, char **out) {
  if (!p || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_print: %s is NULL", p ? "out" : "program");
  kiln_status st = kir_verify(p);
  if (st != KILN_OK) return kcore_fail_wrap(st, "kir_print");
  kir_printer pr = {.names = calloc((size_t)p->root->n_programs, sizeof(int *)),
                    .n_programs = p->root->n_programs};
  kir_sb s = {0};
  if (pr.names) {
    kir_names_assign(&pr, p);
    if (!pr.oom) kir_put_sub(&s, &pr, p, 0, false);
  }
  bool oom = !pr.names || pr.oom || s.oom;
  for (int i = 0; pr.names && i < pr.n_programs; i++) free(pr.names[i]);
  free(pr.names);
  if (oom) {
    free(s.buf);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_print: out of memory");
  }
  *out = s.buf;
  return KILN_OK;
}

kiln_status kir_print_eqn(const kir_program *p, int eqn, char **out) {
  if (!p || !out || eqn < 0 || eqn >= p->n_eqns)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_print_eqn: no equation %d", eqn);
  const kir_program *root = p->root;
  kir_printer pr = {calloc((size_t)root->n_programs, sizeof(int *)), root->n_programs, 0, false,
                    true};
  kir_sb s = {0};
  if (pr.names) kir_names_assign(&pr, root); /* the names kir_print gives the whole text */
  if (pr.names && !pr.oom) kir_put_eqn(&s, &pr, p, &p->eqns[eqn], 0, true);
  bool oom = !pr.names || pr.oom || s.oom;
  for (int i = 0; pr.names && i < pr.n_programs; i++) free(pr.names[i]);
  free(pr.names);
  if (oom) {
    free(s.buf);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_print_eqn: out of memory");
  }
  *out = s.buf;
  return KILN_OK;
}
