/* gather and the scatter family on the CUDA target: kernels/scatter.h's
 * index walk with the geometry of one equation baked in (KILN_SCATTER_GEOM),
 * and its entry points instantiated for the element type. gather reads
 * through the walk with its result in the updates' place (its offset dims
 * are the window, its collapsed dims the inserted ones). */
#include <stdio.h>
#include <string.h>
#include "../../kernels/scatter.h"
#include "codegen/codegen.h"

/* The dims of one gather or scatter in scatter.h's terms. */
typedef struct kcg_sc_dims {
  const kir_dims *window, *inserted, *map, *obatch, *ibatch;
  int mode;
  bool wrap32;
} kcg_sc_dims;

static unsigned kcg_sc_mask(const kir_dims *d) {
  unsigned m = 0;
  for (int i = 0; i < d->n; i++) m |= 1u << d->v[i];
  return m;
}

static void kcg_sc_fill(kiln_scatter_geom *g, const kir_aval *x, const kir_aval *idx,
                        const kir_aval *u, const kcg_sc_dims *d) {
  memset(g, 0, sizeof *g);
  g->x_rank = x->rank, g->u_rank = u->rank, g->i_rank = idx->rank;
  for (int i = 0; i < x->rank; i++) g->x_shape[i] = x->shape[i];
  for (int i = 0; i < u->rank; i++) g->u_shape[i] = u->shape[i];
  for (int i = 0; i < idx->rank; i++) g->i_shape[i] = idx->shape[i];
  g->n_map = d->map->n, g->n_window = d->window->n, g->n_batch = d->obatch->n;
  for (int i = 0; i < d->map->n; i++) g->map[i] = d->map->v[i];
  for (int i = 0; i < d->window->n; i++) g->window[i] = d->window->v[i];
  for (int i = 0; i < d->obatch->n; i++) {
    g->obatch[i] = d->obatch->v[i];
    g->ibatch[i] = d->ibatch->v[i];
  }
  g->inserted = kcg_sc_mask(d->inserted), g->obatch_mask = kcg_sc_mask(d->obatch);
  g->mode = d->mode;
  g->index_bytes = (int)kiln_dtype_size(idx->dtype);
  g->index_signed = kiln_dtype_is_signed(idx->dtype);
  g->wrap32 = d->wrap32;
}

static void kcg_sc_row(kcg_buf *b, const kiln_i64 *v64, const int *v) {
  kcg_buf_add(b, "{");
  for (int i = 0; i < KILN_SCATTER_MAX_RANK; i++)
    kcg_buf_addf(b, "%s%lld", i ? ", " : "", v64 ? (long long)v64[i] : (long long)v[i]);
  kcg_buf_add(b, "}, ");
}

/* `#define KILN_SCATTER_GEOM {...}` in kiln_scatter_geom's field order. */
static void kcg_sc_print(kcg_buf *b, const kiln_scatter_geom *g) {
  kcg_buf_addf(b, "#define KILN_SCATTER_GEOM {%d, %d, %d, ", g->x_rank, g->u_rank, g->i_rank);
  kcg_sc_row(b, g->x_shape, NULL);
  kcg_sc_row(b, g->u_shape, NULL);
  kcg_sc_row(b, g->i_shape, NULL);
  kcg_buf_addf(b, "%d, ", g->n_map);
  kcg_sc_row(b, NULL, g->map);
  kcg_buf_addf(b, "%d, ", g->n_window);
  kcg_sc_row(b, NULL, g->window);
  kcg_buf_addf(b, "%uu, %uu, %d, ", g->inserted, g->obatch_mask, g->n_batch);
  kcg_sc_row(b, NULL, g->obatch);
  kcg_sc_row(b, NULL, g->ibatch);
  kcg_buf_addf(b, "%d, %d, %d, %d}\n", g->mode, g->index_bytes, g->index_signed, g->wrap32);
}

/* The dims of gather or scatter e, in scatter.h's terms; for a gather, its
 * result stands in the updates' place. */
static kcg_sc_dims kcg_sc_dims_of(const kir_program *p, const kir_eqn *e) {
  if (e->prim == KIR_PRIM_GATHER) {
    const kir_p_gather *g = &e->params.gather;
    const kir_gather_dims *gd = &g->dimension_numbers;
    const kir_aval *x = kir_var_aval(p, e->in[0]);
    bool fill = g->mode == KIR_GATHER_FILL_OR_DROP, wrap32 = fill;
    for (int d = 0; d < x->rank; d++) wrap32 &= x->shape[d] <= INT32_MAX;
    return (kcg_sc_dims){&gd->offset_dims, &gd->collapsed_slice_dims, &gd->start_index_map,
                         &gd->operand_batching_dims, &gd->start_indices_batching_dims,
                         fill ? 1 : 0, wrap32};
  }
  const kir_p_scatter *sp = &e->params.scatter;
  const kir_scatter_dims *sd = &sp->dimension_numbers;
  return (kcg_sc_dims){&sd->update_window_dims, &sd->inserted_window_dims,
                       &sd->scatter_dims_to_operand_dims, &sd->operand_batching_dims,
                       &sd->scatter_indices_batching_dims, sp->mode == KIR_GATHER_CLIP ? 0 : 1,
                       false};
}

void kcg_scatter_geom(const kir_program *p, const kir_eqn *e, kiln_scatter_geom *g) {
  kcg_sc_dims d = kcg_sc_dims_of(p, e);
  const kir_aval *u = kir_var_aval(p, e->prim == KIR_PRIM_GATHER ? e->out[0] : e->in[2]);
  kcg_sc_fill(g, kir_var_aval(p, e->in[0]), kir_var_aval(p, e->in[1]), u, &d);
}

static kiln_status kcg_sc_check(const kir_program *p, const kir_eqn *e,
                                const kcg_target_info *t, const kir_aval *u) {
  const kir_aval *x = kir_var_aval(p, e->in[0]), *idx = kir_var_aval(p, e->in[1]);
  char xs[KIR_AVAL_STR_CAP];
  const char *op = kir_prim_name(e->prim);
  if (t->target != KCG_TARGET_CUDA)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit: %s kernels are for the CUDA target", op);
  if (x->rank > KILN_SCATTER_MAX_RANK || u->rank > KILN_SCATTER_MAX_RANK ||
      idx->rank > KILN_SCATTER_MAX_RANK || idx->rank < 1 || !kiln_dtype_is_integer(idx->dtype))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit: %s of %s: ranks past %d or indices "
                      "without an index vector", op, kir_aval_str(x, xs, sizeof xs),
                      KILN_SCATTER_MAX_RANK);
  return kcg_lone_no_literals(p, e);
}

kiln_status kcg_emit_gather(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out) {
  const kir_aval *x = kir_var_aval(p, e->in[0]), *y = kir_var_aval(p, e->out[0]);
  if (e->prim != KIR_PRIM_GATHER)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit_gather: %s is not gather",
                      kir_prim_name(e->prim));
  kiln_status st = kcg_sc_check(p, e, t, y);
  if (st) return st;
  const kir_p_gather *g = &e->params.gather;
  for (int d = 0; d < x->rank; d++)
    if (g->slice_sizes.v[d] > x->shape[d] && kir_aval_size(y) > 0)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_gather: a slice larger than the "
                        "operand (the reference evaluator names it)");
  kiln_scatter_geom geom;
  kcg_scatter_geom(p, e, &geom);
  uint64_t bits = 0;
  kir_gather_fill(x->dtype, g->fill_value, &bits);
  size_t es = kiln_dtype_size(x->dtype);
  if (es < 8) bits &= (1ull << (8 * es)) - 1;
  kcg_buf b = {0};
  kcg_sc_print(&b, &geom);
  char name[64], xs[KIR_AVAL_STR_CAP], what[KIR_AVAL_STR_CAP + 16];
  kcg_lone_name(t, "kiln_gather", &b, name, sizeof name);
  kcg_buf_addf(&b, "KILN_GATHER_KERNEL(%s, %s, %lluull)\n", name, kcg_lone_word(es),
               (unsigned long long)bits);
  snprintf(what, sizeof what, "gather from %s", kir_aval_str(x, xs, sizeof xs));
  st = kcg_lone_finish(t, name, what, "scatter.h", &b, false, kir_aval_size(y), out);
  out->n_args = 3;
  return st;
}

/* The element type and the atomic / ordered combines of scatter prim over
 * dtype dt, or NULL where kernels/scatter.h has none. */
static const char *kcg_sc_ops(kir_prim prim, kiln_dtype dt, const char **atomic,
                              const char **ordered) {
  static const char *const ops[4][4][2] = {
      /* f32, i32, f16, bf16 */
      {{"KILN_SC_ATOMIC_ADD", "KILN_SC_ADD"}, {"KILN_SC_ATOMIC_ADD", "KILN_SC_IADD"},
       {"KILN_SC_CAS_H_ADD", "KILN_SC_H_ADD"}, {"KILN_SC_CAS_BH_ADD", "KILN_SC_BH_ADD"}},
      {{"KILN_SC_F32_MUL", "KILN_SC_MUL"}, {"KILN_SC_I32_MUL", "KILN_SC_IMUL"},
       {"KILN_SC_CAS_H_MUL", "KILN_SC_H_MUL"}, {"KILN_SC_CAS_BH_MUL", "KILN_SC_BH_MUL"}},
      {{"KILN_SC_F32_MIN", "KILN_SC_MIN"}, {"KILN_SC_ATOMIC_IMIN", "KILN_SC_IMIN"},
       {"KILN_SC_CAS_H_MIN", "KILN_SC_H_MIN"}, {"KILN_SC_CAS_BH_MIN", "KILN_SC_BH_MIN"}},
      {{"KILN_SC_F32_MAX", "KILN_SC_MAX"}, {"KILN_SC_ATOMIC_IMAX", "KILN_SC_IMAX"},
       {"KILN_SC_CAS_H_MAX", "KILN_SC_H_MAX"}, {"KILN_SC_CAS_BH_MAX", "KILN_SC_BH_MAX"}}};
  if (prim == KIR_PRIM_SCATTER) {
    *atomic = "KILN_SC_STORE", *ordered = "KILN_SC_SET";
    return kcg_lone_word(kiln_dtype_size(dt));
  }
  int op = prim == KIR_PRIM_SCATTER_ADD   ? 0
           : prim == KIR_PRIM_SCATTER_MUL ? 1
           : prim == KIR_PRIM_SCATTER_MIN ? 2
                                          : 3;
  int k = dt == KILN_F32 ? 0 : dt == KILN_I32 ? 1 : dt == KILN_F16 ? 2 : dt == KILN_BF16 ? 3 : -1;
  if (k < 0) return NULL;
  *atomic = ops[op][k][0], *ordered = ops[op][k][1];
  return k == 0 ? "float" : k == 1 ? "int" : "kiln_half";
}

kiln_status kcg_emit_scatter(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                             bool ordered, kcg_parts *out) {
  memset(out, 0, sizeof *out);
  const kir_aval *x = kir_var_aval(p, e->in[0]), *u = kir_var_aval(p, e->in[2]);
  const char *op = kir_prim_name(e->prim);
  kiln_status st = kcg_sc_check(p, e, t, u);
  if (st) return st;
  const char *atomic = NULL, *combine = NULL;
  const char *T = kcg_sc_ops(e->prim, x->dtype, &atomic, &combine);
  char xs[KIR_AVAL_STR_CAP], what[KIR_AVAL_STR_CAP + 48];
  if (!T)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_scatter: %s into %s: f32, i32, f16 and "
                      "bf16 only", op, kir_aval_str(x, xs, sizeof xs));
  kiln_scatter_geom geom;
  kcg_scatter_geom(p, e, &geom);
  int64_t n_x = kir_aval_size(x), n_u = kir_aval_size(u);
  kcg_buf b = {0};
  kcg_sc_print(&b, &geom);
  char name[64];
  kcg_lone_name(t, ordered ? "kiln_scatter_ordered" : "kiln_scatter", &b, name, sizeof name);
  const char *W = kcg_lone_word(kiln_dtype_size(x->dtype));
  /* a set with repeats: the last update in index order wins (claims) */
  bool claim = !ordered && e->prim == KIR_PRIM_SCATTER && !e->params.scatter.unique_indices;
  if (claim)
    kcg_buf_addf(&b, "KILN_SC_COPY_CLEAR_KERNEL(%s_copy, %s)\nKILN_SC_CLAIM_KERNEL(%s_claim)\n"
                 "KILN_SC_WINNER_KERNEL(%s_apply, %s)\n", name, W, name, name, W);
  else if (ordered)
    kcg_buf_addf(&b, "KILN_SC_COPY_KERNEL(%s_copy, %s)\n"
                 "KILN_SC_SERIAL_KERNEL(%s_apply, %s, %s, %lldLL)\n", name, W, name, T, combine,
                 (long long)n_u);
  else
    kcg_buf_addf(&b, "KILN_SC_COPY_KERNEL(%s_copy, %s)\nKILN_SC_ATOMIC_KERNEL(%s_apply, %s, %s)\n",
                 name, W, name, T, atomic);
  snprintf(what, sizeof what, "%s into %s%s", op, kir_aval_str(x, xs, sizeof xs),
           ordered ? ", in index order" : claim ? ", the last update winning" : ", by atomics");
  out->gemm_at = -1;
  out->part[0] = "copy";
  out->items[0] = n_x;
  out->n = claim ? 3 : 2;
  out->part[out->n - 1] = "apply";
  out->items[out->n - 1] = n_x > 0 ? (ordered ? n_x : n_u) : 0;
  if (claim) {
    out->part[1] = "claim", out->items[1] = n_x > 0 ? n_u : 0;
    out->n_scratch = 1, out->scratch[0] = n_x * 8;
  }
  st = kcg_lone_finish(t, name, what, "scatter.h", &b, false, n_x, &out->k);
  out->k.n_args = 4;
  return st;
}
