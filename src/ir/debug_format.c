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

#include "core/core.h"
#include "ir/ir.h"

/* ======================================================================
 * A growing string
 * ====================================================================== */

typedef struct kir_text {
  char *s;
  size_t n, cap;
  bool oom;
} kir_text;

static void kir_text_putn(kir_text *t, const char *s, size_t n) {
  if (t->oom) return;
  if (t->n + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 128;
    while (t->n + n + 1 > cap) cap *= 2;
    char *ns = realloc(t->s, cap);
    if (!ns) {
      t->oom = true;
      return;
    }
    t->s = ns;
    t->cap = cap;
  }
  memcpy(t->s + t->n, s, n);
  t->n += n;
  t->s[t->n] = '\0';
}

static void kir_text_puts(kir_text *t, const char *s) { kir_text_putn(t, s, strlen(s)); }

static void kir_text_repeat(kir_text *t, char c, int n) {
  char buf[64];
  memset(buf, c, sizeof buf);
  for (; n > 0; n -= (int)sizeof buf)
    kir_text_putn(t, buf, n < (int)sizeof buf ? (size_t)n : sizeof buf);
}

/* Python's str.rstrip() on the line being built. */
static void kir_text_rstrip(kir_text *t) {
  while (t->n > 0 && t->s[t->n - 1] == ' ') t->n--;
  if (t->s) t->s[t->n] = '\0';
}

/* ======================================================================
 * Decimal digits of floats
 * ====================================================================== */

/* A positive decimal d[0].d[1]...d[n-1] x 10^e, d[0] != '0', no trailing
 * zeros; n == 0 is the value 0. */
#define KIR_EXACT_DIGITS 832
typedef struct kir_dec {
  char d[KIR_EXACT_DIGITS];
  int n, e;
} kir_dec;

/* Parses printf's "%.*e" text of a positive value into a kir_dec. */
static void kir_dec_parse(const char *s, kir_dec *x) {
  x->n = 0;
  for (; *s && *s != 'e'; s++)
    if (*s != '.') x->d[x->n++] = *s;
  x->e = *s == 'e' ? atoi(s + 1) : 0;
  while (x->n > 0 && x->d[x->n - 1] == '0') x->n--;
}

/* The exact decimal expansion of a positive finite double. glibc prints
 * exact digits at any precision; this one covers every significant digit
 * of v = M * 2^q (M < 2^53): at most 17 + 0.7|q| of them. */
static void kir_dec_exact(double v, kir_dec *x) {
  char buf[KIR_EXACT_DIGITS + 16];
  int e2;
  (void)frexp(v, &e2);
  int q = e2 - 53;
  int prec = 24 + (q < 0 ? -q : q) * 7 / 10;
  if (prec > KIR_EXACT_DIGITS - 8) prec = KIR_EXACT_DIGITS - 8; /* subnormals: fewer digits */
  snprintf(buf, sizeof buf, "%.*e", prec, v);
  kir_dec_parse(buf, x);
}

/* Compares two positive decimals. */
static int kir_dec_cmp(const kir_dec *a, const kir_dec *b) {
  if (a->n == 0 || b->n == 0) return (a->n != 0) - (b->n != 0);
  if (a->e != b->e) return a->e < b->e ? -1 : 1;
  int n = a->n > b->n ? a->n : b->n;
  for (int i = 0; i < n; i++) {
    char ca = i < a->n ? a->d[i] : '0', cb = i < b->n ? b->d[i] : '0';
    if (ca != cb) return ca < cb ? -1 : 1;
  }
  return 0;
}

static void kir_dec_trim(kir_dec *x) {
  while (x->n > 0 && x->d[x->n - 1] == '0') x->n--;
}

/* x's first p digits (truncation), or that plus one unit in the last place. */
static void kir_dec_prefix(const kir_dec *x, int p, bool up, kir_dec *out) {
  memcpy(out->d, x->d, (size_t)p);
  out->n = p;
  out->e = x->e;
  if (up) {
    int i = p - 1;
    while (i >= 0 && out->d[i] == '9') out->d[i--] = '0';
    if (i >= 0) {
      out->d[i]++;
    } else { /* 99..9 + 1 = 100..0 */
      out->d[0] = '1';
      out->n = 1;
      out->e++;
    }
  }
  kir_dec_trim(out);
}

/* Rounds x to p significant digits (p may be <= 0: the unit is then above
 * x's first digit), to nearest with ties to the even digit. */
static void kir_dec_round(const kir_dec *x, int p, kir_dec *out) {
  if (p >= x->n) {
    *out = *x;
    return;
  }
  bool up;
  if (p < 0) {
    up = false;
  } else {
    char next = x->d[p];
    bool rest = x->n > p + 1; /* digits past `next` are nonzero (no trailing zeros) */
    bool odd = p > 0 && ((x->d[p - 1] - '0') & 1);
    up = next > '5' || (next == '5' && (rest || odd));
  }
  if (p <= 0) { /* 0 or one unit of 10^(e + 1 - p) */
    out->n = up ? 1 : 0;
    out->d[0] = '1';
    out->e = x->e + 1 - p;
    return;
  }
  kir_dec_prefix(x, p, up, out);
}

/* A float to print: its magnitude and the interval of reals that round to
 * it in its own type. */
typedef struct kir_fval {
  kiln_dtype dtype; /* KILN_F16, KILN_F32 or KILN_F64 (the digits' type) */
  double v;         /* > 0, finite */
  kir_dec exact;    /* v's digits */
  bool even;        /* even mantissa: the interval's ends round to v */
  kir_dec lo, hi;   /* the interval's ends (f16 and f32; exact doubles) */
} kir_fval;

static void kir_fval_init(kir_fval *f, kiln_dtype dtype, double v) {
  f->dtype = dtype;
  f->v = v;
  kir_dec_exact(v, &f->exact);
  double below, above;
  if (dtype == KILN_F16) {
    uint16_t h = kcore_f32_to_f16((float)v);
    f->even = (h & 1) == 0;
    below = kcore_f16_to_f32((uint16_t)(h - 1));
    above = h == 0x7bff ? INFINITY : kcore_f16_to_f32((uint16_t)(h + 1));
  } else if (dtype == KILN_F32) {
    float x = (float)v;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    f->even = (bits & 1) == 0;
    below = nextafterf(x, 0.0f);
    above = nextafterf(x, INFINITY);
  } else {
    return; /* f64: strtod decides */
  }
  /* The midpoints need one bit more than the type: exact in double. Past
   * the largest finite value, the upper end is half an ulp above. */
  double lo = (v + below) / 2, hi = isinf(above) ? v + (v - below) / 2 : (v + above) / 2;
  kir_dec_exact(lo, &f->lo);
  kir_dec_exact(hi, &f->hi);
}

/* Whether decimal c rounds to f's value in f's type. */
static bool kir_fval_owns(const kir_fval *f, const kir_dec *c) {
  if (f->dtype == KILN_F64) {
    char buf[64];
    int k = 0;
    buf[k++] = c->d[0];
    buf[k++] = '.';
    for (int i = 1; i < c->n; i++) buf[k++] = c->d[i];
    snprintf(buf + k, sizeof buf - (size_t)k, "e%d", c->e);
    return strtod(buf, NULL) == f->v;
  }
  int a = kir_dec_cmp(c, &f->lo), b = kir_dec_cmp(c, &f->hi);
  return (a > 0 && b < 0) || (f->even && (a == 0 || b == 0));
}

/* The shortest decimal that rounds to f's value; of two, the nearer (the
 * even last digit at equal distance). */
static void kir_shortest(const kir_fval *f, kir_dec *out) {
  const kir_dec *x = &f->exact;
  for (int p = 1; p < x->n; p++) {
    kir_dec down, up;
    kir_dec_prefix(x, p, false, &down);
    kir_dec_prefix(x, p, true, &up);
    bool in_down = kir_fval_owns(f, &down), in_up = kir_fval_owns(f, &up);
    if (in_down && in_up) {
      kir_dec_round(x, p, out);
      return;
    }
    if (in_down || in_up) {
      *out = in_down ? down : up;
      return;
    }
  }
  *out = *x;
}

/* numpy's unique digits with a cutoff: the shortest digits, unless they
 * have more than `frac` digits after the decimal point (positional) or
 * after the first digit (scientific); then the value rounded there. */
static void kir_digits_cut(const kir_fval *f, bool scientific, int frac, kir_dec *out) {
  kir_shortest(f, out);
  int keep = scientific ? frac + 1 : out->e + 1 + frac;
  if (out->n > keep) kir_dec_round(&f->exact, scientific ? keep : f->exact.e + 1 + frac, out);
}

/* Integer and fraction digits of a positional decimal (`ip` "0" below 1). */
static void kir_dec_split(const kir_dec *x, char *ip, char *fp) {
  int k = 0;
  if (x->n == 0 || x->e < 0) {
    ip[k++] = '0';
  } else {
    for (int i = 0; i <= x->e; i++) ip[k++] = i < x->n ? x->d[i] : '0';
  }
  ip[k] = '\0';
  k = 0;
  if (x->n > 0 && x->e < 0)
    for (int i = 0; i < -x->e - 1; i++) fp[k++] = '0';
  for (int i = x->e < 0 ? 0 : x->e + 1; i < x->n; i++) fp[k++] = x->d[i];
  fp[k] = '\0';
}

/* "e+05" / "e-100": at least `digits` exponent digits. */
static void kir_put_exponent(kir_text *t, int e, int digits) {
  char buf[16];
  snprintf(buf, sizeof buf, "e%c%0*d", e < 0 ? '-' : '+', digits, e < 0 ? -e : e);
  kir_text_puts(t, buf);
}

static bool kir_put_nonfinite(kir_text *t, double v) {
  if (isnan(v))
    kir_text_puts(t, "nan");
  else if (isinf(v))
    kir_text_puts(t, v < 0 ? "-inf" : "inf");
  else
    return false;
  return true;
}

/* Shortest digits as Python and numpy scalars show them: positional with
 * at least one fraction digit ("3.0"), or scientific with a fraction only
 * when there is one ("1e+16", "1.5e-05"). */
static void kir_put_shortest(kir_text *t, const kir_dec *d, bool scientific) {
  if (scientific) {
    kir_text_putn(t, d->d, 1);
    if (d->n > 1) {
      kir_text_puts(t, ".");
      kir_text_putn(t, d->d + 1, (size_t)d->n - 1);
    }
    kir_put_exponent(t, d->e, 2);
    return;
  }
  char ip[KIR_EXACT_DIGITS + 2], fp[KIR_EXACT_DIGITS + 2];
  kir_dec_split(d, ip, fp);
  kir_text_puts(t, ip);
  kir_text_puts(t, ".");
  kir_text_puts(t, fp[0] ? fp : "0");
}

/* repr(float(v)) when `dtype` is f64: shortest round-trip digits of the
 * double, scientific below 1e-4 and from 1e16 on. str() of a numpy f16,
 * f32 or f64 scalar otherwise: shortest digits in its own type, scientific
 * below 1e-4 and from 1e3 (f16), 1e6 (f32) or 1e16 (f64) on. */
static void kir_put_float_scalar(kir_text *t, kiln_dtype dtype, double v) {
  if (kir_put_nonfinite(t, v)) return;
  if (signbit(v)) kir_text_puts(t, "-");
  double a = fabs(v);
  if (a == 0) {
    kir_text_puts(t, "0.0");
    return;
  }
  kir_fval f;
  kir_dec d;
  kir_fval_init(&f, dtype, a);
  kir_shortest(&f, &d);
  double top = dtype == KILN_F16 ? 1e3 : dtype == KILN_F32 ? 1e6 : 1e16;
  kir_put_shortest(t, &d, !(a >= 1e-4 && a < top));
}

/* ml_dtypes' str of a bfloat16: C++ `ostream << float`, i.e. "%g". */
static void kir_put_bf16(kir_text *t, double v) {
  if (kir_put_nonfinite(t, v)) return;
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  kir_text_puts(t, buf);
}

static bool kir_is_unsigned(kiln_dtype d) {
  return d == KILN_U8 || d == KILN_U16 || d == KILN_U32 || d == KILN_U64;
}

static void kir_put_int(kir_text *t, kiln_dtype dtype, kir_scalar s) {
  char buf[32];
  if (dtype == KILN_BOOL)
    snprintf(buf, sizeof buf, "%s", s.i ? "True" : "False");
  else if (kir_is_unsigned(dtype))
    snprintf(buf, sizeof buf, "%" PRIu64, s.u);
  else
    snprintf(buf, sizeof buf, "%" PRId64, s.i);
  kir_text_puts(t, buf);
}

/* A rank-0 value: format(x, '') (`as_str` false) or str(x). */
static void kir_put_scalar(kir_text *t, const kir_buffer *b, bool as_str) {
  kiln_dtype dt = b->aval.dtype;
  kir_scalar s = kir_scalar_load(dt, b->data);
  if (!kiln_dtype_is_float(dt))
    kir_put_int(t, dt, s);
  else if (!as_str)
    kir_put_float_scalar(t, KILN_F64, s.f); /* Python's float */
  else if (dt == KILN_BF16)
    kir_put_bf16(t, s.f);
  else
    kir_put_float_scalar(t, dt, s.f);
}

/* ======================================================================
 * Arrays: numpy's array2string with the default options
 * ====================================================================== */

enum { KIR_NP_LINEWIDTH = 75, KIR_NP_THRESHOLD = 1000, KIR_NP_EDGEITEMS = 3, KIR_NP_PRECISION = 8 };

typedef enum kir_word_kind {
  KIR_WORD_BOOL,
  KIR_WORD_INT,
  KIR_WORD_FLOAT,
  KIR_WORD_BF16
} kir_word_kind;

/* One element format for a whole array (numpy's FloatingFormat etc.). */
typedef struct kir_afmt {
  kiln_dtype dtype;
  kir_word_kind kind;
  int width;     /* ints: right-aligned width */
  bool exp;      /* floats: scientific */
  int pad_left;  /* floats: width of the part before '.' */
  int pad_right; /* floats: width after it (scientific: of ".ddde+XX" less 1) */
  int precision; /* scientific: fraction digits, zero-padded */
  int exp_size;  /* scientific: exponent digits */
} kir_afmt;

/* The array being printed and which of its elements show. */
typedef struct kir_arr {
  const kir_buffer *b;
  int rank;
  int64_t stride[KIR_MAX_RANK]; /* elements */
  bool summary;                 /* more than threshold elements: corners only */
} kir_arr;

static bool kir_axis_cut(const kir_arr *a, int axis) {
  return a->summary && a->b->aval.shape[axis] > 2 * KIR_NP_EDGEITEMS;
}

/* The k-th shown index along axis (k < kir_axis_shown). */
static int64_t kir_axis_index(const kir_arr *a, int axis, int64_t k) {
  int64_t n = a->b->aval.shape[axis];
  if (!kir_axis_cut(a, axis) || k < KIR_NP_EDGEITEMS) return k;
  return n - 2 * KIR_NP_EDGEITEMS + k;
}

static int64_t kir_axis_shown(const kir_arr *a, int axis) {
  return kir_axis_cut(a, axis) ? 2 * KIR_NP_EDGEITEMS : a->b->aval.shape[axis];
}

static kir_scalar kir_arr_load(const kir_arr *a, int64_t offset) {
  size_t es = kiln_dtype_size(a->b->aval.dtype);
  return kir_scalar_load(a->b->aval.dtype, (const char *)a->b->data + (size_t)offset * es);
}

/* Calls fn on every shown element, in order. */
static void kir_arr_each(const kir_arr *a, void (*fn)(kir_scalar v, void *user), void *user) {
  int64_t k[KIR_MAX_RANK] = {0};
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < a->rank; d++) off += kir_axis_index(a, d, k[d]) * a->stride[d];
    fn(kir_arr_load(a, off), user);
    int d = a->rank - 1;
    while (d >= 0 && ++k[d] == kir_axis_shown(a, d)) k[d--] = 0;
    if (d < 0) return;
  }
}

/* ---- the statistics a format is chosen from ---- */

typedef struct kir_stats {
  kiln_dtype dtype;
  /* ints */
  bool any;
  kir_scalar min, max;
  /* floats: finite nonzero magnitudes, non-finite values */
  int n_finite, n_nonzero;
  double amin, amax;
  bool nonfinite, neg_inf;
} kir_stats;

static void kir_stats_add(kir_scalar v, void *user) {
  kir_stats *s = user;
  if (!kiln_dtype_is_float(s->dtype)) {
    bool u = kir_is_unsigned(s->dtype);
    if (!s->any || (u ? v.u < s->min.u : v.i < s->min.i)) s->min = v;
    if (!s->any || (u ? v.u > s->max.u : v.i > s->max.i)) s->max = v;
    s->any = true;
    return;
  }
  if (!isfinite(v.f)) {
    s->nonfinite = true;
    s->neg_inf |= isinf(v.f) && v.f < 0;
    return;
  }
  s->n_finite++;
  if (v.f == 0) return;
  double m = fabs(v.f);
  if (s->n_nonzero == 0 || m < s->amin) s->amin = m;
  if (s->n_nonzero == 0 || m > s->amax) s->amax = m;
  s->n_nonzero++;
}

/* A double rounded to the array's float type, as numpy computes the
 * exp-format test in that type (Python floats are weak). */
static double kir_in_dtype(kiln_dtype dt, double v) {
  return dt == KILN_F64 ? v : kir_round_to_dtype(dt, v);
}

/* FloatingFormat.fillFormat's choice: scientific when the largest
 * magnitude reaches 10^min(8, precision of the type), the smallest is
 * below 1e-4 or they span more than 1000x; compared in the array's type. */
static bool kir_wants_exp(const kir_stats *s) {
  if (s->n_nonzero == 0) return false;
  kiln_dtype dt = s->dtype;
  double cutoff = dt == KILN_F16 ? 1e3 : dt == KILN_F32 ? 1e6 : 1e8;
  /* amax / amin rounded once to the type: numpy's f16 and f32 quotients
   * (double rounding through f32 or f64 is exact at these widths) */
  double ratio = kir_in_dtype(dt, s->amax / s->amin);
  return s->amax >= cutoff || s->amin < kir_in_dtype(dt, 1e-4) || ratio > 1000.0;
}

/* First pass over the shown values: the widths numpy pads to. */
static void kir_widths_add(kir_scalar v, void *user) {
  kir_afmt *f = user;
  if (!isfinite(v.f)) return;
  int neg = signbit(v.f) ? 1 : 0;
  kir_dec d;
  if (v.f == 0) {
    d.n = 0;
    d.e = 0;
  } else {
    kir_fval fv;
    kir_fval_init(&fv, f->dtype, fabs(v.f));
    kir_digits_cut(&fv, f->exp, KIR_NP_PRECISION, &d);
  }
  if (f->exp) {
    int frac = d.n > 0 ? d.n - 1 : 0;
    int e = d.n > 0 ? d.e : 0, ed = 2;
    for (int a = e < 0 ? -e : e; a >= 100; a /= 10) ed++;
    if (1 + neg > f->pad_left) f->pad_left = 1 + neg;
    if (frac > f->precision) f->precision = frac;
    if (ed > f->exp_size) f->exp_size = ed;
    return;
  }
  char ip[KIR_EXACT_DIGITS + 2], fp[KIR_EXACT_DIGITS + 2];
  kir_dec_split(&d, ip, fp);
  int il = (int)strlen(ip) + neg, fl = (int)strlen(fp);
  if (il > f->pad_left) f->pad_left = il;
  if (fl > f->pad_right) f->pad_right = fl;
}

static int kir_int_len(kiln_dtype dt, kir_scalar v) {
  char buf[32];
  if (kir_is_unsigned(dt)) return snprintf(buf, sizeof buf, "%" PRIu64, v.u);
  return snprintf(buf, sizeof buf, "%" PRId64, v.i);
}

static void kir_afmt_init(const kir_arr *a, kir_afmt *f) {
  memset(f, 0, sizeof *f);
  kiln_dtype dt = a->b->aval.dtype;
  f->dtype = dt;
  if (dt == KILN_BOOL) {
    f->kind = KIR_WORD_BOOL;
    return;
  }
  if (dt == KILN_BF16) {
    f->kind = KIR_WORD_BF16;
    return;
  }
  kir_stats s;
  memset(&s, 0, sizeof s);
  s.dtype = dt;
  kir_arr_each(a, kir_stats_add, &s);
  if (!kiln_dtype_is_float(dt)) {
    f->kind = KIR_WORD_INT;
    int lmax = kir_int_len(dt, s.max), lmin = kir_int_len(dt, s.min);
    f->width = lmax > lmin ? lmax : lmin;
    return;
  }
  f->kind = KIR_WORD_FLOAT;
  f->exp = kir_wants_exp(&s);
  if (s.n_finite > 0) kir_arr_each(a, kir_widths_add, f);
  if (f->exp && s.n_finite > 0) f->pad_right = f->exp_size + 2 + f->precision;
  if (s.nonfinite) { /* room for "nan" and "inf"/"-inf" */
    int offset = f->pad_right + 1;
    int inf_len = 3 + (s.neg_inf ? 1 : 0);
    if (3 - offset > f->pad_left) f->pad_left = 3 - offset;
    if (inf_len - offset > f->pad_left) f->pad_left = inf_len - offset;
  }
}

/* One element's text under the array's format. */
static void kir_put_word(kir_text *t, const kir_afmt *f, kir_scalar v) {
  char buf[48];
  switch (f->kind) {
    case KIR_WORD_BOOL:
      kir_text_puts(t, v.i ? " True" : "False");
      return;
    case KIR_WORD_INT:
      if (kir_is_unsigned(f->dtype))
        snprintf(buf, sizeof buf, "%*" PRIu64, f->width, v.u);
      else
        snprintf(buf, sizeof buf, "%*" PRId64, f->width, v.i);
      kir_text_puts(t, buf);
      return;
    case KIR_WORD_BF16:
      kir_put_bf16(t, v.f);
      return;
    case KIR_WORD_FLOAT:
      break;
  }
  if (!isfinite(v.f)) {
    const char *s = isnan(v.f) ? "nan" : v.f < 0 ? "-inf" : "inf";
    kir_text_repeat(t, ' ', f->pad_left + f->pad_right + 1 - (int)strlen(s));
    kir_text_puts(t, s);
    return;
  }
  kir_dec d;
  if (v.f == 0) {
    d.n = 0;
    d.e = 0;
  } else {
    kir_fval fv;
    kir_fval_init(&fv, f->dtype, fabs(v.f));
    kir_digits_cut(&fv, f->exp, f->exp ? f->precision : KIR_NP_PRECISION, &d);
    /* Scientific words show `precision` fraction digits: numpy's min_digits
     * makes Dragon4 go on past shorter unique digits into the exact value's,
     * rounding the last one. */
    if (f->exp && d.n < f->precision + 1) kir_dec_round(&fv.exact, f->precision + 1, &d);
  }
  const char *sign = signbit(v.f) ? "-" : "";
  if (f->exp) {
    kir_text_repeat(t, ' ', f->pad_left - 1 - (int)strlen(sign));
    kir_text_puts(t, sign);
    kir_text_putn(t, d.n ? d.d : "0", 1);
    kir_text_puts(t, ".");
    if (d.n > 1) kir_text_putn(t, d.d + 1, (size_t)d.n - 1);
    kir_text_repeat(t, '0', f->precision - (d.n > 1 ? d.n - 1 : 0));
    kir_put_exponent(t, d.n ? d.e : 0, f->exp_size);
    return;
  }
  char ip[KIR_EXACT_DIGITS + 2], fp[KIR_EXACT_DIGITS + 2];
  kir_dec_split(&d, ip, fp);
  kir_text_repeat(t, ' ', f->pad_left - (int)strlen(ip) - (int)strlen(sign));
  kir_text_puts(t, sign);
  kir_text_puts(t, ip);
  kir_text_puts(t, ".");
  kir_text_puts(t, fp);
  kir_text_repeat(t, ' ', f->pad_right - (int)strlen(fp));
}

/* ---- layout: numpy's _formatArray ---- */

typedef struct kir_layout {
  const kir_arr *a;
  const kir_afmt *f;
  kir_text *t;
  size_t line_start; /* offset in t of the current line */
} kir_layout;

static void kir_layout_newline(kir_layout *L, int indent) {
  kir_text_rstrip(L->t);
  kir_text_puts(L->t, "\n");
  L->line_start = L->t->n;
  kir_text_repeat(L->t, ' ', indent);
}

/* Appends one word to a row, wrapping first if it would pass `width`
 * (unless the line holds only its indent). `indent` is the line's hanging
 * indent; its first line starts at the same column. */
static void kir_layout_word(kir_layout *L, int indent, int width, kir_scalar v, bool dots) {
  size_t before = L->t->n;
  if (dots)
    kir_text_puts(L->t, "...");
  else
    kir_put_word(L->t, L->f, v);
  int wlen = (int)(L->t->n - before);
  /* numpy counts the first line's indent, which '[' chars replace */
  int line_len = (int)(before - L->line_start);
  if (line_len + wlen > width && line_len > indent && !L->t->oom) {
    char word[96]; /* words are short: at most 9 + 1 + 8 chars for floats */
    KCORE_ASSERT(wlen < (int)sizeof word);
    memcpy(word, L->t->s + before, (size_t)wlen);
    L->t->n = before;
    kir_layout_newline(L, indent);
    kir_text_putn(L->t, word, (size_t)wlen);
  }
}

static void kir_layout_axis(kir_layout *L, int axis, int64_t offset, int indent, int width) {
  const kir_arr *a = L->a;
  int64_t shown = kir_axis_shown(a, axis);
  bool cut = kir_axis_cut(a, axis);
  kir_text_puts(L->t, "[");
  if (axis == a->rank - 1) {
    int elem_width = width - 1; /* room for ']' */
    for (int64_t k = 0; k < shown; k++) {
      if (cut && k == KIR_NP_EDGEITEMS) {
        kir_scalar none = {0};
        kir_layout_word(L, indent, elem_width, none, true);
        kir_text_puts(L->t, " ");
      }
      int64_t i = kir_axis_index(a, axis, k);
      kir_layout_word(L, indent, elem_width, kir_arr_load(a, offset + i * a->stride[axis]), false);
      if (k + 1 < shown) kir_text_puts(L->t, " ");
    }
  } else {
    int newlines = a->rank - axis - 1;
    for (int64_t k = 0; k < shown; k++) {
      if (cut && k == KIR_NP_EDGEITEMS) {
        kir_text_puts(L->t, "...");
        kir_text_repeat(L->t, '\n', newlines);
        L->line_start = L->t->n;
        kir_text_repeat(L->t, ' ', indent);
      }
      int64_t i = kir_axis_index(a, axis, k);
      kir_layout_axis(L, axis + 1, offset + i * a->stride[axis], indent + 1, width - 1);
      if (k + 1 < shown) {
        kir_text_repeat(L->t, '\n', newlines);
        L->line_start = L->t->n;
        kir_text_repeat(L->t, ' ', indent);
      }
    }
  }
  kir_text_puts(L->t, "]");
}

/* str(np.ndarray) of rank >= 1. */
static void kir_put_array(kir_text *t, const kir_buffer *b) {
  int64_t size = kir_aval_size(&b->aval);
  if (size == 0) {
    kir_text_puts(t, "[]");
    return;
  }
  kir_arr a = {.b = b, .rank = b->aval.rank, .summary = size > KIR_NP_THRESHOLD};
  int64_t s = 1;
  for (int d = a.rank - 1; d >= 0; d--) {
    a.stride[d] = s;
    s *= b->aval.shape[d];
  }
  kir_afmt f;
  kir_afmt_init(&a, &f);
  /* numpy lays the array out from column 0, whatever precedes it. */
  kir_layout L = {&a, &f, t, t->n};
  kir_layout_axis(&L, 0, 0, 1, KIR_NP_LINEWIDTH);
}

/* One value as Python's format(x, '') (`as_str` false) or str(x) shows it. */
static void kir_put_value(kir_text *t, const kir_buffer *b, bool as_str) {
  if (b->aval.rank == 0)
    kir_put_scalar(t, b, as_str);
  else
    kir_put_array(t, b);
}

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
