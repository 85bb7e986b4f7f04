/* debug_print's text of an array (see debug_format.c): numpy's array2string
 * with the default print options. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/debug_format.h"

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
void kir_put_value(kir_text *t, const kir_buffer *b, bool as_str) {
  if (b->aval.rank == 0)
    kir_put_scalar(t, b, as_str);
  else
    kir_put_array(t, b);
}
