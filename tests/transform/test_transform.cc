// Autodiff rules through the public API under kiln_jit: each elementwise,
// structural, reduction, selection and dot_general primitive's jvp and vjp
// against JAX (golden/transform_grad.py), f32, and pow at 0.
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

// ---- every elementwise primitive ----

using Unary = kiln_val *(*)(kiln_trace *, kiln_val *);
using Binary = kiln_val *(*)(kiln_trace *, kiln_val *, kiln_val *);

const std::map<std::string, Unary> &UnaryOps() {
  static const std::map<std::string, Unary> m = {
      {"neg", kiln_neg},     {"abs", kiln_abs},       {"sign", kiln_sign},   {"floor", kiln_floor},
      {"exp", kiln_exp},     {"exp2", kiln_exp2},     {"expm1", kiln_expm1}, {"log", kiln_log},
      {"log1p", kiln_log1p}, {"sqrt", kiln_sqrt},     {"rsqrt", kiln_rsqrt}, {"cbrt", kiln_cbrt},
      {"tanh", kiln_tanh},   {"logistic", kiln_logistic}, {"sin", kiln_sin}, {"cos", kiln_cos},
      {"tan", kiln_tan},     {"asin", kiln_asin},     {"acos", kiln_acos},   {"atan", kiln_atan},
      {"sinh", kiln_sinh},   {"cosh", kiln_cosh},     {"asinh", kiln_asinh}, {"acosh", kiln_acosh},
      {"atanh", kiln_atanh}, {"erf", kiln_erf},       {"erf_inv", kiln_erf_inv}};
  return m;
}

const std::map<std::string, Binary> &BinaryOps() {
  static const std::map<std::string, Binary> m = {
      {"add", kiln_add}, {"sub", kiln_sub}, {"mul", kiln_mul},     {"div", kiln_div},
      {"max", kiln_max}, {"min", kiln_min}, {"pow", kiln_pow},     {"atan2", kiln_atan2},
      {"rem", kiln_rem}};
  return m;
}

// (x, c) -> sum(op(x) * c)
kiln_tree *UnaryLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(SumAll(t, kiln_mul(t, ((Unary)u)(t, ArgVal(a, 0)), ArgVal(a, 1))));
}
kiln_tree *UnaryApply(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(((Unary)u)(t, ArgVal(a, 0)));
}
// (x, y, c) -> sum(op(x, y) * c)
kiln_tree *BinaryLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(
      SumAll(t, kiln_mul(t, ((Binary)u)(t, ArgVal(a, 0), ArgVal(a, 1)), ArgVal(a, 2))));
}
kiln_tree *BinaryApply(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(((Binary)u)(t, ArgVal(a, 0), ArgVal(a, 1)));
}

// grad of sum(op(x) * c) and jvp of op(x) against the golden case `name`.
void CheckRule(Ctx &c, const std::string &name, kiln_fn loss_fn, kiln_fn apply_fn, void *op,
               const std::string &file = "transform_grad.txt") {
  SCOPED_TRACE(name);
  Func loss(loss_fn, op, name.c_str()), apply(apply_fn, op, name.c_str());
  kiln_func *g = nullptr, *j = nullptr;
  ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
  Func gf(g), jf(j);
  kiln_tree *out =
      Jit(c, g, Tuple({Leaf(c.dev, G(name, "x", file)), Leaf(c.dev, G(name, "c", file))}));
  if (out) ExpectNear(Values<float>(out), G(name, "vjp", file), name + " vjp");
  kiln_tree_free(out);
  out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, G(name, "x", file))}),
                         Tuple({Leaf(c.dev, G(name, "t", file))})}));
  if (out) ExpectNear(Values<float>(kiln_tree_child(out, 1)), G(name, "jvp", file), name + " jvp");
  kiln_tree_free(out);
}

TEST(Autodiff, UnaryJvpAndVjpMatchJax) {
  Ctx c;
  for (const auto &[name, op] : UnaryOps()) CheckRule(c, name, UnaryLoss, UnaryApply, (void *)op);
}

// The primitives issue 11 added (golden/transform_special.py).
kiln_val *Pow3(kiln_trace *t, kiln_val *x) { return kiln_integer_pow(t, x, 3); }
kiln_val *PowMinus2(kiln_trace *t, kiln_val *x) { return kiln_integer_pow(t, x, -2); }
kiln_val *Pow0(kiln_trace *t, kiln_val *x) { return kiln_integer_pow(t, x, 0); }
kiln_val *ToF16Precision(kiln_trace *t, kiln_val *x) { return kiln_reduce_precision(t, x, 5, 10); }

TEST(Autodiff, SquareErfcLgammaDigammaIntegerPowReducePrecisionCopyMatchJax) {
  Ctx c;
  const std::map<std::string, Unary> ops = {
      {"square", kiln_square}, {"erfc", kiln_erfc},           {"lgamma", kiln_lgamma},
      {"integer_pow_3", Pow3}, {"integer_pow_-2", PowMinus2}, {"integer_pow_0", Pow0},
      {"reduce_precision", ToF16Precision}, {"copy", kiln_copy}, {"digamma", kiln_digamma},
      {"digamma_neg", kiln_digamma}};
  for (const auto &[name, op] : ops)
    CheckRule(c, name, UnaryLoss, UnaryApply, (void *)op, "transform_special.txt");
}

TEST(Autodiff, BinaryJvpAndVjpMatchJaxWithBroadcasting) {
  Ctx c;
  for (const auto &[name, op] : BinaryOps()) {
    SCOPED_TRACE(name);
    Func loss(BinaryLoss, (void *)op, name.c_str()), apply(BinaryApply, (void *)op, name.c_str());
    kiln_func *g = nullptr, *j = nullptr;
    int argnums[2] = {0, 1};
    ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK);
    ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
    Func gf(g), jf(j);
    kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, G(name, "x")), Leaf(c.dev, G(name, "y")),
                                      Leaf(c.dev, G(name, "c"))}));
    if (out) {
      ExpectNear(Values<float>(kiln_tree_child(out, 0)), G(name, "vjp_x"), name + " vjp x");
      ExpectNear(Values<float>(kiln_tree_child(out, 1)), G(name, "vjp_y"), name + " vjp y");
    }
    kiln_tree_free(out);
    out = Jit(c, g, Tuple({Leaf(c.dev, G(name, "x")), Leaf(c.dev, G(name, "s")),
                           Leaf(c.dev, G(name, "c"))}));
    if (out) {
      ExpectNear(Values<float>(kiln_tree_child(out, 0)), G(name, "vjp_xs"), name + " vjp x (s)");
      ExpectNear(Values<float>(kiln_tree_child(out, 1)), G(name, "vjp_s"), name + " vjp s");
    }
    kiln_tree_free(out);
    out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, G(name, "x")), Leaf(c.dev, G(name, "y"))}),
                           Tuple({Leaf(c.dev, G(name, "tx")), Leaf(c.dev, G(name, "ty"))})}));
    if (out) ExpectNear(Values<float>(kiln_tree_child(out, 1)), G(name, "jvp"), name + " jvp");
    kiln_tree_free(out);
  }
}

// ---- structural primitives, reductions, selection, dot_general ----

using XFn = kiln_val *(*)(kiln_trace *, kiln_val *);

kiln_val *Idx(kiln_trace *t) {  // [2, 0, 2] = (2 iota + 2) mod 4
  int64_t n = 3;
  kiln_val *i = kiln_iota(t, KILN_I32, 1, &n, 0);
  i = kiln_add(t, kiln_mul(t, i, kiln_scalar(t, KILN_I32, 2)), kiln_scalar(t, KILN_I32, 2));
  return kiln_rem(t, i, kiln_scalar(t, KILN_I32, 4));
}

kiln_val *Dot(kiln_trace *t, kiln_val *a, kiln_val *b, std::vector<int> lc, std::vector<int> rc,
              std::vector<int> lb, std::vector<int> rb) {
  kiln_dot_dims d{};
  d.n_contract = (int)lc.size();
  for (size_t i = 0; i < lc.size(); i++) d.lhs_contract[i] = lc[i], d.rhs_contract[i] = rc[i];
  d.n_batch = (int)lb.size();
  for (size_t i = 0; i < lb.size(); i++) d.lhs_batch[i] = lb[i], d.rhs_batch[i] = rb[i];
  return kiln_dot_general(t, a, b, &d, KILN_INVALID_DTYPE);
}


const std::map<std::string, XFn> &StructOps() {
  static const std::map<std::string, XFn> m = {
      {"broadcast_in_dim", [](kiln_trace *t, kiln_val *x) {
         int64_t s[3] = {2, 3, 4};
         return kiln_broadcast_to(t, x, 3, s); }},
      {"broadcast_size1", [](kiln_trace *t, kiln_val *x) {
         int64_t s[2] = {3, 4};
         return kiln_broadcast_to(t, x, 2, s); }},
      {"reshape", [](kiln_trace *t, kiln_val *x) {
         int64_t s[2] = {2, 6};
         return kiln_reshape(t, x, 2, s); }},
      {"transpose", [](kiln_trace *t, kiln_val *x) {
         int p[3] = {2, 0, 1};
         return kiln_transpose(t, x, p); }},
      {"squeeze", [](kiln_trace *t, kiln_val *x) {
         int d = 1;
         return kiln_squeeze(t, x, 1, &d); }},
      {"expand_dims", [](kiln_trace *t, kiln_val *x) {
         int d[2] = {0, 2};
         return kiln_expand_dims(t, x, 2, d); }},
      {"rev", [](kiln_trace *t, kiln_val *x) {
         int d = 1;
         return kiln_rev(t, x, 1, &d); }},
      {"slice", [](kiln_trace *t, kiln_val *x) {
         int64_t lo[2] = {0, 1}, hi[2] = {5, 4}, st[2] = {2, 1};
         return kiln_slice(t, x, lo, hi, st); }},
      {"pad", [](kiln_trace *t, kiln_val *x) {
         int64_t lo[2] = {1, 0}, hi[2] = {0, 2}, in[2] = {1, 0};
         return kiln_pad(t, x, F32(t, 0.5), lo, hi, in); }},
      {"pad_value", [](kiln_trace *t, kiln_val *x) {
         int64_t z[2] = {0, 0}, o[2] = {1, 1}, lo[2] = {1, 2}, hi[2] = {-1, 0}, in[2] = {0, 1};
         kiln_val *v = kiln_reshape(t, kiln_slice(t, x, z, o, nullptr), 0, nullptr);
         return kiln_pad(t, x, v, lo, hi, in); }},
      {"concatenate", [](kiln_trace *t, kiln_val *x) {
         int64_t z[2] = {0, 0}, hi[2] = {3, 1};
         kiln_val *xs[3] = {x, kiln_mul(t, x, F32(t, 2)), kiln_slice(t, x, z, hi, nullptr)};
         return kiln_concatenate(t, 3, xs, 1); }},
      {"dynamic_slice", [](kiln_trace *t, kiln_val *x) {
         kiln_val *st[2] = {I32(t, 1), I32(t, 2)};
         int64_t sz[2] = {2, 2};
         return kiln_dynamic_slice(t, x, st, sz); }},
      {"dynamic_update_slice", [](kiln_trace *t, kiln_val *x) {
         int64_t z[2] = {0, 0}, hi[2] = {2, 3};
         kiln_val *u = kiln_mul(t, kiln_slice(t, x, z, hi, nullptr), F32(t, 3));
         kiln_val *st[2] = {I32(t, 2), I32(t, 1)};
         return kiln_dynamic_update_slice(t, x, u, st); }},
      {"gather", [](kiln_trace *t, kiln_val *x) { return kiln_take(t, x, Idx(t), 0); }},
      {"gather_axis1", [](kiln_trace *t, kiln_val *x) { return kiln_take(t, x, Idx(t), 1); }},
      {"scatter_add", [](kiln_trace *t, kiln_val *x) {
         int64_t s[2] = {5, 4};
         return kiln_scatter_add(t, kiln_full(t, KILN_F32, 2, s, 0), Idx(t), x, 0); }},
      {"reduce_sum", [](kiln_trace *t, kiln_val *x) {
         int a = 0;
         return kiln_reduce_sum(t, x, 1, &a); }},
      {"reduce_max", [](kiln_trace *t, kiln_val *x) {
         int a = 1;
         return kiln_reduce_max(t, x, 1, &a); }},
      {"reduce_min", [](kiln_trace *t, kiln_val *x) {
         int a = 0;
         return kiln_reduce_min(t, x, 1, &a); }},
      {"argmax", [](kiln_trace *t, kiln_val *x) {
         int64_t s[2] = {3, 1};
         kiln_val *i = kiln_convert(t, kiln_argmax(t, x, 1, KILN_I32), KILN_F32);
         return kiln_mul(t, x, kiln_reshape(t, i, 2, s)); }},
      {"cumsum", [](kiln_trace *t, kiln_val *x) { return kiln_cumsum(t, x, 1, 0); }},
      {"cumsum_reverse", [](kiln_trace *t, kiln_val *x) { return kiln_cumsum(t, x, 0, 1); }},
      {"sort", [](kiln_trace *t, kiln_val *x) { return kiln_sort(t, x, 1, nullptr); }},
      {"sort_axis0", [](kiln_trace *t, kiln_val *x) { return kiln_sort(t, x, 0, nullptr); }},
      {"select_n", [](kiln_trace *t, kiln_val *x) {
         return kiln_where(t, kiln_gt(t, x, F32(t, 0)), kiln_mul(t, x, x), kiln_sin(t, x)); }},
      {"clamp", [](kiln_trace *t, kiln_val *x) { return kiln_clamp(t, F32(t, -0.5), x, F32(t, 0.5)); }},
      {"convert", [](kiln_trace *t, kiln_val *x) {
         return kiln_add(t, x, kiln_convert(t, kiln_convert(t, x, KILN_I32), KILN_F32)); }},
      {"dot_batch", [](kiln_trace *t, kiln_val *x) { return Dot(t, x, x, {2}, {2}, {0}, {0}); }},
      {"dot_tn", [](kiln_trace *t, kiln_val *x) { return Dot(t, x, x, {0}, {0}, {}, {}); }},
      {"dot_mixed", [](kiln_trace *t, kiln_val *x) {
         int64_t z[3] = {0, 0, 0}, hi[3] = {1, 3, 4};
         int d = 0;
         kiln_val *x0 = kiln_squeeze(t, kiln_slice(t, x, z, hi, nullptr), 1, &d);
         return Dot(t, x, x0, {1}, {0}, {}, {}); }},
  };
  return m;
}

kiln_tree *StructLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(SumAll(t, kiln_mul(t, ((XFn)u)(t, ArgVal(a, 0)), ArgVal(a, 1))));
}
kiln_tree *StructApply(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(((XFn)u)(t, ArgVal(a, 0)));
}

TEST(Autodiff, StructuralReductionSelectionAndDotRulesMatchJax) {
  Ctx c;
  ASSERT_EQ(StructOps().size(), 30u);
  for (const auto &[name, op] : StructOps()) CheckRule(c, name, StructLoss, StructApply, (void *)op);
}

kiln_tree *PowSum(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(SumAll(t, kiln_pow(t, ArgVal(a, 0), ArgVal(a, 1))));
}

TEST(Autodiff, PowAtZeroFollowsJax) {
  Ctx c;
  Func f(PowSum, nullptr, "pow_sum");
  kiln_func *g = nullptr;
  int argnums[2] = {0, 1};
  ASSERT_EQ(kiln_grad(f.f, argnums, 2, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, G("pow0", "x")), Leaf(c.dev, G("pow0", "y"))}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), G("pow0", "vjp_x"), "d/dx");
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), G("pow0", "vjp_y"), "d/dy");
  kiln_tree_free(out);
}

}  // namespace
