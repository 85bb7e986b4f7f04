/* Windowed reductions (lax.reduce_window_sum/max/min) and the two ops that
 * differentiate max/min pooling (select_and_gather_add, its jvp, and
 * select_and_scatter_add, its transpose): shape/dtype rules and the window
 * geometry that the evaluators (window_eval.c) and rules share. */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* A dilated extent: 1 + dil * (n - 1), 0 for an empty one (lax._dilate_shape). */
static int64_t kir_dilated(int64_t n, int64_t dil) { return n == 0 ? 0 : 1 + dil * (n - 1); }

static int64_t kir_floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* "(2, 2)" for a list of n entries, dilations absent (n 0) as ones. */
static const char *kir_list_str(const kir_sizes *s, int rank, char *buf, size_t cap) {
  if (s->n) return kir_sizes_str(s, buf, cap);
  kir_sizes ones = {.n = rank};
  for (int i = 0; i < rank; i++) ones.v[i] = 1;
  return kir_sizes_str(&ones, buf, cap);
}

static kiln_status kir_window_list(const char *op, const char *name, const kir_sizes *s,
                                   bool optional, const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP], b[256];
  if (optional && s->n == 0) return KILN_OK;
  if (s->n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "%s: %s=%s has %d entries for operand %s of rank %d", op,
                      name, kir_sizes_str(s, b, sizeof b), s->n, kir_aval_str(x, t, sizeof t),
                      x->rank);
  for (int d = 0; d < s->n; d++)
    if (s->v[d] < 1)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s=%s must be positive (operand %s)", op, name,
                        kir_sizes_str(s, b, sizeof b), kir_aval_str(x, t, sizeof t));
  return KILN_OK;
}

kiln_status kir_window_geom_make(kir_prim prim, const kir_p_window *p, const kir_aval *x,
                                 kir_window_geom *g) {
  const char *op = kir_prim_name(prim);
  bool dilated = kir_prim_get(prim)->params != KIR_PARAMS_SELECT_SCATTER;
  kiln_status st = kir_window_list(op, "window_dimensions", &p->window_dimensions, false, x);
  if (st == KILN_OK) st = kir_window_list(op, "window_strides", &p->window_strides, false, x);
  if (st == KILN_OK && dilated)
    st = kir_window_list(op, "base_dilation", &p->base_dilation, true, x);
  if (st == KILN_OK && dilated)
    st = kir_window_list(op, "window_dilation", &p->window_dilation, true, x);
  if (st != KILN_OK) return st;
  char t[KIR_AVAL_STR_CAP], wb[256], sb[256];
  if (p->padding.n != x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "%s: padding has %d pairs for operand %s of rank %d", op,
                      p->padding.n, kir_aval_str(x, t, sizeof t), x->rank);
  memset(g, 0, sizeof *g);
  g->rank = x->rank;
  for (int d = 0; d < x->rank; d++) {
    g->in[d] = x->shape[d];
    g->win[d] = p->window_dimensions.v[d];
    g->stride[d] = p->window_strides.v[d];
    g->base[d] = dilated && p->base_dilation.n ? p->base_dilation.v[d] : 1;
    g->wdil[d] = dilated && p->window_dilation.n ? p->window_dilation.v[d] : 1;
    g->lo[d] = p->padding.lo[d];
    int64_t padded = kir_dilated(g->in[d], g->base[d]) + p->padding.lo[d] + p->padding.hi[d];
    int64_t span = kir_dilated(g->win[d], g->wdil[d]);
    g->out[d] = padded < 0 ? -1 : kir_floor_div(padded - span, g->stride[d]) + 1;
    if (g->out[d] < 0)
      return kcore_fail(KILN_ERR_SHAPE,
                        "%s: dimension %d of operand %s padded by (%lld, %lld) to %lld is "
                        "smaller than the window (window_dimensions=%s, window_dilation=%s)",
                        op, d, kir_aval_str(x, t, sizeof t), (long long)p->padding.lo[d],
                        (long long)p->padding.hi[d], (long long)padded,
                        kir_sizes_str(&p->window_dimensions, wb, sizeof wb),
                        kir_list_str(&p->window_dilation, x->rank, sb, sizeof sb));
  }
  return KILN_OK;
}

int64_t kir_window_source(const kir_window_geom *g, int d, int64_t o, int64_t k) {
  int64_t pos = o * g->stride[d] + k * g->wdil[d] - g->lo[d];
  if (pos < 0 || pos % g->base[d] != 0) return -1;
  pos /= g->base[d];
  return pos < g->in[d] ? pos : -1;
}

/* sum takes numbers, max/min anything (bool included, as lax's chooser). */
kiln_status kir_rule_reduce_window(kir_prim prim, const kir_params *params, int n_in,
                                   const kir_aval *in, kir_avals *out) {
  (void)n_in;
  unsigned accepts = prim == KIR_PRIM_REDUCE_WINDOW_SUM ? KIR_DT_NUM : KIR_DT_ANY;
  kiln_status st = kir_check_dtype_class(prim, 0, in, accepts);
  kir_window_geom g;
  if (st == KILN_OK) st = kir_window_geom_make(prim, &params->window, &in[0], &g);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, g.rank, g.out, in[0].weak);
}

static kiln_status kir_check_select_prim(kir_prim prim, const kir_p_window *p) {
  if (p->select_prim == KIR_PRIM_GE || p->select_prim == KIR_PRIM_LE) return KILN_OK;
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: select_prim=%s must be ge or le", kir_prim_name(prim),
                    kir_prim_name((kir_prim)p->select_prim));
}

/* in[0] (tangents or source) must be a float of the operand's dtype class. */
static kiln_status kir_check_pair(kir_prim prim, const kir_aval *in, const char *what) {
  char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
  kiln_status st = kir_check_dtype_class(prim, 0, in, KIR_DT_FLOAT);
  if (st == KILN_OK) st = kir_check_dtype_class(prim, 1, in, KIR_DT_NUM);
  if (st == KILN_OK && in[0].dtype != in[1].dtype)
    st = kcore_fail(KILN_ERR_DTYPE, "%s: %s %s and operand %s have different dtypes",
                    kir_prim_name(prim), what, kir_aval_str(&in[0], a, sizeof a),
                    kir_aval_str(&in[1], b, sizeof b));
  return st;
}

/* tangents and operand of one shape; the result has the windows' shape. */
kiln_status kir_rule_select_and_gather_add(kir_prim prim, const kir_params *params, int n_in,
                                           const kir_aval *in, kir_avals *out) {
  (void)n_in;
  char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
  kiln_status st = kir_check_select_prim(prim, &params->select_gather);
  if (st == KILN_OK) st = kir_check_pair(prim, in, "tangents");
  if (st == KILN_OK && !kir_aval_same_shape(&in[0], &in[1]))
    st = kcore_fail(KILN_ERR_SHAPE, "%s: tangents %s and operand %s differ in shape",
                    kir_prim_name(prim), kir_aval_str(&in[0], a, sizeof a),
                    kir_aval_str(&in[1], b, sizeof b));
  kir_window_geom g;
  if (st == KILN_OK) st = kir_window_geom_make(prim, &params->select_gather, &in[1], &g);
  if (st != KILN_OK) return st;
  return kir_push(out, in[0].dtype, g.rank, g.out, kir_all_weak(2, in));
}

/* source has the windows' shape; the result the operand's. */
kiln_status kir_rule_select_and_scatter_add(kir_prim prim, const kir_params *params, int n_in,
                                            const kir_aval *in, kir_avals *out) {
  (void)n_in;
  char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
  kiln_status st = kir_check_select_prim(prim, &params->select_scatter);
  if (st == KILN_OK) st = kir_check_pair(prim, in, "source");
  kir_window_geom g;
  if (st == KILN_OK) st = kir_window_geom_make(prim, &params->select_scatter, &in[1], &g);
  if (st != KILN_OK) return st;
  kir_aval want = kir_aval_make(in[0].dtype, g.rank, g.out, false);
  if (!kir_aval_same_shape(&in[0], &want))
    return kcore_fail(KILN_ERR_SHAPE, "%s: source %s must have the windows' shape %s of operand %s",
                      kir_prim_name(prim), kir_aval_str(&in[0], a, sizeof a),
                      kir_aval_str(&want, b, sizeof b),
                      kir_aval_str(&in[1], (char[KIR_AVAL_STR_CAP]){0}, KIR_AVAL_STR_CAP));
  return kir_push(out, in[0].dtype, in[1].rank, in[1].shape, kir_all_weak(2, in));
}
