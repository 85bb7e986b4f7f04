/* jvp and transpose rules of the scatter family, as JAX's (lax/slicing.py):
 * scatter-add is linear; scatter's jvp tags every update with a unique id
 * to find which one won each element (_scatter_jvp), or with
 * unique_indices scatters the tangents directly; scatter-mul's jvp needs
 * unique indices for the updates (_scatter_mul_jvp_rhs); scatter-min/max
 * share the tangent between the contending values (_scatter_extremal_jvp).
 * Every non-linear step works on primals, so the tangents stay linear and
 * reverse mode transposes them through gather <-> scatter-add. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

/* The gather that undoes scatter s on an operand of rank `rank` with
 * updates ua (JAX's gather_dnums and slice_sizes). */
static void inverse_gather(const kir_p_scatter *s, int rank, const kir_aval *ua,
                           kir_gather_mode mode, kir_opt_f64 fill, kir_params *pr) {
  const kir_scatter_dims *d = &s->dimension_numbers;
  memset(pr, 0, sizeof *pr);
  kir_p_gather *g = &pr->gather;
  g->dimension_numbers = (kir_gather_dims){d->update_window_dims, d->inserted_window_dims,
                                           d->scatter_dims_to_operand_dims,
                                           d->operand_batching_dims,
                                           d->scatter_indices_batching_dims};
  g->indices_are_sorted = s->indices_are_sorted;
  g->unique_indices = s->unique_indices;
  g->mode = mode;
  g->fill_value = fill;
  g->slice_sizes.n = rank;
  for (int i = 0, pos = 0; i < rank; i++) {
    bool one = false;
    for (int k = 0; k < d->inserted_window_dims.n; k++) one |= d->inserted_window_dims.v[k] == i;
    for (int k = 0; k < d->operand_batching_dims.n; k++) one |= d->operand_batching_dims.v[k] == i;
    g->slice_sizes.v[i] = one ? 1 : ua->shape[d->update_window_dims.v[pos++]];
  }
}

/* What one rule needs about its equation: the scatter's params, the
 * operand/updates types and the index operand. */
typedef struct scatter_eqn {
  const kir_p_scatter *s;
  const kir_aval *oa, *ua;
  kir_vid idx;
} scatter_eqn;

/* JAX's gather(v, indices, gather_dnums, slice_sizes) with its default
 * mode (FILL_OR_DROP) and fill. */
static kiln_status gather_back(kir_program *p, const scatter_eqn *q, kir_vid v, kir_vid *out) {
  kir_params pr;
  inverse_gather(q->s, q->oa->rank, q->ua, KIR_GATHER_FILL_OR_DROP, (kir_opt_f64){false, 0}, &pr);
  kir_vid in[2] = {v, q->idx};
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, in, out);
}

/* prim(x, indices, u) with the equation's dimension numbers; `own` keeps
 * its sorted/unique/mode params, else JAX's defaults (FILL_OR_DROP). */
static kiln_status scatter_like(kir_program *p, const scatter_eqn *q, kir_prim prim, bool own,
                                kir_vid x, kir_vid u, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.scatter = *q->s;
  if (!own) {
    pr.scatter.indices_are_sorted = pr.scatter.unique_indices = false;
    pr.scatter.mode = KIR_GATHER_FILL_OR_DROP;
  }
  kir_vid in[3] = {x, q->idx, u};
  return kir_emit(p, prim, &pr, 3, in, out);
}

static scatter_eqn scatter_eqn_of(const kir_program *src, const kir_eqn *e, kir_vid idx) {
  return (scatter_eqn){&e->params.scatter, kir_var_aval(src, e->in[0]),
                       kir_var_aval(src, e->in[2]), idx};
}

/* Both tangents instantiated (zeros for symbolic ones); false if both are
 * zero, then the result's tangent is zero too. */
static kiln_status tangents(kir_program *p, const kir_vid *x, const kir_vid *tx, kir_vid *t,
                            bool *any) {
  *any = tx[0] != KIR_NO_VAR || tx[2] != KIR_NO_VAR;
  t[0] = tx[0], t[1] = tx[2];
  if (!*any) return KILN_OK;
  for (int i = 0; i < 2; i++)
    if (t[i] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, x[2 * i]), &t[i]));
  return KILN_OK;
}

static kiln_status no_unique(const kir_eqn *e, const char *what) {
  return kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: %s is only implemented for unique_indices=True "
                    "(as JAX)", kir_prim_name(e->prim), what);
}

/* ---- scatter-add: linear ---- */

static kiln_status jvp_scatter_add(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                   const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid t[2];
  bool any;
  TRY(tangents(p, x, tx, t, &any));
  kir_vid in[3] = {t[0], x[1], t[1]};
  if (!any) return ty[0] = KIR_NO_VAR, KILN_OK;
  return kir_emit_like(p, e, 3, in, ty);
}

/* JAX's _scatter_add_transpose_rule: the operand's cotangent passes
 * through; the updates' is a gather of it (filling 0). */
static kiln_status tr_scatter_add(kir_program *p, const kir_program *src, const kir_eqn *e,
                                  const bool *lin, const kir_vid *x, const kir_vid *ct,
                                  kir_vid *ct_x) {
  if (lin[0]) ct_x[0] = ct[0];
  if (!lin[2]) return KILN_OK;
  kir_params pr;
  inverse_gather(&e->params.scatter, kir_var_aval(src, e->out[0])->rank,
                 kir_var_aval(src, e->in[2]), e->params.scatter.mode, (kir_opt_f64){true, 0.0},
                 &pr);
  kir_vid in[2] = {ct[0], x[1]};
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, in, &ct_x[2]);
}

/* ---- scatter ---- */

/* JAX's _scatter_jvp: with possibly repeated indices, ids 1..n scattered
 * like the updates tell which update each element kept (0: the operand's);
 * the tangent is a scatter-add of the tangents masked to the winners. */
static kiln_status jvp_scatter(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid t[2];
  bool any;
  TRY(tangents(p, x, tx, t, &any));
  if (!any) return ty[0] = KIR_NO_VAR, KILN_OK;
  const kir_p_scatter *s = &e->params.scatter;
  if (s->unique_indices) {
    kir_vid in[3] = {t[0], x[1], t[1]};
    return kir_emit_like(p, e, 3, in, ty);
  }
  const kir_aval *oa = kir_var_aval(p, x[0]), *ua = kir_var_aval(p, x[2]);
  scatter_eqn q = {s, oa, ua, x[1]};
  /* One id per update window: updates' shape with the window dims 1. */
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  int64_t n_ids = 1;
  pr.reshape.new_sizes.n = ua->rank;
  for (int d = 0; d < ua->rank; d++) {
    bool window = false;
    for (int k = 0; k < s->dimension_numbers.update_window_dims.n; k++)
      window |= s->dimension_numbers.update_window_dims.v[k] == d;
    n_ids *= pr.reshape.new_sizes.v[d] = window ? 1 : ua->shape[d];
  }
  kiln_dtype id_dt = n_ids < (int64_t)UINT32_MAX ? KILN_U32 : KILN_U64;
  kir_params ip;
  memset(&ip, 0, sizeof ip);
  ip.iota = (kir_p_iota){0, id_dt, {1, {n_ids}}};
  kir_vid iota, ids0, one, ids, zeros_o, scattered, gathered, op_kept, upd_won;
  TRY(kir_emit(p, KIR_PRIM_IOTA, &ip, 0, NULL, &iota));
  TRY(kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &iota, &ids0));
  TRY(kir_emit_scalar(p, ids0, 1, &one));
  TRY(kir_emit2(p, KIR_PRIM_ADD, ids0, one, &ids));
  kir_aval ida = *ua;
  ida.dtype = id_dt;
  ida.weak = false;
  TRY(kir_emit_broadcast_to(p, ids, &ida, &ids));
  kir_aval zoa = *oa;
  zoa.dtype = id_dt;
  zoa.weak = false;
  TRY(kir_emit_zeros(p, &zoa, &zeros_o));
  TRY(scatter_like(p, &q, KIR_PRIM_SCATTER, true, zeros_o, ids, &scattered));
  TRY(gather_back(p, &q, scattered, &gathered));
  TRY(kir_emit2(p, KIR_PRIM_EQ, scattered, zeros_o, &op_kept));
  TRY(kir_emit2(p, KIR_PRIM_EQ, ids, gathered, &upd_won));
  kir_vid zt_o, zt_u, mt_o, mt_u;
  TRY(kir_emit_zeros(p, oa, &zt_o));
  TRY(kir_emit_zeros(p, ua, &zt_u));
  TRY(kir_emit_select(p, op_kept, zt_o, t[0], oa, &mt_o));
  TRY(kir_emit_select(p, upd_won, zt_u, t[1], ua, &mt_u));
  return scatter_like(p, &q, KIR_PRIM_SCATTER_ADD, true, mt_o, mt_u, ty);
}

/* JAX's _scatter_transpose_rule (unique indices only): the operand's
 * cotangent with the overwritten elements zeroed; the updates' gathered. */
static kiln_status tr_scatter(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  if (!e->params.scatter.unique_indices) return no_unique(e, "transpose");
  scatter_eqn q = scatter_eqn_of(src, e, x[1]);
  if (lin[0]) {
    kir_vid z;
    kir_aval za = *q.ua;
    za.dtype = kir_var_aval(p, ct[0])->dtype;
    TRY(kir_emit_zeros(p, &za, &z));
    TRY(scatter_like(p, &q, KIR_PRIM_SCATTER, true, ct[0], z, &ct_x[0]));
  }
  if (!lin[2]) return KILN_OK;
  kir_params pr;
  inverse_gather(q.s, q.oa->rank, q.ua, q.s->mode, (kir_opt_f64){true, 0.0}, &pr);
  kir_vid in[2] = {ct[0], x[1]};
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, in, &ct_x[2]);
}

/* ---- scatter-mul ---- */

/* d(x * prod u) = scatter_mul(dx, i, u) + x * scatter_add(0, i, du). */
static kiln_status jvp_scatter_mul(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                   const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid lhs = KIR_NO_VAR, rhs = KIR_NO_VAR;
  if (tx[0] != KIR_NO_VAR) {
    kir_vid in[3] = {tx[0], x[1], x[2]};
    TRY(kir_emit_like(p, e, 3, in, &lhs));
  }
  if (tx[2] != KIR_NO_VAR) {
    if (!e->params.scatter.unique_indices) return no_unique(e, "the jvp in the updates");
    scatter_eqn q = {&e->params.scatter, kir_var_aval(p, x[0]), kir_var_aval(p, x[2]), x[1]};
    kir_vid z, sum;
    TRY(kir_emit_zeros(p, q.oa, &z));
    TRY(scatter_like(p, &q, KIR_PRIM_SCATTER_ADD, true, z, tx[2], &sum));
    TRY(kir_emit2(p, KIR_PRIM_MUL, x[0], sum, &rhs));
  }
  return kir_emit_add_any(p, lhs, rhs, ty);
}

/* Linear in the operand only (the jvp above never makes it linear in the
 * updates). */
static kiln_status tr_scatter_mul(kir_program *p, const kir_program *src, const kir_eqn *e,
                                  const bool *lin, const kir_vid *x, const kir_vid *ct,
                                  kir_vid *ct_x) {
  (void)src;
  if (lin[2]) return no_unique(e, "the transpose in the updates");
  kir_vid in[3] = {ct[0], x[1], x[2]};
  return kir_emit_like(p, e, 3, in, &ct_x[0]);
}

/* ---- scatter-min / scatter-max ---- */

/* JAX's _scatter_extremal_jvp: an element's tangent is shared equally by
 * the update values that reached the extreme and the operand's value if it
 * kept it; the coefficients come from primals only. */
static kiln_status jvp_scatter_extremal(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                        const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  kir_vid t[2];
  bool any;
  TRY(tangents(p, x, tx, t, &any));
  if (!any) return ty[0] = KIR_NO_VAR, KILN_OK;
  const kir_aval *oa = kir_var_aval(p, x[0]), *ua = kir_var_aval(p, x[2]);
  scatter_eqn q = {&e->params.scatter, oa, ua, x[1]};
  kir_vid initial, target, succ, kept, zo, zu, ou, one, m1;
  TRY(gather_back(p, &q, x[0], &initial));
  TRY(gather_back(p, &q, y[0], &target));
  TRY(kir_emit2(p, KIR_PRIM_EQ, x[2], target, &succ));
  TRY(kir_emit2(p, KIR_PRIM_EQ, initial, target, &kept));
  TRY(kir_emit_zeros(p, oa, &zo));
  TRY(kir_emit_zeros(p, ua, &zu));
  TRY(kir_emit_scalar(p, x[2], 1, &one));
  TRY(kir_emit_scalar(p, x[2], -1, &m1));
  TRY(kir_emit_broadcast_to(p, one, ua, &ou));
  kir_vid won, n_upd, n_ref, n_upd1, inv, inv1, upd_norm, upd_coef, op_norm, op_coef, tmp;
  TRY(kir_emit_select(p, succ, zu, ou, ua, &won));
  TRY(scatter_like(p, &q, KIR_PRIM_SCATTER_ADD, false, zo, won, &tmp));
  TRY(gather_back(p, &q, tmp, &n_upd));
  TRY(scatter_like(p, &q, KIR_PRIM_SCATTER_ADD, false, zo, ou, &tmp));
  TRY(gather_back(p, &q, tmp, &n_ref));
  TRY(kir_emit2(p, KIR_PRIM_ADD, n_upd, one, &n_upd1));
  TRY(kir_emit2(p, KIR_PRIM_DIV, one, n_upd, &inv));
  TRY(kir_emit2(p, KIR_PRIM_DIV, one, n_upd1, &inv1));
  TRY(kir_emit_select(p, kept, inv, inv1, ua, &upd_norm));
  TRY(kir_emit_select(p, succ, zu, upd_norm, ua, &upd_coef));
  TRY(kir_emit_select(p, kept, zu, inv1, ua, &op_norm));
  TRY(kir_emit2(p, KIR_PRIM_ADD, m1, op_norm, &tmp));
  TRY(kir_emit2(p, KIR_PRIM_DIV, tmp, n_ref, &op_coef));
  /* The tangent: linear in t[0] (through the gather) and t[1]. */
  kir_vid target_t, a, b, tu;
  TRY(gather_back(p, &q, t[0], &target_t));
  TRY(kir_emit2(p, KIR_PRIM_MUL, target_t, op_coef, &a));
  TRY(kir_emit2(p, KIR_PRIM_MUL, t[1], upd_coef, &b));
  TRY(kir_emit2(p, KIR_PRIM_ADD, a, b, &tu));
  return scatter_like(p, &q, KIR_PRIM_SCATTER_ADD, true, t[0], tu, ty);
}

void kir_scatter_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_SCATTER_ADD] = jvp_scatter_add;
  r->transpose[KIR_PRIM_SCATTER_ADD] = tr_scatter_add;
  r->jvp[KIR_PRIM_SCATTER] = jvp_scatter;
  r->transpose[KIR_PRIM_SCATTER] = tr_scatter;
  r->jvp[KIR_PRIM_SCATTER_MUL] = jvp_scatter_mul;
  r->transpose[KIR_PRIM_SCATTER_MUL] = tr_scatter_mul;
  r->jvp[KIR_PRIM_SCATTER_MIN] = jvp_scatter_extremal;
  r->jvp[KIR_PRIM_SCATTER_MAX] = jvp_scatter_extremal;
}
