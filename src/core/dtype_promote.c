/* JAX's type promotion lattice (jax._src.dtypes) with weak types, x64 on.
 *
 * Lattice nodes are the strong dtypes (numbered as kiln_dtype) plus the two
 * weak kinds JAX calls `int` and `float`. A weak operand enters the lattice
 * as its kind (a weak bool as strong bool). Each node's upper-bound set, as a
 * bit mask, is the node itself and the sets of the nodes it points to, so the
 * tables below are the lattice's edges closed at compile time. */
#include "core/core.h"

enum { KCORE_NODE_WEAK_INT = KILN_NUM_DTYPES, KCORE_NODE_WEAK_FLOAT, KCORE_NUM_NODES };

#define KCORE_BIT(n) (1u << (n))
#define KCORE_INTS                                                                        \
  (KCORE_BIT(KILN_I8) | KCORE_BIT(KILN_I16) | KCORE_BIT(KILN_I32) | KCORE_BIT(KILN_I64) | \
   KCORE_BIT(KILN_U8) | KCORE_BIT(KILN_U16) | KCORE_BIT(KILN_U32) | KCORE_BIT(KILN_U64))
#define KCORE_FLOATS \
  (KCORE_BIT(KILN_F16) | KCORE_BIT(KILN_BF16) | KCORE_BIT(KILN_F32) | KCORE_BIT(KILN_F64))

/* 'standard': bool -> int -> {u8, i8}; unsigned widen to the next unsigned
 * or to the next wider signed type; i64, u64 -> float -> {f16, bf16} -> f32
 * -> f64. So ints meet floats at the float's width, and i64 + u64 is a weak
 * float (f64). */
#define KCORE_UB_F64 KCORE_BIT(KILN_F64)
#define KCORE_UB_F32 (KCORE_BIT(KILN_F32) | KCORE_UB_F64)
#define KCORE_UB_F16 (KCORE_BIT(KILN_F16) | KCORE_UB_F32)
#define KCORE_UB_BF16 (KCORE_BIT(KILN_BF16) | KCORE_UB_F32)
#define KCORE_UB_WFLOAT (KCORE_BIT(KCORE_NODE_WEAK_FLOAT) | KCORE_UB_F16 | KCORE_UB_BF16)
#define KCORE_UB_I64 (KCORE_BIT(KILN_I64) | KCORE_UB_WFLOAT)
#define KCORE_UB_U64 (KCORE_BIT(KILN_U64) | KCORE_UB_WFLOAT)
#define KCORE_UB_I32 (KCORE_BIT(KILN_I32) | KCORE_UB_I64)
#define KCORE_UB_U32 (KCORE_BIT(KILN_U32) | KCORE_UB_I64 | KCORE_UB_U64)
#define KCORE_UB_I16 (KCORE_BIT(KILN_I16) | KCORE_UB_I32)
#define KCORE_UB_U16 (KCORE_BIT(KILN_U16) | KCORE_UB_I32 | KCORE_UB_U32)
#define KCORE_UB_I8 (KCORE_BIT(KILN_I8) | KCORE_UB_I16)
#define KCORE_UB_U8 (KCORE_BIT(KILN_U8) | KCORE_UB_I16 | KCORE_UB_U16)
#define KCORE_UB_WINT (KCORE_BIT(KCORE_NODE_WEAK_INT) | KCORE_UB_I8 | KCORE_UB_U8)
#define KCORE_UB_BOOL (KCORE_BIT(KILN_BOOL) | KCORE_UB_WINT)

static const uint32_t kcore_standard_ub[KCORE_NUM_NODES] = {
    [KILN_BOOL] = KCORE_UB_BOOL,
    [KILN_I8] = KCORE_UB_I8,
    [KILN_I16] = KCORE_UB_I16,
    [KILN_I32] = KCORE_UB_I32,
    [KILN_I64] = KCORE_UB_I64,
    [KILN_U8] = KCORE_UB_U8,
    [KILN_U16] = KCORE_UB_U16,
    [KILN_U32] = KCORE_UB_U32,
    [KILN_U64] = KCORE_UB_U64,
    [KILN_F16] = KCORE_UB_F16,
    [KILN_BF16] = KCORE_UB_BF16,
    [KILN_F32] = KCORE_UB_F32,
    [KILN_F64] = KCORE_UB_F64,
    [KCORE_NODE_WEAK_INT] = KCORE_UB_WINT,
    [KCORE_NODE_WEAK_FLOAT] = KCORE_UB_WFLOAT,
};

/* 'strict': strong types only meet themselves; a weak int may become any
 * int or float, a weak float any float. */
static const uint32_t kcore_strict_ub[KCORE_NUM_NODES] = {
    [KILN_BOOL] = KCORE_BIT(KILN_BOOL),
    [KILN_I8] = KCORE_BIT(KILN_I8),
    [KILN_I16] = KCORE_BIT(KILN_I16),
    [KILN_I32] = KCORE_BIT(KILN_I32),
    [KILN_I64] = KCORE_BIT(KILN_I64),
    [KILN_U8] = KCORE_BIT(KILN_U8),
    [KILN_U16] = KCORE_BIT(KILN_U16),
    [KILN_U32] = KCORE_BIT(KILN_U32),
    [KILN_U64] = KCORE_BIT(KILN_U64),
    [KILN_F16] = KCORE_BIT(KILN_F16),
    [KILN_BF16] = KCORE_BIT(KILN_BF16),
    [KILN_F32] = KCORE_BIT(KILN_F32),
    [KILN_F64] = KCORE_BIT(KILN_F64),
    [KCORE_NODE_WEAK_INT] = KCORE_BIT(KCORE_NODE_WEAK_INT) | KCORE_INTS |
                            KCORE_BIT(KCORE_NODE_WEAK_FLOAT) | KCORE_FLOATS,
    [KCORE_NODE_WEAK_FLOAT] = KCORE_BIT(KCORE_NODE_WEAK_FLOAT) | KCORE_FLOATS,
};

/* The least upper bound of nodes x and y: the common upper bound c whose own
 * upper bounds are all the common ones. -1 when there is none. */
static int kcore_lattice_join(const uint32_t *ub, int x, int y) {
  uint32_t common = ub[x] & ub[y];
  for (int c = KILN_BOOL; c < KCORE_NUM_NODES; c++)
    if ((common & KCORE_BIT(c)) && ub[c] == common) return c;
  return -1;
}

static int kcore_lattice_node(kiln_wdtype t) {
  if (!t.weak || kiln_dtype_is_bool(t.dtype)) return t.dtype;
  return kiln_dtype_is_float(t.dtype) ? KCORE_NODE_WEAK_FLOAT : KCORE_NODE_WEAK_INT;
}

static kiln_wdtype kcore_lattice_wdtype(int node) {
  /* Weak nodes take the canonical width of their kind under x64. */
  if (node == KCORE_NODE_WEAK_INT) return (kiln_wdtype){KILN_I64, 1};
  if (node == KCORE_NODE_WEAK_FLOAT) return (kiln_wdtype){KILN_F64, 1};
  return (kiln_wdtype){(kiln_dtype)node, 0};
}

static const char *kcore_weak_prefix(kiln_wdtype t) { return t.weak ? "weak " : ""; }

static kiln_status kcore_promote_check(const char *op, kiln_wdtype a, kiln_wdtype b,
                                       kiln_promotion_mode mode, const kiln_wdtype *out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  if (!kiln_dtype_is_valid(a.dtype) || !kiln_dtype_is_valid(b.dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d (%s operand; expected [%d, %d])", op,
                      (int)(kiln_dtype_is_valid(a.dtype) ? b.dtype : a.dtype),
                      kiln_dtype_is_valid(a.dtype) ? "second" : "first", (int)KILN_BOOL,
                      (int)KILN_F64);
  if ((int)mode != KILN_PROMOTION_STANDARD && (int)mode != KILN_PROMOTION_STRICT)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: invalid promotion mode %d", op, (int)mode);
  return KILN_OK;
}

/* dtypes.lattice_result_type(a, b), the rule jnp's binary ops apply. */
static kiln_status kcore_promote(const char *op, kiln_wdtype a, kiln_wdtype b,
                                 kiln_promotion_mode mode, kiln_wdtype *out) {
  kiln_status s = kcore_promote_check(op, a, b, mode, out);
  if (s != KILN_OK) return s;
  a.weak = a.weak != 0;
  b.weak = b.weak != 0;
  kiln_wdtype r;
  if (a.dtype == b.dtype && !(a.weak && b.weak)) {
    r = (kiln_wdtype){a.dtype, 0}; /* a strong type absorbs its own weak form */
  } else if (a.weak && b.weak && mode == KILN_PROMOTION_STANDARD) {
    /* All weak: join the concrete dtypes and keep the result weak, so that
     * two weak f16 values stay f16 rather than widening to the default. */
    int node = kcore_lattice_join(kcore_standard_ub, a.dtype, b.dtype);
    KCORE_ASSERT(node >= KILN_BOOL); /* i64 and u64 join at the weak float */
    r = (kiln_wdtype){kcore_lattice_wdtype(node).dtype, 1};
  } else {
    const uint32_t *ub = mode == KILN_PROMOTION_STRICT ? kcore_strict_ub : kcore_standard_ub;
    int node = kcore_lattice_join(ub, kcore_lattice_node(a), kcore_lattice_node(b));
    if (node < 0) {
      KCORE_ASSERT(mode == KILN_PROMOTION_STRICT); /* 'standard' joins everything */
      return kcore_fail(KILN_ERR_PROMOTION,
                        "%s: no implicit promotion between %s%s and %s%s under strict dtype "
                        "promotion; cast one operand explicitly",
                        op, kcore_weak_prefix(a), kiln_dtype_short_name(a.dtype),
                        kcore_weak_prefix(b), kiln_dtype_short_name(b.dtype));
    }
    r = kcore_lattice_wdtype(node);
  }
  if (r.dtype == KILN_BOOL) r.weak = 0; /* JAX never reports a weak bool */
  *out = r;
  return KILN_OK;
}

kiln_status kiln_promote_types(kiln_wdtype a, kiln_wdtype b, kiln_promotion_mode mode,
                               kiln_wdtype *out) {
  return kcore_promote("kiln_promote_types", a, b, mode, out);
}

kiln_status kiln_result_type(kiln_wdtype a, kiln_wdtype b, kiln_promotion_mode mode,
                             kiln_wdtype *out) {
  kiln_status s = kcore_promote("kiln_result_type", a, b, mode, out);
  if (s != KILN_OK || !out->weak) return s;
  /* result_type reports a weak result at its kind's default width. */
  if (kiln_dtype_is_float(out->dtype))
    out->dtype = KILN_F64;
  else
    out->dtype = kiln_dtype_is_unsigned(out->dtype) ? KILN_U64 : KILN_I64;
  return KILN_OK;
}
