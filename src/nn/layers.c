/* Flax's dense, conv, layernorm and dropout, their initializers, and optax's
 * integer-label softmax cross-entropy, from trace ops. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "nn/nn.h"
#include "kiln/nn.h"

static kiln_val *leaf_val(kiln_trace *t, const char *op, const kiln_tree *params, const char *key) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  const kiln_tree *c = params ? kiln_tree_get(params, key) : NULL;
  const kiln_leaf *l = c ? kiln_tree_leaf_get(c) : NULL;
  if (!l || l->kind != KILN_LEAF_VAL) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: params has no traced ['%s']", op, key);
    kiln_trace_fail(t, KILN_ERR_TREE, msg);
    return NULL;
  }
  return l->u.val;
}

kiln_val *kiln_nn_truncated_normal(kiln_trace *t, kiln_val *key, double lower, double upper,
                                   kiln_dtype dtype, int rank, const int64_t *shape) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (dtype != KILN_F32) {
    kiln_trace_fail(t, KILN_ERR_DTYPE, "kiln_nn_truncated_normal: only float32 is supported");
    return NULL;
  }
  /* JAX: u ~ uniform(erf(lower / sqrt2), erf(upper / sqrt2)), out =
   * sqrt2 * erf_inv(u) clamped into the open interval. The bounds are float32
   * erf values (glibc's erff rounds these as XLA does). */
  float sqrt2 = (float)sqrt(2.0);
  float a = erff((float)lower / sqrt2), b = erff((float)upper / sqrt2);
  kiln_val *u = kiln_random_uniform(t, key, dtype, rank, shape, a, b);
  kiln_val *out = kiln_mul(t, kiln_scalar(t, dtype, sqrt2), kiln_erf_inv(t, u));
  kiln_val *lo = kiln_scalar(t, dtype, nextafterf((float)lower, INFINITY));
  kiln_val *hi = kiln_scalar(t, dtype, nextafterf((float)upper, -INFINITY));
  return kiln_clamp(t, lo, out, hi);
}

kiln_val *kiln_nn_lecun_normal(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                               const int64_t *shape) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (rank < 2) {
    kiln_trace_fail(t, KILN_ERR_SHAPE, "kiln_nn_lecun_normal: needs rank >= 2 (fan in, fan out)");
    return NULL;
  }
  double receptive = 1;
  for (int i = 0; i < rank - 2; i++) receptive *= (double)shape[i];
  double fan_in = (double)shape[rank - 2] * receptive;
  /* variance_scaling's truncated_normal: stddev of a unit normal truncated
   * to [-2, 2] is .87962566103423978. JAX rounds the variance to float32 and
   * takes the root and the quotient there (in double, fan_in 8 is 1 ulp off). */
  float stddev = sqrtf((float)(1.0 / fan_in)) / .87962566103423978f;
  return kiln_mul(t, kiln_nn_truncated_normal(t, key, -2, 2, dtype, rank, shape),
                  kiln_scalar_f(t, stddev));
}

static kiln_tree *pair(kiln_trace *t, const char *k0, kiln_val *v0, const char *k1, kiln_val *v1) {
  if (kiln_trace_status(t) != KILN_OK || !v0 || !v1) return NULL;
  const char *keys[2] = {k0, k1};
  kiln_tree *kids[2] = {kiln_tree_val(v0), kiln_tree_val(v1)};
  return kiln_tree_dict(2, keys, kids);
}

kiln_tree *kiln_nn_dense_init(kiln_trace *t, kiln_val *key, int64_t in_features,
                              int64_t out_features, kiln_dtype dtype) {
  int64_t shape[2] = {in_features, out_features};
  kiln_val *kernel = kiln_nn_lecun_normal(t, key, dtype, 2, shape);
  return pair(t, "bias", kiln_full(t, dtype, 1, &shape[1], 0), "kernel", kernel);
}

kiln_val *kiln_nn_dense(kiln_trace *t, const kiln_tree *params, kiln_val *x) {
  kiln_val *kernel = leaf_val(t, "kiln_nn_dense", params, "kernel");
  kiln_val *bias = leaf_val(t, "kiln_nn_dense", params, "bias");
  if (!knn_given(t, "kiln_nn_dense", "x", x) || !kernel || !bias) return NULL;
  kiln_dot_dims d = {0};
  d.n_contract = 1;
  d.lhs_contract[0] = kiln_val_rank(x) - 1;
  d.rhs_contract[0] = 0;
  return kiln_add(t, kiln_dot_general(t, x, kernel, &d, KILN_INVALID_DTYPE), bias);
}

kiln_tree *kiln_nn_conv_init(kiln_trace *t, kiln_val *key, int n, const int64_t *kernel_size,
                             int64_t in_features, int64_t features, kiln_dtype dtype) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (n < 1 || n > 3 || !kernel_size) {
    char msg[120];
    snprintf(msg, sizeof msg,
             "kiln_nn_conv_init: needs 1 to 3 spatial dims and their sizes, got %d", n);
    kiln_trace_fail(t, KILN_ERR_SHAPE, msg);
    return NULL;
  }
  int64_t shape[5];
  memcpy(shape, kernel_size, (size_t)n * sizeof *shape);
  shape[n] = in_features, shape[n + 1] = features;
  kiln_val *kernel = kiln_nn_lecun_normal(t, key, dtype, n + 2, shape);
  return pair(t, "bias", kiln_full(t, dtype, 1, &features, 0), "kernel", kernel);
}

kiln_val *kiln_nn_conv(kiln_trace *t, const kiln_tree *params, kiln_val *x,
                       const int64_t *strides, const char *padding) {
  kiln_val *kernel = leaf_val(t, "kiln_nn_conv", params, "kernel");
  kiln_val *bias = leaf_val(t, "kiln_nn_conv", params, "bias");
  if (!knn_given(t, "kiln_nn_conv", "x", x) || !kernel || !bias) return NULL;
  return kiln_add(t, kiln_conv(t, x, kernel, strides, padding), bias);
}

kiln_tree *kiln_nn_layernorm_init(kiln_trace *t, int64_t features, kiln_dtype dtype) {
  return pair(t, "bias", kiln_full(t, dtype, 1, &features, 0), "scale",
              kiln_full(t, dtype, 1, &features, 1));
}

/* The mean over the last axis, kept as a trailing axis of size 1. */
static kiln_val *mean_last(kiln_trace *t, kiln_val *x) {
  int r = kiln_val_rank(x), axis = r - 1;
  kiln_val *s = kiln_reduce_sum(t, x, 1, &axis);
  s = kiln_div(t, s, kiln_scalar_f(t, (double)kiln_val_shape(x)[axis]));
  return kiln_expand_dims(t, s, 1, &axis);
}

kiln_val *kiln_nn_layernorm(kiln_trace *t, const kiln_tree *params, kiln_val *x, double epsilon) {
  kiln_val *scale = leaf_val(t, "kiln_nn_layernorm", params, "scale");
  kiln_val *bias = leaf_val(t, "kiln_nn_layernorm", params, "bias");
  if (!knn_given(t, "kiln_nn_layernorm", "x", x) || !scale || !bias) return NULL;
  kiln_val *mean = mean_last(t, x);
  kiln_val *var = kiln_sub(t, mean_last(t, kiln_mul(t, x, x)), kiln_mul(t, mean, mean));
  var = kiln_max(t, var, kiln_scalar_f(t, 0));
  kiln_val *mul = kiln_mul(t, kiln_rsqrt(t, kiln_add(t, var, kiln_scalar_f(t, epsilon))), scale);
  return kiln_add(t, kiln_mul(t, kiln_sub(t, x, mean), mul), bias);
}

kiln_val *kiln_nn_dropout(kiln_trace *t, kiln_val *key, kiln_val *x, double rate,
                          int deterministic) {
  if (!knn_given(t, "kiln_nn_dropout", "x", x)) return NULL;
  if (deterministic || rate == 0.0) return x;
  kiln_val *zeros = kiln_full(t, kiln_val_dtype(x), kiln_val_rank(x), kiln_val_shape(x), 0);
  if (rate == 1.0) return zeros;
  /* bernoulli(key, 1 - rate) as JAX draws it by default (x64 off): a float32
   * uniform below a float32 p (kiln_random_bernoulli compares in float64). */
  kiln_val *u = kiln_random_uniform(t, key, KILN_F32, kiln_val_rank(x), kiln_val_shape(x), 0, 1);
  kiln_val *keep = kiln_lt(t, u, kiln_scalar(t, KILN_F32, 1.0 - rate));
  return kiln_where(t, keep, kiln_div(t, x, kiln_scalar_f(t, 1.0 - rate)), zeros);
}

kiln_val *kiln_nn_softmax_cross_entropy(kiln_trace *t, kiln_val *logits, kiln_val *labels) {
  static const char op[] = "kiln_nn_softmax_cross_entropy";
  if (!knn_given(t, op, "logits", logits) || !knn_given(t, op, "labels", labels)) return NULL;
  int r = kiln_val_rank(logits), axis = r - 1;
  kiln_val *m = kiln_expand_dims(t, kiln_reduce_max(t, logits, 1, &axis), 1, &axis);
  kiln_val *z = kiln_sub(t, logits, m);
  int lr = kiln_val_rank(labels);
  kiln_val *idx = kiln_expand_dims(t, labels, 1, &lr);
  kiln_val *label_logits = kiln_squeeze(t, kiln_take_along_axis(t, z, idx, axis), 1, &axis);
  kiln_val *log_norm = kiln_log(t, kiln_reduce_sum(t, kiln_exp(t, z), 1, &axis));
  return kiln_sub(t, log_norm, label_logits);
}
