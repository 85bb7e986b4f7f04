/* The data-parallel train step (the model's step under pmap over the
 * context's first n devices, axis "data") and evaluation (the model's eval
 * under pmap, wrapped by pad_shard_unpad): flax's pmap pattern. */
#ifndef KILN_EXAMPLE_TRAIN_DP_H
#define KILN_EXAMPLE_TRAIN_DP_H

#include <kiln/kiln.h>

#include "model.h"

typedef struct dp_step {
  int n_devices;
  kiln_device **devices; /* the context's first n_devices */
  kiln_sharding *batch;  /* [n, ...] split along axis 0 over them */
  kiln_func *body, *pm;
  /* step(params, opt_state, x u8[n,B/n,F], y u8[n,B/n]) -> (params,
   * opt_state, loss[n], accuracy[n], grad_norm[n], finite[n][, spread[n]]): model's step
   * pmapped
   * over the devices, params and opt_state replicated as kiln_replicate
   * lays them out ([n, ...]) and donated. spread (with check_replicas): the
   * largest difference of any parameter between two devices. */
  kiln_jit *jit;
} dp_step;

/* Sets m->axis; m must outlive the step. */
kiln_status dp_step_new(kiln_ctx *ctx, model *m, int n_devices, int check_replicas,
                        dp_step *out);
/* flax.jax_utils.replicate(*tree) over the step's devices, in its place,
 * labelled with the step's own sharding of that layout, so that the first
 * step takes it as the later ones take their predecessors' results (one
 * compiled program; kiln_device_put_sharded relabels without copying). */
kiln_status dp_replicate(kiln_ctx *ctx, const dp_step *d, kiln_tree **tree);
/* The pmap layout of one batch from kiln_prefetch: *batch, a list of
 * n_devices trees whose leaves are device d's [1, B/n, ...] shard, becomes
 * one tree of [n, B/n, ...] arrays split over the devices (no copy). */
kiln_status dp_batch(const dp_step *d, kiln_tree **batch);
void dp_step_free(dp_step *d);

/* flax's evaluation pattern: eval pmapped over the first n devices with
 * params mapped (replicated, [n, ...]) when `replicated`, else unmapped
 * (one device's copy), wrapped by kiln_pad_shard_unpad so that a test batch of
 * any size is padded to a multiple of n, sharded, and its per-example
 * results cut back to the batch. */
typedef struct dp_eval {
  kiln_func *pm;
  kiln_jit *jit;
  kiln_padded *padded; /* padded(params, x u8[b,F], y u8[b]) -> (loss[b], right[b]) */
} dp_eval;

kiln_status dp_eval_new(kiln_ctx *ctx, model *m, int n_devices, int replicated, dp_eval *out);
void dp_eval_free(dp_eval *e);

#endif
