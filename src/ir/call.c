/* Calls of a sub-program that autodiff treats specially: custom_jvp_call,
 * custom_vjp_call (JAX's custom derivative rules), custom_lin (the linear
 * half of a custom_vjp_call under jvp) and checkpoint (remat). Outside
 * autodiff each is its sub-program applied to its operands; their jvp,
 * transpose and batching rules need program transformations and live in
 * src/transform. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

#define TSTR(a, buf) kir_aval_str((a), (buf), sizeof(buf))

/* The sub-program a call evaluates. */
static const kir_program *kir_call_body(kir_prim prim, const kir_params *p) {
  switch (prim) {
    case KIR_PRIM_CUSTOM_JVP_CALL: return p->custom_jvp.call_jaxpr;
    case KIR_PRIM_CUSTOM_VJP_CALL: return p->custom_vjp.call_jaxpr;
    case KIR_PRIM_CHECKPOINT: return p->checkpoint.jaxpr;
    default: return NULL;
  }
}

/* sub takes exactly in[0..n) (or, if `prefix`, those first). */
static kiln_status kir_call_takes(kir_prim prim, const char *what, const kir_program *sub,
                                  bool prefix, int n, const kir_aval *in) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  const char *name = kir_prim_name(prim);
  if (!sub) return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is missing", name, what);
  if (prefix ? sub->n_invars < n : sub->n_invars != n)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s takes %d inputs but is given %d", name, what,
                      sub->n_invars, n);
  for (int i = 0; i < n; i++) {
    const kir_aval *want = kir_var_aval(sub, sub->invars[i]);
    if (!kir_aval_typematch(want, &in[i]))
      return kcore_fail(KILN_ERR_SHAPE, "%s: %s input %d has type %s but is given %s", name, what,
                        i, TSTR(want, t0), TSTR(&in[i], t1));
  }
  return KILN_OK;
}

/* custom_jvp_call / custom_vjp_call / checkpoint: the body takes the
 * operands; the rule sub-programs agree with it where they overlap. */
kiln_status kir_rule_call(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                          kir_avals *out) {
  const kir_program *body = kir_call_body(prim, params);
  const char *name = kir_prim_name(prim);
  kiln_status st = kir_call_takes(prim, "the called jaxpr", body, false, n_in, in);
  if (st) return st;
  int no = body->n_outvars;
  if (prim == KIR_PRIM_CUSTOM_JVP_CALL) {
    const kir_program *j = params->custom_jvp.jvp_jaxpr;
    int nc = (int)params->custom_jvp.num_consts;
    if (nc < 0 || nc > n_in)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: num_consts %d out of range", name, nc);
    if (!j || j->n_invars != n_in + (n_in - nc) || j->n_outvars != 2 * no)
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "%s: jvp_jaxpr must map (consts, args, arg tangents) to (outputs, output "
                        "tangents): %d operands, %d outputs", name, n_in, no);
  } else if (prim == KIR_PRIM_CUSTOM_VJP_CALL) {
    const kir_p_custom_vjp *v = &params->custom_vjp;
    if (v->num_consts < 0 || v->num_consts > n_in)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: num_consts %lld out of range", name,
                        (long long)v->num_consts);
    st = kir_call_takes(prim, "fwd_jaxpr", v->fwd_jaxpr, false, n_in, in);
    if (!st && v->fwd_jaxpr->n_outvars < no)
      st = kcore_fail(KILN_ERR_ARGUMENT, "%s: fwd_jaxpr has %d outputs, fewer than the %d of the "
                      "function", name, v->fwd_jaxpr->n_outvars, no);
    int nr = st ? 0 : v->fwd_jaxpr->n_outvars - no;
    if (!st && (!v->bwd_jaxpr || v->bwd_jaxpr->n_invars != (int)v->num_consts + nr + no ||
                v->bwd_jaxpr->n_outvars != n_in - (int)v->num_consts))
      st = kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: bwd_jaxpr must map (consts, %d residuals, %d output cotangents) to %d "
                      "argument cotangents", name, nr, no, n_in - (int)v->num_consts);
    if (st) return st;
  }
  for (int i = 0; i < no; i++) {
    st = kir_avals_push(out, kir_var_aval(body, body->outvars[i]));
    if (st) return st;
  }
  return KILN_OK;
}

/* custom_lin(*consts, *residuals, *arg tangents) -> out_avals; bwd_jaxpr
 * maps (consts, residuals, output cotangents) to one cotangent per arg
 * tangent, of the tangent's type. */
kiln_status kir_rule_custom_lin(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  const kir_p_custom_lin *l = &params->custom_lin;
  int nc = (int)l->num_consts, nr = (int)l->num_res, nt = n_in - nc - nr;
  if (nc < 0 || nr < 0 || nt < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "custom_lin: num_consts %d and num_res %d do not fit %d "
                      "operands", nc, nr, n_in);
  const kir_program *b = l->bwd_jaxpr;
  kiln_status st = kir_call_takes(prim, "bwd_jaxpr", b, true, nc + nr, in);
  if (st) return st;
  if (b->n_invars != nc + nr + l->out_avals.n || b->n_outvars != nt)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "custom_lin: bwd_jaxpr takes %d inputs and gives %d cotangents, but the "
                      "equation has %d consts, %d residuals, %d outputs and %d tangents",
                      b->n_invars, b->n_outvars, nc, nr, l->out_avals.n, nt);
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  for (int i = 0; i < nt; i++) {
    const kir_aval *ct = kir_var_aval(b, b->outvars[i]);
    if (!kir_aval_same_shape(ct, &in[nc + nr + i]))
      return kcore_fail(KILN_ERR_SHAPE, "custom_lin: tangent %d is %s but bwd gives %s", i,
                        TSTR(&in[nc + nr + i], t0), TSTR(ct, t1));
  }
  for (int i = 0; i < l->out_avals.n; i++) {
    st = kir_avals_push(out, &l->out_avals.v[i]);
    if (st) return st;
  }
  return KILN_OK;
}

static kiln_status eval_call(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx) {
  kiln_status st = kir_eval_program(ctx, kir_call_body(e->prim, &e->params), in, out);
  return st ? kcore_fail_wrap(st, "%s", kir_prim_name(e->prim)) : KILN_OK;
}

/* Only reverse mode can use custom_lin (it transposes it into bwd). */
static kiln_status eval_custom_lin(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx) {
  (void)e, (void)in, (void)out, (void)ctx;
  return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                    "custom_lin: can't apply forward-mode autodiff (jvp) to a custom_vjp "
                    "function (as JAX: use kiln_custom_jvp, or reverse mode)");
}

void kir_call_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_CUSTOM_JVP_CALL] = eval_call;
  t->fn[KIR_PRIM_CUSTOM_VJP_CALL] = eval_call;
  t->fn[KIR_PRIM_CHECKPOINT] = eval_call;
  t->fn[KIR_PRIM_CUSTOM_LIN] = eval_custom_lin;
}
