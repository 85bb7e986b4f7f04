/* jit: trace a kiln_func once per input signature, compile, cache, call.
 * Also eval_shape, make_jaxpr, partial_eval_by_shape and the stages API
 * (lower -> as_text -> compile -> as_text / cost / memory -> call). */
#ifndef KILN_JIT_H
#define KILN_JIT_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/device.h"
#include "kiln/trace.h"
#include "kiln/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_jit kiln_jit;
typedef struct kiln_lowered kiln_lowered;
typedef struct kiln_compiled kiln_compiled;
typedef struct kiln_sharding kiln_sharding; /* kiln/dist.h */

typedef struct kiln_jit_options {
  /* Static arguments, as bytes: part of the cache key (static_argnums). */
  const void *static_key;
  size_t static_key_size;
  /* Indices of the top-level arguments (children of the args tuple/list)
   * whose arrays are donated: deleted after the call, buffers reusable. */
  const int *donate_argnums;
  int num_donate;
  int device; /* index of the device the program runs on (default 0) */
  /* jax.jit's in_shardings / out_shardings (kiln/dist.h; copied): one per
   * top-level argument / result (a single one applies to all; an entry or
   * the list NULL takes the argument's own layout / the computed one). An
   * argument laid out otherwise is resharded first; results are put where
   * out_shardings say. A function over named-sharded arguments without a
   * shard_map runs per shard (one executable per mesh device) when every
   * equation is elementwise or keeps the sharded dimensions, else fails
   * naming the equation (use kiln_shard_map); with a shard_map, the
   * arguments come to `device` and each shard_map operand is moved to its
   * in_spec (a device_put equation in the IR). Shardings are part of the
   * cache key. Donation applies per shard: a donated sharded argument
   * gives each device's shard to that device's results (and is deleted);
   * one that must be moved or resharded first is not donated (a warning). */
  const kiln_sharding *const *in_shardings;
  int num_in_shardings;
  const kiln_sharding *const *out_shardings;
  int num_out_shardings;
} kiln_jit_options;

kiln_status kiln_jit_new(kiln_ctx *ctx, const kiln_func *f, const kiln_jit_options *opts,
                         kiln_jit **out);
void kiln_jit_free(kiln_jit *j);
/* Calls the compiled program on a tree of arrays; traces and compiles on a
 * cache miss (KILN_LOG=info says why). Thread safe. */
kiln_status kiln_jit_call(kiln_jit *j, const kiln_tree *args, kiln_tree **out);
/* kiln_jit_call on the tuple of n_in arrays; the result must flatten to
 * exactly n_out arrays, stored in out (each a new reference: release with
 * kiln_array_release). On failure out holds NULLs. */
kiln_status kiln_jit_call_arrays(kiln_jit *j, size_t n_in, kiln_array *const *in, size_t n_out,
                                 kiln_array **out);
/* How many programs this jit has traced and compiled so far. */
int64_t kiln_jit_compile_count(const kiln_jit *j);

/* jax.eval_shape: traces f over `args`, whose leaves are arrays or
 * KILN_LEAF_PTR leaves pointing at a kiln_aval (a ShapeDtypeStruct), and
 * runs nothing. The result's structure and one aval per leaf (malloc'ed;
 * free with free, the treedef with kiln_treedef_free). */
kiln_status kiln_eval_shape(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args,
                            kiln_treedef **out_def, kiln_aval **out_avals, size_t *n_out);
/* flax.jax_utils.partial_eval_by_shape: as eval_shape, but the outputs that
 * need no concrete input value are computed and come back as array leaves;
 * the others are KILN_LEAF_PTR leaves pointing into *avals (malloc'ed, free
 * it after the tree). */
kiln_status kiln_partial_eval_by_shape(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args,
                                       kiln_tree **out, kiln_aval **avals);
/* The traced program as jaxpr-style text (malloc'ed; free with free). */
kiln_status kiln_make_jaxpr(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args, char **text);

/* Stages. */
kiln_status kiln_jit_lower(kiln_jit *j, const kiln_tree *args, kiln_lowered **out);
kiln_status kiln_lowered_as_text(const kiln_lowered *l, char **text);
kiln_status kiln_lowered_compile(kiln_lowered *l, kiln_compiled **out);
/* Lowers for a target, "<backend>:<architecture>" ("cuda:sm_90", or
 * "cpu:host" — also "cpu:c" or "cpu:x86_64" — for the C kernels the CPU
 * devices compile), with or without its device present: runs the passes,
 * plans the fusion and returns the plan and every kernel source (malloc'ed),
 * as kiln_lowered_cuda_text below describes for CUDA. A target naming no
 * registered backend, or no architecture the backend targets, is
 * KILN_ERR_ARGUMENT. */
kiln_status kiln_lowered_text(kiln_lowered *l, const char *target, char **text);
/* Lowers for a CUDA architecture, with or without a GPU present: runs the
 * passes, plans the fusion and emits every fused kernel as CUDA C for
 * sm_<sm> (80, 90, ...), each compiled by NVRTC to a cubin (kept in the
 * kernel cache, KILN_CACHE_DIR). The plan and the kernel sources come back as
 * text (malloc'ed); a kernel NVRTC rejects is KILN_ERR_COMPILE with its log
 * and the path its source was written to (KILN_DUMP_DIR, else $TMPDIR or
 * /tmp). Call before kiln_lowered_compile. */
kiln_status kiln_lowered_cuda_text(kiln_lowered *l, int sm, char **text);
void kiln_lowered_free(kiln_lowered *l);
kiln_status kiln_compiled_as_text(const kiln_compiled *c, char **text);

typedef struct kiln_cost_analysis {
  double flops;
  double transcendentals;
  double bytes_accessed;
} kiln_cost_analysis;
typedef struct kiln_memory_analysis {
  uint64_t argument_bytes;
  uint64_t output_bytes;
  uint64_t temp_bytes;
} kiln_memory_analysis;
kiln_status kiln_compiled_cost_analysis(const kiln_compiled *c, kiln_cost_analysis *out);
kiln_status kiln_compiled_memory_analysis(const kiln_compiled *c, kiln_memory_analysis *out);
kiln_status kiln_compiled_call(kiln_compiled *c, const kiln_tree *args, kiln_tree **out);
void kiln_compiled_free(kiln_compiled *c);

#ifdef __cplusplus
}
#endif
#endif
