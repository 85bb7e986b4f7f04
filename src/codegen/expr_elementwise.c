/* The C/CUDA expression of each elementwise equation (prims.def's spelling
 * or a case of its own), of iota and of bitcast_convert_type. */
#include "codegen/codegen.h"

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

kcg_term kcg_eqn_elementwise(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
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
  c->bf16_rounded[v] = !exact && rd == KILN_BF16 && c->t.target == KCG_TARGET_C;
  return kcg_local(c, rd, scope, exact ? x : kcg_round_to(c, rd, x));
}

/* iota: the coordinate along `dimension`, converted. */
kcg_term kcg_eqn_iota(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
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
kcg_term kcg_eqn_bitcast(kcg_ctx *c, const kir_eqn *e, kir_vid v, int ix) {
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
