/* jvp and transpose rules of the reductions: reduce_sum is linear (its
 * transpose a broadcast_in_dim); reduce_max/min split the tangent among
 * the tied maxima, as JAX's _reduce_chooser_jvp_rule; argmax/argmin have no
 * tangent; cumsum is linear (its transpose the reversed cumsum). */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

/* y of a reduction over `axes` broadcast back to the operand's aval. */
static kiln_status unreduce(kir_program *p, kir_vid y, const kir_dims *axes, const kir_aval *to,
                            kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.broadcast.shape.n = to->rank;
  memcpy(pr.broadcast.shape.v, to->shape, (size_t)to->rank * sizeof(int64_t));
  for (int i = 0; i < to->rank; i++) {
    bool reduced = false;
    for (int k = 0; k < axes->n; k++) reduced |= axes->v[k] == i;
    if (!reduced) pr.broadcast.broadcast_dimensions.v[pr.broadcast.broadcast_dimensions.n++] = (int8_t)i;
  }
  return kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &pr, 1, &y, out);
}

static kiln_status jvp_reduce_sum(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                  const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status tr_reduce_sum(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 const bool *lin, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *ct_x) {
  (void)lin, (void)x;
  return unreduce(p, ct[0], &e->params.axes.axes, kir_var_aval(src, e->in[0]), &ct_x[0]);
}

/* sum(tx * loc) / sum(loc) with loc = (x == broadcast(y)) */
static kiln_status jvp_reduce_chooser(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                      const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *xa = kir_var_aval(p, x[0]);
  kir_vid b, loc, cnt, t;
  TRY(unreduce(p, y[0], &e->params.axes.axes, xa, &b));
  TRY(kir_emit2(p, KIR_PRIM_EQ, x[0], b, &loc));
  TRY(kir_emit_convert(p, loc, xa->dtype, &loc));
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.axes = e->params.axes;
  TRY(kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &loc, &cnt));
  TRY(unreduce(p, cnt, &e->params.axes.axes, xa, &cnt));
  TRY(kir_emit2(p, KIR_PRIM_DIV, loc, cnt, &loc));
  TRY(kir_emit2(p, KIR_PRIM_MUL, tx[0], loc, &t));
  return kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &t, ty);
}

static kiln_status jvp_cumsum(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status tr_cumsum(kir_program *p, const kir_program *src, const kir_eqn *e,
                             const bool *lin, const kir_vid *x, const kir_vid *ct,
                             kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  kir_params pr = e->params;
  pr.cumulative.reverse = !pr.cumulative.reverse;
  return kir_emit(p, KIR_PRIM_CUMSUM, &pr, 1, ct, &ct_x[0]);
}

void kir_reduce_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_REDUCE_SUM] = jvp_reduce_sum;
  r->transpose[KIR_PRIM_REDUCE_SUM] = tr_reduce_sum;
  r->jvp[KIR_PRIM_REDUCE_MAX] = jvp_reduce_chooser;
  r->jvp[KIR_PRIM_REDUCE_MIN] = jvp_reduce_chooser;
  r->jvp[KIR_PRIM_ARGMAX] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_ARGMIN] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_REDUCE_AND] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_REDUCE_OR] = kir_ad_jvp_zero;
  r->jvp[KIR_PRIM_CUMSUM] = jvp_cumsum;
  r->transpose[KIR_PRIM_CUMSUM] = tr_cumsum;
}
