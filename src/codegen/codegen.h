/* codegen: one scalar-expression emitter, two targets. The only door of
 * src/codegen; prefix kcg_.
 *
 * kcg_emit turns one fused group (src/fuse) of a kir_program into a complete
 * translation unit: CUDA C for NVRTC, or C for the host compiler. Both
 * targets share the expression emitter (one C expression per primitive,
 * f16/bf16 computed in f32) and the index maps of broadcasts, reshapes,
 * transposes, slices and converts; per-target skeletons supply the loops,
 * vector loads and reductions. The hand-written device code (prelude, dtype
 * helpers, math wrappers, reduction templates, threefry) lives in kernels/
 * and is embedded into the library at build time.
 *
 * Kernel ABI (both targets): the parameters are the group's inputs then its
 * outputs, as pointers in a kiln_kernel_args struct passed by value, plus
 * the range of work items [begin, end) this call covers: output elements for
 * LOOP groups, rows for REDUCE and ROW groups. The C target's runtime splits
 * the range across threads; the CUDA target launches a grid over it.
 *
 * The exact signatures (NAME is kcg_kernel.name):
 *
 *   C:    void NAME(kiln_kernel_args args, int64_t begin, int64_t end);
 *   CUDA: extern "C" __global__ void __launch_bounds__(block_threads[, min])
 *         NAME(kiln_kernel_args args, long long begin, long long end);
 *
 * (ROW and tiled REDUCE kernels name the resident blocks per SM they are
 * built for, which sets the registers a thread may use.)
 *
 * with 0 <= begin <= end <= n_items. Launch the CUDA kernel with
 * block_threads threads (x only), no dynamic shared memory, and a 1-D grid
 * (see items_per_block and split); compile its source with NVRTC and
 * -arch=sm_<sm> (no other option is needed; the source includes no header).
 * The C source is C11 for the host compiler (kcpu_cc), self-contained too.
 *
 * A kernel with scratch_bytes > 0 also takes args.ptr[n_args]: that many
 * bytes, 16-byte aligned, zero before its first call. They hold counters
 * and partial results; every complete call leaves the counters zero again,
 * so one buffer serves all calls that run one after another (not
 * concurrent ones).
 *
 * What the group must look like (else KILN_ERR_UNIMPLEMENTED, or
 * KILN_ERR_ARGUMENT for a malformed group):
 * - equations: elementwise primitives (all), broadcast_in_dim, reshape,
 *   transpose, squeeze, expand_dims, rev, slice, iota, and reduce_sum /
 *   max / min / prod / and / or;
 * - `in`: every non-literal var the equations read that they do not
 *   define: invars, constvars (the runtime passes their data like any
 *   input) and other groups' results. Literals are inlined into the source;
 *   a literal listed in `in` keeps its argument slot, which is never read
 *   (the runtime may pass NULL);
 * - LOOP: no reduction; every output has n_items = its element count (one
 *   item = one element of each output, C order); except that a C-target
 *   kernel may report row_length > 0: then one item is one row of that
 *   length of every output (all of one shape) and n_items the row count;
 * - REDUCE: at least one reduction; every output has n_items elements (one
 *   item = one element of each output: a reduction result or an epilogue
 *   value over them; a split C kernel's n_items is that times split);
 * - ROW: reductions over the last axis of operands of one shape
 *   [rows..., row_length]; every output is row-shaped (that shape) or has
 *   one element per row ([rows...], [rows..., 1], ...).
 * Outputs must not overlap inputs (the pointers are restrict-qualified).
 *
 * Semantics are the reference executor's (src/ir): XLA's integer edge
 * cases, saturating float -> int, NaN-propagating max/min, f16/bf16 rounded
 * after every primitive and every step of their sums and products. C
 * kernels run with denormals flushed (x86 FTZ/DAZ, AArch64 FZ) as XLA:CPU
 * does, restoring the caller's mode on return; CUDA kernels keep IEEE
 * denormals, as XLA:GPU does. Float sums and products are reassociated
 * (lanes, warps, tiles, the shares of a split), so they match the reference
 * within tolerance; the order is fixed per kernel, so one kernel gives the
 * same bits on every run (no float atomics).
 *
 * kcg_kernel.name is kiln_<kind>_<first primitives>_<16 hex digits of a
 * digest of the text>: one group and target always give the same name and
 * source, so the kernel cache recognizes them. */
#ifndef KILN_SRC_CODEGEN_H
#define KILN_SRC_CODEGEN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/core.h"
#include "fuse/fuse.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room in kiln_kernel_args; a group with more operands is not fused. */
#define KCG_MAX_ARGS 64
/* Operands of one fused equation (select_n's cases); beyond, not fused. */
#define KCG_MAX_OPERANDS 32
/* Reductions computed in one loop; more start another loop. */
#define KCG_MAX_SET 16

/* The first argument of every kernel, passed by value (512 bytes, within
 * CUDA's 4 KiB of kernel parameters): ptr[0 .. g->n_in) are the group's
 * inputs in g->in order, ptr[g->n_in .. n_args) its outputs in g->out order,
 * each the address of the value's first element, C order, storage form (bool
 * one byte 0/1, f16/bf16 their 16 bits). The remaining entries are unused. */
typedef struct kiln_kernel_args {
  void *ptr[KCG_MAX_ARGS];
} kiln_kernel_args;

/* A C-target kernel as the host compiler built it (kcg_kernel.name). */
typedef void (*kcg_c_kernel_fn)(kiln_kernel_args args, int64_t begin, int64_t end);

typedef enum kcg_target { KCG_TARGET_C, KCG_TARGET_CUDA } kcg_target;

typedef struct kcg_target_info {
  kcg_target target;
  int sm; /* CUDA: compute capability as 80, 90, ...; ignored for C */
} kcg_target_info;

typedef struct kcg_kernel {
  char *name;       /* the extern "C" symbol */
  char *source;     /* the complete file, prelude included */
  kfuse_kind kind;
  int n_args;       /* group inputs then outputs */
  int64_t n_items;  /* work items: elements (LOOP) or rows (REDUCE, ROW) */
  int64_t row_length;
  int block_threads; /* CUDA: threads per block the kernel was written for */
  /* CUDA: the work items one block covers per step of its grid-stride loop;
   * launch ceil(n_items / items_per_block) blocks, or fewer (the kernel
   * strides over the rest), at least one. 1 for the C target. */
  int64_t items_per_block;
  /* Split reductions (REDUCE groups with few items and long reductions):
   * CUDA: `split` blocks share each block's items, so launch a multiple of
   * split blocks: split * min(ceil(n_items / items_per_block), any cap);
   * C: every item is `split` work items (n_items counts those), each a fixed
   * share of the reduced elements. The share that finishes last combines the
   * partials in a fixed order, so results do not depend on timing or on how
   * the range is cut. 1: not split. */
  int split;
  int64_t scratch_bytes; /* see above; 0: none */
} kcg_kernel;

/* Emits the kernel of group g of p. Groups the emitter cannot fuse are
 * KILN_ERR_UNIMPLEMENTED with the reason (the caller runs them on the
 * reference executor). */
kiln_status kcg_emit(const kir_program *p, const kfuse_group *g, const kcg_target_info *t,
                     kcg_kernel *out);
void kcg_kernel_free(kcg_kernel *k);
/* The kernel of one window equation e of p (reduce_window_*,
 * select_and_gather_add, select_and_scatter_add; float dtypes): a LOOP
 * kernel of the same ABI, one item per result element, its operands then
 * its result in args (window.c). Both backends run it for an OPAQUE group
 * that holds the equation alone (kcg_lone_eqn). */
kiln_status kcg_emit_window(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out);
/* The kernel of lone equation e (kcg_lone_eqn) where one kernel computes
 * it: window ops, pad, argmax/argmin, and on CUDA gather;
 * KILN_ERR_UNIMPLEMENTED for the others. Its args are e's operands (a
 * literal's slot empty) then its result. */
kiln_status kcg_emit_lone(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                          kcg_kernel *out);
/* How a primitive's equations become kernels on a target, as the
 * executors find out (the answer of kcg_emit, kcg_emit_lone and the parts
 * emitters below, asked of the primitive alone; an emitter may still
 * decline a particular equation, e.g. a dtype it has no kernel for):
 *   FUSED  expressions of fused LOOP / REDUCE / ROW kernels (kcg_emit)
 *   LONE   a kernel of its own for a lone equation (kcg_emit_lone)
 *   PARTS  several kernels of one source (CUDA: convolution, scatters)
 *   NONE   no kernel: a matmul library call (a DOT group) or a host step */
typedef enum kcg_emits {
  KCG_EMITS_NONE,
  KCG_EMITS_FUSED,
  KCG_EMITS_LONE,
  KCG_EMITS_PARTS
} kcg_emits;
kcg_emits kcg_emits_prim(kir_prim prim, kcg_target target);
/* The primitives kcg_emit takes into a fused group (with kcg_is_reduction's). */
bool kcg_prim_fusable(kir_prim p);
/* The equation an OPAQUE group g holds alone, when g reads exactly its
 * operands in order (scalar literals last, as the group lists them: they
 * are not arguments) and writes its one result: the argument order of the
 * kernels of one equation; NULL for any other group. */
const kir_eqn *kcg_lone_eqn(const kir_program *p, const kfuse_group *g);

/* One lone equation as several kernels of one source (k), run in order on
 * one stream: NAME_<part[i]> over items[i] elements (NAME = k.name; a part
 * with no items is not launched and may be absent), with a matmul before
 * part gemm_at (-1: none). Their args are the equation's operands, then its
 * result, then n_scratch scratch buffers of scratch[i] bytes, which live
 * only during the equation (0 bytes: the argument is NULL). */
#define KCG_MAX_PARTS 3
typedef struct kcg_parts {
  kcg_kernel k;
  int n;
  const char *part[KCG_MAX_PARTS];
  int64_t items[KCG_MAX_PARTS];
  int gemm_at;
  int n_scratch;
  int64_t scratch[KCG_MAX_PARTS];
} kcg_parts;

/* conv_general_dilated e on the CUDA target (conv.c) as im2col + GEMM:
 * parts im2col (lhs -> cols), pack_w (rhs -> w), then the GEMM res[grp] =
 * cols[grp] . w[grp], a strided batch of `groups` row-major [rows, kd] .
 * [kd, opg] products in out_dtype (accumulated in f32, f64 for f64), then
 * scatter (res -> the result), which has no items where the GEMM writes
 * the result itself (one group, output feature innermost: direct). Scratch:
 * cols, w, res (kernels/conv.h's layouts). Float operands only, else
 * KILN_ERR_UNIMPLEMENTED (as an empty contraction with a non-empty result). */
typedef struct kcg_conv {
  kcg_parts p;
  int64_t groups, rows, kd, opg;
  bool direct;
  kiln_dtype in_dtype, out_dtype;
} kcg_conv;
kiln_status kcg_emit_conv(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                          kcg_conv *out);

/* The gather and scatter family on the CUDA target (scatter.c, over
 * kernels/scatter.h). gather: one kernel, a result element per item.
 * scatter, scatter-add/mul/min/max: parts copy (operand -> result) and
 * apply: atomics, an update per item, or, `ordered`, a result element per
 * item combining every update that lands on it in index order (bitwise
 * reproducible; work is results x updates). f32, i32, f16 and bf16 for
 * the combining scatters, any dtype for gather and plain scatter; else
 * KILN_ERR_UNIMPLEMENTED. */
kiln_status kcg_emit_gather(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out);
kiln_status kcg_emit_scatter(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                             bool ordered, kcg_parts *out);
/* The geometry those kernels bake in (kernels/scatter.h's struct), for the
 * host tests that walk it against the reference evaluator. */
struct kiln_scatter_geom;
void kcg_scatter_geom(const kir_program *p, const kir_eqn *e, struct kiln_scatter_geom *g);
/* pad (pad.c) and argmax/argmin (argmax.c), any dtype, either target: one
 * kernel, a result element per item. */
kiln_status kcg_emit_pad(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                         kcg_kernel *out);
kiln_status kcg_emit_argmax(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out);

/* Put before the prelude in every host kernel file: the prelude then
 * declares the C library functions kernels call instead of including
 * <math.h> and friends (kernels/prelude.h). */
#define KCG_HOST_KERNEL_MARK "#define KILN_HOST_KERNEL 1\n#undef KILN_PRELUDE_TRIM\n"

/* The text of a file of kernels/ embedded at build time ("prelude.h",
 * "reduce.h", "threefry.h", ...); NULL if there is none of that name. */
const char *kcg_embedded_source(const char *name);

/* ======================================================================
 * Internal to src/codegen (shared between its files)
 * ====================================================================== */

/* The kernels/ files as cmake/KilnEmbed.cmake generates them. */
typedef struct kcg_embedded_file {
  const char *name; /* "prelude.h" */
  const char *text;
} kcg_embedded_file;
extern const kcg_embedded_file kcg_embedded_files[];
extern const int kcg_num_embedded_files;

/* A growable string (text.c); an allocation failure is remembered in `oom`
 * and reported once, when the text is taken. */
typedef struct kcg_buf {
  char *s;
  size_t len, cap;
  bool oom;
} kcg_buf;
void kcg_buf_add(kcg_buf *b, const char *text);
void kcg_buf_addf(kcg_buf *b, const char *fmt, ...) KCORE_PRINTF(2, 3);
void kcg_buf_vaddf(kcg_buf *b, const char *fmt, va_list ap);
void kcg_buf_free(kcg_buf *b);

/* Kernels of one equation alone (lone.c). Threads per CUDA block. */
#define KCG_LONE_THREADS 256
/* Whether var v is a scalar literal, its bits (storage form) into *bits. */
bool kcg_lone_literal(const kir_program *p, kir_vid v, uint64_t *bits);
/* KILN_ERR_UNIMPLEMENTED where an operand of e is a literal (kernels that
 * take every operand as an argument). */
kiln_status kcg_lone_no_literals(const kir_program *p, const kir_eqn *e);
/* `const long long NAME[n] = {...};` (one 0 when n is 0). */
void kcg_lone_array(kcg_buf *b, const char *name, int n, const int64_t *v);
/* Opens the loop over work items i in [begin, end) (the caller closes it). */
void kcg_lone_items(kcg_buf *b, bool cuda);
/* The unsigned C type of `bytes`-wide elements (1, 2, 4 or 8): copies move bits. */
const char *kcg_lone_word(size_t bytes);
/* PREFIX_<hash of the target and body> into name. */
void kcg_lone_name(const kcg_target_info *t, const char *prefix, const kcg_buf *body, char *name,
                   size_t cap);
/* The kernel file: a banner naming `what`, the prelude (and host.h on the
 * host), kiln_kernel_args, the embedded `header` (or none), then body,
 * after the entry point's signature when `entry` (else the body defines
 * its entry points). Frees body; fills out as an OPAQUE kernel over
 * n_items (n_args is the caller's). */
kiln_status kcg_lone_finish(const kcg_target_info *t, const char *name, const char *what,
                            const char *header, kcg_buf *body, bool entry, int64_t n_items,
                            kcg_kernel *out);

/* A C expression and the scope that defines every name it uses. */
typedef struct kcg_term {
  const char *expr;
  int scope;
} kcg_term;

/* Scopes nest like the emitted blocks: the kernel body (scope 0), loops,
 * guarded regions. Code is written into the scope where its inputs are
 * defined, not where it is asked for, so loop-invariant work lands outside
 * the loops; a scope's text joins its parent's when it closes. */
typedef struct kcg_scope {
  int parent; /* -1 for the kernel body */
  int depth, indent;
  kcg_buf text;
  char *header, *footer; /* lines around the text, written into the parent */
  int saved_cur;         /* the current scope when it was opened */
  int row_loop;          /* the row loop (kcg_ctx.row_loops) it is inside, or -1 */
  bool divergent;        /* lanes of a warp may disagree on reaching it */
} kcg_scope;

/* A position in an array of some shape: its linear index (C order), its
 * coordinates, or both; what is missing is derived on demand, in the scope
 * of what is known. Indices are interned: one object per position. */
typedef struct kcg_index {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_term lin;                   /* expr NULL until known */
  kcg_term coord[KIR_MAX_RANK];   /* valid when has_coords */
  bool has_coords;
} kcg_index;

/* A value computed at an index, usable where its scope is visible. */
typedef struct kcg_memo {
  kir_vid v;
  int index;
  bool raw; /* value holds the stored bits of an f16/bf16 input, not its f32 value */
  kcg_term value;
} kcg_memo;

/* ROW kernels loop over each row several times (once per pass of
 * reductions, once for the outputs); values needed by several passes are
 * kept in per-row arrays indexed by the loop's slot. */
typedef struct kcg_row_loop {
  int index;        /* the canonical index of the row's elements in this loop */
  const char *slot; /* the cache subscript, NULL when nothing is cached */
  int slot_scope;   /* where slot is defined */
  int row_scope;    /* the scope of one row, where cache arrays live */
  int64_t slots;    /* cache array length */
} kcg_row_loop;

typedef struct kcg_row_cache {
  const char *array; /* NULL: not cached (yet) */
  int pass;          /* the pass that fills it */
  bool ready;        /* filled by a pass that has closed */
} kcg_row_cache;

typedef struct kcg_ctx kcg_ctx;

/* The skeleton's reduction emitter: computes the reductions eqns[0..n) (one
 * set: same operand shape and axes) at index ix of their result shape, in
 * the scope of ix, and returns their results. */
typedef void (*kcg_reduce_fn)(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out);

struct kcg_ctx {
  const kir_program *p;
  const kfuse_group *g;
  kcg_target_info t;
  kiln_status st; /* the first failure; later calls do nothing */
  void **allocs;  /* strings freed with the context */
  int n_allocs, cap_allocs;
  int next_name;
  kcg_scope *scopes;
  int n_scopes, cap_scopes, cur;
  kcg_index *idx;
  int n_idx, cap_idx;
  kcg_memo *memo;
  int n_memo, cap_memo;
  /* per var of the program */
  int *arg;           /* argument slot of a group input, else -1 */
  int *def;           /* equation index of a var defined in the group, else -1 */
  int *reduce_set;    /* per equation: its reduction set, or -1 */
  bool *cacheable;    /* ROW: kept on chip between passes */
  bool *bf16_rounded; /* C target: a bf16 value kiln_rnd_bf16 made, stored without a second rounding */
  kcg_row_cache *cache;
  bool *arg_used;     /* per slot: read or written by the kernel */
  bool *arg_at_item;  /* per slot: read at the work item's own index */
  /* reduction sets: eqn indices, grouped */
  int n_sets;
  int *set_start, *set_eqns; /* set s is set_eqns[set_start[s] .. set_start[s+1]) */
  int *set_depth;
  kcg_row_loop *row_loops;
  int n_row_loops, cap_row_loops;
  int pass; /* the open ROW pass, -1 outside */
  const char *item_lin; /* LOOP: the item's linear index while it is emitted */
  const char *idx_type; /* the C type of indices and offsets */
  kcg_reduce_fn reduce;
  void *skel;           /* the skeleton's own state */
  kcg_buf helpers;      /* instantiations of kernels/reduce.h, one per line */
  bool uses_reduce_h;
};

/* ---- context, names, scopes and text (context.c) ---- */
kiln_status kcg_ctx_init(kcg_ctx *c, const kir_program *p, const kfuse_group *g,
                         const kcg_target_info *t);
void kcg_ctx_free(kcg_ctx *c);
/* Records the first failure (kcore_fail's message) and returns it. */
kiln_status kcg_fail(kcg_ctx *c, kiln_status s, const char *fmt, ...) KCORE_PRINTF(3, 4);
/* printf into a string owned by the context. */
const char *kcg_strf(kcg_ctx *c, const char *fmt, ...) KCORE_PRINTF(2, 3);
/* A fresh local name: prefix and a number. */
const char *kcg_fresh(kcg_ctx *c, const char *prefix);
/* Opens a scope under `parent` and makes it current; header/footer are its
 * opening and closing lines ('\n' separates lines). */
int kcg_scope_open(kcg_ctx *c, int parent, const char *header, const char *footer);
/* Closes s into its parent and makes current what was current before. */
void kcg_scope_close(kcg_ctx *c, int s);
void kcg_line(kcg_ctx *c, int scope, const char *fmt, ...) KCORE_PRINTF(3, 4);
/* s is the current scope or one of its ancestors. */
bool kcg_scope_visible(const kcg_ctx *c, int s);
/* The deeper of two visible scopes. */
int kcg_scope_deeper(const kcg_ctx *c, int a, int b);
kcg_term kcg_term_make(const char *expr, int scope);
/* Adds a line to the helpers once. */
void kcg_helper(kcg_ctx *c, const char *line);
/* Grows a table of the context (idx, memo, row_loops) to `need` entries. */
bool kcg_grow_table(kcg_ctx *c, void **v, int *cap, int need, size_t size);

/* ---- index maps (index.c) ---- */
/* Interns the position given by lin and/or coords (either may be NULL). */
int kcg_index_get(kcg_ctx *c, int rank, const int64_t *shape, const kcg_term *lin,
                  const kcg_term *coords);
int kcg_index_scope(kcg_ctx *c, int ix);
/* The linear index / the coordinates, derived (and kept) if missing. */
kcg_term kcg_index_lin(kcg_ctx *c, int ix);
const kcg_term *kcg_index_coords(kcg_ctx *c, int ix);
/* Where operand `k` of equation e is read when e's result is wanted at ix:
 * lax's implicit broadcasting for elementwise primitives, the index maps of
 * the shape primitives. */
int kcg_index_operand(kcg_ctx *c, const kir_eqn *e, int k, int ix);

/* ---- dtypes and literals (dtype_spelling.c) ---- */
const char *kcg_ctype(kiln_dtype d);  /* computed as: float for f16/bf16 */
const char *kcg_stype(kiln_dtype d);  /* stored as: kiln_half for f16/bf16 */
const char *kcg_sfx(kiln_dtype d);    /* the prelude helpers' suffix: "f32" for f16/bf16 */
bool kcg_is_half(kiln_dtype d);       /* f16 or bf16 */
const char *kcg_mathf(kiln_dtype d);  /* <math.h>'s suffix: "f" but for f64 */
/* An f32 expression rounded to d when d is a 16-bit float. */
const char *kcg_round_to(kcg_ctx *c, kiln_dtype d, const char *e);
double kcg_round_value(kiln_dtype d, double v); /* v rounded to a float dtype, now */
/* The literal of `x` in dtype d's compute type. */
const char *kcg_literal(kcg_ctx *c, kiln_dtype d, kir_scalar x);

/* ---- elementwise equations (expr_elementwise.c) ---- */
kcg_term kcg_eqn_elementwise(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix);
kcg_term kcg_eqn_iota(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix);
kcg_term kcg_eqn_bitcast(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix);

/* ---- expressions (expr.c) ---- */
/* `const T name = expr;` in `scope`, as a term. */
kcg_term kcg_local(kcg_ctx *c, kiln_dtype d, int scope, const char *expr);
/* The stored bits of an f16/bf16 v at ix when v is an input read through
 * index maps only; false otherwise. */
bool kcg_raw(kcg_ctx *c, kir_vid v, int ix, kcg_term *out);
/* The value of v at index ix (of v's shape), computed where it can be. */
kcg_term kcg_value(kcg_ctx *c, kir_vid v, int ix);
/* Stores v at ix into argument slot `slot`, in the current scope. */
void kcg_store(kcg_ctx *c, int slot, kir_vid v, int ix);
/* The same, into the lvalue `dest` (NULL: the output array at ix). */
void kcg_store_to(kcg_ctx *c, int slot, kir_vid v, int ix, const char *dest);
/* Memoizes value at (v, ix); `raw`: the stored bits (see kcg_memo). */
void kcg_memo_put(kcg_ctx *c, kir_vid v, int ix, bool raw, kcg_term value);
/* Conversions between a dtype's storage and compute forms. */
const char *kcg_load_expr(kcg_ctx *c, kiln_dtype d, const char *stored);
const char *kcg_store_expr(kcg_ctx *c, kiln_dtype d, const char *value);
/* The argument's pointer name: in<k> / out<k>. */
const char *kcg_arg_name(kcg_ctx *c, int slot);
/* Marks the row values filled by the pass c->pass as kept. */
void kcg_row_pass_end(kcg_ctx *c);
/* Opens a loop over the elements of one row under row_scope: `j` is the
 * element's position (a name the header defines), `slot` the cache
 * subscript (NULL: no caching). Registers the loop's canonical index of the
 * row shape (row_ix's coordinates then j; linear rowbase + j). */
int kcg_row_loop_open(kcg_ctx *c, int row_scope, int row_ix, kcg_term rowbase,
                      const char *header, const char *j, const char *slot, int64_t slots);
/* The loop's canonical index. */
int kcg_row_loop_index(const kcg_ctx *c, int loop_scope);

/* One reduction's combination in the compute type of its dtype. */
typedef struct kcg_reducer {
  const char *name;     /* instantiation name: "sum_f32" */
  const char *combine;  /* a prelude function of (acc, x): "kiln_add_f32" */
  const char *identity; /* literal */
  const char *ctype;    /* accumulator type (f16/bf16 sums round every step) */
  bool block;           /* an f32/f64 sum: its chains are blocked (KCG_BLOCK) */
} kcg_reducer;
kcg_reducer kcg_reducer_of(kcg_ctx *c, kir_prim prim, kiln_dtype d); /* reduce.c */
/* The operand index of reduction e for result index ix with the reduced
 * dims' coordinates (in e's sorted axis order) given; trailing-axis
 * reductions also get their linear index from ix's. `rlin` (may be NULL)
 * is the linear index over the reduced dims. */
int kcg_reduce_operand_index(kcg_ctx *c, const kir_eqn *e, int ix, const kcg_term *rcoords,
                             const kcg_term *rlin);
/* e's axes sorted, their count, and the product of their extents. */
int kcg_reduce_axes(const kcg_ctx *c, const kir_eqn *e, int *axes, int64_t *count);

/* ---- reduction loops shared by the skeletons (reduce.c) ---- */
#define KCG_LANES 8 /* KILN_LANES of kernels/reduce.h */
void kcg_reducers(kcg_ctx *c, const int *eqns, int n, kcg_reducer *r);
/* Declares one accumulator per reducer in `scope` (KILN_LANES of them each
 * when `lanes`), initialized to the identity; their names go to acc. */
void kcg_acc_declare(kcg_ctx *c, int scope, const kcg_reducer *r, int n, bool lanes,
                     const char **acc);
/* In the current scope: acc[k]<sub> = combine(acc[k]<sub>, operand of
 * eqns[k] at oix[k]). */
void kcg_accumulate(kcg_ctx *c, const int *eqns, int n, const int *oix, const kcg_reducer *r,
                    const char *const *acc, const char *sub);
/* Blocked accumulation: an f32/f64 sum's accumulator (each lane of it)
 * adds at most KCG_BLOCK elements in sequence; then its value joins a
 * pairwise cascade of block totals (KILN_DEFINE_CASCADE of kernels/reduce.h)
 * and it restarts from the identity, so that the rounding error of a chain
 * of n elements grows as KCG_BLOCK + log2(n / KCG_BLOCK) instead of n (2^36
 * ones sum exactly, as in XLA's tree reductions). Loops of at most a block
 * per chain emit as before. */
#define KCG_BLOCK 1024
bool kcg_blocked(const kcg_reducer *r, int n); /* whether any reducer of the set is */
typedef struct kcg_cascade {
  const char *stack[KCG_MAX_SET]; /* per blocked reducer: levels x width partials */
  const char *count;              /* blocks pushed so far */
  const char *width;              /* partials per accumulator; NULL: one scalar */
} kcg_cascade;
/* Declares in scope the cascades of the blocked reducers for at most
 * max_blocks blocks of accumulators `width` wide (NULL: scalars). */
void kcg_cascade_declare(kcg_ctx *c, int scope, const kcg_reducer *r, int n, const char *width,
                         int64_t max_blocks, kcg_cascade *k);
/* In scope: the accumulators' first `bound` partials (NULL: all `width`)
 * pushed as the next block; or, `end`, the cascade folded into them. */
void kcg_cascade_step(kcg_ctx *c, int scope, const kcg_reducer *r, int n, const char *const *acc,
                      const kcg_cascade *k, const char *bound, bool end);
/* `const T res = expr;` in scope. */
kcg_term kcg_acc_result(kcg_ctx *c, int scope, const kcg_reducer *r, const char *expr);
/* Sequential loops over the reduced dimensions, in ix's scope; the
 * innermost runs over KILN_LANES accumulators when `lanes` and it is the
 * operand's contiguous last dimension with enough elements. */
void kcg_reduce_nested(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out, bool lanes);

/* ---- skeletons (skel_c.c, skel_cuda.c) ---- */
bool kcg_is_reduction(kir_prim p);
typedef struct kcg_body {
  kcg_buf text; /* the function's body, braces included */
  int64_t n_items, row_length, items_per_block, scratch_bytes;
  int block_threads, split;
  int min_blocks; /* CUDA: __launch_bounds__'s second argument, 0 for none */
} kcg_body;
kiln_status kcg_c_kernel(kcg_ctx *c, kcg_body *out);
kiln_status kcg_cuda_kernel(kcg_ctx *c, kcg_body *out);
/* Shared between the skeletons: the group's outputs' element count, the
 * ROW geometry, pointer declarations. */
int64_t kcg_items(const kcg_ctx *c);
void kcg_row_shape(const kcg_ctx *c, int *rank, int64_t *shape);
void kcg_declare_args(kcg_ctx *c, kcg_buf *out);
int64_t kcg_pow2_at_least(int64_t x);

/* ---- the CUDA skeleton (skel_cuda.c: LOOP and the shared parts;
 * skel_cuda_reduce.c: REDUCE; skel_cuda_row.c: ROW) ---- */
/* How the threads of a block share the work items (see skel_cuda_reduce.c
 * and skel_cuda_row.c). */
typedef enum kcg_coop { KCG_COOP_THREAD, KCG_COOP_WARP, KCG_COOP_BLOCK, KCG_COOP_TILE } kcg_coop;

typedef struct kcg_cuda {
  kcg_coop coop;
  int threads;         /* per block */
  int min_blocks;      /* resident blocks per SM it is built for (0: the compiler's choice) */
  const char *me;      /* this thread's rank within its item: "lane", "tx", NULL */
  int per_item;        /* threads per item: 1, 32 or threads */
  int vector;          /* LOOP: items per vector access, 0 for none */
  int item_scope;      /* the scope of one item (or row, or tile) */
  /* TILE */
  int tile_items;      /* consecutive items per tile (a power of two up to 32) */
  int split;           /* blocks per tile (1: none) */
  int scratch_slot;    /* args.ptr[] of the scratch */
  int64_t partial_bytes;  /* per reducer, after the counters */
  int64_t counter_bytes, scratch_bytes;
  /* ROW */
  int row_ix;
  kcg_term rowbase;
  int64_t length, ept; /* row length, elements per thread */
  bool cache;
  int vec;             /* ROW: elements per vector access, 0 for none */
} kcg_cuda;

void kcg_cuda_set_coop(kcg_cuda *k);
void kcg_cuda_prologue(kcg_ctx *c, const kcg_cuda *k);
/* The loop over items (or rows) for the mode, its scope. */
int kcg_cuda_item_loop(kcg_ctx *c, kcg_cuda *k, const char *var);
/* Stores of per-item values: by one thread of the item (-1: no guard). */
int kcg_cuda_store_guard(kcg_ctx *c, const kcg_cuda *k, int parent);
/* The combination over the threads of an item (THREAD, WARP, BLOCK), after
 * each has reduced its share into acc. */
kcg_term kcg_cuda_combine(kcg_ctx *c, const kcg_cuda *k, int scope, const kcg_reducer *r,
                          const char *acc);
/* The access type of a chunk of `bytes`, and how many of them it takes. */
const char *kcg_vector_type(int bytes, int *count);
size_t kcg_slot_size(const kcg_ctx *c, int s);
/* REDUCE (skel_cuda_reduce.c): the mode, and the reduction emitter. */
void kcg_cuda_reduce_mode(const kcg_ctx *c, kcg_cuda *k);
void kcg_cuda_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out);
void kcg_cuda_tile_prologue(kcg_ctx *c, const kcg_cuda *k);
int kcg_cuda_tile_loop(kcg_ctx *c, kcg_cuda *k, const char *var);
/* ROW (skel_cuda_row.c). */
void kcg_cuda_row_geometry(const kcg_ctx *c, kcg_cuda *k);
void kcg_cuda_row_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out);
void kcg_cuda_rows(kcg_ctx *c, kcg_cuda *k);

#ifdef __cplusplus
}
#endif
#endif
