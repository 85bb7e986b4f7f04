/* conv_general_dilated as im2col + GEMM for the CUDA target: three copy
 * kernels around one strided-batched GEMM (cuBLASLt, one batch entry per
 * feature or batch group):
 *
 *   im2col   cols[grp][n * out_total + pos][i * win_total + k] = lhs element
 *            (0 in padding and between lhs-dilated elements)
 *   pack_w   w[grp][i * win_total + k][j] = rhs element (out feature
 *            grp * opg + j, in feature i, window position k)
 *   scatter  out element (n, grp * opg + j, pos) = res[grp][n * out_total + pos][j]
 *
 * so that res[grp] = cols[grp] x w[grp]. The copies move raw elements, so
 * one instantiation per element width serves every dtype (f16 and bf16
 * share the 16-bit one); the GEMM's output type decides scatter's width.
 * Where the result's layout is already res's (one group, the output
 * feature innermost: NHWC), the GEMM writes it and scatter is skipped.
 * One source for both targets, as threefry.h: the host library includes it
 * as C11 (src/ir/conv_eval.c fills the geometry, tests run the element
 * functions), NVRTC compiles the kernels; it uses no headers and only
 * built-in types there. (cuDNN is not shipped to load at run time, so
 * kiln has its own.) */
#ifndef KILN_KERNELS_CONV_H
#define KILN_KERNELS_CONV_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KILN_CONV_FN static __device__ __forceinline__
typedef long long kiln_cv_i64;
#else
#include <stdint.h>
#define KILN_CONV_FN static inline
typedef int64_t kiln_cv_i64;
#endif

#define KILN_CONV_MAX_SPATIAL 6

/* Sizes and element strides of one convolution, in spec order (batch,
 * feature, spatial...). groups = feature_group_count * batch_group_count
 * (one of them is 1); batch_groups says which. */
typedef struct kiln_conv_geom {
  kiln_cv_i64 n_sp, n_out, cg, opg, groups, batch_groups;
  kiln_cv_i64 ls_n, ls_c, rs_o, rs_i, os_n, os_o;
  kiln_cv_i64 in[KILN_CONV_MAX_SPATIAL], win[KILN_CONV_MAX_SPATIAL], out[KILN_CONV_MAX_SPATIAL];
  kiln_cv_i64 ls[KILN_CONV_MAX_SPATIAL], rs[KILN_CONV_MAX_SPATIAL], os[KILN_CONV_MAX_SPATIAL];
  kiln_cv_i64 stride[KILN_CONV_MAX_SPATIAL], ldil[KILN_CONV_MAX_SPATIAL];
  kiln_cv_i64 rdil[KILN_CONV_MAX_SPATIAL], lo[KILN_CONV_MAX_SPATIAL];
  kiln_cv_i64 out_total, win_total;
} kiln_conv_geom;

KILN_CONV_FN kiln_cv_i64 kiln_conv_kd(const kiln_conv_geom *g) { return g->cg * g->win_total; }
KILN_CONV_FN kiln_cv_i64 kiln_conv_rows(const kiln_conv_geom *g) { return g->n_out * g->out_total; }

/* The lhs offset cols[grp][row][col] reads, or -1 for a zero. */
KILN_CONV_FN kiln_cv_i64 kiln_conv_cols_src(const kiln_conv_geom *g, kiln_cv_i64 grp,
                                            kiln_cv_i64 row, kiln_cv_i64 col) {
  kiln_cv_i64 n = row / g->out_total, pos = row % g->out_total;
  kiln_cv_i64 i = col / g->win_total, k = col % g->win_total;
  kiln_cv_i64 off = g->batch_groups ? (grp * g->n_out + n) * g->ls_n + i * g->ls_c
                                    : n * g->ls_n + (grp * g->cg + i) * g->ls_c;
  for (int s = (int)g->n_sp - 1; s >= 0; s--) {
    kiln_cv_i64 o = pos % g->out[s], w = k % g->win[s];
    pos /= g->out[s];
    k /= g->win[s];
    kiln_cv_i64 p = o * g->stride[s] + w * g->rdil[s] - g->lo[s];
    if (p < 0 || p % g->ldil[s] != 0) return -1;
    p /= g->ldil[s];
    if (p >= g->in[s]) return -1;
    off += p * g->ls[s];
  }
  return off;
}

/* The rhs offset w[grp][col][j] reads. */
KILN_CONV_FN kiln_cv_i64 kiln_conv_w_src(const kiln_conv_geom *g, kiln_cv_i64 grp, kiln_cv_i64 col,
                                         kiln_cv_i64 j) {
  kiln_cv_i64 i = col / g->win_total, k = col % g->win_total;
  kiln_cv_i64 off = (grp * g->opg + j) * g->rs_o + i * g->rs_i;
  for (int s = (int)g->n_sp - 1; s >= 0; s--) {
    off += (k % g->win[s]) * g->rs[s];
    k /= g->win[s];
  }
  return off;
}

/* The result offset res[grp][row][j] goes to. */
KILN_CONV_FN kiln_cv_i64 kiln_conv_out_dst(const kiln_conv_geom *g, kiln_cv_i64 grp,
                                           kiln_cv_i64 row, kiln_cv_i64 j) {
  kiln_cv_i64 n = row / g->out_total, pos = row % g->out_total;
  kiln_cv_i64 off = n * g->os_n + (grp * g->opg + j) * g->os_o;
  for (int s = (int)g->n_sp - 1; s >= 0; s--) {
    off += (pos % g->out[s]) * g->os[s];
    pos /= g->out[s];
  }
  return off;
}

/* Element idx of each copy (idx over groups * rows * kd, groups * kd *
 * opg and groups * rows * opg elements respectively). */
#define KILN_DEFINE_CONV_COPIES(W, T)                                                       \
  KILN_CONV_FN void kiln_conv_im2col_at_##W(const kiln_conv_geom *g, const T *lhs, T *cols, \
                                            kiln_cv_i64 idx) {                              \
    kiln_cv_i64 kd = kiln_conv_kd(g), per = kiln_conv_rows(g) * kd;                         \
    kiln_cv_i64 src = kiln_conv_cols_src(g, idx / per, idx % per / kd, idx % kd);           \
    cols[idx] = src < 0 ? (T)0 : lhs[src];                                                  \
  }                                                                                         \
  KILN_CONV_FN void kiln_conv_pack_w_at_##W(const kiln_conv_geom *g, const T *rhs, T *w,    \
                                            kiln_cv_i64 idx) {                              \
    kiln_cv_i64 per = kiln_conv_kd(g) * g->opg;                                             \
    w[idx] = rhs[kiln_conv_w_src(g, idx / per, idx % per / g->opg, idx % g->opg)];          \
  }                                                                                         \
  KILN_CONV_FN void kiln_conv_scatter_at_##W(const kiln_conv_geom *g, const T *res, T *out, \
                                             kiln_cv_i64 idx) {                             \
    kiln_cv_i64 per = kiln_conv_rows(g) * g->opg;                                           \
    out[kiln_conv_out_dst(g, idx / per, idx % per / g->opg, idx % g->opg)] = res[idx];      \
  }

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/* One copy as a kernel of kiln's ABI (src/codegen/codegen.h): grid-stride
 * over elements [begin, end), reading args.ptr[IN] and writing
 * args.ptr[OUT]. The geometry is the constant initialiser KILN_CONV_GEOM
 * that the includer defines (src/codegen/conv.c), so that NVRTC folds the
 * index divisions into multiplies. */
#define KILN_DEFINE_CONV_KERNEL(NAME, OP, W, T, IN, OUT)                                   \
  extern "C" __global__ void __launch_bounds__(KILN_CONV_THREADS)                          \
      NAME(kiln_kernel_args args, long long begin, long long end) {                        \
    const kiln_conv_geom g = KILN_CONV_GEOM;                                               \
    const T *src = (const T *)args.ptr[IN];                                                \
    T *dst = (T *)args.ptr[OUT];                                                           \
    for (long long i = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < end; \
         i += (long long)gridDim.x * blockDim.x)                                          \
      kiln_conv_##OP##_at_##W(&g, src, dst, i);                                            \
  }
#endif

#endif
