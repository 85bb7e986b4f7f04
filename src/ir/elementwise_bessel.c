/* The derivatives of bessel_i0e and bessel_i1e (records in
 * elementwise_unary.def; values from kernels/special.h), as JAX's jvp rules:
 *   i0e'(x) = i1e(x) - sign(x) i0e(x)
 *   i1e'(x) = i0e(x) - i1e(x) (sign(x) + 1/x), and 1/2 where |x| <= eps
 * (x is moved off zero first, so that no NaN reaches the unused branch). */
#include "ir/elementwise_ad.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

kiln_status kir_ew_d_bessel_i0e(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  kir_vid i1e, s;
  TRY(kir_emit1(p, KIR_PRIM_BESSEL_I1E, x, &i1e));
  TRY(kir_emit1(p, KIR_PRIM_SIGN, x, &s));
  TRY(kir_emit2(p, KIR_PRIM_MUL, s, y, &s));
  return kir_emit2(p, KIR_PRIM_SUB, i1e, s, c);
}

/* The machine epsilon of a float dtype (jnp.finfo(dtype).eps). */
static double epsilon(kiln_dtype d) {
  switch (d) {
    case KILN_F16: return 0x1p-10;
    case KILN_BF16: return 0x1p-7;
    case KILN_F32: return 0x1p-23;
    default: return 0x1p-52;
  }
}

kiln_status kir_ew_d_bessel_i1e(kir_program *p, kir_vid x, kir_vid y, kir_vid *c) {
  const kir_aval *a = kir_var_aval(p, x);
  kir_aval xa = *a; /* a copy: emitting may move the var table */
  double eps = epsilon(xa.dtype);
  kir_vid big, e, safe, i0e, s, r;
  TRY(kir_emit1(p, KIR_PRIM_ABS, x, &big));
  TRY(kir_ew_lit_op(p, KIR_PRIM_GT, big, eps, &big));
  TRY(kir_emit_scalar(p, x, eps, &e));
  TRY(kir_emit_select(p, big, e, x, &xa, &safe));
  TRY(kir_emit1(p, KIR_PRIM_BESSEL_I0E, safe, &i0e));
  TRY(kir_emit1(p, KIR_PRIM_SIGN, safe, &s));
  TRY(kir_emit_scalar(p, safe, 1.0, &r));
  TRY(kir_emit2(p, KIR_PRIM_DIV, r, safe, &r));
  TRY(kir_emit2(p, KIR_PRIM_ADD, s, r, &s));
  TRY(kir_emit2(p, KIR_PRIM_MUL, y, s, &s));
  TRY(kir_emit2(p, KIR_PRIM_SUB, i0e, s, &s));
  TRY(kir_emit_scalar(p, x, 0.5, &e));
  return kir_emit_select(p, big, e, s, &xa, c);
}
