/* Running a shard_map on the CPU virtual devices: one thread per device of
 * the mesh (the context's persistent workers, spmd_workers.c; the caller
 * waits), each running the body on its own shards (views of the global
 * buffers where a shard is one run of them) through its own executable
 * (compiled once per device and cached by the body's text; the kernel cache
 * shares the kernels), the collectives being OPAQUE steps that exchange
 * real data through the backend's threaded collectives (kdev_coll_ops'
 * run_part, as spmd_collective.c maps each equation; spmd_groups.c). A
 * device that fails reports it to every group it belongs to, so no member
 * waits for it; the call returns the first device's own error. A member
 * that does not arrive within the context's collective_timeout_s fails the
 * collective alike, and a device not finished that long after another (the
 * end of the body as an implicit barrier; a second or less after a
 * collective timed out) is abandoned: it is stuck in foreign code (a host
 * callback, a kernel, BLAS) that kiln cannot interrupt. Its thread is
 * detached and keeps a reference to this runner's state, so the frame,
 * groups and executables it may touch outlive it; the context's
 * multi-device calls fail from then on, naming the device. Bodies with
 * effects (host callbacks) run on the reference evaluators, fenced: on
 * memory of the frame's own that the caller copies in and out, so a late
 * device touches nothing of the caller's, and a host callback coming back
 * late stops its device at once. A compiled body's late device finishes the
 * step it was stuck in (a kernel, a BLAS call: its pointers are taken) and
 * stops before the next; the caller's memory its shards are views of is
 * held from reuse until it is back (kcore_hold_add). A device that makes no
 * progress (no step, no equation, no collective) for the timeout while none
 * has finished is stuck too: so a call whose every device is stuck outside
 * collectives ends as well. On a backend with collectives of its own that
 * run in lockstep (CUDA: NCCL) every shard_map runs in lockstep
 * (spmd_lockstep.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"

typedef kdist_spmd_run spmd_run;
typedef kdist_frame spmd_frame;
typedef kdist_device_run device_run;
typedef kdist_device_slot device_slot;
typedef struct kdist_spmd_state spmd_state;

/* A body's own copy, compiled once per device where it can be, found again
 * by its text and donated invars; the executables' envs point at `slots`. */
typedef struct body_entry {
  char *text;
  bool *donated; /* per body invar */
  kir_program *prog; /* the shard_map alone, parsed back from text: owns the body */
  int64_t n;
  kdev_exec **x; /* all NULL: the reference evaluators run it */
  device_slot *slots;
  pthread_mutex_t run_mu; /* one call at a time per entry: it owns the slots and frame */
  spmd_frame *frame;      /* NULL: built by the next call (after a failure, say) */
  struct body_entry *next;
} body_entry;

struct kdist_spmd_state {
  kir_eval_table table; /* the reference evaluators with shard_map on threads; ctx = this */
  kiln_ctx *ctx;        /* NULL once the context is freed (abandoned devices still run) */
  const kdev_exec_ops *exec; /* frees the entries' executables, with or without ctx */
  /* The context's and, during a call, one per device of it; an abandoned
   * device keeps its own until it comes back. The last one frees. */
  _Atomic int64_t refs;
  pthread_mutex_t mu; /* guards entries and stuck */
  body_entry *entries;
  kdist_lockstep *lockstep; /* a backend with collectives of its own: runs every shard_map */
  kdist_workers *workers;   /* made by the first call; guarded by mu until then */
  int64_t stuck;            /* the device an earlier call abandoned; -1: none */
  char stuck_why[1024];
};

/* ---- the collectives of one device ---- */

static kiln_status device_collective(device_run *dr, const kir_eqn *e, const kir_buffer *in,
                                     kir_buffer *out) {
  kdist_spmd_run *r = dr->run;
  int na, ax[KIR_MESH_MAX_AXES];
  kiln_status st = kdist_coll_axes(&r->m, e, &na, ax);
  if (st) return st;
  if (e->prim == KIR_PRIM_AXIS_INDEX) {
    int32_t v = kdist_coll_rank(&r->m, dr->coord, na, ax, NULL);
    memcpy(out[0].data, &v, sizeof v);
    return KILN_OK;
  }
  kdist_coll_groups *set = kdist_groups_find(r, na, ax);
  if (!set || !r->mesh)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: no group for axes '%s'", kir_prim_name(e->prim),
                      kir_collective_axes(e, NULL));
  int small[16][2], (*pairs)[2] = set->size <= 16 ? small : malloc((size_t)set->size * sizeof *pairs);
  if (!pairs) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kir_prim_name(e->prim));
  atomic_store(&dr->in_rendezvous, true);
  for (int k = 0; !st && k < e->n_in; k++) {
    kdev_coll c;
    kdev_buffer bi = {.ptr = (uintptr_t)in[k].data, .nbytes = in[k].nbytes};
    kdev_buffer bo = {.ptr = (uintptr_t)out[k].data, .nbytes = out[k].nbytes};
    if (!(st = kdist_coll_describe(e, &in[k].aval, &out[k].aval, set, pairs, &c)))
      st = r->coll->run_part(r->mesh, &c, (int)dr->d, &bi, &bo);
  }
  atomic_store(&dr->in_rendezvous, false);
  atomic_fetch_add(&dr->watch.steps, 1);
  if (pairs != small) free(pairs);
  if (st == KILN_ERR_COLLECTIVE && r->coll->timed_out(r->mesh, (int)dr->d)) dr->timed_out = true;
  return st;
}

static kiln_status eval_device_collective(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                          void *ctx) {
  const kir_eval_env *env = ctx;
  const device_slot *slot = env->user;
  return device_collective(slot->cur, e, in, out);
}

/* A host callback that comes back after its call gave up on the device
 * stops the device there (its frame's memory is all it could write). */
static kiln_status eval_device_host_callback(const kir_eqn *e, const kir_buffer *in,
                                             kir_buffer *out, void *ctx) {
  const kir_eval_env *env = ctx;
  const device_slot *slot = env->user;
  bool late = atomic_load(&slot->cur->run->abandoned); /* reached it after: do not enter */
  kiln_status st = late ? KILN_OK : kir_reference_evals()->fn[KIR_PRIM_HOST_CALLBACK](e, in, out, ctx);
  if (!st && (late || atomic_load(&slot->cur->run->abandoned)))
    st = kcore_fail(KILN_ERR_COLLECTIVE, "host_callback: reached after the call was abandoned");
  return st;
}

/* Any other equation, counted as the device's progress. */
static kiln_status eval_device_counted(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                       void *ctx) {
  const kir_eval_env *env = ctx;
  const device_slot *slot = env->user;
  kiln_status st = kir_reference_evals()->fn[e->prim](e, in, out, ctx);
  atomic_fetch_add(&slot->cur->watch.steps, 1);
  return st;
}

/* ---- one thread per device ---- */

static kir_eval_table device_table;
static pthread_once_t device_once = PTHREAD_ONCE_INIT;

static void device_table_build(void) {
  device_table = *kir_reference_evals();
  for (int p = 0; p < KIR_NUM_PRIMS; p++)
    if (kir_prim_get((kir_prim)p)->family == KIR_FAMILY_COLLECTIVE && p != KIR_PRIM_SHARD_MAP)
      device_table.fn[p] = eval_device_collective;
    else if (device_table.fn[p])
      device_table.fn[p] = eval_device_counted;
  /* A shard_map nested in a body runs in lockstep inside its device. */
  device_table.fn[KIR_PRIM_SHARD_MAP] = kir_reference_evals()->fn[KIR_PRIM_SHARD_MAP];
  device_table.fn[KIR_PRIM_HOST_CALLBACK] = eval_device_host_callback;
}

/* Tells every group the device is part of that it will not arrive. */
static void device_abandon(device_run *dr, const char *why) {
  if (dr->run->mesh) dr->run->coll->leave(dr->run->mesh, (int)dr->d, why);
}

static void device_main(void *arg, int i) {
  device_run *dr = &((spmd_frame *)arg)->devs[i];
  dr->st = dr->x ? dr->ops->run_host(dr->x, dr->in, dr->out, &dr->watch)
                 : kir_eval_program(&dr->env, dr->body, dr->in, dr->out);
  if (dr->st) {
    /* A collective's failure names its devices itself. */
    if (dr->st == KILN_ERR_COLLECTIVE) snprintf(dr->msg, sizeof dr->msg, "%s", kiln_last_error());
    else snprintf(dr->msg, sizeof dr->msg, "device %lld: %s", (long long)dr->d, kiln_last_error());
    device_abandon(dr, dr->msg);
  }
}

/* The others' time once device i finished: the timeout, as an implicit
 * barrier at the end of the body; after a collective timed out, the devices
 * it did not name are back at once, and the late ones had their time. */
static double device_grace(void *arg, int i) {
  const spmd_frame *f = arg;
  double t = f->run.timeout_s;
  return i >= 0 && f->devs[i].timed_out && t > 1 ? 1 : t;
}

static bool device_waiting(void *arg, int i) {
  return atomic_load(&((spmd_frame *)arg)->devs[i].in_rendezvous);
}

static uint64_t device_progress(void *arg, int i) {
  return atomic_load(&((spmd_frame *)arg)->devs[i].watch.steps);
}

/* Device i is left behind: it stops before its next step (its executable
 * and host callbacks look at `abandoned`), and the memory of the caller's
 * that its shards are views of is held (kcore_hold_add) until it is back:
 * the step it is stuck in may still write there once it returns. */
static void device_give_up(void *arg, int i) {
  spmd_frame *f = arg;
  device_run *dr = &f->devs[i];
  atomic_store(&f->run.abandoned, true);
  for (size_t k = 0; k < f->nio; k++)
    if (dr->in[k].data != f->own[(size_t)i * f->nio + k])
      kcore_hold_add(dr, dr->in[k].data, dr->in[k].nbytes);
}

static void state_unref(spmd_state *s);

/* An abandoned device's thread, back: releases the memory held for it and
 * drops the reference that kept the frame (and so its groups and
 * executables) alive. */
static void device_left(void *arg, int i) {
  spmd_frame *f = arg;
  kcore_hold_drop(&f->devs[i]);
  state_unref(f->state);
}

/* ---- the per-device executables, cached by body text ---- */

static void entry_free(const kdev_exec_ops *ops, body_entry *b) {
  kdist_frame_free(b->frame);
  for (int64_t d = 0; b->x && d < b->n; d++)
    if (b->x[d]) ops->free(b->x[d]);
  kir_program_free(b->prog);
  pthread_mutex_destroy(&b->run_mu);
  free(b->x), free(b->slots), free(b->text), free(b->donated), free(b);
}

/* compile: build the per-device executables (else the body runs on the
 * reference evaluators, from the entry's own copy). */
static kiln_status entry_build(spmd_state *s, const char *text, int n_in, const bool *donated,
                               int64_t n, bool compile, body_entry **out) {
  kiln_ctx *ctx = s->ctx;
  body_entry *b = calloc(1, sizeof *b);
  kcache *cache = NULL;
  kiln_status st = b ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) {
    pthread_mutex_init(&b->run_mu, NULL);
    b->n = n;
    b->text = kcore_strdup(text);
    b->x = calloc((size_t)n, sizeof *b->x);
    b->slots = calloc((size_t)n, sizeof *b->slots);
    b->donated = calloc((size_t)n_in + 1, sizeof *b->donated);
    if (!b->text || !b->x || !b->slots || !b->donated)
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  }
  if (!st && donated) memcpy(b->donated, donated, (size_t)n_in * sizeof *donated);
  if (!st) st = kir_parse(text, &b->prog);
  if (!st) st = krt_ctx_kcache(ctx, &cache);
  const kir_program *body = st ? NULL : b->prog->eqns[0].params.shard_map.jaxpr;
  for (int64_t d = 0; !st && compile && d < n; d++) {
    kir_eval_env env;
    kir_eval_env_init(&env, &device_table);
    env.user = &b->slots[d];
    kdev_build build = {.name = "shard_map body", .prog = body, .donated = b->donated, .env = &env,
                        .cache = cache, .config = &ctx->config};
    st = ctx->be.exec->build(&ctx->be.devices[d], &build, &b->x[d]);
  }
  if (st) {
    if (b) entry_free(s->exec, b);
    return kcore_fail_wrap(st, "compiling a shard_map body");
  }
  *out = b;
  return KILN_OK;
}

/* The body's cache entry for these donated invars (NULL: none): its own
 * copy of the body, its frame, and its executables (x[0] NULL: it runs on
 * the reference evaluators: it has effects, or the backend builds none).
 * NULL without a state. */
static kiln_status entry_get(spmd_state *s, const kir_eqn *e, const kir_buffer *in,
                             const kir_buffer *out, const bool *donated, int64_t n,
                             body_entry **found) {
  const kir_program *body = e->params.shard_map.jaxpr;
  size_t mask = (size_t)body->n_invars * sizeof *donated;
  *found = NULL;
  if (!s) return KILN_OK;
  bool compile = s->ctx->be.exec && !kir_program_has_effect(body) && n <= s->ctx->be.num_devices;
  kiln_status st = KILN_OK;
  char *text = kdist_shard_map_text(e, in, out);
  if (!text) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  pthread_mutex_lock(&s->mu);
  body_entry *b = s->entries;
  while (b && (b->n != n || strcmp(b->text, text) ||
               (donated ? memcmp(b->donated, donated, mask) : !!memchr(b->donated, true, mask))))
    b = b->next;
  if (!b && !(st = entry_build(s, text, body->n_invars, donated, n, compile, &b))) {
    b->next = s->entries;
    s->entries = b;
  }
  pthread_mutex_unlock(&s->mu);
  free(text);
  if (!st) *found = b;
  return st;
}

static void state_unref(spmd_state *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  while (s->entries) {
    body_entry *next = s->entries->next;
    entry_free(s->exec, s->entries);
    s->entries = next;
  }
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* The context's free: joins the idle workers. Devices an earlier call
 * abandoned are not waited for (one may never come back, and the process
 * must still exit): their threads are detached, and the last one back frees
 * the state (nothing of the context's is needed for that). */
static void state_free(void *p) {
  spmd_state *s = p;
  kdist_lockstep_free(s->lockstep);
  kdist_workers_free(s->workers);
  int64_t out = atomic_load(&s->refs) - 1; /* no call runs: the abandoned devices' */
  if (out > 0)
    kcore_log(s->ctx->config.opts.log_level, KILN_LOG_WARN, "kiln_ctx_free: %lld device(s) of "
              "an abandoned shard_map (the first: device %lld) are still stuck; their threads "
              "are left running, detached", (long long)out, (long long)s->stuck);
  s->ctx = NULL;
  state_unref(s);
}

/* Runs the frame's call; in and out are the global values, or NULL where
 * every device's buffers are bound already. *stuck: the first device left
 * behind (-1: none). */
static kiln_status frame_run(spmd_frame *f, spmd_state *state, const kir_eval_env *env,
                             const kir_eqn *e, body_entry *entry, const kir_buffer *in,
                             kir_buffer *out, int64_t *stuck) {
  const kir_program *body = e->params.shard_map.jaxpr;
  int n_in = body->n_invars;
  kiln_status st = KILN_OK;
  *stuck = -1;
  bool hosts = env->host_call == krt_host_call;
  if (hosts && (st = kdist_frame_hosts(f, env->host_user))) return st;
  for (int64_t d = 0; !st && d < f->run.n; d++) {
    device_run *dr = &f->devs[d];
    dr->env = *env, dr->own.cur = dr, dr->st = KILN_OK, dr->timed_out = false, dr->msg[0] = 0;
    dr->watch.cancel = &f->run.abandoned;
    dr->env.table = &device_table, dr->env.user = &dr->own;
    if (hosts) dr->env.host_user = &f->hosts;
    if (entry) {
      dr->x = entry->x[d], dr->ops = state->ctx->be.exec;
      entry->slots[d].cur = dr;
    }
    for (size_t k = 0; !st && in && k < f->nio; k++)
      st = kdist_frame_bind(f, d, k, k < (size_t)n_in ? &in[k] : &out[k - (size_t)n_in], in, n_in);
  }
  if (st) return st;
  kdist_call call = {device_main,     device_grace,   device_waiting,
                     device_progress, device_give_up, device_left,    f};
  /* Every device holds a reference for the call; the abandoned keep theirs. */
  if (state) atomic_fetch_add(&state->refs, f->run.n);
  st = kdist_workers_run(state ? state->workers : NULL, (int)f->run.n, &call, f->left);
  int64_t n_left = 0;
  for (int64_t d = 0; !st && d < f->run.n; d++)
    if (f->left[d] && n_left++ == 0) *stuck = d;
  if (state) atomic_fetch_sub(&state->refs, f->run.n - n_left);
  if (!st) st = kdist_frame_error(f, e, *stuck);
  for (int k = 0; !st && in && k < body->n_outvars; k++)
    for (int64_t d = 0; d < f->run.n; d++) {
      const kir_spec *spec = &f->specs[n_in + k];
      if (kir_shard_writes_back(&f->run.m, f->devs[d].coord, spec) &&
          f->devs[d].out[k].data == f->own[(size_t)d * f->nio + (size_t)(n_in + k)])
        kir_shard_copy(&f->run.m, f->devs[d].coord, spec, &out[k], &f->devs[d].out[k], true);
    }
  return st;
}

static kiln_status workers_get(spmd_state *s) {
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&s->mu);
  if (!s->workers && s->ctx->be.num_devices > 1)
    st = kdist_workers_new(s->ctx->be.num_devices, &s->workers);
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* KILN_ERR_COLLECTIVE once a call of the context left a device behind. */
static kiln_status state_check(spmd_state *s) {
  if (!s) return KILN_OK;
  pthread_mutex_lock(&s->mu);
  int64_t stuck = s->stuck;
  char why[sizeof s->stuck_why];
  memcpy(why, s->stuck_why, sizeof why);
  pthread_mutex_unlock(&s->mu);
  if (stuck < 0) return KILN_OK;
  return kcore_fail(KILN_ERR_COLLECTIVE, "shard_map: an earlier call on this context was "
                    "abandoned because device %lld was stuck (%s); its multi-device calls fail "
                    "from now on (single-device work still runs; a new context starts afresh)",
                    (long long)stuck, why);
}

/* Binds each device's buffers (from the global in/out, or from the shards
 * themselves: local) and runs the call on the entry's frame (one of its own
 * without a state). A frame whose call left a device behind stays with its
 * entry (the device may still use it); the state frees it. */
static kiln_status run_call(spmd_state *state, const kir_eval_env *env, const kir_eqn *e,
                            const kir_buffer *in, kir_buffer *out, const bool *donated,
                            void *const *local) {
  kir_mesh m;
  kiln_status st = kir_mesh_parse("shard_map", e->params.shard_map.mesh, &m);
  pthread_once(&device_once, device_table_build);
  body_entry *entry = NULL;
  spmd_frame *f = NULL;
  if (!st) st = state_check(state);
  if (!st) st = entry_get(state, e, in, out, donated, m.n_devices, &entry);
  if (!st && state) st = workers_get(state);
  if (st) return st;
  /* The entry's copy of the equation: a late device may outlive the caller's. */
  const kir_eqn *own = entry ? &entry->prog->eqns[0] : e;
  bool fenced = !entry || !entry->x[0];
  if (entry) pthread_mutex_lock(&entry->run_mu);
  if (entry) st = state_check(state);
  if (!st && entry && entry->frame) f = entry->frame;
  else if (!st) st = kdist_frame_new(&own->params.shard_map, state, state ? &state->ctx->be : NULL,
                                      state ? state->ctx->config.opts.collective_timeout_s
                                            : KCORE_DEFAULT_COLLECTIVE_TIMEOUT_S,
                                      fenced, &f);
  if (entry && !st) entry->frame = f;
  int n_in = own->params.shard_map.jaxpr->n_invars;
  for (size_t i = 0; !st && local && !fenced && i < (size_t)m.n_devices * f->nio; i++)
    f->bufs[i].data = local[i];
  if (!st && local && fenced) st = kdist_frame_fence(f, n_in, local, false);
  int64_t stuck = -1;
  if (!st) st = frame_run(f, state, env, own, entry, local ? NULL : in, local ? NULL : out, &stuck);
  if (!st && local && fenced) kdist_frame_fence(f, n_in, local, true);
  if (stuck >= 0 && state) {
    pthread_mutex_lock(&state->mu);
    if (state->stuck < 0) {
      state->stuck = stuck;
      snprintf(state->stuck_why, sizeof state->stuck_why, "%s", f->why);
    }
    pthread_mutex_unlock(&state->mu);
  }
  /* After a failure its groups may be broken: the next call builds them
   * again. With a device left behind it stays (without a state: leaked). */
  if (f && stuck < 0 && entry && st) entry->frame = NULL;
  if (f && stuck < 0 && (!entry || st)) kdist_frame_free(f);
  if (entry) pthread_mutex_unlock(&entry->run_mu);
  return st;
}

static kiln_status eval_shard_map_threads(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                          void *ctx) {
  const kir_eval_env *env = ctx;
  spmd_state *state = env->user;
  if (state && state->lockstep) return kdist_lockstep_run(state->lockstep, e, in, out);
  return run_call(state, env, e, in, out, NULL, NULL);
}

static spmd_state *local_state(kiln_ctx *ctx) {
  spmd_state *state = ctx->spmd_state;
  if (!state || state->lockstep)
    kcore_fail(KILN_ERR_INTERNAL, "shard_map: no CPU runner for a call over its shards");
  return state && !state->lockstep ? state : NULL;
}

kiln_status kdist_spmd_donors(kiln_ctx *ctx, const kir_eqn *e, const kir_buffer *in,
                              const kir_buffer *out, const bool *donated, int *donor) {
  spmd_state *state = local_state(ctx);
  body_entry *entry = NULL;
  kir_mesh m;
  kiln_status st =
      !state ? KILN_ERR_INTERNAL : kir_mesh_parse("shard_map", e->params.shard_map.mesh, &m);
  if (!st) st = entry_get(state, e, in, out, donated, m.n_devices, &entry);
  const kir_program *body = e->params.shard_map.jaxpr;
  for (int k = 0; k < body->n_outvars; k++) {
    bool compiled = !st && entry && entry->x[0];
    donor[k] = compiled ? state->ctx->be.exec->output_donor(entry->x[0], k) : -1;
    /* The reference evaluators write outputs last (invars among them
     * first): any donated invar of the type will do. */
    for (int j = 0; !st && !compiled && donated && kdist_invar_index(body, body->outvars[k]) < 0 &&
                    donor[k] < 0 && j < body->n_invars; j++) {
      bool taken = false;
      for (int i = 0; i < k; i++) taken |= donor[i] == j;
      if (donated[j] && !taken && kir_aval_typematch(kir_var_aval(body, body->invars[j]),
                                                     kir_var_aval(body, body->outvars[k])))
        donor[k] = j;
    }
  }
  return st;
}

kiln_status kdist_spmd_run_local(kiln_ctx *ctx, const kir_eval_env *env, const kir_eqn *e,
                                 const kir_buffer *in, kir_buffer *out, const bool *donated,
                                 void *const *local) {
  spmd_state *state = local_state(ctx);
  if (!state) return KILN_ERR_INTERNAL;
  kir_eval_env own = *env;
  own.table = &state->table, own.user = state;
  return run_call(state, &own, e, in, out, donated, local);
}

kiln_status kdist_spmd_install(kiln_ctx *ctx) {
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER; /* guards the install only */
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&once);
  if (!ctx->spmd_state) {
    spmd_state *s = calloc(1, sizeof *s);
    if (!s) {
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_shard_map: out of host memory");
    } else if (!(ctx->be.caps & KDEV_CAP_HOST_MEMORY) &&
               (st = !ctx->be.coll || !ctx->be.coll->run ? kcore_fail(KILN_ERR_UNIMPLEMENTED, "kiln_shard_map: the %s "
                                                "backend runs no collectives",
                                                kiln_backend_name(ctx->be.kind))
                                   : kdist_lockstep_new(ctx, &s->lockstep))) {
      free(s);
    } else {
      s->table = *kir_reference_evals();
      s->table.fn[KIR_PRIM_SHARD_MAP] = eval_shard_map_threads;
      s->table.ctx = s;
      s->ctx = ctx, s->exec = ctx->be.exec, s->stuck = -1;
      atomic_init(&s->refs, 1);
      pthread_mutex_init(&s->mu, NULL);
      ctx->spmd_state = s;
      ctx->spmd_free = state_free;
      atomic_store(&ctx->spmd_evals, &s->table);
    }
  }
  pthread_mutex_unlock(&once);
  return st;
}
