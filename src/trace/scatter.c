/* Public scatters along one axis: x.at[indices].set/add/mul/min/max(u) as
 * jnp does them. Negative indices count from the end; then the mode
 * decides about indices still out of range (jnp's default drops them).
 * Updates broadcast to x.shape[:axis] + indices.shape + x.shape[axis+1:]
 * and convert to x's dtype. */
#include <string.h>
#include "kiln/numpy.h"
#include "trace/trace.h"

static const char *const ktr_mode_names[] = {"fill", "clip", "wrap", "promise_in_bounds"};

static kiln_val *ktr_scatter_axis(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                                  kiln_val *indices, kiln_val *updates, int axis,
                                  kiln_index_mode mode, int flags) {
  kiln_val *v[3] = {x, indices, updates};
  if (!ktr_ok(t, op, 3, v) || !ktr_int_indices(t, op, indices)) return NULL;
  if (mode != KILN_INDEX_FILL && mode != KILN_INDEX_CLIP && mode != KILN_INDEX_PROMISE_IN_BOUNDS)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: mode %s is not a scatter mode (fill, clip, "
                     "promise_in_bounds)", op,
                     (unsigned)mode < 4 ? ktr_mode_names[mode] : "(invalid)");
  const kir_aval *xa = ktr_aval(x);
  int ir = ktr_aval(indices)->rank, a;
  if (ktr_axis(op, axis, xa->rank, &a)) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  int urank = xa->rank - 1 + ir;
  if (urank > KIR_MAX_RANK)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: the updates would have rank %d", op, urank);
  if (!(v[1] = ktr_index_vector(t, op, ktr_wrap_negative(t, indices, xa->shape[a])))) return NULL;
  int64_t ushape[KIR_MAX_RANK];
  memcpy(ushape, xa->shape, (size_t)a * sizeof *ushape);
  memcpy(ushape + a, ktr_aval(indices)->shape, (size_t)ir * sizeof *ushape);
  memcpy(ushape + a + ir, xa->shape + a + 1, (size_t)(xa->rank - a - 1) * sizeof *ushape);
  if (!(v[2] = ktr_convert(t, op, updates, xa->dtype, xa->weak))) return NULL;
  if (!(v[2] = kiln_broadcast_to(t, v[2], urank, ushape))) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  kir_scatter_dims *s = &p.scatter.dimension_numbers;
  /* updates: x.shape[:a] + indices.shape + x.shape[a+1:], as take's result. */
  for (int d = 0; d < xa->rank; d++)
    if (d != a) s->update_window_dims.v[s->update_window_dims.n++] = (int8_t)(d < a ? d : d - 1 + ir);
  s->inserted_window_dims.n = s->scatter_dims_to_operand_dims.n = 1;
  s->inserted_window_dims.v[0] = s->scatter_dims_to_operand_dims.v[0] = (int8_t)a;
  p.scatter.mode = mode == KILN_INDEX_CLIP               ? KIR_GATHER_CLIP
                   : mode == KILN_INDEX_PROMISE_IN_BOUNDS ? KIR_GATHER_PROMISE_IN_BOUNDS
                                                          : KIR_GATHER_FILL_OR_DROP;
  p.scatter.unique_indices = (flags & KILN_SCATTER_UNIQUE_INDICES) != 0;
  p.scatter.indices_are_sorted = (flags & KILN_SCATTER_INDICES_SORTED) != 0;
  return ktr_bind(t, op, prim, &p, 3, v, 1, NULL);
}

/* kiln_scatter / kiln_at_set, kiln_scatter_add / kiln_at_add, ... */
#define KTR_SCATTERS(X)             \
  X(scatter, set, SCATTER)          \
  X(scatter_add, add, SCATTER_ADD)  \
  X(scatter_mul, mul, SCATTER_MUL)  \
  X(scatter_min, min, SCATTER_MIN)  \
  X(scatter_max, max, SCATTER_MAX)

#define KTR_DEFINE(name, at, PRIM)                                                           \
  kiln_val *kiln_##name(kiln_trace *t, kiln_val *x, kiln_val *indices, kiln_val *updates,    \
                        int axis) {                                                          \
    return ktr_scatter_axis(t, "kiln_" #name, KIR_PRIM_##PRIM, x, indices, updates, axis,   \
                            KILN_INDEX_FILL, 0);                                             \
  }                                                                                          \
  kiln_val *kiln_at_##at(kiln_trace *t, kiln_val *x, kiln_val *indices, int axis,            \
                         kiln_val *updates, kiln_index_mode mode, int flags) {               \
    return ktr_scatter_axis(t, "kiln_at_" #at, KIR_PRIM_##PRIM, x, indices, updates, axis,  \
                            mode, flags);                                                    \
  }
KTR_SCATTERS(KTR_DEFINE)
#undef KTR_DEFINE
