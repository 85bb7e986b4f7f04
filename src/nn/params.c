/* A layer's params looked up by key path and checked against the shapes the
 * layer needs, so a wrong tree fails at trace time naming op, path, shapes
 * and dtypes instead of as a shape error deep inside the layer. */
#include <stdio.h>
#include <string.h>
#include "nn/nn.h"
#include "kiln/dtype.h"

const char *knn_aval_str(const kiln_val *v, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_short_name(kiln_val_dtype(v)));
  int r = kiln_val_rank(v);
  for (int i = 0; i < r && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)kiln_val_shape(v)[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

int knn_given(kiln_trace *t, const char *op, const char *name, const kiln_val *v) {
  if (kiln_trace_status(t) != KILN_OK) return 0;
  if (v) return 1;
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s is NULL", op, name);
  kiln_trace_fail(t, KILN_ERR_ARGUMENT, msg);
  return 0;
}

/* want as "[8,?,?]" for messages. */
static void want_str(int rank, const int64_t *want, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "float[");
  for (int i = 0; i < rank && k < n; i++) {
    const char *sep = i ? "," : "";
    k += want[i] < 0 ? (size_t)snprintf(buf + k, n - k, "%s?", sep)
                     : (size_t)snprintf(buf + k, n - k, "%s%lld", sep, (long long)want[i]);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
}

kiln_val *knn_param(kiln_trace *t, const char *op, const char *tree_name, const kiln_tree *tree,
                    const char *path, int rank, const int64_t *want) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  char where[128];
  size_t k = (size_t)snprintf(where, sizeof where, "%s", tree_name);
  const kiln_tree *node = tree;
  for (const char *p = path; *p && k < sizeof where;) {
    size_t len = strcspn(p, "/");
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)len, p);
    k += (size_t)snprintf(where + k, sizeof where - k, "['%s']", key);
    node = node ? kiln_tree_get(node, key) : NULL;
    p += len + (p[len] == '/');
  }
  const kiln_leaf *l = node ? kiln_tree_leaf_get(node) : NULL;
  char msg[320], got[96], w[96];
  want_str(rank, want, w, sizeof w);
  if (!l || l->kind != KILN_LEAF_VAL) {
    snprintf(msg, sizeof msg, "%s: %s is missing or not a traced value (want %s)", op, where, w);
    kiln_trace_fail(t, KILN_ERR_TREE, msg);
    return NULL;
  }
  kiln_val *v = l->u.val;
  int ok = kiln_dtype_is_float(kiln_val_dtype(v)) && kiln_val_rank(v) == rank;
  for (int i = 0; ok && i < rank; i++) ok = want[i] < 0 || kiln_val_shape(v)[i] == want[i];
  if (!ok) {
    snprintf(msg, sizeof msg, "%s: %s is %s, want %s", op, where,
             knn_aval_str(v, got, sizeof got), w);
    kiln_trace_fail(t, kiln_dtype_is_float(kiln_val_dtype(v)) ? KILN_ERR_SHAPE : KILN_ERR_DTYPE,
                    msg);
    return NULL;
  }
  return v;
}

kiln_tree *knn_dict(kiln_trace *t, int n, const char *const *keys, kiln_val *const *vals) {
  if (kiln_trace_status(t) != KILN_OK) return NULL;
  kiln_tree *kids[8];
  for (int i = 0; i < n; i++)
    if (!vals[i]) return NULL;
  for (int i = 0; i < n; i++) kids[i] = kiln_tree_val(vals[i]);
  return kiln_tree_dict((size_t)n, keys, kids);
}
