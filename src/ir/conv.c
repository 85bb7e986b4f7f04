/* conv_general_dilated: the shape/dtype rule (lax's
 * _conv_general_dilated_shape_rule and dtype rule). The reference
 * evaluator is in conv_eval.c, the autodiff and batching rules in
 * conv_ad.c. */
#include <stdio.h>

#include "core/core.h"
#include "ir/ir.h"

#define OP "conv_general_dilated"

/* A spec must be a permutation of [0, rank). */
static kiln_status kir_conv_check_spec(const char *name, const kir_dims *spec, int rank,
                                       const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP], d[64];
  bool seen[KIR_MAX_RANK] = {false};
  bool ok = spec->n == rank;
  for (int i = 0; ok && i < spec->n; i++) {
    int v = spec->v[i];
    ok = v >= 0 && v < rank && !seen[v];
    if (ok) seen[v] = true;
  }
  if (ok) return KILN_OK;
  return kcore_fail(KILN_ERR_ARGUMENT, OP ": dimension_numbers %s %s is not a permutation of the "
                    "%d dimensions of %s", name, kir_dims_str(spec, d, sizeof d), rank,
                    kir_aval_str(x, t, sizeof t));
}

static kiln_status kir_conv_check_sizes(const char *name, const kir_sizes *s, int n_sp, int64_t min,
                                        const kir_aval *lhs) {
  char t[KIR_AVAL_STR_CAP], d[128];
  if (s->n != n_sp)
    return kcore_fail(KILN_ERR_ARGUMENT, OP ": %s %s has %d entries; lhs %s has %d spatial "
                      "dimensions", name, kir_sizes_str(s, d, sizeof d), s->n,
                      kir_aval_str(lhs, t, sizeof t), n_sp);
  for (int i = 0; i < s->n; i++)
    if (s->v[i] < min)
      return kcore_fail(KILN_ERR_ARGUMENT, OP ": %s %s must be positive", name,
                        kir_sizes_str(s, d, sizeof d));
  return KILN_OK;
}

/* lax's rule: equal operand dtypes (numbers, not bool); the result is
 * preferred_element_type when given, which may only widen within the
 * operands' class (float stays float, integer stays integer). */
static kiln_status kir_conv_dtype(const kir_aval *lhs, const kir_aval *rhs, kiln_dtype pref,
                                  kiln_dtype *out) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (lhs->dtype != rhs->dtype)
    return kcore_fail(KILN_ERR_DTYPE, OP ": operand types %s and %s must have equal dtypes",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  kiln_status st = kir_check_dtype_class(KIR_PRIM_CONV_GENERAL_DILATED, 0, lhs, KIR_DT_NUM);
  if (st != KILN_OK) return st;
  *out = lhs->dtype;
  if (pref == KILN_INVALID_DTYPE || pref == lhs->dtype) return KILN_OK;
  if (!kiln_dtype_is_valid(pref) || kiln_dtype_is_bool(pref) ||
      kiln_dtype_is_float(pref) != kiln_dtype_is_float(lhs->dtype) ||
      kiln_dtype_size(pref) < kiln_dtype_size(lhs->dtype))
    return kcore_fail(KILN_ERR_DTYPE, OP ": preferred_element_type %s does not fit operands %s "
                      "(it must be a %s type at least as wide)",
                      kiln_dtype_is_valid(pref) ? kiln_dtype_name(pref) : "(invalid)",
                      kir_aval_str(lhs, t0, sizeof t0),
                      kiln_dtype_is_float(lhs->dtype) ? "floating" : "integer");
  *out = pref;
  return KILN_OK;
}

/* The feature and group counts (lax's checks, in its order). */
static kiln_status kir_conv_check_groups(const kir_p_conv *c, const kir_aval *lhs,
                                         const kir_aval *rhs) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const kir_conv_dims *d = &c->dimension_numbers;
  int64_t fg = c->feature_group_count, bg = c->batch_group_count;
  int64_t n = lhs->shape[d->lhs_spec.v[0]], cin = lhs->shape[d->lhs_spec.v[1]];
  int64_t o = rhs->shape[d->rhs_spec.v[0]], i = rhs->shape[d->rhs_spec.v[1]];
  kir_aval_str(lhs, t0, sizeof t0);
  kir_aval_str(rhs, t1, sizeof t1);
  if (fg < 1 || bg < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, OP ": feature_group_count %lld and batch_group_count "
                      "%lld must be positive", (long long)fg, (long long)bg);
  if (fg > 1 && bg > 1)
    return kcore_fail(KILN_ERR_ARGUMENT, OP ": at most one of feature_group_count (%lld) and "
                      "batch_group_count (%lld) may exceed 1", (long long)fg, (long long)bg);
  if (cin % fg)
    return kcore_fail(KILN_ERR_SHAPE, OP ": feature_group_count %lld does not divide the lhs "
                      "feature dimension %lld of %s", (long long)fg, (long long)cin, t0);
  if (cin / fg != i)
    return kcore_fail(KILN_ERR_SHAPE, OP ": lhs feature dimension %lld of %s divided by "
                      "feature_group_count %lld must equal the rhs input feature dimension %lld "
                      "of %s", (long long)cin, t0, (long long)fg, (long long)i, t1);
  if (o % fg)
    return kcore_fail(KILN_ERR_SHAPE, OP ": feature_group_count %lld does not divide the rhs "
                      "output feature dimension %lld of %s", (long long)fg, (long long)o, t1);
  if (n % bg)
    return kcore_fail(KILN_ERR_SHAPE, OP ": batch_group_count %lld does not divide the lhs "
                      "batch dimension %lld of %s", (long long)bg, (long long)n, t0);
  if (o % bg)
    return kcore_fail(KILN_ERR_SHAPE, OP ": batch_group_count %lld does not divide the rhs "
                      "output feature dimension %lld of %s", (long long)bg, (long long)o, t1);
  return KILN_OK;
}

/* 1 + dilation * (d - 1), 0 for an empty dimension (lax._dilate_shape). */
static int64_t kir_conv_dilate(int64_t d, int64_t dilation) {
  return d == 0 ? 0 : 1 + dilation * (d - 1);
}

kiln_status kir_rule_conv_general_dilated(kir_prim prim, const kir_params *params, int n_in,
                                          const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  const kir_p_conv *c = &params->conv;
  const kir_conv_dims *d = &c->dimension_numbers;
  const kir_aval *lhs = &in[0], *rhs = &in[1];
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  kiln_dtype dtype = KILN_INVALID_DTYPE;
  kiln_status st = kir_conv_dtype(lhs, rhs, c->preferred_element_type, &dtype);
  if (st != KILN_OK) return st;
  if (lhs->rank != rhs->rank || lhs->rank < 2)
    return kcore_fail(KILN_ERR_SHAPE, OP ": lhs %s and rhs %s need one rank of at least 2",
                      kir_aval_str(lhs, t0, sizeof t0), kir_aval_str(rhs, t1, sizeof t1));
  int rank = lhs->rank, n_sp = rank - 2;
  if ((st = kir_conv_check_spec("lhs_spec", &d->lhs_spec, rank, lhs)) ||
      (st = kir_conv_check_spec("rhs_spec", &d->rhs_spec, rank, rhs)) ||
      (st = kir_conv_check_spec("out_spec", &d->out_spec, rank, lhs)) ||
      (st = kir_conv_check_sizes("window_strides", &c->window_strides, n_sp, 1, lhs)) ||
      (st = kir_conv_check_sizes("lhs_dilation", &c->lhs_dilation, n_sp, 1, lhs)) ||
      (st = kir_conv_check_sizes("rhs_dilation", &c->rhs_dilation, n_sp, 1, lhs)))
    return st;
  if (c->padding.n != n_sp)
    return kcore_fail(KILN_ERR_ARGUMENT, OP ": padding has %d (lo, hi) pairs; lhs %s has %d "
                      "spatial dimensions", c->padding.n, kir_aval_str(lhs, t0, sizeof t0), n_sp);
  if ((st = kir_conv_check_groups(c, lhs, rhs))) return st;
  int64_t shape[KIR_MAX_RANK];
  shape[d->out_spec.v[0]] = lhs->shape[d->lhs_spec.v[0]] / c->batch_group_count;
  shape[d->out_spec.v[1]] = rhs->shape[d->rhs_spec.v[0]];
  for (int s = 0; s < n_sp; s++) {
    int64_t in_d = kir_conv_dilate(lhs->shape[d->lhs_spec.v[2 + s]], c->lhs_dilation.v[s]);
    int64_t win = kir_conv_dilate(rhs->shape[d->rhs_spec.v[2 + s]], c->rhs_dilation.v[s]);
    int64_t padded = in_d + c->padding.lo[s] + c->padding.hi[s];
    if (padded < 0)
      return kcore_fail(KILN_ERR_SHAPE, OP ": padding (%lld, %lld) leaves spatial dimension %d "
                        "of lhs %s negative", (long long)c->padding.lo[s],
                        (long long)c->padding.hi[s], s, kir_aval_str(lhs, t0, sizeof t0));
    int64_t diff = padded - win;
    /* floor division, then at least 0, as lax's conv_shape_tuple */
    int64_t q = diff >= 0 ? diff / c->window_strides.v[s]
                          : -((-diff + c->window_strides.v[s] - 1) / c->window_strides.v[s]);
    shape[d->out_spec.v[2 + s]] = q + 1 > 0 ? q + 1 : 0;
  }
  return kir_push(out, dtype, rank, shape, false);
}
