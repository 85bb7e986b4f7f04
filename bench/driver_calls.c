/* driver_calls: the host time of each CUDA driver call a cached kiln_jit_call
 * is made of, measured one kind at a time on device 0's compute stream, and
 * pinned host-to-device bandwidth: a bare cuMemcpyHtoDAsync from pinned
 * memory vs. kiln's upload of the same pinned bytes.
 *
 *   bench_driver_calls [--iters N] [--json PATH]
 *
 * This explains bench_dispatch's figure (where do the microseconds of a
 * one-kernel call go) and checks the pinned-copy target. The kernel launched
 * is empty and takes kiln's kernel parameters (kiln_kernel_args and the item
 * range), so the launch costs what kiln's launches cost on the host. Work is
 * drained every KBENCH_DRAIN calls so that a full launch queue never blocks
 * the host inside a timed call. Without a CUDA device it says so and writes
 * no rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "kiln/kiln.h"
#include "report.h"
#include "runtime/runtime.h"

#define KBENCH_DRAIN 256

typedef struct calls_bench {
  kcuda_device *d;
  const kcuda_driver *drv;
  CUmodule module;
  CUfunction empty;
  CUevent event;
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode node;
  CUdeviceptr two[2]; /* what updated graph nodes point at, in turn */
  kiln_kernel_args args;
  long long range[2];
  void *params[3];
} calls_bench;

typedef enum call_kind {
  CALL_LAUNCH,
  CALL_WRITE_VALUE,
  CALL_EVENT_RECORD,
  CALL_STREAM_WAIT_EVENT,
  CALL_ALLOC_FREE,
  CALL_CTX_PUSH_POP,
  CALL_GRAPH_NODE_UPDATE,
  CALL_GRAPH_LAUNCH,
  CALL_COUNT
} call_kind;

static const char *const call_names[CALL_COUNT] = {
    "cuLaunchKernel",          "cuStreamWriteValue32",           "cuEventRecord",
    "cuStreamWaitEvent",       "cuMemAllocFromPoolAsync+Free",   "cuCtxPushCurrent+Pop",
    "cuGraphExecKernelNodeSetParams", "cuGraphLaunch (1 node)"};

static CUresult one_call(calls_bench *b, call_kind k, int i) {
  const kcuda_driver *drv = b->drv;
  kcuda_device *d = b->d;
  CUdeviceptr p = 0;
  CUcontext popped;
  CUDA_KERNEL_NODE_PARAMS np;
  CUresult rc;
  switch (k) {
    case CALL_LAUNCH:
      return drv->cuLaunchKernel(b->empty, 1, 1, 1, 32, 1, 1, 0, d->compute, b->params, NULL);
    case CALL_WRITE_VALUE:
      return drv->cuStreamWriteValue32(d->compute, d->trail.word_dev, (cuuint32_t)i, 0);
    case CALL_EVENT_RECORD:
      return drv->cuEventRecord(b->event, d->compute);
    case CALL_STREAM_WAIT_EVENT:
      return drv->cuStreamWaitEvent(d->compute, b->event, 0);
    case CALL_ALLOC_FREE:
      rc = drv->cuMemAllocFromPoolAsync(&p, 4096, d->pool, d->compute);
      return rc ? rc : drv->cuMemFreeAsync(p, d->compute);
    case CALL_CTX_PUSH_POP:
      rc = drv->cuCtxPushCurrent(d->context);
      return rc ? rc : drv->cuCtxPopCurrent(&popped);
    case CALL_GRAPH_NODE_UPDATE:
      memset(&np, 0, sizeof np);
      b->args.ptr[0] = (void *)(uintptr_t)b->two[i & 1];
      np.func = b->empty;
      np.gridDimX = np.gridDimY = np.gridDimZ = 1;
      np.blockDimX = 32;
      np.blockDimY = np.blockDimZ = 1;
      np.kernelParams = b->params;
      return drv->cuGraphExecKernelNodeSetParams(b->exec, b->node, &np);
    case CALL_GRAPH_LAUNCH:
      return drv->cuGraphLaunch(b->exec, d->compute);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

/* Mean host microseconds of one call of kind k over iters calls. */
static kiln_status time_calls(calls_bench *b, call_kind k, int iters, double *us) {
  kiln_status st = KILN_OK;
  uint64_t total = 0;
  for (int i = 0; i < iters && !st; i++) {
    if (i % KBENCH_DRAIN == 0)
      KCUDA_CU(b->drv, b->d->where, cuStreamSynchronize, (b->d->compute), out);
    uint64_t t0 = kbench_now_ns();
    CUresult rc = one_call(b, k, i);
    total += kbench_now_ns() - t0;
    if (rc != CUDA_SUCCESS) {
      st = kcuda_driver_fail(b->drv, rc, call_names[k], b->d->where);
      goto out;
    }
  }
  KCUDA_CU(b->drv, b->d->where, cuStreamSynchronize, (b->d->compute), out);
  *us = (double)total / iters / 1e3;
out:
  return st;
}

static kiln_status setup(calls_bench *b, const kiln_device_info *info) {
  static const char source[] =
      "typedef struct kiln_kernel_args { void *ptr[64]; } kiln_kernel_args;\n"
      "extern \"C\" __global__ void kiln_empty(kiln_kernel_args a, long long b, long long e) {}\n";
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d%d", info->compute_major, info->compute_minor);
  const char *opts[] = {arch};
  char *cubin = NULL;
  size_t size = 0;
  kiln_status st = kcuda_nvrtc_compile("kiln_empty", source, opts, 1, true, &cubin, &size);
  if (st) return st;
  b->params[0] = &b->args;
  b->params[1] = &b->range[0];
  b->params[2] = &b->range[1];
  KCUDA_CU(b->drv, b->d->where, cuModuleLoadData, (&b->module, cubin), out);
  KCUDA_CU(b->drv, b->d->where, cuModuleGetFunction, (&b->empty, b->module, "kiln_empty"), out);
  for (int k = 0; k < 2; k++)
    KCUDA_CU(b->drv, b->d->where, cuMemAllocFromPoolAsync,
             (&b->two[k], 256, b->d->pool, b->d->compute), out);
  b->args.ptr[0] = (void *)(uintptr_t)b->two[0];
  KCUDA_CU(b->drv, b->d->where, cuEventCreate, (&b->event, CU_EVENT_DISABLE_TIMING), out);
  KCUDA_CU(b->drv, b->d->where, cuEventRecord, (b->event, b->d->compute), out);
  CUDA_KERNEL_NODE_PARAMS np;
  memset(&np, 0, sizeof np);
  np.func = b->empty;
  np.gridDimX = np.gridDimY = np.gridDimZ = 1;
  np.blockDimX = 32;
  np.blockDimY = np.blockDimZ = 1;
  np.kernelParams = b->params;
  KCUDA_CU(b->drv, b->d->where, cuGraphCreate, (&b->graph, 0), out);
  KCUDA_CU(b->drv, b->d->where, cuGraphAddKernelNode, (&b->node, b->graph, NULL, 0, &np), out);
  KCUDA_CU(b->drv, b->d->where, cuGraphInstantiateWithFlags, (&b->exec, b->graph, 0), out);
out:
  free(cubin);
  return st;
}

static void teardown(calls_bench *b) {
  const kcuda_driver *drv = b->drv;
  if (b->exec) drv->cuGraphExecDestroy(b->exec);
  if (b->graph) drv->cuGraphDestroy(b->graph);
  if (b->event) drv->cuEventDestroy(b->event);
  if (b->module) drv->cuModuleUnload(b->module);
  for (int k = 0; k < 2; k++)
    if (b->two[k]) drv->cuMemFreeAsync(b->two[k], b->d->compute);
  drv->cuStreamSynchronize(b->d->compute);
}

/* GB/s of the median of iters host-to-device copies of n pinned bytes: bare
 * (cuMemcpyHtoDAsync + synchronize) and through kiln's upload + wait. */
static kiln_status pinned_copies(kiln_device *dev, calls_bench *b, size_t n, int iters,
                                 double *bare, double *kiln) {
  const kcuda_driver *drv = b->drv;
  kcuda_device *d = b->d;
  void *host = NULL;
  kdev_buffer buf = {0};
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : kiln_fail(KILN_ERR_OUT_OF_MEMORY, "driver_calls: no memory");
  if (st) return st;
  KCUDA_CU(drv, d->where, cuMemHostAlloc, (&host, n, 0), out);
  memset(host, 0x5a, n);
  kcuda_leave(d);
  st = dev->ops->alloc(dev, n, &buf);
  if (!st) st = kcuda_enter(d);
  if (st) goto out;
  /* The buffer was allocated on the compute stream; the bare copies use the
   * copy stream. */
  KCUDA_CU(drv, d->where, cuStreamSynchronize, (d->compute), out);
  for (int mode = 0; mode < 2 && !st; mode++) {
    for (int i = -2; i < iters && !st; i++) {
      uint64_t t0 = kbench_now_ns();
      if (mode == 0) {
        KCUDA_CU(drv, d->where, cuMemcpyHtoDAsync, ((CUdeviceptr)buf.ptr, host, n, d->copy), out);
        KCUDA_CU(drv, d->where, cuStreamSynchronize, (d->copy), out);
      } else {
        st = dev->ops->upload(dev, &buf, host, n, KDEV_COPY_DIRECT);
        if (!st) st = dev->ops->wait(dev, &buf);
      }
      if (i >= 0) ns[i] = kbench_now_ns() - t0;
    }
    if (!st) *(mode == 0 ? bare : kiln) = (double)n / kbench_median_ns(ns, iters);
  }
out:
  if (buf.ptr) dev->ops->release(dev, &buf);
  if (host) drv->cuMemFreeHost(host);
  free(ns);
  return st;
}

static kiln_status run(kiln_device *dev, const kiln_device_info *info, int iters,
                       kbench_report *r) {
  calls_bench b;
  memset(&b, 0, sizeof b);
  b.d = kcuda_impl(dev);
  b.drv = b.d->drv;
  kiln_status st = kcuda_enter(b.d);
  if (st) return st;
  if (!(st = setup(&b, info))) {
    for (int k = 0; k < CALL_COUNT && !st; k++) {
      double us = NAN;
      if (!(st = time_calls(&b, (call_kind)k, iters, &us)) &&
          !(st = kbench_report_row(r, call_names[k])))
        st = kbench_report_value(r, "host_us", us);
    }
    for (size_t n = (size_t)1 << 20; n <= (size_t)256 << 20 && !st; n <<= 2) {
      double bare = NAN, kiln = NAN;
      char name[64];
      snprintf(name, sizeof name, "pinned h2d %zu MiB", n >> 20);
      if (!(st = pinned_copies(dev, &b, n, 10, &bare, &kiln)) && !(st = kbench_report_row(r, name)) &&
          !(st = kbench_report_value(r, "bare_GBps", bare)) &&
          !(st = kbench_report_value(r, "kiln_GBps", kiln)) &&
          !(st = kbench_report_value(r, "kiln_vs_bare", kiln / bare)) &&
          !(st = kbench_report_value(r, "target", 0.9)) &&
          !(st = kbench_report_value(r, "target_applies", 1)))
        st = kbench_report_value(r, "target_met", kiln / bare >= 0.9);
    }
  }
  teardown(&b);
  kcuda_leave(b.d);
  if (!st)
    st = kbench_report_note(r,
                            "host_us: mean host time of one call, %d calls, the stream drained "
                            "every %d; pinned h2d: median of 10, bare = cuMemcpyHtoDAsync + "
                            "cuStreamSynchronize from cuMemHostAlloc memory, kiln = the device's "
                            "upload + wait of the same pinned bytes; target kiln >= 0.9 x bare",
                            iters, KBENCH_DRAIN);
  return st;
}

int main(int argc, char **argv) {
  int iters = 20000;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_driver_calls [--iters N] [--json PATH]\n");
      return 2;
    }
  }
  if (iters < 1) return 2;
  kiln_ctx *ctx = NULL;
  kiln_device *dev = NULL;
  kiln_device_info info;
  kbench_report *r = NULL;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st && info.platform != KILN_BACKEND_CUDA) {
    printf("bench_driver_calls: device 0 is %s, not a CUDA device: nothing to measure\n",
           info.name);
    kiln_ctx_free(ctx);
    return 0;
  }
  if (!st) st = kbench_report_new("driver_calls", &r);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", iters);
  if (!st) st = run(dev, &info, iters, r);
  int rc = kbench_report_finish(r, st, json, "bench_driver_calls");
  kbench_report_free(r);
  kiln_ctx_free(ctx);
  return rc;
}
