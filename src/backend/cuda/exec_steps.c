/* One step of a CUDA executable on the device: where its operands live
 * (arena, constants, the call's arrays), a kernel's launch, a matmul queued
 * or a convolution (exec_parts.c) on a stream. A call (exec_call.c), a graph
 * (exec_graph.c) and a host step
 * (exec_host.c) all build on these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

CUdeviceptr kcuda_x_addr(const kcuda_x_call *r, kir_vid v) {
  kfuse_place pl = r->x->plan->places[v];
  switch (pl.home) {
    case KFUSE_HOME_INPUT:
      return (CUdeviceptr)r->args[pl.index]->buf.ptr;
    case KFUSE_HOME_CONST:
      return (CUdeviceptr)r->x->const_dev[v].ptr;
    case KFUSE_HOME_OUTPUT:
      return r->out_ptr[pl.index];
    case KFUSE_HOME_SLOT:
      return (CUdeviceptr)(r->x->arena.ptr + r->x->plan->slot_offset[pl.index]);
    default:
      return 0;
  }
}

void kcuda_step_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a) {
  const kfuse_group *g = s->g;
  memset(a, 0, sizeof *a);
  for (int i = 0; i < g->n_in - g->n_in_literals; i++)
    a->ptr[i] = (void *)(uintptr_t)kcuda_x_addr(r, g->in[i]);
  for (int i = 0; i < g->n_out; i++)
    a->ptr[g->n_in + i] = (void *)(uintptr_t)kcuda_x_addr(r, g->out[i]);
  if (s->scratch.ptr) a->ptr[g->n_in + g->n_out] = (void *)s->scratch.ptr;
}

/* The launch of step s with arguments a; begin/end must outlive it. */
kcuda_launch kcuda_step_launch(const kcuda_step *s, kiln_kernel_args *a, long long *range,
                                      void **params) {
  range[0] = 0;
  range[1] = s->n_items;
  params[0] = a;
  params[1] = &range[0];
  params[2] = &range[1];
  return (kcuda_launch){s->kernel.fn, s->name, s->grid, s->block, params};
}

kiln_status kcuda_step_kernel(const kcuda_x_call *r, const kcuda_step *s) {
  if (s->node < 0) return KILN_OK;
  kiln_kernel_args a;
  long long range[2];
  void *params[3];
  kcuda_step_args(r, s, &a);
  kcuda_launch l = kcuda_step_launch(s, &a, range, params);
  return kcuda_launch_kernel(r->d, r->d->compute, &l);
}

/* The addresses a matmul step touches (A, B, bias or 0, C), kept like a
 * kernel's arguments so that graph nodes of both kinds compare alike. */
void kcuda_step_gemm_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a) {
  const kir_eqn *dot = &r->x->prog->eqns[s->g->eqns[0]];
  memset(a, 0, sizeof *a);
  a->ptr[0] = (void *)(uintptr_t)kcuda_x_addr(r, dot->in[0]);
  a->ptr[1] = (void *)(uintptr_t)kcuda_x_addr(r, dot->in[1]);
  if (s->g->bias != KIR_NO_VAR) a->ptr[2] = (void *)(uintptr_t)kcuda_x_addr(r, s->g->bias);
  a->ptr[3] = (void *)(uintptr_t)kcuda_x_addr(r, s->g->out[0]);
}

/* Queues step s's matmul on `stream` (the compute stream, or a capture). */
kiln_status kcuda_step_gemm_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream) {
  kiln_kernel_args a;
  kcuda_step_gemm_args(r, s, &a);
  return kcuda_gemm_run(s->gemm_stream, s->gemm_op, stream, (CUdeviceptr)(uintptr_t)a.ptr[0],
                        (CUdeviceptr)(uintptr_t)a.ptr[1], (CUdeviceptr)(uintptr_t)a.ptr[2],
                        (CUdeviceptr)(uintptr_t)a.ptr[3]);
}

kiln_status kcuda_step_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream) {
  return s->kind == KCUDA_STEP_PARTS ? kcuda_step_parts_queue(r, s, stream)
                                    : kcuda_step_gemm_queue(r, s, stream);
}

void kcuda_step_node_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a) {
  if (s->kind == KCUDA_STEP_KERNEL)
    kcuda_step_args(r, s, a);
  else if (s->kind == KCUDA_STEP_PARTS)
    kcuda_step_parts_args(r, s, a);
  else
    kcuda_step_gemm_args(r, s, a);
}
