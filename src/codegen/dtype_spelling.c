/* How the code generators spell dtypes and literals in C and CUDA: element
 * and storage types, the prelude's helper suffixes, rounding to f16/bf16,
 * and literals of every dtype. */
#include <math.h>
#include <stdio.h>
#include "codegen/codegen.h"

const char *kcg_ctype(kiln_dtype d) {
  switch (d) {
    case KILN_BOOL: return "kiln_bool";
    case KILN_I8: return "kiln_i8";
    case KILN_I16: return "kiln_i16";
    case KILN_I32: return "kiln_i32";
    case KILN_I64: return "kiln_i64";
    case KILN_U8: return "kiln_u8";
    case KILN_U16: return "kiln_u16";
    case KILN_U32: return "kiln_u32";
    case KILN_U64: return "kiln_u64";
    case KILN_F64: return "double";
    default: return "float"; /* f16, bf16, f32 */
  }
}

const char *kcg_stype(kiln_dtype d) {
  return d == KILN_F16 || d == KILN_BF16 ? "kiln_half" : kcg_ctype(d);
}

/* The suffix of the prelude's helpers for d's compute type. */
const char *kcg_sfx(kiln_dtype d) {
  switch (d) {
    case KILN_BOOL: return "bool";
    case KILN_I8: return "i8";
    case KILN_I16: return "i16";
    case KILN_I32: return "i32";
    case KILN_I64: return "i64";
    case KILN_U8: return "u8";
    case KILN_U16: return "u16";
    case KILN_U32: return "u32";
    case KILN_U64: return "u64";
    case KILN_F64: return "f64";
    default: return "f32";
  }
}

bool kcg_is_half(kiln_dtype d) { return d == KILN_F16 || d == KILN_BF16; }

/* The suffix of <math.h>'s functions: expf / exp. */
const char *kcg_mathf(kiln_dtype d) { return d == KILN_F64 ? "" : "f"; }

/* Rounds an f32 expression to d when d is a 16-bit float. */
const char *kcg_round_to(kcg_ctx *c, kiln_dtype d, const char *e) {
  if (d == KILN_F16) return kcg_strf(c, "kiln_rnd_f16(%s)", e);
  if (d == KILN_BF16) return kcg_strf(c, "kiln_rnd_bf16(%s)", e);
  return e;
}

/* ---- literals ---- */

/* v rounded to a float dtype, at emission time. */
double kcg_round_value(kiln_dtype d, double v) {
  switch (d) {
    case KILN_F16: return kcore_f16_to_f32(kcore_f32_to_f16((float)v));
    case KILN_BF16: return kcore_bf16_to_f32(kcore_f32_to_bf16((float)v));
    case KILN_F32: return (float)v;
    default: return v;
  }
}

static const char *kcg_float_literal(kcg_ctx *c, double v, bool f32) {
  if (isnan(v)) return f32 ? "KILN_NAN_F32" : "KILN_NAN_F64";
  if (isinf(v)) return v > 0 ? (f32 ? "KILN_INF_F32" : "KILN_INF_F64")
                             : (f32 ? "(-KILN_INF_F32)" : "(-KILN_INF_F64)");
  char buf[48];
  snprintf(buf, sizeof buf, f32 ? "%.9g" : "%.17g", v);
  const char *dot = strpbrk(buf, ".e") ? "" : ".0";
  /* Parenthesized when negative, so that `-` never meets another `-`. */
  return kcg_strf(c, signbit(v) ? "(%s%s%s)" : "%s%s%s", buf, dot, f32 ? "f" : "");
}

const char *kcg_literal(kcg_ctx *c, kiln_dtype d, kir_scalar x) {
  switch (d) {
    case KILN_BOOL: return x.i ? "((kiln_bool)1)" : "((kiln_bool)0)";
    case KILN_I8:
    case KILN_I16:
    case KILN_I32:
    case KILN_I64: {
      int bits = (int)kiln_dtype_size(d) * 8;
      int64_t min = bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
      const char *ll = bits == 64 ? "LL" : "";
      if (x.i == min) /* the most negative value has no literal of its own */
        return kcg_strf(c, "((%s)(%lld%s - 1))", kcg_ctype(d), (long long)(min + 1), ll);
      return kcg_strf(c, "((%s)%s%lld%s%s)", kcg_ctype(d), x.i < 0 ? "(" : "", (long long)x.i, ll,
                      x.i < 0 ? ")" : "");
    }
    case KILN_U8:
    case KILN_U16:
    case KILN_U32:
      return kcg_strf(c, "((%s)%lluu)", kcg_ctype(d), (unsigned long long)x.u);
    case KILN_U64: return kcg_strf(c, "((kiln_u64)%lluull)", (unsigned long long)x.u);
    case KILN_F64: return kcg_float_literal(c, x.f, false);
    default: return kcg_float_literal(c, x.f, true);
  }
}
