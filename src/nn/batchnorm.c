/* flax.linen.BatchNorm: batch statistics (averaged over a pmap / shard_map
 * axis in data-parallel training) or running ones, and the running-average
 * update, from trace ops. */
#include <stdio.h>
#include <string.h>
#include "nn/nn.h"
#include "kiln/dist.h"
#include "kiln/dtype.h"
#include "kiln/nn.h"

static const char BN[] = "kiln_nn_batchnorm";

kiln_tree *kiln_nn_batchnorm_init(kiln_trace *t, int64_t features, kiln_dtype dtype,
                                  kiln_tree **batch_stats) {
  if (batch_stats) *batch_stats = NULL;
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (!batch_stats) {
    kiln_trace_fail(t, KILN_ERR_ARGUMENT, "kiln_nn_batchnorm_init: batch_stats is NULL");
    return NULL;
  }
  static const char *const stat_keys[2] = {"mean", "var"};
  kiln_val *stats[2] = {kiln_full(t, KILN_F32, 1, &features, 0),
                        kiln_full(t, KILN_F32, 1, &features, 1)};
  *batch_stats = knn_dict(t, 2, stat_keys, stats);
  /* The same params as LayerNorm's. */
  kiln_tree *params = kiln_nn_layernorm_init(t, features, dtype);
  if (!params || !*batch_stats) {
    kiln_tree_free(params), kiln_tree_free(*batch_stats);
    *batch_stats = NULL;
    return NULL;
  }
  return params;
}

void kiln_nn_batchnorm_options_init(kiln_nn_batchnorm_options *o) {
  memset(o, 0, sizeof *o);
  o->momentum = 0.99;
  o->epsilon = 1e-5;
}

/* Flax's _compute_stats with use_fast_variance: the mean of x and of x^2
 * over every axis but the last (one pmean of both, stacked, across
 * axis_name), var = max(0, E[x^2] - E[x]^2). Half floats reduce in float32. */
static void batch_stats_of(kiln_trace *t, kiln_val *x, const char *axis_name, kiln_val **mean,
                           kiln_val **var) {
  kiln_dtype dt = kiln_val_dtype(x);
  if (dt == KILN_F16 || dt == KILN_BF16) x = kiln_convert(t, x, KILN_F32);
  int r = kiln_val_rank(x), axes[KILN_MAX_RANK];
  double n = 1;
  for (int i = 0; i < r - 1; i++) axes[i] = i, n *= (double)kiln_val_shape(x)[i];
  kiln_val *count = kiln_scalar_f(t, n);
  kiln_val *mu = kiln_div(t, kiln_reduce_sum(t, x, r - 1, axes), count);
  kiln_val *mu2 = kiln_div(t, kiln_reduce_sum(t, kiln_mul(t, x, x), r - 1, axes), count);
  if (axis_name) {
    int zero = 0;
    kiln_val *both[2] = {kiln_expand_dims(t, mu, 1, &zero), kiln_expand_dims(t, mu2, 1, &zero)};
    kiln_val *avg = kiln_pmean(t, kiln_concatenate(t, 2, both, 0), axis_name);
    int64_t f = avg ? kiln_val_shape(avg)[1] : 0;
    int64_t start[2] = {0, 0}, mid[2] = {1, f}, start2[2] = {1, 0}, end[2] = {2, f};
    mu = kiln_squeeze(t, kiln_slice(t, avg, start, mid, NULL), 1, &zero);
    mu2 = kiln_squeeze(t, kiln_slice(t, avg, start2, end, NULL), 1, &zero);
  }
  *mean = mu;
  *var = kiln_max(t, kiln_sub(t, mu2, kiln_mul(t, mu, mu)), kiln_scalar_f(t, 0));
}

/* momentum * running + (1 - momentum) * batch. */
static kiln_val *ema(kiln_trace *t, double momentum, kiln_val *running, kiln_val *batch) {
  return kiln_add(t, kiln_mul(t, kiln_scalar_f(t, momentum), running),
                  kiln_mul(t, kiln_scalar_f(t, 1 - momentum), batch));
}

kiln_val *kiln_nn_batchnorm(kiln_trace *t, const kiln_tree *params, const kiln_tree *batch_stats,
                            kiln_val *x, const kiln_nn_batchnorm_options *opts,
                            kiln_tree **new_batch_stats) {
  if (new_batch_stats) *new_batch_stats = NULL;
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  kiln_nn_batchnorm_options defaults;
  kiln_nn_batchnorm_options_init(&defaults);
  if (!opts) opts = &defaults;
  char msg[256], got[96];
  if (!x || kiln_val_rank(x) < 2 || !kiln_dtype_is_float(kiln_val_dtype(x))) {
    snprintf(msg, sizeof msg, "%s: x must be a float array [batch..., features], got %s", BN,
             x ? knn_aval_str(x, got, sizeof got) : "NULL");
    kiln_trace_fail(t, x && kiln_val_rank(x) >= 2 ? KILN_ERR_DTYPE : KILN_ERR_SHAPE, msg);
    return NULL;
  }
  int64_t f = kiln_val_shape(x)[kiln_val_rank(x) - 1];
  kiln_val *scale = knn_param(t, BN, "params", params, "scale", 1, &f);
  kiln_val *bias = knn_param(t, BN, "params", params, "bias", 1, &f);
  kiln_val *ra_mean = knn_param(t, BN, "batch_stats", batch_stats, "mean", 1, &f);
  kiln_val *ra_var = knn_param(t, BN, "batch_stats", batch_stats, "var", 1, &f);
  if (!scale || !bias || !ra_mean || !ra_var) return NULL;
  kiln_val *mean = ra_mean, *var = ra_var;
  if (!opts->use_running_average) {
    batch_stats_of(t, x, opts->axis_name, &mean, &var);
    ra_mean = ema(t, opts->momentum, ra_mean, mean);
    ra_var = ema(t, opts->momentum, ra_var, var);
  }
  kiln_val *mul = kiln_mul(t, kiln_rsqrt(t, kiln_add(t, var, kiln_scalar_f(t, opts->epsilon))),
                           scale);
  kiln_val *y = kiln_add(t, kiln_mul(t, kiln_sub(t, x, mean), mul), bias);
  if (new_batch_stats && y) {
    static const char *const stat_keys[2] = {"mean", "var"};
    kiln_val *stats[2] = {ra_mean, ra_var};
    *new_batch_stats = knn_dict(t, 2, stat_keys, stats);
  }
  return kiln_trace_status(t) == KILN_OK ? y : NULL;
}
