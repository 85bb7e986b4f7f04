/* bench_fusion: fused kernels vs. one kernel per primitive vs. the reference
 * executor, on the context's first device.
 *
 *   bench_fusion [--iters N] [--scale S] [--json PATH]
 *
 * Cases: an 8-op elementwise chain over 2^24 f32 (scaled by --scale), a
 * broadcast-heavy expression, and row softmax and layernorm over rows of
 * 1024 and 8192 in f32 and bf16. Each row reports the median time of
 * kiln_jit_call (waiting for the result) under each executor, the fused
 * path's effective bandwidth (bytes read and written once / time) and the
 * speedups. On a CUDA device the executors are the same until CUDA kernel
 * launch lands; the table says so through the device name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "jit_cases.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"

typedef struct fusion_case {
  const char *name;
  kiln_fn fn;
  kiln_dtype dtype;
  int n_in;
  int rank[3];
  int64_t shape[3][2];
  double out_elements;
} fusion_case;

static kiln_val *leaf(const kiln_tree *args, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(args, i))->u.val;
}

static kiln_tree *chain8(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = leaf(a, 0);
  for (int i = 0; i < 4; i++)
    x = kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, 1.0001)), kiln_scalar_f(t, 0.5));
  return kiln_tree_val(x);
}

static kiln_tree *broadcast(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = leaf(a, 0), *y = leaf(a, 1), *z = leaf(a, 2);
  return kiln_tree_val(kiln_sub(t, kiln_mul(t, kiln_add(t, x, y), z), x));
}

/* softmax and layernorm are the functions the jit tests check against
 * jax.jit (tests/jit_cases.c), so the benchmark times verified code. */
static kiln_fn verified_fn(const char *name) {
  for (const jit_case *c = kJitCases; c->name; c++)
    if (strcmp(c->name, name) == 0) return c->fn;
  return NULL;
}

static kiln_tree *make_args(kiln_device *dev, const fusion_case *c) {
  kiln_tree *leaves[3] = {NULL, NULL, NULL};
  for (int i = 0; i < c->n_in; i++) {
    int64_t n = 1;
    for (int d = 0; d < c->rank[i]; d++) n *= c->shape[i][d];
    size_t es = kiln_dtype_size(c->dtype);
    unsigned char *data = malloc((size_t)n * es);
    if (!data) return NULL;
    for (int64_t k = 0; k < n; k++) {
      float v = (float)((k * 2654435761u) % 1000) / 500.0f - 1.0f;
      if (c->dtype == KILN_BF16) {
        uint16_t b = kiln_f32_to_bf16(v);
        memcpy(data + k * 2, &b, 2);
      } else {
        memcpy(data + k * 4, &v, 4);
      }
    }
    kiln_array *arr = NULL;
    kiln_status st = kiln_array_from_host(dev, c->dtype, c->rank[i], c->shape[i], data, (size_t)n * es, &arr);
    free(data);
    if (st) return NULL;
    leaves[i] = kiln_tree_array(arr);
    kiln_array_release(arr);
  }
  return kiln_tree_tuple((size_t)c->n_in, leaves);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Median ms of kiln_jit_call under one executor. */
static kiln_status time_case(kiln_executor mode, const fusion_case *c, int iters, double *ms,
                             char *device, size_t cap) {
  kiln_options o;
  kiln_options_init(&o);
  o.executor = mode;
  kiln_ctx *ctx = NULL;
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *args = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_device *dev = NULL;
  kiln_device_info info;
  kiln_status st = ns ? kiln_ctx_new(&o, &ctx) : KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) snprintf(device, cap, "%s", info.name);
  if (!st && !(args = make_args(dev, c))) st = KILN_ERR_OUT_OF_MEMORY;
  if (!st) st = kiln_func_new(c->fn, NULL, c->name, &f);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  for (int i = -1; i < iters && !st; i++) { /* one warm-up call compiles */
    kiln_tree *out = NULL;
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_call(j, args, &out);
    if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    uint64_t t1 = kcore_now_ns();
    kiln_tree_free(out);
    if (i >= 0) ns[i] = t1 - t0;
  }
  if (!st) {
    qsort(ns, (size_t)iters, sizeof *ns, cmp_u64);
    *ms = (double)ns[iters / 2] / 1e6;
  }
  free(ns);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_ctx_free(ctx);
  return st;
}

static double case_bytes(const fusion_case *c) {
  double b = c->out_elements;
  for (int i = 0; i < c->n_in; i++) {
    double n = 1;
    for (int d = 0; d < c->rank[i]; d++) n *= (double)c->shape[i][d];
    b += n;
  }
  return b * (double)kiln_dtype_size(c->dtype);
}

int main(int argc, char **argv) {
  int iters = 10;
  double scale = 1.0;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atof(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_fusion [--iters N] [--scale S] [--json PATH]\n");
      return 2;
    }
  }
  if (iters < 1 || scale <= 0 || scale > 1) return 2;
  int64_t n = (int64_t)((double)(1 << 24) * scale), side = (int64_t)(2048 * (scale < 1 ? 0.25 : 1));
  fusion_case cases[10];
  int nc = 0;
  cases[nc++] = (fusion_case){"chain8_f32", chain8, KILN_F32, 1, {1}, {{n}}, (double)n};
  cases[nc++] = (fusion_case){"broadcast_f32", broadcast, KILN_F32, 3, {2, 2, 1},
                              {{side, 1}, {1, side}, {side}}, (double)(side * side)};
  const int64_t lengths[2] = {1024, 8192};
  for (int k = 0; k < 2; k++)
    for (int dt = 0; dt < 2; dt++) {
      int64_t len = lengths[k], rows_n = n / 4 / len > 0 ? n / 4 / len : 1;
      kiln_dtype d = dt ? KILN_BF16 : KILN_F32;
      static char names[8][48];
      char *sm = names[2 * (2 * k + dt)], *ln = names[2 * (2 * k + dt) + 1];
      snprintf(sm, 48, "softmax_%lld_%s", (long long)len, kiln_dtype_short_name(d));
      snprintf(ln, 48, "layernorm_%lld_%s", (long long)len, kiln_dtype_short_name(d));
      cases[nc++] = (fusion_case){sm, verified_fn("softmax"), d, 1, {2}, {{rows_n, len}},
                                  (double)(rows_n * len)};
      cases[nc++] = (fusion_case){ln, verified_fn("layernorm"), d, 1, {2}, {{rows_n, len}},
                                  (double)(rows_n * len)};
    }
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("fusion", &r);
  char device[128] = "";
  if (!st) st = kbench_report_param(r, "iters", iters);
  if (!st) st = kbench_report_param(r, "scale", scale);
  for (int i = 0; i < nc && !st; i++) {
    double fused = 0, unfused = 0, reference = 0;
    st = time_case(KILN_EXECUTOR_FUSED, &cases[i], iters, &fused, device, sizeof device);
    if (!st) st = time_case(KILN_EXECUTOR_UNFUSED, &cases[i], iters, &unfused, device, sizeof device);
    if (!st) st = time_case(KILN_EXECUTOR_REFERENCE, &cases[i], iters > 3 ? 3 : iters, &reference,
                            device, sizeof device);
    if (!st && i == 0) st = kbench_report_add_device(r, device, "auto");
    if (!st) st = kbench_report_row(r, cases[i].name);
    if (!st) st = kbench_report_value(r, "fused_ms", fused);
    if (!st) st = kbench_report_value(r, "unfused_ms", unfused);
    if (!st) st = kbench_report_value(r, "reference_ms", reference);
    if (!st) st = kbench_report_value(r, "fused_GBps", case_bytes(&cases[i]) / (fused * 1e6));
    if (!st) st = kbench_report_value(r, "x_vs_unfused", unfused / fused);
    if (!st) st = kbench_report_value(r, "x_vs_reference", reference / fused);
  }
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "bench_fusion: %s: %s\n", kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  kbench_report_free(r);
  return st ? 1 : 0;
}
