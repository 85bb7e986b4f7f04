/* Forward mode (jvp), partial evaluation and transposition on programs. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

kiln_status ktf_map_new(const char *op, int n, ktf_map *m) {
  m->n = n;
  m->v = malloc((size_t)(n ? n : 1) * sizeof *m->v);
  if (!m->v) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; i < n; i++) m->v[i] = KIR_NO_VAR;
  return KILN_OK;
}

kiln_status ktf_map_get(const char *op, ktf_map *m, kir_program *dst,
                               const kir_program *src, kir_vid v, kir_vid *out) {
  if (m->v[v] == KIR_NO_VAR) {
    const kir_var *sv = &src->vars[v];
    if (sv->kind != KIR_VAR_LITERAL)
      return kcore_fail(KILN_ERR_INTERNAL, "%s: var %d used before it is defined", op, v);
    kiln_status st = kir_add_literal(dst, sv->aval.dtype, sv->aval.weak, sv->u.literal, &m->v[v]);
    if (st) return st;
  }
  *out = m->v[v];
  return KILN_OK;
}

kiln_status ktf_copy_eqn(const char *op, kir_program *dst, const kir_program *src,
                                const kir_eqn *e, ktf_map *m, kir_vid *in) {
  kiln_status st = KILN_OK;
  for (int k = 0; k < e->n_in && !st; k++) st = ktf_map_get(op, m, dst, src, e->in[k], &in[k]);
  kir_params pr;
  int idx;
  if (!st) st = ktf_copy_params(dst, e, &pr);
  if (!st) st = kir_add_eqn(dst, e->prim, &pr, e->n_in, in, &idx);
  if (!st) st = kir_eqn_set_source(dst, idx, e->source);
  for (int j = 0; !st && j < e->n_out; j++) m->v[e->out[j]] = dst->eqns[idx].out[j];
  return st;
}

static int ktf_max_arity(const kir_program *p) {
  int n = 1;
  for (int i = 0; i < p->n_eqns; i++) {
    if (p->eqns[i].n_in > n) n = p->eqns[i].n_in;
    if (p->eqns[i].n_out > n) n = p->eqns[i].n_out;
  }
  return n;
}

static bool ktf_any_float_out(const kir_program *p, const kir_eqn *e) {
  for (int j = 0; j < e->n_out; j++)
    if (kiln_dtype_is_float(kir_var_aval(p, e->out[j])->dtype)) return true;
  return false;
}

kiln_status ktf_jvp(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                    const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  if (src->n_constvars)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: the program has constvars", op);
  const kir_ad_rules *rules = kir_ad_rules_get();
  ktf_map pm = {0}, tm = {0};
  int w = ktf_max_arity(src);
  kir_vid *buf = malloc((size_t)w * 4 * sizeof *buf);
  kiln_status st = buf ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, src->n_vars, &pm);
  if (!st) st = ktf_map_new(op, src->n_vars, &tm);
  for (int i = 0; !st && i < src->n_invars; i++) {
    pm.v[src->invars[i]] = x[i];
    tm.v[src->invars[i]] = tx[i];
  }
  kir_vid *xin = buf, *txin = buf + w, *yout = buf + 2 * w, *tyout = buf + 3 * w;
  for (int i = 0; !st && i < src->n_eqns; i++) {
    const kir_eqn *e = &src->eqns[i];
    bool any = false;
    for (int k = 0; k < e->n_in; k++) {
      txin[k] = tm.v[e->in[k]];
      any |= txin[k] != KIR_NO_VAR;
    }
    ktf_jvp_full_fn full = any ? ktf_jvp_full_rule(e->prim) : NULL;
    if (full) { /* rules that emit the primal computation themselves */
      for (int k = 0; !st && k < e->n_in; k++) st = ktf_map_get(op, &pm, dst, src, e->in[k], &xin[k]);
      for (int j = 0; j < e->n_out; j++) tyout[j] = KIR_NO_VAR;
      int from = dst->n_eqns;
      if (!st) st = full(op, dst, e, xin, txin, yout, tyout);
      if (!st) st = kir_eqns_derive_source(dst, from, "jvp", e->source);
      for (int j = 0; !st && j < e->n_out; j++) {
        pm.v[e->out[j]] = yout[j];
        if (kiln_dtype_is_float(kir_var_aval(src, e->out[j])->dtype)) tm.v[e->out[j]] = tyout[j];
      }
      if (st) {
        kcore_fail_wrap(st, "%s: jvp of %s", op, kir_prim_name(e->prim));
        break;
      }
      continue;
    }
    st = ktf_copy_eqn(op, dst, src, e, &pm, xin);
    if (st) break;
    if (!any || !ktf_any_float_out(src, e)) continue;
    kir_jvp_fn rule = rules->jvp[e->prim];
    if (!rule && kir_prim_get(e->prim)->family == KIR_FAMILY_CONTROL) {
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "%s: differentiating through %s is not supported yet (control flow whose "
                      "operands carry tangents has no autodiff rule in kiln so far)",
                      op, kir_prim_name(e->prim));
      break;
    }
    if (!rule) {
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: no differentiation rule for %s yet", op,
                      kir_prim_name(e->prim));
      break;
    }
    for (int j = 0; j < e->n_out; j++) {
      yout[j] = pm.v[e->out[j]];
      tyout[j] = KIR_NO_VAR;
    }
    int from = dst->n_eqns;
    st = rule(dst, e, xin, yout, txin, tyout);
    if (!st) st = kir_eqns_derive_source(dst, from, "jvp", e->source);
    if (st) {
      kcore_fail_wrap(st, "%s: jvp of %s", op, kir_prim_name(e->prim));
      break;
    }
    for (int j = 0; j < e->n_out; j++)
      if (kiln_dtype_is_float(kir_var_aval(src, e->out[j])->dtype)) tm.v[e->out[j]] = tyout[j];
  }
  for (int i = 0; !st && i < src->n_outvars; i++) {
    st = ktf_map_get(op, &pm, dst, src, src->outvars[i], &y[i]);
    ty[i] = tm.v[src->outvars[i]];
  }
  free(pm.v);
  free(tm.v);
  free(buf);
  return st;
}

/* ---- reverse mode ---- */

kiln_status ktf_linearize(const char *op, const kir_program *src, const bool *diff,
                          kir_program **out, bool *has_t) {
  kir_program *J = NULL;
  int ni = src->n_invars, no = src->n_outvars;
  kir_vid *v = malloc((size_t)(2 * ni + 2 * no + 1) * sizeof *v);
  kiln_status st = v ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = kir_program_new(&J);
  kir_vid *jx = v, *jt = v + ni, *jy = v + 2 * ni, *jty = v + 2 * ni + no;
  for (int i = 0; !st && i < ni; i++) st = kir_add_invar(J, kir_var_aval(src, src->invars[i]), &jx[i]);
  for (int i = 0; !st && i < ni; i++) {
    jt[i] = KIR_NO_VAR;
    if (diff[i]) {
      kir_aval a = *kir_var_aval(src, src->invars[i]);
      a.weak = false;
      st = kir_add_invar(J, &a, &jt[i]);
    }
  }
  if (!st) st = ktf_jvp(op, J, src, jx, jt, jy, jty);
  int n = no;
  for (int i = 0; !st && i < no; i++) {
    has_t[i] = jty[i] != KIR_NO_VAR;
    if (has_t[i]) jy[n++] = jty[i];
  }
  if (!st) st = kir_set_outputs(J, n, jy);
  if (!st) st = kir_cse(J, NULL);
  if (!st) st = kir_dce(J, NULL);
  free(v);
  if (st) {
    kir_program_free(J);
    return st;
  }
  *out = J;
  return KILN_OK;
}

void ktf_mark_linear(const kir_program *J, const bool *lin_in, bool *lin, bool *lin_eqn) {
  for (int i = 0; i < J->n_invars; i++) lin[J->invars[i]] = lin_in[i];
  for (int i = 0; i < J->n_eqns; i++) {
    const kir_eqn *e = &J->eqns[i];
    lin_eqn[i] = false;
    for (int k = 0; k < e->n_in; k++) lin_eqn[i] |= lin[e->in[k]];
    for (int j = 0; lin_eqn[i] && j < e->n_out; j++) lin[e->out[j]] = true;
  }
}

kiln_status ktf_linear_vars(const char *op, const kir_program *J, const bool *lin_in, bool *lin,
                            bool *lin_eqn) {
  ktf_mark_linear(J, lin_in, lin, lin_eqn);
  for (int i = 0; i < J->n_eqns; i++) {
    const kir_eqn *e = &J->eqns[i];
    if (!lin_eqn[i]) continue;
    if (e->prim == KIR_PRIM_WHILE)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                        "%s: reverse-mode differentiation does not work for while loops (their trip "
                        "count is dynamic; JAX refuses them too): use kiln_scan with a static "
                        "length, or forward mode (kiln_jvp)", op);
    if (!ktf_transpose_rule(e->prim))
      return kcore_fail(KILN_ERR_INTERNAL, "%s: %s is applied to a tangent but has no transpose rule",
                        op, kir_prim_name(e->prim));
  }
  return KILN_OK;
}

kiln_status ktf_transpose_linear(const char *op, kir_program *dst, const kir_program *J,
                                 const bool *lin_in, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *y, kir_vid *ct_in, ktf_residuals *res) {
  bool *lin = calloc((size_t)(J->n_vars ? J->n_vars : 1), sizeof *lin);
  bool *lin_eqn = calloc((size_t)(J->n_eqns ? J->n_eqns : 1), sizeof *lin_eqn);
  ktf_map m = {0}, ctm = {0};
  int w = ktf_max_arity(J);
  kir_vid *buf = malloc((size_t)w * 3 * sizeof *buf);
  bool *linf = malloc((size_t)w * sizeof *linf);
  kiln_status st = lin && lin_eqn && buf && linf
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, J->n_vars, &m);
  if (!st) st = ktf_map_new(op, J->n_vars, &ctm);
  if (!st) st = ktf_linear_vars(op, J, lin_in, lin, lin_eqn);
  for (int i = 0; !st && i < J->n_invars; i++)
    if (!lin_in[i]) m.v[J->invars[i]] = x[i];
  /* the known part goes to dst */
  for (int i = 0; !st && i < J->n_eqns; i++)
    if (!lin_eqn[i]) st = ktf_copy_eqn(op, dst, J, &J->eqns[i], &m, buf);
  for (int i = 0; !st && y && i < J->n_outvars; i++) {
    y[i] = KIR_NO_VAR;
    if (!lin[J->outvars[i]]) st = ktf_map_get(op, &m, dst, J, J->outvars[i], &y[i]);
  }
  /* the residuals: known values the linear part reads */
  for (int i = 0; !st && res && i < J->n_eqns; i++) {
    const kir_eqn *e = &J->eqns[i];
    for (int k = 0; !st && lin_eqn[i] && k < e->n_in; k++) {
      kir_vid v = e->in[k];
      if (lin[v] || J->vars[v].kind == KIR_VAR_LITERAL) continue;
      kir_vid d;
      st = ktf_map_get(op, &m, dst, J, v, &d);
      bool seen = false;
      for (int r = 0; r < res->n; r++) seen |= res->v[r] == d;
      if (st || seen) continue;
      kir_vid *nv = realloc(res->v, (size_t)(res->n + 1) * sizeof *nv);
      if (!nv) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
      else (res->v = nv)[res->n++] = d;
    }
  }
  /* seed the cotangents of the linear outputs */
  for (int i = 0; !st && i < J->n_outvars; i++) {
    kir_vid ov = J->outvars[i];
    if (ct[i] != KIR_NO_VAR && lin[ov]) st = kir_emit_add_any(dst, ctm.v[ov], ct[i], &ctm.v[ov]);
  }
  /* transpose the linear part, last equation first */
  kir_vid *xin = buf, *cts = buf + w, *ctx = buf + 2 * w;
  for (int i = J->n_eqns - 1; !st && i >= 0; i--) {
    const kir_eqn *e = &J->eqns[i];
    if (!lin_eqn[i]) continue;
    bool any = false;
    for (int j = 0; j < e->n_out; j++) any |= (cts[j] = ctm.v[e->out[j]]) != KIR_NO_VAR;
    if (!any) continue;
    for (int j = 0; !st && j < e->n_out; j++)
      if (cts[j] == KIR_NO_VAR) st = kir_emit_zeros(dst, kir_var_aval(J, e->out[j]), &cts[j]);
    for (int k = 0; !st && k < e->n_in; k++) {
      linf[k] = lin[e->in[k]];
      xin[k] = KIR_NO_VAR;
      ctx[k] = KIR_NO_VAR;
      if (!linf[k]) st = ktf_map_get(op, &m, dst, J, e->in[k], &xin[k]);
    }
    int from = dst->n_eqns;
    if (!st) st = ktf_transpose_rule(e->prim)(dst, J, e, linf, xin, cts, ctx);
    if (!st) st = kir_eqns_derive_source(dst, from, "transpose", e->source);
    if (st) {
      kcore_fail_wrap(st, "%s: transpose of %s", op, kir_prim_name(e->prim));
      break;
    }
    for (int k = 0; !st && k < e->n_in; k++)
      if (linf[k] && ctx[k] != KIR_NO_VAR)
        st = kir_emit_add_any(dst, ctm.v[e->in[k]], ctx[k], &ctm.v[e->in[k]]);
  }
  for (int i = 0; !st && i < J->n_invars; i++) ct_in[i] = lin_in[i] ? ctm.v[J->invars[i]] : KIR_NO_VAR;
  free(m.v);
  free(ctm.v);
  free(buf);
  free(linf);
  free(lin);
  free(lin_eqn);
  return st;
}

kiln_status ktf_vjp_residuals(const char *op, kir_program *dst, const kir_program *src,
                              const kir_vid *x, const bool *diff, const kir_vid *ct, kir_vid *y,
                              kir_vid *ct_x, ktf_residuals *res) {
  int ni = src->n_invars, no = src->n_outvars;
  bool *has_t = calloc((size_t)(no ? no : 1), sizeof *has_t);
  kir_program *J = NULL;
  kiln_status st = has_t ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_linearize(op, src, diff, &J, has_t);
  int nj = st ? 0 : J->n_invars, njo = st ? 0 : J->n_outvars;
  bool *lin_in = st ? NULL : calloc((size_t)nj + 1, sizeof *lin_in);
  kir_vid *v = st ? NULL : malloc((size_t)(2 * nj + 2 * njo + 1) * sizeof *v);
  if (!st && (!lin_in || !v)) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kir_vid *jx = v, *jct = v + nj, *jy = v + nj + njo, *jct_in = v + nj + 2 * njo;
  for (int i = 0; !st && i < nj; i++) {
    lin_in[i] = i >= ni;
    jx[i] = i < ni ? x[i] : KIR_NO_VAR;
  }
  for (int i = 0, k = no; !st && i < no; i++) {
    jct[i] = KIR_NO_VAR;
    if (has_t[i]) jct[k++] = ct[i];
  }
  if (!st) st = ktf_transpose_linear(op, dst, J, lin_in, jx, jct, jy, jct_in, res);
  for (int i = 0; !st && i < no; i++) y[i] = jy[i];
  for (int i = 0, k = ni; !st && i < ni; i++) {
    ct_x[i] = KIR_NO_VAR;
    if (!diff[i]) continue;
    kir_vid tv = J->invars[k];
    ct_x[i] = jct_in[k++];
    if (ct_x[i] == KIR_NO_VAR) st = kir_emit_zeros(dst, kir_var_aval(J, tv), &ct_x[i]);
  }
  free(v);
  free(lin_in);
  free(has_t);
  kir_program_free(J);
  return st;
}

kiln_status ktf_vjp(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                    const bool *diff, const kir_vid *ct, kir_vid *y, kir_vid *ct_x) {
  return ktf_vjp_residuals(op, dst, src, x, diff, ct, y, ct_x, NULL);
}

/* ---- rules that need program transformations ---- */

ktf_jvp_full_fn ktf_jvp_full_rule(kir_prim prim) {
  switch (prim) {
    case KIR_PRIM_WHILE: return ktf_jvp_while;
    case KIR_PRIM_CUSTOM_JVP_CALL: return ktf_jvp_custom_jvp;
    case KIR_PRIM_CUSTOM_VJP_CALL: return ktf_jvp_custom_vjp;
    case KIR_PRIM_CHECKPOINT: return ktf_jvp_checkpoint;
    case KIR_PRIM_CUSTOM_LIN: return ktf_jvp_custom_lin;
    case KIR_PRIM_COND: return ktf_jvp_cond;
    case KIR_PRIM_SCAN: return ktf_jvp_scan;
    case KIR_PRIM_SHARD_MAP: return ktf_jvp_shard_map;
    default: return NULL;
  }
}

kir_transpose_fn ktf_transpose_rule(kir_prim prim) {
  switch (prim) {
    case KIR_PRIM_CUSTOM_LIN: return ktf_transpose_custom_lin;
    case KIR_PRIM_CHECKPOINT: return ktf_transpose_checkpoint;
    case KIR_PRIM_COND: return ktf_transpose_cond;
    case KIR_PRIM_SCAN: return ktf_transpose_scan;
    case KIR_PRIM_SHARD_MAP: return ktf_transpose_shard_map;
    default: return kir_ad_rules_get()->transpose[prim];
  }
}

kir_batch_fn ktf_batch_rule(kir_prim prim) {
  switch (prim) {
    case KIR_PRIM_CUSTOM_JVP_CALL: return ktf_batch_custom_jvp;
    case KIR_PRIM_CUSTOM_VJP_CALL: return ktf_batch_custom_vjp;
    case KIR_PRIM_CHECKPOINT: return ktf_batch_checkpoint;
    case KIR_PRIM_COND: return ktf_batch_cond;
    case KIR_PRIM_SCAN: return ktf_batch_scan;
    case KIR_PRIM_SHARD_MAP: return ktf_batch_shard_map;
    default: return kir_ad_rules_get()->batch[prim];
  }
}
