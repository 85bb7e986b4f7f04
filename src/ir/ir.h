/* ir: kiln's jaxpr-like SSA IR. The only door of src/ir; prefix kir_.
 *
 * A program (kir_program) is a closed function in SSA form, like a jaxpr:
 *
 *   { lambda a:f32[4,8]; b:f32[4,8] c:f32[]. let
 *       d:f32[4,8] = add b a
 *       e:f32[4,8] = mul d c
 *       f:f32[4] = reduce_sum[axes=(1,)] e
 *     in (f, 1.0:f32[]) }
 *
 * - Values ("vars") live in the program's var table and are named by their
 *   index, a kir_vid. Every var has an abstract value (kir_aval: dtype, shape
 *   of rank <= 8, JAX's weak-type flag) and a kind: an input ("invar"), a
 *   constant captured from outside ("constvar", root programs only), an
 *   output of one equation, or a scalar literal (printed inline as
 *   `2.0:f32[]`, like jaxpr Literals; each use may be its own var).
 * - An equation (kir_eqn) applies one primitive to input vars and defines
 *   fresh output vars. Its parameters are stored inline in the equation (a
 *   tagged union, kir_params); the few variable-length ones (sub-programs,
 *   strings, aval lists) live in the program's arena.
 * - Control flow takes sub-programs as parameters (cond branches, while
 *   cond/body, scan body). Sub-programs are closed, as in JAX: they see only
 *   their own invars and literals, never the enclosing program's vars; what
 *   they capture is passed as explicit operands (scan/while "consts").
 *   fori_loop and map are trace-level sugar over while and scan.
 *
 * Memory: a root program owns one arena; its sub-programs, var/eqn tables,
 * operand lists and parameter payloads all live in it, so kir_program_free of
 * the root frees everything at once. Tables grow geometrically inside the
 * arena. Pointers into tables (kir_eqn *, kir_var *) are invalidated by
 * adding to the same table; indices (kir_vid, equation index) are stable
 * until a pass rewrites the program.
 *
 * Shape/dtype rules follow lax exactly (JAX 0.10): e.g. n-ary elementwise
 * operands must have equal dtypes and shapes that broadcast in lax's limited
 * way (rank-0 operands, and size-1 dimensions of equal-rank operands);
 * comparisons give bool; the weak flag follows each primitive's JAX weak-type
 * rule. Evaluators and emitters must honour that implicit broadcasting. One
 * deliberate difference: reshape checks the element count (JAX's rule has it
 * as a TODO). Every rule lives in its family's file (elementwise.c,
 * shape_ops.c, reduce.c, dot.c, control.c, rng.c) and its primitive's row in
 * prims.def; expand_dims is kiln's own primitive (JAX spells it as a
 * broadcast_in_dim), and no "constant" primitive is needed: scalars are
 * literals, arrays constvars.
 *
 * Text form (kir_print / kir_parse), jaxpr style:
 * - types print as `f32[4,8]`; a weak type carries JAX's own mark, the `~`
 *   prefix of ShapedArray.__str__: `~f32[]`. (jax.make_jaxpr's printer drops
 *   weak types altogether; kiln keeps them so that text round-trips.)
 * - params print in brackets, sorted by name, with JAX's spellings: tuples
 *   `(1,)`, dtypes by numpy name (`new_dtype=float16`), bools `True`/`False`,
 *   `padding_config=((1, 2, 0),)`, dot_general's
 *   `dimension_numbers=(([1], [0]), ([], []))`, gather's
 *   `GatherDimensionNumbers(...)`, `mode=GatherScatterMode.CLIP`. Strings
 *   (debug_print's fmt) are double-quoted with C escapes, where JAX prints
 *   them raw. Sub-programs nest as `jaxpr={ lambda ; ... }`.
 * - var names are a, b, ..., z, ba, bb, ... in order of appearance across the
 *   whole text (outputs of an equation before its sub-programs), skipping
 *   names that are primitives or keywords.
 * - layout: a program or equation that fits in 80 columns stays on one line,
 *   otherwise it breaks like jaxprs do. Whitespace is insignificant to the
 *   parser.
 */
#ifndef KILN_SRC_IR_H
#define KILN_SRC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KIR_MAX_RANK KILN_MAX_RANK

/* ======================================================================
 * Abstract values
 * ====================================================================== */

typedef struct kir_aval {
  kiln_dtype dtype;
  int rank;                      /* 0..KIR_MAX_RANK */
  bool weak;                     /* JAX's weak_type */
  int64_t shape[KIR_MAX_RANK];   /* entries past rank are zero */
} kir_aval;

/* Builds an aval without checks (kir_aval_check validates); a NULL shape
 * leaves the dimensions zero. */
kir_aval kir_aval_make(kiln_dtype dtype, int rank, const int64_t *shape, bool weak);
/* Valid dtype, rank in range, no negative dimension; KILN_ERR_DTYPE or
 * KILN_ERR_SHAPE naming `op` otherwise. */
kiln_status kir_aval_check(const char *op, const kir_aval *a);
/* Same dtype, shape and weak flag. */
bool kir_aval_equal(const kir_aval *a, const kir_aval *b);
/* Same dtype and shape, weak flags ignored (JAX's core.typematch). */
bool kir_aval_typematch(const kir_aval *a, const kir_aval *b);
bool kir_aval_same_shape(const kir_aval *a, const kir_aval *b);
int64_t kir_aval_size(const kir_aval *a); /* element count */
/* "f32[4,8]", "~f32[]" for a weak type; returns buf (always terminated). */
char *kir_aval_str(const kir_aval *a, char *buf, size_t cap);
#define KIR_AVAL_STR_CAP 200

/* A scalar literal's value, read according to its dtype: `f` for floats
 * (the exact value after rounding to the dtype), `i` for signed integers
 * and bool (0 or 1), `u` for unsigned integers. */
typedef union kir_scalar {
  double f;
  int64_t i;
  uint64_t u;
} kir_scalar;

static inline kir_scalar kir_scalar_f(double v) { kir_scalar s; s.f = v; return s; }
static inline kir_scalar kir_scalar_i(int64_t v) { kir_scalar s; s.i = v; return s; }
static inline kir_scalar kir_scalar_u(uint64_t v) { kir_scalar s; s.u = v; return s; }

/* Writes one element of `dtype` in its storage form (f16/bf16 as their 16
 * bits, bool as one byte 0/1) and reads it back. */
void kir_scalar_store(kiln_dtype dtype, kir_scalar v, void *dst);
kir_scalar kir_scalar_load(kiln_dtype dtype, const void *src);
bool kir_scalar_equal(kiln_dtype dtype, kir_scalar a, kir_scalar b); /* bitwise for floats */

/* ======================================================================
 * Primitives (one row each in prims.def)
 * ====================================================================== */

typedef enum kir_family {
  KIR_FAMILY_ELEMENTWISE, /* elementwise.c */
  KIR_FAMILY_SHAPE,       /* shape_ops.c: broadcast, reshape, slice, gather, ... */
  KIR_FAMILY_REDUCE,      /* reduce.c: reductions, arg-reductions, cumulative, sort */
  KIR_FAMILY_DOT,         /* dot.c */
  KIR_FAMILY_CONTROL,     /* control.c: cond, while, scan, debug_print, host_callback */
  KIR_FAMILY_RNG,         /* rng.c */
  KIR_FAMILY_COLLECTIVE,  /* collective.c: psum, all_gather, ..., shard_map */
  KIR_FAMILY_CONV,        /* conv.c: conv_general_dilated */
  KIR_NUM_FAMILIES
} kir_family;

#define KIR_VARIADIC (-1)

/* Flags of a primitive. */
enum {
  KIR_PRIM_EFFECT = 1u << 0, /* observable side effect: kept by DCE, never CSE'd or folded */
  KIR_PRIM_CHEAP = 1u << 1,  /* elementwise, about one instruction */
  KIR_PRIM_TRANSCENDENTAL = 1u << 2, /* elementwise, a libm-style function */
  KIR_PRIM_INDEX_MAP = 1u << 3 /* out[i] = in[map(i)]: a pure layout change */
};

/* An elementwise primitive's cost class, from its row's flags (see prims.def). */
typedef enum kir_cost { KIR_COST_PLAIN, KIR_COST_CHEAP, KIR_COST_TRANSCENDENTAL } kir_cost;

typedef enum kir_prim {
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags) KIR_PRIM_##ID,
#include "ir/prims.def"
#undef KIR_PRIM
  KIR_NUM_PRIMS
} kir_prim;

/* ======================================================================
 * Parameters, stored inline in each equation
 * ====================================================================== */

/* A list of axes (small ints), e.g. reduce_sum's axes. */
typedef struct kir_dims {
  int n;
  int8_t v[KIR_MAX_RANK];
} kir_dims;

/* A list of per-dimension sizes or offsets, e.g. reshape's new_sizes. */
typedef struct kir_sizes {
  int n;
  int64_t v[KIR_MAX_RANK];
} kir_sizes;

/* pad's padding_config: (lo, hi, interior) per dimension; lo/hi may be
 * negative (cropping), interior >= 0. */
typedef struct kir_padding {
  int n;
  int64_t lo[KIR_MAX_RANK], hi[KIR_MAX_RANK], interior[KIR_MAX_RANK];
} kir_padding;

/* dot_general's ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)).
 * The result is batch dims, then lhs free dims, then rhs free dims. */
typedef struct kir_dot_dims {
  kir_dims lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
} kir_dot_dims;

/* lax.GatherDimensionNumbers; index_vector_dim is always the last dimension
 * of the indices (JAX's convention), so indices have rank >= 1. The full JAX
 * form is accepted, batching dims included. The forms the tracer emits:
 *   embedding lookup / take along axis a (x[..., idx, ...]):
 *     indices [..., 1], offset_dims = the kept operand dims placed after the
 *     index batch dims, collapsed_slice_dims=(a,), start_index_map=(a,),
 *     slice_sizes = operand shape with 1 at a;
 *   take_along_axis on axis a of a rank-r operand: indices [.., 1] with the
 *     operand's other dims as operand_batching_dims/start_indices_batching_dims,
 *     offset_dims=(), collapsed_slice_dims=(a,), start_index_map=(a,),
 *     slice_sizes all 1.
 * One-hot is eq(indices, iota), not a gather. */
typedef struct kir_gather_dims {
  kir_dims offset_dims, collapsed_slice_dims, start_index_map, operand_batching_dims,
      start_indices_batching_dims;
} kir_gather_dims;

/* lax.ScatterDimensionNumbers, the transpose of the gather forms above
 * (index_vector_dim again the last dimension of the indices). */
typedef struct kir_scatter_dims {
  kir_dims update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
      operand_batching_dims, scatter_indices_batching_dims;
} kir_scatter_dims;

/* lax.GatherScatterMode: out-of-bounds indices are clamped (CLIP), or the
 * gather fills / the scatter drops them (FILL_OR_DROP), or the caller
 * promises they do not occur (PROMISE_IN_BOUNDS). */
typedef enum kir_gather_mode {
  KIR_GATHER_CLIP = 0,
  KIR_GATHER_FILL_OR_DROP = 1,
  KIR_GATHER_PROMISE_IN_BOUNDS = 2
} kir_gather_mode;

/* An optional float (gather's fill_value: None means JAX's default fill). */
typedef struct kir_opt_f64 {
  bool present;
  double v;
} kir_opt_f64;

typedef struct kir_program kir_program;

typedef struct kir_program_list {
  int n;
  kir_program **v; /* in the program's arena */
} kir_program_list;

typedef struct kir_aval_list {
  int n;
  kir_aval *v; /* in the program's arena */
} kir_aval_list;

/* One struct per parameter kind; field names are JAX's param names. */
typedef struct kir_p_convert { kiln_dtype new_dtype; bool weak_type; } kir_p_convert;
typedef struct kir_p_bitcast { kiln_dtype new_dtype; } kir_p_bitcast;
/* lax.RoundingMethod: 0 away from zero, 1 to nearest even. */
typedef struct kir_p_round { int64_t rounding_method; } kir_p_round;
typedef struct kir_p_broadcast { kir_dims broadcast_dimensions; kir_sizes shape; } kir_p_broadcast;
typedef struct kir_p_reshape { kir_sizes new_sizes; } kir_p_reshape;
typedef struct kir_p_transpose { kir_dims permutation; } kir_p_transpose;
/* squeeze (dims of the operand, size 1), expand_dims (dims of the result,
 * where new size-1 axes go), rev (dims to reverse). */
typedef struct kir_p_dims { kir_dims dimensions; } kir_p_dims;
typedef struct kir_p_axes { kir_dims axes; } kir_p_axes;
/* argmax/argmin: exactly one axis, as lax's argmax_p. */
typedef struct kir_p_argminmax { kir_dims axes; kiln_dtype index_dtype; } kir_p_argminmax;
typedef struct kir_p_cumulative { int64_t axis; bool reverse; } kir_p_cumulative;
typedef struct kir_p_slice {
  kir_sizes limit_indices, start_indices, strides;
} kir_p_slice;
typedef struct kir_p_dynamic_slice { kir_sizes slice_sizes; } kir_p_dynamic_slice;
typedef struct kir_p_concatenate { int64_t dimension; } kir_p_concatenate;
typedef struct kir_p_pad { kir_padding padding_config; } kir_p_pad;
typedef struct kir_p_iota { int64_t dimension; kiln_dtype dtype; kir_sizes shape; } kir_p_iota;
typedef struct kir_p_gather {
  kir_gather_dims dimension_numbers;
  kir_opt_f64 fill_value;
  bool indices_are_sorted;
  kir_gather_mode mode;
  kir_sizes slice_sizes;
  bool unique_indices;
} kir_p_gather;
typedef struct kir_p_scatter {
  kir_scatter_dims dimension_numbers;
  bool indices_are_sorted;
  kir_gather_mode mode;
  bool unique_indices;
} kir_p_scatter;
/* lax.sort over n operands of one shape, sorted lexicographically by the
 * first num_keys; the others are permuted along. An argsort is a sort of
 * (x, iota) with num_keys=1. */
typedef struct kir_p_sort { int64_t dimension; bool is_stable; int64_t num_keys; } kir_p_sort;
/* preferred_element_type KILN_INVALID_DTYPE means None. */
typedef struct kir_p_dot {
  kir_dot_dims dimension_numbers;
  kiln_dtype preferred_element_type;
} kir_p_dot;
/* conv_general_dilated (conv.c): JAX's ConvDimensionNumbers, each spec
 * (batch or out-feature dim, feature or in-feature dim, *spatial dims);
 * padding holds (lo, hi) pairs, interior always 0. */
typedef struct kir_conv_dims { kir_dims lhs_spec, rhs_spec, out_spec; } kir_conv_dims;
typedef struct kir_p_conv {
  int64_t batch_group_count;
  kir_conv_dims dimension_numbers;
  int64_t feature_group_count;
  kir_sizes lhs_dilation;
  kir_padding padding;
  kiln_dtype preferred_element_type;
  kir_sizes rhs_dilation;
  kir_sizes window_strides;
} kir_p_conv;
/* cond: operands are (index: i32[], *ops); branch k maps ops -> outs. */
typedef struct kir_p_cond { kir_program_list branches; } kir_p_cond;
/* while: operands (*cond_consts, *body_consts, *carry); cond_jaxpr maps
 * (*cond_consts, *carry) -> bool[], body_jaxpr (*body_consts, *carry) -> carry. */
typedef struct kir_p_while {
  kir_program *body_jaxpr;
  int64_t body_nconsts;
  kir_program *cond_jaxpr;
  int64_t cond_nconsts;
} kir_p_while;
/* scan: operands (*consts, *carry, *xs); jaxpr maps (*consts, *carry,
 * *x slices) -> (*carry, *y slices); results are jaxpr's carry outputs and
 * its ys stacked on a new leading axis of size length. */
typedef struct kir_p_scan {
  kir_program *jaxpr;
  int64_t length;
  int64_t num_carry;
  int64_t num_consts;
  bool reverse;
} kir_p_scan;
/* custom_jvp_call: call_jaxpr maps (*consts, *args) -> outs; jvp_jaxpr
 * maps (*consts, *args, *arg tangents) -> (*outs, *out tangents). */
typedef struct kir_p_custom_jvp {
  kir_program *call_jaxpr;
  kir_program *jvp_jaxpr;
  int64_t num_consts;
} kir_p_custom_jvp;
/* custom_vjp_call: call_jaxpr (*consts, *args) -> outs; fwd_jaxpr
 * (*consts, *args) -> (*outs, *residuals); bwd_jaxpr (*consts,
 * *residuals, *out cotangents) -> arg cotangents. */
typedef struct kir_p_custom_vjp {
  kir_program *bwd_jaxpr;
  kir_program *call_jaxpr;
  kir_program *fwd_jaxpr;
  int64_t num_consts;
} kir_p_custom_vjp;
/* custom_lin: bwd_jaxpr as above; out_avals the output tangents' types. */
typedef struct kir_p_custom_lin {
  kir_program *bwd_jaxpr;
  int64_t num_consts;
  int64_t num_res;
  kir_aval_list out_avals;
} kir_p_custom_lin;
/* jax.checkpoint's policies: which values of jaxpr reverse mode may save. */
typedef enum kir_remat_policy {
  KIR_REMAT_NOTHING_SAVEABLE = 0,
  KIR_REMAT_DOTS_SAVEABLE = 1,
  KIR_REMAT_EVERYTHING_SAVEABLE = 2
} kir_remat_policy;
/* checkpoint: jaxpr maps the operands to the results. */
typedef struct kir_p_checkpoint {
  kir_program *jaxpr;
  int64_t policy; /* kir_remat_policy */
  bool prevent_cse;
} kir_p_checkpoint;
/* Collectives over mesh axes: axis_name is one name or several joined by
 * commas ("data,model", the first major); axis_size is the product of their
 * sizes, fixed at trace time (as JAX's all_gather carries it). */
typedef struct kir_p_collective { const char *axis_name; int64_t axis_size; } kir_p_collective;
typedef struct kir_p_all_gather {
  int64_t all_gather_dimension;
  const char *axis_name;
  int64_t axis_size;
  bool tiled;
} kir_p_all_gather;
typedef struct kir_p_psum_scatter {
  const char *axis_name;
  int64_t axis_size;
  int64_t scatter_dimension;
  bool tiled;
} kir_p_psum_scatter;
/* perm: "((0, 1), (1, 2))", (source, destination) ranks along the axes. */
typedef struct kir_p_ppermute {
  const char *axis_name;
  int64_t axis_size;
  const char *perm;
} kir_p_ppermute;
typedef struct kir_p_all_to_all {
  const char *axis_name;
  int64_t axis_size;
  int64_t concat_axis;
  int64_t split_axis;
  bool tiled;
} kir_p_all_to_all;
/* shard_map: mesh is "data=2,model=4" (axis names and sizes, row-major);
 * in_specs/out_specs are one partition spec per operand/result in the
 * text form of kiln_pspec_parse, separated by " | "; jaxpr is the body over
 * per-shard types (operands, then the values it captured, replicated). */
typedef struct kir_p_shard_map {
  bool check_rep;
  const char *in_specs;
  kir_program *jaxpr;
  const char *mesh;
  const char *out_specs;
} kir_p_shard_map;
typedef struct kir_p_debug_print { const char *fmt; /* arena */ } kir_p_debug_print;
/* callback is an id the caller resolves (an index into its table of host
 * functions); result_avals are the callback's outputs. */
typedef struct kir_p_host_callback {
  int64_t callback;
  kir_aval_list result_avals;
} kir_p_host_callback;

/* X(KIND, member, type): every parameter kind, its union member and struct. */
#define KIR_PARAM_KINDS(X)                             \
  X(NONE, none, char)                                  \
  X(CONVERT, convert, kir_p_convert)                   \
  X(BITCAST, bitcast, kir_p_bitcast)                   \
  X(ROUND, round, kir_p_round)                         \
  X(BROADCAST, broadcast, kir_p_broadcast)             \
  X(RESHAPE, reshape, kir_p_reshape)                   \
  X(TRANSPOSE, transpose, kir_p_transpose)             \
  X(DIMS, dims, kir_p_dims)                            \
  X(AXES, axes, kir_p_axes)                            \
  X(ARGMINMAX, argminmax, kir_p_argminmax)             \
  X(CUMULATIVE, cumulative, kir_p_cumulative)          \
  X(SLICE, slice, kir_p_slice)                         \
  X(DYNAMIC_SLICE, dynamic_slice, kir_p_dynamic_slice) \
  X(CONCATENATE, concatenate, kir_p_concatenate)       \
  X(PAD, pad, kir_p_pad)                               \
  X(IOTA, iota, kir_p_iota)                            \
  X(GATHER, gather, kir_p_gather)                      \
  X(SCATTER, scatter, kir_p_scatter)                   \
  X(SORT, sort, kir_p_sort)                            \
  X(DOT, dot, kir_p_dot)                               \
  X(COND, cond, kir_p_cond)                            \
  X(WHILE, while_loop, kir_p_while)                    \
  X(SCAN, scan, kir_p_scan)                            \
  X(DEBUG_PRINT, debug_print, kir_p_debug_print)       \
  X(CUSTOM_JVP, custom_jvp, kir_p_custom_jvp)          \
  X(CUSTOM_VJP, custom_vjp, kir_p_custom_vjp)          \
  X(CUSTOM_LIN, custom_lin, kir_p_custom_lin)          \
  X(CHECKPOINT, checkpoint, kir_p_checkpoint)          \
  X(HOST_CALLBACK, host_callback, kir_p_host_callback) \
  X(COLLECTIVE, collective, kir_p_collective)          \
  X(ALL_GATHER, all_gather, kir_p_all_gather)          \
  X(PSUM_SCATTER, psum_scatter, kir_p_psum_scatter)    \
  X(PPERMUTE, ppermute, kir_p_ppermute)                \
  X(ALL_TO_ALL, all_to_all, kir_p_all_to_all)          \
  X(SHARD_MAP, shard_map, kir_p_shard_map)             \
  X(CONV, conv, kir_p_conv)

typedef enum kir_param_kind {
#define KIR_KIND_ENUM(KIND, member, type) KIR_PARAMS_##KIND,
  KIR_PARAM_KINDS(KIR_KIND_ENUM)
#undef KIR_KIND_ENUM
      KIR_NUM_PARAM_KINDS
} kir_param_kind;

/* Callers fill the prim's member only; kir_add_eqn copies its fields into
 * the equation (entries past each list's n and all other bytes zeroed), so
 * params stored in a program compare and hash bytewise-canonically. */
typedef union kir_params {
#define KIR_KIND_MEMBER(KIND, member, type) type member;
  KIR_PARAM_KINDS(KIR_KIND_MEMBER)
#undef KIR_KIND_MEMBER
} kir_params;

/* Generic access to a kind's fields, for passes that walk parameters. */
typedef enum kir_field_type {
  KIR_FIELD_INT,          /* int64_t */
  KIR_FIELD_BOOL,         /* bool */
  KIR_FIELD_DTYPE,        /* kiln_dtype */
  KIR_FIELD_OPT_DTYPE,    /* kiln_dtype, KILN_INVALID_DTYPE = None */
  KIR_FIELD_DIMS,         /* kir_dims */
  KIR_FIELD_SIZES,        /* kir_sizes */
  KIR_FIELD_PADDING,      /* kir_padding */
  KIR_FIELD_DOT_DIMS,     /* kir_dot_dims */
  KIR_FIELD_GATHER_DIMS,  /* kir_gather_dims */
  KIR_FIELD_SCATTER_DIMS, /* kir_scatter_dims */
  KIR_FIELD_MODE,         /* kir_gather_mode */
  KIR_FIELD_OPT_F64,      /* kir_opt_f64 */
  KIR_FIELD_STRING,       /* const char * */
  KIR_FIELD_PROGRAM,      /* kir_program * */
  KIR_FIELD_PROGRAMS,     /* kir_program_list */
  KIR_FIELD_AVALS,        /* kir_aval_list */
  KIR_FIELD_CONV_DIMS,    /* kir_conv_dims */
  KIR_FIELD_PAD_PAIRS     /* kir_padding of (lo, hi) pairs */
} kir_field_type;

typedef struct kir_field {
  const char *name;
  kir_field_type type;
  size_t offset; /* within kir_params */
} kir_field;

/* The fields of a kind, sorted by name (the printing order). */
const kir_field *kir_param_fields(kir_param_kind kind, int *n);
/* Deep equality (sub-programs structurally) and a hash that agrees with it. */
bool kir_params_equal(kir_param_kind kind, const kir_params *a, const kir_params *b);
uint64_t kir_params_hash(kir_param_kind kind, const kir_params *p, uint64_t h);
/* Calls fn on every sub-program referenced by the params. */
void kir_params_for_each_program(kir_param_kind kind, const kir_params *p,
                                 void (*fn)(kir_program *sub, void *user), void *user);

/* ======================================================================
 * Shape/dtype rules
 * ====================================================================== */

/* A growable list of avals that rules append their results to. Starts with
 * inline room for a few and moves to the heap beyond. */
typedef struct kir_avals {
  int n, cap;
  kir_aval *v;
  kir_aval small[4];
} kir_avals;
void kir_avals_init(kir_avals *a);
void kir_avals_free(kir_avals *a);
kiln_status kir_avals_push(kir_avals *a, const kir_aval *v);

/* A shape/dtype rule: checks the operands and params of one application of
 * `prim` and appends the results' avals to `out`. Errors are
 * KILN_ERR_SHAPE / KILN_ERR_DTYPE / KILN_ERR_ARGUMENT with a message that
 * starts with the primitive's name and names the operand types. `n_in`
 * already matches the prim's row (unless variadic). */
typedef kiln_status (*kir_rule_fn)(kir_prim prim, const kir_params *params, int n_in,
                                   const kir_aval *in, kir_avals *out);

typedef struct kir_prim_info {
  const char *name; /* as printed: "add", "reduce_sum", "scatter-add", ... */
  kir_family family;
  int n_in;         /* or KIR_VARIADIC */
  int n_out;        /* or KIR_VARIADIC */
  kir_param_kind params;
  kir_rule_fn rule;
  unsigned flags;   /* KIR_PRIM_* */
} kir_prim_info;

/* NULL for an invalid prim. */
const kir_prim_info *kir_prim_get(kir_prim p);
const char *kir_prim_name(kir_prim p); /* "invalid" for an invalid prim */
/* Finds a prim by its printed name (len bytes); false if none. */
bool kir_prim_lookup(const char *name, size_t len, kir_prim *out);
bool kir_prim_has_effect(kir_prim p);
kir_cost kir_prim_cost(kir_prim p); /* KIR_COST_PLAIN for an invalid prim */
bool kir_prim_is_index_map(kir_prim p); /* broadcast, reshape, transpose, slice, ... */

/* Runs prim's rule after checking the operand count: the results' avals. */
kiln_status kir_infer(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                      kir_avals *out);

/* The rules, one per row group (see prims.def). */
#define KIR_DECLARE_RULE(fn)                                                               \
  kiln_status fn(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in, \
                 kir_avals *out);
/* elementwise.c */
KIR_DECLARE_RULE(kir_rule_unary)
KIR_DECLARE_RULE(kir_rule_nary)
KIR_DECLARE_RULE(kir_rule_compare)
KIR_DECLARE_RULE(kir_rule_pow)
KIR_DECLARE_RULE(kir_rule_select_n)
KIR_DECLARE_RULE(kir_rule_clamp)
KIR_DECLARE_RULE(kir_rule_convert_element_type)
KIR_DECLARE_RULE(kir_rule_bitcast_convert_type)
/* shape_ops.c */
KIR_DECLARE_RULE(kir_rule_broadcast_in_dim)
KIR_DECLARE_RULE(kir_rule_reshape)
KIR_DECLARE_RULE(kir_rule_transpose)
KIR_DECLARE_RULE(kir_rule_squeeze)
KIR_DECLARE_RULE(kir_rule_expand_dims)
KIR_DECLARE_RULE(kir_rule_rev)
KIR_DECLARE_RULE(kir_rule_slice)
KIR_DECLARE_RULE(kir_rule_dynamic_slice)
KIR_DECLARE_RULE(kir_rule_dynamic_update_slice)
KIR_DECLARE_RULE(kir_rule_concatenate)
KIR_DECLARE_RULE(kir_rule_pad)
KIR_DECLARE_RULE(kir_rule_iota)
KIR_DECLARE_RULE(kir_rule_gather)
KIR_DECLARE_RULE(kir_rule_scatter_add)
/* reduce.c */
KIR_DECLARE_RULE(kir_rule_reduce)
KIR_DECLARE_RULE(kir_rule_argminmax)
KIR_DECLARE_RULE(kir_rule_cumulative)
KIR_DECLARE_RULE(kir_rule_sort)
/* dot.c */
KIR_DECLARE_RULE(kir_rule_dot_general)
/* control.c */
KIR_DECLARE_RULE(kir_rule_cond)
KIR_DECLARE_RULE(kir_rule_while)
KIR_DECLARE_RULE(kir_rule_scan)
KIR_DECLARE_RULE(kir_rule_debug_print)
KIR_DECLARE_RULE(kir_rule_host_callback)
/* call.c */
KIR_DECLARE_RULE(kir_rule_call)
KIR_DECLARE_RULE(kir_rule_custom_lin)
/* rng.c */
KIR_DECLARE_RULE(kir_rule_threefry2x32)
/* collective.c */
KIR_DECLARE_RULE(kir_rule_all_reduce)
KIR_DECLARE_RULE(kir_rule_all_gather)
KIR_DECLARE_RULE(kir_rule_psum_scatter)
KIR_DECLARE_RULE(kir_rule_ppermute)
KIR_DECLARE_RULE(kir_rule_all_to_all)
KIR_DECLARE_RULE(kir_rule_axis_index)
KIR_DECLARE_RULE(kir_rule_shard_map)
/* conv.c */
KIR_DECLARE_RULE(kir_rule_conv_general_dilated)
#undef KIR_DECLARE_RULE

/* ======================================================================
 * Programs
 * ====================================================================== */

typedef int kir_vid; /* index into a program's var table */
#define KIR_NO_VAR (-1)

typedef enum kir_var_kind {
  KIR_VAR_INVAR,
  KIR_VAR_CONSTVAR,
  KIR_VAR_EQN,     /* an equation's output */
  KIR_VAR_LITERAL  /* a scalar literal */
} kir_var_kind;

/* Where a constvar's value comes from. */
typedef enum kir_const_source {
  KIR_CONST_ABSTRACT, /* only its aval is known (parsed text); bind it before running */
  KIR_CONST_ARRAY,    /* a kiln_array; the program holds a reference */
  KIR_CONST_HOST      /* host bytes (C order, storage form) copied into the arena */
} kir_const_source;

typedef struct kir_var {
  kir_aval aval;
  kir_var_kind kind;
  int eqn; /* KIR_VAR_EQN: index of the defining equation; else -1 */
  union {
    kir_scalar literal; /* KIR_VAR_LITERAL */
    struct {
      kir_const_source source;
      kiln_array *array;
      const void *host;
      size_t nbytes;
    } constant; /* KIR_VAR_CONSTVAR */
  } u;
} kir_var;

typedef struct kir_eqn {
  kir_prim prim;
  int n_in, n_out;
  kir_vid *in;  /* arena */
  kir_vid *out; /* arena */
  kir_params params;
} kir_eqn;

/* Read the fields freely; change them only through kir_ functions or
 * passes that keep the invariants kir_verify checks. */
struct kir_program {
  kir_program *parent; /* NULL for a root */
  kir_program *root;   /* itself for a root */
  int index;           /* 0 for the root; sub-programs count up in creation order */
  kir_var *vars;
  int n_vars, cap_vars;
  kir_vid *constvars;
  int n_constvars, cap_constvars;
  kir_vid *invars;
  int n_invars, cap_invars;
  kir_vid *outvars;
  int n_outvars;
  kir_eqn *eqns;
  int n_eqns, cap_eqns;
  /* root only */
  struct kir_arena_chunk *arena;
  int n_programs;
};

kiln_status kir_program_new(kir_program **out);
/* Frees a root program with all its sub-programs; releases the arrays its
 * constvars hold. NULL is allowed; a sub-program is freed with its root. */
void kir_program_free(kir_program *p);
/* A new empty sub-program owned by parent's root; pass it as a param of an
 * equation of `parent` (cond branch, while cond/body, scan body). */
kiln_status kir_program_new_sub(kir_program *parent, kir_program **out);

/* Arena memory of p's root, zeroed; lives until the root is freed. */
void *kir_alloc(kir_program *p, size_t nbytes);

kiln_status kir_add_invar(kir_program *p, const kir_aval *aval, kir_vid *out);
/* A constvar (root programs only) with an abstract value, then bound. */
kiln_status kir_add_const(kir_program *p, const kir_aval *aval, kir_vid *out);
/* Binds a kiln_array (retained; dtype and shape must match the aval). */
kiln_status kir_const_bind_array(kir_program *p, kir_vid v, kiln_array *a);
/* Binds host data (copied; nbytes must be the aval's byte size). */
kiln_status kir_const_bind_host(kir_program *p, kir_vid v, const void *data, size_t nbytes);
/* kir_add_const + kir_const_bind_array: the aval is the array's (strong). */
kiln_status kir_add_const_array(kir_program *p, kiln_array *a, kir_vid *out);
kiln_status kir_add_const_host(kir_program *p, const kir_aval *aval, const void *data,
                               size_t nbytes, kir_vid *out);
/* A scalar literal of dtype (rank 0). Floats are rounded to the dtype (any
 * NaN becomes the positive quiet NaN); integers must fit (KILN_ERR_ARGUMENT
 * otherwise); bool is 0 or 1. */
kiln_status kir_add_literal(kir_program *p, kiln_dtype dtype, bool weak, kir_scalar value,
                            kir_vid *out);

/* Appends `prim(in...)[params]`: checks the operands are vars of p, copies
 * params (NULL for none) into the equation, deep-copying its strings and
 * lists into the arena (sub-programs must be p's own, from
 * kir_program_new_sub), runs the rule and creates the output vars. The new
 * equation's index goes to *eqn_index (may be NULL); its outputs are
 * p->eqns[*eqn_index].out[0..n_out). */
kiln_status kir_add_eqn(kir_program *p, kir_prim prim, const kir_params *params, int n_in,
                        const kir_vid *in, int *eqn_index);
/* Sets (replaces) the outputs. */
kiln_status kir_set_outputs(kir_program *p, int n, const kir_vid *outs);

static inline const kir_aval *kir_var_aval(const kir_program *p, kir_vid v) {
  return &p->vars[v].aval;
}

/* Structural equality: same avals, primitives, params (sub-programs
 * recursively), literal values and dataflow, whatever the var numbering.
 * Constant payloads are not compared. */
bool kir_program_equal(const kir_program *a, const kir_program *b);
/* True if p or a sub-program has an equation with a side effect. */
bool kir_program_has_effect(const kir_program *p);
/* True if e's primitive has an effect or one of its sub-programs has. */
bool kir_eqn_has_effect(const kir_eqn *e);

/* ======================================================================
 * Verification, text
 * ====================================================================== */

/* Checks every equation of p and its sub-programs: var ids and kinds, SSA
 * (each var defined once, before use), operand counts, outputs equal to the
 * rule's result, sub-program ownership, program outputs. The message names
 * the equation index and primitive (and the path through sub-programs). */
kiln_status kir_verify(const kir_program *p);

/* The text form (see the top of this file) in a malloc'd string. */
kiln_status kir_print(const kir_program *p, char **out);
/* Parses kir_print's text into a new root program (verified). Bad text is
 * KILN_ERR_ARGUMENT with "line:column: expected ..." in the message; a
 * well-formed program whose types are wrong fails as its rule does. */
kiln_status kir_parse(const char *text, kir_program **out);
/* Parses one type ("f32[4,8]", "~f32[]") in full. */
kiln_status kir_aval_parse(const char *text, kir_aval *out);
/* Parses the inside of an equation's brackets ("axes=(1,) ...") for prim
 * into *out; strings and lists go to p's arena, sub-programs become
 * sub-programs of p. */
kiln_status kir_params_parse(kir_program *p, kir_prim prim, const char *text, kir_params *out);

/* ======================================================================
 * Passes (in place)
 * ====================================================================== */

/* Dead code elimination: drops equations whose outputs are unused (unless
 * they, or their sub-programs, have effects), inside sub-programs too, and
 * unused constvars. Invars and sub-program signatures are kept.
 * *removed (may be NULL) counts the equations dropped. */
kiln_status kir_dce(kir_program *p, int *removed);

/* Common subexpression elimination: an equation with the same primitive,
 * the same operands (literals by value) and equal params as an earlier one
 * is dropped and its uses redirected; effectful ones are kept. Runs inside
 * sub-programs too. */
kiln_status kir_cse(kir_program *p, int *removed);

/* ---- evaluation hook (reference executor) and constant folding ----
 *
 * The reference executor evaluates one equation at a time on host buffers
 * through a kir_eval_table: one kir_eval_fn per primitive. The evaluators
 * live in their family's file next to the rule (e.g. elementwise.c) and are
 * gathered by kir_reference_evals(); kir_eval_program walks a program with
 * them. Every evaluator receives the kir_eval_env as its ctx, so control-flow
 * evaluators run their sub-programs through kir_eval_program(env, ...).
 * kir_fold uses the same table, so folding covers exactly the primitives
 * that have a reference implementation. */

/* Host data of one operand or result: C order, dtype storage form. */
typedef struct kir_buffer {
  kir_aval aval;
  void *data;
  size_t nbytes;
} kir_buffer;

/* Evaluates equation e on host buffers. `in` has e->n_in buffers; `out` has
 * e->n_out buffers whose avals are set and whose data is allocated (nbytes)
 * by the caller. `ctx` is the const kir_eval_env * of the evaluation. */
typedef kiln_status (*kir_eval_fn)(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx);

/* Per-primitive evaluators; a NULL entry means "cannot evaluate". `ctx` is
 * handed to evaluators as the env's `user`. */
typedef struct kir_eval_table {
  kir_eval_fn fn[KIR_NUM_PRIMS];
  void *ctx;
} kir_eval_table;

/* What a whole-program evaluation needs beyond the evaluators. */
typedef struct kir_eval_env {
  const kir_eval_table *table;
  void *user; /* the table's ctx */
  /* host_callback: runs callback `id` (NULL: host callbacks fail). */
  kiln_status (*host_call)(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                           kir_buffer *out);
  void *host_user;
  /* debug_print's sink for each formatted line (NULL: stderr). */
  void (*print)(void *user, const char *text);
  void *print_user;
} kir_eval_env;

/* An env over `table` with no host callbacks and printing to stderr. */
void kir_eval_env_init(kir_eval_env *env, const kir_eval_table *table);
/* Runs p on host buffers: `in` for its invars, `out` for its outvars
 * (avals set, data allocated by the caller). Constvars bound to arrays are
 * read through kiln_array_to_host. Outputs are written only after every
 * equation ran, and outputs that are invars are copied before any other, so
 * an output may share memory with an input that no later output reads
 * (donation). A primitive without an evaluator is KILN_ERR_UNIMPLEMENTED. */
kiln_status kir_eval_program(const kir_eval_env *env, const kir_program *p, const kir_buffer *in,
                             kir_buffer *out);
/* Every family's evaluators (built once; thread-safe). */
const kir_eval_table *kir_reference_evals(void);
/* Each family file adds its evaluators to a table. */
void kir_elementwise_evals(kir_eval_table *t);
void kir_shape_evals(kir_eval_table *t);
void kir_reduce_evals(kir_eval_table *t);
void kir_dot_evals(kir_eval_table *t);
void kir_control_evals(kir_eval_table *t);
void kir_rng_evals(kir_eval_table *t);
void kir_call_evals(kir_eval_table *t);
/* shard_map's evaluator (collective_eval.c): runs the body for every device
 * of the mesh in lockstep and applies its collectives across them. The
 * collectives have no evaluator of their own: outside a shard_map body they
 * have no devices to run over. */
void kir_collective_evals(kir_eval_table *t);
void kir_conv_evals(kir_eval_table *t);
/* A convolution's sizes and strides in the form of kernels/conv.h (which
 * defines the struct), for the C evaluator and the CUDA target's copies. */
struct kiln_conv_geom;
void kir_conv_geom_fill(const kir_p_conv *c, const kir_aval *lhs, const kir_aval *rhs,
                        const kir_aval *out, struct kiln_conv_geom *g);

/* Constant folding: evaluates (in program order) every effect-free equation
 * whose operands are all literals or host-bound constvars, whose evaluator
 * exists in `t`, and whose results are at most max_bytes each. Scalar results
 * become literals, others host constvars (root programs only; a sub-program
 * folds scalars only). Runs inside sub-programs too. Dead equations are then
 * left for kir_dce. */
kiln_status kir_fold(kir_program *p, const kir_eval_table *t, size_t max_bytes, int *folded);

/* ======================================================================
 * Internal to src/ir (shared between its files)
 * ====================================================================== */

/* Copies params of prim's kind into dst field by field (other bytes zero),
 * checks list lengths and sub-program ownership, deep-copies strings and
 * lists into p's arena. */
kiln_status kir_params_import(kir_program *p, kir_prim prim, const kir_params *src,
                              kir_params *dst);
/* Rounds v to a float dtype (f16/bf16/f32 round to nearest even; f64 is v);
 * every NaN becomes the one positive quiet NaN. */
double kir_round_to_dtype(kiln_dtype dtype, double v);

/* Drops the equations with drop[i] set, keeping the others in order and
 * their outputs' eqn indices right; dropped outputs get eqn -1. */
void kir_remove_eqns(kir_program *p, const bool *drop);

/* debug_print's text (debug_format.c): fmt formatted over the n values as
 * jax.debug.print shows them, in a malloc'd string without the final
 * newline. A malformed or unsupported format is KILN_ERR_ARGUMENT or
 * KILN_ERR_UNIMPLEMENTED naming debug_print. */
kiln_status kir_debug_format(const char *fmt, int n, const kir_buffer *values, char **out);

/* Checks that every mesh axis a collective equation e of p names is bound
 * by an enclosing shard_map with the sizes e carries (collective.c). */
kiln_status kir_collective_verify(const kir_program *p, const kir_eqn *e);
/* A collective equation's axis_name (its axis_size in *size, may be NULL);
 * NULL for any other equation. */
const char *kir_collective_axes(const kir_eqn *e, int64_t *size);
/* all_to_all's result (out) for one member from the blocks it received:
 * recv holds sender s's block at s * block, each shaped like the operand
 * (in) with split_axis divided by axis_size (collective_eval.c). */
void kir_all_to_all_unpack(const kir_p_all_to_all *p, const kir_aval *in, const kir_aval *out,
                           const void *recv, void *dst);

/* ---- shard_map's params, parsed (collective.c) ---- */
#define KIR_MESH_MAX_AXES 8
#define KIR_AXIS_NAME_MAX 64
typedef struct kir_mesh {
  int ndim;
  int64_t size[KIR_MESH_MAX_AXES];
  char name[KIR_MESH_MAX_AXES][KIR_AXIS_NAME_MAX];
  int64_t n_devices;
} kir_mesh;
/* One partition spec: per dimension (rank <= the value's rank; the rest
 * replicated) the mesh axes it is split over, the first major. */
typedef struct kir_spec {
  int rank;
  int n_axes[KIR_MAX_RANK];
  int8_t axes[KIR_MAX_RANK][KIR_MESH_MAX_AXES];
} kir_spec;
/* "data=2,model=4" */
kiln_status kir_mesh_parse(const char *op, const char *text, kir_mesh *out);
/* Exactly n specs separated by " | " (see kir_p_shard_map), axes of m. */
kiln_status kir_specs_parse(const char *op, const char *text, const kir_mesh *m, int n,
                            kir_spec *out);
/* A collective's axis_name ("data,model") as mesh axis indices. */
kiln_status kir_axes_parse(const char *op, const char *text, const kir_mesh *m, int *n, int *axes);
/* ppermute's perm for an axis group of `size`: pairs[i] = {source, dest}
 * (at most size pairs; sources and destinations each distinct). */
kiln_status kir_perm_parse(const char *text, int64_t size, int *npairs, int (*pairs)[2]);
/* Product of the mesh sizes of the axes spec entry d splits over (1 past
 * the spec's rank). */
int64_t kir_spec_ways(const kir_spec *s, const kir_mesh *m, int d);
/* Device d's coordinates in m (row-major). */
void kir_mesh_coords(const kir_mesh *m, int64_t d, int64_t *coords);
/* Copies the shard a device at `coords` holds of a value split by spec
 * between the global buffer and the shard's (to_global: shard -> global). */
void kir_shard_copy(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                    const kir_buffer *global, const kir_buffer *shard, bool to_global);
/* Whether the device at coords holds the copy of a result with that spec
 * that is written back: coordinate 0 on every axis the spec leaves out. */
bool kir_shard_writes_back(const kir_mesh *m, const int64_t *coords, const kir_spec *spec);

/* ---- helpers for the rules (rules.c) ---- */

/* dtype classes, as lax's accepted-dtype sets */
enum {
  KIR_DT_BOOL = 1u << 0,
  KIR_DT_SINT = 1u << 1,
  KIR_DT_UINT = 1u << 2,
  KIR_DT_FLOAT = 1u << 3,
  KIR_DT_INT = KIR_DT_SINT | KIR_DT_UINT,
  KIR_DT_NUM = KIR_DT_INT | KIR_DT_FLOAT,
  KIR_DT_ANY = KIR_DT_NUM | KIR_DT_BOOL
};
bool kir_dtype_in(kiln_dtype d, unsigned classes);
/* "floating", "integer or floating", ... for messages */
const char *kir_dtype_class_name(unsigned classes);
/* KILN_ERR_DTYPE "<prim>: operand <i> type <t> is not accepted (<prim> takes <class> dtypes)"
 * unless in[i]'s dtype is in classes. */
kiln_status kir_check_dtype_class(kir_prim prim, int i, const kir_aval *in, unsigned classes);
/* KILN_ERR_DTYPE unless every aval in in[0..n) has in[0]'s dtype. */
kiln_status kir_check_same_dtypes(kir_prim prim, int n, const kir_aval *in);
/* lax's broadcasting_shape_rule: rank-0 operands broadcast; the others
 * must have one rank and, per dimension, equal sizes or 1. */
kiln_status kir_broadcast_shapes(kir_prim prim, int n, const kir_aval *in, int *rank,
                                 int64_t *shape);
/* Each axis in [0, bound), no repeats, and ascending if `sorted`. Names the
 * param and the operand (which may be NULL) in messages. */
kiln_status kir_check_dims(kir_prim prim, const char *param, const kir_dims *d, int bound,
                           bool sorted, const kir_aval *operand);
/* "(1, 2)" / "(1,)" / "()" */
char *kir_dims_str(const kir_dims *d, char *buf, size_t cap);
char *kir_sizes_str(const kir_sizes *s, char *buf, size_t cap);
/* Appends an aval built from the parts. */
kiln_status kir_push(kir_avals *out, kiln_dtype dtype, int rank, const int64_t *shape, bool weak);
bool kir_all_weak(int n, const kir_aval *in);


/* ======================================================================
 * Autodiff rules (ad_emit.c and the *_ad.c family files)
 *
 * Each primitive has a jvp rule and, if it can be linear in an operand, a
 * transpose rule; the slot for batching rules is reserved for vmap. Rules
 * emit equations into a program through kir_add_eqn (the kir_emit_*
 * helpers below). A tangent or cotangent of KIR_NO_VAR is a symbolic zero.
 * ====================================================================== */

/* jvp: the primal equation e (of some source program) was already emitted
 * into p; x are its operands and y its results as vars of p, tx the
 * operands' tangents. Writes the results' tangents to ty (KIR_NO_VAR for a
 * zero). What the rule emits must be linear in tx, with all non-linear work
 * done on primal values only (so partial evaluation can split it). */
typedef kiln_status (*kir_jvp_fn)(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                  const kir_vid *y, const kir_vid *tx, kir_vid *ty);
/* transpose of a linear equation e of program src: lin[i] marks the
 * operands e is linear in (they have no value); the others are x[i], vars
 * of p. ct are the results' cotangents (at least one non-zero). Writes the
 * cotangents of the linear operands to ct_x (KIR_NO_VAR for a zero). */
typedef kiln_status (*kir_transpose_fn)(kir_program *p, const kir_program *src, const kir_eqn *e,
                                        const bool *lin, const kir_vid *x, const kir_vid *ct,
                                        kir_vid *ct_x);

/* batch (vmap): the equation e of src, applied to operands x (vars of p)
 * that carry a mapped axis of `size` at bd[i] (-1: not mapped, at least one
 * is). Emits the batched equation(s) into p and writes each result to y with
 * its mapped axis at ybd (-1 for a result that does not depend on it). */
typedef kiln_status (*kir_batch_fn)(kir_program *p, const kir_program *src, const kir_eqn *e,
                                    int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                    int *ybd);

typedef struct kir_ad_rules {
  kir_jvp_fn jvp[KIR_NUM_PRIMS];             /* NULL: not differentiable (yet) */
  kir_transpose_fn transpose[KIR_NUM_PRIMS]; /* NULL: not linear */
  kir_batch_fn batch[KIR_NUM_PRIMS];         /* NULL: no vmap rule (yet) */
} kir_ad_rules;

/* Every family's rules (built once; thread-safe). */
const kir_ad_rules *kir_ad_rules_get(void);
void kir_elementwise_ad(kir_ad_rules *r);
void kir_reduce_ad(kir_ad_rules *r);
void kir_shape_ad(kir_ad_rules *r);
void kir_dot_ad(kir_ad_rules *r);
/* The batching rules of each family (the *_batch.c files). */
void kir_elementwise_batch(kir_ad_rules *r);
void kir_reduce_batch(kir_ad_rules *r);
void kir_shape_batch(kir_ad_rules *r);
void kir_dot_batch(kir_ad_rules *r);
void kir_gather_batch(kir_ad_rules *r);
void kir_conv_ad(kir_ad_rules *r); /* conv_ad.c: jvp, transposes and batching */
/* The batched gather of params over operand x[0] and indices x[1] (mapped
 * at bd, -1 for neither; op_elem/idx_elem their per-example types); the
 * result is mapped at 0. */
kiln_status kir_batch_gather(kir_program *p, const kir_params *params, const kir_aval *op_elem,
                             const kir_aval *idx_elem, int64_t size, const kir_vid *x,
                             const int *bd, kir_vid *y);
/* x with its mapped axis (at bd, of `size`; bd -1: not mapped, then
 * broadcast) moved to the front, as [size, *elem's shape] where elem is the
 * per-example type: a mapped operand with size-1 or missing (rank 0) dims
 * is broadcast up to elem's shape as well. */
kiln_status kir_batch_front(kir_program *p, kir_vid x, int bd, int64_t size, const kir_aval *elem,
                            kir_vid *out);
/* Every entry of d plus one (the mapped axis went in front). */
void kir_batch_shift(kir_dims *d);
/* d shifted by one with 0 put first (the mapped axis joins the list). */
kiln_status kir_batch_dims_front(kir_dims *d);
/* x with axis `from` moved to `to` (x itself if they agree). */
kiln_status kir_batch_moveaxis(kir_program *p, kir_vid x, int from, int to, kir_vid *out);
/* The jvp rule of primitives without tangents (piecewise constant, integer
 * or boolean results): every result's tangent is a symbolic zero. */
kiln_status kir_ad_jvp_zero(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                            const kir_vid *tx, kir_vid *ty);

/* ---- emitting helpers for the rules (ad_emit.c); each writes the new
 * equation's first result to *out ---- */
kiln_status kir_emit(kir_program *p, kir_prim prim, const kir_params *params, int n,
                     const kir_vid *in, kir_vid *out);
kiln_status kir_emit1(kir_program *p, kir_prim prim, kir_vid x, kir_vid *out);
kiln_status kir_emit2(kir_program *p, kir_prim prim, kir_vid a, kir_vid b, kir_vid *out);
/* A rank-0 literal of like's dtype (strong). */
kiln_status kir_emit_scalar(kir_program *p, kir_vid like, double v, kir_vid *out);
/* x (rank 0, or of aval's rank with size-1 dims) broadcast to aval's shape;
 * x itself if it already has it. */
kiln_status kir_emit_broadcast_to(kir_program *p, kir_vid x, const kir_aval *aval, kir_vid *out);
/* Zeros of aval's type. */
kiln_status kir_emit_zeros(kir_program *p, const kir_aval *aval, kir_vid *out);
/* x converted to dtype (x itself if it has it). */
kiln_status kir_emit_convert(kir_program *p, kir_vid x, kiln_dtype dtype, kir_vid *out);
/* a + b where either may be a symbolic zero (KIR_NO_VAR). */
kiln_status kir_emit_add_any(kir_program *p, kir_vid a, kir_vid b, kir_vid *out);
/* The cotangent ct of a result of shape out reduced to an operand of aval
 * `to` that the elementwise primitive broadcast implicitly (rank 0 or
 * size-1 dims): sums over the broadcast dims. */
kiln_status kir_emit_unbroadcast(kir_program *p, kir_vid ct, const kir_aval *to, kir_vid *out);
/* select_n(pred, on_false, on_true) with every operand broadcast to aval. */
kiln_status kir_emit_select(kir_program *p, kir_vid pred, kir_vid on_false, kir_vid on_true,
                            const kir_aval *aval, kir_vid *out);
/* e's primitive applied to x alone with e's params (structural rules). */
kiln_status kir_emit_like(kir_program *p, const kir_eqn *e, int n, const kir_vid *x, kir_vid *out);

#ifdef __cplusplus
}
#endif
#endif
