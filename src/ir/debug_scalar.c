/* debug_print's text of one value (see debug_format.c): a growing string,
 * the shortest round-trip decimal digits of a float in its own type, and
 * Python's / numpy's text of a scalar. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/debug_format.h"

/* ======================================================================
 * A growing string
 * ====================================================================== */

void kir_text_putn(kir_text *t, const char *s, size_t n) {
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

void kir_text_puts(kir_text *t, const char *s) { kir_text_putn(t, s, strlen(s)); }

void kir_text_repeat(kir_text *t, char c, int n) {
  char buf[64];
  memset(buf, c, sizeof buf);
  for (; n > 0; n -= (int)sizeof buf)
    kir_text_putn(t, buf, n < (int)sizeof buf ? (size_t)n : sizeof buf);
}

/* Python's str.rstrip() on the line being built. */
void kir_text_rstrip(kir_text *t) {
  while (t->n > 0 && t->s[t->n - 1] == ' ') t->n--;
  if (t->s) t->s[t->n] = '\0';
}

/* ======================================================================
 * Decimal digits of floats
 * ====================================================================== */

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
void kir_dec_round(const kir_dec *x, int p, kir_dec *out) {
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

void kir_fval_init(kir_fval *f, kiln_dtype dtype, double v) {
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
void kir_digits_cut(const kir_fval *f, bool scientific, int frac, kir_dec *out) {
  kir_shortest(f, out);
  int keep = scientific ? frac + 1 : out->e + 1 + frac;
  if (out->n > keep) kir_dec_round(&f->exact, scientific ? keep : f->exact.e + 1 + frac, out);
}

/* Integer and fraction digits of a positional decimal (`ip` "0" below 1). */
void kir_dec_split(const kir_dec *x, char *ip, char *fp) {
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
void kir_put_exponent(kir_text *t, int e, int digits) {
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
void kir_put_bf16(kir_text *t, double v) {
  if (kir_put_nonfinite(t, v)) return;
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  kir_text_puts(t, buf);
}

bool kir_is_unsigned(kiln_dtype d) {
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
void kir_put_scalar(kir_text *t, const kir_buffer *b, bool as_str) {
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
