/* dot_general: shape/dtype rule (lax semantics); the reference
 * implementation goes here too. */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* XLA's HigherPrecisionType ordering, as lax's _dot_general_dtype_rule
 * compares them: (max exponent, mantissa bits, bit width, not unsigned). */
static int kir_dot_rank_cmp(kiln_dtype a, kiln_dtype b) {
  struct props {
    int maxexp, nmant, bits, not_unsigned;
  } p[2];
  kiln_dtype d[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    p[i].maxexp = -1;
    p[i].nmant = -1;
    switch (d[i]) {
      case KILN_F16: p[i].maxexp = 16, p[i].nmant = 10; break;
      case KILN_BF16: p[i].maxexp = 128, p[i].nmant = 7; break;
      case KILN_F32: p[i].maxexp = 128, p[i].nmant = 23; break;
      case KILN_F64: p[i].maxexp = 1024, p[i].nmant = 52; break;
      default: break;
    }
    p[i].bits = kiln_dtype_is_bool(d[i]) ? 1 : (int)kiln_dtype_size(d[i]) * 8;
    p[i].not_unsigned = !kiln_dtype_is_unsigned(d[i]);
  }
  int c[4] = {p[0].maxexp - p[1].maxexp, p[0].nmant - p[1].nmant, p[0].bits - p[1].bits,
              p[0].not_unsigned - p[1].not_unsigned};
  for (int i = 0; i < 4; i++)
    if (c[i]) return c[i] > 0 ? 1 : -1;
  return 0;
}

static kiln_status kir_dot_dtype(const kir_aval *lhs, const kir_aval *rhs, kiln_dtype preferred,
                                 kiln_dtype *out) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  int c = kir_dot_rank_cmp(lhs->dtype, rhs->dtype);
  if (c == 0 && lhs->dtype != rhs->dtype)
    return kcore_fail(KILN_ERR_DTYPE, "dot_general: operand types %s and %s have incompatible dtypes",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  kiln_dtype result = c >= 0 ? lhs->dtype : rhs->dtype;
  if (preferred == KILN_INVALID_DTYPE || preferred == result) {
    *out = result;
    return KILN_OK;
  }
  if (!kiln_dtype_is_valid(preferred))
    return kcore_fail(KILN_ERR_DTYPE, "dot_general: preferred_element_type %d is not a dtype",
                      (int)preferred);
  size_t pbits = kiln_dtype_is_bool(preferred) ? 1 : kiln_dtype_size(preferred) * 8;
  size_t rbits = kiln_dtype_is_bool(result) ? 1 : kiln_dtype_size(result) * 8;
  if (!kiln_dtype_is_float(result) && pbits < rbits)
    return kcore_fail(KILN_ERR_DTYPE,
                      "dot_general: preferred_element_type %s is narrower than the result type %s "
                      "of operands %s and %s",
                      kiln_dtype_name(preferred), kiln_dtype_name(result),
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  *out = preferred;
  return KILN_OK;
}

static bool kir_in(const kir_dims *d, int v) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == v) return true;
  return false;
}

/* Checks one side's dims: in range, distinct, batch and contracting disjoint. */
static kiln_status kir_dot_side(const char *side, const kir_dims *contract, const kir_dims *batch,
                                const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP];
  const kir_dims *lists[2] = {contract, batch};
  for (int l = 0; l < 2; l++) {
    for (int i = 0; i < lists[l]->n; i++) {
      int v = lists[l]->v[i];
      if (v < 0 || v >= x->rank)
        return kcore_fail(KILN_ERR_SHAPE, "dot_general: %s %s dimension %d is outside [0, %d) for %s",
                          side, l ? "batch" : "contracting", v, x->rank,
                          kir_aval_str(x, t, sizeof t));
      for (int j = 0; j < i; j++)
        if (lists[l]->v[j] == v)
          return kcore_fail(KILN_ERR_ARGUMENT, "dot_general: %s %s dimensions repeat %d", side,
                            l ? "batch" : "contracting", v);
      if (l == 1 && kir_in(contract, v))
        return kcore_fail(KILN_ERR_ARGUMENT,
                          "dot_general: %s dimension %d is both batch and contracting", side, v);
    }
  }
  return KILN_OK;
}

kiln_status kir_rule_dot_general(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  const kir_dot_dims *d = &params->dot.dimension_numbers;
  const kir_aval *lhs = &in[0], *rhs = &in[1];
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  kiln_status st = kir_dot_side("lhs", &d->lhs_contracting, &d->lhs_batch, lhs);
  if (st == KILN_OK) st = kir_dot_side("rhs", &d->rhs_contracting, &d->rhs_batch, rhs);
  if (st != KILN_OK) return st;
  if (d->lhs_batch.n != d->rhs_batch.n || d->lhs_contracting.n != d->rhs_contracting.n)
    return kcore_fail(KILN_ERR_SHAPE,
                      "dot_general: lhs and rhs need as many batch (%d, %d) and contracting "
                      "(%d, %d) dimensions",
                      d->lhs_batch.n, d->rhs_batch.n, d->lhs_contracting.n, d->rhs_contracting.n);
  for (int i = 0; i < d->lhs_batch.n; i++)
    if (lhs->shape[d->lhs_batch.v[i]] != rhs->shape[d->rhs_batch.v[i]])
      return kcore_fail(KILN_ERR_SHAPE, "dot_general: batch dimensions of %s and %s differ in size",
                        kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  for (int i = 0; i < d->lhs_contracting.n; i++)
    if (lhs->shape[d->lhs_contracting.v[i]] != rhs->shape[d->rhs_contracting.v[i]])
      return kcore_fail(KILN_ERR_SHAPE,
                        "dot_general: contracting dimensions of %s and %s differ in size",
                        kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  int rank = d->lhs_batch.n + (lhs->rank - d->lhs_batch.n - d->lhs_contracting.n) +
             (rhs->rank - d->rhs_batch.n - d->rhs_contracting.n);
  if (rank > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "dot_general: %s . %s would have rank %d > %d",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1), rank,
                      KIR_MAX_RANK);
  kiln_dtype dt = KILN_INVALID_DTYPE;
  st = kir_dot_dtype(lhs, rhs, params->dot.preferred_element_type, &dt);
  if (st != KILN_OK) return st;
  int64_t shape[KIR_MAX_RANK];
  int n = 0;
  for (int i = 0; i < d->lhs_batch.n; i++) shape[n++] = lhs->shape[d->lhs_batch.v[i]];
  for (int i = 0; i < lhs->rank; i++)
    if (!kir_in(&d->lhs_batch, i) && !kir_in(&d->lhs_contracting, i)) shape[n++] = lhs->shape[i];
  for (int i = 0; i < rhs->rank; i++)
    if (!kir_in(&d->rhs_batch, i) && !kir_in(&d->rhs_contracting, i)) shape[n++] = rhs->shape[i];
  return kir_push(out, dt, rank, shape, lhs->weak && rhs->weak);
}

/* ---- reference evaluators ---- */

void kir_dot_evals(kir_eval_table *t) { (void)t; }
