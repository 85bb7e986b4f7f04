// The C side of tests/golden/transform_models.py, shared by the gradient
// tests (test_transform_models.cc) and bench/grad.c: each loss mirrors its
// JAX twin op for op. Arguments are the tuple (params, x, target) and the
// result a scalar f32.
#ifndef KILN_TESTS_GRAD_MODELS_H
#define KILN_TESTS_GRAD_MODELS_H

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

// The leaves of one transformer layer's params tuple, in order.
#define GRAD_MODELS_LAYER_LEAVES 12
extern const char *const kGradModelsLayerLeaves[GRAD_MODELS_LAYER_LEAVES];

// params (w1 [I,H], b1 [H], w2 [H,C], b2 [C]), x [N,I], labels one-hot [N,C]:
// mean softmax cross-entropy of tanh(x w1 + b1) w2 + b2.
kiln_tree *grad_models_mlp_loss(kiln_trace *t, const kiln_tree *args, void *user);
// params (k1 [3,3,Ci,C1], c1 [C1], k2 [3,3,C1,C2], c2 [C2], w [C2,K], b [K]),
// x NHWC, labels one-hot [N,K]: conv SAME + relu, 2x2 max-pool, conv SAME +
// relu, mean over space, dense, mean softmax cross-entropy.
kiln_tree *grad_models_cnn_loss(kiln_trace *t, const kiln_tree *args, void *user);
// params a tuple of layers (each kGradModelsLayerLeaves), x [S,D], c [S,D]:
// pre-layernorm blocks h += attn(ln1(h)) wo (one head, causal mask), then
// h += gelu(ln2(h) w1 + b1) w2 + b2 (tanh GELU); the loss is sum(h * c).
// user NULL, or a kiln_remat_policy * that wraps each layer in
// kiln_checkpoint (jax.checkpoint) with that policy.
kiln_tree *grad_models_transformer_loss(kiln_trace *t, const kiln_tree *args, void *user);

#ifdef __cplusplus
}
#endif
#endif
