/* jvp and transpose rules of the window ops, as JAX's: reduce_window_sum
 * is linear, its transpose a pad of the cotangent (strides become interior
 * padding) and a reduce_window_sum over it; reduce_window_max/min take the
 * tangent where the window's chosen element is (select_and_gather_add with
 * ge/le, ties to the first); select_and_gather_add and
 * select_and_scatter_add are linear in their first operand and each
 * other's transpose. */
#include <math.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static void set_sizes(kir_sizes *s, int n, const int64_t *v) {
  s->n = n;
  memcpy(s->v, v, (size_t)n * sizeof *v);
}

static void set_ones(kir_sizes *s, int n) {
  s->n = n;
  for (int i = 0; i < n; i++) s->v[i] = 1;
}

/* A dilated extent: 1 + dil * (n - 1), 0 for an empty one. */
static int64_t dilate(int64_t n, int64_t dil) { return n == 0 ? 0 : 1 + dil * (n - 1); }

static kiln_status jvp_linear(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  if (tx[0] == KIR_NO_VAR) {
    ty[0] = KIR_NO_VAR;
    return KILN_OK;
  }
  kir_vid in[2] = {tx[0], x[1]};
  return kir_emit_like(p, e, e->n_in, in, ty);
}

/* JAX's _reduce_window_chooser_jvp_rule. */
static kiln_status jvp_chooser(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.select_gather = e->params.window;
  pr.select_gather.select_prim = e->prim == KIR_PRIM_REDUCE_WINDOW_MAX ? KIR_PRIM_GE : KIR_PRIM_LE;
  kir_vid in[2] = {tx[0], x[0]};
  return kir_emit(p, KIR_PRIM_SELECT_AND_GATHER_ADD, &pr, 2, in, ty);
}

/* JAX's _reduce_window_sum_transpose_rule with the padding of
 * _conv_general_vjp_lhs_padding. */
static kiln_status tr_reduce_window_sum(kir_program *p, const kir_program *src, const kir_eqn *e,
                                        const bool *lin, const kir_vid *x, const kir_vid *ct,
                                        kir_vid *ct_x) {
  (void)lin, (void)x;
  const kir_aval *in = kir_var_aval(src, e->in[0]), *out = kir_var_aval(p, ct[0]);
  kir_window_geom g;
  TRY(kir_window_geom_make(e->prim, &e->params.window, in, &g));
  kir_params pad;
  memset(&pad, 0, sizeof pad);
  kir_padding *pc = &pad.pad.padding_config;
  pc->n = g.rank;
  for (int d = 0; d < g.rank; d++) {
    int64_t lhs = dilate(in->shape[d], g.base[d]), rhs = dilate(g.win[d], g.wdil[d]);
    pc->lo[d] = rhs - g.lo[d] - 1;
    pc->hi[d] = lhs + rhs - 1 - dilate(out->shape[d], g.stride[d]) - pc->lo[d];
    pc->interior[d] = g.stride[d] - 1;
  }
  kir_vid pin[2] = {ct[0], KIR_NO_VAR}, padded;
  TRY(kir_emit_scalar(p, ct[0], 0, &pin[1]));
  TRY(kir_emit(p, KIR_PRIM_PAD, &pad, 2, pin, &padded));
  kir_params rw;
  memset(&rw, 0, sizeof rw);
  kir_p_window *w = &rw.window;
  set_sizes(&w->window_dimensions, g.rank, g.win);
  set_sizes(&w->window_strides, g.rank, g.base);
  set_ones(&w->base_dilation, g.rank);
  set_sizes(&w->window_dilation, g.rank, g.wdil);
  w->padding.n = g.rank;
  return kir_emit(p, KIR_PRIM_REDUCE_WINDOW_SUM, &rw, 1, &padded, &ct_x[0]);
}

/* JAX's _select_and_gather_add_transpose: base dilation pads the operand
 * with the select identity and slices the scattered result back. */
static kiln_status tr_select_and_gather_add(kir_program *p, const kir_program *src,
                                            const kir_eqn *e, const bool *lin, const kir_vid *x,
                                            const kir_vid *ct, kir_vid *ct_x) {
  const kir_p_window *w = &e->params.select_gather;
  const kir_aval *xa = kir_var_aval(src, e->in[1]);
  char sb[256];
  if (!lin[0] || lin[1])
    return kcore_fail(KILN_ERR_ARGUMENT, "select_and_gather_add: transpose is linear in the "
                      "tangents only");
  kir_window_geom g;
  TRY(kir_window_geom_make(e->prim, w, xa, &g));
  bool base_dilated = false;
  for (int d = 0; d < g.rank; d++) {
    if (g.wdil[d] != 1)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED, "select_and_gather_add: VJP not implemented "
                        "with window dilation, got window_dilation=%s",
                        kir_sizes_str(&w->window_dilation, sb, sizeof sb));
    base_dilated |= g.base[d] != 1;
  }
  kir_vid operand = x[1];
  if (base_dilated) {
    kir_params pad;
    memset(&pad, 0, sizeof pad);
    pad.pad.padding_config.n = g.rank;
    for (int d = 0; d < g.rank; d++) pad.pad.padding_config.interior[d] = g.base[d] - 1;
    kir_vid in[2] = {operand, KIR_NO_VAR};
    TRY(kir_emit_scalar(p, operand, w->select_prim == KIR_PRIM_GE ? -INFINITY : INFINITY, &in[1]));
    TRY(kir_emit(p, KIR_PRIM_PAD, &pad, 2, in, &operand));
  }
  kir_params sc;
  memset(&sc, 0, sizeof sc);
  sc.select_scatter.padding = w->padding;
  sc.select_scatter.select_prim = w->select_prim;
  sc.select_scatter.window_dimensions = w->window_dimensions;
  sc.select_scatter.window_strides = w->window_strides;
  kir_vid in[2] = {ct[0], operand}, r;
  TRY(kir_emit(p, KIR_PRIM_SELECT_AND_SCATTER_ADD, &sc, 2, in, &r));
  if (!base_dilated) {
    ct_x[0] = r;
    return KILN_OK;
  }
  kir_params sl;
  memset(&sl, 0, sizeof sl);
  const kir_aval *ra = kir_var_aval(p, r);
  set_sizes(&sl.slice.limit_indices, ra->rank, ra->shape);
  sl.slice.start_indices.n = ra->rank;
  set_sizes(&sl.slice.strides, g.rank, g.base);
  return kir_emit(p, KIR_PRIM_SLICE, &sl, 1, &r, &ct_x[0]);
}

/* JAX's _select_and_scatter_add_transpose: a gather with no dilation. */
static kiln_status tr_select_and_scatter_add(kir_program *p, const kir_program *src,
                                             const kir_eqn *e, const bool *lin, const kir_vid *x,
                                             const kir_vid *ct, kir_vid *ct_x) {
  (void)src;
  if (!lin[0] || lin[1])
    return kcore_fail(KILN_ERR_ARGUMENT, "select_and_scatter_add: transpose is linear in the "
                      "source only");
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.select_gather = e->params.select_scatter;
  int rank = e->params.select_scatter.window_dimensions.n;
  set_ones(&pr.select_gather.base_dilation, rank);
  set_ones(&pr.select_gather.window_dilation, rank);
  kir_vid in[2] = {ct[0], x[1]};
  return kir_emit(p, KIR_PRIM_SELECT_AND_GATHER_ADD, &pr, 2, in, &ct_x[0]);
}

void kir_window_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_REDUCE_WINDOW_SUM] = jvp_linear;
  r->transpose[KIR_PRIM_REDUCE_WINDOW_SUM] = tr_reduce_window_sum;
  r->jvp[KIR_PRIM_REDUCE_WINDOW_MAX] = jvp_chooser;
  r->jvp[KIR_PRIM_REDUCE_WINDOW_MIN] = jvp_chooser;
  r->jvp[KIR_PRIM_SELECT_AND_GATHER_ADD] = jvp_linear;
  r->transpose[KIR_PRIM_SELECT_AND_GATHER_ADD] = tr_select_and_gather_add;
  r->jvp[KIR_PRIM_SELECT_AND_SCATTER_ADD] = jvp_linear;
  r->transpose[KIR_PRIM_SELECT_AND_SCATTER_ADD] = tr_select_and_scatter_add;
}
