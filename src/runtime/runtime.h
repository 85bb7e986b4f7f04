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
  struct krt_codegen *codegen; /* the C target's compiler, kernel cache and threads (lazy) */
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
kiln_status krt_ctx_kcache(kiln_ctx *ctx, kcache **out);

/* ---- fused execution on CUDA devices (fused_cuda.c) ---- */
/* Plans c's program for its GPU, compiles every kernel group through
 * `cache` and loads it; sets c->cuda. */
kiln_status krt_cuda_build(kiln_compiled *c, kcache *cache);
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
