/* Checks and formatting shared by the families' shape/dtype rules. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

bool kir_dtype_in(kiln_dtype d, unsigned classes) {
  unsigned c = kiln_dtype_is_bool(d)       ? KIR_DT_BOOL
               : kiln_dtype_is_float(d)    ? KIR_DT_FLOAT
               : kiln_dtype_is_unsigned(d) ? KIR_DT_UINT
               : kiln_dtype_is_integer(d)  ? KIR_DT_SINT
                                           : 0;
  return (c & classes) != 0;
}

const char *kir_dtype_class_name(unsigned classes) {
  switch (classes) {
    case KIR_DT_FLOAT: return "floating";
    case KIR_DT_INT: return "integer";
    case KIR_DT_UINT: return "unsigned integer";
    case KIR_DT_NUM: return "integer or floating";
    case KIR_DT_SINT | KIR_DT_FLOAT: return "signed integer or floating";
    case KIR_DT_BOOL | KIR_DT_INT: return "bool or integer";
    case KIR_DT_ANY: return "bool, integer or floating";
    default: return "other";
  }
}

kiln_status kir_check_dtype_class(kir_prim prim, int i, const kir_aval *in, unsigned classes) {
  if (kir_dtype_in(in[i].dtype, classes)) return KILN_OK;
  char t[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  return kcore_fail(KILN_ERR_DTYPE, "%s: operand %d type %s is not accepted (%s takes %s dtypes)",
                    name, i, kir_aval_str(&in[i], t, sizeof t), name,
                    kir_dtype_class_name(classes));
}

kiln_status kir_check_same_dtypes(kir_prim prim, int n, const kir_aval *in) {
  for (int i = 1; i < n; i++) {
    if (in[i].dtype != in[0].dtype) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_DTYPE, "%s: operand types %s and %s have different dtypes",
                        kir_prim_name(prim), kir_aval_str(&in[0], t0, sizeof t0),
                        kir_aval_str(&in[i], t1, sizeof t1));
    }
  }
  return KILN_OK;
}

kiln_status kir_broadcast_shapes(kir_prim prim, int n, const kir_aval *in, int *rank,
                                 int64_t *shape) {
  const kir_aval *first = NULL;
  *rank = 0;
  for (int i = 0; i < n; i++) {
    const kir_aval *a = &in[i];
    if (a->rank == 0) continue;
    if (!first) {
      first = a;
      *rank = a->rank;
      memcpy(shape, a->shape, (size_t)a->rank * sizeof *shape);
      continue;
    }
    bool ok = a->rank == first->rank;
    for (int d = 0; ok && d < a->rank; d++) {
      if (a->shape[d] == shape[d] || a->shape[d] == 1) continue;
      if (shape[d] == 1)
        shape[d] = a->shape[d];
      else
        ok = false;
    }
    if (!ok) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE,
                        "%s: operand types %s and %s have incompatible shapes (lax broadcasts "
                        "only rank-0 operands and size-1 dimensions)",
                        kir_prim_name(prim), kir_aval_str(first, t0, sizeof t0),
                        kir_aval_str(a, t1, sizeof t1));
    }
  }
  return KILN_OK;
}

char *kir_dims_str(const kir_dims *d, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < d->n && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? ", " : "", d->v[i]);
  if (n < cap) snprintf(buf + n, cap - n, d->n == 1 ? ",)" : ")");
  return buf;
}

char *kir_sizes_str(const kir_sizes *s, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < s->n && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)s->v[i]);
  if (n < cap) snprintf(buf + n, cap - n, s->n == 1 ? ",)" : ")");
  return buf;
}

kiln_status kir_check_dims(kir_prim prim, const char *param, const kir_dims *d, int bound,
                           bool sorted, const kir_aval *operand) {
  char ds[128], t[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  for (int i = 0; i < d->n; i++) {
    if (d->v[i] < 0 || d->v[i] >= bound) {
      if (operand)
        return kcore_fail(KILN_ERR_SHAPE, "%s: %s=%s has %d outside [0, %d) for operand %s",
                          name, param, kir_dims_str(d, ds, sizeof ds), d->v[i], bound,
                          kir_aval_str(operand, t, sizeof t));
      return kcore_fail(KILN_ERR_SHAPE, "%s: %s=%s has %d outside [0, %d)", name, param,
                        kir_dims_str(d, ds, sizeof ds), d->v[i], bound);
    }
    for (int j = 0; j < i; j++)
      if (d->v[j] == d->v[i])
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s=%s repeats %d", name, param,
                          kir_dims_str(d, ds, sizeof ds), d->v[i]);
    if (sorted && i > 0 && d->v[i] < d->v[i - 1])
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s=%s must be sorted", name, param,
                        kir_dims_str(d, ds, sizeof ds));
  }
  return KILN_OK;
}

kiln_status kir_push(kir_avals *out, kiln_dtype dtype, int rank, const int64_t *shape, bool weak) {
  kir_aval a = kir_aval_make(dtype, rank, shape, weak);
  return kir_avals_push(out, &a);
}

bool kir_all_weak(int n, const kir_aval *in) {
  for (int i = 0; i < n; i++)
    if (!in[i].weak) return false;
  return true;
}
