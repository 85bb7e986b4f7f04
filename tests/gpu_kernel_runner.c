/* See gpu_kernel_runner.h. */
#include "gpu_kernel_runner.h"

#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"

struct kct_gpu {
  kiln_ctx *ctx;
  kiln_device *dev;
};

kiln_status kct_gpu_open(kct_gpu **out) {
  kct_gpu *g = calloc(1, sizeof *g);
  if (!g) return KILN_ERR_OUT_OF_MEMORY;
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CUDA;
  kiln_status st = kiln_ctx_new(&o, &g->ctx);
  if (!st) st = kiln_device_get(g->ctx, 0, &g->dev);
  if (st) {
    kct_gpu_close(g);
    return st;
  }
  *out = g;
  return KILN_OK;
}

void kct_gpu_close(kct_gpu *g) {
  if (!g) return;
  kiln_ctx_free(g->ctx);
  free(g);
}

int kct_gpu_sm(const kct_gpu *g) {
  return g->dev->info.compute_major * 10 + g->dev->info.compute_minor;
}

static kiln_status kct_gpu_launch(kcuda_device *d, const kcuda_kernel *kern, const kct_gpu_kernel *k,
                                  kiln_kernel_args *args, int64_t begin, int64_t end) {
  long long range[2] = {begin, end};
  void *params[3] = {args, &range[0], &range[1]};
  int64_t blocks = (end - begin + k->items_per_block - 1) / k->items_per_block;
  kcuda_launch l = {kern->fn, k->name, (unsigned)(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks),
                    k->block_threads, params};
  return kcuda_launch_kernel(d, d->compute, &l);
}

kiln_status kct_gpu_run(kct_gpu *g, const void *cubin, const kct_gpu_kernel *k, const int64_t *cuts,
                        int n_cuts, int n_in, void *const *in, const size_t *in_bytes, int n_out,
                        void *const *out, const size_t *out_bytes) {
  kiln_device *dev = g->dev;
  kcuda_device *d = kcuda_impl(dev);
  kdev_buffer bufs[KCG_MAX_ARGS];
  kiln_kernel_args args;
  kcuda_kernel kern = {0};
  memset(bufs, 0, sizeof bufs);
  memset(&args, 0, sizeof args);
  if (n_in + n_out > KCG_MAX_ARGS) return KILN_ERR_ARGUMENT;
  kiln_status st = KILN_OK;
  for (int i = 0; i < n_in + n_out && !st; i++) {
    bool input = i < n_in;
    size_t nb = input ? in_bytes[i] : out_bytes[i - n_in];
    if ((input && !in[i]) || nb == 0) continue;
    if (!(st = dev->ops->alloc(dev, nb, &bufs[i])) && input)
      st = dev->ops->upload(dev, &bufs[i], in[i], nb, KDEV_COPY_STAGED);
    args.ptr[i] = (void *)bufs[i].ptr;
  }
  /* Kernels run on the compute stream: after the uploads' copy stream. */
  for (int i = 0; i < n_in && !st; i++) st = kcuda_order_after_ready(dev, &bufs[i]);
  if (!st && !(st = kcuda_enter(d))) {
    st = kcuda_kernel_load(d, cubin, k->name, &kern);
    for (int c = 0; c <= n_cuts && !st; c++)
      st = kct_gpu_launch(d, &kern, k, &args, c ? cuts[c - 1] : 0, c < n_cuts ? cuts[c] : k->n_items);
    kcuda_leave(d);
  }
  /* A download orders the copy stream after the compute stream's work. */
  for (int j = 0; j < n_out && !st; j++)
    if (out_bytes[j])
      st = dev->ops->download(dev, &bufs[n_in + j], out[j], out_bytes[j], KDEV_COPY_STAGED);
  if (kern.module && !kcuda_enter(d)) {
    kcuda_kernel_unload(d, &kern);
    kcuda_leave(d);
  }
  for (int i = 0; i < n_in + n_out; i++)
    if (bufs[i].ptr) dev->ops->release(dev, &bufs[i]);
  return st;
}
