/* Helpers the batching rules share: moving the mapped axis and
 * materialising an operand as [size, *per-example shape]. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

kiln_status kir_batch_moveaxis(kir_program *p, kir_vid x, int from, int to, kir_vid *out) {
  if (from == to) {
    *out = x;
    return KILN_OK;
  }
  int r = kir_var_aval(p, x)->rank;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.transpose.permutation.n = r;
  for (int i = 0, k = 0; i < r; i++) {
    if (i == to) {
      pr.transpose.permutation.v[i] = (int8_t)from;
      continue;
    }
    if (k == from) k++;
    pr.transpose.permutation.v[i] = (int8_t)k++;
  }
  return kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, &x, out);
}

kiln_status kir_batch_front(kir_program *p, kir_vid x, int bd, int64_t size, const kir_aval *elem,
                            kir_vid *out) {
  if (elem->rank + 1 > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "vmap: a mapped %d-d operand exceeds kiln's rank limit %d",
                      elem->rank, KIR_MAX_RANK);
  kir_vid v = x;
  if (bd >= 0) {
    kiln_status st = kir_batch_moveaxis(p, x, bd, 0, &v);
    if (st) return st;
  }
  const kir_aval *a = kir_var_aval(p, v);
  bool full = bd >= 0 && a->rank == elem->rank + 1;
  for (int i = 0; full && i < elem->rank; i++) full = a->shape[i + 1] == elem->shape[i];
  if (full) {
    *out = v;
    return KILN_OK;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.broadcast.shape.n = elem->rank + 1;
  pr.broadcast.shape.v[0] = size;
  memcpy(pr.broadcast.shape.v + 1, elem->shape, (size_t)elem->rank * sizeof(int64_t));
  /* a mapped operand keeps axis 0; its other dims (if any) line up with
   * elem's, size-1 ones expanding */
  int first = bd >= 0 ? 0 : 1;
  pr.broadcast.broadcast_dimensions.n = a->rank;
  for (int i = 0; i < a->rank; i++)
    pr.broadcast.broadcast_dimensions.v[i] = (int8_t)(a->rank == 1 && bd >= 0 ? 0 : i + first);
  if (a->rank != 0 && !(bd >= 0 && a->rank == 1) && a->rank + (bd >= 0 ? 0 : 1) != elem->rank + 1) {
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "vmap: cannot broadcast %s (mapped axis %d) to [%lld]+%s",
                      kir_aval_str(a, t1, sizeof t1), bd, (long long)size,
                      kir_aval_str(elem, t2, sizeof t2));
  }
  return kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &pr, 1, &v, out);
}

void kir_batch_shift(kir_dims *d) {
  for (int i = 0; i < d->n; i++) d->v[i]++;
}

kiln_status kir_batch_dims_front(kir_dims *d) {
  if (d->n + 1 > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "vmap: too many dimensions after batching");
  kir_batch_shift(d);
  memmove(d->v + 1, d->v, (size_t)d->n);
  d->v[0] = 0;
  d->n++;
  return KILN_OK;
}
