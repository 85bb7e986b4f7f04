/* runtime: contexts, jit, executables and dispatch over the backends. The
 * only door of src/runtime; prefix krt_. */
#ifndef KILN_SRC_RUNTIME_H
#define KILN_SRC_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/core.h"
#include "device/device.h"
#include "kcache/kcache.h"
#include "ir/ir.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "trace/trace.h"

struct kiln_ctx {
  kcore_config config;
  kdev_backend be;             /* the opened backend: its devices and their ops */
  struct krt_kcache_slot *kcache; /* the kernel cache, opened on first use */
  /* Evaluators that run shard_map across the context's devices, installed
   * once by src/dist with their state (NULL: the reference executor's
   * lockstep ones); spmd_free releases the state before the backend closes. */
  _Atomic(const kir_eval_table *) spmd_evals;
  void *spmd_state;
  void (*spmd_free)(void *state);
  /* jit over sharded arguments, lent by src/dist with the context's first
   * mesh or sharding (NULL before: no array can be sharded then). */
  _Atomic(const struct krt_shard_hooks *) shard_hooks;
};

/* Logs through the context's level. */
#define KRT_LOG(ctx, level, ...) kcore_log((ctx)->config.opts.log_level, (level), __VA_ARGS__)

/* ==== jit and executables (jit.c, exec.c, stages.c) ==== */

/* The argument signature a program is traced for: structure, one aval per
 * leaf, static key bytes; `hash` covers all three. */
typedef struct krt_signature {
  kiln_treedef *def;
  int n;
  kir_aval *avals;
  void *static_key;
  size_t static_key_size;
  char *layout; /* the leaves' shardings (krt_shard_hooks.layout); NULL: none */
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
  void *shard_state; /* krt_shard_hooks.prepare's plan: runs through the hooks */
} krt_program;

struct kiln_lowered {
  krt_program p;
  char *text;
};

struct kiln_compiled {
  krt_program p;
  kiln_cost_analysis cost;
  kiln_memory_analysis memory;
  kir_eval_env env; /* reference evaluators with the program's host callbacks */
  kdev_exec *exec;  /* the backend's executable; NULL: the reference executor */
  const kdev_exec_ops *exec_ops;
};

/* Resolves a host callback id through the program's table (user is its
 * ktr_host_table): the kir_eval_env hook. */
kiln_status krt_host_call(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                          kir_buffer *out);

/* How a jitted call runs a compiled program (per shard, or on its device). */
typedef kiln_status (*krt_run_fn)(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out);
/* run(c, args, out) with KILN_DEBUG_NANS on (debug_nans.c): the results
 * are scanned for NaN and infinity; on a hit they are released, *out is
 * NULL and the call fails with KILN_ERR_NONFINITE naming the argument that
 * held it or the first equation that made it (the program re-run one
 * equation at a time on the reference evaluator). */
kiln_status krt_debug_nans_run(const kiln_compiled *c, const kiln_tree *args, krt_run_fn run,
                               kiln_tree **out);

/* Frees what a compiled executable holds (not the struct itself). */
void krt_compiled_release(kiln_compiled *c);

/* The reference evaluators with c's host callbacks. */
void krt_reference_env(const kiln_compiled *c, kir_eval_env *env);

/* ---- executables through the backend interface (build.c) ---- */
/* Asks the device's backend for an executable of c's program (c->exec stays
 * NULL when the backend has none or declines); dumps its plan and sources to
 * KILN_DUMP_DIR. A kernel that fails to compile is KILN_ERR_COMPILE. */
kiln_status krt_build_exec(kiln_compiled *c);
/* The plan and every kernel source of c's executable, else the IR text. */
kiln_status krt_exec_text(const kiln_compiled *c, char **text);
/* The context's kernel cache (opened on first use; memory-only when its
 * directory cannot be used). */
kiln_status krt_ctx_kcache(kiln_ctx *ctx, kcache **out);
void krt_ctx_kcache_free(kiln_ctx *ctx);

/* Traces f for the signature into out (its program as traced). */
kiln_status krt_trace(kiln_ctx *ctx, kiln_device *dev, const kiln_func *f, const krt_signature *sig,
                      krt_program *out);
void krt_program_free(krt_program *p);
/* Runs the passes and the analyses, then (with `fuse`) plans and compiles
 * fused kernels for the device: p's program moves into c. */
kiln_status krt_compile(krt_program *p, kiln_compiled *c, bool fuse);
/* The IR pass pipeline over p->prog (kir_run_passes) with the context's dump
 * directory; `fusing` inlines calls (what a fusing executor compiles). */
kiln_status krt_run_passes(krt_program *p, bool fusing);

/* ---- the registered backends (backends.c) ---- */
typedef struct krt_backend_entry {
  const char *name; /* as targets and messages spell it: "cuda", "cpu" */
  kiln_backend kind;
  kiln_status (*open)(const kcore_config *config, kdev_backend *b);
  /* Lowering text for an architecture of the backend's ("sm_90"), with no
   * device present: the plan and every kernel source. NULL: none. */
  kiln_status (*lower_text)(const kcore_config *config, kcache *cache, const kir_program *p,
                            const bool *donated, const char *arch, char **text);
  const char *example_arch; /* for messages: "sm_90", "host" */
} krt_backend_entry;
/* The entry named name[0..len) (NULL: none). */
const krt_backend_entry *krt_backend_find(const char *name, size_t len);
/* Opens the backend the options ask for (auto: the first that opens). */
kiln_status krt_open_backend(kiln_ctx *ctx);
/* kiln_lowered_text: runs the passes on p's program and lowers it for
 * "<backend>:<arch>". */
kiln_status krt_lower_text(krt_program *p, const char *target, char **text);
/* Runs c on args (n_in arrays matching its signature); outs gets n_out new
 * arrays. Donated inputs are deleted afterwards, their memory reused for
 * outputs of the same byte size. */
kiln_status krt_execute(const kiln_compiled *c, kiln_array *const *args, kiln_array **outs);
/* The signature of a tree of arrays (leaves must be arrays). */
kiln_status krt_signature_of(const char *op, const kiln_tree *args, const void *static_key,
                             size_t static_key_size, krt_signature *out);

/* ---- sharded arguments: what src/dist lends the jit (jit_shard*.c) ---- */
typedef struct krt_shard_hooks {
  /* The jit's own copy of opts' in/out shardings (*out NULL without any). */
  kiln_status (*opts_copy)(kiln_ctx *ctx, const kiln_jit_options *o, void **out);
  void (*opts_free)(void *opts);
  /* The shardings of a call's leaves as text for the cache key: NULL when
   * every leaf is an ordinary array on dev, opts is NULL and f (the jitted
   * function) is no shard_map or pmap whose results come back sharded. */
  kiln_status (*layout)(const void *opts, const kiln_func *f, const kiln_tree *args,
                        kiln_device *dev, char **out);
  /* After tracing p for a layout: decides how it runs (per shard, or on
   * dev after moving the arguments), checks the equations for it, and sets
   * p->shard_state; clears p->donated where a leaf is moved first. */
  kiln_status (*prepare)(const void *opts, const kiln_tree *args, krt_program *p);
  /* krt_compile for a prepared program (per shard: every device's). */
  kiln_status (*compile)(krt_program *p, kiln_compiled *c);
  kiln_status (*call)(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out);
  void (*state_free)(void *state);
} krt_shard_hooks;
/* ==== end of jit ==== */

#endif
