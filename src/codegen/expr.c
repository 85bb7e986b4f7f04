/* The scalar expression emitter shared by both targets: the value of a var
 * at a position, as a C expression over the prelude's helpers.
 *
 * Values are computed on demand and memoized per (var, index); each becomes
 * a `const` local written into the scope where its operands are defined,
 * so work that does not depend on a loop's variable lands outside that
 * loop. f16 and bf16 are computed in f32 and rounded back to their type
 * after every primitive that can leave it. */
#include <string.h>
#include "codegen/codegen.h"

/* ---- memo ---- */

void kcg_memo_put(kcg_ctx *c, kir_vid v, int ix, bool raw, kcg_term value) {
  if (!kcg_grow_table(c, (void **)&c->memo, &c->cap_memo, c->n_memo + 1, sizeof(kcg_memo)))
    return;
  c->memo[c->n_memo++] = (kcg_memo){v, ix, raw, value};
}

static bool kcg_memo_get(kcg_ctx *c, kir_vid v, int ix, bool raw, kcg_term *out) {
  for (int i = c->n_memo - 1; i >= 0; i--) {
    const kcg_memo *m = &c->memo[i];
    if (m->v == v && m->index == ix && m->raw == raw && kcg_scope_visible(c, m->value.scope)) {
      *out = m->value;
      return true;
    }
  }
  return false;
}

/* A kept row value, inside a later loop over the same row. */
static bool kcg_row_cache_get(kcg_ctx *c, kir_vid v, int ix, kcg_term *out) {
  int rl = c->scopes[c->cur].row_loop;
  if (rl < 0 || !c->cache[v].ready) return false;
  const kcg_row_loop *l = &c->row_loops[rl];
  if (l->index != ix || !l->slot) return false;
  *out = kcg_term_make(kcg_strf(c, "%s[%s]", c->cache[v].array, l->slot), l->slot_scope);
  return true;
}

/* Keeps v's row value when later passes need it too. */
static void kcg_row_cache_put(kcg_ctx *c, kir_vid v, int ix, kcg_term value) {
  int rl = c->scopes[value.scope].row_loop;
  if (!c->cacheable[v] || rl < 0 || c->pass < 0) return;
  const kcg_row_loop *l = &c->row_loops[rl];
  kcg_row_cache *k = &c->cache[v];
  if (l->index != ix || !l->slot || k->ready) return;
  if (!k->array) {
    k->array = kcg_fresh(c, "row");
    k->pass = c->pass;
    kcg_line(c, l->row_scope, "%s %s[%lld];", kcg_ctype(kir_var_aval(c->p, v)->dtype), k->array,
             (long long)l->slots);
  }
  if (k->pass == c->pass) kcg_line(c, value.scope, "%s[%s] = %s;", k->array, l->slot, value.expr);
}

void kcg_row_pass_end(kcg_ctx *c) {
  for (int v = 0; v < c->p->n_vars; v++)
    if (c->cache[v].array && c->cache[v].pass == c->pass) c->cache[v].ready = true;
}

/* ---- locals ---- */

/* `const T name = expr;` in `scope`. */
kcg_term kcg_local(kcg_ctx *c, kiln_dtype d, int scope, const char *expr) {
  const char *name = kcg_fresh(c, "v");
  kcg_line(c, scope, "const %s %s = %s;", kcg_ctype(d), name, expr);
  return kcg_term_make(name, scope);
}

const char *kcg_arg_name(kcg_ctx *c, int slot) {
  return slot < c->g->n_in ? kcg_strf(c, "in%d", slot) : kcg_strf(c, "out%d", slot - c->g->n_in);
}

static const char *kcg_from_storage(kcg_ctx *c, kiln_dtype d, const char *e) {
  if (d == KILN_F16) return kcg_strf(c, "kiln_h2f(%s)", e);
  if (d == KILN_BF16) return kcg_strf(c, "kiln_bh2f(%s)", e);
  return e;
}

static const char *kcg_to_storage(kcg_ctx *c, kiln_dtype d, const char *e) {
  if (d == KILN_F16) return kcg_strf(c, "kiln_f2h(%s)", e);
  if (d == KILN_BF16) return kcg_strf(c, "kiln_f2bh(%s)", e);
  return e;
}

/* The element of input v at ix as stored (f16/bf16: their 16 bits). */
static kcg_term kcg_load_stored(kcg_ctx *c, kir_vid v, int ix) {
  int slot = c->arg[v];
  c->arg_used[slot] = true;
  const char *lin_now = c->idx[ix].lin.expr;
  if (c->item_lin && lin_now && strcmp(lin_now, c->item_lin) == 0) c->arg_at_item[slot] = true;
  kcg_term lin = kcg_index_lin(c, ix);
  const char *name = kcg_fresh(c, "v");
  kcg_line(c, lin.scope, "const %s %s = %s[%s];", kcg_stype(kir_var_aval(c->p, v)->dtype), name,
           kcg_arg_name(c, slot), lin.expr);
  return kcg_term_make(name, lin.scope);
}

static bool kcg_is_index_map(const kir_program *p, const kir_eqn *e) {
  if (kir_prim_is_index_map(e->prim)) return true;
  return e->prim == KIR_PRIM_CONVERT_ELEMENT_TYPE &&
         kir_var_aval(p, e->in[0])->dtype == e->params.convert.new_dtype;
}

/* The stored bits of an f16/bf16 v at ix when v is an input read through
 * index maps only: such data then moves without a round trip through f32,
 * which would quiet signaling NaNs (XLA's copies keep every bit). Returns
 * false otherwise. */
bool kcg_raw(kcg_ctx *c, kir_vid v, int ix, kcg_term *out) {
  if (!kcg_is_half(kir_var_aval(c->p, v)->dtype)) return false;
  for (;;) {
    if (c->st != KILN_OK || c->p->vars[v].kind == KIR_VAR_LITERAL) return false;
    if (kcg_memo_get(c, v, ix, true, out)) return true;
    if (c->arg[v] >= 0) {
      *out = kcg_load_stored(c, v, ix);
      kcg_memo_put(c, v, ix, true, *out);
      return true;
    }
    if (c->def[v] < 0) return false;
    const kir_eqn *e = &c->p->eqns[c->def[v]];
    if (!kcg_is_index_map(c->p, e)) return false;
    ix = kcg_index_operand(c, e, 0, ix);
    v = e->in[0];
  }
}

static kcg_term kcg_load(kcg_ctx *c, kir_vid v, int ix) {
  kiln_dtype d = kir_var_aval(c->p, v)->dtype;
  kcg_term raw;
  /* Stored bits at hand: a half read through index maps, or an element of
   * a vector the skeleton loaded (kcg_memo_put with raw, any dtype). */
  if (kcg_raw(c, v, ix, &raw) || kcg_memo_get(c, v, ix, true, &raw))
    return kcg_local(c, d, raw.scope, kcg_from_storage(c, d, raw.expr));
  int slot = c->arg[v];
  c->arg_used[slot] = true;
  const char *lin_now = c->idx[ix].lin.expr;
  if (c->item_lin && lin_now && strcmp(lin_now, c->item_lin) == 0) c->arg_at_item[slot] = true;
  kcg_term lin = kcg_index_lin(c, ix);
  return kcg_local(c, d, lin.scope, kcg_strf(c, "%s[%s]", kcg_arg_name(c, slot), lin.expr));
}

void kcg_store(kcg_ctx *c, int slot, kir_vid v, int ix) { kcg_store_to(c, slot, v, ix, NULL); }

void kcg_store_to(kcg_ctx *c, int slot, kir_vid v, int ix, const char *dest) {
  kiln_dtype d = kir_var_aval(c->p, v)->dtype;
  kcg_term raw, x;
  const char *stored;
  if (kcg_raw(c, v, ix, &raw)) {
    stored = raw.expr;
  } else {
    x = kcg_value(c, v, ix);
    /* kiln_f2bh(kiln_rnd_bf16(y)) is kiln_f2bh(y): the value's top half */
    stored = c->bf16_rounded[v] ? kcg_strf(c, "kiln_bf16_top(%s)", x.expr)
                                : kcg_to_storage(c, d, x.expr);
  }
  kcg_term lin = kcg_index_lin(c, ix);
  if (c->st != KILN_OK) return;
  c->arg_used[slot] = true;
  if (dest)
    kcg_line(c, c->cur, "%s = %s;", dest, stored);
  else
    kcg_line(c, c->cur, "%s[%s] = %s;", kcg_arg_name(c, slot), lin.expr, stored);
}

const char *kcg_store_expr(kcg_ctx *c, kiln_dtype d, const char *value) {
  return kcg_to_storage(c, d, value);
}

const char *kcg_load_expr(kcg_ctx *c, kiln_dtype d, const char *stored) {
  return kcg_from_storage(c, d, stored);
}

static kcg_term kcg_eqn_reduce(kcg_ctx *c, int eqn, kir_vid v, int ix) {
  int set = c->reduce_set[eqn];
  KCORE_ASSERT(set >= 0);
  const kir_eqn *e = &c->p->eqns[eqn];
  if (e->params.axes.axes.n == 0) return kcg_value(c, e->in[0], ix); /* nothing to reduce */
  int start = c->set_start[set], n = c->set_start[set + 1] - start;
  kcg_term out[KCG_MAX_SET], mine = kcg_term_make("0", 0);
  KCORE_ASSERT(n <= KCG_MAX_SET);
  c->reduce(c, &c->set_eqns[start], n, ix, out);
  if (c->st != KILN_OK) return mine;
  for (int k = 0; k < n; k++) {
    kir_vid o = c->p->eqns[c->set_eqns[start + k]].out[0];
    if (o == v)
      mine = out[k];
    else
      kcg_memo_put(c, o, ix, false, out[k]);
  }
  return mine;
}

/* ---- values ---- */

static kcg_term kcg_eqn_value(kcg_ctx *c, int eqn, kir_vid v, int ix) {
  const kir_eqn *e = &c->p->eqns[eqn];
  if (kir_prim_is_index_map(e->prim)) return kcg_value(c, e->in[0], kcg_index_operand(c, e, 0, ix));
  switch (e->prim) {
    case KIR_PRIM_IOTA: return kcg_eqn_iota(c, e, v, ix);
    case KIR_PRIM_BITCAST_CONVERT_TYPE: return kcg_eqn_bitcast(c, e, v, ix);
    case KIR_PRIM_REDUCE_SUM:
    case KIR_PRIM_REDUCE_MAX:
    case KIR_PRIM_REDUCE_MIN:
    case KIR_PRIM_REDUCE_PROD:
    case KIR_PRIM_REDUCE_AND:
    case KIR_PRIM_REDUCE_OR:
      return kcg_eqn_reduce(c, eqn, v, ix);
    default:
      return kcg_eqn_elementwise(c, e, v, ix);
  }
}

kcg_term kcg_value(kcg_ctx *c, kir_vid v, int ix) {
  kcg_term r = kcg_term_make("0", 0);
  if (c->st != KILN_OK) return r;
  const kir_var *var = &c->p->vars[v];
  if (var->kind == KIR_VAR_LITERAL) return kcg_term_make(kcg_literal(c, var->aval.dtype, var->u.literal), 0);
  if (kcg_memo_get(c, v, ix, false, &r) || kcg_row_cache_get(c, v, ix, &r)) return r;
  if (c->arg[v] >= 0 && c->arg[v] < c->g->n_in)
    r = kcg_load(c, v, ix);
  else if (c->def[v] >= 0)
    r = kcg_eqn_value(c, c->def[v], v, ix);
  else
    kcg_fail(c, KILN_ERR_ARGUMENT,
             "kcg_emit: var %d is read by the group but neither defined by one of its equations "
             "nor among its inputs",
             (int)v);
  if (c->st != KILN_OK) return r;
  kcg_memo_put(c, v, ix, false, r);
  kcg_row_cache_put(c, v, ix, r);
  return r;
}
