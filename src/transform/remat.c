/* Rematerialization (jax.checkpoint) and the residuals reverse mode saves
 * (jax.ad_checkpoint.saved_residuals).
 *
 * The jvp of checkpoint[jaxpr=f] linearizes f into J (primals and
 * tangents in, primal and tangent outputs out) and splits it in two
 * checkpoint equations:
 *   P  the primal part of J: the operands -> f's outputs, plus the values
 *      the policy lets reverse mode save (dots_saveable: dot_general
 *      results the tangent part reads);
 *   R  the rest of J: (operands, saved values, tangents) -> output
 *      tangents, primal part included.
 * Partial evaluation sees P as known and R as linear, so the residuals of
 * the pair are only the operands and the saved values; transposing R
 * emits its primal part again (the recomputation, in the backward pass)
 * and transposes the rest. everything_saveable is the plain jvp, inlined. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

static kiln_status ktf_emit_checkpoint(kir_program *dst, const kir_p_checkpoint *c,
                                       kir_program *jaxpr, int n, const kir_vid *in, int *idx) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.checkpoint = *c;
  pr.checkpoint.jaxpr = jaxpr;
  return kir_add_eqn(dst, KIR_PRIM_CHECKPOINT, &pr, n, in, idx);
}

kiln_status ktf_jvp_checkpoint(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_p_checkpoint *c = &e->params.checkpoint;
  const kir_program *f = c->jaxpr;
  if (c->policy == KIR_REMAT_EVERYTHING_SAVEABLE) return ktf_jvp(op, dst, f, x, tx, y, ty);
  int ni = f->n_invars, no = f->n_outvars;
  bool *diff = calloc((size_t)(ni + no + 1), sizeof *diff), *has_t = diff ? diff + ni : NULL;
  kir_program *J = NULL, *P = NULL, *R = NULL;
  kiln_status st = diff ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < ni; i++) diff[i] = tx[i] != KIR_NO_VAR;
  if (!st) st = ktf_linearize(op, f, diff, &J, has_t);
  int nv = st ? 1 : J->n_vars, ne = st ? 1 : J->n_eqns + 1, nj = st ? 0 : J->n_invars;
  bool *lin = calloc((size_t)(3 * nv + 2 * ne), sizeof *lin);
  bool *plive = lin + nv, *rlive = lin + 2 * nv, *lin_eqn = lin + 3 * nv, *saved_eqn = lin_eqn + ne;
  kir_vid *v = malloc((size_t)(3 * nv + 3 * nj + 2 * no + 1) * sizeof *v);
  if (!st && (!lin || !v)) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  /* which equations depend on the tangents */
  for (int i = ni; !st && i < nj; i++) lin[J->invars[i]] = true;
  for (int i = 0; !st && i < J->n_eqns; i++) {
    const kir_eqn *q = &J->eqns[i];
    for (int k = 0; k < q->n_in; k++) lin_eqn[i] |= lin[q->in[k]];
    for (int j = 0; lin_eqn[i] && j < q->n_out; j++) lin[q->out[j]] = true;
  }
  /* the saved values: the known dot and convolution results (JAX's
   * dots_saveable) the tangent part needs */
  int n_saved = 0, nto = st ? 0 : J->n_outvars - no;
  kir_vid *saved = v, *rin = v + nv;
  if (!st && c->policy == KIR_REMAT_DOTS_SAVEABLE) {
    ktf_mark_live(J, nto, J->outvars + no, NULL, rlive);
    for (int i = 0; i < J->n_eqns; i++) {
      const kir_eqn *q = &J->eqns[i];
      bool dot = q->prim == KIR_PRIM_DOT_GENERAL || q->prim == KIR_PRIM_CONV_GENERAL_DILATED;
      if (lin_eqn[i] || !dot || !rlive[q->out[0]]) continue;
      saved_eqn[i] = true;
      saved[n_saved++] = q->out[0];
    }
    memset(rlive, 0, (size_t)nv * sizeof *rlive);
  }
  /* P: the primal outputs and the saved values */
  kir_vid *pouts = rin + nj + n_saved;
  for (int i = 0; !st && i < no; i++) pouts[i] = J->outvars[i];
  for (int i = 0; !st && i < n_saved; i++) pouts[no + i] = saved[i];
  if (!st) ktf_mark_live(J, no + n_saved, pouts, NULL, plive);
  if (!st) st = ktf_extract(op, dst, J, ni, J->invars, plive, NULL, no + n_saved, pouts, &P);
  int pidx = -1;
  if (!st) st = ktf_emit_checkpoint(dst, c, P, ni, x, &pidx);
  /* R: (operands, saved values, tangents) -> the output tangents */
  int nt = nj - ni, nr = ni + n_saved + nt;
  for (int i = 0; !st && i < ni; i++) rin[i] = J->invars[i];
  for (int i = 0; !st && i < n_saved; i++) rin[ni + i] = saved[i];
  for (int i = 0; !st && i < nt; i++) rin[ni + n_saved + i] = J->invars[ni + i];
  if (!st) ktf_mark_live(J, nto, J->outvars + no, saved_eqn, rlive);
  if (!st) st = ktf_extract(op, dst, J, nr, rin, rlive, saved_eqn, nto, J->outvars + no, &R);
  /* its operands as dst vars */
  kir_vid *ops = pouts;
  for (int i = 0; !st && i < ni; i++) ops[i] = x[i];
  for (int i = 0; !st && i < n_saved; i++) ops[ni + i] = dst->eqns[pidx].out[no + i];
  for (int i = 0, k = 0; !st && i < ni; i++)
    if (diff[i]) ops[ni + n_saved + k++] = tx[i];
  int ridx = -1;
  if (!st) st = ktf_emit_checkpoint(dst, c, R, nr, ops, &ridx);
  for (int i = 0, k = 0; !st && i < no; i++) {
    y[i] = dst->eqns[pidx].out[i];
    ty[i] = has_t[i] ? dst->eqns[ridx].out[k++] : KIR_NO_VAR;
  }
  free(v);
  free(lin);
  free(diff);
  kir_program_free(J);
  return st;
}

kiln_status ktf_transpose_checkpoint(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     const bool *lin, const kir_vid *x, const kir_vid *ct,
                                     kir_vid *ct_x) {
  (void)src;
  return ktf_transpose_linear("checkpoint", p, e->params.checkpoint.jaxpr, lin, x, ct, NULL, ct_x,
                              NULL);
}

kiln_status ktf_batch_checkpoint(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd) {
  (void)src;
  static const char op[] = "vmap of checkpoint";
  int n = e->n_in;
  kir_vid *in = malloc((size_t)(n + 1) * sizeof *in);
  int *b = malloc((size_t)(n + 1) * sizeof *b);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.checkpoint = e->params.checkpoint;
  kiln_status st = in && b ? ktf_batch_operands_front(p, n, x, bd, in, b)
                           : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_batch_sub(op, p, e->params.checkpoint.jaxpr, size, b, NULL, &pr.checkpoint.jaxpr);
  if (!st) st = ktf_emit_mapped(p, KIR_PRIM_CHECKPOINT, &pr, n, in, e->n_out, y, ybd);
  free(in);
  free(b);
  return st;
}

/* ---- public ---- */

typedef struct ktf_remat {
  const kiln_func *f;
  kiln_remat_policy policy;
} ktf_remat;

static kiln_tree *ktf_checkpoint_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_remat *r = user;
  static const char op[] = "kiln_checkpoint";
  ktf_traced tr;
  kiln_status st = ktf_trace(t, op, r->f, args, &tr);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  kir_p_checkpoint c = {tr.cl.prog, (int64_t)r->policy, true};
  int idx;
  kiln_tree *res = NULL;
  st = ktf_emit_checkpoint(t->prog, &c, tr.cl.prog, tr.cl.n_captures + tr.n, tr.x, &idx);
  if (st)
    ktr_fail(t, st);
  else
    res = ktf_tree(t, tr.cl.out_def, tr.cl.n_out, t->prog->eqns[idx].out);
  ktf_traced_free(&tr);
  return res;
}

static kiln_status ktf_remat_new(const char *op, kiln_fn fn, const char *prefix,
                                 const kiln_func *f, kiln_remat_policy policy, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the function is NULL", op);
  if ((int)policy < (int)KILN_REMAT_NOTHING_SAVEABLE || (int)policy > (int)KILN_REMAT_EVERYTHING_SAVEABLE)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s(%s): unknown policy %d", op, kiln_func_name(f),
                      (int)policy);
  ktf_remat *r = malloc(sizeof *r);
  if (!r) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  r->f = f;
  r->policy = policy;
  return ktf_func_new(fn, r, prefix, f, out);
}

kiln_status kiln_checkpoint(const kiln_func *f, kiln_remat_policy policy, kiln_func **out) {
  return ktf_remat_new("kiln_checkpoint", ktf_checkpoint_fn, "checkpoint", f, policy, out);
}

/* The residuals of the vjp of f with respect to its float leaves. */
static kiln_tree *ktf_residuals_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_remat *r = user;
  static const char op[] = "kiln_saved_residuals";
  ktf_traced tr;
  kiln_status st = ktf_trace(t, op, r->f, args, &tr);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  int nc = tr.cl.n_captures, nx = nc + tr.n, no = tr.cl.n_out;
  bool *diff = calloc((size_t)nx + 1, sizeof *diff);
  kir_vid *v = malloc((size_t)(2 * nx + 2 * no + 1) * sizeof *v);
  ktf_residuals res = {0};
  if (!diff || !v) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < tr.n; i++) diff[nc + i] = kiln_dtype_is_float(ktr_aval(tr.vals[i])->dtype);
  for (int i = 0; !st && i < no; i++) v[i] = KIR_NO_VAR;
  if (!st) st = ktf_vjp_residuals(op, t->prog, tr.cl.prog, tr.x, diff, v, v + no, v + 2 * no, &res);
  kiln_tree **kids = st ? NULL : calloc((size_t)res.n + 1, sizeof *kids);
  if (!st && !kids) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kiln_tree *out = NULL;
  int made = 0;
  for (; !st && made < res.n; made++)
    if (!(kids[made] = kiln_tree_val(ktr_val(t, res.v[made])))) break;
  if (st)
    ktr_fail(t, st);
  else if (made == res.n)
    out = kiln_tree_tuple((size_t)made, kids);
  if (!st && !out) {
    for (int i = 0; i < made; i++) kiln_tree_free(kids[i]);
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  free(kids);
  free(res.v);
  free(v);
  free(diff);
  ktf_traced_free(&tr);
  return out;
}

kiln_status kiln_saved_residuals(const kiln_func *f, kiln_func **out) {
  return ktf_remat_new("kiln_saved_residuals", ktf_residuals_fn, "saved_residuals", f,
                       KILN_REMAT_NOTHING_SAVEABLE, out);
}
