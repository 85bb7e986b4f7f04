/* Reference evaluators of the reductions and argmax/argmin (XLA:CPU's
 * order and rounding, reduce_eval.h), and the family's table. */
#include <stdlib.h>
#include <string.h>

#include "ir/reduce_eval.h"

/* Row-major strides (in elements) of a shape. */
static void kir_strides(int rank, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
}

/* Advances a row-major multi-index over cnt. */
static inline void kir_next(int rank, const int64_t *cnt, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    if (++idx[d] < cnt[d]) return;
    idx[d] = 0;
  }
}

/* kir_next that also moves *off along stride. */
static inline void kir_step(int rank, const int64_t *cnt, const int64_t *stride, int64_t *idx,
                            int64_t *off) {
  for (int d = rank - 1; d >= 0; d--) {
    *off += stride[d];
    if (++idx[d] < cnt[d]) return;
    *off -= stride[d] * cnt[d];
    idx[d] = 0;
  }
}

static int64_t kir_count(int rank, const int64_t *cnt) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= cnt[d];
  return n;
}

/* Folds the box of src at `base` (cnt elements per dimension) from the
 * identity in row-major order; a one-element box is its element unchanged. */
static kir_wide kir_fold_box(const kir_monoid *m, const kir_wide *src, int64_t base, int rank,
                             const int64_t *cnt, const int64_t *stride) {
  int64_t total = kir_count(rank, cnt);
  if (total == 1) return src[base];
  kir_wide acc = kir_identity(m);
  if (total == 0) return acc;
  /* rows along the last dimension; the odometer moves between rows */
  int last = rank - 1;
  int64_t n = cnt[last], s = stride[last], idx[KIR_MAX_RANK] = {0}, off = base;
  for (int64_t r = 0; r < total / n; r++) {
    for (int64_t j = 0; j < n; j++) acc = kir_combine(m, acc, src[off + j * s]);
    kir_step(last, cnt, stride, idx, &off);
  }
  return acc;
}

/* One reduce-window pass: result element o folds, per dimension, source
 * positions [o*win - lo, o*win - lo + win) clipped to the dimension. */
typedef struct kir_pass {
  int rank;
  int64_t shape[KIR_MAX_RANK], win[KIR_MAX_RANK], lo[KIR_MAX_RANK], out[KIR_MAX_RANK];
} kir_pass;

static void kir_pass_run(const kir_monoid *m, const kir_pass *p, const kir_wide *src,
                         kir_wide *dst) {
  int64_t stride[KIR_MAX_RANK], o[KIR_MAX_RANK] = {0};
  kir_strides(p->rank, p->shape, stride);
  int64_t n = kir_count(p->rank, p->out);
  for (int64_t i = 0; i < n; i++) {
    int64_t base = 0, cnt[KIR_MAX_RANK];
    for (int d = 0; d < p->rank; d++) {
      int64_t start = o[d] * p->win[d] - p->lo[d], end = start + p->win[d];
      if (start < 0) start = 0;
      if (end > p->shape[d]) end = p->shape[d];
      cnt[d] = end - start;
      base += start * stride[d];
    }
    dst[i] = kir_fold_box(m, src, base, p->rank, cnt, stride);
    kir_next(p->rank, p->out, o);
  }
}

/* The next pass over `shape`: reduced dimensions longer than the tree
 * window split into windows when `tree`, the others reduce whole. Returns
 * whether it split (more passes follow). */
static bool kir_pass_plan(kir_pass *p, int rank, const int64_t *shape, const kir_dims *axes,
                          bool tree) {
  bool split = false;
  p->rank = rank;
  for (int d = 0; d < rank; d++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == d;
    int64_t n = shape[d];
    p->shape[d] = n;
    p->lo[d] = 0;
    if (reduced && tree && n > KIR_TREE_WINDOW) {
      int64_t windows = (n + KIR_TREE_WINDOW - 1) / KIR_TREE_WINDOW;
      p->win[d] = KIR_TREE_WINDOW;
      p->lo[d] = (windows * KIR_TREE_WINDOW - n) / 2;
      p->out[d] = windows;
      split = true;
    } else {
      p->win[d] = reduced ? n : 1;
      p->out[d] = reduced ? 1 : n;
    }
  }
  return split;
}

/* reduce_sum/prod/max/min/and/or. */
static kiln_status kir_eval_reduce(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  kir_monoid m = kir_monoid_make(kir_reduce_op(e->prim), x->dtype);
  int64_t n_out = kir_aval_size(&out[0].aval);
  if (n_out == 0) return KILN_OK;
  if (kir_aval_size(x) == 0) {
    kir_wide id = kir_identity(&m);
    size_t es = kiln_dtype_size(x->dtype);
    for (int64_t i = 0; i < n_out; i++) kir_narrow(x->dtype, &id, 1, (char *)out[0].data + i * es);
    return KILN_OK;
  }
  kir_wide *cur = NULL, *next;
  kiln_status st = kir_wide_load(e, &in[0], &cur);
  bool tree = m.is_float && (m.op == KIR_OP_ADD || m.op == KIR_OP_MUL);
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  for (bool more = st == KILN_OK; more;) {
    kir_pass p;
    more = kir_pass_plan(&p, x->rank, shape, &e->params.axes.axes, tree);
    if ((st = kir_wide_alloc(e, kir_count(p.rank, p.out), &next)) != KILN_OK) break;
    kir_pass_run(&m, &p, cur, next);
    free(cur);
    cur = next;
    memcpy(shape, p.out, sizeof shape);
  }
  if (st == KILN_OK) kir_narrow(out[0].aval.dtype, cur, n_out, out[0].data);
  free(cur);
  return st;
}

/* Whether a beats the current best b in argmax (or argmin): lax's reducer
 * keeps the first NaN, and otherwise the first extreme value. */
static bool kir_arg_beats(const kir_monoid *m, bool is_max, kir_wide a, kir_wide b) {
  if (m->is_float) {
    double x = kir_flush(a.f, m->tiny), y = kir_flush(b.f, m->tiny);
    if (isnan(y)) return false;
    return isnan(x) || (is_max ? x > y : x < y);
  }
  return is_max ? kir_ilt(m->is_signed, b.u, a.u) : kir_ilt(m->is_signed, a.u, b.u);
}

/* argmax/argmin: the index wraps to index_dtype as lax's iota does. */
static kiln_status kir_eval_argminmax(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                      void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  kir_monoid m = kir_monoid_make(KIR_OP_MAX, x->dtype);
  bool is_max = e->prim == KIR_PRIM_ARGMAX;
  int64_t n_out = kir_aval_size(&out[0].aval);
  if (n_out == 0) return KILN_OK;
  kir_wide *w = NULL, *idx = NULL;
  kiln_status st = kir_wide_load(e, &in[0], &w);
  if (st == KILN_OK) st = kir_wide_alloc(e, n_out, &idx);
  if (st != KILN_OK) goto done;
  kir_lines l = kir_lines_make(x, e->params.argminmax.axes.v[0]);
  for (int64_t i = 0; i < n_out; i++) {
    const kir_wide *line = w + kir_line_base(&l, i);
    int64_t best = 0;
    for (int64_t k = 1; k < l.len; k++)
      if (kir_arg_beats(&m, is_max, line[k * l.inner], line[best * l.inner])) best = k;
    idx[i].u = (uint64_t)best;
  }
  kir_narrow(out[0].aval.dtype, idx, n_out, out[0].data);
done:
  free(w);
  free(idx);
  return st;
}

void kir_reduce_evals(kir_eval_table *t) {
  static const kir_prim reductions[] = {KIR_PRIM_REDUCE_SUM, KIR_PRIM_REDUCE_MAX,
                                        KIR_PRIM_REDUCE_MIN, KIR_PRIM_REDUCE_PROD,
                                        KIR_PRIM_REDUCE_AND, KIR_PRIM_REDUCE_OR};
  static const kir_prim cumulative[] = {KIR_PRIM_CUMSUM, KIR_PRIM_CUMPROD, KIR_PRIM_CUMMAX,
                                        KIR_PRIM_CUMMIN};
  for (size_t i = 0; i < sizeof reductions / sizeof *reductions; i++)
    t->fn[reductions[i]] = kir_eval_reduce;
  for (size_t i = 0; i < sizeof cumulative / sizeof *cumulative; i++)
    t->fn[cumulative[i]] = kir_eval_cumulative;
  t->fn[KIR_PRIM_ARGMAX] = kir_eval_argminmax;
  t->fn[KIR_PRIM_ARGMIN] = kir_eval_argminmax;
  t->fn[KIR_PRIM_SORT] = kir_eval_sort;
}
