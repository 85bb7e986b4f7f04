/* Fused execution on the C target: the fusion plan's LOOP, REDUCE and ROW
 * groups become C kernels compiled by the host compiler (through the kernel
 * cache) and split across the context's threads; DOT and OPAQUE groups, and
 * any group the emitter declines, run on the reference evaluators. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
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
  krt_kcache *cache;
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
  void **const_data; /* per var: host data of constants and literals */
  bool *const_owned;
  kcpu_pool *pool;
};

void krt_codegen_free(struct krt_codegen *g) {
  if (!g) return;
  kcpu_pool_free(g->pool);
  krt_kcache_free(g->cache);
  kcpu_cc_free(g->cc);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

static kiln_status krt_codegen_open(struct krt_codegen *g, kiln_ctx *ctx) {
  const kiln_options *o = &ctx->config.opts;
  kiln_status st = kcpu_cc_new(o->dump_dir, o->log_level, &g->cc);
  if (!st) st = krt_kcache_new(o->cache_dir, o->log_level, &g->cache);
  long cores = ctx->devices[0].info.multiprocessors;
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

void krt_fused_free(krt_fused *f) {
  if (!f) return;
  for (int i = 0; i < f->n_steps; i++) {
    kcpu_cc_unload(f->steps[i].module);
    free(f->steps[i].source);
  }
  for (int v = 0; f->const_data && f->plan && v < f->plan->n_places; v++)
    if (f->const_owned[v]) free(f->const_data[v]);
  free(f->const_data);
  free(f->const_owned);
  free(f->steps);
  kfuse_plan_free(f->plan);
  free(f);
}

/* Host data of constant or literal v (read in place by a group or copied
 * to an output). */
static kiln_status krt_const_one(krt_fused *f, const kir_program *p, kir_vid v) {
  const kir_var *var = &p->vars[v];
  if (f->const_data[v] || (var->kind != KIR_VAR_CONSTVAR && var->kind != KIR_VAR_LITERAL))
    return KILN_OK;
  size_t nb = (size_t)kir_aval_size(&var->aval) * kiln_dtype_size(var->aval.dtype);
  if (var->kind == KIR_VAR_CONSTVAR && var->u.constant.source == KIR_CONST_HOST) {
    f->const_data[v] = (void *)var->u.constant.host;
    return KILN_OK;
  }
  if (!(f->const_data[v] = malloc(nb ? nb : 1)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  f->const_owned[v] = true;
  if (var->kind == KIR_VAR_LITERAL) {
    kir_scalar_store(var->aval.dtype, var->u.literal, f->const_data[v]);
    return KILN_OK;
  }
  if (var->u.constant.source == KIR_CONST_ARRAY)
    return kiln_array_to_host(var->u.constant.array, f->const_data[v], nb);
  char t[KIR_AVAL_STR_CAP];
  return kcore_fail(KILN_ERR_ARGUMENT, "fuse: constant %d (%s) has no value bound", v,
                    kir_aval_str(&var->aval, t, sizeof t));
}

static kiln_status krt_const_data(krt_fused *f, const kir_program *p) {
  size_t n = (size_t)(p->n_vars ? p->n_vars : 1);
  f->const_data = calloc(n, sizeof *f->const_data);
  f->const_owned = calloc(n, sizeof *f->const_owned);
  if (!f->const_data || !f->const_owned)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  kiln_status st = KILN_OK;
  for (int g = 0; g < f->plan->n_groups && !st; g++)
    for (int i = 0; i < f->plan->groups[g].n_in && !st; i++)
      st = krt_const_one(f, p, f->plan->groups[g].in[i]);
  for (int k = 0; k < p->n_outvars && !st; k++) st = krt_const_one(f, p, p->outvars[k]);
  return st;
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

static void krt_dump_plan(kiln_ctx *ctx, const krt_fused *f, const kir_program *p,
                          const char *name) {
  const char *dir = ctx->config.opts.dump_dir;
  char *text = NULL;
  if (!dir || krt_fused_text(f, p, &text)) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s-%016llx.plan.txt", dir, name,
           (unsigned long long)kcore_hash_str(KCORE_HASH_SEED, text));
  if (krt_kcache_write_file(path, text, strlen(text), false))
    KRT_LOG(ctx, KILN_LOG_WARN, "dump: %s", kiln_last_error());
  free(text);
}

kiln_status krt_fuse(kiln_compiled *c) {
  kiln_ctx *ctx = c->p.ctx;
  kiln_executor mode = ctx->config.opts.executor;
  if (c->p.dev->info.platform != KILN_BACKEND_CPU || mode == KILN_EXECUTOR_REFERENCE)
    return KILN_OK;
  struct krt_codegen *g = NULL;
  if (krt_codegen_get(ctx, &g)) {
    kiln_clear_error();
    return KILN_OK; /* no compiler: the reference executor runs */
  }
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
  if (!st) st = krt_const_data(f, p);
  if (st) {
    krt_fused_free(f);
    return kcore_fail_wrap(st, "fusing %s", c->p.f ? c->p.f->name : "program");
  }
  krt_dump_plan(ctx, f, p, c->p.f ? c->p.f->name : "program");
  c->fused = f;
  return KILN_OK;
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
    case KFUSE_HOME_CONST: a = r->f->const_data[v]; break;
    case KFUSE_HOME_OUTPUT: a = r->out[pl.index].data; break;
    case KFUSE_HOME_SLOT: a = r->arena + r->f->plan->slot_offset[pl.index]; break;
    default: break;
  }
  return a ? a : krt_empty;
}

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

static kir_buffer krt_buffer_of(const kir_program *p, kir_vid v, void *data) {
  const kir_aval *a = kir_var_aval(p, v);
  return (kir_buffer){*a, data, (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype)};
}

/* The shape of a dot_general that is a plain row-major (batched) GEMM:
 * lhs [b..., m, k] x rhs [b..., k, n] in f32 or f64, batch dimensions
 * leading and in order, the result in the operands' dtype. */
typedef struct krt_gemm {
  int64_t batch, m, n, k;
  kiln_dtype dtype;
} krt_gemm;

static bool krt_dims_are(const kir_dims *d, int first, int n) {
  if (d->n != n) return false;
  for (int i = 0; i < n; i++)
    if (d->v[i] != first + i) return false;
  return true;
}

static bool krt_plain_gemm(const kir_program *p, const kir_eqn *e, krt_gemm *g) {
  const kir_aval *a = kir_var_aval(p, e->in[0]), *b = kir_var_aval(p, e->in[1]);
  const kir_dot_dims *d = &e->params.dot.dimension_numbers;
  kiln_dtype pref = e->params.dot.preferred_element_type;
  int nb = d->lhs_batch.n;
  if ((a->dtype != KILN_F32 && a->dtype != KILN_F64) || b->dtype != a->dtype ||
      (pref != KILN_INVALID_DTYPE && pref != a->dtype) || a->rank != nb + 2 ||
      b->rank != nb + 2 || !krt_dims_are(&d->lhs_batch, 0, nb) ||
      !krt_dims_are(&d->rhs_batch, 0, nb) || !krt_dims_are(&d->lhs_contracting, nb + 1, 1) ||
      !krt_dims_are(&d->rhs_contracting, nb, 1))
    return false;
  g->batch = 1;
  for (int i = 0; i < nb; i++) g->batch *= a->shape[i];
  g->m = a->shape[nb];
  g->k = a->shape[nb + 1];
  g->n = b->shape[nb + 1];
  g->dtype = a->dtype;
  return g->m > 0 && g->n > 0 && g->k > 0 && g->m <= INT32_MAX && g->n <= INT32_MAX &&
         g->k <= INT32_MAX;
}

/* A plain GEMM straight through CBLAS: the reference evaluator also
 * emulates XLA:CPU's flushing of subnormal operands, which costs passes
 * over the data and changes nothing beyond tolerance. */
static void krt_run_gemm(const krt_gemm *g, const void *a, const void *b, void *c) {
  int m = (int)g->m, n = (int)g->n, k = (int)g->k;
  for (int64_t i = 0; i < g->batch; i++) {
    if (g->dtype == KILN_F32)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                  (const float *)a + i * g->m * g->k, k, (const float *)b + i * g->k * g->n, n,
                  0.0f, (float *)c + i * g->m * g->n, n);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0,
                  (const double *)a + i * g->m * g->k, k, (const double *)b + i * g->k * g->n, n,
                  0.0, (double *)c + i * g->m * g->n, n);
  }
}

/* One equation on its reference evaluator; values internal to the group
 * (place NONE) live in `temp`. */
static kiln_status krt_run_eqn(const krt_run *r, int index, void **temp) {
  const kir_program *p = r->p;
  const kir_eqn *e = &p->eqns[index];
  kir_eval_fn fn = r->env->table->fn[e->prim];
  if (!fn)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "equation %d (%s): no reference evaluator", index,
                      kir_prim_name(e->prim));
  kir_buffer small[16];
  int n = e->n_in + e->n_out;
  kir_buffer *b = n <= 16 ? small : malloc((size_t)n * sizeof *b);
  if (!b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < e->n_in; i++) {
    kir_vid v = e->in[i];
    b[i] = krt_buffer_of(p, v, temp[v] ? temp[v] : krt_addr(r, v));
  }
  for (int i = 0; i < e->n_out && !st; i++) {
    kir_vid v = e->out[i];
    b[e->n_in + i] = krt_buffer_of(p, v, NULL);
    if (r->f->plan->places[v].home != KFUSE_HOME_NONE)
      b[e->n_in + i].data = krt_addr(r, v);
    else if (!(b[e->n_in + i].data = temp[v] = malloc(b[e->n_in + i].nbytes + 1)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  }
  krt_gemm gemm;
  if (!st && e->prim == KIR_PRIM_DOT_GENERAL && krt_plain_gemm(p, e, &gemm))
    krt_run_gemm(&gemm, b[0].data, b[1].data, b[2].data);
  else if (!st && (st = fn(e, b, b + e->n_in, (void *)r->env)))
    kcore_fail_wrap(st, "equation %d (%s)", index, kir_prim_name(e->prim));
  if (b != small) free(b);
  return st;
}

/* A group's equations one by one on the reference evaluators. */
static kiln_status krt_run_reference(const krt_run *r, const krt_step *s) {
  const kir_program *p = r->p;
  void **temp = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *temp);
  if (!temp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kiln_status st = KILN_OK;
  for (int k = 0; k < s->g->n_eqns && !st; k++) st = krt_run_eqn(r, s->g->eqns[k], temp);
  for (int v = 0; v < p->n_vars; v++) free(temp[v]);
  free(temp);
  return st;
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
  kir_eval_env_init(&env, kir_reference_evals());
  env.host_call = krt_host_call;
  env.host_user = c->p.hosts;
  krt_run r = {c->p.prog, f, in, out, NULL, &env};
  size_t arena = f->plan->arena_bytes;
  if (arena && !(r.arena = aligned_alloc(KFUSE_SLOT_ALIGN, (arena + KFUSE_SLOT_ALIGN - 1) /
                                                                KFUSE_SLOT_ALIGN * KFUSE_SLOT_ALIGN)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu temporary bytes",
                      arena);
  kiln_status st = KILN_OK;
  for (int i = 0; i < f->n_steps && !st; i++)
    st = f->steps[i].fn ? krt_run_kernel(&r, &f->steps[i]) : krt_run_reference(&r, &f->steps[i]);
  if (!st) krt_copy_outputs(&r);
  free(r.arena);
  return st;
}

/* ---- lowering for a CUDA architecture, with or without a device ---- */

static kiln_status krt_cuda_group(const kir_program *p, const kfuse_group *g, int index, int sm,
                                  kcg_buf *text) {
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_CUDA, sm};
  kiln_status st = kcg_emit(p, g, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcg_buf_addf(text, "\n/* ---- group %d (%s): reference executor: %s ---- */\n", index,
                 kfuse_kind_name(g->kind), kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
  const char *opts[1] = {arch};
  char *cubin = NULL;
  size_t size = 0;
  st = kcuda_nvrtc_compile(k.name, k.source, opts, 1, true, &cubin, &size);
  if (!st)
    kcg_buf_addf(text, "\n/* ---- group %d (%s): %s, %zu-byte cubin for sm_%d, %lld items ---- */\n%s",
                 index, kfuse_kind_name(g->kind), k.name, size, sm, (long long)k.n_items, k.source);
  free(cubin);
  kcg_kernel_free(&k);
  return st;
}

kiln_status krt_cuda_text(const kir_program *p, const bool *donated, int sm, char **text) {
  kfuse_plan *plan = NULL;
  char *plan_text = NULL;
  kcg_buf buf = {0};
  kiln_status st = kfuse_plan_build(p, NULL, donated, &plan);
  if (!st) st = kfuse_plan_print(plan, p, &plan_text);
  if (!st) kcg_buf_add(&buf, plan_text);
  for (int i = 0; !st && plan && i < plan->n_groups; i++)
    st = krt_cuda_group(p, &plan->groups[i], i, sm, &buf);
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
