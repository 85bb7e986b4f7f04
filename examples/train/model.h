/* The model (an MLP, or a CNN: 3x3 convs, each relu and 2x2 average pool,
 * then dense layers) and its jitted programs: init, train step, evaluation,
 * key split. */
#ifndef KILN_EXAMPLE_TRAIN_MODEL_H
#define KILN_EXAMPLE_TRAIN_MODEL_H

#include <kiln/kiln.h>

#define MODEL_MAX_LAYERS 9

typedef struct model {
  int n_conv;                         /* leading conv layers (0: an MLP) */
  int64_t conv[MODEL_MAX_LAYERS];     /* their features */
  int64_t height, cols;               /* the CNN's images: x u8[B, height * cols] */
  int n_layers;                        /* dense layers */
  int64_t width[MODEL_MAX_LAYERS + 1]; /* width[0] inputs ... width[n_layers] classes */
  kiln_optimizer opt;
  /* Set (dp.c): the step runs per device inside a shard_map and averages
   * its gradients, loss and accuracy with pmean over this mesh axis. */
  const char *axis;
  kiln_func *init_f, *loss_f, *vg_f, *step_f, *eval_f, *split_f;
  /* init(key) -> (params, opt_state)
   * step(params, opt_state, x u8[B,F], y u8[B]) -> (params, opt_state, loss, accuracy,
   *   grad_norm, finite: 1 when the new params and opt_state are all finite),
   *   params and opt_state donated
   * eval(params, x, y) -> (loss of each example f32[B], 1 where right f32[B]),
   *   jitted by dp.c under pmap and pad_shard_unpad
   * split(key) -> u32[2,2] */
  kiln_jit *init, *step, *split;
} model;

/* The layers of a model: n_conv conv features (0 for an MLP) over images of
 * height x cols pixels, one channel; then n_dense dense layers of these
 * widths, the last one the classes. */
typedef struct model_spec {
  int n_conv;
  int64_t conv[MODEL_MAX_LAYERS];
  int64_t height, cols;
  int n_dense;
  int64_t dense[MODEL_MAX_LAYERS];
} model_spec;

/* KILN_ERR_ARGUMENT (with kiln's error set) for a spec it cannot build. */
kiln_status model_new(kiln_ctx *ctx, const model_spec *spec, kiln_schedule lr, model *m);
void model_free(model *m);

#endif
