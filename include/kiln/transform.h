/* Transformations of kiln_funcs (JAX's jax.grad, jax.value_and_grad,
 * jax.jvp, jax.vjp). Each returns a new kiln_func that composes with jit, with the
 * other transformations and with itself (grad of grad): calling it inside a
 * trace emits the transformed program into that trace, so
 * kiln_make_jaxpr(kiln_grad(f)) prints the gradient program.
 *
 * A function's arguments are the children of its args tuple/list; argnums
 * index them. Free the returned function with kiln_func_free (f must
 * outlive it). */
#ifndef KILN_TRANSFORM_H
#define KILN_TRANSFORM_H

#include "kiln/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jax.grad(f, argnums, has_aux): f must return a float scalar (with
 * has_aux, a pair (scalar, aux)). The gradient has the structure of the
 * argument argnums[0] when num_argnums is 1, else a tuple with one entry
 * per argnum; with has_aux the result is (gradient, aux). argnums NULL
 * means (0). Differentiated arguments must have float leaves. */
kiln_status kiln_grad(const kiln_func *f, const int *argnums, int num_argnums, int has_aux,
                      kiln_func **out);
/* jax.value_and_grad: (value, gradient), or ((value, aux), gradient). */
kiln_status kiln_value_and_grad(const kiln_func *f, const int *argnums, int num_argnums,
                                int has_aux, kiln_func **out);
/* jax.jvp as a function: it takes the pair (primals, tangents) (primals the
 * args of f, tangents of the same structure and types) and returns
 * (f(primals), tangents of the outputs). */
kiln_status kiln_jvp(const kiln_func *f, kiln_func **out);
/* jax.vjp as a function: it takes the pair (primals, cotangents)
 * (cotangents of f's outputs, same structure and types) and returns
 * (f(primals), cotangents of the primals). Call it (or jit it) as many times
 * as needed, like the pullback jax.vjp returns. Integer and bool inputs get
 * float0-like cotangents (bool zeros of the input's shape); integer outputs
 * take cotangents of their own type, which are ignored. */
kiln_status kiln_vjp(const kiln_func *f, kiln_func **out);

/* jax.vmap(f, in_axes, out_axes, axis_size, axis_name). in_axes is a
 * prefix of the args tuple and out_axes of f's output: each leaf an axis
 * made by kiln_axis (negative counts from the end), each None
 * (kiln_tree_none) an unmapped subtree; NULL means kiln_axis(0) for
 * everything. The mapped size is the arguments' (they must agree), or
 * axis_size (> 0) where no argument is mapped; axis_size <= 0 means "from
 * the arguments". An output whose out_axes entry is None must not depend on
 * the mapped arguments. axis_name (may be NULL) names the axis for
 * collectives. in_axes and out_axes are copied. */
kiln_status kiln_vmap(const kiln_func *f, const kiln_tree *in_axes, const kiln_tree *out_axes,
                      int64_t axis_size, const char *axis_name, kiln_func **out);
/* jax.jacfwd / jax.jacrev (argnums a single int): the Jacobian of f with
 * respect to argument argnum, by vmap of the jvp over the inputs' standard
 * basis (jacfwd) or of the vjp over the outputs' (jacrev). Each output leaf
 * of shape S becomes the argument's tree with leaves of shape S + the input
 * leaf's shape. Inputs (and, for jacrev, outputs) must be floating. */
kiln_status kiln_jacfwd(const kiln_func *f, int argnum, kiln_func **out);
kiln_status kiln_jacrev(const kiln_func *f, int argnum, kiln_func **out);
/* jax.hessian: jacfwd(jacrev(f, argnum), argnum). */
kiln_status kiln_hessian(const kiln_func *f, int argnum, kiln_func **out);
/* jax.custom_jvp: a function that computes f but whose derivatives come
 * from jvp. jvp takes the pair (primals, tangents), primals f's args and
 * tangents of the same structure and types, and returns the pair (f's
 * outputs, their tangents); it must be linear in the tangents for reverse
 * mode. Works under jit, vmap and every transformation (higher orders
 * differentiate the rule). Values f or jvp capture from an enclosing trace
 * are constants to the rule: differentiating with respect to one is an
 * error (pass it as an argument). f and jvp must outlive the result. */
kiln_status kiln_custom_jvp(const kiln_func *f, const kiln_func *jvp, kiln_func **out);
/* jax.custom_vjp: f whose reverse-mode derivative comes from fwd and bwd.
 * fwd takes f's args and returns the pair (f's outputs, residuals), any
 * tree of arrays; bwd takes the pair (residuals, output cotangents) and
 * returns the args' cotangents (a tree of the args' structure). Forward
 * mode (kiln_jvp) of it is an error, as in JAX. */
kiln_status kiln_custom_vjp(const kiln_func *f, const kiln_func *fwd, const kiln_func *bwd,
                            kiln_func **out);
/* jax.checkpoint's policies: what reverse mode may keep from the forward
 * pass of a checkpointed function rather than recompute it. */
typedef enum kiln_remat_policy {
  KILN_REMAT_NOTHING_SAVEABLE = 0, /* recompute everything (the default) */
  KILN_REMAT_DOTS_SAVEABLE = 1,    /* keep dot_general and convolution results */
  KILN_REMAT_EVERYTHING_SAVEABLE = 2 /* keep everything: no rematerialization */
} kiln_remat_policy;
/* jax.checkpoint (remat): f, whose reverse-mode derivative recomputes f's
 * intermediate values in the backward pass instead of saving them. */
kiln_status kiln_checkpoint(const kiln_func *f, kiln_remat_policy policy, kiln_func **out);
/* jax.ad_checkpoint.saved_residuals as a function: called with f's args,
 * it returns a tuple of the values reverse mode (vjp with respect to every
 * floating leaf) saves from the forward pass for the backward pass,
 * arguments included. */
kiln_status kiln_saved_residuals(const kiln_func *f, kiln_func **out);

/* An in_axes/out_axes leaf for axis a (-KILN_MAX_RANK-1 <= a <= KILN_MAX_RANK);
 * NULL when out of range. Free it with kiln_tree_free or hand it to a
 * tree. */
kiln_tree *kiln_axis(int a);

#ifdef __cplusplus
}
#endif
#endif
