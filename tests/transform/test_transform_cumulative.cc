// The jvp rules of the cumulative primitives (cumprod with zeros, cummax,
// cummin, cumlogsumexp with -inf prefixes) through the public API under
// kiln_jit, forward and reversed, on both executors: value, vjp, jvp and
// the jvp under vmap (mapped axis at 1) against JAX
// (golden/transform_cumulative.py).
#include <functional>

#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "transform_cumulative.txt";
const GoldenArray &T(const std::string &c, const std::string &n) { return G(c, n, kFile); }

using Cum = kiln_val *(*)(kiln_trace *, kiln_val *, int, int);
struct Op {
  Cum f;
  int axis, reverse;
};

kiln_tree *Apply(kiln_trace *t, const kiln_tree *a, void *u) {
  const Op *op = (const Op *)u;
  return kiln_tree_val(op->f(t, ArgVal(a, 0), op->axis, op->reverse));
}
kiln_tree *Loss(kiln_trace *t, const kiln_tree *a, void *u) {
  const Op *op = (const Op *)u;
  return kiln_tree_val(SumAll(t, kiln_mul(t, op->f(t, ArgVal(a, 0), op->axis, op->reverse),
                                          ArgVal(a, 1))));
}
// (x, t) -> the jvp's tangent, for vmap
kiln_tree *JvpTangent(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_tree *args =
      Tuple({Tuple({kiln_tree_val(ArgVal(a, 0))}), Tuple({kiln_tree_val(ArgVal(a, 1))})});
  kiln_tree *out = kiln_call(t, (const kiln_func *)u, args);
  kiln_tree_free(args);
  if (!out) return nullptr;
  kiln_tree *r = kiln_tree_val(kiln_tree_leaf_get(kiln_tree_child(out, 1))->u.val);
  kiln_tree_free(out);
  return r;
}

void Check(Ctx &c, const std::string &name, Cum f) {
  for (int rev : {0, 1}) {
    std::string cs = name + "_" + std::to_string(rev);
    SCOPED_TRACE(cs);
    Op op{f, 1, rev}, op0{f, 0, rev};
    Func apply(Apply, &op, cs.c_str()), loss(Loss, &op, cs.c_str()), apply0(Apply, &op0, "a0");
    kiln_tree *out = Jit(c, apply.f, Tuple({Leaf(c.dev, T(cs, "x"))}));
    if (out) ExpectNear(Values<float>(out), T(cs, "y"), cs + " value");
    kiln_tree_free(out);
    // derivatives at the golden's point (-inf kept: kiln's rule is finite there)
    kiln_func *g = nullptr, *j = nullptr, *j0 = nullptr, *v = nullptr;
    ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
    ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
    ASSERT_EQ(kiln_jvp(apply0.f, &j0), KILN_OK);
    Func gf(g), jf(j), j0f(j0), tan(JvpTangent, j0, "jvp_tangent");
    kiln_tree *in_axes = Tuple({kiln_axis(1), kiln_axis(1)});
    ASSERT_EQ(kiln_vmap(tan.f, in_axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
    kiln_tree_free(in_axes);
    Func vf(v);
    out = Jit(c, g, Tuple({Leaf(c.dev, T(cs, "x")), Leaf(c.dev, T(cs, "c"))}));
    if (out) ExpectNear(Values<float>(out), T(cs, "vjp"), cs + " vjp");
    kiln_tree_free(out);
    out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, T(cs, "x"))}), Tuple({Leaf(c.dev, T(cs, "t"))})}));
    if (out) ExpectNear(Values<float>(kiln_tree_child(out, 1)), T(cs, "jvp"), cs + " jvp");
    kiln_tree_free(out);
    out = Jit(c, v, Tuple({Leaf(c.dev, T(cs, "x")), Leaf(c.dev, T(cs, "t"))}));
    if (out) ExpectNear(Values<float>(out), T(cs, "vmap_jvp"), cs + " vmap of jvp");
    kiln_tree_free(out);
  }
}

class Cumulative : public ::testing::TestWithParam<kiln_executor> {};

TEST_P(Cumulative, CumprodWithZerosMatchesJax) {
  Ctx c(GetParam());
  Check(c, "cumprod", kiln_cumprod);
}

TEST_P(Cumulative, CummaxAndCumminPassTheTangentOfTheRunningExtreme) {
  Ctx c(GetParam());
  Check(c, "cummax", kiln_cummax);
  Check(c, "cummin", kiln_cummin);
}

TEST_P(Cumulative, CumlogsumexpIsFiniteAfterMinusInfinityPrefixes) {
  Ctx c(GetParam());
  Check(c, "cumlogsumexp", kiln_cumlogsumexp);
  Check(c, "cumlogsumexp_neginf", kiln_cumlogsumexp);
}

// The rule needs an operand one rank larger; at kiln's largest rank the jvp
// is refused with a message naming the operand and the axis.
TEST_P(Cumulative, CumprodJvpAtTheLargestRankIsRefusedByName) {
  Ctx c(GetParam());
  Op op{kiln_cumprod, 2, 0};
  Func apply(Apply, &op, "cumprod_rank8");
  kiln_func *j = nullptr;
  ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
  Func jf(j);
  std::vector<int64_t> shape(KILN_MAX_RANK, 1);
  shape[2] = 3;
  auto leaf = [&] {
    std::vector<float> v(3, 2.0f);
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(c.dev, KILN_F32, KILN_MAX_RANK, shape.data(), v.data(),
                                   v.size() * sizeof(float), &a),
              KILN_OK);
    kiln_tree *t = kiln_tree_array(a);
    kiln_array_release(a);
    return t;
  };
  kiln_tree *out = Jit(c, j, Tuple({Tuple({leaf()}), Tuple({leaf()})}), KILN_ERR_UNIMPLEMENTED);
  kiln_tree_free(out);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find("cumprod"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[1,1,3,1,1,1,1,1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("axis 2"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Executors, Cumulative,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE));

}  // namespace
