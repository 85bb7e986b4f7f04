// stop_gradient, custom derivative rules (kiln_custom_jvp, kiln_custom_vjp)
// and rematerialization (kiln_checkpoint, kiln_saved_residuals) through the
// public API under kiln_jit, against JAX (golden/transform_custom.py).
#include <cstring>

#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "transform_custom.txt";
const GoldenArray &C(const std::string &c, const std::string &n) { return G(c, n, kFile); }

kiln_tree *V(kiln_val *v) { return kiln_tree_val(v); }
kiln_tree *Pair(kiln_tree *a, kiln_tree *b) { return Tuple({a, b}); }
kiln_tree *In(Ctx &c, const char *n) { return Leaf(c.dev, C("in", n)); }

// The single output leaf of f called on (vals...).
kiln_val *Call1(kiln_trace *t, const kiln_func *f, std::vector<kiln_val *> vals) {
  std::vector<kiln_tree *> kids;
  for (kiln_val *v : vals) kids.push_back(V(v));
  kiln_tree *args = Tuple(kids);
  kiln_tree *out = kiln_call(t, f, args);
  kiln_tree_free(args);
  if (!out) return nullptr;
  const kiln_leaf *l = kiln_tree_leaf_get(out);
  kiln_val *v = l ? l->u.val : nullptr;
  kiln_tree_free(out);
  return v;
}

// (x, c) -> sum(f(x) * c), f the kiln_func in user
kiln_tree *LossOf(kiln_trace *t, const kiln_tree *a, void *u) {
  return V(SumAll(t, kiln_mul(t, Call1(t, (const kiln_func *)u, {ArgVal(a, 0)}), ArgVal(a, 1))));
}
// (x, y, c) -> sum(f(x, y) * c)
kiln_tree *Loss2Of(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *r = Call1(t, (const kiln_func *)u, {ArgVal(a, 0), ArgVal(a, 1)});
  return V(SumAll(t, kiln_mul(t, r, ArgVal(a, 2))));
}
kiln_tree *Apply(kiln_trace *t, const kiln_tree *a, void *u) {
  return V(Call1(t, (const kiln_func *)u, {ArgVal(a, 0)}));
}

// grad of `loss` (argnums 0..n-1) on args; the gradients' values.
std::vector<std::vector<float>> Grads(Ctx &c, kiln_fn loss, void *user, int n, kiln_tree *args) {
  Func l(loss, user, "loss");
  std::vector<int> argnums(n);
  for (int i = 0; i < n; i++) argnums[i] = i;
  kiln_func *g = nullptr;
  EXPECT_EQ(kiln_grad(l.f, argnums.data(), n, 0, &g), KILN_OK) << kiln_last_error();
  Func gf(g);
  kiln_tree *out = Jit(c, g, args);
  std::vector<std::vector<float>> res;
  if (!out) return res;
  if (n == 1)
    res.push_back(Values<float>(out));
  else
    for (int i = 0; i < n; i++) res.push_back(Values<float>(kiln_tree_child(out, i)));
  kiln_tree_free(out);
  return res;
}

// The tangent jvp(f)((x,), (t,)) gives.
std::vector<float> Tangent(Ctx &c, const kiln_func *f, kiln_status want = KILN_OK) {
  Func apply(Apply, (void *)f, "apply");
  kiln_func *j = nullptr;
  EXPECT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
  Func jf(j);
  kiln_tree *out = Jit(c, j, Pair(Tuple({In(c, "x")}), Tuple({In(c, "t")})), want);
  std::vector<float> v;
  if (out) v = Values<float>(kiln_tree_child(out, 1));
  kiln_tree_free(out);
  return v;
}

// vmap(grad(sum(f(row) * c_row))) over the rows of x and c.
std::vector<float> PerRowGrad(Ctx &c, const kiln_func *f) {
  Func l(LossOf, (void *)f, "row_loss");
  kiln_func *g = nullptr, *v = nullptr;
  EXPECT_EQ(kiln_grad(l.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  EXPECT_EQ(kiln_vmap(g, nullptr, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  Func vf(v);
  kiln_tree *out = Jit(c, v, Tuple({In(c, "x"), In(c, "c")}));
  std::vector<float> r;
  if (out) r = Values<float>(out);
  kiln_tree_free(out);
  return r;
}

// grad of sum(vmap(f)(x) * c): batching rules under reverse mode.
std::vector<float> GradOfVmap(Ctx &c, const kiln_func *f) {
  kiln_func *v = nullptr;
  EXPECT_EQ(kiln_vmap(f, nullptr, nullptr, 0, nullptr, &v), KILN_OK);
  Func vf(v);
  auto g = Grads(c, LossOf, v, 1, Tuple({In(c, "x"), In(c, "c")}));
  return g.empty() ? std::vector<float>{} : g[0];
}

// ---- stop_gradient ----

kiln_tree *SgLoss(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  kiln_val *s = kiln_mul(t, kiln_sin(t, x), kiln_stop_gradient(t, kiln_cos(t, x)));
  return V(SumAll(t, kiln_add(t, s, kiln_mul(t, kiln_stop_gradient(t, x), x))));
}
kiln_tree *SgApply(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  return V(kiln_mul(t, kiln_sin(t, x), kiln_stop_gradient(t, x)));
}
kiln_tree *SgRow(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *r = ArgVal(a, 0);
  return V(SumAll(t, kiln_mul(t, kiln_sin(t, r), kiln_stop_gradient(t, kiln_mul(t, r, r)))));
}

TEST(StopGradient, GradJvpAndPerExampleGradMatchJax) {
  Ctx c;
  auto g = Grads(c, SgLoss, nullptr, 1, Tuple({In(c, "x")}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(g[0], C("sg", "grad"), "grad");
  Func apply(SgApply, nullptr, "sg_apply");
  Func id(Apply, (void *)apply.f, "id");
  ExpectNear(Tangent(c, apply.f), C("sg", "jvp"), "jvp");
  Func row(SgRow, nullptr, "sg_row");
  kiln_func *rg = nullptr, *v = nullptr;
  ASSERT_EQ(kiln_grad(row.f, nullptr, 0, 0, &rg), KILN_OK);
  Func rgf(rg);
  ASSERT_EQ(kiln_vmap(rg, nullptr, nullptr, 0, nullptr, &v), KILN_OK);
  Func vf(v);
  kiln_tree *out = Jit(c, v, Tuple({In(c, "x")}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), C("sg", "vmap_grad"), "vmap(grad)");
  kiln_tree_free(out);
}

TEST(StopGradient, IsTheIdentityOnValuesAndPassesIntegersThrough) {
  Ctx c;
  Func f(SgApply, nullptr, "sg_apply");
  kiln_tree *out = Jit(c, f.f, Tuple({In(c, "x")}));
  ASSERT_NE(out, nullptr);
  std::vector<float> got = Values<float>(out), x = C("in", "x").v;
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(got[i], std::sin(x[i]) * x[i], 1e-6);
  kiln_tree_free(out);
  kiln_fn int_fn = [](kiln_trace *t, const kiln_tree *, void *) -> kiln_tree * {
    kiln_val *i = I32(t, 3);
    return V(kiln_stop_gradient(t, i) == i ? i : nullptr);
  };
  Func fi(int_fn, nullptr, "sg_int");
  out = Jit(c, fi.f, Tuple({}));
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Values<int32_t>(out)[0], 3);
  kiln_tree_free(out);
}

// ---- custom_jvp: sin with a rule of twice its derivative ----

kiln_tree *Sin(kiln_trace *t, const kiln_tree *a, void *) { return V(kiln_sin(t, ArgVal(a, 0))); }
kiln_tree *SinJvp(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(kiln_tree_child(a, 0), 0), *tx = ArgVal(kiln_tree_child(a, 1), 0);
  return Pair(V(kiln_sin(t, x)), V(kiln_mul(t, kiln_mul(t, F32(t, 2), kiln_cos(t, x)), tx)));
}

struct CustomJvp {
  Func f{Sin, nullptr, "sin"}, jvp{SinJvp, nullptr, "sin_jvp"};
  kiln_func *cj = nullptr;
  CustomJvp() { EXPECT_EQ(kiln_custom_jvp(f.f, jvp.f, &cj), KILN_OK); }
  ~CustomJvp() { kiln_func_free(cj); }
};

// grad(x -> sum(grad(z -> sum(cj(z)))(x) * c))
kiln_tree *GradGradLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *g = Call1(t, (const kiln_func *)u, {ArgVal(a, 0)});
  return V(SumAll(t, kiln_mul(t, g, ArgVal(a, 1))));
}
kiln_tree *SumOf(kiln_trace *t, const kiln_tree *a, void *u) {
  return V(SumAll(t, Call1(t, (const kiln_func *)u, {ArgVal(a, 0)})));
}

TEST(CustomJvp, RuleDrivesGradJvpVmapAndSecondOrder) {
  Ctx c;
  CustomJvp r;
  kiln_tree *out = Jit(c, r.cj, Tuple({In(c, "x")}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), C("cj", "value"), "value");
  kiln_tree_free(out);
  auto g = Grads(c, LossOf, r.cj, 1, Tuple({In(c, "x"), In(c, "c")}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(g[0], C("cj", "grad"), "grad");
  ExpectNear(Tangent(c, r.cj), C("cj", "jvp"), "jvp");
  ExpectNear(PerRowGrad(c, r.cj), C("cj", "vmap_grad"), "vmap(grad)");
  ExpectNear(GradOfVmap(c, r.cj), C("cj", "grad_vmap"), "grad(vmap)");
  Func sum(SumOf, r.cj, "sum_cj");
  kiln_func *inner = nullptr;
  ASSERT_EQ(kiln_grad(sum.f, nullptr, 0, 0, &inner), KILN_OK);
  Func innerf(inner);
  g = Grads(c, GradGradLoss, inner, 1, Tuple({In(c, "x"), In(c, "c")}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(g[0], C("cj", "grad_grad"), "grad(grad)");
}

kiln_tree *Mul2(kiln_trace *t, const kiln_tree *a, void *) {
  return V(kiln_mul(t, ArgVal(a, 0), ArgVal(a, 1)));
}
kiln_tree *Mul2Jvp(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0), *tn = kiln_tree_child(a, 1);
  kiln_val *x = ArgVal(p, 0), *y = ArgVal(p, 1);
  kiln_val *dt = kiln_add(t, kiln_mul(t, kiln_mul(t, F32(t, 3), ArgVal(tn, 0)), y),
                          kiln_mul(t, x, ArgVal(tn, 1)));
  return Pair(V(kiln_mul(t, x, y)), V(dt));
}

TEST(CustomJvp, TwoArgumentRuleMatchesJax) {
  Ctx c;
  Func f(Mul2, nullptr, "mul"), j(Mul2Jvp, nullptr, "mul_jvp");
  kiln_func *cj = nullptr;
  ASSERT_EQ(kiln_custom_jvp(f.f, j.f, &cj), KILN_OK);
  Func cjf(cj);
  auto g = Grads(c, Loss2Of, cj, 2, Tuple({In(c, "x"), In(c, "y"), In(c, "c")}));
  ASSERT_EQ(g.size(), 2u);
  ExpectNear(g[0], C("cj2", "gx"), "gx");
  ExpectNear(g[1], C("cj2", "gy"), "gy");
}

// A custom_jvp function built inside the trace, closing over w.
kiln_tree *SinW(kiln_trace *t, const kiln_tree *a, void *u) {
  return V(kiln_mul(t, kiln_sin(t, ArgVal(a, 0)), (kiln_val *)u));
}
kiln_tree *SinWJvp(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *x = ArgVal(kiln_tree_child(a, 0), 0), *tx = ArgVal(kiln_tree_child(a, 1), 0);
  kiln_val *w = (kiln_val *)u;
  kiln_val *d = kiln_mul(t, kiln_mul(t, kiln_mul(t, F32(t, 2), kiln_cos(t, x)), w), tx);
  return Pair(V(kiln_mul(t, kiln_sin(t, x), w)), V(d));
}
kiln_tree *ClosingLoss(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *w = ArgVal(a, 2);
  kiln_func *f = nullptr, *j = nullptr, *cj = nullptr;
  kiln_func_new(SinW, w, "sin_w", &f);
  kiln_func_new(SinWJvp, w, "sin_w_jvp", &j);
  kiln_custom_jvp(f, j, &cj);
  kiln_val *r = Call1(t, cj, {ArgVal(a, 0)});
  kiln_func_free(cj);
  kiln_func_free(j);
  kiln_func_free(f);
  return V(SumAll(t, kiln_mul(t, r, ArgVal(a, 1))));
}

TEST(CustomJvp, ClosureOverAValueIsAConstantAndDifferentiatingItIsAnError) {
  Ctx c;
  auto g = Grads(c, ClosingLoss, nullptr, 1, Tuple({In(c, "x"), In(c, "c"), In(c, "w")}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(g[0], C("cjw", "grad"), "grad");
  Func l(ClosingLoss, nullptr, "closing");
  kiln_func *gw = nullptr;
  int argnums[1] = {2};
  ASSERT_EQ(kiln_grad(l.f, argnums, 1, 0, &gw), KILN_OK);
  Func gwf(gw);
  kiln_tree *out = Jit(c, gw, Tuple({In(c, "x"), In(c, "c"), In(c, "w")}), KILN_ERR_UNIMPLEMENTED);
  EXPECT_EQ(out, nullptr);
  EXPECT_NE(std::strstr(kiln_last_error(), "closes over a value that is being differentiated"),
            nullptr)
      << kiln_last_error();
}

// ---- custom_vjp: sin with a cotangent three times its derivative's ----

kiln_tree *SinFwd(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  return Pair(V(kiln_sin(t, x)), V(kiln_cos(t, x)));
}
kiln_tree *SinBwd(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *r = ArgVal(a, 0), *g = ArgVal(a, 1);
  return Tuple({V(kiln_mul(t, kiln_mul(t, F32(t, 3), r), g))});
}

struct CustomVjp {
  Func f{Sin, nullptr, "sin"}, fwd{SinFwd, nullptr, "sin_fwd"}, bwd{SinBwd, nullptr, "sin_bwd"};
  kiln_func *cv = nullptr;
  CustomVjp() { EXPECT_EQ(kiln_custom_vjp(f.f, fwd.f, bwd.f, &cv), KILN_OK); }
  ~CustomVjp() { kiln_func_free(cv); }
};

TEST(CustomVjp, RuleDrivesGradAndVmapAndForwardModeIsAnError) {
  Ctx c;
  CustomVjp r;
  kiln_tree *out = Jit(c, r.cv, Tuple({In(c, "x")}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), C("cv", "value"), "value");
  kiln_tree_free(out);
  auto g = Grads(c, LossOf, r.cv, 1, Tuple({In(c, "x"), In(c, "c")}));
  ASSERT_EQ(g.size(), 1u);
  ExpectNear(g[0], C("cv", "grad"), "grad");
  ExpectNear(PerRowGrad(c, r.cv), C("cv", "vmap_grad"), "vmap(grad)");
  ExpectNear(GradOfVmap(c, r.cv), C("cv", "grad_vmap"), "grad(vmap)");
  EXPECT_TRUE(Tangent(c, r.cv, KILN_ERR_UNIMPLEMENTED).empty());
  EXPECT_NE(std::strstr(kiln_last_error(), "forward-mode"), nullptr) << kiln_last_error();
}

kiln_tree *Mul2Fwd(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0), *y = ArgVal(a, 1);
  return Pair(V(kiln_mul(t, x, y)), Tuple({V(x), V(y)}));
}
kiln_tree *Mul2Bwd(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *res = kiln_tree_child(a, 0);
  kiln_val *x = ArgVal(res, 0), *y = ArgVal(res, 1), *g = ArgVal(a, 1);
  kiln_val *gx = kiln_clamp(t, F32(t, -0.5), kiln_mul(t, g, y), F32(t, 0.5));
  return Tuple({V(gx), V(kiln_mul(t, g, x))});
}

TEST(CustomVjp, TreeResidualsAndTwoArgumentsMatchJax) {
  Ctx c;
  Func f(Mul2, nullptr, "mul"), fwd(Mul2Fwd, nullptr, "mul_fwd"), bwd(Mul2Bwd, nullptr, "mul_bwd");
  kiln_func *cv = nullptr;
  ASSERT_EQ(kiln_custom_vjp(f.f, fwd.f, bwd.f, &cv), KILN_OK);
  Func cvf(cv);
  auto g = Grads(c, Loss2Of, cv, 2, Tuple({In(c, "x"), In(c, "y"), In(c, "c")}));
  ASSERT_EQ(g.size(), 2u);
  ExpectNear(g[0], C("cv2", "gx"), "gx");
  ExpectNear(g[1], C("cv2", "gy"), "gy");
}

TEST(CustomVjp, BadRulesAreClearErrors) {
  Ctx c;
  Func f(Sin, nullptr, "sin"), bwd(SinBwd, nullptr, "sin_bwd");
  kiln_func *cv = nullptr;
  ASSERT_EQ(kiln_custom_vjp(f.f, f.f, bwd.f, &cv), KILN_OK);  // fwd returns no pair
  Func cvf(cv);
  EXPECT_EQ(Jit(c, cv, Tuple({In(c, "x")}), KILN_ERR_TREE), nullptr);
  EXPECT_NE(std::strstr(kiln_last_error(), "(outputs, residuals)"), nullptr) << kiln_last_error();
  EXPECT_EQ(kiln_custom_vjp(f.f, nullptr, bwd.f, &cv), KILN_ERR_ARGUMENT);
}

// ---- checkpoint ----

// block(h, w) = tanh(sin(h @ w)), twice, then sum(. * c)
kiln_tree *Block(kiln_trace *t, const kiln_tree *a, void *) {
  return V(kiln_tanh(t, kiln_sin(t, kiln_matmul(t, ArgVal(a, 0), ArgVal(a, 1)))));
}
kiln_tree *Net(kiln_trace *t, const kiln_tree *a, void *u) {
  const kiln_func *b = (const kiln_func *)u;
  kiln_val *h = Call1(t, b, {ArgVal(a, 0), ArgVal(a, 1)});
  h = Call1(t, b, {h, ArgVal(a, 2)});
  return V(SumAll(t, kiln_mul(t, h, ArgVal(a, 3))));
}
kiln_tree *NetArgs(Ctx &c) {
  return Tuple({Leaf(c.dev, C("remat", "x")), Leaf(c.dev, C("remat", "w1")),
                Leaf(c.dev, C("remat", "w2")), Leaf(c.dev, C("remat", "c"))});
}

struct Remat {
  Func block{Block, nullptr, "block"};
  kiln_func *b = nullptr;
  explicit Remat(int policy) {
    if (policy < 0)
      b = block.f;
    else
      EXPECT_EQ(kiln_checkpoint(block.f, (kiln_remat_policy)policy, &b), KILN_OK);
  }
  ~Remat() {
    if (b != block.f) kiln_func_free(b);
  }
};

const std::pair<const char *, int> kPolicies[] = {{"none", -1},
                                                  {"nothing", KILN_REMAT_NOTHING_SAVEABLE},
                                                  {"dots", KILN_REMAT_DOTS_SAVEABLE},
                                                  {"everything", KILN_REMAT_EVERYTHING_SAVEABLE}};

TEST(Checkpoint, ValueAndGradMatchJaxUnderEveryPolicy) {
  Ctx c;
  for (const auto &[name, policy] : kPolicies) {
    SCOPED_TRACE(name);
    Remat r(policy);
    Func net(Net, r.b, "net");
    kiln_func *vg = nullptr;
    int argnums[3] = {0, 1, 2};
    ASSERT_EQ(kiln_value_and_grad(net.f, argnums, 3, 0, &vg), KILN_OK);
    Func vgf(vg);
    kiln_tree *out = Jit(c, vg, NetArgs(c));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(kiln_tree_child(out, 0)), C("remat", "loss"), "loss");
    const char *names[3] = {"g_x", "g_w1", "g_w2"};
    for (size_t i = 0; i < 3; i++)
      ExpectNear(Values<float>(kiln_tree_child(kiln_tree_child(out, 1), i)), C("remat", names[i]),
                 names[i]);
    kiln_tree_free(out);
  }
}

// The compiled text of f under jit on args (consumed).
std::string CompiledText(Ctx &c, const kiln_func *f, kiln_tree *args) {
  kiln_jit *j = nullptr;
  kiln_lowered *l = nullptr;
  kiln_compiled *k = nullptr;
  char *text = nullptr;
  EXPECT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
  EXPECT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_lowered_compile(l, &k), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_compiled_as_text(k, &text), KILN_OK);
  std::string s = text ? text : "";
  free(text);
  kiln_compiled_free(k);
  kiln_lowered_free(l);
  kiln_jit_free(j);
  kiln_tree_free(args);
  return s;
}

// Outside autodiff a checkpoint or custom rule is its body: compiled, the
// calls are inlined (so their equations fuse instead of running as one host
// step) and the values stay JAX's.
TEST(Checkpoint, CallsLeftInAJitAreInlinedWhenCompiled) {
  Ctx c;
  Remat r(KILN_REMAT_NOTHING_SAVEABLE);
  Func net(Net, r.b, "net");
  std::string text = CompiledText(c, net.f, NetArgs(c));
  EXPECT_EQ(text.find("checkpoint"), std::string::npos) << text;
  EXPECT_NE(text.find("dot_general"), std::string::npos) << text;
  kiln_tree *out = Jit(c, net.f, NetArgs(c));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), C("remat", "loss"), "loss");
  kiln_tree_free(out);
  CustomJvp cj;
  text = CompiledText(c, cj.cj, Tuple({In(c, "x")}));
  EXPECT_EQ(text.find("custom_jvp_call"), std::string::npos) << text;
}

// The residuals reverse mode saves: without remat every block's
// intermediates; with nothing_saveable only the arguments and the blocks'
// outputs; dots_saveable adds the matmul results (JAX's counts).
TEST(Checkpoint, SavedResidualCountDropsAsJaxs) {
  Ctx c;
  std::map<std::string, size_t> n;
  for (const auto &[name, policy] : kPolicies) {
    SCOPED_TRACE(name);
    Remat r(policy);
    Func net(Net, r.b, "net");
    kiln_func *sr = nullptr;
    ASSERT_EQ(kiln_saved_residuals(net.f, &sr), KILN_OK);
    Func srf(sr);
    kiln_tree *out = Jit(c, sr, NetArgs(c));
    ASSERT_NE(out, nullptr);
    n[name] = kiln_tree_num_children(out);
    kiln_tree_free(out);
  }
  EXPECT_EQ(n["nothing"], (size_t)C("remat_residuals", "nothing").v[0]);
  EXPECT_EQ(n["dots"], (size_t)C("remat_residuals", "dots").v[0]);
  EXPECT_EQ(n["none"], (size_t)C("remat_residuals", "none").v[0]);
  EXPECT_EQ(n["everything"], n["none"]);
  EXPECT_GT(n["none"], n["dots"]);
}

// vmap(grad) of the checkpointed network: the checkpoint batching rule
// under reverse mode (per-example gradients of the weights).
TEST(Checkpoint, PerExampleGradientsMatchJax) {
  Ctx c;
  Remat r(KILN_REMAT_NOTHING_SAVEABLE);
  Func net(Net, r.b, "net");
  kiln_func *g = nullptr, *v = nullptr;
  int argnums[2] = {1, 2};
  ASSERT_EQ(kiln_grad(net.f, argnums, 2, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *in_axes = Tuple({kiln_axis(0), kiln_tree_none(), kiln_tree_none(), kiln_axis(0)});
  ASSERT_EQ(kiln_vmap(g, in_axes, nullptr, 0, nullptr, &v), KILN_OK);
  kiln_tree_free(in_axes);
  Func vf(v);
  kiln_tree *out = Jit(c, v, NetArgs(c));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), C("remat_vmap", "g_w1"), "g_w1");
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), C("remat_vmap", "g_w2"), "g_w2");
  kiln_tree_free(out);
}

size_t Count(const std::string &text, const std::string &word) {
  size_t k = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) k++;
  return k;
}

// The gradient program shows the recomputation: with remat the backward
// pass evaluates sin again (outside the forward's checkpoint equations).
TEST(Checkpoint, GradientJaxprRecomputesTheForward) {
  Ctx c;
  std::map<std::string, size_t> sins;
  for (const auto &[name, policy] : kPolicies) {
    SCOPED_TRACE(name);
    Remat r(policy);
    Func net(Net, r.b, "net");
    kiln_func *g = nullptr;
    ASSERT_EQ(kiln_grad(net.f, nullptr, 0, 0, &g), KILN_OK);
    Func gf(g);
    kiln_tree *args = NetArgs(c);
    char *text = nullptr;
    ASSERT_EQ(kiln_make_jaxpr(c.ctx, g, args, &text), KILN_OK) << kiln_last_error();
    kiln_tree_free(args);
    std::string s(text);
    free(text);
    sins[name] = Count(s, " sin ");
    if (policy >= 0 && policy != KILN_REMAT_EVERYTHING_SAVEABLE) {
      EXPECT_NE(s.find("checkpoint["), std::string::npos) << s;
    }
  }
  EXPECT_EQ(sins["none"], 2u);
  EXPECT_EQ(sins["nothing"], 4u);  // twice in the forward, twice recomputed
}

}  // namespace
