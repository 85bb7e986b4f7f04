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
  int64_t split = k->split > 1 ? k->split : 1, cap = 65535 / split;
  int64_t blocks = (end - begin + k->items_per_block - 1) / k->items_per_block;
  blocks = (blocks < 1 ? 1 : blocks > cap ? cap : blocks) * split;
  kcuda_launch l = {kern->fn, k->name, (unsigned)blocks, k->block_threads, params};
  return kcuda_launch_kernel(d, d->compute, &l);
}

kiln_status kct_gpu_run(kct_gpu *g, const void *cubin, const kct_gpu_kernel *k, const int64_t *cuts,
                        int n_cuts, int n_in, void *const *in, const size_t *in_bytes, int n_out,
                        void *const *out, const size_t *out_bytes) {
  kiln_device *dev = g->dev;
  kcuda_device *d = kcuda_impl(dev);
  kdev_buffer bufs[KCG_MAX_ARGS + 1]; /* the arguments, then the scratch */
  kiln_kernel_args args;
  kcuda_kernel kern = {0};
  memset(bufs, 0, sizeof bufs);
  memset(&args, 0, sizeof args);
  if (n_in + n_out > KCG_MAX_ARGS || (k->scratch_bytes && n_in + n_out == KCG_MAX_ARGS))
    return KILN_ERR_ARGUMENT;
  kiln_status st = KILN_OK;
  void *zeros = k->scratch_bytes ? calloc(1, (size_t)k->scratch_bytes) : NULL;
  if (k->scratch_bytes && !zeros) return KILN_ERR_OUT_OF_MEMORY;
  if (zeros && !(st = dev->ops->alloc(dev, (size_t)k->scratch_bytes, &bufs[n_in + n_out])))
    st = dev->ops->upload(dev, &bufs[n_in + n_out], zeros, (size_t)k->scratch_bytes,
                          KDEV_COPY_STAGED);
  free(zeros);
  if (bufs[n_in + n_out].ptr) args.ptr[n_in + n_out] = (void *)bufs[n_in + n_out].ptr;
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
  if (!st && bufs[n_in + n_out].ptr) st = kcuda_order_after_ready(dev, &bufs[n_in + n_out]);
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
  for (int i = 0; i <= n_in + n_out; i++)
    if (bufs[i].ptr) dev->ops->release(dev, &bufs[i]);
  return st;
}
