// top_k, cumlogsumexp and optimization_barrier through the public API under
// kiln_jit (the C target and the reference executor) against JAX
// (golden/topk.py -> topk.txt): values with ties, k = n and -inf entries;
// vjp and jvp at random points; vmap with the mapped axis at 0 and 1.
#include <functional>

#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "topk.txt";
const GoldenArray &T(const std::string &c, const std::string &n) { return G(c, n, kFile); }

using XFn = std::function<kiln_val *(kiln_trace *, kiln_val *)>;

kiln_tree *ApplyFn(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val((*(XFn *)u)(t, ArgVal(a, 0)));
}
kiln_tree *LossFn(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(SumAll(t, kiln_mul(t, (*(XFn *)u)(t, ArgVal(a, 0)), ArgVal(a, 1))));
}


void CheckValue(Ctx &c, const std::string &name, XFn f) {
  SCOPED_TRACE(name);
  Func apply(ApplyFn, &f, name.c_str());
  kiln_tree *out = Jit(c, apply.f, Tuple({Leaf(c.dev, T(name, "x"))}));
  if (out) ExpectNear(Values<float>(out), T(name, "y"), name);
  kiln_tree_free(out);
}

void CheckDerivs(Ctx &c, const std::string &name, XFn f) {
  CheckValue(c, name, f);
  Func loss(LossFn, &f, name.c_str()), apply(ApplyFn, &f, name.c_str());
  kiln_func *g = nullptr, *j = nullptr;
  ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
  Func gf(g), jf(j);
  kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, T(name, "x")), Leaf(c.dev, T(name, "c"))}));
  if (out) ExpectNear(Values<float>(out), T(name, "vjp"), name + " vjp");
  kiln_tree_free(out);
  out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, T(name, "x"))}), Tuple({Leaf(c.dev, T(name, "t"))})}));
  if (out) ExpectNear(Values<float>(kiln_tree_child(out, 1)), T(name, "jvp"), name + " jvp");
  kiln_tree_free(out);
}

void CheckVmap(Ctx &c, const std::string &name, XFn f, int axis) {
  SCOPED_TRACE(name);
  Func apply(ApplyFn, &f, name.c_str());
  kiln_tree *in_axes = Tuple({kiln_axis(axis)});
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vmap(apply.f, in_axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  kiln_tree_free(in_axes);
  Func vf(v);
  kiln_tree *out = Jit(c, v, Tuple({Leaf(c.dev, T(name, "x"))}));
  if (out) ExpectNear(Values<float>(out), T(name, "y"), name);
  kiln_tree_free(out);
}

XFn TopK(int64_t k, bool indices = false) {
  return [k, indices](kiln_trace *t, kiln_val *x) {
    kiln_val *idx = nullptr, *v = kiln_top_k(t, x, k, &idx);
    return indices ? kiln_convert(t, idx, KILN_F32) : v;
  };
}
XFn CumLse(int axis, int reverse) {
  return [=](kiln_trace *t, kiln_val *x) { return kiln_cumlogsumexp(t, x, axis, reverse); };
}
kiln_val *BarrierFn(kiln_trace *t, kiln_val *x) {
  kiln_val *in[2] = {kiln_mul(t, x, kiln_scalar(t, KILN_F32, 2)), kiln_sin(t, x)}, *out[2];
  if (kiln_optimization_barrier(t, 2, in, out)) return nullptr;
  return kiln_mul(t, out[0], out[1]);
}

class NewPrims : public ::testing::TestWithParam<kiln_executor> {};

TEST_P(NewPrims, ValuesAndIndicesWithTiesMatchJax) {
  Ctx c(GetParam());
  for (int k : {1, 3, 6}) {
    std::string name = "top_k_ties_" + std::to_string(k);
    CheckValue(c, name, TopK(k));
    XFn idx = TopK(k, true);
    Func apply(ApplyFn, &idx, name.c_str());
    kiln_tree *out = Jit(c, apply.f, Tuple({Leaf(c.dev, T(name, "x"))}));
    if (out) ExpectNear(Values<float>(out), T(name, "i"), name + " indices");
    kiln_tree_free(out);
  }
}

TEST_P(NewPrims, JvpVjpAndVmapMatchJax) {
  Ctx c(GetParam());
  CheckDerivs(c, "top_k_grad_3", TopK(3));
  CheckDerivs(c, "top_k_grad_n", TopK(7));
  CheckVmap(c, "top_k_vmap_0", TopK(2), 0);
  CheckVmap(c, "top_k_vmap_1", TopK(2), 1);
  CheckVmap(c, "top_k_vmap_idx_1", TopK(2, true), 1);
}

TEST_P(NewPrims, CumlogsumexpMatchesJaxWithInfinities) {
  Ctx c(GetParam());
  for (int axis : {0, 1})
    for (int rev : {0, 1})
      CheckValue(c, "cumlogsumexp_" + std::to_string(axis) + "_" + std::to_string(rev),
                 CumLse(axis, rev));
  CheckDerivs(c, "cumlogsumexp_grad_0", CumLse(1, 0));
  CheckDerivs(c, "cumlogsumexp_grad_1", CumLse(1, 1));
  CheckVmap(c, "cumlogsumexp_vmap_0", CumLse(1, 0), 0);
  CheckVmap(c, "cumlogsumexp_vmap_1", CumLse(0, 1), 1);
}

TEST_P(NewPrims, OptimizationBarrierPassesEveryRuleThrough) {
  Ctx c(GetParam());
  CheckDerivs(c, "barrier_grad", BarrierFn);
  CheckVmap(c, "barrier_vmap_1", BarrierFn, 1);
}

INSTANTIATE_TEST_SUITE_P(Executors, NewPrims,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE));

// Bad input names the op and the operand's type.
TEST(TopKErrors, KOutOfRangeAndIntegerCumlogsumexpAreRejected) {
  Ctx c(KILN_EXECUTOR_FUSED);
  XFn big = TopK(9), ints = [](kiln_trace *t, kiln_val *x) {
    return kiln_cumlogsumexp(t, kiln_convert(t, x, KILN_I32), 0, 0);
  };
  const std::pair<XFn *, std::vector<std::string>> cases[] = {
      {&big, {"kiln_top_k", "k=9", "f32[3,6]"}}, {&ints, {"cumlogsumexp", "i32[3,6]"}}};
  for (const auto &[f, needles] : cases) {
    Func apply(ApplyFn, f, "bad");
    kiln_tree *out = Jit(c, apply.f, Tuple({Leaf(c.dev, T("top_k_ties_1", "x"))}),
                         needles[0] == "kiln_top_k" ? KILN_ERR_ARGUMENT : KILN_ERR_DTYPE);
    kiln_tree_free(out);
    std::string msg = kiln_last_error();
    for (const std::string &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

}  // namespace
