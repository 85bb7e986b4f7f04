// Whole programs with kiln_vmap against JAX (golden/transform_vmap.py):
// per-example gradients (vmap of grad), nested vmap, axis_size, jacfwd,
// jacrev and hessian, all under kiln_jit; and bad in_axes/out_axes.
#include <cstring>

#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const GoldenArray &V(const std::string &c, const std::string &n) {
  return G(c, n, "transform_vmap.txt");
}

// ((w1, b1, w2), x, t) -> sum((tanh(x @ w1 + b1) @ w2 - t)^2), one example
kiln_tree *MlpLoss(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0);
  auto P = [&](size_t i) { return kiln_tree_leaf_get(kiln_tree_child(p, i))->u.val; };
  kiln_val *h = kiln_tanh(t, kiln_add(t, kiln_matmul(t, ArgVal(a, 1), P(0)), P(1)));
  kiln_val *d = kiln_sub(t, kiln_matmul(t, h, P(2)), ArgVal(a, 2));
  return kiln_tree_val(SumAll(t, kiln_mul(t, d, d)));
}

TEST(VmapPrograms, PerExampleGradientsOfAnMlpLoss) {
  Ctx c;
  Func loss(MlpLoss, nullptr, "mlp_loss");
  kiln_func *g = nullptr, *v = nullptr;
  ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *in = Tuple({kiln_tree_none(), kiln_axis(0), kiln_axis(0)});
  ASSERT_EQ(kiln_vmap(g, in, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  kiln_tree_free(in);
  Func vf(v);
  const char *pe = "per_example";
  kiln_tree *params = Tuple({Leaf(c.dev, V(pe, "w1")), Leaf(c.dev, V(pe, "b1")), Leaf(c.dev, V(pe, "w2"))});
  kiln_tree *out = Jit(c, v, Tuple({params, Leaf(c.dev, V(pe, "x")), Leaf(c.dev, V(pe, "t"))}));
  ASSERT_NE(out, nullptr);
  const char *names[3] = {"g_w1", "g_b1", "g_w2"};
  for (size_t i = 0; i < 3; i++)
    ExpectNear(Values<float>(kiln_tree_child(out, i)), V(pe, names[i]), names[i]);
  kiln_tree_free(out);
}

kiln_tree *Matmul(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_matmul(t, ArgVal(a, 0), ArgVal(a, 1)));
}

TEST(VmapPrograms, NestedVmap) {
  Ctx c;
  Func mm(Matmul, nullptr, "matmul");
  kiln_func *inner = nullptr, *outer = nullptr;
  kiln_tree *a1 = Tuple({kiln_tree_none(), kiln_axis(1)}), *a0 = Tuple({kiln_axis(0), kiln_tree_none()});
  ASSERT_EQ(kiln_vmap(mm.f, a1, nullptr, 0, "i", &inner), KILN_OK);
  Func fi(inner);
  ASSERT_EQ(kiln_vmap(inner, a0, nullptr, 0, "j", &outer), KILN_OK);
  Func fo(outer);
  kiln_tree_free(a1);
  kiln_tree_free(a0);
  kiln_tree *out = Jit(c, outer, Tuple({Leaf(c.dev, V("nested", "a")), Leaf(c.dev, V("nested", "b"))}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), V("nested", "y"), "nested");
  kiln_tree_free(out);
}

kiln_tree *Sin(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_sin(t, ArgVal(a, 0)));
}

TEST(VmapPrograms, AxisSizeWithNothingMapped) {
  Ctx c;
  Func f(Sin, nullptr, "sin");
  kiln_func *v = nullptr;
  kiln_tree *none = kiln_tree_none();
  ASSERT_EQ(kiln_vmap(f.f, none, nullptr, 3, nullptr, &v), KILN_OK);
  Func vf(v);
  kiln_tree *out = Jit(c, v, Tuple({Leaf(c.dev, V("axis_size", "x"))}));
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(kiln_array_shape(kiln_tree_leaf_array(out))[0], 3);
  ExpectNear(Values<float>(out), V("axis_size", "y"), "axis_size");
  kiln_tree_free(out);
  // without axis_size it is an error
  kiln_func *bad = nullptr;
  ASSERT_EQ(kiln_vmap(f.f, none, nullptr, 0, nullptr, &bad), KILN_OK);
  Func bf(bad);
  kiln_tree_free(Jit(c, bad, Tuple({Leaf(c.dev, V("axis_size", "x"))}), KILN_ERR_ARGUMENT));
  EXPECT_NE(strstr(kiln_last_error(), "axis_size is not given"), nullptr) << kiln_last_error();
  kiln_tree_free(none);
}

// sin(x) * sum(x^2)
kiln_tree *Jf(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  return kiln_tree_val(kiln_mul(t, kiln_sin(t, x), SumAll(t, kiln_mul(t, x, x))));
}
// sum(tanh(x) * x[::-1]) + sum(x)^2
kiln_tree *Hf(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  int d0[1] = {0};
  kiln_val *s = SumAll(t, x);
  return kiln_tree_val(
      kiln_add(t, SumAll(t, kiln_mul(t, kiln_tanh(t, x), kiln_rev(t, x, 1, d0))), kiln_mul(t, s, s)));
}

TEST(VmapPrograms, JacfwdJacrevHessianMatchJax) {
  Ctx c;
  Func jf(Jf, nullptr, "jf"), hf(Hf, nullptr, "hf");
  kiln_func *fwd = nullptr, *rev = nullptr, *hes = nullptr;
  ASSERT_EQ(kiln_jacfwd(jf.f, 0, &fwd), KILN_OK);
  ASSERT_EQ(kiln_jacrev(jf.f, 0, &rev), KILN_OK);
  ASSERT_EQ(kiln_hessian(hf.f, 0, &hes), KILN_OK);
  Func a(fwd), b(rev), h(hes);
  std::pair<kiln_func *, const char *> cases[3] = {{fwd, "jacfwd"}, {rev, "jacrev"}, {hes, "hessian"}};
  for (auto &[f, name] : cases) {
    SCOPED_TRACE(name);
    kiln_tree *out = Jit(c, f, Tuple({Leaf(c.dev, V("jac", "x"))}));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(out), V("jac", name), name);
    kiln_tree_free(out);
  }
}

// vmap(f, in_axes, out_axes) called on args must fail with `code` and a
// message containing `want`.
void ExpectVmapError(Ctx &c, kiln_fn fn, kiln_tree *in, kiln_tree *out_axes, kiln_tree *args,
                     kiln_status code, const char *want) {
  SCOPED_TRACE(want);
  Func f(fn, nullptr, "f");
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vmap(f.f, in, out_axes, 0, nullptr, &v), KILN_OK);
  Func vf(v);
  kiln_tree_free(in);
  kiln_tree_free(out_axes);
  kiln_tree_free(Jit(c, v, args, code));
  EXPECT_NE(strstr(kiln_last_error(), want), nullptr) << kiln_last_error();
}

TEST(VmapPrograms, BadInAxesAndOutAxesAreClearErrors) {
  Ctx c;
  auto x = [&] { return Leaf(c.dev, V("nested", "a")); };  // f32[2,3,4]
  auto b = [&] { return Leaf(c.dev, V("nested", "b")); };  // f32[4,3,5]
  // in_axes with the wrong number of entries
  ExpectVmapError(c, Matmul, Tuple({kiln_axis(0)}), nullptr, Tuple({x(), b()}), KILN_ERR_TREE,
                  "in_axes is a tuple of 1 entries but the value there is a tuple of 2");
  // an axis out of range for the argument's rank
  ExpectVmapError(c, Matmul, Tuple({kiln_axis(3), kiln_tree_none()}), nullptr, Tuple({x(), b()}),
                  KILN_ERR_SHAPE, "in_axes gives axis 3 for the argument at [0], of type f32[2,3,4]");
  // mapped sizes that disagree
  ExpectVmapError(c, Matmul, Tuple({kiln_axis(0), kiln_axis(0)}), nullptr, Tuple({x(), b()}),
                  KILN_ERR_SHAPE, "mapped axis sizes disagree: the argument at [1] (type f32[4,3,5], "
                  "axis 0) has size 4 but the argument at [0] of type f32[2,3,4] has 2");
  // out_axes None for a mapped output
  ExpectVmapError(c, Sin, nullptr, kiln_tree_none(), Tuple({x()}), KILN_ERR_SHAPE,
                  "out_axes is None for the output at (root), but it depends on the mapped arguments");
  // a leaf that is not an axis
  ExpectVmapError(c, Sin, Tuple({kiln_tree_ptr(nullptr)}), nullptr, Tuple({x()}), KILN_ERR_TREE,
                  "in_axes[0] is a leaf that is not an axis");
}

}  // namespace
