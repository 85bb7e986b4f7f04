// Autodiff of whole programs through the public API under kiln_jit: an MLP
// with softmax cross-entropy, a layernorm and masked attention against JAX,
// the size of the gradient program against JAX's, JAX check_grads-style
// numerical checks on f64 (orders 1 and 2, forward and reverse), while
// loops, kiln_vjp and bad input.
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

// ---- whole programs ----

kiln_val *KeepDims(kiln_trace *t, kiln_val *r) {
  int64_t shape[2] = {kiln_val_shape(r)[0], 1};
  return kiln_reshape(t, r, 2, shape);
}

kiln_tree *MlpLoss(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0);
  kiln_val *w1 = ArgVal(p, 0), *b1 = ArgVal(p, 1), *w2 = ArgVal(p, 2), *b2 = ArgVal(p, 3);
  kiln_val *x = ArgVal(a, 1), *labels = ArgVal(a, 2);
  kiln_val *h = kiln_tanh(t, kiln_add(t, kiln_matmul(t, x, w1), b1));
  kiln_val *logits = kiln_add(t, kiln_matmul(t, h, w2), b2);
  int ax = 1;
  kiln_val *z = kiln_sub(t, logits, KeepDims(t, kiln_reduce_max(t, logits, 1, &ax)));
  kiln_val *lse = KeepDims(t, kiln_log(t, kiln_reduce_sum(t, kiln_exp(t, z), 1, &ax)));
  kiln_val *logp = kiln_sub(t, z, lse);
  kiln_val *s = SumAll(t, kiln_mul(t, logp, labels));
  return kiln_tree_val(kiln_neg(t, kiln_div(t, s, kiln_scalar_f(t, (double)kiln_val_shape(x)[0]))));
}

kiln_tree *MlpArgs(Ctx &c) {
  return Tuple({Tuple({Leaf(c.dev, G("mlp", "w1")), Leaf(c.dev, G("mlp", "b1")),
                       Leaf(c.dev, G("mlp", "w2")), Leaf(c.dev, G("mlp", "b2"))}),
                Leaf(c.dev, G("mlp", "x")), Leaf(c.dev, G("mlp", "labels"))});
}

TEST(Autodiff, MlpValueAndGradMatchesJax) {
  Ctx c;
  Func f(MlpLoss, nullptr, "mlp_loss");
  kiln_func *vg = nullptr;
  ASSERT_EQ(kiln_value_and_grad(f.f, nullptr, 0, 0, &vg), KILN_OK);
  Func vgf(vg);
  kiln_tree *out = Jit(c, vg, MlpArgs(c));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), G("mlp", "loss"), "loss");
  const kiln_tree *g = kiln_tree_child(out, 1);
  ASSERT_EQ(kiln_tree_num_children(g), 4u);
  const char *names[4] = {"g_w1", "g_b1", "g_w2", "g_b2"};
  for (size_t i = 0; i < 4; i++) ExpectNear(Values<float>(kiln_tree_child(g, i)), G("mlp", names[i]), names[i]);
  kiln_tree_free(out);
}

TEST(Autodiff, MlpGradientProgramIsNoLargerThanJaxs) {
  Ctx c;
  Func f(MlpLoss, nullptr, "mlp_loss");
  kiln_func *g = nullptr;
  ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *args = MlpArgs(c);
  char *text = nullptr;
  ASSERT_EQ(kiln_make_jaxpr(c.ctx, g, args, &text), KILN_OK) << kiln_last_error();
  std::string s(text);
  free(text);
  kiln_tree_free(args);
  int eqns = 0;
  for (size_t at = s.find(" = "); at != std::string::npos; at = s.find(" = ", at + 1)) eqns++;
  int jax_eqns = (int)G("mlp", "jax_grad_eqns").v.at(0);
  EXPECT_LE(eqns, jax_eqns) << s;
  // the weight gradients are dot_generals in the weights' layout: no transposes
  EXPECT_EQ(s.find("transpose["), std::string::npos) << s;
  RecordProperty("kiln_grad_eqns", eqns);
  RecordProperty("jax_grad_eqns", jax_eqns);
  std::printf("grad(mlp_loss): kiln %d equations, JAX %d\n", eqns, jax_eqns);
}

kiln_tree *LayerNormLoss(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0), *gamma = ArgVal(a, 1), *beta = ArgVal(a, 2), *cot = ArgVal(a, 3);
  int ax = 1;
  kiln_val *n = kiln_scalar_f(t, (double)kiln_val_shape(x)[1]);
  kiln_val *mean = KeepDims(t, kiln_div(t, kiln_reduce_sum(t, x, 1, &ax), n));
  kiln_val *cx = kiln_sub(t, x, mean);
  kiln_val *var = KeepDims(t, kiln_div(t, kiln_reduce_sum(t, kiln_mul(t, cx, cx), 1, &ax), n));
  kiln_val *y = kiln_mul(t, cx, kiln_rsqrt(t, kiln_add(t, var, kiln_scalar_f(t, 1e-5))));
  y = kiln_add(t, kiln_mul(t, y, gamma), beta);
  return kiln_tree_val(SumAll(t, kiln_mul(t, y, cot)));
}

TEST(Autodiff, LayerNormGradMatchesJax) {
  Ctx c;
  Func f(LayerNormLoss, nullptr, "layernorm");
  kiln_func *g = nullptr;
  int argnums[3] = {0, 1, 2};
  ASSERT_EQ(kiln_grad(f.f, argnums, 3, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, G("layernorm", "x")), Leaf(c.dev, G("layernorm", "gamma")),
                                    Leaf(c.dev, G("layernorm", "beta")), Leaf(c.dev, G("layernorm", "c"))}));
  ASSERT_NE(out, nullptr);
  const char *names[3] = {"g_x", "g_gamma", "g_beta"};
  for (size_t i = 0; i < 3; i++)
    ExpectNear(Values<float>(kiln_tree_child(out, i)), G("layernorm", names[i]), names[i]);
  kiln_tree_free(out);
}

// causal self-attention with a tanh-GELU on top: sum(gelu(softmax(mask(q k^T / sqrt(d))) v) * c)
kiln_tree *AttentionLoss(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0);
  kiln_val *x = ArgVal(a, 1), *cot = ArgVal(a, 2);
  kiln_val *q = kiln_matmul(t, x, ArgVal(p, 0)), *k = kiln_matmul(t, x, ArgVal(p, 1));
  kiln_val *v = kiln_matmul(t, x, ArgVal(p, 2));
  int perm[2] = {1, 0}, ax = 1;
  int64_t n = kiln_val_shape(x)[0], nn[2] = {n, n};
  kiln_val *s = kiln_div(t, kiln_matmul(t, q, kiln_transpose(t, k, perm)),
                         F32(t, std::sqrt((double)kiln_val_shape(x)[1])));
  kiln_val *causal = kiln_ge(t, kiln_iota(t, KILN_I32, 2, nn, 0), kiln_iota(t, KILN_I32, 2, nn, 1));
  s = kiln_where(t, causal, s, F32(t, -1e9));
  s = kiln_sub(t, s, KeepDims(t, kiln_reduce_max(t, s, 1, &ax)));
  kiln_val *e = kiln_exp(t, s);
  kiln_val *h = kiln_matmul(t, kiln_div(t, e, KeepDims(t, kiln_reduce_sum(t, e, 1, &ax))), v);
  // jax.nn.gelu(approximate=True): 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
  kiln_val *h3 = kiln_mul(t, kiln_mul(t, h, h), h);
  kiln_val *inner = kiln_mul(t, F32(t, std::sqrt(2.0 / M_PI)), kiln_add(t, h, kiln_mul(t, F32(t, 0.044715), h3)));
  kiln_val *gelu = kiln_mul(t, kiln_mul(t, F32(t, 0.5), h), kiln_add(t, F32(t, 1), kiln_tanh(t, inner)));
  return kiln_tree_val(SumAll(t, kiln_mul(t, gelu, cot)));
}

TEST(Autodiff, MaskedAttentionWithGeluGradMatchesJax) {
  Ctx c;
  Func f(AttentionLoss, nullptr, "attention");
  kiln_func *g = nullptr;
  int argnums[2] = {0, 1};
  ASSERT_EQ(kiln_grad(f.f, argnums, 2, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *out = Jit(c, g, Tuple({Tuple({Leaf(c.dev, G("attention", "wq")), Leaf(c.dev, G("attention", "wk")),
                                           Leaf(c.dev, G("attention", "wv"))}),
                                    Leaf(c.dev, G("attention", "x")), Leaf(c.dev, G("attention", "c"))}));
  ASSERT_NE(out, nullptr);
  const kiln_tree *gw = kiln_tree_child(out, 0);
  const char *names[3] = {"g_wq", "g_wk", "g_wv"};
  for (size_t i = 0; i < 3; i++) ExpectNear(Values<float>(kiln_tree_child(gw, i)), G("attention", names[i]), names[i]);
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), G("attention", "g_x"), "g_x");
  kiln_tree_free(out);
}

// ---- numerical checks (jax.test_util.check_grads, f64, orders 1 and 2) ----

// A scalar function of x: f64[5] mixing elementwise ops, a rank-2 outer
// product through reshapes and a dot, and a row-wise logsumexp.
kiln_tree *Smooth(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  kiln_val *one = kiln_scalar_f(t, 1.0), *x2 = kiln_mul(t, x, x);
  kiln_val *h = kiln_mul(t, kiln_logistic(t, x), kiln_sin(t, x));
  h = kiln_add(t, h, kiln_div(t, kiln_sqrt(t, kiln_add(t, x2, one)), kiln_add(t, one, x2)));
  h = kiln_add(t, h, kiln_mul(t, kiln_tanh(t, x), kiln_exp(t, kiln_neg(t, x2))));
  int64_t col[2] = {5, 1}, row[2] = {1, 5};
  kiln_val *m = kiln_matmul(t, kiln_reshape(t, x, 2, col), kiln_reshape(t, x, 2, row));
  int ax = 1;
  kiln_val *lse = kiln_log(t, kiln_reduce_sum(t, kiln_exp(t, kiln_mul(t, m, kiln_scalar_f(t, 0.3))), 1, &ax));
  return kiln_tree_val(kiln_add(t, SumAll(t, h), SumAll(t, lse)));
}

// (x, v) -> sum(grad(f)(x) * v), for second order in reverse mode
kiln_tree *GradDotV(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_tree *args = Tuple({kiln_tree_val(ArgVal(a, 0))});
  kiln_tree *g = kiln_call(t, (const kiln_func *)u, args);
  kiln_tree_free(args);
  if (!g) return nullptr;
  kiln_val *gv = kiln_tree_leaf_get(g)->u.val;
  kiln_tree_free(g);
  return kiln_tree_val(SumAll(t, kiln_mul(t, gv, ArgVal(a, 1))));
}

std::vector<double> Call64(Ctx &c, const kiln_func *f, kiln_tree *args, int child = -1) {
  kiln_tree *out = Jit(c, f, args);
  if (!out) return {};
  std::vector<double> v = Values<double>(child < 0 ? out : kiln_tree_child(out, (size_t)child));
  kiln_tree_free(out);
  return v;
}

TEST(Autodiff, CheckGradsOrders1And2FwdAndRevOnF64) {
  Ctx c;
  Func f(Smooth, nullptr, "smooth");
  kiln_func *g = nullptr, *jf = nullptr;
  ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK);
  ASSERT_EQ(kiln_jvp(f.f, &jf), KILN_OK);
  Func gf(g), jvpf(jf), gdv(GradDotV, g, "grad_dot_v");
  kiln_func *hvp = nullptr, *jvp_grad = nullptr;
  ASSERT_EQ(kiln_grad(gdv.f, nullptr, 0, 0, &hvp), KILN_OK);
  ASSERT_EQ(kiln_jvp(g, &jvp_grad), KILN_OK);
  Func hvpf(hvp), jgf(jvp_grad);
  const std::vector<double> x = {0.3, -1.2, 0.7, 1.9, -0.4}, v = {0.5, 0.1, -0.8, 0.3, 0.9};
  const double eps = 1e-4, tol = 1e-6;  // central differences: error ~eps^2
  auto shifted = [&](double s) {
    std::vector<double> y(x);
    for (size_t i = 0; i < y.size(); i++) y[i] += s * v[i];
    return y;
  };
  auto fval = [&](const std::vector<double> &y) {
    return Call64(c, f.f, Tuple({LeafF64(c.dev, y)})).at(0);
  };
  double fd1 = (fval(shifted(eps)) - fval(shifted(-eps))) / (2 * eps);
  // order 1, reverse: <grad f(x), v>
  std::vector<double> gx = Call64(c, g, Tuple({LeafF64(c.dev, x)}));
  ASSERT_EQ(gx.size(), 5u);
  double gv = 0;
  for (size_t i = 0; i < 5; i++) gv += gx[i] * v[i];
  EXPECT_NEAR(gv, fd1, tol * (1 + std::fabs(fd1)));
  // order 1, forward: jvp(f)(x, v)
  std::vector<double> jv =
      Call64(c, jf, Tuple({Tuple({LeafF64(c.dev, x)}), Tuple({LeafF64(c.dev, v)})}), 1);
  ASSERT_EQ(jv.size(), 1u);
  EXPECT_NEAR(jv[0], fd1, tol * (1 + std::fabs(fd1)));
  // order 2: H v by differences of the gradient, against grad of grad
  // (reverse over reverse) and jvp of grad (forward over reverse)
  std::vector<double> gp = Call64(c, g, Tuple({LeafF64(c.dev, shifted(eps))}));
  std::vector<double> gm = Call64(c, g, Tuple({LeafF64(c.dev, shifted(-eps))}));
  std::vector<double> hv_rev = Call64(c, hvp, Tuple({LeafF64(c.dev, x), LeafF64(c.dev, v)}));
  std::vector<double> hv_fwd =
      Call64(c, jvp_grad, Tuple({Tuple({LeafF64(c.dev, x)}), Tuple({LeafF64(c.dev, v)})}), 1);
  ASSERT_EQ(hv_rev.size(), 5u);
  ASSERT_EQ(hv_fwd.size(), 5u);
  for (size_t i = 0; i < 5; i++) {
    double fd2 = (gp[i] - gm[i]) / (2 * eps);
    EXPECT_NEAR(hv_rev[i], fd2, tol * (1 + std::fabs(fd2))) << i;
    EXPECT_NEAR(hv_fwd[i], fd2, tol * (1 + std::fabs(fd2))) << i;
  }
}

// ---- bad input ----

kiln_tree *Identity(kiln_trace *, const kiln_tree *a, void *) {
  return kiln_tree_val(ArgVal(a, 0));
}
kiln_tree *ToInt(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_convert(t, SumAll(t, ArgVal(a, 0)), KILN_I32));
}

std::string ErrorOf(Ctx &c, const kiln_func *f, kiln_tree *args, kiln_status want) {
  kiln_tree *out = Jit(c, f, args, want);
  kiln_tree_free(out);
  return kiln_last_error();
}

TEST(Autodiff, BadInputIsAClearStatus) {
  Ctx c;
  Func id(Identity, nullptr, "identity"), to_int(ToInt, nullptr, "to_int");
  GoldenArray x34{{3, 4}, std::vector<float>(12, 1.f)};
  kiln_func *g = nullptr;
  int bad[1] = {3};
  ASSERT_EQ(kiln_grad(id.f, bad, 1, 0, &g), KILN_OK);
  {
    Func gf(g);
    std::string e = ErrorOf(c, g, Tuple({Leaf(c.dev, x34)}), KILN_ERR_ARGUMENT);
    EXPECT_NE(e.find("argnums 3 is out of range"), std::string::npos) << e;
  }
  ASSERT_EQ(kiln_grad(id.f, nullptr, 0, 0, &g), KILN_OK);
  {
    Func gf(g);
    std::string e = ErrorOf(c, g, Tuple({Leaf(c.dev, x34)}), KILN_ERR_SHAPE);
    EXPECT_NE(e.find("scalar-output"), std::string::npos) << e;
    EXPECT_NE(e.find("f32[3,4]"), std::string::npos) << e;
  }
  ASSERT_EQ(kiln_grad(to_int.f, nullptr, 0, 0, &g), KILN_OK);
  {
    Func gf(g);
    std::string e = ErrorOf(c, g, Tuple({Leaf(c.dev, x34)}), KILN_ERR_DTYPE);
    EXPECT_NE(e.find("i32[]"), std::string::npos) << e;
  }
  int twice[2] = {0, 0};
  EXPECT_EQ(kiln_grad(id.f, twice, 2, 0, &g), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_grad(nullptr, nullptr, 0, 0, &g), KILN_ERR_ARGUMENT);
}

// ---- control flow ----

kiln_tree *DoubleCarry(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_mul(t, ArgVal(a, 1), kiln_scalar_f(t, 2.0)));
}

// sum(x^2) * fori_loop(0, 3, c -> 2c, 1) when `through_x` is 0; with 1 the
// loop runs on x itself
kiln_tree *LoopLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  Func body(DoubleCarry, nullptr, "double_carry");
  kiln_val *x = ArgVal(a, 0);
  bool through_x = u != nullptr;
  kiln_tree *init = kiln_tree_val(through_x ? x : kiln_scalar(t, KILN_F32, 1.0));
  kiln_tree *r = kiln_fori_loop(t, 0, 3, body.f, init);
  kiln_tree_free(init);
  if (!r) return nullptr;
  kiln_val *s = kiln_tree_leaf_get(r)->u.val;
  kiln_tree_free(r);
  return kiln_tree_val(through_x ? SumAll(t, s) : kiln_mul(t, SumAll(t, kiln_mul(t, x, x)), s));
}

kiln_tree *TimesCaptured(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(kiln_mul(t, ArgVal(a, 1), (kiln_val *)u));
}

// fori_loop(0, 3, c -> c * x, 1) = x^3, x reaching the body as a const
kiln_tree *CubeByLoop(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0);
  Func body(TimesCaptured, x, "times_x");
  int64_t n = kiln_val_shape(x)[0];
  kiln_tree *init = kiln_tree_val(kiln_full(t, KILN_F32, 1, &n, 1.0));
  kiln_tree *r = kiln_fori_loop(t, 0, 3, body.f, init);
  kiln_tree_free(init);
  return r;
}

TEST(Autodiff, WhileLoopsAreForwardDifferentiableAndReverseIsAClearError) {
  Ctx c;
  Func f(LoopLoss, nullptr, "loop_loss"), fx(LoopLoss, (void *)1, "loop_on_x");
  GoldenArray x{{3}, {1.f, -2.f, 0.5f}}, t{{3}, {0.5f, 1.f, -1.f}};
  kiln_func *g = nullptr;
  // a loop whose operands carry no tangent is copied as it is
  ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK);
  {
    Func gf(g);
    kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, x)}));
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(Values<float>(out), (std::vector<float>{16.f, -32.f, 8.f}));  // 16 x
    kiln_tree_free(out);
  }
  // forward mode through a loop carrying x: d/dx sum(8 x) . t = 8 sum(t)
  kiln_func *j = nullptr;
  ASSERT_EQ(kiln_jvp(fx.f, &j), KILN_OK);
  {
    Func jf(j);
    kiln_tree *out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, x)}), Tuple({Leaf(c.dev, t)})}));
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(Values<float>(kiln_tree_child(out, 0)), std::vector<float>{-4.f});
    EXPECT_EQ(Values<float>(kiln_tree_child(out, 1)), std::vector<float>{4.f});
    kiln_tree_free(out);
  }
  // a body const with a tangent: the tangent becomes a const of the new loop
  Func cube(CubeByLoop, nullptr, "cube_by_loop");
  ASSERT_EQ(kiln_jvp(cube.f, &j), KILN_OK);
  {
    Func jf(j);
    kiln_tree *out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, x)}), Tuple({Leaf(c.dev, t)})}));
    ASSERT_NE(out, nullptr);
    std::vector<float> ty = Values<float>(kiln_tree_child(out, 1));
    ASSERT_EQ(ty.size(), 3u);
    for (int i = 0; i < 3; i++) EXPECT_FLOAT_EQ(ty[i], 3 * x.v[i] * x.v[i] * t.v[i]) << i;
    kiln_tree_free(out);
  }
  // reverse mode through it is refused, as JAX does, with the way out
  ASSERT_EQ(kiln_grad(fx.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  std::string e = ErrorOf(c, g, Tuple({Leaf(c.dev, x)}), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(e.find("while loops"), std::string::npos) << e;
  EXPECT_NE(e.find("kiln_scan"), std::string::npos) << e;
}

// ---- vjp ----

// (x: f32[3,4], n: i32[3]) -> (sin(x) * n[:, None], n + 1)
kiln_tree *SinScaled(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = ArgVal(a, 0), *n = ArgVal(a, 1);
  int64_t col[2] = {3, 1};
  kiln_val *nf = kiln_reshape(t, kiln_convert(t, n, KILN_F32), 2, col);
  return Tuple({kiln_tree_val(kiln_mul(t, kiln_sin(t, x), nf)),
                kiln_tree_val(kiln_add(t, n, kiln_scalar(t, KILN_I32, 1)))});
}

TEST(Autodiff, VjpPullbackRunsManyTimesAndGivesFloat0LikeZerosForIntegers) {
  Ctx c;
  Func f(SinScaled, nullptr, "sin_scaled");
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vjp(f.f, &v), KILN_OK);
  Func vf(v);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, v, nullptr, &j), KILN_OK);
  std::vector<float> x(12);
  for (int i = 0; i < 12; i++) x[i] = 0.3f * (float)i - 1.5f;
  std::vector<int32_t> n = {2, -1, 3};
  for (int call = 0; call < 2; call++) {
    std::vector<float> ct(12);
    for (int i = 0; i < 12; i++) ct[i] = (float)(call + 1) * (0.1f * (float)i - 0.4f);
    int64_t sx[2] = {3, 4}, sn = 3;
    kiln_array *ax = nullptr, *an = nullptr, *ac = nullptr, *ai = nullptr;
    ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 2, sx, x.data(), 48, &ax), KILN_OK);
    ASSERT_EQ(kiln_array_from_host(c.dev, KILN_I32, 1, &sn, n.data(), 12, &an), KILN_OK);
    ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 2, sx, ct.data(), 48, &ac), KILN_OK);
    ASSERT_EQ(kiln_array_from_host(c.dev, KILN_I32, 1, &sn, n.data(), 12, &ai), KILN_OK);
    kiln_tree *args = Tuple({Tuple({kiln_tree_array(ax), kiln_tree_array(an)}),
                             Tuple({kiln_tree_array(ac), kiln_tree_array(ai)})});
    for (kiln_array *a : {ax, an, ac, ai}) kiln_array_release(a);
    kiln_tree *out = nullptr;
    ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
    kiln_tree_free(args);
    const kiln_tree *cts = kiln_tree_child(out, 1);
    std::vector<float> gx = Values<float>(kiln_tree_child(cts, 0));
    ASSERT_EQ(gx.size(), 12u);
    for (int i = 0; i < 12; i++)
      EXPECT_NEAR(gx[i], ct[i] * std::cos(x[i]) * (float)n[i / 4], 1e-5) << i;
    kiln_array *gn = kiln_tree_leaf_array(kiln_tree_child(cts, 1));
    ASSERT_NE(gn, nullptr);
    EXPECT_EQ(kiln_array_dtype(gn), KILN_BOOL);
    std::vector<uint8_t> zn = Values<uint8_t>(kiln_tree_child(cts, 1));
    EXPECT_EQ(zn, (std::vector<uint8_t>{0, 0, 0}));
    kiln_tree_free(out);
  }
  EXPECT_EQ(kiln_jit_compile_count(j), 1);
  kiln_jit_free(j);
}

}  // namespace
