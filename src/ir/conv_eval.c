/* conv_general_dilated's reference evaluator. f32 runs as im2col + CBLAS
 * sgemm per group over row chunks of the whole batch: 9x to 24x faster
 * than the direct loop on 3x3 and 1x1 layers of 3 to 128 features (docs/design.md has the
 * figures); thin groups (depthwise) and other dtypes run the direct loop,
 * f32 accumulating in f32, other floats in f64, integers in wrapping int64.
 * The CPU executor runs it as an opaque step (the C target has no kernel
 * for convolutions), so it is also the C target's implementation. Its
 * geometry and index maps are the CUDA target's (kernels/conv.h). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"
#include "../../kernels/conv.h"

static void kir_c_strides(const kir_aval *a, int64_t *st) {
  int64_t s = 1;
  for (int i = a->rank - 1; i >= 0; i--) st[i] = s, s *= a->shape[i];
}

void kir_conv_geom_fill(const kir_p_conv *c, const kir_aval *lhs, const kir_aval *rhs,
                        const kir_aval *out, kiln_conv_geom *g) {
  const kir_conv_dims *d = &c->dimension_numbers;
  int64_t ls[KIR_MAX_RANK], rs[KIR_MAX_RANK], os[KIR_MAX_RANK];
  kir_c_strides(lhs, ls);
  kir_c_strides(rhs, rs);
  kir_c_strides(out, os);
  memset(g, 0, sizeof *g);
  g->n_sp = lhs->rank - 2;
  g->n_out = out->shape[d->out_spec.v[0]];
  g->cg = rhs->shape[d->rhs_spec.v[1]];
  g->groups = c->feature_group_count * c->batch_group_count;
  g->batch_groups = c->batch_group_count > 1;
  g->opg = rhs->shape[d->rhs_spec.v[0]] / g->groups;
  g->ls_n = ls[d->lhs_spec.v[0]], g->ls_c = ls[d->lhs_spec.v[1]];
  g->rs_o = rs[d->rhs_spec.v[0]], g->rs_i = rs[d->rhs_spec.v[1]];
  g->os_n = os[d->out_spec.v[0]], g->os_o = os[d->out_spec.v[1]];
  g->out_total = g->win_total = 1;
  for (int s = 0; s < g->n_sp; s++) {
    int a = d->lhs_spec.v[2 + s], b = d->rhs_spec.v[2 + s], e = d->out_spec.v[2 + s];
    g->in[s] = lhs->shape[a], g->ls[s] = ls[a];
    g->win[s] = rhs->shape[b], g->rs[s] = rs[b];
    g->out[s] = out->shape[e], g->os[s] = os[e];
    g->stride[s] = c->window_strides.v[s];
    g->ldil[s] = c->lhs_dilation.v[s], g->rdil[s] = c->rhs_dilation.v[s];
    g->lo[s] = c->padding.lo[s];
    g->out_total *= g->out[s];
    g->win_total *= g->win[s];
  }
}

/* Offset of output spatial position `pos` (flat, row-major over g->out) in
 * the result, and for each window position the lhs spatial offset it reads
 * (-1 where it falls in padding or between dilated elements). */
static int64_t kir_cgeom_window(const kiln_conv_geom *g, int64_t pos, int64_t *loff) {
  int64_t opos[KIR_MAX_RANK], ooff = 0;
  for (int s = g->n_sp - 1; s >= 0; s--) {
    opos[s] = pos % g->out[s];
    pos /= g->out[s];
    ooff += opos[s] * g->os[s];
  }
  for (int64_t k = 0; k < g->win_total; k++) {
    int64_t kk = k, off = 0;
    for (int s = g->n_sp - 1; s >= 0 && off >= 0; s--) {
      int64_t w = kk % g->win[s];
      kk /= g->win[s];
      int64_t p = opos[s] * g->stride[s] + w * g->rdil[s] - g->lo[s];
      if (p < 0 || p % g->ldil[s]) off = -1;
      else if ((p /= g->ldil[s]) >= g->in[s]) off = -1;
      else off += p * g->ls[s];
    }
    loff[k] = off;
  }
  return ooff;
}

/* Where group grp's (lhs batch element n of the result, first in feature)
 * start in the lhs. */
static int64_t kir_cgeom_lhs_base(const kiln_conv_geom *g, int64_t grp, int64_t n) {
  return g->batch_groups ? (grp * g->n_out + n) * g->ls_n : n * g->ls_n + grp * g->cg * g->ls_c;
}

/* ---- the direct loops ---- */

/* One result element of a direct loop: the sum over in features i and
 * window positions k (loff[k] >= 0) of lhs[lbase + i * ls_c + loff[k]] *
 * rhs[oo * rs_o + i * rs_i + roff[k]], stored at element dst of the result. */
typedef void (*kir_conv_dot_fn)(const kiln_conv_geom *g, const kir_buffer *in, kir_buffer *out,
                                int64_t lbase, int64_t oo, int64_t dst, const int64_t *loff,
                                const int64_t *roff);

static void kir_conv_direct(const kiln_conv_geom *g, const kir_buffer *in, kir_buffer *out,
                            int64_t *loff, const int64_t *roff, kir_conv_dot_fn dot) {
  for (int64_t pos = 0; pos < g->out_total; pos++) {
    int64_t ooff = kir_cgeom_window(g, pos, loff);
    for (int64_t grp = 0; grp < g->groups; grp++)
      for (int64_t n = 0; n < g->n_out; n++)
        for (int64_t j = 0; j < g->opg; j++) {
          int64_t oo = grp * g->opg + j;
          dot(g, in, out, kir_cgeom_lhs_base(g, grp, n), oo, n * g->os_n + oo * g->os_o + ooff,
              loff, roff);
        }
  }
}

/* Any numeric dtype: floats accumulate in f64, integers in wrapping int64. */
static void kir_conv_dot_any(const kiln_conv_geom *g, const kir_buffer *in, kir_buffer *out,
                             int64_t lbase, int64_t oo, int64_t dst, const int64_t *loff,
                             const int64_t *roff) {
  kiln_dtype dt = in[0].aval.dtype, odt = out->aval.dtype;
  size_t es = kiln_dtype_size(dt);
  bool is_float = kiln_dtype_is_float(dt);
  double facc = 0;
  uint64_t iacc = 0;
  for (int64_t i = 0; i < g->cg; i++)
    for (int64_t k = 0; k < g->win_total; k++) {
      if (loff[k] < 0) continue;
      int64_t li = lbase + i * g->ls_c + loff[k], ri = oo * g->rs_o + i * g->rs_i + roff[k];
      kir_scalar a = kir_scalar_load(dt, (const char *)in[0].data + (size_t)li * es);
      kir_scalar b = kir_scalar_load(dt, (const char *)in[1].data + (size_t)ri * es);
      if (is_float) facc += a.f * b.f;
      else if (kiln_dtype_is_unsigned(dt)) iacc += a.u * b.u;
      else iacc += (uint64_t)a.i * (uint64_t)b.i;
    }
  kir_scalar v = is_float ? kir_scalar_f(kir_round_to_dtype(odt, facc)) : kir_scalar_u(iacc);
  if (!is_float && !kiln_dtype_is_unsigned(odt)) v = kir_scalar_i((int64_t)iacc);
  kir_scalar_store(odt, v, (char *)out->data + (size_t)dst * kiln_dtype_size(odt));
}

/* f32, accumulating in f32 as the GEMM does: faster than im2col where each
 * group has few output features (depthwise). */
static void kir_conv_dot_f32(const kiln_conv_geom *g, const kir_buffer *in, kir_buffer *out,
                             int64_t lbase, int64_t oo, int64_t dst, const int64_t *loff,
                             const int64_t *roff) {
  const float *l = in[0].data, *r = in[1].data;
  float acc = 0;
  for (int64_t k = 0; k < g->win_total; k++) {
    if (loff[k] < 0) continue;
    const float *lp = l + lbase + loff[k], *rp = r + oo * g->rs_o + roff[k];
    for (int64_t i = 0; i < g->cg; i++) acc += lp[i * g->ls_c] * rp[i * g->rs_i];
  }
  ((float *)out->data)[dst] = acc;
}

/* Eight independent partial sums: one chain of dependent adds was latency
 * bound (4 cycles a term). */
static float kir_dot_f32(const float *a, const float *b, int64_t n) {
  float s[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int q = 0; q < 8; q++) s[q] += a[i + q] * b[i + q];
  float acc = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; i++) acc += a[i] * b[i];
  return acc;
}

/* The direct loop where in features are contiguous in both operands
 * (NHWC-like, ls_c == rs_i == 1): a window's positions whose features follow
 * each other in both (a row of 3 pixels of a 3x3 window) merge into one run,
 * summed by kir_dot_f32. run holds 3 * win_total entries. Input gradients
 * of first layers (one output feature) ran 6x faster so. */
static void kir_conv_direct_f32(const kiln_conv_geom *g, const kir_buffer *in, kir_buffer *out,
                                int64_t *loff, const int64_t *roff, int64_t *run) {
  const float *l = in[0].data, *r = in[1].data;
  float *o = out->data;
  int64_t *rl = run, *rr = run + g->win_total, *rn = rr + g->win_total;
  for (int64_t pos = 0; pos < g->out_total; pos++) {
    int64_t ooff = kir_cgeom_window(g, pos, loff), nr = 0;
    for (int64_t k = 0; k < g->win_total; k++) {
      if (loff[k] < 0) continue;
      if (nr && loff[k] == rl[nr - 1] + rn[nr - 1] && roff[k] == rr[nr - 1] + rn[nr - 1])
        rn[nr - 1] += g->cg;
      else
        rl[nr] = loff[k], rr[nr] = roff[k], rn[nr++] = g->cg;
    }
    for (int64_t grp = 0; grp < g->groups; grp++)
      for (int64_t n = 0; n < g->n_out; n++) {
        const float *lp = l + kir_cgeom_lhs_base(g, grp, n);
        for (int64_t j = 0; j < g->opg; j++) {
          int64_t oo = grp * g->opg + j;
          const float *rp = r + oo * g->rs_o;
          float acc = 0;
          for (int64_t q = 0; q < nr; q++) acc += kir_dot_f32(lp + rl[q], rp + rr[q], rn[q]);
          o[n * g->os_n + oo * g->os_o + ooff] = acc;
        }
      }
  }
}

/* ---- im2col + sgemm, f32 ---- */

/* Rows of cols (one per result batch element and spatial position) per
 * sgemm: about 4 MiB of cols, but at least 256 rows so that the thin GEMMs
 * of weight gradients (9 positions, a long contraction) stay one call. */
static int64_t kir_conv_chunk_rows(int64_t rows, int64_t kd) {
  int64_t chunk = ((int64_t)1 << 20) / kd;
  if (chunk < 256) chunk = 256;
  return chunk < rows ? chunk : rows;
}

/* cols[r][k * cg + i] for rows r0 .. r0 + rc of group grp: window position
 * k major, so that NHWC-like operands (features contiguous) copy runs of cg
 * floats. loff holds each position's window offsets (kir_cgeom_window). */
static void kir_im2col(const kiln_conv_geom *g, const float *lhs, int64_t grp, int64_t r0,
                       int64_t rc, const int64_t *loff, float *cols) {
  int64_t W = g->win_total, cg = g->cg, kd = W * cg, m = g->out_total;
  for (int64_t r = r0; r < r0 + rc; r++) {
    const float *src = lhs + kir_cgeom_lhs_base(g, grp, r / m);
    const int64_t *lo = loff + (r % m) * W;
    float *row = cols + (r - r0) * kd;
    if (cg == 1) { /* a first layer's one channel: a branch-free gather */
      for (int64_t k = 0; k < W; k++) row[k] = lo[k] < 0 ? 0.0f : src[lo[k] < 0 ? 0 : lo[k]];
      continue;
    }
    for (int64_t k = 0; k < W; k++, row += cg) {
      if (lo[k] < 0) memset(row, 0, (size_t)cg * sizeof *row);
      else if (g->ls_c == 1) memcpy(row, src + lo[k], (size_t)cg * sizeof *row);
      else
        for (int64_t i = 0; i < cg; i++) row[i] = src[lo[k] + i * g->ls_c];
    }
  }
}

/* A weight gradient's lhs has its contracted features (the batch) far
 * apart, so im2col gathered every element with a stride of a whole image,
 * once per window position. Copied once into [batch][spatial][features]
 * (g updated to match) the im2col copies contiguous runs of cg instead.
 * NULL (g unchanged) where the features are already contiguous, or grouped. */
static float *kir_conv_lhs_packed(kiln_conv_geom *g, const float *lhs) {
  if (g->ls_c == 1 || g->groups != 1 || g->cg < 4) return NULL;
  int64_t sp = 1, ls[KILN_CONV_MAX_SPATIAL];
  for (int s = (int)g->n_sp - 1; s >= 0; s--) ls[s] = sp * g->cg, sp *= g->in[s];
  float *t = malloc((size_t)(g->n_out * sp * g->cg) * sizeof *t);
  if (!t) return NULL; /* the strided im2col still works */
  for (int64_t p = 0; p < sp; p++) {
    int64_t src = 0;
    for (int64_t s = g->n_sp - 1, q = p; s >= 0; s--) src += q % g->in[s] * g->ls[s], q /= g->in[s];
    for (int64_t n = 0; n < g->n_out; n++) { /* the batch's neighbours share cache lines */
      const float *from = lhs + n * g->ls_n + src;
      float *to = t + (n * sp + p) * g->cg;
      for (int64_t i = 0; i < g->cg; i++) to[i] = from[i * g->ls_c];
    }
  }
  for (int s = 0; s < g->n_sp; s++) g->ls[s] = ls[s];
  g->ls_n = sp * g->cg, g->ls_c = 1;
  return t;
}

/* One im2col and sgemm per chunk of rows over the whole batch (not per
 * batch element: the weight gradients' 9-row GEMMs were 10x slower so).
 * The sgemm writes straight into an NHWC-like result, else through res. */
static kiln_status kir_conv_gemm(const kiln_conv_geom *geom, const float *lhs, const float *rhs,
                                 float *out, const int64_t *roff) {
  kiln_conv_geom packed = *geom, *g = &packed;
  float *lhs_packed = kir_conv_lhs_packed(g, lhs);
  if (lhs_packed) lhs = lhs_packed;
  int64_t W = g->win_total, cg = g->cg, kd = kiln_conv_kd(g), m = g->out_total, nn = g->opg;
  int64_t rows = g->n_out * m, chunk = kir_conv_chunk_rows(rows, kd);
  int64_t *loff = malloc((size_t)(m * W + m) * sizeof *loff);
  float *buf = malloc((size_t)(kd * nn + chunk * kd + chunk * nn) * sizeof *buf);
  if (!loff || !buf) {
    free(loff);
    free(buf);
    free(lhs_packed);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "conv_general_dilated: out of host memory");
  }
  int64_t *ooff = loff + m * W;
  bool direct = g->groups == 1 && g->os_o == 1 && g->os_n == m * nn;
  for (int64_t pos = 0; pos < m; pos++) {
    ooff[pos] = kir_cgeom_window(g, pos, loff + pos * W);
    direct = direct && ooff[pos] == pos * nn;
  }
  float *w = buf, *cols = w + kd * nn, *res = cols + chunk * kd;
  for (int64_t grp = 0; grp < g->groups; grp++) {
    for (int64_t k = 0; k < W; k++)
      for (int64_t i = 0; i < cg; i++) {
        const float *src = rhs + grp * g->opg * g->rs_o + i * g->rs_i + roff[k];
        float *dst = w + (k * cg + i) * nn;
        if (g->rs_o == 1) memcpy(dst, src, (size_t)nn * sizeof *dst);
        else
          for (int64_t j = 0; j < nn; j++) dst[j] = src[j * g->rs_o];
      }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      int64_t rc = rows - r0 < chunk ? rows - r0 : chunk;
      kir_im2col(g, lhs, grp, r0, rc, loff, cols);
      float *c = direct ? out + r0 * nn : res;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rc, (int)nn, (int)kd, 1.0f,
                  cols, (int)kd, w, (int)nn, 0.0f, c, (int)nn);
      for (int64_t r = r0; r < r0 + rc && !direct; r++) {
        float *dst = out + (r / m) * g->os_n + grp * g->opg * g->os_o + ooff[r % m];
        for (int64_t j = 0; j < nn; j++) dst[j * g->os_o] = res[(r - r0) * nn + j];
      }
    }
  }
  free(loff);
  free(buf);
  free(lhs_packed);
  return KILN_OK;
}

/* cblas takes int sizes; below KIR_CONV_GEMM_MIN_OPG output features per
 * group the GEMMs are too thin to pay for im2col (measured on 8x32x32x32,
 * 3x3: direct wins 5.7x at 1 feature per group, 1.1x at 4, ties at 8). */
#define KIR_CONV_GEMM_MIN_OPG 8
static bool kir_conv_gemm_fits(const kiln_conv_geom *g) {
  int64_t kd = kiln_conv_kd(g);
  int64_t chunk = kir_conv_chunk_rows(g->n_out * g->out_total, kd);
  return kd > 0 && g->opg >= KIR_CONV_GEMM_MIN_OPG && g->out_total > 0 && kd < (1 << 30) &&
         chunk < (1 << 30) && g->opg < (1 << 30) && chunk * kd < ((int64_t)1 << 40);
}

static kiln_status kir_eval_conv(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                 void *ctx) {
  (void)ctx;
  kiln_conv_geom g;
  kir_conv_geom_fill(&e->params.conv, &in[0].aval, &in[1].aval, &out[0].aval, &g);
  if (kir_aval_size(&out[0].aval) == 0) return KILN_OK;
  int64_t *loff = malloc((size_t)(5 * g.win_total + 1) * sizeof *loff);
  if (!loff) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "conv_general_dilated: out of host memory");
  int64_t *roff = loff + g.win_total, *run = roff + g.win_total;
  for (int64_t k = 0; k < g.win_total; k++) roff[k] = kiln_conv_w_src(&g, 0, k, 0);
  kiln_status st = KILN_OK;
  bool f32 = in[0].aval.dtype == KILN_F32 && out[0].aval.dtype == KILN_F32;
  if (kiln_conv_kd(&g) == 0)
    memset(out[0].data, 0, out[0].nbytes); /* an empty contraction sums to zero */
  else if (f32 && kir_conv_gemm_fits(&g))
    st = kir_conv_gemm(&g, in[0].data, in[1].data, out[0].data, roff);
  else if (f32 && g.ls_c == 1 && g.rs_i == 1)
    kir_conv_direct_f32(&g, in, out, loff, roff, run);
  else
    kir_conv_direct(&g, in, out, loff, roff, f32 ? kir_conv_dot_f32 : kir_conv_dot_any);
  free(loff);
  return st;
}

void kir_conv_evals(kir_eval_table *t) { t->fn[KIR_PRIM_CONV_GENERAL_DILATED] = kir_eval_conv; }
