/* flax.linen.MultiHeadDotProductAttention (deterministic) and
 * make_causal_mask, from trace ops. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include "nn/nn.h"
#include "kiln/dtype.h"
#include "kiln/nn.h"
#include "kiln/numpy.h"

static const char MHA[] = "kiln_nn_mha";

/* DenseGeneral's kernel_init_wrap: lecun_normal over [rows, cols], reshaped. */
static kiln_val *flat_lecun(kiln_trace *t, kiln_val *key, int64_t rows, int64_t cols,
                            kiln_dtype dtype, int rank, const int64_t *shape) {
  int64_t flat[2] = {rows, cols};
  return kiln_reshape(t, kiln_nn_lecun_normal(t, key, dtype, 2, flat), rank, shape);
}

static kiln_tree *dense_general(kiln_trace *t, kiln_val *kernel, kiln_val *bias) {
  static const char *const keys[2] = {"bias", "kernel"};
  kiln_val *vals[2] = {bias, kernel};
  return knn_dict(t, 2, keys, vals);
}

kiln_tree *kiln_nn_mha_init(kiln_trace *t, kiln_val *const *keys, int64_t num_heads,
                            int64_t q_features, int64_t kv_features, int64_t qkv_features,
                            int64_t out_features, kiln_dtype dtype) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (!kv_features) kv_features = q_features;
  if (!qkv_features) qkv_features = q_features;
  if (!out_features) out_features = q_features;
  if (!keys || num_heads < 1 || q_features < 1 || kv_features < 1 || out_features < 1 ||
      qkv_features < 1 || qkv_features % num_heads) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "kiln_nn_mha_init: needs 4 keys, sizes >= 1 and qkv_features divisible by "
             "num_heads, got num_heads %lld, q/kv/qkv/out features %lld/%lld/%lld/%lld%s",
             (long long)num_heads, (long long)q_features, (long long)kv_features,
             (long long)qkv_features, (long long)out_features, keys ? "" : ", keys NULL");
    kiln_trace_fail(t, KILN_ERR_ARGUMENT, msg);
    return NULL;
  }
  int64_t head_dim = qkv_features / num_heads, hd[2] = {num_heads, head_dim};
  int64_t in[3] = {q_features, kv_features, kv_features};
  kiln_tree *kids[4] = {NULL};
  for (int i = 0; i < 3; i++) { /* query, key, value */
    int64_t shape[3] = {in[i], num_heads, head_dim};
    kiln_val *kernel = flat_lecun(t, keys[i], in[i], qkv_features, dtype, 3, shape);
    kids[i] = dense_general(t, kernel, kiln_full(t, dtype, 2, hd, 0));
  }
  int64_t out_shape[3] = {num_heads, head_dim, out_features};
  kiln_val *out_kernel = flat_lecun(t, keys[3], qkv_features, out_features, dtype, 3, out_shape);
  kids[3] = dense_general(t, out_kernel, kiln_full(t, dtype, 1, &out_features, 0));
  if (kiln_trace_status(t) != KILN_OK) {
    for (int i = 0; i < 4; i++) kiln_tree_free(kids[i]);
    return NULL;
  }
  const char *names[4] = {"key", "out", "query", "value"}; /* sorted, as Flax's trees */
  kiln_tree *sorted[4] = {kids[1], kids[3], kids[0], kids[2]};
  return kiln_tree_dict(4, names, sorted);
}

/* x [..., features] . kernel [features, heads, head_dim] + bias. */
static kiln_val *project(kiln_trace *t, kiln_val *x, kiln_val *kernel, kiln_val *bias) {
  kiln_dot_dims d = {0};
  d.n_contract = 1;
  d.lhs_contract[0] = kiln_val_rank(x) - 1;
  return kiln_add(t, kiln_dot_general(t, x, kernel, &d, KILN_INVALID_DTYPE), bias);
}

static int fail_shapes(kiln_trace *t, const char *what, kiln_val *a, const char *b_name,
                       kiln_val *b) {
  char msg[320], sa[96], sb[96];
  snprintf(msg, sizeof msg, "%s: %s %s does not fit %s %s", MHA, what,
           knn_aval_str(a, sa, sizeof sa), b_name, knn_aval_str(b, sb, sizeof sb));
  kiln_trace_fail(t, KILN_ERR_SHAPE, msg);
  return 0;
}

/* Checks the inputs against each other: same rank >= 2, float, the same
 * batch dims. */
static int check_inputs(kiln_trace *t, kiln_val *q, kiln_val *kv) {
  int r = kiln_val_rank(q), ok = r >= 2 && kiln_val_rank(kv) == r;
  for (int i = 0; ok && i < r - 2; i++) ok = kiln_val_shape(q)[i] == kiln_val_shape(kv)[i];
  if (!ok) return fail_shapes(t, "inputs_kv", kv, "inputs_q [batch..., length, features]", q);
  if (!kiln_dtype_is_float(kiln_val_dtype(q)) || !kiln_dtype_is_float(kiln_val_dtype(kv))) {
    char msg[240], sa[96], sb[96];
    snprintf(msg, sizeof msg, "%s: inputs must be floats, got inputs_q %s, inputs_kv %s", MHA,
             knn_aval_str(q, sa, sizeof sa), knn_aval_str(kv, sb, sizeof sb));
    kiln_trace_fail(t, KILN_ERR_DTYPE, msg);
    return 0;
  }
  return 1;
}

/* logits where mask, float32's lowest elsewhere; mask broadcasts (numpy's
 * rules) to logits' shape [batch..., heads, q_length, kv_length]. */
static kiln_val *apply_mask(kiln_trace *t, kiln_val *logits, kiln_val *mask) {
  int r = kiln_val_rank(logits), mr = kiln_val_rank(mask), ok = mr <= r;
  const int64_t *ls = kiln_val_shape(logits), *ms = kiln_val_shape(mask);
  for (int i = 0; ok && i < mr; i++) {
    int64_t m = ms[mr - 1 - i];
    ok = m == 1 || m == ls[r - 1 - i];
  }
  if (!ok) {
    fail_shapes(t, "mask", mask, "the attention weights [batch..., heads, q_length, kv_length]",
                logits);
    return NULL;
  }
  if (!kiln_dtype_is_bool(kiln_val_dtype(mask)))
    mask = kiln_ne(t, mask, kiln_scalar(t, kiln_val_dtype(mask), 0));
  mask = kiln_broadcast_to(t, mask, r, ls);
  kiln_val *lowest = kiln_full(t, kiln_val_dtype(logits), r, ls, -FLT_MAX);
  return kiln_where(t, mask, logits, lowest);
}

kiln_val *kiln_nn_mha(kiln_trace *t, const kiln_tree *params, kiln_val *inputs_q,
                      kiln_val *inputs_kv, kiln_val *mask) {
  if (!knn_given(t, MHA, "inputs_q", inputs_q)) return NULL;
  kiln_val *kv = inputs_kv ? inputs_kv : inputs_q;
  if (!check_inputs(t, inputs_q, kv)) return NULL;
  int r = kiln_val_rank(inputs_q), nb = r - 2; /* batch dims */
  int64_t want[3] = {kiln_val_shape(inputs_q)[r - 1], -1, -1};
  kiln_val *wq = knn_param(t, MHA, "params", params, "query/kernel", 3, want);
  if (!wq) return NULL;
  int64_t h = kiln_val_shape(wq)[1], dh = kiln_val_shape(wq)[2], hd[2] = {h, dh};
  want[0] = kiln_val_shape(kv)[r - 1], want[1] = h, want[2] = dh;
  kiln_val *wk = knn_param(t, MHA, "params", params, "key/kernel", 3, want);
  kiln_val *wv = knn_param(t, MHA, "params", params, "value/kernel", 3, want);
  kiln_val *bq = knn_param(t, MHA, "params", params, "query/bias", 2, hd);
  kiln_val *bk = knn_param(t, MHA, "params", params, "key/bias", 2, hd);
  kiln_val *bv = knn_param(t, MHA, "params", params, "value/bias", 2, hd);
  int64_t out_want[3] = {h, dh, -1};
  kiln_val *wo = knn_param(t, MHA, "params", params, "out/kernel", 3, out_want);
  int64_t o = wo ? kiln_val_shape(wo)[2] : 0;
  kiln_val *bo = knn_param(t, MHA, "params", params, "out/bias", 1, &o);
  if (!wk || !wv || !bq || !bk || !bv || !bo) return NULL;

  /* [batch..., length, heads, head_dim]; the query scaled as Flax does,
   * dividing by sqrt(head_dim) in the query's dtype. */
  kiln_val *q = project(t, inputs_q, wq, bq);
  kiln_val *k = project(t, kv, wk, bk), *v = project(t, kv, wv, bv);
  q = kiln_div(t, q, kiln_scalar(t, kiln_val_dtype(q), sqrt((double)dh)));
  /* '...qhd,...khd->...hqk': batch over (batch..., heads), contract head_dim. */
  kiln_dot_dims d = {0};
  d.n_batch = nb + 1;
  for (int i = 0; i < nb; i++) d.lhs_batch[i] = d.rhs_batch[i] = i;
  d.lhs_batch[nb] = d.rhs_batch[nb] = nb + 1;
  d.n_contract = 1;
  d.lhs_contract[0] = d.rhs_contract[0] = nb + 2;
  kiln_val *logits = kiln_dot_general(t, q, k, &d, KILN_INVALID_DTYPE);
  if (mask && logits) logits = apply_mask(t, logits, mask);
  kiln_val *w = kiln_softmax(t, logits, r, NULL); /* over kv_length */
  /* '...hqk,...khd->...hqd' (heads before q_length, which the out
   * projection contracts away without a transpose). */
  d.lhs_batch[nb] = nb;
  d.lhs_contract[0] = nb + 2, d.rhs_contract[0] = nb;
  kiln_val *heads = kiln_dot_general(t, w, v, &d, KILN_INVALID_DTYPE);
  /* DenseGeneral(axis=(-2, -1)) over (heads, head_dim). */
  kiln_dot_dims od = {0};
  od.n_contract = 2;
  od.lhs_contract[0] = nb, od.lhs_contract[1] = nb + 2;
  od.rhs_contract[0] = 0, od.rhs_contract[1] = 1;
  return kiln_add(t, kiln_dot_general(t, heads, wo, &od, KILN_INVALID_DTYPE), bo);
}

kiln_val *kiln_nn_causal_mask(kiln_trace *t, kiln_val *x) {
  if (!knn_given(t, "kiln_nn_causal_mask", "x", x)) return NULL;
  int r = kiln_val_rank(x);
  if (r < 1 || r + 2 > KILN_MAX_RANK) {
    char msg[160], got[96];
    snprintf(msg, sizeof msg, "kiln_nn_causal_mask: x must be [batch..., length], got %s",
             knn_aval_str(x, got, sizeof got));
    kiln_trace_fail(t, KILN_ERR_SHAPE, msg);
    return NULL;
  }
  int64_t shape[KILN_MAX_RANK];
  for (int i = 0; i < r - 1; i++) shape[i] = kiln_val_shape(x)[i];
  int64_t n = kiln_val_shape(x)[r - 1];
  shape[r - 1] = 1, shape[r] = n, shape[r + 1] = n;
  kiln_val *qi = kiln_iota(t, KILN_I32, r + 2, shape, r);
  kiln_val *ki = kiln_iota(t, KILN_I32, r + 2, shape, r + 1);
  return kiln_convert(t, kiln_ge(t, qi, ki), KILN_F32);
}
