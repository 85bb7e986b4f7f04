/* The reference evaluators of the structural primitives (their rules are in
 * shape_ops.c). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define TSTR(a, buf) kir_aval_str((a), (buf), sizeof(buf))

/* ---- reference evaluators ----
 *
 * Every structural primitive is data movement over strided views, so they
 * share one tool: a box of indices walked in C order over two arrays at once
 * (array 0 written, array 1 read), each with its own element strides and
 * base offset. A zero stride broadcasts, a negative one reverses, a scaled
 * one steps (slice strides, interior padding). Gather and scatter-add walk
 * the index batch with the same walker and move one window box per index
 * vector. The rules have validated shapes and params. */

/* A box walked over two strided arrays; strides and bases in elements. */
typedef struct kir_box {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  int64_t stride[2][KIR_MAX_RANK];
  int64_t base[2];
} kir_box;

/* Odometer over the first n dims of a box, carrying both arrays' offsets. */
typedef struct kir_walk {
  const kir_box *box;
  int n;
  int64_t idx[KIR_MAX_RANK];
  int64_t off[2];
} kir_walk;

static void kir_c_strides(int rank, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d];
  }
}

/* All strides and bases zero; a NULL shape leaves the sizes zero too. */
static void kir_box_init(kir_box *b, int rank, const int64_t *shape) {
  memset(b, 0, sizeof *b);
  b->rank = rank;
  if (shape && rank) memcpy(b->shape, shape, (size_t)rank * sizeof *shape);
}

static bool kir_box_empty(const kir_box *b) {
  for (int d = 0; d < b->rank; d++)
    if (b->shape[d] == 0) return true;
  return false;
}

/* Starts at the box's first index; false if the whole box is empty (so the
 * row form never runs a row of zero length either). */
static bool kir_walk_start(kir_walk *w, const kir_box *b, int n) {
  w->box = b;
  w->n = n;
  memset(w->idx, 0, sizeof w->idx);
  w->off[0] = b->base[0];
  w->off[1] = b->base[1];
  return !kir_box_empty(b);
}

static bool kir_walk_next(kir_walk *w) {
  const kir_box *b = w->box;
  for (int d = w->n - 1; d >= 0; d--) {
    w->off[0] += b->stride[0][d];
    w->off[1] += b->stride[1][d];
    if (++w->idx[d] < b->shape[d]) return true;
    w->off[0] -= b->stride[0][d] * b->shape[d];
    w->off[1] -= b->stride[1][d] * b->shape[d];
    w->idx[d] = 0;
  }
  return false;
}

/* Row form: the walk covers all dims but the last, which callers loop over
 * themselves (a rank-0 box is one row of one element). */
static bool kir_rows_start(kir_walk *w, const kir_box *b) {
  return kir_walk_start(w, b, b->rank ? b->rank - 1 : 0);
}
static int64_t kir_row_len(const kir_box *b) { return b->rank ? b->shape[b->rank - 1] : 1; }
static int64_t kir_row_stride(const kir_box *b, int a) {
  return b->rank ? b->stride[a][b->rank - 1] : 0;
}

/* n elements of size es, strided; constant sizes let memcpy become moves. */
static void kir_copy_row(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n,
                         size_t es) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
#define KIR_COPY_ROW(ES)                                                        \
  for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * ES, src + i * ss * ES, ES); \
  break
  switch (es) {
    case 1: KIR_COPY_ROW(1);
    case 2: KIR_COPY_ROW(2);
    case 4: KIR_COPY_ROW(4);
    case 8: KIR_COPY_ROW(8);
    default: KCORE_ASSERT(!"kir_copy_row: element size");
  }
#undef KIR_COPY_ROW
}

/* dst (array 0) <- src (array 1) over the box. */
static void kir_box_copy(const kir_box *b, size_t es, void *dst, const void *src) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0), ss = kir_row_stride(b, 1);
  do {
    kir_copy_row((char *)dst + w.off[0] * (int64_t)es, ds,
                 (const char *)src + w.off[1] * (int64_t)es, ss, n, es);
  } while (kir_walk_next(&w));
}

/* Every element of array 0 over the box <- *elem. */
static void kir_box_fill(const kir_box *b, size_t es, void *dst, const void *elem) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0);
  do {
    kir_copy_row((char *)dst + w.off[0] * (int64_t)es, ds, elem, 0, n, es);
  } while (kir_walk_next(&w));
}

/* dst (array 0) <- dst combined with src (array 1) over the box, by the
 * update computation of the scatter primitive (scatter.c). */
static void kir_box_scatter(const kir_box *b, kir_prim prim, kiln_dtype dt, void *dst,
                            const void *src) {
  kir_walk w;
  if (!kir_rows_start(&w, b)) return;
  int64_t n = kir_row_len(b), ds = kir_row_stride(b, 0), ss = kir_row_stride(b, 1);
  int64_t es = (int64_t)kiln_dtype_size(dt);
  do {
    kir_scatter_row(prim, dt, (char *)dst + w.off[0] * es, ds, (const char *)src + w.off[1] * es,
                    ss, n);
  } while (kir_walk_next(&w));
}

static size_t kir_esize(const kir_buffer *b) { return kiln_dtype_size(b->aval.dtype); }

/* A box over dst's whole shape, array 0 dense (C order) in it. */
static void kir_box_over(kir_box *b, const kir_aval *dst) {
  kir_box_init(b, dst->rank, dst->shape);
  kir_c_strides(dst->rank, dst->shape, b->stride[0]);
}

/* Reads an integer index of any dtype: true if it lies in [0, hi]; *v gets
 * it clamped into that range either way (XLA clamps dynamic-slice starts
 * and gather/scatter indices exactly, whatever their dtype). hi >= 0. */
static bool kir_index_fit(const kir_buffer *b, int64_t i, int64_t hi, int64_t *v) {
  kiln_dtype dt = b->aval.dtype;
  kir_scalar s = kir_scalar_load(dt, (const char *)b->data + i * (int64_t)kir_esize(b));
  bool neg = !kiln_dtype_is_unsigned(dt) && s.i < 0;
  bool big = !neg && s.u > (uint64_t)hi; /* a non-negative signed index has s.u == s.i */
  *v = neg ? 0 : big ? hi : (int64_t)s.u;
  return !neg && !big;
}

/* reshape, squeeze and expand_dims keep the C-order element sequence. */
static kiln_status kir_eval_same_order(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                       void *ctx) {
  (void)e;
  (void)ctx;
  if (out[0].nbytes) memcpy(out[0].data, in[0].data, out[0].nbytes); /* empty data may be NULL */
  return KILN_OK;
}

static kiln_status kir_eval_broadcast_in_dim(const kir_eqn *e, const kir_buffer *in,
                                             kir_buffer *out, void *ctx) {
  (void)ctx;
  const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
  const kir_aval *x = &in[0].aval;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  /* Size-1 operand dims stay at stride 0: they broadcast. */
  for (int i = 0; i < x->rank; i++)
    if (x->shape[i] != 1) b.stride[1][bd->v[i]] = xs[i];
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_transpose(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                      void *ctx) {
  (void)ctx;
  const kir_dims *perm = &e->params.transpose.permutation;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(in[0].aval.rank, in[0].aval.shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  for (int d = 0; d < b.rank; d++) b.stride[1][d] = xs[perm->v[d]];
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_rev(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  const kir_dims *dims = &e->params.dims.dimensions;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  kir_c_strides(b.rank, b.shape, b.stride[1]);
  /* A reversed dim reads from its far end backwards. */
  for (int i = 0; i < dims->n; i++) {
    int d = dims->v[i];
    if (b.shape[d] > 0) b.base[1] += (b.shape[d] - 1) * b.stride[1][d];
    b.stride[1][d] = -b.stride[1][d];
  }
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_slice(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                  void *ctx) {
  (void)ctx;
  const kir_p_slice *p = &e->params.slice;
  int64_t xs[KIR_MAX_RANK];
  kir_c_strides(in[0].aval.rank, in[0].aval.shape, xs);
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  for (int d = 0; d < b.rank; d++) {
    b.base[1] += p->start_indices.v[d] * xs[d];
    b.stride[1][d] = p->strides.v[d] * xs[d];
  }
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

/* Element offset in x of the window of `size` at the clamped start indices
 * in idx[0..rank): XLA moves each start into [0, dim - size]. */
static int64_t kir_clamped_offset(const kir_aval *x, const int64_t *size, const kir_buffer *idx) {
  int64_t xs[KIR_MAX_RANK], off = 0;
  kir_c_strides(x->rank, x->shape, xs);
  for (int d = 0; d < x->rank; d++) {
    int64_t v;
    kir_index_fit(&idx[d], 0, x->shape[d] - size[d], &v);
    off += v * xs[d];
  }
  return off;
}

static kiln_status kir_eval_dynamic_slice(const kir_eqn *e, const kir_buffer *in,
                                          kir_buffer *out, void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  kir_c_strides(x->rank, x->shape, b.stride[1]);
  b.base[1] = kir_clamped_offset(x, e->params.dynamic_slice.slice_sizes.v, &in[1]);
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_dynamic_update_slice(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)e;
  (void)ctx;
  const kir_aval *x = &in[0].aval, *u = &in[1].aval;
  memcpy(out[0].data, in[0].data, out[0].nbytes);
  kir_box b;
  kir_box_init(&b, u->rank, u->shape);
  kir_c_strides(x->rank, x->shape, b.stride[0]);
  kir_c_strides(u->rank, u->shape, b.stride[1]);
  b.base[0] = kir_clamped_offset(x, u->shape, &in[2]);
  kir_box_copy(&b, kir_esize(&in[0]), out[0].data, in[1].data);
  return KILN_OK;
}

static kiln_status kir_eval_concatenate(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                        void *ctx) {
  (void)ctx;
  int dim = (int)e->params.concatenate.dimension;
  const kir_aval *o = &out[0].aval;
  int64_t os[KIR_MAX_RANK], at = 0;
  kir_c_strides(o->rank, o->shape, os);
  /* Each operand is a box of the result, placed along dim. */
  for (int i = 0; i < e->n_in; i++) {
    const kir_aval *x = &in[i].aval;
    kir_box b;
    kir_box_init(&b, x->rank, x->shape);
    memcpy(b.stride[0], os, (size_t)o->rank * sizeof *os);
    kir_c_strides(x->rank, x->shape, b.stride[1]);
    b.base[0] = at * os[dim];
    kir_box_copy(&b, kir_esize(&in[i]), out[0].data, in[i].data);
    at += x->shape[dim];
  }
  return KILN_OK;
}

/* pad: the result is filled with the padding value, then the operand
 * elements that land inside it (negative lo/hi crop) are placed every
 * interior+1 positions from lo. */
static kiln_status kir_eval_pad(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  const kir_padding *c = &e->params.pad.padding_config;
  const kir_aval *x = &in[0].aval, *o = &out[0].aval;
  size_t es = kir_esize(&in[0]);
  kir_box all;
  kir_box_over(&all, o);
  kir_box_fill(&all, es, out[0].data, in[1].data);
  int64_t xs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_c_strides(o->rank, o->shape, os);
  kir_box b;
  kir_box_init(&b, x->rank, x->shape);
  for (int d = 0; d < x->rank; d++) {
    int64_t step = c->interior[d] + 1, lo = c->lo[d];
    /* Operand indices k in [first, last] land at lo + k*step in [0, o->shape[d]). */
    int64_t first = lo >= 0 ? 0 : (-lo + step - 1) / step;
    int64_t room = o->shape[d] - 1 - lo;
    int64_t last = room < 0 ? -1 : room / step;
    if (last > x->shape[d] - 1) last = x->shape[d] - 1;
    b.shape[d] = last >= first ? last - first + 1 : 0;
    b.base[0] += (lo + first * step) * os[d];
    b.base[1] += first * xs[d];
    b.stride[0][d] = step * os[d];
    b.stride[1][d] = xs[d];
  }
  kir_box_copy(&b, es, out[0].data, in[0].data);
  return KILN_OK;
}

static kiln_status kir_eval_iota(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                 void *ctx) {
  (void)in;
  (void)ctx;
  const kir_p_iota *p = &e->params.iota;
  kir_box b;
  kir_box_over(&b, &out[0].aval);
  size_t es = kir_esize(&out[0]);
  kir_walk w;
  if (!kir_walk_start(&w, &b, b.rank)) return KILN_OK;
  /* The value is the position along `dimension`, converted as XLA's iota
   * does (integers wrap, floats round to nearest even). */
  do {
    int64_t v = w.idx[p->dimension];
    kir_scalar s = kiln_dtype_is_float(p->dtype)      ? kir_scalar_f((double)v)
                   : kiln_dtype_is_unsigned(p->dtype) ? kir_scalar_u((uint64_t)v)
                                                      : kir_scalar_i(v);
    kir_scalar_store(p->dtype, s, (char *)out[0].data + w.off[0] * (int64_t)es);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

/* ---- gather and scatter-add ----
 *
 * Both walk the batch dims of the indices (all but the trailing index
 * vector dim); per index vector they compute the operand start of a window
 * and move that window box between the operand and the result (gather) or
 * the updates (scatter). Operand dims that are not collapsed/inserted or
 * batching dims are the window dims, in order. */

/* The box over the indices' batch dims: array 1 walks the indices (offset of
 * each index vector), array 0 the `other` array's dims not in `window`
 * (the gather result's batch dims, the updates' scatter dims). */
static void kir_batch_box(kir_box *b, const kir_aval *idx, const kir_aval *other,
                          const kir_dims *window) {
  int64_t is[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_box_init(b, idx->rank - 1, idx->shape);
  kir_c_strides(idx->rank, idx->shape, is);
  kir_c_strides(other->rank, other->shape, os);
  for (int d = 0, j = 0; d < other->rank; d++)
    if (!kir_dims_contains(window, d)) b->stride[0][j++] = os[d];
  memcpy(b->stride[1], is, (size_t)b->rank * sizeof *is);
}

/* The window box: array `xa` steps through the operand's window dims (those
 * not in `skip1`/`skip2`), array 1 - xa through `other`'s `window` dims; the
 * k-th window dim of the operand pairs with window->v[k]. *size gets the
 * window size of every operand dim (1 for skipped dims). */
static void kir_window_box(kir_box *b, int xa, const kir_aval *x, const kir_dims *skip1,
                           const kir_dims *skip2, const kir_aval *other, const kir_dims *window,
                           int64_t *size) {
  int64_t xs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_c_strides(x->rank, x->shape, xs);
  kir_c_strides(other->rank, other->shape, os);
  kir_box_init(b, window->n, NULL);
  for (int d = 0, k = 0; d < x->rank; d++) {
    size[d] = 1;
    if (kir_dims_contains(skip1, d) || kir_dims_contains(skip2, d)) continue;
    size[d] = b->shape[k] = other->shape[window->v[k]];
    b->stride[xa][k] = xs[d];
    b->stride[1 - xa][k] = os[window->v[k]];
    k++;
  }
}

/* How out-of-bounds index vectors are treated. */
typedef enum kir_oob {
  KIR_OOB_CLAMP, /* move the window inside (XLA's gather; JAX's CLIP scatter) */
  KIR_OOB_SKIP,  /* skip the window unless it fits (XLA's scatter) */
  /* JAX's FILL_OR_DROP gather: the indices are first converted (wrapping)
   * to int32, or int64 for operands with a dimension past int32, and a
   * window that does not fit is filled. */
  KIR_OOB_SKIP_I32,
  KIR_OOB_SKIP_I64
} kir_oob;

/* What turns one index vector into a window offset in the operand. */
typedef struct kir_indexing {
  const kir_aval *x;          /* the operand */
  int64_t xs[KIR_MAX_RANK];   /* its strides */
  int64_t size[KIR_MAX_RANK]; /* window size of every operand dim */
  const kir_buffer *idx;
  const kir_dims *map;        /* start_index_map / scatter_dims_to_operand_dims */
  const kir_dims *obatch;     /* operand_batching_dims */
  const kir_dims *ibatch;     /* the indices' batching dims */
  kir_oob oob;
} kir_indexing;

static bool kir_index_wrapped_fit(const kir_indexing *g, int64_t i, int64_t hi, int64_t *v) {
  kiln_dtype dt = g->idx->aval.dtype;
  const char *p = (const char *)g->idx->data + i * (int64_t)kir_esize(g->idx);
  kir_scalar s = kir_scalar_load(dt, p);
  *v = kiln_dtype_is_unsigned(dt) ? (int64_t)s.u : s.i;
  if (g->oob == KIR_OOB_SKIP_I32) *v = (int32_t)(uint32_t)*v;
  return *v >= 0 && *v <= hi;
}

/* Operand offset of the window for the index vector at w (w->off[1] is its
 * offset in the indices, w->idx the batch position, which batching dims
 * take); false if it is out of bounds and not clamped. */
static bool kir_window_offset(const kir_indexing *g, const kir_walk *w, int64_t *off) {
  *off = 0;
  for (int k = 0; k < g->map->n; k++) {
    int d = g->map->v[k];
    int64_t hi = g->x->shape[d] - g->size[d], v;
    if (hi < 0) return false; /* nothing fits (an empty operand dim) */
    bool fits = (g->oob == KIR_OOB_SKIP_I32 || g->oob == KIR_OOB_SKIP_I64)
                    ? kir_index_wrapped_fit(g, w->off[1] + k, hi, &v)
                    : kir_index_fit(g->idx, w->off[1] + k, hi, &v);
    if (!fits && g->oob != KIR_OOB_CLAMP) return false;
    *off += v * g->xs[d];
  }
  for (int i = 0; i < g->obatch->n; i++)
    *off += w->idx[g->ibatch->v[i]] * g->xs[g->obatch->v[i]];
  return true;
}

static void kir_indexing_init(kir_indexing *g, const kir_buffer *x, const kir_buffer *idx,
                              const kir_dims *map, const kir_dims *obatch, const kir_dims *ibatch,
                              kir_oob oob) {
  g->x = &x->aval;
  kir_c_strides(x->aval.rank, x->aval.shape, g->xs);
  g->idx = idx;
  g->map = map;
  g->obatch = obatch;
  g->ibatch = ibatch;
  g->oob = oob;
}

/* An integer of dt's width from a double: truncated toward zero and
 * saturated, NaN to 0 (XLA's float-to-int convert). */
static kir_scalar kir_int_from_double(kiln_dtype dt, double v) {
  int bits = (int)kiln_dtype_size(dt) * 8;
  v = isnan(v) ? 0 : trunc(v);
  if (kiln_dtype_is_signed(dt)) {
    double lim = ldexp(1, bits - 1); /* -lim is the minimum, lim - 1 the maximum */
    int64_t max = (int64_t)(UINT64_MAX >> (65 - bits));
    return kir_scalar_i(v <= -lim ? -max - 1 : v >= lim ? max : (int64_t)v);
  }
  double lim = ldexp(1, bits);
  return kir_scalar_u(v <= 0 ? 0 : v >= lim ? UINT64_MAX >> (64 - bits) : (uint64_t)v);
}

/* FILL_OR_DROP's fill element: fill_value converted to the dtype, or JAX's
 * default: NaN for floats, the minimum of signed and the maximum of
 * unsigned integers, true for bool. */
void kir_gather_fill(kiln_dtype dt, kir_opt_f64 fill, void *elem) {
  kir_scalar s;
  if (kiln_dtype_is_float(dt))
    s = kir_scalar_f(kir_round_to_dtype(dt, fill.present ? fill.v : NAN));
  else if (kiln_dtype_is_bool(dt))
    s = kir_scalar_i(!fill.present || fill.v != 0);
  else if (fill.present)
    s = kir_int_from_double(dt, fill.v);
  else
    s = kir_int_from_double(dt, kiln_dtype_is_signed(dt) ? -INFINITY : INFINITY);
  kir_scalar_store(dt, s, elem);
}

static kir_oob kir_gather_oob(const kir_p_gather *p, const kir_aval *x) {
  if (p->mode != KIR_GATHER_FILL_OR_DROP) return KIR_OOB_CLAMP;
  for (int d = 0; d < x->rank; d++)
    if (x->shape[d] > INT32_MAX) return KIR_OOB_SKIP_I64;
  return KIR_OOB_SKIP_I32;
}

static kiln_status kir_eval_gather(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx) {
  (void)ctx;
  const kir_p_gather *p = &e->params.gather;
  const kir_gather_dims *g = &p->dimension_numbers;
  const kir_aval *x = &in[0].aval, *o = &out[0].aval;
  char t[KIR_AVAL_STR_CAP], ss[256];
  if (kir_aval_size(o) == 0) return KILN_OK;
  /* JAX's rule waives this check for empty indices; XLA does not. */
  for (int d = 0; d < x->rank; d++)
    if (p->slice_sizes.v[d] > x->shape[d])
      return kcore_fail(KILN_ERR_SHAPE,
                        "gather: slice_sizes=%s exceed operand %s in dimension %d (with empty "
                        "indices and a non-empty result)",
                        kir_sizes_str(&p->slice_sizes, ss, sizeof ss), TSTR(x, t), d);
  kir_indexing ix;
  kir_indexing_init(&ix, &in[0], &in[1], &g->start_index_map, &g->operand_batching_dims,
                    &g->start_indices_batching_dims, kir_gather_oob(p, x));
  kir_box win, batch;
  kir_window_box(&win, 1, x, &g->collapsed_slice_dims, &g->operand_batching_dims, o,
                 &g->offset_dims, ix.size);
  kir_batch_box(&batch, &in[1].aval, o, &g->offset_dims);
  size_t es = kir_esize(&in[0]);
  uint64_t fill;
  kir_gather_fill(x->dtype, p->fill_value, &fill);
  kir_walk w;
  if (!kir_walk_start(&w, &batch, batch.rank)) return KILN_OK;
  do {
    win.base[0] = w.off[0];
    if (kir_window_offset(&ix, &w, &win.base[1]))
      kir_box_copy(&win, es, out[0].data, in[0].data);
    else
      kir_box_fill(&win, es, out[0].data, &fill);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

/* The scatter family: the operand, combined with every update window that
 * fits (CLIP moves windows inside first), in index order. */
static kiln_status kir_eval_scatter(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                    void *ctx) {
  (void)ctx;
  const kir_p_scatter *p = &e->params.scatter;
  const kir_scatter_dims *s = &p->dimension_numbers;
  const kir_aval *x = &in[0].aval, *u = &in[2].aval;
  kiln_status st = kir_check_dtype_class(e->prim, 0, &in[0].aval, kir_scatter_dtypes(e->prim));
  if (st) return st;
  memcpy(out[0].data, in[0].data, out[0].nbytes);
  kir_indexing ix;
  kir_indexing_init(&ix, &in[0], &in[1], &s->scatter_dims_to_operand_dims,
                    &s->operand_batching_dims, &s->scatter_indices_batching_dims,
                    p->mode == KIR_GATHER_CLIP ? KIR_OOB_CLAMP : KIR_OOB_SKIP);
  kir_box win, batch;
  kir_window_box(&win, 0, x, &s->inserted_window_dims, &s->operand_batching_dims, u,
                 &s->update_window_dims, ix.size);
  kir_batch_box(&batch, &in[1].aval, u, &s->update_window_dims);
  kir_walk w;
  if (!kir_walk_start(&w, &batch, batch.rank)) return KILN_OK;
  do {
    win.base[1] = w.off[0];
    if (kir_window_offset(&ix, &w, &win.base[0]))
      kir_box_scatter(&win, e->prim, x->dtype, out[0].data, in[2].data);
  } while (kir_walk_next(&w));
  return KILN_OK;
}

void kir_shape_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_BROADCAST_IN_DIM] = kir_eval_broadcast_in_dim;
  t->fn[KIR_PRIM_RESHAPE] = kir_eval_same_order;
  t->fn[KIR_PRIM_TRANSPOSE] = kir_eval_transpose;
  t->fn[KIR_PRIM_SQUEEZE] = kir_eval_same_order;
  t->fn[KIR_PRIM_EXPAND_DIMS] = kir_eval_same_order;
  t->fn[KIR_PRIM_REV] = kir_eval_rev;
  t->fn[KIR_PRIM_SLICE] = kir_eval_slice;
  t->fn[KIR_PRIM_DYNAMIC_SLICE] = kir_eval_dynamic_slice;
  t->fn[KIR_PRIM_DYNAMIC_UPDATE_SLICE] = kir_eval_dynamic_update_slice;
  t->fn[KIR_PRIM_CONCATENATE] = kir_eval_concatenate;
  t->fn[KIR_PRIM_PAD] = kir_eval_pad;
  t->fn[KIR_PRIM_IOTA] = kir_eval_iota;
  t->fn[KIR_PRIM_GATHER] = kir_eval_gather;
  t->fn[KIR_PRIM_SCATTER_ADD] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MUL] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MIN] = kir_eval_scatter;
  t->fn[KIR_PRIM_SCATTER_MAX] = kir_eval_scatter;
}
