/* Gradient bucketing: an all-reduce over many leaves as a few NCCL calls.
 * Leaves of one dtype are packed back to back into a bucket per device with
 * device-to-device copies on the compute stream, the bucket is reduced in
 * place, and the copies back follow on the same stream. Copies rather than a
 * pack kernel: each is one DMA with no compilation, and the stand-in driver
 * performs them for real, so bucketing is checked by value without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

typedef struct bucket {
  int *leaf; /* the leaves in it, in order */
  int n;
  size_t bytes;
} bucket;

/* Copies each leaf into the bucket (pack) or back (unpack) on every device. */
static kiln_status bucket_copy(kiln_device *const *devs, int ndev, const bucket *b,
                               const int64_t *counts, kiln_dtype dtype,
                               kdev_buffer *const *const *leaves, kdev_buffer *buf, bool pack) {
  size_t es = kiln_dtype_size(dtype);
  kiln_status st = KILN_OK;
  for (int i = 0; i < ndev && !st; i++) {
    kcuda_device *d = kcuda_impl(devs[i]);
    if ((st = kcuda_enter(d))) break;
    if ((st = kcuda_trail_settle(d))) {
      kcuda_leave(d);
      break;
    }
    size_t off = 0;
    for (int k = 0; k < b->n && !st; k++) {
      kdev_buffer *leaf = leaves[b->leaf[k]][i];
      size_t bytes = (size_t)counts[b->leaf[k]] * es;
      CUdeviceptr at = (CUdeviceptr)buf[i].ptr + off, p = (CUdeviceptr)leaf->ptr;
      off += bytes;
      if (!bytes) continue;
      if (pack && (st = kcuda_after_ready(d, d->compute, leaf))) break;
      KCUDA_CU(d->drv, d->where, cuMemcpyDtoDAsync, (pack ? at : p, pack ? p : at, bytes, d->compute), left);
      if (!pack) st = kcuda_mark_ready(d, leaf, d->compute);
    }
  left:
    kcuda_leave(d);
  }
  return st;
}

static kiln_status bucket_reduce(kcuda_coll_group *g, kiln_device *const *devs, int ndev,
                                 const bucket *b, const int64_t *counts, kiln_dtype dtype,
                                 kdev_buffer *const *const *leaves, kcuda_coll_reduce op) {
  if (b->n == 1) /* nothing to pack: reduce the leaf in place */
    return kcuda_coll_all_reduce(g, dtype, counts[b->leaf[0]], leaves[b->leaf[0]],
                                 leaves[b->leaf[0]], op);
  kdev_buffer *buf = calloc((size_t)ndev, sizeof *buf);
  kdev_buffer **ptrs = calloc((size_t)ndev, sizeof *ptrs);
  kiln_status st = KILN_OK;
  if (!buf || !ptrs) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bucketed all-reduce: out of host memory");
    goto done;
  }
  for (int i = 0; i < ndev && !st; i++) {
    st = devs[i]->ops->alloc(devs[i], b->bytes, &buf[i]);
    ptrs[i] = &buf[i];
  }
  if (st) {
    kcore_fail_wrap(st, "bucketed all-reduce of %d %s leaves (%zu bytes)", b->n,
                    kiln_dtype_name(dtype), b->bytes);
    goto done;
  }
  int64_t count = (int64_t)(b->bytes / kiln_dtype_size(dtype));
  if (!(st = bucket_copy(devs, ndev, b, counts, dtype, leaves, buf, true)) &&
      !(st = kcuda_coll_all_reduce(g, dtype, count, ptrs, ptrs, op)))
    st = bucket_copy(devs, ndev, b, counts, dtype, leaves, buf, false);
done:
  for (int i = 0; buf && i < ndev; i++)
    if (buf[i].ptr) devs[i]->ops->release(devs[i], &buf[i]); /* stream-ordered after the copies */
  free(buf), free(ptrs);
  return st;
}

static size_t bucket_limit(size_t bucket_bytes) {
  return bucket_bytes ? bucket_bytes : KCUDA_COLL_DEFAULT_BUCKET_BYTES;
}

kiln_status kcuda_coll_all_reduce_leaves(kcuda_coll_group *g, int nleaves,
                                         const kiln_dtype *dtypes, const int64_t *counts,
                                         kdev_buffer *const *const *leaves, kcuda_coll_reduce op,
                                         size_t bucket_bytes) {
  if (!g || nleaves < 0 || (nleaves && (!dtypes || !counts || !leaves)))
    return kcore_fail(KILN_ERR_ARGUMENT, "bucketed all-reduce: invalid argument");
  int ndev = kcuda_coll_mesh_devices(g, NULL);
  kiln_device **devs = calloc((size_t)ndev, sizeof *devs);
  int *order = calloc((size_t)nleaves + 1, sizeof *order);
  bool *taken = calloc((size_t)nleaves + 1, sizeof *taken);
  kiln_status st = KILN_OK;
  if (!devs || !order || !taken) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bucketed all-reduce: out of host memory");
    goto done;
  }
  kcuda_coll_mesh_devices(g, devs);
  size_t limit = bucket_limit(bucket_bytes);
  /* One dtype at a time, in the order dtypes first appear; leaves in order. */
  for (int first = 0; first < nleaves && !st; first++) {
    if (taken[first]) continue;
    kiln_dtype dt = dtypes[first];
    size_t es = kiln_dtype_size(dt);
    if (!es) {
      st = kcore_fail(KILN_ERR_DTYPE, "bucketed all-reduce: leaf %d has an invalid dtype", first);
      break;
    }
    bucket b = {order, 0, 0};
    for (int l = first; l <= nleaves && !st; l++) {
      bool last = l == nleaves;
      if (!last && (taken[l] || dtypes[l] != dt)) continue;
      size_t bytes = last ? 0 : (size_t)counts[l] * es;
      if (!last && counts[l] < 0) {
        st = kcore_fail(KILN_ERR_SHAPE, "bucketed all-reduce: leaf %d has %lld elements", l,
                        (long long)counts[l]);
        break;
      }
      if (b.n && (last || b.bytes + bytes > limit)) { /* flush */
        st = bucket_reduce(g, devs, ndev, &b, counts, dt, leaves, op);
        b.n = 0, b.bytes = 0;
      }
      if (last || st) break;
      taken[l] = true;
      order[b.n++] = l;
      b.bytes += bytes;
    }
  }
done:
  free(devs), free(order), free(taken);
  return st;
}
