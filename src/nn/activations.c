/* jax.nn's activations that users reach for first: relu (with JAX's
 * custom_jvp, so its derivative at 0 is 0), gelu (tanh approximation or
 * exact, as jax.nn.gelu) and silu. */
#include <pthread.h>
#include <stdio.h>
#include "nn/nn.h"
#include "kiln/transform.h"

/* The value of a one-leaf result tree (freed). */
static kiln_val *knn_single(kiln_tree *out) {
  const kiln_leaf *l = out && kiln_tree_kind(out) == KILN_NODE_LEAF ? kiln_tree_leaf_get(out) : NULL;
  kiln_val *v = l && l->kind == KILN_LEAF_VAL ? l->u.val : NULL;
  kiln_tree_free(out);
  return v;
}

/* relu's primal: jnp.maximum(x, 0). */
static kiln_tree *relu_primal(kiln_trace *t, const kiln_tree *args, void *user) {
  (void)user;
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_max(t, x, kiln_scalar_f(t, 0)));
}

/* relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0))):
 * ((x,), (g,)) -> (relu(x), select(x > 0, g, 0)). */
static kiln_tree *relu_jvp(kiln_trace *t, const kiln_tree *args, void *user) {
  (void)user;
  kiln_val *x = kiln_arg_path(args, "[0][0]"), *g = kiln_arg_path(args, "[1][0]");
  kiln_val *y = kiln_max(t, x, kiln_scalar_f(t, 0));
  kiln_val *zero = g ? kiln_full(t, kiln_val_dtype(g), kiln_val_rank(g), kiln_val_shape(g), 0) : NULL;
  kiln_val *dy = kiln_where(t, kiln_gt(t, x, kiln_scalar_f(t, 0)), g, zero);
  kiln_val *out[2] = {y, dy};
  return kiln_tuple_of(2, out);
}

/* The custom_jvp function, made once for the process (as jax.nn.relu is a
 * module-level function); it is never freed. */
static struct {
  pthread_once_t once;
  kiln_func *primal, *jvp, *relu;
  kiln_status status;
  char error[256];
} knn_relu_fn = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, KILN_OK, ""};

static void knn_relu_make(void) {
  kiln_status st = kiln_func_new(relu_primal, NULL, "relu", &knn_relu_fn.primal);
  if (!st) st = kiln_func_new(relu_jvp, NULL, "relu_jvp", &knn_relu_fn.jvp);
  if (!st) st = kiln_custom_jvp(knn_relu_fn.primal, knn_relu_fn.jvp, &knn_relu_fn.relu);
  if (st) snprintf(knn_relu_fn.error, sizeof knn_relu_fn.error, "%s", kiln_last_error());
  knn_relu_fn.status = st;
}

kiln_val *kiln_relu(kiln_trace *t, kiln_val *x) {
  static const char op[] = "kiln_relu";
  if (!knn_given(t, op, "x", x)) return NULL;
  kiln_dtype d = kiln_val_dtype(x);
  /* Integers have no derivative to customise: jnp.maximum as it is. */
  if (!kiln_dtype_is_float(d)) return kiln_max(t, x, kiln_scalar_f(t, 0));
  pthread_once(&knn_relu_fn.once, knn_relu_make);
  if (knn_relu_fn.status) {
    kiln_trace_fail(t, knn_relu_fn.status, knn_relu_fn.error);
    return NULL;
  }
  kiln_tree *arg = kiln_tree_val(x);
  kiln_tree *args = arg ? kiln_tree_tuple(1, &arg) : NULL;
  kiln_val *y = args ? knn_single(kiln_call(t, knn_relu_fn.relu, args)) : NULL;
  kiln_tree_free(args);
  if (!y && kiln_trace_status(t) == KILN_OK)
    kiln_trace_fail(t, KILN_ERR_INTERNAL, "kiln_relu: the custom_jvp call gave no value");
  return y;
}

/* x as jnp's promote_args_inexact makes it: integers and bool become the
 * default float (f32; f64 for 64-bit integers, as x64 is on). */
static kiln_val *knn_inexact(kiln_trace *t, kiln_val *x) {
  kiln_dtype d = kiln_val_dtype(x);
  if (kiln_dtype_is_float(d)) return x;
  int wide = d == KILN_I64 || d == KILN_U64;
  return kiln_convert(t, x, wide ? KILN_F64 : KILN_F32);
}

/* A constant of x's dtype (np.float32(c) in JAX's formulas): strong, so
 * that it does not widen x. */
static kiln_val *knn_const(kiln_trace *t, kiln_val *x, double c) {
  return kiln_scalar(t, kiln_val_dtype(x), c);
}

kiln_val *kiln_gelu(kiln_trace *t, kiln_val *x, int approximate) {
  if (!knn_given(t, "kiln_gelu", "x", x)) return NULL;
  x = knn_inexact(t, x);
  if (!x) return NULL;
  if (approximate) {
    /* 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) * x; the
     * Python floats 0.5, 1.0 and 0.044715 are weak. */
    kiln_val *inner = kiln_add(t, x, kiln_mul(t, kiln_scalar_f(t, 0.044715), kiln_integer_pow(t, x, 3)));
    kiln_val *th = kiln_tanh(t, kiln_mul(t, knn_const(t, x, 0.79788456080286535588) /* sqrt(2/pi) */, inner));
    kiln_val *cdf = kiln_mul(t, kiln_scalar_f(t, 0.5), kiln_add(t, kiln_scalar_f(t, 1.0), th));
    return kiln_mul(t, x, cdf);
  }
  /* 0.5 * x * erfc(-x * sqrt(1/2)) */
  kiln_val *e = kiln_erfc(t, kiln_mul(t, kiln_neg(t, x), knn_const(t, x, 0.70710678118654752440) /* sqrt(1/2) */));
  return kiln_mul(t, kiln_mul(t, kiln_scalar_f(t, 0.5), x), e);
}

kiln_val *kiln_silu(kiln_trace *t, kiln_val *x) {
  /* As jax.nn.silu, no promotion: lax.logistic refuses integers. */
  if (!knn_given(t, "kiln_silu", "x", x)) return NULL;
  return kiln_mul(t, x, kiln_logistic(t, x));
}
