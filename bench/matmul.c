/* bench_matmul: kiln's dot (a jitted matmul) vs. the BLAS it calls, called
 * directly, on the context's first device.
 *
 *   bench_matmul [--max N] [--iters N] [--json PATH]
 *
 * Square f32 matmuls from 256^3 up to --max (default 2048 on the CPU). On
 * the CPU kiln's dot runs through CBLAS (OpenBLAS), so the ratio measures
 * what jit dispatch and the executor add around the same GEMM. The issue's
 * GPU comparison (cuBLASLt, bf16, up to 8192^3) needs the CUDA dot path,
 * which does not exist yet. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"

static kiln_tree *matmul(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_matmul(t, x, y));
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_ms(uint64_t *ns, int n) {
  qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
  return (double)ns[n / 2] / 1e6;
}

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

static kiln_status time_kiln(kiln_ctx *ctx, kiln_device *dev, const float *a, const float *b,
                             int64_t n, int iters, double *ms) {
  const int64_t shape[2] = {n, n};
  size_t bytes = (size_t)(n * n) * sizeof(float);
  kiln_array *xa = NULL, *ya = NULL;
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *args = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_array_from_host(dev, KILN_F32, 2, shape, a, bytes, &xa);
  if (!st) st = kiln_array_from_host(dev, KILN_F32, 2, shape, b, bytes, &ya);
  if (!st && !(args = kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_array(xa), kiln_tree_array(ya)})))
    st = KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_func_new(matmul, NULL, "matmul", &f);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  for (int i = -1; i < iters && !st; i++) {
    kiln_tree *out = NULL;
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_call(j, args, &out);
    if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    if (i >= 0) ns[i] = kcore_now_ns() - t0;
    kiln_tree_free(out);
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

int main(int argc, char **argv) {
  int64_t max = 2048;
  int iters = 5;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_matmul [--max N] [--iters N] [--json PATH]\n");
      return 2;
    }
  }
  if (iters < 1 || max < 1) return 2;
  kiln_ctx *ctx = NULL;
  kiln_device *dev = NULL;
  kiln_device_info info;
  kbench_report *r = NULL;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) st = kbench_report_new("matmul", &r);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", iters);
  for (int64_t n = max < 256 ? max : 256; n <= max && !st; n *= 2) {
    float *a = random_matrix(n), *b = random_matrix(n);
    double kiln_ms = 0, blas_ms = -1;
    st = a && b ? time_kiln(ctx, dev, a, b, n, iters, &kiln_ms) : KILN_ERR_OUT_OF_MEMORY;
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
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "bench_matmul: %s: %s\n", kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  kbench_report_free(r);
  kiln_ctx_free(ctx);
  return st ? 1 : 0;
}
