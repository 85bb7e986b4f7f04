/* Fused execution on CUDA devices. The fusion plan's LOOP, REDUCE and ROW
 * groups become CUDA kernels (emitted for the device's compute capability,
 * compiled by NVRTC through the kernel cache, loaded once per executable);
 * DOT groups are cuBLASLt matmuls (with their bias and relu epilogues); a
 * lone convolution is im2col copies around a cuBLASLt matmul (exec_parts.c),
 * a lone window op a kernel; the other groups, and any the emitter or
 * cuBLASLt declines, are host steps:
 * their inputs come down, the reference evaluators run, their outputs go
 * back up.
 *
 * A call only enqueues: it orders the compute stream after its inputs'
 * writes, allocates its outputs stream-ordered, launches, and records each
 * output's ready event; waits happen in to_host / block_until_ready (host
 * steps excepted, which wait for their inputs). Temporaries live in one
 * arena per executable, allocated at the first call and kept: calls of one
 * executable are serialised on the device's compute stream, so they can
 * share it, and kernels that touch only temporaries keep the same
 * parameters from call to call. From the second call on, a program of
 * several kernels and matmuls (no host steps) is replayed as a CUDA graph:
 * kernel nodes get new parameters and matmuls, stream-captured into child
 * graphs, are captured anew, only where an input or output address changed. Each device
 * step (or graph) is marked on the device's fault trail
 * (backend/cuda/trail.c), so that a fault found later names it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* One step, inside an NVTX range named after it. A step on the device is
 * marked on the fault trail; a host step waits, and names its failures. */
static kiln_status kcuda_x_step(const kcuda_x_call *r, const kcuda_step *s) {
  kcore_range_push(s->kind == KCUDA_STEP_KERNEL || s->kind == KCUDA_STEP_PARTS ? s->name
                   : s->kind == KCUDA_STEP_GEMM ? "kiln cuBLASLt matmul"
                                                : "kiln host step");
  kiln_status st = KILN_OK;
  if (s->kind == KCUDA_STEP_HOST) {
    st = kcuda_step_host(r, s);
  } else if (s->node >= 0 && !(st = kcuda_trail_enter(r->d, s->what))) {
    st = s->kind == KCUDA_STEP_KERNEL ? kcuda_step_kernel(r, s)
         : s->kind == KCUDA_STEP_GEMM ? kcuda_step_queue(r, s, s->gemm_stream->stream)
                                      : kcuda_step_queue(r, s, r->d->compute);
    kcuda_trail_leave(r->d);
  }
  kcore_range_pop();
  return st;
}

static kiln_status kcuda_x_steps(const kcuda_x_call *r) {
  kdev_exec *x = r->x;
  if (x->graphable && x->calls > 0) {
    kcore_range_push("kiln graph replay");
    kiln_status st = kcuda_x_replay(r);
    kcore_range_pop();
    if (!st) return KILN_OK;
    if (kcuda_device_failed(r->d)) return kcore_fail_wrap(st, "%s", x->graph_what);
    /* The driver refused the graph (a re-captured matmul it cannot swap in,
     * say) with the device still usable: run step by step from now on. */
    kcore_log(r->x->log_level, KILN_LOG_WARN,
              "%s: replaying it failed, running it step by step: %s", x->graph_what,
              kiln_last_error());
    kiln_clear_error();
    kcuda_graph_destroy(r->d, &x->graph);
    x->graphable = false;
  }
  kiln_status st = KILN_OK;
  for (int i = 0; i < x->n_steps && !st; i++)
    if ((st = kcuda_x_step(r, &x->steps[i]))) kcore_fail_wrap(st, "%s", x->steps[i].what);
  return st;
}

/* Program outputs the plan did not write in place (inputs, constants,
 * repeated outputs) are copied, inputs first as donation needs. */
static kiln_status kcuda_x_copy_outputs(const kcuda_x_call *r) {
  const kir_program *p = r->x->prog;
  const kcuda_device *d = r->d;
  kiln_status st = KILN_OK;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < p->n_outvars; k++) {
      kir_vid v = p->outvars[k];
      kfuse_place pl = r->x->plan->places[v];
      size_t nb = kcuda_x_var_bytes(p, v);
      if ((pl.home == KFUSE_HOME_OUTPUT && pl.index == k) || nb == 0 ||
          (pl.home == KFUSE_HOME_INPUT) != (pass == 0))
        continue;
      CUdeviceptr src = kcuda_x_addr(r, v);
      if (src != r->out_ptr[k])
        KCUDA_CU(d->drv, d->where, cuMemcpyDtoDAsync, (r->out_ptr[k], src, nb, d->compute), out);
    }
out:
  return st;
}

/* Orders the compute stream after every input's last write. */
static kiln_status kcuda_x_inputs_ready(const kcuda_x_call *r) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < r->x->n_in && !st; i++)
    st = kcuda_after_ready(r->d, r->d->compute, &r->args[i]->buf);
  return st;
}

/* Each output gets a fresh buffer, or the donated input the plan names. */
static kiln_status kcuda_x_outputs(const kcuda_x_call *r) {
  const kdev_exec *c = r->x;
  const kir_program *p = c->prog;
  for (int k = 0; k < c->n_out; k++) {
    int donor = r->x->plan->output_donor[k];
    if (donor >= 0) {
      kiln_status st = kdev_array_check_donation("kiln_jit_call", r->args[donor], donor);
      if (st) return st;
      r->out_ptr[k] = (CUdeviceptr)r->args[donor]->buf.ptr;
      continue;
    }
    const kir_aval *a = kir_var_aval(p, p->outvars[k]);
    kiln_status st =
        kdev_array_alloc("kiln_jit_call", c->dev, a->dtype, a->rank, a->shape, &r->outs[k]);
    if (st) return st;
    r->out_ptr[k] = (CUdeviceptr)r->outs[k]->buf.ptr;
  }
  return KILN_OK;
}

static kiln_status kcuda_x_arena(kdev_exec *x) {
  size_t nb = x->plan->arena_bytes;
  if (x->arena.ptr || nb == 0) return KILN_OK;
  return x->dev->ops->alloc(x->dev, nb, &x->arena);
}

/* Donated buffers move to their outputs; outputs are marked ready at the
 * end of the queued work; donated inputs are deleted. */
static kiln_status kcuda_x_finish(const kcuda_x_call *r) {
  const kdev_exec *c = r->x;
  kiln_status st = KILN_OK;
  for (int k = 0; k < c->n_out && !st; k++) {
    int donor = r->x->plan->output_donor[k];
    if (donor >= 0) {
      const kir_aval *a = kir_var_aval(c->prog, c->prog->outvars[k]);
      st = kdev_array_take_buffer(r->args[donor], a->dtype, a->rank, a->shape, &r->outs[k]);
    }
    if (st || !r->outs[k]->buf.ptr) continue;
    memcpy(r->outs[k]->buf.origin, r->x->label, sizeof r->x->label);
    st = kcuda_mark_ready(r->d, &r->outs[k]->buf, r->d->compute);
  }
  for (int i = 0; i < c->n_in && !st; i++)
    if (c->donated[i]) kiln_array_delete(r->args[i]);
  return st;
}

kiln_status kcuda_x_run(kdev_exec *x, kiln_array *const *args, kiln_array **outs) {
  CUdeviceptr small[16];
  CUdeviceptr *out_ptr = x->n_out <= 16 ? small : calloc((size_t)x->n_out, sizeof *out_ptr);
  if (!out_ptr) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kcuda_x_call r = {x, kcuda_impl(x->dev), args, outs, out_ptr};
  pthread_mutex_lock(&x->mu);
  kiln_status st = kcuda_enter(r.d);
  if (!st) {
    if (!(st = kcuda_x_arena(x)) && !(st = kcuda_x_inputs_ready(&r)) &&
        !(st = kcuda_x_outputs(&r)) && !(st = kcuda_x_steps(&r)) &&
        !(st = kcuda_x_copy_outputs(&r)) && !(st = kcuda_trail_finish(r.d)))
      st = kcuda_x_finish(&r);
    kcuda_leave(r.d);
  }
  if (!st) x->calls++;
  pthread_mutex_unlock(&x->mu);
  /* A failure may be an earlier fault found while queueing: name its step. */
  st = kcuda_trail_blame(r.d, st);
  for (int k = 0; st && k < x->n_out; k++) {
    kiln_array_release(outs[k]);
    outs[k] = NULL;
  }
  if (out_ptr != small) free(out_ptr);
  return st;
}
