/* Runs the CUDA target's convolution copies (kernels/conv.h) on the host:
 * im2col, weight packing, a plain GEMM per group, and the scatter into the
 * result's layout, so tests can check the kernels' index maps against
 * JAX's values without a GPU. C, because the kernels are C on the host. */
#include "conv_kernel_host.h"

#include <stdlib.h>

#include "../../kernels/conv.h"

KILN_DEFINE_CONV_COPIES(f32, float)

int kct_conv_host_f32(const kir_p_conv *c, const kir_aval *la, const kir_aval *ra,
                      const kir_aval *oa, const float *lhs, const float *rhs, float *out) {
  kiln_conv_geom g;
  kir_conv_geom_fill(c, la, ra, oa, &g);
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
