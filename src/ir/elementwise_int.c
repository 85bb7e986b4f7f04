/* The elementwise reference evaluators' integer and bool ops (64-bit words;
 * the store wraps), and their rows, generated from the records' eval_int
 * column. */
#include "ir/elementwise_eval.h"

#define KIR_EW_DEFINE_PURE1(name, EXPR)                                     \
  static inline uint64_t kir_ew_##name(const kir_ew_op *op, kir_ew_val a) { \
    (void)op;                                                               \
    return (EXPR);                                                          \
  }
#define KIR_EW_DEFINE_PURE2(name, EXPR)                                                   \
  static inline uint64_t kir_ew_##name(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) { \
    (void)op;                                                                             \
    return (EXPR);                                                                        \
  }
/* clang-format off */
KIR_EW_DEFINE_PURE1(i_neg, 0 - a.u)
KIR_EW_DEFINE_PURE1(i_stop_gradient, a.u)
KIR_EW_DEFINE_PURE1(i_copy, a.u)
KIR_EW_DEFINE_PURE1(i_square, a.u * a.u)
KIR_EW_DEFINE_PURE1(i_abs, a.i < 0 ? 0 - a.u : a.u)
KIR_EW_DEFINE_PURE2(i_add, a.u + b.u)
KIR_EW_DEFINE_PURE2(i_sub, a.u - b.u)
KIR_EW_DEFINE_PURE2(i_mul, a.u * b.u)
KIR_EW_DEFINE_PURE2(i_and, a.u & b.u)
KIR_EW_DEFINE_PURE2(i_or, a.u | b.u)
KIR_EW_DEFINE_PURE2(i_xor, a.u ^ b.u)
/* clang-format on */
#undef KIR_EW_DEFINE_PURE1
#undef KIR_EW_DEFINE_PURE2

/* integer_pow of an integer (y >= 0: the rule refuses negative powers),
 * wrapping as the products do. */
static inline uint64_t kir_ew_i_integer_pow(const kir_ew_op *op, kir_ew_val a) {
  uint64_t r = 1, x = a.u;
  for (int64_t k = op->params->integer_pow.y; k > 0; k >>= 1) {
    if (k & 1) r *= x;
    x *= x;
  }
  return r;
}

static inline uint64_t kir_ew_i_sign(const kir_ew_op *op, kir_ew_val a) {
  if (!op->is_signed) return a.u != 0;
  return a.i < 0 ? UINT64_MAX : a.i > 0;
}

static inline uint64_t kir_ew_i_not(const kir_ew_op *op, kir_ew_val a) {
  return a.u ^ op->mask; /* bool: logical not */
}

static inline uint64_t kir_ew_i_population_count(const kir_ew_op *op, kir_ew_val a) {
  uint64_t v = a.u & op->mask;
  v = v - ((v >> 1) & 0x5555555555555555ull);
  v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
  v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (v * 0x0101010101010101ull) >> 56;
}

/* XLA: x / 0 is -1 (all ones; unsigned too), INT_MIN / -1 is INT_MIN. */
static inline uint64_t kir_ew_i_div(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  if (op->is_signed) {
    if (b.i == 0) return UINT64_MAX;
    if (b.i == -1) return 0 - a.u;
    return (uint64_t)(a.i / b.i);
  }
  return b.u == 0 ? UINT64_MAX : a.u / b.u;
}

/* XLA: x % 0 is x, INT_MIN % -1 is 0; the sign follows the dividend. */
static inline uint64_t kir_ew_i_rem(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  if (op->is_signed) {
    if (b.i == 0) return a.u;
    if (b.i == -1) return 0;
    return (uint64_t)(a.i % b.i);
  }
  return b.u == 0 ? a.u : a.u % b.u;
}

static inline bool kir_ew_i_less(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return op->is_signed ? a.i < b.i : a.u < b.u;
}

static inline uint64_t kir_ew_i_max(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return kir_ew_i_less(op, a, b) ? b.u : a.u;
}

static inline uint64_t kir_ew_i_min(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  return kir_ew_i_less(op, b, a) ? b.u : a.u;
}

/* Shift amounts are read as unsigned words of the operand's width; one at
 * or past the width shifts every bit out (the sign bit fills, for the
 * arithmetic shift, which reads unsigned operands as signed too). */
static inline uint64_t kir_ew_i_shift_left(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  return s >= (uint64_t)op->bits ? 0 : a.u << s;
}

static inline uint64_t kir_ew_i_shift_right_logical(const kir_ew_op *op, kir_ew_val a,
                                                    kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  return s >= (uint64_t)op->bits ? 0 : (a.u & op->mask) >> s;
}

static inline uint64_t kir_ew_i_shift_right_arithmetic(const kir_ew_op *op, kir_ew_val a,
                                                       kir_ew_val b) {
  uint64_t s = b.u & op->mask;
  if (s >= (uint64_t)op->bits) s = (uint64_t)op->bits - 1;
  uint64_t top = 1ull << (op->bits - 1);
  uint64_t x = ((a.u & op->mask) ^ top) - top; /* sign-extended */
  return x >> 63 ? ~(~x >> s) : x >> s;
}

#define KIR_EW_DEFINE_ICMP(name, OP)                                                        \
  static inline uint64_t kir_ew_i_##name(const kir_ew_op *op, kir_ew_val a, kir_ew_val b) { \
    return op->is_signed ? a.i OP b.i : a.u OP b.u;                                         \
  }
KIR_EW_COMPARE(KIR_EW_DEFINE_ICMP)
#undef KIR_EW_DEFINE_ICMP

/* ---- rows ---- */

/* Each record's row function (see prims.def's eval_int column). */
#define KIR_EW_IROW_I1(ID, name) KIR_EW_DEFINE_ROW(ID, i_##name, I1)
#define KIR_EW_IROW_I2(ID, name) KIR_EW_DEFINE_ROW(ID, i_##name, I2)
#define KIR_EW_IROW_OWN(ID, name)
#define KIR_EW_IROW_EQN(ID, name)
#define KIR_EW_IROW_NONE(ID, name)
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_IROW_##eval_int(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE

static void kir_ew_row_i_clamp(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  for (int64_t i = 0; i < n; i++) {
    kir_ew_val m = {.u = kir_ew_i_max(op, x[0][i], x[1][i])};
    y[i].u = kir_ew_i_min(op, m, x[2][i]);
  }
}

/* The row of each primitive for integer or bool operands (NULL where the
 * rule refuses them or the record evaluates the whole equation). */
#define KIR_EW_IENTRY_I1(ID, name) [KIR_PRIM_##ID] = kir_ew_row_i_##name,
#define KIR_EW_IENTRY_I2 KIR_EW_IENTRY_I1
#define KIR_EW_IENTRY_OWN KIR_EW_IENTRY_I1
#define KIR_EW_IENTRY_EQN(ID, name)
#define KIR_EW_IENTRY_NONE(ID, name)
const kir_ew_row_fn kir_ew_int_rows[KIR_NUM_PRIMS] = {
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_IENTRY_##eval_int(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
#undef KIR_PRIM
};
