// conv_general_dilated through the public API (kiln_conv_general_dilated,
// kiln_conv) under kiln_jit, on the C target and on the reference executor,
// against JAX (golden/conv.py): values, jvp, vjp w.r.t. both operands, vmap
// over each operand, grad of vmap, bf16 with preferred f32, a small CNN's
// gradient, the text form, bad input; and the CUDA target's im2col copies
// (kernels/conv.h): compiled by NVRTC, and run on the host against JAX.
#include <algorithm>
#include <cstring>
#include <string>

#include "codegen/codegen.h"
#include "conv_kernel_host.h"
#include "support/cuda_test_support.h"
#include "ir/ir.h"
#include "conv_golden.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

// sum(vmap(conv, (0, -1))(l, r) ** 2)
kiln_tree *VmapLoss(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_tree *args = Tuple({kiln_tree_val(ArgVal(a, 0)), kiln_tree_val(ArgVal(a, 1))});
  kiln_tree *out = kiln_call(t, (const kiln_func *)u, args);
  kiln_tree_free(args);
  if (!out) return nullptr;
  kiln_val *y = kiln_tree_leaf_get(out)->u.val;
  kiln_tree_free(out);
  return kiln_tree_val(SumAll(t, kiln_mul(t, y, y)));
}


class Conv : public ::testing::TestWithParam<kiln_executor> {
 protected:
  void SetUp() override {
    c.Open(GetParam());  // again, with the executor under test
    if (!c.ctx) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
  }
  kiln_tree *In(const ConvCase &k, const char *n) { return Leaf(c.dev, C(k.name, n)); }
  // vmap(conv) with in_axes (lhs axis, rhs axis), -100 for None.
  kiln_func *Vmapped(const kiln_func *f, int la, int ra) {
    kiln_tree *axes = Tuple({la == -100 ? kiln_tree_none() : kiln_axis(la),
                             ra == -100 ? kiln_tree_none() : kiln_axis(ra)});
    kiln_func *v = nullptr;
    EXPECT_EQ(kiln_vmap(f, axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
    kiln_tree_free(axes);
    return v;
  }
  Ctx c;
};

TEST_P(Conv, ValuesMatchJax) {
  for (const ConvCase &k : kConvCases) {
    ConvSpec s(k);
    Func f(ConvFn, &s, "conv");
    kiln_tree *out = Jit(c, f.f, Tuple({In(k, "lhs"), In(k, "rhs")}));
    ASSERT_NE(out, nullptr) << k.name;
    Near(Values<float>(out), C(k.name, "out"), k.name);
    kiln_tree_free(out);
  }
}

TEST_P(Conv, JvpAndVjpOfBothOperandsMatchJax) {
  for (const ConvCase &k : kConvCases) {
    ConvSpec s(k);
    Func f(ConvFn, &s, "conv");
    kiln_func *j = nullptr, *v = nullptr;
    ASSERT_EQ(kiln_jvp(f.f, &j), KILN_OK);
    Func jf(j);
    kiln_tree *out = Jit(c, j, Tuple({Tuple({In(k, "lhs"), In(k, "rhs")}),
                                      Tuple({In(k, "tl"), In(k, "tr")})}));
    ASSERT_NE(out, nullptr) << k.name;
    Near(Values<float>(kiln_tree_child(out, 1)), C(k.name, "jvp"), std::string(k.name) + " jvp");
    kiln_tree_free(out);
    ASSERT_EQ(kiln_vjp(f.f, &v), KILN_OK);
    Func vf(v);
    out = Jit(c, v, Tuple({Tuple({In(k, "lhs"), In(k, "rhs")}), In(k, "ct")}));
    ASSERT_NE(out, nullptr) << k.name;
    const kiln_tree *g = kiln_tree_child(out, 1);
    Near(Values<float>(kiln_tree_child(g, 0)), C(k.name, "vjp_lhs"), k.name + std::string(" lhs"));
    Near(Values<float>(kiln_tree_child(g, 1)), C(k.name, "vjp_rhs"), k.name + std::string(" rhs"));
    kiln_tree_free(out);
  }
}

TEST_P(Conv, VmapOverEachOperandMatchesJax) {
  for (const ConvCase &k : kConvCases) {
    ConvSpec s(k);
    Func f(ConvFn, &s, "conv");
    struct {
      int la, ra;
      const char *l, *r, *want;
    } runs[] = {{0, -100, "lhs_b", "rhs", "vmap_lhs"},
                {-100, -1, "lhs", "rhs_b", "vmap_rhs"},
                {0, -1, "lhs_b", "rhs_b", "vmap_both"}};
    for (auto &r : runs) {
      Func vf(Vmapped(f.f, r.la, r.ra));
      kiln_tree *out = Jit(c, vf.f, Tuple({In(k, r.l), In(k, r.r)}));
      ASSERT_NE(out, nullptr) << k.name << " " << r.want;
      Near(Values<float>(out), C(k.name, r.want), std::string(k.name) + " " + r.want);
      kiln_tree_free(out);
    }
  }
}

TEST_P(Conv, GradOfVmapMatchesJax) {
  for (const ConvCase &k : kConvCases) {
    ConvSpec s(k);
    Func f(ConvFn, &s, "conv");
    Func vf(Vmapped(f.f, 0, -1));
    Func loss(VmapLoss, vf.f, "loss");
    int argnums[2] = {0, 1};
    kiln_func *g = nullptr;
    ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK) << kiln_last_error();
    Func gf(g);
    kiln_tree *out = Jit(c, g, Tuple({In(k, "lhs_b"), In(k, "rhs_b")}));
    ASSERT_NE(out, nullptr) << k.name;
    Near(Values<float>(kiln_tree_child(out, 0)), C(k.name, "gvmap_lhs"), k.name);
    Near(Values<float>(kiln_tree_child(out, 1)), C(k.name, "gvmap_rhs"), k.name);
    kiln_tree_free(out);
  }
}

kiln_tree *Bf16Leaf(kiln_device *dev, const GoldenArray &a) {
  std::vector<uint16_t> h(a.v.size());
  for (size_t i = 0; i < h.size(); i++) h[i] = kiln_f32_to_bf16(a.v[i]);
  kiln_array *arr = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, KILN_BF16, (int)a.shape.size(), a.shape.data(), h.data(),
                                 h.size() * 2, &arr),
            KILN_OK);
  kiln_tree *t = kiln_tree_array(arr);
  kiln_array_release(arr);
  return t;
}

TEST_P(Conv, Bf16OperandsWithPreferredF32MatchJax) {
  for (const char *name : {"nhwc", "depthwise"}) {
    const ConvCase &k = *std::find_if(std::begin(kConvCases), std::end(kConvCases),
                                  [&](const ConvCase &x) { return !strcmp(x.name, name); });
    ConvSpec s(k, KILN_F32);
    Func f(ConvFn, &s, "conv");
    kiln_tree *out =
        Jit(c, f.f, Tuple({Bf16Leaf(c.dev, C(name, "lhs16")), Bf16Leaf(c.dev, C(name, "rhs16"))}));
    ASSERT_NE(out, nullptr) << name;
    EXPECT_EQ(kiln_array_dtype(kiln_tree_leaf_array(out)), KILN_F32);
    Near(Values<float>(out), C(name, "out16"), name);
    kiln_tree_free(out);
  }
}

// ---- a small CNN: conv + relu twice, mean-pool, dense, softmax xent ----

kiln_val *Bias(kiln_trace *t, kiln_val *x, kiln_val *b) { return kiln_add(t, x, b); }

kiln_tree *CnnLoss(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0);
  auto P = [&](size_t i) { return ArgVal(p, i); };
  kiln_val *x = ArgVal(a, 1), *labels = ArgVal(a, 2), *zero = F32(t, 0);
  int64_t one[2] = {1, 1}, two[2] = {2, 2};
  kiln_val *h = kiln_max(t, Bias(t, kiln_conv(t, x, P(0), one, "SAME"), P(1)), zero);
  h = kiln_max(t, Bias(t, kiln_conv(t, h, P(2), two, "VALID"), P(3)), zero);
  int sp[2] = {1, 2};
  double cells = (double)(kiln_val_shape(h)[1] * kiln_val_shape(h)[2]);
  h = kiln_div(t, kiln_reduce_sum(t, h, 2, sp), F32(t, cells));
  kiln_val *logits = kiln_add(t, kiln_matmul(t, h, P(4)), P(5));
  kiln_val *logp = kiln_log_softmax(t, logits, 1, nullptr);
  kiln_val *hot = kiln_one_hot(t, labels, 3, KILN_F32);
  int ax1 = 1, ax0 = 0;
  kiln_val *nll = kiln_reduce_sum(t, kiln_mul(t, hot, logp), 1, &ax1);
  return kiln_tree_val(kiln_neg(t, kiln_mean(t, nll, 1, &ax0, 0)));
}

TEST_P(Conv, CnnGradientMatchesJax) {
  Func loss(CnnLoss, nullptr, "cnn_loss");
  kiln_func *vg = nullptr;
  int argnum = 0;
  ASSERT_EQ(kiln_value_and_grad(loss.f, &argnum, 1, 0, &vg), KILN_OK) << kiln_last_error();
  Func g(vg);
  const char *names[6] = {"w1", "b1", "w2", "b2", "wd", "bd"};
  std::vector<kiln_tree *> params;
  for (const char *n : names) params.push_back(Leaf(c.dev, C("cnn", n)));
  const GoldenArray &lab = C("cnn", "labels");
  std::vector<int32_t> li(lab.v.begin(), lab.v.end());
  int64_t nl = (int64_t)li.size();
  kiln_array *la = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_I32, 1, &nl, li.data(), li.size() * 4, &la), KILN_OK);
  kiln_tree *labels = kiln_tree_array(la);
  kiln_array_release(la);
  kiln_tree *out = Jit(c, g.f, Tuple({Tuple(params), Leaf(c.dev, C("cnn", "x")), labels}));
  ASSERT_NE(out, nullptr);
  Near(Values<float>(kiln_tree_child(out, 0)), C("cnn", "loss"), "loss");
  for (int i = 0; i < 6; i++)
    Near(Values<float>(kiln_tree_child(kiln_tree_child(out, 1), i)),
         C("cnn", std::string("g") + names[i]), names[i]);
  kiln_tree_free(out);
}

// ---- jax.checkpoint: dots_saveable keeps convolution results ----

// sin(conv(sin(x), w)), NHWC/HWIO, SAME
kiln_tree *Block(kiln_trace *t, const kiln_tree *a, void *) {
  int64_t one[2] = {1, 1};
  kiln_val *y = kiln_conv(t, kiln_sin(t, ArgVal(a, 0)), ArgVal(a, 1), one, "SAME");
  return kiln_tree_val(kiln_sin(t, y));
}
// sum(b(b(x, w), w)), b the (checkpointed) block in user
kiln_tree *TwoBlocks(kiln_trace *t, const kiln_tree *a, void *u) {
  const kiln_func *b = (const kiln_func *)u;
  kiln_val *h = ArgVal(a, 0), *w = ArgVal(a, 1);
  for (int i = 0; i < 2 && h; i++) {
    kiln_tree *args = Tuple({kiln_tree_val(h), kiln_tree_val(w)});
    kiln_tree *out = kiln_call(t, b, args);
    kiln_tree_free(args);
    h = out ? kiln_tree_leaf_get(out)->u.val : nullptr;
    kiln_tree_free(out);
  }
  return kiln_tree_val(SumAll(t, h));
}

TEST_P(Conv, CheckpointPoliciesSaveWhatJaxSaves) {
  Func block(Block, nullptr, "block");
  struct {
    const char *name;
    int policy;  // -1: no checkpoint
  } runs[] = {{"none", -1},
              {"nothing", KILN_REMAT_NOTHING_SAVEABLE},
              {"dots", KILN_REMAT_DOTS_SAVEABLE}};
  for (auto &r : runs) {
    SCOPED_TRACE(r.name);
    kiln_func *ck = nullptr;
    if (r.policy >= 0) {
      ASSERT_EQ(kiln_checkpoint(block.f, (kiln_remat_policy)r.policy, &ck), KILN_OK);
    }
    Func ckf(ck);
    Func net(TwoBlocks, ck ? ck : block.f, "net");
    kiln_func *sr = nullptr, *g = nullptr;
    ASSERT_EQ(kiln_saved_residuals(net.f, &sr), KILN_OK);
    Func srf(sr);
    auto args = [&] { return Tuple({Leaf(c.dev, C("remat", "x")), Leaf(c.dev, C("remat", "w"))}); };
    kiln_tree *out = Jit(c, sr, args());
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(kiln_tree_num_children(out), (size_t)C("remat", r.name).v[0]);
    kiln_tree_free(out);
    int argnum = 1;
    ASSERT_EQ(kiln_grad(net.f, &argnum, 1, 0, &g), KILN_OK);
    Func gf(g);
    out = Jit(c, g, args());
    ASSERT_NE(out, nullptr);
    Near(Values<float>(out), C("remat", std::string("grad_") + r.name), r.name);
    kiln_tree_free(out);
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, Conv,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE),
                         [](const auto &info) {
                           return std::string(kiln_executor_name(info.param));
                         });

// ---- the CUDA target's kernels (kernels/conv.h) ----
// (From here on, checks that need no GPU: the test_conv_cuda build runs only
// the golden cases above, on a GPU.)
#ifndef KILN_TEST_CUDA_BACKEND

// The jaxpr of golden case k's convolution, as text.
std::string ConvJaxpr(Ctx &c, const ConvCase &k) {
  ConvSpec s(k);
  Func f(ConvFn, &s, "conv");
  kiln_tree *args = Tuple({Leaf(c.dev, C(k.name, "lhs")), Leaf(c.dev, C(k.name, "rhs"))});
  char *text = nullptr;
  EXPECT_EQ(kiln_make_jaxpr(c.ctx, f.f, args, &text), KILN_OK) << kiln_last_error();
  kiln_tree_free(args);
  std::string t = text ? text : "";
  free(text);
  return t;
}

TEST(ConvKernels, HostRunOfTheCudaCopiesMatchesJax) {
  Ctx c;
  for (const ConvCase &k : kConvCases) {
    std::string text = ConvJaxpr(c, k);
    kir_program *p = nullptr;
    ASSERT_EQ(kir_parse(text.c_str(), &p), KILN_OK) << text;
    ASSERT_EQ(p->n_eqns, 1) << k.name;
    const kir_eqn &e = p->eqns[0];
    const GoldenArray &want = C(k.name, "out");
    std::vector<float> got(want.v.size());
    ASSERT_EQ(kct_conv_host_f32(&e.params.conv, kir_var_aval(p, e.in[0]), kir_var_aval(p, e.in[1]),
                                kir_var_aval(p, e.out[0]), C(k.name, "lhs").v.data(),
                                C(k.name, "rhs").v.data(), got.data()),
              0);
    Near(got, want, k.name);
    kir_program_free(p);
  }
}

// Every golden case in each float dtype: kcg_emit_conv's three kernels (two
// where the GEMM writes an NHWC result itself) compile with NVRTC.
TEST(ConvKernels, NvrtcCompilesTheEmittedCopiesForEveryDtype) {
  Ctx c;
  for (const ConvCase &k : kConvCases) {
    std::string f32 = ConvJaxpr(c, k);
    for (const char *dt : {"f32", "bf16", "f16", "f64"}) {
      SCOPED_TRACE(std::string(k.name) + " " + dt);
      std::string t = f32;
      for (size_t at = 0; (at = t.find("f32[", at)) != std::string::npos; at += strlen(dt))
        t.replace(at, 3, dt);
      kir_program *p = nullptr;
      ASSERT_EQ(kir_parse(t.c_str(), &p), KILN_OK) << t;
      kcg_target_info target{KCG_TARGET_CUDA, 90};
      kcg_conv cv;
      ASSERT_EQ(kcg_emit_conv(p, &p->eqns[0], &target, &cv), KILN_OK) << kiln_last_error();
      EXPECT_EQ(cv.p.items[0], cv.groups * cv.rows * cv.kd);
      EXPECT_EQ(cv.direct, !strcmp(k.out, "NHWC") && cv.groups == 1) << cv.p.k.source;
      EXPECT_EQ(cv.p.items[2] == 0, cv.direct);
      std::string src = cv.p.k.source;
      for (const char *part : {"_im2col", "_pack_w", "_scatter"})
        EXPECT_EQ(src.find(std::string(cv.p.k.name) + part) != std::string::npos,
                  strcmp(part, "_scatter") || cv.p.items[2] > 0) << part;
      char *code = nullptr;
      size_t size = 0;
      EXPECT_EQ(kct_nvrtc_compile(cv.p.k.name, cv.p.k.source, "-arch=sm_90", true, &code, &size),
                KILN_OK) << kiln_last_error() << "\n" << cv.p.k.source;
      free(code);
      kcg_kernel_free(&cv.p.k);
      kir_program_free(p);
    }
  }
}

// The C target has its own convolution (the reference evaluator's GEMM).
TEST(ConvKernels, EmitterRefusesTheCTargetAndIntegers) {
  kir_program *p = nullptr;
  const char *text =
      "{ lambda ; a:i32[1,3,3,1] b:i32[2,2,1,1]. let\n"
      "    c:i32[1,2,2,1] = conv_general_dilated[batch_group_count=1 "
      "dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), "
      "out_spec=(0, 3, 1, 2)) feature_group_count=1 lhs_dilation=(1, 1) "
      "padding=((0, 0), (0, 0)) preferred_element_type=None rhs_dilation=(1, 1) "
      "window_strides=(1, 1)] a b\n  in (c,) }";
  ASSERT_EQ(kir_parse(text, &p), KILN_OK) << kiln_last_error();
  kcg_conv cv;
  kcg_target_info cuda{KCG_TARGET_CUDA, 90}, host{KCG_TARGET_C, 0};
  EXPECT_EQ(kcg_emit_conv(p, &p->eqns[0], &cuda, &cv), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(std::string(kiln_last_error()).find("i32[1,3,3,1]"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(kcg_emit_conv(p, &p->eqns[0], &host, &cv), KILN_ERR_ARGUMENT);
  kir_program_free(p);
}

// ---- text form and bad input ----

TEST(ConvText, PrintsAndParsesJaxSpelling) {
  const char *text =
      "{ lambda ; a:f32[2,5,5,3] b:f32[2,2,3,4]. let\n"
      "    c:f32[2,5,5,4] = conv_general_dilated[batch_group_count=1 "
      "dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), "
      "out_spec=(0, 3, 1, 2)) feature_group_count=1 lhs_dilation=(1, 1) "
      "padding=((1, 0), (0, 1)) preferred_element_type=None rhs_dilation=(1, 1) "
      "window_strides=(1, 1)] a b\n  in (c,) }";
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse(text, &p), KILN_OK) << kiln_last_error();
  char *printed = nullptr;
  ASSERT_EQ(kir_print(p, &printed), KILN_OK);
  EXPECT_NE(strstr(printed, "dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), "
                            "rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))"),
            nullptr)
      << printed;
  EXPECT_NE(strstr(printed, "padding=((1, 0), (0, 1))"), nullptr) << printed;
  kir_program *q = nullptr;
  ASSERT_EQ(kir_parse(printed, &q), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(kir_program_equal(p, q));
  free(printed);
  kir_program_free(p);
  kir_program_free(q);
}

struct Bad {
  std::vector<int64_t> ls, rs;
  kiln_dtype rd;
  const char *lspec, *rspec;
  int64_t fg, bg;
  kiln_status st;
  const char *want[3];
};

kiln_tree *BadFn(kiln_trace *t, const kiln_tree *a, void *u) {
  const Bad *b = (const Bad *)u;
  kiln_conv_params p{};
  p.lhs_spec = b->lspec, p.rhs_spec = b->rspec, p.out_spec = b->lspec;
  p.feature_group_count = b->fg, p.batch_group_count = b->bg;
  return kiln_tree_val(kiln_conv_general_dilated(t, ArgVal(a, 0), ArgVal(a, 1), &p));
}

kiln_aval Aval(kiln_dtype d, const std::vector<int64_t> &shape) {
  kiln_aval a{};
  a.dtype = d, a.rank = (int)shape.size();
  for (size_t i = 0; i < shape.size(); i++) a.shape[i] = shape[i];
  return a;
}

TEST(ConvErrors, NameTheOpShapesAndCounts) {
  const Bad cases[] = {
      {{2, 3, 5, 5}, {4, 2, 3, 3}, KILN_F32, "NCHW", "OIHW", 1, 1, KILN_ERR_SHAPE,
       {"lhs feature dimension 3 of f32[2,3,5,5]", "input feature dimension 2", "f32[4,2,3,3]"}},
      {{2, 6, 5, 5}, {4, 2, 3, 3}, KILN_F32, "NCHW", "OIHW", 4, 1, KILN_ERR_SHAPE,
       {"feature_group_count 4 does not divide", "dimension 6", "f32[2,6,5,5]"}},
      {{3, 2, 5, 5}, {4, 2, 3, 3}, KILN_F32, "NCHW", "OIHW", 1, 2, KILN_ERR_SHAPE,
       {"batch_group_count 2 does not divide", "lhs batch dimension 3", "f32[3,2,5,5]"}},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, KILN_F32, "NCHW", "OIHW", 2, 2, KILN_ERR_ARGUMENT,
       {"at most one of feature_group_count (2)", "batch_group_count (2)", ""}},
      {{2, 3, 5, 5}, {4, 3, 3}, KILN_F32, "NCHW", "OIH", 1, 1, KILN_ERR_SHAPE,
       {"one rank", "2", "3"}},
      {{2, 3, 5, 5}, {4, 3, 3, 3}, KILN_F16, "NCHW", "OIHW", 1, 1, KILN_ERR_DTYPE,
       {"equal dtypes", "f32[2,3,5,5]", "f16[4,3,3,3]"}},
      {{2, 3, 5, 5}, {4, 3, 3, 3}, KILN_F32, "NCHX", "OIHW", 1, 1, KILN_ERR_ARGUMENT,
       {"lhs_spec \"NCHX\"", "rhs_spec \"OIHW\"", "spatial"}},
  };
  Ctx c;
  for (const Bad &b : cases) {
    Func f(BadFn, (void *)&b, "bad");
    kiln_aval l = Aval(KILN_F32, b.ls), r = Aval(b.rd, b.rs);
    kiln_tree *args = Tuple({kiln_tree_ptr(&l), kiln_tree_ptr(&r)});
    kiln_treedef *def = nullptr;
    kiln_aval *out = nullptr;
    size_t n = 0;
    EXPECT_EQ(kiln_eval_shape(c.ctx, f.f, args, &def, &out, &n), b.st) << b.want[0];
    std::string msg = kiln_last_error();
    EXPECT_NE(msg.find("conv_general_dilated"), std::string::npos) << msg;
    for (const char *w : b.want) EXPECT_NE(msg.find(w), std::string::npos) << w << " in " << msg;
    kiln_tree_free(args);
  }
}

#endif  // KILN_TEST_CUDA_BACKEND

}  // namespace
