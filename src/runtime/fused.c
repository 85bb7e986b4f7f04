/* Fused execution on the C target: the fusion plan's LOOP, REDUCE and ROW
 * groups become C kernels compiled by the host compiler (through the kernel
 * cache) and split across the context's threads; DOT and OPAQUE groups, and
 * any group the emitter declines, run on the reference evaluators. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"
#include "runtime/runtime.h"

/* Work items below which a kernel call is not split across threads, in
 * elements touched. */
#define KRT_MIN_CHUNK_ELEMENTS 32768

/* The context's C target, made on first use. */
struct krt_codegen {
  pthread_mutex_t mu;
  bool tried;
  kiln_status status; /* why the C target is unavailable */
  kcpu_cc *cc;
  kcache *cache;
  kcpu_pool *pool;
};

typedef struct krt_step {
  const kfuse_group *g;
  kcpu_cc_module *module;
  kcg_c_kernel_fn fn; /* NULL: the group's equations on the reference evaluators */
  char *source;
  int64_t min_chunk;
} krt_step;

struct krt_fused {
  kfuse_plan *plan;
  int n_steps;
  krt_step *steps;
  krt_consts consts;
  kcpu_pool *pool;
};

void krt_codegen_free(struct krt_codegen *g) {
  if (!g) return;
  kcpu_pool_free(g->pool);
  kcache_free(g->cache);
  kcpu_cc_free(g->cc);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

/* The kernel cache, and for CPU devices the host compiler and threads. */
static kiln_status krt_codegen_open(struct krt_codegen *g, kiln_ctx *ctx) {
  const kiln_options *o = &ctx->config.opts;
  kiln_status st = kcache_new(o->cache_dir, o->log_level, &g->cache);
  if (st || ctx->be.kind != KILN_BACKEND_CPU) return st;
  if (!st) st = kcpu_cc_new(o->dump_dir, o->log_level, &g->cc);
  long cores = ctx->be.devices[0].info.multiprocessors;
  if (!st) st = kcpu_pool_new(cores > 0 ? (int)cores : 1, &g->pool);
  return st;
}

/* The C target of ctx, or the reason there is none. */
static kiln_status krt_codegen_get(kiln_ctx *ctx, struct krt_codegen **out) {
  static pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER; /* guards the pointer only */
  pthread_mutex_lock(&init);
  if (!ctx->codegen && (ctx->codegen = calloc(1, sizeof *ctx->codegen)))
    pthread_mutex_init(&ctx->codegen->mu, NULL);
  struct krt_codegen *g = ctx->codegen;
  pthread_mutex_unlock(&init);
  if (!g) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "codegen: out of host memory");
  pthread_mutex_lock(&g->mu);
  if (!g->tried) {
    g->tried = true;
    g->status = krt_codegen_open(g, ctx);
    if (g->status)
      KRT_LOG(ctx, KILN_LOG_INFO, "fused C kernels unavailable, using the reference executor: %s",
              kiln_last_error());
  }
  kiln_status st = g->status;
  pthread_mutex_unlock(&g->mu);
  *out = g;
  return st;
}

kiln_status krt_ctx_kcache(kiln_ctx *ctx, kcache **out) {
  struct krt_codegen *g = NULL;
  kiln_status st = krt_codegen_get(ctx, &g);
  if (g && g->cache) {
    kiln_clear_error(); /* the host compiler may be missing: the cache is still there */
    st = KILN_OK;
  }
  *out = g ? g->cache : NULL;
  return st;
}

void krt_fused_free(krt_fused *f) {
  if (!f) return;
  for (int i = 0; i < f->n_steps; i++) {
    kcpu_cc_unload(f->steps[i].module);
    free(f->steps[i].source);
  }
  krt_consts_free(&f->consts);
  free(f->steps);
  kfuse_plan_free(f->plan);
  free(f);
}

static int64_t krt_min_chunk(const kcg_kernel *k) {
  int64_t per_item = k->row_length > 0 ? k->row_length : 1;
  int64_t chunk = KRT_MIN_CHUNK_ELEMENTS / per_item;
  return chunk > 0 ? chunk : 1;
}

/* Emits and compiles one group; a group the emitter declines stays on the
 * reference evaluators. */
static kiln_status krt_step_build(struct krt_codegen *g, kiln_ctx *ctx, const kir_program *p,
                                  const kfuse_group *grp, krt_step *s) {
  s->g = grp;
  if (grp->kind != KFUSE_LOOP && grp->kind != KFUSE_REDUCE && grp->kind != KFUSE_ROW)
    return KILN_OK;
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_C, 0};
  kiln_status st = kcg_emit(p, grp, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    KRT_LOG(ctx, KILN_LOG_DEBUG, "fuse: a %s group stays on the reference executor: %s",
            kfuse_kind_name(grp->kind), kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  void *sym = NULL;
  st = kcpu_cc_jit(g->cc, g->cache, k.name, k.source, NULL, 0, &s->module);
  if (!st) st = kcpu_cc_symbol(s->module, k.name, &sym);
  if (!st) {
    s->fn = (kcg_c_kernel_fn)sym;
    s->min_chunk = krt_min_chunk(&k);
    s->source = k.source;
    k.source = NULL;
  }
  kcg_kernel_free(&k);
  return st;
}

/* Writes the plan and the kernels' sources to KILN_DUMP_DIR. */
static void krt_dump_plan(const kiln_compiled *c) {
  kiln_ctx *ctx = c->p.ctx;
  const char *dir = ctx->config.opts.dump_dir;
  char *text = NULL;
  if (!dir) return;
  kiln_status st = c->cuda ? krt_cuda_exec_text(c->cuda, c->p.prog, &text)
                           : krt_fused_text(c->fused, c->p.prog, &text);
  if (st) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s-%016llx.plan.txt", dir, c->p.f ? c->p.f->name : "program",
           (unsigned long long)kcore_hash_str(KCORE_HASH_SEED, text));
  if (kcache_write_file(path, text, strlen(text), false))
    KRT_LOG(ctx, KILN_LOG_WARN, "dump: %s", kiln_last_error());
  free(text);
}

/* Fused C kernels for a CPU device. */
static kiln_status krt_fuse_c(kiln_compiled *c, struct krt_codegen *g) {
  kiln_ctx *ctx = c->p.ctx;
  kiln_executor mode = ctx->config.opts.executor;
  krt_fused *f = calloc(1, sizeof *f);
  if (!f) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  f->pool = g->pool;
  const kir_program *p = c->p.prog;
  kfuse_options fo;
  kfuse_options_default(&fo);
  fo.fuse = mode != KILN_EXECUTOR_UNFUSED; /* unfused: one kernel per primitive */
  kiln_status st = kfuse_plan_build(p, &fo, c->p.donated, &f->plan);
  if (!st && !(f->steps = calloc((size_t)(f->plan->n_groups + 1), sizeof *f->steps)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  for (int i = 0; !st && i < f->plan->n_groups; i++, f->n_steps++)
    st = krt_step_build(g, ctx, p, &f->plan->groups[i], &f->steps[i]);
  if (!st) st = krt_consts_init(&f->consts, f->plan, p);
  if (st) {
    krt_fused_free(f);
    return kcore_fail_wrap(st, "fusing %s", c->p.f ? c->p.f->name : "program");
  }
  c->fused = f;
  return KILN_OK;
}

kiln_status krt_fuse(kiln_compiled *c) {
  kiln_ctx *ctx = c->p.ctx;
  if (ctx->config.opts.executor == KILN_EXECUTOR_REFERENCE) return KILN_OK;
  struct krt_codegen *g = NULL;
  if (krt_codegen_get(ctx, &g)) {
    kiln_clear_error();
    return KILN_OK; /* no compiler: the reference executor runs */
  }
  kiln_status st = c->p.dev->info.platform == KILN_BACKEND_CUDA ? krt_cuda_build(c, g->cache)
                                                                : krt_fuse_c(c, g);
  if (!st) krt_dump_plan(c);
  return st;
}

int krt_fused_output_donor(const krt_fused *f, int k) { return f->plan->output_donor[k]; }

kiln_status krt_fused_text(const krt_fused *f, const kir_program *p, char **text) {
  char *plan = NULL;
  kiln_status st = kfuse_plan_print(f->plan, p, &plan);
  if (st) return st;
  size_t len = strlen(plan) + 1;
  for (int i = 0; i < f->n_steps; i++)
    if (f->steps[i].source) len += strlen(f->steps[i].source) + 64;
  char *out = malloc(len);
  if (!out) {
    free(plan);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "as_text: out of host memory");
  }
  size_t n = (size_t)snprintf(out, len, "%s", plan);
  for (int i = 0; i < f->n_steps; i++)
    if (f->steps[i].source)
      n += (size_t)snprintf(out + n, len - n, "\n/* ---- group %d ---- */\n%s", i,
                            f->steps[i].source);
  free(plan);
  *text = out;
  return KILN_OK;
}

/* ---- running ---- */

typedef struct krt_run {
  const kir_program *p;
  const krt_fused *f;
  const kir_buffer *in;
  kir_buffer *out;
  char *arena;
  const kir_eval_env *env;
} krt_run;

static char krt_empty[1]; /* the address of zero-size data */

static void *krt_addr(const krt_run *r, kir_vid v) {
  kfuse_place pl = r->f->plan->places[v];
  void *a = NULL;
  switch (pl.home) {
    case KFUSE_HOME_INPUT: a = r->in[pl.index].data; break;
    case KFUSE_HOME_CONST: a = r->f->consts.data[v]; break;
    case KFUSE_HOME_OUTPUT: a = r->out[pl.index].data; break;
    case KFUSE_HOME_SLOT: a = r->arena + r->f->plan->slot_offset[pl.index]; break;
    default: break;
  }
  return a ? a : krt_empty;
}

static void *krt_addr_of(void *user, kir_vid v) { return krt_addr(user, v); }

typedef struct krt_launch {
  kcg_c_kernel_fn fn;
  kiln_kernel_args args;
} krt_launch;

static kiln_status krt_launch_range(void *user, int64_t begin, int64_t end) {
  krt_launch *l = user;
  l->fn(l->args, begin, end);
  return KILN_OK;
}

static kiln_status krt_run_kernel(const krt_run *r, const krt_step *s) {
  const kfuse_group *g = s->g;
  krt_launch l = {.fn = s->fn};
  for (int i = 0; i < g->n_in; i++) l.args.ptr[i] = krt_addr(r, g->in[i]);
  for (int i = 0; i < g->n_out; i++) l.args.ptr[g->n_in + i] = krt_addr(r, g->out[i]);
  return kcpu_pool_parallel_for(r->f->pool, 0, g->n_items, s->min_chunk, krt_launch_range, &l);
}

/* Program outputs the plan did not write in place: inputs, constants and
 * repeated outputs are copied (inputs first, as donation needs). */
static void krt_copy_outputs(const krt_run *r) {
  const kir_program *p = r->p;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < p->n_outvars; k++) {
      kir_vid v = p->outvars[k];
      kfuse_place pl = r->f->plan->places[v];
      if (pl.home == KFUSE_HOME_OUTPUT && pl.index == k) continue;
      if ((pl.home == KFUSE_HOME_INPUT) != (pass == 0) || r->out[k].nbytes == 0) continue;
      void *src = krt_addr(r, v);
      if (src != r->out[k].data) memmove(r->out[k].data, src, r->out[k].nbytes);
    }
}

kiln_status krt_fused_run(const kiln_compiled *c, const kir_buffer *in, kir_buffer *out) {
  const krt_fused *f = c->fused;
  kir_eval_env env;
  krt_reference_env(c, &env);
  krt_run r = {c->p.prog, f, in, out, NULL, &env};
  size_t arena = f->plan->arena_bytes;
  if (arena && !(r.arena = aligned_alloc(KFUSE_SLOT_ALIGN, (arena + KFUSE_SLOT_ALIGN - 1) /
                                                                KFUSE_SLOT_ALIGN * KFUSE_SLOT_ALIGN)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu temporary bytes",
                      arena);
  kiln_status st = KILN_OK;
  for (int i = 0; i < f->n_steps && !st; i++)
    st = f->steps[i].fn ? krt_run_kernel(&r, &f->steps[i])
                        : krt_eval_group(r.p, f->plan, f->steps[i].g, &env, krt_addr_of, &r);
  if (!st) krt_copy_outputs(&r);
  free(r.arena);
  return st;
}
