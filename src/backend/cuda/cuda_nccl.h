/* NCCL and the collectives over it (nccl.c, collective*.c): part of backend/cuda's door, cuda_backend.h, which includes it
 * where it stands; not to be included on its own. */
#ifndef KILN_SRC_BACKEND_CUDA_NCCL_H
#define KILN_SRC_BACKEND_CUDA_NCCL_H

/* ==== NCCL (nccl.c) and the collectives over it (collective.c) ====
 * libnccl.so.2 is dlopen'ed like the driver, so kiln runs where it is absent;
 * only a collective over CUDA devices then fails, naming the library. NCCL
 * keeps its ABI within major version 2; ncclCommSplit needs 2.18. */
#define KCUDA_NCCL_MIN_VERSION 21800
/* Every NCCL function kiln calls: X(name, return type, parameter types),
 * checked against nccl.h at compile time. */
#define KCUDA_NCCL_FUNCTIONS(X)                                                                \
  X(ncclGetVersion, ncclResult_t, (int *))                                                     \
  X(ncclGetErrorString, const char *, (ncclResult_t))                                          \
  X(ncclCommInitAll, ncclResult_t, (ncclComm_t *, int, const int *))                           \
  X(ncclCommSplit, ncclResult_t, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))         \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                                               \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                                 \
  X(ncclCommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t *))                         \
  X(ncclAllReduce, ncclResult_t,                                                               \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))     \
  X(ncclAllGather, ncclResult_t,                                                               \
    (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))                  \
  X(ncclReduceScatter, ncclResult_t,                                                           \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))     \
  X(ncclSend, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)) \
  X(ncclRecv, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))   \
  X(ncclGroupStart, ncclResult_t, (void))                                                      \
  X(ncclGroupEnd, ncclResult_t, (void))
#define KCUDA_NCCL_PFN(fn, ret, params) typedef ret(*kcuda_pfn_##fn) params;
KCUDA_NCCL_FUNCTIONS(KCUDA_NCCL_PFN)
#undef KCUDA_NCCL_PFN
typedef struct kcuda_nccl {
  void *library;  /* the dlopen handle */
  char name[256]; /* the library that opened */
  int version;    /* ncclGetVersion: 10000 * major + 100 * minor + patch */
#define KCUDA_NCCL_FIELD(fn, ret, params) kcuda_pfn_##fn fn;
  KCUDA_NCCL_FUNCTIONS(KCUDA_NCCL_FIELD)
#undef KCUDA_NCCL_FIELD
} kcuda_nccl;
/* The process's NCCL (KCUDA_NCCL_LIBRARY), opened on first use and kept; a
 * missing library, entry point or too old a version is KILN_ERR_COLLECTIVE
 * naming it, the same on every call. */
kiln_status kcuda_nccl_get(const kcuda_nccl **out);
/* Opens `library` (a name or a path) into a table of its own: for tests. */
kiln_status kcuda_nccl_open_library(const char *library, kcuda_nccl **out);
void kcuda_nccl_close(kcuda_nccl *nc); /* NULL is allowed */
/* "<where>: <call> failed: <NCCL's words>" as KILN_ERR_COLLECTIVE. */
kiln_status kcuda_nccl_table_fail(const kcuda_nccl *nc, ncclResult_t rc, const char *call,
                                  const char *where);
/* KCUDA_CU for the table: KCUDA_NCCL(nc, where, ncclGroupEnd, (), fail). */
#define KCUDA_NCCL(nc, where, fn, args, label)                       \
  do {                                                               \
    ncclResult_t kcuda_rc_ = (nc)->fn args;                          \
    if (kcuda_rc_ != ncclSuccess) {                                  \
      st = kcuda_nccl_table_fail((nc), kcuda_rc_, #fn #args, (where)); \
      goto label;                                                    \
    }                                                                \
  } while (0)

/* A set of CUDA devices of one context (a mesh's, in its order) sharing one
 * NCCL clique: ncclCommInitAll over all of them on first use, and one
 * ncclCommSplit per axis group, cached by name. Every collective takes one
 * buffer per device of the mesh (index i: devices[i]) and runs over every
 * group of the axis at once: all devices' calls in one ncclGroupStart/End,
 * each on its device's collective stream, after the compute stream's queued
 * work and before any later one (events both ways). Calls return once the
 * work is queued; kcuda_coll_wait waits for it, polling
 * ncclCommGetAsyncError, and past timeout_s aborts every communicator:
 * KILN_ERR_COLLECTIVE naming the collective, the axis, the shapes and the
 * devices whose part did not finish; later collectives fail alike, while the
 * devices stay usable for everything else. One thread at a time per mesh. */
typedef struct kcuda_coll_mesh kcuda_coll_mesh;
typedef struct kcuda_coll_group kcuda_coll_group;
typedef enum kcuda_coll_reduce { KCUDA_COLL_SUM, KCUDA_COLL_MAX, KCUDA_COLL_MIN } kcuda_coll_reduce;
#define KCUDA_COLL_DEFAULT_TIMEOUT_S 300.0
#define KCUDA_COLL_DEFAULT_BUCKET_BYTES ((size_t)32 << 20)
/* timeout_s: how long kcuda_coll_wait waits (the context's
 * collective_timeout_s; <= 0: KCUDA_COLL_DEFAULT_TIMEOUT_S). */
kiln_status kcuda_coll_mesh_new(const kcuda_nccl *nc, kiln_device *const *devices, int n,
                                double timeout_s, kcuda_coll_mesh **out);
/* Waits for queued collectives (bounded by the timeout), then destroys the
 * communicators (aborted ones are already gone). NULL is allowed. */
void kcuda_coll_mesh_free(kcuda_coll_mesh *m);
/* The groups `axis` cuts the mesh into: device i is rank rank[i] of group
 * color[i] (ranks 0..size-1 in each group; NULL color and rank: one group of
 * every device in mesh order). Made on first use, then the cached one (the
 * same name must come with the same partition). Owned by the mesh. */
kiln_status kcuda_coll_group_get(kcuda_coll_mesh *m, const char *axis, const int *color,
                                 const int *rank, kcuda_coll_group **out);
int kcuda_coll_group_size(const kcuda_coll_group *g); /* ranks per group */
/* The mesh's device count; fills out[] (may be NULL) with its devices. */
int kcuda_coll_mesh_devices(const kcuda_coll_group *g, kiln_device **out);
/* Every participant's in and out hold `count` elements of dtype (as the CPU
 * engine's functions); out may be in. all_reduce: out = op over the group;
 * all_gather: out holds size * count, rank r's in at r * count;
 * reduce_scatter: count divides by size, rank r gets the sum of block r;
 * all_to_all: block j of rank r goes to rank j as its block r; ppermute:
 * pairs[i] = {source, destination} ranks, the same in every group, and a
 * rank no pair sends to gets zeros. */
kiln_status kcuda_coll_all_reduce(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out,
                                  kcuda_coll_reduce op);
kiln_status kcuda_coll_all_gather(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out);
kiln_status kcuda_coll_reduce_scatter(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                      kdev_buffer *const *in, kdev_buffer *const *out);
kiln_status kcuda_coll_all_to_all(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out);
kiln_status kcuda_coll_ppermute(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                kdev_buffer *const *in, kdev_buffer *const *out, int npairs,
                                const int (*pairs)[2]);
/* all_reduce of many leaves in place: leaves[l][i] is leaf l on device i,
 * counts[l] its elements, dtypes[l] its dtype. Leaves of one dtype are
 * packed (device-to-device copies) into buckets of at most bucket_bytes
 * (0: 32 MiB; the context passes options.collective_bucket_bytes), one NCCL call per bucket
 * and device; a leaf larger than a bucket is reduced in place by itself. */
kiln_status kcuda_coll_all_reduce_leaves(kcuda_coll_group *g, int nleaves,
                                         const kiln_dtype *dtypes, const int64_t *counts,
                                         kdev_buffer *const *const *leaves, kcuda_coll_reduce op,
                                         size_t bucket_bytes);
/* Waits for every collective queued on the mesh (see above). */
kiln_status kcuda_coll_wait(kcuda_coll_mesh *m);
/* The engine as the backend interface offers it (collective_ops.c). */
extern const kdev_coll_ops kcuda_coll_ops;
#endif
