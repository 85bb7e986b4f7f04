/* jax.device_put with a sharding: host data split into per-device shards,
 * or a device array moved and resharded device to device. */
#include <stdbool.h>
#include <stdlib.h>
#include "dist/dist.h"

/* Fills one freshly allocated shard holding block blk. */
typedef kiln_status (*kdist_fill_fn)(void *user, kiln_array *shard, const kdev_block *blk);

/* Allocates and fills every shard of s for a global array, then wraps them
 * (a single-device sharding gives its one shard as an ordinary array). */
static kiln_status kdist_put(const char *op, const kiln_sharding *s, kiln_dtype dtype, int rank,
                             const int64_t *shape, kdist_fill_fn fill, void *user,
                             kiln_array **out) {
  kdist_layout l;
  kiln_status st = kdist_layout_new(op, s, rank, shape, &l);
  if (st) return st;
  kiln_array **shards = calloc((size_t)l.count, sizeof *shards);
  if (!shards) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  char t[160];
  for (int64_t i = 0; !st && i < l.count; i++) {
    kiln_device *dev = kiln_sharding_device(s, i);
    if ((st = kdev_array_alloc(op, dev, dtype, rank, l.shard_shape, &shards[i]))) break;
    if ((st = fill(user, shards[i], &l.blocks[i])))
      st = kcore_fail_wrap(st, "%s: filling shard %lld (%s on %s)", op, (long long)i,
                           kcore_format_type(dtype, rank, l.shard_shape, t, sizeof t),
                           dev->info.name);
  }
  if (!st && s->kind == KDIST_SINGLE) {
    *out = shards[0];
    shards[0] = NULL;
  } else if (!st) {
    st = kdist_wrap_shards(op, s, &l, dtype, shape, shards, out);
  }
  for (int64_t i = 0; shards && i < l.count; i++) kiln_array_release(shards[i]);
  free(shards);
  kdist_layout_free(&l);
  return st;
}

/* Every device of s must belong to ctx (the context of the data's owner). */
static kiln_status kdist_check_ctx(const char *op, const kiln_sharding *s, const kiln_ctx *ctx) {
  for (int64_t i = 0; i < kiln_sharding_device_count(s); i++) {
    kiln_device *dev = kiln_sharding_device(s, i);
    if (kiln_device_ctx(dev) != ctx)
      return kcore_fail(KILN_ERR_WRONG_DEVICE, "%s: the sharding's %s belongs to another context "
                        "than the array", op, dev->info.name);
  }
  return KILN_OK;
}

typedef struct kdist_host_src {
  const void *data;
  const int64_t *shape;
} kdist_host_src;

static kiln_status kdist_fill_host(void *user, kiln_array *shard, const kdev_block *blk) {
  const kdist_host_src *h = user;
  return kdev_fill_from_host(shard, blk, h->data, h->shape);
}

kiln_status kiln_device_put_host(const kiln_sharding *s, kiln_dtype dtype, int rank,
                                 const int64_t *shape, const void *data, size_t nbytes,
                                 kiln_array **out) {
  static const char op[] = "kiln_device_put_host";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  *out = NULL;
  if (!s) return kcore_fail(KILN_ERR_ARGUMENT, "%s: sharding is null", op);
  kiln_status st = kdev_check_host_data(op, dtype, rank, shape, data, nbytes);
  if (st) return st;
  kdist_host_src h = {data, shape};
  return kdist_put(op, s, dtype, rank, shape, kdist_fill_host, &h, out);
}

static kiln_status kdist_fill_gather(void *user, kiln_array *shard, const kdev_block *blk) {
  return kdev_gather(user, shard, blk);
}

/* As jax.device_put to an equivalent sharding: when s puts the same block
 * of a on the same device as a's own sharding does, shard for shard (the
 * same layout under other mesh axis names, such as kiln_replicate's and a
 * pmap's), *out is a new array over a's buffers carrying s; no copy. */
static kiln_status kdist_relabel(const char *op, kiln_array *a, const kiln_sharding *s,
                                 bool *same, kiln_array **out) {
  kdist_layout l;
  *same = false;
  if (kiln_sharding_device_count(s) != a->shards->count ||
      kdist_layout_new(op, s, a->rank, a->shape, &l)) {
    kiln_clear_error(); /* a layout s cannot give: not the same, put reports it */
    return KILN_OK;
  }
  bool eq = true;
  for (int64_t i = 0; eq && i < l.count; i++) {
    eq = kiln_sharding_device(s, i) == a->shards->arrays[i]->device;
    for (int d = 0; eq && d < a->rank; d++)
      eq = l.blocks[i].start[d] == a->shards->start[i][d] &&
           l.blocks[i].stop[d] == a->shards->stop[i][d];
  }
  kiln_status st = eq ? kdist_wrap_shards(op, s, &l, a->dtype, a->shape, a->shards->arrays, out)
                      : KILN_OK;
  kdist_layout_free(&l);
  *same = eq && !st;
  return st;
}

kiln_status kiln_device_put_sharded(kiln_array *a, const kiln_sharding *s, kiln_array **out) {
  static const char op[] = "kiln_device_put_sharded";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  *out = NULL;
  kiln_status st = kdev_array_check_any(op, a);
  if (st) return st;
  if (!s) return kcore_fail(KILN_ERR_ARGUMENT, "%s: sharding is null", op);
  if ((st = kdist_check_ctx(op, s, kiln_device_ctx(a->device)))) return st;
  const kiln_sharding *have = kdist_array_sharding(a);
  if (have ? kiln_sharding_equal(have, s)
           : s->kind == KDIST_SINGLE && s->device == a->device) {
    kiln_array_retain(a);
    *out = a;
    return KILN_OK;
  }
  bool same = false;
  if (have && s->kind == KDIST_NAMED && (st = kdist_relabel(op, a, s, &same, out))) return st;
  if (same) return KILN_OK;
  return kdist_put(op, s, a->dtype, a->rank, a->shape, kdist_fill_gather, a, out);
}
