// Fused execution on CUDA devices: the golden jit programs run on a GPU and
// match JAX; calls are asynchronous; multi-kernel programs replay a CUDA
// graph from their second call; host steps, donation and failures.
//
// Built twice, like test_cuda_device: against the real driver (label cuda,
// skipped without a GPU), and against the stand-in tests/fake_cuda (label
// cpu). The stand-in computes nothing in kernels, so there the tests check
// what it can see -- launches, graph replays, every kernel argument inside
// live device memory when the kernel runs, stream ordering, errors, and that
// every driver object is given back -- and compare values only where no
// kernel wrote them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cuda_fixture.h"
#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "support/jit_golden.h"
#include "kiln/kiln.h"

namespace {

#ifdef KILN_FAKE_CUDA_LIBRARY
#define KCT_SUITE FakeCudaExec
KCT_USE_FAKE_DRIVER();
#else
#define KCT_SUITE CudaExec
#endif

std::string Err() { return kiln_last_error(); }

class KCT_SUITE : public KctCudaFixture {
 protected:
  kiln_tree *Input(std::vector<float> v, std::vector<int64_t> shape) {
    return InputOn(dev_, std::move(v), std::move(shape));
  }
  // A one-element args tuple.
  static kiln_tree *Args(kiln_tree *leaf) { return kiln_tree_tuple(1, &leaf); }
};

// ---- programs ----

// exp(x) * 2 + x, then its row sums: a LOOP and a REDUCE kernel fused, or
// five kernels unfused.
kiln_tree *TwoGroups(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *y = kiln_add(t, kiln_mul(t, kiln_exp(t, x), kiln_scalar_f(t, 2.0)), x);
  int axis = 1;
  kiln_val *s = kiln_reduce_sum(t, kiln_tanh(t, y), 1, &axis);
  kiln_tree *outs[2] = {kiln_tree_val(y), kiln_tree_val(s)};
  return kiln_tree_tuple(2, outs);
}

// A sort: an OPAQUE group, run as a host step.
kiln_tree *SortOnly(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  return kiln_tree_val(kiln_sort(t, x, 0, nullptr));
}

struct Jit {
  Jit(kiln_ctx *ctx, kiln_fn fn, const char *name) {
    EXPECT_EQ(kiln_func_new(fn, nullptr, name, &f), KILN_OK);
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK) << Err();
  }
  ~Jit() {
    kiln_jit_free(j);
    kiln_func_free(f);
  }
  kiln_func *f = nullptr;
  kiln_jit *j = nullptr;
};

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = scale * (float)((int)(i % 97) - 48);
  return v;
}

std::vector<float> Values(const kiln_tree *t) {
  kiln_array *a = kiln_tree_leaf_array(t);
  std::vector<float> v((size_t)kiln_array_size(a));
  EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(float)), KILN_OK) << Err();
  return v;
}

// ---- the golden programs ----

#define KCT_GOLDEN_SUITE_(s) s##Golden
#define KCT_GOLDEN_SUITE(s) KCT_GOLDEN_SUITE_(s)
#define KCT_GOLDEN KCT_GOLDEN_SUITE(KCT_SUITE)
class KCT_GOLDEN : public KCT_SUITE, public ::testing::WithParamInterface<kiln_executor> {};

TEST_P(KCT_GOLDEN, MatchJax) {
  Open(GetParam());
  if (!ctx_) return;
  auto cases = LoadGolden();
  ASSERT_GE(cases.size(), 20u);
  KctFakeCounts before = FakeCounts();
  // Three calls each: the first launches kernel by kernel, the others replay
  // a graph where the program is kernels only.
  for (const auto &gc : cases) RunGoldenCase(ctx_, dev_, gc, !kFake, nullptr, 3);
  if (kFake) {
    KctFakeCounts after = FakeCounts();
    EXPECT_GT(after.kernels, before.kernels + 3 * 12);
    EXPECT_GT(after.graphs, before.graphs);
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, KCT_GOLDEN,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_UNFUSED),
                         [](const ::testing::TestParamInfo<kiln_executor> &i) {
                           return std::string(kiln_executor_name(i.param));
                         });

// ---- asynchrony and graphs ----

TEST_F(KCT_SUITE, CallsReturnBeforeKernelsRunAndGraphsReplay) {
  Open(KILN_EXECUTOR_UNFUSED);
  if (!ctx_) return;
  Jit jit(ctx_, TwoGroups, "two_groups");
  std::vector<float> x = Ramp(64 * 33, 0.01f);
  kiln_tree *args = Args(Input(x, {64, 33}));
  std::vector<float> first;
  for (int call = 0; call < 3; call++) {
    KctFakeCounts before = FakeCounts();
    kiln_tree *out = nullptr;
    ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
    KctFakeCounts queued = FakeCounts();
    ASSERT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 1))),
              KILN_OK)
        << Err();
    KctFakeCounts done = FakeCounts();
    if (kFake) {
      // The stand-in runs stream work only when a wait forces it.
      EXPECT_EQ(queued.kernels, before.kernels) << "call " << call;
      EXPECT_GE(done.kernels, before.kernels + 5) << "call " << call;
      EXPECT_EQ(done.graphs, before.graphs + (call > 0 ? 1 : 0)) << "call " << call;
    } else {
      std::vector<float> y = Values(kiln_tree_child(out, 0));
      for (size_t i = 0; i < x.size(); i++)
        EXPECT_NEAR(y[i], std::exp(x[i]) * 2 + x[i], 1e-5 * (1 + std::fabs(y[i]))) << i;
      std::vector<float> s = Values(kiln_tree_child(out, 1));
      if (call == 0) first = s;
      EXPECT_EQ(s, first) << "graph replay gives the first call's sums";
    }
    kiln_tree_free(out);
  }
  kiln_tree_free(args);
}

// ---- host steps ----

TEST_F(KCT_SUITE, HostStepsComputeExactly) {
  Open();
  if (!ctx_) return;
  Jit jit(ctx_, SortOnly, "sort_only");
  std::vector<float> x = {3, -1, 7, 0.5f, -9, 2, 2, 11};
  kiln_tree *args = Args(Input(x, {8}));
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
  std::vector<float> want = x;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Values(out), want);
  char *text = nullptr;
  kiln_lowered *l = nullptr;
  ASSERT_EQ(kiln_jit_lower(jit.j, args, &l), KILN_OK) << Err();
  kiln_compiled *c = nullptr;
  ASSERT_EQ(kiln_lowered_compile(l, &c), KILN_OK) << Err();
  ASSERT_EQ(kiln_compiled_as_text(c, &text), KILN_OK) << Err();
  EXPECT_NE(std::string(text).find("host step"), std::string::npos) << text;
  free(text);
  kiln_compiled_free(c);
  kiln_lowered_free(l);
  kiln_tree_free(out);
  kiln_tree_free(args);
}

// ---- split reductions ----

kiln_tree *SumAll(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  int axis = 0;
  return kiln_tree_val(kiln_reduce_sum(t, x, 1, &axis));
}

// A full reduction splits across blocks: its grid is a whole number of the
// kernel's blocks per tile, its scratch lives (and dies) with the
// executable, and every call gives the same bits (the counters reset).
TEST_F(KCT_SUITE, FullReductionsSplitAcrossBlocks) {
  Open();
  if (!ctx_) return;
  Jit jit(ctx_, SumAll, "sum_all");
  const int n = 1 << 20;
  std::vector<float> x = Ramp(n, 0.25f);  // every partial sum is exact
  kiln_tree *args = Args(Input(x, {n}));
  kiln_lowered *l = nullptr;
  kiln_compiled *c = nullptr;
  char *text = nullptr;
  ASSERT_EQ(kiln_jit_lower(jit.j, args, &l), KILN_OK) << Err();
  ASSERT_EQ(kiln_lowered_compile(l, &c), KILN_OK) << Err();
  ASSERT_EQ(kiln_compiled_as_text(c, &text), KILN_OK) << Err();
  std::string s = text;
  free(text);
  kiln_compiled_free(c);
  kiln_lowered_free(l);
  size_t split_at = s.find("blockIdx.x % "), grid_at = s.find(", grid ");
  ASSERT_NE(split_at, std::string::npos) << s;
  ASSERT_NE(grid_at, std::string::npos) << s;
  long split = strtol(s.c_str() + split_at + 13, nullptr, 10);
  long grid = strtol(s.c_str() + grid_at + 7, nullptr, 10);
  EXPECT_GT(split, 1);
  EXPECT_EQ(grid % split, 0) << grid << " blocks, " << split << " per tile";
  EXPECT_NE(s.find("atomicAdd(&tcount["), std::string::npos);
  double want = 0;
  for (float v : x) want += v;
  for (int call = 0; call < 3; call++) {
    kiln_tree *out = nullptr;
    ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
    if (!kFake) {
      EXPECT_EQ(Values(out)[0], (float)want) << "call " << call;
    }
    kiln_tree_free(out);
  }
  kiln_tree_free(args);
}

// ---- matmuls ----

kiln_tree *Matmul(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *a = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *b = kiln_tree_leaf_get(kiln_tree_child(args, 1))->u.val;
  return kiln_tree_val(kiln_matmul(t, a, b));
}

// The largest relative error of an f32 [m, k] x [k, n] matmul on the GPU
// (cuBLASLt; the stand-in computes it too) against float64 on the host.
double MatmulError(kiln_ctx *ctx, kiln_device *dev, int m, int k, int n) {
  std::vector<float> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); i++) a[i] = 1.0f + (float)((i * 7919) % 1000) / 1024.0f / 3.0f;
  for (size_t i = 0; i < b.size(); i++) b[i] = 1.0f - (float)((i * 104729) % 1000) / 1024.0f / 7.0f;
  kiln_tree *leaves[2] = {InputOn(dev, a, {m, k}), InputOn(dev, b, {k, n})};
  kiln_tree *args = kiln_tree_tuple(2, leaves);
  Jit jit(ctx, Matmul, "matmul");
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
  double worst = 0;
  if (out) {
    std::vector<float> c = Values(out);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double want = 0;
        for (int q = 0; q < k; q++) want += (double)a[i * k + q] * b[q * n + j];
        worst = std::max(worst, std::fabs(c[i * n + j] - want) / std::fabs(want));
      }
  }
  kiln_tree_free(out);
  kiln_tree_free(args);
  return worst;
}

TEST_F(KCT_SUITE, F32MatmulsAreExactUnlessTensorFloat32IsAsked) {
  Open(KILN_EXECUTOR_FUSED, KILN_MATMUL_HIGHEST);
  if (!ctx_) return;
  EXPECT_LT(MatmulError(ctx_, dev_, 33, 64, 17), 1e-5);
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  Open(KILN_EXECUTOR_FUSED, KILN_MATMUL_TENSORFLOAT32);
  double tf32 = MatmulError(ctx_, dev_, 33, 64, 17);
  EXPECT_GT(tf32, 1e-5);  // products of 10-bit mantissas
  EXPECT_LT(tf32, 1e-2);
}

// (x @ w) @ w: two cuBLASLt steps and nothing else.
kiln_tree *TwoMatmuls(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *w = kiln_tree_leaf_get(kiln_tree_child(args, 1))->u.val;
  return kiln_tree_val(kiln_matmul(t, kiln_matmul(t, x, w), w));
}

// Calls TwoMatmuls `calls` times with new inputs and checks every result
// (the stand-in cuBLASLt computes too); returns the graphs launched.
unsigned long long CallTwoMatmuls(kiln_ctx *ctx, kiln_device *dev, int calls) {
  const int n = 24;
  Jit jit(ctx, TwoMatmuls, "two_matmuls");
  std::vector<float> w(n * n);
  for (size_t i = 0; i < w.size(); i++) w[i] = (float)((i * 37) % 11) / 8.0f - 0.5f;
  KctFakeCounts before = FakeCounts();
  for (int call = 0; call < calls; call++) {
    std::vector<float> x = Ramp(n * n, 0.01f * (float)(call + 1));
    kiln_tree *leaves[2] = {InputOn(dev, x, {n, n}), InputOn(dev, w, {n, n})};
    kiln_tree *args = kiln_tree_tuple(2, leaves);
    kiln_tree *out = nullptr;
    EXPECT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
    std::vector<float> y = out ? Values(out) : std::vector<float>(n * n);
    std::vector<double> xw(n * n, 0.0);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        for (int q = 0; q < n; q++) xw[i * n + j] += (double)x[i * n + q] * w[q * n + j];
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        double want = 0;
        for (int q = 0; q < n; q++) want += xw[i * n + q] * w[q * n + j];
        EXPECT_NEAR(y[i * n + j], want, 1e-4 * (1 + std::fabs(want))) << "call " << call;
      }
    kiln_tree_free(out);
    kiln_tree_free(args);
  }
  return FakeCounts().graphs - before.graphs;
}

// From the second call the matmuls are captured into the program's graph;
// a call with new input addresses captures them anew.
TEST_F(KCT_SUITE, MatmulProgramsReplayAGraphAndFollowNewInputs) {
  Open(KILN_EXECUTOR_FUSED, KILN_MATMUL_HIGHEST);
  if (!ctx_) return;
  unsigned long long graphs = CallTwoMatmuls(ctx_, dev_, 4);
  if (kFake) {
    EXPECT_EQ(graphs, 3u);
  }
}

#ifdef KILN_FAKE_CUDA_LIBRARY
// A graph the driver refuses to update, with the device still usable: the
// program runs step by step from then on, and every result stays right.
TEST_F(FakeCudaExec, RefusedGraphUpdateFallsBackToSteps) {
  Open(KILN_EXECUTOR_FUSED, KILN_MATMUL_HIGHEST);
  if (!ctx_) return;
  KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuGraphExecChildGraphNodeSetParams");
  KctScopedEnv code("KILN_FAKE_CUDA_FAIL_ERROR", "910");  // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
  EXPECT_EQ(CallTwoMatmuls(ctx_, dev_, 4), 1u);  // the second call's; the third falls back
}
#endif

// ---- donation ----

TEST_F(KCT_SUITE, DonatedInputGivesItsMemoryToTheOutput) {
  Open();
  if (!ctx_) return;
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(TwoGroups, nullptr, "two_groups", &f), KILN_OK);
  kiln_jit_options jo = {};
  int donate = 0;
  jo.donate_argnums = &donate;
  jo.num_donate = 1;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f, &jo, &j), KILN_OK) << Err();
  std::vector<float> x = Ramp(16 * 8, 0.02f);
  kiln_tree *in = Input(x, {16, 8});
  kiln_array *donor = kiln_tree_leaf_array(in);
  kiln_array_retain(donor);
  kiln_tree *args = kiln_tree_tuple(1, &in);
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << Err();
  EXPECT_TRUE(kiln_array_is_deleted(donor));
  if (!kFake) {
    std::vector<float> y = Values(kiln_tree_child(out, 0));
    for (size_t i = 0; i < x.size(); i++)
      EXPECT_NEAR(y[i], std::exp(x[i]) * 2 + x[i], 1e-5 * (1 + std::fabs(y[i])));
  } else {
    EXPECT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 0))),
              KILN_OK)
        << Err();
  }
  kiln_array_release(donor);
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
}

// ---- failures (the stand-in injects them) ----

#ifdef KILN_FAKE_CUDA_LIBRARY
void CallExpecting(KCT_SUITE *self, kiln_ctx *ctx, kiln_tree *args, kiln_status want,
                   std::vector<std::string> parts) {
  Jit jit(ctx, TwoGroups, "two_groups");
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(jit.j, args, &out), want) << Err();
  std::string msg = Err();
  for (const auto &p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_EQ(out, nullptr);
  std::cerr << "message: " << msg << "\n";
  (void)self;
}

TEST_F(FakeCudaExec, LaunchFailureNamesTheKernel) {
  Open();
  if (!ctx_) return;
  kiln_tree *args = Args(Input(Ramp(32, 1), {4, 8}));
  KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuLaunchKernel");
  KctScopedEnv err("KILN_FAKE_CUDA_FAIL_ERROR", "1");  // CUDA_ERROR_INVALID_VALUE
  CallExpecting(this, ctx_, args, KILN_ERR_INTERNAL,
                {"cuLaunchKernel(kiln_", "jit(two_groups) step 0 (kernel kiln_", "cuda:0"});
  kiln_tree_free(args);
}

TEST_F(FakeCudaExec, RejectedModuleIsACompileError) {
  Open();
  if (!ctx_) return;
  kiln_tree *args = Args(Input(Ramp(32, 1), {4, 8}));
  KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuModuleLoadData");
  KctScopedEnv err("KILN_FAKE_CUDA_FAIL_ERROR", "200");  // CUDA_ERROR_INVALID_IMAGE
  CallExpecting(this, ctx_, args, KILN_ERR_COMPILE, {"loading kernel kiln_", "two_groups"});
  kiln_tree_free(args);
}

TEST_F(FakeCudaExec, OutOfDeviceMemoryNamesBytesAndDevice) {
  KctScopedEnv mem("KILN_FAKE_CUDA_MEMORY_MB", "1");
  Open();
  if (!ctx_) return;
  // 600 KiB of input fits in 1 MiB; an output of the same size does not.
  kiln_tree *args = Args(Input(Ramp(600 * 256, 1), {600, 256}));
  CallExpecting(this, ctx_, args, KILN_ERR_OUT_OF_MEMORY, {"bytes", "cuda:0"});
  kiln_tree_free(args);
}

TEST_F(FakeCudaExec, KernelFaultSurfacesAtTheNextWaitNamingTheProgram) {
  Open();
  if (!ctx_) return;
  check_leaks_ = false;  // a faulted context cannot drain its streams
  kiln_tree *args = Args(Input(Ramp(32, 1), {4, 8}));
  KctScopedEnv fault("KILN_FAKE_CUDA_KERNEL_FAULT", "kiln_");
  Jit jit(ctx_, TwoGroups, "two_groups");
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();  // only queued
  kiln_array *y = kiln_tree_leaf_array(kiln_tree_child(out, 0));
  EXPECT_EQ(kiln_array_block_until_ready(y), KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_NE(msg.find("jit(two_groups)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << msg;
  std::vector<float> host(32);
  EXPECT_EQ(kiln_array_to_host(y, host.data(), host.size() * sizeof(float)), KILN_ERR_DEVICE);
  kiln_tree_free(out);
  kiln_tree_free(args);
}

// The fault trail: the message names the step the stream was in, not just
// the program.
TEST_F(FakeCudaExec, KernelFaultNamesTheStepItHappenedIn) {
  Open(KILN_EXECUTOR_UNFUSED);  // five kernels
  if (!ctx_) return;
  check_leaks_ = false;
  kiln_tree *args = Args(Input(Ramp(32, 1), {4, 8}));
  KctScopedEnv fault("KILN_FAKE_CUDA_KERNEL_FAULT", "_tanh_");
  Jit jit(ctx_, TwoGroups, "two_groups");
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
  EXPECT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 1))),
            KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_EQ(msg.rfind("waiting for the work of jit(two_groups): the device "
                      "failed in jit(two_groups) step 3 (kernel kiln_loop_tanh_",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << msg;
  // The next call finds the failed context while queueing and names the
  // step that failed, not the one it was queueing.
  kiln_tree *again = nullptr;
  EXPECT_EQ(kiln_jit_call(jit.j, args, &again), KILN_ERR_DEVICE);
  msg = Err();
  EXPECT_NE(msg.find("failed in jit(two_groups) step 3 (kernel kiln_loop_tanh_"), std::string::npos)
      << msg;
  std::cerr << "message: " << msg << "\n";
  kiln_tree_free(out);
  kiln_tree_free(args);
}

TEST_F(FakeCudaExec, GraphReplayFaultNamesTheGraph) {
  Open(KILN_EXECUTOR_UNFUSED);  // five kernels
  if (!ctx_) return;
  check_leaks_ = false;
  kiln_tree *args = Args(Input(Ramp(32, 1), {4, 8}));
  Jit jit(ctx_, TwoGroups, "two_groups");
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();
  ASSERT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 1))), KILN_OK)
      << Err();
  kiln_tree_free(out);
  KctScopedEnv fault("KILN_FAKE_CUDA_KERNEL_FAULT", "_tanh_");
  ASSERT_EQ(kiln_jit_call(jit.j, args, &out), KILN_OK) << Err();  // replayed as a graph
  EXPECT_EQ(kiln_array_block_until_ready(kiln_tree_leaf_array(kiln_tree_child(out, 0))),
            KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_NE(msg.find("failed in jit(two_groups) graph of 5 steps"), std::string::npos) << msg;
  kiln_tree_free(out);
  kiln_tree_free(args);
}

TEST_F(FakeCudaExec, FaultTrailNamesTheStepRunning) {
  Open();
  if (!ctx_) return;
  check_leaks_ = false;
  EXPECT_EQ(kct_trail_fault(dev_, false, 3), KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_EQ(msg.rfind("the device failed in first: cuda:0 (Fake CUDA Device 0): cuStreamSynchronize", 0), 0u)
      << msg;
}

TEST_F(FakeCudaExec, FaultTrailTellsWorkAfterAFinishedStep) {
  Open();
  if (!ctx_) return;
  check_leaks_ = false;
  EXPECT_EQ(kct_trail_fault(dev_, true, 3), KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_EQ(msg.rfind("the device failed after first had finished, in work queued later: "
                      "cuda:0 (Fake CUDA Device 0): ",
                      0),
            0u)
      << msg;
}

TEST_F(FakeCudaExec, FaultTrailSaysWhenTheStepIsTooFarBack) {
  Open();
  if (!ctx_) return;
  check_leaks_ = false;
  EXPECT_EQ(kct_trail_fault(dev_, false, 1100), KILN_ERR_DEVICE);
  std::string msg = Err();
  EXPECT_NE(msg.find("failed in a step queued over 1024 steps before the latest"),
            std::string::npos)
      << msg;
}
#endif

}  // namespace
