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

/* ---- activations (jax.nn) ---- */
/* jax.nn.relu: max(x, 0), a custom_jvp as in JAX, so its derivative is
 * select(x > 0, g, 0): 0 at x = 0 (a plain kiln_max(x, 0) splits the
 * gradient there, 0.5). Integer x: jnp.maximum, no rule needed. */
kiln_val *kiln_relu(kiln_trace *t, kiln_val *x);
/* jax.nn.gelu(x, approximate): approximate nonzero, 0.5 * x * (1 +
 * tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (JAX's default); zero, the exact
 * 0.5 * x * erfc(-x / sqrt(2)). Integer x is promoted as jnp promotes to
 * inexact (f32; f64 for 64-bit integers). */
kiln_val *kiln_gelu(kiln_trace *t, kiln_val *x, int approximate);
/* jax.nn.silu (swish): x * sigmoid(x), floats only as in JAX. */
kiln_val *kiln_silu(kiln_trace *t, kiln_val *x);

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

/* ---- BatchNorm, Embed, MultiHeadDotProductAttention ---- */

/* flax.linen.BatchNorm over the last axis (features): params {"bias":
 * zeros[features], "scale": ones[features]}; *batch_stats gets the new tree
 * {"mean": zeros[features], "var": ones[features]} (float32, as Flax keeps
 * them). */
kiln_tree *kiln_nn_batchnorm_init(kiln_trace *t, int64_t features, kiln_dtype dtype,
                                  kiln_tree **batch_stats);
typedef struct kiln_nn_batchnorm_options {
  int use_running_average; /* inference: normalise with batch_stats */
  double momentum;         /* 0.99 */
  double epsilon;          /* 1e-5 */
  /* NULL, or an axis bound by an enclosing kiln_pmap / kiln_shard_map: the
   * batch statistics are averaged over it (data-parallel BatchNorm). */
  const char *axis_name;
} kiln_nn_batchnorm_options;
/* Flax's defaults, as above. */
void kiln_nn_batchnorm_options_init(kiln_nn_batchnorm_options *o);
/* Normalises x [batch..., features] over every axis but the last. Training
 * (use_running_average 0): mean and fast variance (E[x^2] - E[x]^2, clamped
 * at 0) of the batch, with axis_name one pmean of both over the devices, as
 * Flax's _compute_stats; new_batch_stats (may be NULL) gets {"mean":
 * momentum * mean + (1 - momentum) * batch mean, "var": likewise with the
 * batch variance}. Inference: the running statistics, and new_batch_stats
 * the same values. y = (x - mean) * (rsqrt(var + epsilon) * scale) + bias.
 * opts NULL: the defaults. x has rank >= 2. */
kiln_val *kiln_nn_batchnorm(kiln_trace *t, const kiln_tree *params, const kiln_tree *batch_stats,
                            kiln_val *x, const kiln_nn_batchnorm_options *opts,
                            kiln_tree **new_batch_stats);

/* flax.linen.Embed: {"embedding": [num_embeddings, features]} drawn by
 * flax.linen.initializers' default_embed_init, variance_scaling(1.0,
 * "fan_in", "normal", out_axis=0): normal(key) * sqrt(1 / features). */
kiln_tree *kiln_nn_embed_init(kiln_trace *t, kiln_val *key, int64_t num_embeddings,
                              int64_t features, kiln_dtype dtype);
/* embedding[ids] ([ids..., features]) for integer ids, with jnp.take's
 * default mode as Flax: ids in [-num_embeddings, 0) count from the end,
 * ids out of range give NaN rows. */
kiln_val *kiln_nn_embed(kiln_trace *t, const kiln_tree *params, kiln_val *ids);
/* Embed.attend: query [..., features] @ embedding.T, [..., num_embeddings]. */
kiln_val *kiln_nn_embed_attend(kiln_trace *t, const kiln_tree *params, kiln_val *query);

/* flax.linen.MultiHeadDotProductAttention: {"key", "out", "query", "value"},
 * each {"bias", "kernel"}: query's kernel [q_features, num_heads, head_dim],
 * key's and value's [kv_features, num_heads, head_dim], their biases zeros
 * [num_heads, head_dim]; out's kernel [num_heads, head_dim, out_features],
 * bias zeros[out_features]. head_dim = qkv_features / num_heads. Each kernel
 * is lecun_normal over its 2-D flattening ([features, qkv_features],
 * [qkv_features, out_features]) reshaped, as DenseGeneral does. keys[0..3]
 * are the keys of the query, key, value and out kernels (in Flax, the ones
 * the submodules so named draw). kv_features, qkv_features, out_features 0:
 * q_features (Flax's None). */
kiln_tree *kiln_nn_mha_init(kiln_trace *t, kiln_val *const *keys, int64_t num_heads,
                            int64_t q_features, int64_t kv_features, int64_t qkv_features,
                            int64_t out_features, kiln_dtype dtype);
/* Attention of inputs_q [batch..., q_length, q_features] over inputs_kv
 * [batch..., kv_length, kv_features] (NULL: inputs_q, self-attention):
 * projections, softmax((query / sqrt(head_dim)) . key) over kv_length, the
 * weighted values, the out projection: [batch..., q_length, out_features].
 * mask (NULL: none) broadcasts to [batch..., num_heads, q_length, kv_length];
 * where it is false (0) a weight's logit becomes float32's lowest value, as
 * Flax. Deterministic: no attention dropout (Flax's default rate 0). */
kiln_val *kiln_nn_mha(kiln_trace *t, const kiln_tree *params, kiln_val *inputs_q,
                      kiln_val *inputs_kv, kiln_val *mask);
/* flax.linen.make_causal_mask(x): float32 [batch..., 1, length, length],
 * 1 where the query position >= the key position, for x [batch..., length]
 * (only x's shape is used). */
kiln_val *kiln_nn_causal_mask(kiln_trace *t, kiln_val *x);

#ifdef __cplusplus
}
#endif
#endif
