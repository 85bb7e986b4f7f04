/* The elementwise reference evaluators: loads and stores, the loop nest
 * with lax broadcasting, conversions, and the evaluator of each primitive
 * (the scalar ops are in elementwise_float.c and elementwise_int.c). */
#include <string.h>

#include "ir/elementwise_eval.h"

/* ---- loads and stores ---- */

static inline uint64_t kir_ew_bool(uint8_t b) { return b != 0; }

/* X(dtype, C type, domain field, conversion to the field) */
#define KIR_EW_DTYPES(X)                       \
  X(KILN_BOOL, uint8_t, u, kir_ew_bool)        \
  X(KILN_I8, int8_t, i, (int64_t))             \
  X(KILN_I16, int16_t, i, (int64_t))           \
  X(KILN_I32, int32_t, i, (int64_t))           \
  X(KILN_I64, int64_t, i, (int64_t))           \
  X(KILN_U8, uint8_t, u, (uint64_t))           \
  X(KILN_U16, uint16_t, u, (uint64_t))         \
  X(KILN_U32, uint32_t, u, (uint64_t))         \
  X(KILN_U64, uint64_t, u, (uint64_t))         \
  X(KILN_F16, uint16_t, f, kcore_f16_to_f32)   \
  X(KILN_BF16, uint16_t, f, kcore_bf16_to_f32) \
  X(KILN_F32, float, f, (double))              \
  X(KILN_F64, double, f, (double))

/* Loads v[0..n) from elements off, off + stride, ... of a dtype array. */
static void kir_ew_load(kiln_dtype dt, const void *data, int64_t off, int64_t stride, int64_t n,
                        kir_ew_val *v) {
  switch (dt) {
#define KIR_EW_LOAD(DT, T, FIELD, CONV)                               \
  case DT: {                                                          \
    const T *p = (const T *)data + off;                               \
    for (int64_t i = 0; i < n; i++) v[i].FIELD = CONV(p[i * stride]); \
    break;                                                            \
  }
    KIR_EW_DTYPES(KIR_EW_LOAD)
#undef KIR_EW_LOAD
    default: KCORE_ASSERT(!"invalid dtype");
  }
}

/* Stores v[0..n) at elements off.. of a dtype array: floats rounded to
 * nearest even, integers wrapped (signed ones written through their
 * unsigned type: the two's complement bits). */
static void kir_ew_store(kiln_dtype dt, void *data, int64_t off, int64_t n, const kir_ew_val *v) {
  switch (dt) {
#define KIR_EW_STORE(DT, T, EXPR)                     \
  case DT: {                                          \
    T *p = (T *)data + off;                           \
    for (int64_t i = 0; i < n; i++) p[i] = (T)(EXPR); \
    break;                                            \
  }
    KIR_EW_STORE(KILN_BOOL, uint8_t, v[i].u != 0)
    KIR_EW_STORE(KILN_I8, uint8_t, v[i].u)
    KIR_EW_STORE(KILN_U8, uint8_t, v[i].u)
    KIR_EW_STORE(KILN_I16, uint16_t, v[i].u)
    KIR_EW_STORE(KILN_U16, uint16_t, v[i].u)
    KIR_EW_STORE(KILN_I32, uint32_t, v[i].u)
    KIR_EW_STORE(KILN_U32, uint32_t, v[i].u)
    KIR_EW_STORE(KILN_I64, uint64_t, v[i].u)
    KIR_EW_STORE(KILN_U64, uint64_t, v[i].u)
    KIR_EW_STORE(KILN_F16, uint16_t, kir_ew_f64_to_f16(v[i].f))
    KIR_EW_STORE(KILN_BF16, uint16_t, kcore_f32_to_bf16((float)v[i].f))
    KIR_EW_STORE(KILN_F32, float, v[i].f)
    KIR_EW_STORE(KILN_F64, double, v[i].f)
#undef KIR_EW_STORE
    default: KCORE_ASSERT(!"invalid dtype");
  }
}

/* ---- the loop nest, with lax broadcasting ---- */

#define KIR_EW_MAX_IN 3  /* clamp */
#define KIR_EW_CHUNK 256 /* elements per row call */

/* The result's shape with size-1 dimensions dropped and contiguous ones
 * merged, and every operand's strides (in elements) over it: 0 where the
 * operand broadcasts. The innermost stride is then 0 or 1. */
typedef struct kir_ew_nest {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  int64_t stride[KIR_EW_MAX_IN][KIR_MAX_RANK];
} kir_ew_nest;

/* Strides of one operand over the result's dimensions. */
static void kir_ew_operand_strides(const kir_aval *x, const kir_aval *out, int64_t *stride) {
  int64_t step = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    bool broadcast = x->rank == 0 || x->shape[d] != out->shape[d];
    stride[d] = broadcast ? 0 : step;
    if (x->rank) step *= x->shape[d];
  }
}

/* Whether dimension d folds into d + 1 for every operand. */
static bool kir_ew_mergeable(const kir_ew_nest *nest, int n_in, int d) {
  for (int k = 0; k < n_in; k++)
    if (nest->stride[k][d] != nest->stride[k][d + 1] * nest->shape[d + 1]) return false;
  return true;
}

static void kir_ew_nest_init(kir_ew_nest *nest, int n_in, const kir_buffer *in,
                             const kir_aval *out) {
  int64_t full[KIR_EW_MAX_IN][KIR_MAX_RANK];
  for (int k = 0; k < n_in; k++) kir_ew_operand_strides(&in[k].aval, out, full[k]);
  nest->rank = 0;
  for (int d = 0; d < out->rank; d++) {
    if (out->shape[d] == 1) continue;
    int r = nest->rank++;
    nest->shape[r] = out->shape[d];
    for (int k = 0; k < n_in; k++) nest->stride[k][r] = full[k][d];
    if (r > 0 && kir_ew_mergeable(nest, n_in, r - 1)) {
      nest->shape[r - 1] *= nest->shape[r];
      for (int k = 0; k < n_in; k++) nest->stride[k][r - 1] = nest->stride[k][r];
      nest->rank--;
    }
  }
}

/* Moves the outer index (every dimension but the innermost) one step on,
 * updating the operands' offsets; false after the last row. */
static bool kir_ew_next_row(const kir_ew_nest *nest, int n_in, int64_t *index, int64_t *off) {
  for (int d = nest->rank - 2; d >= 0; d--) {
    index[d]++;
    for (int k = 0; k < n_in; k++) off[k] += nest->stride[k][d];
    if (index[d] < nest->shape[d]) return true;
    for (int k = 0; k < n_in; k++) off[k] -= nest->stride[k][d] * nest->shape[d];
    index[d] = 0;
  }
  return false;
}

/* out = row(in...) elementwise, a chunk of an innermost row at a time. */
static void kir_ew_map(int n_in, const kir_buffer *in, kir_buffer *out, const kir_ew_op *op,
                       kir_ew_row_fn row) {
  KCORE_ASSERT(n_in >= 1 && n_in <= KIR_EW_MAX_IN && row);
  int64_t total = kir_aval_size(&out->aval);
  KCORE_ASSERT(out->nbytes == (size_t)total * kiln_dtype_size(out->aval.dtype));
  if (total == 0) return;
  kir_ew_nest nest;
  kir_ew_nest_init(&nest, n_in, in, &out->aval);
  int64_t len = nest.rank ? nest.shape[nest.rank - 1] : 1;
  int64_t index[KIR_MAX_RANK] = {0}, off[KIR_EW_MAX_IN] = {0}, out_off = 0;
  kir_ew_val vals[KIR_EW_MAX_IN][KIR_EW_CHUNK], res[KIR_EW_CHUNK];
  const kir_ew_val *x[KIR_EW_MAX_IN];
  for (int k = 0; k < n_in; k++) x[k] = vals[k];
  do {
    for (int64_t j = 0; j < len; j += KIR_EW_CHUNK) {
      int64_t n = len - j < KIR_EW_CHUNK ? len - j : KIR_EW_CHUNK;
      for (int k = 0; k < n_in; k++) {
        int64_t s = nest.rank ? nest.stride[k][nest.rank - 1] : 0;
        kir_ew_load(in[k].aval.dtype, in[k].data, off[k] + j * s, s, n, vals[k]);
      }
      row(op, n, x, res);
      kir_ew_store(out->aval.dtype, out->data, out_off + j, n, res);
    }
    out_off += len;
  } while (kir_ew_next_row(&nest, n_in, index, off));
}

/* ---- conversions ---- */

/* Float -> float as XLA:CPU converts: f32 (and bf16, which widens to f32)
 * -> f64 under DAZ; f64 -> f32 and f64 -> bf16 (through f32) under DAZ and
 * FTZ; f64 -> f16 rounds once; the rest flush nothing visible. */
static inline double kir_ew_float_to_float(kiln_dtype from, kiln_dtype to, double v) {
  bool from_f32 = from == KILN_F32 || from == KILN_BF16;
  if (to == KILN_F64 && from_f32) return kir_ew_daz(KILN_F32, v);
  if (from == KILN_F64 && (to == KILN_F32 || to == KILN_BF16))
    return kir_ew_ftz(KILN_F32, kir_ew_daz(KILN_F64, v));
  return v;
}

/* Float -> integer: truncation toward zero, saturating, NaN -> 0. */
static inline uint64_t kir_ew_float_to_int(double v, int bits, bool is_signed) {
  if (isnan(v)) return 0;
  if (is_signed) {
    uint64_t top = 1ull << (bits - 1); /* the store wraps it to INT_MIN */
    if (v >= ldexp(1.0, bits - 1)) return top - 1;
    if (v <= -ldexp(1.0, bits - 1)) return top;
    return (uint64_t)(int64_t)v;
  }
  if (v <= 0) return 0;
  return v >= ldexp(1.0, bits) ? UINT64_MAX : (uint64_t)v;
}

/* Float -> bool is x != 0, read under DAZ from f32 and f64 (not from bf16,
 * whose widening to f32 is a bit shift). */
static inline uint64_t kir_ew_float_to_bool(kiln_dtype from, double v) {
  if (from == KILN_F32 || from == KILN_F64) v = kir_ew_daz(from, v);
  return v != 0;
}

static void kir_ew_row_convert(const kir_ew_op *op, int64_t n, const kir_ew_val *const *x,
                               kir_ew_val *y) {
  kiln_dtype from = op->dtype, to = op->aux_dtype;
  bool from_float = kiln_dtype_is_float(from), to_float = kiln_dtype_is_float(to);
  int to_bits = (int)kiln_dtype_size(to) * 8;
  bool to_signed = kiln_dtype_is_signed(to), to_bool = kiln_dtype_is_bool(to);
  for (int64_t i = 0; i < n; i++) {
    kir_ew_val v = x[0][i];
    if (from_float && to_float)
      y[i].f = kir_ew_float_to_float(from, to, v.f);
    else if (from_float && to_bool)
      y[i].u = kir_ew_float_to_bool(from, v.f);
    else if (from_float)
      y[i].u = kir_ew_float_to_int(v.f, to_bits, to_signed);
    else if (to_float)
      y[i].f = kir_ew_int_to_float(v, op->is_signed, to);
    else
      y[i].u = to_bool ? v.u != 0 : v.u; /* the store wraps */
  }
}

/* ---- evaluators ---- */

static kir_ew_op kir_ew_op_make(const kir_eqn *e, const kir_buffer *in) {
  kir_ew_op op;
  memset(&op, 0, sizeof op);
  op.dtype = in[0].aval.dtype;
  op.aux_dtype = e->n_in > 1 ? in[1].aval.dtype : KILN_INVALID_DTYPE;
  op.bits = kiln_dtype_is_bool(op.dtype) ? 1 : (int)kiln_dtype_size(op.dtype) * 8;
  op.is_signed = kiln_dtype_is_integer(op.dtype) && kiln_dtype_is_signed(op.dtype);
  op.mask = UINT64_MAX >> (64 - op.bits);
  op.params = &e->params;
  return op;
}

/* Every unary, binary and comparison primitive, and clamp. */
static kiln_status kir_eval_map(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                void *ctx) {
  (void)ctx;
  kir_ew_op op = kir_ew_op_make(e, in);
  bool is_float = kiln_dtype_is_float(op.dtype);
  kir_ew_map(e->n_in, in, out, &op, (is_float ? kir_ew_float_rows : kir_ew_int_rows)[e->prim]);
  return KILN_OK;
}

static kiln_status kir_eval_convert_element_type(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)ctx;
  if (in[0].aval.dtype == out->aval.dtype) { /* the identity, NaN payloads included */
    KCORE_ASSERT(in[0].nbytes == out->nbytes);
    if (out->nbytes) memcpy(out->data, in[0].data, out->nbytes);
    return KILN_OK;
  }
  kir_ew_op op = kir_ew_op_make(e, in);
  op.aux_dtype = out->aval.dtype;
  kir_ew_map(1, in, out, &op, kir_ew_row_convert);
  return KILN_OK;
}

/* Little-endian hosts, like JAX's: the narrower elements of one wide
 * element are its bytes in memory order, so the data is copied as is. */
static kiln_status kir_eval_bitcast_convert_type(const kir_eqn *e, const kir_buffer *in,
                                                 kir_buffer *out, void *ctx) {
  (void)e;
  (void)ctx;
  KCORE_ASSERT(in[0].nbytes == out->nbytes);
  if (out->nbytes) memcpy(out->data, in[0].data, out->nbytes);
  return KILN_OK;
}

/* The case `which` picks, clamped into range as XLA's lowering (a tree of
 * `which < k` selects) does for out-of-range values. */
static int kir_ew_case_index(kir_ew_val w, bool is_signed, int n_cases) {
  if (is_signed ? w.i <= 0 : w.u == 0) return 0;
  return w.u >= (uint64_t)n_cases ? n_cases - 1 : (int)w.u;
}

/* select_n(which, *cases): copies each element from the case `which`
 * names; the cases have the result's shape, `which` is scalar or too. */
static kiln_status kir_eval_select_n(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                     void *ctx) {
  (void)ctx;
  const kir_buffer *which = &in[0];
  int n_cases = e->n_in - 1;
  size_t size = kiln_dtype_size(out->aval.dtype);
  int64_t total = kir_aval_size(&out->aval);
  bool is_signed = kiln_dtype_is_integer(which->aval.dtype) &&
                   kiln_dtype_is_signed(which->aval.dtype);
  int64_t stride = which->aval.rank == 0 ? 0 : 1;
  kir_ew_val w[KIR_EW_CHUNK];
  for (int64_t j = 0; j < total; j += KIR_EW_CHUNK) {
    int64_t n = total - j < KIR_EW_CHUNK ? total - j : KIR_EW_CHUNK;
    kir_ew_load(which->aval.dtype, which->data, j * stride, stride, n, w);
    for (int64_t i = 0; i < n; i++) {
      const kir_buffer *c = &in[1 + kir_ew_case_index(w[i], is_signed, n_cases)];
      size_t at = (size_t)(j + i) * size;
      memcpy((char *)out->data + at, (const char *)c->data + at, size);
    }
  }
  return KILN_OK;
}

void kir_elementwise_evals(kir_eval_table *t) {
  for (int p = 0; p < KIR_NUM_PRIMS; p++)
    if (kir_ew_float_rows[p] || kir_ew_int_rows[p]) t->fn[p] = kir_eval_map;
  /* records whose evaluator takes the whole equation (eval_float EQN) */
#define KIR_EW_EQN_EQN(ID, name) t->fn[KIR_PRIM_##ID] = kir_eval_##name;
#define KIR_EW_EQN_F1(ID, name)
#define KIR_EW_EQN_F2(ID, name)
#define KIR_EW_EQN_FB1(ID, name)
#define KIR_EW_EQN_FB2(ID, name)
#define KIR_EW_EQN_SPELLED(ID, name)
#define KIR_EW_EQN_OWN(ID, name)
#define KIR_EW_EQN_NONE(ID, name)
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_EQN_##eval_float(ID, name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
#undef KIR_PRIM
}
