/* bench_fusion: fused kernels vs. one kernel per primitive, measured against
 * the copy bandwidth of the same device in the same run.
 *
 *   bench_fusion [--iters N] [--batch N] [--scale S] [--only REGEX] [--fused-only]
 *                [--json PATH]
 *
 * The cases (bench/cases.h): an 8-op elementwise chain over 2^24 f32, a
 * broadcast-heavy expression, and row softmax and layernorm over rows of
 * 1024 to 8192 in f32 and bf16, each of 2^24 elements (times --scale). Each
 * runs through kiln_jit_call on the context's first device (KILN_BACKEND)
 * under the fused and the unfused executor (one kernel per primitive); the
 * 8-op chain also under the reference executor, for the CPU target.
 *
 * A sample is --batch calls issued back to back and a wait for the last
 * result, divided by --batch (on a GPU, host dispatch overlaps the kernels;
 * default 1 on CPU, 10 on CUDA); the median of --iters samples is reported,
 * after one warm-up batch that compiles. bench/jax_reference.py times
 * jax.jit of the same functions the same way, under the same row names;
 * bench/side_by_side.py alternates the two (--only picks cases by an extended
 * regular expression, --fused-only skips the unfused, reference and copy
 * timings). */
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"
#include "runtime/runtime.h"

/* Issue 4's targets: fused elementwise code at 85% of copy bandwidth and
 * row reductions at 75% on an H100/H200; on the CPU, the fused 8-op chain
 * 10x faster than the reference executor. */
#define TARGET_ELEMENTWISE_OF_COPY 0.85
#define TARGET_ROW_OF_COPY 0.75
#define TARGET_CPU_X_VS_REFERENCE 10.0
#define REFERENCE_ITERS 3

typedef struct fusion_args {
  int iters, batch; /* batch 0: by device */
  double scale;
  const char *json, *only;
  bool fused_only;
} fusion_args;

/* One context per executor, on the same backend. */
typedef struct executor {
  kiln_executor mode;
  kiln_ctx *ctx;
  kiln_device *dev;
} executor;

static double median_ms(uint64_t *ns, int n) { return kbench_median_ns(ns, n) / 1e6; }

/* `batch` calls back to back, then a wait for the last result. */
static kiln_status call_batch(kiln_jit *j, const kiln_tree *args, int batch) {
  kiln_status st = KILN_OK;
  for (int b = 0; b < batch && !st; b++) {
    kiln_tree *out = NULL;
    st = kiln_jit_call(j, args, &out);
    if (!st && b == batch - 1) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    kiln_tree_free(out);
  }
  return st;
}

/* Median ms per call of case c under one executor. */
static kiln_status time_case(const executor *e, const kbench_case *c, int iters, int batch,
                             double *ms) {
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *args = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_fusion: no memory");
  if (!st) st = kbench_case_args(e->dev, c, &args);
  if (!st) st = kiln_func_new(c->fn, c->user, c->name, &f);
  if (!st) st = kiln_jit_new(e->ctx, f, NULL, &j);
  if (!st) st = call_batch(j, args, batch); /* warm-up: traces and compiles */
  for (int i = 0; i < iters && !st; i++) {
    uint64_t t0 = kbench_now_ns();
    st = call_batch(j, args, batch);
    ns[i] = (kbench_now_ns() - t0) / (uint64_t)batch;
  }
  if (!st) *ms = median_ms(ns, iters);
  else kiln_fail_wrap(st, "%s under the %s executor", c->name, kiln_executor_name(e->mode));
  free(ns);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
  return st;
}

/* `batch` device-to-device copies, then a wait for the device. */
static kiln_status copy_batch(kiln_device *dev, kdev_buffer *dst, const kdev_buffer *src, size_t n,
                              int batch) {
  kiln_status st = KILN_OK;
  for (int b = 0; b < batch && !st; b++) st = dev->ops->copy(dev, dst, dev, src, n);
  return st ? st : dev->ops->synchronize(dev);
}

/* The device's copy bandwidth for `bytes` moved: copies of bytes / 2 (read
 * and written, so `bytes` cross memory), timed like the calls, in GB/s. A
 * memcpy on the CPU, cuMemcpyDtoDAsync on the compute stream on CUDA. */
static kiln_status copy_gbps(kiln_device *dev, double bytes, int iters, int batch, double *gbps) {
  size_t n = (size_t)(bytes / 2) > 0 ? (size_t)(bytes / 2) : 1;
  kdev_buffer src = {0}, dst = {0};
  unsigned char *host = malloc(n);
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = KILN_OK;
  if (!host || !ns) {
    st = kiln_fail(KILN_ERR_OUT_OF_MEMORY, "copy bandwidth: no host memory for %zu bytes", n);
    goto out;
  }
  memset(host, 0x5a, n); /* touched, so that no copy reads the zero page */
  if ((st = dev->ops->alloc(dev, n, &src)) || (st = dev->ops->alloc(dev, n, &dst)) ||
      (st = dev->ops->upload(dev, &src, host, n, KDEV_COPY_DIRECT)) ||
      (st = copy_batch(dev, &dst, &src, n, batch)))
    goto out;
  for (int i = 0; i < iters && !st; i++) {
    uint64_t t0 = kbench_now_ns();
    st = copy_batch(dev, &dst, &src, n, batch);
    ns[i] = (kbench_now_ns() - t0) / (uint64_t)batch;
  }
  if (!st) *gbps = 2.0 * (double)n / (median_ms(ns, iters) * 1e6);
out:
  if (src.ptr || src.ready) dev->ops->release(dev, &src);
  if (dst.ptr || dst.ready) dev->ops->release(dev, &dst);
  free(host);
  free(ns);
  return st;
}

/* The bandwidth targets are for an H100/H200; the CPU target for the CPU. */
static bool gpu_targets_apply(const kiln_device_info *info) {
  return info->platform == KILN_BACKEND_CUDA &&
         (strstr(info->name, "H100") || strstr(info->name, "H200"));
}

static kiln_status add_target(kbench_report *r, double target, bool applies, bool met) {
  kiln_status st = kbench_report_value(r, "target", target);
  if (!st) st = kbench_report_value(r, "target_applies", applies);
  if (!st) st = kbench_report_value(r, "target_met", applies ? met : NAN);
  return st;
}

static kiln_status measure_case(const executor *ex, const kbench_case *c, const fusion_args *a,
                                const kiln_device_info *info, kbench_report *r) {
  double fused = 0, unfused = 0, copy = 0, bytes = kbench_case_bytes(c);
  kiln_status st = time_case(&ex[0], c, a->iters, a->batch, &fused);
  if (!st && a->fused_only) {
    st = kbench_report_row(r, c->name);
    if (!st) st = kbench_report_value(r, "bytes", bytes);
    if (!st) st = kbench_report_value(r, "fused_ms", fused);
    return st;
  }
  if (!st) st = time_case(&ex[1], c, a->iters, a->batch, &unfused);
  if (!st) st = copy_gbps(ex[0].dev, bytes, a->iters, a->batch, &copy);
  double fused_gbps = bytes / (fused * 1e6), of_copy = fused_gbps / copy;
  double target = c->kind == KBENCH_ROW ? TARGET_ROW_OF_COPY : TARGET_ELEMENTWISE_OF_COPY;
  if (!st) st = kbench_report_row(r, c->name);
  if (!st) st = kbench_report_value(r, "bytes", bytes);
  if (!st) st = kbench_report_value(r, "fused_ms", fused);
  if (!st) st = kbench_report_value(r, "unfused_ms", unfused);
  if (!st) st = kbench_report_value(r, "copy_GBps", copy);
  if (!st) st = kbench_report_value(r, "fused_GBps", fused_gbps);
  if (!st) st = kbench_report_value(r, "of_copy", of_copy);
  if (!st) st = kbench_report_value(r, "x_vs_unfused", unfused / fused);
  if (!st) st = add_target(r, target, gpu_targets_apply(info), of_copy >= target);
  if (st || strcmp(c->name, "chain8_f32") != 0) return st;
  /* The reference executor on the chain, for the CPU target: its own row. */
  double reference = 0;
  st = time_case(&ex[2], c, a->iters < REFERENCE_ITERS ? a->iters : REFERENCE_ITERS, 1, &reference);
  if (!st) st = kbench_report_row(r, "chain8_f32:fused_vs_reference");
  if (!st) st = kbench_report_value(r, "fused_ms", fused);
  if (!st) st = kbench_report_value(r, "reference_ms", reference);
  if (!st) st = kbench_report_value(r, "x_vs_reference", reference / fused);
  bool cpu = info->platform == KILN_BACKEND_CPU;
  if (!st) st = add_target(r, TARGET_CPU_X_VS_REFERENCE, cpu,
                           reference / fused >= TARGET_CPU_X_VS_REFERENCE);
  return st;
}

static kiln_status add_notes(kbench_report *r, const kiln_device_info *info, const fusion_args *a) {
  bool gpu = gpu_targets_apply(info);
  kiln_status st = kbench_report_note(
      r, "bytes: the function's inputs read once plus its output written once; *_GBps = bytes / "
         "time (10^9 B/s); times are ms per call, median of %d samples of %d back-to-back calls",
      a->iters, a->batch);
  if (!st)
    st = kbench_report_note(r, "copy_GBps: device-to-device copies of bytes/2 on %s (%s), same "
                               "run and timing (memcpy on CPU, cuMemcpyDtoDAsync on CUDA)",
                            info->name, kiln_backend_name(info->platform));
  if (!st)
    st = kbench_report_note(
        r, "of_copy = fused_GBps / copy_GBps; target (issue 4): >= %.2f for elementwise cases, "
           ">= %.2f for softmax/layernorm, on an H100/H200: %s on this device",
        TARGET_ELEMENTWISE_OF_COPY, TARGET_ROW_OF_COPY, gpu ? "applies" : "does not apply");
  if (!st)
    st = kbench_report_note(
        r, "chain8_f32:fused_vs_reference: target fused >= %.0fx faster than the reference "
           "executor on the CPU: %s on this device",
        TARGET_CPU_X_VS_REFERENCE,
        info->platform == KILN_BACKEND_CPU ? "applies" : "does not apply");
  if (!st)
    st = kbench_report_note(r, "the jax.jit comparison is bench/jax_reference.py + "
                               "bench/compare.py (same row names, same run on the GPU machine)");
  return st;
}

static bool parse_args(int argc, char **argv, fusion_args *a) {
  *a = (fusion_args){.iters = 10, .batch = 0, .scale = 1.0};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--iters") && v) a->iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && v) a->batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--scale") && v) a->scale = atof(argv[++i]);
    else if (!strcmp(argv[i], "--json") && v) a->json = argv[++i];
    else if (!strcmp(argv[i], "--only") && v) a->only = argv[++i];
    else if (!strcmp(argv[i], "--fused-only")) a->fused_only = true;
    else return false;
  }
  return a->iters >= 1 && a->batch >= 0 && a->scale > 0 && a->scale <= 16;
}

static kiln_status run(executor *ex, fusion_args *a, kbench_report *r) {
  static const kiln_executor modes[3] = {KILN_EXECUTOR_FUSED, KILN_EXECUTOR_UNFUSED,
                                         KILN_EXECUTOR_REFERENCE};
  kiln_status st = KILN_OK;
  for (int i = 0; i < 3 && !st; i++) {
    kiln_options o;
    kiln_options_init(&o);
    o.executor = ex[i].mode = modes[i];
    st = kiln_ctx_new(&o, &ex[i].ctx);
    if (!st) st = kiln_device_get(ex[i].ctx, 0, &ex[i].dev);
  }
  kiln_device_info info;
  if (!st) st = kiln_device_info_get(ex[0].dev, &info);
  if (!st && a->batch == 0) a->batch = info.platform == KILN_BACKEND_CUDA ? 10 : 1;
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", a->iters);
  if (!st) st = kbench_report_param(r, "batch", a->batch);
  if (!st) st = kbench_report_param(r, "scale", a->scale);
  kbench_case cases[KBENCH_MAX_FUSION_CASES];
  int nc = kbench_fusion_cases(a->scale, cases);
  regex_t only;
  if (st) return st;
  if (a->only && regcomp(&only, a->only, REG_EXTENDED | REG_NOSUB) != 0)
    return kiln_fail(KILN_ERR_ARGUMENT, "bench_fusion: --only '%s' is not a regular "
                                                "expression", a->only);
  for (int i = 0; i < nc && !st; i++)
    if (!a->only || regexec(&only, cases[i].name, 0, NULL, 0) == 0)
      st = measure_case(ex, &cases[i], a, &info, r);
  if (a->only) regfree(&only);
  if (!st) st = add_notes(r, &info, a);
  return st;
}

int main(int argc, char **argv) {
  fusion_args a;
  if (!parse_args(argc, argv, &a)) {
    fprintf(stderr, "usage: bench_fusion [--iters N>=1] [--batch N] [--scale S in (0,16]] "
                    "[--only REGEX] [--fused-only] [--json PATH]\n");
    return 2;
  }
  executor ex[3] = {{0}};
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("fusion", &r);
  if (!st) st = run(ex, &a, r);
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, a.json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "bench_fusion: %s: %s\n", kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  kbench_report_free(r);
  for (int i = 0; i < 3; i++) kiln_ctx_free(ex[i].ctx);
  return st ? 1 : 0;
}
