/* Batching (vmap) on programs: each equation with a mapped operand is
 * replaced by its primitive's batching rule (kir_ad_rules.batch); the
 * others are copied as they are, so values that do not depend on the mapped
 * inputs stay unbatched (JAX's not_mapped). */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

kiln_status ktf_vmap(const char *op, kir_program *dst, const kir_program *src, int64_t size,
                     const kir_vid *x, const int *bd, kir_vid *y, int *ybd) {
  if (src->n_constvars)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: the program has constvars", op);
  int w = 1;
  for (int i = 0; i < src->n_eqns; i++) {
    if (src->eqns[i].n_in > w) w = src->eqns[i].n_in;
    if (src->eqns[i].n_out > w) w = src->eqns[i].n_out;
  }
  ktf_map m = {0};
  int *mb = malloc((size_t)(src->n_vars + 2 * w + 1) * sizeof *mb);
  kir_vid *buf = malloc((size_t)(2 * w) * sizeof *buf);
  kiln_status st = mb && buf ? KILN_OK
                             : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, src->n_vars, &m);
  int *bin = mb ? mb + src->n_vars : NULL, *bout = bin ? bin + w : NULL;
  for (int i = 0; !st && i < src->n_vars; i++) mb[i] = -1;
  for (int i = 0; !st && i < src->n_invars; i++) {
    m.v[src->invars[i]] = x[i];
    mb[src->invars[i]] = bd[i];
  }
  kir_vid *in = buf, *out = buf ? buf + w : NULL;
  for (int i = 0; !st && i < src->n_eqns; i++) {
    const kir_eqn *e = &src->eqns[i];
    bool any = false;
    for (int k = 0; k < e->n_in; k++) any |= (bin[k] = mb[e->in[k]]) >= 0;
    if (!any) {
      st = ktf_copy_eqn(op, dst, src, e, &m, in);
      continue;
    }
    kir_batch_fn rule = ktf_batch_rule(e->prim);
    if (!rule) {
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: no batching rule for %s yet", op,
                      kir_prim_name(e->prim));
      break;
    }
    for (int k = 0; !st && k < e->n_in; k++) st = ktf_map_get(op, &m, dst, src, e->in[k], &in[k]);
    int from = dst->n_eqns;
    if (!st) st = rule(dst, src, e, size, in, bin, out, bout);
    if (!st) st = kir_eqns_derive_source(dst, from, "vmap", e->source);
    if (st) {
      kcore_fail_wrap(st, "%s: batching %s", op, kir_prim_name(e->prim));
      break;
    }
    for (int j = 0; j < e->n_out; j++) {
      m.v[e->out[j]] = out[j];
      mb[e->out[j]] = bout[j];
    }
  }
  for (int i = 0; !st && i < src->n_outvars; i++) {
    st = ktf_map_get(op, &m, dst, src, src->outvars[i], &y[i]);
    ybd[i] = mb[src->outvars[i]];
  }
  free(m.v);
  free(mb);
  free(buf);
  return st;
}

kiln_status ktf_batch_operands_front(kir_program *p, int n, const kir_vid *x, const int *bd,
                                     kir_vid *out, int *out_bd) {
  for (int i = 0; i < n; i++) {
    out_bd[i] = bd[i] < 0 ? -1 : 0;
    out[i] = x[i];
    kiln_status st = bd[i] > 0 ? kir_batch_moveaxis(p, x[i], bd[i], 0, &out[i]) : KILN_OK;
    if (st) return st;
  }
  return KILN_OK;
}

/* Invars of p for sub's invars, with a leading axis of size where bd is 0. */
static kiln_status ktf_batched_invars(const char *op, kir_program *p, const kir_program *sub,
                                      int64_t size, const int *bd, kir_vid *v) {
  for (int i = 0; i < sub->n_invars; i++) {
    kir_aval a = *kir_var_aval(sub, sub->invars[i]);
    if (bd[i] >= 0) {
      if (a.rank >= KIR_MAX_RANK)
        return kcore_fail(KILN_ERR_SHAPE, "%s: a batched input would exceed rank %d", op, KIR_MAX_RANK);
      memmove(a.shape + 1, a.shape, (size_t)a.rank * sizeof a.shape[0]);
      a.shape[0] = size;
      a.rank++;
    }
    kiln_status st = kir_add_invar(p, &a, &v[i]);
    if (st) return st;
  }
  return KILN_OK;
}

kiln_status ktf_batch_sub(const char *op, kir_program *dst, const kir_program *sub, int64_t size,
                          const int *bd, const bool *force, kir_program **out) {
  int ni = sub->n_invars, no = sub->n_outvars;
  kir_program *s = NULL;
  kir_vid *v = malloc((size_t)(ni + no + 1) * sizeof *v);
  int *ybd = malloc((size_t)(no + 1) * sizeof *ybd);
  kiln_status st = v && ybd ? kir_program_new_sub(dst, &s)
                            : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_batched_invars(op, s, sub, size, bd, v);
  kir_vid *y = v + ni;
  if (!st) st = ktf_vmap(op, s, sub, size, v, bd, y, ybd);
  for (int i = 0; !st && i < no; i++) {
    if (force && !force[i]) {
      if (ybd[i] >= 0)
        st = kcore_fail(KILN_ERR_INTERNAL, "%s: output %d is batched but must not be", op, i);
      continue;
    }
    st = kir_batch_front(s, y[i], ybd[i], size, kir_var_aval(sub, sub->outvars[i]), &y[i]);
  }
  if (!st) st = kir_set_outputs(s, no, y);
  if (!st) *out = s;
  free(v);
  free(ybd);
  return st;
}

kiln_status ktf_batched_outs(const char *op, const kir_program *sub, int64_t size, const int *bd,
                             int *ybd) {
  kir_program *s = NULL;
  kir_vid *v = malloc((size_t)(sub->n_invars + sub->n_outvars + 1) * sizeof *v);
  kiln_status st = v ? kir_program_new(&s) : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_batched_invars(op, s, sub, size, bd, v);
  if (!st) st = ktf_vmap(op, s, sub, size, v, bd, v + sub->n_invars, ybd);
  free(v);
  kir_program_free(s);
  return st;
}

kiln_status ktf_emit_mapped(kir_program *p, kir_prim prim, const kir_params *params, int n,
                            const kir_vid *in, int n_out, kir_vid *y, int *ybd) {
  int idx;
  kiln_status st = kir_add_eqn(p, prim, params, n, in, &idx);
  for (int j = 0; !st && j < n_out; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = 0;
  }
  return st;
}
