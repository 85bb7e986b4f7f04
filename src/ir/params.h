/* The parameters each equation carries inline (their field lists are in
 * params.c). Part of ir.h, the ir module's only door, which includes it
 * where it stands: include ir/ir.h, never this file alone. */
#ifndef KILN_IR_PARAMS_H
#define KILN_IR_PARAMS_H

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
/* lax.integer_pow's static exponent. */
typedef struct kir_p_integer_pow { int64_t y; } kir_p_integer_pow;
/* lax.reduce_precision: the float format to round to (exponent >= 1 bits). */
typedef struct kir_p_reduce_precision {
  int64_t exponent_bits, mantissa_bits;
} kir_p_reduce_precision;
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
typedef struct kir_p_top_k { int64_t axis; int64_t k; } kir_p_top_k;
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
/* device_put: mesh as shard_map's, spec one partition spec ("data, None"). */
typedef struct kir_p_device_put {
  const char *mesh;
  const char *spec;
} kir_p_device_put;
/* reduce_window_{sum,max,min} (kind WINDOW), select_and_gather_add
 * (SELECT_GATHER: WINDOW's fields and select_prim) and select_and_scatter_add
 * (SELECT_SCATTER: no dilations). padding holds (lo, hi) pairs (interior
 * unused); select_prim is KIR_PRIM_GE or KIR_PRIM_LE; dilations with n == 0
 * (a kind without them) mean all ones. */
typedef struct kir_p_window {
  kir_sizes base_dilation;
  kir_padding padding;
  int64_t select_prim;
  kir_sizes window_dilation, window_dimensions, window_strides;
} kir_p_window;
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
  X(INTEGER_POW, integer_pow, kir_p_integer_pow)       \
  X(REDUCE_PRECISION, reduce_precision, kir_p_reduce_precision) \
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
  X(SHARD_MAP, shard_map, kir_p_shard_map)          \
  X(WINDOW, window, kir_p_window)                    \
  X(SELECT_GATHER, select_gather, kir_p_window)      \
  X(SELECT_SCATTER, select_scatter, kir_p_window)    \
  X(TOP_K, top_k, kir_p_top_k)                      \
  X(DEVICE_PUT, device_put, kir_p_device_put)       \
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
  KIR_FIELD_PAIRS,        /* kir_padding printed as (lo, hi) pairs, interior 0 */
  KIR_FIELD_PRIM,         /* int64_t holding a kir_prim, printed by name */
  KIR_FIELD_CONV_DIMS     /* kir_conv_dims */
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

#endif
