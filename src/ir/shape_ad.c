/* jvp and transpose rules of the structural primitives. All are linear in
 * their array operand, so the jvp applies the primitive to the tangent and
 * the transpose undoes the data movement: broadcast_in_dim <-> reduce_sum,
 * reshape/squeeze/expand_dims <-> reshape, transpose <-> the inverse
 * permutation, rev <-> rev, slice <-> pad, concatenate <-> slices,
 * dynamic_slice <-> dynamic_update_slice, gather <-> scatter-add. Index
 * operands are primal: they have no tangent. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static kiln_status jvp_struct(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status reshape_to(kir_program *p, kir_vid v, const kir_aval *to, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = to->rank;
  memcpy(pr.reshape.new_sizes.v, to->shape, (size_t)to->rank * sizeof(int64_t));
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &v, out);
}

static kiln_status tr_reshape(kir_program *p, const kir_program *src, const kir_eqn *e,
                              const bool *lin, const kir_vid *x, const kir_vid *ct,
                              kir_vid *ct_x) {
  (void)lin, (void)x;
  return reshape_to(p, ct[0], kir_var_aval(src, e->in[0]), &ct_x[0]);
}

/* sums over the dims broadcast_in_dim added and the size-1 dims it
 * stretched, then reshapes to the operand */
static kiln_status tr_broadcast(kir_program *p, const kir_program *src, const kir_eqn *e,
                                const bool *lin, const kir_vid *x, const kir_vid *ct,
                                kir_vid *ct_x) {
  (void)lin, (void)x;
  const kir_aval *a = kir_var_aval(src, e->in[0]), *o = kir_var_aval(src, e->out[0]);
  const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  for (int i = 0; i < o->rank; i++) {
    int k = 0;
    while (k < bd->n && bd->v[k] != i) k++;
    if (k == bd->n || (a->shape[k] == 1 && o->shape[i] != 1))
      pr.axes.axes.v[pr.axes.axes.n++] = (int8_t)i;
  }
  kir_vid s = ct[0];
  if (pr.axes.axes.n) TRY(kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &s, &s));
  if (kir_aval_same_shape(kir_var_aval(p, s), a)) {
    ct_x[0] = s;
    return KILN_OK;
  }
  return reshape_to(p, s, a, &ct_x[0]);
}

static kiln_status tr_transpose(kir_program *p, const kir_program *src, const kir_eqn *e,
                                const bool *lin, const kir_vid *x, const kir_vid *ct,
                                kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  const kir_dims *perm = &e->params.transpose.permutation;
  pr.transpose.permutation.n = perm->n;
  for (int i = 0; i < perm->n; i++) pr.transpose.permutation.v[perm->v[i]] = (int8_t)i;
  return kir_emit(p, KIR_PRIM_TRANSPOSE, &pr, 1, ct, &ct_x[0]);
}

static kiln_status tr_rev(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  return kir_emit_like(p, e, 1, ct, &ct_x[0]);
}

/* slice's transpose: the cotangent padded with zeros back into place
 * (strides become interior padding) */
static kiln_status tr_slice(kir_program *p, const kir_program *src, const kir_eqn *e,
                            const bool *lin, const kir_vid *x, const kir_vid *ct,
                            kir_vid *ct_x) {
  (void)lin, (void)x;
  const kir_aval *a = kir_var_aval(src, e->in[0]), *o = kir_var_aval(src, e->out[0]);
  const kir_p_slice *s = &e->params.slice;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  kir_padding *pc = &pr.pad.padding_config;
  pc->n = a->rank;
  for (int i = 0; i < a->rank; i++) {
    int64_t st = s->strides.n ? s->strides.v[i] : 1;
    pc->lo[i] = s->start_indices.v[i];
    pc->interior[i] = st - 1;
    int64_t used = o->shape[i] == 0 ? 0 : pc->lo[i] + (o->shape[i] - 1) * st + 1;
    pc->hi[i] = a->shape[i] - (o->shape[i] == 0 ? pc->lo[i] : used);
  }
  kir_vid in[2] = {ct[0], KIR_NO_VAR};
  TRY(kir_emit_scalar(p, ct[0], 0, &in[1]));
  return kir_emit(p, KIR_PRIM_PAD, &pr, 2, in, &ct_x[0]);
}

static kiln_status jvp_concat(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid *in = kir_alloc(p, (size_t)e->n_in * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "concatenate: jvp out of host memory");
  for (int i = 0; i < e->n_in; i++) {
    in[i] = tx[i];
    if (in[i] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, x[i]), &in[i]));
  }
  return kir_emit_like(p, e, e->n_in, in, ty);
}

static kiln_status tr_concat(kir_program *p, const kir_program *src, const kir_eqn *e,
                             const bool *lin, const kir_vid *x, const kir_vid *ct,
                             kir_vid *ct_x) {
  (void)x;
  const kir_aval *o = kir_var_aval(src, e->out[0]);
  int64_t d = e->params.concatenate.dimension, off = 0;
  for (int i = 0; i < e->n_in; i++) {
    const kir_aval *a = kir_var_aval(src, e->in[i]);
    if (lin[i]) {
      kir_params pr;
      memset(&pr, 0, sizeof pr);
      kir_p_slice *s = &pr.slice;
      s->start_indices.n = s->limit_indices.n = s->strides.n = o->rank;
      for (int k = 0; k < o->rank; k++) {
        s->start_indices.v[k] = k == d ? off : 0;
        s->limit_indices.v[k] = k == d ? off + a->shape[k] : o->shape[k];
        s->strides.v[k] = 1;
      }
      TRY(kir_emit(p, KIR_PRIM_SLICE, &pr, 1, ct, &ct_x[i]));
    }
    off += a->shape[d];
  }
  return KILN_OK;
}

/* ---- pad ---- */

static kiln_status jvp_pad(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                           const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid in[2] = {tx[0], tx[1]};
  if (in[0] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, x[0]), &in[0]));
  if (in[1] == KIR_NO_VAR) TRY(kir_emit_scalar(p, x[0], 0, &in[1]));
  return kir_emit_like(p, e, 2, in, ty);
}

/* JAX's _pad_transpose: crop the edges with a negative pad, then take every
 * (interior+1)-th element; the padding value gets what is left over. */
static kiln_status tr_pad(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  (void)x;
  const kir_padding *pc = &e->params.pad.padding_config;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.pad.padding_config.n = pc->n;
  for (int i = 0; i < pc->n; i++) {
    pr.pad.padding_config.lo[i] = -pc->lo[i];
    pr.pad.padding_config.hi[i] = -pc->hi[i];
  }
  kir_vid in[2] = {ct[0], KIR_NO_VAR}, cropped, t_op;
  TRY(kir_emit_scalar(p, ct[0], 0, &in[1]));
  TRY(kir_emit(p, KIR_PRIM_PAD, &pr, 2, in, &cropped));
  const kir_aval *ca = kir_var_aval(p, cropped);
  memset(&pr, 0, sizeof pr);
  kir_p_slice *sl = &pr.slice;
  sl->start_indices.n = sl->limit_indices.n = sl->strides.n = ca->rank;
  for (int i = 0; i < ca->rank; i++) {
    sl->limit_indices.v[i] = ca->shape[i];
    sl->strides.v[i] = pc->interior[i] + 1;
  }
  TRY(kir_emit(p, KIR_PRIM_SLICE, &pr, 1, &cropped, &t_op));
  if (lin[0]) ct_x[0] = t_op;
  if (lin[1]) {
    kir_vid a, b;
    memset(&pr, 0, sizeof pr);
    for (int i = 0; i < ca->rank; i++) pr.axes.axes.v[pr.axes.axes.n++] = (int8_t)i;
    TRY(kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, ct, &a));
    TRY(kir_emit(p, KIR_PRIM_REDUCE_SUM, &pr, 1, &t_op, &b));
    TRY(kir_emit2(p, KIR_PRIM_SUB, a, b, &ct_x[1]));
  }
  (void)src;
  return KILN_OK;
}

/* ---- dynamic_slice <-> dynamic_update_slice ---- */

/* operands with the first n replaced (the start indices stay primal) */
static kir_vid *with_heads(kir_program *p, const kir_eqn *e, const kir_vid *x, int n,
                           const kir_vid *heads) {
  kir_vid *in = kir_alloc(p, (size_t)e->n_in * sizeof *in);
  if (!in) return NULL;
  memcpy(in, x, (size_t)e->n_in * sizeof *in);
  memcpy(in, heads, (size_t)n * sizeof *in);
  return in;
}

#define OOM(op) kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: autodiff out of host memory", op)

static kiln_status jvp_dynamic_slice(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                     const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid *in = with_heads(p, e, x, 1, tx);
  return in ? kir_emit_like(p, e, e->n_in, in, ty) : OOM("dynamic_slice");
}

static kiln_status tr_dynamic_slice(kir_program *p, const kir_program *src, const kir_eqn *e,
                                    const bool *lin, const kir_vid *x, const kir_vid *ct,
                                    kir_vid *ct_x) {
  (void)lin;
  kir_vid h[2] = {KIR_NO_VAR, ct[0]};
  TRY(kir_emit_zeros(p, kir_var_aval(src, e->in[0]), &h[0]));
  kir_vid *in = kir_alloc(p, (size_t)(e->n_in + 1) * sizeof *in);
  if (!in) return OOM("dynamic_slice");
  memcpy(in, h, sizeof h);
  memcpy(in + 2, x + 1, (size_t)(e->n_in - 1) * sizeof *in);
  return kir_emit(p, KIR_PRIM_DYNAMIC_UPDATE_SLICE, NULL, e->n_in + 1, in, &ct_x[0]);
}

static kiln_status jvp_dus(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                           const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid h[2] = {tx[0], tx[1]};
  for (int i = 0; i < 2; i++)
    if (h[i] == KIR_NO_VAR) TRY(kir_emit_zeros(p, kir_var_aval(p, x[i]), &h[i]));
  kir_vid *in = with_heads(p, e, x, 2, h);
  return in ? kir_emit_like(p, e, e->n_in, in, ty) : OOM("dynamic_update_slice");
}

static kiln_status tr_dus(kir_program *p, const kir_program *src, const kir_eqn *e,
                          const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  const kir_aval *ua = kir_var_aval(src, e->in[1]);
  kir_vid h[2] = {ct[0], KIR_NO_VAR};
  if (lin[0]) {
    TRY(kir_emit_zeros(p, ua, &h[1]));
    kir_vid *in = with_heads(p, e, x, 2, h);
    if (!in) return OOM("dynamic_update_slice");
    TRY(kir_emit(p, KIR_PRIM_DYNAMIC_UPDATE_SLICE, NULL, e->n_in, in, &ct_x[0]));
  }
  if (lin[1]) {
    kir_params pr;
    memset(&pr, 0, sizeof pr);
    pr.dynamic_slice.slice_sizes.n = ua->rank;
    memcpy(pr.dynamic_slice.slice_sizes.v, ua->shape, (size_t)ua->rank * sizeof(int64_t));
    kir_vid *in = kir_alloc(p, (size_t)(e->n_in - 1) * sizeof *in);
    if (!in) return OOM("dynamic_update_slice");
    in[0] = ct[0];
    memcpy(in + 1, x + 2, (size_t)(e->n_in - 2) * sizeof *in);
    TRY(kir_emit(p, KIR_PRIM_DYNAMIC_SLICE, &pr, e->n_in - 1, in, &ct_x[1]));
  }
  return KILN_OK;
}

/* ---- gather <-> scatter-add ---- */

static kiln_status jvp_gather(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)y;
  kir_vid in[2] = {tx[0], x[1]};
  return kir_emit_like(p, e, 2, in, ty);
}

/* JAX's _gather_transpose_rule: a scatter-add of the cotangent into zeros. */
static kiln_status tr_gather(kir_program *p, const kir_program *src, const kir_eqn *e,
                             const bool *lin, const kir_vid *x, const kir_vid *ct,
                             kir_vid *ct_x) {
  (void)lin;
  const kir_p_gather *g = &e->params.gather;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.scatter.dimension_numbers = (kir_scatter_dims){
      g->dimension_numbers.offset_dims, g->dimension_numbers.collapsed_slice_dims,
      g->dimension_numbers.start_index_map, g->dimension_numbers.operand_batching_dims,
      g->dimension_numbers.start_indices_batching_dims};
  pr.scatter.indices_are_sorted = g->indices_are_sorted;
  pr.scatter.unique_indices = g->unique_indices;
  pr.scatter.mode = g->mode;
  kir_vid in[3] = {KIR_NO_VAR, x[1], ct[0]};
  TRY(kir_emit_zeros(p, kir_var_aval(src, e->in[0]), &in[0]));
  return kir_emit(p, KIR_PRIM_SCATTER_ADD, &pr, 3, in, &ct_x[0]);
}

void kir_shape_ad(kir_ad_rules *r) {
  static const kir_prim structural[] = {KIR_PRIM_BROADCAST_IN_DIM, KIR_PRIM_RESHAPE,
                                        KIR_PRIM_TRANSPOSE,        KIR_PRIM_SQUEEZE,
                                        KIR_PRIM_EXPAND_DIMS,      KIR_PRIM_REV,
                                        KIR_PRIM_SLICE};
  for (size_t i = 0; i < sizeof structural / sizeof *structural; i++)
    r->jvp[structural[i]] = jvp_struct;
  r->transpose[KIR_PRIM_BROADCAST_IN_DIM] = tr_broadcast;
  r->transpose[KIR_PRIM_RESHAPE] = tr_reshape;
  r->transpose[KIR_PRIM_SQUEEZE] = tr_reshape;
  r->transpose[KIR_PRIM_EXPAND_DIMS] = tr_reshape;
  r->transpose[KIR_PRIM_TRANSPOSE] = tr_transpose;
  r->transpose[KIR_PRIM_REV] = tr_rev;
  r->transpose[KIR_PRIM_SLICE] = tr_slice;
  r->jvp[KIR_PRIM_CONCATENATE] = jvp_concat;
  r->transpose[KIR_PRIM_CONCATENATE] = tr_concat;
  r->jvp[KIR_PRIM_PAD] = jvp_pad;
  r->transpose[KIR_PRIM_PAD] = tr_pad;
  r->jvp[KIR_PRIM_DYNAMIC_SLICE] = jvp_dynamic_slice;
  r->transpose[KIR_PRIM_DYNAMIC_SLICE] = tr_dynamic_slice;
  r->jvp[KIR_PRIM_DYNAMIC_UPDATE_SLICE] = jvp_dus;
  r->transpose[KIR_PRIM_DYNAMIC_UPDATE_SLICE] = tr_dus;
  r->jvp[KIR_PRIM_GATHER] = jvp_gather;
  r->transpose[KIR_PRIM_GATHER] = tr_gather;
}
