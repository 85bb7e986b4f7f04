// The equations the fusion planner leaves alone (OPAQUE groups) on the CUDA
// executor: a conv_general_dilated becomes im2col copies around one cuBLASLt
// matmul, a scatter a copy and an atomic (or ordered) apply, and window ops
// (pooling and its gradient), pad, gather and argmax kernels of their own,
// so a classifier's training step runs without host steps and replays as
// one CUDA graph.
//
// Built twice, like test_cuda_exec: on a GPU (label cuda) the values are
// checked against the CPU backend's for the same program; against the
// stand-ins (label cpu), which compute no kernels, the test checks the
// steps, the launches and graphs, that a fault in a copy names the
// convolution, and that every driver object is given back.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_fixture.h"
#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "support/jit_check.h"
#include "kiln/kiln.h"

namespace {

#ifdef KILN_FAKE_CUDA_LIBRARY
#define KCT_SUITE FakeCudaOpaque
KCT_USE_FAKE_DRIVER();
#else
#define KCT_SUITE CudaOpaque
#endif

std::string Err() { return kiln_last_error(); }

kiln_val *Arg(const kiln_tree *a, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(a, i))->u.val;
}

// A small CNN's loss over params (w1, w2) and images x (NHWC): conv SAME,
// relu, max-pool 2x2, conv VALID with stride 2, avg-pool SAME, sum of squares.
kiln_tree *CnnLoss(kiln_trace *t, const kiln_tree *a, void *) {
  const kiln_tree *p = kiln_tree_child(a, 0);
  kiln_val *x = Arg(a, 1);
  int64_t two[2] = {2, 2}, three[2] = {3, 3};
  kiln_val *h = kiln_max(t, kiln_conv(t, x, Arg(p, 0), nullptr, "SAME"), kiln_scalar_f(t, 0));
  h = kiln_max_pool(t, h, 2, two, two, "VALID", nullptr);
  h = kiln_conv(t, h, Arg(p, 1), two, "VALID");
  h = kiln_avg_pool(t, h, 2, three, nullptr, "SAME", nullptr, 1);
  int axes[4] = {0, 1, 2, 3};
  return kiln_tree_val(kiln_reduce_sum(t, kiln_mul(t, h, h), 4, axes));
}

struct Shape {
  std::vector<int64_t> dims;
  int64_t Size() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};
const Shape kW1{{3, 3, 3, 8}}, kW2{{3, 3, 8, 6}}, kX{{4, 12, 12, 3}};

kiln_tree *Leaf(kiln_device *dev, const Shape &s, float scale) {
  std::vector<float> v((size_t)s.Size());
  for (size_t i = 0; i < v.size(); i++) v[i] = scale * std::sin(0.37f * (float)i + scale);
  return InputOn(dev, std::move(v), s.dims);
}

kiln_tree *CnnArgs(kiln_device *dev) {
  kiln_tree *params[2] = {Leaf(dev, kW1, 0.3f), Leaf(dev, kW2, 0.2f)};
  kiln_tree *args[2] = {kiln_tree_tuple(2, params), Leaf(dev, kX, 1.0f)};
  return kiln_tree_tuple(2, args);
}

std::vector<float> Values(const kiln_tree *t) {
  kiln_array *a = kiln_tree_leaf_array(t);
  std::vector<float> v((size_t)kiln_array_size(a));
  EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(float)), KILN_OK) << Err();
  return v;
}

// value_and_grad of CnnLoss w.r.t. the params, jitted on a context.
struct CnnGrad {
  explicit CnnGrad(kiln_ctx *ctx) {
    EXPECT_EQ(kiln_func_new(CnnLoss, nullptr, "cnn_loss", &loss), KILN_OK);
    int argnum = 0;
    EXPECT_EQ(kiln_value_and_grad(loss, &argnum, 1, 0, &vg), KILN_OK) << Err();
    EXPECT_EQ(kiln_jit_new(ctx, vg, nullptr, &jit), KILN_OK) << Err();
  }
  ~CnnGrad() {
    kiln_jit_free(jit);
    kiln_func_free(vg);
    kiln_func_free(loss);
  }
  // loss, then the gradients of w1 and w2, flattened.
  std::vector<std::vector<float>> Call(kiln_device *dev) {
    kiln_tree *args = CnnArgs(dev), *out = nullptr;
    EXPECT_EQ(kiln_jit_call(jit, args, &out), KILN_OK) << Err();
    std::vector<std::vector<float>> v;
    if (out) {
      const kiln_tree *g = kiln_tree_child(out, 1);
      v = {Values(kiln_tree_child(out, 0)), Values(kiln_tree_child(g, 0)),
           Values(kiln_tree_child(g, 1))};
    }
    kiln_tree_free(out);
    kiln_tree_free(args);
    return v;
  }
  kiln_func *loss = nullptr, *vg = nullptr;
  kiln_jit *jit = nullptr;
};

size_t Count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// f's value on the CPU backend's first device.
template <typename F>
auto OnCpu(F f) -> decltype(f(nullptr, nullptr)) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *cpu = nullptr;
  kiln_device *dev = nullptr;
  EXPECT_EQ(kiln_ctx_new(&o, &cpu), KILN_OK) << Err();
  if (cpu) {
    EXPECT_EQ(kiln_device_get(cpu, 0, &dev), KILN_OK);
  }
  auto v = cpu && dev ? f(cpu, dev) : decltype(f(nullptr, nullptr))();
  kiln_ctx_free(cpu);
  return v;
}

class KCT_SUITE : public KctCudaFixture {
 protected:
  void SetUp() override { Open(); }
  std::string CompiledText(const CnnGrad &g) {
    kiln_tree *args = CnnArgs(dev_);
    std::string s = JitText(g.jit, args);
    kiln_tree_free(args);
    return s;
  }
};

// Forward convolutions, the input gradient and the weight gradients are
// convolution steps; pooling, max-pool's gradient and avg-pool's transpose
// window kernels; nothing runs on the host.
TEST_F(KCT_SUITE, CnnGradientHasNoHostSteps) {
  CnnGrad g(ctx_);
  std::string text = CompiledText(g);
  EXPECT_EQ(Count(text, "host step"), 0u) << text;
  EXPECT_EQ(Count(text, ": convolution by im2col and cuBLASLt, kiln_conv_"), 5u) << text;
  EXPECT_GE(Count(text, "/* ---- group"), 5u) << text;
  EXPECT_NE(text.find("kiln_window_select_and_scatter_add"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_window_reduce_window_max"), std::string::npos) << text;
}

// Three calls: the first step by step, the others replay one graph (the
// convolutions captured in it). On a GPU each call matches the CPU backend.
TEST_F(KCT_SUITE, CnnGradientMatchesTheCpuAndReplaysAGraph) {
  std::vector<std::vector<float>> want;
  if (!kFake) {
    want = OnCpu([](kiln_ctx *cpu, kiln_device *cd) { return CnnGrad(cpu).Call(cd); });
    ASSERT_EQ(want.size(), 3u);
  }
  CnnGrad g(ctx_);
  KctFakeCounts before = FakeCounts();
  for (int call = 0; call < 3; call++) {
    std::vector<std::vector<float>> got = g.Call(dev_);
    ASSERT_EQ(got.size(), 3u) << "call " << call;
    if (kFake) continue;
    const char *names[3] = {"loss", "grad w1", "grad w2"};
    for (size_t k = 0; k < 3; k++) {
      ASSERT_EQ(got[k].size(), want[k].size());
      for (size_t i = 0; i < got[k].size(); i++)
        ASSERT_NEAR(got[k][i], want[k][i], 1e-4f + 1e-4f * std::fabs(want[k][i]))
            << names[k] << " [" << i << "], call " << call;
    }
  }
  if (kFake) {
    KctFakeCounts after = FakeCounts();
    EXPECT_GT(after.graphs, before.graphs + 1);
    EXPECT_GT(after.kernels, before.kernels + 3 * 10);
    // Every kind of step did its whole work in each call (graph replays
    // included): at least its result's elements (the first convolution's
    // im2col: 4x12x12 rows of 3x3x3; max-pool: 4x6x6x8; avg-pool's
    // transposed pad: 4x4x4x6), not a launch over one item.
    EXPECT_GE(FakeKernelItems("_im2col"), 3u * 576 * 27);
    EXPECT_GE(FakeKernelItems("kiln_window_reduce_window_max"), 3u * 4 * 6 * 6 * 8);
    EXPECT_GE(FakeKernelItems("kiln_window_select_and_scatter_add"), 3u * 4 * 12 * 12 * 8);
    EXPECT_GE(FakeKernelItems("kiln_pad_"), 3u * 4 * 4 * 4 * 6);
    for (const char *part : {"_pack_w", "_scatter"}) EXPECT_GT(FakeKernelItems(part), 0u) << part;
  }
}

// A classifier's loss and accuracy over logits [16, 10] and i32 labels:
// softmax cross-entropy (take_along_axis: a gather, whose transpose is a
// scatter-add) and argmax.
kiln_tree *XentLoss(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *xent = kiln_nn_softmax_cross_entropy(t, Arg(a, 0), Arg(a, 1));
  return kiln_tree_val(kiln_mean(t, xent, KILN_ALL_AXES, nullptr, 0));
}
kiln_tree *Correct(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *hit = kiln_eq(t, kiln_argmax(t, Arg(a, 0), 1, KILN_I32), Arg(a, 1));
  return kiln_tree_val(kiln_convert(t, hit, KILN_F32));
}

kiln_tree *ClassifierArgs(kiln_device *dev) {
  kiln_tree *logits = Leaf(dev, Shape{{16, 10}}, 2.0f);
  std::vector<int32_t> lab(16);
  for (size_t i = 0; i < lab.size(); i++) lab[i] = (int32_t)((i * 7) % 10);
  int64_t n = 16;
  kiln_array *la = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, KILN_I32, 1, &n, lab.data(), lab.size() * 4, &la), KILN_OK);
  kiln_tree *leaves[2] = {logits, kiln_tree_array(la)};
  kiln_array_release(la);
  return kiln_tree_tuple(2, leaves);
}

// The loss's gradient w.r.t. the logits, its value, and the per-example
// hits, each called twice (the second replays a graph) on one context.
std::vector<std::vector<float>> Classify(kiln_ctx *ctx, kiln_device *dev, std::string *text) {
  kiln_func *loss = nullptr, *g = nullptr, *hits = nullptr;
  EXPECT_EQ(kiln_func_new(XentLoss, nullptr, "xent", &loss), KILN_OK);
  EXPECT_EQ(kiln_func_new(Correct, nullptr, "correct", &hits), KILN_OK);
  int argnum = 0;
  EXPECT_EQ(kiln_value_and_grad(loss, &argnum, 1, 0, &g), KILN_OK) << Err();
  std::vector<std::vector<float>> v;
  for (kiln_func *f : {g, hits}) {
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK) << Err();
    kiln_tree *args = ClassifierArgs(dev), *out = nullptr;
    for (int call = 0; call < 2; call++) {
      kiln_tree_free(out);
      out = nullptr;
      EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << Err();
    }
    if (out && f == g) {
      v.push_back(Values(kiln_tree_child(out, 0)));
      v.push_back(Values(kiln_tree_child(out, 1)));
    } else if (out) {
      v.push_back(Values(out));
    }
    if (text) *text += JitText(j, args);
    kiln_tree_free(out);
    kiln_tree_free(args);
    kiln_jit_free(j);
  }
  kiln_func_free(g);
  kiln_func_free(hits);
  kiln_func_free(loss);
  return v;
}

TEST_F(KCT_SUITE, ClassifierRunsGatherScatterAndArgmaxOnTheDevice) {
  std::string text;
  std::vector<std::vector<float>> got = Classify(ctx_, dev_, &text);
  EXPECT_EQ(Count(text, "host step"), 0u) << text;
  EXPECT_NE(text.find(": kiln_gather_"), std::string::npos) << text;
  EXPECT_NE(text.find(": scatter, kiln_scatter_"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_argmax_"), std::string::npos) << text;
  ASSERT_EQ(got.size(), 3u);
  if (kFake) {
    // Two calls each, over every element: 16 rows gathered and argmax'ed,
    // the [16, 10] cotangent copied.
    EXPECT_GE(FakeKernelItems("kiln_gather_"), 2u * 16);
    EXPECT_GE(FakeKernelItems("kiln_argmax_"), 2u * 16);
    EXPECT_GE(FakeKernelItems("kiln_scatter_"), 2u * 160);
    return;
  }
  std::vector<std::vector<float>> want =
      OnCpu([](kiln_ctx *cpu, kiln_device *cd) { return Classify(cpu, cd, nullptr); });
  ASSERT_EQ(want.size(), 3u);
  for (size_t k = 0; k < 3; k++) {
    ASSERT_EQ(got[k].size(), want[k].size());
    for (size_t i = 0; i < got[k].size(); i++)
      EXPECT_NEAR(got[k][i], want[k][i], 1e-5f + 1e-5f * std::fabs(want[k][i]))
          << k << " [" << i << "]";
  }
}

// With the context's determinism on, the scatter applies its updates in
// index order (one result element per thread).
TEST_F(KCT_SUITE, DeterministicContextsScatterInIndexOrder) {
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  KctScopedEnv on("KILN_DETERMINISTIC", "on");
  ASSERT_EQ(KctCudaContext(KILN_EXECUTOR_FUSED, KILN_MATMUL_DEFAULT, &ctx_), KILN_OK) << Err();
  ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
  std::string text;
  Classify(ctx_, dev_, &text);
  EXPECT_NE(text.find("kiln_scatter_ordered_"), std::string::npos) << text;
  EXPECT_NE(text.find("in index order"), std::string::npos) << text;
  EXPECT_EQ(Count(text, "host step"), 0u) << text;
}

#ifdef KILN_FAKE_CUDA_LIBRARY
// A fault in a convolution's copies names the convolution step.
TEST_F(FakeCudaOpaque, FaultInACopyNamesTheConvolution) {
  check_leaks_ = false;
  CnnGrad g(ctx_);
  KctScopedEnv fault("KILN_FAKE_CUDA_KERNEL_FAULT", "_im2col");
  kiln_tree *args = CnnArgs(dev_), *out = nullptr;
  ASSERT_EQ(kiln_jit_call(g.jit, args, &out), KILN_OK) << Err();
  EXPECT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 0))),
            KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_NE(msg.find("(convolution by im2col and cuBLASLt: kiln_conv_"), std::string::npos) << msg;
  kiln_tree_free(out);
  kiln_tree_free(args);
}
#endif

}  // namespace
