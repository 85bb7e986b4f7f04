/* flax.jax_utils.replicate / unreplicate: copies of every leaf of a tree
 * stacked along a new leading axis, one per device (the layout pmap maps
 * over), and back to the first device's copy; plus the tree walk that the
 * jax_utils equivalents share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"

/* flax's axis name for the replication mesh. */
#define KDIST_REPLICA_AXIS "_device_put_sharded"

const char *kdist_path_name(const kiln_path *p, char *buf, size_t cap) {
  if (kiln_path_str(p, buf, cap) == 0) snprintf(buf, cap, "the root");
  return buf;
}

kiln_status kdist_map_arrays(const char *op, const kiln_tree *tree, kdist_leaf_fn fn, void *user,
                             kiln_tree **out) {
  return kdist_map_arrays_except(op, tree, NULL, NULL, fn, user, out);
}

kiln_status kdist_map_arrays_except(const char *op, const kiln_tree *tree, kdist_keep_fn keep,
                                    const void *keep_user, kdist_leaf_fn fn, void *user,
                                    kiln_tree **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  *out = NULL;
  if (!tree) return kcore_fail(KILN_ERR_ARGUMENT, "%s: tree is null", op);
  kiln_leaf *leaves = NULL;
  kiln_path *paths = NULL;
  kiln_treedef *def = NULL;
  size_t n = 0;
  kiln_status st = kiln_tree_flatten_with_path(tree, NULL, NULL, &leaves, &paths, &n);
  if (!st) st = kiln_tree_flatten(tree, NULL, NULL, NULL, NULL, &def);
  kiln_leaf *mapped = st ? NULL : calloc(n ? n : 1, sizeof *mapped);
  if (!st && !mapped) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  char where[256];
  size_t done = 0;
  for (; !st && done < n; done++) {
    kdist_path_name(&paths[done], where, sizeof where);
    if (keep && keep(keep_user, &paths[done])) {
      mapped[done] = leaves[done];
      if (mapped[done].kind == KILN_LEAF_ARRAY) kiln_array_retain(mapped[done].u.array);
      continue;
    }
    if (leaves[done].kind != KILN_LEAF_ARRAY) {
      st = kcore_fail(KILN_ERR_TREE, "%s: the leaf at %s is not an array", op, where);
      break;
    }
    mapped[done].kind = KILN_LEAF_ARRAY;
    if ((st = fn(user, where, leaves[done].u.array, &mapped[done].u.array))) break;
  }
  if (!st) st = kiln_tree_unflatten(def, mapped, n, out);
  for (size_t i = 0; mapped && i < done; i++)
    if (mapped[i].kind == KILN_LEAF_ARRAY) kiln_array_release(mapped[i].u.array);
  free(mapped);
  kiln_treedef_free(def);
  kiln_paths_free(paths, n);
  kiln_leaves_free(leaves, n);
  return st;
}

typedef struct kdist_replicate {
  const kiln_sharding *s;
  int64_t n;
} kdist_replicate;

/* x stacked n times along a new axis 0, copy i on device i, device to device. */
static kiln_status kdist_replicate_leaf(void *user, const char *where, kiln_array *x,
                                        kiln_array **out) {
  static const char op[] = "kiln_replicate";
  const kdist_replicate *r = user;
  kiln_status st = kdev_array_check_any(op, x);
  if (st) return kcore_fail_wrap(st, "%s: at %s", op, where);
  if (x->rank + 1 > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: the leaf at %s has rank %d; replicas add an axis past "
                      "the limit of %d", op, where, x->rank, KILN_MAX_RANK);
  int64_t shape[KILN_MAX_RANK] = {r->n}, one[KILN_MAX_RANK] = {1};
  for (int d = 0; d < x->rank; d++) shape[d + 1] = one[d + 1] = x->shape[d];
  kiln_array **copies = calloc((size_t)r->n, sizeof *copies);
  if (!copies) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kdev_block whole;
  kdev_block_whole(x->rank, x->shape, &whole);
  for (int64_t i = 0; !st && i < r->n; i++) {
    kiln_device *dev = kiln_sharding_device(r->s, i);
    if ((st = kdev_array_alloc(op, dev, x->dtype, x->rank + 1, one, &copies[i]))) break;
    if (kiln_array_nbytes(x) && (st = kdev_gather(x, copies[i], &whole)))
      st = kcore_fail_wrap(st, "%s: copying the leaf at %s to %s", op, where, dev->info.name);
  }
  if (!st) st = kiln_array_from_shards(r->s, x->dtype, x->rank + 1, shape, copies, out);
  for (int64_t i = 0; i < r->n; i++) kiln_array_release(copies[i]);
  free(copies);
  return st;
}

kiln_status kdist_stack_sharding(const char *op, kiln_ctx *ctx, int ndevices,
                                 kiln_device *const *devices, kiln_sharding **out) {
  *out = NULL;
  if (!ctx) return kcore_fail(KILN_ERR_ARGUMENT, "%s: ctx is null", op);
  int64_t n = devices ? ndevices : kiln_device_count(ctx);
  if (devices && ndevices < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %d devices given", op, ndevices);
  const char *name = KDIST_REPLICA_AXIS;
  kiln_mesh *mesh = NULL;
  kiln_pspec *spec = NULL;
  kiln_status st = kiln_mesh_new(ctx, 1, &n, &name, devices, &mesh);
  if (!st) st = kiln_pspec_parse(KDIST_REPLICA_AXIS, &spec);
  if (!st) st = kiln_sharding_named(mesh, spec, out);
  kiln_pspec_free(spec);
  kiln_mesh_free(mesh); /* the sharding keeps it */
  if (st) return kcore_fail_wrap(st, "%s", op);
  return KILN_OK;
}

kiln_status kiln_replicate(kiln_ctx *ctx, const kiln_tree *tree, int ndevices,
                           kiln_device *const *devices, kiln_tree **out) {
  static const char op[] = "kiln_replicate";
  if (out) *out = NULL;
  kiln_sharding *s = NULL;
  kiln_status st = out ? kdist_stack_sharding(op, ctx, ndevices, devices, &s)
                       : kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  if (st) return st;
  kdist_replicate r = {s, kiln_sharding_device_count(s)};
  st = kdist_map_arrays(op, tree, kdist_replicate_leaf, &r, out);
  kiln_sharding_free(s);
  return st;
}

/* Every shard holds the whole array. */
static bool kdist_fully_replicated(const kiln_array *x) {
  for (int64_t i = 0; i < x->shards->count; i++)
    for (int d = 0; d < x->rank; d++)
      if (x->shards->start[i][d] != 0 || x->shards->stop[i][d] != x->shape[d]) return false;
  return true;
}

/* flax's _unreplicate_one: a scalar as it is; a fully replicated array's
 * first copy; else the first device's block with its leading axis of one
 * dropped (x[0] of an ordinary array). A copy on that device, never
 * through the host. */
static kiln_status kdist_unreplicate_leaf(void *user, const char *where, kiln_array *x,
                                          kiln_array **out) {
  static const char op[] = "kiln_unreplicate";
  (void)user;
  kiln_status st = kdev_array_check_any(op, x);
  if (st) return kcore_fail_wrap(st, "%s: at %s", op, where);
  if (x->rank == 0) {
    kiln_array_retain(x);
    *out = x;
    return KILN_OK;
  }
  const kiln_array *src = x->shards ? x->shards->arrays[0] : x;
  bool whole = x->shards && kdist_fully_replicated(x);
  char t[200];
  if (!whole && src->shape[0] != 1 && x->shards) {
    kiln_array_describe(src, t, sizeof t);
    return kcore_fail(KILN_ERR_SHAPE, "%s: the leaf at %s is not replicated: its first shard %s "
                      "has a leading axis of %lld, not 1", op, where, t, (long long)src->shape[0]);
  }
  if (!whole && src->shape[0] == 0) {
    kiln_array_describe(src, t, sizeof t);
    return kcore_fail(KILN_ERR_SHAPE, "%s: the leaf at %s (%s) has no first copy", op, where, t);
  }
  kdev_block blk;
  kdev_block_whole(src->rank, src->shape, &blk);
  blk.stop[0] = whole ? src->shape[0] : 1;
  int rank = whole ? src->rank : src->rank - 1;
  const int64_t *shape = whole ? src->shape : src->shape + 1;
  if ((st = kdev_array_alloc(op, src->device, src->dtype, rank, shape, out))) return st;
  if (kiln_array_nbytes(*out) && (st = kdev_gather(src, *out, &blk))) {
    kiln_array_release(*out);
    *out = NULL;
    return kcore_fail_wrap(st, "%s: copying the leaf at %s", op, where);
  }
  return KILN_OK;
}

kiln_status kiln_unreplicate(const kiln_tree *tree, kiln_tree **out) {
  return kdist_map_arrays("kiln_unreplicate", tree, kdist_unreplicate_leaf, NULL, out);
}
