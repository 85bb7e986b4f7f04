/* Special functions that neither C nor CUDA provides, as JAX computes them:
 * digamma, bessel_i0e, bessel_i1e and reduce_precision. One source: the reference evaluator
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

/* Cephes' Chebyshev series sum_k c[k] T_k(x) / 2 (chbevl's Clenshaw
 * recurrence), one step per coefficient, unrolled so that the coefficients
 * are immediates (no table in a device function's local memory). */
#define KILN_CHB(c)     \
  b2 = b1;              \
  b1 = b0;              \
  b0 = x * b1 - b2 + (c);

/* exp(-x) I0(x) on [0, 8], in x/2 - 2 */
KILN_SPECIAL_FN double kiln_i0e_small_f64(double x) {
  double b0 = 0.0, b1 = 0.0, b2 = 0.0;
  KILN_CHB(-4.41534164647933937950E-18) KILN_CHB(3.33079451882223809783E-17)
  KILN_CHB(-2.43127984654795469359E-16) KILN_CHB(1.71539128555513303061E-15)
  KILN_CHB(-1.16853328779934516808E-14) KILN_CHB(7.67618549860493561688E-14)
  KILN_CHB(-4.85644678311192946090E-13) KILN_CHB(2.95505266312963983461E-12)
  KILN_CHB(-1.72682629144155570723E-11) KILN_CHB(9.67580903537323691224E-11)
  KILN_CHB(-5.18979560163526290666E-10) KILN_CHB(2.65982372468238665035E-9)
  KILN_CHB(-1.30002500998624804212E-8) KILN_CHB(6.04699502254191894932E-8)
  KILN_CHB(-2.67079385394061173391E-7) KILN_CHB(1.11738753912010371815E-6)
  KILN_CHB(-4.41673835845875056359E-6) KILN_CHB(1.64484480707288970893E-5)
  KILN_CHB(-5.75419501008210370398E-5) KILN_CHB(1.88502885095841655729E-4)
  KILN_CHB(-5.76375574538582365885E-4) KILN_CHB(1.63947561694133579842E-3)
  KILN_CHB(-4.32430999505057594430E-3) KILN_CHB(1.05464603945949983183E-2)
  KILN_CHB(-2.37374148058994688156E-2) KILN_CHB(4.93052842396707084878E-2)
  KILN_CHB(-9.49010970480476444210E-2) KILN_CHB(1.71620901522208775349E-1)
  KILN_CHB(-3.04682672343198398683E-1) KILN_CHB(6.76795274409476084995E-1)
  return 0.5 * (b0 - b2);
}

/* exp(-x) sqrt(x) I0(x) beyond 8, in 32/x - 2 */
KILN_SPECIAL_FN double kiln_i0e_large_f64(double x) {
  double b0 = 0.0, b1 = 0.0, b2 = 0.0;
  KILN_CHB(-7.23318048787475395456E-18) KILN_CHB(-4.83050448594418207126E-18)
  KILN_CHB(4.46562142029675999901E-17) KILN_CHB(3.46122286769746109310E-17)
  KILN_CHB(-2.82762398051658348494E-16) KILN_CHB(-3.42548561967721913462E-16)
  KILN_CHB(1.77256013305652638360E-15) KILN_CHB(3.81168066935262242075E-15)
  KILN_CHB(-9.55484669882830764870E-15) KILN_CHB(-4.15056934728722208663E-14)
  KILN_CHB(1.54008621752140982691E-14) KILN_CHB(3.85277838274214270114E-13)
  KILN_CHB(7.18012445138366623367E-13) KILN_CHB(-1.79417853150680611778E-12)
  KILN_CHB(-1.32158118404477131188E-11) KILN_CHB(-3.14991652796324136454E-11)
  KILN_CHB(1.18891471078464383424E-11) KILN_CHB(4.94060238822496958910E-10)
  KILN_CHB(3.39623202570838634515E-9) KILN_CHB(2.26666899049817806459E-8)
  KILN_CHB(2.04891858946906374183E-7) KILN_CHB(2.89137052083475648297E-6)
  KILN_CHB(6.88975834691682398426E-5) KILN_CHB(3.36911647825569408990E-3)
  KILN_CHB(8.04490411014108831608E-1)
  return 0.5 * (b0 - b2);
}

/* exp(-x) I1(x) / x on [0, 8], in x/2 - 2 */
KILN_SPECIAL_FN double kiln_i1e_small_f64(double x) {
  double b0 = 0.0, b1 = 0.0, b2 = 0.0;
  KILN_CHB(2.77791411276104639959E-18) KILN_CHB(-2.11142121435816608115E-17)
  KILN_CHB(1.55363195773620046921E-16) KILN_CHB(-1.10559694773538630805E-15)
  KILN_CHB(7.60068429473540693410E-15) KILN_CHB(-5.04218550472791168711E-14)
  KILN_CHB(3.22379336594557470981E-13) KILN_CHB(-1.98397439776494371520E-12)
  KILN_CHB(1.17361862988909016308E-11) KILN_CHB(-6.66348972350202774223E-11)
  KILN_CHB(3.62559028155211703701E-10) KILN_CHB(-1.88724975172282928790E-9)
  KILN_CHB(9.38153738649577178388E-9) KILN_CHB(-4.44505912879632808065E-8)
  KILN_CHB(2.00329475355213526229E-7) KILN_CHB(-8.56872026469545474066E-7)
  KILN_CHB(3.47025130813767847674E-6) KILN_CHB(-1.32731636560394358279E-5)
  KILN_CHB(4.78156510755005422638E-5) KILN_CHB(-1.61760815825896745588E-4)
  KILN_CHB(5.12285956168575772895E-4) KILN_CHB(-1.51357245063125314899E-3)
  KILN_CHB(4.15642294431288815669E-3) KILN_CHB(-1.05640848946261981558E-2)
  KILN_CHB(2.47264490306265168283E-2) KILN_CHB(-5.29459812080949914269E-2)
  KILN_CHB(1.02643658689847095384E-1) KILN_CHB(-1.76416518357834055153E-1)
  KILN_CHB(2.52587186443633654823E-1)
  return 0.5 * (b0 - b2);
}

/* exp(-x) sqrt(x) I1(x) beyond 8, in 32/x - 2 */
KILN_SPECIAL_FN double kiln_i1e_large_f64(double x) {
  double b0 = 0.0, b1 = 0.0, b2 = 0.0;
  KILN_CHB(7.51729631084210481353E-18) KILN_CHB(4.41434832307170791151E-18)
  KILN_CHB(-4.65030536848935832153E-17) KILN_CHB(-3.20952592199342395980E-17)
  KILN_CHB(2.96262899764595013876E-16) KILN_CHB(3.30820231092092828324E-16)
  KILN_CHB(-1.88035477551078244854E-15) KILN_CHB(-3.81440307243700780478E-15)
  KILN_CHB(1.04202769841288027642E-14) KILN_CHB(4.27244001671195135429E-14)
  KILN_CHB(-2.10154184277266431302E-14) KILN_CHB(-4.08355111109219731823E-13)
  KILN_CHB(-7.19855177624590851209E-13) KILN_CHB(2.03562854414708950722E-12)
  KILN_CHB(1.41258074366137813316E-11) KILN_CHB(3.25260358301548823856E-11)
  KILN_CHB(-1.89749581235054123450E-11) KILN_CHB(-5.58974346219658380687E-10)
  KILN_CHB(-3.83538038596423702205E-9) KILN_CHB(-2.63146884688951950684E-8)
  KILN_CHB(-2.51223623787020892529E-7) KILN_CHB(-3.88256480887769039346E-6)
  KILN_CHB(-1.10588938762623716291E-4) KILN_CHB(-9.76109749136146840777E-3)
  KILN_CHB(7.78576235018280120474E-1)
  return 0.5 * (b0 - b2);
}

#undef KILN_CHB

/* bessel_i0e(x) = exp(-|x|) I0(x), and bessel_i1e(x) = exp(-|x|) I1(x):
 * Cephes' i0e and i1e (JAX's and XLA's coefficients), computed in double for
 * every dtype (f32 and the half types round the result). i1e is odd, i0e
 * even. */
KILN_SPECIAL_FN double kiln_bessel_i0e_f64(double x) {
  double z = fabs(x);
  return z <= 8.0 ? kiln_i0e_small_f64(0.5 * z - 2.0)
                  : kiln_i0e_large_f64(32.0 / z - 2.0) / sqrt(z);
}

KILN_SPECIAL_FN double kiln_bessel_i1e_f64(double x) {
  double z = fabs(x);
  z = z <= 8.0 ? kiln_i1e_small_f64(0.5 * z - 2.0) * z
               : kiln_i1e_large_f64(32.0 / z - 2.0) / sqrt(z);
  return x < 0 ? -z : z;
}

KILN_SPECIAL_FN float kiln_bessel_i0e_f32(float x) { return (float)kiln_bessel_i0e_f64((double)x); }
KILN_SPECIAL_FN float kiln_bessel_i1e_f32(float x) { return (float)kiln_bessel_i1e_f64((double)x); }

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
