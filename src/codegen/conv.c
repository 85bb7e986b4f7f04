/* conv_general_dilated on the CUDA target: the source of its three copy
 * kernels (kernels/conv.h: im2col, pack_w, scatter) with the geometry baked
 * in as a constant, and the sizes of the strided-batched GEMM between them,
 * which the backend runs through cuBLASLt (kcg_parts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../kernels/conv.h"
#include "codegen/codegen.h"

static void kcg_conv_row(kcg_buf *b, const kiln_cv_i64 *v) {
  kcg_buf_add(b, "{");
  for (int i = 0; i < KILN_CONV_MAX_SPATIAL; i++)
    kcg_buf_addf(b, "%s%lldLL", i ? ", " : "", (long long)v[i]);
  kcg_buf_add(b, "}");
}

/* The aggregate initialiser of g, in kiln_conv_geom's field order. */
static void kcg_conv_geom_init(kcg_buf *b, const kiln_conv_geom *g) {
  const kiln_cv_i64 head[] = {g->n_sp, g->n_out, g->cg,   g->opg,  g->groups, g->batch_groups,
                              g->ls_n, g->ls_c,  g->rs_o, g->rs_i, g->os_n,   g->os_o};
  kcg_buf_add(b, "#define KILN_CONV_GEOM {");
  for (size_t i = 0; i < sizeof head / sizeof *head; i++)
    kcg_buf_addf(b, "%lldLL, ", (long long)head[i]);
  const kiln_cv_i64 *rows[] = {g->in, g->win,    g->out,  g->ls,  g->rs,
                               g->os, g->stride, g->ldil, g->rdil, g->lo};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    kcg_conv_row(b, rows[i]);
    kcg_buf_add(b, ", ");
  }
  kcg_buf_addf(b, "%lldLL, %lldLL}\n", (long long)g->out_total, (long long)g->win_total);
}

/* Whether res[0][row][j] is already the result's layout: one group, the
 * output feature innermost, then the spatial dims in order, then the batch. */
static bool kcg_conv_out_direct(const kiln_conv_geom *g) {
  if (g->groups != 1 || g->os_o != 1) return false;
  kiln_cv_i64 want = g->opg;
  for (int s = (int)g->n_sp - 1; s >= 0; s--) {
    if (g->out[s] != 1 && g->os[s] != want) return false;
    want *= g->out[s];
  }
  return g->n_out == 1 || g->os_n == want;
}

kiln_status kcg_emit_conv(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                          kcg_conv *out) {
  memset(out, 0, sizeof *out);
  if (e->prim != KIR_PRIM_CONV_GENERAL_DILATED || t->target != KCG_TARGET_CUDA)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit_conv: %s for the %s target: a CUDA "
                      "conv_general_dilated only", kir_prim_name(e->prim),
                      t->target == KCG_TARGET_CUDA ? "CUDA" : "C");
  const kir_aval *lhs = kir_var_aval(p, e->in[0]), *rhs = kir_var_aval(p, e->in[1]);
  const kir_aval *res = kir_var_aval(p, e->out[0]);
  char ls[KIR_AVAL_STR_CAP], rs[KIR_AVAL_STR_CAP];
  kir_aval_str(lhs, ls, sizeof ls), kir_aval_str(rhs, rs, sizeof rs);
  kiln_status lit = kcg_lone_no_literals(p, e);
  if (lit) return lit;
  if (!kiln_dtype_is_float(lhs->dtype) || !kiln_dtype_is_float(res->dtype))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_conv: conv_general_dilated of %s and %s: "
                      "the GEMM takes float operands only", ls, rs);
  if (lhs->rank - 2 > KILN_CONV_MAX_SPATIAL)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_conv: conv_general_dilated of %s: more "
                      "than %d spatial dimensions", ls,
                      KILN_CONV_MAX_SPATIAL);
  kiln_conv_geom g;
  kir_conv_geom_fill(&e->params.conv, lhs, rhs, res, &g);
  if (kiln_conv_kd(&g) == 0 && kir_aval_size(res) > 0)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_conv: conv_general_dilated of %s and %s "
                      "contracts over no elements", ls, rs);
  out->groups = g.groups, out->rows = kiln_conv_rows(&g), out->kd = kiln_conv_kd(&g);
  out->opg = g.opg;
  out->direct = kcg_conv_out_direct(&g);
  out->in_dtype = lhs->dtype, out->out_dtype = res->dtype;
  size_t in_b = kiln_dtype_size(lhs->dtype), out_b = kiln_dtype_size(res->dtype);
  kcg_parts *pt = &out->p;
  pt->n = 3, pt->gemm_at = 2, pt->n_scratch = 3;
  pt->part[0] = "im2col", pt->part[1] = "pack_w", pt->part[2] = "scatter";
  pt->items[0] = out->groups * out->rows * out->kd;
  pt->items[1] = out->groups * out->kd * out->opg;
  pt->items[2] = out->direct ? 0 : out->groups * out->rows * out->opg;
  for (int i = 0; i < 3; i++) pt->scratch[i] = pt->items[i] * (int64_t)(i < 2 ? in_b : out_b);

  kcg_buf body = {0};
  const char *in_t = kcg_lone_word(in_b), *out_t = kcg_lone_word(out_b);
  kcg_conv_geom_init(&body, &g);
  kcg_buf_addf(&body, "#define KILN_CONV_THREADS %d\n", KCG_LONE_THREADS);
  kcg_buf_addf(&body, "KILN_DEFINE_CONV_COPIES(in, %s)\n", in_t);
  bool two = strcmp(in_t, out_t) != 0;
  if (!out->direct && two) kcg_buf_addf(&body, "KILN_DEFINE_CONV_COPIES(out, %s)\n", out_t);
  char name[64];
  kcg_lone_name(t, "kiln_conv", &body, name, sizeof name);
  /* args: lhs, rhs, result, then the scratch matrices cols, w, res */
  kcg_buf_addf(&body, "KILN_DEFINE_CONV_KERNEL(%s_im2col, im2col, in, %s, 0, 3)\n", name, in_t);
  kcg_buf_addf(&body, "KILN_DEFINE_CONV_KERNEL(%s_pack_w, pack_w, in, %s, 1, 4)\n", name, in_t);
  if (!out->direct)
    kcg_buf_addf(&body, "KILN_DEFINE_CONV_KERNEL(%s_scatter, scatter, %s, %s, 5, 2)\n", name,
                 two ? "out" : "in", out_t);
  char what[2 * KIR_AVAL_STR_CAP + 64];
  snprintf(what, sizeof what, "conv_general_dilated %s x %s as im2col + GEMM", ls, rs);
  kiln_status st = kcg_lone_finish(t, name, what, "conv.h", &body, false, pt->items[0], &pt->k);
  pt->k.n_args = 3;
  return st;
}
