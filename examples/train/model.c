/* The main job's models as traced functions, and their jits.
 *
 * Parameters are laid out as flax.linen names them,
 * {"params": {"Conv_0": {"bias", "kernel"}, ..., "Dense_0": {...}, ...}}, so
 * a checkpoint's tensor names ("['params']['Dense_0']['kernel']") read the
 * same in Python. Layer i (the convs first, then the dense layers) is
 * initialised from the i-th key of split(init_key, layers). The CNN is
 * Flax's MNIST example: each conv 3x3 SAME, relu, avg_pool 2x2 (stride 2);
 * then flatten, dense layers with relu between them. */
#include "model.h"

#include <stdio.h>
#include <string.h>

static void layer_name(const model *m, int i, char *buf, size_t cap) {
  if (i < m->n_conv) snprintf(buf, cap, "Conv_%d", i);
  else snprintf(buf, cap, "Dense_%d", i - m->n_conv);
}

static kiln_val *relu(kiln_trace *t, kiln_val *h) { return kiln_max(t, h, kiln_scalar_f(t, 0.0)); }

/* The CNN's convs over x f32[B, height * cols]: f32[B, features] flattened
 * as Flax's x.reshape((x.shape[0], -1)) does NHWC. */
static kiln_val *conv_features(kiln_trace *t, const model *m, const kiln_tree *layers,
                               kiln_val *x) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  int64_t batch = kiln_val_shape(x)[0], image[4] = {batch, m->height, m->cols, 1};
  kiln_val *h = kiln_reshape(t, x, 4, image);
  const int64_t window[2] = {2, 2};
  for (int i = 0; i < m->n_conv; i++) {
    char name[32];
    layer_name(m, i, name, sizeof name);
    h = relu(t, kiln_nn_conv(t, kiln_tree_get(layers, name), h, NULL, "SAME"));
    h = kiln_avg_pool(t, h, 2, window, window, "VALID", NULL, 1);
  }
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  const int64_t *s = kiln_val_shape(h), flat[2] = {batch, s[1] * s[2] * s[3]};
  return kiln_reshape(t, h, 2, flat);
}

/* The convs, then relu(dense(...)) for every dense layer but the last,
 * which gives the logits. */
static kiln_val *forward(kiln_trace *t, const model *m, const kiln_tree *params, kiln_val *x) {
  const kiln_tree *layers = kiln_tree_get(params, "params");
  kiln_val *h = m->n_conv ? conv_features(t, m, layers, x) : x;
  for (int i = 0; i < m->n_layers; i++) {
    char name[32];
    layer_name(m, m->n_conv + i, name, sizeof name);
    h = kiln_nn_dense(t, kiln_tree_get(layers, name), h);
    if (i + 1 < m->n_layers) h = relu(t, h);
  }
  return h;
}

/* u8 pixels -> f32 in [0, 1]; u8 labels -> i32. */
static kiln_val *pixels(kiln_trace *t, kiln_val *x) {
  return kiln_div(t, kiln_convert(t, x, KILN_F32), kiln_scalar_f(t, 255.0));
}

static kiln_val *correct(kiln_trace *t, kiln_val *logits, kiln_val *labels) {
  return kiln_convert(t, kiln_eq(t, kiln_argmax(t, logits, 1, KILN_I32), labels), KILN_F32);
}

/* init(key) -> (params, opt_state) */
static kiln_tree *init_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const model *m = user;
  int n = m->n_conv + m->n_layers;
  kiln_val *keys = kiln_random_split(t, kiln_arg(args, 0), n);
  kiln_tree *layers[2 * MODEL_MAX_LAYERS];
  char names[2 * MODEL_MAX_LAYERS][32];
  const char *keys_of[2 * MODEL_MAX_LAYERS];
  for (int i = 0; i < n; i++) {
    const int64_t lo[2] = {i, 0}, hi[2] = {i + 1, 2}, shape[1] = {2}, kernel[2] = {3, 3};
    kiln_val *k = kiln_reshape(t, kiln_slice(t, keys, lo, hi, NULL), 1, shape);
    int d = i - m->n_conv;
    layers[i] = d < 0 ? kiln_nn_conv_init(t, k, 2, kernel, i ? m->conv[i - 1] : 1, m->conv[i],
                                          KILN_F32)
                      : kiln_nn_dense_init(t, k, m->width[d], m->width[d + 1], KILN_F32);
    layer_name(m, i, names[i], sizeof names[i]);
    keys_of[i] = names[i];
  }
  const char *top[1] = {"params"};
  kiln_tree *params = kiln_tree_dict(1, top, (kiln_tree *[]){kiln_tree_dict(n, keys_of, layers)});
  kiln_tree *state = params ? kiln_optim_init(t, &m->opt, params) : NULL;
  if (!state) {
    kiln_tree_free(params);
    return NULL;
  }
  return kiln_tree_tuple(2, (kiln_tree *[]){params, state});
}

/* loss(params, x, y) -> (mean cross-entropy, (accuracy)) for value_and_grad
 * with has_aux. */
static kiln_tree *loss_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const model *m = user;
  kiln_val *y = kiln_convert(t, kiln_arg(args, 2), KILN_I32);
  kiln_val *logits = forward(t, m, kiln_tree_child(args, 0), pixels(t, kiln_arg(args, 1)));
  kiln_val *loss =
      kiln_mean(t, kiln_nn_softmax_cross_entropy(t, logits, y), KILN_ALL_AXES, NULL, 0);
  kiln_val *acc = kiln_mean(t, correct(t, logits, y), KILN_ALL_AXES, NULL, 0);
  return kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_val(loss), kiln_tuple_of(1, &acc)});
}

/* 1 when every element of every float leaf of tree is finite, else 0 (f32;
 * jnp.all(jnp.isfinite(leaf)) over the leaves, min'd into acc). */
static kiln_val *all_finite(kiln_trace *t, const kiln_tree *tree, kiln_val *acc) {
  const kiln_leaf *leaf = kiln_tree_leaf_get(tree);
  if (leaf && leaf->kind == KILN_LEAF_VAL) {
    if (!kiln_dtype_is_float(kiln_val_dtype(leaf->u.val))) return acc; /* adam's count */
    kiln_val *ok = kiln_convert(t, kiln_is_finite(t, leaf->u.val), KILN_F32);
    kiln_val *all = kiln_amin(t, ok, KILN_ALL_AXES, NULL, 0);
    return acc ? kiln_min(t, acc, all) : all;
  }
  for (size_t i = 0; i < kiln_tree_num_children(tree); i++)
    acc = all_finite(t, kiln_tree_child(tree, i), acc);
  return acc;
}

/* step(params, opt_state, x, y) -> (params, opt_state, loss, accuracy,
 * grad_norm, finite): optax.global_norm of the (averaged) gradients, and 1
 * when the new params and optimizer state are all finite (a finite loss
 * and gradient can still make an update that overflows), for the host's
 * check before anything saves that state; reductions over values the step
 * computes anyway. */
static kiln_tree *step_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const model *m = user;
  const kiln_tree *params = kiln_tree_child(args, 0), *state = kiln_tree_child(args, 1);
  kiln_tree *in = kiln_tree_tuple(
      3, (kiln_tree *[]){kiln_tree_clone(params), kiln_tree_clone(kiln_tree_child(args, 2)),
                         kiln_tree_clone(kiln_tree_child(args, 3))});
  kiln_tree *out = in ? kiln_call(t, m->vg_f, in) : NULL;
  kiln_tree_free(in);
  if (!out) return NULL;
  /* ((loss, (accuracy,)), grads) */
  const kiln_tree *value = kiln_tree_child(out, 0);
  kiln_val *loss = kiln_arg(value, 0), *acc = kiln_arg(kiln_tree_child(value, 1), 0);
  const kiln_tree *grads = kiln_tree_child(out, 1);
  kiln_tree *mean_grads = NULL;
  if (m->axis) { /* data-parallel: every device applies the same averaged update */
    grads = mean_grads = kiln_pmean_tree(t, grads, m->axis);
    loss = kiln_pmean(t, loss, m->axis);
    acc = kiln_pmean(t, acc, m->axis);
  }
  kiln_val *norm = grads ? kiln_global_norm(t, grads) : NULL;
  kiln_tree *new_state = NULL;
  kiln_tree *updates =
      grads ? kiln_optim_update(t, &m->opt, grads, state, params, &new_state) : NULL;
  kiln_tree_free(mean_grads);
  kiln_tree *new_params = updates ? kiln_apply_updates(t, params, updates) : NULL;
  kiln_tree_free(updates);
  kiln_tree_free(out);
  kiln_val *finite = new_params && new_state
                         ? all_finite(t, new_state, all_finite(t, new_params, NULL))
                         : NULL;
  if (!new_params || !new_state || !loss || !acc || !norm || !finite) {
    kiln_tree_free(new_params);
    kiln_tree_free(new_state);
    return NULL;
  }
  return kiln_tree_tuple(6, (kiln_tree *[]){new_params, new_state, kiln_tree_val(loss),
                                            kiln_tree_val(acc), kiln_tree_val(norm),
                                            kiln_tree_val(finite)});
}

/* eval(params, x, y) -> (loss of each example, 1.0 where it is classified
 * right): per example, so that rows padded by pad_shard_unpad are cut off
 * before the host sums them. */
static kiln_tree *eval_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const model *m = user;
  kiln_val *y = kiln_convert(t, kiln_arg(args, 2), KILN_I32);
  kiln_val *logits = forward(t, m, kiln_tree_child(args, 0), pixels(t, kiln_arg(args, 1)));
  kiln_val *out[2] = {kiln_nn_softmax_cross_entropy(t, logits, y), correct(t, logits, y)};
  return kiln_tuple_of(2, out);
}

/* split(key) -> u32[2,2], jax.random.split(key) */
static kiln_tree *split_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  (void)user;
  kiln_val *keys = kiln_random_split(t, kiln_arg(args, 0), 2);
  return kiln_tuple_of(1, &keys);
}

kiln_status model_new(kiln_ctx *ctx, const model_spec *spec, kiln_schedule lr, model *m) {
  memset(m, 0, sizeof *m);
  if (spec->n_dense < 1 || spec->n_dense > MODEL_MAX_LAYERS || spec->n_conv < 0 ||
      spec->n_conv > MODEL_MAX_LAYERS || (spec->n_conv && (spec->height >> spec->n_conv < 1 ||
                                                           spec->cols >> spec->n_conv < 1)))
    return KILN_ERR_ARGUMENT;
  m->n_conv = spec->n_conv;
  memcpy(m->conv, spec->conv, sizeof m->conv);
  m->height = spec->height, m->cols = spec->cols;
  m->n_layers = spec->n_dense;
  /* the first dense layer's inputs: the pixels, or what the last pool leaves */
  m->width[0] = spec->height * spec->cols;
  if (m->n_conv)
    m->width[0] = (spec->height >> m->n_conv) * (spec->cols >> m->n_conv) * m->conv[m->n_conv - 1];
  memcpy(m->width + 1, spec->dense, (size_t)spec->n_dense * sizeof *spec->dense);
  m->opt = kiln_adam(lr, 0.9, 0.999, 1e-8);
  const int donate[2] = {0, 1};
  const kiln_jit_options step_opts = {.donate_argnums = donate, .num_donate = 2};
  kiln_status s;
  if ((s = kiln_func_new(init_fn, m, "model_init", &m->init_f)) ||
      (s = kiln_func_new(loss_fn, m, "model_loss", &m->loss_f)) ||
      (s = kiln_value_and_grad(m->loss_f, NULL, 0, 1, &m->vg_f)) ||
      (s = kiln_func_new(step_fn, m, "train_step", &m->step_f)) ||
      (s = kiln_func_new(eval_fn, m, "eval_step", &m->eval_f)) ||
      (s = kiln_func_new(split_fn, m, "key_split", &m->split_f)) ||
      (s = kiln_jit_new(ctx, m->init_f, NULL, &m->init)) ||
      (s = kiln_jit_new(ctx, m->step_f, &step_opts, &m->step)) ||
      (s = kiln_jit_new(ctx, m->split_f, NULL, &m->split))) {
    model_free(m);
    return s;
  }
  return KILN_OK;
}

void model_free(model *m) {
  kiln_jit_free(m->init);
  kiln_jit_free(m->step);
  kiln_jit_free(m->split);
  kiln_func_free(m->split_f);
  kiln_func_free(m->eval_f);
  kiln_func_free(m->step_f);
  kiln_func_free(m->vg_f);
  kiln_func_free(m->loss_f);
  kiln_func_free(m->init_f);
  memset(m, 0, sizeof *m);
}
