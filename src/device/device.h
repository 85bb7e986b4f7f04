/* device: what every level shares about devices and their memory — the
 * device type, its buffers, the arrays that hold them, and the table of
 * operations each backend implements for its devices. The only door of
 * src/device; prefix kdev_.
 *
 * It depends on core alone, so pytrees, the IR and the backends can hold and
 * release arrays without reaching up to the runtime: a backend fills a
 * kdev_backend (its devices and their ops), the runtime owns it inside the
 * context, and arrays reach device memory only through the ops. */
#ifndef KILN_SRC_DEVICE_H
#define KILN_SRC_DEVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device memory. `ptr` is a host pointer on CPU and a CUdeviceptr on CUDA.
 * `ready` is the backend's completion marker for the last write (a CUevent on
 * CUDA, NULL when the data is known to be ready). */
typedef struct kdev_buffer {
  uintptr_t ptr;
  size_t nbytes;
  void *ready;
  void *ready_on; /* the stream `ready` was last recorded on: waits there are moot */
  /* What queued the last write ("jit(f)"), named when waiting for it fails:
   * asynchronous errors surface at the next wait. */
  char origin[48];
  /* Memory kiln does not own (a zero-copy DLPack import) has foreign_free
   * set: releasing the buffer waits for the device's queued work, then calls
   * foreign_free(foreign) instead of freeing it. It is never donated. */
  void (*foreign_free)(void *foreign);
  void *foreign;
} kdev_buffer;

/* How host data crosses to a device: through the device's pinned staging
 * buffers (the default), or straight from pageable memory. */
typedef enum kdev_copy_mode { KDEV_COPY_STAGED = 0, KDEV_COPY_DIRECT = 1 } kdev_copy_mode;

/* What a backend does for one of its devices. Every function returns a status
 * and sets the message (naming the device and the bytes) on failure. */
typedef struct kdev_ops {
  /* Out of memory is KILN_ERR_OUT_OF_MEMORY; the device stays usable. */
  kiln_status (*alloc)(kiln_device *dev, size_t nbytes, kdev_buffer *out);
  /* Frees once pending work on the buffer is done (stream-ordered). */
  void (*release)(kiln_device *dev, kdev_buffer *buf);
  /* Host -> device; may return before the copy ends (then sets buf->ready);
   * src may be reused at once. */
  kiln_status (*upload)(kiln_device *dev, kdev_buffer *dst, const void *src, size_t nbytes,
                        kdev_copy_mode mode);
  /* Device -> host; waits for pending writes and for the copy itself. */
  kiln_status (*download)(kiln_device *dev, const kdev_buffer *src, void *dst, size_t nbytes,
                          kdev_copy_mode mode);
  /* Waits until the buffer's pending writes are done. */
  kiln_status (*wait)(kiln_device *dev, const kdev_buffer *buf);
  /* Copy between two devices of this backend (dst allocated by the caller). */
  kiln_status (*copy)(kiln_device *dst_dev, kdev_buffer *dst, kiln_device *src_dev,
                      const kdev_buffer *src, size_t nbytes);
  kiln_status (*synchronize)(kiln_device *dev);
  /* Optional, for memory another framework lent (buf->foreign_free set):
   * calls foreign_free(foreign) once the work queued so far on the device
   * is done, without waiting on the host. Without it the caller waits. */
  void (*release_foreign)(kiln_device *dev, kdev_buffer *buf);
  /* Foreign streams (backends with KDEV_CAP_STREAMS; NULL elsewhere): how
   * another framework's work on this device is ordered with kiln's, without
   * a host wait. `stream` is the stream such work is handed over on (the
   * device's compute stream); order_stream makes a foreign stream wait for
   * buf's pending writes; mark_written records that buf is written by work
   * queued on a foreign stream, so kiln's own streams wait for it. */
  int64_t (*stream)(kiln_device *dev);
  kiln_status (*order_stream)(kiln_device *dev, const kdev_buffer *buf, int64_t stream);
  kiln_status (*mark_written)(kiln_device *dev, kdev_buffer *buf, int64_t stream);
} kdev_ops;

/* What a backend's devices can do: the levels above ask these, never the
 * platform (only src/backend and core's configuration name one). */
enum {
  /* The host addresses device memory: executables run on host views
   * (run_host), shard_map runs one thread per device with collectives over
   * host memory, sharded copies go through memcpy. */
  KDEV_CAP_HOST_MEMORY = 1u << 0,
  /* Work is queued on streams: the foreign-stream ops are set. */
  KDEV_CAP_STREAMS = 1u << 1,
  /* Executables replay their launches as graphs from the second call. */
  KDEV_CAP_GRAPHS = 1u << 2,
};

typedef struct kdev_backend kdev_backend;

/* ---- the backend interface: executables ----
 * Besides its devices' ops, a backend may build executables of compiled
 * programs (fused kernels, library calls, host steps). The runtime knows
 * them only through this table. A backend runs an executable either on
 * device arrays (`run`: it allocates outputs and consumes donated inputs
 * itself, asynchronously) or on host views of them that the runtime prepares
 * (`run_host`, for backends whose memory the host addresses). The IR types
 * appear as incomplete structs: this level does not depend on the IR. */
struct kir_program;
struct kir_buffer;
struct kir_eval_env;
struct kcache;
typedef struct kdev_exec kdev_exec; /* defined by each backend */

typedef struct kdev_build {
  const char *name;               /* "jit(f)": messages, dumps, the fault trail */
  const struct kir_program *prog; /* after the passes; outlives the executable */
  const bool *donated;            /* per invar */
  /* The reference evaluators with the program's host callbacks, for the
   * steps a backend runs on the host (copied by the backend). */
  const struct kir_eval_env *env;
  struct kcache *cache;       /* the context's kernel cache */
  const kcore_config *config; /* dump dir, executor mode, matmul precision, log level */
} kdev_build;

/* A run that someone waits on: steps counts the steps done (its progress,
 * so a stalled run can be told from a slow one); once *cancel is set, the
 * run stops before its next step and writes no more (its caller gave up on
 * it). */
typedef struct kdev_watch {
  _Atomic uint64_t steps;
  const _Atomic bool *cancel;
} kdev_watch;

typedef struct kdev_exec_ops {
  /* Plans and compiles b->prog for dev. KILN_OK with *out NULL declines the
   * program (no compiler, say): the runtime runs the reference executor. */
  kiln_status (*build)(kiln_device *dev, const kdev_build *b, kdev_exec **out);
  /* Exactly one of run / run_host is set. run: args are checked arrays on
   * the device; outs receive new arrays; donated inputs are deleted. */
  kiln_status (*run)(kdev_exec *x, struct kiln_array *const *args, struct kiln_array **outs);
  /* run_host: in/out are host views of the invars and outvars, outputs
   * already allocated; watch (NULL: none) is told of each step done and
   * asked between steps whether to go on. */
  kiln_status (*run_host)(kdev_exec *x, const struct kir_buffer *in, struct kir_buffer *out,
                          kdev_watch *watch);
  /* run_host only: the donated invar whose memory output k takes (-1: none). */
  int (*output_donor)(const kdev_exec *x, int k);
  /* The plan, each step and every kernel source (malloc'ed). */
  kiln_status (*describe)(const kdev_exec *x, char **text);
  void (*free)(kdev_exec *x);
} kdev_exec_ops;

/* ---- the backend interface: collectives ----
 * Every backend with more than one device runs a mesh's collectives itself,
 * in one of two ways, as its devices run programs:
 * - lockstep (`run`, `all_reduce_many`, `wait`; CUDA over NCCL): one host
 *   thread drives every device of the mesh. One call covers them all: in[i]
 *   / out[i] are device i's buffers. Calls only enqueue, ordered after the
 *   inputs' writes; `wait` waits for everything queued on the mesh, bounded
 *   by the mesh's timeout (KILN_COLLECTIVE_TIMEOUT).
 * - threaded (`run_part`, `leave`, `timed_out`; CPU over its rendezvous):
 *   each device runs on a host thread of its own and calls its part of the
 *   collective; the call returns once the device's result is written.
 * A backend sets the functions of one way and NULL for the other's. dist
 * maps each collective equation to one kdev_coll for both ways. */
typedef enum kdev_coll_kind {
  KDEV_COLL_ALL_REDUCE,     /* out = reduce over the group (count elements) */
  KDEV_COLL_ALL_GATHER,     /* out = every rank's in, rank-major */
  KDEV_COLL_REDUCE_SCATTER, /* rank r gets the sum of every rank's block r */
  KDEV_COLL_ALL_TO_ALL,     /* block j of rank r goes to rank j as its block r */
  KDEV_COLL_PPERMUTE        /* pairs of (source, destination); others get zeros */
} kdev_coll_kind;

typedef struct kdev_coll {
  kdev_coll_kind kind;
  const char *name;  /* "psum", for messages */
  const char *axes;  /* "data,model": names the groups (cached by it) */
  const int *color, *rank; /* per device: its group and its rank in it */
  kiln_dtype dtype;
  int64_t count;     /* elements of each device's input */
  int reduce;        /* ALL_REDUCE: 0 sum, 1 max, 2 min */
  int npairs;
  const int (*pairs)[2];
  /* Layout moves around the call, [outer][size][block] <-> [size][outer]
   * [block] in elements (outer 1: none): the input to rank-major before it,
   * the result from rank-major after it. */
  int64_t in_outer, in_block, out_outer, out_block;
} kdev_coll;

typedef struct kdev_coll_ops {
  /* Fails naming the collective library when it cannot be used. */
  kiln_status (*probe)(kdev_backend *b);
  /* The first n devices; a collective gives up after timeout_s (the
   * context's collective_timeout_s). A threaded backend's mesh keeps
   * nothing of b (it may outlive the context: a device left behind). */
  kiln_status (*mesh_new)(kdev_backend *b, int n, double timeout_s, void **mesh);
  void (*mesh_free)(void *mesh);
  /* Lockstep: c for every device of the mesh. */
  kiln_status (*run)(void *mesh, const kdev_coll *c, kdev_buffer *const *in,
                     kdev_buffer *const *out);
  /* Lockstep: all-reduce of n_ops operands in place, packed into a few
   * buckets (c: the reduction, axes and groups; its dtype and count are
   * unused): bufs[k * n + i] is operand k on device i, dtypes[k] and
   * counts[k] its type and elements. */
  kiln_status (*all_reduce_many)(void *mesh, const kdev_coll *c, int n_ops,
                                 const kiln_dtype *dtypes, const int64_t *counts,
                                 kdev_buffer *const *bufs);
  /* Lockstep: a failure (timeout, asynchronous error) leaves the mesh
   * broken: free it. */
  kiln_status (*wait)(void *mesh);
  /* Threaded: device `device`'s part of c, on its own thread; in and out
   * are its buffers (out may alias in). Every member of its group must
   * make the same call; one that does not within the timeout, or that
   * leaves, fails the group's members with KILN_ERR_COLLECTIVE, and the
   * group stays broken: free the mesh. */
  kiln_status (*run_part)(void *mesh, const kdev_coll *c, int device, const kdev_buffer *in,
                          kdev_buffer *out);
  /* Threaded: device `device` will not take part any more (why: the
   * reason, named in the others' failures); its groups break. */
  void (*leave)(void *mesh, int device, const char *why);
  /* Threaded: whether device `device`'s last failed part failed because a
   * member did not arrive in time. */
  bool (*timed_out)(void *mesh, int device);
} kdev_coll_ops;

struct kiln_device {
  kiln_ctx *ctx;          /* opaque here: the runtime's */
  kdev_backend *backend;  /* the backend that opened it */
  int index;
  int ordinal; /* the platform's number for the device (a CUDA ordinal; 0 for host memory) */
  const kdev_ops *ops;
  void *impl; /* the backend's per-device state */
  kiln_device_info info;
  _Atomic uint64_t bytes_in_use;
};

/* One opened backend: what a backend's open function fills in (devices with
 * their ops and impl, state, close) and what the arrays of its devices count
 * on. The runtime keeps it inside the context. */
struct kdev_backend {
  kiln_backend kind; /* which registered backend: for names in messages, never for decisions */
  unsigned caps;     /* KDEV_CAP_* */
  const char *device_kind; /* "CPU", "GPU": what a device is called in pictures of meshes */
  /* Its memory in DLPack's words (DLDeviceType: 1 kDLCPU, 2 kDLCUDA): the
   * one interchange standard that names kinds of device memory. */
  int dlpack_device_type;
  int num_devices;
  kiln_device *devices;
  void *state;
  const kdev_exec_ops *exec;      /* NULL: the reference executor runs everything */
  const kdev_coll_ops *coll;      /* NULL: the backend runs no collectives */
  void (*close)(kdev_backend *b); /* frees the devices' impl, the devices and state */
  _Atomic int64_t live_arrays;
};

/* Points every device at its backend and context and numbers them. */
void kdev_backend_adopt(kdev_backend *b, kiln_ctx *ctx);

/* A sharded array's parts (kiln/dist.h makes them): one ordinary array per
 * device, each holding the block [start, stop) of the global array. Shards
 * that hold the same block are replicas. `owner` is the layout as the
 * module above describes it (dist: its kiln_sharding), freed with the array. */
typedef struct kdev_shards {
  int64_t count;
  struct kiln_array **arrays;
  int64_t (*start)[KILN_MAX_RANK];
  int64_t (*stop)[KILN_MAX_RANK];
  void *owner;
  void (*owner_free)(void *owner);
} kdev_shards;

/* An array: one buffer on one device, shared by reference count. A sharded
 * array has no buffer of its own (buf is empty, device is its first shard's)
 * and holds its shards instead. */
struct kiln_array {
  _Atomic int refs;
  _Atomic bool deleted;
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t size;
  kiln_device *device;
  kdev_buffer buf;
  kdev_shards *shards; /* NULL: an ordinary single-device array */
};

/* Allocates an array (buffer uninitialised). */
kiln_status kdev_array_alloc(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                             const int64_t *shape, kiln_array **out);
/* Fills a zeroed array's header: one reference, counted live on dev's backend. */
void kdev_array_init(kiln_array *a, kiln_device *dev, kiln_dtype dtype, int rank,
                     const int64_t *shape, int64_t elements);
/* An array over memory kiln does not own (a DLPack producer's), on dev: no
 * copy; foreign_free(foreign) is called once, when the array is released
 * (or at once if this fails). `ready` as kdev_buffer's (NULL: ready now). */
kiln_status kdev_array_wrap(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                            const int64_t *shape, uintptr_t ptr, void (*foreign_free)(void *),
                            void *foreign, kiln_array **out);
/* KILN_ERR_ARGUMENT if `a` (argument `index` of op) cannot be donated: it
 * views foreign memory, which kiln must not write or keep. */
kiln_status kdev_array_check_donation(const char *op, const kiln_array *a, int index);
/* Host data handed to a device: nbytes must be the type's size, data non-NULL
 * unless empty. */
kiln_status kdev_check_host_data(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                                 const void *data, size_t nbytes);
/* KILN_ERR_DELETED / KILN_ERR_ARGUMENT checks shared by array entry points.
 * A sharded array is KILN_ERR_WRONG_DEVICE here: every path that reads
 * `buf` works on one device; the ones that understand shards call
 * kdev_array_check_any. */
kiln_status kdev_array_check(const char *op, const kiln_array *a);
/* The same checks for an ordinary or a sharded array (every shard alive). */
kiln_status kdev_array_check_any(const char *op, const kiln_array *a);

/* ---- sharded arrays (shards.c) ---- */
/* A sharded array of the given global type over count shards, each taking a
 * new reference to shards[i] and its block start[i]..stop[i]. The blocks
 * must cover the global array (the caller, which knows the layout, checks).
 * owner (may be NULL) passes to the array only on success. */
kiln_status kdev_array_new_sharded(const char *op, kiln_dtype dtype, int rank,
                                   const int64_t *shape, int64_t count,
                                   kiln_array *const *shards,
                                   const int64_t (*start)[KILN_MAX_RANK],
                                   const int64_t (*stop)[KILN_MAX_RANK], void *owner,
                                   void (*owner_free)(void *owner), kiln_array **out);
/* Copies a sharded array's global value to dst (nbytes checked by the
 * caller): each distinct block once, straight into dst where it is
 * contiguous there. */
kiln_status kdev_shards_to_host(const kiln_array *a, void *dst);
/* Frees the shard list (releases the shards and the owner). */
void kdev_shards_free(kdev_shards *s);

/* A block of a row-major global array: [start[d], stop[d]) per dimension. */
typedef struct kdev_block {
  int64_t start[KILN_MAX_RANK], stop[KILN_MAX_RANK];
} kdev_block;
/* One contiguous run: nbytes at src_off in the source block's row-major
 * storage go to dst_off in the destination block's. */
typedef kiln_status (*kdev_run_fn)(void *user, size_t src_off, size_t dst_off, size_t nbytes);
/* Splits the intersection of src and dst (blocks of one global array) into
 * the fewest contiguous runs and calls fn for each (fn may be NULL: only
 * count them). *runs (may be NULL) receives their number; an empty
 * intersection has none. */
kiln_status kdev_block_runs(int rank, size_t elem_size, const kdev_block *src,
                            const kdev_block *dst, kdev_run_fn fn, void *user, int64_t *runs);
/* The whole global array as a block. */
void kdev_block_whole(int rank, const int64_t *shape, kdev_block *out);
/* Fills dst (an ordinary array holding the block dst_blk of a global array)
 * from src, ordinary or sharded, holding the whole global array: each
 * distinct block once, from a replica on dst's device where one exists.
 * Device to device in contiguous runs (asynchronous, ordered by the
 * buffers' completion markers); through host memory when a piece would
 * take too many runs on a device the host cannot address. */
kiln_status kdev_gather(const kiln_array *src, kiln_array *dst, const kdev_block *dst_blk);
/* Fills dst (holding dst_blk) from host data of the global array `shape`,
 * row-major: one upload, packed first when the block is not contiguous. */
kiln_status kdev_fill_from_host(kiln_array *dst, const kdev_block *dst_blk, const void *data,
                                const int64_t *shape);
/* Host-to-host: copies the intersection of the blocks between row-major
 * buffers holding them. */
void kdev_block_copy_host(int rank, size_t elem_size, const kdev_block *src, const void *src_data,
                          const kdev_block *dst, void *dst_data);
/* Moves donor's buffer to a new array of the given type (the same byte size)
 * on the same device; donor is left deleted. Donation hands an input's
 * memory to an output this way. */
kiln_status kdev_array_take_buffer(kiln_array *donor, kiln_dtype dtype, int rank,
                                   const int64_t *shape, kiln_array **out);

#ifdef __cplusplus
}
#endif

#endif
