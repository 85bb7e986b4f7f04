/* erf_inv as XLA:CPU evaluates it, so that jax.random.normal reproduces.
 *
 * XLA expands erf_inv into M. Giles' polynomials in w = -log1p(-x^2) and
 * emits log1p itself: a rational approximation for |x| < sqrt(2) - 1 and
 * log(1 + x) beyond, where the f32 log is a Cephes-style polynomial rather
 * than libm's. Each multiply feeding an add is contracted into an FMA. The
 * same steps here give XLA:CPU's results bit for bit on the golden inputs
 * (f64 assumes a correctly rounded libm log, as glibc's is in practice). */
#include <math.h>
#include <string.h>
#include "prng/prng.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- log ---- */

/* Cephes' logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * log(x) = (m - 1) - (m - 1)^2 / 2 + (m - 1)^3 P(m - 1) + e log(2), with
 * log(2) split in two so that e * log(2) stays exact for the high part. */
static const float log_f32_poly[] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                                     -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                                     2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};
static const float log2_f32_lo = -2.12194440e-4f, log2_f32_hi = 0.693359375f;

static float log_f32(float x) {
  if (isnan(x) || x < 0.0f) return NAN;
  if (x == 0.0f) return -INFINITY;
  if (isinf(x)) return x;
  if (x < 0x1p-126f) x = 0x1p-126f; /* like XLA, subnormals are cut to the smallest normal */
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  /* The mantissa scaled into [0.5, 1), then folded into [sqrt(1/2), sqrt(2)). */
  float e = (float)((int)(b >> 23) - 126);
  b = (b & 0x007fffffu) | 0x3f000000u;
  float m;
  memcpy(&m, &b, sizeof m);
  if (m < 0.707106781186547524f) {
    m = (m - 1.0f) + m;
    e -= 1.0f;
  } else {
    m -= 1.0f;
  }
  const float *p = log_f32_poly;
  float m2 = m * m, m3 = m2 * m;
  /* Three interleaved Horner chains, in the order XLA evaluates them. */
  float y0 = fmaf(fmaf(m, p[0], p[1]), m, p[2]);
  float y1 = fmaf(fmaf(m, p[3], p[4]), m, p[5]);
  float y2 = fmaf(fmaf(m, p[6], p[7]), m, p[8]);
  float y = fmaf(fmaf(y0, m3, y1), m3, y2);
  y = fmaf(y, m3, log2_f32_lo * e);
  float r = fmaf(-0.5f, m2, m) + y;
  return fmaf(log2_f32_hi, e, r);
}

/* ---- log1p ---- */

/* log1p(x) = x - x^2/2 + x^3 N(x)/D(x) near 0, with Cephes' coefficients,
 * highest degree first. */
static const double log1p_num[] = {4.5270000862445199635215e-5, 4.9854102823193375972212e-1,
                                   6.5787325942061044846969e0,  2.9911919328553073277375e1,
                                   6.0949667980987787057556e1,  5.7112963590585538103336e1,
                                   2.0039553499201281259648e1};
static const double log1p_den[] = {1.0,
                                   1.5062909083469192043167e1,
                                   8.3047565967967209469434e1,
                                   2.2176239823732856465394e2,
                                   3.0909872225312059774938e2,
                                   2.1642788614495947685003e2,
                                   6.0118660497603843919306e1};
#define LOG1P_SMALL 0.41421356237309504880 /* sqrt(2) - 1 */

static float horner_f32d(const double *c, size_t n, float x) {
  float p = (float)c[0];
  for (size_t i = 1; i < n; i++) p = fmaf(p, x, (float)c[i]);
  return p;
}

static double horner_f64(const double *c, size_t n, double x) {
  double p = c[0];
  for (size_t i = 1; i < n; i++) p = fma(p, x, c[i]);
  return p;
}

static float log1p_f32(float x) {
  if (!(fabsf(x) < (float)LOG1P_SMALL)) return log_f32(x + 1.0f);
  float x2 = x * x;
  float q = horner_f32d(log1p_num, COUNT_OF(log1p_num), x) /
            horner_f32d(log1p_den, COUNT_OF(log1p_den), x);
  return x + fmaf(-0.5f, x2, (x * x2) * q);
}

static double log1p_f64(double x) {
  if (!(fabs(x) < LOG1P_SMALL)) return log(x + 1.0);
  double x2 = x * x;
  double q =
      horner_f64(log1p_num, COUNT_OF(log1p_num), x) / horner_f64(log1p_den, COUNT_OF(log1p_den), x);
  return x + fma(-0.5, x2, (x * x2) * q);
}

/* ---- erf_inv ---- */

/* Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011):
 * erfinv(x) = x * P(w') with w = -log(1 - x^2) shifted per range into w'.
 * Coefficients run from the highest degree down, as Horner consumes them. */
static const double erf_inv_f32_central[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06,
                                             -4.39150654e-06, 0.00021858087,  -0.00125372503,
                                             -0.00417768164,  0.246640727,    1.50140941};
static const double erf_inv_f32_tail[] = {-0.000200214257, 0.000100950558, 0.00134934322,
                                          -0.00367342844,  0.00573950773,  -0.0076224613,
                                          0.00943887047,   1.00167406,     2.83297682};

static const double erf_inv_f64_central[] = {
    -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
    1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
    6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693,     1.6536545626831027356};
static const double erf_inv_f64_middle[] = {
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
    1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
    2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
    6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
    -0.0037512085075692412107, 0.005370914553590063617,   1.0052589676941592334,
    3.0838856104922207635};
static const double erf_inv_f64_tail[] = {
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
    -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
    2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
    -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
    7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
    1.0103004648645343977,      4.8499064014085844221};

float kprng_erf_inv_f32(float x) {
  /* At |x| = 1 the polynomial is indeterminate; the limit is +-inf. */
  if (fabsf(x) == 1.0f) return x * INFINITY;
  float w = -log1p_f32(-x * x); /* NaN for |x| > 1, which then propagates */
  float p = w < 5.0f ? horner_f32d(erf_inv_f32_central, COUNT_OF(erf_inv_f32_central), w - 2.5f)
                     : horner_f32d(erf_inv_f32_tail, COUNT_OF(erf_inv_f32_tail), sqrtf(w) - 3.0f);
  return p * x;
}

double kprng_erf_inv_f64(double x) {
  if (fabs(x) == 1.0) return x * HUGE_VAL;
  double w = -log1p_f64(-x * x), p;
  if (w < 6.25)
    p = horner_f64(erf_inv_f64_central, COUNT_OF(erf_inv_f64_central), w - 3.125);
  else if (w < 16.0)
    p = horner_f64(erf_inv_f64_middle, COUNT_OF(erf_inv_f64_middle), sqrt(w) - 3.25);
  else
    p = horner_f64(erf_inv_f64_tail, COUNT_OF(erf_inv_f64_tail), sqrt(w) - 5.0);
  return p * x;
}
