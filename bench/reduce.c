/* bench_reduce: f32 sums through kiln_jit_call, time and value.
 *
 *   bench_reduce [--iters N] [--scale S] [--bcast-log2 K] [--only REGEX] [--json PATH]
 *
 * Rows (n = 2^24 * S elements where a shape is given by n):
 *   sum_full       x[n].sum(): the C target's split reduction (threads share
 *                  the one result)
 *   sum_rows       x[n/4096, 4096].sum(1): one accumulator set per row
 *   sum_long_rows  x[n/65536, 65536].sum(1): the same over rows long enough
 *                  to be blocked (src/codegen/reduce.c, KCG_BLOCK)
 *   sum_cols       x[4096, n/4096].sum(0): columns, a tile of results per pass
 *   sum_bcast_arg  broadcast_to(s, [2^13, 2^(K-13)]).sum() for a runtime
 *                  scalar s = 1: not folded (s is unknown), so the kernel
 *                  reads the broadcast 2^K times at compute speed
 *   sum_bcast_lit  broadcast_to(1.0, [2^18, 2^18]).sum(): folded by
 *                  kir_simplify to 1.0 * 2^36 where exact
 * value is the result's first element (the exact sums of the inputs: x holds integers
 * (k mod 7) - 3 whose every partial sum is exact, the broadcasts count
 * ones), so a faster but wrong scheme shows in the table. */
#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"

typedef struct reduce_args {
  int iters, bcast_log2;
  double scale;
  const char *json, *only; /* only: an extended regular expression of row names */
} reduce_args;

typedef struct reduce_case {
  const char *name;
  int rank, axis; /* axis -1: every axis */
  int64_t shape[2];
  int bcast; /* 0: x is an argument; 1: a runtime scalar broadcast; 2: a literal one */
} reduce_case;

static kiln_tree *reduce_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const reduce_case *c = user;
  kiln_val *x;
  if (c->bcast == 2) {
    x = kiln_broadcast_to(t, kiln_scalar(t, KILN_F32, 1.0), c->rank, c->shape);
  } else {
    x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
    if (c->bcast == 1) x = kiln_broadcast_to(t, x, c->rank, c->shape);
  }
  int axes[2] = {0, 1}, n = c->axis < 0 ? c->rank : 1;
  if (c->axis >= 0) axes[0] = c->axis;
  return kiln_tree_val(kiln_reduce_sum(t, x, n, axes));
}

static kiln_status make_args(kiln_device *dev, const reduce_case *c, kiln_tree **out) {
  int64_t n = c->bcast ? 1 : c->shape[0] * (c->rank > 1 ? c->shape[1] : 1);
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_reduce: no host memory");
  for (int64_t k = 0; k < n; k++) h[k] = c->bcast ? 1.0f : (float)(k % 7 - 3);
  kiln_array *a = NULL;
  int64_t one = 1;
  kiln_status st = kiln_array_from_host(dev, KILN_F32, c->bcast ? 0 : c->rank,
                                        c->bcast ? &one : c->shape, h, (size_t)n * sizeof *h, &a);
  free(h);
  if (st) return st;
  kiln_tree *leaf = kiln_tree_array(a);
  kiln_array_release(a);
  *out = kiln_tree_tuple(1, &leaf);
  return *out ? KILN_OK : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_reduce: no tree");
}

static kiln_status time_case(kiln_ctx *ctx, kiln_device *dev, const reduce_case *c, int iters,
                             kbench_report *r) {
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *args = NULL, *out = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  float value = NAN;
  kiln_status st = ns ? KILN_OK : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_reduce: no memory");
  if (!st) st = make_args(dev, c, &args);
  if (!st) st = kiln_func_new(reduce_fn, (void *)c, c->name, &f);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  if (!st) st = kiln_jit_call(j, args, &out); /* compiles */
  for (int i = 0; i < iters && !st; i++) {
    kiln_tree_free(out);
    out = NULL;
    uint64_t t0 = kbench_now_ns();
    st = kiln_jit_call(j, args, &out);
    if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    ns[i] = kbench_now_ns() - t0;
  }
  if (!st) { /* the first element of the result */
    size_t nbytes = kiln_array_nbytes(kiln_tree_leaf_array(out));
    float *h = malloc(nbytes);
    st = h ? kiln_array_to_host(kiln_tree_leaf_array(out), h, nbytes)
           : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_reduce: no host memory");
    if (!st) value = h[0];
    free(h);
  }
  double elements = (double)c->shape[0] * (double)(c->rank > 1 ? c->shape[1] : 1);
  double ms = st ? 0 : kbench_median_ns(ns, iters) / 1e6;
  if (!st) st = kbench_report_row(r, c->name);
  if (!st) st = kbench_report_value(r, "elements", elements);
  if (!st) st = kbench_report_value(r, "ms", ms);
  if (!st) st = kbench_report_value(r, "GBps", c->bcast ? NAN : elements * 4 / (ms * 1e6));
  if (!st) st = kbench_report_value(r, "Gelem_per_s", elements / (ms * 1e6));
  if (!st) st = kbench_report_value(r, "value", value);
  free(ns);
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
  return st;
}

static bool parse_args(int argc, char **argv, reduce_args *a) {
  *a = (reduce_args){.iters = 10, .bcast_log2 = 30, .scale = 1.0};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--iters") && v) a->iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--scale") && v) a->scale = atof(argv[++i]);
    else if (!strcmp(argv[i], "--bcast-log2") && v) a->bcast_log2 = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && v) a->json = argv[++i];
    else if (!strcmp(argv[i], "--only") && v) a->only = argv[++i];
    else return false;
  }
  return a->iters >= 1 && a->scale > 0 && a->scale <= 16 && a->bcast_log2 >= 14 &&
         a->bcast_log2 <= 40;
}

static kiln_status run(const reduce_args *a, kbench_report *r) {
  kiln_ctx *ctx = NULL;
  kiln_device *dev = NULL;
  kiln_device_info info;
  kiln_options o;
  kiln_options_init(&o);
  kiln_status st = kiln_ctx_new(&o, &ctx);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", a->iters);
  if (!st) st = kbench_report_param(r, "scale", a->scale);
  if (!st) st = kbench_report_param(r, "bcast_log2", a->bcast_log2);
  int64_t n = (int64_t)((double)((int64_t)1 << 24) * a->scale), w = n / 4096 > 0 ? n / 4096 : 1;
  const reduce_case cases[] = {
      {"sum_full", 1, -1, {n, 1}, 0},
      {"sum_rows", 2, 1, {w, 4096}, 0},
      {"sum_long_rows", 2, 1, {n / 65536 > 0 ? n / 65536 : 1, 65536}, 0},
      {"sum_cols", 2, 0, {4096, w}, 0},
      {"sum_bcast_arg", 2, -1, {(int64_t)1 << 13, (int64_t)1 << (a->bcast_log2 - 13)}, 1},
      {"sum_bcast_lit", 2, -1, {(int64_t)1 << 18, (int64_t)1 << 18}, 2},
  };
  regex_t only;
  bool filter = !st && a->only;
  if (filter && regcomp(&only, a->only, REG_EXTENDED | REG_NOSUB) != 0) {
    filter = false;
    st = kiln_fail(KILN_ERR_ARGUMENT, "bench_reduce: --only '%s' is not a regular expression",
                   a->only);
  }
  for (size_t i = 0; i < sizeof cases / sizeof *cases && !st; i++)
    if (!filter || regexec(&only, cases[i].name, 0, NULL, 0) == 0)
      st = time_case(ctx, dev, &cases[i], cases[i].bcast ? 1 + a->iters / 5 : a->iters, r);
  if (filter) regfree(&only);
  if (!st)
    st = kbench_report_note(r, "ms: median per call of --iters calls (broadcast rows: iters/5+1), "
                               "after one compiling call; GBps = 4 * elements / time for the "
                               "materialised rows; value: the f32 result");
  kiln_ctx_free(ctx);
  return st;
}

int main(int argc, char **argv) {
  reduce_args a;
  if (!parse_args(argc, argv, &a)) {
    fprintf(stderr, "usage: bench_reduce [--iters N>=1] [--scale S in (0,16]] "
                    "[--bcast-log2 K in [14,40]] [--only REGEX] [--json PATH]\n");
    return 2;
  }
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("reduce", &r);
  if (!st) st = run(&a, r);
  int rc = kbench_report_finish(r, st, a.json, "bench_reduce");
  kbench_report_free(r);
  return rc;
}
