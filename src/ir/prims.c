/* The primitive table built from prims.def, lookup, and kir_infer. */
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

static const kir_prim_info kir_prims[KIR_NUM_PRIMS] = {
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags) \
  [KIR_PRIM_##ID] = {name, KIR_FAMILY_##family, n_in, n_out, KIR_PARAMS_##params, rule, flags},
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  [KIR_PRIM_##ID] = {#name, KIR_FAMILY_ELEMENTWISE, n_in, 1, KIR_PARAMS_##params, rule,        \
                     KIR_PRIM_##cost, KIR_BUILDER_##builder, KIR_C_##c_float, KIR_C_##c_int},
#define KIR_C_SPELL(kind, text, exact) {KIR_SPELL_##kind, #text, exact}
#define KIR_C_MATH(f) KIR_C_SPELL(MATH, f, false)
#define KIR_C_MATH_EXACT(f) KIR_C_SPELL(MATH, f, true)
#define KIR_C_HELPER(f) KIR_C_SPELL(HELPER, f, false)
#define KIR_C_HELPER_EXACT(f) KIR_C_SPELL(HELPER, f, true)
#define KIR_C_INFIX(op) KIR_C_SPELL(INFIX, op, false)
#define KIR_C_CAST_INFIX(op) KIR_C_SPELL(CAST_INFIX, op, true)
#define KIR_C_PREFIX(op) KIR_C_SPELL(PREFIX, op, true)
#define KIR_C_OWN {KIR_SPELL_OWN, NULL, false}
#define KIR_C_NONE {KIR_SPELL_NONE, NULL, false}
#include "ir/prims.def"
#undef KIR_PRIM
#undef KIR_ELEMENTWISE
};

const kir_prim_info *kir_prim_get(kir_prim p) {
  if ((int)p < 0 || (int)p >= KIR_NUM_PRIMS) return NULL;
  return &kir_prims[p];
}

const char *kir_prim_name(kir_prim p) {
  const kir_prim_info *info = kir_prim_get(p);
  return info ? info->name : "invalid";
}

bool kir_prim_lookup(const char *name, size_t len, kir_prim *out) {
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    const char *n = kir_prims[p].name;
    if (strlen(n) == len && memcmp(n, name, len) == 0) {
      *out = (kir_prim)p;
      return true;
    }
  }
  return false;
}

bool kir_prim_has_effect(kir_prim p) {
  const kir_prim_info *info = kir_prim_get(p);
  return info && (info->flags & KIR_PRIM_EFFECT);
}

bool kir_prim_is_index_map(kir_prim p) {
  const kir_prim_info *info = kir_prim_get(p);
  return info && (info->flags & KIR_PRIM_INDEX_MAP);
}

kir_cost kir_prim_cost(kir_prim p) {
  const kir_prim_info *info = kir_prim_get(p);
  if (!info) return KIR_COST_PLAIN;
  if (info->flags & KIR_PRIM_TRANSCENDENTAL) return KIR_COST_TRANSCENDENTAL;
  if (info->flags & KIR_PRIM_CHEAP) return KIR_COST_CHEAP;
  return KIR_COST_PLAIN;
}

kiln_status kir_infer(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                      kir_avals *out) {
  const kir_prim_info *info = kir_prim_get(prim);
  if (!info) return kcore_fail(KILN_ERR_ARGUMENT, "kir_infer: invalid primitive %d", (int)prim);
  if (info->n_in != KIR_VARIADIC && n_in != info->n_in)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: expected %d operand%s, got %d", info->name,
                      info->n_in, info->n_in == 1 ? "" : "s", n_in);
  if (n_in < 0 || (n_in > 0 && !in))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: invalid operand list (%d operands)", info->name,
                      n_in);
  if (info->params != KIR_PARAMS_NONE && !params)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: params are NULL", info->name);
  for (int i = 0; i < n_in; i++) {
    kiln_status st = kir_aval_check(info->name, &in[i]);
    if (st != KILN_OK) return st;
  }
  int before = out->n;
  kiln_status st = info->rule(prim, params, n_in, in, out);
  if (st != KILN_OK) {
    out->n = before;
    return st;
  }
  KCORE_ASSERT(info->n_out == KIR_VARIADIC || out->n - before == info->n_out);
  return KILN_OK;
}
