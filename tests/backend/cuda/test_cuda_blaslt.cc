// dot_general through cuBLASLt (src/backend/cuda/blaslt.c): each case is a
// program of one dot (maybe with a bias and relu epilogue), planned by the
// fusion planner into a DOT group, mapped onto a strided-batched matmul,
// run on a device and compared with the reference evaluator.
//
// Built twice: test_cuda_blaslt_fake (label cpu) runs against the stand-in
// driver and the stand-in libcublasLt of tests/fake_cuda, which computes
// each matmul from cuBLASLt's column-major definition and checks every
// descriptor and every byte it touches, and also injects failures;
// test_cuda_blaslt (label cuda) runs the same cases on a real GPU and skips
// itself without one.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "fuse/fuse.h"
#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"

namespace {

std::string last_error() { return kiln_last_error(); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

#ifdef KILN_FAKE_CUBLASLT_LIBRARY
#define KCT_SUITE FakeCudaBlaslt
#define KCT_CASES FakeCudaBlasltCases
#define KCT_FAULTS FakeCudaBlasltFaults
const char *const kLibrary = KILN_FAKE_CUBLASLT_LIBRARY;
// The stand-in cuBLASLt is opened by path and handed to the context (the
// real one may be in the process too, loaded by something else).
KCT_USE_FAKE_DRIVER();
#else
#define KCT_SUITE CudaBlaslt
#define KCT_CASES CudaBlasltCases
const char *const kLibrary = nullptr;  // the default list of sonames
#endif

using kiln_test::Plan;
using kiln_test::Program;

// One dot_general program: operand types, dimension numbers, the
// preferred element type, the epilogue, and the layout the plan must find.
struct DotCase {
  const char *name;
  const char *lhs, *rhs;
  const char *dims;  // "(([1], [0]), ([], []))"
  const char *preferred = "None";
  kfuse_epilogue epilogue = KFUSE_EPILOGUE_NONE;
  bool a_trans = false, b_trans = false;
  // A real cuBLASLt may have no algorithm for it (then kiln falls back):
  // f64 with an epilogue is not documented either way.
  bool gpu_may_refuse = false;
};

std::ostream &operator<<(std::ostream &os, const DotCase &c) { return os << c.name; }

kir_vid add_eqn(kir_program *p, const char *prim, std::vector<kir_vid> in, const std::string &params) {
  kir_prim pr = KIR_NUM_PRIMS;
  EXPECT_TRUE(kir_prim_lookup(prim, strlen(prim), &pr)) << prim;
  kir_params par;
  memset(&par, 0, sizeof par);
  EXPECT_EQ(kir_params_parse(p, pr, params.c_str(), &par), KILN_OK) << prim << ": " << last_error();
  int idx = -1;
  EXPECT_EQ(kir_add_eqn(p, pr, &par, (int)in.size(), in.data(), &idx), KILN_OK)
      << prim << ": " << last_error();
  return idx < 0 ? KIR_NO_VAR : p->eqns[idx].out[0];
}

kir_vid add_invar(kir_program *p, const std::string &type) {
  kir_aval a;
  EXPECT_EQ(kir_aval_parse(type.c_str(), &a), KILN_OK) << type;
  kir_vid v = KIR_NO_VAR;
  EXPECT_EQ(kir_add_invar(p, &a, &v), KILN_OK) << last_error();
  return v;
}

std::string tuple(const int64_t *v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (n == 1 ? ",)" : ")");
}

// dot, then add(dot, broadcast_in_dim(bias)) along the last axis, then
// max(., 0), as jax.nn.relu(x @ w + b) traces.
Program build(const DotCase &c) {
  kir_program *raw = nullptr;
  EXPECT_EQ(kir_program_new(&raw), KILN_OK);
  Program p(raw);
  kir_vid a = add_invar(raw, c.lhs), b = add_invar(raw, c.rhs);
  kir_vid out = add_eqn(raw, "dot_general", {a, b},
                        std::string("dimension_numbers=") + c.dims +
                            " preferred_element_type=" + c.preferred);
  if (c.epilogue != KFUSE_EPILOGUE_NONE && out != KIR_NO_VAR) {
    kir_aval r = raw->vars[out].aval;
    std::string bias_type = std::string(kiln_dtype_short_name(r.dtype)) + "[" +
                            std::to_string(r.shape[r.rank - 1]) + "]";
    kir_vid bias = add_invar(raw, bias_type);
    std::string bdims = "(" + std::to_string(r.rank - 1) + ",)";
    kir_vid bc = add_eqn(raw, "broadcast_in_dim", {bias},
                         "shape=" + tuple(r.shape, r.rank) + " broadcast_dimensions=" + bdims);
    out = add_eqn(raw, "add", {out, bc}, "");
    if (c.epilogue == KFUSE_EPILOGUE_BIAS_RELU) {
      kir_vid zero = KIR_NO_VAR;
      EXPECT_EQ(kir_add_literal(raw, r.dtype, false, kir_scalar_f(0.0), &zero), KILN_OK);
      out = add_eqn(raw, "max", {out, zero}, "");
    }
  }
  EXPECT_EQ(kir_set_outputs(raw, 1, &out), KILN_OK) << last_error();
  return p;
}

// The plan's one DOT group (every case is one group).
const kfuse_group *dot_group(const kfuse_plan *plan) {
  for (int i = 0; i < plan->n_groups; i++)
    if (plan->groups[i].kind == KFUSE_DOT) return &plan->groups[i];
  return nullptr;
}

size_t bytes_of(const kir_aval &a) { return (size_t)kir_aval_size(&a) * kiln_dtype_size(a.dtype); }

// Host data of an aval, uniform in [-1, 1] and rounded to its dtype.
std::vector<uint8_t> random_data(const kir_aval &a, std::mt19937 &rng) {
  std::vector<uint8_t> v(bytes_of(a) + 1);  // never empty: zero-size data has an address
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  size_t es = kiln_dtype_size(a.dtype);
  for (int64_t i = 0; i < kir_aval_size(&a); i++) kir_scalar_store(a.dtype, kir_scalar_f(u(rng)), &v[i * es]);
  return v;
}

// |got - want| <= tol * (1 + |want|): JAX's tolerances for the result dtype
// (f32 with exact f32 arithmetic; TF32 keeps 10 mantissa bits). Returns the
// largest difference.
double compare(const kir_aval &out, const std::vector<uint8_t> &got,
               const std::vector<uint8_t> &want, bool tf32) {
  double tol = out.dtype == KILN_F64 ? 1e-12 : out.dtype == KILN_F32 ? (tf32 ? 1e-2 : 1e-5)
               : out.dtype == KILN_F16 ? 2e-3 : 1e-2;
  size_t es = kiln_dtype_size(out.dtype);
  double worst = 0;
  int bad = 0;
  for (int64_t i = 0; i < kir_aval_size(&out); i++) {
    double g = kir_scalar_load(out.dtype, &got[i * es]).f;
    double w = kir_scalar_load(out.dtype, &want[i * es]).f;
    worst = std::max(worst, std::fabs(g - w));
    if (!(std::fabs(g - w) <= tol * (1 + std::fabs(w))) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0) << bad << " of " << kir_aval_size(&out) << " elements differ";
  return worst;
}

class KCT_SUITE : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CUDA;
    kiln_status st = kiln_ctx_new(&opts, &ctx_);
    if (st == KILN_ERR_DEVICE) GTEST_SKIP() << "no usable CUDA device: " << last_error();
    ASSERT_EQ(st, KILN_OK) << last_error();
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK) << last_error();
    ASSERT_EQ(kct_blaslt_open(kLibrary, &lt_), KILN_OK) << last_error();
  }
  void TearDown() override {
    kct_blaslt_close(lt_);
    kiln_ctx_free(ctx_);
#ifdef KILN_FAKE_CUBLASLT_LIBRARY
    if (ctx_) {
      EXPECT_EQ(KctFakeLiveObjects(KILN_FAKE_CUDA_LIBRARY, "kiln_fake_cuda_live_objects"), 0)
          << "driver objects left behind";
      EXPECT_EQ(KctFakeLiveObjects(kLibrary, "kiln_fake_cublaslt_live_objects"), 0)
          << "cuBLASLt objects left behind";
      auto take_error = KctFakeSymbol<int (*)(void)>(kLibrary, "kiln_fake_cublaslt_take_error");
      EXPECT_EQ(take_error ? take_error() : -1, 0) << "a matmul touched memory it must not";
    }
#endif
  }

  // Builds and plans the case, runs it on `dev` and compares with the
  // reference evaluator. Returns the largest difference.
  double run(const DotCase &c, kiln_device *dev = nullptr, bool tf32 = false) {
    Program p = build(c);
    kfuse_plan *raw = nullptr;
    EXPECT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK) << last_error();
    Plan plan(raw);
    const kfuse_group *g = plan ? dot_group(plan.get()) : nullptr;
    if (!g) {
      ADD_FAILURE() << "no DOT group";
      return -1;
    }
    EXPECT_EQ(plan->n_groups, 1);
    EXPECT_EQ(g->epilogue, c.epilogue);
    kct_gemm_info info;
    EXPECT_EQ(kct_gemm_plan(p.get(), g, &info), KILN_OK) << last_error();
    EXPECT_EQ(info.a_trans, c.a_trans);
    EXPECT_EQ(info.b_trans, c.b_trans);

    std::mt19937 rng(1234);
    std::vector<kir_buffer> in(p->n_invars);
    std::vector<std::vector<uint8_t>> data(p->n_invars);
    for (int i = 0; i < p->n_invars; i++) {
      const kir_aval &a = p->vars[p->invars[i]].aval;
      data[i] = random_data(a, rng);
      in[i] = {a, data[i].data(), bytes_of(a)};
    }
    const kir_aval &oa = p->vars[p->outvars[0]].aval;
    std::vector<uint8_t> want(bytes_of(oa) + 1), got(bytes_of(oa) + 1, 0xee);
    kir_buffer out = {oa, want.data(), bytes_of(oa)};
    kir_eval_env env;
    kir_eval_env_init(&env, kir_reference_evals());
    EXPECT_EQ(kir_eval_program(&env, p.get(), in.data(), &out), KILN_OK) << last_error();

    kct_gemm_case k = {};
    k.lhs = data[0].data();
    k.lhs_bytes = in[0].nbytes;
    k.rhs = data[1].data();
    k.rhs_bytes = in[1].nbytes;
    if (c.epilogue != KFUSE_EPILOGUE_NONE) {
      k.bias = data[2].data();
      k.bias_bytes = in[2].nbytes;
    }
    k.out = got.data();
    k.out_bytes = bytes_of(oa);
    k.tf32 = tf32;
    kiln_status st = kct_gemm_eval(dev ? dev : dev_, lt_, p.get(), g, &k);
#ifndef KILN_FAKE_CUBLASLT_LIBRARY
    if (st == KILN_ERR_UNIMPLEMENTED && c.gpu_may_refuse && contains(last_error(), "no algorithm")) {
      refusal_ = last_error();
      return -1;
    }
#endif
    EXPECT_EQ(st, KILN_OK) << last_error();
    return st ? -1 : compare(oa, got, want, tf32);
  }

  // The status and message of planning (and, if planning succeeds, running)
  // a case that must not run.
  kiln_status refuse(const DotCase &c, std::string *message) {
    Program p = build(c);
    kfuse_plan *raw = nullptr;
    EXPECT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK) << last_error();
    Plan plan(raw);
    const kfuse_group *g = plan ? dot_group(plan.get()) : nullptr;
    if (!g) return KILN_ERR_INTERNAL;
    kct_gemm_info info;
    kiln_status st = kct_gemm_plan(p.get(), g, &info);
    *message = last_error();
    return st;
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
  kct_blaslt *lt_ = nullptr;
  std::string refusal_;  // why the library refused a gpu_may_refuse case
};

const char *const kMatmul = "(([1], [0]), ([], []))";

// Layouts: every position of the contracting dims, several of them, batches.
const DotCase kLayouts[] = {
    {"plain", "f32[7,33]", "f32[33,5]", kMatmul},
    {"lhs_transposed", "f32[33,7]", "f32[33,5]", "(([0], [0]), ([], []))", "None",
     KFUSE_EPILOGUE_NONE, true, false},
    {"rhs_transposed", "f32[7,33]", "f32[5,33]", "(([1], [1]), ([], []))", "None",
     KFUSE_EPILOGUE_NONE, false, true},
    {"both_transposed", "f32[33,7]", "f32[5,33]", "(([0], [1]), ([], []))", "None",
     KFUSE_EPILOGUE_NONE, true, true},
    {"two_contracting", "f32[7,3,11]", "f32[3,11,5]", "(([1, 2], [0, 1]), ([], []))"},
    {"two_contracting_listed_backwards", "f32[7,3,11]", "f32[3,11,5]",
     "(([2, 1], [1, 0]), ([], []))"},
    {"two_contracting_both_transposed", "f32[3,11,7]", "f32[5,3,11]",
     "(([0, 1], [1, 2]), ([], []))", "None", KFUSE_EPILOGUE_NONE, true, true},
    {"two_lhs_free", "f32[2,7,33]", "f32[33,5]", "(([2], [0]), ([], []))"},
    {"two_rhs_free", "f32[7,33]", "f32[33,3,5]", kMatmul},
    {"batch", "f32[4,7,33]", "f32[4,33,5]", "(([2], [1]), ([0], [0]))"},
    {"batch_lhs_transposed", "f32[4,33,7]", "f32[4,33,5]", "(([1], [1]), ([0], [0]))", "None",
     KFUSE_EPILOGUE_NONE, true, false},
    {"batch_rhs_transposed", "f32[4,7,33]", "f32[4,5,33]", "(([2], [2]), ([0], [0]))", "None",
     KFUSE_EPILOGUE_NONE, false, true},
    {"two_batch_dims", "f32[2,3,7,33]", "f32[2,3,33,5]", "(([3], [2]), ([0, 1], [0, 1]))"},
    {"batch_dim_inside_lhs", "f32[7,4,33]", "f32[4,33,5]", "(([2], [1]), ([1], [0]))"},
    {"batch_dim_between_rhs", "f32[4,7,33]", "f32[5,4,33]", "(([2], [2]), ([0], [1]))", "None",
     KFUSE_EPILOGUE_NONE, false, true},
};

// Sizes 1, 7 and 33 in every role, and operands without free dims.
const DotCase kSizes[] = {
    {"m1", "f32[1,33]", "f32[33,7]", kMatmul},
    {"n1", "f32[7,33]", "f32[33,1]", kMatmul},
    {"k1", "f32[7,1]", "f32[1,5]", kMatmul},
    {"all1", "f32[1,1]", "f32[1,1]", kMatmul},
    {"large_odd", "f32[33,65]", "f32[65,33]", kMatmul},
    {"matrix_vector", "f32[7,33]", "f32[33]", kMatmul},
    {"vector_matrix", "f32[33]", "f32[33,5]", "(([0], [0]), ([], []))"},
    {"vector_vector", "f32[33]", "f32[33]", "(([0], [0]), ([], []))"},
    {"batched_matrix_vector", "f32[4,7,33]", "f32[4,33]", "(([2], [1]), ([0], [0]))"},
    {"batch1", "f32[1,7,33]", "f32[1,33,5]", "(([2], [1]), ([0], [0]))"},
};

// Every dtype cuBLASLt takes, with f32 accumulation for the 16-bit ones.
const DotCase kDtypes[] = {
    {"f16", "f16[7,33]", "f16[33,5]", kMatmul},
    {"bf16", "bf16[7,33]", "bf16[33,5]", kMatmul},
    {"f64", "f64[7,33]", "f64[33,5]", kMatmul},
    {"bf16_to_f32", "bf16[7,33]", "bf16[33,5]", kMatmul, "float32"},
    {"f16_to_f32", "f16[7,33]", "f16[33,5]", kMatmul, "float32"},
    {"bf16_batched_transposed", "bf16[4,33,7]", "bf16[4,5,33]", "(([1], [2]), ([0], [0]))", "None",
     KFUSE_EPILOGUE_NONE, true, true},
    {"f64_rhs_transposed", "f64[7,33]", "f64[5,33]", "(([1], [1]), ([], []))", "None",
     KFUSE_EPILOGUE_NONE, false, true},
};

// Epilogues: the bias runs along the result's last axis (n).
const DotCase kEpilogues[] = {
    {"bias_f32", "f32[7,33]", "f32[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS},
    {"bias_relu_f32", "f32[7,33]", "f32[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS_RELU},
    {"bias_bf16", "bf16[7,33]", "bf16[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS},
    {"bias_relu_bf16", "bf16[7,33]", "bf16[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS_RELU},
    {"bias_relu_f16", "f16[7,33]", "f16[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS_RELU},
    {"bias_relu_bf16_to_f32", "bf16[7,33]", "bf16[33,5]", kMatmul, "float32",
     KFUSE_EPILOGUE_BIAS_RELU},
    {"bias_relu_f64", "f64[7,33]", "f64[33,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS_RELU, false,
     false, true},
    {"bias_relu_batched_transposed", "f32[4,33,7]", "f32[4,5,33]", "(([1], [2]), ([0], [0]))",
     "None", KFUSE_EPILOGUE_BIAS_RELU, true, true},
    {"bias_relu_rhs_free_with_unit_dim", "f32[7,33]", "f32[33,1,5]", kMatmul, "None",
     KFUSE_EPILOGUE_BIAS_RELU},
    {"bias_n1", "f32[7,33]", "f32[33,1]", kMatmul, "None", KFUSE_EPILOGUE_BIAS},
};

class KCT_CASES : public KCT_SUITE, public ::testing::WithParamInterface<DotCase> {};

TEST_P(KCT_CASES, MatchesTheReference) {
  run(GetParam());
  if (!refusal_.empty()) GTEST_SKIP() << "the caller falls back: " << refusal_;
}

std::string case_name(const ::testing::TestParamInfo<DotCase> &info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Layouts, KCT_CASES, ::testing::ValuesIn(kLayouts), case_name);
INSTANTIATE_TEST_SUITE_P(Sizes, KCT_CASES, ::testing::ValuesIn(kSizes), case_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, KCT_CASES, ::testing::ValuesIn(kDtypes), case_name);
INSTANTIATE_TEST_SUITE_P(Epilogues, KCT_CASES, ::testing::ValuesIn(kEpilogues), case_name);

TEST_F(KCT_SUITE, PlanNamesTheGemm) {
  Program p = build({"batch", "f32[4,7,33]", "f32[4,5,33]", "(([2], [2]), ([0], [0]))"});
  kfuse_plan *raw = nullptr;
  ASSERT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK) << last_error();
  Plan plan(raw);
  kct_gemm_info info;
  ASSERT_EQ(kct_gemm_plan(p.get(), dot_group(plan.get()), &info), KILN_OK) << last_error();
  EXPECT_EQ(info.batch, 4);
  EXPECT_EQ(info.m, 7);
  EXPECT_EQ(info.n, 5);
  EXPECT_EQ(info.k, 33);
  EXPECT_FALSE(info.a_trans);
  EXPECT_TRUE(info.b_trans);
  EXPECT_EQ(info.lda, 33);
  EXPECT_EQ(info.ldb, 33);
  EXPECT_EQ(info.a_batch_stride, 7 * 33);
  EXPECT_EQ(info.b_batch_stride, 5 * 33);
  EXPECT_EQ(info.compute, 0);  // exact f32: the IR has no precision to ask for TF32
}

TEST_F(KCT_SUITE, BatchDimInsideAnOperandIsItsStride) {
  Program p = build({"inside", "f32[7,4,33]", "f32[4,33,5]", "(([2], [1]), ([1], [0]))"});
  kfuse_plan *raw = nullptr;
  ASSERT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK) << last_error();
  Plan plan(raw);
  kct_gemm_info info;
  ASSERT_EQ(kct_gemm_plan(p.get(), dot_group(plan.get()), &info), KILN_OK) << last_error();
  EXPECT_EQ(info.lda, 4 * 33);
  EXPECT_EQ(info.a_batch_stride, 33);
}

TEST_F(KCT_SUITE, Tf32ComputeRoundsTheInputs) {
  DotCase c = {"tf32", "f32[7,33]", "f32[33,5]", kMatmul};
  double exact = run(c);
  double tf32 = run(c, nullptr, /*tf32=*/true);
  EXPECT_LT(exact, 1e-5);
  EXPECT_GT(tf32, 1e-6) << "TF32 products keep 10 mantissa bits, so the result moves";
}

TEST_F(KCT_SUITE, RunsOnEveryDevice) {
  for (int i = 0; i < kiln_device_count(ctx_); i++) {
    kiln_device *dev = nullptr;
    ASSERT_EQ(kiln_device_get(ctx_, i, &dev), KILN_OK);
    SCOPED_TRACE(i);
    run({"bias_relu", "bf16[4,7,33]", "bf16[4,33,5]", "(([2], [1]), ([0], [0]))", "None",
         KFUSE_EPILOGUE_BIAS_RELU},
        dev);
  }
}

TEST_F(KCT_SUITE, EmptyResultsRunAsNothing) {
  run({"m0", "f32[0,33]", "f32[33,5]", kMatmul});
  run({"batch0", "f32[0,7,33]", "f32[0,33,5]", "(([2], [1]), ([0], [0]))"});
  run({"n0_bias", "f32[7,33]", "f32[33,0]", kMatmul, "None", KFUSE_EPILOGUE_BIAS});
}

// Layouts and dtypes cuBLASLt cannot take as they are: the caller runs the
// group another way, so the message must say which dot and why.
TEST_F(KCT_SUITE, UnexpressibleDotsAreUnimplemented) {
  const struct {
    DotCase c;
    const char *shapes, *why;
  } cases[] = {
      {{"int", "i32[7,33]", "i32[33,5]", kMatmul}, "i32[7,33] . i32[33,5] -> i32[7,5]",
       "f16 or bf16"},
      {{"mixed", "f32[7,33]", "bf16[33,5]", kMatmul}, "f32[7,33] . bf16[33,5]", "of one dtype"},
      {{"f32_to_bf16", "f32[7,33]", "f32[33,5]", kMatmul, "bfloat16"}, "-> bf16[7,5]",
       "of one dtype"},
      {{"f16_to_bf16", "f16[7,33]", "f16[33,5]", kMatmul, "bfloat16"}, "-> bf16[7,5]",
       "of one dtype"},
      {{"k0", "f32[7,0]", "f32[0,5]", kMatmul}, "f32[7,0] . f32[0,5]", "no elements"},
      {{"k0_bias", "f32[7,0]", "f32[0,5]", kMatmul, "None", KFUSE_EPILOGUE_BIAS},
       "+ bias f32[5]", "zeros plus bias"},
      {{"batch_dims_apart", "f32[2,7,3,33]", "f32[2,3,33,5]", "(([3], [2]), ([0, 2], [0, 1]))"},
       "f32[2,7,3,33] . f32[2,3,33,5]", "strided batch"},
      {{"contracting_orders_differ", "f32[7,3,11]", "f32[11,3,5]", "(([1, 2], [1, 0]), ([], []))"},
       "f32[7,3,11] . f32[11,3,5]", "strided batch"},
      {{"batch_innermost", "f32[4,7,33]", "f32[33,5,4]", "(([2], [0]), ([0], [2]))"},
       "f32[33,5,4]", "strided batch"},
      {{"bias_along_m", "f32[7,33]", "f32[33]", kMatmul, "None", KFUSE_EPILOGUE_BIAS},
       "+ bias f32[7]", "per column"},
      {{"bias_over_two_free_dims", "f32[7,33]", "f32[33,3,5]", kMatmul, "None",
        KFUSE_EPILOGUE_BIAS},
       "+ bias f32[5]", "per column"},
  };
  for (const auto &t : cases) {
    SCOPED_TRACE(t.c.name);
    std::string message;
    EXPECT_EQ(refuse(t.c, &message), KILN_ERR_UNIMPLEMENTED);
    EXPECT_TRUE(contains(message, "dot_general")) << message;
    EXPECT_TRUE(contains(message, t.shapes)) << message;
    EXPECT_TRUE(contains(message, t.why)) << message;
  }
}

TEST_F(KCT_SUITE, AMissingLibraryIsADeviceError) {
  kct_blaslt *lt = nullptr;
  EXPECT_EQ(kct_blaslt_open("/nonexistent/libcublasLt.so.13", &lt), KILN_ERR_DEVICE);
  EXPECT_EQ(lt, nullptr);
  EXPECT_TRUE(contains(last_error(), "/nonexistent/libcublasLt.so.13")) << last_error();
}

TEST_F(KCT_SUITE, TheDeviceTeardownFreesTheLazyGemmStream) {
  bool same = false;
  ASSERT_EQ(kct_device_gemm_attach(dev_, kLibrary, &same), KILN_OK)
      << last_error();
  EXPECT_TRUE(same) << "the device keeps one gemm stream";
  // TearDown's kiln_ctx_free must release it; the leak checks say so.
}

#ifdef KILN_FAKE_CUBLASLT_LIBRARY
// Failures injected through the stand-in library.

TEST_F(KCT_SUITE, ALibraryWithoutTheEntryPointsIsRefused) {
  kct_blaslt *lt = nullptr;
  EXPECT_EQ(kct_blaslt_open(KILN_FAKE_CUDA_LIBRARY, &lt), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "no entry point cublasLt")) << last_error();
}

TEST_F(KCT_SUITE, AnOldLibraryIsRefused) {
  KctScopedEnv v("KILN_FAKE_CUBLASLT_VERSION", "110800");
  kct_blaslt *lt = nullptr;
  EXPECT_EQ(kct_blaslt_open(kLibrary, &lt), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "cuBLASLt 11.8; kiln needs 12.0")) << last_error();
}

const DotCase kPlain = {"plain", "f32[7,33]", "f32[33,5]", kMatmul};

TEST_F(KCT_SUITE, AFailingHeuristicNamesTheCallAndTheDot) {
  KctScopedEnv v("KILN_FAKE_CUBLASLT_FAIL", "cublasLtMatmulAlgoGetHeuristic");
  std::vector<float> a(7 * 33), b(33 * 5), c(7 * 5);
  Program p = build(kPlain);
  kfuse_plan *raw = nullptr;
  ASSERT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK);
  Plan plan(raw);
  kct_gemm_case k = {};
  k.lhs = a.data();
  k.lhs_bytes = a.size() * 4;
  k.rhs = b.data();
  k.rhs_bytes = b.size() * 4;
  k.out = c.data();
  k.out_bytes = c.size() * 4;
  EXPECT_EQ(kct_gemm_eval(dev_, lt_, p.get(), dot_group(plan.get()), &k), KILN_ERR_INTERNAL);
  std::string m = last_error();
  EXPECT_TRUE(contains(m, "cublasLtMatmulAlgoGetHeuristic failed: CUBLAS_STATUS_INTERNAL_ERROR"))
      << m;
  EXPECT_TRUE(contains(m, "dot_general f32[7,33] . f32[33,5] -> f32[7,5]")) << m;
  EXPECT_TRUE(contains(m, "cuda:0")) << m;

  KctScopedEnv s("KILN_FAKE_CUBLASLT_FAIL_STATUS", "15");  // CUBLAS_STATUS_NOT_SUPPORTED
  EXPECT_EQ(kct_gemm_eval(dev_, lt_, p.get(), dot_group(plan.get()), &k), KILN_ERR_UNIMPLEMENTED);
  m = last_error();
  EXPECT_TRUE(contains(m, "no algorithm")) << m;
  EXPECT_TRUE(contains(m, "cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_NOT_SUPPORTED")) << m;
  EXPECT_TRUE(contains(m, "f32[7,33] . f32[33,5]")) << m;
}

TEST_F(KCT_SUITE, NoAlgorithmIsUnimplemented) {
  KctScopedEnv v("KILN_FAKE_CUBLASLT_NO_ALGO", "1");
  Program p = build(kPlain);
  kfuse_plan *raw = nullptr;
  ASSERT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK);
  Plan plan(raw);
  std::vector<float> a(7 * 33), b(33 * 5), c(7 * 5);
  kct_gemm_case k = {};
  k.lhs = a.data();
  k.lhs_bytes = a.size() * 4;
  k.rhs = b.data();
  k.rhs_bytes = b.size() * 4;
  k.out = c.data();
  k.out_bytes = c.size() * 4;
  EXPECT_EQ(kct_gemm_eval(dev_, lt_, p.get(), dot_group(plan.get()), &k), KILN_ERR_UNIMPLEMENTED);
  EXPECT_TRUE(contains(last_error(), "cublasLtMatmulAlgoGetHeuristic: no result")) << last_error();
}

class KCT_FAULTS : public KCT_SUITE {
 protected:
  // Runs the plain case with `edit` applied to its kct_gemm_case.
  kiln_status eval_plain(void (*edit)(kct_gemm_case *)) {
    Program p = build(kPlain);
    kfuse_plan *raw = nullptr;
    EXPECT_EQ(kfuse_plan_build(p.get(), nullptr, nullptr, &raw), KILN_OK);
    Plan plan(raw);
    a_.assign(7 * 33, 0.5f);
    b_.assign(33 * 5, 0.25f);
    c_.assign(7 * 5, 0.0f);
    kct_gemm_case k = {};
    k.lhs = a_.data();
    k.lhs_bytes = a_.size() * 4;
    k.rhs = b_.data();
    k.rhs_bytes = b_.size() * 4;
    k.out = c_.data();
    k.out_bytes = c_.size() * 4;
    if (edit) edit(&k);
    return kct_gemm_eval(dev_, lt_, p.get(), dot_group(plan.get()), &k);
  }
  std::vector<float> a_, b_, c_;
};

TEST_F(KCT_FAULTS, AFailingMatmulNamesTheCall) {
  KctScopedEnv v("KILN_FAKE_CUBLASLT_FAIL", "cublasLtMatmul");
  KctScopedEnv s("KILN_FAKE_CUBLASLT_FAIL_STATUS", "13");  // CUBLAS_STATUS_EXECUTION_FAILED
  EXPECT_EQ(eval_plain(nullptr), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "cublasLtMatmul(")) << last_error();
  EXPECT_TRUE(contains(last_error(), "CUBLAS_STATUS_EXECUTION_FAILED")) << last_error();
  EXPECT_TRUE(contains(last_error(), "f32[7,33] . f32[33,5]")) << last_error();
}

TEST_F(KCT_FAULTS, AFailingCreateNamesTheCall) {
  KctScopedEnv v("KILN_FAKE_CUBLASLT_FAIL", "cublasLtCreate");
  EXPECT_EQ(eval_plain(nullptr), KILN_ERR_INTERNAL);
  EXPECT_TRUE(contains(last_error(), "cublasLtCreate(&gs->handle) failed")) << last_error();
}

TEST_F(KCT_FAULTS, TheRightAnswerWithoutFaults) {
  EXPECT_EQ(eval_plain(nullptr), KILN_OK) << last_error();
  for (float x : c_) EXPECT_FLOAT_EQ(x, 33 * 0.5f * 0.25f);
}

TEST_F(KCT_FAULTS, AMisalignedPointerIsRefusedBeforeTheLibrarySeesIt) {
  EXPECT_EQ(eval_plain([](kct_gemm_case *k) { k->c_offset = 16; }), KILN_ERR_INTERNAL);
  EXPECT_TRUE(contains(last_error(), "C pointer")) << last_error();
  EXPECT_TRUE(contains(last_error(), "256-byte aligned")) << last_error();
}

// The stand-in checks the memory each queued matmul touches when it runs;
// a violation fails the next call, as a real illegal address would.
TEST_F(KCT_FAULTS, WritingPastTheOutputFailsTheNextCall) {
  auto take_error = KctFakeSymbol<int (*)(void)>(kLibrary, "kiln_fake_cublaslt_take_error");
  ASSERT_NE(take_error, nullptr);
  EXPECT_EQ(eval_plain([](kct_gemm_case *k) { k->c_bytes_short = 4 + 256; }), KILN_OK)
      << last_error();
  EXPECT_EQ(eval_plain(nullptr), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "cublasLtCreate(&gs->handle) failed: "
                                     "CUBLAS_STATUS_EXECUTION_FAILED"))
      << last_error();
  EXPECT_EQ(take_error(), 13);  // CUBLAS_STATUS_EXECUTION_FAILED, now cleared
  EXPECT_EQ(eval_plain(nullptr), KILN_OK) << last_error();
}

TEST_F(KCT_FAULTS, MatmulsRunInStreamOrder) {
  auto runs = KctFakeSymbol<unsigned long long (*)(void)>(kLibrary, "kiln_fake_cublaslt_matmuls_run");
  ASSERT_NE(runs, nullptr);
  unsigned long long before = runs();
  EXPECT_EQ(eval_plain(nullptr), KILN_OK) << last_error();
  EXPECT_EQ(runs(), before + 1);
}
#endif

}  // namespace
