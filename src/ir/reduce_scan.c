/* Reference evaluators of the cumulative primitives (XLA's two-level scan)
 * and sort (lax's total order, stable merge sort). */
#include <stdlib.h>
#include <string.h>

#include "ir/reduce_eval.h"

/* Inclusive scan of at most KIR_SCAN_BLOCK elements (or any number for an
 * order-free operation) from the identity. XLA's reverse scan folds x[i..n)
 * forward for every i; for order-free operations a running fold from the
 * end gives the same. */
static void kir_scan_small(const kir_monoid *m, const kir_wide *x, kir_wide *y, int64_t n,
                           bool reverse, bool ordered) {
  kir_wide acc = kir_identity(m);
  if (!reverse) {
    for (int64_t i = 0; i < n; i++) y[i] = acc = kir_combine(m, acc, x[i]);
  } else if (!ordered) {
    for (int64_t i = n - 1; i >= 0; i--) y[i] = acc = kir_combine(m, acc, x[i]);
  } else {
    for (int64_t i = 0; i < n; i++) {
      acc = kir_identity(m);
      for (int64_t j = i; j < n; j++) acc = kir_combine(m, acc, x[j]);
      y[i] = acc;
    }
  }
}

/* Inclusive scan of x[0..n) into y. Float sums and products follow XLA's
 * two-level blocked scan; scratch holds at least n / 4 + 64 values. */
static void kir_scan(const kir_monoid *m, const kir_wide *x, kir_wide *y, int64_t n, bool reverse,
                     kir_wide *scratch) {
  bool ordered = m->is_float && (m->op == KIR_OP_ADD || m->op == KIR_OP_MUL);
  if (!ordered || n <= KIR_SCAN_BLOCK) {
    kir_scan_small(m, x, y, n, reverse, ordered);
    return;
  }
  int64_t nb = (n + KIR_SCAN_BLOCK - 1) / KIR_SCAN_BLOCK;
  kir_wide *total = scratch, *running = scratch + nb;
  for (int64_t b = 0; b < nb; b++) {
    int64_t s = b * KIR_SCAN_BLOCK, c = n - s < KIR_SCAN_BLOCK ? n - s : KIR_SCAN_BLOCK;
    kir_scan_small(m, x + s, y + s, c, reverse, true);
    total[b] = y[reverse ? s : s + c - 1];
  }
  kir_scan(m, total, running, nb, reverse, scratch + 2 * nb);
  for (int64_t b = 0; b < nb; b++) {
    bool first = reverse ? b == nb - 1 : b == 0;
    kir_wide carry = first ? kir_identity(m) : running[reverse ? b + 1 : b - 1];
    int64_t s = b * KIR_SCAN_BLOCK, e = s + KIR_SCAN_BLOCK < n ? s + KIR_SCAN_BLOCK : n;
    for (int64_t i = s; i < e; i++) y[i] = kir_combine(m, y[i], carry);
  }
}

/* Scans the contiguous lines of `lines` ([count, len]) in place; work holds
 * len + len / 4 + 64 values. */
static void kir_scan_lines(const kir_monoid *m, kir_wide *lines, int64_t count, int64_t len,
                           bool reverse, kir_wide *work) {
  for (int64_t i = 0; i < count; i++) {
    kir_wide *line = lines + i * len;
    kir_scan(m, line, work, len, reverse, work + len);
    memcpy(line, work, (size_t)len * sizeof *line);
  }
}

/* cumsum/cumprod/cummax/cummin; lines along an inner axis are transposed to
 * be contiguous first. Lines of one element are XLA's special case: it drops
 * the trivial reduce-window of a sum, max or min (the element is copied, -0
 * and subnormals included) but not a product's, nor a bf16 one, which it has
 * widened to f32 by then: those compute identity op x (-0 + 0 is +0, and
 * subnormals flush). */
kiln_status kir_eval_cumulative(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  const kir_p_cumulative *p = &e->params.cumulative;
  kir_monoid m = kir_monoid_make(kir_reduce_op(e->prim), x->dtype);
  int64_t n = kir_aval_size(x);
  if (n == 0) return KILN_OK;
  kir_lines l = kir_lines_make(x, (int)p->axis);
  int64_t work_size = l.len + l.len / 4 + 64, lines_size = l.inner > 1 ? n : 0;
  kir_wide *w = NULL, *work = NULL;
  kiln_status st = kir_wide_load(e, &in[0], &w);
  if (st == KILN_OK && l.len == 1 && (m.op == KIR_OP_MUL || m.dtype == KILN_BF16))
    for (int64_t i = 0; i < n; i++) w[i] = kir_combine(&m, kir_identity(&m), w[i]);
  if (st == KILN_OK && l.len > 1) st = kir_wide_alloc(e, work_size + lines_size, &work);
  if (st == KILN_OK && l.len > 1) {
    kir_wide *lines = l.inner > 1 ? work + work_size : w;
    if (l.inner > 1) kir_transpose_wide(w, lines, l.outer, l.len, l.inner);
    kir_scan_lines(&m, lines, l.outer * l.inner, l.len, p->reverse, work);
    if (l.inner > 1) kir_transpose_wide(lines, w, l.outer, l.inner, l.len);
  }
  if (st == KILN_OK) kir_narrow(out[0].aval.dtype, w, n, out[0].data);
  free(w);
  free(work);
  return st;
}

/* The keys of one line, widened. lax's comparator orders floats totally with
 * -0 equal to +0 and every NaN equal and last (and, under DAZ, subnormals
 * equal to zero); keys compare lexicographically. */
typedef struct kir_sort_keys {
  int n;
  const kir_monoid *m;
  kir_wide *const *w; /* w[q][j]: key q of element j of the line */
} kir_sort_keys;

static int kir_key_cmp(const kir_monoid *m, kir_wide a, kir_wide b) {
  if (m->is_float) {
    double x = kir_flush(a.f, m->tiny), y = kir_flush(b.f, m->tiny);
    if (isnan(x) || isnan(y)) return (int)isnan(x) - (int)isnan(y);
    return (x > y) - (x < y);
  }
  return (int)kir_ilt(m->is_signed, b.u, a.u) - (int)kir_ilt(m->is_signed, a.u, b.u);
}

static bool kir_sort_less(const kir_sort_keys *k, int64_t i, int64_t j) {
  for (int q = 0; q < k->n; q++) {
    int c = kir_key_cmp(&k->m[q], k->w[q][i], k->w[q][j]);
    if (c) return c < 0;
  }
  return false;
}

/* Stable bottom-up merge sort of perm[0..n) (tmp has n entries); stable is
 * also a valid unstable sort. */
static void kir_merge_sort(const kir_sort_keys *k, int64_t *perm, int64_t *tmp, int64_t n) {
  int64_t *src = perm, *dst = tmp;
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) dst[o++] = kir_sort_less(k, src[b], src[a]) ? src[b++] : src[a++];
      while (a < mid) dst[o++] = src[a++];
      while (b < hi) dst[o++] = src[b++];
    }
    int64_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != perm) memcpy(perm, src, (size_t)n * sizeof *perm);
}

#define KIR_PERMUTE(T)                                      \
  do {                                                      \
    const T *s = src;                                       \
    T *d = dst;                                             \
    for (int64_t j = 0; j < n; j++) d[j] = s[perm[j]];      \
  } while (0)

/* dst[j] = src[perm[j]] for the n elements of a line. */
static void kir_permute(size_t elem_size, const void *src, void *dst, const int64_t *perm,
                        int64_t n) {
  switch (elem_size) {
    case 1: KIR_PERMUTE(uint8_t); break;
    case 2: KIR_PERMUTE(uint16_t); break;
    case 4: KIR_PERMUTE(uint32_t); break;
    default: KIR_PERMUTE(uint64_t); break;
  }
}
#undef KIR_PERMUTE

/* lax.sort: every line along `dimension` is sorted by the first num_keys
 * operands; all operands are permuted alike, element bits moved unchanged.
 * Lines along an inner axis are transposed to be contiguous first. */
kiln_status kir_eval_sort(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                          void *ctx) {
  (void)ctx;
  const kir_p_sort *p = &e->params.sort;
  int nk = (int)p->num_keys, n_ops = e->n_in;
  kir_lines l = kir_lines_make(&in[0].aval, (int)p->dimension);
  int64_t n = kir_aval_size(&in[0].aval);
  if (n == 0) return KILN_OK;
  bool moved = l.inner > 1;
  kiln_status st = KILN_OK;
  kir_wide *key_data = NULL;
  kir_wide **keys = calloc((size_t)nk, sizeof *keys);
  kir_monoid *m = calloc((size_t)nk, sizeof *m);
  int64_t *perm = malloc(2 * (size_t)l.len * sizeof *perm);
  /* per operand: its lines and its sorted lines, contiguous */
  char **src = calloc((size_t)n_ops, sizeof *src), **dst = calloc((size_t)n_ops, sizeof *dst);
  bool ok = keys && m && perm && src && dst;
  for (int q = 0; ok && q < n_ops; q++) {
    size_t es = kiln_dtype_size(in[q].aval.dtype);
    src[q] = in[q].data;
    dst[q] = out[q].data;
    if (moved) {
      ok = (src[q] = malloc(2 * (size_t)n * es)) != NULL;
      if (ok) dst[q] = src[q] + (size_t)n * es;
      if (ok) kir_transpose_raw(es, in[q].data, src[q], l.outer, l.len, l.inner);
    }
  }
  if (!ok) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "sort: out of host memory for %d operands of %lld",
                    n_ops, (long long)n);
    goto done;
  }
  if ((st = kir_wide_alloc(e, (int64_t)nk * l.len, &key_data)) != KILN_OK) goto done;
  for (int q = 0; q < nk; q++) {
    m[q] = kir_monoid_make(KIR_OP_MAX, in[q].aval.dtype);
    keys[q] = key_data + q * l.len;
  }
  kir_sort_keys k = {nk, m, keys};
  for (int64_t i = 0; i < l.outer * l.inner; i++) {
    for (int q = 0; q < nk; q++) {
      size_t es = kiln_dtype_size(in[q].aval.dtype);
      kir_widen(in[q].aval.dtype, src[q] + (size_t)(i * l.len) * es, l.len, 1, keys[q]);
    }
    for (int64_t j = 0; j < l.len; j++) perm[j] = j;
    kir_merge_sort(&k, perm, perm + l.len, l.len);
    for (int q = 0; q < n_ops; q++) {
      size_t es = kiln_dtype_size(in[q].aval.dtype), at = (size_t)(i * l.len) * es;
      kir_permute(es, src[q] + at, dst[q] + at, perm, l.len);
    }
  }
  for (int q = 0; moved && q < n_ops; q++)
    kir_transpose_raw(kiln_dtype_size(in[q].aval.dtype), dst[q], out[q].data, l.outer, l.inner,
                      l.len);
done:
  for (int q = 0; moved && src && q < n_ops; q++) free(src[q]);
  free(src);
  free(dst);
  free(key_data);
  free(keys);
  free(m);
  free(perm);
  return st;
}

