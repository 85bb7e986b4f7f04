/* nn: optimizers and schedules over pytrees of traced values (optim.h),
 * and layers (kiln/nn.h). The only door of src/nn; prefix knn_. */
#ifndef KILN_SRC_NN_H
#define KILN_SRC_NN_H

#include <stddef.h>
#include "kiln/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tree's traced leaves, flattened: vals[n] and its structure. */
typedef struct knn_flat {
  kiln_val **vals;
  size_t n;
  kiln_treedef *def;
} knn_flat;

/* Flattens tree (every leaf a traced value) into f; on failure records the
 * error on t (naming `op` and `what`) and returns 0. */
int knn_flatten(kiln_trace *t, const char *op, const char *what, const kiln_tree *tree,
                knn_flat *f);
/* A new flat of like's structure with room for its n values (NULL'ed). */
int knn_like(kiln_trace *t, const char *op, const knn_flat *like, knn_flat *out);
/* Checks b has a's structure; records the difference on t otherwise. */
int knn_same_structure(kiln_trace *t, const char *op, const char *a_name, const knn_flat *a,
                       const char *b_name, const knn_flat *b);
/* The tree of f's values (NULL after an error on t). */
kiln_tree *knn_unflatten(kiln_trace *t, const knn_flat *f);
void knn_flat_free(knn_flat *f);

/* The traced scalar `count + 1`, saturating at INT32_MAX (optax's
 * numerics.safe_increment). */
kiln_val *knn_safe_increment(kiln_trace *t, kiln_val *count);

/* "f32[2,3]": v's dtype and shape, into buf (returned). */
const char *knn_aval_str(const kiln_val *v, char *buf, size_t n);
/* The traced leaf tree[path] ("query/kernel": nested dict keys), checked
 * to be a float of the given rank and shape (a want[i] < 0 takes any size);
 * otherwise records on t an error naming op, tree_name['query']['kernel'],
 * what it holds and what was wanted, and returns NULL. */
kiln_val *knn_param(kiln_trace *t, const char *op, const char *tree_name, const kiln_tree *tree,
                    const char *path, int rank, const int64_t *want);
/* 1 when the trace is sound and v is given; else 0, with a NULL v recorded
 * on t as "op: name is NULL" (a failed trace keeps its first error). */
int knn_given(kiln_trace *t, const char *op, const char *name, const kiln_val *v);
/* The dict {keys[i]: vals[i]} (keys sorted, as Flax's trees flatten); NULL
 * when t has failed or a value is missing. */
kiln_tree *knn_dict(kiln_trace *t, int n, const char *const *keys, kiln_val *const *vals);

#ifdef __cplusplus
}
#endif
#endif
