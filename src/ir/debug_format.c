/* debug_print's text, as jax.debug.print writes it.
 *
 * jax.debug.print(fmt, *args) runs Python's fmt.format(*args) on the host
 * with the values as arrays, so what it prints is:
 * - a rank-0 value as format(x, ''): Python's own text for the value, a
 *   float widened to double (repr: shortest round-trip digits), an int in
 *   decimal, a bool as True/False;
 * - any other array as str(np.ndarray) under numpy's default print options
 *   (precision 8 in 'maxprec' mode, threshold 1000, edgeitems 3, linewidth
 *   75): one format per array chosen from the shown values, positional or
 *   scientific, padded to equal widths, rows wrapped and nested in
 *   brackets; bfloat16 elements each as ml_dtypes prints them (C's %g);
 * - when fmt's first brace is an escaped one, JAX takes fmt for one without
 *   placeholders and prints it raw, followed by " " + str(x) per value
 *   (numpy's scalar str for rank 0).
 * Float digits are the shortest that round-trip in the value's own type
 * (IEEE rounding, so an even mantissa owns its interval's ends; two
 * shortest candidates at equal distance give the even digit), as numpy's
 * Dragon4 and Python's repr compute them. Only "{}" and "{N}" fields are
 * supported: conversions, format specs and attribute lookups are
 * KILN_ERR_UNIMPLEMENTED. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/debug_format.h"

/* ======================================================================
 * The format string: Python's str.format with "{}" and "{N}" fields
 * ====================================================================== */

typedef enum kir_numbering {
  KIR_NUMBERING_NONE,
  KIR_NUMBERING_AUTO,
  KIR_NUMBERING_MANUAL
} kir_numbering;

typedef struct kir_fmt_walk {
  const char *fmt;
  int n;
  const kir_buffer *values;
  bool *used;
  kir_numbering numbering;
  int next; /* the next automatic field's value */
} kir_fmt_walk;

/* The value a field's text (between the braces) names. */
static kiln_status kir_field_index(kir_fmt_walk *w, const char *f, size_t len, int *index) {
  size_t name = strcspn(f, ".[!:}");
  if (name > len) name = len;
  if (name < len) {
    char c = f[name];
    bool empty_spec = c == ':' && name + 1 == len;
    if (!empty_spec)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                        "debug_print: format \"%s\": field {%.*s} uses %s, "
                        "which kiln does not support (only {} and {N})",
                        w->fmt, (int)len, f,
                        c == '!'   ? "a conversion"
                        : c == ':' ? "a format spec"
                                   : "attribute or item access");
  }
  if (name == 0) {
    if (w->numbering == KIR_NUMBERING_MANUAL)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "debug_print: format \"%s\": cannot switch from manual "
                        "field specification to automatic field numbering",
                        w->fmt);
    w->numbering = KIR_NUMBERING_AUTO;
    *index = w->next++;
  } else {
    if (strspn(f, "0123456789") < name || name > 9)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "debug_print: format \"%s\": field {%.*s} names a "
                        "keyword, but the values are positional",
                        w->fmt, (int)len, f);
    if (w->numbering == KIR_NUMBERING_AUTO)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "debug_print: format \"%s\": cannot switch from "
                        "automatic field numbering to manual field specification",
                        w->fmt);
    w->numbering = KIR_NUMBERING_MANUAL;
    *index = atoi(f);
  }
  if (*index >= w->n)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "debug_print: format \"%s\": replacement index %d is out "
                      "of range for %d value%s",
                      w->fmt, *index, w->n, w->n == 1 ? "" : "s");
  return KILN_OK;
}

/* Formats w->fmt into t (NULL: only checks it), marking the values used. */
static kiln_status kir_fmt_run(kir_fmt_walk *w, kir_text *t) {
  const char *s = w->fmt;
  while (*s) {
    if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) {
      if (t) kir_text_putn(t, s, 1);
      s += 2;
      continue;
    }
    if (s[0] == '}')
      return kcore_fail(KILN_ERR_ARGUMENT, "debug_print: format \"%s\": single '}' encountered",
                        w->fmt);
    if (s[0] != '{') {
      size_t lit = strcspn(s, "{}");
      if (t) kir_text_putn(t, s, lit);
      s += lit;
      continue;
    }
    const char *f = s + 1;
    size_t len = strcspn(f, "{}");
    if (!f[len])
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "debug_print: format \"%s\": expected '}' before end of string", w->fmt);
    if (f[len] == '{') { /* Python nests fields in a format spec only */
      bool spec = memchr(f, ':', len) != NULL;
      return kcore_fail(spec ? KILN_ERR_UNIMPLEMENTED : KILN_ERR_ARGUMENT,
                        "debug_print: format \"%s\": %s", w->fmt,
                        spec ? "nested fields are not supported" : "unexpected '{' in field name");
    }
    int index = 0;
    kiln_status st = kir_field_index(w, f, len, &index);
    if (st) return st;
    w->used[index] = true;
    if (t) kir_put_value(t, &w->values[index], false);
    s = f + len + 1;
  }
  return KILN_OK;
}

/* JAX looks only at fmt's first piece: it has placeholders unless its
 * first brace is an escaped one (or it has none). */
static bool kir_has_placeholders(const char *fmt) {
  const char *b = strpbrk(fmt, "{}");
  return b && b[0] == '{' && b[1] != '{';
}

kiln_status kir_debug_format(const char *fmt, int n, const kir_buffer *values, char **out) {
  *out = NULL;
  if (!fmt) return kcore_fail(KILN_ERR_ARGUMENT, "debug_print: fmt is NULL");
  bool small[16] = {false};
  bool *used = n <= 16 ? small : calloc((size_t)n, sizeof *used);
  if (!used) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_print: out of host memory");
  kir_fmt_walk w = {fmt, n, values, used, KIR_NUMBERING_NONE, 0};
  kir_text t = {0};
  bool raw = !kir_has_placeholders(fmt);
  /* Check the whole format first, as JAX does when tracing. */
  kiln_status st = kir_fmt_run(&w, NULL);
  for (int i = 0; i < n && !st; i++)
    if (!used[i])
      st = kcore_fail(KILN_ERR_ARGUMENT,
                      "debug_print: format \"%s\" leaves value %d (of %d) "
                      "unused",
                      fmt, i, n);
  if (!st && raw) {
    kir_text_puts(&t, fmt);
    for (int i = 0; i < n; i++) {
      kir_text_puts(&t, " ");
      kir_put_value(&t, &values[i], true);
    }
  } else if (!st) {
    w.numbering = KIR_NUMBERING_NONE;
    w.next = 0;
    st = kir_fmt_run(&w, &t);
  }
  if (!st && !t.s) kir_text_puts(&t, "");
  if (!st && t.oom) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_print: out of host memory");
  if (used != small) free(used);
  if (st) {
    free(t.s);
    return st;
  }
  *out = t.s;
  return KILN_OK;
}
