/* Runs one emitted CUDA kernel on a real GPU for the codegen tests, through
 * backend/cuda (C shims: the backend's header is C11 only). */
#ifndef KILN_TESTS_GPU_KERNEL_RUNNER_H
#define KILN_TESTS_GPU_KERNEL_RUNNER_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kct_gpu kct_gpu;

/* A CUDA context on device 0; KILN_ERR_DEVICE where there is no GPU. */
kiln_status kct_gpu_open(kct_gpu **out);
void kct_gpu_close(kct_gpu *g);
/* The device's compute capability as 80, 90, ... */
int kct_gpu_sm(const kct_gpu *g);

typedef struct kct_gpu_kernel {
  const char *name;
  unsigned block_threads;
  int64_t items_per_block, n_items;
  int split;             /* kcg_kernel.split: blocks come in groups of split */
  int64_t scratch_bytes; /* kcg_kernel.scratch_bytes: zeroed once, at args.ptr[n_in + n_out] */
} kct_gpu_kernel;

/* Loads kernel k from `cubin`, uploads the n_in inputs (in[i] of in_bytes[i];
 * a NULL in[i] passes a NULL pointer), allocates the outputs, launches over
 * [0, cuts[0]), [cuts[0], cuts[1]), ..., [cuts[n_cuts-1], n_items) and
 * downloads the outputs into out[j] (out_bytes[j]). */
kiln_status kct_gpu_run(kct_gpu *g, const void *cubin, const kct_gpu_kernel *k, const int64_t *cuts,
                        int n_cuts, int n_in, void *const *in, const size_t *in_bytes, int n_out,
                        void *const *out, const size_t *out_bytes);

#ifdef __cplusplus
}
#endif
#endif
