/* Element types, f16/bf16 conversion and JAX's type promotion. */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_dtype {
  KILN_INVALID_DTYPE = 0,
  KILN_BOOL,
  KILN_I8,
  KILN_I16,
  KILN_I32,
  KILN_I64,
  KILN_U8,
  KILN_U16,
  KILN_U32,
  KILN_U64,
  KILN_F16,
  KILN_BF16,
  KILN_F32,
  KILN_F64,
  KILN_NUM_DTYPES
} kiln_dtype;

/* "bool", "int8", ..., "float16", "bfloat16", "float32" (numpy names);
 * "invalid" for a value that is not a dtype. */
const char *kiln_dtype_name(kiln_dtype d);
/* Short jaxpr-style names: "bool", "i8", ..., "f16", "bf16", "f32", "f64";
 * "invalid" for a value that is not a dtype. */
const char *kiln_dtype_short_name(kiln_dtype d);
/* Parses either form; KILN_ERR_DTYPE for an unknown name. */
kiln_status kiln_dtype_from_name(const char *name, kiln_dtype *out);
size_t kiln_dtype_size(kiln_dtype d); /* bytes per element; 0 if invalid */
int kiln_dtype_is_valid(kiln_dtype d);
int kiln_dtype_is_bool(kiln_dtype d);
int kiln_dtype_is_integer(kiln_dtype d); /* signed or unsigned, not bool */
int kiln_dtype_is_signed(kiln_dtype d);  /* signed integers and floats */
int kiln_dtype_is_unsigned(kiln_dtype d);
int kiln_dtype_is_float(kiln_dtype d);

/* Round-to-nearest-even conversions; NaN stays NaN (quiet), infinities,
 * signed zeros and subnormals are exact where representable. Bit for bit as
 * XLA converts, except that f32 -> bf16 keeps the sign and top payload bits
 * of a NaN (XLA returns sign|0x7fc0), and bf16 -> f32 is the exact widening
 * (a signaling NaN stays signaling, as in XLA and CUDA). */
uint16_t kiln_f32_to_f16(float f);
float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);
float kiln_bf16_to_f32(uint16_t b);

/* A dtype with JAX's weak-type flag: scalar constants are weak, so that
 * `x_f16 * 2.0` stays f16. */
typedef struct kiln_wdtype {
  kiln_dtype dtype;
  int weak;
} kiln_wdtype;

typedef enum kiln_promotion_mode {
  KILN_PROMOTION_STANDARD = 0, /* jax_numpy_dtype_promotion='standard' */
  KILN_PROMOTION_STRICT = 1    /* jax_numpy_dtype_promotion='strict' */
} kiln_promotion_mode;

/* jnp.promote_types(a, b) with weak types as JAX's lattice defines them
 * (x64 enabled: 64-bit types are kept). Strict mode refuses every implicit
 * promotion between different strong types with KILN_ERR_PROMOTION.
 * This is the rule jnp's binary ops apply (dtypes.lattice_result_type): the
 * dtype and weak flag of `a + b`. Two weak operands join their concrete
 * dtypes and stay weak (weak f16 + weak f32 = weak f32); a weak operand
 * meeting a strong one counts by its kind only; a weak int or float result
 * from a weak kind is i64/f64; a bool result is never weak.
 * KILN_ERR_DTYPE for an invalid dtype, KILN_ERR_ARGUMENT for a NULL out or
 * an invalid mode. */
kiln_status kiln_promote_types(kiln_wdtype a, kiln_wdtype b, kiln_promotion_mode mode,
                               kiln_wdtype *out);
/* jax.dtypes.result_type(a, b, return_weak_type_flag=True): as
 * kiln_promote_types, but a weak result is reported at its kind's default
 * width (i64, u64 or f64), so weak f16 + weak f32 = weak f64. */
kiln_status kiln_result_type(kiln_wdtype a, kiln_wdtype b, kiln_promotion_mode mode,
                             kiln_wdtype *out);

#ifdef __cplusplus
}
#endif
#endif
