/* Public random ops: jax.random's threefry functions written out as IR, so
 * that traced draws are JAX's bit for bit (src/prng is their host
 * reference). Everything follows jax_threefry_partitionable=True, JAX's
 * default: element i (row-major) of any draw comes from the threefry2x32
 * block of the key and the 64-bit counter i, so any slice of a draw can be
 * computed on its own. Keys are u32[2] values, the raw jax.random.PRNGKey.
 *
 * Where XLA:CPU rounds differently from the plain IR ops (the fused
 * multiply-add of uniform's u * span + lo, half-precision arithmetic done in
 * f32), the ops below spell XLA's rounding out, so that every backend that
 * runs the IR as written gets JAX's bits. */
#include <math.h>
#include <string.h>
#include "prng/prng.h"
#include "trace/trace.h"

/* ---- small emitters (errors name the public op) ---- */

static kir_params ktr_params0(void) {
  kir_params p;
  memset(&p, 0, sizeof p);
  return p;
}

static kiln_val *ktr_lit_u(kiln_trace *t, kiln_dtype dtype, uint64_t v) {
  return ktr_literal(t, dtype, false, kir_scalar_u(v));
}

static kiln_val *ktr_lit_f(kiln_trace *t, kiln_dtype dtype, double v) {
  return ktr_literal(t, dtype, false, kir_scalar_f(v));
}

/* The value a float literal holds after rounding to its dtype. */
static double ktr_lit_value(const kiln_val *v) { return v->trace->prog->vars[v->vid].u.literal.f; }

static kiln_val *ktr_op2(kiln_trace *t, const char *op, kir_prim prim, kiln_val *a, kiln_val *b) {
  kiln_val *in[2] = {a, b};
  return ktr_bind(t, op, prim, NULL, 2, in, 1, NULL);
}

/* lax.select_n(which, on_false, on_true) */
static kiln_val *ktr_select(kiln_trace *t, const char *op, kiln_val *which, kiln_val *on_false,
                            kiln_val *on_true) {
  kiln_val *in[3] = {which, on_false, on_true};
  return ktr_bind(t, op, KIR_PRIM_SELECT_N, NULL, 3, in, 1, NULL);
}

static kiln_val *ktr_to(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype dtype) {
  return ktr_convert(t, op, x, dtype, false);
}

static kiln_val *ktr_bitcast_to(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype dtype) {
  kir_params p = ktr_params0();
  p.bitcast.new_dtype = dtype;
  return ktr_bind(t, op, KIR_PRIM_BITCAST_CONVERT_TYPE, &p, 1, &x, 1, NULL);
}

/* a and b (of one type) stacked along a new last axis: jnp.stack(axis=-1). */
static kiln_val *ktr_stack2(kiln_trace *t, const char *op, kiln_val *a, kiln_val *b) {
  if (!ktr_ok(t, op, 2, (kiln_val *[]){a, b})) return NULL;
  int axis = ktr_aval(a)->rank;
  kir_params p = ktr_params0();
  p.dims.dimensions.n = 1;
  p.dims.dimensions.v[0] = (int8_t)axis;
  kiln_val *v[2] = {ktr_bind(t, op, KIR_PRIM_EXPAND_DIMS, &p, 1, &a, 1, NULL),
                    ktr_bind(t, op, KIR_PRIM_EXPAND_DIMS, &p, 1, &b, 1, NULL)};
  p = ktr_params0();
  p.concatenate.dimension = axis;
  return ktr_bind(t, op, KIR_PRIM_CONCATENATE, &p, 2, v, 1, NULL);
}

/* ---- argument checks ---- */

/* A single key: u32[2]. Key arrays are for kiln_vmap, as in JAX. */
static bool ktr_key_ok(kiln_trace *t, const char *op, kiln_val *key) {
  if (!ktr_ok(t, op, 1, &key)) return false;
  const kir_aval *a = ktr_aval(key);
  if (a->dtype == KILN_U32 && a->rank == 1 && a->shape[0] == 2) return true;
  char ty[KIR_AVAL_STR_CAP];
  ktr_failf(t, a->dtype != KILN_U32 ? KILN_ERR_DTYPE : KILN_ERR_SHAPE,
            "%s: the key must be a single u32[2] key (a raw jax.random.PRNGKey), got %s%s", op,
            kir_aval_str(a, ty, sizeof ty),
            a->dtype == KILN_U32 && a->rank > 1 ? "; map over key arrays with kiln_vmap" : "");
  return false;
}

/* A valid shape for a draw of dtype; its element count goes to *count. */
static bool ktr_draw_shape_ok(kiln_trace *t, const char *op, kiln_dtype dtype, int rank,
                              const int64_t *shape, int64_t *count) {
  kiln_status st = kcore_shape_bytes(op, dtype, rank, shape, count, NULL);
  if (st) ktr_fail(t, st);
  return st == KILN_OK;
}

static bool ktr_float_ok(kiln_trace *t, const char *op, kiln_dtype dtype) {
  if (dtype == KILN_F16 || dtype == KILN_BF16 || dtype == KILN_F32 || dtype == KILN_F64)
    return true;
  if (!kiln_dtype_is_valid(dtype))
    ktr_failf(t, KILN_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  else
    ktr_failf(t, KILN_ERR_DTYPE, "%s: dtype %s is not float16, bfloat16, float32 or float64", op,
              kiln_dtype_name(dtype));
  return false;
}

/* ---- the partitionable core ---- */

/* JAX's iota_2x32_shape: each element's row-major index as a 64-bit counter
 * split into (high, low) u32 words. Up to 2^32 elements the high word is 0
 * (a literal, broadcast by threefry2x32) and the low one a reshaped iota;
 * beyond, a u64 iota is split. A scalar's counter is (0, 0). */
static bool ktr_counters(kiln_trace *t, const char *op, int rank, const int64_t *shape,
                         int64_t count, kiln_val **hi, kiln_val **lo) {
  if (rank == 0) {
    *hi = ktr_lit_u(t, KILN_U32, 0);
    *lo = ktr_lit_u(t, KILN_U32, 0);
    return *hi && *lo;
  }
  const bool wide = count > ((int64_t)1 << 32);
  kir_params p = ktr_params0();
  p.iota.dtype = wide ? KILN_U64 : KILN_U32;
  p.iota.shape.n = 1;
  p.iota.shape.v[0] = count;
  kiln_val *c = ktr_bind(t, op, KIR_PRIM_IOTA, &p, 0, NULL, 1, NULL);
  if (c && rank != 1) {
    p = ktr_params0();
    p.reshape.new_sizes.n = rank;
    memcpy(p.reshape.new_sizes.v, shape, (size_t)rank * sizeof *shape);
    c = ktr_bind(t, op, KIR_PRIM_RESHAPE, &p, 1, &c, 1, NULL);
  }
  if (!wide) {
    *hi = ktr_lit_u(t, KILN_U32, 0);
    *lo = c;
  } else {
    kiln_val *high = ktr_op2(t, op, KIR_PRIM_SHIFT_RIGHT_LOGICAL, c, ktr_lit_u(t, KILN_U64, 32));
    *hi = ktr_to(t, op, high, KILN_U32);
    *lo = ktr_to(t, op, c, KILN_U32); /* truncates to the low word */
  }
  return *hi && *lo;
}

/* Key word i as a scalar: JAX's `k1, k2 = key`. */
static kiln_val *ktr_key_word(kiln_trace *t, const char *op, kiln_val *key, int i) {
  kir_params p = ktr_params0();
  p.slice.start_indices = (kir_sizes){1, {i}};
  p.slice.limit_indices = (kir_sizes){1, {i + 1}};
  p.slice.strides = (kir_sizes){1, {1}};
  kiln_val *w = ktr_bind(t, op, KIR_PRIM_SLICE, &p, 1, &key, 1, NULL);
  p = ktr_params0();
  p.dims.dimensions.n = 1;
  return ktr_bind(t, op, KIR_PRIM_SQUEEZE, &p, 1, &w, 1, NULL);
}

/* The threefry2x32 blocks of the key and every element's counter: two u32
 * arrays of `shape` (y[0] from the counter's high word, y[1] the low). */
static bool ktr_blocks(kiln_trace *t, const char *op, kiln_val *key, int rank, const int64_t *shape,
                       int64_t count, kiln_val *y[2]) {
  kiln_val *in[4];
  in[0] = ktr_key_word(t, op, key, 0);
  in[1] = ktr_key_word(t, op, key, 1);
  if (!in[0] || !in[1] || !ktr_counters(t, op, rank, shape, count, &in[2], &in[3])) return false;
  return ktr_bind(t, op, KIR_PRIM_THREEFRY2X32, NULL, 4, in, 2, y) != NULL;
}

static kiln_dtype ktr_uint_of_width(int bits) {
  switch (bits) {
    case 8: return KILN_U8;
    case 16: return KILN_U16;
    case 32: return KILN_U32;
    case 64: return KILN_U64;
    default: return KILN_INVALID_DTYPE;
  }
}

/* jax.random.bits: the two words xor'ed (narrow widths keep the low bits),
 * or joined high:low for 64 bits. */
static kiln_val *ktr_bits(kiln_trace *t, const char *op, kiln_val *key, int width, int rank,
                          const int64_t *shape, int64_t count) {
  kiln_val *y[2];
  if (!ktr_blocks(t, op, key, rank, shape, count, y)) return NULL;
  if (width == 64) {
    kiln_val *hi = ktr_to(t, op, y[0], KILN_U64), *lo = ktr_to(t, op, y[1], KILN_U64);
    hi = ktr_op2(t, op, KIR_PRIM_SHIFT_LEFT, hi, ktr_lit_u(t, KILN_U64, 32));
    return ktr_op2(t, op, KIR_PRIM_OR, hi, lo);
  }
  kiln_val *x = ktr_op2(t, op, KIR_PRIM_XOR, y[0], y[1]);
  return width == 32 ? x : ktr_to(t, op, x, ktr_uint_of_width(width));
}

/* ---- uniform floats ---- */

static int ktr_mantissa_bits(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_F16: return 10;
    case KILN_BF16: return 7;
    case KILN_F32: return 23;
    default: return 52;
  }
}

/* jax.random._uniform's floats in [0, 1): the top random bits become the
 * mantissa of a number in [1, 2), less 1 (exact). JAX draws at least 8
 * bits, so bf16 widens an 8-bit draw. */
static kiln_val *ktr_unit(kiln_trace *t, const char *op, kiln_val *key, kiln_dtype dtype, int rank,
                          const int64_t *shape, int64_t count) {
  const int nbits = (int)kiln_dtype_size(dtype) * 8, nmant = ktr_mantissa_bits(dtype);
  const int rng_bits = nmant < 8 ? 8 : nbits;
  const kiln_dtype udt = ktr_uint_of_width(nbits);
  kiln_val *b = ktr_bits(t, op, key, rng_bits, rank, shape, count);
  if (rng_bits != nbits) b = ktr_to(t, op, b, udt);
  b = ktr_op2(t, op, KIR_PRIM_SHIFT_RIGHT_LOGICAL, b,
              ktr_lit_u(t, udt, (uint64_t)(rng_bits - nmant)));
  /* 1.0's bits: the exponent bias alone. */
  const uint64_t one = (((uint64_t)1 << (nbits - nmant - 2)) - 1) << nmant;
  b = ktr_op2(t, op, KIR_PRIM_OR, b, ktr_lit_u(t, udt, one));
  kiln_val *f = ktr_bitcast_to(t, op, b, dtype);
  return ktr_op2(t, op, KIR_PRIM_SUB, f, ktr_lit_f(t, dtype, 1.0));
}

/* maxval - minval in dtype as XLA computes it: half types subtract in f32
 * and round to their own format. */
static double ktr_span(kiln_dtype dtype, double lo, double hi) {
  if (dtype == KILN_F64) return hi - lo;
  float d = (float)hi - (float)lo; /* exact inputs: one f32 rounding */
  return d;
}

/* ---- uniform's multiply-add, rounded once ----
 *
 * XLA:CPU fuses u * span + lo into one FMA for f16 (in f32), f32 and f64;
 * the IR rounds after every op. Where u * span is exact the two agree.
 * Elsewhere the fused result is built from exact steps: Knuth's TwoSum
 * (a sum and its rounding error), products of split operands (each part
 * exact), and rounding to odd, after which a rounding to nearest behaves as
 * if applied to the exact value (S. Boldo, G. Melquiond, "Emulation of FMA
 * and correctly rounded sums: proved algorithms using rounding to odd",
 * IEEE Trans. Computers 57(4), 2008). This relies on each IR op rounding on
 * its own, as the IR defines it (no contraction of an inexact product). */

static double ktr_min_normal(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_F16: return 0x1p-14;
    case KILN_F32:
    case KILN_BF16: return 0x1p-126;
    default: return 0x1p-1022;
  }
}

/* True when u * span is exact in dtype for every u in [0, 1) on the
 * mantissa grid: a power-of-two span no smaller than the smallest normal
 * (or 0, or not finite). A fused multiply-add then rounds like the
 * separate ops. */
static bool ktr_exact_scale(kiln_dtype dtype, double span) {
  if (!isfinite(span) || span == 0) return true;
  int e;
  double m = frexp(fabs(span), &e);
  return m == 0.5 && fabs(span) >= ktr_min_normal(dtype);
}

/* Knuth's TwoSum: s = RN(a + b) and e = (a + b) - s, exactly. */
static void ktr_two_sum(kiln_trace *t, const char *op, kiln_val *a, kiln_val *b, kiln_val **s,
                        kiln_val **e) {
  *s = ktr_op2(t, op, KIR_PRIM_ADD, a, b);
  kiln_val *b_part = ktr_op2(t, op, KIR_PRIM_SUB, *s, a);
  kiln_val *a_part = ktr_op2(t, op, KIR_PRIM_SUB, *s, b_part);
  *e = ktr_op2(t, op, KIR_PRIM_ADD, ktr_op2(t, op, KIR_PRIM_SUB, a, a_part),
               ktr_op2(t, op, KIR_PRIM_SUB, b, b_part));
}

/* a + b rounded to odd in f64: RN(a + b) when exact or odd in its last
 * bit, else its neighbour towards a + b. */
static kiln_val *ktr_round_odd_sum(kiln_trace *t, const char *op, kiln_val *a, kiln_val *b) {
  kiln_val *s, *e;
  ktr_two_sum(t, op, a, b, &s, &e);
  kiln_val *bits = ktr_bitcast_to(t, op, s, KILN_U64);
  kiln_val *zero = ktr_lit_f(t, KILN_F64, 0.0), *one = ktr_lit_u(t, KILN_U64, 1);
  kiln_val *even = ktr_op2(t, op, KIR_PRIM_EQ, ktr_op2(t, op, KIR_PRIM_AND, bits, one),
                           ktr_lit_u(t, KILN_U64, 0));
  kiln_val *fix = ktr_op2(t, op, KIR_PRIM_AND, even, ktr_op2(t, op, KIR_PRIM_NE, e, zero));
  /* Towards a + b is up in magnitude (bits + 1) when e has the sum's sign. */
  kiln_val *outward = ktr_op2(t, op, KIR_PRIM_EQ, ktr_op2(t, op, KIR_PRIM_GT, e, zero),
                              ktr_op2(t, op, KIR_PRIM_GT, s, zero));
  kiln_val *moved = ktr_select(t, op, outward, ktr_op2(t, op, KIR_PRIM_SUB, bits, one),
                               ktr_op2(t, op, KIR_PRIM_ADD, bits, one));
  return ktr_bitcast_to(t, op, ktr_select(t, op, fix, bits, moved), KILN_F64);
}

/* f32: in f64, u * span is exact (24 + 24 bits); rounding the sum to odd
 * at 53 bits and then to nearest at 24 rounds once (53 >= 24 + 2). */
static kiln_val *ktr_fma_f32(kiln_trace *t, const char *op, kiln_val *u, double span, double lo) {
  kiln_val *p =
      ktr_op2(t, op, KIR_PRIM_MUL, ktr_to(t, op, u, KILN_F64), ktr_lit_f(t, KILN_F64, span));
  return ktr_to(t, op, ktr_round_odd_sum(t, op, p, ktr_lit_f(t, KILN_F64, lo)), KILN_F32);
}

/* The mask that clears the low `bits` significand bits of an f64. */
static uint64_t ktr_high_mask(int bits) { return ~(((uint64_t)1 << bits) - 1); }

static double ktr_high_part_host(double x, int bits) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  b &= ktr_high_mask(bits);
  memcpy(&x, &b, sizeof x);
  return x;
}

/* The smallest |span| whose partial products below stay normal. */
#define KTR_FMA_F64_MIN_SPAN 0x1p-917

/* f64, for u the unit draw (at most 52 significant bits, so its low bit is
 * clear) and KTR_FMA_F64_MIN_SPAN <= |span| < inf:
 * 1. u * span = p_hi + p_lo exactly, p_hi = RN(u * span). Clearing low
 *    bits splits u into 26 + 26 significant bits and span into 27 + 26, so
 *    every partial product fits 53 bits, and so does every partial sum of
 *    (((u_hi*s_hi - p_hi) + u_lo*s_hi) + u_hi*s_lo) + u_lo*s_lo (the larger
 *    cross term goes first): p_lo is exact.
 * 2. lo + p_hi = s_hi + s_lo (TwoSum), leaving RN(s_hi + s_lo + p_lo).
 * 3. s_lo + p_lo is rounded to odd, then added to s_hi. Either s_lo is 0
 *    (lo and p_hi cancel exactly, Sterbenz) and nothing was rounded, or
 *    |s_hi| >= |p_hi| / 2, so |s_lo + p_lo| <= 1.5 ulp(s_hi): its ulp is
 *    at most 2^-52 of s_hi's, and rounding it to odd cannot move s_hi plus
 *    it across a rounding boundary of the result. */
static kiln_val *ktr_fma_f64(kiln_trace *t, const char *op, kiln_val *u, double span, double lo) {
  const double span_hi = ktr_high_part_host(span, 26), span_lo = span - span_hi;
  kiln_val *u_bits = ktr_bitcast_to(t, op, u, KILN_U64);
  kiln_val *u_hi = ktr_bitcast_to(
      t, op, ktr_op2(t, op, KIR_PRIM_AND, u_bits, ktr_lit_u(t, KILN_U64, ktr_high_mask(27))),
      KILN_F64);
  kiln_val *u_lo = ktr_op2(t, op, KIR_PRIM_SUB, u, u_hi);
  kiln_val *sh = ktr_lit_f(t, KILN_F64, span_hi), *sl = ktr_lit_f(t, KILN_F64, span_lo);
  kiln_val *p_hi = ktr_op2(t, op, KIR_PRIM_MUL, u, ktr_lit_f(t, KILN_F64, span));
  kiln_val *p_lo = ktr_op2(t, op, KIR_PRIM_SUB, ktr_op2(t, op, KIR_PRIM_MUL, u_hi, sh), p_hi);
  p_lo = ktr_op2(t, op, KIR_PRIM_ADD, p_lo, ktr_op2(t, op, KIR_PRIM_MUL, u_lo, sh));
  p_lo = ktr_op2(t, op, KIR_PRIM_ADD, p_lo, ktr_op2(t, op, KIR_PRIM_MUL, u_hi, sl));
  p_lo = ktr_op2(t, op, KIR_PRIM_ADD, p_lo, ktr_op2(t, op, KIR_PRIM_MUL, u_lo, sl));
  kiln_val *s_hi, *s_lo;
  ktr_two_sum(t, op, ktr_lit_f(t, KILN_F64, lo), p_hi, &s_hi, &s_lo);
  return ktr_op2(t, op, KIR_PRIM_ADD, s_hi, ktr_round_odd_sum(t, op, s_lo, p_lo));
}

/* u * span + lo rounded as XLA:CPU rounds it:
 * - f16: one fused multiply-add in f32 (u * span is exact there), then
 *   rounded to f16;
 * - bf16: each op in f32, rounded to bf16 after each;
 * - f32 and f64: one fused multiply-add, emulated exactly unless u * span is
 *   exact anyway (the default range, normal's, [-1, 1)); f64 spans below
 *   KTR_FMA_F64_MIN_SPAN round the product and the sum separately, which
 *   can differ from JAX in the last place. */
static kiln_val *ktr_scale_shift(kiln_trace *t, const char *op, kiln_val *u, kiln_dtype dtype,
                                 double span, double lo) {
  if (dtype == KILN_F16 || dtype == KILN_BF16) {
    kiln_val *w =
        ktr_op2(t, op, KIR_PRIM_MUL, ktr_to(t, op, u, KILN_F32), ktr_lit_f(t, KILN_F32, span));
    if (dtype == KILN_BF16) w = ktr_to(t, op, ktr_to(t, op, w, KILN_BF16), KILN_F32);
    return ktr_to(t, op, ktr_op2(t, op, KIR_PRIM_ADD, w, ktr_lit_f(t, KILN_F32, lo)), dtype);
  }
  if (!ktr_exact_scale(dtype, span)) {
    if (dtype == KILN_F32) return ktr_fma_f32(t, op, u, span, lo);
    if (fabs(span) >= KTR_FMA_F64_MIN_SPAN) return ktr_fma_f64(t, op, u, span, lo);
  }
  kiln_val *w = ktr_op2(t, op, KIR_PRIM_MUL, u, ktr_lit_f(t, dtype, span));
  return ktr_op2(t, op, KIR_PRIM_ADD, w, ktr_lit_f(t, dtype, lo));
}

/* jax.random.uniform: max(minval, u * (maxval - minval) + minval) with both
 * bounds rounded to dtype. The default [0, 1) is u itself. */
static kiln_val *ktr_uniform(kiln_trace *t, const char *op, kiln_val *key, kiln_dtype dtype,
                             int rank, const int64_t *shape, int64_t count, double minval,
                             double maxval) {
  /* The bounds and the span round as the IR rounds literals (as JAX's
   * converts do); their values choose the arithmetic below. */
  kiln_val *lo_v = ktr_lit_f(t, dtype, minval), *hi_v = ktr_lit_f(t, dtype, maxval);
  kiln_val *u = ktr_unit(t, op, key, dtype, rank, shape, count);
  if (!lo_v || !hi_v || !u) return NULL;
  const double lo = ktr_lit_value(lo_v), hi = ktr_lit_value(hi_v);
  const kiln_val *span_v = ktr_lit_f(t, dtype, ktr_span(dtype, lo, hi));
  if (!span_v) return NULL;
  const double span = ktr_lit_value(span_v);
  if (span == 1.0 && lo == 0.0 && !signbit(lo)) return u; /* u * 1 + 0, u >= 0 */
  kiln_val *x = ktr_scale_shift(t, op, u, dtype, span, lo);
  return ktr_op2(t, op, KIR_PRIM_MAX, lo_v, x);
}

/* ---- public ops ---- */

kiln_val *kiln_random_key(kiln_trace *t, int64_t seed) {
  static const char op[] = "kiln_random_key";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  uint32_t k[2];
  kiln_status st = kprng_key_from_seed(seed, k);
  if (st) return ktr_fail(t, st);
  /* jax.random.PRNGKey(seed) with x64: the seed's two words, high first. */
  return ktr_stack2(t, op, ktr_lit_u(t, KILN_U32, k[0]), ktr_lit_u(t, KILN_U32, k[1]));
}

kiln_val *kiln_random_split(kiln_trace *t, kiln_val *key, int64_t n) {
  static const char op[] = "kiln_random_split";
  if (!ktr_key_ok(t, op, key)) return NULL;
  int64_t count;
  if (!ktr_draw_shape_ok(t, op, KILN_U32, 2, (int64_t[]){n, 2}, &count)) return NULL;
  /* Partitionable split: new key i is the whole block of counter i. */
  kiln_val *y[2];
  if (!ktr_blocks(t, op, key, 1, &n, n, y)) return NULL;
  return ktr_stack2(t, op, y[0], y[1]);
}

/* fold_in's data as a u32 scalar, as jnp.asarray(data, dtype='uint32'): a
 * literal converts now, a weak (Python) integer only when it fits (JAX
 * raises OverflowError), a typed one wrapping like convert_element_type;
 * a traced value converts at run time (wrapping). */
static kiln_val *ktr_fold_data(kiln_trace *t, const char *op, kiln_val *data) {
  const kir_aval *a = ktr_aval(data);
  char ty[KIR_AVAL_STR_CAP];
  if (a->rank != 0)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: data must be a scalar, got %s", op,
                     kir_aval_str(a, ty, sizeof ty));
  if (!kiln_dtype_is_integer(a->dtype) && !kiln_dtype_is_bool(a->dtype))
    return ktr_failf(t, KILN_ERR_DTYPE, "%s: data must be an integer, got %s", op,
                     kir_aval_str(a, ty, sizeof ty));
  const kir_var *var = &data->trace->prog->vars[data->vid];
  if (var->kind != KIR_VAR_LITERAL || data->trace != t) return ktr_to(t, op, data, KILN_U32);
  const kir_scalar v = var->u.literal;
  const bool fits =
      kiln_dtype_is_unsigned(a->dtype) ? v.u <= UINT32_MAX : v.i >= 0 && v.i <= (int64_t)UINT32_MAX;
  if (a->weak && !fits) /* weak integers are i64 */
    return ktr_failf(t, KILN_ERR_OUT_OF_RANGE, "%s: data %lld is out of range for uint32", op,
                     (long long)v.i);
  return ktr_lit_u(t, KILN_U32, (uint32_t)v.u); /* two's complement wraps */
}

kiln_val *kiln_random_fold_in(kiln_trace *t, kiln_val *key, kiln_val *data) {
  static const char op[] = "kiln_random_fold_in";
  if (!ktr_key_ok(t, op, key) || !ktr_ok(t, op, 2, (kiln_val *[]){key, data})) return NULL;
  kiln_val *in[4] = {ktr_key_word(t, op, key, 0), ktr_key_word(t, op, key, 1),
                     ktr_lit_u(t, KILN_U32, 0), ktr_fold_data(t, op, data)};
  /* JAX hashes the data's seed words (0, data) under the key. */
  kiln_val *y[2];
  if (!ktr_bind(t, op, KIR_PRIM_THREEFRY2X32, NULL, 4, in, 2, y)) return NULL;
  return ktr_stack2(t, op, y[0], y[1]);
}

kiln_val *kiln_random_bits(kiln_trace *t, kiln_val *key, int bit_width, int rank,
                           const int64_t *shape) {
  static const char op[] = "kiln_random_bits";
  if (!ktr_key_ok(t, op, key)) return NULL;
  kiln_dtype dtype = ktr_uint_of_width(bit_width);
  if (dtype == KILN_INVALID_DTYPE)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: bit width %d is not 8, 16, 32 or 64", op,
                     bit_width);
  int64_t count;
  if (!ktr_draw_shape_ok(t, op, dtype, rank, shape, &count)) return NULL;
  return ktr_bits(t, op, key, bit_width, rank, shape, count);
}

kiln_val *kiln_random_uniform(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                              const int64_t *shape, double minval, double maxval) {
  static const char op[] = "kiln_random_uniform";
  int64_t count;
  if (!ktr_key_ok(t, op, key) || !ktr_float_ok(t, op, dtype) ||
      !ktr_draw_shape_ok(t, op, dtype, rank, shape, &count))
    return NULL;
  return ktr_uniform(t, op, key, dtype, rank, shape, count, minval, maxval);
}

kiln_val *kiln_random_normal(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                             const int64_t *shape) {
  static const char op[] = "kiln_random_normal";
  int64_t count;
  if (!ktr_key_ok(t, op, key) || !ktr_float_ok(t, op, dtype) ||
      !ktr_draw_shape_ok(t, op, dtype, rank, shape, &count))
    return NULL;
  /* sqrt(2) * erf_inv(u), u uniform on [nextafter(-1, 0), 1). */
  const double open_minus_one = -1.0 + ldexp(1.0, -(ktr_mantissa_bits(dtype) + 1));
  kiln_val *u = ktr_uniform(t, op, key, dtype, rank, shape, count, open_minus_one, 1.0);
  /* XLA evaluates erf_inv of a half type in f32. */
  const bool half = dtype == KILN_F16 || dtype == KILN_BF16;
  if (half) u = ktr_to(t, op, u, KILN_F32);
  kiln_val *e = ktr_bind(t, op, KIR_PRIM_ERF_INV, NULL, 1, &u, 1, NULL);
  if (half) e = ktr_to(t, op, e, dtype);
  return ktr_op2(t, op, KIR_PRIM_MUL, ktr_lit_f(t, dtype, sqrt(2.0)), e);
}

kiln_val *kiln_random_bernoulli(kiln_trace *t, kiln_val *key, double p, int rank,
                                const int64_t *shape) {
  static const char op[] = "kiln_random_bernoulli";
  int64_t count;
  if (!ktr_key_ok(t, op, key) || !ktr_draw_shape_ok(t, op, KILN_BOOL, rank, shape, &count))
    return NULL;
  /* mode='low': uniform(dtype of p) < p; p is a float64, as a Python float
   * is with x64 enabled (kiln's semantics). */
  kiln_val *u = ktr_uniform(t, op, key, KILN_F64, rank, shape, count, 0.0, 1.0);
  return ktr_op2(t, op, KIR_PRIM_LT, u, ktr_lit_f(t, KILN_F64, p));
}
