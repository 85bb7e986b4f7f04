/* runtime: contexts, devices, arrays and the interface every backend
 * implements. The only door of src/runtime; prefix krt_. */
#ifndef KILN_SRC_RUNTIME_H
#define KILN_SRC_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/core.h"
#include "ir/ir.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "trace/trace.h"

/* Device memory. `ptr` is a host pointer on CPU and a CUdeviceptr on CUDA.
 * `ready` is the backend's completion marker for the last write (a CUevent on
 * CUDA, NULL when the data is known to be ready). */
typedef struct krt_buffer {
  uintptr_t ptr;
  size_t nbytes;
  void *ready;
  /* What queued the last write ("jit(f)"), named when waiting for it fails:
   * asynchronous errors surface at the next wait. */
  char origin[48];
} krt_buffer;

/* How host data crosses to a device: through the device's pinned staging
 * buffers (the default), or straight from pageable memory. */
typedef enum krt_copy_mode { KRT_COPY_STAGED = 0, KRT_COPY_DIRECT = 1 } krt_copy_mode;

/* What a backend does for one of its devices. Every function returns a status
 * and sets the message (naming the device and the bytes) on failure. */
typedef struct krt_device_ops {
  /* Out of memory is KILN_ERR_OUT_OF_MEMORY; the device stays usable. */
  kiln_status (*alloc)(kiln_device *dev, size_t nbytes, krt_buffer *out);
  /* Frees once pending work on the buffer is done (stream-ordered). */
  void (*release)(kiln_device *dev, krt_buffer *buf);
  /* Host -> device; may return before the copy ends (then sets buf->ready);
   * src may be reused at once. */
  kiln_status (*upload)(kiln_device *dev, krt_buffer *dst, const void *src, size_t nbytes,
                        krt_copy_mode mode);
  /* Device -> host; waits for pending writes and for the copy itself. */
  kiln_status (*download)(kiln_device *dev, const krt_buffer *src, void *dst, size_t nbytes,
                          krt_copy_mode mode);
  /* Waits until the buffer's pending writes are done. */
  kiln_status (*wait)(kiln_device *dev, const krt_buffer *buf);
  /* Copy between two devices of this backend (dst allocated by the caller). */
  kiln_status (*copy)(kiln_device *dst_dev, krt_buffer *dst, kiln_device *src_dev,
                      const krt_buffer *src, size_t nbytes);
  kiln_status (*synchronize)(kiln_device *dev);
} krt_device_ops;

struct kiln_device {
  kiln_ctx *ctx;
  int index;
  const krt_device_ops *ops;
  void *impl; /* the backend's per-device state */
  kiln_device_info info;
  _Atomic uint64_t bytes_in_use;
};

struct kiln_ctx {
  kcore_config config;
  kiln_backend backend; /* KILN_BACKEND_CPU or KILN_BACKEND_CUDA */
  int num_devices;
  kiln_device *devices;
  void *backend_state;
  void (*backend_close)(kiln_ctx *ctx); /* frees devices' impl and backend_state */
  _Atomic int64_t live_arrays;
  struct krt_codegen *codegen; /* the C target's compiler, kernel cache and threads (lazy) */
};

/* Opening a backend fills ctx->devices, num_devices, backend_state and
 * backend_close. On failure nothing is left allocated. */
kiln_status kcpu_backend_open(kiln_ctx *ctx);
/* Reports why CUDA cannot be used (no driver library, no device, driver too
 * old) as KILN_ERR_DEVICE. */
kiln_status kcuda_backend_open(kiln_ctx *ctx);

/* Logs through the context's level. */
#define KRT_LOG(ctx, level, ...) kcore_log((ctx)->config.opts.log_level, (level), __VA_ARGS__)

/* An array: one buffer on one device, shared by reference count. */
struct kiln_array {
  _Atomic int refs;
  _Atomic bool deleted;
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t size;
  kiln_device *device;
  krt_buffer buf;
};

/* Allocates an array (buffer uninitialised) for backends and later modules. */
kiln_status krt_array_alloc(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                            const int64_t *shape, kiln_array **out);
/* KILN_ERR_DELETED / KILN_ERR_ARGUMENT checks shared by array entry points. */
kiln_status krt_array_check(const char *op, const kiln_array *a);

/* ==== kernel cache (kernel_cache.c) ====
 * Compiled kernels (host shared objects, cubins) by a 128-bit key: in memory,
 * then on disk, one checksummed file per key installed by rename. Safe for
 * concurrent threads (a key is built once per process: others wait for it)
 * and for processes sharing one directory (one of their files wins). */
/* The one check for libc I/O calls that return -1 and set errno (also used
 * by the host compiler driver): on failure `st` becomes KILN_ERR_IO
 * "<op>: <path>: <what> failed: <reason>" and control goes to `label`. */
#define KRT_KCACHE_IO_CHECK(expr, op, path, what, label)                                    \
  do {                                                                                      \
    if ((expr) < 0) {                                                                       \
      st = kcore_fail(KILN_ERR_IO, "%s: %s: %s failed: %s", (op), (path), (what),           \
                      strerror(errno));                                                     \
      goto label;                                                                           \
    }                                                                                       \
  } while (0)

/* Names in the cache directory that contain this are temporary files; those
 * older than an hour were left by a crash and are removed by krt_kcache_new. */
#define KRT_KCACHE_TEMP_MARK ".kiln.tmp-"

typedef struct krt_kcache_key {
  uint8_t bytes[16];
} krt_kcache_key;

/* Everything a compiled kernel depends on; krt_kcache_key_make adds kiln's
 * version and the cache's format version. */
typedef struct krt_kcache_key_parts {
  const void *source;
  size_t source_size;
  const char *target;   /* "sm_90", or a host triple with -march=native and its CPU */
  const char *compiler; /* the compiler's version string */
  const char *const *options;
  int num_options;
} krt_kcache_key_parts;

/* BLAKE2b-128 over the length-prefixed parts. */
void krt_kcache_key_make(const krt_kcache_key_parts *parts, krt_kcache_key *out);
/* BLAKE2b with a 16-byte digest (RFC 7693) of `size` bytes. */
void krt_kcache_digest(const void *data, size_t size, krt_kcache_key *out);
/* 32 lowercase hex digits and a NUL. */
void krt_kcache_key_hex(const krt_kcache_key *key, char out[33]);

typedef struct krt_kcache krt_kcache;

typedef struct krt_kcache_stats {
  uint64_t memory_hits;    /* served from memory, waits for another thread's build included */
  uint64_t disk_hits;      /* valid files loaded */
  uint64_t builds;         /* calls to a build function */
  uint64_t corrupt_files;  /* files that failed a check, were reported and removed */
  uint64_t write_failures; /* kernels that could not be stored (kept in memory) */
} krt_kcache_stats;

/* Produces the compiled bytes on a miss: *blob from malloc, owned by the
 * cache from then on. A failure sets the message, which threads waiting for
 * the same key receive as well. */
typedef kiln_status (*krt_kcache_build_fn)(void *user, void **blob, size_t *size);

/* `dir` is created (0700) if needed. NULL or "" means memory only, and so
 * does a directory that cannot be created or written, with a warning. */
kiln_status krt_kcache_new(const char *dir, kiln_log_level level, krt_kcache **out);
/* Frees every kernel; no thread may be inside get_or_build. */
void krt_kcache_free(krt_kcache *c);
/* The directory in use; NULL when memory-only. */
const char *krt_kcache_dir(const krt_kcache *c);
/* The kernel for `key`: from memory, else from disk, else built by `build`
 * and stored. *blob stays valid until krt_kcache_free. A corrupt or
 * unreadable file and a failed store are warnings, never failures. A build
 * may use the cache for other keys, never for its own (it would wait for
 * itself); after a failed build the next call for the key builds again. */
kiln_status krt_kcache_get_or_build(krt_kcache *c, const krt_kcache_key *key,
                                    krt_kcache_build_fn build, void *user, const void **blob,
                                    size_t *size);
/* The file that holds (or would hold) `key`; KILN_ERR_ARGUMENT when memory-only. */
kiln_status krt_kcache_entry_path(const krt_kcache *c, const krt_kcache_key *key, char *buf,
                                  size_t cap);
void krt_kcache_stats_get(krt_kcache *c, krt_kcache_stats *out);
/* Writes a whole file atomically: a temporary file in the same directory,
 * renamed over `path`; `durable` syncs the data before the rename.
 * KILN_ERR_IO names the path and the system's reason. */
kiln_status krt_kcache_write_file(const char *path, const void *data, size_t size, bool durable);
/* ==== end of kernel cache ==== */

/* ==== jit and executables (jit.c, exec.c, stages.c) ==== */
/* Moves donor's buffer to a new array of the given type (the same byte size)
 * on the same device; donor is left deleted. Donation hands an input's
 * memory to an output this way. */
kiln_status krt_array_take_buffer(kiln_array *donor, kiln_dtype dtype, int rank,
                                  const int64_t *shape, kiln_array **out);

/* The argument signature a program is traced for: structure, one aval per
 * leaf, static key bytes; `hash` covers all three. */
typedef struct krt_signature {
  kiln_treedef *def;
  int n;
  kir_aval *avals;
  void *static_key;
  size_t static_key_size;
  uint64_t hash;
} krt_signature;

void krt_signature_free(krt_signature *s);
kiln_status krt_signature_clone(const krt_signature *in, krt_signature *out);
/* As krt_signature_of, but leaves may also be KILN_LEAF_PTR to a kiln_aval. */
kiln_status krt_signature_of_avals(const char *op, const kiln_tree *args, krt_signature *out);
/* Runs c on a tree of arrays and builds the output tree. */
kiln_status krt_call_compiled(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out);

/* A traced program with what running it needs. `lowered` keeps the program
 * as traced; `compiled` after the passes, with its analyses. */
typedef struct krt_program {
  kiln_ctx *ctx;
  kiln_device *dev;
  const kiln_func *f;
  krt_signature sig;
  bool *donated; /* per input leaf */
  kir_program *prog;
  kiln_treedef *out_def;
  int n_out;
  ktr_host_table *hosts;
} krt_program;

struct kiln_lowered {
  krt_program p;
  char *text;
};

typedef struct krt_fused krt_fused;
typedef struct krt_cuda_exec krt_cuda_exec;

struct kiln_compiled {
  krt_program p;
  kiln_cost_analysis cost;
  kiln_memory_analysis memory;
  krt_fused *fused;    /* fused C kernels for a CPU device */
  krt_cuda_exec *cuda; /* fused CUDA kernels for a GPU */
  /* neither: the reference executor */
};

/* Resolves a host callback id through the program's table (user is its
 * ktr_host_table): the kir_eval_env hook. */
kiln_status krt_host_call(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                          kir_buffer *out);

/* Frees what a compiled executable holds (not the struct itself). */
void krt_compiled_release(kiln_compiled *c);

/* ---- what the fused executors share (group_eval.c) ---- */
struct kfuse_plan;
struct kfuse_group;
/* Host data of every constant and literal a plan's groups read or its
 * program returns (data[v] per var; owned[v] when malloc'ed here). */
typedef struct krt_consts {
  int n;
  void **data;
  bool *owned;
} krt_consts;
kiln_status krt_consts_init(krt_consts *k, const struct kfuse_plan *plan, const kir_program *p);
void krt_consts_free(krt_consts *k);
/* The reference evaluators with c's host callbacks. */
void krt_reference_env(const kiln_compiled *c, kir_eval_env *env);
/* The host address of value v (the group's inputs and materialised outputs). */
typedef void *(*krt_addr_fn)(void *user, kir_vid v);
/* Runs group g's equations one by one on env's evaluators (plain f32/f64
 * GEMMs through CBLAS); values internal to the group live in temporaries. */
kiln_status krt_eval_group(const kir_program *p, const struct kfuse_plan *plan,
                           const struct kfuse_group *g, const kir_eval_env *env, krt_addr_fn addr,
                           void *user);

/* ---- fused execution (fused.c) ---- */
/* Plans, emits and compiles c's program for its device when the C target
 * applies (a CPU device and a host compiler); leaves c->fused NULL
 * otherwise. A kernel that fails to compile is KILN_ERR_COMPILE. */
kiln_status krt_fuse(kiln_compiled *c);
void krt_fused_free(krt_fused *f);
/* Runs the fused executable on host buffers (in: the invars, out: the
 * outvars). */
kiln_status krt_fused_run(const kiln_compiled *c, const kir_buffer *in, kir_buffer *out);
/* The program output k may reuse donated input i (-1: none), as planned. */
int krt_fused_output_donor(const krt_fused *f, int k);
/* The plan and every kernel source, for as_text and dumps (malloc'ed). */
kiln_status krt_fused_text(const krt_fused *f, const kir_program *p, char **text);
void krt_codegen_free(struct krt_codegen *g);
/* The context's kernel cache (made on first use, with the C target). */
kiln_status krt_ctx_kcache(kiln_ctx *ctx, krt_kcache **out);

/* ---- fused execution on CUDA devices (fused_cuda.c) ---- */
/* Plans c's program for its GPU, compiles every kernel group through
 * `cache` and loads it; sets c->cuda. */
kiln_status krt_cuda_build(kiln_compiled *c, krt_kcache *cache);
void krt_cuda_free(krt_cuda_exec *x);
/* Enqueues a call (arguments already checked): outputs are allocated,
 * donated inputs consumed, and each output's ready event recorded. */
kiln_status krt_cuda_execute(const kiln_compiled *c, kiln_array *const *args, kiln_array **outs);
/* Plans p and emits every fused kernel as CUDA C for sm_<sm>, each compiled
 * by NVRTC to a cubin through ctx's kernel cache (no device needed): the
 * plan and the sources. */
kiln_status krt_cuda_text(kiln_ctx *ctx, const kir_program *p, const bool *donated, int sm,
                          char **text);
/* The plan, each kernel's launch shape and source. */
kiln_status krt_cuda_exec_text(const krt_cuda_exec *x, const kir_program *p, char **text);

/* Traces f for the signature into out (its program as traced). */
kiln_status krt_trace(kiln_ctx *ctx, kiln_device *dev, const kiln_func *f, const krt_signature *sig,
                      krt_program *out);
void krt_program_free(krt_program *p);
/* Runs the passes and the analyses, then (with `fuse`) plans and compiles
 * fused kernels for the device: p's program moves into c. */
kiln_status krt_compile(krt_program *p, kiln_compiled *c, bool fuse);
/* Runs c on args (n_in arrays matching its signature); outs gets n_out new
 * arrays. Donated inputs are deleted afterwards, their memory reused for
 * outputs of the same byte size. */
kiln_status krt_execute(const kiln_compiled *c, kiln_array *const *args, kiln_array **outs);
/* The signature of a tree of arrays (leaves must be arrays). */
kiln_status krt_signature_of(const char *op, const kiln_tree *args, const void *static_key,
                             size_t static_key_size, krt_signature *out);
/* ==== end of jit ==== */

#endif
