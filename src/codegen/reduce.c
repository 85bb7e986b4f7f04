/* Reductions for the skeletons: each reduction's combination and identity,
 * the operand index of a reduced element, accumulators, sequential loops
 * over the reduced dimensions (with independent lanes where the compiler can
 * vectorize them), and the loops over one row of a ROW kernel. */
#include <math.h>
#include <stdlib.h>
#include "codegen/codegen.h"

kcg_reducer kcg_reducer_of(kcg_ctx *c, kir_prim prim, kiln_dtype d) {
  kcg_reducer r;
  const char *s = kcg_sfx(d);
  bool fl = kiln_dtype_is_float(d), sg = kiln_dtype_is_signed(d) && !fl;
  int bits = (int)kiln_dtype_size(d) * 8;
  int64_t smin = bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
  uint64_t umax = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
  kir_scalar id = kir_scalar_i(0);
  const char *op;
  switch (prim) {
    case KIR_PRIM_REDUCE_SUM:
    case KIR_PRIM_REDUCE_PROD:
      op = prim == KIR_PRIM_REDUCE_SUM ? "add" : "mul";
      if (fl)
        id = kir_scalar_f(prim == KIR_PRIM_REDUCE_SUM ? 0.0 : 1.0);
      else
        id = kir_scalar_i(prim == KIR_PRIM_REDUCE_SUM ? 0 : 1);
      if (kcg_is_half(d)) s = d == KILN_F16 ? "f16" : "bf16"; /* rounds every step */
      break;
    case KIR_PRIM_REDUCE_MAX:
      op = "max";
      if (fl) id = kir_scalar_f(-INFINITY);
      else if (sg) id = kir_scalar_i(smin);
      break;
    case KIR_PRIM_REDUCE_MIN:
      op = "min";
      if (fl) id = kir_scalar_f(INFINITY);
      else if (sg) id = kir_scalar_i(-(smin + 1));
      else id = d == KILN_BOOL ? kir_scalar_i(1) : kir_scalar_u(umax);
      break;
    case KIR_PRIM_REDUCE_AND:
      op = "and";
      id = d == KILN_BOOL ? kir_scalar_i(1) : sg ? kir_scalar_i(-1) : kir_scalar_u(umax);
      break;
    default:
      KCORE_ASSERT(prim == KIR_PRIM_REDUCE_OR);
      op = "or";
      break;
  }
  r.name = kcg_strf(c, "%s_%s", op, s);
  r.combine = kcg_strf(c, "kiln_%s_%s", op, s);
  r.identity = kcg_literal(c, d == KILN_F16 || d == KILN_BF16 ? KILN_F32 : d, id);
  r.ctype = kcg_ctype(d);
  r.block = prim == KIR_PRIM_REDUCE_SUM && (d == KILN_F32 || d == KILN_F64);
  return r;
}

int kcg_reduce_axes(const kcg_ctx *c, const kir_eqn *e, int *axes, int64_t *count) {
  const kir_aval *a = kir_var_aval(c->p, e->in[0]);
  int n = 0;
  *count = 1;
  for (int d = 0; d < a->rank; d++)
    for (int k = 0; k < e->params.axes.axes.n; k++)
      if (e->params.axes.axes.v[k] == d) {
        axes[n++] = d;
        *count *= a->shape[d];
      }
  return n;
}

int kcg_reduce_operand_index(kcg_ctx *c, const kir_eqn *e, int ix, const kcg_term *rcoords,
                             const kcg_term *rlin) {
  const kir_aval *a = kir_var_aval(c->p, e->in[0]);
  int axes[KIR_MAX_RANK];
  int64_t count, rshape[KIR_MAX_RANK];
  int m = kcg_reduce_axes(c, e, axes, &count);
  bool trailing = true;
  for (int k = 0; k < m; k++) {
    rshape[k] = a->shape[axes[k]];
    trailing = trailing && axes[k] == a->rank - m + k;
  }
  kcg_term lin, oc[KIR_MAX_RANK], rc[KIR_MAX_RANK];
  bool have_lin = false, have_coords = false;
  if (!rcoords) { /* coordinates over the reduced dims, from their linear index */
    if (trailing) {
      rcoords = NULL;
    } else {
      int rix = kcg_index_get(c, m, rshape, rlin, NULL);
      memcpy(rc, kcg_index_coords(c, rix), sizeof(kcg_term) * (size_t)m);
      rcoords = rc;
    }
  }
  if (trailing) { /* the reduced elements of one result are contiguous */
    kcg_term r = rlin ? *rlin : rcoords[0];
    if (!rlin)
      for (int k = 1; k < m; k++)
        r = kcg_term_make(kcg_strf(c, "(%s * %lld + %s)", r.expr, (long long)rshape[k],
                                   rcoords[k].expr),
                          kcg_scope_deeper(c, r.scope, rcoords[k].scope));
    kcg_term base = kcg_index_lin(c, ix);
    if (strcmp(base.expr, "0") == 0)
      lin = r;
    else
      lin = kcg_term_make(kcg_strf(c, "(%s * %lld + %s)", base.expr, (long long)count, r.expr),
                          kcg_scope_deeper(c, base.scope, r.scope));
    have_lin = true;
  }
  if (rcoords && (!trailing || c->idx[ix].has_coords)) {
    const kcg_term *xc = kcg_index_coords(c, ix);
    int j = 0, k = 0;
    for (int d = 0; d < a->rank; d++)
      oc[d] = (k < m && axes[k] == d) ? rcoords[k++] : xc[j++];
    have_coords = true;
  }
  return kcg_index_get(c, a->rank, a->shape, have_lin ? &lin : NULL, have_coords ? oc : NULL);
}

void kcg_reducers(kcg_ctx *c, const int *eqns, int n, kcg_reducer *r) {
  for (int k = 0; k < n; k++) {
    const kir_eqn *e = &c->p->eqns[eqns[k]];
    r[k] = kcg_reducer_of(c, e->prim, kir_var_aval(c->p, e->in[0])->dtype);
  }
}

void kcg_acc_declare(kcg_ctx *c, int scope, const kcg_reducer *r, int n, bool lanes,
                     const char **acc) {
  for (int k = 0; k < n; k++) {
    acc[k] = kcg_fresh(c, "acc");
    if (lanes) {
      const char *init = r[k].identity;
      for (int l = 1; l < KCG_LANES; l++) init = kcg_strf(c, "%s, %s", init, r[k].identity);
      kcg_line(c, scope, "%s %s[KILN_LANES] = {%s};", r[k].ctype, acc[k], init);
      kcg_helper(c, kcg_strf(c, "KILN_DEFINE_LANES_REDUCE(%s, %s, %s)", r[k].name, r[k].ctype,
                             r[k].combine));
      c->uses_reduce_h = true;
    } else {
      kcg_line(c, scope, "%s %s = %s;", r[k].ctype, acc[k], r[k].identity);
    }
  }
}

void kcg_accumulate(kcg_ctx *c, const int *eqns, int n, const int *oix, const kcg_reducer *r,
                    const char *const *acc, const char *sub) {
  for (int k = 0; k < n; k++) {
    kcg_term x = kcg_value(c, c->p->eqns[eqns[k]].in[0], oix[k]);
    if (c->st != KILN_OK) return;
    kcg_line(c, c->cur, "%s%s = %s(%s%s, %s);", acc[k], sub, r[k].combine, acc[k], sub, x.expr);
  }
}

bool kcg_blocked(const kcg_reducer *r, int n) {
  for (int k = 0; k < n; k++)
    if (r[k].block) return true;
  return false;
}

void kcg_cascade_declare(kcg_ctx *c, int scope, const kcg_reducer *r, int n, const char *width,
                         int64_t max_blocks, kcg_cascade *k) {
  int levels = 1;
  while (levels < 62 && ((int64_t)1 << levels) <= max_blocks) levels++;
  k->width = width;
  k->count = kcg_fresh(c, "nblk");
  kcg_line(c, scope, "kiln_i64 %s = 0;", k->count);
  for (int q = 0; q < n; q++) {
    k->stack[q] = NULL;
    if (!r[q].block) continue;
    k->stack[q] = kcg_fresh(c, "blk");
    kcg_line(c, scope, "%s %s[%d * %s];", r[q].ctype, k->stack[q], levels, width ? width : "1");
    kcg_helper(c, kcg_strf(c, "KILN_DEFINE_CASCADE(%s, %s, %s, %s)", r[q].name, r[q].ctype,
                           r[q].combine, r[q].identity));
    c->uses_reduce_h = true;
  }
}

void kcg_cascade_step(kcg_ctx *c, int scope, const kcg_reducer *r, int n, const char *const *acc,
                      const kcg_cascade *k, const char *bound, bool end) {
  const char *w = bound ? bound : k->width ? k->width : "1";
  for (int q = 0; q < n; q++) {
    if (!r[q].block) continue;
    kcg_line(c, scope, "kiln_cascade_%s_%s(%s, %s%s, %s, %s);", end ? "end" : "push", r[q].name,
             k->stack[q], k->width ? "" : "&", acc[q], w, k->count);
  }
  if (!end) kcg_line(c, scope, "++%s;", k->count);
}

kcg_term kcg_acc_result(kcg_ctx *c, int scope, const kcg_reducer *r, const char *expr) {
  const char *name = kcg_fresh(c, "res");
  kcg_line(c, scope, "const %s %s = %s;", r->ctype, name, expr);
  return kcg_term_make(name, scope);
}

/* The operand indices of every reduction of the set, at the reduced
 * coordinates rc. */
static void kcg_operand_indices(kcg_ctx *c, const int *eqns, int n, int ix, const kcg_term *rc,
                                int *oix) {
  for (int k = 0; k < n; k++)
    oix[k] = kcg_reduce_operand_index(c, &c->p->eqns[eqns[k]], ix, rc, NULL);
}

void kcg_reduce_nested(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out, bool lanes) {
  const kir_eqn *e = &c->p->eqns[eqns[0]];
  const kir_aval *a = kir_var_aval(c->p, e->in[0]);
  int axes[KIR_MAX_RANK], oix[KCG_MAX_SET], loops[KIR_MAX_RANK + 1], nl = 0;
  int64_t count;
  int m = kcg_reduce_axes(c, e, axes, &count);
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  kcg_term rc[KIR_MAX_RANK];
  int64_t inner = a->shape[axes[m - 1]];
  lanes = lanes && axes[m - 1] == a->rank - 1 && inner >= 2 * KCG_LANES;
  int scope = kcg_index_scope(c, ix);
  kcg_reducers(c, eqns, n, r);
  kcg_acc_declare(c, scope, r, n, lanes, acc);
  /* One loop per reduced dimension, outermost first. */
  int parent = scope;
  for (int k = 0; k < m - 1; k++) {
    const char *v = kcg_fresh(c, "r");
    parent = loops[nl++] = kcg_scope_open(
        c, parent,
        kcg_strf(c, "for (%s %s = 0; %s < %lld; ++%s) {", c->idx_type, v, v,
                 (long long)a->shape[axes[k]], v),
        "}");
    rc[k] = kcg_term_make(v, parent);
  }
  const char *v = kcg_fresh(c, "r");
  int64_t main = lanes ? inner - inner % KCG_LANES : inner, width = lanes ? KCG_LANES : 1;
  /* Blocks within the innermost loop when one pass of it is long; else a
   * flush after each pass, when the chains run across passes and a pass is
   * long enough to pay for it. */
  bool blocked = kcg_blocked(r, n);
  bool block_inner = blocked && main / width > KCG_BLOCK;
  bool flush_rows = blocked && !block_inner && m > 1 && count / width > KCG_BLOCK &&
                    main / width >= KCG_BLOCK / 16;
  kcg_cascade cas;
  int64_t rows = inner ? count / inner : 0, /* zero-size operands: no rows */
          per_row = (main + KCG_BLOCK * width - 1) / (KCG_BLOCK * width);
  if (block_inner || flush_rows)
    kcg_cascade_declare(c, scope, r, n, lanes ? "KILN_LANES" : NULL,
                        block_inner ? rows * per_row : rows, &cas);
  int host = parent;
  const char *lo = "0", *hi = kcg_strf(c, "%lld", (long long)main);
  if (block_inner) {
    const char *bb = kcg_fresh(c, "bb"), *be = kcg_fresh(c, "be");
    host = kcg_scope_open(c, parent,
                          kcg_strf(c, "for (%s %s = 0; %s < %s; %s += %lld) {\n"
                                   "  const %s %s = %s + %lld < %s ? %s + %lld : %s;",
                                   c->idx_type, bb, bb, hi, bb, (long long)(KCG_BLOCK * width),
                                   c->idx_type, be, bb, (long long)(KCG_BLOCK * width), hi, bb,
                                   (long long)(KCG_BLOCK * width), hi),
                          "}");
    lo = bb;
    hi = be;
  }
  if (lanes) {
    const char *vb = kcg_fresh(c, "rb"), *l = kcg_fresh(c, "l");
    int s = kcg_scope_open(
        c, host,
        kcg_strf(c,
                 "for (%s %s = %s; %s < %s; %s += KILN_LANES) {\n"
                 "  KILN_LANES_LOOP for (int %s = 0; %s < KILN_LANES; ++%s) {\n"
                 "    const %s %s = %s + %s;",
                 c->idx_type, vb, lo, vb, hi, vb, l, l, l, c->idx_type, v, vb, l),
        "  }\n}");
    c->scopes[s].indent++;
    rc[m - 1] = kcg_term_make(v, s);
    kcg_operand_indices(c, eqns, n, ix, rc, oix);
    kcg_accumulate(c, eqns, n, oix, r, acc, kcg_strf(c, "[%s]", l));
    kcg_scope_close(c, s);
    v = kcg_fresh(c, "r");
  } else {
    int s = kcg_scope_open(c, host,
                           kcg_strf(c, "for (%s %s = %s; %s < %s; ++%s) {", c->idx_type, v, lo, v,
                                    hi, v),
                           "}");
    rc[m - 1] = kcg_term_make(v, s);
    kcg_operand_indices(c, eqns, n, ix, rc, oix);
    kcg_accumulate(c, eqns, n, oix, r, acc, "");
    kcg_scope_close(c, s);
  }
  if (block_inner) {
    kcg_cascade_step(c, host, r, n, acc, &cas, NULL, false);
    kcg_scope_close(c, host);
  }
  if (lanes && main < inner) {
    int s = kcg_scope_open(c, parent,
                           kcg_strf(c, "for (%s %s = %lld; %s < %lld; ++%s) {", c->idx_type, v,
                                    (long long)main, v, (long long)inner, v),
                           "}");
    rc[m - 1] = kcg_term_make(v, s);
    kcg_operand_indices(c, eqns, n, ix, rc, oix);
    kcg_accumulate(c, eqns, n, oix, r, acc, "[0]");
    kcg_scope_close(c, s);
  }
  if (flush_rows) kcg_cascade_step(c, parent, r, n, acc, &cas, NULL, false);
  while (nl > 0) kcg_scope_close(c, loops[--nl]);
  if (block_inner || flush_rows) kcg_cascade_step(c, scope, r, n, acc, &cas, NULL, true);
  for (int k = 0; k < n; k++)
    out[k] = kcg_acc_result(
        c, scope, &r[k], lanes ? kcg_strf(c, "kiln_lanes_%s(%s)", r[k].name, acc[k]) : acc[k]);
}

/* ---- loops over one row ---- */

int kcg_row_loop_open(kcg_ctx *c, int row_scope, int row_ix, kcg_term rowbase,
                      const char *header, const char *j, const char *slot, int64_t slots) {
  int s = kcg_scope_open(c, row_scope, header, "}");
  if (!kcg_grow_table(c, (void **)&c->row_loops, &c->cap_row_loops, c->n_row_loops + 1,
                      sizeof(kcg_row_loop)))
    return s;
  int rank, nc;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  kcg_term coords[KIR_MAX_RANK], jt = kcg_term_make(j, s);
  const kcg_term *rc = kcg_index_coords(c, row_ix);
  for (nc = 0; nc < rank - 1; nc++) coords[nc] = rc[nc];
  coords[rank - 1] = jt;
  kcg_term lin = strcmp(rowbase.expr, "0") == 0
                     ? jt
                     : kcg_term_make(kcg_strf(c, "(%s + %s)", rowbase.expr, j), s);
  kcg_row_loop *l = &c->row_loops[c->n_row_loops];
  l->index = kcg_index_get(c, rank, shape, &lin, coords);
  l->slot = slot;
  l->slot_scope = s;
  l->row_scope = row_scope;
  l->slots = slots;
  c->scopes[s].row_loop = c->n_row_loops++;
  return s;
}

int kcg_row_loop_index(const kcg_ctx *c, int loop_scope) {
  int rl = c->scopes[loop_scope].row_loop;
  return rl >= 0 ? c->row_loops[rl].index : 0; /* -1 only after a failure */
}
