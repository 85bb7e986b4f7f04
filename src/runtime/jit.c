/* jit: programs cached by (argument structure, avals, static key, the
 * leaves' shardings) for one function on one device. Each signature is
 * traced and compiled once, even when many threads call at the same time.
 * Calls with sharded leaves, or a jit with in/out shardings, run through
 * the hooks src/dist lends the context (krt_shard_hooks). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"
#include "tree/tree.h"

typedef enum krt_entry_state { KRT_BUILDING, KRT_READY, KRT_FAILED } krt_entry_state;

typedef struct krt_entry {
  krt_entry_state state;
  krt_signature key;      /* what the entry was built for */
  kiln_compiled compiled; /* READY */
  kiln_status status;     /* FAILED */
  char *error;
  struct krt_entry *next;
} krt_entry;

struct kiln_jit {
  kiln_ctx *ctx;
  kiln_device *dev;
  const kiln_func *f;
  void *static_key;
  size_t static_key_size;
  int *donate;
  int num_donate;
  void *shard_opts; /* the hooks' copy of in/out shardings; NULL: none */
  pthread_mutex_t mu;
  pthread_cond_t built;
  krt_entry *entries;
  _Atomic int64_t compiles;
};

kiln_status kiln_jit_new(kiln_ctx *ctx, const kiln_func *f, const kiln_jit_options *opts,
                         kiln_jit **out) {
  static const char op[] = "kiln_jit_new";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!ctx || !f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: ctx or f is NULL", op);
  kiln_jit_options o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  if (o.num_donate < 0 || (o.num_donate > 0 && !o.donate_argnums) ||
      (o.static_key_size > 0 && !o.static_key))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: donate_argnums or static_key is inconsistent", op);
  for (int i = 0; i < o.num_donate; i++)
    if (o.donate_argnums[i] < 0)
      return kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: donate_argnums[%d]=%d is negative", op, i,
                        o.donate_argnums[i]);
  kiln_device *dev;
  kiln_status st = kiln_device_get(ctx, o.device, &dev);
  if (st) return kcore_fail_wrap(st, "%s", op);
  void *shard_opts = NULL;
  if (o.num_in_shardings || o.num_out_shardings) {
    const krt_shard_hooks *h = atomic_load(&ctx->shard_hooks);
    if (!h) /* a sharding of this context installs the hooks */
      return kcore_fail(KILN_ERR_WRONG_DEVICE, "%s: in_shardings/out_shardings are given but no "
                        "mesh or sharding was made in this context", op);
    if ((st = h->opts_copy(ctx, &o, &shard_opts))) return st;
  }
  kiln_jit *j = calloc(1, sizeof *j);
  if (!j) {
    if (shard_opts) atomic_load(&ctx->shard_hooks)->opts_free(shard_opts);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->built, NULL);
  j->ctx = ctx;
  j->shard_opts = shard_opts;
  j->static_key = o.static_key_size ? malloc(o.static_key_size) : NULL;
  j->donate = o.num_donate ? malloc((size_t)o.num_donate * sizeof *j->donate) : NULL;
  if ((o.static_key_size && !j->static_key) || (o.num_donate && !j->donate)) {
    kiln_jit_free(j);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  if (o.static_key_size) memcpy(j->static_key, o.static_key, o.static_key_size);
  if (o.num_donate) memcpy(j->donate, o.donate_argnums, (size_t)o.num_donate * sizeof *j->donate);
  j->static_key_size = o.static_key_size;
  j->num_donate = o.num_donate;
  j->dev = dev;
  j->f = f;
  *out = j;
  return KILN_OK;
}

static void krt_entry_free(krt_entry *e) {
  if (e->state == KRT_READY) krt_compiled_release(&e->compiled);
  krt_signature_free(&e->key);
  free(e->error);
  free(e);
}

void kiln_jit_free(kiln_jit *j) {
  if (!j) return;
  for (krt_entry *e = j->entries, *next; e; e = next) {
    next = e->next;
    krt_entry_free(e);
  }
  pthread_cond_destroy(&j->built);
  pthread_mutex_destroy(&j->mu);
  if (j->shard_opts) atomic_load(&j->ctx->shard_hooks)->opts_free(j->shard_opts);
  free(j->static_key);
  free(j->donate);
  free(j);
}

int64_t kiln_jit_compile_count(const kiln_jit *j) {
  return j ? atomic_load(&((kiln_jit *)j)->compiles) : 0;
}

/* ---- signatures ---- */

static bool krt_signature_equal(const krt_signature *a, const krt_signature *b) {
  if (a->hash != b->hash || a->n != b->n || a->static_key_size != b->static_key_size) return false;
  if (!a->layout != !b->layout || (a->layout && strcmp(a->layout, b->layout))) return false;
  for (int i = 0; i < a->n; i++)
    if (!kir_aval_equal(&a->avals[i], &b->avals[i])) return false;
  return kiln_treedef_equal(a->def, b->def) &&
         (a->static_key_size == 0 || memcmp(a->static_key, b->static_key, a->static_key_size) == 0);
}

/* Why `sig` misses the cache, for KILN_LOG=info: compared with the most
 * recent entry. */
static void krt_explain_miss(const kiln_jit *j, const krt_signature *sig, char *buf, size_t cap) {
  const krt_entry *e = j->entries;
  while (e && e->state != KRT_READY) e = e->next;
  if (!e) {
    snprintf(buf, cap, "first call");
    return;
  }
  const krt_signature *old = &e->key;
  if (!kiln_treedef_equal(old->def, sig->def)) {
    char diff[256];
    kiln_treedef_diff(old->def, sig->def, diff, sizeof diff);
    snprintf(buf, cap, "the argument structure differs from a cached one: %s", diff);
    return;
  }
  for (int i = 0; i < sig->n; i++)
    if (!kir_aval_equal(&old->avals[i], &sig->avals[i])) {
      char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
      snprintf(buf, cap, "argument leaf %d is %s, a cached program has %s", i,
               kir_aval_str(&sig->avals[i], a, sizeof a), kir_aval_str(&old->avals[i], b, sizeof b));
      return;
    }
  if (!old->layout != !sig->layout || (old->layout && strcmp(old->layout, sig->layout)))
    snprintf(buf, cap, "the arguments' shardings differ from a cached program's: %s",
             sig->layout ? sig->layout : "none");
  else
    snprintf(buf, cap, "the static key differs (%zu bytes)", sig->static_key_size);
}

/* The signature of a call: its leaves' shardings too, where the context
 * has any. */
static kiln_status krt_jit_signature(const kiln_jit *j, const char *op, const kiln_tree *args,
                                     krt_signature *sig) {
  kiln_status st = krt_signature_of(op, args, j->static_key, j->static_key_size, sig);
  const krt_shard_hooks *h = atomic_load(&j->ctx->shard_hooks);
  if (st || !h) return st;
  if ((st = h->layout(j->shard_opts, j->f, args, j->dev, &sig->layout))) {
    krt_signature_free(sig);
    return st;
  }
  if (sig->layout) sig->hash = kcore_hash_bytes(sig->hash, sig->layout, strlen(sig->layout));
  return KILN_OK;
}

/* Marks the leaves of the donated top-level arguments. */
static kiln_status krt_donation_mask(const kiln_jit *j, const kiln_tree *args, int n, bool **out) {
  bool *mask = calloc(n ? (size_t)n : 1, sizeof *mask);
  if (!mask) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_call: out of host memory");
  size_t nargs = kiln_tree_num_children(args);
  for (int d = 0; d < j->num_donate; d++) {
    size_t arg = (size_t)j->donate[d];
    if (arg >= nargs || kiln_tree_kind(args) == KILN_NODE_LEAF) {
      free(mask);
      return kcore_fail(KILN_ERR_OUT_OF_RANGE, "kiln_jit_call: donate_argnums has %zu but the "
                        "arguments have %zu top-level entries", arg, nargs);
    }
    size_t first = 0;
    for (size_t c = 0; c < arg; c++) first += kiln_tree_num_leaves(kiln_tree_child(args, c));
    size_t count = kiln_tree_num_leaves(kiln_tree_child(args, arg));
    for (size_t i = first; i < first + count; i++) mask[i] = true;
  }
  *out = mask;
  return KILN_OK;
}

/* Traces and compiles for sig; on success the entry owns the program. */
/* Traces for sig into p, with its donation mask; a sharded signature is
 * prepared by the shard hooks (which keep the donations they can honour). */
static kiln_status krt_jit_trace(kiln_jit *j, const kiln_tree *args, const krt_signature *sig,
                                 krt_program *p) {
  kiln_status st = krt_trace(j->ctx, j->dev, j->f, sig, p);
  if (st) return st;
  if ((st = krt_signature_clone(sig, &p->sig))) return st;
  if ((st = krt_donation_mask(j, args, p->sig.n, &p->donated)) || !sig->layout) return st;
  return atomic_load(&j->ctx->shard_hooks)->prepare(j->shard_opts, args, p);
}

/* krt_compile, or the shard hooks' for a prepared program. */
static kiln_status krt_jit_compile(krt_program *p, kiln_compiled *c) {
  if (p->shard_state) return atomic_load(&p->ctx->shard_hooks)->compile(p, c);
  return krt_compile(p, c, true);
}

static kiln_status krt_run_unchecked(const kiln_compiled *c, const kiln_tree *args,
                                     kiln_tree **out) {
  if (c->p.shard_state) return atomic_load(&c->p.ctx->shard_hooks)->call(c, args, out);
  return krt_call_compiled(c, args, out);
}

/* Every jitted call runs here: with KILN_DEBUG_NANS on its results are
 * checked (off, nothing is scanned). */
static kiln_status krt_jit_run(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out) {
  if (c->p.ctx->config.opts.debug_nans == KILN_DEBUG_NANS_ON)
    return krt_debug_nans_run(c, args, krt_run_unchecked, out);
  return krt_run_unchecked(c, args, out);
}

static kiln_status krt_build(kiln_jit *j, const kiln_tree *args, krt_entry *e) {
  krt_program p;
  kiln_status st = krt_jit_trace(j, args, &e->key, &p);
  if (!st) st = krt_jit_compile(&p, &e->compiled);
  if (st) {
    krt_program_free(&p);
    return st;
  }
  atomic_fetch_add(&j->compiles, 1);
  return KILN_OK;
}

/* The ready entry for sig, building it if this thread is first. */
static kiln_status krt_lookup(kiln_jit *j, const kiln_tree *args, krt_signature *sig,
                              const kiln_compiled **out) {
  pthread_mutex_lock(&j->mu);
  for (;;) {
    krt_entry *e = j->entries;
    while (e && !(e->state != KRT_FAILED && krt_signature_equal(&e->key, sig)))
      e = e->next;
    if (e && e->state == KRT_READY) {
      pthread_mutex_unlock(&j->mu);
      *out = &e->compiled;
      return KILN_OK;
    }
    if (!e) break;
    pthread_cond_wait(&j->built, &j->mu); /* another thread builds it */
    if (e->state == KRT_FAILED) {
      kiln_status st = kcore_fail(e->status, "%s", e->error ? e->error : "");
      pthread_mutex_unlock(&j->mu);
      return st;
    }
  }
  char why[512];
  krt_explain_miss(j, sig, why, sizeof why);
  krt_entry *e = calloc(1, sizeof *e);
  if (!e) {
    pthread_mutex_unlock(&j->mu);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_call: out of host memory");
  }
  /* The building entry carries the signature, so others wait on it. */
  e->state = KRT_BUILDING;
  e->key = *sig;
  memset(sig, 0, sizeof *sig);
  e->next = j->entries;
  j->entries = e;
  pthread_mutex_unlock(&j->mu);

  KRT_LOG(j->ctx, KILN_LOG_INFO, "jit(%s): compiling for %d argument leaves on %s: %s",
          j->f->name, e->key.n, j->dev->info.name, why);
  kiln_status st = krt_build(j, args, e);

  pthread_mutex_lock(&j->mu);
  if (st) { /* a failed entry never matches again: the next call retries */
    e->state = KRT_FAILED;
    e->status = st;
    e->error = kcore_strdup(kiln_last_error());
  } else {
    e->state = KRT_READY;
    *out = &e->compiled;
  }
  pthread_cond_broadcast(&j->built);
  pthread_mutex_unlock(&j->mu);
  return st;
}

/* The leaves of args as arrays (they must all be arrays). */
static kiln_status krt_arg_arrays(const kiln_tree *args, int n, kiln_array **out) {
  const kiln_leaf *small[64];
  const kiln_leaf **leaves = n <= 64 ? small : malloc((size_t)n * sizeof *leaves);
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_call: out of host memory");
  ktree_leaves_borrow(args, leaves, (size_t)n);
  for (int i = 0; i < n; i++) out[i] = leaves[i]->u.array;
  if (leaves != small) free(leaves);
  return KILN_OK;
}

kiln_status krt_call_compiled(const kiln_compiled *c, const kiln_tree *args, kiln_tree **out) {
  int n = c->p.sig.n;
  kiln_array **arrays = calloc((size_t)(n + c->p.n_out + 1), sizeof *arrays);
  if (!arrays) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_call: out of host memory");
  kiln_array **outs = arrays + n;
  kiln_status st = krt_arg_arrays(args, n, arrays);
  if (!st) st = krt_execute(c, arrays, outs);
  kiln_leaf *leaves = NULL;
  if (!st && !(leaves = calloc((size_t)(c->p.n_out + 1), sizeof *leaves)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_call: out of host memory");
  for (int i = 0; !st && i < c->p.n_out; i++)
    leaves[i] = (kiln_leaf){.kind = KILN_LEAF_ARRAY, .u.array = outs[i]};
  if (!st) st = kiln_tree_unflatten(c->p.out_def, leaves, (size_t)c->p.n_out, out);
  for (int i = 0; i < c->p.n_out; i++) kiln_array_release(outs[i]); /* the tree holds them */
  free(leaves);
  free(arrays);
  return st;
}

kiln_status kiln_jit_call(kiln_jit *j, const kiln_tree *args, kiln_tree **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_call: out is NULL");
  *out = NULL;
  if (!j) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_call: jit is NULL");
  krt_signature sig;
  kiln_status st = krt_jit_signature(j, "kiln_jit_call", args, &sig);
  if (st) return st;
  const kiln_compiled *c = NULL;
  st = krt_lookup(j, args, &sig, &c);
  krt_signature_free(&sig);
  if (st) return kcore_fail_wrap(st, "jit(%s)", j->f->name);
  return krt_jit_run(c, args, out);
}

/* ---- stages ---- */

kiln_status kiln_jit_lower(kiln_jit *j, const kiln_tree *args, kiln_lowered **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_lower: out is NULL");
  *out = NULL;
  if (!j) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jit_lower: jit is NULL");
  kiln_lowered *l = calloc(1, sizeof *l);
  if (!l) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jit_lower: out of host memory");
  krt_signature sig;
  kiln_status st = krt_jit_signature(j, "kiln_jit_lower", args, &sig);
  if (!st) st = krt_jit_trace(j, args, &sig, &l->p);
  krt_signature_free(&sig);
  if (!st) st = kir_print(l->p.prog, &l->text);
  if (st) {
    kiln_lowered_free(l);
    return st;
  }
  *out = l;
  return KILN_OK;
}

kiln_status kiln_lowered_as_text(const kiln_lowered *l, char **text) {
  if (!l || !text) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_lowered_as_text: NULL argument");
  if (!(*text = kcore_strdup(l->text)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_lowered_as_text: out of host memory");
  return KILN_OK;
}

kiln_status kiln_lowered_compile(kiln_lowered *l, kiln_compiled **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_lowered_compile: out is NULL");
  *out = NULL;
  if (!l) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_lowered_compile: lowered is NULL");
  if (!l->p.prog)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_lowered_compile: this lowering was compiled already "
                      "(lower again for another executable)");
  kiln_compiled *c = calloc(1, sizeof *c);
  if (!c) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_lowered_compile: out of host memory");
  kiln_status st = krt_jit_compile(&l->p, c);
  if (st) {
    free(c);
    return st;
  }
  *out = c;
  return KILN_OK;
}

kiln_status kiln_lowered_text(kiln_lowered *l, const char *target, char **text) {
  static const char op[] = "kiln_lowered_text";
  if (!l || !target || !text) return kcore_fail(KILN_ERR_ARGUMENT, "%s: NULL argument", op);
  *text = NULL;
  if (!l->p.prog)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: this lowering was compiled already", op);
  kiln_status st = krt_lower_text(&l->p, target, text);
  return st ? kcore_fail_wrap(st, "%s", op) : KILN_OK;
}

kiln_status kiln_lowered_cuda_text(kiln_lowered *l, int sm, char **text) {
  static const char op[] = "kiln_lowered_cuda_text";
  if (!l || !text) return kcore_fail(KILN_ERR_ARGUMENT, "%s: NULL argument", op);
  *text = NULL;
  if (!l->p.prog)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: this lowering was compiled already", op);
  char target[32];
  snprintf(target, sizeof target, "cuda:sm_%d", sm);
  kiln_status st = krt_lower_text(&l->p, target, text);
  return st ? kcore_fail_wrap(st, "%s", op) : KILN_OK;
}

void kiln_lowered_free(kiln_lowered *l) {
  if (!l) return;
  krt_program_free(&l->p);
  free(l->text);
  free(l);
}

/* The fusion plan and the kernel sources; the optimized program when the
 * reference executor runs it. */
kiln_status kiln_compiled_as_text(const kiln_compiled *c, char **text) {
  if (!c || !text) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_compiled_as_text: NULL argument");
  return krt_exec_text(c, text);
}

kiln_status kiln_compiled_cost_analysis(const kiln_compiled *c, kiln_cost_analysis *out) {
  if (!c || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_compiled_cost_analysis: NULL argument");
  *out = c->cost;
  return KILN_OK;
}

kiln_status kiln_compiled_memory_analysis(const kiln_compiled *c, kiln_memory_analysis *out) {
  if (!c || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_compiled_memory_analysis: NULL argument");
  *out = c->memory;
  return KILN_OK;
}

kiln_status kiln_compiled_call(kiln_compiled *c, const kiln_tree *args, kiln_tree **out) {
  static const char op[] = "kiln_compiled_call";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!c) return kcore_fail(KILN_ERR_ARGUMENT, "%s: compiled is NULL", op);
  if (c->p.shard_state)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: this program was lowered for sharded "
                      "arguments; call it through kiln_jit_call", op);
  krt_signature sig;
  kiln_status st = krt_signature_of(op, args, c->p.sig.static_key, c->p.sig.static_key_size, &sig);
  if (st) return st;
  if (!krt_signature_equal(&sig, &c->p.sig)) {
    char a[2048], b[2048];
    kiln_treedef_str(sig.def, a, sizeof a);
    kiln_treedef_str(c->p.sig.def, b, sizeof b);
    st = kcore_fail(KILN_ERR_SHAPE, "%s: the arguments (%s, %d leaves) do not match the "
                    "signature compiled for (%s, %d leaves)", op, a, sig.n, b, c->p.sig.n);
  }
  krt_signature_free(&sig);
  return st ? st : krt_jit_run(c, args, out);
}

void kiln_compiled_free(kiln_compiled *c) {
  if (!c) return;
  krt_compiled_release(c);
  free(c);
}
