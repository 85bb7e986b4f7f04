// kiln's numpy-level API (numpy.h), the argument helpers (tree.h) and
// kiln_jit_call_arrays (jit.h): values against JAX (tests/golden/
// numpy_api.py), called through kiln_jit as users call them, and the errors
// a user's mistakes give.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "support/jit_golden.h"
#include "kiln/kiln.h"
#include "numpy_cases.h"

namespace {

struct Ctx {
  explicit Ctx(kiln_executor executor = KILN_EXECUTOR_DEFAULT) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.executor = executor;
    EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
};

// Every executor gives JAX's values, and every fused kernel of these
// programs also compiles as CUDA for sm_80 and sm_90 (NVRTC, no GPU).
class NumpyGolden : public ::testing::TestWithParam<kiln_executor> {};

TEST_P(NumpyGolden, MatchesJax) {
  Ctx c(GetParam());
  std::vector<GoldenCase> cases = LoadGolden("numpy_api.txt");
  std::set<std::string> seen;
  int cuda_kernels = 0;
  for (const GoldenCase &gc : cases) {
    RunGoldenCase(c.ctx, c.dev, gc, true, &cuda_kernels, 1, kNumpyCases);
    seen.insert(gc.name);
  }
  for (const jit_case *jc = kNumpyCases; jc->name; jc++)
    EXPECT_TRUE(seen.count(jc->name)) << jc->name << " has no golden data";
  EXPECT_GE(cuda_kernels, 2 * (int)cases.size());  // at least one kernel per program and sm
}

INSTANTIATE_TEST_SUITE_P(Executors, NumpyGolden,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_UNFUSED,
                                           KILN_EXECUTOR_REFERENCE),
                         [](const ::testing::TestParamInfo<kiln_executor> &i) {
                           return std::string(kiln_executor_name(i.param));
                         });

// ---- errors: one traced function per mistake, the op and types named ----

struct Mistake {
  const char *name;
  kiln_fn fn;
  kiln_status status;
  std::vector<std::string> words;  // each must appear in the message
};

kiln_tree *AxisOutOfRange(kiln_trace *t, const kiln_tree *a, void *) {
  int axis = 2;
  return kiln_tree_val(kiln_sum(t, kiln_arg(a, 0), 1, &axis, 1));
}
kiln_tree *EinsumSizes(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_einsum(t, "ij,jk->ik", kiln_arg(a, 0), kiln_arg(a, 0)));
}
kiln_tree *EinsumSpec(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_einsum(t, "ii,jk->ik", kiln_arg(a, 0), kiln_arg(a, 0)));
}
kiln_tree *EinsumEllipsis(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_einsum(t, "...j,jk->...k", kiln_arg(a, 0), kiln_arg(a, 0)));
}
kiln_tree *MatmulSizes(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_matmul(t, kiln_arg(a, 0), kiln_arg(a, 0)));
}
kiln_tree *TopKTooMany(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_top_k(t, kiln_arg(a, 0), 4, nullptr));
}
kiln_tree *TakeFloatIndices(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_take_mode(t, kiln_arg(a, 0), kiln_arg(a, 0), 0, KILN_INDEX_FILL));
}
kiln_tree *TakeAlongWrap(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *i = kiln_convert(t, kiln_arg(a, 0), KILN_I32);
  return kiln_tree_val(kiln_take_along_axis_mode(t, kiln_arg(a, 0), i, 0, KILN_INDEX_WRAP));
}
kiln_tree *ArgOutOfRange(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_exp(t, kiln_arg(a, 3)));
}
kiln_tree *ArgBadPath(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_exp(t, kiln_arg_path(a, "[0]['w']")));
}

TEST(Numpy, MistakesAreClearErrors) {
  const Mistake mistakes[] = {
      {"axis", AxisOutOfRange, KILN_ERR_OUT_OF_RANGE, {"kiln_sum", "2"}},
      {"einsum_sizes", EinsumSizes, KILN_ERR_SHAPE, {"kiln_einsum", "'j'", "f32[2,3]"}},
      {"einsum_spec", EinsumSpec, KILN_ERR_ARGUMENT, {"kiln_einsum", "ii,jk->ik"}},
      {"einsum_ellipsis", EinsumEllipsis, KILN_ERR_ARGUMENT, {"kiln_einsum", "..."}},
      {"matmul", MatmulSizes, KILN_ERR_SHAPE, {"kiln_matmul", "f32[2,3]", "contracted"}},
      {"top_k", TopKTooMany, KILN_ERR_ARGUMENT, {"kiln_top_k", "k=4", "f32[2,3]"}},
      {"take", TakeFloatIndices, KILN_ERR_DTYPE, {"kiln_take_mode", "integers", "f32[2,3]"}},
      {"take_along", TakeAlongWrap, KILN_ERR_ARGUMENT, {"kiln_take_along_axis_mode", "wrap"}},
      {"arg", ArgOutOfRange, KILN_ERR_ARGUMENT, {"kiln_exp", "kiln_arg", "argument 3", "1 arguments"}},
      {"arg_path", ArgBadPath, KILN_ERR_ARGUMENT, {"kiln_exp", "kiln_arg_path", "[0]['w']", "dict"}},
  };
  Ctx c;
  float host[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  kiln_array *x = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 2, shape, host, sizeof host, &x), KILN_OK);
  for (const Mistake &m : mistakes) {
    SCOPED_TRACE(m.name);
    kiln_func *f = nullptr;
    ASSERT_EQ(kiln_func_new(m.fn, nullptr, m.name, &f), KILN_OK);
    kiln_jit *j = nullptr;
    ASSERT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
    kiln_array *out = nullptr;
    EXPECT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &out), m.status);
    std::string msg = kiln_last_error();
    for (const std::string &w : m.words) EXPECT_NE(msg.find(w), std::string::npos) << w << " in: " << msg;
    EXPECT_EQ(out, nullptr);
    kiln_jit_free(j);
    kiln_func_free(f);
  }
  kiln_array_release(x);
}

// ---- argument helpers and result builders ----

kiln_tree *Params(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *w = kiln_arg_path(a, "[0]['params']['w']");
  kiln_val *b = kiln_arg_path(a, "[0]['params']['b']");
  kiln_val *x = kiln_arg(a, 1);
  kiln_val *y = kiln_add(t, kiln_matmul(t, x, w), b);
  const char *keys[] = {"y", "norm"};
  kiln_val *vals[] = {y, kiln_sum(t, kiln_mul(t, y, y), KILN_ALL_AXES, nullptr, 0)};
  return kiln_dict_of(2, keys, vals);
}

TEST(Numpy, ArgumentPathsAndDictResults) {
  Ctx c;
  auto arr = [&](std::vector<int64_t> shape, std::vector<float> v) {
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(c.dev, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * sizeof(float), &a),
              KILN_OK);
    kiln_tree *leaf = kiln_tree_array(a);
    kiln_array_release(a);
    return leaf;
  };
  const char *pk[] = {"b", "w"};
  kiln_tree *pv[] = {arr({2}, {0.5f, -1}), arr({2, 2}, {1, 2, 3, 4})};
  kiln_tree *params = kiln_tree_dict(2, pk, pv);
  const char *ok[] = {"params"};
  kiln_tree *outer = kiln_tree_dict(1, ok, &params);
  kiln_tree *top[] = {outer, arr({1, 2}, {1, 1})};
  kiln_tree *args = kiln_tree_tuple(2, top);
  ASSERT_NE(args, nullptr);
  ASSERT_NE(kiln_tree_at_str(args, "[0]['params']['w']"), nullptr);
  EXPECT_EQ(kiln_tree_at_str(args, "[0]['params']['v']"), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("'v'"), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_tree_at_str(args, "[0]['params'"), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("cannot parse"), std::string::npos);
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(Params, nullptr, "params", &f), KILN_OK);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  // y = [1,1] @ [[1,2],[3,4]] + [0.5,-1] = [4.5, 5]; norm = 20.25 + 25.
  float y[2] = {0, 0}, norm = 0;
  ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(kiln_tree_get(out, "y")), y, sizeof y), KILN_OK);
  ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(kiln_tree_get(out, "norm")), &norm, sizeof norm),
            KILN_OK);
  EXPECT_FLOAT_EQ(y[0], 4.5f);
  EXPECT_FLOAT_EQ(y[1], 5.0f);
  EXPECT_FLOAT_EQ(norm, 45.25f);
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
}

kiln_tree *SoftmaxAndArgmax(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_arg(a, 0);
  kiln_val *outs[] = {kiln_softmax(t, x, -1, nullptr), kiln_argmax(t, x, 1, KILN_I32)};
  return kiln_tuple_of(2, outs);
}

TEST(Numpy, JitCallArraysTakesAndGivesFlatArrays) {
  Ctx c;
  float host[4] = {0, 1, 3, 2};
  int64_t shape[2] = {2, 2};
  kiln_array *x = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 2, shape, host, sizeof host, &x), KILN_OK);
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(SoftmaxAndArgmax, nullptr, "sm", &f), KILN_OK);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
  kiln_array *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(j, 1, &x, 2, out), KILN_OK) << kiln_last_error();
  float p[4];
  int32_t am[2];
  ASSERT_EQ(kiln_array_to_host(out[0], p, sizeof p), KILN_OK);
  ASSERT_EQ(kiln_array_to_host(out[1], am, sizeof am), KILN_OK);
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-6);
  EXPECT_NEAR(p[1], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(am[0], 1);
  EXPECT_EQ(am[1], 0);
  kiln_array_release(out[0]);
  kiln_array_release(out[1]);
  // The caller's count must match the function's.
  kiln_array *one = nullptr;
  EXPECT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &one), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("returned 2 arrays"), std::string::npos);
  EXPECT_EQ(one, nullptr);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_array_release(x);
}

}  // namespace
