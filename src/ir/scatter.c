/* The update computations of the scatter family (scatter, scatter-add,
 * scatter-mul, scatter-min, scatter-max): what one update element does to
 * the operand element it lands on. shape_ops.c walks the windows (shared
 * with gather); this file only combines. Each combine rounds once, as XLA's
 * scatter computation does (f16/bf16 through f32); integers wrap (two's
 * complement makes signed and unsigned add/mul the same bits); min/max
 * propagate NaN like lax.min/lax.max, and on bool they are and/or. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

unsigned kir_scatter_dtypes(kir_prim prim) {
  /* lax's add and mul do not take bool; set, min and max take any dtype. */
  return prim == KIR_PRIM_SCATTER_ADD || prim == KIR_PRIM_SCATTER_MUL ? KIR_DT_NUM : KIR_DT_ANY;
}

/* Whether min/max of the operand's element a and the update b is b: NaN
 * propagates (the operand's first), and -0 orders below +0, as XLA's. */
static bool kir_takes_update(kir_prim prim, double a, double b) {
  if (isnan(a) || isnan(b)) return !isnan(a);
  if (a == b) return signbit(a) != signbit(b) && (prim == KIR_PRIM_SCATTER_MIN) == !!signbit(b);
  return prim == KIR_PRIM_SCATTER_MIN ? b < a : b > a;
}

/* Half floats keep one of the two bit patterns, so min/max never round. */
typedef float (*kir_half_to_f32)(uint16_t);
static uint16_t kir_half_pick(kir_prim prim, kir_half_to_f32 f, uint16_t a, uint16_t b) {
  return kir_takes_update(prim, f(a), f(b)) ? b : a;
}

/* dst[i] = EXPR(a = dst[i], b = src[i]) for the row, then return. */
#define KIR_ROW(T, EXPR)                                        \
  do {                                                          \
    for (int64_t i = 0; i < n; i++) {                           \
      T a, b;                                                   \
      memcpy(&a, dst + i * ds * (int64_t)sizeof(T), sizeof(T)); \
      memcpy(&b, src + i * ss * (int64_t)sizeof(T), sizeof(T)); \
      a = (T)(EXPR);                                            \
      memcpy(dst + i * ds * (int64_t)sizeof(T), &a, sizeof(T)); \
    }                                                           \
    return;                                                     \
  } while (0)

/* The four arithmetic ops over one C type. */
#define KIR_ARITH(T)                                       \
  switch (prim) {                                          \
    case KIR_PRIM_SCATTER_ADD: KIR_ROW(T, a + b);          \
    case KIR_PRIM_SCATTER_MUL: KIR_ROW(T, a * b);          \
    case KIR_PRIM_SCATTER_MIN: KIR_ROW(T, b < a ? b : a);  \
    case KIR_PRIM_SCATTER_MAX: KIR_ROW(T, b > a ? b : a);  \
    default: KCORE_ASSERT(!"kir_scatter_row: prim");       \
  }                                                        \
  return

static void kir_int_row(kir_prim prim, kiln_dtype dt, char *dst, int64_t ds, const char *src,
                        int64_t ss, int64_t n) {
  switch (dt) {
    case KILN_I8: KIR_ARITH(int8_t);
    case KILN_U8: KIR_ARITH(uint8_t);
    case KILN_I16: KIR_ARITH(int16_t);
    case KILN_U16: KIR_ARITH(uint16_t);
    case KILN_I32: KIR_ARITH(int32_t);
    case KILN_U32: KIR_ARITH(uint32_t);
    case KILN_I64: KIR_ARITH(int64_t);
    case KILN_U64: KIR_ARITH(uint64_t);
    default: KCORE_ASSERT(!"kir_scatter_row: dtype");
  }
}

/* Signed integer add/mul must not overflow in C: do them unsigned. */
static void kir_wrapping_row(kir_prim prim, kiln_dtype dt, char *dst, int64_t ds, const char *src,
                             int64_t ss, int64_t n) {
  kiln_dtype u = dt == KILN_I8 ? KILN_U8 : dt == KILN_I16 ? KILN_U16 : dt == KILN_I32 ? KILN_U32
               : dt == KILN_I64 ? KILN_U64 : dt;
  if (u == KILN_U8 || u == KILN_U16) {
    /* int promotion: multiply in 32 bits unsigned, then truncate. */
    if (u == KILN_U8) {
      if (prim == KIR_PRIM_SCATTER_ADD) KIR_ROW(uint8_t, (uint32_t)a + b);
      KIR_ROW(uint8_t, (uint32_t)a * b);
    }
    if (prim == KIR_PRIM_SCATTER_ADD) KIR_ROW(uint16_t, (uint32_t)a + b);
    KIR_ROW(uint16_t, (uint32_t)a * b);
  }
  kir_int_row(prim, u, dst, ds, src, ss, n);
}

void kir_scatter_row(kir_prim prim, kiln_dtype dt, char *dst, int64_t ds, const char *src,
                     int64_t ss, int64_t n) {
  if (prim == KIR_PRIM_SCATTER) {
    size_t es = kiln_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * (int64_t)es, src + i * ss * (int64_t)es, es);
    return;
  }
  bool minmax = prim == KIR_PRIM_SCATTER_MIN || prim == KIR_PRIM_SCATTER_MAX;
  switch (dt) {
    case KILN_BOOL:
      KCORE_ASSERT(minmax);
      if (prim == KIR_PRIM_SCATTER_MIN) KIR_ROW(uint8_t, a & b);
      KIR_ROW(uint8_t, a | b);
    case KILN_F32:
      if (minmax) KIR_ROW(float, kir_takes_update(prim, a, b) ? b : a);
      KIR_ARITH(float);
    case KILN_F64:
      if (minmax) KIR_ROW(double, kir_takes_update(prim, a, b) ? b : a);
      KIR_ARITH(double);
    case KILN_F16:
      if (minmax) KIR_ROW(uint16_t, kir_half_pick(prim, kcore_f16_to_f32, a, b));
      if (prim == KIR_PRIM_SCATTER_ADD)
        KIR_ROW(uint16_t, kcore_f32_to_f16(kcore_f16_to_f32(a) + kcore_f16_to_f32(b)));
      KIR_ROW(uint16_t, kcore_f32_to_f16(kcore_f16_to_f32(a) * kcore_f16_to_f32(b)));
    case KILN_BF16:
      if (minmax) KIR_ROW(uint16_t, kir_half_pick(prim, kcore_bf16_to_f32, a, b));
      if (prim == KIR_PRIM_SCATTER_ADD)
        KIR_ROW(uint16_t, kcore_f32_to_bf16(kcore_bf16_to_f32(a) + kcore_bf16_to_f32(b)));
      KIR_ROW(uint16_t, kcore_f32_to_bf16(kcore_bf16_to_f32(a) * kcore_bf16_to_f32(b)));
    default:
      if (minmax)
        kir_int_row(prim, dt, dst, ds, src, ss, n);
      else
        kir_wrapping_row(prim, dt, dst, ds, src, ss, n);
  }
}
