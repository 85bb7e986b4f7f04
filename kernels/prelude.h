/* The prelude of every generated kernel: element types, f16/bf16 <-> f32,
 * and the scalar semantics of kiln's primitives where C's own operators
 * differ from XLA's (integer wrap-around, division by zero, shifts past the
 * width, saturating float -> int, NaN-propagating max/min).
 *
 * One source for both targets: the host C compiler reads it as C11, NVRTC as
 * CUDA C++. The emitter pastes this text at the top of each kernel file, so
 * a file compiles on its own; it therefore includes no kiln header, and no
 * header at all under NVRTC (whose built-in math functions carry the same
 * names as <math.h>'s).
 *
 * f16 and bf16 values are computed in f32 and rounded back to their type
 * after every primitive (kiln_rnd_f16/kiln_rnd_bf16), so that a fused chain
 * gives what evaluating one primitive at a time gives. */
#ifndef KILN_KERNELS_PRELUDE_H
#define KILN_KERNELS_PRELUDE_H

/* ---- the macro layer ---- */
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define KILN_CUDA 1
#define KILN_FN static __device__ __forceinline__
#define KILN_RESTRICT __restrict__
typedef signed char kiln_i8;
typedef short kiln_i16;
typedef int kiln_i32;
typedef long long kiln_i64;
typedef unsigned char kiln_u8;
typedef unsigned short kiln_u16;
typedef unsigned int kiln_u32;
typedef unsigned long long kiln_u64;
typedef unsigned long long kiln_uptr;
#define KILN_POPC32(x) __popc(x)
#define KILN_POPC64(x) __popcll(x)
#else
#ifdef KILN_HOST_KERNEL
/* A generated host kernel declares the C library functions it calls rather
 * than parse <math.h>, <stdint.h> and <string.h>: those headers are a fifth
 * of a small kernel's compile time. A call to anything not declared here
 * is an error, never an implicit int function. */
#pragma GCC diagnostic error "-Wimplicit-function-declaration"
#include <features.h> /* __GLIBC__: kernels/host.h declares libmvec's functions for glibc only */
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __UINTPTR_TYPE__ uintptr_t;
#define KILN_LIBM1(fn) double fn(double); float fn##f(float);
#define KILN_LIBM2(fn) double fn(double, double); float fn##f(float, float);
KILN_LIBM1(acos) KILN_LIBM1(acosh) KILN_LIBM1(asin) KILN_LIBM1(asinh) KILN_LIBM1(atan)
KILN_LIBM1(atanh) KILN_LIBM1(cbrt) KILN_LIBM1(cos) KILN_LIBM1(cosh) KILN_LIBM1(erf)
KILN_LIBM1(erfc) KILN_LIBM1(exp) KILN_LIBM1(exp2) KILN_LIBM1(expm1) KILN_LIBM1(lgamma)
KILN_LIBM1(log) KILN_LIBM1(log1p) KILN_LIBM1(log2) KILN_LIBM1(log10) KILN_LIBM1(sin)
KILN_LIBM1(sinh) KILN_LIBM1(sqrt) KILN_LIBM1(tan) KILN_LIBM1(tanh) KILN_LIBM1(fabs)
KILN_LIBM1(floor) KILN_LIBM1(ceil) KILN_LIBM1(rint) KILN_LIBM1(round) KILN_LIBM1(trunc)
KILN_LIBM1(nearbyint) KILN_LIBM2(atan2) KILN_LIBM2(pow) KILN_LIBM2(fmod)
KILN_LIBM2(copysign) KILN_LIBM2(nextafter) KILN_LIBM2(remainder) KILN_LIBM2(fmax)
KILN_LIBM2(fmin) KILN_LIBM2(hypot)
double ldexp(double, int); float ldexpf(float, int);
int ilogb(double); int ilogbf(float);
#undef KILN_LIBM1
#undef KILN_LIBM2
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#endif
#define KILN_FN static inline
#define KILN_RESTRICT restrict
typedef int8_t kiln_i8;
typedef int16_t kiln_i16;
typedef int32_t kiln_i32;
typedef int64_t kiln_i64;
typedef uint8_t kiln_u8;
typedef uint16_t kiln_u16;
typedef uint32_t kiln_u32;
typedef uint64_t kiln_u64;
typedef uintptr_t kiln_uptr;
#define KILN_POPC32(x) __builtin_popcount(x)
#define KILN_POPC64(x) __builtin_popcountll(x)
#endif

typedef kiln_u8 kiln_bool;  /* bool: one byte holding 0 or 1 */
typedef kiln_u16 kiln_half; /* the storage of f16 and bf16 */

/* ---- float bits ---- */
#ifdef KILN_CUDA
KILN_FN kiln_u32 kiln_f32_bits(float f) { return __float_as_uint(f); }
KILN_FN float kiln_bits_f32(kiln_u32 u) { return __uint_as_float(u); }
KILN_FN kiln_u64 kiln_f64_bits(double f) { return (kiln_u64)__double_as_longlong(f); }
KILN_FN double kiln_bits_f64(kiln_u64 u) { return __longlong_as_double((long long)u); }
#else
KILN_FN kiln_u32 kiln_f32_bits(float f) {
  kiln_u32 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}
KILN_FN float kiln_bits_f32(kiln_u32 u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
KILN_FN kiln_u64 kiln_f64_bits(double f) {
  kiln_u64 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}
KILN_FN double kiln_bits_f64(kiln_u64 u) {
  double f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
#endif

#define KILN_INF_F32 kiln_bits_f32(0x7f800000u)
#define KILN_NAN_F32 kiln_bits_f32(0x7fc00000u)
#define KILN_INF_F64 kiln_bits_f64(0x7ff0000000000000ull)
#define KILN_NAN_F64 kiln_bits_f64(0x7ff8000000000000ull)

/* ---- f16 and bf16 <-> f32, round to nearest even ----
 * The host versions pick among every path with masks, without branches, so
 * element loops over them vectorize; the device uses the cvt instructions. */
KILN_FN kiln_u32 kiln_select_u32(int cond, kiln_u32 a, kiln_u32 b) {
  return b ^ ((a ^ b) & (0u - (kiln_u32)(cond != 0)));
}

KILN_FN float kiln_bh2f(kiln_half b) { return kiln_bits_f32((kiln_u32)b << 16); }

#ifdef KILN_CUDA
KILN_FN float kiln_h2f(kiln_half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
KILN_FN kiln_half kiln_f2h(float f) {
  kiln_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#else
KILN_FN float kiln_h2f(kiln_half h) {
  kiln_u32 sign = (kiln_u32)(h & 0x8000u) << 16;
  kiln_u32 em = h & 0x7fffu;
  kiln_u32 normal = (em << 13) + (112u << 23); /* rebias 15 -> 127 */
  kiln_u32 subnormal = kiln_f32_bits((float)(kiln_i32)em * 0x1p-24f);
  kiln_u32 special = 0x7f800000u | (em << 13) | kiln_select_u32(em > 0x7c00u, 0x00400000u, 0u);
  kiln_u32 mag = kiln_select_u32(em < 0x0400u, subnormal, normal);
  mag = kiln_select_u32(em >= 0x7c00u, special, mag);
  return kiln_bits_f32(sign | mag);
}
KILN_FN kiln_half kiln_f2h(float f) {
  kiln_u32 x = kiln_f32_bits(f);
  kiln_u32 sign = (x >> 16) & 0x8000u;
  kiln_u32 a = x & 0x7fffffffu;
  kiln_u32 r = a - (112u << 23);
  kiln_u32 normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
  /* Below 2^-14, adding 0.5f lets the FPU round to a multiple of 2^-24. */
  kiln_u32 subnormal = kiln_f32_bits(kiln_bits_f32(a) + 0.5f) - 0x3f000000u;
  kiln_u32 nan = 0x7e00u | ((a >> 13) & 0x03ffu);
  kiln_u32 mag = kiln_select_u32(a < 0x38800000u, subnormal, normal);
  mag = kiln_select_u32(a >= 0x477ff000u, 0x7c00u, mag);
  mag = kiln_select_u32(a > 0x7f800000u, nan, mag);
  return (kiln_half)(sign | mag);
}
#endif

#if defined(KILN_CUDA) && __CUDA_ARCH__ >= 800
/* The hardware conversion turns every NaN into 0x7fff; XLA (and the
 * reference) keeps its sign and top payload bits, quieted. */
KILN_FN kiln_half kiln_f2bh(float f) {
  kiln_half h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return f != f ? (kiln_half)((kiln_f32_bits(f) >> 16) | 0x0040u) : h;
}
#else
KILN_FN kiln_half kiln_f2bh(float f) {
  kiln_u32 x = kiln_f32_bits(f);
  kiln_u32 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  kiln_u32 nan = (x >> 16) | 0x0040u;
  return (kiln_half)kiln_select_u32((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}
#endif

/* An f32 value rounded to the nearest f16 / bf16 value. */
KILN_FN float kiln_rnd_f16(float x) { return kiln_h2f(kiln_f2h(x)); }
KILN_FN float kiln_rnd_bf16(float x) { return kiln_bh2f(kiln_f2bh(x)); }

/* f64 -> f16 with one rounding, as XLA converts: round to odd into f32 first
 * (f32 keeps more than two extra bits, so the second rounding is exact). */
KILN_FN float kiln_f64_to_f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  kiln_u32 b = kiln_f32_bits(f);
  if (fabs((double)f) > fabs(d)) b -= 1u; /* truncate toward zero */
  return kiln_bits_f32(b | 1u);
}
KILN_FN float kiln_f64_to_f16(double d) { return kiln_rnd_f16(kiln_f64_to_f32_odd(d)); }

/* nextafter in the 16-bit formats: one step of the storage bits. */
KILN_FN float kiln_nextafter_half(float a, float b, int bf16) {
  if (a != a || b != b) return a + b;
  if (a == b) return b;
  kiln_u32 h = bf16 ? kiln_f2bh(a) : kiln_f2h(a);
  if (a == 0.0f)
    h = (b < 0.0f ? 0x8000u : 0u) | 1u;
  else if ((a < b) == (a > 0.0f))
    h += 1u;
  else
    h -= 1u;
  return bf16 ? kiln_bh2f((kiln_half)h) : kiln_h2f((kiln_half)h);
}

/* f16/bf16 sums and products, rounded at every step as XLA computes them. */
KILN_FN float kiln_add_f16(float a, float b) { return kiln_rnd_f16(a + b); }
KILN_FN float kiln_mul_f16(float a, float b) { return kiln_rnd_f16(a * b); }
KILN_FN float kiln_add_bf16(float a, float b) { return kiln_rnd_bf16(a + b); }
KILN_FN float kiln_mul_bf16(float a, float b) { return kiln_rnd_bf16(a * b); }

/* ---- denormals on the host ----
 * XLA:CPU runs with subnormal results flushed to zero and subnormal operands
 * read as zero (x86 FTZ and DAZ; AArch64 FZ); host kernels set the same mode
 * for their duration and restore the caller's. Device code keeps IEEE
 * subnormals, as XLA:GPU does. */
#if !defined(KILN_CUDA) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
typedef unsigned kiln_fpmode;
KILN_FN kiln_fpmode kiln_flush_denormals(void) {
  kiln_fpmode old = __builtin_ia32_stmxcsr();
  __builtin_ia32_ldmxcsr(old | 0x8040u); /* FTZ | DAZ */
  return old;
}
KILN_FN void kiln_restore_fpmode(kiln_fpmode m) { __builtin_ia32_ldmxcsr(m); }
#elif !defined(KILN_CUDA) && defined(__aarch64__)
typedef unsigned kiln_fpmode;
KILN_FN kiln_fpmode kiln_flush_denormals(void) {
  kiln_fpmode old = __builtin_aarch64_get_fpcr();
  __builtin_aarch64_set_fpcr(old | (1u << 24)); /* FZ */
  return old;
}
KILN_FN void kiln_restore_fpmode(kiln_fpmode m) { __builtin_aarch64_set_fpcr(m); }
#else
typedef int kiln_fpmode;
KILN_FN kiln_fpmode kiln_flush_denormals(void) { return 0; }
KILN_FN void kiln_restore_fpmode(kiln_fpmode m) { (void)m; }
#endif

/* ---- floats: f32 and f64 share one definition ---- */
#define KILN_FLOAT_OPS(S, F, EXP, SQRT, ABSMASK, EXPMASK)                               \
  KILN_FN F kiln_add_##S(F a, F b) { return a + b; }                                   \
  KILN_FN F kiln_mul_##S(F a, F b) { return a * b; }                                   \
  /* NaN if either is NaN; +0 is above -0 (IEEE 754-2019 maximum, as XLA). */         \
  KILN_FN F kiln_max_##S(F a, F b) {                                                   \
    if (a != a || b != b) return a + b;                                                \
    if (a == b) return kiln_bits_##S(kiln_##S##_bits(a) & kiln_##S##_bits(b));        \
    return a > b ? a : b;                                                              \
  }                                                                                    \
  KILN_FN F kiln_min_##S(F a, F b) {                                                   \
    if (a != a || b != b) return a + b;                                                \
    if (a == b) return kiln_bits_##S(kiln_##S##_bits(a) | kiln_##S##_bits(b));        \
    return a < b ? a : b;                                                              \
  }                                                                                    \
  /* NaN stays NaN, zeros keep their sign. */                                         \
  KILN_FN F kiln_sign_##S(F x) { return x > 0 ? (F)1 : x < 0 ? (F)-1 : x; }            \
  KILN_FN kiln_bool kiln_is_finite_##S(F x) {                                          \
    return (kiln_bool)((kiln_##S##_bits(x) & EXPMASK) != EXPMASK);                     \
  }                                                                                    \
  KILN_FN F kiln_logistic_##S(F x) { return (F)1 / ((F)1 + EXP(-x)); }                 \
  KILN_FN F kiln_rsqrt_host_##S(F x) { return (F)1 / SQRT(x); }                        \
  KILN_FN F kiln_abs_##S(F x) { return kiln_bits_##S(kiln_##S##_bits(x) & ABSMASK); }

KILN_FLOAT_OPS(f32, float, expf, sqrtf, 0x7fffffffu, 0x7f800000u)
KILN_FLOAT_OPS(f64, double, exp, sqrt, 0x7fffffffffffffffull, 0x7ff0000000000000ull)

#ifdef KILN_CUDA
KILN_FN float kiln_rsqrt_f32(float x) { return rsqrtf(x); }
KILN_FN double kiln_rsqrt_f64(double x) { return rsqrt(x); }
KILN_FN float kiln_erf_inv_f32(float x) { return erfinvf(x); }
KILN_FN double kiln_erf_inv_f64(double x) { return erfinv(x); }
#else
KILN_FN float kiln_rsqrt_f32(float x) { return kiln_rsqrt_host_f32(x); }
KILN_FN double kiln_rsqrt_f64(double x) { return kiln_rsqrt_host_f64(x); }
/* Giles' single-precision erfinv ("Approximating the erfinv function", GPU
 * Computing Gems, 2011): x * P(w) with w = -log(1 - x^2), one polynomial
 * for w < 5 and one in sqrt(w) beyond. */
KILN_FN double kiln_erf_inv_poly(double x) {
  double w = -log1p(-x * x), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p * x;
}
KILN_FN float kiln_erf_inv_f32(float x) {
  if (fabsf(x) == 1.0f) return x * KILN_INF_F32;
  return (float)kiln_erf_inv_poly((double)x);
}
/* The f32 estimate refined by Newton steps on erf(y) - x, which double
 * precision needs: each step squares the relative error. */
KILN_FN double kiln_erf_inv_f64(double x) {
  if (fabs(x) == 1.0) return x * KILN_INF_F64;
  if (!(fabs(x) < 1.0)) return KILN_NAN_F64;
  double y = kiln_erf_inv_poly(x);
  for (int i = 0; i < 2; i++) {
    double d = 1.1283791670955126 * exp(-y * y); /* erf'(y) = 2/sqrt(pi) e^-y^2 */
    if (d == 0.0) break;
    y -= (erf(y) - x) / d;
  }
  return y;
}
#endif

/* ---- float -> integer: truncate, saturate, NaN -> 0 (as XLA) ---- */
#define KILN_F2I(FS, F, IS, T, LO, HI, MINV, MAXV)           \
  KILN_FN T kiln_##FS##_to_##IS(F x) {                       \
    return x != x ? (T)0 : x <= (F)(LO) ? (T)(MINV) : x >= (F)(HI) ? (T)(MAXV) : (T)x; \
  }
/* Both float types to one integer type. */
#define KILN_F2I_BOTH(IS, T, LO, HI, MINV, MAXV) \
  KILN_F2I(f32, float, IS, T, LO, HI, MINV, MAXV) KILN_F2I(f64, double, IS, T, LO, HI, MINV, MAXV)

/* ---- integers: two's complement wrap-around and XLA's edge cases ----
 * S: suffix, T: type, UN/SN: unsigned/signed of T's width, UW: unsigned
 * type the arithmetic runs in (no promotion to int, whose overflow is
 * undefined), BITS: width. */
#define KILN_INT_COMMON(S, T, UN, SN, UW, BITS, POPC)                                 \
  KILN_FN T kiln_add_##S(T a, T b) { return (T)((UW)a + (UW)b); }                     \
  KILN_FN T kiln_sub_##S(T a, T b) { return (T)((UW)a - (UW)b); }                     \
  KILN_FN T kiln_mul_##S(T a, T b) { return (T)((UW)a * (UW)b); }                     \
  KILN_FN T kiln_neg_##S(T a) { return (T)((UW)0 - (UW)a); }                          \
  KILN_FN T kiln_max_##S(T a, T b) { return a > b ? a : b; }                          \
  KILN_FN T kiln_min_##S(T a, T b) { return a < b ? a : b; }                          \
  KILN_FN T kiln_and_##S(T a, T b) { return (T)(a & b); }                             \
  KILN_FN T kiln_or_##S(T a, T b) { return (T)(a | b); }                              \
  KILN_FN T kiln_not_##S(T a) { return (T)~a; }                                       \
  KILN_FN T kiln_popcnt_##S(T a) { return (T)POPC((UN)a); }                           \
  /* Shift amounts are unsigned; past the width: 0, or the sign for >>. */           \
  KILN_FN T kiln_shl_##S(T a, T b) {                                                  \
    return (UN)b >= BITS ? (T)0 : (T)((UW)(UN)a << (UN)b);                            \
  }                                                                                   \
  KILN_FN T kiln_shrl_##S(T a, T b) {                                                 \
    return (UN)b >= BITS ? (T)0 : (T)((UN)a >> (UN)b);                                \
  }                                                                                   \
  KILN_FN T kiln_shra_##S(T a, T b) {                                                 \
    return (UN)b >= BITS ? (T)((SN)a < 0 ? -1 : 0) : (T)((SN)a >> (UN)b);             \
  }

/* x / 0 = -1 and x % 0 = x; MIN / -1 = MIN and MIN % -1 = 0. */
#define KILN_SINT_OPS(S, T, UN, SN, UW, BITS, POPC, MINV)                             \
  KILN_INT_COMMON(S, T, UN, SN, UW, BITS, POPC)                                       \
  KILN_FN T kiln_abs_##S(T a) { return a < 0 ? kiln_neg_##S(a) : a; }                 \
  KILN_FN T kiln_sign_##S(T a) { return (T)((a > 0) - (a < 0)); }                     \
  KILN_FN T kiln_div_##S(T a, T b) {                                                  \
    T d = (b == 0 || (a == (T)(MINV) && b == (T)-1)) ? (T)1 : b;                      \
    return b == 0 ? (T)-1 : (T)(a / d);                                               \
  }                                                                                   \
  KILN_FN T kiln_rem_##S(T a, T b) {                                                  \
    T d = (b == 0 || (a == (T)(MINV) && b == (T)-1)) ? (T)1 : b;                      \
    return b == 0 ? a : (T)(a % d);                                                   \
  }

/* x / 0 = all ones and x % 0 = x. */
#define KILN_UINT_OPS(S, T, UN, SN, UW, BITS, POPC)                                   \
  KILN_INT_COMMON(S, T, UN, SN, UW, BITS, POPC)                                       \
  KILN_FN T kiln_sign_##S(T a) { return (T)(a != 0); }                                \
  KILN_FN T kiln_div_##S(T a, T b) { return b == 0 ? (T)~(T)0 : (T)(a / b); }         \
  KILN_FN T kiln_rem_##S(T a, T b) { return b == 0 ? a : (T)(a % b); }

/* ---- bool: 0 or 1 ---- */
KILN_FN kiln_bool kiln_max_bool(kiln_bool a, kiln_bool b) { return (kiln_bool)(a | b); }
KILN_FN kiln_bool kiln_min_bool(kiln_bool a, kiln_bool b) { return (kiln_bool)(a & b); }
KILN_FN kiln_bool kiln_and_bool(kiln_bool a, kiln_bool b) { return (kiln_bool)(a & b); }
KILN_FN kiln_bool kiln_or_bool(kiln_bool a, kiln_bool b) { return (kiln_bool)(a | b); }

#endif

/* ---- integer helpers, per type ----
 * A host kernel that defines KILN_PRELUDE_TRIM gets the helpers of the
 * integer types it names only (KILN_USE_<suffix>, src/codegen/emit.c): all
 * eight are a tenth of a small kernel's compile. Outside the include guard,
 * each once (KILN_HAVE_<suffix>), so that a later kernel pasted into the
 * same file still gets the types it names. */
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_i8)) && !defined(KILN_HAVE_i8)
#define KILN_HAVE_i8
KILN_SINT_OPS(i8, kiln_i8, kiln_u8, kiln_i8, kiln_u32, 8, KILN_POPC32, -128)
KILN_F2I_BOTH(i8, kiln_i8, -128.0, 128.0, -128, 127)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_i16)) && !defined(KILN_HAVE_i16)
#define KILN_HAVE_i16
KILN_SINT_OPS(i16, kiln_i16, kiln_u16, kiln_i16, kiln_u32, 16, KILN_POPC32, -32768)
KILN_F2I_BOTH(i16, kiln_i16, -32768.0, 32768.0, -32768, 32767)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_i32)) && !defined(KILN_HAVE_i32)
#define KILN_HAVE_i32
KILN_SINT_OPS(i32, kiln_i32, kiln_u32, kiln_i32, kiln_u32, 32, KILN_POPC32, (-2147483647 - 1))
KILN_F2I_BOTH(i32, kiln_i32, -2147483648.0, 2147483648.0, (-2147483647 - 1), 2147483647)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_i64)) && !defined(KILN_HAVE_i64)
#define KILN_HAVE_i64
KILN_SINT_OPS(i64, kiln_i64, kiln_u64, kiln_i64, kiln_u64, 64, KILN_POPC64,
              (-9223372036854775807LL - 1))
KILN_F2I_BOTH(i64, kiln_i64, -9223372036854775808.0, 9223372036854775808.0,
              (-9223372036854775807LL - 1), 9223372036854775807LL)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_u8)) && !defined(KILN_HAVE_u8)
#define KILN_HAVE_u8
KILN_UINT_OPS(u8, kiln_u8, kiln_u8, kiln_i8, kiln_u32, 8, KILN_POPC32)
KILN_F2I_BOTH(u8, kiln_u8, 0.0, 256.0, 0, 255)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_u16)) && !defined(KILN_HAVE_u16)
#define KILN_HAVE_u16
KILN_UINT_OPS(u16, kiln_u16, kiln_u16, kiln_i16, kiln_u32, 16, KILN_POPC32)
KILN_F2I_BOTH(u16, kiln_u16, 0.0, 65536.0, 0, 65535)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_u32)) && !defined(KILN_HAVE_u32)
#define KILN_HAVE_u32
KILN_UINT_OPS(u32, kiln_u32, kiln_u32, kiln_i32, kiln_u32, 32, KILN_POPC32)
KILN_F2I_BOTH(u32, kiln_u32, 0.0, 4294967296.0, 0, 4294967295u)
#endif
#if (!defined(KILN_PRELUDE_TRIM) || defined(KILN_USE_u64)) && !defined(KILN_HAVE_u64)
#define KILN_HAVE_u64
KILN_UINT_OPS(u64, kiln_u64, kiln_u64, kiln_i64, kiln_u64, 64, KILN_POPC64)
KILN_F2I_BOTH(u64, kiln_u64, 0.0, 18446744073709551616.0, 0, 18446744073709551615ull)
#endif
