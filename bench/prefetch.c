/* prefetch: the step time of a loop fed by kiln_prefetch with ring sizes 0
 * (no prefetch: the consumer loads and copies each batch itself), 1, 2 and
 * 3, for a step whose compute and copy take about the same time.
 *
 *   bench_prefetch [--mbytes N] [--steps N] [--json PATH]
 *
 * Each batch is f32[rows, 1024] of --mbytes MiB (default 16), split over
 * every device of the context (backend auto, or KILN_BACKEND). "copy" is the
 * measured time to load one batch (a memcpy from the data set, as a loader
 * does) and put it on the devices; the step's "compute" is a sleep of the
 * same length on the consumer (device compute leaves the host idle), so the two are equal by construction.
 * With prefetching the copy should hide behind the compute: the target is a
 * step time <= 1.05 x max(compute, copy) for size 2. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kiln/data.h"
#include "report.h"

typedef struct source {
  const char *data; /* the "data set": rows of the batch, reused every step */
  kiln_host_data batch;
  int64_t left;
} source;

/* Loads the next batch: a copy out of the data set, as a loader's gather is. */
static kiln_status source_next(void *user, kiln_tree **out) {
  source *s = user;
  *out = NULL;
  if (s->left-- <= 0) return KILN_OK;
  memcpy(s->batch.data, s->data, s->batch.nbytes);
  kiln_tree *leaf = kiln_tree_ptr(&s->batch);
  *out = kiln_tree_list(1, &leaf);
  return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

/* The step's compute, as a device runs it: the host thread waits without
 * taking a core from the producer (this machine's cores are few and shared). */
static void compute_for(uint64_t ns) {
  struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&t, &t) == -1 && errno == EINTR) {
  }
}

/* Without prefetch: load, split and copy each batch on the consumer, then
 * wait for it (the step needs it), with `compute_ns` of work per step. */
static kiln_status run_inline(kiln_ctx *ctx, source *s, int steps, uint64_t compute_ns,
                              uint64_t *step_ns) {
  int n = kiln_device_count(ctx);
  kiln_host_data shard = s->batch;
  shard.shape[0] /= n;
  shard.nbytes /= (size_t)n;
  kiln_status st = KILN_OK;
  for (int i = 0; i < steps && !st; i++) {
    uint64_t t0 = kbench_now_ns();
    kiln_tree *t = NULL;
    if ((st = source_next(s, &t))) break;
    kiln_tree_free(t);
    for (int d = 0; d < n && !st; d++) {
      kiln_device *dev;
      kiln_array *a = NULL;
      shard.data = (char *)s->batch.data + (size_t)d * shard.nbytes;
      if (!(st = kiln_device_get(ctx, d, &dev)) && !(st = kiln_host_data_to_array(&shard, dev, &a)))
        st = kiln_array_block_until_ready(a);
      kiln_array_release(a);
    }
    compute_for(compute_ns);
    step_ns[i] = kbench_now_ns() - t0;
  }
  return st;
}

static kiln_status run_prefetch(kiln_ctx *ctx, source *s, int size, int steps, uint64_t compute_ns,
                                uint64_t *step_ns) {
  kiln_prefetch *pf;
  kiln_status st = kiln_prefetch_new(ctx, source_next, s, size, NULL, 0, &pf);
  if (st) return st;
  for (int i = 0; i < steps && !st; i++) {
    uint64_t t0 = kbench_now_ns();
    kiln_tree *t = NULL;
    if ((st = kiln_prefetch_next(pf, &t))) break;
    if (!t) {
      st = kiln_fail(KILN_ERR_INTERNAL, "bench_prefetch: the stream ended at step %d", i);
      break;
    }
    compute_for(compute_ns);
    kiln_tree_free(t);
    step_ns[i] = kbench_now_ns() - t0;
  }
  kiln_prefetch_free(pf);
  return st;
}

static int parse_int(const char *text, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < 1 || v > 1 << 20) return 0;
  *out = (int)v;
  return 1;
}

static kiln_status run(kiln_ctx *ctx, int mbytes, int steps, kbench_report *r) {
  int n = kiln_device_count(ctx);
  int64_t rows = (int64_t)mbytes * 256; /* 4 KiB rows */
  rows -= rows % n;
  source s = {0};
  s.batch.dtype = KILN_F32;
  s.batch.rank = 2;
  s.batch.shape[0] = rows;
  s.batch.shape[1] = 1024;
  s.batch.nbytes = (size_t)rows * 4096;
  char *data = calloc(s.batch.nbytes, 1);
  s.batch.data = malloc(s.batch.nbytes);
  uint64_t *ns = calloc((size_t)steps, sizeof *ns);
  kiln_status st = KILN_OK;
  if (!data || !s.batch.data || !ns) st = kiln_fail(KILN_ERR_OUT_OF_MEMORY, "bench_prefetch: no memory");
  s.data = data;
  for (int i = 0; i < n && !st; i++) {
    kiln_device *dev;
    kiln_device_info info;
    if (!(st = kiln_device_get(ctx, i, &dev)) && !(st = kiln_device_info_get(dev, &info)))
      st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  }
  /* The copy time: the inline loop with no compute (after a warm-up). */
  s.left = INT64_MAX;
  if (!st) st = run_inline(ctx, &s, 3, 0, ns);
  if (!st) st = run_inline(ctx, &s, steps, 0, ns);
  double copy = st ? 0 : kbench_median_ns(ns, steps);
  uint64_t compute = (uint64_t)copy;
  for (int size = 0; size <= 3 && !st; size++) {
    s.left = INT64_MAX;
    st = size ? run_prefetch(ctx, &s, size, steps, compute, ns) : run_inline(ctx, &s, steps, compute, ns);
    if (st) break;
    double step = kbench_median_ns(ns, steps);
    char name[32];
    snprintf(name, sizeof name, "size %d", size);
    kbench_report_row(r, name);
    kbench_report_value(r, "step_ms", step / 1e6);
    kbench_report_value(r, "copy_ms", copy / 1e6);
    kbench_report_value(r, "compute_ms", (double)compute / 1e6);
    kbench_report_value(r, "step/max(compute,copy)", step / copy);
  }
  kbench_report_param(r, "batch_mbytes", mbytes);
  kbench_report_param(r, "steps", steps);
  kbench_report_param(r, "devices", n);
  kbench_report_note(r, "size 0 loads and copies on the consumer; sizes 1..3 use kiln_prefetch");
  kbench_report_note(r, "target: size 2 step <= 1.05 x max(compute, copy)");
  free(data);
  free(s.batch.data);
  free(ns);
  return st;
}

int main(int argc, char **argv) {
  int mbytes = 16, steps = 20;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mbytes") && i + 1 < argc && parse_int(argv[i + 1], &mbytes)) i++;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc && parse_int(argv[i + 1], &steps)) i++;
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_prefetch [--mbytes N] [--steps N] [--json PATH]\n");
      return 2;
    }
  }
  kiln_ctx *ctx = NULL;
  kbench_report *r = NULL;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kbench_report_new("prefetch", &r);
  if (!st) st = run(ctx, mbytes, steps, r);
  if (!st) {
    char path[512];
    kbench_report_print(r, stdout);
    if (!(st = kbench_report_write_json(r, json, path, sizeof path))) printf("wrote %s\n", path);
  }
  if (st) fprintf(stderr, "bench_prefetch: %s\n", kiln_last_error());
  kbench_report_free(r);
  kiln_ctx_free(ctx);
  return st ? 1 : 0;
}
