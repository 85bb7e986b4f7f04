/* Functions traced by test_jit.cc; their JAX twins are in
 * tests/golden/trace_jit.py. Written in C as a user of the API would. */
#include "jit_cases.h"

#include <stdbool.h>
#include <stddef.h>

static kiln_tree *one(kiln_val *v) { return kiln_tree_val(v); }

static kiln_tree *pair(kiln_tree *a, kiln_tree *b) {
  return kiln_tree_tuple(2, (kiln_tree *[]){a, b});
}

static kiln_tree *bcast_add(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_add(t, kiln_arg(a, 0), kiln_arg(a, 1)));
}

static kiln_tree *int_times_float(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_mul(t, kiln_arg(a, 0), kiln_scalar_f(t, 2.0)));
}

/* x reduced over axis 1, back to shape [rows, 1]. A sum of f16/bf16 runs in
 * f32, as jnp.sum computes it (its twin in trace_jit.py). */
static kiln_val *row_reduce(kiln_trace *t, kiln_val *x, int max) {
  int axis = 1;
  kiln_dtype d = kiln_val_dtype(x);
  bool half = !max && (d == KILN_F16 || d == KILN_BF16);
  kiln_val *r = max ? kiln_reduce_max(t, x, 1, &axis)
                    : kiln_reduce_sum(t, half ? kiln_convert(t, x, KILN_F32) : x, 1, &axis);
  if (half) r = kiln_convert(t, r, d);
  int64_t shape[2] = {kiln_val_shape(x)[0], 1};
  return kiln_reshape(t, r, 2, shape);
}

static kiln_tree *softmax(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  kiln_val *e = kiln_exp(t, kiln_sub(t, x, row_reduce(t, x, 1)));
  return one(kiln_div(t, e, row_reduce(t, e, 0)));
}

static kiln_tree *layernorm(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  double n = (double)kiln_val_shape(x)[1];
  kiln_val *mean = kiln_div(t, row_reduce(t, x, 0), kiln_scalar_f(t, n));
  kiln_val *c = kiln_sub(t, x, mean);
  kiln_val *var = kiln_div(t, row_reduce(t, kiln_mul(t, c, c), 0), kiln_scalar_f(t, n));
  return one(kiln_mul(t, c, kiln_rsqrt(t, kiln_add(t, var, kiln_scalar_f(t, 1e-5)))));
}

static kiln_tree *matmul(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_matmul(t, kiln_arg(a, 0), kiln_arg(a, 1)));
}

static kiln_tree *take(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_take(t, kiln_arg(a, 0), kiln_arg(a, 1), 0));
}

static kiln_tree *one_hot(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_one_hot(t, kiln_arg(a, 0), 5, KILN_F32));
}

static kiln_tree *cumsum_body(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *c = kiln_add(t, kiln_arg(a, 0), kiln_arg(a, 1));
  return pair(one(c), one(kiln_mul(t, c, kiln_scalar_f(t, 2.0))));
}

static kiln_tree *scan_cumsum(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_func *f = NULL;
  if (kiln_func_new(cumsum_body, NULL, "cumsum_body", &f)) return NULL;
  kiln_tree *init = one(kiln_scalar(t, KILN_F32, 0));
  kiln_tree *out = kiln_scan(t, f, init, kiln_tree_child(a, 0), -1, 0);
  kiln_tree_free(init);
  kiln_func_free(f);
  return out;
}

static kiln_tree *count_cond(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_lt(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_i(t, 1000)));
}

static kiln_tree *count_body(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *v = kiln_tree_leaf_get(a)->u.val;
  return one(kiln_add(t, kiln_mul(t, v, kiln_scalar_i(t, 2)), kiln_scalar_i(t, 1)));
}

static kiln_tree *with_funcs(kiln_trace *t, kiln_fn f1, kiln_fn f2,
                             kiln_tree *(*use)(kiln_trace *, kiln_func *, kiln_func *, void *),
                             void *user) {
  kiln_func *a = NULL, *b = NULL;
  kiln_tree *out = NULL;
  if (!kiln_func_new(f1, NULL, "f1", &a) && (!f2 || !kiln_func_new(f2, NULL, "f2", &b)))
    out = use(t, a, b, user);
  kiln_func_free(a);
  kiln_func_free(b);
  return out;
}

static kiln_tree *use_while(kiln_trace *t, kiln_func *c, kiln_func *b, void *user) {
  return kiln_while(t, c, b, user);
}

static kiln_tree *while_count(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return with_funcs(t, count_cond, count_body, use_while, (void *)kiln_tree_child(a, 0));
}

static kiln_tree *times2(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_mul(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_f(t, 2.0)));
}

static kiln_tree *minus1(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_sub(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_f(t, 1.0)));
}

static kiln_tree *use_cond(kiln_trace *t, kiln_func *yes, kiln_func *no, void *user) {
  kiln_val *p = kiln_scalar(t, KILN_BOOL, 1);
  return kiln_cond(t, p, yes, no, user);
}

static kiln_tree *cond_true(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return with_funcs(t, times2, minus1, use_cond, (void *)kiln_tree_child(a, 0));
}

static kiln_tree *fori_body(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *i = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *v = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return one(kiln_add(t, v, kiln_convert(t, i, KILN_F32)));
}

static kiln_tree *use_fori(kiln_trace *t, kiln_func *body, kiln_func *unused, void *user) {
  (void)unused;
  return kiln_fori_loop(t, 0, 5, body, user);
}

static kiln_tree *fori(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return with_funcs(t, fori_body, NULL, use_fori, (void *)kiln_tree_child(a, 0));
}

static kiln_tree *plus1(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_add(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_f(t, 1.0)));
}

static kiln_tree *square(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *v = kiln_tree_leaf_get(a)->u.val;
  return one(kiln_mul(t, v, v));
}

static kiln_tree *negate(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_neg(t, kiln_tree_leaf_get(a)->u.val));
}

static kiln_tree *switch3(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_func *f[3] = {NULL, NULL, NULL};
  kiln_tree *out = NULL;
  if (!kiln_func_new(plus1, NULL, "plus1", &f[0]) && !kiln_func_new(square, NULL, "square", &f[1]) &&
      !kiln_func_new(negate, NULL, "negate", &f[2]))
    out = kiln_switch(t, kiln_arg(a, 0), 3, (const kiln_func *const *)f, kiln_tree_child(a, 1));
  for (int i = 0; i < 3; i++) kiln_func_free(f[i]);
  return out;
}

static kiln_tree *sort(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *idx = NULL;
  kiln_sort(t, kiln_arg(a, 0), 0, &idx); /* argsort: the permutation of a stable sort */
  return pair(one(kiln_sort(t, kiln_arg(a, 0), 0, NULL)), one(idx));
}

static kiln_tree *argmax(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_argmax(t, kiln_arg(a, 0), 1, KILN_I32));
}

static kiln_tree *cumsum_rev(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  return one(kiln_cumsum(t, kiln_arg(a, 0), 0, 1));
}

static kiln_tree *int_ops(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *y = kiln_arg(a, 1);
  kiln_val *shl = kiln_shift_left(t, x, kiln_scalar(t, KILN_I32, 3));
  kiln_val *mixed = kiln_add(t, kiln_mul(t, x, kiln_scalar_i(t, 0)), kiln_and(t, x, y));
  return kiln_tree_tuple(4, (kiln_tree *[]){one(kiln_div(t, x, y)), one(kiln_rem(t, x, y)),
                                           one(shl), one(mixed)});
}

static kiln_tree *structure(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  int64_t lo[2] = {1, 0}, hi[2] = {0, 2}, in[2] = {0, 1};
  kiln_val *p = kiln_pad(t, x, kiln_scalar(t, KILN_F32, -1), lo, hi, in);
  int64_t start[2] = {0, 1}, limit[2] = {3, 7}, strides[2] = {1, 2};
  kiln_val *s = kiln_slice(t, p, start, limit, strides);
  int dim0 = 0;
  kiln_val *r = kiln_rev(t, s, 1, &dim0);
  int64_t ones_shape[2] = {3, 3};
  kiln_val *parts[2] = {kiln_transpose(t, r, NULL), kiln_full(t, KILN_F32, 2, ones_shape, 1.0)};
  return one(kiln_concatenate(t, 2, parts, 1));
}

static kiln_tree *reduce_axes(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  int axes02[2] = {0, 2}, axis1 = 1;
  return pair(one(kiln_reduce_sum(t, kiln_arg(a, 0), 2, axes02)),
              one(kiln_reduce_max(t, kiln_arg(a, 0), 1, &axis1)));
}

/* The body reads w, a value of the enclosing trace: a capture. */
static kiln_tree *closure_body(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *w = u;
  kiln_val *c = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *v = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return pair(one(kiln_add(t, c, kiln_mul(t, v, w))), one(c));
}

static kiln_tree *closure_scan(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_func *f = NULL;
  if (kiln_func_new(closure_body, kiln_arg(a, 1), "closure_body", &f)) return NULL;
  kiln_tree *init = one(kiln_scalar(t, KILN_F32, 0));
  kiln_tree *out = kiln_scan(t, f, init, kiln_tree_child(a, 0), -1, 0);
  kiln_tree_free(init);
  kiln_func_free(f);
  return out;
}

static kiln_tree *select_clamp(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  kiln_val *clipped = kiln_clamp(t, kiln_scalar_f(t, -1.0), x, kiln_scalar_f(t, 1.0));
  kiln_val *relu = kiln_where(t, kiln_gt(t, x, kiln_scalar_i(t, 0)), x, kiln_scalar_f(t, 0.0));
  return pair(one(clipped), one(relu));
}

const jit_case kJitCases[] = {
    {"bcast_add", bcast_add},       {"int_times_float", int_times_float},
    {"half_mix", bcast_add},        {"softmax", softmax},
    {"layernorm", layernorm},       {"matmul", matmul},
    {"batched_matmul", matmul},     {"take", take},
    {"one_hot", one_hot},           {"scan_cumsum", scan_cumsum},
    {"while_count", while_count},   {"cond_true", cond_true},
    {"fori", fori},                 {"switch", switch3},
    {"sort", sort},                 {"argmax", argmax},
    {"cumsum_rev", cumsum_rev},     {"int_ops", int_ops},
    {"structure", structure},       {"reduce_axes", reduce_axes},
    {"closure_scan", closure_scan}, {"select_clamp", select_clamp},
    {NULL, NULL},
};
