/* Layers as functions over a params pytree, with Flax's (flax.linen)
 * defaults, built from trace ops so they go inside jitted steps. Initializers
 * take a traced key (u32[2]) and give the bits jax.nn.initializers give for
 * the same key: dense_init's kernel is lecun_normal()(key, (in, out)). (How
 * flax.linen derives each module's key from the init key is not reproduced:
 * pass the key the initializer should see.) Pooling is kiln_max_pool and
 * kiln_avg_pool (trace.h). Errors are sticky on the trace. */
#ifndef KILN_NN_H
#define KILN_NN_H

#include <stdint.h>
#include "kiln/trace.h"
#include "kiln/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jax.random.truncated_normal(key, lower, upper, shape, dtype), float dtypes. */
kiln_val *kiln_nn_truncated_normal(kiln_trace *t, kiln_val *key, double lower, double upper,
                                   kiln_dtype dtype, int rank, const int64_t *shape);
/* jax.nn.initializers.lecun_normal(): variance_scaling(1, "fan_in",
 * "truncated_normal") with fan_in = shape[-2] * the receptive field. */
kiln_val *kiln_nn_lecun_normal(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                               const int64_t *shape);

/* flax.linen.Dense: {"bias": zeros[out], "kernel": lecun_normal[in, out]}. */
kiln_tree *kiln_nn_dense_init(kiln_trace *t, kiln_val *key, int64_t in_features,
                              int64_t out_features, kiln_dtype dtype);
/* x @ kernel + bias over x's last axis. */
kiln_val *kiln_nn_dense(kiln_trace *t, const kiln_tree *params, kiln_val *x);

/* flax.linen.Conv over n spatial dims: {"bias": zeros[features], "kernel":
 * lecun_normal[kernel_size..., in_features, features]} (HWIO). */
kiln_tree *kiln_nn_conv_init(kiln_trace *t, kiln_val *key, int n, const int64_t *kernel_size,
                             int64_t in_features, int64_t features, kiln_dtype dtype);
/* conv(x, kernel) + bias with x NHWC-like (batch, spatial[n], features);
 * strides NULL: 1; padding "SAME" (Flax's default) or "VALID". */
kiln_val *kiln_nn_conv(kiln_trace *t, const kiln_tree *params, kiln_val *x,
                       const int64_t *strides, const char *padding);

/* flax.linen.LayerNorm: {"bias": zeros[features], "scale": ones[features]}. */
kiln_tree *kiln_nn_layernorm_init(kiln_trace *t, int64_t features, kiln_dtype dtype);
/* Normalizes over the last axis with Flax's fast variance (E[x^2] - E[x]^2,
 * clamped at 0): (x - mean) * (rsqrt(var + epsilon) * scale) + bias. Flax's
 * default epsilon is 1e-6. */
kiln_val *kiln_nn_layernorm(kiln_trace *t, const kiln_tree *params, kiln_val *x, double epsilon);

/* flax.linen.Dropout: keep each element with probability 1 - rate
 * (jax.random.bernoulli(key, 1 - rate) with x64 off, as Flax runs), scaled by 1 / (1 - rate); x itself when
 * deterministic or rate is 0; zeros when rate is 1. */
kiln_val *kiln_nn_dropout(kiln_trace *t, kiln_val *key, kiln_val *x, double rate,
                          int deterministic);

/* optax.softmax_cross_entropy_with_integer_labels: per-example losses of
 * logits [..., classes] against integer labels [...]. */
kiln_val *kiln_nn_softmax_cross_entropy(kiln_trace *t, kiln_val *logits, kiln_val *labels);

#ifdef __cplusplus
}
#endif
#endif
