/* The C target's additions to the prelude, pasted after it in host kernel
 * files only (CUDA files never see this text). Both parts exist so that the
 * host compiler vectorises the loops the emitter writes.
 *
 * 1. The libm functions the emitter calls, declared with GCC's simd
 *    attribute: a loop calling them is vectorised with glibc's vector forms
 *    (libmvec, linked by kcpu_cc_compile; glibc documents them within 4 ulp,
 *    tests/backend/cpu/test_vector_math.cc measures each against the reference
 *    evaluator) instead of one scalar call per element. Other compilers and C
 *    libraries keep the scalar calls.
 * 2. KILN_LANES_LOOP before the loop over a reduction's KILN_LANES
 *    accumulators: kept a loop (not unrolled into eight scalar reductions),
 *    it is vectorised as one plain vector operation per step, whatever the
 *    combining function (max and min included).
 * 3. max/min with the prelude's semantics (NaN if either is NaN, +0 above
 *    -0) written as bit selects, without the branches that keep the prelude's
 *    versions scalar; the macros send every later use here.
 * 4. bf16 rounding with the prelude's results in fewer vector operations
 *    (a signed compare, one mask instead of a shift down and up); a bf16
 *    row pass does several of them per element.
 * 5. KILN_ROW_LANES accumulators for the passes of a ROW kernel: one chain
 *    of KILN_LANES is a single vector whose every step waits on the last
 *    (a bf16 sum's add and rounding, through the stack), while four chains
 *    overlap. */
#ifndef KILN_KERNELS_HOST_H
#define KILN_KERNELS_HOST_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && defined(__x86_64__)
#define KILN_VEC1(fn)                                                   \
  __attribute__((simd("notinbranch"))) float fn##f(float);              \
  __attribute__((simd("notinbranch"))) double fn(double);
#define KILN_VEC2(fn)                                                   \
  __attribute__((simd("notinbranch"))) float fn##f(float, float);       \
  __attribute__((simd("notinbranch"))) double fn(double, double);
KILN_VEC1(exp) KILN_VEC1(exp2) KILN_VEC1(expm1) KILN_VEC1(log) KILN_VEC1(log1p)
KILN_VEC1(cbrt) KILN_VEC1(tanh) KILN_VEC1(sin) KILN_VEC1(cos) KILN_VEC1(tan)
KILN_VEC1(asin) KILN_VEC1(acos) KILN_VEC1(atan) KILN_VEC1(sinh) KILN_VEC1(cosh)
KILN_VEC1(asinh) KILN_VEC1(acosh) KILN_VEC1(atanh) KILN_VEC1(erf)
KILN_VEC2(atan2) KILN_VEC2(pow)
#undef KILN_VEC1
#undef KILN_VEC2
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define KILN_LANES_LOOP _Pragma("GCC unroll 1")
#else
#define KILN_LANES_LOOP
#endif

/* all-ones when c, else zero */
#define KILN_MASK(U, c) ((U)0 - (U)(c))
#define KILN_HOST_MAXMIN(S, F, U)                                               \
  KILN_FN F kiln_vmax_##S(F a, F b) {                                           \
    U ua = kiln_##S##_bits(a), ub = kiln_##S##_bits(b);                         \
    U gt = KILN_MASK(U, a > b), eq = KILN_MASK(U, a == b);                      \
    U nan = KILN_MASK(U, __builtin_isunordered(a, b));                          \
    U m = (eq & ua & ub) | (~eq & ((gt & ua) | (~gt & ub)));                    \
    return kiln_bits_##S((nan & kiln_##S##_bits(a + b)) | (~nan & m));         \
  }                                                                             \
  KILN_FN F kiln_vmin_##S(F a, F b) {                                           \
    U ua = kiln_##S##_bits(a), ub = kiln_##S##_bits(b);                         \
    U lt = KILN_MASK(U, a < b), eq = KILN_MASK(U, a == b);                      \
    U nan = KILN_MASK(U, __builtin_isunordered(a, b));                          \
    U m = (eq & (ua | ub)) | (~eq & ((lt & ua) | (~lt & ub)));                  \
    return kiln_bits_##S((nan & kiln_##S##_bits(a + b)) | (~nan & m));         \
  }
KILN_HOST_MAXMIN(f32, float, kiln_u32)
KILN_HOST_MAXMIN(f64, double, kiln_u64)
#undef KILN_HOST_MAXMIN
#undef KILN_MASK
#define kiln_max_f32 kiln_vmax_f32
#define kiln_min_f32 kiln_vmin_f32
#define kiln_max_f64 kiln_vmax_f64
#define kiln_min_f64 kiln_vmin_f64

/* Round to nearest even; a NaN keeps its sign and top bits, made quiet. */
KILN_FN float kiln_vrnd_bf16(float x) {
  kiln_u32 u = kiln_f32_bits(x), nan = 0u - (kiln_u32)(x != x);
  kiln_u32 up = u + 0x7fffu + ((u >> 16) & 1u);
  return kiln_bits_f32(((nan & (u | 0x00400000u)) | (~nan & up)) & 0xffff0000u);
}
KILN_FN float kiln_vadd_bf16(float a, float b) { return kiln_vrnd_bf16(a + b); }
KILN_FN float kiln_vmul_bf16(float a, float b) { return kiln_vrnd_bf16(a * b); }
KILN_FN kiln_half kiln_vf2bh(float x) { return (kiln_half)(kiln_f32_bits(kiln_vrnd_bf16(x)) >> 16); }
/* The bits of a value kiln_rnd_bf16 returned (the emitter's stores). */
KILN_FN kiln_half kiln_bf16_top(float x) { return (kiln_half)(kiln_f32_bits(x) >> 16); }
#define kiln_rnd_bf16 kiln_vrnd_bf16
#define kiln_add_bf16 kiln_vadd_bf16
#define kiln_mul_bf16 kiln_vmul_bf16
#define kiln_f2bh kiln_vf2bh

/* A power of two, a multiple of KILN_LANES (src/codegen/skel_c.c's
 * KCG_C_ROW_LANES); folded as a balanced tree, so the result does not
 * depend on how the compiler vectorises. */
#define KILN_ROW_LANES 32
#define KILN_DEFINE_ROW_LANES_REDUCE(NAME, T, COMBINE)                          \
  KILN_FN T kiln_row_lanes_##NAME(const T *acc) {                               \
    T a[KILN_ROW_LANES];                                                        \
    for (int l = 0; l < KILN_ROW_LANES; ++l) a[l] = acc[l];                     \
    for (int h = KILN_ROW_LANES / 2; h > 0; h /= 2)                             \
      for (int l = 0; l < h; ++l) a[l] = COMBINE(a[l], a[l + h]);               \
    return a[0];                                                                \
  }

#endif
