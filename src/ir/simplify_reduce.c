/* kir_simplify's rewrite of a reduction of a broadcast_in_dim over axes the
 * broadcast made (new axes, or size-1 axes it stretched): such a reduction
 * reads each element of the operand `count` times, so
 *   reduce_max/min/and/or  -> the operand itself, broadcast to the result;
 *   reduce_sum, integers   -> operand * count (the wrapped product is the
 *                             wrapped sum);
 *   reduce_sum, f32/f64    -> a literal operand v becomes the literal
 *                             count * v, only where every summation order
 *                             XLA's and kiln's reductions use gives exactly
 *                             that value (kir_sum_is_exact); a runtime float
 *                             operand is left alone, since sequential partial
 *                             sums of it round where the product does not;
 *   reduce_prod            -> left alone (pow(x, count) is not what a chain
 *                             of rounded products gives).
 * Without it, jnp.broadcast_to(1.0, (2**18, 2**18)).sum() runs 2^36 additions
 * (XLA's algebraic simplifier folds it likewise; JAX returns 2^36 exactly).
 * Every reduced axis must have a nonzero size: an empty reduction is the
 * identity, not a function of the operand. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* The reduce-window width of XLA:CPU's tree reduction (and of the reference
 * evaluator, reduce_eval.h): a pass folds boxes of up to this many elements
 * per reduced axis in sequence. */
#define KIR_SUM_TREE_WINDOW 32

/* Whether every summation of `count` copies of the finite, normal v that the
 * reductions run (sequential chains, blocks, trees of windows) rounds no
 * partial sum, so all give count * v exactly: with v = m * 2^e (m odd, p the
 * dtype's precision) either every multiple j * v, j <= count, is exact
 * (count * |m| <= 2^p), or count is a power of two and every window of the
 * tree (at most 32 elements per reduced axis, `axes` of them) sums exactly,
 * its partials up to 32^axes multiples of a power-of-two multiple of v. */
static bool kir_sum_is_exact(kiln_dtype d, double v, int64_t count, int axes) {
  int p = d == KILN_F32 ? FLT_MANT_DIG : DBL_MANT_DIG;
  if (v == 0 || isnan(v) || isinf(v)) return true; /* 0, NaN, +-inf: any order agrees */
  if (fabs(v) < (d == KILN_F32 ? FLT_MIN : DBL_MIN)) return false; /* kernels flush denormals */
  int e;
  double m = frexp(fabs(v), &e); /* v = m * 2^e, m in [0.5, 1) */
  while (m != floor(m)) m *= 2;   /* the odd integer significand */
  int bits = 0;
  while (bits < 64 && ldexp(1.0, bits) < m) bits++; /* m <= 2^bits */
  int cbits = 0;
  while (cbits < 63 && ((int64_t)1 << cbits) < count) cbits++; /* count <= 2^cbits */
  bool every_multiple = bits + cbits <= p;
  bool pow2 = (count & (count - 1)) == 0;
  bool windows = pow2 && bits + 5 * (axes < 13 ? axes : 13) <= p;
  if (!every_multiple && !windows) return false;
  double total = (double)count * v; /* exact: a power of two, or fewer than p bits */
  return fabs(total) <= (d == KILN_F32 ? FLT_MAX : DBL_MAX);
}

/* count modulo 2^bits as a literal of the integer dtype d. */
static kir_scalar kir_wrapped_count(kiln_dtype d, int64_t count) {
  int bits = (int)kiln_dtype_size(d) * 8;
  uint64_t u = bits == 64 ? (uint64_t)count : (uint64_t)count & (((uint64_t)1 << bits) - 1);
  if (kiln_dtype_is_unsigned(d) || bits == 64) return kir_scalar_u(u);
  uint64_t sign = (uint64_t)1 << (bits - 1);
  return kir_scalar_i((int64_t)(u ^ sign) - (int64_t)sign); /* sign-extended */
}

/* The literal v * count in the (integer) dtype d, wrapping. */
static kir_scalar kir_wrapped_product(kiln_dtype d, kir_scalar v, int64_t count) {
  uint64_t prod = v.u * (uint64_t)count; /* two's complement: the low bits are the same */
  int bits = (int)kiln_dtype_size(d) * 8;
  if (bits < 64) prod &= ((uint64_t)1 << bits) - 1;
  return kir_wrapped_count(d, (int64_t)prod);
}

/* Turns e into broadcast_in_dim(x) to e's result shape, the operand's
 * dimension k going where dims[k] says. */
static void kir_to_broadcast(kir_program *p, kir_eqn *e, kir_vid x, int rank, const int *dims) {
  const kir_aval *out = kir_var_aval(p, e->out[0]);
  memset(&e->params, 0, sizeof e->params);
  e->prim = KIR_PRIM_BROADCAST_IN_DIM;
  e->in[0] = x;
  e->params.broadcast.shape.n = out->rank;
  memcpy(e->params.broadcast.shape.v, out->shape, (size_t)out->rank * sizeof(int64_t));
  e->params.broadcast.broadcast_dimensions.n = rank;
  for (int k = 0; k < rank; k++) e->params.broadcast.broadcast_dimensions.v[k] = (int8_t)dims[k];
}

int kir_simplify_reduce_of_broadcast(kir_program *p, int i, kir_vid *to, kiln_status *st) {
  kir_eqn *e = &p->eqns[i];
  *st = KILN_OK;
  switch (e->prim) {
    case KIR_PRIM_REDUCE_SUM: case KIR_PRIM_REDUCE_MAX: case KIR_PRIM_REDUCE_MIN:
    case KIR_PRIM_REDUCE_AND: case KIR_PRIM_REDUCE_OR: break;
    default: return 0;
  }
  const kir_var *bv = &p->vars[e->in[0]];
  if (bv->kind != KIR_VAR_EQN || bv->eqn < 0) return 0;
  const kir_eqn *b = &p->eqns[bv->eqn];
  if (b->prim != KIR_PRIM_BROADCAST_IN_DIM) return 0;
  kir_vid x = b->in[0];
  const kir_aval xa = *kir_var_aval(p, x), ba = *kir_var_aval(p, e->in[0]);
  const kir_dims *axes = &e->params.axes.axes, *bd = &b->params.broadcast.broadcast_dimensions;
  if (axes->n == 0) return 0; /* moves no data: kir_simplify makes it a reshape */
  int64_t count = 1;
  for (int k = 0; k < axes->n; k++) {
    int a = axes->v[k];
    if (ba.shape[a] == 0) return 0;
    count *= ba.shape[a];
    for (int j = 0; j < bd->n; j++)
      if (bd->v[j] == a && xa.shape[j] != 1) return 0; /* an axis of the operand's own */
  }
  /* Where each operand axis lands in the result (-1: a reduced size-1 axis). */
  int dims[KIR_MAX_RANK], kept = 0;
  for (int j = 0; j < bd->n; j++) {
    dims[j] = kir_dims_contains(axes, bd->v[j]) ? -1 : 0;
    if (dims[j] < 0) continue;
    for (int d = 0; d < bd->v[j]; d++) dims[j] += !kir_dims_contains(axes, d);
    kept++;
  }
  const kir_aval out = *kir_var_aval(p, e->out[0]);
  kiln_dtype dt = xa.dtype;
  bool is_sum = e->prim == KIR_PRIM_REDUCE_SUM;
  if (is_sum && (kiln_dtype_is_bool(dt) || (kiln_dtype_is_float(dt) && dt != KILN_F32 &&
                                              dt != KILN_F64)))
    return 0; /* half types accumulate with a rounding per step */
  if (is_sum && p->vars[x].kind == KIR_VAR_LITERAL) {
    kir_scalar v = p->vars[x].u.literal, r;
    if (kiln_dtype_is_float(dt)) {
      if (!kir_sum_is_exact(dt, v.f, count, axes->n)) return 0;
      r = kir_scalar_f(v.f * (double)count);
    } else {
      r = kir_wrapped_product(dt, v, count);
    }
    if ((*st = kir_add_literal(p, dt, out.weak, r, &x)) != KILN_OK) return 0;
    e = &p->eqns[i];
    if (out.rank == 0) {
      *to = x;
      return 2;
    }
    kir_to_broadcast(p, e, x, 0, dims);
    return 1;
  }
  if (is_sum) { /* integers: x * count, where the result is x's own shape */
    if (kiln_dtype_is_float(dt) || !kir_aval_same_shape(&xa, &out)) return 0;
    kir_vid c, *in = kir_alloc(p, 2 * sizeof *in);
    if (!in) {
      *st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_simplify: out of memory");
      return 0;
    }
    if ((*st = kir_add_literal(p, dt, true, kir_wrapped_count(dt, count), &c)) != KILN_OK) return 0;
    e = &p->eqns[i];
    memset(&e->params, 0, sizeof e->params);
    e->prim = KIR_PRIM_MUL;
    in[0] = x;
    in[1] = c;
    e->in = in;
    e->n_in = 2;
    return 1;
  }
  /* max, min, and, or: every result element is an element of x. */
  if (kept == xa.rank) {
    kir_to_broadcast(p, e, x, xa.rank, dims);
    return 1;
  }
  if (kir_aval_size(&xa) == kir_aval_size(&out)) { /* x's reduced axes all have size 1 */
    bool ordered = true;
    for (int j = 1; j < bd->n; j++) ordered &= bd->v[j] > bd->v[j - 1];
    if (!ordered) return 0;
    memset(&e->params, 0, sizeof e->params);
    e->prim = KIR_PRIM_RESHAPE;
    e->in[0] = x;
    e->params.reshape.new_sizes.n = out.rank;
    memcpy(e->params.reshape.new_sizes.v, out.shape, (size_t)out.rank * sizeof(int64_t));
    return 1;
  }
  return 0;
}
