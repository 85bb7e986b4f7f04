/* The data-parallel train step (the model's step under shard_map over a
 * one-axis mesh "data" of the context's first n devices) and evaluation
 * (the model's eval under pmap, wrapped by pad_shard_unpad). */
#ifndef KILN_EXAMPLE_TRAIN_DP_H
#define KILN_EXAMPLE_TRAIN_DP_H

#include <kiln/kiln.h>

#include "model.h"

typedef struct dp_step {
  int n_devices;
  kiln_mesh *mesh;
  kiln_func *body, *sm;
  /* step(params, opt_state, x u8[B,F], y u8[B]) -> (params, opt_state,
   * loss, accuracy[, spread]), as model's step with B split over the
   * devices; params and opt_state donated. spread (with check_replicas):
   * the largest difference of any parameter between two devices. */
  kiln_jit *jit;
} dp_step;

/* Sets m->axis; m must outlive the step. */
kiln_status dp_step_new(kiln_ctx *ctx, model *m, int n_devices, int check_replicas,
                        dp_step *out);
/* Puts every array of *tree on the step's mesh, replicated (P()), in place
 * of the tree: fed so, the step passes params and optimizer state to each
 * device as they are and returns them so (no gather, no copy per step). */
kiln_status dp_place(const dp_step *d, kiln_tree **tree);
void dp_step_free(dp_step *d);

/* flax's evaluation pattern: eval pmapped over the first n devices with
 * params unmapped, wrapped by kiln_pad_shard_unpad so that a test batch of
 * any size is padded to a multiple of n, sharded, and its per-example
 * results cut back to the batch. */
typedef struct dp_eval {
  kiln_func *pm;
  kiln_jit *jit;
  kiln_padded *padded; /* padded(params, x u8[b,F], y u8[b]) -> (loss[b], right[b]) */
} dp_eval;

kiln_status dp_eval_new(kiln_ctx *ctx, model *m, int n_devices, dp_eval *out);
void dp_eval_free(dp_eval *e);

#endif
