/* The backend interface's collectives (kdev_coll_ops) over the NCCL engine
 * of collective.c: what a shard_map over CUDA devices calls for each
 * collective step. A mesh handle is one kcuda_coll_mesh over the context's
 * first n devices (communicators made lazily, one per axis group, cached by
 * the axes' names) with the NCCL it uses: libnccl.so.2, or the library
 * options.nccl_library names (KILN_NCCL_LIBRARY: another NCCL build, or the stand-in).
 *
 * IR collectives act along any dimension, NCCL's on rank-major buffers, so
 * a collective along an inner dimension moves its operand to rank-major
 * first and its result back after, as contiguous device-to-device copies on
 * the compute stream (which the collective stream is ordered against both
 * ways). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

typedef struct coll_handle {
  kcuda_nccl *own; /* opened from options.nccl_library, else NULL: the process's */
  size_t bucket_bytes; /* options.collective_bucket_bytes */
  kcuda_coll_mesh *m;
  kiln_device **devs;
  int n;
} coll_handle;

static kiln_status nccl_open(const kdev_backend *b, kcuda_nccl **own, const kcuda_nccl **nc) {
  const char *path = ((const kcuda_state *)b->state)->config->opts.nccl_library;
  kiln_status st = path && *path ? kcuda_nccl_open_library(path, own) : kcuda_nccl_get(nc);
  if (!st && *own) *nc = *own;
  if (st)
    kcore_fail_wrap(st, "a mesh of CUDA devices runs its collectives through NCCL, which is not "
                    "usable here");
  return st;
}

static kiln_status coll_probe(kdev_backend *b) {
  kcuda_nccl *own = NULL;
  const kcuda_nccl *nc = NULL;
  kiln_status st = nccl_open(b, &own, &nc);
  kcuda_nccl_close(own);
  return st;
}

static void coll_mesh_free(void *mesh) {
  coll_handle *h = mesh;
  if (!h) return;
  kcuda_coll_mesh_free(h->m);
  kcuda_nccl_close(h->own);
  free(h->devs);
  free(h);
}

static kiln_status coll_mesh_new(kdev_backend *b, int n, double timeout_s, void **out) {
  *out = NULL;
  if (n < 1 || n > b->num_devices)
    return kcore_fail(KILN_ERR_ARGUMENT, "NCCL collectives: a mesh of %d devices on a context of "
                      "%d", n, b->num_devices);
  coll_handle *h = calloc(1, sizeof *h);
  if (h) h->devs = calloc((size_t)n, sizeof *h->devs);
  if (!h || !h->devs) {
    free(h);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL collectives: out of host memory");
  }
  h->n = n;
  h->bucket_bytes = (size_t)((const kcuda_state *)b->state)->config->opts.collective_bucket_bytes;
  for (int i = 0; i < n; i++) h->devs[i] = &b->devices[i];
  const kcuda_nccl *nc = NULL;
  kiln_status st = nccl_open(b, &h->own, &nc);
  if (!st) st = kcuda_coll_mesh_new(nc, h->devs, n, timeout_s, &h->m);
  if (st) {
    coll_mesh_free(h);
    return st;
  }
  *out = h;
  return KILN_OK;
}

/* [outer][size][block] -> [size][outer][block] (back: the inverse) on the
 * device's compute stream, after src's writes; marks dst written. */
static kiln_status move_blocks(kiln_device *dev, const kdev_buffer *src, kdev_buffer *dst,
                               int64_t outer, int64_t size, size_t block, bool back) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  if ((st = kcuda_trail_settle(d)) || (st = kcuda_order_after_ready(dev, src))) goto out;
  for (int64_t o = 0; o < outer && block; o++)
    for (int64_t r = 0; r < size; r++) {
      size_t a = (size_t)(o * size + r) * block, z = (size_t)(r * outer + o) * block;
      KCUDA_CU(d->drv, d->where, cuMemcpyDtoDAsync,
               ((CUdeviceptr)dst->ptr + (back ? a : z), (CUdeviceptr)src->ptr + (back ? z : a),
                block, d->compute), out);
    }
  st = kcuda_mark_ready(d, dst, d->compute);
out:
  kcuda_leave(d);
  return st;
}

typedef struct coll_bufs {
  kdev_buffer *tin, *tout;  /* per device: the rank-major temporaries */
  kdev_buffer **in, **out;  /* what the engine gets */
} coll_bufs;

static kiln_status coll_call(kcuda_coll_group *g, const kdev_coll *c, kdev_buffer *const *in,
                             kdev_buffer *const *out) {
  switch (c->kind) {
    case KDEV_COLL_ALL_REDUCE:
      return kcuda_coll_all_reduce(g, c->dtype, c->count, in, out, (kcuda_coll_reduce)c->reduce);
    case KDEV_COLL_ALL_GATHER: return kcuda_coll_all_gather(g, c->dtype, c->count, in, out);
    case KDEV_COLL_REDUCE_SCATTER: return kcuda_coll_reduce_scatter(g, c->dtype, c->count, in, out);
    case KDEV_COLL_ALL_TO_ALL: return kcuda_coll_all_to_all(g, c->dtype, c->count, in, out);
    case KDEV_COLL_PPERMUTE:
      return kcuda_coll_ppermute(g, c->dtype, c->count, in, out, c->npairs, c->pairs);
  }
  return kcore_fail(KILN_ERR_INTERNAL, "%s: unknown collective kind %d", c->name, (int)c->kind);
}

static kiln_status coll_run(void *mesh, const kdev_coll *c, kdev_buffer *const *in,
                            kdev_buffer *const *out) {
  coll_handle *h = mesh;
  kcuda_coll_group *g = NULL;
  kiln_status st = kcuda_coll_group_get(h->m, c->axes, c->color, c->rank, &g);
  if (st) return kcore_fail_wrap(st, "%s over axis '%s'", c->name, c->axes);
  int64_t size = kcuda_coll_group_size(g);
  size_t es = kiln_dtype_size(c->dtype);
  coll_bufs b = {calloc((size_t)h->n, sizeof *b.tin), calloc((size_t)h->n, sizeof *b.tout),
                 calloc((size_t)h->n, sizeof *b.in), calloc((size_t)h->n, sizeof *b.out)};
  if (!b.tin || !b.tout || !b.in || !b.out)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  bool move_in = c->in_outer > 1, move_out = c->out_outer > 1;
  for (int i = 0; !st && i < h->n; i++) {
    kiln_device *dev = h->devs[i];
    b.in[i] = in[i], b.out[i] = out[i];
    if (move_in && !(st = dev->ops->alloc(dev, in[i]->nbytes, &b.tin[i]))) {
      st = move_blocks(dev, in[i], &b.tin[i], c->in_outer, size, (size_t)c->in_block * es, false);
      b.in[i] = &b.tin[i];
    }
    if (!st && move_out && !(st = dev->ops->alloc(dev, out[i]->nbytes, &b.tout[i])))
      b.out[i] = &b.tout[i];
  }
  if (!st) st = coll_call(g, c, b.in, b.out);
  for (int i = 0; !st && move_out && i < h->n; i++)
    st = move_blocks(h->devs[i], &b.tout[i], out[i], c->out_outer, size,
                     (size_t)c->out_block * es, true);
  for (int i = 0; b.tin && b.tout && i < h->n; i++) {
    if (b.tin[i].ptr) h->devs[i]->ops->release(h->devs[i], &b.tin[i]);
    if (b.tout[i].ptr) h->devs[i]->ops->release(h->devs[i], &b.tout[i]);
  }
  free(b.tin), free(b.tout), free(b.in), free(b.out);
  return st;
}

/* Through the bucketing engine (collective_bucket.c): a pytree's psum costs
 * a few NCCL calls, not one per leaf. */
static kiln_status coll_all_reduce_many(void *mesh, const kdev_coll *c, int n_ops,
                                        const kiln_dtype *dtypes, const int64_t *counts,
                                        kdev_buffer *const *bufs) {
  coll_handle *h = mesh;
  kcuda_coll_group *g = NULL;
  kiln_status st = kcuda_coll_group_get(h->m, c->axes, c->color, c->rank, &g);
  if (st) return kcore_fail_wrap(st, "%s over axis '%s'", c->name, c->axes);
  kdev_buffer *const **leaves = calloc((size_t)n_ops + 1, sizeof *leaves);
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  for (int k = 0; k < n_ops; k++) leaves[k] = &bufs[(size_t)k * (size_t)h->n];
  st = kcuda_coll_all_reduce_leaves(g, n_ops, dtypes, counts, leaves,
                                    (kcuda_coll_reduce)c->reduce, h->bucket_bytes);
  free(leaves);
  return st;
}

static kiln_status coll_wait(void *mesh) { return kcuda_coll_wait(((coll_handle *)mesh)->m); }

/* Lockstep: one thread drives every device's stream. */
const kdev_coll_ops kcuda_coll_ops = {
    .probe = coll_probe,
    .mesh_new = coll_mesh_new,
    .mesh_free = coll_mesh_free,
    .run = coll_run,
    .all_reduce_many = coll_all_reduce_many,
    .wait = coll_wait,
};
