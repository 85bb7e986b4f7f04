/* Sharded arrays from dist's side: a named sharding's layout turned into the
 * device level's shard list (one block per device), and back. */
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"

static void kdist_sharding_release(void *s) { kiln_sharding_free(s); }

const kiln_sharding *kdist_array_sharding(const kiln_array *a) {
  return a && a->shards ? a->shards->owner : NULL;
}

kiln_status kiln_array_sharding(const kiln_array *a, kiln_sharding **out) {
  static const char op[] = "kiln_array_sharding";
  if (out) *out = NULL;
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  kiln_status st = kdev_array_check_any(op, a);
  if (st) return st;
  const kiln_sharding *s = kdist_array_sharding(a);
  return s ? kiln_sharding_copy(s, out) : kiln_sharding_single(a->device, out);
}

kiln_status kdist_layout_new(const char *op, const kiln_sharding *s, int rank,
                             const int64_t *shape, kdist_layout *out) {
  memset(out, 0, sizeof *out);
  if (!s) return kcore_fail(KILN_ERR_ARGUMENT, "%s: sharding is null", op);
  if (rank < 0 || rank > KILN_MAX_RANK || (rank > 0 && !shape))
    return kcore_fail(KILN_ERR_SHAPE, "%s: rank %d is outside [0, %d]", op, rank, KILN_MAX_RANK);
  int64_t n = kiln_sharding_device_count(s);
  out->count = n;
  out->rank = rank;
  out->blocks = calloc((size_t)n, sizeof *out->blocks);
  if (!out->blocks) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kiln_status st = kiln_sharding_shard_shape(s, rank, shape, out->shard_shape);
  for (int64_t i = 0; i < n && !st; i++)
    st = kiln_sharding_device_indices(s, i, rank, shape, out->blocks[i].start,
                                      out->blocks[i].stop);
  if (st) {
    kdist_layout_free(out);
    return kcore_fail_wrap(st, "%s", op);
  }
  return KILN_OK;
}

void kdist_layout_free(kdist_layout *l) {
  free(l->blocks);
  l->blocks = NULL;
}

kiln_status kdist_wrap_shards(const char *op, const kiln_sharding *s, const kdist_layout *l,
                              kiln_dtype dtype, const int64_t *shape, kiln_array *const *shards,
                              kiln_array **out) {
  int64_t(*start)[KILN_MAX_RANK] = calloc((size_t)l->count, sizeof *start);
  int64_t(*stop)[KILN_MAX_RANK] = calloc((size_t)l->count, sizeof *stop);
  kiln_sharding *owner = NULL;
  kiln_status st = start && stop ? kiln_sharding_copy(s, &owner)
                                 : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int64_t i = 0; !st && i < l->count; i++) {
    memcpy(start[i], l->blocks[i].start, sizeof start[i]);
    memcpy(stop[i], l->blocks[i].stop, sizeof stop[i]);
  }
  if (!st)
    st = kdev_array_new_sharded(op, dtype, l->rank, shape, l->count, shards,
                                (const int64_t(*)[KILN_MAX_RANK])start,
                                (const int64_t(*)[KILN_MAX_RANK])stop, owner,
                                kdist_sharding_release, out);
  if (st) kiln_sharding_free(owner);
  free(start);
  free(stop);
  return st;
}

kiln_status kiln_array_from_shards(const kiln_sharding *s, kiln_dtype dtype, int rank,
                                   const int64_t *shape, kiln_array *const *shards,
                                   kiln_array **out) {
  static const char op[] = "kiln_array_from_shards";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", op);
  *out = NULL;
  kdist_layout l;
  kiln_status st = kdist_layout_new(op, s, rank, shape, &l);
  if (st) return st;
  char want[160], got[200], global[160];
  kcore_format_type(dtype, rank, l.shard_shape, want, sizeof want);
  for (int64_t i = 0; i < l.count && !st; i++) {
    const kiln_array *a = shards ? shards[i] : NULL;
    if ((st = kdev_array_check(op, a))) break;
    kiln_array_describe(a, got, sizeof got);
    kiln_device *dev = kiln_sharding_device(s, i);
    if (a->device != dev)
      st = kcore_fail(KILN_ERR_WRONG_DEVICE, "%s: shard %lld %s is not on %s, where the sharding "
                      "puts it", op, (long long)i, got, dev->info.name);
    else if (a->dtype != dtype || a->rank != rank ||
             (rank && memcmp(a->shape, l.shard_shape, (size_t)rank * sizeof *a->shape)))
      st = kcore_fail(KILN_ERR_SHAPE, "%s: shard %lld is %s; the sharding of the global %s "
                      "needs %s", op, (long long)i, got,
                      kcore_format_type(dtype, rank, shape, global, sizeof global), want);
  }
  if (!st && s->kind == KDIST_SINGLE) { /* an ordinary array, as device_put gives */
    kiln_array_retain(shards[0]);
    *out = shards[0];
  } else if (!st) {
    st = kdist_wrap_shards(op, s, &l, dtype, shape, shards, out);
  }
  kdist_layout_free(&l);
  return st;
}
