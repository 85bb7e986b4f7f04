/* bench_dispatch: host time of jit dispatch and of tracing + compiling.
 *
 *   bench_dispatch [--iters N] [--json PATH]
 *
 * Rows:
 *   cached_call      kiln_jit_call of a one-op function on f32[4] whose
 *                    program is cached: signature, lookup, run, output tree
 *   trace_compile_N  kiln_jit_lower + kiln_lowered_compile of a chain of N
 *                    elementwise equations (N = 10, 100, 1000)
 * Each is the median over the iterations, in microseconds. Until fused code
 * generation lands, "run" is the reference executor on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"

typedef struct dispatch_args {
  int iters;
  const char *json;
} dispatch_args;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double median_us(uint64_t *ns, int n) {
  qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
  return (double)ns[n / 2] / 1e3;
}

static kiln_tree *add_one(kiln_trace *t, const kiln_tree *args, void *user) {
  (void)user;
  return kiln_tree_val(kiln_add(t, kiln_tree_leaf_get(args)->u.val, kiln_scalar_f(t, 1.0)));
}

/* x -> x * 1.0001 + 0.5, repeated until the program has `n` equations. */
static kiln_tree *chain(kiln_trace *t, const kiln_tree *args, void *user) {
  int n = *(const int *)user;
  kiln_val *x = kiln_tree_leaf_get(args)->u.val;
  for (int i = 0; i < n / 2; i++)
    x = kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, 1.0001)), kiln_scalar_f(t, 0.5));
  return kiln_tree_val(x);
}

static kiln_tree *input(kiln_device *dev) {
  float v[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  kiln_array *a = NULL;
  if (kiln_array_from_host(dev, KILN_F32, 1, shape, v, sizeof v, &a)) return NULL;
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

static kiln_status bench_cached_call(kiln_ctx *ctx, kiln_device *dev, int iters, double *us) {
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *x = input(dev), *out = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = x && ns ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_func_new(add_one, NULL, "add_one", &f);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  for (int i = -10; i < iters && !st; i++) { /* ten warm-up calls, the first compiles */
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_call(j, x, &out);
    if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    uint64_t t1 = kcore_now_ns();
    kiln_tree_free(out);
    if (i >= 0) ns[i] = t1 - t0;
  }
  if (!st) *us = median_us(ns, iters);
  free(ns);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_tree_free(x);
  return st;
}

static kiln_status bench_trace_compile(kiln_ctx *ctx, kiln_device *dev, int n_eqns, int iters,
                                       double *us) {
  kiln_func *f = NULL;
  kiln_tree *x = input(dev);
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = x && ns ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_func_new(chain, &n_eqns, "chain", &f);
  for (int i = 0; i < iters && !st; i++) {
    kiln_jit *j = NULL;
    kiln_lowered *l = NULL;
    kiln_compiled *c = NULL;
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_new(ctx, f, NULL, &j);
    if (!st) st = kiln_jit_lower(j, x, &l);
    if (!st) st = kiln_lowered_compile(l, &c);
    ns[i] = kcore_now_ns() - t0;
    kiln_compiled_free(c);
    kiln_lowered_free(l);
    kiln_jit_free(j);
  }
  if (!st) *us = median_us(ns, iters);
  free(ns);
  kiln_func_free(f);
  kiln_tree_free(x);
  return st;
}

static bool parse_args(int argc, char **argv, dispatch_args *a) {
  a->iters = 2000;
  a->json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--iters") == 0 && v) {
      a->iters = atoi(v);
      i++;
    } else if (strcmp(argv[i], "--json") == 0 && v) {
      a->json = v;
      i++;
    } else {
      fprintf(stderr, "usage: bench_dispatch [--iters N] [--json PATH]\n");
      return false;
    }
  }
  return a->iters > 0;
}

static kiln_status run(kiln_ctx *ctx, const dispatch_args *a, kbench_report *r) {
  kiln_device *dev;
  kiln_device_info info;
  kiln_status st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", a->iters);
  double us = 0;
  if (!st) st = bench_cached_call(ctx, dev, a->iters, &us);
  if (!st) st = kbench_report_row(r, "cached_call");
  if (!st) st = kbench_report_value(r, "median_us", us);
  const int sizes[3] = {10, 100, 1000};
  for (int k = 0; k < 3 && !st; k++) {
    char name[32];
    snprintf(name, sizeof name, "trace_compile_%d", sizes[k]);
    int iters = a->iters / (sizes[k] / 10) > 5 ? a->iters / (sizes[k] / 10) : 5;
    if (!st) st = bench_trace_compile(ctx, dev, sizes[k], iters, &us);
    if (!st) st = kbench_report_row(r, name);
    if (!st) st = kbench_report_value(r, "median_us", us);
    if (!st) st = kbench_report_value(r, "us_per_eqn", us / sizes[k]);
  }
  return st;
}

int main(int argc, char **argv) {
  dispatch_args a;
  if (!parse_args(argc, argv, &a)) return 2;
  kiln_ctx *ctx = NULL;
  kbench_report *r = NULL;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kbench_report_new("dispatch", &r);
  if (!st) st = run(ctx, &a, r);
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, a.json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "bench_dispatch: %s: %s\n", kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  kbench_report_free(r);
  kiln_ctx_free(ctx);
  return st ? 1 : 0;
}
