/* Which dot_generals BLAS reads in place, and transposes folded into the
 * dot_generals they feed. Transposition writes dot_generals whose operands
 * are transposes (the gradient of q . transpose(k)); with the permutation
 * moved into the dimension numbers the GEMM takes the operand as it is
 * stored, through a transpose flag, and no kernel copies it first. */
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

/* Whether d lists first, first + 1, ..., first + n - 1 (n >= 1 entries). */
static bool kir_dims_run(const kir_dims *d, int first) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] != first + i) return false;
  return d->n > 0;
}

static int64_t kir_dims_extent(const kir_aval *x, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= x->shape[i];
  return n;
}

/* One operand as [batch, rows, cols] (trans false) or [batch, cols, rows]:
 * its contracting dims one ascending run right after the batch dims or at
 * the end. contract_first: the contracting dims are the rows (rhs). */
static bool kir_gemm_side(const kir_aval *x, int nb, const kir_dims *contract, bool contract_first,
                          int64_t *free_n, bool *trans) {
  int nc = contract->n;
  if (!kir_dims_run(contract, contract->v[0])) return false;
  bool at_start = contract->v[0] == nb, at_end = contract->v[0] + nc == x->rank;
  if (!at_start && !at_end) return false;
  /* no free dims: both layouts are the same, take the plain one */
  *trans = at_start && at_end ? false : at_start != contract_first;
  *free_n = at_start ? kir_dims_extent(x, nb + nc, x->rank) : kir_dims_extent(x, nb, x->rank - nc);
  return true;
}

bool kir_dot_gemm_layout(const kir_aval *lhs, const kir_aval *rhs, const kir_dot_dims *d,
                         kir_gemm_layout *out) {
  int nb = d->lhs_batch.n;
  if (d->lhs_contracting.n == 0 || d->rhs_contracting.n != d->lhs_contracting.n ||
      d->rhs_batch.n != nb || (nb && (!kir_dims_run(&d->lhs_batch, 0) || !kir_dims_run(&d->rhs_batch, 0))))
    return false;
  if (!kir_gemm_side(lhs, nb, &d->lhs_contracting, false, &out->m, &out->trans_a) ||
      !kir_gemm_side(rhs, nb, &d->rhs_contracting, true, &out->n, &out->trans_b))
    return false;
  out->batch = kir_dims_extent(lhs, 0, nb);
  out->k = 1;
  for (int i = 0; i < d->lhs_contracting.n; i++) out->k *= lhs->shape[d->lhs_contracting.v[i]];
  return true;
}

/* The transpose producing operand *v, folded: *v becomes its operand and the
 * side's contracting and batch dims are mapped through the permutation.
 * False, changing nothing, when *v is no transpose or when the permutation
 * reorders the side's free dims (the result's layout would change). */
static bool kir_peel_transpose(const kir_program *p, kir_vid *v, kir_dims *contract,
                               kir_dims *batch) {
  const kir_var *var = &p->vars[*v];
  if (var->kind != KIR_VAR_EQN || var->eqn < 0) return false;
  const kir_eqn *t = &p->eqns[var->eqn];
  if (t->prim != KIR_PRIM_TRANSPOSE) return false;
  const kir_dims *perm = &t->params.transpose.permutation;
  for (int d = 0, last = -1; d < perm->n; d++) {
    if (kir_dims_contains(contract, d) || kir_dims_contains(batch, d)) continue;
    if (perm->v[d] < last) return false;
    last = perm->v[d];
  }
  for (int i = 0; i < contract->n; i++) contract->v[i] = perm->v[contract->v[i]];
  for (int i = 0; i < batch->n; i++) batch->v[i] = perm->v[batch->v[i]];
  *v = t->in[0];
  return true;
}

/* Folds the transposes feeding dot_general e (lhs and rhs together, else
 * either alone) where the dot then is a GEMM on the operands as stored; a
 * transpose of a transpose folds in turn. The transposes stay for their
 * other users (kir_dce drops the rest). Returns the number folded. */
int kir_dot_fold_transposes(const kir_program *p, kir_eqn *e) {
  static const int masks[3] = {3, 1, 2};
  int folded = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int m = 0; m < 3 && !changed; m++) {
      kir_dot_dims nd = e->params.dot.dimension_numbers;
      kir_vid in[2] = {e->in[0], e->in[1]};
      bool ok = true;
      if (masks[m] & 1) ok = kir_peel_transpose(p, &in[0], &nd.lhs_contracting, &nd.lhs_batch);
      if (ok && (masks[m] & 2))
        ok = kir_peel_transpose(p, &in[1], &nd.rhs_contracting, &nd.rhs_batch);
      kir_gemm_layout g;
      if (!ok || !kir_dot_gemm_layout(kir_var_aval(p, in[0]), kir_var_aval(p, in[1]), &nd, &g))
        continue;
      e->in[0] = in[0];
      e->in[1] = in[1];
      e->params.dot.dimension_numbers = nd;
      folded += m ? 1 : 2;
      changed = true;
    }
  }
  return folded;
}
