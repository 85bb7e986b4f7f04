/* The scalar expression emitter shared by both targets: the value of a var
 * at a position, as a C expression over the prelude's helpers.
 *
 * Values are computed on demand and memoized per (var, index); each becomes
 * a `const` local written into the scope where its operands are defined,
 * so work that does not depend on a loop's variable lands outside that
 * loop. f16 and bf16 are computed in f32 and rounded back to their type
 * after every primitive that can leave it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "codegen/codegen.h"

/* ---- dtypes ---- */

const char *kcg_ctype(kiln_dtype d) {
  switch (d) {
    case KILN_BOOL: return "kiln_bool";
    case KILN_I8: return "kiln_i8";
    case KILN_I16: return "kiln_i16";
    case KILN_I32: return "kiln_i32";
    case KILN_I64: return "kiln_i64";
    case KILN_U8: return "kiln_u8";
    case KILN_U16: return "kiln_u16";
    case KILN_U32: return "kiln_u32";
    case KILN_U64: return "kiln_u64";
    case KILN_F64: return "double";
    default: return "float"; /* f16, bf16, f32 */
  }
}

const char *kcg_stype(kiln_dtype d) {
  return d == KILN_F16 || d == KILN_BF16 ? "kiln_half" : kcg_ctype(d);
}

/* The suffix of the prelude's helpers for d's compute type. */
static const char *kcg_sfx(kiln_dtype d) {
  switch (d) {
    case KILN_BOOL: return "bool";
    case KILN_I8: return "i8";
    case KILN_I16: return "i16";
    case KILN_I32: return "i32";
    case KILN_I64: return "i64";
    case KILN_U8: return "u8";
    case KILN_U16: return "u16";
    case KILN_U32: return "u32";
    case KILN_U64: return "u64";
    case KILN_F64: return "f64";
    default: return "f32";
  }
}

static bool kcg_is_half(kiln_dtype d) { return d == KILN_F16 || d == KILN_BF16; }

/* The suffix of <math.h>'s functions: expf / exp. */
static const char *kcg_mathf(kiln_dtype d) { return d == KILN_F64 ? "" : "f"; }

/* Rounds an f32 expression to d when d is a 16-bit float. */
static const char *kcg_round_to(kcg_ctx *c, kiln_dtype d, const char *e) {
  if (d == KILN_F16) return kcg_strf(c, "kiln_rnd_f16(%s)", e);
  if (d == KILN_BF16) return kcg_strf(c, "kiln_rnd_bf16(%s)", e);
  return e;
}

/* ---- literals ---- */

/* v rounded to a float dtype, at emission time. */
static double kcg_round_value(kiln_dtype d, double v) {
  switch (d) {
    case KILN_F16: return kcore_f16_to_f32(kcore_f32_to_f16((float)v));
    case KILN_BF16: return kcore_bf16_to_f32(kcore_f32_to_bf16((float)v));
    case KILN_F32: return (float)v;
    default: return v;
  }
}

static const char *kcg_float_literal(kcg_ctx *c, double v, bool f32) {
  if (isnan(v)) return f32 ? "KILN_NAN_F32" : "KILN_NAN_F64";
  if (isinf(v)) return v > 0 ? (f32 ? "KILN_INF_F32" : "KILN_INF_F64")
                             : (f32 ? "(-KILN_INF_F32)" : "(-KILN_INF_F64)");
  char buf[48];
  snprintf(buf, sizeof buf, f32 ? "%.9g" : "%.17g", v);
  const char *dot = strpbrk(buf, ".e") ? "" : ".0";
  /* Parenthesized when negative, so that `-` never meets another `-`. */
  return kcg_strf(c, signbit(v) ? "(%s%s%s)" : "%s%s%s", buf, dot, f32 ? "f" : "");
}

const char *kcg_literal(kcg_ctx *c, kiln_dtype d, kir_scalar x) {
  switch (d) {
    case KILN_BOOL: return x.i ? "((kiln_bool)1)" : "((kiln_bool)0)";
    case KILN_I8:
    case KILN_I16:
    case KILN_I32:
    case KILN_I64: {
      int bits = (int)kiln_dtype_size(d) * 8;
      int64_t min = bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
      const char *ll = bits == 64 ? "LL" : "";
      if (x.i == min) /* the most negative value has no literal of its own */
        return kcg_strf(c, "((%s)(%lld%s - 1))", kcg_ctype(d), (long long)(min + 1), ll);
      return kcg_strf(c, "((%s)%s%lld%s%s)", kcg_ctype(d), x.i < 0 ? "(" : "", (long long)x.i, ll,
                      x.i < 0 ? ")" : "");
    }
    case KILN_U8:
    case KILN_U16:
    case KILN_U32:
      return kcg_strf(c, "((%s)%lluu)", kcg_ctype(d), (unsigned long long)x.u);
    case KILN_U64: return kcg_strf(c, "((kiln_u64)%lluull)", (unsigned long long)x.u);
    case KILN_F64: return kcg_float_literal(c, x.f, false);
    default: return kcg_float_literal(c, x.f, true);
  }
}

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
static kcg_term kcg_local(kcg_ctx *c, kiln_dtype d, int scope, const char *expr) {
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
static bool kcg_raw(kcg_ctx *c, kir_vid v, int ix, kcg_term *out) {
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
    stored = kcg_to_storage(c, d, x.expr);
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

/* ---- elementwise primitives ---- */

/* convert_element_type's expression from `from` to `to`; *exact says the
 * result needs no rounding to `to` afterwards. */
static const char *kcg_convert(kcg_ctx *c, kiln_dtype from, kiln_dtype to, const char *a,
                               bool *exact) {
  *exact = true;
  if (from == to) return a;
  if (to == KILN_BOOL) return kcg_strf(c, "((kiln_bool)(%s != 0))", a);
  bool ff = kiln_dtype_is_float(from), tf = kiln_dtype_is_float(to);
  if (tf) {
    if (from == KILN_F64 && to == KILN_F16) return kcg_strf(c, "kiln_f64_to_f16(%s)", a);
    if (to == KILN_F64) return kcg_strf(c, "((double)%s)", a);
    /* to f32, f16, bf16: through f32, rounded once more for 16-bit types
     * (so f64 and large integers -> bf16 round twice, as XLA does). */
    *exact = !kcg_is_half(to) || (kcg_is_half(from) && from == to);
    if (from == KILN_F16 && to == KILN_F32) return a;
    if (from == KILN_BF16 && to == KILN_F32) return a;
    return kcg_strf(c, "((float)%s)", a);
  }
  if (ff) return kcg_strf(c, "kiln_%s_to_%s(%s)", kcg_sfx(from), kcg_sfx(to), a);
  return kcg_strf(c, "((%s)%s)", kcg_ctype(to), a);
}

/* The unsigned integer type of a width in bits. */
static const char *kcg_bits_type(size_t bits) {
  return bits == 8 ? "kiln_u8" : bits == 16 ? "kiln_u16" : bits == 32 ? "kiln_u32" : "kiln_u64";
}

/* A value's storage bits as an unsigned integer of its width. */
static const char *kcg_to_bits(kcg_ctx *c, kiln_dtype d, const char *a) {
  switch (d) {
    case KILN_F16: return kcg_strf(c, "((kiln_u16)kiln_f2h(%s))", a);
    case KILN_BF16: return kcg_strf(c, "((kiln_u16)kiln_f2bh(%s))", a);
    case KILN_F32: return kcg_strf(c, "kiln_f32_bits(%s)", a);
    case KILN_F64: return kcg_strf(c, "kiln_f64_bits(%s)", a);
    default: return kcg_strf(c, "((%s)%s)", kcg_bits_type(kiln_dtype_size(d) * 8), a);
  }
}

static const char *kcg_from_bits(kcg_ctx *c, kiln_dtype d, const char *bits) {
  switch (d) {
    case KILN_F16: return kcg_strf(c, "kiln_h2f((kiln_half)%s)", bits);
    case KILN_BF16: return kcg_strf(c, "kiln_bh2f((kiln_half)%s)", bits);
    case KILN_F32: return kcg_strf(c, "kiln_bits_f32((kiln_u32)%s)", bits);
    case KILN_F64: return kcg_strf(c, "kiln_bits_f64((kiln_u64)%s)", bits);
    default: return kcg_strf(c, "((%s)%s)", kcg_ctype(d), bits);
  }
}

/* integer_pow as JAX lowers it: repeated squaring, every product rounded
 * to d (y's bits are known here, so the chain is spelled out); a negative
 * power is 1 / x^-y. */
static const char *kcg_integer_pow(kcg_ctx *c, kiln_dtype d, const char *a, int64_t y,
                                   bool *exact) {
  bool fl = kiln_dtype_is_float(d);
  const char *s = kcg_sfx(d), *acc = NULL;
  uint64_t k = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
  *exact = !fl;
  for (; k; k >>= 1) {
    if (k & 1)
      acc = !acc ? a
            : fl ? kcg_round_to(c, d, kcg_strf(c, "(%s * %s)", acc, a))
                 : kcg_strf(c, "kiln_mul_%s(%s, %s)", s, acc, a);
    if (k > 1)
      a = fl ? kcg_round_to(c, d, kcg_strf(c, "(%s * %s)", a, a))
             : kcg_strf(c, "kiln_mul_%s(%s, %s)", s, a, a);
  }
  const char *one = kcg_literal(c, kcg_is_half(d) ? KILN_F32 : d, fl ? kir_scalar_f(1.0) : kir_scalar_i(1));
  if (!acc) return one;
  *exact = *exact || y > 0; /* each product is already rounded */
  return y < 0 ? kcg_strf(c, "(%s / %s)", one, acc) : acc;
}

/* The expression of a row's spelling for its class of operand dtype (see
 * prims.def), NULL where the row spells it with a case of its own below. */
static const char *kcg_spelled(kcg_ctx *c, const kir_eqn *e, const kcg_term *in, bool *exact) {
  const kir_prim_info *info = kir_prim_get(e->prim);
  kiln_dtype d = kir_var_aval(c->p, e->in[0])->dtype;
  const kir_c_spelling *sp = kiln_dtype_is_float(d) ? &info->c_float : &info->c_int;
  const char *a = in[0].expr, *b = e->n_in > 1 ? in[1].expr : NULL;
  const char *args = b ? kcg_strf(c, "%s, %s", a, b) : a;
  *exact = sp->exact;
  switch (sp->kind) {
    case KIR_SPELL_MATH: return kcg_strf(c, "%s%s(%s)", sp->text, kcg_mathf(d), args);
    case KIR_SPELL_HELPER: return kcg_strf(c, "kiln_%s_%s(%s)", sp->text, kcg_sfx(d), args);
    case KIR_SPELL_INFIX: return kcg_strf(c, "(%s %s %s)", a, sp->text, b);
    case KIR_SPELL_CAST_INFIX:
      return kcg_strf(c, "((%s)(%s %s %s))", kcg_ctype(kir_var_aval(c->p, e->out[0])->dtype), a,
                      sp->text, b);
    case KIR_SPELL_PREFIX: return kcg_strf(c, "(%s%s)", sp->text, a);
    case KIR_SPELL_OWN: return NULL;
    default:
      kcg_fail(c, KILN_ERR_UNIMPLEMENTED, "kcg_emit: %s has no C spelling for %s operands",
               info->name, kiln_dtype_name(d));
      return "0";
  }
}

/* The expression of an elementwise equation over its operands' values;
 * *exact: the result is already a value of the result dtype. */
static const char *kcg_elementwise(kcg_ctx *c, const kir_eqn *e, const kcg_term *in,
                                   bool *exact) {
  const char *x = kcg_spelled(c, e, in, exact);
  if (x) return x;
  kiln_dtype d = kir_var_aval(c->p, e->in[0])->dtype;
  const char *s = kcg_sfx(d), *a = in[0].expr, *b = e->n_in > 1 ? in[1].expr : NULL;
  switch (e->prim) {
    case KIR_PRIM_STOP_GRADIENT: /* the identity; only autodiff tells it apart */
    case KIR_PRIM_COPY:
      *exact = true;
      return a;
    case KIR_PRIM_SQUARE:
      *exact = !kiln_dtype_is_float(d);
      return *exact ? kcg_strf(c, "kiln_mul_%s(%s, %s)", s, a, a) : kcg_strf(c, "(%s * %s)", a, a);
    case KIR_PRIM_INTEGER_POW: return kcg_integer_pow(c, d, a, e->params.integer_pow.y, exact);
    case KIR_PRIM_REDUCE_PRECISION: {
      /* on the dtype's own format (f16/bf16 values are exact in f32) */
      int fe = d == KILN_F64 ? 11 : d == KILN_F16 ? 5 : 8;
      int fm = d == KILN_F64 ? 52 : d == KILN_F16 ? 10 : d == KILN_BF16 ? 7 : 23;
      *exact = true;
      return kcg_strf(c, "((%s)kiln_reduce_precision_f64(%s, %d, %d, %d, %d))", kcg_ctype(d), a, fe, fm,
                      (int)e->params.reduce_precision.exponent_bits,
                      (int)e->params.reduce_precision.mantissa_bits);
    }
    case KIR_PRIM_ROUND:
      *exact = true;
      return kcg_strf(c, "%s%s(%s)", e->params.round.rounding_method == 0 ? "round" : "rint",
                      kcg_mathf(d), a);
    case KIR_PRIM_LOGISTIC:
      /* JAX's formula, 1 / (1 + exp(-x)), every step in x's dtype */
      if (kcg_is_half(d))
        return kcg_strf(c, "(1.0f / %s)",
                        kcg_round_to(c, d, kcg_strf(c, "(1.0f + %s)",
                                                    kcg_round_to(c, d, kcg_strf(c, "expf(-%s)", a)))));
      return kcg_strf(c, "kiln_logistic_%s(%s)", s, a);
    case KIR_PRIM_EXP2: {
      /* JAX lowers exp2(x) to exp(log(2) * x) in x's dtype */
      const char *ln2 = kcg_literal(c, d, kir_scalar_f(kcg_round_value(d, 0.69314718055994530942)));
      return kcg_strf(c, "exp%s(%s)", kcg_mathf(d),
                      kcg_round_to(c, d, kcg_strf(c, "(%s * %s)", ln2, a)));
    }
    case KIR_PRIM_NOT:
      *exact = true;
      return d == KILN_BOOL ? kcg_strf(c, "((kiln_bool)(%s ^ 1))", a)
                            : kcg_strf(c, "kiln_not_%s(%s)", s, a);
    case KIR_PRIM_POW: {
      kiln_dtype bd = kir_var_aval(c->p, e->in[1])->dtype;
      if (!kiln_dtype_is_float(bd)) { /* lax converts an integer exponent to the base's type */
        bool exact;
        b = kcg_convert(c, bd, d, b, &exact);
        if (!exact) b = kcg_round_to(c, d, b);
      }
      return kcg_strf(c, "pow%s(%s, %s)", kcg_mathf(d), a, b);
    }
    case KIR_PRIM_NEXTAFTER:
      *exact = true;
      if (kcg_is_half(d))
        return kcg_strf(c, "kiln_nextafter_half(%s, %s, %d)", a, b, d == KILN_BF16);
      return kcg_strf(c, "nextafter%s(%s, %s)", kcg_mathf(d), a, b);
    case KIR_PRIM_SELECT_N: {
      /* lax lowers select_n to a tree of `which < k`: out-of-range picks an
       * end case. */
      *exact = true;
      int n = e->n_in - 1;
      if (n == 1) return in[1].expr;
      if (d == KILN_BOOL) return kcg_strf(c, "(%s ? %s : %s)", a, in[2].expr, in[1].expr);
      x = in[n].expr;
      for (int k = n - 1; k >= 1; k--) x = kcg_strf(c, "(%s < %d ? %s : %s)", a, k, in[k].expr, x);
      return x;
    }
    case KIR_PRIM_CLAMP:
      *exact = true;
      return kcg_strf(c, "kiln_min_%s(kiln_max_%s(%s, %s), %s)", s, s, in[1].expr, a, in[2].expr);
    case KIR_PRIM_CONVERT_ELEMENT_TYPE:
      return kcg_convert(c, d, e->params.convert.new_dtype, a, exact);
    default:
      kcg_fail(c, KILN_ERR_UNIMPLEMENTED, "kcg_emit: %s has no case in kcg_elementwise",
               kir_prim_name(e->prim));
      return "0";
  }
}

static kcg_term kcg_eqn_elementwise(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
  kcg_term in[KCG_MAX_OPERANDS];
  int scope = 0;
  KCORE_ASSERT(e->n_in <= KCG_MAX_OPERANDS); /* kcg_check_group */
  for (int k = 0; k < e->n_in; k++) {
    in[k] = kcg_value(c, e->in[k], kcg_index_operand(c, e, k, ix));
    if (c->st != KILN_OK) return in[k];
    scope = kcg_scope_deeper(c, scope, in[k].scope);
  }
  bool exact;
  kiln_dtype rd = kir_var_aval(c->p, v)->dtype;
  const char *x = kcg_elementwise(c, e, in, &exact);
  if (exact && x == in[0].expr) return in[0]; /* a conversion that changes nothing */
  return kcg_local(c, rd, scope, exact ? x : kcg_round_to(c, rd, x));
}

/* iota: the coordinate along `dimension`, converted. */
static kcg_term kcg_eqn_iota(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
  kiln_dtype d = kir_var_aval(c->p, v)->dtype;
  kcg_term t = kcg_index_coords(c, ix)[e->params.iota.dimension];
  const char *x = kcg_strf(c, "((%s)%s)", kcg_ctype(d), t.expr);
  return kcg_local(c, d, t.scope, kcg_round_to(c, d, x));
}

/* v's bits at ix as an unsigned integer of its width; *x gets the term
 * they come from (for its scope). */
static const char *kcg_bits_at(kcg_ctx *c, kir_vid v, int ix, kcg_term *x) {
  kiln_dtype d = kir_var_aval(c->p, v)->dtype;
  if (kcg_raw(c, v, ix, x)) return x->expr; /* kiln_half: already the bits */
  *x = kcg_value(c, v, ix);
  return kcg_to_bits(c, d, x->expr);
}

/* bitcast_convert_type: same width reinterprets; to a narrower type element
 * k of the new minor dimension is the k-th piece of the operand (little
 * endian, as numpy on every target kiln runs on); to a wider type the
 * operand's minor dimension is glued together. */
static kcg_term kcg_eqn_bitcast(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
  const kir_aval *a = kir_var_aval(c->p, e->in[0]), *r = kir_var_aval(c->p, v);
  size_t fb = kiln_dtype_size(a->dtype) * 8, tb = kiln_dtype_size(r->dtype) * 8;
  const char *bits;
  int scope;
  if (fb == tb) {
    kcg_term x;
    bits = kcg_bits_at(c, e->in[0], kcg_index_operand(c, e, 0, ix), &x);
    scope = x.scope;
  } else if (fb > tb) {
    const kcg_term *rc = kcg_index_coords(c, ix);
    kcg_term x, k = rc[r->rank - 1]; /* before kcg_index_get moves the table */
    int oix = kcg_index_get(c, a->rank, a->shape, NULL, rc);
    bits = kcg_strf(c, "(%s >> (%s * %zu))", kcg_bits_at(c, e->in[0], oix, &x), k.expr, tb);
    scope = kcg_scope_deeper(c, x.scope, k.scope);
  } else {
    const kcg_term *rc = kcg_index_coords(c, ix);
    kcg_term oc[KIR_MAX_RANK];
    memcpy(oc, rc, sizeof(kcg_term) * (size_t)r->rank);
    bits = "0";
    scope = kcg_index_scope(c, ix);
    for (size_t k = 0; k < tb / fb; k++) {
      oc[a->rank - 1] = kcg_term_make(kcg_strf(c, "%zu", k), 0);
      kcg_term x;
      const char *xb = kcg_bits_at(c, e->in[0], kcg_index_get(c, a->rank, a->shape, NULL, oc), &x);
      bits = kcg_strf(c, "%s | ((%s)%s << %zu)", bits, kcg_bits_type(tb), xb, k * fb);
      scope = kcg_scope_deeper(c, scope, x.scope);
    }
  }
  if (c->st != KILN_OK) return kcg_term_make("0", 0);
  if (fb != tb) bits = kcg_strf(c, "((%s)(%s))", kcg_bits_type(tb), bits);
  return kcg_local(c, r->dtype, scope, kcg_from_bits(c, r->dtype, bits));
}

/* ---- reductions ---- */

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
