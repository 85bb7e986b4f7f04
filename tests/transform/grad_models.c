// Whole-program losses for the gradient tests and bench/grad (see
// grad_models.h); the JAX twins are in tests/golden/transform_models.py.
#include "grad_models.h"

#include <math.h>

#include "kiln/numpy.h"
#include "kiln/transform.h"

const char *const kGradModelsLayerLeaves[GRAD_MODELS_LAYER_LEAVES] = {
    "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2"};

static kiln_val *arg(const kiln_tree *a, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(a, i))->u.val;
}

static kiln_val *f32(kiln_trace *t, double v) { return kiln_scalar(t, KILN_F32, v); }

// mean over rows of -sum(labels * log_softmax(logits))
static kiln_val *xent(kiln_trace *t, kiln_val *logits, kiln_val *labels) {
  int ax1 = 1, ax0 = 0;
  kiln_val *logp = kiln_log_softmax(t, logits, 1, NULL);
  kiln_val *nll = kiln_sum(t, kiln_mul(t, labels, logp), 1, &ax1, 0);
  return kiln_neg(t, kiln_mean(t, nll, 1, &ax0, 0));
}

kiln_tree *grad_models_mlp_loss(kiln_trace *t, const kiln_tree *a, void *user) {
  (void)user;
  const kiln_tree *p = kiln_tree_child(a, 0);
  kiln_val *h = kiln_tanh(t, kiln_add(t, kiln_matmul(t, arg(a, 1), arg(p, 0)), arg(p, 1)));
  kiln_val *logits = kiln_add(t, kiln_matmul(t, h, arg(p, 2)), arg(p, 3));
  return kiln_tree_val(xent(t, logits, arg(a, 2)));
}

kiln_tree *grad_models_cnn_loss(kiln_trace *t, const kiln_tree *a, void *user) {
  (void)user;
  const kiln_tree *p = kiln_tree_child(a, 0);
  kiln_val *zero = f32(t, 0);
  int64_t win[2] = {2, 2};
  kiln_val *h = kiln_conv(t, arg(a, 1), arg(p, 0), NULL, "SAME");
  h = kiln_max(t, kiln_add(t, h, arg(p, 1)), zero);
  h = kiln_max_pool(t, h, 2, win, win, "VALID", NULL);
  h = kiln_max(t, kiln_add(t, kiln_conv(t, h, arg(p, 2), NULL, "SAME"), arg(p, 3)), zero);
  int sp[2] = {1, 2};
  h = kiln_mean(t, h, 2, sp, 0);
  return kiln_tree_val(xent(t, kiln_add(t, kiln_matmul(t, h, arg(p, 4)), arg(p, 5)), arg(a, 2)));
}

static kiln_val *layernorm(kiln_trace *t, kiln_val *x, kiln_val *g, kiln_val *b) {
  int ax = 1;
  kiln_val *c = kiln_sub(t, x, kiln_mean(t, x, 1, &ax, 1));
  kiln_val *var = kiln_mean(t, kiln_mul(t, c, c), 1, &ax, 1);
  kiln_val *y = kiln_mul(t, c, kiln_rsqrt(t, kiln_add(t, var, f32(t, 1e-5))));
  return kiln_add(t, kiln_mul(t, y, g), b);
}

// jax.nn.gelu(approximate=True): 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
static kiln_val *gelu(kiln_trace *t, kiln_val *h) {
  kiln_val *h3 = kiln_mul(t, kiln_mul(t, h, h), h);
  kiln_val *in = kiln_add(t, h, kiln_mul(t, f32(t, 0.044715), h3));
  in = kiln_mul(t, f32(t, 0.79788456080286535588 /* sqrt(2/pi) */), in);
  return kiln_mul(t, kiln_mul(t, f32(t, 0.5), h), kiln_add(t, f32(t, 1), kiln_tanh(t, in)));
}

static kiln_val *attention(kiln_trace *t, const kiln_tree *l, kiln_val *x) {
  kiln_val *q = kiln_matmul(t, x, arg(l, 2)), *k = kiln_matmul(t, x, arg(l, 3));
  kiln_val *v = kiln_matmul(t, x, arg(l, 4));
  int perm[2] = {1, 0};
  int64_t n = kiln_val_shape(x)[0], nn[2] = {n, n};
  kiln_val *s = kiln_div(t, kiln_matmul(t, q, kiln_transpose(t, k, perm)),
                         f32(t, sqrt((double)kiln_val_shape(x)[1])));
  kiln_val *causal = kiln_ge(t, kiln_iota(t, KILN_I32, 2, nn, 0), kiln_iota(t, KILN_I32, 2, nn, 1));
  s = kiln_softmax(t, kiln_where(t, causal, s, f32(t, -1e9)), 1, NULL);
  return kiln_matmul(t, kiln_matmul(t, s, v), arg(l, 5));
}

// (layer params, h) -> h after one block
static kiln_tree *block(kiln_trace *t, const kiln_tree *a, void *user) {
  (void)user;
  const kiln_tree *l = kiln_tree_child(a, 0);
  kiln_val *h = arg(a, 1);
  h = kiln_add(t, h, attention(t, l, layernorm(t, h, arg(l, 0), arg(l, 1))));
  kiln_val *m = kiln_matmul(t, layernorm(t, h, arg(l, 6), arg(l, 7)), arg(l, 8));
  m = gelu(t, kiln_add(t, m, arg(l, 9)));
  return kiln_tree_val(kiln_add(t, h, kiln_add(t, kiln_matmul(t, m, arg(l, 10)), arg(l, 11))));
}

kiln_tree *grad_models_transformer_loss(kiln_trace *t, const kiln_tree *a, void *user) {
  const kiln_remat_policy *remat = (const kiln_remat_policy *)user;
  const kiln_tree *layers = kiln_tree_child(a, 0);
  kiln_func *f = NULL, *cf = NULL;
  if (kiln_func_new(block, NULL, "block", &f)) return NULL;
  if (remat && kiln_checkpoint(f, *remat, &cf)) {
    kiln_func_free(f);
    return NULL;
  }
  kiln_tree *h = kiln_tree_val(arg(a, 1));
  for (size_t i = 0; h && i < kiln_tree_num_children(layers); i++) {
    kiln_tree *kids[2] = {kiln_tree_clone(kiln_tree_child(layers, i)), h};
    kiln_tree *in = kiln_tree_tuple(2, kids);
    h = kiln_call(t, remat ? cf : f, in);
    kiln_tree_free(in);
  }
  kiln_func_free(cf);
  kiln_func_free(f);
  if (!h) return NULL;
  kiln_val *out = kiln_tree_leaf_get(h)->u.val;
  kiln_tree_free(h);
  int axes[2] = {0, 1};
  return kiln_tree_val(kiln_reduce_sum(t, kiln_mul(t, out, arg(a, 2)), 2, axes));
}
