/* Reference evaluators of the window ops (XLA:CPU's order): each result
 * element visits its window in row-major order, skipping padding and the
 * holes of base dilation; f16/bf16/f32 sums are rounded after every step.
 * Ties in select_and_gather_add / select_and_scatter_add go to the first
 * element (select(current, next) keeps current when true), as XLA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* The window walk of one evaluation: per dimension a table, for each
 * (result index, window index), of the operand index read (or -1). */
typedef struct kir_wwalk {
  kir_window_geom g;
  int64_t *tab[KIR_MAX_RANK];
  int64_t xstride[KIR_MAX_RANK];
  int64_t o[KIR_MAX_RANK]; /* the current result index */
  int64_t *offs;           /* the operand offsets of the current window */
  int64_t n_out;
} kir_wwalk;

static void kir_wwalk_free(kir_wwalk *w) {
  for (int d = 0; d < w->g.rank; d++) free(w->tab[d]);
  free(w->offs);
}

static kiln_status kir_wwalk_init(kir_wwalk *w, const kir_eqn *e, const kir_aval *x) {
  memset(w, 0, sizeof *w);
  kiln_status st = kir_window_geom_make(e->prim, &e->params.window, x, &w->g);
  if (st != KILN_OK) return st;
  int64_t nwin = 1, s = 1;
  w->n_out = 1;
  for (int d = w->g.rank - 1; d >= 0; d--) {
    w->xstride[d] = s;
    s *= x->shape[d];
    nwin *= w->g.win[d];
    w->n_out *= w->g.out[d];
  }
  bool ok = (w->offs = malloc((size_t)(nwin ? nwin : 1) * sizeof *w->offs)) != NULL;
  for (int d = 0; ok && d < w->g.rank; d++) {
    int64_t n = w->g.out[d] * w->g.win[d];
    ok = (w->tab[d] = malloc((size_t)(n ? n : 1) * sizeof **w->tab)) != NULL;
    for (int64_t o = 0; ok && o < w->g.out[d]; o++)
      for (int64_t k = 0; k < w->g.win[d]; k++)
        w->tab[d][o * w->g.win[d] + k] = kir_window_source(&w->g, d, o, k);
  }
  if (ok) return KILN_OK;
  kir_wwalk_free(w);
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", kir_prim_name(e->prim));
}

/* Fills w->offs with the current window's operand offsets; their count. */
static int64_t kir_wwalk_window(kir_wwalk *w) {
  const kir_window_geom *g = &w->g;
  int64_t k[KIR_MAX_RANK] = {0}, n = 0;
  for (int d = 0; d < g->rank; d++)
    if (g->win[d] == 0) return 0;
  for (;;) {
    int64_t off = 0;
    bool valid = true;
    for (int d = 0; d < g->rank && valid; d++) {
      int64_t src = w->tab[d][w->o[d] * g->win[d] + k[d]];
      valid = src >= 0;
      off += src * w->xstride[d];
    }
    if (valid) w->offs[n++] = off;
    int d = g->rank - 1;
    for (; d >= 0 && ++k[d] == g->win[d]; d--) k[d] = 0;
    if (d < 0) return n;
  }
}

static void kir_wwalk_next(kir_wwalk *w) {
  for (int d = w->g.rank - 1; d >= 0 && ++w->o[d] == w->g.out[d]; d--) w->o[d] = 0;
}

/* Values widened to double (floats) or 64-bit integers. */
typedef enum { KIR_W_FLOAT, KIR_W_SINT, KIR_W_UINT } kir_wclass;
static kir_wclass kir_wclass_of(kiln_dtype d) {
  if (kiln_dtype_is_float(d)) return KIR_W_FLOAT;
  return kiln_dtype_is_integer(d) && !kiln_dtype_is_signed(d) ? KIR_W_UINT : KIR_W_SINT;
}

static kir_scalar kir_wload(const kir_buffer *b, int64_t i) {
  size_t es = kiln_dtype_size(b->aval.dtype);
  return kir_scalar_load(b->aval.dtype, (const char *)b->data + (size_t)i * es);
}

static void kir_wstore(kir_buffer *b, int64_t i, kir_scalar v) {
  size_t es = kiln_dtype_size(b->aval.dtype);
  kir_scalar_store(b->aval.dtype, v, (char *)b->data + (size_t)i * es);
}

/* a beats b for max (or min): NaN beats everything, as lax.max/min. */
static bool kir_wbeats(kir_wclass c, bool is_max, kir_scalar a, kir_scalar b) {
  switch (c) {
    case KIR_W_FLOAT:
      if (isnan(a.f)) return !isnan(b.f);
      return !isnan(b.f) && (is_max ? a.f > b.f : a.f < b.f);
    case KIR_W_SINT: return is_max ? a.i > b.i : a.i < b.i;
    default: return is_max ? a.u > b.u : a.u < b.u;
  }
}

/* The reduction's identity: 0, or the lowest/highest value of the dtype. */
static kir_scalar kir_widentity(kiln_dtype dt, kir_prim prim) {
  bool is_max = prim == KIR_PRIM_REDUCE_WINDOW_MAX || prim == KIR_PRIM_GE;
  if (prim == KIR_PRIM_REDUCE_WINDOW_SUM) return kir_scalar_u(0);
  switch (kir_wclass_of(dt)) {
    case KIR_W_FLOAT: return kir_scalar_f(is_max ? -INFINITY : INFINITY);
    case KIR_W_UINT: {
      int bits = (int)kiln_dtype_size(dt) * 8;
      return kir_scalar_u(is_max ? 0 : (bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1));
    }
    default: {
      if (kiln_dtype_is_bool(dt)) return kir_scalar_i(is_max ? 0 : 1);
      int bits = (int)kiln_dtype_size(dt) * 8;
      int64_t hi = bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
      return kir_scalar_i(is_max ? -hi - 1 : hi);
    }
  }
}

static kiln_status kir_eval_reduce_window(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                          void *ctx) {
  (void)ctx;
  kir_wwalk w;
  kiln_status st = kir_wwalk_init(&w, e, &in[0].aval);
  if (st != KILN_OK) return st;
  kiln_dtype dt = in[0].aval.dtype;
  kir_wclass c = kir_wclass_of(dt);
  bool is_sum = e->prim == KIR_PRIM_REDUCE_WINDOW_SUM, is_max = e->prim == KIR_PRIM_REDUCE_WINDOW_MAX;
  kir_scalar init = kir_widentity(dt, e->prim);
  for (int64_t i = 0; i < w.n_out; i++, kir_wwalk_next(&w)) {
    int64_t n = kir_wwalk_window(&w);
    kir_scalar acc = init;
    for (int64_t j = 0; j < n; j++) {
      kir_scalar v = kir_wload(&in[0], w.offs[j]);
      if (!is_sum) {
        if (kir_wbeats(c, is_max, v, acc)) acc = v;
      } else if (c == KIR_W_FLOAT) {
        acc.f = kir_round_to_dtype(dt, acc.f + v.f);
      } else {
        acc.u += v.u; /* wraps like the dtype once stored */
      }
    }
    kir_wstore(&out[0], i, acc);
  }
  kir_wwalk_free(&w);
  return KILN_OK;
}

/* select(a, b) of ge/le on widened values (false on NaN, as the compare). */
static bool kir_wselect(kir_wclass c, bool ge, kir_scalar a, kir_scalar b) {
  switch (c) {
    case KIR_W_FLOAT: return ge ? a.f >= b.f : a.f <= b.f;
    case KIR_W_SINT: return ge ? a.i >= b.i : a.i <= b.i;
    default: return ge ? a.u >= b.u : a.u <= b.u;
  }
}

/* JAX's reducer over (operand, tangent) pairs starting at (identity, 0):
 * the pair whose operand select keeps. */
static kiln_status kir_eval_select_and_gather_add(const kir_eqn *e, const kir_buffer *in,
                                                  kir_buffer *out, void *ctx) {
  (void)ctx;
  kir_wwalk w;
  kiln_status st = kir_wwalk_init(&w, e, &in[1].aval);
  if (st != KILN_OK) return st;
  kiln_dtype dt = in[1].aval.dtype;
  kir_wclass c = kir_wclass_of(dt);
  bool ge = e->params.select_gather.select_prim == KIR_PRIM_GE;
  kir_scalar init = kir_widentity(dt, ge ? KIR_PRIM_GE : KIR_PRIM_LE);
  for (int64_t i = 0; i < w.n_out; i++, kir_wwalk_next(&w)) {
    int64_t n = kir_wwalk_window(&w);
    kir_scalar acc = init, tan = kir_scalar_f(0);
    for (int64_t j = 0; j < n; j++) {
      kir_scalar v = kir_wload(&in[1], w.offs[j]);
      if (kir_wselect(c, ge, acc, v)) continue;
      acc = v;
      tan = kir_wload(&in[0], w.offs[j]);
    }
    kir_wstore(&out[0], i, tan);
  }
  kir_wwalk_free(&w);
  return KILN_OK;
}

/* XLA's SelectAndScatter: the first valid element of each window is
 * selected, and a later one replaces it where select(selected, it) fails;
 * the source element is added there. Windows all of padding add nothing. */
static kiln_status kir_eval_select_and_scatter_add(const kir_eqn *e, const kir_buffer *in,
                                                   kir_buffer *out, void *ctx) {
  (void)ctx;
  kir_wwalk w;
  kiln_status st = kir_wwalk_init(&w, e, &in[1].aval);
  if (st != KILN_OK) return st;
  kiln_dtype dt = out[0].aval.dtype;
  kir_wclass c = kir_wclass_of(in[1].aval.dtype);
  bool ge = e->params.select_scatter.select_prim == KIR_PRIM_GE;
  memset(out[0].data, 0, out[0].nbytes);
  for (int64_t i = 0; i < w.n_out; i++, kir_wwalk_next(&w)) {
    int64_t n = kir_wwalk_window(&w);
    if (n == 0) continue;
    int64_t sel = w.offs[0];
    kir_scalar best = kir_wload(&in[1], sel);
    for (int64_t j = 1; j < n; j++) {
      kir_scalar v = kir_wload(&in[1], w.offs[j]);
      if (kir_wselect(c, ge, best, v)) continue;
      best = v;
      sel = w.offs[j];
    }
    kir_scalar acc = kir_wload(out, sel), s = kir_wload(&in[0], i);
    acc.f = kir_round_to_dtype(dt, acc.f + s.f);
    kir_wstore(&out[0], sel, acc);
  }
  kir_wwalk_free(&w);
  return KILN_OK;
}

void kir_window_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_REDUCE_WINDOW_SUM] = kir_eval_reduce_window;
  t->fn[KIR_PRIM_REDUCE_WINDOW_MAX] = kir_eval_reduce_window;
  t->fn[KIR_PRIM_REDUCE_WINDOW_MIN] = kir_eval_reduce_window;
  t->fn[KIR_PRIM_SELECT_AND_GATHER_ADD] = kir_eval_select_and_gather_add;
  t->fn[KIR_PRIM_SELECT_AND_SCATTER_ADD] = kir_eval_select_and_scatter_add;
}
