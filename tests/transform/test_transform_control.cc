// Autodiff and vmap of control flow through the public API under kiln_jit,
// against JAX (golden/transform_control.py): grad and jvp of cond on both
// branches, cond with a batched predicate, and a scan RNN (forward and
// reverse) with grad, jvp, vmap and per-example gradients.
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "transform_control.txt";
const GoldenArray &C(const std::string &c, const std::string &n) { return G(c, n, kFile); }
kiln_tree *V(kiln_val *v) { return kiln_tree_val(v); }
kiln_tree *In(Ctx &c, const char *cs, const char *n) { return Leaf(c.dev, C(cs, n)); }

kiln_tree *Scalar(Ctx &c, float v) {
  kiln_array *a = nullptr;
  EXPECT_EQ(kiln_array_from_host(c.dev, KILN_F32, 0, nullptr, &v, sizeof v, &a), KILN_OK);
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

kiln_val *Only(kiln_tree *out) {
  if (!out) return nullptr;
  const kiln_leaf *l = kiln_tree_leaf_get(out);
  kiln_val *v = l ? l->u.val : nullptr;
  kiln_tree_free(out);
  return v;
}

// ---- cond: p > 0 ? sin(x) * y : cos(x) + y * y ----

kiln_tree *OnTrue(kiln_trace *t, const kiln_tree *a, void *) {
  return V(kiln_mul(t, kiln_sin(t, ArgVal(a, 0)), ArgVal(a, 1)));
}
kiln_tree *OnFalse(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *y = ArgVal(a, 1);
  return V(kiln_add(t, kiln_cos(t, ArgVal(a, 0)), kiln_mul(t, y, y)));
}

struct Branches {
  Func on_true{OnTrue, nullptr, "on_true"}, on_false{OnFalse, nullptr, "on_false"};
};

kiln_val *CondOf(kiln_trace *t, const Branches *b, kiln_val *p, kiln_val *x, kiln_val *y) {
  kiln_tree *ops = Tuple({V(x), V(y)});
  kiln_tree *out = kiln_cond(t, kiln_gt(t, p, F32(t, 0)), b->on_true.f, b->on_false.f, ops);
  kiln_tree_free(ops);
  return Only(out);
}
// (p, x, y) -> f
kiln_tree *CondF(kiln_trace *t, const kiln_tree *a, void *u) {
  return V(CondOf(t, (const Branches *)u, ArgVal(a, 0), ArgVal(a, 1), ArgVal(a, 2)));
}
// (p, x, y, c) -> sum(f * c)
kiln_tree *CondLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *f = CondOf(t, (const Branches *)u, ArgVal(a, 0), ArgVal(a, 1), ArgVal(a, 2));
  return V(SumAll(t, kiln_mul(t, f, ArgVal(a, 3))));
}
// (x, y) -> f with p captured in the branches' selection
struct CondAt {
  Branches b;
  float p;
};
kiln_tree *CondXY(kiln_trace *t, const kiln_tree *a, void *u) {
  const CondAt *c = (const CondAt *)u;
  return V(CondOf(t, &c->b, F32(t, c->p), ArgVal(a, 0), ArgVal(a, 1)));
}

TEST(ControlAutodiff, CondGradAndJvpOnEachBranchMatchJax) {
  Ctx c;
  for (float p : {1.0f, -1.0f}) {
    std::string cs = p > 0 ? "cond_true" : "cond_false";
    SCOPED_TRACE(cs);
    Branches b;
    Func loss(CondLoss, &b, "cond_loss");
    kiln_func *g = nullptr;
    int argnums[2] = {1, 2};
    ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK);
    Func gf(g);
    kiln_tree *out = Jit(c, g, Tuple({Scalar(c, p), In(c, "cond", "x"), In(c, "cond", "y"),
                                      In(c, "cond", "c")}));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(kiln_tree_child(out, 0)), C(cs, "gx"), "gx");
    ExpectNear(Values<float>(kiln_tree_child(out, 1)), C(cs, "gy"), "gy");
    kiln_tree_free(out);
    CondAt at{{}, p};
    Func fxy(CondXY, &at, "cond_xy");
    kiln_func *j = nullptr;
    ASSERT_EQ(kiln_jvp(fxy.f, &j), KILN_OK);
    Func jf(j);
    out = Jit(c, j, Tuple({Tuple({In(c, "cond", "x"), In(c, "cond", "y")}),
                           Tuple({In(c, "cond", "tx"), In(c, "cond", "ty")})}));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(kiln_tree_child(out, 1)), C(cs, "jvp"), "jvp");
    kiln_tree_free(out);
  }
}

TEST(ControlAutodiff, CondWithABatchedPredicateSelectsPerLane) {
  Ctx c;
  Branches b;
  Func f(CondF, &b, "cond_f"), loss(CondLoss, &b, "cond_loss");
  kiln_func *v = nullptr, *g = nullptr, *vg = nullptr;
  ASSERT_EQ(kiln_vmap(f.f, nullptr, nullptr, 0, nullptr, &v), KILN_OK);
  Func vf(v);
  kiln_tree *out = Jit(c, v, Tuple({In(c, "cond", "preds"), In(c, "cond", "x"), In(c, "cond", "y")}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(out), C("cond_vmap", "value"), "vmap value");
  kiln_tree_free(out);
  int argnums[2] = {1, 2};
  ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK);
  Func gf(g);
  ASSERT_EQ(kiln_vmap(g, nullptr, nullptr, 0, nullptr, &vg), KILN_OK);
  Func vgf(vg);
  out = Jit(c, vg, Tuple({In(c, "cond", "preds"), In(c, "cond", "x"), In(c, "cond", "y"),
                          In(c, "cond", "c")}));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), C("cond_vmap", "gx"), "vmap(grad) gx");
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), C("cond_vmap", "gy"), "vmap(grad) gy");
  kiln_tree_free(out);
}

// ---- scan: an RNN ----

struct Weights {
  kiln_val *w, *u, *b;
};
kiln_tree *Step(kiln_trace *t, const kiln_tree *a, void *user) {
  const Weights *p = (const Weights *)user;
  kiln_val *h = kiln_add(t, kiln_matmul(t, ArgVal(a, 0), p->w), kiln_matmul(t, ArgVal(a, 1), p->u));
  h = kiln_tanh(t, kiln_add(t, h, p->b));
  return Tuple({V(h), V(h)});
}
// (h0, w, u, b, xs) -> (h, ys); user: reverse flag
kiln_tree *RnnOf(kiln_trace *t, const kiln_tree *a, bool reverse) {
  Weights p{ArgVal(a, 1), ArgVal(a, 2), ArgVal(a, 3)};
  kiln_func *step = nullptr;
  if (kiln_func_new(Step, &p, "step", &step) != KILN_OK) return nullptr;
  kiln_val *xs = ArgVal(a, 4);
  kiln_tree *init = V(ArgVal(a, 0)), *x = V(xs);
  kiln_tree *out = kiln_scan(t, step, init, x, kiln_val_shape(xs)[0], reverse);
  kiln_tree_free(init);
  kiln_tree_free(x);
  kiln_func_free(step);
  return out;
}
kiln_tree *Rnn(kiln_trace *t, const kiln_tree *a, void *) { return RnnOf(t, a, false); }
// (h0, w, u, b, xs, cs) -> sum(ys * cs) + sum(h)
kiln_tree *RnnLoss(kiln_trace *t, const kiln_tree *a, void *rev) {
  kiln_tree *out = RnnOf(t, a, rev != nullptr);
  if (!out) return nullptr;
  kiln_val *h = kiln_tree_leaf_get(kiln_tree_child(out, 0))->u.val;
  kiln_val *ys = kiln_tree_leaf_get(kiln_tree_child(out, 1))->u.val;
  kiln_tree_free(out);
  return V(kiln_add(t, SumAll(t, kiln_mul(t, ys, ArgVal(a, 5))), SumAll(t, h)));
}
kiln_tree *RnnArgs(Ctx &c, bool with_cs = true) {
  std::vector<kiln_tree *> v;
  for (const char *n : {"h0", "w", "u", "b", "xs"}) v.push_back(In(c, "rnn", n));
  if (with_cs) v.push_back(In(c, "rnn", "cs"));
  return Tuple(v);
}

TEST(ControlAutodiff, ScanRnnValueAndGradMatchJaxBothDirections) {
  Ctx c;
  for (bool rev : {false, true}) {
    std::string cs = rev ? "rnn_rev" : "rnn_fwd";
    SCOPED_TRACE(cs);
    Func loss(RnnLoss, rev ? (void *)1 : nullptr, "rnn_loss");
    kiln_func *vg = nullptr;
    int argnums[5] = {0, 1, 2, 3, 4};
    ASSERT_EQ(kiln_value_and_grad(loss.f, argnums, 5, 0, &vg), KILN_OK);
    Func vgf(vg);
    kiln_tree *out = Jit(c, vg, RnnArgs(c));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(kiln_tree_child(out, 0)), C(cs, "loss"), "loss");
    const char *names[5] = {"g_h0", "g_w", "g_u", "g_b", "g_xs"};
    for (size_t i = 0; i < 5; i++)
      ExpectNear(Values<float>(kiln_tree_child(kiln_tree_child(out, 1), i)), C(cs, names[i]), names[i]);
    kiln_tree_free(out);
  }
}

// jvp in (h0, w) only: u, b and xs are closed over as constants.
struct RnnConsts {
  kiln_tree *rest;  // (u, b, xs) as arrays
};
kiln_tree *RnnHW(kiln_trace *t, const kiln_tree *a, void *user) {
  const RnnConsts *r = (const RnnConsts *)user;
  kiln_val *u = kiln_const_array(t, kiln_tree_leaf_array(kiln_tree_child(r->rest, 0)));
  kiln_val *b = kiln_const_array(t, kiln_tree_leaf_array(kiln_tree_child(r->rest, 1)));
  kiln_val *xs = kiln_const_array(t, kiln_tree_leaf_array(kiln_tree_child(r->rest, 2)));
  kiln_tree *args = Tuple({V(ArgVal(a, 0)), V(ArgVal(a, 1)), V(u), V(b), V(xs)});
  kiln_tree *out = RnnOf(t, args, false);
  kiln_tree_free(args);
  return out;
}

TEST(ControlAutodiff, ScanJvpMatchesJax) {
  Ctx c;
  RnnConsts r{Tuple({In(c, "rnn", "u"), In(c, "rnn", "b"), In(c, "rnn", "xs")})};
  Func f(RnnHW, &r, "rnn_hw");
  kiln_func *j = nullptr;
  ASSERT_EQ(kiln_jvp(f.f, &j), KILN_OK);
  Func jf(j);
  kiln_tree *out = Jit(c, j, Tuple({Tuple({In(c, "rnn", "h0"), In(c, "rnn", "w")}),
                                    Tuple({In(c, "rnn", "th0"), In(c, "rnn", "tw")})}));
  kiln_tree_free(r.rest);
  ASSERT_NE(out, nullptr);
  const kiln_tree *tan = kiln_tree_child(out, 1);
  ExpectNear(Values<float>(kiln_tree_child(tan, 0)), C("rnn_jvp", "h"), "tangent h");
  ExpectNear(Values<float>(kiln_tree_child(tan, 1)), C("rnn_jvp", "ys"), "tangent ys");
  kiln_tree_free(out);
}

kiln_tree *Axes(std::vector<int> a) {
  std::vector<kiln_tree *> v;
  for (int x : a) v.push_back(x < 0 ? kiln_tree_none() : kiln_axis(x));
  return Tuple(v);
}

TEST(ControlAutodiff, ScanVmapAndPerExampleGradientsMatchJax) {
  Ctx c;
  Func rnn(Rnn, nullptr, "rnn");
  kiln_tree *in_axes = Axes({0, -1, -1, -1, 1});
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vmap(rnn.f, in_axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  kiln_tree_free(in_axes);
  Func vf(v);
  kiln_tree *out = Jit(c, v, RnnArgs(c, false));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), C("rnn_vmap", "h"), "vmap h");
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), C("rnn_vmap", "ys"), "vmap ys");
  kiln_tree_free(out);
  Func loss(RnnLoss, nullptr, "rnn_loss");
  kiln_func *g = nullptr, *per = nullptr;
  int argnums[2] = {1, 2};
  ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK);
  Func gf(g);
  in_axes = Axes({0, -1, -1, -1, 1, 1});
  ASSERT_EQ(kiln_vmap(g, in_axes, nullptr, 0, nullptr, &per), KILN_OK);
  kiln_tree_free(in_axes);
  Func pf(per);
  out = Jit(c, per, RnnArgs(c));
  ASSERT_NE(out, nullptr);
  ExpectNear(Values<float>(kiln_tree_child(out, 0)), C("rnn_vmap", "g_w"), "per-example g_w");
  ExpectNear(Values<float>(kiln_tree_child(out, 1)), C("rnn_vmap", "g_u"), "per-example g_u");
  kiln_tree_free(out);
}

}  // namespace
