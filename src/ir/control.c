/* Control flow (cond, while, scan) and effects (debug_print,
 * host_callback): shape/dtype rules following lax's typecheck rules.
 * Sub-programs are checked against operands with JAX's typematch (dtype
 * and shape, weak flags ignored). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define TSTR(a, buf) kir_aval_str((a), (buf), sizeof(buf))

static const kir_aval *kir_in_aval(const kir_program *p, int i) {
  return &p->vars[p->invars[i]].aval;
}

static const kir_aval *kir_out_aval(const kir_program *p, int i) {
  return &p->vars[p->outvars[i]].aval;
}

/* Sub-program `what` takes exactly the avals avals[0..n) (typematch). */
/* A rule's results that are a sub-program's first n outputs, as it types them. */
static kiln_status kir_push_outs(kir_avals *out, const kir_program *sub, int n) {
  for (int i = 0; i < n; i++) {
    kiln_status st = kir_avals_push(out, kir_out_aval(sub, i));
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static kiln_status kir_check_takes(const char *prim, const char *what, const kir_program *sub,
                                   int n, const kir_aval *avals) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  if (sub->n_invars != n)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s takes %d inputs but is given %d", prim, what,
                      sub->n_invars, n);
  for (int i = 0; i < n; i++)
    if (!kir_aval_typematch(kir_in_aval(sub, i), &avals[i]))
      return kcore_fail(KILN_ERR_SHAPE, "%s: %s input %d has type %s but is given %s", prim, what,
                        i, TSTR(kir_in_aval(sub, i), t0), TSTR(&avals[i], t1));
  return KILN_OK;
}

/* cond(index, *ops): index is an i32 scalar (lax.switch clamps it). Every
 * branch maps ops to outputs of branch 0's types; results are branch 0's
 * output avals. */
kiln_status kir_rule_cond(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)prim;
  const kir_program_list *b = &params->cond.branches;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP], what[64];
  if (b->n < 1) return kcore_fail(KILN_ERR_ARGUMENT, "cond: needs at least one branch");
  if (n_in < 1) return kcore_fail(KILN_ERR_ARGUMENT, "cond: needs an index operand");
  if (in[0].dtype != KILN_I32 || in[0].rank != 0)
    return kcore_fail(KILN_ERR_DTYPE, "cond: index has type %s, not i32[]", TSTR(&in[0], t0));
  const kir_program *b0 = b->v[0];
  for (int k = 0; k < b->n; k++) {
    snprintf(what, sizeof what, "branch %d", k);
    kiln_status st = kir_check_takes("cond", what, b->v[k], n_in - 1, in + 1);
    if (st != KILN_OK) return st;
    if (b->v[k]->n_outvars != b0->n_outvars)
      return kcore_fail(KILN_ERR_ARGUMENT, "cond: branch 0 has %d outputs, branch %d has %d",
                        b0->n_outvars, k, b->v[k]->n_outvars);
    for (int i = 0; i < b0->n_outvars; i++)
      if (!kir_aval_typematch(kir_out_aval(b->v[k], i), kir_out_aval(b0, i)))
        return kcore_fail(KILN_ERR_SHAPE,
                          "cond: output %d is %s in branch 0 but %s in branch %d", i,
                          TSTR(kir_out_aval(b0, i), t0), TSTR(kir_out_aval(b->v[k], i), t1), k);
  }
  return kir_push_outs(out, b0, b0->n_outvars);
}

/* Builds the list (consts..., carry...) that a loop sub-program takes. */
static kiln_status kir_consts_and_carry(const kir_aval *consts, int n_consts,
                                        const kir_aval *carry, int n_carry, kir_avals *list) {
  for (int i = 0; i < n_consts; i++) {
    kiln_status st = kir_avals_push(list, &consts[i]);
    if (st != KILN_OK) return st;
  }
  for (int i = 0; i < n_carry; i++) {
    kiln_status st = kir_avals_push(list, &carry[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* while(*cond_consts, *body_consts, *carry): cond_jaxpr gives a bool
 * scalar, body_jaxpr the next carry (of the carry's types). */
static kiln_status kir_while_check(const kir_p_while *p, int n_in, const kir_aval *in,
                                   kir_avals *list) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  int64_t nc = p->cond_nconsts, nb = p->body_nconsts;
  if (nc < 0 || nb < 0 || nc + nb > n_in)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "while: cond_nconsts=%lld and body_nconsts=%lld do not fit %d operands",
                      (long long)nc, (long long)nb, n_in);
  const kir_aval *carry = in + nc + nb;
  int n_carry = n_in - (int)(nc + nb);
  kiln_status st = kir_consts_and_carry(in, (int)nc, carry, n_carry, list);
  if (st == KILN_OK) st = kir_check_takes("while", "cond_jaxpr", p->cond_jaxpr, list->n, list->v);
  if (st != KILN_OK) return st;
  const kir_program *c = p->cond_jaxpr;
  if (c->n_outvars != 1 || kir_out_aval(c, 0)->dtype != KILN_BOOL || kir_out_aval(c, 0)->rank != 0)
    return kcore_fail(KILN_ERR_SHAPE, "while: cond_jaxpr must return one bool[] (it returns %d "
                      "value%s%s%s)", c->n_outvars, c->n_outvars == 1 ? "" : "s",
                      c->n_outvars ? ", the first " : "",
                      c->n_outvars ? TSTR(kir_out_aval(c, 0), t0) : "");
  list->n = 0;
  st = kir_consts_and_carry(in + nc, (int)nb, carry, n_carry, list);
  if (st == KILN_OK) st = kir_check_takes("while", "body_jaxpr", p->body_jaxpr, list->n, list->v);
  if (st != KILN_OK) return st;
  const kir_program *b = p->body_jaxpr;
  if (b->n_outvars != n_carry)
    return kcore_fail(KILN_ERR_ARGUMENT, "while: body_jaxpr returns %d values for a carry of %d",
                      b->n_outvars, n_carry);
  for (int i = 0; i < n_carry; i++)
    if (!kir_aval_typematch(kir_out_aval(b, i), &carry[i]))
      return kcore_fail(KILN_ERR_SHAPE, "while: body_jaxpr output %d has type %s, the carry %s", i,
                        TSTR(kir_out_aval(b, i), t0), TSTR(&carry[i], t1));
  return KILN_OK;
}

kiln_status kir_rule_while(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)prim;
  const kir_p_while *p = &params->while_loop;
  kir_avals list;
  kir_avals_init(&list);
  kiln_status st = kir_while_check(p, n_in, in, &list);
  kir_avals_free(&list);
  if (st != KILN_OK) return st;
  return kir_push_outs(out, p->body_jaxpr, p->body_jaxpr->n_outvars);
}

/* scan(*consts, *carry, *xs): xs are sliced along their leading axis of
 * size length; the body returns (*carry, *y slices). */
static kiln_status kir_scan_check(const kir_p_scan *p, int n_in, const kir_aval *in,
                                  kir_avals *list) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const kir_program *body = p->jaxpr;
  if (p->num_consts < 0 || p->num_carry < 0 || p->num_consts + p->num_carry > n_in)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "scan: num_consts=%lld and num_carry=%lld do not fit %d operands",
                      (long long)p->num_consts, (long long)p->num_carry, n_in);
  if (p->length < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "scan: length=%lld is negative", (long long)p->length);
  int n_fixed = (int)(p->num_consts + p->num_carry);
  for (int i = 0; i < n_fixed; i++) {
    kiln_status st = kir_avals_push(list, &in[i]);
    if (st != KILN_OK) return st;
  }
  for (int i = n_fixed; i < n_in; i++) {
    if (in[i].rank < 1 || in[i].shape[0] != p->length)
      return kcore_fail(KILN_ERR_SHAPE, "scan: xs operand %d has type %s, without a leading axis "
                        "of length %lld", i - n_fixed, TSTR(&in[i], t0), (long long)p->length);
    kir_aval x = kir_aval_make(in[i].dtype, in[i].rank - 1, in[i].shape + 1, in[i].weak);
    kiln_status st = kir_avals_push(list, &x);
    if (st != KILN_OK) return st;
  }
  kiln_status st = kir_check_takes("scan", "jaxpr", body, list->n, list->v);
  if (st != KILN_OK) return st;
  if (body->n_outvars < p->num_carry)
    return kcore_fail(KILN_ERR_ARGUMENT, "scan: jaxpr returns %d values, fewer than num_carry=%lld",
                      body->n_outvars, (long long)p->num_carry);
  for (int i = 0; i < (int)p->num_carry; i++) {
    const kir_aval *c_in = kir_in_aval(body, (int)p->num_consts + i);
    if (!kir_aval_typematch(kir_out_aval(body, i), c_in))
      return kcore_fail(KILN_ERR_SHAPE, "scan: carry %d enters jaxpr as %s but leaves as %s", i,
                        TSTR(c_in, t0), TSTR(kir_out_aval(body, i), t1));
  }
  for (int i = (int)p->num_carry; i < body->n_outvars; i++)
    if (kir_out_aval(body, i)->rank + 1 > KIR_MAX_RANK)
      return kcore_fail(KILN_ERR_SHAPE, "scan: stacking output %d (%s) exceeds rank %d", i,
                        TSTR(kir_out_aval(body, i), t0), KIR_MAX_RANK);
  return KILN_OK;
}

kiln_status kir_rule_scan(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  (void)prim;
  const kir_p_scan *p = &params->scan;
  kir_avals list;
  kir_avals_init(&list);
  kiln_status st = kir_scan_check(p, n_in, in, &list);
  kir_avals_free(&list);
  if (st != KILN_OK) return st;
  /* Results: the body's carry outputs (weak flags included, as JAX's
   * _scan_abstract_eval), then the stacked ys. */
  st = kir_push_outs(out, p->jaxpr, (int)p->num_carry);
  for (int i = (int)p->num_carry; i < p->jaxpr->n_outvars && st == KILN_OK; i++) {
    const kir_aval *y = kir_out_aval(p->jaxpr, i);
    int64_t shape[KIR_MAX_RANK];
    shape[0] = p->length;
    memcpy(shape + 1, y->shape, (size_t)y->rank * sizeof *shape);
    st = kir_push(out, y->dtype, y->rank + 1, shape, y->weak);
  }
  return st;
}

/* Any operands, no results; the format is checked when it runs. */
kiln_status kir_rule_debug_print(kir_prim prim, const kir_params *params, int n_in,
                                 const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)params;
  (void)n_in;
  (void)in;
  (void)out;
  return KILN_OK;
}

/* Any operands; the results are the declared result_avals. */
kiln_status kir_rule_host_callback(kir_prim prim, const kir_params *params, int n_in,
                                   const kir_aval *in, kir_avals *out) {
  (void)prim;
  (void)n_in;
  (void)in;
  const kir_p_host_callback *p = &params->host_callback;
  if (p->callback < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "host_callback: callback id %lld is negative",
                      (long long)p->callback);
  for (int i = 0; i < p->result_avals.n; i++) {
    kiln_status st = kir_avals_push(out, &p->result_avals.v[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ---- reference evaluators ----
 *
 * Sub-programs run through kir_eval_program with the evaluation's env (the
 * evaluators' ctx), reading the operands in place: loop inputs are views
 * (consts as given, scan's x slices inside xs) and scan writes each y slice
 * straight into its stacked result. A loop's carry lives in two buffer sets
 * that swap roles after each iteration, one of them the equation's own
 * outputs, so no per-iteration allocation or copy is needed. */

/* cond: XLA's Conditional runs the last branch for an index out of range
 * (lax.switch clamps before binding cond, so traced switches never get
 * there). */
static kiln_status eval_cond(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx) {
  const kir_program_list *b = &e->params.cond.branches;
  int32_t index;
  memcpy(&index, in[0].data, sizeof index);
  int k = index < 0 || index >= b->n ? b->n - 1 : index;
  kiln_status st = kir_eval_program(ctx, b->v[k], in + 1, out);
  return st ? kcore_fail_wrap(st, "branches[%d]", k) : KILN_OK;
}

/* The carry's second buffer set: one block shaped like `like`. */
static kiln_status kir_carry_alloc(int n, const kir_buffer *like, kir_buffer *set, void **block) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (like[i].nbytes + 15) & ~(size_t)15;
  *block = malloc(total ? total : 1);
  if (!*block) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "reference executor: out of host memory "
                                 "for a loop carry of %zu bytes", total);
  char *p = *block;
  for (int i = 0; i < n; i++) {
    set[i] = like[i];
    set[i].data = p;
    p += (like[i].nbytes + 15) & ~(size_t)15;
  }
  return KILN_OK;
}

static void kir_carry_copy(int n, const kir_buffer *from, kir_buffer *to) {
  for (int i = 0; i < n; i++)
    if (from[i].data != to[i].data && to[i].nbytes) memcpy(to[i].data, from[i].data, to[i].nbytes);
}

/* A loop's working memory: sub-program argument lists and the carry's
 * spare buffer set, in one allocation (plus the spare's data block). */
typedef struct kir_loop {
  kir_buffer *args;  /* a sub-program's inputs */
  kir_buffer *args2; /* a second list (while: cond's) */
  kir_buffer *outs;  /* scan: the body's outputs */
  kir_buffer *spare; /* the carry's second set */
  void *spare_block;
} kir_loop;

static kiln_status kir_loop_init(kir_loop *L, int n_args, int n_args2, int n_outs, int n_carry) {
  memset(L, 0, sizeof *L);
  size_t n = (size_t)n_args + (size_t)n_args2 + (size_t)n_outs + (size_t)n_carry;
  kir_buffer *all = calloc(n ? n : 1, sizeof *all);
  if (!all) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "reference executor: out of host memory");
  L->args = all;
  L->args2 = L->args + n_args;
  L->outs = L->args2 + n_args2;
  L->spare = L->outs + n_outs;
  return KILN_OK;
}

static void kir_loop_free(kir_loop *L) {
  free(L->args);
  free(L->spare_block);
}

/* Points sub's inputs args[at..at+n) at `from`, with the sub-program's
 * avals (the operands' up to weak flags). */
static void kir_bind(kir_buffer *args, const kir_program *sub, int at, int n,
                     const kir_buffer *from) {
  for (int i = 0; i < n; i++) {
    args[at + i] = from[i];
    args[at + i].aval = *kir_in_aval(sub, at + i);
  }
}

static kiln_status eval_while(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx) {
  const kir_p_while *p = &e->params.while_loop;
  int nc = (int)p->cond_nconsts, nb = (int)p->body_nconsts, n = e->n_out;
  const kir_buffer *carry_in = in + nc + nb;
  kir_loop L;
  kiln_status st = kir_loop_init(&L, nb + n, nc + n, 0, n);
  if (st) return st;
  kir_buffer *body_args = L.args, *cond_args = L.args2;
  kir_bind(cond_args, p->cond_jaxpr, 0, nc, in);
  kir_bind(body_args, p->body_jaxpr, 0, nb, in + nc);
  /* The carry: read from `cur`, written to `next`; out is one of the sets. */
  const kir_buffer *cur = carry_in;
  kir_buffer *next = out;
  int64_t it = 0;
  for (;; it++) {
    bool go = false;
    kir_buffer pred = {*kir_out_aval(p->cond_jaxpr, 0), &go, sizeof go};
    kir_bind(cond_args, p->cond_jaxpr, nc, n, cur);
    st = kir_eval_program(ctx, p->cond_jaxpr, cond_args, &pred);
    if (st) {
      kcore_fail_wrap(st, "cond_jaxpr (iteration %lld)", (long long)it);
      break;
    }
    if (!go) break;
    if (next != out && !L.spare_block && (st = kir_carry_alloc(n, out, L.spare, &L.spare_block)))
      break;
    kir_bind(body_args, p->body_jaxpr, nb, n, cur);
    st = kir_eval_program(ctx, p->body_jaxpr, body_args, next);
    if (st) {
      kcore_fail_wrap(st, "body_jaxpr (iteration %lld)", (long long)it);
      break;
    }
    cur = next;
    next = next == out ? L.spare : out;
  }
  if (!st) kir_carry_copy(n, cur, out);
  kir_loop_free(&L);
  return st;
}

/* A view of slice t (along the leading axis) of a stacked buffer. */
static void kir_slice_view(kir_buffer *view, const kir_aval *slice, const kir_buffer *stacked,
                           int64_t t) {
  size_t nbytes = (size_t)kir_aval_size(slice) * kiln_dtype_size(slice->dtype);
  view->aval = *slice;
  view->data = (char *)stacked->data + (size_t)t * nbytes;
  view->nbytes = nbytes;
}

static kiln_status eval_scan(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx) {
  const kir_p_scan *p = &e->params.scan;
  const kir_program *body = p->jaxpr;
  int nc = (int)p->num_consts, n = (int)p->num_carry;
  int nx = e->n_in - nc - n, ny = e->n_out - n;
  kir_loop L;
  kiln_status st = kir_loop_init(&L, e->n_in, 0, e->n_out, n);
  if (st) return st;
  kir_bind(L.args, body, 0, nc, in);
  /* Land the last iteration's carry in `out`: start there on an odd length. */
  const kir_buffer *cur = in + nc;
  kir_buffer *next = out;
  if (p->length >= 2 && n > 0) {
    st = kir_carry_alloc(n, out, L.spare, &L.spare_block);
    if (p->length % 2 == 0) next = L.spare;
  }
  for (int64_t i = 0; i < p->length && !st; i++) {
    int64_t t = p->reverse ? p->length - 1 - i : i;
    for (int j = 0; j < nx; j++)
      kir_slice_view(&L.args[nc + n + j], kir_in_aval(body, nc + n + j), &in[nc + n + j], t);
    for (int j = 0; j < ny; j++)
      kir_slice_view(&L.outs[n + j], kir_out_aval(body, n + j), &out[n + j], t);
    kir_bind(L.args, body, nc, n, cur);
    for (int j = 0; j < n; j++) L.outs[j] = next[j];
    st = kir_eval_program(ctx, body, L.args, L.outs);
    if (st) {
      kcore_fail_wrap(st, "jaxpr (iteration %lld)", (long long)i);
      break;
    }
    cur = next;
    next = next == out ? L.spare : out;
  }
  if (!st) kir_carry_copy(n, cur, out);
  kir_loop_free(&L);
  return st;
}

/* One formatted line per run: to env->print, or to stderr. */
static kiln_status eval_debug_print(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                    void *ctx) {
  (void)out;
  const kir_eval_env *env = ctx;
  char *text = NULL;
  kiln_status st = kir_debug_format(e->params.debug_print.fmt, e->n_in, in, &text);
  if (st) return st;
  if (env->print) {
    env->print(env->print_user, text);
  } else if (fprintf(stderr, "%s\n", text) < 0) {
    st = kcore_fail(KILN_ERR_IO, "debug_print: cannot write to stderr");
  }
  free(text);
  return st;
}

/* The env resolves the callback id; its failure (status and message) is
 * passed on as it is. */
static kiln_status eval_host_callback(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                      void *ctx) {
  const kir_eval_env *env = ctx;
  if (!env->host_call)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "host_callback: no host callbacks in this evaluation "
                      "(callback %lld)", (long long)e->params.host_callback.callback);
  return env->host_call(env->host_user, e->params.host_callback.callback, e->n_in, in, e->n_out,
                        out);
}

void kir_control_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_COND] = eval_cond;
  t->fn[KIR_PRIM_WHILE] = eval_while;
  t->fn[KIR_PRIM_SCAN] = eval_scan;
  t->fn[KIR_PRIM_DEBUG_PRINT] = eval_debug_print;
  t->fn[KIR_PRIM_HOST_CALLBACK] = eval_host_callback;
}
