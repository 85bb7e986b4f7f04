/* bench_blas: the CPU GEMM libraries Debian ships, side by side on the same
 * square f32 matmuls, so that kiln's choice of host BLAS is measured rather
 * than assumed (issue 12). Each library is opened at run time from its
 * Debian path, one per process (--lib), so that one library's thread pool
 * never competes with another's; bench/side_by_side.py --blas runs them
 * alternately with XLA's dot in one run.
 *
 *   bench_blas --lib openblas|blis|onednn [--sizes 512,1024,2048]
 *              [--iters N] [--threads N] [--json PATH]
 *
 * openblas: libopenblas0-pthread (what kiln links), cblas_sgemm;
 * blis: libblis4-pthread, its CBLAS layer; onednn: libdnnl2, dnnl_sgemm
 * (row-major, OpenMP). A library that is not installed is a row saying so
 * (exit status 0): apt-get install libblis4-pthread libdnnl2 to measure. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

typedef void (*kb_cblas_sgemm)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
typedef int (*kb_dnnl_sgemm)(char ta, char tb, long long m, long long n, long long k, float alpha,
                             const float *a, long long lda, const float *b, long long ldb,
                             float beta, float *c, long long ldc);
typedef void (*kb_set_threads)(int n);

/* CBLAS's enum values (cblas.h): row major, no transpose. */
#define KB_ROW_MAJOR 101
#define KB_NO_TRANS 111

typedef struct kb_lib {
  const char *name, *path, *package, *threads_fn;
  bool dnnl;
} kb_lib;

static const kb_lib kb_libs[] = {
    {"openblas", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
     "libopenblas0-pthread", "openblas_set_num_threads", false},
    {"blis", "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4", "libblis4-pthread",
     "bli_thread_set_num_threads", false},
    {"onednn", "libdnnl.so.2", "libdnnl2", NULL, true},
};

/* C = A . B through the open library. */
typedef struct kb_gemm {
  kb_cblas_sgemm cblas;
  kb_dnnl_sgemm dnnl;
} kb_gemm;

static void kb_run(const kb_gemm *g, const float *a, const float *b, float *c, int n) {
  if (g->dnnl)
    g->dnnl('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  else
    g->cblas(KB_ROW_MAJOR, KB_NO_TRANS, KB_NO_TRANS, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

/* Median ms of iters GEMMs of size n (after one warm-up), and the max
 * deviation of C from a reference row computed in double. */
static kiln_status kb_time(const kb_gemm *g, int n, int iters, double *ms, double *err) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  if (!a || !b || !c || !ns) {
    free(a), free(b), free(c), free(ns);
    return KILN_ERR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < nn; i++) {
    a[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    b[i] = (float)((i * 40503u) % 997) / 997.0f - 0.5f;
  }
  for (int i = -1; i < iters; i++) {
    uint64_t t0 = kbench_now_ns();
    kb_run(g, a, b, c, n);
    if (i >= 0) ns[i] = kbench_now_ns() - t0;
  }
  *ms = kbench_median_ns(ns, iters) / 1e6;
  *err = 0;
  for (int j = 0; j < n; j += n / 16 ? n / 16 : 1) { /* a few columns of the last row */
    double want = 0;
    for (int k = 0; k < n; k++) want += (double)a[(size_t)(n - 1) * n + k] * b[(size_t)k * n + j];
    double d = c[(size_t)(n - 1) * n + j] - want;
    if (d < 0) d = -d;
    if (d > *err) *err = d;
  }
  free(a), free(b), free(c), free(ns);
  return KILN_OK;
}

int main(int argc, char **argv) {
  const char *lib = NULL, *json = NULL, *sizes = "512,1024,2048";
  int iters = 10, threads = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else lib = NULL, i = argc;
  }
  const kb_lib *l = NULL;
  for (size_t i = 0; lib && i < sizeof kb_libs / sizeof *kb_libs; i++)
    if (!strcmp(lib, kb_libs[i].name)) l = &kb_libs[i];
  if (!l || iters < 1) {
    fprintf(stderr, "usage: bench_blas --lib openblas|blis|onednn [--sizes 512,1024,2048] "
                    "[--iters N] [--threads N] [--json PATH]\n");
    return 2;
  }
  char nthreads[16];
  if (threads > 0) {
    snprintf(nthreads, sizeof nthreads, "%d", threads);
    setenv("OMP_NUM_THREADS", nthreads, 1); /* oneDNN's OpenMP pool, read when it loads */
  }
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("blas", &r);
  if (!st) st = kbench_report_add_device(r, "host CPU", "cpu");
  if (!st) st = kbench_report_param(r, "iters", iters);
  if (!st) st = kbench_report_param(r, "threads", threads);
  void *h = st ? NULL : dlopen(l->path, RTLD_NOW | RTLD_LOCAL);
  kb_gemm g = {0};
  if (h && l->dnnl) g.dnnl = (kb_dnnl_sgemm)dlsym(h, "dnnl_sgemm");
  if (h && !l->dnnl) g.cblas = (kb_cblas_sgemm)dlsym(h, "cblas_sgemm");
  kb_set_threads set = h && l->threads_fn ? (kb_set_threads)dlsym(h, l->threads_fn) : NULL;
  if (set && threads > 0) set(threads);
  char row[64];
  for (const char *p = sizes; !st && *p;) {
    int n = atoi(p);
    snprintf(row, sizeof row, "%s_f32_%d^3", l->name, n);
    st = kbench_report_row(r, row);
    if (!st && (g.cblas || g.dnnl) && n > 0) {
      double ms = 0, err = 0;
      st = kb_time(&g, n, iters, &ms, &err);
      if (!st) st = kbench_report_value(r, "ms", ms);
      if (!st) st = kbench_report_value(r, "gflops", 2.0 * n * n * (double)n / (ms * 1e6));
      if (!st) st = kbench_report_value(r, "max_abs_err", err);
    } else if (!st) {
      st = kbench_report_value(r, "ms", 0.0 / 0.0);
    }
    p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
  }
  if (!st && !(g.cblas || g.dnnl))
    st = kbench_report_note(r, "%s: not installed (%s: apt-get install %s)", l->name, l->path,
                            l->package);
  if (!st)
    st = kbench_report_note(r, "%s (%s): median ms of %d square row-major sgemm calls after a "
                            "warm-up; gflops = 2 n^3 / time; max_abs_err: 16 elements of the last "
                            "row against a double-precision dot", l->name, l->path, iters);
  int rc = kbench_report_finish(r, st, json, "bench_blas");
  kbench_report_free(r);
  if (h) dlclose(h);
  return rc;
}
