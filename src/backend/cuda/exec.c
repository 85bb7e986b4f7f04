/* Fused execution on CUDA devices. The fusion plan's LOOP, REDUCE and ROW
 * groups become CUDA kernels (emitted for the device's compute capability,
 * compiled by NVRTC through the kernel cache, loaded once per executable);
 * DOT groups are cuBLASLt matmuls (with their bias and relu epilogues); the
 * other groups, and any the emitter or cuBLASLt declines, are host steps:
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
#include <unistd.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* Blocks per multiprocessor a grid-stride kernel is launched with at most:
 * enough to fill every SM several times over; the kernel strides past it. */
#define KCUDA_BLOCKS_PER_SM 32
/* Threads compiling one executable's kernels at once, at most. */
#define KCUDA_COMPILE_THREADS 8

typedef enum kcuda_step_kind {
  KCUDA_STEP_KERNEL,
  KCUDA_STEP_GEMM,
  KCUDA_STEP_HOST
} kcuda_step_kind;

typedef struct kcuda_step {
  kcuda_step_kind kind;
  const kfuse_group *g;
  char *name;     /* the kernel's symbol */
  char *source;   /* its CUDA C, for as_text */
  char what[112]; /* "jit(f) step 3 (kernel kiln_loop_2)", for messages and the fault trail */
  kcuda_kernel kernel;
  unsigned grid, block;
  int node;        /* its node in the graph, -1 when it queues nothing (no work) */
  kcuda_gemm gemm; /* GEMM */
  kcuda_gemm_op *gemm_op;
  kcuda_gemm_stream *gemm_stream;
} kcuda_step;

struct kdev_exec {
  kiln_device *dev;
  const kir_program *prog; /* outlives the executable */
  const bool *donated;     /* per invar */
  kir_eval_env env;        /* for host steps (a copy of the build's) */
  int n_in, n_out;
  kiln_log_level log_level;
  kfuse_plan *plan;
  int n_steps;
  kcuda_step *steps;
  int n_nodes;    /* steps with work */
  bool graphable; /* several kernels and matmuls, and nothing else */
  kfuse_consts consts;
  kdev_buffer *const_dev; /* per var: the device copy of a constant kernels read */
  pthread_mutex_t mu;     /* one call at a time enqueues (arena, graph) */
  kdev_buffer arena;
  unsigned long long calls;
  kcuda_graph graph;
  kiln_kernel_args *node_args; /* per node: the addresses it holds */
  char label[48];              /* "jit(f)", for messages and buffers' origin */
  char graph_what[96];         /* "jit(f) graph of 3 steps", for the fault trail */
};

/* ---- building ---- */

typedef struct kcuda_x_nvrtc_job {
  const char *name, *source, *arch;
} kcuda_x_nvrtc_job;

static kiln_status kcuda_x_nvrtc_build(void *user, void **blob, size_t *size) {
  const kcuda_x_nvrtc_job *j = user;
  char *cubin = NULL;
  kiln_status st = kcuda_nvrtc_compile(j->name, j->source, &j->arch, 1, true, &cubin, size);
  *blob = cubin;
  return st;
}

/* Keeps the source of a kernel that does not compile where the user can
 * read it: the dump directory, else the temporary directory. */
static void kcuda_x_dump_failed(const kcore_config *config, const char *name, const char *source) {
  const char *dir = config->opts.dump_dir;
  if (!dir || !*dir) dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.cu", dir, name);
  char *log = kcore_strdup(kiln_last_error());
  if (log && kcache_write_file(path, source, strlen(source), false) == KILN_OK)
    kcore_fail(KILN_ERR_COMPILE, "%s\n(the kernel's source is in %s)", log, path);
  else if (log)
    kcore_fail(KILN_ERR_COMPILE, "%s", log);
  free(log);
}

/* The cubin of kernel k for sm_<sm>, from the cache or NVRTC. */
static kiln_status kcuda_x_cubin(const kcore_config *config, kcache *cache, const kcg_kernel *k,
                                 int sm, const void **cubin, size_t *size) {
  char arch[32], target[16], compiler[32];
  int major = 0, minor = 0;
  snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
  snprintf(target, sizeof target, "sm_%d", sm);
  nvrtcVersion(&major, &minor);
  snprintf(compiler, sizeof compiler, "nvrtc %d.%d", major, minor);
  const char *opts[1] = {arch};
  kcache_key_parts parts = {k->source, strlen(k->source), target, compiler, opts, 1};
  kcache_key key;
  kcache_key_make(&parts, &key);
  kcuda_x_nvrtc_job job = {k->name, k->source, arch};
  kiln_status st = kcache_get_or_build(cache, &key, kcuda_x_nvrtc_build, &job, cubin, size);
  if (st == KILN_ERR_COMPILE) kcuda_x_dump_failed(config, k->name, k->source);
  return st;
}

static int kcuda_x_sm(const kiln_device *dev) {
  return dev->info.compute_major * 10 + dev->info.compute_minor;
}

static unsigned kcuda_x_grid(const kiln_device *dev, const kcg_kernel *k) {
  int64_t need = (k->n_items + k->items_per_block - 1) / k->items_per_block;
  int64_t cap = (int64_t)(dev->info.multiprocessors > 0 ? dev->info.multiprocessors : 1) *
                KCUDA_BLOCKS_PER_SM;
  return (unsigned)(need < 1 ? 1 : need < cap ? need : cap);
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

/* A DOT group as one cuBLASLt matmul; one cuBLASLt declines stays a host
 * step. */
static kiln_status kcuda_step_gemm(kdev_exec *x, const kdev_build *b, const kir_program *p,
                                   const kfuse_group *grp, kcuda_step *s) {
  kcuda_device *d = kcuda_impl(x->dev);
  kcuda_gemm_desc desc;
  kiln_status st = kcuda_gemm_desc_of_group(p, grp, &desc);
  if (!st) st = kcuda_gemm_plan(&desc, &s->gemm);
  if (!st && s->gemm.compute == KCUDA_GEMM_COMPUTE_32F && s->gemm.a.dtype == KILN_F32 &&
      b->config->opts.matmul_precision == KILN_MATMUL_TENSORFLOAT32)
    s->gemm.compute = KCUDA_GEMM_COMPUTE_32F_TF32;
  if (!st) st = kcuda_device_gemm(x->dev->backend->state, d, &s->gemm_stream);
  if (!st) st = kcuda_gemm_prepare(s->gemm_stream, &s->gemm, &s->gemm_op);
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
 * group the emitter declines becomes a host step, a DOT group a matmul. */
static kiln_status kcuda_step_emit(kdev_exec *x, const kdev_build *b, const kir_program *p,
                                   const kfuse_group *grp, kcuda_step *s, kcg_kernel *k) {
  s->g = grp;
  s->node = -1;
  s->kind = KCUDA_STEP_HOST;
  if (grp->kind == KFUSE_DOT) return kcuda_step_gemm(x, b, p, grp, s);
  if (grp->kind != KFUSE_LOOP && grp->kind != KFUSE_REDUCE && grp->kind != KFUSE_ROW)
    return KILN_OK;
  kcg_target_info target = {KCG_TARGET_CUDA, kcuda_x_sm(x->dev)};
  kiln_status st = kcg_emit(p, grp, &target, k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcore_log(b->config->opts.log_level, KILN_LOG_DEBUG, "fuse: a %s group runs on the host: %s",
              kfuse_kind_name(grp->kind), kiln_last_error());
    kiln_clear_error();
    memset(k, 0, sizeof *k);
    return KILN_OK;
  }
  return st;
}

/* Compiling every kernel of an executable at once, NVRTC programs on
 * several threads (NVRTC is thread-safe; the kernel cache too). */
typedef struct kcuda_x_compile_all {
  const kcore_config *config;
  kcache *cache;
  int sm, n;
  const kcg_kernel *k; /* n kernels; name NULL: none */
  const void **cubin;
  _Atomic int next;
  pthread_mutex_t mu;
  kiln_status st; /* the first failure, its message in `why` */
  char *why;
} kcuda_x_compile_all;

static void *kcuda_x_compile_worker(void *user) {
  kcuda_x_compile_all *w = user;
  for (int i; (i = atomic_fetch_add(&w->next, 1)) < w->n;) {
    if (!w->k[i].name) continue;
    size_t size = 0;
    kiln_status st = kcuda_x_cubin(w->config, w->cache, &w->k[i], w->sm, &w->cubin[i], &size);
    if (!st) continue;
    pthread_mutex_lock(&w->mu);
    if (!w->st) {
      w->st = st;
      w->why = kcore_strdup(kiln_last_error());
    }
    pthread_mutex_unlock(&w->mu);
  }
  return NULL;
}

static kiln_status kcuda_x_compile(kdev_exec *x, const kcore_config *config, kcache *cache,
                                   const kcg_kernel *k, const void **cubin) {
  kcuda_x_compile_all w = {.config = config,
                           .cache = cache,
                           .sm = kcuda_x_sm(x->dev),
                           .n = x->n_steps,
                           .k = k,
                           .cubin = cubin};
  pthread_mutex_init(&w.mu, NULL);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int kernels = 0;
  for (int i = 0; i < x->n_steps; i++) kernels += k[i].name != NULL;
  int n = kernels < KCUDA_COMPILE_THREADS ? kernels : KCUDA_COMPILE_THREADS;
  if (cores > 0 && n > cores) n = (int)cores;
  pthread_t threads[KCUDA_COMPILE_THREADS];
  int started = 0;
  while (started < n - 1 &&
         pthread_create(&threads[started], NULL, kcuda_x_compile_worker, &w) == 0)
    started++;
  kcuda_x_compile_worker(&w); /* this thread is one of the workers */
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  pthread_mutex_destroy(&w.mu);
  if (w.st) kcore_fail(w.st, "%s", w.why ? w.why : "compiling a kernel failed");
  free(w.why);
  return w.st;
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
  s->grid = kcuda_x_grid(x->dev, k);
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
  if (!st) st = kcuda_x_compile(x, b->config, cache, k, cubin);
  for (int i = 0; !st && i < x->n_steps; i++)
    if (k[i].name) st = kcuda_step_load(x, &x->steps[i], &k[i], cubin[i]);
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
  for (int v = 0; x->const_dev && v < x->plan->n_places; v++)
    if (x->const_dev[v].ptr) x->dev->ops->release(x->dev, &x->const_dev[v]);
  if (x->arena.ptr) x->dev->ops->release(x->dev, &x->arena);
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
  bool host = false;
  for (int i = 0; i < x->n_steps; i++) {
    kcuda_step *s = &x->steps[i];
    const kcuda_gemm *g = &s->gemm;
    bool work = s->kind == KCUDA_STEP_KERNEL ? s->g->n_items > 0
                : s->kind == KCUDA_STEP_GEMM ? g->batch > 0 && g->m > 0 && g->n > 0
                                             : false;
    host |= s->kind == KCUDA_STEP_HOST;
    s->node = work ? x->n_nodes++ : -1;
  }
  x->graphable = x->n_nodes >= 2 && !host;
}

static void kcuda_step_describe(kdev_exec *x, int i) {
  kcuda_step *s = &x->steps[i];
  snprintf(s->what, sizeof s->what, "%s step %d (%s%s)", x->label, i,
           s->kind == KCUDA_STEP_KERNEL ? "kernel "
           : s->kind == KCUDA_STEP_GEMM ? "cuBLASLt matmul"
                                        : "on the host: ",
           s->kind == KCUDA_STEP_KERNEL ? s->name
           : s->kind == KCUDA_STEP_GEMM ? ""
                                        : kfuse_kind_name(s->g->kind));
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

/* ---- lowering for a CUDA architecture, with or without a device ---- */

static kiln_status kcuda_x_lower_group(const kcore_config *config, kcache *cache,
                                       const kir_program *p, const kfuse_group *g, int index,
                                       int sm, kcg_buf *text) {
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_CUDA, sm};
  kiln_status st = kcg_emit(p, g, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcg_buf_addf(text, "\n/* ---- group %d (%s): not a kernel: %s ---- */\n", index,
                 kfuse_kind_name(g->kind), kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  const void *cubin = NULL;
  size_t size = 0;
  st = kcuda_x_cubin(config, cache, &k, sm, &cubin, &size);
  if (!st)
    kcg_buf_addf(text,
                 "\n/* ---- group %d (%s): %s, %zu-byte cubin for sm_%d, %lld items ---- */\n%s",
                 index, kfuse_kind_name(g->kind), k.name, size, sm, (long long)k.n_items, k.source);
  kcg_kernel_free(&k);
  return st;
}

kiln_status kcuda_lowered_text(const kcore_config *config, kcache *cache, const kir_program *p,
                               const bool *donated, int sm, char **text) {
  kfuse_plan *plan = NULL;
  char *plan_text = NULL;
  kcg_buf buf = {0};
  kiln_status st = kfuse_plan_build(p, NULL, donated, &plan);
  if (!st) st = kfuse_plan_print(plan, p, &plan_text);
  if (!st) kcg_buf_add(&buf, plan_text);
  for (int i = 0; !st && plan && i < plan->n_groups; i++)
    st = kcuda_x_lower_group(config, cache, p, &plan->groups[i], i, sm, &buf);
  if (!st && buf.oom) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "as_text: out of host memory");
  if (!st) {
    *text = buf.s;
    buf.s = NULL;
  }
  kcg_buf_free(&buf);
  free(plan_text);
  kfuse_plan_free(plan);
  return st;
}

/* ---- running ---- */

typedef struct kcuda_run {
  kdev_exec *x;
  kcuda_device *d;
  kiln_array *const *args;
  kiln_array **outs;
  CUdeviceptr *out_ptr; /* per program output: where it is written */
} kcuda_run;

static CUdeviceptr kcuda_x_addr(const kcuda_run *r, kir_vid v) {
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

static void kcuda_step_args(const kcuda_run *r, const kfuse_group *g, kiln_kernel_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < g->n_in - g->n_in_literals; i++)
    a->ptr[i] = (void *)(uintptr_t)kcuda_x_addr(r, g->in[i]);
  for (int i = 0; i < g->n_out; i++)
    a->ptr[g->n_in + i] = (void *)(uintptr_t)kcuda_x_addr(r, g->out[i]);
}

/* The launch of step s with arguments a; begin/end must outlive it. */
static kcuda_launch kcuda_step_launch(const kcuda_step *s, kiln_kernel_args *a, long long *range,
                                      void **params) {
  range[0] = 0;
  range[1] = s->g->n_items;
  params[0] = a;
  params[1] = &range[0];
  params[2] = &range[1];
  return (kcuda_launch){s->kernel.fn, s->name, s->grid, s->block, params};
}

static kiln_status kcuda_step_kernel(const kcuda_run *r, const kcuda_step *s) {
  if (s->node < 0) return KILN_OK;
  kiln_kernel_args a;
  long long range[2];
  void *params[3];
  kcuda_step_args(r, s->g, &a);
  kcuda_launch l = kcuda_step_launch(s, &a, range, params);
  return kcuda_launch_kernel(r->d, r->d->compute, &l);
}

/* The addresses a matmul step touches (A, B, bias or 0, C), kept like a
 * kernel's arguments so that graph nodes of both kinds compare alike. */
static void kcuda_step_gemm_args(const kcuda_run *r, const kcuda_step *s, kiln_kernel_args *a) {
  const kir_eqn *dot = &r->x->prog->eqns[s->g->eqns[0]];
  memset(a, 0, sizeof *a);
  a->ptr[0] = (void *)(uintptr_t)kcuda_x_addr(r, dot->in[0]);
  a->ptr[1] = (void *)(uintptr_t)kcuda_x_addr(r, dot->in[1]);
  if (s->g->bias != KIR_NO_VAR) a->ptr[2] = (void *)(uintptr_t)kcuda_x_addr(r, s->g->bias);
  a->ptr[3] = (void *)(uintptr_t)kcuda_x_addr(r, s->g->out[0]);
}

/* Queues step s's matmul on `stream` (the compute stream, or a capture). */
static kiln_status kcuda_step_gemm_queue(const kcuda_run *r, const kcuda_step *s, CUstream stream) {
  kiln_kernel_args a;
  kcuda_step_gemm_args(r, s, &a);
  return kcuda_gemm_run(s->gemm_stream, s->gemm_op, stream, (CUdeviceptr)(uintptr_t)a.ptr[0],
                        (CUdeviceptr)(uintptr_t)a.ptr[1], (CUdeviceptr)(uintptr_t)a.ptr[2],
                        (CUdeviceptr)(uintptr_t)a.ptr[3]);
}

static kiln_status kcuda_step_gemm_run(const kcuda_run *r, const kcuda_step *s) {
  return kcuda_step_gemm_queue(r, s, s->gemm_stream->stream);
}

/* ---- host steps ---- */

typedef struct kcuda_x_host_view {
  const kir_program *p;
  void **data; /* per var: its host copy */
} kcuda_x_host_view;

static void *kcuda_x_host_addr(void *user, kir_vid v) {
  return ((kcuda_x_host_view *)user)->data[v];
}

static size_t kcuda_x_var_bytes(const kir_program *p, kir_vid v) {
  const kir_aval *a = kir_var_aval(p, v);
  return (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
}

/* Host copies of the values group g reads (constants in place) and room
 * for the values it writes. */
static kiln_status kcuda_x_host_fetch(const kcuda_run *r, const kfuse_group *g,
                                      kcuda_x_host_view *h, bool *owned) {
  kiln_status st = KILN_OK;
  const kcuda_device *d = r->d;
  for (int pass = 0; pass < 2; pass++) {
    int n = pass ? g->n_out : g->n_in;
    const kir_vid *vs = pass ? g->out : g->in;
    for (int i = 0; i < n; i++) {
      kir_vid v = vs[i];
      if (h->data[v]) continue;
      if (!pass && r->x->plan->places[v].home == KFUSE_HOME_CONST) {
        h->data[v] = r->x->consts.data[v];
        continue;
      }
      size_t nb = kcuda_x_var_bytes(h->p, v);
      if (!(h->data[v] = malloc(nb ? nb : 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu bytes", nb);
      owned[v] = true;
      if (!pass && nb)
        KCUDA_CU(d->drv, d->where, cuMemcpyDtoHAsync,
                 (h->data[v], kcuda_x_addr(r, v), nb, d->compute), out);
    }
  }
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
out:
  return st;
}

static kiln_status kcuda_x_host_store(const kcuda_run *r, const kfuse_group *g,
                                      kcuda_x_host_view *h) {
  kiln_status st = KILN_OK;
  const kcuda_device *d = r->d;
  for (int i = 0; i < g->n_out; i++) {
    size_t nb = kcuda_x_var_bytes(h->p, g->out[i]);
    CUdeviceptr to = kcuda_x_addr(r, g->out[i]);
    if (nb && to)
      KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, (to, h->data[g->out[i]], nb, d->compute), out);
  }
  /* The host copies are freed next: the uploads must have read them. */
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
out:
  return st;
}

/* A group on the host: waits for its inputs, evaluates, uploads. */
static kiln_status kcuda_step_host(const kcuda_run *r, const kcuda_step *s) {
  const kir_program *p = r->x->prog;
  size_t n = (size_t)(p->n_vars ? p->n_vars : 1);
  kcuda_x_host_view h = {p, calloc(n, sizeof(void *))};
  bool *owned = calloc(n, sizeof *owned);
  kiln_status st = !h.data || !owned
                       ? kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory")
                       : kcuda_x_host_fetch(r, s->g, &h, owned);
  kir_eval_env env;
  env = r->x->env;
  if (!st) st = kfuse_eval_group(p, r->x->plan, s->g, &env, kcuda_x_host_addr, &h);
  if (!st) st = kcuda_x_host_store(r, s->g, &h);
  for (size_t v = 0; owned && v < n; v++)
    if (owned[v]) free(h.data[v]);
  free(h.data);
  free(owned);
  return st;
}

/* ---- a call ---- */

/* What a graph node of a step is built from, kept alive while it is used. */
typedef struct kcuda_x_node_make {
  const kcuda_run *r;
  const kcuda_step *s;
  kcuda_launch launch;
  long long range[2];
  void *params[3];
} kcuda_x_node_make;

static kiln_status kcuda_x_node_capture(void *user, CUstream stream) {
  const kcuda_x_node_make *m = user;
  return kcuda_step_gemm_queue(m->r, m->s, stream);
}

/* The addresses step s's node holds for this call. */
static void kcuda_step_node_args(const kcuda_run *r, const kcuda_step *s, kiln_kernel_args *a) {
  if (s->kind == KCUDA_STEP_KERNEL)
    kcuda_step_args(r, s->g, a);
  else
    kcuda_step_gemm_args(r, s, a);
}

/* Step s's graph node: its kernel launch with arguments a, or its matmul
 * captured with this call's addresses. */
static kcuda_graph_node kcuda_step_node(const kcuda_run *r, const kcuda_step *s,
                                        kiln_kernel_args *a, kcuda_x_node_make *m) {
  m->r = r;
  m->s = s;
  if (s->kind != KCUDA_STEP_KERNEL) return (kcuda_graph_node){NULL, kcuda_x_node_capture, m};
  m->launch = kcuda_step_launch(s, a, m->range, m->params);
  return (kcuda_graph_node){&m->launch, NULL, NULL};
}

/* Builds the graph from this call's steps (the second call). */
static kiln_status kcuda_x_graph_build(const kcuda_run *r) {
  kdev_exec *x = r->x;
  kcuda_graph_node *nodes = calloc((size_t)x->n_nodes, sizeof *nodes);
  kcuda_x_node_make *make = calloc((size_t)x->n_nodes, sizeof *make);
  kiln_status st = KILN_OK;
  if (!nodes || !make) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
    goto done;
  }
  for (int i = 0; i < x->n_steps; i++) {
    const kcuda_step *s = &x->steps[i];
    if (s->node < 0) continue;
    kcuda_step_node_args(r, s, &x->node_args[s->node]);
    nodes[s->node] = kcuda_step_node(r, s, &x->node_args[s->node], &make[s->node]);
  }
  st = kcuda_graph_build(r->d, x->n_nodes, nodes, &x->graph);
done:
  free(nodes);
  free(make);
  return st;
}

/* Replays the graph, updating only the nodes whose addresses changed (those
 * that touch the call's inputs and outputs: temporaries stay put); a matmul
 * node is captured anew. */
static kiln_status kcuda_x_replay(const kcuda_run *r) {
  kdev_exec *x = r->x;
  kiln_status st = x->graph.exec ? KILN_OK : kcuda_x_graph_build(r);
  for (int i = 0; i < x->n_steps && !st; i++) {
    const kcuda_step *s = &x->steps[i];
    kiln_kernel_args a;
    if (s->node < 0) continue;
    kcuda_step_node_args(r, s, &a);
    if (!memcmp(&a, &x->node_args[s->node], sizeof a)) continue;
    kcuda_x_node_make m;
    kcuda_graph_node node = kcuda_step_node(r, s, &a, &m);
    if (!(st = kcuda_graph_update(r->d, &x->graph, s->node, &node))) x->node_args[s->node] = a;
  }
  if (!st && !(st = kcuda_trail_enter(r->d, x->graph_what))) {
    st = kcuda_graph_launch(r->d, &x->graph, r->d->compute);
    kcuda_trail_leave(r->d);
  }
  return st;
}

/* One step, inside an NVTX range named after it. A step on the device is
 * marked on the fault trail; a host step waits, and names its failures. */
static kiln_status kcuda_x_step(const kcuda_run *r, const kcuda_step *s) {
  kcore_range_push(s->kind == KCUDA_STEP_KERNEL ? s->name
                   : s->kind == KCUDA_STEP_GEMM ? "kiln cuBLASLt matmul"
                                                : "kiln host step");
  kiln_status st = KILN_OK;
  if (s->kind == KCUDA_STEP_HOST) {
    st = kcuda_step_host(r, s);
  } else if (s->node >= 0 && !(st = kcuda_trail_enter(r->d, s->what))) {
    st = s->kind == KCUDA_STEP_KERNEL ? kcuda_step_kernel(r, s) : kcuda_step_gemm_run(r, s);
    kcuda_trail_leave(r->d);
  }
  kcore_range_pop();
  return st;
}

static kiln_status kcuda_x_steps(const kcuda_run *r) {
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
static kiln_status kcuda_x_copy_outputs(const kcuda_run *r) {
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
static kiln_status kcuda_x_inputs_ready(const kcuda_run *r) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < r->x->n_in && !st; i++)
    st = kcuda_after_ready(r->d, r->d->compute, &r->args[i]->buf);
  return st;
}

/* Each output gets a fresh buffer, or the donated input the plan names. */
static kiln_status kcuda_x_outputs(const kcuda_run *r) {
  const kdev_exec *c = r->x;
  const kir_program *p = c->prog;
  for (int k = 0; k < c->n_out; k++) {
    int donor = r->x->plan->output_donor[k];
    if (donor >= 0) {
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
static kiln_status kcuda_x_finish(const kcuda_run *r) {
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

static kiln_status kcuda_x_run(kdev_exec *x, kiln_array *const *args, kiln_array **outs) {
  CUdeviceptr small[16];
  CUdeviceptr *out_ptr = x->n_out <= 16 ? small : calloc((size_t)x->n_out, sizeof *out_ptr);
  if (!out_ptr) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kcuda_run r = {x, kcuda_impl(x->dev), args, outs, out_ptr};
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

const kdev_exec_ops kcuda_exec_ops = {
    .build = kcuda_x_build,
    .run = kcuda_x_run,
    .describe = kcuda_x_describe,
    .free = kcuda_x_free,
};
