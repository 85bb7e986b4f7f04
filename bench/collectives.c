/* collectives: psum, all_gather and psum_scatter over every CUDA device
 * through kiln's NCCL engine (backend/cuda/collective.c), with ncclAllReduce
 * called directly on the same buffers in the same run; a bucketed psum of a
 * ResNet-50-shaped tree against one flat psum of the same bytes; and the CPU
 * engine's psum across 2 virtual devices against memcpy.
 *
 *   bench_collectives [--max-bytes N[K|M|G]] [--iters N] [--resnet 0|1] [--json PATH]
 *
 * Sizes run from 8 B up by powers of 2 (nccl-tests' sweep). Times are the
 * mean over --iters back-to-back calls after warm-up, waited for once at the
 * end, as nccl-tests does. algbw = bytes / time; busbw = algbw * 2(n-1)/n
 * for psum and (n-1)/n for all_gather and psum_scatter (nccl-tests'
 * definitions: bytes is a rank's buffer for psum, the gathered buffer for
 * all_gather, the scattered input for psum_scatter), so one rank has busbw 0
 * and algbw is what one GPU shows. host_us is the time of kiln's call alone
 * (queueing the work). Without a GPU or NCCL the CUDA rows are left out. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "report.h"
#include "runtime/runtime.h"

#define MAX_DEV 16
#define WARMUP 3

typedef struct args {
  size_t max_bytes;
  int iters;
  int resnet; /* run the ResNet-50 rows */
  const char *json;
} args;

static bool parse_args(int argc, char **argv, args *a) {
  *a = (args){(size_t)1 << 30, 20, 1, NULL};
  for (int i = 1; i < argc; i += 2) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!value) return fprintf(stderr, "bench_collectives: %s needs a value\n", flag), false;
    if (!strcmp(flag, "--json")) {
      a->json = value;
    } else if (!strcmp(flag, "--iters")) {
      a->iters = (int)strtol(value, &end, 10);
      if (*end || a->iters < 1) return fprintf(stderr, "bench_collectives: bad --iters\n"), false;
    } else if (!strcmp(flag, "--resnet")) {
      a->resnet = (int)strtol(value, &end, 10);
      if (*end || a->resnet < 0 || a->resnet > 1) return fprintf(stderr, "bench_collectives: bad --resnet\n"), false;
    } else if (!strcmp(flag, "--max-bytes")) {
      unsigned long long v = strtoull(value, &end, 10);
      int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
      if ((shift && end[1]) || (!shift && *end) || (v << shift) < 8)
        return fprintf(stderr, "bench_collectives: bad --max-bytes '%s'\n", value), false;
      a->max_bytes = (size_t)v << shift;
    } else {
      fprintf(stderr, "usage: bench_collectives [--max-bytes N[K|M|G]] [--iters N] [--resnet 0|1] "
                      "[--json PATH]\n");
      return false;
    }
  }
  return true;
}

static double now_s(void) { return (double)kbench_now_ns() * 1e-9; }

/* ---- CUDA ---- */

typedef struct gpu {
  int n;
  kiln_device *devs[MAX_DEV];
  const kcuda_nccl *nc;
  kcuda_coll_mesh *mesh;
  kcuda_coll_group *g;
  kdev_buffer in[MAX_DEV], out[MAX_DEV];
  kdev_buffer *pin[MAX_DEV], *pout[MAX_DEV];
  ncclComm_t direct[MAX_DEV]; /* kiln-independent communicators for ncclAllReduce */
  CUstream streams[MAX_DEV];
} gpu;

enum { PSUM, ALL_GATHER, PSUM_SCATTER };
static const char *const kind_name[] = {"psum", "all_gather", "psum_scatter"};

static kiln_status one_call(gpu *G, int kind, int64_t count) {
  switch (kind) {
    case PSUM: return kcuda_coll_all_reduce(G->g, KILN_F32, count, G->pin, G->pout, KCUDA_COLL_SUM);
    case ALL_GATHER: return kcuda_coll_all_gather(G->g, KILN_F32, count, G->pin, G->pout);
    default: return kcuda_coll_reduce_scatter(G->g, KILN_F32, count, G->pin, G->pout);
  }
}

/* Mean seconds per call and host microseconds per call. */
static kiln_status time_kiln(gpu *G, int kind, int64_t count, int iters, double *sec, double *host_us) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < WARMUP && !st; i++) st = one_call(G, kind, count);
  if (st || (st = kcuda_coll_wait(G->mesh))) return st;
  double host = 0, t0 = now_s();
  for (int i = 0; i < iters && !st; i++) {
    double c0 = now_s();
    st = one_call(G, kind, count);
    host += now_s() - c0;
  }
  if (!st) st = kcuda_coll_wait(G->mesh);
  *sec = (now_s() - t0) / iters;
  *host_us = host / iters * 1e6;
  return st;
}

static kiln_status sync_all(gpu *G) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < G->n && !st; i++) {
    kcuda_device *d = kcuda_impl(G->devs[i]);
    if ((st = kcuda_enter(d))) break;
    KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (G->streams[i]), left);
    KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), left);
  left:
    kcuda_leave(d);
  }
  return st;
}

static kiln_status time_direct(gpu *G, int64_t count, int iters, double *sec) {
  kiln_status st = sync_all(G);
  double t0 = now_s();
  for (int i = 0; i < iters + WARMUP && !st; i++) {
    if (i == WARMUP && !(st = sync_all(G))) t0 = now_s();
    KCUDA_NCCL(G->nc, "direct", ncclGroupStart, (), out);
    for (int r = 0; r < G->n; r++)
      G->nc->ncclAllReduce((void *)G->in[r].ptr, (void *)G->out[r].ptr, (size_t)count, ncclFloat32,
                           ncclSum, G->direct[r], G->streams[r]);
    KCUDA_NCCL(G->nc, "direct", ncclGroupEnd, (), out);
  }
  if (!st) st = sync_all(G);
  *sec = (now_s() - t0) / iters;
out:
  return st;
}

static kiln_status row(kbench_report *r, const char *name, double bytes, double sec, double factor) {
  kiln_status st;
  if ((st = kbench_report_row(r, name)) || (st = kbench_report_value(r, "bytes", bytes)) ||
      (st = kbench_report_value(r, "time_us", sec * 1e6)) ||
      (st = kbench_report_value(r, "algbw_GBps", bytes / sec * 1e-9)))
    return st;
  return kbench_report_value(r, "busbw_GBps", bytes / sec * 1e-9 * factor);
}

static kiln_status sweep(gpu *G, const args *a, size_t max, kbench_report *r) {
  kiln_status st = KILN_OK;
  int n = G->n;
  for (size_t bytes = 8; bytes <= max && !st; bytes *= 2)
    for (int kind = PSUM; kind <= PSUM_SCATTER && !st; kind++) {
      /* count: elements of a rank's input */
      int64_t count = kind == ALL_GATHER ? (int64_t)(bytes / 4 / (size_t)n) : (int64_t)(bytes / 4);
      if (kind == PSUM_SCATTER) count -= count % n;
      if (count < 1) continue;
      double sec, host_us, direct = NAN, tbytes = (double)count * 4 * (kind == ALL_GATHER ? n : 1);
      char name[64];
      snprintf(name, sizeof name, "%s %zu B", kind_name[kind], bytes);
      double factor = kind == PSUM ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
      if ((st = time_kiln(G, kind, count, a->iters, &sec, &host_us)) || (st = row(r, name, tbytes, sec, factor)) ||
          (st = kbench_report_value(r, "host_us", host_us)))
        break;
      if (kind == PSUM && !(st = time_direct(G, count, a->iters, &direct))) {
        st = kbench_report_value(r, "direct_time_us", direct * 1e6);
        if (!st) st = kbench_report_value(r, "kiln_vs_direct", direct / sec);
      }
    }
  return st;
}

/* ResNet-50's 161 parameter leaves (53 convolutions, 53 batch norms' scale
 * and bias, the classifier's kernel and bias): 25,557,032 floats. */
static int resnet50_leaves(int64_t *counts) {
  int n = 0, in = 64;
  const int blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  counts[n++] = 7 * 7 * 3 * 64, counts[n++] = 64, counts[n++] = 64;
  for (int s = 0; s < 4; s++)
    for (int b = 0; b < blocks[s]; b++) {
      int w = widths[s];
      const int64_t convs[3] = {(int64_t)in * w, 9LL * w * w, (int64_t)w * 4 * w};
      const int bn[3] = {w, w, 4 * w};
      for (int k = 0; k < 3; k++) counts[n++] = convs[k], counts[n++] = bn[k], counts[n++] = bn[k];
      if (b == 0) counts[n++] = (int64_t)in * 4 * w, counts[n++] = 4 * w, counts[n++] = 4 * w;
      in = 4 * w;
    }
  counts[n++] = 2048 * 1000, counts[n++] = 1000;
  return n;
}

static kiln_status resnet(gpu *G, const args *a, kbench_report *r) {
  int64_t counts[161];
  kiln_dtype dtypes[161];
  int nl = resnet50_leaves(counts);
  double total = 0;
  for (int l = 0; l < nl; l++) dtypes[l] = KILN_F32, total += (double)counts[l];
  kdev_buffer *bufs = calloc((size_t)nl * (size_t)G->n, sizeof *bufs);
  kdev_buffer **cells = calloc((size_t)nl * (size_t)G->n, sizeof *cells);
  kdev_buffer **rows[161];
  kiln_status st = bufs && cells ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "resnet leaves");
  for (int l = 0; l < nl && !st; l++) {
    rows[l] = cells + (size_t)l * (size_t)G->n;
    for (int i = 0; i < G->n && !st; i++) {
      kdev_buffer *b = &bufs[(size_t)l * (size_t)G->n + (size_t)i];
      st = G->devs[i]->ops->alloc(G->devs[i], (size_t)counts[l] * 4, b);
      rows[l][i] = b;
    }
  }
  double flat = 0, bucketed = 0, t0 = now_s(), host;
  int64_t count = (int64_t)total;
  kdev_buffer flat_buf[MAX_DEV] = {{0}}, *flat_ptr[MAX_DEV];
  for (int i = 0; i < G->n && !st; i++) {
    flat_ptr[i] = &flat_buf[i];
    st = G->devs[i]->ops->alloc(G->devs[i], (size_t)count * 4, &flat_buf[i]);
  }
  if (!st) { /* the flat psum, in place, through the sweep's timing */
    kdev_buffer *in[MAX_DEV], *out[MAX_DEV];
    memcpy(in, G->pin, sizeof in), memcpy(out, G->pout, sizeof out);
    memcpy(G->pin, flat_ptr, sizeof in), memcpy(G->pout, flat_ptr, sizeof out);
    st = time_kiln(G, PSUM, count, a->iters, &flat, &host);
    memcpy(G->pin, in, sizeof in), memcpy(G->pout, out, sizeof out);
  }
  if (!st) {
    for (int i = 0; i < WARMUP + a->iters && !st; i++) {
      if (i == WARMUP && !(st = kcuda_coll_wait(G->mesh))) t0 = now_s();
      st = kcuda_coll_all_reduce_leaves(G->g, nl, dtypes, counts, (kdev_buffer *const *const *)rows,
                                        KCUDA_COLL_SUM, 0);
    }
    if (!st && !(st = kcuda_coll_wait(G->mesh))) bucketed = (now_s() - t0) / a->iters;
  }
  double factor = 2.0 * (G->n - 1) / G->n;
  if (!st && !(st = row(r, "resnet50 psum flat", total * 4, flat, factor)) &&
      !(st = row(r, "resnet50 psum bucketed", total * 4, bucketed, factor)))
    st = kbench_report_value(r, "bucketed_vs_flat", flat / bucketed);
  for (int i = 0; i < G->n; i++)
    if (flat_buf[i].ptr) G->devs[i]->ops->release(G->devs[i], &flat_buf[i]);
  for (size_t k = 0; bufs && k < (size_t)nl * (size_t)G->n; k++)
    if (bufs[k].ptr) G->devs[k % (size_t)G->n]->ops->release(G->devs[k % (size_t)G->n], &bufs[k]);
  free(bufs), free(cells);
  return st;
}

static kiln_status gpu_open(gpu *G, kiln_ctx *ctx, size_t *max) {
  kiln_status st = kcuda_nccl_get(&G->nc);
  G->n = kiln_device_count(ctx) < MAX_DEV ? kiln_device_count(ctx) : MAX_DEV;
  int ordinals[MAX_DEV];
  for (int i = 0; i < G->n && !st; i++) {
    st = kiln_device_get(ctx, i, &G->devs[i]);
    if (!st) ordinals[i] = kcuda_impl(G->devs[i])->ordinal;
    uint64_t cap = G->devs[i] ? G->devs[i]->info.total_memory / (2 * (uint64_t)(G->n + 1)) : 0;
    if (cap < *max) *max = (size_t)cap;
  }
  if (!st) st = kcuda_coll_mesh_new(G->nc, G->devs, G->n, 0, &G->mesh);
  if (!st) st = kcuda_coll_group_get(G->mesh, "all", NULL, NULL, &G->g);
  for (int i = 0; i < G->n && !st; i++) {
    kiln_device *d = G->devs[i];
    G->pin[i] = &G->in[i], G->pout[i] = &G->out[i];
    if (!(st = d->ops->alloc(d, *max, &G->in[i]))) st = d->ops->alloc(d, *max * (size_t)G->n, &G->out[i]);
    kcuda_device *cd = kcuda_impl(d);
    if (!st && !(st = kcuda_enter(cd))) {
      KCUDA_CU(cd->drv, cd->where, cuMemsetD8Async, ((CUdeviceptr)G->in[i].ptr, 0, *max, cd->compute), left);
      KCUDA_CU(cd->drv, cd->where, cuStreamCreate, (&G->streams[i], CU_STREAM_NON_BLOCKING), left);
    left:
      kcuda_leave(cd);
    }
  }
  if (!st && !(st = kcuda_enter(kcuda_impl(G->devs[0])))) {
    KCUDA_NCCL(G->nc, "direct", ncclCommInitAll, (G->direct, G->n, ordinals), out);
  out:
    kcuda_leave(kcuda_impl(G->devs[0]));
  }
  return st;
}

static void gpu_close(gpu *G) {
  kcuda_coll_mesh_free(G->mesh);
  for (int i = 0; i < G->n && G->devs[i]; i++) {
    kcuda_device *d = kcuda_impl(G->devs[i]);
    if (G->direct[i]) G->nc->ncclCommDestroy(G->direct[i]);
    if (G->in[i].ptr) G->devs[i]->ops->release(G->devs[i], &G->in[i]);
    if (G->out[i].ptr) G->devs[i]->ops->release(G->devs[i], &G->out[i]);
    if (G->streams[i] && !kcuda_enter(d)) d->drv->cuStreamDestroy(G->streams[i]), kcuda_leave(d);
  }
}

/* ---- CPU virtual devices: the CPU engine's psum over 2 threads ---- */

typedef struct cpu_rank {
  kcpu_coll_group *g;
  int rank, iters;
  float *in, *out;
  int64_t count;
  kiln_status st;
} cpu_rank;

static void *cpu_worker(void *p) {
  cpu_rank *c = p;
  for (int i = 0; i < c->iters && !c->st; i++)
    c->st = kcpu_coll_all_reduce(c->g, c->rank, KILN_F32, c->count, c->in, c->out, KCPU_COLL_SUM);
  return NULL;
}

static kiln_status cpu_psum(const args *a, kbench_report *r) {
  enum { N = 2 };
  kiln_status st = KILN_OK;
  for (size_t bytes = (size_t)1 << 20; bytes <= ((size_t)64 << 20) && bytes <= a->max_bytes && !st; bytes *= 8) {
    kcpu_coll_group *g = NULL;
    cpu_rank ranks[N];
    pthread_t threads[N];
    float *buf = calloc(2 * N * (bytes / 4), sizeof *buf);
    if (!buf) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "cpu psum buffers");
    if ((st = kcpu_coll_group_new(N, "all", KCORE_DEFAULT_COLLECTIVE_TIMEOUT_S, &g))) break;
    double t0 = now_s();
    for (int i = 0; i < N; i++) {
      ranks[i] = (cpu_rank){g, i, a->iters, buf + (size_t)(2 * i) * (bytes / 4),
                            buf + (size_t)(2 * i + 1) * (bytes / 4), (int64_t)(bytes / 4), KILN_OK};
      pthread_create(&threads[i], NULL, cpu_worker, &ranks[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(threads[i], NULL), st = st ? st : ranks[i].st;
    double sec = (now_s() - t0) / a->iters, m0 = now_s();
    for (int i = 0; i < a->iters; i++) memcpy(buf + bytes / 4, buf, bytes);
    double copy = (now_s() - m0) / a->iters;
    kcpu_coll_group_free(g);
    free(buf);
    char name[64];
    snprintf(name, sizeof name, "cpu x%d psum %zu MiB", N, bytes >> 20);
    if (!st && !(st = row(r, name, (double)bytes, sec, 2.0 * (N - 1) / N)) &&
        !(st = kbench_report_value(r, "memcpy_GBps", (double)bytes / copy * 1e-9)))
      st = kbench_report_value(r, "busbw_vs_memcpy", (double)bytes / sec * (2.0 * (N - 1) / N) * copy / (double)bytes);
  }
  return st;
}

int main(int argc, char **argv) {
  args a;
  if (!parse_args(argc, argv, &a)) return 2;
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("collectives", &r);
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CUDA;
  kiln_ctx *ctx = NULL;
  gpu G = {0};
  size_t max = a.max_bytes;
  if (!st && kiln_ctx_new(&opts, &ctx) == KILN_OK) {
    kiln_status gs = gpu_open(&G, ctx, &max);
    for (int i = 0; !gs && i < G.n; i++) kbench_report_add_device(r, G.devs[i]->info.name, "cuda");
    if (!gs) gs = sweep(&G, &a, max, r);
    if (!gs && a.resnet) gs = resnet(&G, &a, r);
    if (gs) kbench_report_note(r, "CUDA collectives not measured: %s", kiln_last_error());
    else if (G.n == 1)
      kbench_report_note(r, "1 GPU: 1-rank NCCL only (busbw is 0 by definition; algbw is a device "
                         "copy); multi-GPU figures not measured");
    gpu_close(&G);
    kiln_ctx_free(ctx);
  } else if (!st) {
    kbench_report_note(r, "no CUDA device: CUDA collectives not measured (%s)", kiln_last_error());
    kbench_report_add_device(r, "cpu", "cpu");
  }
  if (!st) st = cpu_psum(&a, r);
  kbench_report_note(r, "psum rows: direct_time_us is ncclAllReduce called directly on the same "
                     "buffers; kiln_vs_direct = direct time / kiln time");
  kbench_report_note(r, "resnet50 rows: 161 f32 leaves (25.6M floats) bucketed at "
                     "KILN_COLLECTIVE_BUCKET_BYTES (32 MiB) vs one flat psum of the same bytes");
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, a.json, NULL, 0);
  }
  if (st) fprintf(stderr, "bench_collectives: %s\n", kiln_last_error());
  kbench_report_free(r);
  return st ? 1 : 0;
}
