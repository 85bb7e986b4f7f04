/* Abstract values, scalar literals and the kir_avals list rules fill. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

kir_aval kir_aval_make(kiln_dtype dtype, int rank, const int64_t *shape, bool weak) {
  kir_aval a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.rank = rank;
  a.weak = weak;
  for (int i = 0; shape && i < rank && i < KIR_MAX_RANK; i++) a.shape[i] = shape[i];
  return a;
}

kiln_status kir_aval_check(const char *op, const kir_aval *a) {
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "%s: aval is NULL", op);
  if (!kiln_dtype_is_valid(a->dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d", op, (int)a->dtype);
  if (a->rank < 0 || a->rank > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: rank %d is outside [0, %d]", op, a->rank, KIR_MAX_RANK);
  for (int i = 0; i < a->rank; i++) {
    if (a->shape[i] < 0) {
      char t[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "%s: dimension %d of %s is negative", op, i,
                        kir_aval_str(a, t, sizeof t));
    }
  }
  return KILN_OK;
}

bool kir_aval_same_shape(const kir_aval *a, const kir_aval *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

bool kir_aval_typematch(const kir_aval *a, const kir_aval *b) {
  return a->dtype == b->dtype && kir_aval_same_shape(a, b);
}

bool kir_aval_equal(const kir_aval *a, const kir_aval *b) {
  return kir_aval_typematch(a, b) && a->weak == b->weak;
}

int64_t kir_aval_size(const kir_aval *a) {
  int64_t n = 1;
  for (int i = 0; i < a->rank; i++) n *= a->shape[i];
  return n;
}

char *kir_aval_str(const kir_aval *a, char *buf, size_t cap) {
  if (cap == 0) return buf;
  int n = snprintf(buf, cap, "%s", a->weak ? "~" : "");
  if (n < 0 || (size_t)n >= cap) return buf;
  int rank = a->rank < 0 ? 0 : a->rank > KIR_MAX_RANK ? KIR_MAX_RANK : a->rank;
  kcore_format_type(a->dtype, rank, a->shape, buf + n, cap - (size_t)n);
  return buf;
}

/* ---- scalars ---- */

void kir_scalar_store(kiln_dtype dtype, kir_scalar v, void *dst) {
  switch (dtype) {
    case KILN_BOOL: { uint8_t x = v.i != 0; memcpy(dst, &x, 1); break; }
    case KILN_I8: { int8_t x = (int8_t)v.i; memcpy(dst, &x, 1); break; }
    case KILN_I16: { int16_t x = (int16_t)v.i; memcpy(dst, &x, 2); break; }
    case KILN_I32: { int32_t x = (int32_t)v.i; memcpy(dst, &x, 4); break; }
    case KILN_I64: memcpy(dst, &v.i, 8); break;
    case KILN_U8: { uint8_t x = (uint8_t)v.u; memcpy(dst, &x, 1); break; }
    case KILN_U16: { uint16_t x = (uint16_t)v.u; memcpy(dst, &x, 2); break; }
    case KILN_U32: { uint32_t x = (uint32_t)v.u; memcpy(dst, &x, 4); break; }
    case KILN_U64: memcpy(dst, &v.u, 8); break;
    case KILN_F16: { uint16_t x = kiln_f32_to_f16((float)v.f); memcpy(dst, &x, 2); break; }
    case KILN_BF16: { uint16_t x = kiln_f32_to_bf16((float)v.f); memcpy(dst, &x, 2); break; }
    case KILN_F32: { float x = (float)v.f; memcpy(dst, &x, 4); break; }
    case KILN_F64: memcpy(dst, &v.f, 8); break;
    default: KCORE_ASSERT(!"kir_scalar_store: invalid dtype");
  }
}

kir_scalar kir_scalar_load(kiln_dtype dtype, const void *src) {
  kir_scalar s;
  s.u = 0;
  switch (dtype) {
    case KILN_BOOL: { uint8_t x; memcpy(&x, src, 1); s.i = x != 0; break; }
    case KILN_I8: { int8_t x; memcpy(&x, src, 1); s.i = x; break; }
    case KILN_I16: { int16_t x; memcpy(&x, src, 2); s.i = x; break; }
    case KILN_I32: { int32_t x; memcpy(&x, src, 4); s.i = x; break; }
    case KILN_I64: memcpy(&s.i, src, 8); break;
    case KILN_U8: { uint8_t x; memcpy(&x, src, 1); s.u = x; break; }
    case KILN_U16: { uint16_t x; memcpy(&x, src, 2); s.u = x; break; }
    case KILN_U32: { uint32_t x; memcpy(&x, src, 4); s.u = x; break; }
    case KILN_U64: memcpy(&s.u, src, 8); break;
    case KILN_F16: { uint16_t x; memcpy(&x, src, 2); s.f = kiln_f16_to_f32(x); break; }
    case KILN_BF16: { uint16_t x; memcpy(&x, src, 2); s.f = kiln_bf16_to_f32(x); break; }
    case KILN_F32: { float x; memcpy(&x, src, 4); s.f = x; break; }
    case KILN_F64: memcpy(&s.f, src, 8); break;
    default: KCORE_ASSERT(!"kir_scalar_load: invalid dtype");
  }
  return s;
}

bool kir_scalar_equal(kiln_dtype dtype, kir_scalar a, kir_scalar b) {
  if (kiln_dtype_is_float(dtype)) return memcmp(&a.f, &b.f, sizeof a.f) == 0;
  return a.u == b.u;
}

/* ---- kir_avals ---- */

void kir_avals_init(kir_avals *a) {
  a->n = 0;
  a->cap = (int)(sizeof a->small / sizeof a->small[0]);
  a->v = a->small;
}

void kir_avals_free(kir_avals *a) {
  if (a->v != a->small) free(a->v);
  kir_avals_init(a);
}

kiln_status kir_avals_push(kir_avals *a, const kir_aval *v) {
  if (a->n == a->cap) {
    int cap = a->cap * 2;
    kir_aval *nv = malloc((size_t)cap * sizeof *nv);
    if (!nv) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_avals_push: out of memory");
    memcpy(nv, a->v, (size_t)a->n * sizeof *nv);
    if (a->v != a->small) free(a->v);
    a->v = nv;
    a->cap = cap;
  }
  a->v[a->n++] = *v;
  return KILN_OK;
}

/* ---- rounding literals to their dtype ---- */

/* Rounds d into a 16-bit float format. Going through f32 alone could round
 * twice, so the f32 route's answer is checked against its neighbour on d's
 * side and the nearer one (ties to even) wins. */
static double kir_round_half(double d, uint16_t (*to)(float), float (*from)(uint16_t)) {
  if (isnan(d)) return d;
  uint16_t h = to((float)d);
  double a = from(h);
  if (a == d) return a;
  uint16_t sign = h & 0x8000u, mag = h & 0x7fffu;
  if (isinf(a)) {
    /* Overflowed: IEEE rounds to infinity from max + half an ulp on. */
    double max = from((uint16_t)(sign | (mag - 1)));
    double prev = from((uint16_t)(sign | (mag - 2)));
    return fabs(d) >= fabs(max) + (fabs(max) - fabs(prev)) / 2 ? a : max;
  }
  uint16_t other = fabs(d) > fabs(a) ? (uint16_t)(mag + 1) : (uint16_t)(mag - 1);
  double b = from((uint16_t)(sign | other));
  if (isinf(b)) return a; /* a is the largest finite value and d below its rounding edge */
  double da = fabs(d - a), db = fabs(d - b);
  if (db < da || (db == da && (other & 1u) == 0)) return b;
  return a;
}

double kir_round_to_dtype(kiln_dtype dtype, double v) {
  /* One NaN: literals print as "nan" (as JAX does), so the sign and payload
   * of a NaN could not survive the text form anyway. */
  if (isnan(v)) return NAN;
  switch (dtype) {
    case KILN_F16: return kir_round_half(v, kiln_f32_to_f16, kiln_f16_to_f32);
    case KILN_BF16: return kir_round_half(v, kiln_f32_to_bf16, kiln_bf16_to_f32);
    case KILN_F32: return (double)(float)v;
    default: return v;
  }
}
