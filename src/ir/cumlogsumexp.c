/* cumlogsumexp (lax.cumlogsumexp): the running log(sum(exp(x))) along an
 * axis, forward or reversed. Floats only (log and exp). The evaluator
 * scans in double with JAX's logaddexp (a NaN difference, as -inf - -inf,
 * gives a + b), rounding each result to the dtype; JAX's CPU lowering is an
 * associative scan, so the last bits may differ: tests compare with f32
 * tolerances. */
#include <math.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

kiln_status kir_rule_cumlogsumexp(kir_prim prim, const kir_params *params, int n_in,
                                  const kir_aval *in, kir_avals *out) {
  TRY(kir_check_dtype_class(prim, 0, in, KIR_DT_FLOAT));
  return kir_rule_cumulative(prim, params, n_in, in, out);
}

static double logaddexp(double a, double b) {
  double d = a - b;
  return isnan(d) ? a + b : fmax(a, b) + log1p(exp(-fabs(d)));
}

static kiln_status eval_cumlogsumexp(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                     void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  int axis = (int)e->params.cumulative.axis;
  bool rev = e->params.cumulative.reverse;
  int64_t len = x->shape[axis], inner = 1, outer = 1;
  for (int d = 0; d < axis; d++) outer *= x->shape[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->shape[d];
  size_t es = kiln_dtype_size(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      double acc = -INFINITY;
      for (int64_t k = 0; k < len; k++) {
        int64_t i = (o * len + (rev ? len - 1 - k : k)) * inner + c;
        double v = kir_scalar_load(x->dtype, (const char *)in[0].data + i * (int64_t)es).f;
        acc = kir_round_to_dtype(x->dtype, k ? logaddexp(acc, v) : v);
        kir_scalar_store(x->dtype, kir_scalar_f(acc), (char *)out[0].data + i * (int64_t)es);
      }
    }
  return KILN_OK;
}

void kir_cumlogsumexp_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_CUMLOGSUMEXP] = eval_cumlogsumexp;
}

/* d y_i = sum_{j <= i} exp(x_j - y_i) dx_j, as cumsum(dx * exp(x - m)) *
 * exp(m - y) with m the line's maximum (a primal), so the tangent is a
 * cumsum between two products by primals and transposes as one. Lines whose
 * running sum falls far (~88 in f32) below their maximum lose the leading
 * tangents to underflow. Where a prefix is all -inf (y_i = -inf) the
 * weights are 0/0: this takes their limit for equal entries, the mean of
 * the prefix's tangents (JAX's scan gives t_0 at the first position and NaN
 * from there on, even past the prefix; kiln stays finite and agrees
 * wherever JAX is finite). Both weights are finite, so the transpose is. */
static kiln_status jvp_cumlogsumexp(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                    const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  const kir_aval *a = kir_var_aval(p, x[0]);
  int axis = (int)e->params.cumulative.axis;
  bool rev = e->params.cumulative.reverse;
  kir_params pr = {0};
  pr.axes.axes = (kir_dims){1, {(int8_t)axis}};
  kir_vid m, zero, fin, mb, xm, mx, w, s, f, ninf, cnt, g, u;
  TRY(kir_emit(p, KIR_PRIM_REDUCE_MAX, &pr, 1, &x[0], &m));
  /* An all -inf line has no finite maximum: shift by 0 instead. */
  TRY(kir_emit1(p, KIR_PRIM_IS_FINITE, m, &fin));
  TRY(kir_emit_scalar(p, m, 0, &zero));
  kir_aval ma = *kir_var_aval(p, m);
  TRY(kir_emit_select(p, fin, zero, m, &ma, &m));
  kir_params br = {0};
  br.broadcast.shape.n = a->rank;
  for (int d = 0, k = 0; d < a->rank; d++) {
    br.broadcast.shape.v[d] = a->shape[d];
    if (d != axis) br.broadcast.broadcast_dimensions.v[k++] = (int8_t)d;
  }
  br.broadcast.broadcast_dimensions.n = a->rank - 1;
  TRY(kir_emit(p, KIR_PRIM_BROADCAST_IN_DIM, &br, 1, &m, &mb));
  TRY(kir_emit2(p, KIR_PRIM_SUB, x[0], mb, &xm));
  TRY(kir_emit1(p, KIR_PRIM_EXP, xm, &w));
  /* y = -inf: exp(m - y) would be inf; weight 0 there and 1/count instead */
  TRY(kir_emit_scalar(p, y[0], -INFINITY, &ninf));
  TRY(kir_emit2(p, KIR_PRIM_EQ, y[0], ninf, &ninf));
  TRY(kir_emit2(p, KIR_PRIM_SUB, mb, y[0], &mx));
  TRY(kir_emit1(p, KIR_PRIM_EXP, mx, &f));
  TRY(kir_emit_zeros(p, a, &zero));
  TRY(kir_emit_select(p, ninf, f, zero, a, &f));
  kir_params ip = {0};
  ip.iota.dimension = axis;
  ip.iota.dtype = KILN_I32;
  ip.iota.shape = br.broadcast.shape;
  TRY(kir_emit(p, KIR_PRIM_IOTA, &ip, 0, NULL, &cnt));
  TRY(kir_emit_convert(p, cnt, a->dtype, &cnt));
  /* the prefix's length: i + 1, or n - i reversed */
  TRY(kir_emit_scalar(p, cnt, rev ? (double)a->shape[axis] : 1.0, &g));
  TRY(rev ? kir_emit2(p, KIR_PRIM_SUB, g, cnt, &cnt) : kir_emit2(p, KIR_PRIM_ADD, cnt, g, &cnt));
  TRY(kir_emit_scalar(p, cnt, 1.0, &g));
  TRY(kir_emit2(p, KIR_PRIM_DIV, g, cnt, &g));
  TRY(kir_emit_select(p, ninf, zero, g, a, &g));
  TRY(kir_emit2(p, KIR_PRIM_MUL, tx[0], w, &s));
  TRY(kir_emit(p, KIR_PRIM_CUMSUM, &e->params, 1, &s, &s));
  TRY(kir_emit2(p, KIR_PRIM_MUL, s, f, &s));
  TRY(kir_emit(p, KIR_PRIM_CUMSUM, &e->params, 1, &tx[0], &u));
  TRY(kir_emit2(p, KIR_PRIM_MUL, u, g, &u));
  return kir_emit2(p, KIR_PRIM_ADD, s, u, ty);
}

void kir_cumlogsumexp_rules(kir_ad_rules *r) { r->jvp[KIR_PRIM_CUMLOGSUMEXP] = jvp_cumlogsumexp; }
