/* jnp.stack, jnp.tile and numpy's basic indexing (x[i], x[a:b:s], ...,
 * None), built from expand_dims, concatenate, broadcast, slice, rev and
 * reshape, so every transformation sees lax's ops. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

kiln_val *kiln_stack(kiln_trace *t, int n, kiln_val *const *xs, int axis) {
  static const char op[] = "kiln_stack";
  if (!t) return ktr_sticky(t, op);
  if (n < 1 || !xs)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: needs at least one array (got %d%s)", op, n,
                     xs ? "" : ", xs NULL");
  if (!ktr_ok(t, op, n, xs)) return NULL;
  const kir_aval *a0 = ktr_aval(xs[0]);
  char t0[KIR_AVAL_STR_CAP], ti[KIR_AVAL_STR_CAP];
  for (int i = 1; i < n; i++) {
    const kir_aval *ai = ktr_aval(xs[i]);
    if (ai->rank != a0->rank || memcmp(ai->shape, a0->shape, (size_t)a0->rank * sizeof *a0->shape))
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: all input arrays must have the same shape; array "
                       "%d is %s, array 0 %s", op, i, kir_aval_str(ai, ti, sizeof ti),
                       kir_aval_str(a0, t0, sizeof t0));
  }
  int a;
  if (ktr_axis(op, axis, a0->rank + 1, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  kiln_val *small[16], **parts = n <= 16 ? small : malloc((size_t)n * sizeof *parts);
  if (!parts) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; i < n; i++) parts[i] = kiln_expand_dims(t, xs[i], 1, &a);
  kiln_val *out = t->status ? NULL : kiln_concatenate(t, n, parts, a);
  if (parts != small) free(parts);
  return out;
}

/* x tiled reps times along axis d (0 < d < rank) by broadcasting a new
 * axis in front of d and merging the two; at KILN_MAX_RANK, where no axis
 * can be added, by concatenating copies. */
static kiln_val *ktr_np_tile_axis(kiln_trace *t, const char *op, kiln_val *x, int d, int64_t reps) {
  const kir_aval *a = ktr_aval(x);
  int r = a->rank;
  int64_t merged[KIR_MAX_RANK];
  memcpy(merged, a->shape, (size_t)r * sizeof *merged);
  merged[d] *= reps;
  if (r < KIR_MAX_RANK) {
    int64_t wide[KIR_MAX_RANK];
    int dims[KIR_MAX_RANK];
    for (int i = 0, j = 0; i <= r; i++) {
      wide[i] = i == d ? reps : a->shape[j];
      if (i != d) dims[j++] = i;
    }
    return kiln_reshape(t, kiln_broadcast_in_dim(t, x, r + 1, wide, dims), r, merged);
  }
  if (reps > 4096)
    return ktr_failf(t, KILN_ERR_UNIMPLEMENTED, "%s: %lld copies of an axis of a rank-%d array",
                     op, (long long)reps, r);
  kiln_val **copies = malloc((size_t)reps * sizeof *copies);
  if (!copies) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int64_t i = 0; i < reps; i++) copies[i] = x;
  kiln_val *out = kiln_concatenate(t, (int)reps, copies, d);
  free(copies);
  return out;
}

kiln_val *kiln_tile(kiln_trace *t, kiln_val *x, int n, const int64_t *reps) {
  static const char op[] = "kiln_tile";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  const kir_aval *a = ktr_aval(x);
  int r = a->rank > n ? a->rank : n;
  char ty[KIR_AVAL_STR_CAP];
  if (n < 0 || (n > 0 && !reps) || r > KIR_MAX_RANK)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d reps%s for %s (at most rank %d)", op, n,
                     n > 0 && !reps ? " but reps is NULL" : "", kir_aval_str(a, ty, sizeof ty),
                     KIR_MAX_RANK);
  /* numpy: the shorter of x's shape and reps is padded with leading 1s. */
  int64_t shape[KIR_MAX_RANK], rep[KIR_MAX_RANK];
  for (int d = 0; d < r; d++) {
    int xs = d - (r - a->rank), rs = d - (r - n);
    shape[d] = xs >= 0 ? a->shape[xs] : 1;
    rep[d] = rs >= 0 ? reps[rs] : 1;
    if (rep[d] < 0)
      return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: reps[%d] = %lld is negative", op, rs,
                       (long long)rep[d]);
  }
  if (r != a->rank) x = kiln_reshape(t, x, r, shape);
  for (int d = 0; d < r && x; d++)
    if (rep[d] != 1) x = ktr_np_tile_axis(t, op, x, d, rep[d]);
  return x;
}

/* ---- basic indexing ---- */

typedef enum { KTR_IX_INT, KTR_IX_SLICE, KTR_IX_NEWAXIS, KTR_IX_ELLIPSIS } ktr_ix_kind;
typedef struct ktr_ix {
  ktr_ix_kind kind;
  int64_t v[3];  /* INT: v[0]; SLICE: start, stop, step */
  bool given[3]; /* SLICE: which of the three were written */
} ktr_ix;

/* An optional integer at *s (given says whether there was one), spaces
 * around it skipped. */
static void ktr_ix_int(const char **s, int64_t *v, bool *given) {
  while (isspace((unsigned char)**s)) (*s)++;
  char *end;
  long long x = strtoll(*s, &end, 10);
  *given = end != *s;
  if (*given) *v = x, *s = end;
  while (isspace((unsigned char)**s)) (*s)++;
}

/* One comma-separated item of an index expression. */
static bool ktr_ix_parse_item(const char *s, const char *end, ktr_ix *ix) {
  while (s < end && isspace((unsigned char)*s)) s++;
  while (end > s && isspace((unsigned char)end[-1])) end--;
  size_t len = (size_t)(end - s);
  memset(ix, 0, sizeof *ix);
  if (len == 3 && memcmp(s, "...", 3) == 0) return ix->kind = KTR_IX_ELLIPSIS, true;
  if (len == 4 && memcmp(s, "None", 4) == 0) return ix->kind = KTR_IX_NEWAXIS, true;
  char item[64];
  if (len == 0 || len >= sizeof item) return false;
  memcpy(item, s, len);
  item[len] = '\0';
  const char *p = item;
  ix->kind = memchr(item, ':', len) ? KTR_IX_SLICE : KTR_IX_INT;
  for (int k = 0; k < (ix->kind == KTR_IX_SLICE ? 3 : 1); k++) {
    ktr_ix_int(&p, &ix->v[k], &ix->given[k]);
    if (ix->kind == KTR_IX_INT) return ix->given[0] && *p == '\0';
    if (*p == ':' && k < 2) p++;
    else if (*p != '\0') return false;
    else break;
  }
  return *p == '\0';
}

/* Python's slice.indices(n): the first index and the count. Given bounds
 * count from the end when negative and are clamped to [0, n] (step > 0) or
 * [-1, n - 1] (step < 0); missing ones are the ends. */
static void ktr_ix_slice_indices(const ktr_ix *ix, int64_t n, int64_t *first, int64_t *count) {
  int64_t step = ix->given[2] ? ix->v[2] : 1;
  int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
  int64_t b[2] = {step > 0 ? 0 : n - 1, step > 0 ? n : -1};
  for (int k = 0; k < 2; k++) {
    if (!ix->given[k]) continue;
    int64_t v = ix->v[k] < 0 ? ix->v[k] + n : ix->v[k];
    b[k] = v < lo ? lo : v > hi ? hi : v;
  }
  *first = b[0];
  int64_t span = step > 0 ? b[1] - b[0] : b[0] - b[1], s = step > 0 ? step : -step;
  *count = span > 0 ? (span - 1) / s + 1 : 0;
}

kiln_val *kiln_getitem(kiln_trace *t, kiln_val *x, const char *index) {
  static const char op[] = "kiln_getitem";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  if (!index) return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: index is NULL", op);
  if (strspn(index, " \t") == strlen(index)) return x; /* x[()] */
  const kir_aval *a = ktr_aval(x);
  int r = a->rank;
  ktr_ix items[2 * KIR_MAX_RANK + 1];
  int n = 0, used = 0, ellipsis = -1;
  for (const char *s = index, *e;; s = e + 1) {
    e = strchr(s, ',');
    if (!e) e = s + strlen(s);
    bool trailing = *e == '\0' && n > 0 && strspn(s, " \t") == (size_t)(e - s);
    if (trailing) break; /* "1," is the tuple (1,) */
    if (n == (int)(sizeof items / sizeof *items) || !ktr_ix_parse_item(s, e, &items[n]))
      return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: cannot parse the index \"%s\" (items are "
                       "integers, start:stop:step slices, ... and None)", op, index);
    if (items[n].kind == KTR_IX_ELLIPSIS) {
      if (ellipsis >= 0)
        return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: an index can only have a single ellipsis "
                         "(\"%s\")", op, index);
      ellipsis = n;
    }
    used += items[n].kind == KTR_IX_INT || items[n].kind == KTR_IX_SLICE;
    n++;
    if (*e == '\0') break;
  }
  char ty[KIR_AVAL_STR_CAP];
  if (used > r)
    return ktr_failf(t, KILN_ERR_OUT_OF_RANGE, "%s: too many indices for %s: it has %d "
                     "dimension(s), but %d were indexed (\"%s\")", op,
                     kir_aval_str(a, ty, sizeof ty), r, used, index);
  /* Per input axis: the slice in the frame after reversing, and whether an
   * integer drops it; the output shape in the items' order. */
  int64_t start[KIR_MAX_RANK], limit[KIR_MAX_RANK], stride[KIR_MAX_RANK], out[3 * KIR_MAX_RANK];
  int revs[KIR_MAX_RANK], n_rev = 0, out_rank = 0, d = 0;
  for (int i = 0; i <= n; i++) {
    /* The ellipsis, or the end, takes the axes the items leave. */
    bool fill = i == n ? ellipsis < 0 : i == ellipsis;
    int fill_to = fill ? d + (r - used) : d;
    for (; d < fill_to; d++) {
      start[d] = 0, limit[d] = a->shape[d], stride[d] = 1;
      out[out_rank++] = a->shape[d];
    }
    if (i == n) break;
    const ktr_ix *ix = &items[i];
    if (ix->kind == KTR_IX_NEWAXIS) out[out_rank++] = 1;
    if (ix->kind == KTR_IX_INT) {
      int64_t k = ix->v[0] < 0 ? ix->v[0] + a->shape[d] : ix->v[0];
      if (k < 0 || k >= a->shape[d])
        return ktr_failf(t, KILN_ERR_OUT_OF_RANGE, "%s: index %lld is out of bounds for axis %d "
                         "with size %lld (\"%s\" on %s)", op, (long long)ix->v[0], d,
                         (long long)a->shape[d], index, kir_aval_str(a, ty, sizeof ty));
      start[d] = k, limit[d] = k + 1, stride[d] = 1;
      d++;
    }
    if (ix->kind == KTR_IX_SLICE) {
      if (ix->given[2] && ix->v[2] == 0)
        return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: slice step cannot be zero (\"%s\")", op, index);
      int64_t first, count, step = ix->given[2] ? ix->v[2] : 1;
      ktr_ix_slice_indices(ix, a->shape[d], &first, &count);
      if (step < 0) { /* in the reversed axis, position j is n - 1 - j */
        revs[n_rev++] = d;
        first = a->shape[d] - 1 - first, step = -step;
      }
      start[d] = count ? first : 0;
      limit[d] = count ? first + (count - 1) * step + 1 : 0;
      stride[d] = step;
      out[out_rank++] = count;
      d++;
    }
  }
  if (out_rank > KIR_MAX_RANK)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: \"%s\" gives rank %d (at most %d)", op, index,
                     out_rank, KIR_MAX_RANK);
  kiln_val *y = n_rev ? kiln_rev(t, x, n_rev, revs) : x;
  y = kiln_slice(t, y, start, limit, stride);
  return kiln_reshape(t, y, out_rank, out);
}

kiln_val *kiln_index(kiln_trace *t, kiln_val *x, int64_t i) {
  char index[32];
  snprintf(index, sizeof index, "%lld", (long long)i);
  return kiln_getitem(t, x, index);
}
