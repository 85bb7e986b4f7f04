/* Constant folding through an evaluation table (the reference executor's
 * per-primitive evaluators): equations over literals and host constants are
 * run once at compile time and their results become literals (scalars) or
 * host constvars. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

/* A literal's value needs storage to be handed out as a buffer. */
typedef struct kir_fold_inputs {
  kir_buffer *bufs;
  uint64_t *scalars;
} kir_fold_inputs;

/* Whether every operand is a literal or a host-bound constvar. */
static bool kir_operands_known(const kir_program *p, const kir_eqn *e) {
  for (int i = 0; i < e->n_in; i++) {
    const kir_var *v = &p->vars[e->in[i]];
    bool host_const = v->kind == KIR_VAR_CONSTVAR && v->u.constant.source == KIR_CONST_HOST;
    if (v->kind != KIR_VAR_LITERAL && !host_const) return false;
  }
  return true;
}

/* Results small enough, and scalars only in a sub-program (which cannot
 * hold constvars). */
static bool kir_results_foldable(const kir_program *p, const kir_eqn *e, size_t max_bytes) {
  for (int k = 0; k < e->n_out; k++) {
    const kir_aval *a = &p->vars[e->out[k]].aval;
    size_t nbytes;
    if (kcore_shape_bytes("kir_fold", a->dtype, a->rank, a->shape, NULL, &nbytes) != KILN_OK ||
        nbytes > max_bytes || (p->parent && a->rank != 0))
      return false;
  }
  return true;
}

static void kir_fold_inputs_fill(const kir_program *p, const kir_eqn *e, kir_fold_inputs *in) {
  for (int i = 0; i < e->n_in; i++) {
    const kir_var *v = &p->vars[e->in[i]];
    kir_buffer *b = &in->bufs[i];
    b->aval = v->aval;
    if (v->kind == KIR_VAR_LITERAL) {
      kir_scalar_store(v->aval.dtype, v->u.literal, &in->scalars[i]);
      b->data = &in->scalars[i];
      b->nbytes = kiln_dtype_size(v->aval.dtype);
    } else {
      /* Evaluators only read their inputs; empty data gets an address too, as
       * the executor gives it (a zero-length memcpy must not see NULL). */
      b->data = v->u.constant.host ? (void *)v->u.constant.host : (void *)&in->scalars[i];
      b->nbytes = v->u.constant.nbytes;
    }
  }
}

/* Turns output var v into a literal (scalar) or a host constvar whose
 * data is already in the arena (`copy`); cannot fail, so that an equation's
 * outputs change all together or not at all. */
static void kir_fold_result(kir_program *p, kir_vid v, const kir_buffer *b, void *copy) {
  kir_var *var = &p->vars[v];
  var->eqn = -1;
  if (var->aval.rank == 0) {
    var->kind = KIR_VAR_LITERAL;
    var->u.literal = kir_scalar_load(var->aval.dtype, b->data);
    if (kiln_dtype_is_float(var->aval.dtype))
      var->u.literal.f = kir_round_to_dtype(var->aval.dtype, var->u.literal.f);
    return;
  }
  var->kind = KIR_VAR_CONSTVAR;
  memset(&var->u, 0, sizeof var->u);
  var->u.constant.source = KIR_CONST_HOST;
  var->u.constant.host = copy;
  var->u.constant.nbytes = b->nbytes;
  KCORE_ASSERT(p->n_constvars < p->cap_constvars);
  p->constvars[p->n_constvars++] = v;
}

/* Arena room for the results: constvar slots and copies of array data. */
static kiln_status kir_fold_reserve(kir_program *p, int n_out, const kir_buffer *out,
                                    void **copies) {
  if (p->n_constvars + n_out > p->cap_constvars) {
    int cap = p->cap_constvars ? p->cap_constvars : 8;
    while (cap < p->n_constvars + n_out) cap *= 2;
    kir_vid *n = kir_alloc(p, (size_t)cap * sizeof *n);
    if (!n) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_fold: out of memory");
    if (p->n_constvars) memcpy(n, p->constvars, (size_t)p->n_constvars * sizeof *n);
    p->constvars = n;
    p->cap_constvars = cap;
  }
  for (int k = 0; k < n_out; k++) {
    copies[k] = NULL;
    if (out[k].aval.rank == 0 || out[k].nbytes == 0) continue;
    copies[k] = kir_alloc(p, out[k].nbytes);
    if (!copies[k]) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_fold: out of memory");
    memcpy(copies[k], out[k].data, out[k].nbytes);
  }
  return KILN_OK;
}

/* Evaluates equation i and rewrites its outputs. */
static kiln_status kir_fold_eqn(kir_program *p, int i, const kir_eval_table *t) {
  const kir_eqn *e = &p->eqns[i];
  kir_fold_inputs in = {calloc((size_t)e->n_in + 1, sizeof(kir_buffer)),
                        calloc((size_t)e->n_in + 1, sizeof(uint64_t))};
  kir_buffer *out = calloc((size_t)e->n_out + 1, sizeof *out);
  void **copies = calloc((size_t)e->n_out + 1, sizeof *copies);
  kiln_status st = KILN_OK;
  if (!in.bufs || !in.scalars || !out || !copies) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_fold: out of memory");
    goto done;
  }
  kir_fold_inputs_fill(p, e, &in);
  for (int k = 0; k < e->n_out && st == KILN_OK; k++) {
    out[k].aval = p->vars[e->out[k]].aval;
    st = kcore_shape_bytes("kir_fold", out[k].aval.dtype, out[k].aval.rank, out[k].aval.shape,
                           NULL, &out[k].nbytes);
    out[k].data = st == KILN_OK ? malloc(out[k].nbytes + 1) : NULL;
    if (st == KILN_OK && !out[k].data)
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_fold: out of memory");
  }
  kir_eval_env env;
  kir_eval_env_init(&env, t);
  if (st == KILN_OK) st = t->fn[e->prim](e, in.bufs, out, &env);
  if (st == KILN_OK) st = kir_fold_reserve(p, e->n_out, out, copies);
  for (int k = 0; k < e->n_out && st == KILN_OK; k++)
    kir_fold_result(p, e->out[k], &out[k], copies[k]);
done:
  for (int k = 0; out && k < e->n_out; k++) free(out[k].data);
  free(out);
  free(copies);
  free(in.bufs);
  free(in.scalars);
  return st;
}

typedef struct kir_fold_sub {
  const kir_eval_table *t;
  size_t max_bytes;
  int folded;
  kiln_status st;
} kir_fold_sub;

static kiln_status kir_fold_program(kir_program *p, const kir_eval_table *t, size_t max_bytes,
                                    int *folded);

static void kir_fold_visit(kir_program *sub, void *user) {
  kir_fold_sub *s = user;
  if (s->st == KILN_OK) s->st = kir_fold_program(sub, s->t, s->max_bytes, &s->folded);
}

static kiln_status kir_fold_program(kir_program *p, const kir_eval_table *t, size_t max_bytes,
                                    int *folded) {
  bool *drop = calloc((size_t)p->n_eqns + 1, sizeof *drop);
  if (!drop) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_fold: out of memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < p->n_eqns && st == KILN_OK; i++) {
    kir_eqn *e = &p->eqns[i];
    kir_fold_sub sub = {t, max_bytes, 0, KILN_OK};
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_fold_visit, &sub);
    *folded += sub.folded;
    st = sub.st;
    /* A while loop's trip count is unbounded: like XLA, never run one at
     * compile time (its body is still folded above). */
    if (st != KILN_OK || !t->fn[e->prim] || e->prim == KIR_PRIM_WHILE || kir_eqn_has_effect(e) ||
        !kir_operands_known(p, e) || !kir_results_foldable(p, e, max_bytes))
      continue;
    st = kir_fold_eqn(p, i, t);
    if (st != KILN_OK)
      st = kcore_fail_wrap(st, "kir_fold: equation %d (%s)", i, kir_prim_name(p->eqns[i].prim));
    drop[i] = st == KILN_OK;
    *folded += st == KILN_OK;
  }
  kir_remove_eqns(p, drop);
  free(drop);
  return st;
}

kiln_status kir_fold(kir_program *p, const kir_eval_table *t, size_t max_bytes, int *folded) {
  if (!p || !t)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_fold: %s is NULL", p ? "table" : "program");
  int n = 0;
  kiln_status st = kir_fold_program(p, t, max_bytes, &n);
  if (folded) *folded = n;
  return st;
}
