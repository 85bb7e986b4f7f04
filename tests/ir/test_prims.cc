// prims.def is the one place an elementwise primitive is named: every row
// has a cost class, a C/CUDA spelling for each dtype class its rule accepts,
// and a public builder that binds it (generated from the row into
// kiln/ops.def, or hand-written where the row says OWN).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "ir/ir.h"
#include "kiln/kiln.h"

namespace {

// The generated builders, by name: their arity.
const std::map<std::string, int> &Generated() {
  static const std::map<std::string, int> m = {
#define KILN_UNARY_OP(name) {#name, 1},
#define KILN_BINARY_OP(name) {#name, 2},
#include "kiln/ops.def"
#undef KILN_UNARY_OP
#undef KILN_BINARY_OP
  };
  return m;
}

// Rows whose builder is hand-written in src/trace (params, promotion of
// their own), with the public function that binds them.
const std::set<std::string> kOwnBuilders = {
    "round",  // kiln_round
    "stop_gradient", "select_n", "clamp",
    "convert_element_type",  // kiln_convert
    "bitcast_convert_type",  // kiln_bitcast
    "integer_pow", "reduce_precision",
};

bool Accepts(kir_prim prim, const kir_prim_info *info, kiln_dtype d) {
  int n = info->n_in == KIR_VARIADIC ? 2 : info->n_in;
  kir_aval in[4];
  for (int i = 0; i < n; i++) in[i] = kir_aval_make(d, 0, nullptr, false);
  kir_params params;
  memset(&params, 0, sizeof params);
  kir_avals out;
  kir_avals_init(&out);
  kiln_status st = kir_infer(prim, &params, n, in, &out);
  kir_avals_free(&out);
  return st == KILN_OK;
}

kiln_tree *BindOne(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  std::string name = static_cast<const char *>(user);
  kiln_val *y = nullptr;
#define KILN_UNARY_OP(op) \
  if (name == #op) y = kiln_##op(t, x);
#define KILN_BINARY_OP(op) \
  if (name == #op) y = kiln_##op(t, x, x);
#include "kiln/ops.def"
#undef KILN_UNARY_OP
#undef KILN_BINARY_OP
  return y ? kiln_tree_val(y) : nullptr;
}

// The program kiln_<name> records on a scalar of dtype d (twice for binary ones).
std::string Bound(const char *name, kiln_dtype d) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *ctx = nullptr;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK);
  kiln_func *f = nullptr;
  EXPECT_EQ(kiln_func_new(BindOne, const_cast<char *>(name), name, &f), KILN_OK);
  kiln_aval a{};
  a.dtype = d;
  kiln_tree *parts[1] = {kiln_tree_ptr(&a)};
  kiln_tree *args = kiln_tree_tuple(1, parts);
  char *text = nullptr;
  EXPECT_EQ(kiln_make_jaxpr(ctx, f, args, &text), KILN_OK) << kiln_last_error();
  std::string r = text ? text : "";
  free(text);
  kiln_tree_free(args);
  kiln_func_free(f);
  kiln_ctx_free(ctx);
  return r;
}

TEST(Prims, EveryElementwiseRowHasBuilderSpellingAndCost) {
  int generated = 0;
  for (int i = 0; i < KIR_NUM_PRIMS; i++) {
    kir_prim prim = (kir_prim)i;
    const kir_prim_info *info = kir_prim_get(prim);
    if (info->family != KIR_FAMILY_ELEMENTWISE) continue;
    std::string name = info->name;
    SCOPED_TRACE(name);
    kir_cost cost = kir_prim_cost(prim);
    EXPECT_TRUE(cost == KIR_COST_PLAIN || cost == KIR_COST_CHEAP ||
                cost == KIR_COST_TRANSCENDENTAL);
    kiln_dtype first = KILN_INVALID_DTYPE;
    for (kiln_dtype d : {KILN_F32, KILN_I32, KILN_BOOL}) {
      const kir_c_spelling &sp = kiln_dtype_is_float(d) ? info->c_float : info->c_int;
      if (Accepts(prim, info, d)) {
        if (first == KILN_INVALID_DTYPE) first = d;
        EXPECT_NE(sp.kind, KIR_SPELL_NONE) << "accepts " << kiln_dtype_name(d);
      } else if (d != KILN_BOOL) {  // bool shares c_int with the integers
        EXPECT_TRUE(sp.kind == KIR_SPELL_NONE || sp.kind == KIR_SPELL_OWN)
            << kiln_dtype_name(d) << " is rejected but spelled";
      }
    }
    auto g = Generated().find(name);
    switch (info->builder) {
      case KIR_BUILDER_UNARY:
      case KIR_BUILDER_BINARY: {
        ASSERT_NE(g, Generated().end()) << "not in kiln/ops.def";
        EXPECT_EQ(g->second, info->builder == KIR_BUILDER_UNARY ? 1 : 2);
        EXPECT_EQ(g->second, info->n_in);
        generated++;
        ASSERT_NE(first, KILN_INVALID_DTYPE) << "accepts no dtype";
        std::string text = Bound(name.c_str(), first);
        EXPECT_NE(text.find(" " + name + " "), std::string::npos) << text;
        break;
      }
      case KIR_BUILDER_OWN: EXPECT_EQ(kOwnBuilders.count(name), 1u) << "add it to kOwnBuilders"; break;
      default: ADD_FAILURE() << "no builder";
    }
  }
  EXPECT_EQ(generated, (int)Generated().size());
}

}  // namespace
