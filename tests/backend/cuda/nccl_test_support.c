/* C shims over backend/cuda's NCCL collectives (nccl_test_support.h). */
#include "nccl_test_support.h"
#include <stdlib.h>
#include "backend/cuda/cuda_backend.h"

struct kct_buffer { /* as cuda_test_support.c lays it out */
  kdev_buffer buf;
};

struct kctn_mesh {
  kcuda_nccl *own; /* a library opened by path, or NULL */
  kcuda_coll_mesh *mesh;
  kcuda_coll_group *group;
  int n;
};

kiln_status kctn_mesh_new(const char *library, kiln_ctx *ctx, int n, double timeout_s,
                          kctn_mesh **out) {
  kctn_mesh *m = calloc(1, sizeof *m);
  kiln_device **devs = calloc((size_t)n + 1, sizeof *devs);
  const kcuda_nccl *nc = NULL;
  kiln_status st = !m || !devs ? kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kctn_mesh_new") : KILN_OK;
  for (int i = 0; i < n && !st; i++) st = kiln_device_get(ctx, i, &devs[i]);
  if (!st && library) st = kcuda_nccl_open_library(library, &m->own), nc = m->own;
  else if (!st) st = kcuda_nccl_get(&nc);
  if (!st) st = kcuda_coll_mesh_new(nc, devs, n, timeout_s, &m->mesh);
  free(devs);
  if (st) {
    kctn_mesh_free(m);
    return st;
  }
  m->n = n;
  *out = m;
  return KILN_OK;
}

void kctn_mesh_free(kctn_mesh *m) {
  if (!m) return;
  kcuda_coll_mesh_free(m->mesh);
  kcuda_nccl_close(m->own);
  free(m);
}

kiln_status kctn_group(kctn_mesh *m, const char *axis, const int *color, const int *rank) {
  return kcuda_coll_group_get(m->mesh, axis, color, rank, &m->group);
}

kiln_status kctn_collective(kctn_mesh *m, int kind, kiln_dtype dtype, int64_t count,
                            kct_buffer *const *in, kct_buffer *const *out, int red, int npairs,
                            const int (*pairs)[2]) {
  kdev_buffer *bi[16], *bo[16];
  if (m->n > 16) return kcore_fail(KILN_ERR_ARGUMENT, "kctn_collective: at most 16 devices");
  for (int i = 0; i < m->n; i++) bi[i] = in[i] ? &in[i]->buf : NULL, bo[i] = out[i] ? &out[i]->buf : NULL;
  kcuda_coll_reduce op = (kcuda_coll_reduce)red;
  switch (kind) {
    case KCTN_ALL_REDUCE: return kcuda_coll_all_reduce(m->group, dtype, count, bi, bo, op);
    case KCTN_ALL_GATHER: return kcuda_coll_all_gather(m->group, dtype, count, bi, bo);
    case KCTN_REDUCE_SCATTER: return kcuda_coll_reduce_scatter(m->group, dtype, count, bi, bo);
    case KCTN_ALL_TO_ALL: return kcuda_coll_all_to_all(m->group, dtype, count, bi, bo);
    default: return kcuda_coll_ppermute(m->group, dtype, count, bi, bo, npairs, pairs);
  }
}

kiln_status kctn_all_reduce_leaves(kctn_mesh *m, int nleaves, const kiln_dtype *dtypes,
                                   const int64_t *counts, kct_buffer *const *leaves,
                                   size_t bucket_bytes) {
  kdev_buffer **flat = calloc((size_t)nleaves * (size_t)m->n + 1, sizeof *flat);
  kdev_buffer ***rows = calloc((size_t)nleaves + 1, sizeof *rows);
  kiln_status st = KILN_OK;
  if (!flat || !rows) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kctn_all_reduce_leaves");
  for (int l = 0; !st && l < nleaves; l++) {
    rows[l] = flat + (size_t)l * (size_t)m->n;
    for (int i = 0; i < m->n; i++) rows[l][i] = &leaves[(size_t)l * (size_t)m->n + (size_t)i]->buf;
  }
  if (!st)
    st = kcuda_coll_all_reduce_leaves(m->group, nleaves, dtypes, counts,
                                      (kdev_buffer *const *const *)rows, KCUDA_COLL_SUM, bucket_bytes);
  free(flat), free(rows);
  return st;
}

kiln_status kctn_wait(kctn_mesh *m) { return kcuda_coll_wait(m->mesh); }

/* The stand-in's own strictness, through its entry points on devices 0 and 1
 * (codes in out[]): [0] a multi-rank collective outside a group, [1] the
 * async error after ranks disagree on the count (the call and the streams
 * complete: no hang), [2] a destroyed communicator, [3] a GPU listed twice. */
kiln_status kctn_stand_in_checks(const char *library, kiln_ctx *ctx, int out[4]) {
  kcuda_nccl *nc = NULL;
  kiln_device *devs[2] = {NULL, NULL};
  kcuda_device *d[2];
  kdev_buffer buf[2] = {{0}, {0}};
  CUstream s[2] = {NULL, NULL};
  ncclComm_t comms[2] = {NULL, NULL};
  kiln_status st = kcuda_nccl_open_library(library, &nc);
  for (int i = 0; i < 2 && !st; i++)
    if (!(st = kiln_device_get(ctx, i, &devs[i]))) d[i] = kcuda_impl(devs[i]);
  for (int i = 0; i < 2 && !st; i++)
    if (!(st = devs[i]->ops->alloc(devs[i], 64, &buf[i])) && !(st = kcuda_enter(d[i]))) {
      KCUDA_CU(d[i]->drv, d[i]->where, cuStreamCreate, (&s[i], CU_STREAM_NON_BLOCKING), left);
      KCUDA_CU(d[i]->drv, d[i]->where, cuStreamSynchronize, (d[i]->compute), left); /* the allocation */
    left:
      kcuda_leave(d[i]);
    }
  int ordinals[2] = {0, 1}, twice[2] = {1, 1};
  if (st) goto done;
  KCUDA_NCCL(nc, "stand-in", ncclCommInitAll, (comms, 2, ordinals), done);
  void *p0 = (void *)buf[0].ptr, *p1 = (void *)buf[1].ptr;
  out[0] = nc->ncclAllReduce(p0, p0, 4, ncclFloat32, ncclSum, comms[0], s[0]);
  KCUDA_NCCL(nc, "stand-in", ncclGroupStart, (), done);
  nc->ncclAllReduce(p0, p0, 4, ncclFloat32, ncclSum, comms[0], s[0]);
  nc->ncclAllReduce(p1, p1, 8, ncclFloat32, ncclSum, comms[1], s[1]);
  KCUDA_NCCL(nc, "stand-in", ncclGroupEnd, (), done);
  for (int i = 0; i < 2 && !st; i++)
    if (!(st = kcuda_enter(d[i]))) {
      KCUDA_CU(d[i]->drv, d[i]->where, cuStreamSynchronize, (s[i]), synced);
    synced:
      kcuda_leave(d[i]);
    }
  ncclResult_t async = ncclSuccess;
  if (st) goto done;
  KCUDA_NCCL(nc, "stand-in", ncclCommGetAsyncError, (comms[1], &async), done);
  out[1] = async;
  KCUDA_NCCL(nc, "stand-in", ncclCommDestroy, (comms[1]), done);
  out[2] = nc->ncclCommGetAsyncError(comms[1], &async);
  comms[1] = NULL;
  ncclComm_t dup[2] = {NULL, NULL};
  out[3] = nc->ncclCommInitAll(dup, 2, twice);
done:
  for (int i = 0; i < 2; i++) {
    if (comms[i]) nc->ncclCommDestroy(comms[i]);
    if (s[i] && !kcuda_enter(d[i])) d[i]->drv->cuStreamDestroy(s[i]), kcuda_leave(d[i]);
    if (buf[i].ptr) devs[i]->ops->release(devs[i], &buf[i]);
  }
  kcuda_nccl_close(nc);
  return st;
}
