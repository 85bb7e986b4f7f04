/* Steps of several kernels for one equation (codegen's kcg_parts), queued
 * in order on one stream, with a cuBLASLt matmul among them:
 *
 *   conv_general_dilated  im2col, pack_w, GEMM, scatter (skipped where the
 *                         GEMM writes the result: one group, NHWC)
 *   scatter family        copy (operand -> result), apply (atomics, or in
 *                         index order with the context's determinism on)
 *
 * Their scratch buffers live in one allocation per executable, sized for
 * its largest step: steps run one after another on the compute stream. In a
 * graph such a step is one captured node (like a matmul), captured anew
 * when its operands or result move. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

#define KCUDA_PARTS_ALIGN 256

static size_t kcuda_parts_round(size_t n) {
  return (n + KCUDA_PARTS_ALIGN - 1) / KCUDA_PARTS_ALIGN * KCUDA_PARTS_ALIGN;
}

/* The GEMM between a convolution's copies: groups x [rows, kd] . [kd, opg]. */
static kcuda_gemm_desc kcuda_conv_gemm(const kcg_conv *c) {
  kcuda_gemm_desc d;
  memset(&d, 0, sizeof d);
  int64_t a[3] = {c->groups, c->rows, c->kd}, w[3] = {c->groups, c->kd, c->opg};
  int64_t r[3] = {c->groups, c->rows, c->opg};
  d.lhs = kir_aval_make(c->in_dtype, 3, a, false);
  d.rhs = kir_aval_make(c->in_dtype, 3, w, false);
  d.out = kir_aval_make(c->out_dtype, 3, r, false);
  d.dims.lhs_batch = (kir_dims){1, {0}};
  d.dims.rhs_batch = (kir_dims){1, {0}};
  d.dims.lhs_contracting = (kir_dims){1, {2}};
  d.dims.rhs_contracting = (kir_dims){1, {1}};
  d.epilogue = KFUSE_EPILOGUE_NONE;
  d.bias.dtype = KILN_INVALID_DTYPE;
  return d;
}

/* The parts of e and, for a convolution, its matmul planned into s. */
static kiln_status kcuda_parts_make(kdev_exec *x, const kdev_build *b, const kir_eqn *e,
                                    kcuda_step *s, kcg_parts *pt) {
  kcg_target_info target = {KCG_TARGET_CUDA, kcuda_x_sm(x->dev)};
  memset(pt, 0, sizeof *pt);
  if (e->prim != KIR_PRIM_CONV_GENERAL_DILATED) {
    s->parts.label = "scatter";
    return kcg_emit_scatter(x->prog, e, &target,
                            b->config->opts.deterministic == KILN_DETERMINISM_ON, pt);
  }
  kcg_conv c;
  s->parts.label = "convolution by im2col and cuBLASLt";
  kiln_status st = kcg_emit_conv(x->prog, e, &target, &c);
  *pt = c.p;
  if (!st) {
    kcuda_gemm_desc d = kcuda_conv_gemm(&c);
    st = kcuda_step_gemm_prepare(x, b, &d, s);
  }
  return st;
}

kiln_status kcuda_step_parts_emit(kdev_exec *x, const kdev_build *b, const kir_eqn *e,
                                  kcuda_step *s, kcg_kernel *k) {
  kcg_parts pt;
  kiln_status st = kcuda_parts_make(x, b, e, s, &pt);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcore_log(b->config->opts.log_level, KILN_LOG_DEBUG, "fuse: a %s runs on the host: %s",
              kir_prim_name(e->prim), kiln_last_error());
    kiln_clear_error();
    st = KILN_OK;
  }
  if (st || !pt.k.name) {
    kcg_kernel_free(&pt.k);
    return st;
  }
  s->kind = KCUDA_STEP_PARTS;
  kcuda_parts_step *ps = &s->parts;
  ps->n = pt.n, ps->gemm_at = pt.gemm_at, ps->n_scratch = pt.n_scratch;
  ps->n_out = kir_aval_size(kir_var_aval(x->prog, e->out[0]));
  size_t at = 0;
  for (int i = 0; i < pt.n; i++) {
    ps->items[i] = pt.items[i];
    ps->part[i] = pt.part[i];
  }
  for (int i = 0; i < pt.n_scratch; i++) {
    ps->off[i] = at;
    ps->used[i] = pt.scratch[i] > 0;
    at += kcuda_parts_round((size_t)pt.scratch[i]);
  }
  if (at > x->parts_scratch_bytes) x->parts_scratch_bytes = at;
  *k = pt.k;
  return KILN_OK;
}

kiln_status kcuda_step_parts_load(kdev_exec *x, kcuda_step *s, kcg_kernel *k, const void *cubin) {
  kcuda_device *d = kcuda_impl(x->dev);
  kcuda_parts_step *ps = &s->parts;
  char fn[96] = "";
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  for (int i = 0; i < ps->n && !st; i++) {
    if (!ps->items[i]) continue;
    snprintf(fn, sizeof fn, "%s_%s", k->name, ps->part[i]);
    if (!s->kernel.module) {
      st = kcuda_kernel_load(d, cubin, fn, &s->kernel);
      ps->fn[i] = s->kernel.fn;
      continue;
    }
    KCUDA_CU(d->drv, d->where, cuModuleGetFunction, (&ps->fn[i], s->kernel.module, fn), out);
  }
out:
  kcuda_leave(d);
  if (st) return kcore_fail_wrap(st, "loading kernel %s", fn);
  for (int i = 0; i < ps->n; i++) {
    kcg_kernel part = {.n_items = ps->items[i], .items_per_block = k->block_threads, .split = 1};
    ps->grid[i] = kcuda_x_grid(x->dev, &part);
  }
  s->block = (unsigned)k->block_threads;
  s->name = k->name;
  s->source = k->source;
  k->name = k->source = NULL;
  return KILN_OK;
}

kiln_status kcuda_x_parts_scratch(kdev_exec *x) {
  if (!x->parts_scratch_bytes) return KILN_OK;
  return x->dev->ops->alloc(x->dev, x->parts_scratch_bytes, &x->parts_scratch);
}

void kcuda_step_parts_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a) {
  kcuda_step_args(r, s, a); /* the operands, the result */
  int at = s->g->n_in + s->g->n_out;
  for (int i = 0; i < s->parts.n_scratch; i++)
    a->ptr[at + i] =
        s->parts.used[i] ? (void *)(r->x->parts_scratch.ptr + s->parts.off[i]) : NULL;
}

/* Part i of step s over its items, arguments a. */
static kiln_status kcuda_part_launch(const kcuda_x_call *r, const kcuda_step *s, int i,
                                     kiln_kernel_args *a, CUstream stream) {
  long long range[2] = {0, s->parts.items[i]};
  void *params[3] = {a, &range[0], &range[1]};
  kcuda_launch l = {s->parts.fn[i], s->name, s->parts.grid[i], s->block, params};
  return range[1] > 0 ? kcuda_launch_kernel(r->d, stream, &l) : KILN_OK;
}

/* A convolution's matmul: cols . w into res, or the result itself. */
static kiln_status kcuda_parts_gemm(const kcuda_x_call *r, const kcuda_step *s,
                                    const kiln_kernel_args *a, CUstream stream) {
  (void)r;
  const void *res = s->parts.used[2] ? a->ptr[5] : a->ptr[2];
  return kcuda_gemm_run(s->gemm_stream, s->gemm_op, stream, (CUdeviceptr)(uintptr_t)a->ptr[3],
                        (CUdeviceptr)(uintptr_t)a->ptr[4], 0, (CUdeviceptr)(uintptr_t)res);
}

kiln_status kcuda_step_parts_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream) {
  kiln_kernel_args a;
  kcuda_step_parts_args(r, s, &a);
  kiln_status st = KILN_OK;
  for (int i = 0; i < s->parts.n && !st; i++) {
    if (i == s->parts.gemm_at) st = kcuda_parts_gemm(r, s, &a, stream);
    if (!st) st = kcuda_part_launch(r, s, i, &a, stream);
  }
  return st;
}
