/* bench_matmul: kiln's dot (a jitted matmul) vs. the library it calls,
 * called directly, on the context's first device.
 *
 *   bench_matmul [--min N] [--max N] [--iters N] [--json PATH]
 *
 * CPU: square f32 matmuls from --min (default 256) to --max (default 2048).
 * kiln's dot runs through CBLAS (OpenBLAS), so the ratio measures what jit
 * dispatch and the executor add around the same GEMM.
 *
 * CUDA: square bf16 and f32 matmuls from --min (default 1024) to --max
 * (default 8192), kiln's jitted dot (the CUDA executor runs DOT groups
 * through cuBLASLt) against cuBLASLt called straight through kiln's table
 * of its entry points: descriptors made here, the heuristic's best
 * algorithm, the same workspace size and compute type (f32 exact, or TF32
 * under KILN_MATMUL_PRECISION=tensorfloat32, as kiln's). Each sample queues
 * enough back-to-back matmuls to take ~0.1 s and waits once; the median
 * sample over the call count is reported, and kiln/direct against the 95%
 * target. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "core/core.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"

/* kiln's time over the direct library call's: the bar. */
#define KBENCH_MATMUL_TARGET 0.95

static kiln_tree *matmul(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_matmul(t, x, y));
}

static double median_ms(uint64_t *ns, int n) { return kbench_median_ns(ns, n) / 1e6; }

static float *random_matrix(int64_t n) {
  float *m = malloc((size_t)(n * n) * sizeof *m);
  for (int64_t i = 0; m && i < n * n; i++) m[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  return m;
}

/* The same GEMM straight through CBLAS. */
static double time_blas(const float *a, const float *b, int64_t n, int iters) {
  float *c = malloc((size_t)(n * n) * sizeof *c);
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  double ms = -1;
  if (c && ns) {
    for (int i = -1; i < iters; i++) {
      uint64_t t0 = kcore_now_ns();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a,
                  (int)n, b, (int)n, 0.0f, c, (int)n);
      if (i >= 0) ns[i] = kcore_now_ns() - t0;
    }
    ms = median_ms(ns, iters);
  }
  free(c);
  free(ns);
  return ms;
}

/* Median over `iters` samples of one call's time, each sample timing
 * `reps` calls queued back to back and waited for once. */
static kiln_status time_kiln(kiln_ctx *ctx, kiln_device *dev, kiln_dtype dtype, const void *a,
                             const void *b, int64_t n, int iters, int reps, double *ms) {
  const int64_t shape[2] = {n, n};
  size_t bytes = (size_t)(n * n) * kiln_dtype_size(dtype);
  kiln_array *xa = NULL, *ya = NULL;
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *args = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_array_from_host(dev, dtype, 2, shape, a, bytes, &xa);
  if (!st) st = kiln_array_from_host(dev, dtype, 2, shape, b, bytes, &ya);
  if (!st && !(args = kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_array(xa), kiln_tree_array(ya)})))
    st = KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_func_new(matmul, NULL, "matmul", &f);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  for (int i = -1; i < iters && !st; i++) {
    uint64_t t0 = kcore_now_ns();
    for (int r = 0; r < (i < 0 ? 1 : reps) && !st; r++) {
      kiln_tree *out = NULL;
      st = kiln_jit_call(j, args, &out);
      /* Only the last call is waited for: the others queue behind it. */
      if (!st && r == (i < 0 ? 1 : reps) - 1)
        st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
      kiln_tree_free(out);
    }
    if (i >= 0) ns[i] = (kcore_now_ns() - t0) / (uint64_t)reps;
  }
  if (!st) *ms = median_ms(ns, iters);
  free(ns);
  kiln_tree_free(args);
  kiln_array_release(xa);
  kiln_array_release(ya);
  kiln_jit_free(j);
  kiln_func_free(f);
  return st;
}

/* ---- CUDA: cuBLASLt called directly ---- */

/* One square row-major C = A.B as a user of cuBLASLt would set it up. */
typedef struct direct_gemm {
  kcuda_gemm_stream *gs;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t layout;
  cublasLtMatmulAlgo_t algo;
} direct_gemm;

static kiln_status direct_setup(kcuda_gemm_stream *gs, cudaDataType_t type,
                                cublasComputeType_t compute, int64_t n, direct_gemm *g) {
  kiln_status st = KILN_OK;
  const kcuda_blaslt *lt = gs->lt;
  cublasLtMatmulPreference_t pref = NULL;
  uint64_t workspace = gs->workspace_bytes;
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  g->gs = gs;
  KCUDA_LT(lt, "bench", cublasLtMatmulDescCreate, (&g->desc, compute, CUDA_R_32F), out);
  /* Square and untransposed: A, B and D share one layout. */
  KCUDA_LT(lt, "bench", cublasLtMatrixLayoutCreate, (&g->layout, type, n, n, n), out);
  KCUDA_LT(lt, "bench", cublasLtMatmulPreferenceCreate, (&pref), out);
  KCUDA_LT(lt, "bench", cublasLtMatmulPreferenceSetAttribute,
           (pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace), out);
  KCUDA_LT(lt, "bench", cublasLtMatmulAlgoGetHeuristic,
           (gs->handle, g->desc, g->layout, g->layout, g->layout, g->layout, pref, 1, &best,
            &found),
           out);
  if (found < 1) {
    st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "bench: cuBLASLt has no algorithm for %lld^3", (long long)n);
    goto out;
  }
  g->algo = best.algo;
out:
  if (pref) lt->cublasLtMatmulPreferenceDestroy(pref);
  return st;
}

static void direct_free(direct_gemm *g) {
  if (g->layout) g->gs->lt->cublasLtMatrixLayoutDestroy(g->layout);
  if (g->desc) g->gs->lt->cublasLtMatmulDescDestroy(g->desc);
}

/* Queues `reps` matmuls (row-major C = A.B is column-major C^T = B^T.A^T)
 * and waits for them. */
static kiln_status direct_run(const direct_gemm *g, const kiln_array *a, const kiln_array *b,
                              kiln_array *c, int reps) {
  kiln_status st = KILN_OK;
  kcuda_gemm_stream *gs = g->gs;
  const float one = 1.0f, zero = 0.0f;
  const void *A = (const void *)b->buf.ptr, *B = (const void *)a->buf.ptr;
  void *C = (void *)c->buf.ptr, *work = (void *)(uintptr_t)gs->workspace;
  if ((st = kcuda_enter(gs->d))) return st;
  for (int r = 0; r < reps; r++)
    KCUDA_LT(gs->lt, "bench", cublasLtMatmul,
             (gs->handle, g->desc, &one, A, g->layout, B, g->layout, &zero, C, g->layout, C,
              g->layout, &g->algo, work, gs->workspace_bytes, gs->stream),
             out);
  KCUDA_CU(gs->d->drv, gs->d->where, cuStreamSynchronize, (gs->stream), out);
out:
  kcuda_leave(gs->d);
  return st;
}

static kiln_status time_direct(kiln_device *dev, kiln_dtype dtype, const void *a, const void *b,
                               int64_t n, int iters, int reps, double *ms) {
  const int64_t shape[2] = {n, n};
  size_t bytes = (size_t)(n * n) * kiln_dtype_size(dtype);
  kcuda_device *d = kcuda_impl(dev);
  kcuda_blaslt *lt = NULL;
  kcuda_gemm_stream *gs = NULL;
  direct_gemm g;
  memset(&g, 0, sizeof g);
  kiln_array *xa = NULL, *ya = NULL, *za = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_array_from_host(dev, dtype, 2, shape, a, bytes, &xa);
  if (!st) st = kiln_array_from_host(dev, dtype, 2, shape, b, bytes, &ya);
  if (!st) st = kdev_array_alloc("bench", dev, dtype, 2, shape, &za);
  if (!st) st = kiln_array_block_until_ready(xa);
  if (!st) st = kiln_array_block_until_ready(ya);
  if (!st) st = kcuda_blaslt_open(&lt);
  if (!st) st = kcuda_gemm_stream_new(lt, d, d->compute, &gs);
  /* The compute type kiln's executor picks for the same dot. */
  bool tf32 = dtype == KILN_F32 &&
              kiln_ctx_options(kiln_device_ctx(dev))->matmul_precision == KILN_MATMUL_TENSORFLOAT32;
  if (!st)
    st = direct_setup(gs, dtype == KILN_BF16 ? CUDA_R_16BF : CUDA_R_32F,
                      tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, n, &g);
  if (!st) st = direct_run(&g, xa, ya, za, 1); /* warm-up */
  for (int i = 0; i < iters && !st; i++) {
    uint64_t t0 = kcore_now_ns();
    st = direct_run(&g, xa, ya, za, reps);
    ns[i] = (kcore_now_ns() - t0) / (uint64_t)reps;
  }
  if (!st) *ms = median_ms(ns, iters);
  if (g.gs) direct_free(&g);
  kcuda_gemm_stream_free(gs);
  kcuda_blaslt_close(lt);
  kiln_array_release(xa);
  kiln_array_release(ya);
  kiln_array_release(za);
  free(ns);
  return st;
}

/* n x n values in [0, 1) in dtype's storage form. */
static void *random_data(kiln_dtype dtype, int64_t n) {
  float *f = random_matrix(n);
  if (!f || dtype == KILN_F32) return f;
  uint16_t *h = malloc((size_t)(n * n) * sizeof *h);
  for (int64_t i = 0; h && i < n * n; i++) h[i] = kiln_f32_to_bf16(f[i]);
  free(f);
  return h;
}

static kiln_status bench_cuda(kiln_ctx *ctx, kiln_device *dev, kbench_report *r, int64_t min,
                              int64_t max, int iters) {
  static const kiln_dtype dtypes[] = {KILN_BF16, KILN_F32};
  kiln_status st = kbench_report_note(
      r, "kiln_vs_direct: kiln's time / cuBLASLt's called directly; the target is %.0f%% or more",
      100 * KBENCH_MATMUL_TARGET);
  for (int t = 0; t < 2 && !st; t++) {
    for (int64_t n = min; n <= max && !st; n *= 2) {
      kiln_dtype dt = dtypes[t];
      double flops = 2.0 * (double)n * (double)n * (double)n, kiln_ms = 0, direct_ms = 0;
      /* ~0.1 s per sample at 500 TFLOP/s, at least one call */
      int reps = flops >= 5e13 ? 1 : flops * 200 <= 5e13 ? 200 : (int)(5e13 / flops);
      void *a = random_data(dt, n), *b = random_data(dt, n);
      st = a && b ? time_direct(dev, dt, a, b, n, iters, reps, &direct_ms) : KILN_ERR_OUT_OF_MEMORY;
      if (!st) st = time_kiln(ctx, dev, dt, a, b, n, iters, reps, &kiln_ms);
      char name[64];
      snprintf(name, sizeof name, "%s_%lld^3", kiln_dtype_short_name(dt), (long long)n);
      if (!st) st = kbench_report_row(r, name);
      if (!st) st = kbench_report_value(r, "kiln_ms", kiln_ms);
      if (!st) st = kbench_report_value(r, "direct_ms", direct_ms);
      if (!st) st = kbench_report_value(r, "kiln_TFLOPs", flops / (kiln_ms * 1e9));
      if (!st) st = kbench_report_value(r, "direct_TFLOPs", flops / (direct_ms * 1e9));
      if (!st) st = kbench_report_value(r, "kiln_vs_direct", direct_ms / kiln_ms);
      if (!st) st = kbench_report_value(r, "meets_target", direct_ms / kiln_ms >= KBENCH_MATMUL_TARGET);
      free(a);
      free(b);
    }
  }
  return st;
}

static kiln_status bench_cpu(kiln_ctx *ctx, kiln_device *dev, kbench_report *r, int64_t min,
                             int64_t max, int iters) {
  kiln_status st = KILN_OK;
  for (int64_t n = min; n <= max && !st; n *= 2) {
    float *a = random_matrix(n), *b = random_matrix(n);
    double kiln_ms = 0, blas_ms = -1;
    st = a && b ? time_kiln(ctx, dev, KILN_F32, a, b, n, iters, 1, &kiln_ms) : KILN_ERR_OUT_OF_MEMORY;
    if (!st) blas_ms = time_blas(a, b, n, iters);
    char name[64];
    snprintf(name, sizeof name, "f32_%lld^3", (long long)n);
    double flops = 2.0 * (double)n * (double)n * (double)n;
    if (!st) st = kbench_report_row(r, name);
    if (!st) st = kbench_report_value(r, "kiln_ms", kiln_ms);
    if (!st) st = kbench_report_value(r, "blas_ms", blas_ms);
    if (!st) st = kbench_report_value(r, "kiln_GFLOPs", flops / (kiln_ms * 1e6));
    if (!st) st = kbench_report_value(r, "kiln_vs_blas", blas_ms / kiln_ms);
    free(a);
    free(b);
  }
  return st;
}

int main(int argc, char **argv) {
  int64_t min = 0, max = 0;
  int iters = 5;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--min") && i + 1 < argc) min = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_matmul [--min N] [--max N] [--iters N] [--json PATH]\n");
      return 2;
    }
  }
  if (iters < 1 || min < 0 || max < 0) return 2;
  kiln_ctx *ctx = NULL;
  kiln_device *dev = NULL;
  kiln_device_info info;
  kbench_report *r = NULL;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  bool cuda = !st && info.platform == KILN_BACKEND_CUDA;
  if (!max) max = cuda ? 8192 : 2048;
  if (!min) min = cuda ? 1024 : 256;
  if (min > max) min = max;
  if (!st) st = kbench_report_new("matmul", &r);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", iters);
  if (!st) st = cuda ? bench_cuda(ctx, dev, r, min, max, iters) : bench_cpu(ctx, dev, r, min, max, iters);
  int rc = kbench_report_finish(r, st, json, "bench_matmul");
  kbench_report_free(r);
  kiln_ctx_free(ctx);
  return rc;
}
