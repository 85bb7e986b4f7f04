/* Private to the reduction evaluators (reduce_wide.c, reduce_eval.c,
 * reduce_scan.c): widened values, the monoids that combine them, and the
 * helpers the reductions, scans and sorts share. */
#ifndef KILN_IR_REDUCE_EVAL_H
#define KILN_IR_REDUCE_EVAL_H

#include <float.h>
#include <math.h>

#include "core/core.h"
#include "ir/ir.h"

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

static inline double kir_flush(double v, double tiny) {
  return fabs(v) < tiny ? copysign(0.0, v) : v;
}

/* The double result of an f16/bf16/f32 operation rounded as XLA's f32
 * arithmetic rounds it (going through double first is harmless: the
 * operands have at most 24 significant bits), flushed, then rounded to the
 * dtype; an f64 result flushed. */
static inline double kir_round_result(const kir_monoid *m, double v) {
  switch (m->dtype) {
    case KILN_F16: return kcore_f16_to_f32(kcore_f32_to_f16((float)v));
    case KILN_BF16:
      return kcore_bf16_to_f32(kcore_f32_to_bf16((float)kir_flush((float)v, m->tiny)));
    case KILN_F32: return kir_flush((float)v, m->tiny);
    default: return kir_flush(v, m->tiny);
  }
}

static inline double kir_fmax(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) ? a : b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static inline double kir_fmin(double a, double b) {
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

kir_op kir_reduce_op(kir_prim p);
kir_monoid kir_monoid_make(kir_op op, kiln_dtype dt);
/* lax's init values: 0, 1, -inf / the smallest value, +inf / the largest
 * value, all ones, 0. */
kir_wide kir_identity(const kir_monoid *m);
/* n elements of dtype dt at src, `stride` elements apart, widened into w. */
void kir_widen(kiln_dtype dt, const void *src, int64_t n, int64_t stride, kir_wide *w);
/* The inverse of kir_widen: integers keep their low bits, floats (already
 * values of dt) are stored exactly. */
void kir_narrow(kiln_dtype dt, const kir_wide *w, int64_t n, void *dst);
kiln_status kir_wide_alloc(const kir_eqn *e, int64_t n, kir_wide **out);
/* Widens buffer b into a new array. */
kiln_status kir_wide_load(const kir_eqn *e, const kir_buffer *b, kir_wide **out);
/* For each of `outer` blocks, dst[c][r] = src[r][c] over rows x cols. */
void kir_transpose_wide(const kir_wide *src, kir_wide *dst, int64_t outer, int64_t rows,
                        int64_t cols);
/* The same on raw elements of elem_size bytes. */
void kir_transpose_raw(size_t elem_size, const void *src, void *dst, int64_t outer, int64_t rows,
                       int64_t cols);

/* A strided view of lines along one axis: `outer` blocks of `len` x `inner`. */
typedef struct kir_lines {
  int64_t outer, len, inner;
} kir_lines;
kir_lines kir_lines_make(const kir_aval *a, int axis);
/* Offset of the first element of line i (0 <= i < outer * inner). */
static inline int64_t kir_line_base(const kir_lines *l, int64_t i) {
  return i / l->inner * l->len * l->inner + i % l->inner;
}

/* reduce_scan.c */
kiln_status kir_eval_cumulative(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx);
kiln_status kir_eval_sort(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx);

#endif
