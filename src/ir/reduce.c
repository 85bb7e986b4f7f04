/* Reductions, arg-reductions, cumulative reductions and sort: shape/dtype
 * rules (lax semantics) and reference evaluators (XLA:CPU's arithmetic). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* reduce_sum/prod take numbers, reduce_max/min anything, reduce_and/or
 * bools and integers and drop the weak flag (lax's _strip_weak_type). */
kiln_status kir_rule_reduce(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                            kir_avals *out) {
  (void)n_in;
  const kir_dims *axes = &params->axes.axes;
  const kir_aval *x = &in[0];
  unsigned accepts = KIR_DT_ANY;
  bool logical = prim == KIR_PRIM_REDUCE_AND || prim == KIR_PRIM_REDUCE_OR;
  if (prim == KIR_PRIM_REDUCE_SUM || prim == KIR_PRIM_REDUCE_PROD) accepts = KIR_DT_NUM;
  if (logical) accepts = KIR_DT_BOOL | KIR_DT_INT;
  kiln_status st = kir_check_dtype_class(prim, 0, in, accepts);
  if (st == KILN_OK) st = kir_check_dims(prim, "axes", axes, x->rank, false, x);
  if (st != KILN_OK) return st;
  int64_t shape[KIR_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < x->rank; d++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == d;
    if (!reduced) shape[rank++] = x->shape[d];
  }
  return kir_push(out, x->dtype, rank, shape, logical ? false : x->weak);
}

/* argmax/argmin over exactly one non-empty axis; any operand dtype; an
 * integer index dtype; never weak. */
kiln_status kir_rule_argminmax(kir_prim prim, const kir_params *params, int n_in,
                               const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_argminmax *p = &params->argminmax;
  const kir_aval *x = &in[0];
  char t[KIR_AVAL_STR_CAP], ds[128];
  const char *name = kir_prim_name(prim);
  if (p->axes.n != 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: axes=%s must name exactly one axis", name,
                      kir_dims_str(&p->axes, ds, sizeof ds));
  kiln_status st = kir_check_dims(prim, "axes", &p->axes, x->rank, false, x);
  if (st != KILN_OK) return st;
  int axis = p->axes.v[0];
  if (x->shape[axis] < 1)
    return kcore_fail(KILN_ERR_SHAPE, "%s: axis %d of %s is empty", name, axis, kir_aval_str(x, t, sizeof t));
  if (!kiln_dtype_is_valid(p->index_dtype) || !kiln_dtype_is_integer(p->index_dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: index_dtype %s is not an integer dtype", name,
                      kiln_dtype_name(p->index_dtype));
  int64_t shape[KIR_MAX_RANK];
  int rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) shape[rank++] = x->shape[d];
  return kir_push(out, p->index_dtype, rank, shape, false);
}

kiln_status kir_rule_cumulative(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_aval *x = &in[0];
  int64_t axis = params->cumulative.axis;
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_NUM);
  if (st != KILN_OK) return st;
  if (axis < 0 || axis >= x->rank) {
    char t[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "%s: axis=%lld is outside [0, %d) for operand %s",
                      kir_prim_name(prim), (long long)axis, x->rank, kir_aval_str(x, t, sizeof t));
  }
  return kir_push(out, x->dtype, x->rank, x->shape, x->weak);
}

/* lax.sort over n operands of one shape: the results have the operands'
 * types, weak flags included. */
kiln_status kir_rule_sort(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)prim;
  const kir_p_sort *p = &params->sort;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (n_in < 1) return kcore_fail(KILN_ERR_ARGUMENT, "sort: needs at least one operand");
  for (int i = 1; i < n_in; i++)
    if (!kir_aval_same_shape(&in[i], &in[0]))
      return kcore_fail(KILN_ERR_SHAPE, "sort: operand types %s and %s have different shapes",
                        kir_aval_str(&in[0], t0, sizeof t0), kir_aval_str(&in[i], t1, sizeof t1));
  if (p->dimension < 0 || p->dimension >= in[0].rank)
    return kcore_fail(KILN_ERR_SHAPE, "sort: dimension=%lld is outside [0, %d) for operand %s",
                      (long long)p->dimension, in[0].rank, kir_aval_str(&in[0], t0, sizeof t0));
  if (p->num_keys < 1 || p->num_keys > n_in)
    return kcore_fail(KILN_ERR_ARGUMENT, "sort: num_keys=%lld is outside [1, %d]",
                      (long long)p->num_keys, n_in);
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_avals_push(out, &in[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ---- reference evaluators ----
 *
 * They compute what XLA:CPU computes for the HLO that JAX lowers these
 * primitives to, including what is XLA's choice rather than lax's definition:
 * - Float arithmetic: f16 and bf16 in f32 with every result rounded to the
 *   dtype. XLA's CPU runtime sets FTZ/DAZ, so subnormal f32/f64 (and bf16,
 *   computed in f32) operands read as zero and subnormal results become zero;
 *   f16 values are normal in f32 and never flushed. Moved elements (sort) and
 *   reductions of one element (XLA turns them into copies) are not flushed.
 * - Max/min: NaN wins, and +0 is above -0.
 * - The order of float sums and products. XLA's tree reduction splits every
 *   reduced dimension longer than 32 into windows of 32 (padding evenly on
 *   both sides) and reduces the windows' results again; each window, and the
 *   final reduction, folds from the identity in row-major order. Cumulative
 *   sums and products are its two-level scan: blocks of 16 scanned alone,
 *   their totals scanned recursively and added back; a reverse scan's element
 *   i folds x[i..] in forward order. With this, results usually equal JAX's
 *   bit for bit (large f32 reductions go through other XLA kernels), so tests
 *   compare float sums and products within tolerance.
 * Values are widened for the loops: floats to double (f16/bf16/f32 exactly),
 * integers to 64-bit two's complement bits, sign- or zero-extended (sums and
 * products wrap modulo 2^64, which narrows to the dtype's wraparound), bools
 * to 0/1. */

typedef union kir_wide {
  double f;
  uint64_t u;
} kir_wide;

typedef enum kir_op {
  KIR_OP_ADD,
  KIR_OP_MUL,
  KIR_OP_MAX,
  KIR_OP_MIN,
  KIR_OP_AND,
  KIR_OP_OR
} kir_op;

/* A binary operation on the widened values of one dtype. */
typedef struct kir_monoid {
  kir_op op;
  kiln_dtype dtype;
  bool is_float, is_signed;
  double tiny; /* floats: smaller magnitudes are flushed to zero (0 for f16: never) */
} kir_monoid;

#define KIR_TREE_WINDOW 32 /* XLA:CPU's tree reduction window */
#define KIR_SCAN_BLOCK 16  /* XLA's reduce-window scan block */

static kir_op kir_reduce_op(kir_prim p) {
  switch (p) {
    case KIR_PRIM_REDUCE_SUM:
    case KIR_PRIM_CUMSUM: return KIR_OP_ADD;
    case KIR_PRIM_REDUCE_PROD:
    case KIR_PRIM_CUMPROD: return KIR_OP_MUL;
    case KIR_PRIM_REDUCE_MAX:
    case KIR_PRIM_CUMMAX: return KIR_OP_MAX;
    case KIR_PRIM_REDUCE_MIN:
    case KIR_PRIM_CUMMIN: return KIR_OP_MIN;
    case KIR_PRIM_REDUCE_AND: return KIR_OP_AND;
    case KIR_PRIM_REDUCE_OR: return KIR_OP_OR;
    default: KCORE_ASSERT(!"kir_reduce_op: not a reduction"); return KIR_OP_ADD;
  }
}

static kir_monoid kir_monoid_make(kir_op op, kiln_dtype dt) {
  kir_monoid m = {op, dt, kiln_dtype_is_float(dt), false, 0.0};
  m.is_signed = !m.is_float && kiln_dtype_is_signed(dt);
  if (dt == KILN_F32 || dt == KILN_BF16) m.tiny = FLT_MIN;
  if (dt == KILN_F64) m.tiny = DBL_MIN;
  return m;
}

static inline double kir_flush(double v, double tiny) {
  return fabs(v) < tiny ? copysign(0.0, v) : v;
}

/* The double result of an f16/bf16/f32 operation rounded as XLA's f32
 * arithmetic rounds it (going through double first is harmless: the
 * operands have at most 24 significant bits), flushed, then rounded to the
 * dtype; an f64 result flushed. */
static double kir_round_result(const kir_monoid *m, double v) {
  switch (m->dtype) {
    case KILN_F16: return kcore_f16_to_f32(kcore_f32_to_f16((float)v));
    case KILN_BF16:
      return kcore_bf16_to_f32(kcore_f32_to_bf16((float)kir_flush((float)v, m->tiny)));
    case KILN_F32: return kir_flush((float)v, m->tiny);
    default: return kir_flush(v, m->tiny);
  }
}

static double kir_fmax(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) ? a : b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static double kir_fmin(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) ? a : b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

/* a < b on widened integers; signed ones compare with the sign bit flipped. */
static inline bool kir_ilt(bool is_signed, uint64_t a, uint64_t b) {
  uint64_t flip = is_signed ? UINT64_C(1) << 63 : 0;
  return (a ^ flip) < (b ^ flip);
}

static inline kir_wide kir_combine(const kir_monoid *m, kir_wide a, kir_wide b) {
  kir_wide r;
  if (m->is_float) {
    double x = kir_flush(a.f, m->tiny), y = kir_flush(b.f, m->tiny);
    switch (m->op) {
      case KIR_OP_ADD: r.f = kir_round_result(m, x + y); break;
      case KIR_OP_MUL: r.f = kir_round_result(m, x * y); break;
      case KIR_OP_MAX: r.f = kir_fmax(x, y); break;
      default: r.f = kir_fmin(x, y); break; /* the rules give and/or no floats */
    }
    return r;
  }
  switch (m->op) {
    case KIR_OP_ADD: r.u = a.u + b.u; break;
    case KIR_OP_MUL: r.u = a.u * b.u; break;
    case KIR_OP_MAX: r.u = kir_ilt(m->is_signed, a.u, b.u) ? b.u : a.u; break;
    case KIR_OP_MIN: r.u = kir_ilt(m->is_signed, b.u, a.u) ? b.u : a.u; break;
    case KIR_OP_AND: r.u = a.u & b.u; break;
    default: r.u = a.u | b.u; break;
  }
  return r;
}

/* The dtype's largest value, widened (bool: 1). */
static uint64_t kir_int_max(kiln_dtype dt, bool is_signed) {
  if (dt == KILN_BOOL) return 1;
  size_t bits = kiln_dtype_size(dt) * 8;
  uint64_t all = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
  return is_signed ? all >> 1 : all;
}

/* lax's init values: 0, 1, -inf / the smallest value, +inf / the largest
 * value, all ones, 0. */
static kir_wide kir_identity(const kir_monoid *m) {
  kir_wide r;
  uint64_t max = m->is_float ? 0 : kir_int_max(m->dtype, m->is_signed);
  switch (m->op) {
    case KIR_OP_ADD:
      if (m->is_float) r.f = 0.0; else r.u = 0;
      break;
    case KIR_OP_MUL:
      if (m->is_float) r.f = 1.0; else r.u = 1;
      break;
    case KIR_OP_MAX:
      if (m->is_float) r.f = -INFINITY; else r.u = m->is_signed ? ~max : 0;
      break;
    case KIR_OP_MIN:
      if (m->is_float) r.f = INFINITY; else r.u = max;
      break;
    case KIR_OP_AND: r.u = m->dtype == KILN_BOOL ? 1 : UINT64_MAX; break;
    default: r.u = 0; break;
  }
  return r;
}

#define KIR_CONVERT_LOOP(T, field, expr)              \
  do {                                                \
    const T *base = src;                              \
    for (int64_t i = 0; i < n; i++) {                 \
      T v = base[i * stride];                         \
      w[i].field = (expr);                            \
    }                                                 \
  } while (0)

/* n elements of dtype dt at src, `stride` elements apart, widened into w. */
static void kir_widen(kiln_dtype dt, const void *src, int64_t n, int64_t stride, kir_wide *w) {
  switch (dt) {
    case KILN_BOOL: KIR_CONVERT_LOOP(uint8_t, u, v != 0); break;
    case KILN_I8: KIR_CONVERT_LOOP(int8_t, u, (uint64_t)(int64_t)v); break;
    case KILN_I16: KIR_CONVERT_LOOP(int16_t, u, (uint64_t)(int64_t)v); break;
    case KILN_I32: KIR_CONVERT_LOOP(int32_t, u, (uint64_t)(int64_t)v); break;
    case KILN_I64: KIR_CONVERT_LOOP(int64_t, u, (uint64_t)v); break;
    case KILN_U8: KIR_CONVERT_LOOP(uint8_t, u, v); break;
    case KILN_U16: KIR_CONVERT_LOOP(uint16_t, u, v); break;
    case KILN_U32: KIR_CONVERT_LOOP(uint32_t, u, v); break;
    case KILN_U64: KIR_CONVERT_LOOP(uint64_t, u, v); break;
    case KILN_F16: KIR_CONVERT_LOOP(uint16_t, f, kcore_f16_to_f32(v)); break;
    case KILN_BF16: KIR_CONVERT_LOOP(uint16_t, f, kcore_bf16_to_f32(v)); break;
    case KILN_F32: KIR_CONVERT_LOOP(float, f, v); break;
    case KILN_F64: KIR_CONVERT_LOOP(double, f, v); break;
    default: KCORE_ASSERT(!"kir_widen: invalid dtype");
  }
}
#undef KIR_CONVERT_LOOP

#define KIR_CONVERT_LOOP(T, expr)                   \
  do {                                              \
    T *d = dst;                                     \
    for (int64_t i = 0; i < n; i++) d[i] = (expr); \
  } while (0)

/* The inverse of kir_widen: integers keep their low bits, floats (already
 * values of dt) are stored exactly. */
static void kir_narrow(kiln_dtype dt, const kir_wide *w, int64_t n, void *dst) {
  switch (dt) {
    case KILN_BOOL: KIR_CONVERT_LOOP(uint8_t, w[i].u != 0); break;
    case KILN_I8:
    case KILN_U8: KIR_CONVERT_LOOP(uint8_t, (uint8_t)w[i].u); break;
    case KILN_I16:
    case KILN_U16: KIR_CONVERT_LOOP(uint16_t, (uint16_t)w[i].u); break;
    case KILN_I32:
    case KILN_U32: KIR_CONVERT_LOOP(uint32_t, (uint32_t)w[i].u); break;
    case KILN_I64:
    case KILN_U64: KIR_CONVERT_LOOP(uint64_t, w[i].u); break;
    case KILN_F16: KIR_CONVERT_LOOP(uint16_t, kcore_f32_to_f16((float)w[i].f)); break;
    case KILN_BF16: KIR_CONVERT_LOOP(uint16_t, kcore_f32_to_bf16((float)w[i].f)); break;
    case KILN_F32: KIR_CONVERT_LOOP(float, (float)w[i].f); break;
    case KILN_F64: KIR_CONVERT_LOOP(double, w[i].f); break;
    default: KCORE_ASSERT(!"kir_narrow: invalid dtype");
  }
}
#undef KIR_CONVERT_LOOP

static kiln_status kir_wide_alloc(const kir_eqn *e, int64_t n, kir_wide **out) {
  size_t bytes = 0;
  *out = NULL;
  if (n >= 0 && kcore_mul_size((size_t)n, sizeof **out, &bytes)) *out = malloc(bytes ? bytes : 1);
  if (!*out)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld temporary values",
                      kir_prim_name(e->prim), (long long)n);
  return KILN_OK;
}

/* Widens buffer b into a new array. */
static kiln_status kir_wide_load(const kir_eqn *e, const kir_buffer *b, kir_wide **out) {
  int64_t n = kir_aval_size(&b->aval);
  kiln_status st = kir_wide_alloc(e, n, out);
  if (st == KILN_OK) kir_widen(b->aval.dtype, b->data, n, 1, *out);
  return st;
}

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

/* For each of `outer` blocks, dst[c][r] = src[r][c] over rows x cols, tile
 * by tile so that both sides stay in cache (a line strided by a power of two
 * would thrash it). */
#define KIR_TILE 16
#define KIR_TRANSPOSE(T)                                                      \
  do {                                                                        \
    const T *s = src;                                                         \
    T *d = dst;                                                               \
    for (int64_t o = 0; o < outer; o++, s += rows * cols, d += rows * cols)   \
      for (int64_t r0 = 0; r0 < rows; r0 += KIR_TILE)                         \
        for (int64_t c0 = 0; c0 < cols; c0 += KIR_TILE)                       \
          for (int64_t r = r0; r < r0 + KIR_TILE && r < rows; r++)           \
            for (int64_t c = c0; c < c0 + KIR_TILE && c < cols; c++)         \
              d[c * rows + r] = s[r * cols + c];                              \
  } while (0)

static void kir_transpose_wide(const kir_wide *src, kir_wide *dst, int64_t outer, int64_t rows,
                               int64_t cols) {
  KIR_TRANSPOSE(kir_wide);
}

/* The same on raw elements of elem_size bytes. */
static void kir_transpose_raw(size_t elem_size, const void *src, void *dst, int64_t outer,
                              int64_t rows, int64_t cols) {
  switch (elem_size) {
    case 1: KIR_TRANSPOSE(uint8_t); break;
    case 2: KIR_TRANSPOSE(uint16_t); break;
    case 4: KIR_TRANSPOSE(uint32_t); break;
    default: KIR_TRANSPOSE(uint64_t); break;
  }
}
#undef KIR_TRANSPOSE

/* A strided view of lines along one axis: `outer` blocks of `len` x `inner`. */
typedef struct kir_lines {
  int64_t outer, len, inner;
} kir_lines;

static kir_lines kir_lines_make(const kir_aval *a, int axis) {
  kir_lines l = {1, a->shape[axis], 1};
  for (int d = 0; d < axis; d++) l.outer *= a->shape[d];
  for (int d = axis + 1; d < a->rank; d++) l.inner *= a->shape[d];
  return l;
}

/* Offset of the first element of line i (0 <= i < outer * inner). */
static inline int64_t kir_line_base(const kir_lines *l, int64_t i) {
  return i / l->inner * l->len * l->inner + i % l->inner;
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
static kiln_status kir_eval_cumulative(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
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
static kiln_status kir_eval_sort(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
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
