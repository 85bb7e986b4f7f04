/* dtype names, sizes and kinds, and the exported f16/bf16 conversions. */
#include <string.h>

#include "core/core.h"

typedef enum kcore_dtype_kind {
  KCORE_KIND_BOOL = 1,
  KCORE_KIND_SINT,
  KCORE_KIND_UINT,
  KCORE_KIND_FLOAT
} kcore_dtype_kind;

typedef struct kcore_dtype_info {
  const char *name;       /* numpy's name */
  const char *short_name; /* jaxpr's name */
  unsigned char size;
  unsigned char kind;
} kcore_dtype_info;

static const kcore_dtype_info kcore_dtypes[KILN_NUM_DTYPES] = {
    [KILN_BOOL] = {"bool", "bool", 1, KCORE_KIND_BOOL},
    [KILN_I8] = {"int8", "i8", 1, KCORE_KIND_SINT},
    [KILN_I16] = {"int16", "i16", 2, KCORE_KIND_SINT},
    [KILN_I32] = {"int32", "i32", 4, KCORE_KIND_SINT},
    [KILN_I64] = {"int64", "i64", 8, KCORE_KIND_SINT},
    [KILN_U8] = {"uint8", "u8", 1, KCORE_KIND_UINT},
    [KILN_U16] = {"uint16", "u16", 2, KCORE_KIND_UINT},
    [KILN_U32] = {"uint32", "u32", 4, KCORE_KIND_UINT},
    [KILN_U64] = {"uint64", "u64", 8, KCORE_KIND_UINT},
    [KILN_F16] = {"float16", "f16", 2, KCORE_KIND_FLOAT},
    [KILN_BF16] = {"bfloat16", "bf16", 2, KCORE_KIND_FLOAT},
    [KILN_F32] = {"float32", "f32", 4, KCORE_KIND_FLOAT},
    [KILN_F64] = {"float64", "f64", 8, KCORE_KIND_FLOAT},
};

int kiln_dtype_is_valid(kiln_dtype d) {
  /* Compared as int: callers may hand in any integer cast to the enum. */
  return (int)d > (int)KILN_INVALID_DTYPE && (int)d < (int)KILN_NUM_DTYPES;
}

static int kcore_dtype_kind_of(kiln_dtype d) {
  return kiln_dtype_is_valid(d) ? kcore_dtypes[d].kind : 0;
}

const char *kiln_dtype_name(kiln_dtype d) {
  return kiln_dtype_is_valid(d) ? kcore_dtypes[d].name : "invalid";
}

const char *kiln_dtype_short_name(kiln_dtype d) {
  return kiln_dtype_is_valid(d) ? kcore_dtypes[d].short_name : "invalid";
}

kiln_status kiln_dtype_from_name(const char *name, kiln_dtype *out) {
  if (!name || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_dtype_from_name: %s is NULL", name ? "out" : "name");
  for (int d = KILN_BOOL; d < KILN_NUM_DTYPES; d++) {
    if (strcmp(name, kcore_dtypes[d].name) == 0 || strcmp(name, kcore_dtypes[d].short_name) == 0) {
      *out = (kiln_dtype)d;
      return KILN_OK;
    }
  }
  return kcore_fail(KILN_ERR_DTYPE,
                    "kiln_dtype_from_name: unknown dtype name '%.64s' (expected a numpy name such "
                    "as 'float32' or a short name such as 'f32')",
                    name);
}

size_t kiln_dtype_size(kiln_dtype d) { return kiln_dtype_is_valid(d) ? kcore_dtypes[d].size : 0; }

int kiln_dtype_is_bool(kiln_dtype d) { return kcore_dtype_kind_of(d) == KCORE_KIND_BOOL; }

int kiln_dtype_is_integer(kiln_dtype d) {
  int k = kcore_dtype_kind_of(d);
  return k == KCORE_KIND_SINT || k == KCORE_KIND_UINT;
}

int kiln_dtype_is_signed(kiln_dtype d) {
  int k = kcore_dtype_kind_of(d);
  return k == KCORE_KIND_SINT || k == KCORE_KIND_FLOAT;
}

int kiln_dtype_is_unsigned(kiln_dtype d) { return kcore_dtype_kind_of(d) == KCORE_KIND_UINT; }

int kiln_dtype_is_float(kiln_dtype d) { return kcore_dtype_kind_of(d) == KCORE_KIND_FLOAT; }

kiln_status kcore_check_dtype(const char *op, kiln_dtype d) {
  if (kiln_dtype_is_valid(d)) return KILN_OK;
  return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d (expected a kiln_dtype in [%d, %d])", op,
                    (int)d, (int)KILN_BOOL, (int)KILN_F64);
}

uint16_t kiln_f32_to_f16(float f) { return kcore_f32_to_f16(f); }
float kiln_f16_to_f32(uint16_t h) { return kcore_f16_to_f32(h); }
uint16_t kiln_f32_to_bf16(float f) { return kcore_f32_to_bf16(f); }
float kiln_bf16_to_f32(uint16_t b) { return kcore_bf16_to_f32(b); }
