/* Tracing: a C function over pytrees of traced values is recorded into
 * kiln's IR. Ops follow numpy-style broadcasting and JAX's type promotion at
 * this level (the IR itself keeps explicit broadcast_in_dim and converts).
 *
 * Errors are sticky: the first failing op keeps its message (op name, operand
 * shapes and dtypes) on the trace, returns NULL, and every later op given a
 * NULL operand (or called on a failed trace) returns NULL too. So user code
 * reads like math and the trace reports the error once. */
#ifndef KILN_TRACE_H
#define KILN_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/array.h"
#include "kiln/dtype.h"
#include "kiln/status.h"
#include "kiln/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_trace kiln_trace;
typedef struct kiln_func kiln_func;

/* A user function: leaves of `args` are traced values (KILN_LEAF_VAL). It
 * returns a new tree of traced values (or arrays, captured as constants);
 * NULL means failure (the trace's sticky error, or one set by the function
 * through kiln_trace_fail). */
typedef kiln_tree *(*kiln_fn)(kiln_trace *t, const kiln_tree *args, void *user);

kiln_status kiln_func_new(kiln_fn fn, void *user, const char *name, kiln_func **out);
void kiln_func_free(kiln_func *f);
const char *kiln_func_name(const kiln_func *f);
/* Calls f inside the current trace (its equations are inlined). */
kiln_tree *kiln_call(kiln_trace *t, const kiln_func *f, const kiln_tree *args);

/* The trace's first error (KILN_OK if none) and its message. A failed trace
 * also makes its message the thread's kiln_last_error(), as every op that
 * returns NULL on it does. */
kiln_status kiln_trace_status(const kiln_trace *t);
const char *kiln_trace_error(const kiln_trace *t);
/* Records a user-level error on the trace (kept only if it is the first). */
void kiln_trace_fail(kiln_trace *t, kiln_status s, const char *msg);

/* ---- abstract values ---- */
typedef struct kiln_aval {
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int weak; /* JAX's weak type */
} kiln_aval;

kiln_status kiln_val_aval(const kiln_val *v, kiln_aval *out);
kiln_dtype kiln_val_dtype(const kiln_val *v);
int kiln_val_rank(const kiln_val *v);
const int64_t *kiln_val_shape(const kiln_val *v);

/* ---- constants ---- */
kiln_val *kiln_const_array(kiln_trace *t, kiln_array *a); /* captured: a program constant */
kiln_val *kiln_scalar_f(kiln_trace *t, double v);        /* weak float */
kiln_val *kiln_scalar_i(kiln_trace *t, int64_t v);       /* weak int */
kiln_val *kiln_scalar(kiln_trace *t, kiln_dtype dtype, double v); /* strong */
kiln_val *kiln_full(kiln_trace *t, kiln_dtype dtype, int rank, const int64_t *shape, double v);
kiln_val *kiln_iota(kiln_trace *t, kiln_dtype dtype, int rank, const int64_t *shape, int dimension);

/* ---- elementwise ops (lax semantics; binary ones promote and broadcast) ----
 * kiln/ops.def, written by the build from the IR's primitive table and
 * installed beside this header, lists every generated builder as
 * KILN_UNARY_OP(name) (kiln_<name>(t, x)) or KILN_BINARY_OP(name)
 * (kiln_<name>(t, a, b)): kiln_exp, kiln_add, kiln_lt, ... one per
 * elementwise primitive of docs/primitives.md that takes no params (the
 * list is the build's, so it is never stale here). Define both macros and
 * include it to walk the list. */
#define KILN_UNARY_OP(name) kiln_val *kiln_##name(kiln_trace *t, kiln_val *x);
#define KILN_BINARY_OP(name) kiln_val *kiln_##name(kiln_trace *t, kiln_val *a, kiln_val *b);
#include "kiln/ops.def"
#undef KILN_UNARY_OP
#undef KILN_BINARY_OP
/* jnp.round: halves to even. */
kiln_val *kiln_round(kiln_trace *t, kiln_val *x);
/* lax.integer_pow: x ** y by repeated multiplication (negative y: 1 / x ** -y,
 * floats only). */
kiln_val *kiln_integer_pow(kiln_trace *t, kiln_val *x, int64_t y);
/* lax.reduce_precision: x (float) rounded to nearest even onto a float format
 * of exponent_bits (1..11) and mantissa_bits (0..52), overflowing to inf and
 * flushing below its normal range, kept in x's dtype. */
kiln_val *kiln_reduce_precision(kiln_trace *t, kiln_val *x, int exponent_bits, int mantissa_bits);
/* lax.stop_gradient: x, seen by autodiff as a constant (zero tangent and
 * cotangent); integer and bool x is returned as it is. */
kiln_val *kiln_stop_gradient(kiln_trace *t, kiln_val *x);

/* lax.select_n: which (bool or int32) picks among n cases of one type. */
kiln_val *kiln_select_n(kiln_trace *t, kiln_val *which, int n, kiln_val *const *cases);
kiln_val *kiln_where(kiln_trace *t, kiln_val *pred, kiln_val *on_true, kiln_val *on_false);
kiln_val *kiln_clamp(kiln_trace *t, kiln_val *lo, kiln_val *x, kiln_val *hi);
kiln_val *kiln_convert(kiln_trace *t, kiln_val *x, kiln_dtype dtype);
kiln_val *kiln_bitcast(kiln_trace *t, kiln_val *x, kiln_dtype dtype);

/* ---- structure ---- */
kiln_val *kiln_broadcast_in_dim(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape,
                                const int *broadcast_dimensions);
kiln_val *kiln_broadcast_to(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape);
kiln_val *kiln_reshape(kiln_trace *t, kiln_val *x, int rank, const int64_t *shape);
kiln_val *kiln_transpose(kiln_trace *t, kiln_val *x, const int *permutation);
kiln_val *kiln_squeeze(kiln_trace *t, kiln_val *x, int n, const int *dimensions);
kiln_val *kiln_expand_dims(kiln_trace *t, kiln_val *x, int n, const int *dimensions);
kiln_val *kiln_rev(kiln_trace *t, kiln_val *x, int n, const int *dimensions);
kiln_val *kiln_slice(kiln_trace *t, kiln_val *x, const int64_t *start, const int64_t *limit,
                     const int64_t *strides /* NULL: all 1 */);
kiln_val *kiln_dynamic_slice(kiln_trace *t, kiln_val *x, kiln_val *const *starts,
                             const int64_t *sizes);
kiln_val *kiln_dynamic_update_slice(kiln_trace *t, kiln_val *x, kiln_val *update,
                                    kiln_val *const *starts);
kiln_val *kiln_concatenate(kiln_trace *t, int n, kiln_val *const *xs, int dimension);
kiln_val *kiln_pad(kiln_trace *t, kiln_val *x, kiln_val *padding_value, const int64_t *low,
                   const int64_t *high, const int64_t *interior);
/* x[indices] along `axis` (jnp.take, embedding lookup); indices are integers. */
kiln_val *kiln_take(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis);
kiln_val *kiln_take_along_axis(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis);
kiln_val *kiln_one_hot(kiln_trace *t, kiln_val *indices, int64_t num_classes, kiln_dtype dtype);
/* x with updates written at indices along axis: x.at[idx].set(u), .add(u),
 * .mul(u), .min(u), .max(u) with jnp's default mode (negative indices count
 * from the end, indices still out of range are dropped; duplicates combine
 * in index order, the last one wins for kiln_scatter). updates broadcast to
 * x.shape[:axis] + indices.shape + x.shape[axis+1:] and convert to x's
 * dtype. kiln_at_* of numpy.h take a mode. */
kiln_val *kiln_scatter(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,
                       int axis);
kiln_val *kiln_scatter_add(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,
                           int axis);
kiln_val *kiln_scatter_mul(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,
                           int axis);
kiln_val *kiln_scatter_min(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,
                           int axis);
kiln_val *kiln_scatter_max(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,
                           int axis);

/* ---- windows (lax.reduce_window_*, Flax's pooling) ---- */
/* lax's window over an operand of rank r: r window sizes; r strides, r
 * (low, high) padding pairs stored as padding[2d], padding[2d+1], r base
 * and r window dilations, each NULL for the default (1, (0, 0), 1). */
typedef struct kiln_window {
  const int64_t *dimensions;
  const int64_t *strides;
  const int64_t *padding;
  const int64_t *base_dilation;
  const int64_t *window_dilation;
} kiln_window;
kiln_val *kiln_reduce_window_sum(kiln_trace *t, kiln_val *x, const kiln_window *w);
kiln_val *kiln_reduce_window_max(kiln_trace *t, kiln_val *x, const kiln_window *w);
kiln_val *kiln_reduce_window_min(kiln_trace *t, kiln_val *x, const kiln_window *w);
/* Max-pool's gradient (lax's _select_and_scatter_add): each source element
 * (one per window) is added where its window's max (select_ge nonzero: lax.ge)
 * or min (lax.le) of operand is, ties to the first; w's dilations must be NULL. */
kiln_val *kiln_select_and_scatter_add(kiln_trace *t, kiln_val *source, kiln_val *operand,
                                      int select_ge, const kiln_window *w);
/* flax.linen.max_pool / avg_pool over x of shape (batch..., spatial[n],
 * features): n window sizes, n strides (NULL: 1), and padding "VALID" or
 * "SAME", or NULL with n (low, high) pairs in pads. avg_pool divides by the
 * window size, or (count_include_pad 0) by the count of non-padding elements. */
kiln_val *kiln_max_pool(kiln_trace *t, kiln_val *x, int n, const int64_t *window_shape,
                        const int64_t *strides, const char *padding, const int64_t *pads);
kiln_val *kiln_avg_pool(kiln_trace *t, kiln_val *x, int n, const int64_t *window_shape,
                        const int64_t *strides, const char *padding, const int64_t *pads,
                        int count_include_pad);

/* ---- reductions ---- */
kiln_val *kiln_reduce_sum(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_reduce_max(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_reduce_min(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_reduce_prod(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_reduce_and(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_reduce_or(kiln_trace *t, kiln_val *x, int n, const int *axes);
kiln_val *kiln_argmax(kiln_trace *t, kiln_val *x, int axis, kiln_dtype index_dtype);
kiln_val *kiln_argmin(kiln_trace *t, kiln_val *x, int axis, kiln_dtype index_dtype);
kiln_val *kiln_cumsum(kiln_trace *t, kiln_val *x, int axis, int reverse);
kiln_val *kiln_cumprod(kiln_trace *t, kiln_val *x, int axis, int reverse);
kiln_val *kiln_cummax(kiln_trace *t, kiln_val *x, int axis, int reverse);
kiln_val *kiln_cummin(kiln_trace *t, kiln_val *x, int axis, int reverse);
/* lax.cumlogsumexp: the running log(sum(exp(x))) along axis (floats). */
kiln_val *kiln_cumlogsumexp(kiln_trace *t, kiln_val *x, int axis, int reverse);
/* lax.optimization_barrier: outs[i] = xs[i], with no work moved across. */
kiln_status kiln_optimization_barrier(kiln_trace *t, int n, kiln_val *const *xs, kiln_val **outs);
/* Sorts x along `dimension`; with `indices` non-NULL also the permutation. */
kiln_val *kiln_sort(kiln_trace *t, kiln_val *x, int dimension, kiln_val **indices);

/* ---- dot ---- */
typedef struct kiln_dot_dims {
  int n_contract;
  int lhs_contract[KILN_MAX_RANK], rhs_contract[KILN_MAX_RANK];
  int n_batch;
  int lhs_batch[KILN_MAX_RANK], rhs_batch[KILN_MAX_RANK];
} kiln_dot_dims;
kiln_val *kiln_dot_general(kiln_trace *t, kiln_val *a, kiln_val *b, const kiln_dot_dims *dims,
                           kiln_dtype preferred /* KILN_INVALID_DTYPE: default */);
kiln_val *kiln_matmul(kiln_trace *t, kiln_val *a, kiln_val *b);

/* ---- convolution (lax.conv_general_dilated) ---- */
/* Zero-initialised fields take JAX's defaults. Arrays have one entry per
 * spatial dimension (operand rank - 2); padding holds (lo, hi) pairs. Specs
 * are JAX's strings: "NCHW"/"OIHW"/"NCHW" or "NHWC"/"HWIO"/"NHWC" (any
 * letters for spatial dims; NULL: batch/feature first, then spatial). The
 * operands must have one dtype, as lax's. */
typedef struct kiln_conv_params {
  const int64_t *window_strides;     /* NULL: 1 */
  const int64_t *padding;            /* 2 per spatial dim; NULL: 0 */
  const int64_t *lhs_dilation;       /* NULL: 1 */
  const int64_t *rhs_dilation;       /* NULL: 1 */
  const char *lhs_spec, *rhs_spec, *out_spec;
  int64_t feature_group_count;       /* 0: 1 */
  int64_t batch_group_count;         /* 0: 1 */
  kiln_dtype preferred_element_type; /* KILN_INVALID_DTYPE: the operands' */
} kiln_conv_params;
kiln_val *kiln_conv_general_dilated(kiln_trace *t, kiln_val *lhs, kiln_val *rhs,
                                    const kiln_conv_params *params);
/* NHWC input, HWIO kernel, NHWC result; padding "SAME" or "VALID" (as
 * jax.lax.conv_general_dilated's padding strings); strides NULL: 1. */
kiln_val *kiln_conv(kiln_trace *t, kiln_val *x, kiln_val *w, const int64_t *strides,
                    const char *padding);

/* ---- control flow: branches and bodies are kiln_funcs over pytrees ---- */
/* lax.switch: index (int32, clamped) picks a branch; all branches must give
 * the same output structure and types. cond is switch with a bool. */
kiln_tree *kiln_switch(kiln_trace *t, kiln_val *index, int n, const kiln_func *const *branches,
                       const kiln_tree *operands);
kiln_tree *kiln_cond(kiln_trace *t, kiln_val *pred, const kiln_func *on_true,
                     const kiln_func *on_false, const kiln_tree *operands);
/* lax.while_loop: cond(carry) -> bool scalar; body(carry) -> carry. */
kiln_tree *kiln_while(kiln_trace *t, const kiln_func *cond, const kiln_func *body,
                      const kiln_tree *init);
/* lax.fori_loop: body gets the tuple (i, carry) and returns the carry. */
kiln_tree *kiln_fori_loop(kiln_trace *t, int64_t lower, int64_t upper, const kiln_func *body,
                          const kiln_tree *init);
/* lax.scan: body gets (carry, x) and returns (carry, y); the result is the
 * tuple (carry, ys) with ys stacked along a new leading axis. xs (may be
 * None, kiln_tree_none()) is sliced along its leading axis, which every leaf
 * shares. length is lax.scan's length: -1 (None) takes it from xs's leading
 * axis; otherwise it is the number of steps, and must equal that axis when
 * xs has leaves (with xs None it is required). reverse nonzero scans from
 * the end, as reverse=True (ys keep xs's order). */
kiln_tree *kiln_scan(kiln_trace *t, const kiln_func *body, const kiln_tree *init,
                     const kiln_tree *xs, int64_t length, int reverse);
/* lax.map: f over the leading axis of xs. */
kiln_tree *kiln_map(kiln_trace *t, const kiln_func *f, const kiln_tree *xs);

/* ---- random numbers (threefry2x32, bit-identical to JAX) ---- */
/* Keys are u32[2] values (jax.random.PRNGKey's raw form). */
kiln_val *kiln_random_key(kiln_trace *t, int64_t seed);
kiln_val *kiln_random_split(kiln_trace *t, kiln_val *key, int64_t n); /* u32[n,2] */
kiln_val *kiln_random_fold_in(kiln_trace *t, kiln_val *key, kiln_val *data);
kiln_val *kiln_random_bits(kiln_trace *t, kiln_val *key, int bit_width, int rank,
                           const int64_t *shape);
kiln_val *kiln_random_uniform(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                              const int64_t *shape, double minval, double maxval);
kiln_val *kiln_random_normal(kiln_trace *t, kiln_val *key, kiln_dtype dtype, int rank,
                             const int64_t *shape);
kiln_val *kiln_random_bernoulli(kiln_trace *t, kiln_val *key, double p, int rank,
                                const int64_t *shape);

/* ---- debugging ---- */
/* jax.debug.print: formats at run time; "{}" placeholders take the values in
 * order. Printed to stderr, or to the context's print hook. */
kiln_status kiln_debug_print(kiln_trace *t, const char *fmt, int n, kiln_val *const *vals);
/* Host data handed to a host callback: C order, the dtype's storage form. */
typedef struct kiln_host_buffer {
  kiln_aval aval;
  void *data;
  size_t nbytes;
} kiln_host_buffer;
/* Called on the host at run time with the inputs' data; the outputs are
 * allocated by kiln with `result_avals` and filled by the callback (like
 * jax.pure_callback). A failing status stops the program with its message. */
typedef kiln_status (*kiln_host_fn)(void *user, int n_in, const kiln_host_buffer *in, int n_out,
                                    kiln_host_buffer *out);
kiln_status kiln_host_callback(kiln_trace *t, kiln_host_fn cb, void *user, int n_in,
                               kiln_val *const *in, int n_out, const kiln_aval *result_avals,
                               kiln_val **out);

#ifdef __cplusplus
}
#endif
#endif
