/* The CPU backend's executables (the C target): the fusion plan's LOOP,
 * REDUCE and ROW groups, and OPAQUE groups of one window op, pad or argmax
 * (codegen's kcg_emit_lone), become C kernels compiled by the host compiler
 * (through the kernel cache) and split across the device's threads; DOT and
 * other OPAQUE groups, and any group the emitter declines, run on the
 * reference evaluators. Executables run on host views the runtime prepares (run_host):
 * CPU device memory is host memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* Work items below which a kernel call is not split across threads, in
 * elements touched. */
#define KCPU_MIN_CHUNK_ELEMENTS 32768
/* Kernels over fewer elements than this compile at -O2 (after the base
 * flags' -O3, so it wins): they run for microseconds either way, and -O3
 * costs a small kernel a quarter more compile time (gcc 12). */
#define KCPU_O2_ELEMENTS 16384
static const char *const kcpu_small_kernel_options[] = {"-O2"};

/* The backend's compiler and threads, made on the first build. */
struct kcpu_state {
  pthread_mutex_t mu;
  bool tried;
  kiln_status status; /* why the C target is unavailable */
  int n_devices;
  int *threads;       /* per device: its share of the cores */
  kcpu_cc *cc;
  kcpu_pool **pools;  /* per device */
};

typedef struct kcpu_step {
  const kfuse_group *g;
  kcpu_cc_module *module;
  kcg_c_kernel_fn fn; /* NULL: the group's equations on the reference evaluators */
  char *source;
  int64_t min_chunk;
  int64_t n_items; /* the kernel's work items (rows, for a LOOP run as rows) */
  size_t scratch_bytes; /* a split reduction's counters and partials, zeroed per call */
} kcpu_step;

struct kdev_exec {
  const kir_program *prog;
  kir_eval_env env; /* a copy of the build's */
  kfuse_plan *plan;
  int n_steps;
  kcpu_step *steps;
  kfuse_consts consts;
  kcpu_pool *pool;
  /* The temporaries' arena of the last run, kept for the next: freed and
   * allocated anew each step, tens of MB came back as fresh pages, and the
   * page faults cost a tenth of a training step. A run takes it (or, while
   * another run holds it, allocates its own) and leaves it back. */
  _Atomic(void *) arena;
};

kiln_status kcpu_state_new(const kdev_backend *b, kcpu_state **out) {
  kcpu_state *s = calloc(1, sizeof *s);
  int n = b->num_devices > 0 ? b->num_devices : 1;
  if (s) s->threads = calloc((size_t)n, sizeof *s->threads);
  if (s && s->threads) s->pools = calloc((size_t)n, sizeof *s->pools);
  if (!s || !s->pools) {
    if (s) free(s->threads);
    free(s);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
  }
  pthread_mutex_init(&s->mu, NULL);
  s->n_devices = n;
  for (int i = 0; i < n; i++) {
    int t = i < b->num_devices ? b->devices[i].info.multiprocessors : 1;
    s->threads[i] = t > 0 ? t : 1;
  }
  *out = s;
  return KILN_OK;
}

void kcpu_state_free(kcpu_state *s) {
  if (!s) return;
  for (int i = 0; i < s->n_devices; i++) kcpu_pool_free(s->pools[i]);
  free(s->pools);
  free(s->threads);
  kcpu_cc_free(s->cc);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* The host compiler and threads, or the reason there are none. */
static kiln_status kcpu_state_ready(kcpu_state *s, const kcore_config *config) {
  pthread_mutex_lock(&s->mu);
  if (!s->tried) {
    s->tried = true;
    const kiln_options *o = &config->opts;
    s->status = kcpu_cc_new(o->dump_dir, o->log_level, &s->cc);
    for (int i = 0; !s->status && i < s->n_devices; i++)
      s->status = kcpu_pool_new(s->threads[i], &s->pools[i]);
    if (s->status)
      kcore_log(o->log_level, KILN_LOG_INFO,
                "fused C kernels unavailable, using the reference executor: %s",
                kiln_last_error());
  }
  kiln_status st = s->status;
  pthread_mutex_unlock(&s->mu);
  return st;
}

static void kcpu_exec_free(kdev_exec *x) {
  if (!x) return;
  for (int i = 0; i < x->n_steps; i++) {
    kcpu_cc_unload(x->steps[i].module);
    free(x->steps[i].source);
  }
  kfuse_consts_free(&x->consts);
  free(x->steps);
  kfuse_plan_free(x->plan);
  free(atomic_load(&x->arena));
  free(x);
}

static int64_t kcpu_min_chunk(const kcg_kernel *k) {
  if (k->split > 1) return 1; /* each work item is a share of a long reduction */
  int64_t per_item = k->row_length > 0 ? k->row_length : 1;
  int64_t chunk = KCPU_MIN_CHUNK_ELEMENTS / per_item;
  return chunk > 0 ? chunk : 1;
}

/* The most elements any operand or result of the group has. */
static int64_t kcpu_group_elements(const kir_program *p, const kfuse_group *g) {
  int64_t most = 0;
  for (int i = 0; i < g->n_in + g->n_out; i++) {
    int64_t n = kir_aval_size(kir_var_aval(p, i < g->n_in ? g->in[i] : g->out[i - g->n_in]));
    if (n > most) most = n;
  }
  return most;
}

/* Emits and compiles one group; a group the emitter declines stays on the
 * reference evaluators. */
static kiln_status kcpu_step_build(kcpu_state *s, const kdev_build *b, const kfuse_group *grp,
                                   kcpu_step *step) {
  step->g = grp;
  const kir_eqn *lone = kcg_lone_eqn(b->prog, grp);
  if (!lone && grp->kind != KFUSE_LOOP && grp->kind != KFUSE_REDUCE && grp->kind != KFUSE_ROW)
    return KILN_OK;
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_C, 0};
  kiln_status st = lone ? kcg_emit_lone(b->prog, lone, &target, &k)
                        : kcg_emit(b->prog, grp, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcore_log(b->config->opts.log_level, KILN_LOG_DEBUG,
              "fuse: a %s group stays on the reference executor: %s", kfuse_kind_name(grp->kind),
              kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  void *sym = NULL;
  bool small = kcpu_group_elements(b->prog, grp) < KCPU_O2_ELEMENTS;
  st = kcpu_cc_jit(s->cc, b->cache, k.name, k.source, small ? kcpu_small_kernel_options : NULL,
                   small ? 1 : 0, &step->module);
  if (!st) st = kcpu_cc_symbol(step->module, k.name, &sym);
  if (!st) {
    step->fn = (kcg_c_kernel_fn)sym;
    step->min_chunk = kcpu_min_chunk(&k);
    step->n_items = k.n_items;
    step->scratch_bytes = (size_t)k.scratch_bytes;
    step->source = k.source;
    k.source = NULL;
  }
  kcg_kernel_free(&k);
  return st;
}

static kiln_status kcpu_exec_build(kiln_device *dev, const kdev_build *b, kdev_exec **out) {
  *out = NULL;
  kcpu_state *s = dev->backend->state;
  if (b->config->opts.executor == KILN_EXECUTOR_REFERENCE) return KILN_OK;
  if (kcpu_state_ready(s, b->config)) {
    kiln_clear_error();
    return KILN_OK; /* no compiler: the reference executor runs */
  }
  kdev_exec *x = calloc(1, sizeof *x);
  if (!x) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  x->prog = b->prog;
  x->env = *b->env;
  x->pool = s->pools[dev->index];
  kfuse_options fo;
  kfuse_options_default(&fo);
  fo.fuse = b->config->opts.executor != KILN_EXECUTOR_UNFUSED; /* one kernel per primitive */
  kiln_status st = kfuse_plan_build(b->prog, &fo, b->donated, &x->plan);
  if (!st && !(x->steps = calloc((size_t)(x->plan->n_groups + 1), sizeof *x->steps)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  for (int i = 0; !st && i < x->plan->n_groups; i++, x->n_steps++)
    st = kcpu_step_build(s, b, &x->plan->groups[i], &x->steps[i]);
  if (!st) st = kfuse_consts_init(&x->consts, x->plan, b->prog);
  if (st) {
    kcpu_exec_free(x);
    return kcore_fail_wrap(st, "fusing %s", b->name);
  }
  *out = x;
  return KILN_OK;
}

static int kcpu_exec_output_donor(const kdev_exec *x, int k) { return x->plan->output_donor[k]; }

static kiln_status kcpu_exec_describe(const kdev_exec *x, char **text) {
  char *plan = NULL;
  kiln_status st = kfuse_plan_print(x->plan, x->prog, &plan);
  if (st) return st;
  size_t len = strlen(plan) + 1;
  for (int i = 0; i < x->n_steps; i++)
    if (x->steps[i].source) len += strlen(x->steps[i].source) + 64;
  char *out = malloc(len);
  if (!out) {
    free(plan);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "as_text: out of host memory");
  }
  size_t n = (size_t)snprintf(out, len, "%s", plan);
  for (int i = 0; i < x->n_steps; i++)
    if (x->steps[i].source)
      n += (size_t)snprintf(out + n, len - n, "\n/* ---- group %d ---- */\n%s", i,
                            x->steps[i].source);
  free(plan);
  *text = out;
  return KILN_OK;
}

/* ---- running ---- */

typedef struct kcpu_run {
  const kdev_exec *x;
  const kir_buffer *in;
  kir_buffer *out;
  char *arena;
} kcpu_run;

static char kcpu_empty[1]; /* the address of zero-size data */

static void *kcpu_addr(const kcpu_run *r, kir_vid v) {
  kfuse_place pl = r->x->plan->places[v];
  void *a = NULL;
  switch (pl.home) {
    case KFUSE_HOME_INPUT: a = r->in[pl.index].data; break;
    case KFUSE_HOME_CONST: a = r->x->consts.data[v]; break;
    case KFUSE_HOME_OUTPUT: a = r->out[pl.index].data; break;
    case KFUSE_HOME_SLOT: a = r->arena + r->x->plan->slot_offset[pl.index]; break;
    default: break;
  }
  return a ? a : kcpu_empty;
}

static void *kcpu_addr_of(void *user, kir_vid v) { return kcpu_addr(user, v); }

typedef struct kcpu_launch {
  kcg_c_kernel_fn fn;
  kiln_kernel_args args;
} kcpu_launch;

static kiln_status kcpu_launch_range(void *user, int64_t begin, int64_t end) {
  kcpu_launch *l = user;
  l->fn(l->args, begin, end);
  return KILN_OK;
}

static kiln_status kcpu_run_kernel(const kcpu_run *r, const kcpu_step *s) {
  const kfuse_group *g = s->g;
  kcpu_launch l = {.fn = s->fn};
  for (int i = 0; i < g->n_in; i++) l.args.ptr[i] = kcpu_addr(r, g->in[i]);
  for (int i = 0; i < g->n_out; i++) l.args.ptr[g->n_in + i] = kcpu_addr(r, g->out[i]);
  void *scratch = NULL;
  if (s->scratch_bytes && !(scratch = calloc(1, s->scratch_bytes)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY,
                      "execute: out of host memory for %zu bytes of reduction scratch",
                      s->scratch_bytes);
  if (scratch) l.args.ptr[g->n_in + g->n_out] = scratch; /* see kcg_kernel.scratch_bytes */
  kiln_status st =
      kcpu_pool_parallel_for(r->x->pool, 0, s->n_items, s->min_chunk, kcpu_launch_range, &l);
  free(scratch);
  return st;
}

/* Program outputs the plan did not write in place: inputs, constants and
 * repeated outputs are copied (inputs first, as donation needs). */
static void kcpu_copy_outputs(const kcpu_run *r) {
  const kir_program *p = r->x->prog;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < p->n_outvars; k++) {
      kir_vid v = p->outvars[k];
      kfuse_place pl = r->x->plan->places[v];
      if (pl.home == KFUSE_HOME_OUTPUT && pl.index == k) continue;
      if ((pl.home == KFUSE_HOME_INPUT) != (pass == 0) || r->out[k].nbytes == 0) continue;
      void *src = kcpu_addr(r, v);
      if (src != r->out[k].data) memmove(r->out[k].data, src, r->out[k].nbytes);
    }
}

static bool kcpu_cancelled(const kdev_watch *w) { return w && w->cancel && atomic_load(w->cancel); }

static kiln_status kcpu_exec_run_host(kdev_exec *x, const kir_buffer *in, kir_buffer *out,
                                      kdev_watch *watch) {
  kcpu_run r = {x, in, out, NULL};
  size_t arena = x->plan->arena_bytes;
  if (arena && !(r.arena = atomic_exchange(&x->arena, NULL)) &&
      !(r.arena = aligned_alloc(KFUSE_SLOT_ALIGN, (arena + KFUSE_SLOT_ALIGN - 1) /
                                                      KFUSE_SLOT_ALIGN * KFUSE_SLOT_ALIGN)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu temporary bytes",
                      arena);
  kiln_status st = KILN_OK;
  for (int i = 0; i < x->n_steps && !st; i++) {
    if (kcpu_cancelled(watch))
      st = kcore_fail(KILN_ERR_COLLECTIVE, "execute: given up by its caller before step %d", i);
    else
      st = x->steps[i].fn ? kcpu_run_kernel(&r, &x->steps[i])
                          : kfuse_eval_group(x->prog, x->plan, x->steps[i].g, &x->env,
                                             kcpu_addr_of, &r);
    if (watch) atomic_fetch_add(&watch->steps, 1);
  }
  if (!st && kcpu_cancelled(watch)) st = kcore_fail(KILN_ERR_COLLECTIVE, "execute: given up by its caller");
  if (!st) kcpu_copy_outputs(&r);
  /* An arena that a thread given up on may still write is not reused. */
  void *none = NULL;
  if (r.arena && !kcore_hold_defer_free(r.arena, arena) &&
      !atomic_compare_exchange_strong(&x->arena, &none, r.arena))
    free(r.arena);
  return st;
}

const kdev_exec_ops kcpu_exec_ops = {
    .build = kcpu_exec_build,
    .run_host = kcpu_exec_run_host,
    .output_donor = kcpu_exec_output_donor,
    .describe = kcpu_exec_describe,
    .free = kcpu_exec_free,
};
