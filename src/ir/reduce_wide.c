/* Widened values for the reduction evaluators: monoids and their identities,
 * widening and narrowing, temporaries, transposes and lines (reduce_eval.h). */
#include <stdlib.h>
#include <string.h>

#include "ir/reduce_eval.h"

kir_op kir_reduce_op(kir_prim p) {
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

kir_monoid kir_monoid_make(kir_op op, kiln_dtype dt) {
  kir_monoid m = {op, dt, kiln_dtype_is_float(dt), false, 0.0};
  m.is_signed = !m.is_float && kiln_dtype_is_signed(dt);
  if (dt == KILN_F32 || dt == KILN_BF16) m.tiny = FLT_MIN;
  if (dt == KILN_F64) m.tiny = DBL_MIN;
  return m;
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
kir_wide kir_identity(const kir_monoid *m) {
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
void kir_widen(kiln_dtype dt, const void *src, int64_t n, int64_t stride, kir_wide *w) {
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
void kir_narrow(kiln_dtype dt, const kir_wide *w, int64_t n, void *dst) {
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

kiln_status kir_wide_alloc(const kir_eqn *e, int64_t n, kir_wide **out) {
  size_t bytes = 0;
  *out = NULL;
  if (n >= 0 && kcore_mul_size((size_t)n, sizeof **out, &bytes)) *out = malloc(bytes ? bytes : 1);
  if (!*out)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld temporary values",
                      kir_prim_name(e->prim), (long long)n);
  return KILN_OK;
}

/* Widens buffer b into a new array. */
kiln_status kir_wide_load(const kir_eqn *e, const kir_buffer *b, kir_wide **out) {
  int64_t n = kir_aval_size(&b->aval);
  kiln_status st = kir_wide_alloc(e, n, out);
  if (st == KILN_OK) kir_widen(b->aval.dtype, b->data, n, 1, *out);
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

void kir_transpose_wide(const kir_wide *src, kir_wide *dst, int64_t outer, int64_t rows,
                               int64_t cols) {
  KIR_TRANSPOSE(kir_wide);
}

/* The same on raw elements of elem_size bytes. */
void kir_transpose_raw(size_t elem_size, const void *src, void *dst, int64_t outer,
                              int64_t rows, int64_t cols) {
  switch (elem_size) {
    case 1: KIR_TRANSPOSE(uint8_t); break;
    case 2: KIR_TRANSPOSE(uint16_t); break;
    case 4: KIR_TRANSPOSE(uint32_t); break;
    default: KIR_TRANSPOSE(uint64_t); break;
  }
}
#undef KIR_TRANSPOSE

kir_lines kir_lines_make(const kir_aval *a, int axis) {
  kir_lines l = {1, a->shape[axis], 1};
  for (int d = 0; d < axis; d++) l.outer *= a->shape[d];
  for (int d = axis + 1; d < a->rank; d++) l.inner *= a->shape[d];
  return l;
}
