// reduce_window_sum/max/min, select_and_scatter_add and Flax's pooling
// through the public API under kiln_jit, against JAX (golden/window.py):
// values, jvp, vjp (max-pool's gradient with ties), vmap with the mapped
// axis in each position, the text form, and bad input. Every golden test
// runs on the C target (KILN_EXECUTOR=fused) and the reference executor.
#include <cstring>
#include <string>

#include "ir/ir.h"
#include "support/scoped_env.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "window.txt";
const GoldenArray &W(const std::string &c, const std::string &n) { return G(c, n, kFile); }
std::vector<int64_t> Ints(const GoldenArray &a) { return {a.v.begin(), a.v.end()}; }

// A golden case's op and window.
struct Case {
  int op = 0;
  bool bf16 = false;
  std::vector<int64_t> dims, strides, pads, base, wdil;
  kiln_window Window() const {
    return {dims.data(), strides.data(), pads.data(), base.data(), wdil.data()};
  }
};

Case Load(const std::string &name) {
  Case c;
  c.op = (int)W(name, "op").v.at(0);
  c.bf16 = name.find("bf16") != std::string::npos;
  c.dims = Ints(W(name, "dims"));
  c.strides = Ints(W(name, "strides"));
  c.pads = Ints(W(name, "pads"));
  c.base = Ints(W(name, "base"));
  c.wdil = Ints(W(name, "wdil"));
  return c;
}

kiln_val *RW(kiln_trace *t, int op, kiln_val *x, const kiln_window *w) {
  if (op == 0) return kiln_reduce_window_sum(t, x, w);
  return op == 1 ? kiln_reduce_window_max(t, x, w) : kiln_reduce_window_min(t, x, w);
}

// x -> reduce_window(x) (in bf16 for the bf16 cases)
kiln_tree *Fwd(kiln_trace *t, const kiln_tree *a, void *u) {
  const Case *c = (const Case *)u;
  kiln_window w = c->Window();
  kiln_val *x = ArgVal(a, 0);
  if (c->bf16) x = kiln_convert(t, x, KILN_BF16);
  kiln_val *y = RW(t, c->op, x, &w);
  return kiln_tree_val(c->bf16 ? kiln_convert(t, y, KILN_F32) : y);
}

void ExpectClose(const std::vector<float> &got, const GoldenArray &want, float tol,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isinf(want.v[i]))
      EXPECT_EQ(got[i], want.v[i]) << what << " [" << i << "]";
    else
      EXPECT_NEAR(got[i], want.v[i], tol + tol * std::fabs(want.v[i])) << what << " [" << i << "]";
  }
}

std::vector<float> First(kiln_tree *out, size_t child) {
  std::vector<float> v;
  if (out) v = Values<float>(kiln_tree_child(out, child));
  kiln_tree_free(out);
  return v;
}

class Window : public ::testing::TestWithParam<const char *> {
 protected:
  ScopedEnv exec_{"KILN_EXECUTOR", GetParam()};
  Ctx c_;
  void SetUp() override {
    if (!c_.ctx) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
  }
  kiln_tree *In(const std::string &cs, const char *n) { return Leaf(c_.dev, W(cs, n)); }
  // The cotangent of f's argument for the case's cotangent c, against "vjp".
  void ExpectVjp(const kiln_func *f, const char *name, float tol = 2e-5f) {
    kiln_func *v = nullptr;
    ASSERT_EQ(kiln_vjp(f, &v), KILN_OK) << kiln_last_error();
    Func vf(v);
    kiln_tree *r = Jit(c_, v, Tuple({Tuple({In(name, "x")}), In(name, "c")}));
    std::vector<float> g;
    if (r) g = Values<float>(kiln_tree_child(kiln_tree_child(r, 1), 0));
    kiln_tree_free(r);
    ExpectClose(g, W(name, "vjp"), tol, "vjp");
  }
};

const char *const kCases[] = {"max1d",   "max2d",   "min2d",   "sum2d",  "sumdil",  "maxbase",
                              "maxwdil", "maxnhwc", "maxties", "minties", "maxbf16", "sumbf16"};

TEST_P(Window, ValuesJvpVjp) {
  for (const char *name : kCases) {
    SCOPED_TRACE(name);
    Case cs = Load(name);
    Func f(Fwd, &cs, "window");
    kiln_tree *out = Jit(c_, f.f, Tuple({In(name, "x")}));
    std::vector<float> y = out ? Values<float>(out) : std::vector<float>();
    kiln_tree_free(out);
    float tol = cs.bf16 ? 2e-2f : 2e-5f;  // bf16: a few of its ulps (sums round per step)
    ExpectClose(y, W(name, "y"), tol, "value");
    kiln_func *j = nullptr;
    ASSERT_EQ(kiln_jvp(f.f, &j), KILN_OK) << kiln_last_error();
    Func jf(j);
    ExpectClose(First(Jit(c_, j, Tuple({Tuple({In(name, "x")}), Tuple({In(name, "t")})})), 1),
                W(name, "jvp"), tol, "jvp");
    if (Golden(kFile).count(std::string(name) + "/vjp")) ExpectVjp(f.f, name, tol);
  }
}

// flax.linen.max_pool / avg_pool
struct Pool {
  bool is_max;
  std::vector<int64_t> window, strides, pads;
  bool same, count_include_pad;
};

kiln_tree *PoolFn(kiln_trace *t, const kiln_tree *a, void *u) {
  const Pool *p = (const Pool *)u;
  int n = (int)p->window.size();
  bool zero = p->pads == std::vector<int64_t>(2 * n, 0);
  const char *pad = p->same ? "SAME" : zero ? "VALID" : nullptr;  // nullptr: the pairs
  kiln_val *x = ArgVal(a, 0);
  if (p->is_max)
    return kiln_tree_val(kiln_max_pool(t, x, n, p->window.data(), p->strides.data(), pad,
                                       p->pads.data()));
  return kiln_tree_val(kiln_avg_pool(t, x, n, p->window.data(), p->strides.data(), pad,
                                     p->pads.data(), p->count_include_pad));
}

TEST_P(Window, FlaxPooling) {
  for (const char *name : {"pool_max_valid", "pool_max_same", "pool_max_pairs", "pool_avg_same",
                           "pool_avg_nopad", "pool_avg_1d"}) {
    SCOPED_TRACE(name);
    Pool p{std::strstr(name, "max") != nullptr, Ints(W(name, "window")), Ints(W(name, "strides")),
           Ints(W(name, "pads")), W(name, "same").v.at(0) != 0,
           W(name, "count_include_pad").v.at(0) != 0};
    Func f(PoolFn, &p, "pool");
    kiln_tree *out = Jit(c_, f.f, Tuple({In(name, "x")}));
    std::vector<float> y = out ? Values<float>(out) : std::vector<float>();
    kiln_tree_free(out);
    ExpectNear(y, W(name, "y"), "value");
    ExpectVjp(f.f, name);
  }
}

// The vmap case's (4, 6) max-pool and the loss sum(maxpool(x) * c).
const kiln_window *VmapWindow() {
  static const int64_t dims[] = {2, 3}, strides[] = {2, 1}, pads[] = {1, 0, 1, 1};
  static const kiln_window w = {dims, strides, pads, nullptr, nullptr};
  return &w;
}
kiln_tree *VmapPool(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_reduce_window_max(t, ArgVal(a, 0), VmapWindow()));
}
kiln_tree *VmapLoss(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *y = kiln_reduce_window_max(t, ArgVal(a, 0), VmapWindow());
  return kiln_tree_val(SumAll(t, kiln_mul(t, y, ArgVal(a, 1))));
}

kiln_func *Vmap(const kiln_func *f, kiln_tree *in_axes) {
  kiln_func *v = nullptr;
  EXPECT_EQ(kiln_vmap(f, in_axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  kiln_tree_free(in_axes);
  return v;
}

TEST_P(Window, VmapEachAxis) {
  Func pool(VmapPool, nullptr, "pool"), loss(VmapLoss, nullptr, "loss");
  kiln_func *g = nullptr, *j = nullptr;
  ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  ASSERT_EQ(kiln_jvp(pool.f, &j), KILN_OK);
  Func gf(g), jf(j);
  for (int ax = 0; ax < 3; ax++) {
    SCOPED_TRACE(ax);
    std::string x = "x" + std::to_string(ax);
    Func vy(Vmap(pool.f, Tuple({kiln_axis(ax)})));
    kiln_tree *out = Jit(c_, vy.f, Tuple({In("vmap", x.c_str())}));
    std::vector<float> y = out ? Values<float>(out) : std::vector<float>();
    kiln_tree_free(out);
    ExpectNear(y, W("vmap", "y" + std::to_string(ax)), "vmap value");
    Func vg(Vmap(g, Tuple({kiln_axis(ax), kiln_tree_none()})));
    out = Jit(c_, vg.f, Tuple({In("vmap", x.c_str()), In("vmap", "c")}));
    y = out ? Values<float>(out) : std::vector<float>();
    kiln_tree_free(out);
    ExpectNear(y, W("vmap", "grad" + std::to_string(ax)), "vmap grad");
    // the tangent x * 0.5 + 0.25, as the golden
    GoldenArray t = W("vmap", x);
    for (float &e : t.v) e = e * 0.5f + 0.25f;
    Func vj(Vmap(j, Tuple({Tuple({kiln_axis(ax)}), Tuple({kiln_axis(ax)})})));
    out = Jit(c_, vj.f, Tuple({Tuple({In("vmap", x.c_str())}), Tuple({Leaf(c_.dev, t)})}));
    ExpectNear(First(out, 1), W("vmap", "jvp" + std::to_string(ax)), "vmap jvp");
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, Window, ::testing::Values("fused", "reference"));

// (From here on, checks that need no GPU: the test_window_cuda build runs
// only the golden cases above, on a GPU.)
#ifndef KILN_TEST_CUDA_BACKEND

// VmapLoss's arguments: the vmap case's first example and its cotangent.
kiln_tree *LossArgs(Ctx &c) {
  GoldenArray x0 = W("vmap", "x0");
  x0.shape = {4, 6};
  x0.v.resize(24);
  return Tuple({Leaf(c.dev, x0), Leaf(c.dev, W("vmap", "c"))});
}

// The jaxpr of max-pool's gradient prints JAX's spellings and parses back.
TEST(WindowText, GradJaxprRoundTrips) {
  Ctx c;
  Func loss(VmapLoss, nullptr, "loss");
  kiln_func *g = nullptr;
  ASSERT_EQ(kiln_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *args = LossArgs(c);
  char *text = nullptr;
  ASSERT_EQ(kiln_make_jaxpr(c.ctx, gf.f, args, &text), KILN_OK) << kiln_last_error();
  kiln_tree_free(args);
  std::string s(text);
  free(text);
  for (const char *want : {"reduce_window_max[", "select_prim=ge",
                           "select_and_scatter_add[", "padding=((1, 0), (1, 1))"})
    EXPECT_NE(s.find(want), std::string::npos) << want << " in\n" << s;
  const char *prog =
      "{ lambda ; a:f32[4,6] b:f32[2,6]. let\n"
      "    c:f32[2,6] = reduce_window_max[base_dilation=(1, 1) padding=((1, 0), (1, 1)) "
      "window_dilation=(1, 1) window_dimensions=(2, 3) window_strides=(2, 1)] a\n"
      "    d:f32[2,6] = select_and_gather_add[base_dilation=(1, 1) padding=((1, 0), (1, 1)) "
      "select_prim=le window_dilation=(1, 1) window_dimensions=(2, 3) window_strides=(2, 1)] a a\n"
      "    e:f32[4,6] = select_and_scatter_add[padding=((1, 0), (1, 1)) select_prim=ge "
      "window_dimensions=(2, 3) window_strides=(2, 1)] b a\n"
      "  in (c, d, e) }";
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse(prog, &p), KILN_OK) << kiln_last_error();
  char *back = nullptr;
  ASSERT_EQ(kir_print(p, &back), KILN_OK);
  kir_program *q = nullptr;
  ASSERT_EQ(kir_parse(back, &q), KILN_OK) << back;
  EXPECT_TRUE(kir_program_equal(p, q)) << back;
  free(back);
  kir_program_free(p);
  kir_program_free(q);
}

// On the C target a lone float window op is its own kernel (codegen/window.c).
TEST(WindowText, CTargetCompilesWindowKernels) {
  ScopedEnv exec("KILN_EXECUTOR", "fused");
  Ctx c;
  Func loss(VmapLoss, nullptr, "loss");
  kiln_func *g = nullptr;
  ASSERT_EQ(kiln_value_and_grad(loss.f, nullptr, 0, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *args = LossArgs(c);
  kiln_jit *j = nullptr;
  kiln_lowered *l = nullptr;
  kiln_compiled *comp = nullptr;
  char *text = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, gf.f, nullptr, &j), KILN_OK);
  ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_lowered_compile(l, &comp), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_compiled_as_text(comp, &text), KILN_OK);
  std::string s(text);
  free(text);
  EXPECT_NE(s.find("kiln_window_reduce_window_max_"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_window_select_and_scatter_add_"), std::string::npos) << s;
  kiln_compiled_free(comp);
  kiln_lowered_free(l);
  kiln_jit_free(j);
  kiln_tree_free(args);
}

// Bad windows: a clear status naming the op and the operand's type.
kiln_tree *BadWindow(kiln_trace *t, const kiln_tree *a, void *u) {
  const kiln_window *w = (const kiln_window *)u;
  return kiln_tree_val(kiln_reduce_window_max(t, ArgVal(a, 0), w));
}

TEST(WindowErrors, ClearStatus) {
  Ctx c;
  GoldenArray x{{4, 6}, std::vector<float>(24, 1.0f)};
  static const int64_t two[] = {2, 2}, zero_stride[] = {1, 0}, far[] = {0, 0, -4, -3};
  struct Bad {
    kiln_window w;
    kiln_status st;
    const char *msg;
  } bad[] = {
      {{two, zero_stride, nullptr, nullptr, nullptr}, KILN_ERR_ARGUMENT,
       "window_strides=(1, 0) must be positive (operand f32[4,6])"},
      {{two, nullptr, far, nullptr, nullptr}, KILN_ERR_SHAPE,
       "dimension 1 of operand f32[4,6] padded by (-4, -3) to -1 is smaller than the window"},
  };
  for (Bad &b : bad) {
    Func f(BadWindow, &b.w, "bad");
    kiln_tree *out = Jit(c, f.f, Tuple({Leaf(c.dev, x)}), b.st);
    kiln_tree_free(out);
    std::string m = kiln_last_error();
    EXPECT_NE(m.find("reduce_window_max"), std::string::npos) << m;
    EXPECT_NE(m.find(b.msg), std::string::npos) << m;
  }
}

// The public builders take one entry per operand dimension; a window of
// another rank can only come from IR text.
TEST(WindowErrors, RankMismatchInText) {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse("{ lambda ; a:f32[4,6]. let\n"
                      "    b:f32[2,3] = reduce_window_sum[base_dilation=(1, 1) "
                      "padding=((0, 0), (0, 0)) window_dilation=(1, 1) window_dimensions=(2,) "
                      "window_strides=(2, 2)] a\n  in (b,) }",
                      &p),
            KILN_ERR_SHAPE);
  kir_program_free(p);
  EXPECT_NE(std::string(kiln_last_error())
                .find("reduce_window_sum: window_dimensions=(2,) has 1 entries for operand "
                      "f32[4,6] of rank 2"),
            std::string::npos)
      << kiln_last_error();
}

kiln_tree *BadScatter(kiln_trace *t, const kiln_tree *a, void *) {
  static const int64_t dims[] = {2, 2}, strides[] = {2, 2};
  kiln_window w = {dims, strides, nullptr, nullptr, nullptr};
  return kiln_tree_val(kiln_select_and_scatter_add(t, ArgVal(a, 0), ArgVal(a, 0), 1, &w));
}

TEST(WindowErrors, ScatterSourceShape) {
  Ctx c;
  GoldenArray x{{4, 6}, std::vector<float>(24, 1.0f)};
  Func f(BadScatter, nullptr, "bad");
  kiln_tree_free(Jit(c, f.f, Tuple({Leaf(c.dev, x)}), KILN_ERR_SHAPE));
  std::string m = kiln_last_error();
  EXPECT_NE(m.find("select_and_scatter_add: source f32[4,6] must have the windows' shape "
                   "f32[2,3] of operand f32[4,6]"),
            std::string::npos)
      << m;
}

#endif  // KILN_TEST_CUDA_BACKEND

}  // namespace
