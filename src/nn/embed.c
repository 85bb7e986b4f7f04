/* flax.linen.Embed: its default initializer, the table lookup and attend. */
#include <stdio.h>
#include "nn/nn.h"
#include "kiln/dtype.h"
#include "kiln/nn.h"
#include "kiln/numpy.h"

kiln_tree *kiln_nn_embed_init(kiln_trace *t, kiln_val *key, int64_t num_embeddings,
                              int64_t features, kiln_dtype dtype) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  if (num_embeddings < 1 || features < 1 || !kiln_dtype_is_float(dtype)) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "kiln_nn_embed_init: needs num_embeddings, features >= 1 and a float dtype, got "
             "%lld, %lld, %s",
             (long long)num_embeddings, (long long)features, kiln_dtype_name(dtype));
    kiln_trace_fail(t, KILN_ERR_ARGUMENT, msg);
    return NULL;
  }
  /* variance_scaling's _compute_fans with in_axis -2 = out_axis 0, in
   * Python's float order: receptive = n * f / n / n, fan_in = n * receptive
   * (f, give or take a rounding); the variance is rounded to dtype and its
   * square root taken there. */
  int64_t shape[2] = {num_embeddings, features};
  double n = (double)num_embeddings;
  double fan_in = n * ((double)(num_embeddings * features) / n / n);
  kiln_val *stddev = kiln_sqrt(t, kiln_scalar(t, dtype, 1.0 / fan_in));
  kiln_val *table = kiln_mul(t, kiln_random_normal(t, key, dtype, 2, shape), stddev);
  static const char *const keys[1] = {"embedding"};
  return knn_dict(t, 1, keys, &table);
}

static kiln_val *table_of(kiln_trace *t, const char *op, const kiln_tree *params) {
  const int64_t any[2] = {-1, -1};
  return knn_param(t, op, "params", params, "embedding", 2, any);
}

kiln_val *kiln_nn_embed(kiln_trace *t, const kiln_tree *params, kiln_val *ids) {
  static const char op[] = "kiln_nn_embed";
  kiln_val *table = table_of(t, op, params);
  if (!knn_given(t, op, "ids", ids) || !table) return NULL;
  if (!kiln_dtype_is_integer(kiln_val_dtype(ids))) {
    char msg[160], got[96];
    snprintf(msg, sizeof msg, "%s: ids must be integers, got %s", op,
             knn_aval_str(ids, got, sizeof got));
    kiln_trace_fail(t, KILN_ERR_DTYPE, msg);
    return NULL;
  }
  const int64_t *ts = kiln_val_shape(table);
  if (ts[0] == 1) { /* Flax broadcasts a one-row table whatever the ids */
    int r = kiln_val_rank(ids);
    int64_t shape[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) shape[i] = kiln_val_shape(ids)[i];
    shape[r] = ts[1];
    int64_t row = ts[1];
    return kiln_broadcast_to(t, kiln_reshape(t, table, 1, &row), r + 1, shape);
  }
  return kiln_take_mode(t, table, ids, 0, KILN_INDEX_FILL);
}

kiln_val *kiln_nn_embed_attend(kiln_trace *t, const kiln_tree *params, kiln_val *query) {
  static const char op[] = "kiln_nn_embed_attend";
  kiln_val *table = table_of(t, op, params);
  if (!knn_given(t, op, "query", query) || !table) return NULL;
  int r = kiln_val_rank(query);
  if (r < 1 || kiln_val_shape(query)[r - 1] != kiln_val_shape(table)[1]) {
    char msg[200], got[96], tab[96];
    snprintf(msg, sizeof msg, "%s: query %s does not end in the embedding's features (%s)", op,
             knn_aval_str(query, got, sizeof got), knn_aval_str(table, tab, sizeof tab));
    kiln_trace_fail(t, KILN_ERR_SHAPE, msg);
    return NULL;
  }
  kiln_dot_dims d = {0};
  d.n_contract = 1;
  d.lhs_contract[0] = r - 1;
  d.rhs_contract[0] = 1;
  return kiln_dot_general(t, query, table, &d, KILN_INVALID_DTYPE);
}
