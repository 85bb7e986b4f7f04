/* Functions traced by test_numpy.cc; their JAX twins are in
 * tests/golden/numpy_api.py. Written as a user of kiln.h would. */
#include "numpy_cases.h"

#include "kiln/kiln.h"

#define TUPLE(...) \
  kiln_tuple_of(sizeof((kiln_val *[]){__VA_ARGS__}) / sizeof(kiln_val *), (kiln_val *[]){__VA_ARGS__})
#define AXES(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}
#define ALL KILN_ALL_AXES, NULL

static kiln_tree *reductions(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  return TUPLE(kiln_sum(t, x, AXES(1), 1), kiln_sum(t, x, ALL, 0), kiln_prod(t, x, AXES(0), 0),
               kiln_amax(t, x, AXES(0, 2), 1), kiln_amin(t, x, AXES(-1), 0));
}

static kiln_tree *int_reductions(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  kiln_val *x3 = kiln_slice(t, x, (int64_t[]){0, 0}, (int64_t[]){3, 3}, NULL);
  return TUPLE(kiln_sum(t, x, ALL, 0), kiln_sum(t, x, AXES(0), 1), kiln_amax(t, x, AXES(1), 0),
               kiln_prod(t, x3, AXES(1), 0));
}

static kiln_tree *bf16_reductions(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  return TUPLE(kiln_sum(t, x, AXES(-1), 0), kiln_mean(t, x, AXES(0), 1), kiln_var(t, x, AXES(1), 0, 0));
}

static kiln_tree *moments(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  return TUPLE(kiln_mean(t, x, AXES(1), 0), kiln_mean(t, x, ALL, 0), kiln_var(t, x, AXES(0), 0, 0),
               kiln_std(t, x, AXES(0, 1), 1, 1), kiln_std(t, x, ALL, 0, 0));
}

static kiln_tree *int_moments(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  return TUPLE(kiln_mean(t, x, AXES(0), 0), kiln_var(t, x, ALL, 0, 0), kiln_std(t, x, AXES(1), 1, 0));
}

static kiln_tree *logsumexp(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *m = kiln_arg(a, 1);
  return TUPLE(kiln_logsumexp(t, x, AXES(1), 0, NULL), kiln_logsumexp(t, x, ALL, 1, NULL),
               kiln_logsumexp(t, x, AXES(0, 1), 0, NULL), kiln_logsumexp(t, x, AXES(1), 1, m));
}

static kiln_tree *softmax(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *m = kiln_arg(a, 1);
  return TUPLE(kiln_softmax(t, x, -1, NULL), kiln_softmax(t, x, 0, NULL), kiln_softmax(t, x, -1, m),
               kiln_log_softmax(t, x, -1, NULL), kiln_log_softmax(t, x, 0, NULL),
               kiln_log_softmax(t, x, -1, m));
}

static kiln_tree *softmax_bf16(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0);
  return TUPLE(kiln_softmax(t, x, -1, NULL), kiln_log_softmax(t, x, 0, NULL));
}

static kiln_tree *divmod(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *i = kiln_arg(a, 0), *j = kiln_arg(a, 1), *f = kiln_arg(a, 2), *g = kiln_arg(a, 3);
  return TUPLE(kiln_floor_divide(t, i, j), kiln_remainder(t, i, j), kiln_floor_divide(t, f, g),
               kiln_remainder(t, f, g), kiln_remainder(t, i, kiln_scalar(t, KILN_I32, 0)),
               kiln_floor_divide(t, i, kiln_scalar_i(t, 3)), kiln_remainder(t, f, kiln_scalar_f(t, 0.75)));
}

static kiln_tree *take(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *xi = kiln_arg(a, 1), *xu = kiln_arg(a, 2), *i = kiln_arg(a, 3);
  kiln_val *i2 = kiln_sub(t, kiln_remainder(t, kiln_reshape(t, i, 2, (int64_t[]){1, 7}), kiln_scalar_i(t, 3)),
                          kiln_scalar_i(t, 1));
  return TUPLE(kiln_take_mode(t, x, i, 0, KILN_INDEX_FILL), kiln_take_mode(t, x, i, 0, KILN_INDEX_CLIP),
               kiln_take_mode(t, x, i, 0, KILN_INDEX_WRAP), kiln_take_mode(t, xi, i, 1, KILN_INDEX_FILL),
               kiln_take_mode(t, xu, i, 0, KILN_INDEX_FILL), kiln_take_mode(t, x, i2, 1, KILN_INDEX_FILL));
}

static kiln_tree *take_along(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *i = kiln_arg(a, 1);
  return TUPLE(kiln_take_along_axis_mode(t, x, i, 1, KILN_INDEX_FILL),
               kiln_take_along_axis_mode(t, x, i, 1, KILN_INDEX_CLIP),
               kiln_take_along_axis_mode(t, x, kiln_remainder(t, i, kiln_scalar_i(t, 5)), 1,
                                         KILN_INDEX_PROMISE_IN_BOUNDS));
}

static kiln_tree *sort(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *xi = kiln_arg(a, 1), *ix = NULL, *ixi = NULL;
  kiln_val *top = kiln_top_k(t, x, 3, &ix);
  kiln_val *topi = kiln_top_k(t, kiln_transpose(t, xi, (int[]){1, 0}), 2, &ixi);
  return TUPLE(kiln_argsort(t, x, 1, 0), kiln_argsort(t, x, 1, 1), kiln_argsort(t, xi, 0, 1), top, ix,
               topi, ixi);
}

static kiln_tree *einsum(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *A = kiln_arg(a, 0), *B = kiln_arg(a, 1), *C = kiln_arg(a, 2), *v = kiln_arg(a, 3),
           *w = kiln_arg(a, 4), *BB = kiln_arg(a, 5);
  kiln_val *w4 = kiln_slice(t, w, (int64_t[]){0}, (int64_t[]){4}, NULL);
  return TUPLE(kiln_einsum(t, "ij,jk->ik", A, B), kiln_einsum(t, "bij,bjk->bik", C, BB),
               kiln_einsum(t, "i,j->ij", v, w), kiln_einsum(t, "ij,ij->", A, A),
               kiln_einsum(t, "ij,kj->ki", A, A), kiln_einsum(t, "ij,jk", A, B),
               kiln_einsum(t, "bij,jk->kbi", C, B), kiln_einsum(t, "ij,jk->i", A, B),
               kiln_einsum(t, "ij,j->ji", A, w4));
}

static kiln_tree *matmul(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *v3 = kiln_arg(a, 0), *m23 = kiln_arg(a, 1), *m34 = kiln_arg(a, 2), *m45 = kiln_arg(a, 3),
           *b2234 = kiln_arg(a, 4), *b245 = kiln_arg(a, 5), *b2134 = kiln_arg(a, 6),
           *b542 = kiln_arg(a, 7);
  kiln_val *b234 = kiln_reshape(t, b2134, 3, (int64_t[]){2, 3, 4});
  return TUPLE(kiln_matmul(t, v3, m34), kiln_matmul(t, m23, v3), kiln_matmul(t, v3, v3),
               kiln_matmul(t, b2234, m45), kiln_matmul(t, m34, b245), kiln_matmul(t, b2134, b542),
               kiln_matmul(t, v3, b234), kiln_matmul(t, kiln_arg(a, 8), kiln_arg(a, 9)));
}

static kiln_tree *misc(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *i = kiln_arg(a, 1);
  return TUPLE(kiln_clip(t, x, kiln_scalar_f(t, -0.5), kiln_scalar_f(t, 0.5)),
               kiln_clip(t, x, NULL, kiln_scalar_f(t, 0.0)),
               kiln_clip(t, i, kiln_scalar_i(t, -3), kiln_scalar_i(t, 3)),
               kiln_clip(t, i, kiln_scalar_i(t, 0), NULL), kiln_one_hot(t, i, 4, KILN_F32),
               kiln_where(t, kiln_gt(t, x, kiln_scalar_i(t, 0)), x, kiln_scalar_f(t, 0.0)));
}

static kiln_tree *narrow_types(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *m = kiln_arg(a, 0), *x = kiln_arg(a, 1), *y = kiln_arg(a, 2), *i = kiln_arg(a, 3);
  return TUPLE(kiln_sum(t, m, AXES(0), 0), kiln_mean(t, m, ALL, 0), kiln_floor_divide(t, x, y),
               kiln_remainder(t, x, y), kiln_logsumexp(t, i, AXES(1), 0, NULL),
               kiln_softmax(t, i, -1, NULL), kiln_prod(t, x, AXES(1), 0));
}

static kiln_tree *dynamic_slice(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_arg(a, 0), *rc[2] = {kiln_arg(a, 1), kiln_arg(a, 2)};
  kiln_val *lit[2] = {kiln_scalar(t, KILN_I32, -1), kiln_scalar(t, KILN_I32, -2)};
  kiln_val *far[2] = {kiln_scalar(t, KILN_I32, -9), kiln_scalar(t, KILN_I32, 1)};
  const int64_t sizes[2] = {2, 3};
  kiln_val *upd = kiln_full(t, KILN_F32, 2, sizes, 9.0);
  return TUPLE(kiln_dynamic_slice(t, x, rc, sizes), kiln_dynamic_slice(t, x, lit, sizes),
               kiln_dynamic_update_slice(t, x, upd, rc), kiln_dynamic_slice(t, x, far, sizes));
}

const jit_case kNumpyCases[] = {
    {"reductions", reductions},   {"int_reductions", int_reductions},
    {"bf16_reductions", bf16_reductions}, {"moments", moments},
    {"int_moments", int_moments}, {"logsumexp", logsumexp},
    {"softmax", softmax},         {"softmax_bf16", softmax_bf16},
    {"divmod", divmod},           {"take", take},
    {"take_along", take_along},   {"sort", sort},
    {"einsum", einsum},           {"matmul", matmul},
    {"misc", misc},               {"narrow_types", narrow_types},
    {"dynamic_slice", dynamic_slice},
    {NULL, NULL},
};
