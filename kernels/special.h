/* Special functions that neither C nor CUDA provides, as JAX computes them:
 * digamma and reduce_precision. One source: the reference evaluator
 * (src/ir/elementwise.c) includes it as C11, and the code generator pastes
 * it after the prelude into every kernel (NVRTC reads it as CUDA C++), so it
 * uses only <math.h>'s functions, which CUDA has under the same names. */
#ifndef KILN_KERNELS_SPECIAL_H
#define KILN_KERNELS_SPECIAL_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KILN_SPECIAL_FN static __host__ __device__ __forceinline__
#else
#ifndef KILN_HOST_KERNEL /* a generated kernel: the prelude declared what it needs */
#include <math.h>
#endif
#define KILN_SPECIAL_FN static inline
#endif

/* digamma(x) = d/dx log Gamma(x): NaN at the poles (0 and the negative
 * integers) and at -inf, as XLA. Reflection below 1/2, the recurrence up to
 * 10, then the asymptotic series to x^-14 (the next term is below 1e-16). */
KILN_SPECIAL_FN double kiln_digamma_f64(double x) {
  if (x != x) return x;
  if (x - x != 0.0) return x > 0 ? x : x - x; /* +inf; NaN for -inf */
  double r = 0.0;
  if (x < 0.5) { /* psi(x) = psi(1 - x) - pi / tan(pi x), tan's period is 1 */
    double t = x - rint(x); /* exact, in [-1/2, 1/2] */
    if (t == 0.0) return (x - x) / (x - x);
    r = -3.14159265358979323846 / tan(3.14159265358979323846 * t);
    x = 1.0 - x;
  }
  for (; x < 10.0; x += 1.0) r -= 1.0 / x;
  double f = 1.0 / (x * x);
  double s = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132 -
             f * (691.0 / 32760 - f / 12))))));
  return r + log(x) - 0.5 / x - s;
}

KILN_SPECIAL_FN float kiln_digamma_f32(float x) { return (float)kiln_digamma_f64((double)x); }

/* XLA's ReducePrecision of a value of a float format with src_e exponent
 * and src_m mantissa bits: the mantissa rounds to m bits (to nearest even,
 * subnormals on the source's grid, as XLA's bit trick does), then with
 * e < src_e exponent bits a result past the new range overflows to inf and
 * one at or below its smallest normal exponent becomes a signed zero. NaN
 * stays NaN. */
KILN_SPECIAL_FN double kiln_reduce_precision_f64(double x, int src_e, int src_m, int e, int m) {
  if (x != x || x == 0.0 || x - x != 0.0) return x;
  if (m < src_m) {
    int bias = (1 << (src_e - 1)) - 1, k = ilogb(x);
    double q = ldexp(1.0, (k < 1 - bias ? 1 - bias : k) - m); /* the new quantum */
    double n = fabs(x) / q, r = rint(n);
    /* m = 0: XLA's "last mantissa bit" of a tie is the exponent's lowest */
    if (m == 0 && k >= 1 - bias && n - floor(n) == 0.5) r = (k + bias) & 1 ? ceil(n) : floor(n);
    x = copysign(r * q, x);
  }
  if (e < src_e && x - x == 0.0) {
    int bias = (1 << (e - 1)) - 1, k = ilogb(x);
    double big = 1e308;
    if (k > bias) return copysign(big * 10.0, x);
    if (k <= -bias) return x * 0.0;
  }
  return x;
}

#endif
