/* numpy-level traced functions (jax.numpy / jax.nn / jax.lax semantics),
 * built from kiln's lax-level ops. Operands are promoted as jnp promotes
 * (weak types, x64 enabled); errors are sticky on the trace as for every op
 * (see trace.h) and name the op, shapes and dtypes.
 *
 * Axes: `n` axes in `axes` (negative count from the end); n = KILN_ALL_AXES
 * reduces over every axis (numpy's axis=None). */
#ifndef KILN_NUMPY_H
#define KILN_NUMPY_H

#include "kiln/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ALL_AXES (-1)

/* ---- reductions (jnp.sum, ...); keepdims keeps reduced axes as size 1 ----
 * sum/prod accumulate bool and narrow integers as i64 (u64 for unsigned) and
 * f16/bf16 in f32, returning f16/bf16, as jnp does. */
kiln_val *kiln_sum(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims);
kiln_val *kiln_prod(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims);
kiln_val *kiln_amax(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims);
kiln_val *kiln_amin(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims);
/* Integers and bool give f32 (f64 for 64-bit integers), as jnp's to_inexact. */
kiln_val *kiln_mean(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims);
/* Divides by N - ddof. */
kiln_val *kiln_var(kiln_trace *t, kiln_val *x, int n, const int *axes, int ddof, int keepdims);
kiln_val *kiln_std(kiln_trace *t, kiln_val *x, int n, const int *axes, int ddof, int keepdims);

/* ---- jax.nn / jax.scipy.special; `where` (bool, broadcast to x) may be
 * NULL. Stable as JAX's: the maximum is subtracted first. ---- */
kiln_val *kiln_logsumexp(kiln_trace *t, kiln_val *x, int n, const int *axes, int keepdims,
                         kiln_val *where);
kiln_val *kiln_softmax(kiln_trace *t, kiln_val *x, int axis, kiln_val *where);
kiln_val *kiln_log_softmax(kiln_trace *t, kiln_val *x, int axis, kiln_val *where);

/* ---- elementwise ---- */
/* jnp.clip: max(lo, x) then min(hi, .); lo or hi may be NULL. */
kiln_val *kiln_clip(kiln_trace *t, kiln_val *x, kiln_val *lo, kiln_val *hi);
/* numpy's sign rules: the quotient rounds toward -inf; the remainder takes
 * the divisor's sign (integers and floats). */
kiln_val *kiln_floor_divide(kiln_trace *t, kiln_val *a, kiln_val *b);
kiln_val *kiln_remainder(kiln_trace *t, kiln_val *a, kiln_val *b);

/* ---- indexing ---- */
typedef enum kiln_index_mode {
  /* Out of range gives the fill value: NaN for floats, the minimum of a
   * signed integer type, the maximum of an unsigned one, true for bool.
   * Negative indices in [-n, 0) count from the end. jnp's default. */
  KILN_INDEX_FILL = 0,
  KILN_INDEX_CLIP,              /* clamped into [0, n-1] */
  KILN_INDEX_WRAP,              /* taken modulo n */
  KILN_INDEX_PROMISE_IN_BOUNDS, /* the caller promises range (jnp.take itself lacks it) */
} kiln_index_mode;
/* jnp.take(x, indices, axis, mode) and jnp.take_along_axis(..., mode). For
 * take, clip mode clamps negative indices to 0 as jnp does; take_along_axis
 * counts them from the end first (kiln_take / kiln_take_along_axis of trace.h
 * are the latter, in clip mode). take_along_axis refuses wrap, as jnp does. */
kiln_val *kiln_take_mode(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis,
                         kiln_index_mode mode);
kiln_val *kiln_take_along_axis_mode(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis,
                                    kiln_index_mode mode);
/* x.at[indices (along axis)].set/add/mul/min/max(updates, mode=...,
 * unique_indices=..., indices_are_sorted=...): the kiln_scatter* of trace.h
 * with a mode (KILN_INDEX_FILL drops indices out of range, jnp's default;
 * CLIP clamps them; PROMISE_IN_BOUNDS trusts them; WRAP is refused, jnp has
 * no wrapping scatter) and flags, which promise what JAX's params promise
 * (the gradient of a scatter-mul in its updates needs unique indices). */
enum { KILN_SCATTER_UNIQUE_INDICES = 1, KILN_SCATTER_INDICES_SORTED = 2 };
kiln_val *kiln_at_set(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis, kiln_val *updates,
                      kiln_index_mode mode, int flags);
kiln_val *kiln_at_add(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis, kiln_val *updates,
                      kiln_index_mode mode, int flags);
kiln_val *kiln_at_mul(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis, kiln_val *updates,
                      kiln_index_mode mode, int flags);
kiln_val *kiln_at_min(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis, kiln_val *updates,
                      kiln_index_mode mode, int flags);
kiln_val *kiln_at_max(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis, kiln_val *updates,
                      kiln_index_mode mode, int flags);
/* jnp.argsort(x, axis, stable=True, descending): i32 indices; ties keep
 * their order in both directions. */
kiln_val *kiln_argsort(kiln_trace *t, kiln_val *x, int axis, int descending);
/* lax.top_k over the last axis: the k largest values, in descending order
 * (ties: lower index first), and their i32 indices in *indices if non-NULL. */
kiln_val *kiln_top_k(kiln_trace *t, kiln_val *x, int64_t k, kiln_val **indices);

/* ---- shapes ---- */
/* jnp.stack(xs, axis): n arrays of one shape joined along a new axis
 * (-(rank+1) <= axis <= rank), promoted as jnp.concatenate promotes. */
kiln_val *kiln_stack(kiln_trace *t, int n, kiln_val *const *xs, int axis);
/* jnp.tile(x, reps) with numpy's rule: the shorter of x's shape and reps is
 * padded with leading 1s; reps[i] >= 0. */
kiln_val *kiln_tile(kiln_trace *t, kiln_val *x, int n, const int64_t *reps);
/* numpy's basic indexing with static indices, written as between Python's
 * brackets: kiln_getitem(t, x, "1, 2:5, ::-1, ..., None") is
 * x[1, 2:5, ::-1, ..., None]. Items are integers (negative count from the
 * end; out of bounds is KILN_ERR_OUT_OF_RANGE, as JAX's IndexError), slices
 * start:stop:step (any part optional; Python's clamping; a negative step
 * walks backwards; step 0 is an error), at most one "..." and "None"
 * (a new axis of size 1); axes left over are taken whole. "" is x[()].
 * Built from rev, slice and reshape, so it differentiates and batches. */
kiln_val *kiln_getitem(kiln_trace *t, kiln_val *x, const char *index);
/* x[i] along the leading axis (kiln_getitem of "i"). */
kiln_val *kiln_index(kiln_trace *t, kiln_val *x, int64_t i);

/* ---- linear algebra ---- */
/* jnp.linalg.norm(x, ord, axis, keepdims) over n axes (KILN_ALL_AXES: axis
 * None). ord is spelt as in Python: NULL (None), "fro", "nuc", or a number
 * ("1", "2", "-1", "0", "inf", "-inf", "3"). Axis None with ord None is the
 * 2-norm of the flattened x at any rank; one axis gives a vector norm (2 by
 * default; inf/-inf the max/min of |x|, 0 the count of nonzeros, p
 * sum(|x|^p)^(1/p)); two axes a matrix norm (Frobenius by default; 1/-1
 * the max/min column sum of |x|, inf/-inf the max/min row sum). 2, -2 and
 * "nuc" need singular values: KILN_ERR_UNIMPLEMENTED. x is promoted to
 * inexact first (integers to f32, 64-bit ones to f64). */
kiln_val *kiln_norm(kiln_trace *t, kiln_val *x, const char *ord, int n, const int *axes,
                    int keepdims);
/* jnp.einsum for two operands: "ij,jk->ik", "bij,bjk->bik", "i,j->ij",
 * "ij,ij->", "ij,kj->ki", implicit output ("ij,jk"). Labels are letters; a
 * label repeated within one operand, "..." and other operand counts are
 * KILN_ERR_ARGUMENT naming the spec. */
kiln_val *kiln_einsum(kiln_trace *t, const char *spec, kiln_val *a, kiln_val *b);
/* kiln_matmul (trace.h) follows jnp.matmul: 1-D operands are promoted to
 * matrices and the added axis removed, leading batch axes broadcast. */

#ifdef __cplusplus
}
#endif
#endif
