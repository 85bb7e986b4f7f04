/* dot_general: shape/dtype rule (lax semantics) and reference evaluator
 * (XLA:CPU's arithmetic, CBLAS for float GEMMs). */
#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* XLA's HigherPrecisionType ordering, as lax's _dot_general_dtype_rule
 * compares them: (max exponent, mantissa bits, bit width, not unsigned). */
static int kir_dot_rank_cmp(kiln_dtype a, kiln_dtype b) {
  struct props {
    int maxexp, nmant, bits, not_unsigned;
  } p[2];
  kiln_dtype d[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    p[i].maxexp = -1;
    p[i].nmant = -1;
    switch (d[i]) {
      case KILN_F16: p[i].maxexp = 16, p[i].nmant = 10; break;
      case KILN_BF16: p[i].maxexp = 128, p[i].nmant = 7; break;
      case KILN_F32: p[i].maxexp = 128, p[i].nmant = 23; break;
      case KILN_F64: p[i].maxexp = 1024, p[i].nmant = 52; break;
      default: break;
    }
    p[i].bits = kiln_dtype_is_bool(d[i]) ? 1 : (int)kiln_dtype_size(d[i]) * 8;
    p[i].not_unsigned = !kiln_dtype_is_unsigned(d[i]);
  }
  int c[4] = {p[0].maxexp - p[1].maxexp, p[0].nmant - p[1].nmant, p[0].bits - p[1].bits,
              p[0].not_unsigned - p[1].not_unsigned};
  for (int i = 0; i < 4; i++)
    if (c[i]) return c[i] > 0 ? 1 : -1;
  return 0;
}

static kiln_status kir_dot_dtype(const kir_aval *lhs, const kir_aval *rhs, kiln_dtype preferred,
                                 kiln_dtype *out) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  int c = kir_dot_rank_cmp(lhs->dtype, rhs->dtype);
  if (c == 0 && lhs->dtype != rhs->dtype)
    return kcore_fail(KILN_ERR_DTYPE, "dot_general: operand types %s and %s have incompatible dtypes",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  kiln_dtype result = c >= 0 ? lhs->dtype : rhs->dtype;
  if (preferred == KILN_INVALID_DTYPE || preferred == result) {
    *out = result;
    return KILN_OK;
  }
  if (!kiln_dtype_is_valid(preferred))
    return kcore_fail(KILN_ERR_DTYPE, "dot_general: preferred_element_type %d is not a dtype",
                      (int)preferred);
  size_t pbits = kiln_dtype_is_bool(preferred) ? 1 : kiln_dtype_size(preferred) * 8;
  size_t rbits = kiln_dtype_is_bool(result) ? 1 : kiln_dtype_size(result) * 8;
  if (!kiln_dtype_is_float(result) && pbits < rbits)
    return kcore_fail(KILN_ERR_DTYPE,
                      "dot_general: preferred_element_type %s is narrower than the result type %s "
                      "of operands %s and %s",
                      kiln_dtype_name(preferred), kiln_dtype_name(result),
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  *out = preferred;
  return KILN_OK;
}

static bool kir_in(const kir_dims *d, int v) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == v) return true;
  return false;
}

/* Checks one side's dims: in range, distinct, batch and contracting disjoint. */
static kiln_status kir_dot_side(const char *side, const kir_dims *contract, const kir_dims *batch,
                                const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP];
  const kir_dims *lists[2] = {contract, batch};
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < lists[l]->n; i++) {
      int v = lists[l]->v[i];
      if (v < 0 || v >= x->rank)
        return kcore_fail(KILN_ERR_SHAPE, "dot_general: %s %s dimension %d is outside [0, %d) for %s",
                          side, l ? "batch" : "contracting", v, x->rank,
                          kir_aval_str(x, t, sizeof t));
      for (int j = 0; j < i; j++)
        if (lists[l]->v[j] == v)
          return kcore_fail(KILN_ERR_ARGUMENT, "dot_general: %s %s dimensions repeat %d", side,
                            l ? "batch" : "contracting", v);
      if (l == 1 && kir_in(contract, v))
        return kcore_fail(KILN_ERR_ARGUMENT,
                          "dot_general: %s dimension %d is both batch and contracting", side, v);
    }
  }
  return KILN_OK;
}

kiln_status kir_rule_dot_general(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  const kir_dot_dims *d = &params->dot.dimension_numbers;
  const kir_aval *lhs = &in[0], *rhs = &in[1];
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  kiln_status st = kir_dot_side("lhs", &d->lhs_contracting, &d->lhs_batch, lhs);
  if (st == KILN_OK) st = kir_dot_side("rhs", &d->rhs_contracting, &d->rhs_batch, rhs);
  if (st != KILN_OK) return st;
  if (d->lhs_batch.n != d->rhs_batch.n || d->lhs_contracting.n != d->rhs_contracting.n)
    return kcore_fail(KILN_ERR_SHAPE,
                      "dot_general: lhs and rhs need as many batch (%d, %d) and contracting "
                      "(%d, %d) dimensions",
                      d->lhs_batch.n, d->rhs_batch.n, d->lhs_contracting.n, d->rhs_contracting.n);
  for (int i = 0; i < d->lhs_batch.n; i++)
    if (lhs->shape[d->lhs_batch.v[i]] != rhs->shape[d->rhs_batch.v[i]])
      return kcore_fail(KILN_ERR_SHAPE, "dot_general: batch dimensions of %s and %s differ in size",
                        kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  for (int i = 0; i < d->lhs_contracting.n; i++)
    if (lhs->shape[d->lhs_contracting.v[i]] != rhs->shape[d->rhs_contracting.v[i]])
      return kcore_fail(KILN_ERR_SHAPE,
                        "dot_general: contracting dimensions of %s and %s differ in size",
                        kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  int rank = d->lhs_batch.n + (lhs->rank - d->lhs_batch.n - d->lhs_contracting.n) +
             (rhs->rank - d->rhs_batch.n - d->rhs_contracting.n);
  if (rank > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "dot_general: %s . %s would have rank %d > %d",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1), rank,
                      KIR_MAX_RANK);
  kiln_dtype dt = KILN_INVALID_DTYPE;
  st = kir_dot_dtype(lhs, rhs, params->dot.preferred_element_type, &dt);
  if (st != KILN_OK) return st;
  int64_t shape[KIR_MAX_RANK];
  int n = 0;
  for (int i = 0; i < d->lhs_batch.n; i++) shape[n++] = lhs->shape[d->lhs_batch.v[i]];
  for (int i = 0; i < lhs->rank; i++)
    if (!kir_in(&d->lhs_batch, i) && !kir_in(&d->lhs_contracting, i)) shape[n++] = lhs->shape[i];
  for (int i = 0; i < rhs->rank; i++)
    if (!kir_in(&d->rhs_batch, i) && !kir_in(&d->rhs_contracting, i)) shape[n++] = rhs->shape[i];
  return kir_push(out, dt, rank, shape, lhs->weak && rhs->weak);
}

/* ---- reference evaluator ----
 *
 * dot_general as XLA:CPU computes the HLO that JAX lowers it to:
 * - The compute dtype. Operands of different dtypes are converted to the
 *   result dtype first (JAX's lowering does it). Otherwise XLA converts them
 *   to the result dtype only when that ranks above theirs (the ordering
 *   above): bf16 x bf16 -> f32 is an f32 dot and i8 x i8 -> i32 an i32 dot,
 *   while f32 x f32 -> bf16 (or -> i32) is an f32 dot converted afterwards,
 *   and f16 x f16 -> bf16 a bf16 dot of operands rounded to bf16.
 * - f16, bf16 and f32 dots accumulate in f32 (CBLAS sgemm), f64 dots in f64
 *   (dgemm), on operands packed into contiguous [batch, M, K] and
 *   [batch, K, N] arrays, or read in place when already laid out so (maybe
 *   transposed); each result is rounded once. A dot with K = 1 is a plain
 *   product (XLA's too: no sum from +0, so -0 survives). Under XLA's FTZ/DAZ,
 *   subnormal operands read as zero and subnormal results become zero (BLAS
 *   keeps subnormal intermediates: a difference far below any tolerance).
 * - Integer dots wrap in the compute dtype; bool dots are ORs of ANDs.
 * - Conversions as XLA's convert: floats round to nearest even, floats to
 *   integers truncate and saturate (NaN gives 0), integers wrap. */

/* How packed operands and accumulators are held for a compute dtype. */
typedef enum kir_work { KIR_WORK_F32, KIR_WORK_F64, KIR_WORK_BITS } kir_work;

static kir_work kir_work_of(kiln_dtype c) {
  if (c == KILN_F64) return KIR_WORK_F64;
  return kiln_dtype_is_float(c) ? KIR_WORK_F32 : KIR_WORK_BITS;
}

static size_t kir_work_size(kir_work w) {
  return w == KIR_WORK_F32 ? sizeof(float) : sizeof(uint64_t); /* or a double */
}

/* FTZ/DAZ for a float dtype's arithmetic (f16 values are normal in f32). */
static double kir_dot_flush(kiln_dtype d, double v) {
  double tiny = d == KILN_F64 ? DBL_MIN : (d == KILN_F32 || d == KILN_BF16) ? FLT_MIN : 0.0;
  return fabs(v) < tiny ? copysign(0.0, v) : v;
}

/* A float truncated toward zero into a `bits`-wide integer, saturating. */
static uint64_t kir_dot_float_to_int(double v, int bits, bool is_signed) {
  if (isnan(v)) return 0;
  double top = ldexp(1.0, is_signed ? bits - 1 : bits); /* one past the largest value */
  if (!is_signed) {
    if (v <= -1.0) return 0;
    return v >= top ? (bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1) : (uint64_t)v;
  }
  if (v >= top) return (UINT64_C(1) << (bits - 1)) - 1;
  if (v <= -top) return ~((UINT64_C(1) << (bits - 1)) - 1);
  return (uint64_t)(int64_t)v;
}

/* Integer bits wrapped to dtype `to`, sign- or zero-extended. */
static uint64_t kir_dot_wrap(uint64_t u, kiln_dtype to) {
  size_t bits = kiln_dtype_size(to) * 8;
  if (bits >= 64) return u;
  uint64_t mask = (UINT64_C(1) << bits) - 1;
  u &= mask;
  if (kiln_dtype_is_signed(to) && (u >> (bits - 1))) u |= ~mask;
  return u;
}

/* v, a value of dtype `from`, converted to `to`: floats in .f, integers
 * sign- or zero-extended in .u, bool as 0/1. */
static kir_scalar kir_dot_convert(kir_scalar v, kiln_dtype from, kiln_dtype to) {
  bool from_float = kiln_dtype_is_float(from);
  bool from_signed = !from_float && kiln_dtype_is_signed(from);
  kir_scalar r;
  r.u = 0;
  if (from == to) return v;
  if (to == KILN_BOOL) {
    r.u = from_float ? kir_dot_flush(from, v.f) != 0 : v.u != 0;
  } else if (kiln_dtype_is_float(to)) {
    /* Integers round once: straight to f64, or to f32 (exactly so for the
     * narrow integers the rule lets reach f16/bf16), then to the dtype. */
    double x;
    if (from_float) x = kir_dot_flush(from, v.f); /* DAZ */
    else if (to == KILN_F64) x = from_signed ? (double)v.i : (double)v.u;
    else x = from_signed ? (double)(float)v.i : (double)(float)v.u;
    r.f = kir_dot_flush(to, kir_round_to_dtype(to, x));
  } else {
    int bits = (int)kiln_dtype_size(to) * 8;
    bool to_signed = kiln_dtype_is_signed(to);
    r.u = from_float ? kir_dot_float_to_int(v.f, bits, to_signed) : kir_dot_wrap(v.u, to);
  }
  return r;
}

/* Compute dtype of lhs x rhs -> out (see above). */
static kiln_dtype kir_dot_compute_dtype(kiln_dtype lhs, kiln_dtype rhs, kiln_dtype out) {
  if (lhs != rhs) return out;
  return kir_dot_rank_cmp(out, lhs) > 0 ? out : lhs;
}

/* The dims of x that are neither batch nor contracting, ascending. */
static kir_dims kir_free_dims(const kir_aval *x, const kir_dims *batch, const kir_dims *contract) {
  kir_dims f;
  memset(&f, 0, sizeof f);
  for (int d = 0; d < x->rank; d++)
    if (!kir_in(batch, d) && !kir_in(contract, d)) f.v[f.n++] = (int8_t)d;
  return f;
}

/* One operand as a batch of matrices: order[] lists its dims as the batch
 * dims, then those making the rows, then those making the columns. */
typedef struct kir_gemm_side {
  const kir_buffer *buf;
  int order[KIR_MAX_RANK];
  int n_batch, n_rows;
  int64_t rows, cols;
  bool trans; /* read in place, stored as [batch, cols, rows] */
} kir_gemm_side;

static void kir_gemm_side_make(kir_gemm_side *s, const kir_buffer *b, const kir_dims *batch,
                               const kir_dims *rows, const kir_dims *cols) {
  const int64_t *shape = b->aval.shape;
  int n = 0;
  s->buf = b;
  s->n_batch = batch->n;
  s->n_rows = rows->n;
  s->rows = s->cols = 1;
  s->trans = false;
  for (int i = 0; i < batch->n; i++) s->order[n++] = batch->v[i];
  for (int i = 0; i < rows->n; i++) s->rows *= shape[s->order[n++] = rows->v[i]];
  for (int i = 0; i < cols->n; i++) s->cols *= shape[s->order[n++] = cols->v[i]];
}

/* Packs an operand, converted to the compute dtype c, as [batch, rows, cols]. */
static void kir_gemm_pack(const kir_gemm_side *s, kiln_dtype c, void *work) {
  const kir_aval *a = &s->buf->aval;
  int64_t stride[KIR_MAX_RANK], cnt[KIR_MAX_RANK], pstride[KIR_MAX_RANK], idx[KIR_MAX_RANK] = {0};
  int64_t size = 1, off = 0, n = kir_aval_size(a);
  for (int d = a->rank - 1; d >= 0; d--) {
    stride[d] = size;
    size *= a->shape[d];
  }
  for (int i = 0; i < a->rank; i++) {
    cnt[i] = a->shape[s->order[i]];
    pstride[i] = stride[s->order[i]];
  }
  size_t es = kiln_dtype_size(a->dtype);
  kir_work w = kir_work_of(c);
  for (int64_t i = 0; i < n; i++) {
    kir_scalar v = kir_scalar_load(a->dtype, (const char *)s->buf->data + (size_t)off * es);
    v = kir_dot_convert(v, a->dtype, c);
    if (w == KIR_WORK_F32) ((float *)work)[i] = (float)kir_dot_flush(c, v.f);
    else if (w == KIR_WORK_F64) ((double *)work)[i] = kir_dot_flush(c, v.f);
    else ((uint64_t *)work)[i] = v.u;
    for (int d = a->rank - 1; d >= 0; d--) {
      off += pstride[d];
      if (++idx[d] < cnt[d]) break;
      off -= pstride[d] * cnt[d];
      idx[d] = 0;
    }
  }
}

/* any |= the value's magnitude is nonzero and below the smallest normal */
#define KIR_ANY_SUBNORMAL(U, MIN_NORMAL)                                  \
  for (int64_t j = i; j < end; j++) {                                     \
    U u;                                                                  \
    memcpy(&u, d + j * (int64_t)sizeof u, sizeof u);                      \
    u &= (U) ~((U)1 << (sizeof u * 8 - 1));                               \
    any |= (unsigned)(u != 0) & (unsigned)(u < (MIN_NORMAL));             \
  }
/* Whether b (f32 or f64) holds a subnormal: branch-free (vectorised) passes
 * over blocks, the first block with one ends the scan. */
static bool kir_has_subnormal(const kir_buffer *b) {
  enum { BLOCK = 4096 };
  int64_t n = kir_aval_size(&b->aval);
  const unsigned char *d = b->data;
  bool f32 = b->aval.dtype == KILN_F32;
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t end = n - i < BLOCK ? n : i + BLOCK;
    unsigned any = 0;
    if (f32) {
      KIR_ANY_SUBNORMAL(uint32_t, 0x00800000u)
    } else {
      KIR_ANY_SUBNORMAL(uint64_t, 0x0010000000000000ull)
    }
    if (any) return true;
  }
  return false;
}
#undef KIR_ANY_SUBNORMAL

/* Whether BLAS can read s in place: it has the compute dtype (f32 or f64),
 * is laid out [batch, rows, cols] or [batch, cols, rows] (s->trans), and
 * holds no subnormal that DAZ would zero. */
static bool kir_gemm_in_place(kir_gemm_side *s, kiln_dtype c) {
  const kir_aval *a = &s->buf->aval;
  if (a->dtype != c || (c != KILN_F32 && c != KILN_F64)) return false;
  int n_cols = a->rank - s->n_batch - s->n_rows;
  bool direct = true, swapped = true;
  for (int i = 0; i < a->rank; i++) {
    /* where the dim at GEMM position i sits in a [batch, cols, rows] layout */
    int t = i < s->n_batch ? i : i < s->n_batch + s->n_rows ? i + n_cols : i - s->n_rows;
    direct &= s->order[i] == i;
    swapped &= s->order[i] == t;
  }
  if (!direct && !swapped) return false;
  s->trans = !direct;
  return !kir_has_subnormal(s->buf);
}

/* c[i] = op(a[i]) . op(b[i]) for each of nb [m, k] x [k, n] products. */
static void kir_gemm_blas(kir_work w, int64_t nb, int64_t m, int64_t n, int64_t k, const void *a,
                          bool ta, const void *b, bool tb, void *c) {
  enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  blasint bm = (blasint)m, bn = (blasint)n, bk = (blasint)k;
  blasint lda = ta ? bm : bk, ldb = tb ? bk : bn;
  for (int64_t i = 0; i < nb; i++) {
    if (w == KIR_WORK_F32)
      cblas_sgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0f, (const float *)a + i * m * k, lda,
                  (const float *)b + i * k * n, ldb, 0.0f, (float *)c + i * m * n, bn);
    else
      cblas_dgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0, (const double *)a + i * m * k, lda,
                  (const double *)b + i * k * n, ldb, 0.0, (double *)c + i * m * n, bn);
  }
}

/* K = 1: XLA multiplies without summing from +0, so 0 * -1 stays -0. With
 * one column (row), a transposed operand has the same layout. */
static void kir_gemm_k1(kir_work w, int64_t nb, int64_t m, int64_t n, const void *a, const void *b,
                        void *c) {
  for (int64_t i = 0; i < nb * m; i++) {
    int64_t brow = i / m * n;
    for (int64_t j = 0; j < n; j++) {
      if (w == KIR_WORK_F32)
        ((float *)c)[i * n + j] = ((const float *)a)[i] * ((const float *)b)[brow + j];
      else
        ((double *)c)[i * n + j] = ((const double *)a)[i] * ((const double *)b)[brow + j];
    }
  }
}

/* The integer (wrapping) or bool (OR of ANDs) products. */
static void kir_gemm_bits(bool is_bool, int64_t nb, int64_t m, int64_t n, int64_t k,
                          const uint64_t *a, const uint64_t *b, uint64_t *c) {
  for (int64_t i = 0; i < nb * m; i++) {
    const uint64_t *arow = a + i * k, *bmat = b + i / m * k * n;
    uint64_t *crow = c + i * n;
    memset(crow, 0, (size_t)n * sizeof *crow);
    for (int64_t p = 0; p < k; p++) {
      const uint64_t *brow = bmat + p * n;
      for (int64_t j = 0; j < n; j++)
        crow[j] = is_bool ? crow[j] | (arow[p] & brow[j]) : crow[j] + arow[p] * brow[j];
    }
  }
}

/* Subnormals to signed zero, any NaN to the one NaN (U: the float's bits). */
#define KIR_FLUSH_STORE(U, EXP, SIGN, QNAN)                          \
  for (int64_t i = 0; i < n; i++) {                                  \
    U u;                                                             \
    memcpy(&u, (const char *)acc + i * sizeof u, sizeof u);          \
    u = (u & (EXP)) ? u : (u & (SIGN));                              \
    u = (u & ~(U)(SIGN)) > (EXP) ? (QNAN) : u;                       \
    memcpy((char *)dst + i * sizeof u, &u, sizeof u);                \
  }
/* The common stores without the generic per-element conversion: f32 or
 * f64 results stored as themselves (subnormals flushed to signed zero, on
 * the bits, vectorised; acc may be dst) and f32 accumulators rounded to
 * bf16/f16 results (after the flush); a NaN becomes kir_round_to_dtype's
 * one NaN, as on the generic path.
 * False for the rest. */
static bool kir_gemm_store_fast(kir_work w, kiln_dtype c, kiln_dtype p, const void *acc,
                                int64_t n, void *dst) {
  if (c != p) return false;
  if (w == KIR_WORK_F32 && c == KILN_F32) {
    KIR_FLUSH_STORE(uint32_t, 0x7f800000u, 0x80000000u, 0x7fc00000u)
    return true;
  }
  if (w == KIR_WORK_F64 && c == KILN_F64) {
    KIR_FLUSH_STORE(uint64_t, 0x7ff0000000000000ull, 0x8000000000000000ull, 0x7ff8000000000000ull)
    return true;
  }
  if (w == KIR_WORK_F32 && (c == KILN_BF16 || c == KILN_F16)) {
    for (int64_t i = 0; i < n; i++) {
      float f = ((const float *)acc)[i];
      f = isnan(f) ? NAN : fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
      uint16_t h = c == KILN_BF16 ? kiln_f32_to_bf16(f) : kiln_f32_to_f16(f);
      memcpy((char *)dst + i * 2, &h, 2);
    }
    return true;
  }
  return false;
}
#undef KIR_FLUSH_STORE

/* Rounds the accumulators to the compute dtype c and stores them as p. */
static void kir_gemm_store(kir_work w, kiln_dtype c, kiln_dtype p, const void *acc, int64_t n,
                           void *dst) {
  if (kir_gemm_store_fast(w, c, p, acc, n, dst)) return;
  size_t es = kiln_dtype_size(p);
  for (int64_t i = 0; i < n; i++) {
    kir_scalar v;
    if (w == KIR_WORK_BITS) {
      v.u = kir_dot_wrap(((const uint64_t *)acc)[i], c);
    } else {
      v.f = w == KIR_WORK_F32 ? ((const float *)acc)[i] : ((const double *)acc)[i];
      v.f = kir_round_to_dtype(c, kir_dot_flush(c, v.f));
    }
    kir_scalar_store(p, kir_dot_convert(v, c, p), (char *)dst + (size_t)i * es);
  }
}

static kiln_status kir_dot_alloc(const kir_buffer *in, int64_t n, size_t es, void **out) {
  size_t bytes = 0;
  *out = NULL;
  if (kcore_mul_size((size_t)n, es, &bytes)) *out = malloc(bytes ? bytes : 1);
  if (*out) return KILN_OK;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  return kcore_fail(KILN_ERR_OUT_OF_MEMORY,
                    "dot_general: out of host memory for a %lld-element temporary of %s . %s",
                    (long long)n, kir_aval_str(&in[0].aval, t0, sizeof t0),
                    kir_aval_str(&in[1].aval, t1, sizeof t1));
}

static kiln_status kir_eval_dot_general(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                        void *ctx) {
  (void)ctx;
  const kir_dot_dims *dn = &e->params.dot.dimension_numbers;
  kiln_dtype p = out[0].aval.dtype;
  kiln_dtype c = kir_dot_compute_dtype(in[0].aval.dtype, in[1].aval.dtype, p);
  kir_work w = kir_work_of(c);
  size_t ws = kir_work_size(w);
  kir_dims lhs_free = kir_free_dims(&in[0].aval, &dn->lhs_batch, &dn->lhs_contracting);
  kir_dims rhs_free = kir_free_dims(&in[1].aval, &dn->rhs_batch, &dn->rhs_contracting);
  kir_gemm_side a, b;
  kir_gemm_side_make(&a, &in[0], &dn->lhs_batch, &lhs_free, &dn->lhs_contracting);
  kir_gemm_side_make(&b, &in[1], &dn->rhs_batch, &dn->rhs_contracting, &rhs_free);
  int64_t m = a.rows, k = a.cols, n = b.cols, total = kir_aval_size(&out[0].aval);
  if (total == 0) return KILN_OK;
  int64_t nb = total / (m * n);
  if (w != KIR_WORK_BITS && (m > INT_MAX || n > INT_MAX || k > INT_MAX)) {
    char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "dot_general: %s . %s has a GEMM dimension (M=%lld, N=%lld, K=%lld) beyond "
                      "BLAS's int range",
                      kir_aval_str(&in[0].aval, t0, sizeof t0),
                      kir_aval_str(&in[1].aval, t1, sizeof t1), (long long)m, (long long)n,
                      (long long)k);
  }
  void *pa = NULL, *pb = NULL, *acc = NULL;
  const void *ra = in[0].data, *rb = in[1].data;
  bool direct_out = p == c && (c == KILN_F32 || c == KILN_F64); /* BLAS writes out[0] */
  void *rc = out[0].data;
  kiln_status st = KILN_OK;
  if (k > 0 && !kir_gemm_in_place(&a, c)) {
    if ((st = kir_dot_alloc(in, nb * m * k, ws, &pa)) != KILN_OK) goto done;
    kir_gemm_pack(&a, c, pa);
    ra = pa;
  }
  if (k > 0 && !kir_gemm_in_place(&b, c)) {
    if ((st = kir_dot_alloc(in, nb * k * n, ws, &pb)) != KILN_OK) goto done;
    kir_gemm_pack(&b, c, pb);
    rb = pb;
  }
  if (!direct_out) {
    if ((st = kir_dot_alloc(in, total, ws, &acc)) != KILN_OK) goto done;
    rc = acc;
  }
  if (k == 0) memset(rc, 0, (size_t)total * ws); /* all-zero bits: 0, 0.0 and false */
  else if (w == KIR_WORK_BITS) kir_gemm_bits(c == KILN_BOOL, nb, m, n, k, ra, rb, rc);
  else if (k == 1) kir_gemm_k1(w, nb, m, n, ra, rb, rc);
  else kir_gemm_blas(w, nb, m, n, k, ra, a.trans, rb, b.trans, rc);
  /* Every result is rounded and flushed into place, BLAS's direct ones too. */
  kir_gemm_store(w, c, p, rc, total, out[0].data);
done:
  free(pa);
  free(pb);
  free(acc);
  return st;
}

void kir_dot_evals(kir_eval_table *t) { t->fn[KIR_PRIM_DOT_GENERAL] = kir_eval_dot_general; }
