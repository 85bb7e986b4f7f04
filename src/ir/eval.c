/* The reference executor's program walker: one equation at a time on host
 * buffers, through the family files' evaluators. Simple on purpose: it
 * defines the semantics every fused path is tested against. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

void kir_eval_env_init(kir_eval_env *env, const kir_eval_table *table) {
  memset(env, 0, sizeof *env);
  env->table = table;
  env->user = table ? table->ctx : NULL;
}

static kir_eval_table kir_reference_table;
static pthread_once_t kir_reference_once = PTHREAD_ONCE_INIT;

static void kir_reference_build(void) {
  kir_eval_table *t = &kir_reference_table;
  memset(t, 0, sizeof *t);
  kir_elementwise_evals(t);
  kir_shape_evals(t);
  kir_reduce_evals(t);
  kir_dot_evals(t);
  kir_control_evals(t);
  kir_rng_evals(t);
  kir_call_evals(t);
  kir_collective_evals(t);
  kir_window_evals(t);
  kir_topk_evals(t);
  kir_cumlogsumexp_evals(t);
  kir_barrier_evals(t);
  kir_conv_evals(t);
}

const kir_eval_table *kir_reference_evals(void) {
  pthread_once(&kir_reference_once, kir_reference_build);
  return &kir_reference_table;
}

/* Per-var state while a program runs. */
typedef struct kir_slot {
  kir_buffer buf;
  bool owned;    /* buf.data is ours to free */
  int last_use;  /* index of the last equation reading it; -1: none */
} kir_slot;

static size_t kir_nbytes(const kir_aval *a) {
  return (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
}

/* A buffer of the aval's size (at least one byte, so data is never NULL). */
static kiln_status kir_slot_alloc(kir_slot *s, const kir_aval *a) {
  s->buf.aval = *a;
  s->buf.nbytes = kir_nbytes(a);
  s->buf.data = malloc(s->buf.nbytes ? s->buf.nbytes : 1);
  s->owned = true;
  if (!s->buf.data)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "reference executor: out of host memory for %zu "
                      "bytes", s->buf.nbytes);
  return KILN_OK;
}

static void kir_slot_release(kir_slot *s) {
  if (s->owned) free(s->buf.data);
  s->buf.data = NULL;
  s->owned = false;
}

/* Literals and constvars become host buffers. */
static kiln_status kir_slot_constant(const kir_program *p, kir_vid v, kir_slot *s) {
  const kir_var *var = &p->vars[v];
  kiln_status st;
  if (var->kind == KIR_VAR_LITERAL) {
    if ((st = kir_slot_alloc(s, &var->aval))) return st;
    kir_scalar_store(var->aval.dtype, var->u.literal, s->buf.data);
    return KILN_OK;
  }
  switch (var->u.constant.source) {
    case KIR_CONST_HOST: { /* empty data still gets an address (see kir_slot_alloc) */
      static char empty[1];
      const void *host = var->u.constant.host ? var->u.constant.host : empty;
      s->buf = (kir_buffer){var->aval, (void *)host, var->u.constant.nbytes};
      return KILN_OK;
    }
    case KIR_CONST_ARRAY:
      if ((st = kir_slot_alloc(s, &var->aval))) return st;
      return kiln_array_to_host(var->u.constant.array, s->buf.data, s->buf.nbytes);
    default: {
      char t[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_ARGUMENT, "reference executor: constant %s has no value bound",
                        kir_aval_str(&var->aval, t, sizeof t));
    }
  }
}

static kiln_status kir_eval_eqn(const kir_eval_env *env, const kir_program *p, int i,
                                kir_slot *slots) {
  const kir_eqn *e = &p->eqns[i];
  kir_eval_fn fn = env->table->fn[e->prim];
  if (!fn)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "equation %d (%s): the reference executor has no evaluator for it", i,
                      kir_prim_name(e->prim));
  kir_buffer small_in[8], small_out[4];
  kir_buffer *in = e->n_in <= 8 ? small_in : malloc((size_t)e->n_in * sizeof *in);
  kir_buffer *out = e->n_out <= 4 ? small_out : malloc((size_t)e->n_out * sizeof *out);
  kiln_status st = KILN_OK;
  if (!in || !out) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "reference executor: out of memory");
  for (int k = 0; !st && k < e->n_in; k++) in[k] = slots[e->in[k]].buf;
  for (int k = 0; !st && k < e->n_out; k++) {
    st = kir_slot_alloc(&slots[e->out[k]], kir_var_aval(p, e->out[k]));
    if (!st) out[k] = slots[e->out[k]].buf;
  }
  if (!st) {
    st = fn(e, in, out, (void *)env);
    if (st) kcore_fail_wrap(st, "equation %d (%s)", i, kir_prim_name(e->prim));
  }
  if (!st && env->observe) st = env->observe(env->observe_user, p, i, -1, in, out);
  /* Inputs read for the last time are freed. */
  for (int k = 0; !st && k < e->n_in; k++)
    if (slots[e->in[k]].last_use == i) kir_slot_release(&slots[e->in[k]]);
  if (in != small_in) free(in);
  if (out != small_out) free(out);
  return st;
}

/* Outputs that are invars first (they read inputs), then the rest. */
static void kir_write_outputs(const kir_program *p, const kir_slot *slots, kir_buffer *out) {
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < p->n_outvars; i++) {
      kir_vid v = p->outvars[i];
      bool is_input = p->vars[v].kind == KIR_VAR_INVAR;
      if (is_input != (pass == 0) || out[i].nbytes == 0) continue;
      if (out[i].data != slots[v].buf.data) memmove(out[i].data, slots[v].buf.data, out[i].nbytes);
    }
}

/* The caller's buffers must be what the program declares: evaluators trust
 * the declared types. */
static kiln_status kir_check_buffers(const kir_program *p, int n, const kir_vid *vids,
                                     const kir_buffer *b, const char *what) {
  for (int i = 0; i < n; i++) {
    const kir_aval *a = kir_var_aval(p, vids[i]);
    if (kir_aval_typematch(a, &b[i].aval) && b[i].nbytes == kir_nbytes(a) &&
        (b[i].data || b[i].nbytes == 0))
      continue;
    char want[KIR_AVAL_STR_CAP], got[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_ARGUMENT, "reference executor: %s %d is %s (%zu bytes%s), the "
                      "program declares %s", what, i, kir_aval_str(&b[i].aval, got, sizeof got),
                      b[i].nbytes, b[i].data ? "" : ", no data", kir_aval_str(a, want, sizeof want));
  }
  return KILN_OK;
}

kiln_status kir_eval_program(const kir_eval_env *env, const kir_program *p, const kir_buffer *in,
                             kir_buffer *out) {
  kiln_status st = kir_check_buffers(p, p->n_invars, p->invars, in, "input");
  if (!st) st = kir_check_buffers(p, p->n_outvars, p->outvars, out, "output");
  if (st) return st;
  kir_slot *slots = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *slots);
  if (!slots) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "reference executor: out of memory");
  for (int v = 0; v < p->n_vars; v++) slots[v].last_use = -1;
  for (int i = 0; i < p->n_eqns; i++)
    for (int k = 0; k < p->eqns[i].n_in; k++) slots[p->eqns[i].in[k]].last_use = i;
  /* Program outputs stay alive to the end. */
  for (int i = 0; i < p->n_outvars; i++) slots[p->outvars[i]].last_use = p->n_eqns;
  for (int i = 0; i < p->n_invars; i++) slots[p->invars[i]].buf = in[i];
  for (int v = 0; v < p->n_vars && !st; v++) {
    kir_var_kind k = p->vars[v].kind;
    if ((k == KIR_VAR_LITERAL || k == KIR_VAR_CONSTVAR) && slots[v].last_use >= 0)
      st = kir_slot_constant(p, v, &slots[v]);
  }
  for (int i = 0; i < p->n_eqns && !st; i++) st = kir_eval_eqn(env, p, i, slots);
  if (!st) kir_write_outputs(p, slots, out);
  for (int v = 0; v < p->n_vars; v++) kir_slot_release(&slots[v]);
  free(slots);
  return st;
}
