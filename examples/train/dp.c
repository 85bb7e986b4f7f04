/* Data parallelism as flax's examples write it: params and optimizer
 * state replicated by kiln_replicate (a leading device axis, copy i on
 * device i), each batch from kiln_prefetch already split over the devices
 * ([n, B/n, ...], shard i on device i), and the model's step pmapped over
 * axis "data": it runs once per device and averages its gradients, loss
 * and accuracy with pmean over "data"; its results keep the device axis,
 * laid out as its inputs, so the next step takes them as they are. It
 * donates params and optimizer state (flax's donate_argnums=(0,)): each
 * device's copies are deleted by the call, and their memory goes to the new
 * values where the fusion planner allows; checkpoints and evaluation read
 * the state between steps, never across one. Batches
 * whose size the device count does not divide are refused by the trainer;
 * it drops the last partial batch of an epoch as the one-device trainer
 * does.
 *
 * Evaluation is flax's pad_shard_unpad(pmap(eval)): params pass through
 * (static argument 0; mapped when replicated, else unmapped), x and y are
 * padded with zero rows to a multiple of the device count and split over
 * the devices, and the per-example losses and hits come back cut to the
 * batch, so padded rows never reach the sums. */
#include "dp.h"

#include <stdlib.h>
#include <string.h>

static const char kAxis[] = "data";

enum { kMaxDevices = 1024 }; /* the trainer's --devices limit */

/* The context's first n devices, in a new array (free it). */
static kiln_status first_devices(kiln_ctx *ctx, int n, kiln_device ***out) {
  kiln_device **devs = calloc((size_t)n, sizeof *devs);
  kiln_status s = devs ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  for (int i = 0; !s && i < n; i++) s = kiln_device_get(ctx, i, &devs[i]);
  if (s) free(devs);
  *out = s ? NULL : devs;
  return s;
}

/* max over devices minus min over devices, largest over the leaves of a
 * tree of f32 values; NULL with the trace failed. */
static kiln_val *spread(kiln_trace *t, const kiln_tree *tree, kiln_val *acc) {
  const kiln_leaf *leaf = kiln_tree_leaf_get(tree);
  if (leaf && leaf->kind == KILN_LEAF_VAL) {
    kiln_val *p = leaf->u.val;
    kiln_val *d = kiln_sub(t, kiln_pmax(t, p, kAxis), kiln_pmin(t, p, kAxis));
    kiln_val *m = kiln_amax(t, d, KILN_ALL_AXES, NULL, 0);
    return acc ? kiln_max(t, acc, m) : m;
  }
  for (size_t i = 0; i < kiln_tree_num_children(tree); i++)
    acc = spread(t, kiln_tree_child(tree, i), acc);
  return acc;
}

/* The step with the replicas' spread of the new params appended. */
static kiln_tree *checked_step(kiln_trace *t, const kiln_tree *args, void *user) {
  const model *m = user;
  kiln_tree *out = kiln_call(t, m->step_f, args);
  if (!out) return NULL;
  kiln_val *s = spread(t, kiln_tree_child(out, 0), kiln_scalar_f(t, 0.0));
  enum { kOutputs = 6 }; /* the step's; the spread goes last */
  kiln_tree *children[kOutputs + 1];
  for (int i = 0; i < kOutputs; i++) children[i] = kiln_tree_clone(kiln_tree_child(out, (size_t)i));
  children[kOutputs] = s ? kiln_tree_val(s) : NULL;
  kiln_tree *r = s ? kiln_tree_tuple(kOutputs + 1, children) : NULL;
  if (!s)
    for (int i = 0; i < kOutputs; i++) kiln_tree_free(children[i]);
  kiln_tree_free(out);
  return r;
}

kiln_status dp_step_new(kiln_ctx *ctx, model *m, int n_devices, int check_replicas,
                        dp_step *out) {
  memset(out, 0, sizeof *out);
  out->n_devices = n_devices;
  m->axis = kAxis;
  const int64_t shape[1] = {n_devices};
  const char *names[1] = {kAxis};
  const int donate[2] = {0, 1};
  const kiln_jit_options opts = {.donate_argnums = donate, .num_donate = 2};
  const kiln_func *body = m->step_f;
  kiln_mesh *mesh = NULL;
  kiln_pspec *split = NULL;
  kiln_status s = first_devices(ctx, n_devices, &out->devices);
  if (!s) s = kiln_mesh_new(ctx, 1, shape, names, out->devices, &mesh);
  if (!s) s = kiln_pspec_parse(kAxis, &split);
  if (!s) s = kiln_sharding_named(mesh, split, &out->batch);
  kiln_pspec_free(split);
  kiln_mesh_free(mesh); /* the sharding keeps it */
  if (!s && check_replicas && !(s = kiln_func_new(checked_step, m, "checked_step", &out->body)))
    body = out->body;
  const int in_axes[4] = {0, 0, 0, 0};
  if (!s) s = kiln_pmap(ctx, body, kAxis, 4, in_axes, 0, n_devices, out->devices, &out->pm);
  if (!s) s = kiln_jit_new(ctx, out->pm, &opts, &out->jit);
  if (s) dp_step_free(out);
  return s;
}

/* The n devices' shards of one leaf as one array, shard i on device i. */
static kiln_status stack_shards(const kiln_leaf *const *leaves, size_t n, void *user,
                                kiln_leaf *out) {
  kiln_array *shards[kMaxDevices];
  if (n > kMaxDevices)
    return kiln_fail(KILN_ERR_ARGUMENT, "dp_batch: %zu device parts, at most %d", n, kMaxDevices);
  for (size_t i = 0; i < n; i++) {
    if (leaves[i]->kind != KILN_LEAF_ARRAY)
      return kiln_fail(KILN_ERR_TREE, "dp_batch: device %zu's part holds a leaf that is no array", i);
    shards[i] = leaves[i]->u.array;
  }
  int rank = kiln_array_rank(shards[0]);
  int64_t shape[KILN_MAX_RANK];
  memcpy(shape, kiln_array_shape(shards[0]), (size_t)rank * sizeof *shape);
  shape[0] = (int64_t)n;
  out->kind = KILN_LEAF_ARRAY;
  return kiln_array_from_shards(user, kiln_array_dtype(shards[0]), rank, shape, shards,
                                &out->u.array);
}

static kiln_status adopt(const kiln_leaf *const *leaves, size_t n, void *user, kiln_leaf *out) {
  (void)n;
  if (leaves[0]->kind != KILN_LEAF_ARRAY)
    return kiln_fail(KILN_ERR_TREE, "dp_replicate: a replicated leaf is no array");
  out->kind = KILN_LEAF_ARRAY;
  return kiln_device_put_sharded(leaves[0]->u.array, user, &out->u.array);
}

kiln_status dp_replicate(kiln_ctx *ctx, const dp_step *d, kiln_tree **tree) {
  kiln_tree *copies = NULL, *adopted = NULL;
  kiln_status s = kiln_replicate(ctx, *tree, d->n_devices, d->devices, &copies);
  if (!s) s = kiln_tree_map(adopt, d->batch, 1, (const kiln_tree *const[]){copies}, &adopted);
  kiln_tree_free(copies);
  if (!s) {
    kiln_tree_free(*tree);
    *tree = adopted;
  }
  return s;
}

kiln_status dp_batch(const dp_step *d, kiln_tree **batch) {
  size_t n = kiln_tree_num_children(*batch);
  const kiln_tree *parts[kMaxDevices];
  if (n != (size_t)d->n_devices || n > kMaxDevices)
    return kiln_fail(KILN_ERR_ARGUMENT, "dp_batch: %zu device parts for a step over %d devices", n,
                     d->n_devices);
  for (size_t i = 0; i < n; i++) parts[i] = kiln_tree_child(*batch, i);
  kiln_tree *stacked = NULL;
  kiln_status s = kiln_tree_map(stack_shards, d->batch, n, parts, &stacked);
  if (!s) {
    kiln_tree_free(*batch);
    *batch = stacked;
  }
  return s;
}

void dp_step_free(dp_step *d) {
  kiln_jit_free(d->jit);
  kiln_func_free(d->pm);
  kiln_func_free(d->body);
  kiln_sharding_free(d->batch);
  free(d->devices);
  memset(d, 0, sizeof *d);
}

kiln_status dp_eval_new(kiln_ctx *ctx, model *m, int n_devices, int replicated, dp_eval *out) {
  memset(out, 0, sizeof *out);
  const int in_axes[3] = {replicated ? 0 : KILN_PMAP_NONE, 0, 0};
  kiln_pad_shard_unpad_options o; /* static argnums {0}, flax's default: params */
  kiln_pad_shard_unpad_options_init(&o);
  o.ndevices = n_devices;
  kiln_device **devs = NULL;
  kiln_status s = first_devices(ctx, n_devices, &devs);
  o.devices = devs;
  if (!s) s = kiln_pmap(ctx, m->eval_f, kAxis, 3, in_axes, 0, n_devices, devs, &out->pm);
  if (!s) s = kiln_jit_new(ctx, out->pm, NULL, &out->jit);
  if (!s) s = kiln_pad_shard_unpad(ctx, kiln_apply_jit, out->jit, &o, &out->padded);
  free(devs);
  if (s) dp_eval_free(out);
  return s;
}

void dp_eval_free(dp_eval *e) {
  kiln_padded_free(e->padded);
  kiln_jit_free(e->jit);
  kiln_func_free(e->pm);
  memset(e, 0, sizeof *e);
}
