/* Data parallelism as jax.shard_map writes it: params and optimizer state
 * enter replicated (spec P(), every device sees them whole), each batch is
 * split along its first axis (P("data")), and the model's step, with its
 * gradients, loss and accuracy averaged by pmean over "data", runs once per
 * device; the results leave replicated (P(), which the replication check
 * proves: each comes from replicated state and pmean'd values). Batches
 * whose size the device count does not divide are refused by the trainer;
 * it drops the last partial batch of an epoch as the one-device trainer
 * does.
 *
 * Evaluation is flax's pad_shard_unpad(pmap(eval)): params pass through
 * unmapped (static argument 0, in_axes None), x and y are padded with zero
 * rows to a multiple of the device count and split over the devices, and
 * the per-example losses and hits come back cut to the batch, so padded
 * rows never reach the sums. */
#include "dp.h"

#include <stdlib.h>
#include <string.h>

static const char kAxis[] = "data";

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
  kiln_tree *r = s ? kiln_tree_tuple(5, (kiln_tree *[]){kiln_tree_clone(kiln_tree_child(out, 0)),
                                                        kiln_tree_clone(kiln_tree_child(out, 1)),
                                                        kiln_tree_clone(kiln_tree_child(out, 2)),
                                                        kiln_tree_clone(kiln_tree_child(out, 3)),
                                                        kiln_tree_val(s)})
                   : NULL;
  kiln_tree_free(out);
  return r;
}

/* (P(), P(), P(data), P(data)) for the arguments, P() for every result. */
static kiln_status specs(kiln_tree **ins, kiln_tree **outs, kiln_pspec *ps[2]) {
  kiln_status s;
  if ((s = kiln_pspec_parse("", &ps[0])) || (s = kiln_pspec_parse(kAxis, &ps[1]))) return s;
  *ins = kiln_tree_tuple(4, (kiln_tree *[]){kiln_tree_ptr(ps[0]), kiln_tree_ptr(ps[0]),
                                            kiln_tree_ptr(ps[1]), kiln_tree_ptr(ps[1])});
  *outs = kiln_tree_ptr(ps[0]);
  return *ins && *outs ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
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
  kiln_tree *ins = NULL, *outs = NULL;
  kiln_pspec *ps[2] = {NULL, NULL};
  const kiln_func *body = m->step_f;
  kiln_device **devs = NULL;
  kiln_status s = first_devices(ctx, n_devices, &devs);
  if (!s) s = kiln_mesh_new(ctx, 1, shape, names, devs, &out->mesh);
  free(devs);
  if (!s && check_replicas && !(s = kiln_func_new(checked_step, m, "checked_step", &out->body)))
    body = out->body;
  if (!s) s = specs(&ins, &outs, ps);
  if (!s) s = kiln_shard_map(body, out->mesh, ins, outs, 1, &out->sm);
  if (!s) s = kiln_jit_new(ctx, out->sm, &opts, &out->jit);
  kiln_tree_free(ins);
  kiln_tree_free(outs);
  kiln_pspec_free(ps[0]);
  kiln_pspec_free(ps[1]);
  if (s) dp_step_free(out);
  return s;
}

static kiln_status put_replicated(const kiln_leaf *const *leaves, size_t n, void *user,
                                  kiln_leaf *out) {
  (void)n;
  if (leaves[0]->kind != KILN_LEAF_ARRAY) return KILN_ERR_TREE;
  out->kind = KILN_LEAF_ARRAY;
  return kiln_device_put_sharded(leaves[0]->u.array, user, &out->u.array);
}

kiln_status dp_place(const dp_step *d, kiln_tree **tree) {
  kiln_sharding *rep = NULL;
  kiln_tree *placed = NULL;
  kiln_status s = kiln_sharding_replicated(d->mesh, &rep);
  if (!s) s = kiln_tree_map(put_replicated, rep, 1, (const kiln_tree *const[]){*tree}, &placed);
  kiln_sharding_free(rep);
  if (!s) {
    kiln_tree_free(*tree);
    *tree = placed;
  }
  return s;
}

void dp_step_free(dp_step *d) {
  kiln_jit_free(d->jit);
  kiln_func_free(d->sm);
  kiln_func_free(d->body);
  kiln_mesh_free(d->mesh);
  memset(d, 0, sizeof *d);
}

kiln_status dp_eval_new(kiln_ctx *ctx, model *m, int n_devices, dp_eval *out) {
  memset(out, 0, sizeof *out);
  const int in_axes[3] = {KILN_PMAP_NONE, 0, 0};
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
