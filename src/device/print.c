/* Arrays as NumPy prints them (str(np.asarray(x)), what print(x) shows in
 * JAX): NumPy's default options (linewidth 75, threshold 1000, edgeitems 3,
 * precision 8, floatmode 'maxprec'), its float rules (shortest digits that
 * round-trip in the element type, positional or scientific for the whole
 * array), its line wrapping and its summaries. bfloat16 elements print as
 * ml_dtypes prints them ("%g", unpadded). A port of numpy/_core/arrayprint.py's
 * _formatArray and FloatingFormat. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "device/device.h"

#define KDEV_LINEWIDTH 75
#define KDEV_THRESHOLD 1000
#define KDEV_EDGEITEMS 3
#define KDEV_PRECISION 8

/* ---- a growing string ---- */
typedef struct kdev_sb {
  char *p;
  size_t n, cap;
  bool oom;
} kdev_sb;

static void sb_putn(kdev_sb *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}
static void sb_puts(kdev_sb *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_spaces(kdev_sb *b, size_t n) {
  for (size_t i = 0; i < n; i++) sb_putn(b, " ", 1);
}

/* ---- element values ---- */
typedef struct kdev_view {
  kiln_dtype dtype;
  int rank;
  const int64_t *shape;
  const unsigned char *data;
  int64_t strides[KILN_MAX_RANK]; /* in elements */
  bool summary;
} kdev_view;

static double view_f(const kdev_view *v, int64_t i) {
  const unsigned char *p = v->data + (size_t)i * kiln_dtype_size(v->dtype);
  switch (v->dtype) {
    case KILN_F16: { uint16_t h; memcpy(&h, p, 2); return kiln_f16_to_f32(h); }
    case KILN_BF16: { uint16_t h; memcpy(&h, p, 2); return kiln_bf16_to_f32(h); }
    case KILN_F32: { float f; memcpy(&f, p, 4); return f; }
    default: { double d; memcpy(&d, p, 8); return d; }
  }
}

static int64_t view_i(const kdev_view *v, int64_t i) {
  const unsigned char *p = v->data + (size_t)i * kiln_dtype_size(v->dtype);
  switch (v->dtype) {
    case KILN_BOOL: case KILN_U8: return *p;
    case KILN_I8: return (int8_t)*p;
    case KILN_I16: { int16_t x; memcpy(&x, p, 2); return x; }
    case KILN_U16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case KILN_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case KILN_U32: { uint32_t x; memcpy(&x, p, 4); return x; }
    default: { int64_t x; memcpy(&x, p, 8); return x; }
  }
}

/* ---- float digits ---- */

/* np.finfo(dtype).precision: the decimal digits the type holds. */
static int float_precision(kiln_dtype d) { return d == KILN_F16 ? 3 : d == KILN_F32 ? 6 : 15; }

static bool roundtrips(double parsed, double v, kiln_dtype d) {
  if (d == KILN_F64) return parsed == v;
  if (d == KILN_F16) return kiln_f32_to_f16((float)parsed) == kiln_f32_to_f16((float)v);
  return (float)parsed == (float)v;
}

/* The shortest decimal digits of |v| that read back as v in its type:
 * digits (no dot) and the exponent of the first one. */
static void shortest(double v, kiln_dtype d, char *digits, int *exp10) {
  char s[64];
  for (int p = 0; p < 17; p++) {
    snprintf(s, sizeof s, "%.*e", p, fabs(v));
    if (roundtrips(strtod(s, NULL), fabs(v), d) || p == 16) break;
  }
  size_t k = 0;
  const char *c = s;
  for (; *c && *c != 'e'; c++)
    if (*c != '.') digits[k++] = *c;
  digits[k] = '\0';
  *exp10 = atoi(c + 1);
}

/* dragon4_positional(unique, precision 8): "-12" and "34" of -12.34. */
static void positional(double v, kiln_dtype d, char *ip, char *fp) {
  char dg[40];
  int e;
  shortest(v, d, dg, &e);
  int nd = (int)strlen(dg), frac = nd - 1 - e;
  const char *sign = signbit(v) ? "-" : "";
  if (frac > KDEV_PRECISION) { /* more digits than printed: round at 8 */
    char s[400];
    snprintf(s, sizeof s, "%.*f", KDEV_PRECISION, fabs(v));
    char *dot = strchr(s, '.');
    *dot = '\0';
    size_t n = strlen(dot + 1);
    while (n > 0 && dot[n] == '0') dot[n--] = '\0';
    sprintf(ip, "%s%s", sign, s);
    strcpy(fp, dot + 1);
    return;
  }
  if (e >= 0) {
    int ni = e + 1;
    sprintf(ip, "%s", sign);
    for (int i = 0; i < ni; i++) ip[strlen(sign) + (size_t)i] = i < nd ? dg[i] : '0';
    ip[strlen(sign) + (size_t)ni] = '\0';
    strcpy(fp, nd > ni ? dg + ni : "");
  } else {
    sprintf(ip, "%s0", sign);
    int z = -e - 1;
    memset(fp, '0', (size_t)z);
    strcpy(fp + z, dg);
  }
  if (v == 0) fp[0] = '\0';
}

/* dragon4_scientific(unique, precision 8): "-1", "25", "+03" of -1.25e3. */
static void scientific(double v, kiln_dtype d, char *ip, char *fp, char *xp) {
  char dg[40];
  int e;
  shortest(v, d, dg, &e);
  if (v == 0) e = 0;
  if ((int)strlen(dg) - 1 > KDEV_PRECISION) {
    char s[64];
    snprintf(s, sizeof s, "%.*e", KDEV_PRECISION, fabs(v));
    size_t k = 0;
    for (const char *c = s; *c && *c != 'e'; c++)
      if (*c != '.') dg[k++] = *c;
    dg[k] = '\0';
    e = atoi(strchr(s, 'e') + 1);
    while (k > 1 && dg[k - 1] == '0') dg[--k] = '\0';
  }
  sprintf(ip, "%s%c", signbit(v) ? "-" : "", dg[0]);
  strcpy(fp, dg + 1);
  sprintf(xp, "%c%02d", e < 0 ? '-' : '+', abs(e));
}

/* ---- the formatter of one array (FloatingFormat, IntegerFormat, ...) ---- */
typedef struct kdev_fmt {
  kiln_dtype dtype;
  bool exp_format;
  int pad_left, pad_right, precision, exp_size;
  int int_width;
} kdev_fmt;

/* Calls fn on every element shown (all, or the edges when summarised). */
typedef void (*kdev_visit_fn)(const kdev_view *v, int64_t off, void *user);
static void visit(const kdev_view *v, int axis, int64_t off, kdev_visit_fn fn, void *user) {
  if (axis == v->rank) {
    fn(v, off, user);
    return;
  }
  int64_t n = v->shape[axis];
  bool cut = v->summary && n > 2 * KDEV_EDGEITEMS;
  for (int64_t i = 0; i < n; i++) {
    if (cut && i == KDEV_EDGEITEMS) i = n - KDEV_EDGEITEMS;
    visit(v, axis + 1, off + i * v->strides[axis], fn, user);
  }
}

typedef struct kdev_stats {
  kdev_fmt *f;
  bool any_finite, any_nonzero, any_nonfinite, neg_inf;
  double max_abs, min_abs;
  int64_t imax, imin;
  bool pass2;
} kdev_stats;

static void stats_fn(const kdev_view *v, int64_t off, void *user) {
  kdev_stats *s = user;
  kdev_fmt *f = s->f;
  if (!kiln_dtype_is_float(v->dtype)) {
    int64_t x = view_i(v, off);
    if (v->dtype == KILN_U64) x = x < 0 ? INT64_MAX : x; /* width only */
    if (x > s->imax) s->imax = x;
    if (x < s->imin) s->imin = x;
    return;
  }
  double x = view_f(v, off);
  if (!isfinite(x)) {
    s->any_nonfinite = true;
    s->neg_inf |= isinf(x) && x < 0;
    return;
  }
  s->any_finite = true;
  if (!s->pass2) {
    if (x != 0) {
      double a = fabs(x);
      if (!s->any_nonzero || a > s->max_abs) s->max_abs = a;
      if (!s->any_nonzero || a < s->min_abs) s->min_abs = a;
      s->any_nonzero = true;
    }
    return;
  }
  char ip[400], fp[400], xp[16];
  int nf;
  if (f->exp_format) {
    scientific(x, v->dtype, ip, fp, xp);
    int ne = (int)strlen(xp) - 1;
    if (ne > f->exp_size) f->exp_size = ne;
  } else {
    positional(x, v->dtype, ip, fp);
  }
  nf = (int)strlen(fp);
  if ((int)strlen(ip) > f->pad_left) f->pad_left = (int)strlen(ip);
  if (nf > f->precision) f->precision = nf;
}

static void fmt_init(const kdev_view *v, kdev_fmt *f) {
  memset(f, 0, sizeof *f);
  f->dtype = v->dtype;
  kdev_stats s = {.f = f, .imax = INT64_MIN, .imin = INT64_MAX};
  visit(v, 0, 0, stats_fn, &s);
  if (!kiln_dtype_is_float(v->dtype) || v->dtype == KILN_BF16) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%lld", (long long)s.imax);
    snprintf(b, sizeof b, "%lld", (long long)s.imin);
    f->int_width = (int)(strlen(a) > strlen(b) ? strlen(a) : strlen(b));
    if (v->dtype == KILN_U64 && s.imax == INT64_MAX) f->int_width = 20;
    return;
  }
  double cutoff = pow(10, float_precision(v->dtype) < 8 ? float_precision(v->dtype) : 8);
  f->exp_format = s.any_nonzero && (s.max_abs >= cutoff || s.min_abs < 1e-4 ||
                                    s.max_abs / s.min_abs > 1000.);
  s.pass2 = true;
  visit(v, 0, 0, stats_fn, &s);
  if (f->exp_format) {
    if (f->exp_size < 2) f->exp_size = 2;
    f->pad_right = f->exp_size + 2 + f->precision;
  } else {
    f->pad_right = f->precision;
  }
  if (!s.any_finite) f->pad_left = f->pad_right = 0;
  if (s.any_nonfinite) {
    int offset = f->pad_right + 1;
    if (3 - offset > f->pad_left) f->pad_left = 3 - offset;
    if (3 + (int)s.neg_inf - offset > f->pad_left) f->pad_left = 3 + (int)s.neg_inf - offset;
  }
}

/* One element as the formatter writes it. */
static void fmt_elem(const kdev_fmt *f, const kdev_view *v, int64_t off, kdev_sb *b) {
  char ip[400], fp[400], xp[16], out[900];
  if (v->dtype == KILN_BOOL) {
    sb_puts(b, view_i(v, off) ? " True" : "False");
    return;
  }
  if (v->dtype == KILN_BF16) {
    snprintf(out, sizeof out, "%g", view_f(v, off));
    sb_puts(b, out);
    return;
  }
  if (!kiln_dtype_is_float(v->dtype)) {
    int64_t x = view_i(v, off);
    if (v->dtype == KILN_U64)
      snprintf(out, sizeof out, "%*llu", f->int_width, (unsigned long long)x);
    else
      snprintf(out, sizeof out, "%*lld", f->int_width, (long long)x);
    sb_puts(b, out);
    return;
  }
  double x = view_f(v, off);
  if (!isfinite(x)) {
    const char *s = isnan(x) ? "nan" : x < 0 ? "-inf" : "inf";
    int w = f->pad_left + f->pad_right + 1 - (int)strlen(s);
    sb_spaces(b, w > 0 ? (size_t)w : 0);
    sb_puts(b, s);
    return;
  }
  if (f->exp_format) {
    scientific(x, v->dtype, ip, fp, xp);
    /* min_digits = precision: a shorter fraction gets the value's further
     * exact digits (dragon4 does not pad with zeros). */
    if ((int)strlen(fp) < f->precision) {
      char s[64];
      snprintf(s, sizeof s, "%.*e", f->precision, fabs(x));
      char *dot = strchr(s, '.'), *e = strchr(s, 'e');
      sprintf(ip, "%s%c", signbit(x) ? "-" : "", s[0]);
      if (dot) {
        memcpy(fp, dot + 1, (size_t)(e - dot - 1));
        fp[e - dot - 1] = '\0';
      }
      int ex = atoi(e + 1);
      sprintf(xp, "%c%02d", ex < 0 ? '-' : '+', abs(ex));
    }
    snprintf(out, sizeof out, "%*s.%se%c%0*d", f->pad_left, ip, fp, xp[0], f->exp_size,
             abs(atoi(xp + 1)));
    sb_puts(b, out);
    return;
  }
  positional(x, v->dtype, ip, fp);
  snprintf(out, sizeof out, "%*s.%-*s", f->pad_left, ip, f->pad_right, fp);
  sb_puts(b, out);
}

/* ---- _formatArray ---- */
typedef struct kdev_printer {
  const kdev_view *v;
  const kdev_fmt *f;
  kdev_sb *out;
} kdev_printer;

/* _extendLine: s gets line when word would pass width. */
static void extend_line(kdev_sb *s, kdev_sb *line, const char *word, size_t width,
                        const char *next_prefix) {
  bool wrap = line->n + strlen(word) > width && line->n > strlen(next_prefix);
  if (wrap) {
    size_t n = line->n;
    while (n > 0 && line->p[n - 1] == ' ') n--;
    sb_putn(s, line->p, n);
    sb_puts(s, "\n");
    line->n = 0;
    sb_puts(line, next_prefix);
  }
  sb_puts(line, word);
}

static void recurse(const kdev_printer *pr, int axis, int64_t off, const char *hang, size_t width,
                    kdev_sb *s);

/* The text of element (or subarray) i of axis at off. */
static char *item(const kdev_printer *pr, int axis, int64_t off, int64_t i, const char *hang,
                  size_t width) {
  kdev_sb w = {0};
  int64_t o = off + i * pr->v->strides[axis];
  if (axis + 1 == pr->v->rank) {
    fmt_elem(pr->f, pr->v, o, &w);
  } else {
    size_t n = strlen(hang);
    char *next = malloc(n + 2);
    if (!next) return NULL;
    memcpy(next, hang, n);
    strcpy(next + n, " ");
    recurse(pr, axis + 1, o, next, width, &w);
    free(next);
  }
  if (w.oom) {
    free(w.p);
    return NULL;
  }
  return w.p ? w.p : calloc(1, 1);
}

static void recurse(const kdev_printer *pr, int axis, int64_t off, const char *hang, size_t width,
                    kdev_sb *s) {
  const kdev_view *v = pr->v;
  int64_t n = v->shape[axis];
  bool cut = v->summary && 2 * KDEV_EDGEITEMS < n;
  int64_t lead = cut ? KDEV_EDGEITEMS : 0, trail = cut ? KDEV_EDGEITEMS : n;
  kdev_sb body = {0};
  int left = v->rank - axis;
  if (n == 0) {
    sb_puts(s, "[]");
    return;
  }
  if (left == 1) {
    size_t elem_width = width - 1; /* max(len(' '.rstrip()), len(']')) */
    kdev_sb line = {0};
    sb_puts(&line, hang);
    for (int64_t i = 0; i < lead + trail; i++) {
      bool last = i == lead + trail - 1;
      if (cut && i == lead) {
        extend_line(&body, &line, "...", elem_width, hang);
        sb_puts(&line, " ");
      }
      int64_t idx = i < lead ? i : n - (lead + trail - i);
      char *w = item(pr, axis, off, idx, hang, width - 1);
      if (!w) {
        body.oom = true;
        break;
      }
      extend_line(&body, &line, w, elem_width, hang);
      free(w);
      if (!last) sb_puts(&line, " ");
    }
    sb_putn(&body, line.p ? line.p : "", line.n);
    body.oom |= line.oom;
    free(line.p);
  } else {
    char sep[16] = "";
    for (int k = 0; k < left - 1 && k < 15; k++) sep[k] = '\n';
    for (int64_t i = 0; i < lead + trail; i++) {
      if (cut && i == lead) {
        sb_puts(&body, hang);
        sb_puts(&body, "...");
        sb_puts(&body, sep);
      }
      int64_t idx = i < lead ? i : n - (lead + trail - i);
      char *w = item(pr, axis, off, idx, hang, width - 1);
      if (!w) {
        body.oom = true;
        break;
      }
      sb_puts(&body, hang);
      sb_puts(&body, w);
      free(w);
      if (i != lead + trail - 1) sb_puts(&body, sep);
    }
  }
  /* '[' + s[len(hanging_indent):] + ']' */
  size_t h = strlen(hang);
  sb_puts(s, "[");
  if (body.n > h) sb_putn(s, body.p + h, body.n - h);
  sb_puts(s, "]");
  s->oom |= body.oom;
  free(body.p);
}

/* A 0-d array: NumPy's scalar str ("1.5", "2.0", "1e+10", "True"). */
static void format_scalar(const kdev_view *v, kdev_sb *b) {
  char out[900], ip[400], fp[400], xp[16];
  if (!kiln_dtype_is_float(v->dtype)) {
    if (v->dtype == KILN_BOOL)
      sb_puts(b, view_i(v, 0) ? "True" : "False");
    else if (v->dtype == KILN_U64)
      snprintf(out, sizeof out, "%llu", (unsigned long long)view_i(v, 0)), sb_puts(b, out);
    else
      snprintf(out, sizeof out, "%lld", (long long)view_i(v, 0)), sb_puts(b, out);
    return;
  }
  double x = view_f(v, 0);
  if (v->dtype == KILN_BF16 || !isfinite(x)) {
    snprintf(out, sizeof out, "%g", x);
    sb_puts(b, out);
    return;
  }
  double a = fabs(x);
  if (a == 0 || (a >= 1e-4 && a < pow(10, float_precision(v->dtype)))) {
    positional(x, v->dtype, ip, fp);
    snprintf(out, sizeof out, "%s.%s", ip, fp[0] ? fp : "0");
  } else {
    scientific(x, v->dtype, ip, fp, xp);
    snprintf(out, sizeof out, "%s%s%se%s", ip, fp[0] ? "." : "", fp, xp);
  }
  sb_puts(b, out);
}

kiln_status kiln_array_format(const kiln_array *a, char *buf, size_t cap, size_t *len) {
  static const char op[] = "kiln_array_format";
  if (len) *len = 0;
  if (!a || (!buf && cap > 0)) return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op, a ? "buf" : "the array");
  size_t nbytes = kiln_array_nbytes(a);
  unsigned char *data = malloc(nbytes ? nbytes : 1);
  if (!data) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes", op, nbytes);
  kiln_status st = kiln_array_to_host(a, data, nbytes);
  if (st) {
    free(data);
    return kcore_fail_wrap(st, "%s", op);
  }
  kdev_view v = {.dtype = kiln_array_dtype(a), .rank = kiln_array_rank(a),
                 .shape = kiln_array_shape(a), .data = data,
                 .summary = kiln_array_size(a) > KDEV_THRESHOLD};
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; d--) v.strides[d] = stride, stride *= v.shape[d];
  kdev_sb out = {0};
  if (v.rank == 0) {
    format_scalar(&v, &out);
  } else if (kiln_array_size(a) == 0) {
    sb_puts(&out, "[]");
  } else {
    kdev_fmt f;
    fmt_init(&v, &f);
    kdev_printer pr = {&v, &f, &out};
    recurse(&pr, 0, 0, " ", KDEV_LINEWIDTH, &out);
  }
  free(data);
  if (out.oom) {
    free(out.p);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  if (len) *len = out.n;
  if (cap > 0) snprintf(buf, cap, "%s", out.p ? out.p : "");
  free(out.p);
  return KILN_OK;
}

kiln_status kiln_array_print(const kiln_array *a, FILE *stream) {
  size_t n = 0;
  kiln_status st = kiln_array_format(a, NULL, 0, &n);
  char *buf = st ? NULL : malloc(n + 1);
  if (!st && !buf) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_array_print: out of host memory");
  if (!st) st = kiln_array_format(a, buf, n + 1, NULL);
  if (!st && fprintf(stream ? stream : stdout, "%s\n", buf) < 0)
    st = kcore_fail(KILN_ERR_IO, "kiln_array_print: writing failed");
  free(buf);
  return st;
}
