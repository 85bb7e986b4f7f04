/* Autodiff of cond and scan (JAX's semantics).
 *
 * cond: the jvp is the primal cond plus a tangent cond whose branches are
 * the branches' jvps (operands and their tangents in, the output tangents
 * out, zeros where a branch has none). The tangent cond is linear in the
 * tangents; its transpose is a cond of the branches' transposes, each of
 * which recomputes its branch's primal part from the operands (the
 * residuals of a cond are its operands).
 *
 * scan: the jvp linearizes the body and splits it (partial evaluation)
 * into a known scan, which computes the primal carries and ys and stacks
 * the per-iteration values the tangents need (residuals saved per
 * iteration), and a linear scan over the tangents that reads them (and the
 * primal consts and xs directly). A linear scan transposes into a scan in
 * the opposite direction whose carry holds the carries' cotangents and
 * accumulates the linear consts' cotangents. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

#define KTF_OOM(op) kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op)

/* ---- cond ---- */

kiln_status ktf_jvp_cond(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                         const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_program_list *br = &e->params.cond.branches;
  int n = e->n_in - 1, no = e->n_out;
  bool *nz = calloc((size_t)(n + 2 * no + 1), sizeof *nz), *onz = nz + n, *any = onz + no;
  kir_vid *v = malloc((size_t)(4 * n + 2 * no + 2) * sizeof *v);
  kir_program **tb = kir_alloc(dst, (size_t)br->n * sizeof *tb);
  kiln_status st = nz && v && tb ? KILN_OK : KTF_OOM(op);
  for (int i = 0; !st && i < n; i++) nz[i] = tx[1 + i] != KIR_NO_VAR;
  for (int k = 0; !st && k < br->n; k++) {
    st = ktf_nonzero_outs(op, br->v[k], nz, onz);
    for (int j = 0; !st && j < no; j++) any[j] |= onz[j];
  }
  /* the primal cond */
  kir_params pr;
  int idx;
  if (!st) st = ktf_copy_params(dst, e, &pr);
  if (!st) st = kir_add_eqn(dst, KIR_PRIM_COND, &pr, e->n_in, x, &idx);
  for (int j = 0; !st && j < no; j++) {
    y[j] = dst->eqns[idx].out[j];
    ty[j] = KIR_NO_VAR;
  }
  /* the tangent cond: (index, operands, non-zero tangents) -> non-zero output tangents */
  kir_vid *bx = v, *btx = v + n, *by = v + 2 * n, *bty = by + no, *in = bty + no;
  int nt = 0, nto = 0;
  for (int k = 0; !st && k < br->n; k++) {
    st = kir_program_new_sub(dst, &tb[k]);
    for (int i = 0; !st && i < n; i++) st = kir_add_invar(tb[k], kir_var_aval(dst, x[1 + i]), &bx[i]);
    for (int i = 0; !st && i < n; i++) {
      btx[i] = KIR_NO_VAR;
      kir_aval a = *kir_var_aval(dst, x[1 + i]);
      a.weak = false;
      if (nz[i]) st = kir_add_invar(tb[k], &a, &btx[i]);
    }
    if (!st) st = ktf_jvp(op, tb[k], br->v[k], bx, btx, by, bty);
    nto = 0;
    for (int j = 0; !st && j < no; j++) {
      if (!any[j]) continue;
      if (bty[j] == KIR_NO_VAR) {
        kir_aval a = *kir_var_aval(tb[k], by[j]);
        a.weak = false;
        st = kir_emit_zeros(tb[k], &a, &bty[j]);
      }
      by[nto++] = bty[j];
    }
    if (!st) st = kir_set_outputs(tb[k], nto, by);
  }
  in[nt++] = x[0];
  for (int i = 0; i < n; i++) in[nt++] = x[1 + i];
  for (int i = 0; i < n; i++)
    if (nz[i]) in[nt++] = tx[1 + i];
  memset(&pr, 0, sizeof pr);
  pr.cond.branches = (kir_program_list){br->n, tb};
  if (!st && nto) st = kir_add_eqn(dst, KIR_PRIM_COND, &pr, nt, in, &idx);
  for (int j = 0, k = 0; !st && nto && j < no; j++)
    if (any[j]) ty[j] = dst->eqns[idx].out[k++];
  free(nz);
  free(v);
  return st;
}

kiln_status ktf_transpose_cond(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x) {
  (void)src;
  static const char op[] = "transpose of cond";
  const kir_program_list *br = &e->params.cond.branches;
  int n = e->n_in - 1, no = e->n_out;
  if (lin[0]) return kcore_fail(KILN_ERR_INTERNAL, "%s: the index is linear", op);
  kir_program **tb = kir_alloc(p, (size_t)br->n * sizeof *tb);
  kir_vid *v = malloc((size_t)(3 * n + 2 * no + 2) * sizeof *v);
  kiln_status st = tb && v ? KILN_OK : KTF_OOM(op);
  kir_vid *bx = v, *bct = v + n, *bout = bct + no, *in = bout + n;
  int nl = 0;
  for (int k = 0; !st && k < br->n; k++) {
    const kir_program *b = br->v[k];
    st = kir_program_new_sub(p, &tb[k]);
    for (int i = 0; !st && i < n; i++) {
      bx[i] = KIR_NO_VAR;
      if (!lin[1 + i]) st = kir_add_invar(tb[k], kir_var_aval(b, b->invars[i]), &bx[i]);
    }
    for (int j = 0; !st && j < no; j++) st = kir_add_invar(tb[k], kir_var_aval(p, ct[j]), &bct[j]);
    if (!st) st = ktf_transpose_linear(op, tb[k], b, lin + 1, bx, bct, NULL, bout, NULL);
    nl = 0;
    for (int i = 0; !st && i < n; i++) {
      if (!lin[1 + i]) continue;
      if (bout[i] == KIR_NO_VAR) st = kir_emit_zeros(tb[k], kir_var_aval(b, b->invars[i]), &bout[i]);
      bout[nl++] = bout[i];
    }
    if (!st) st = kir_set_outputs(tb[k], nl, bout);
  }
  int m = 0;
  in[m++] = x[0];
  for (int i = 0; i < n; i++)
    if (!lin[1 + i]) in[m++] = x[1 + i];
  for (int j = 0; j < no; j++) in[m++] = ct[j];
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.cond.branches = (kir_program_list){br->n, tb};
  int idx;
  if (!st) st = kir_add_eqn(p, KIR_PRIM_COND, &pr, m, in, &idx);
  for (int i = 0, k = 0; !st && i < e->n_in; i++)
    ct_x[i] = i > 0 && lin[i] ? p->eqns[idx].out[k++] : KIR_NO_VAR;
  free(v);
  return st;
}

/* ---- scan ---- */

static kiln_status ktf_emit_scan(kir_program *dst, kir_program *body, const kir_p_scan *like,
                                 int nc, int nk, bool reverse, int n, const kir_vid *in, int *idx) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.scan = (kir_p_scan){body, like->length, nk, nc, reverse};
  return kir_add_eqn(dst, KIR_PRIM_SCAN, &pr, n, in, idx);
}

kiln_status ktf_jvp_scan(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                         const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_p_scan *s = &e->params.scan;
  const kir_program *B = s->jaxpr;
  int nc = (int)s->num_consts, nk = (int)s->num_carry, ni = e->n_in;
  int ny = B->n_outvars - nk, no = nk + ny;
  bool *nz = calloc((size_t)(ni + 2 * no + 1), sizeof *nz), *onz = nz + ni, *has_t = onz + no;
  kir_program *J = NULL, *K = NULL, *L = NULL;
  kiln_status st = nz ? KILN_OK : KTF_OOM(op);
  for (int i = 0; !st && i < ni; i++) nz[i] = tx[i] != KIR_NO_VAR;
  for (bool changed = true; !st && changed;) { /* carries that get tangents */
    changed = false;
    st = ktf_nonzero_outs(op, B, nz, onz);
    for (int i = 0; !st && i < nk; i++)
      if (onz[i] && !nz[nc + i]) nz[nc + i] = changed = true;
  }
  if (!st) st = ktf_linearize(op, B, nz, &J, has_t);
  int nv = st ? 1 : J->n_vars, ne = st ? 1 : J->n_eqns + 1, nj = st ? 0 : J->n_invars;
  bool *lin = calloc((size_t)(2 * nv + 2 * ne + nj), sizeof *lin), *live = lin + nv;
  bool *lin_eqn = live + nv, *known_eqn = lin_eqn + ne, *lin_in = known_eqn + ne;
  kir_vid *v = malloc((size_t)(4 * nv + 4 * nj + 4 * no + 4) * sizeof *v);
  /* per residual: -1 stacked by the known scan, else the J invar (a const or an x) it is */
  int *kind = malloc((size_t)(nv + no + 1) * sizeof *kind), *which = kind ? kind + nv : NULL;
  if (!st && (!lin || !v || !kind)) st = KTF_OOM(op);
  if (!st) {
    for (int i = 0; i < nj; i++) lin_in[i] = i >= ni;
    ktf_mark_linear(J, lin_in, lin, lin_eqn);
    for (int i = 0; i < J->n_eqns; i++) known_eqn[i] = !lin_eqn[i];
  }
  /* the residuals: known values the linear eqns read */
  kir_vid *res = v;
  int nres = 0, nstack = 0;
  for (int i = 0; !st && i < J->n_eqns; i++) {
    const kir_eqn *q = &J->eqns[i];
    for (int k = 0; lin_eqn[i] && k < q->n_in; k++) {
      kir_vid a = q->in[k];
      bool seen = false;
      for (int r = 0; r < nres; r++) seen |= res[r] == a;
      if (lin[a] || seen || J->vars[a].kind == KIR_VAR_LITERAL) continue;
      kind[nres] = -1;
      for (int j = 0; j < ni; j++)
        if (J->invars[j] == a && (j < nc || j >= nc + nk)) kind[nres] = j; /* a const or x */
      nstack += kind[nres] < 0;
      res[nres++] = a;
    }
  }
  /* the known scan: (consts, carry, xs) -> (carry, ys, stacked residuals) */
  kir_vid *kout = res + nres, *lin_from = kout + no + nstack, *lin_out = lin_from + nres + nj;
  kir_vid *lin_ops = lin_out + 2 * no + 1;
  int nko = 0;
  for (int i = 0; !st && i < no; i++) kout[nko++] = J->outvars[i];
  for (int r = 0; !st && r < nres; r++)
    if (kind[r] < 0) kout[nko++] = res[r];
  if (!st) ktf_mark_live(J, nko, kout, NULL, live);
  if (!st) st = ktf_extract(op, dst, J, ni, J->invars, live, NULL, nko, kout, &K);
  int kidx = -1;
  if (!st) st = ktf_emit_scan(dst, K, s, nc, nk, s->reverse, ni, x, &kidx);
  for (int i = 0; !st && i < no; i++) {
    y[i] = dst->eqns[kidx].out[i];
    ty[i] = KIR_NO_VAR;
  }
  /* the linear scan: consts (const residuals, const tangents), carry
   * (carry tangents), xs (stacked residuals and xs, x tangents) */
  int nf = 0, nlc = 0, nlk = 0, nlo = 0;
  for (int r = 0; !st && r < nres; r++)
    if (kind[r] >= 0 && kind[r] < nc) {
      lin_ops[nf] = x[kind[r]];
      lin_from[nf++] = res[r];
    }
  for (int i = 0, k = ni; !st && i < ni; i++) {
    if (!nz[i]) continue;
    kir_vid tv = J->invars[k++];
    if (i >= nc + nk) continue;
    lin_ops[nf] = tx[i];
    if (tx[i] == KIR_NO_VAR) {
      kir_aval a = *kir_var_aval(J, tv);
      st = kir_emit_zeros(dst, &a, &lin_ops[nf]);
    }
    lin_from[nf++] = tv;
  }
  int n_consts_carry = nf;
  for (int r = 0, k = no; !st && r < nres; r++) {
    if (kind[r] >= 0 && kind[r] < nc) continue;
    lin_ops[nf] = kind[r] < 0 ? dst->eqns[kidx].out[k++] : x[kind[r]];
    lin_from[nf++] = res[r];
  }
  for (int i = 0, k = ni; !st && i < ni; i++) {
    if (!nz[i]) continue;
    kir_vid tv = J->invars[k++];
    if (i < nc + nk) continue;
    lin_ops[nf] = tx[i];
    lin_from[nf++] = tv;
  }
  /* counts: consts are the const residuals and const tangents */
  int ncr = 0;
  for (int r = 0; r < nres; r++) ncr += kind[r] >= 0 && kind[r] < nc;
  int ntc = 0;
  for (int i = 0; i < nc; i++) ntc += nz[i];
  nlc = ncr + ntc;
  nlk = n_consts_carry - nlc;
  for (int i = 0, k = no; !st && i < no; i++) {
    if (!has_t[i] && !(i < nk && nz[nc + i])) continue;
    which[nlo] = i;
    lin_out[nlo++] = has_t[i] ? J->outvars[k++] : KIR_NO_VAR; /* else a zero carry tangent */
  }
  memset(live, 0, (size_t)nv * sizeof *live);
  int nlive = 0;
  kir_vid *lo = lin_out + nlo;
  for (int i = 0; i < nlo; i++)
    if (lin_out[i] != KIR_NO_VAR) lo[nlive++] = lin_out[i];
  if (!st) ktf_mark_live(J, nlive, lo, known_eqn, live);
  if (!st) st = ktf_extract(op, dst, J, nf, lin_from, live, known_eqn, nlive, lo, &L);
  for (int i = 0, k = 0; !st && i < nlo; i++) { /* zeros for the carries without a tangent */
    if (lin_out[i] != KIR_NO_VAR) {
      lin_out[i] = L->outvars[k++];
      continue;
    }
    kir_aval a = *kir_var_aval(B, B->outvars[which[i]]);
    a.weak = false;
    st = kir_emit_zeros(L, &a, &lin_out[i]);
  }
  if (!st) st = kir_set_outputs(L, nlo, lin_out);
  int lidx = -1;
  if (!st && nlo) st = ktf_emit_scan(dst, L, s, nlc, nlk, s->reverse, nf, lin_ops, &lidx);
  for (int i = 0, k = 0; !st && nlo && i < no; i++)
    if (has_t[i] || (i < nk && nz[nc + i])) ty[i] = dst->eqns[lidx].out[k++];
  free(kind);
  free(v);
  free(lin);
  free(nz);
  kir_program_free(J);
  return st;
}

/* A linear scan (the tangent scan of a jvp): its carries are linear (one
 * that is not, a zero tangent the jvp materialised, is taken as linear);
 * its consts and xs may be either (residuals are not). The transpose runs
 * the other way: carry (the linear consts' cotangent sums, the carries'
 * cotangents), xs (residual xs, the ys' cotangents), ys the linear xs'
 * cotangents. */
kiln_status ktf_transpose_scan(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin_ops, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x) {
  (void)src;
  static const char op[] = "transpose of scan";
  const kir_p_scan *s = &e->params.scan;
  const kir_program *L = s->jaxpr;
  int nc = (int)s->num_consts, nk = (int)s->num_carry, ni = e->n_in, no = e->n_out;
  kir_program *T = NULL;
  kir_vid *v = malloc((size_t)(3 * ni + 3 * no + 2) * sizeof *v);
  bool *lin = malloc((size_t)(ni + 1) * sizeof *lin);
  kiln_status st = v && lin ? kir_program_new_sub(p, &T) : KTF_OOM(op);
  for (int i = 0; !st && i < ni; i++) lin[i] = lin_ops[i] || (i >= nc && i < nc + nk);
  kir_vid *tx = v, *tct = v + ni, *tout = tct + no, *ops = tout + ni;
  int m = 0, nrc = 0, nlc = 0;
  /* T's invars: residual consts; carry (const cotangent sums, carry cotangents); xs */
  for (int i = 0; !st && i < nc; i++) {
    tx[i] = KIR_NO_VAR;
    if (lin[i]) continue;
    st = kir_add_invar(T, kir_var_aval(L, L->invars[i]), &tx[i]);
    ops[m++] = x[i];
    nrc++;
  }
  kir_vid *accv = malloc((size_t)(nc + 1) * sizeof *accv);
  if (!st && !accv) st = KTF_OOM(op);
  for (int i = 0; !st && i < nc; i++) {
    if (!lin[i]) continue;
    kir_aval a = *kir_var_aval(L, L->invars[i]);
    a.weak = false;
    st = kir_add_invar(T, &a, &accv[i]);
    if (!st) st = kir_emit_zeros(p, &a, &ops[m++]);
    nlc++;
  }
  for (int j = 0; !st && j < nk; j++) {
    st = kir_add_invar(T, kir_var_aval(p, ct[j]), &tct[j]);
    ops[m++] = ct[j];
  }
  for (int i = nc + nk; !st && i < ni; i++) {
    tx[i] = KIR_NO_VAR;
    if (lin[i]) continue;
    st = kir_add_invar(T, kir_var_aval(L, L->invars[i]), &tx[i]);
    ops[m++] = x[i];
  }
  for (int j = nk; !st && j < no; j++) {
    kir_aval a = *kir_var_aval(L, L->outvars[j]);
    a.weak = false;
    st = kir_add_invar(T, &a, &tct[j]);
    ops[m++] = ct[j];
  }
  if (!st) st = ktf_transpose_linear(op, T, L, lin, tx, tct, NULL, tout, NULL);
  /* T's outputs: the sums, the carries' cotangents, the linear xs' cotangents */
  kir_vid *outs = tx; /* tx is no longer needed */
  int n_out = 0;
  for (int i = 0; !st && i < nc; i++)
    if (lin[i]) {
      st = kir_emit_add_any(T, accv[i], tout[i], &outs[n_out]);
      n_out++;
    }
  for (int i = nc; !st && i < ni; i++) {
    if (!lin[i]) continue;
    if (tout[i] == KIR_NO_VAR) {
      kir_aval a = *kir_var_aval(L, L->invars[i]);
      a.weak = false;
      st = kir_emit_zeros(T, &a, &tout[i]);
    }
    outs[n_out++] = tout[i];
  }
  if (!st) st = kir_set_outputs(T, n_out, outs);
  int idx;
  if (!st) st = ktf_emit_scan(p, T, s, nrc, nlc + nk, !s->reverse, m, ops, &idx);
  for (int i = 0, k = 0; !st && i < ni; i++) {
    ct_x[i] = KIR_NO_VAR;
    if (lin[i]) {
      kir_vid o = p->eqns[idx].out[k++];
      if (lin_ops[i]) ct_x[i] = o;
    }
  }
  free(accv);
  free(lin);
  free(v);
  return st;
}
