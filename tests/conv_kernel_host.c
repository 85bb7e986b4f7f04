/* Runs the CUDA target's convolution copies (kernels/conv.h) on the host:
 * im2col, weight packing, a plain GEMM per group, and the scatter into the
 * result's layout, so tests can check the kernels' index maps against
 * JAX's values without a GPU. C, because the kernels are C on the host. */
#include "conv_kernel_host.h"

#include <stdlib.h>

#include "../kernels/prelude.h"
#include "../kernels/conv.h"

KILN_DEFINE_CONV(f32, float)

static void kct_strides(const kir_aval *a, int64_t *st) {
  int64_t s = 1;
  for (int i = a->rank - 1; i >= 0; i--) st[i] = s, s *= a->shape[i];
}

/* The geometry the CUDA executor would pass, from the equation's params. */
static void kct_conv_geom(const kir_p_conv *c, const kir_aval *l, const kir_aval *r,
                          const kir_aval *o, kiln_conv_geom *g) {
  const kir_conv_dims *d = &c->dimension_numbers;
  int64_t ls[KIR_MAX_RANK], rs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kct_strides(l, ls);
  kct_strides(r, rs);
  kct_strides(o, os);
  *g = (kiln_conv_geom){0};
  g->n_sp = l->rank - 2;
  g->n_out = o->shape[d->out_spec.v[0]];
  g->cg = r->shape[d->rhs_spec.v[1]];
  g->groups = c->feature_group_count * c->batch_group_count;
  g->batch_groups = c->batch_group_count > 1;
  g->opg = r->shape[d->rhs_spec.v[0]] / g->groups;
  g->ls_n = ls[d->lhs_spec.v[0]], g->ls_c = ls[d->lhs_spec.v[1]];
  g->rs_o = rs[d->rhs_spec.v[0]], g->rs_i = rs[d->rhs_spec.v[1]];
  g->os_n = os[d->out_spec.v[0]], g->os_o = os[d->out_spec.v[1]];
  g->out_total = g->win_total = 1;
  for (int s = 0; s < g->n_sp; s++) {
    int a = d->lhs_spec.v[2 + s], b = d->rhs_spec.v[2 + s], e = d->out_spec.v[2 + s];
    g->in[s] = l->shape[a], g->ls[s] = ls[a];
    g->win[s] = r->shape[b], g->rs[s] = rs[b];
    g->out[s] = o->shape[e], g->os[s] = os[e];
    g->stride[s] = c->window_strides.v[s];
    g->ldil[s] = c->lhs_dilation.v[s], g->rdil[s] = c->rhs_dilation.v[s];
    g->lo[s] = c->padding.lo[s];
    g->out_total *= g->out[s];
    g->win_total *= g->win[s];
  }
}

int kct_conv_host_f32(const kir_p_conv *c, const kir_aval *la, const kir_aval *ra,
                      const kir_aval *oa, const float *lhs, const float *rhs, float *out) {
  kiln_conv_geom g;
  kct_conv_geom(c, la, ra, oa, &g);
  int64_t rows = kiln_conv_rows(&g), kd = kiln_conv_kd(&g);
  int64_t nc = g.groups * rows * kd, nw = g.groups * kd * g.opg, nr = g.groups * rows * g.opg;
  float *cols = malloc((size_t)(nc + nw + nr + 1) * sizeof *cols);
  if (!cols) return -1;
  float *w = cols + nc, *res = w + nw;
  for (int64_t i = 0; i < nc; i++) kiln_conv_im2col_at_f32(&g, lhs, cols, i);
  for (int64_t i = 0; i < nw; i++) kiln_conv_pack_w_at_f32(&g, rhs, w, i);
  for (int64_t grp = 0; grp < g.groups; grp++) /* what the batched GEMM computes */
    for (int64_t m = 0; m < rows; m++)
      for (int64_t j = 0; j < g.opg; j++) {
        double acc = 0;
        for (int64_t k = 0; k < kd; k++)
          acc += (double)cols[(grp * rows + m) * kd + k] * w[(grp * kd + k) * g.opg + j];
        res[(grp * rows + m) * g.opg + j] = (float)acc;
      }
  for (int64_t i = 0; i < nr; i++) kiln_conv_scatter_at_f32(&g, res, out, i);
  free(cols);
  return 0;
}
