/* Building the CUDA executor's executable from a fusion plan: a step per
 * group (kernel, cuBLASLt matmul or host step), kernels loaded, constants
 * uploaded; describing and freeing it; the backend interface's table. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* A split kernel's blocks come in groups of k->split (one group per tile
 * of items), so the grid is a whole number of groups, at least one. */
unsigned kcuda_x_grid(const kiln_device *dev, const kcg_kernel *k) {
  int64_t need = (k->n_items + k->items_per_block - 1) / k->items_per_block;
  int64_t split = k->split > 1 ? k->split : 1;
  int64_t cap = (int64_t)(dev->info.multiprocessors > 0 ? dev->info.multiprocessors : 1) *
                KCUDA_BLOCKS_PER_SM / split;
  if (cap < 1) cap = 1;
  return (unsigned)((need < 1 ? 1 : need < cap ? need : cap) * split);
}

/* A split kernel's scratch: zeroed once here, left zero by every call
 * (calls of one executable run one after another on its compute stream). */
static kiln_status kcuda_step_scratch(kdev_exec *x, kcuda_step *s, const kcg_kernel *k) {
  size_t nb = (size_t)k->scratch_bytes;
  if (!nb) return KILN_OK;
  void *zeros = calloc(1, nb);
  if (!zeros)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory for %zu bytes of %s's "
                      "reduction scratch", nb, k->name);
  kiln_status st = x->dev->ops->alloc(x->dev, nb, &s->scratch);
  if (!st) st = x->dev->ops->upload(x->dev, &s->scratch, zeros, nb, KDEV_COPY_STAGED);
  if (!st) st = x->dev->ops->wait(x->dev, &s->scratch);
  free(zeros);
  return st;
}

kiln_status kcuda_gemm_desc_of_group(const kir_program *p, const kfuse_group *g,
                                     kcuda_gemm_desc *out) {
  const kir_eqn *e = NULL;
  for (int i = 0; g->kind == KFUSE_DOT && i < g->n_eqns && !e; i++)
    if (p->eqns[g->eqns[i]].prim == KIR_PRIM_DOT_GENERAL) e = &p->eqns[g->eqns[i]];
  if (!e)
    return kcore_fail(KILN_ERR_INTERNAL, "kcuda_gemm_desc_of_group: a %s group has no dot_general",
                      kfuse_kind_name(g->kind));
  memset(out, 0, sizeof *out);
  out->lhs = *kir_var_aval(p, e->in[0]);
  out->rhs = *kir_var_aval(p, e->in[1]);
  out->out = *kir_var_aval(p, e->out[0]);
  out->dims = e->params.dot.dimension_numbers;
  out->epilogue = g->epilogue;
  if (g->epilogue != KFUSE_EPILOGUE_NONE) out->bias = *kir_var_aval(p, g->bias);
  return KILN_OK;
}

kiln_status kcuda_step_gemm_prepare(kdev_exec *x, const kdev_build *b, const kcuda_gemm_desc *desc,
                                    kcuda_step *s) {
  kcuda_device *d = kcuda_impl(x->dev);
  kiln_status st = kcuda_gemm_plan(desc, &s->gemm);
  if (!st && s->gemm.compute == KCUDA_GEMM_COMPUTE_32F && s->gemm.a.dtype == KILN_F32 &&
      b->config->opts.matmul_precision == KILN_MATMUL_TENSORFLOAT32)
    s->gemm.compute = KCUDA_GEMM_COMPUTE_32F_TF32;
  if (!st) st = kcuda_device_gemm(x->dev->backend->state, d, &s->gemm_stream);
  if (!st) st = kcuda_gemm_prepare(s->gemm_stream, &s->gemm, &s->gemm_op);
  return st;
}

/* A DOT group's matmul; one cuBLASLt cannot run stays a host step. */
static kiln_status kcuda_step_gemm(kdev_exec *x, const kdev_build *b, const kir_program *p,
                                   const kfuse_group *grp, kcuda_step *s) {
  kcuda_gemm_desc desc;
  kiln_status st = kcuda_gemm_desc_of_group(p, grp, &desc);
  if (!st) st = kcuda_step_gemm_prepare(x, b, &desc, s);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcore_log(b->config->opts.log_level, KILN_LOG_DEBUG, "fuse: a DOT group runs on the host: %s",
              kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (!st) s->kind = KCUDA_STEP_GEMM;
  return st;
}

/* Emits one group's kernel into *k (k->name NULL when there is none): a
 * group the emitter declines becomes a host step, a DOT group a matmul, a
 * lone convolution or scatter several kernels (exec_parts.c), another lone
 * equation with a kernel of its own that kernel. */
static kiln_status kcuda_step_emit(kdev_exec *x, const kdev_build *b, const kir_program *p,
                                   const kfuse_group *grp, kcuda_step *s, kcg_kernel *k) {
  s->g = grp;
  s->node = -1;
  s->kind = KCUDA_STEP_HOST;
  if (grp->kind == KFUSE_DOT) return kcuda_step_gemm(x, b, p, grp, s);
  const kir_eqn *lone = kcg_lone_eqn(p, grp);
  if (lone && kcg_emits_prim(lone->prim, KCG_TARGET_CUDA) == KCG_EMITS_PARTS) return kcuda_step_parts_emit(x, b, lone, s, k);
  if (!lone && grp->kind != KFUSE_LOOP && grp->kind != KFUSE_REDUCE && grp->kind != KFUSE_ROW)
    return KILN_OK;
  kcg_target_info target = {KCG_TARGET_CUDA, kcuda_x_sm(x->dev)};
  kiln_status st = lone ? kcg_emit_lone(p, lone, &target, k) : kcg_emit(p, grp, &target, k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcore_log(b->config->opts.log_level, KILN_LOG_DEBUG, "fuse: a %s group runs on the host: %s",
              kfuse_kind_name(grp->kind), kiln_last_error());
    kiln_clear_error();
    memset(k, 0, sizeof *k);
    return KILN_OK;
  }
  if (!st && lone) k->n_args = lone->n_in + 1;
  return st;
}

/* Loads step s's compiled kernel k on the device. */
static kiln_status kcuda_step_load(kdev_exec *x, kcuda_step *s, kcg_kernel *k, const void *cubin) {
  kcuda_device *d = kcuda_impl(x->dev);
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  st = kcuda_kernel_load(d, cubin, k->name, &s->kernel);
  kcuda_leave(d);
  if (st) return st;
  s->kind = KCUDA_STEP_KERNEL;
  if ((st = kcuda_step_scratch(x, s, k))) return st;
  s->grid = kcuda_x_grid(x->dev, k);
  s->n_items = k->n_items;
  s->block = (unsigned)k->block_threads;
  s->name = k->name;
  s->source = k->source;
  k->name = k->source = NULL;
  return KILN_OK;
}

/* Every group's step: kernels emitted, compiled together, then loaded. */
static kiln_status kcuda_x_steps_build(kdev_exec *x, const kdev_build *b, kcache *cache,
                                       const kir_program *p) {
  int n = x->plan->n_groups;
  kcg_kernel *k = calloc((size_t)(n ? n : 1), sizeof *k);
  const void **cubin = calloc((size_t)(n ? n : 1), sizeof *cubin);
  kiln_status st =
      !k || !cubin ? kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory") : KILN_OK;
  for (; !st && x->n_steps < n; x->n_steps++)
    st = kcuda_step_emit(x, b, p, &x->plan->groups[x->n_steps], &x->steps[x->n_steps],
                         &k[x->n_steps]);
  if (!st) st = kcuda_x_parts_scratch(x);
  if (!st) st = kcuda_x_compile(x, b->config, cache, k, cubin);
  for (int i = 0; !st && i < x->n_steps; i++) {
    kcuda_step *s = &x->steps[i];
    if (k[i].name)
      st = s->kind == KCUDA_STEP_PARTS ? kcuda_step_parts_load(x, s, &k[i], cubin[i])
                                       : kcuda_step_load(x, s, &k[i], cubin[i]);
  }
  for (int i = 0; k && i < n; i++) kcg_kernel_free(&k[i]);
  free(k);
  free(cubin);
  return st;
}

/* Device copies of the constants kernels read and of constant outputs
 * (literals a kernel reads are inlined into its source). */
static kiln_status kcuda_x_upload_consts(kdev_exec *x, const kir_program *p) {
  if (!(x->const_dev = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *x->const_dev)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  bool *need = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *need);
  if (!need) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  for (int i = 0; i < x->n_steps; i++) {
    const kfuse_group *g = x->steps[i].g;
    if (x->steps[i].kind != KCUDA_STEP_HOST)
      for (int j = 0; j < g->n_in - g->n_in_literals; j++) need[g->in[j]] = true;
  }
  for (int k = 0; k < p->n_outvars; k++) need[p->outvars[k]] = true;
  kiln_status st = KILN_OK;
  for (kir_vid v = 0; v < p->n_vars && !st; v++) {
    if (!need[v] || x->plan->places[v].home != KFUSE_HOME_CONST) continue;
    const kir_aval *a = kir_var_aval(p, v);
    size_t nb = (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
    st = x->dev->ops->alloc(x->dev, nb, &x->const_dev[v]);
    if (!st && nb)
      st = x->dev->ops->upload(x->dev, &x->const_dev[v], x->consts.data[v], nb, KDEV_COPY_STAGED);
    /* Once, at compile time, so that calls need not order after it. */
    if (!st && nb) st = x->dev->ops->wait(x->dev, &x->const_dev[v]);
  }
  free(need);
  return st;
}

static void kcuda_x_free(kdev_exec *x) {
  if (!x) return;
  kcuda_device *d = kcuda_impl(x->dev);
  bool entered = kcuda_enter(d) == KILN_OK;
  if (!entered) kiln_clear_error();
  kcuda_graph_destroy(d, &x->graph);
  for (int i = 0; i < x->n_steps; i++) {
    if (entered) kcuda_kernel_unload(d, &x->steps[i].kernel);
    kcuda_gemm_op_free(x->steps[i].gemm_op);
    free(x->steps[i].name);
    free(x->steps[i].source);
  }
  if (entered) kcuda_leave(d);
  for (int i = 0; i < x->n_steps; i++)
    if (x->steps[i].scratch.ptr) x->dev->ops->release(x->dev, &x->steps[i].scratch);
  for (int v = 0; x->const_dev && v < x->plan->n_places; v++)
    if (x->const_dev[v].ptr) x->dev->ops->release(x->dev, &x->const_dev[v]);
  if (x->arena.ptr) x->dev->ops->release(x->dev, &x->arena);
  if (x->parts_scratch.ptr) x->dev->ops->release(x->dev, &x->parts_scratch);
  free(x->const_dev);
  free(x->node_args);
  free(x->steps);
  kfuse_consts_free(&x->consts);
  kfuse_plan_free(x->plan);
  pthread_mutex_destroy(&x->mu);
  free(x);
}

/* Numbers the steps that queue work, in order (their graph nodes), and
 * decides whether the program is replayed as a graph: several such steps,
 * none on the host. */
static void kcuda_x_nodes(kdev_exec *x) {
  bool host = false, kernel = false;
  for (int i = 0; i < x->n_steps; i++) {
    kcuda_step *s = &x->steps[i];
    const kcuda_gemm *g = &s->gemm;
    bool work = s->kind == KCUDA_STEP_KERNEL ? s->n_items > 0
                : s->kind == KCUDA_STEP_GEMM ? g->batch > 0 && g->m > 0 && g->n > 0
                : s->kind == KCUDA_STEP_PARTS ? s->parts.n_out > 0
                                             : false;
    host |= s->kind == KCUDA_STEP_HOST;
    kernel |= work && s->kind == KCUDA_STEP_KERNEL;
    s->node = work ? x->n_nodes++ : -1;
  }
  /* A lone kernel too: updating its node and launching the graph costs the
   * host less than a cuLaunchKernel (bench_driver_calls: 0.4 + 1.1 vs 2.5 us
   * on an H100). A lone matmul is not: it would be captured anew each call. */
  x->graphable = !host && (x->n_nodes >= 2 || (x->n_nodes == 1 && kernel));
}

static void kcuda_step_describe(kdev_exec *x, int i) {
  kcuda_step *s = &x->steps[i];
  const char *kind = s->kind == KCUDA_STEP_KERNEL ? "kernel"
                     : s->kind == KCUDA_STEP_GEMM ? "cuBLASLt matmul"
                     : s->kind == KCUDA_STEP_PARTS ? s->parts.label
                                                   : "on the host";
  const char *which = s->kind == KCUDA_STEP_KERNEL || s->kind == KCUDA_STEP_PARTS ? s->name
                      : s->kind == KCUDA_STEP_HOST ? kfuse_kind_name(s->g->kind)
                                                   : NULL;
  snprintf(s->what, sizeof s->what, "%s step %d (%s%s%s)", x->label, i, kind,
           which ? (s->kind == KCUDA_STEP_KERNEL ? " " : ": ") : "", which ? which : "");
}

static kiln_status kcuda_x_build(kiln_device *dev, const kdev_build *b, kdev_exec **out) {
  *out = NULL;
  if (b->config->opts.executor == KILN_EXECUTOR_REFERENCE) return KILN_OK;
  const kir_program *p = b->prog;
  kcache *cache = b->cache;
  kdev_exec *x = calloc(1, sizeof *x);
  if (!x) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  pthread_mutex_init(&x->mu, NULL);
  x->dev = dev;
  x->prog = p;
  x->donated = b->donated;
  x->env = *b->env;
  x->n_in = p->n_invars;
  x->n_out = p->n_outvars;
  x->log_level = b->config->opts.log_level;
  snprintf(x->label, sizeof x->label, "%s", b->name);
  kfuse_options fo;
  kfuse_options_default(&fo);
  fo.fuse = b->config->opts.executor != KILN_EXECUTOR_UNFUSED;
  kiln_status st = kfuse_plan_build(p, &fo, b->donated, &x->plan);
  if (!st && !(x->steps = calloc((size_t)(x->plan->n_groups + 1), sizeof *x->steps)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  if (!st) st = kcuda_x_steps_build(x, b, cache, p);
  if (!st) kcuda_x_nodes(x);
  if (!st && !(x->node_args = calloc((size_t)(x->n_nodes + 1), sizeof *x->node_args)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  if (!st) st = kfuse_consts_init(&x->consts, x->plan, p);
  if (!st) st = kcuda_x_upload_consts(x, p);
  if (st) {
    kcuda_x_free(x);
    return kcore_fail_wrap(st, "fusing %s for %s", b->name, dev->info.name);
  }
  for (int i = 0; i < x->n_steps; i++) kcuda_step_describe(x, i);
  snprintf(x->graph_what, sizeof x->graph_what, "%s graph of %d steps", x->label, x->n_nodes);
  *out = x;
  return KILN_OK;
}

static kiln_status kcuda_x_describe(const kdev_exec *x, char **text) {
  const kir_program *p = x->prog;
  char *plan = NULL;
  kiln_status st = kfuse_plan_print(x->plan, p, &plan);
  if (st) return st;
  kcg_buf buf = {0};
  kcg_buf_add(&buf, plan);
  for (int i = 0; i < x->n_steps; i++) {
    const kcuda_step *s = &x->steps[i];
    if (s->kind == KCUDA_STEP_KERNEL)
      kcg_buf_addf(&buf, "\n/* ---- group %d: %s, grid %u x block %u ---- */\n%s", i, s->name,
                   s->grid, s->block, s->source);
    else if (s->kind == KCUDA_STEP_GEMM)
      kcg_buf_addf(&buf, "\n/* ---- group %d: cuBLASLt matmul: %s ---- */\n", i, s->gemm.what);
    else if (s->kind == KCUDA_STEP_PARTS)
      kcg_buf_addf(&buf, "\n/* ---- group %d: %s, %s%s%s ---- */\n%s", i, s->parts.label, s->name,
                   s->parts.gemm_at >= 0 ? ", around cuBLASLt matmul " : "",
                   s->parts.gemm_at >= 0 ? s->gemm.what : "", s->source);
    else
      kcg_buf_addf(&buf, "\n/* ---- group %d (%s): host step ---- */\n", i,
                   kfuse_kind_name(s->g->kind));
  }
  free(plan);
  if (buf.oom) {
    kcg_buf_free(&buf);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "as_text: out of host memory");
  }
  *text = buf.s;
  return KILN_OK;
}


const kdev_exec_ops kcuda_exec_ops = {
    .build = kcuda_x_build,
    .run = kcuda_x_run,
    .describe = kcuda_x_describe,
    .free = kcuda_x_free,
};

