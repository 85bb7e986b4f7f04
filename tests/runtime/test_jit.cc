// Tracing and jit end to end: results against jax.jit (golden data), the
// signature cache under threads, donation, stages, eval_shape, make_jaxpr,
// partial_eval_by_shape, sticky trace errors and bad input.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/arrays.h"
#include "support/jit_cases.h"
#include "support/jit_golden.h"
#include "support/test_files.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "support/text.h"

namespace {

using kiln_test::Contains;

class Ctx {
 public:
  explicit Ctx(int devices = 1, kiln_promotion_option promotion = KILN_PROMOTION_DEFAULT,
               kiln_log_level log = KILN_LOG_DEFAULT,
               kiln_executor executor = KILN_EXECUTOR_DEFAULT) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.num_cpu_devices = devices;
    o.promotion = promotion;
    o.log_level = log;
    o.executor = executor;
    EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_device *Dev(int i = 0) {
    kiln_device *d = nullptr;
    EXPECT_EQ(kiln_device_get(ctx, i, &d), KILN_OK);
    return d;
  }
  kiln_ctx *ctx = nullptr;
};

struct Func {
  Func(kiln_fn fn, void *user = nullptr, const char *name = "f") {
    EXPECT_EQ(kiln_func_new(fn, user, name, &f), KILN_OK);
  }
  ~Func() { kiln_func_free(f); }
  kiln_func *f = nullptr;
};

// An array leaf tree from host values.
template <typename T>
kiln_tree *Leaf(kiln_device *dev, kiln_dtype dt, std::vector<int64_t> shape, std::vector<T> v) {
  return kiln_test::ArrayLeaf(dev, dt, shape, v.data(), v.size() * sizeof(T));
}

kiln_tree *Tuple(std::vector<kiln_tree *> c) { return kiln_tree_tuple(c.size(), c.data()); }

template <typename T>
std::vector<T> Values(const kiln_tree *t) {
  kiln_array *a = kiln_tree_leaf_array(t);
  std::vector<T> v(kiln_array_size(a));
  EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(T)), KILN_OK) << kiln_last_error();
  return v;
}

// Every executor (fused C kernels, one kernel per primitive, the reference
// executor) gives JAX's results.
class JitGolden : public ::testing::TestWithParam<kiln_executor> {};

TEST_P(JitGolden, MatchesJaxJit) {
  Ctx c(1, KILN_PROMOTION_DEFAULT, KILN_LOG_DEFAULT, GetParam());
  auto cases = LoadGolden();
  ASSERT_GE(cases.size(), 20u);
  int cuda_kernels = 0;
  for (const auto &gc : cases) RunGoldenCase(c.ctx, c.Dev(), gc, true, &cuda_kernels);
  EXPECT_GE(cuda_kernels, 2 * 12);  // 13 kernels per architecture over these programs
}

INSTANTIATE_TEST_SUITE_P(Executors, JitGolden,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_UNFUSED,
                                           KILN_EXECUTOR_REFERENCE),
                         [](const ::testing::TestParamInfo<kiln_executor> &i) {
                           return std::string(kiln_executor_name(i.param));
                         });

// x @ w + b, and max(., 0) of it: a DOT group with a bias (relu) epilogue,
// which the CPU executor applies in one pass over the GEMM's output. The
// values are quarters, so every dot is exact in any order: the fused
// executor's bits equal the reference executor's, NaN rows included.
kiln_tree *DenseRelu(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *w = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  kiln_val *b = kiln_tree_leaf_get(kiln_tree_child(a, 2))->u.val;
  kiln_val *y = kiln_matmul(t, x, w);
  int64_t shape[2] = {3, 5};
  kiln_val *s = kiln_add(t, y, kiln_broadcast_to(t, b, 2, shape));
  kiln_val *s2 = kiln_add(t, kiln_matmul(t, x, w), kiln_broadcast_to(t, b, 2, shape));
  return Tuple({kiln_tree_val(kiln_max(t, s, kiln_scalar_f(t, 0.0))), kiln_tree_val(s2)});
}

TEST(Jit, GemmBiasAndReluEpilogueMatchesTheReference) {
  std::vector<float> x(12), w(20), b(5);
  for (size_t i = 0; i < x.size(); i++) x[i] = 0.25f * (float)((int)(i * 7 % 11) - 5);
  for (size_t i = 0; i < w.size(); i++) w[i] = 0.5f * (float)((int)(i * 5 % 9) - 4);
  for (size_t i = 0; i < b.size(); i++) b[i] = 0.25f * (float)((int)i - 2);
  x[0] = NAN;  // row 0 of the products is NaN, and stays NaN through relu
  std::vector<std::vector<float>> got[2];
  const kiln_executor ex[2] = {KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE};
  for (int e = 0; e < 2; e++) {
    Ctx c(1, KILN_PROMOTION_DEFAULT, KILN_LOG_DEFAULT, ex[e]);
    Func f(DenseRelu);
    kiln_jit *j = nullptr;
    ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK) << kiln_last_error();
    kiln_tree *args = Tuple({Leaf(c.Dev(), KILN_F32, {3, 4}, x), Leaf(c.Dev(), KILN_F32, {4, 5}, w),
                             Leaf(c.Dev(), KILN_F32, {5}, b)});
    kiln_tree *out = nullptr;
    ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
    for (int k = 0; k < 2; k++) got[e].push_back(Values<float>(kiln_tree_child(out, k)));
    kiln_tree_free(out);
    kiln_tree_free(args);
    kiln_jit_free(j);
  }
  int negative = 0;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < got[0][k].size(); i++) {
      float a = got[0][k][i], r = got[1][k][i];
      negative += k == 1 && r < 0;
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(a)) << "result " << k << " at " << i;
      } else {
        EXPECT_EQ(a, r) << "result " << k << " at " << i;
        EXPECT_EQ(std::signbit(a), std::signbit(r)) << "result " << k << " at " << i;
      }
    }
  EXPECT_GT(negative, 0) << "no negative sum: relu untested";
}

// ---- the cache ----

kiln_tree *Double(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_mul(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_f(t, 2.0)));
}

TEST(Jit, EightThreadsTwoShapesCompileTwice) {
  Ctx c;
  Func f(Double, nullptr, "double");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++)
    threads.emplace_back([&, t] {
      for (int it = 0; it < 20; it++) {
        int64_t n = (t + it) % 2 ? 3 : 5;
        std::vector<float> v(n, 1.5f);
        kiln_tree *x = Leaf(c.Dev(), KILN_F32, {n}, v);
        kiln_tree *out = nullptr;
        if (kiln_jit_call(j, x, &out) != KILN_OK || Values<float>(out) != std::vector<float>(n, 3.f))
          failures++;
        kiln_tree_free(out);
        kiln_tree_free(x);
      }
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << kiln_last_error();
  EXPECT_EQ(kiln_jit_compile_count(j), 2);
  kiln_jit_free(j);
}

kiln_tree *SumAll(kiln_trace *t, const kiln_tree *a, void *) {
  int axis = 0;
  return kiln_tree_val(kiln_reduce_sum(t, kiln_tree_leaf_get(a)->u.val, 1, &axis));
}

// A long full reduction is shared among the device's threads (shares of the
// C kernel, the last to finish combining them in a fixed order): every call,
// from several threads at once, gives the exact sum.
TEST(Jit, LongFullReductionsSplitAcrossThreads) {
  Ctx c;
  Func f(SumAll, nullptr, "sum_all");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  const int64_t n = 1 << 21;
  std::vector<float> v((size_t)n);
  double want = 0;
  for (int64_t i = 0; i < n; i++) {  // quarters: every partial sum is exact
    v[(size_t)i] = 0.25f * (float)((int)(i % 97) - 40);
    want += v[(size_t)i];
  }
  kiln_tree *x = Leaf(c.Dev(), KILN_F32, {n}, v);
  kiln_lowered *l = nullptr;
  kiln_compiled *comp = nullptr;
  char *text = nullptr;
  ASSERT_EQ(kiln_jit_lower(j, x, &l), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_lowered_compile(l, &comp), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_compiled_as_text(comp, &text), KILN_OK) << kiln_last_error();
  EXPECT_NE(std::string(text).find("__atomic_add_fetch(&tcount"), std::string::npos) << text;
  free(text);
  kiln_compiled_free(comp);
  kiln_lowered_free(l);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&] {
      for (int it = 0; it < 3; it++) {
        kiln_tree *out = nullptr;
        if (kiln_jit_call(j, x, &out) != KILN_OK || Values<float>(out)[0] != (float)want)
          failures++;
        kiln_tree_free(out);
      }
    });
  for (auto &t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << kiln_last_error();
  kiln_tree_free(x);
  kiln_jit_free(j);
}

TEST(Jit, StaticKeyAndDtypeAreInTheKey) {
  Ctx c;
  Func f(Double);
  int key = 1;
  kiln_jit_options o{};
  o.static_key = &key;
  o.static_key_size = sizeof key;
  kiln_jit *j1 = nullptr, *j2 = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j1), KILN_OK);
  key = 2;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j2), KILN_OK);  // the key is copied at creation
  kiln_tree *x = Leaf<float>(c.Dev(), KILN_F32, {2}, {1, 2});
  kiln_tree *y = Leaf<double>(c.Dev(), KILN_F64, {2}, {1, 2});
  kiln_tree *out = nullptr;
  for (kiln_tree *arg : {x, x, y}) {
    ASSERT_EQ(kiln_jit_call(j1, arg, &out), KILN_OK) << kiln_last_error();
    kiln_tree_free(out);
  }
  EXPECT_EQ(kiln_jit_compile_count(j1), 2);  // f32, then f64
  kiln_tree_free(x);
  kiln_tree_free(y);
  kiln_jit_free(j1);
  kiln_jit_free(j2);
}

TEST(Jit, InfoLogExplainsEachCompile) {
  Ctx c(1, KILN_PROMOTION_DEFAULT, KILN_LOG_INFO);
  Func f(Double, nullptr, "double");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *x = Leaf<float>(c.Dev(), KILN_F32, {2}, {1, 2});
  kiln_tree *y = Leaf<float>(c.Dev(), KILN_F32, {3}, {1, 2, 3});
  kiln_tree *out = nullptr;
  testing::internal::CaptureStderr();
  ASSERT_EQ(kiln_jit_call(j, x, &out), KILN_OK);
  kiln_tree_free(out);
  ASSERT_EQ(kiln_jit_call(j, x, &out), KILN_OK);
  kiln_tree_free(out);
  ASSERT_EQ(kiln_jit_call(j, y, &out), KILN_OK);
  kiln_tree_free(out);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(log, "jit(double): compiling")) << log;
  EXPECT_TRUE(Contains(log, "first call")) << log;
  EXPECT_TRUE(Contains(log, "argument leaf 0 is f32[3], a cached program has f32[2]")) << log;
  size_t compiles = 0;
  for (size_t p = log.find("compiling"); p != std::string::npos; p = log.find("compiling", p + 1))
    compiles++;
  EXPECT_EQ(compiles, 2u);
  kiln_tree_free(x);
  kiln_tree_free(y);
  kiln_jit_free(j);
}

// ---- donation ----

kiln_tree *AddOne(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  return kiln_tree_val(kiln_add(t, x, kiln_scalar_f(t, 1.0)));
}

TEST(Jit, DonationDeletesTheInputAndReusesItsMemory) {
  Ctx c;
  Func f(AddOne);
  int donate = 0;
  kiln_jit_options o{};
  o.donate_argnums = &donate;
  o.num_donate = 1;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j), KILN_OK);
  kiln_tree *x = Leaf<float>(c.Dev(), KILN_F32, {1024}, std::vector<float>(1024, 2.f));
  kiln_tree *args = Tuple({x});
  uint64_t before = 0, after = 0;
  kiln_device_memory_in_use(c.Dev(), &before);
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  kiln_device_memory_in_use(c.Dev(), &after);
  EXPECT_EQ(after, before);  // the output lives in the donated buffer
  EXPECT_EQ(Values<float>(out)[1023], 3.f);
  kiln_array *donated = kiln_tree_leaf_array(kiln_tree_child(args, 0));
  EXPECT_TRUE(kiln_array_is_deleted(donated));
  kiln_tree *again = nullptr;
  EXPECT_EQ(kiln_jit_call(j, args, &again), KILN_ERR_DELETED);
  EXPECT_TRUE(Contains(kiln_last_error(), "has been deleted")) << kiln_last_error();
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
}

kiln_tree *AddPair(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_add(t, x, y));
}

TEST(Jit, DonationMisuseIsRefused) {
  Ctx c(2);
  Func f(AddPair);
  int donate = 0;
  kiln_jit_options o{};
  o.donate_argnums = &donate;
  o.num_donate = 1;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j), KILN_OK);
  kiln_array *a = nullptr;
  std::vector<float> v(4, 1.f);
  const int64_t shape[] = {4};
  ASSERT_EQ(kiln_array_from_host(c.Dev(), KILN_F32, 1, shape, v.data(), 16, &a), KILN_OK);
  kiln_tree *args = Tuple({kiln_tree_array(a), kiln_tree_array(a)});  // the same array twice
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "donated argument leaf")) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_deleted(a));  // nothing was lost
  kiln_tree_free(args);
  kiln_array_release(a);
  // An argument on another device than the program's.
  kiln_tree *other = Tuple({Leaf<float>(c.Dev(1), KILN_F32, {4}, v), Leaf<float>(c.Dev(), KILN_F32, {4}, v)});
  EXPECT_EQ(kiln_jit_call(j, other, &out), KILN_ERR_WRONG_DEVICE);
  EXPECT_TRUE(Contains(kiln_last_error(), "is not on cpu:0")) << kiln_last_error();
  kiln_tree_free(other);
  // donate_argnums beyond the arguments.
  int bad = 5;
  o.donate_argnums = &bad;
  kiln_jit *j2 = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j2), KILN_OK);
  kiln_tree *ok = Tuple({Leaf<float>(c.Dev(), KILN_F32, {4}, v), Leaf<float>(c.Dev(), KILN_F32, {4}, v)});
  EXPECT_EQ(kiln_jit_call(j2, ok, &out), KILN_ERR_OUT_OF_RANGE);
  kiln_tree_free(ok);
  kiln_jit_free(j2);
  kiln_jit_free(j);
}

// ---- errors inside traces ----

kiln_tree *Mismatch(kiln_trace *t, const kiln_tree *a, void *calls) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  kiln_val *bad = kiln_add(t, x, y);                // fails: f32[3] + f32[4]
  kiln_val *later = kiln_exp(t, kiln_neg(t, bad));  // no-ops
  ++*static_cast<int *>(calls);
  EXPECT_EQ(later, nullptr);
  EXPECT_EQ(kiln_trace_status(t), KILN_ERR_SHAPE);
  return kiln_tree_val(later);
}

TEST(Jit, TraceErrorsAreStickyAndNameTheOp) {
  Ctx c;
  int calls = 0;
  Func f(Mismatch, &calls, "mismatch");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *args = Tuple({Leaf<float>(c.Dev(), KILN_F32, {3}, {1, 2, 3}),
                           Leaf<float>(c.Dev(), KILN_F32, {4}, {1, 2, 3, 4})});
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_ERR_SHAPE);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kiln_add")) << msg;
  EXPECT_TRUE(Contains(msg, "f32[3]")) << msg;
  EXPECT_TRUE(Contains(msg, "f32[4]")) << msg;
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(calls, 1);
  kiln_tree_free(args);
  kiln_jit_free(j);
}

kiln_tree *MixInts(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_add(t, x, y));
}

TEST(Jit, StrictPromotionRefusesMixedTypes) {
  Ctx c(1, KILN_PROMOTION_OPT_STRICT);
  Func f(MixInts, nullptr, "mix");
  kiln_tree *args = Tuple({Leaf<int32_t>(c.Dev(), KILN_I32, {2}, {1, 2}),
                           Leaf<float>(c.Dev(), KILN_F32, {2}, {1, 2})});
  char *text = nullptr;
  EXPECT_EQ(kiln_make_jaxpr(c.ctx, f.f, args, &text), KILN_ERR_PROMOTION);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_add")) << kiln_last_error();
  EXPECT_EQ(text, nullptr);
  kiln_tree_free(args);
}

kiln_tree *ReturnsNull(kiln_trace *, const kiln_tree *, void *) { return nullptr; }

kiln_val *g_escaped = nullptr;
kiln_tree *Escape(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(a)->u.val;
  if (!g_escaped) {
    g_escaped = x;
    return kiln_tree_val(x);
  }
  return kiln_tree_val(kiln_add(t, x, g_escaped));  // a value of a finished trace
}

TEST(Jit, UserMistakesAreClearErrors) {
  Ctx c;
  kiln_tree *x = Leaf<float>(c.Dev(), KILN_F32, {2}, {1, 2});
  char *text = nullptr;
  Func null_fn(ReturnsNull, nullptr, "returns_null");
  EXPECT_EQ(kiln_make_jaxpr(c.ctx, null_fn.f, x, &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "returns_null returned NULL")) << kiln_last_error();
  Func esc(Escape, nullptr, "escape");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, esc.f, nullptr, &j), KILN_OK);
  kiln_tree *y = Leaf<float>(c.Dev(), KILN_F32, {3}, {1, 2, 3});
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(j, x, &out), KILN_OK) << kiln_last_error();
  kiln_tree_free(out);
  EXPECT_EQ(kiln_jit_call(j, y, &out), KILN_ERR_ARGUMENT);  // retrace meets the escaped value
  EXPECT_TRUE(Contains(kiln_last_error(), "escaped")) << kiln_last_error();
  g_escaped = nullptr;
  // Arguments must be arrays.
  int dummy = 0;
  kiln_tree *ptr = kiln_tree_ptr(&dummy);
  EXPECT_EQ(kiln_jit_call(j, ptr, &out), KILN_ERR_TREE);
  EXPECT_EQ(kiln_jit_call(nullptr, x, &out), KILN_ERR_ARGUMENT);
  kiln_jit *none = nullptr;
  EXPECT_EQ(kiln_jit_new(c.ctx, nullptr, nullptr, &none), KILN_ERR_ARGUMENT);
  kiln_jit_options o{};
  o.device = 3;
  kiln_jit *bad = nullptr;
  EXPECT_EQ(kiln_jit_new(c.ctx, esc.f, &o, &bad), KILN_ERR_OUT_OF_RANGE);
  kiln_tree_free(ptr);
  kiln_tree_free(x);
  kiln_tree_free(y);
  kiln_jit_free(j);
}

// ---- eval_shape, make_jaxpr, partial_eval_by_shape, stages ----

TEST(Jit, EvalShapeTakesAvalsAndRunsNothing) {
  Ctx c;
  Func f(AddPair);
  kiln_aval a{}, b{};
  a.dtype = KILN_F32, a.rank = 2, a.shape[0] = 4, a.shape[1] = 1;
  b.dtype = KILN_F32, b.rank = 1, b.shape[0] = 3;
  kiln_tree *args = Tuple({kiln_tree_ptr(&a), kiln_tree_ptr(&b)});
  kiln_treedef *def = nullptr;
  kiln_aval *out = nullptr;
  size_t n = 0;
  ASSERT_EQ(kiln_eval_shape(c.ctx, f.f, args, &def, &out, &n), KILN_OK) << kiln_last_error();
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0].dtype, KILN_F32);
  EXPECT_EQ(out[0].rank, 2);
  EXPECT_EQ(out[0].shape[0], 4);
  EXPECT_EQ(out[0].shape[1], 3);
  char s[64];
  kiln_treedef_str(def, s, sizeof s);
  EXPECT_STREQ(s, "PyTreeDef(*)");
  free(out);
  kiln_treedef_free(def);
  kiln_tree_free(args);
}

kiln_tree *TimesTwoFloat(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_mul(t, kiln_tree_leaf_get(a)->u.val, kiln_scalar_f(t, 2.0)));
}

TEST(Jit, MakeJaxprPrintsTheTracedProgram) {
  Ctx c;
  Func f(TimesTwoFloat);
  kiln_aval a{};
  a.dtype = KILN_I32, a.rank = 1, a.shape[0] = 3;
  kiln_tree *arg = kiln_tree_ptr(&a);
  char *text = nullptr;
  ASSERT_EQ(kiln_make_jaxpr(c.ctx, f.f, arg, &text), KILN_OK) << kiln_last_error();
  // jax.make_jaxpr(lambda x: x * 2.0)(int32[3]) with x64, plus kiln's weak marks.
  EXPECT_STREQ(text,
               "{ lambda ; a:i32[3]. let\n"
               "    b:~f64[3] = convert_element_type[new_dtype=float64 weak_type=True] a\n"
               "    c:~f64[3] = mul b 2.0:~f64[]\n"
               "  in (c,) }");
  free(text);
  kiln_tree_free(arg);
}

kiln_tree *HalfKnown(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(a)->u.val;
  int64_t shape[1] = {3};
  kiln_val *known = kiln_add(t, kiln_iota(t, KILN_F32, 1, shape, 0), kiln_scalar_f(t, 1.0));
  kiln_tree *parts[2] = {kiln_tree_val(kiln_mul(t, x, x)), kiln_tree_val(known)};
  return kiln_tree_tuple(2, parts);
}

TEST(Jit, PartialEvalByShapeComputesWhatNeedsNoInput) {
  Ctx c;
  Func f(HalfKnown);
  kiln_aval a{};
  a.dtype = KILN_F32, a.rank = 1, a.shape[0] = 1 << 20;
  kiln_tree *arg = kiln_tree_ptr(&a);
  kiln_tree *out = nullptr;
  kiln_aval *avals = nullptr;
  ASSERT_EQ(kiln_partial_eval_by_shape(c.ctx, f.f, arg, &out, &avals), KILN_OK) << kiln_last_error();
  const kiln_leaf *unknown = kiln_tree_leaf_get(kiln_tree_child(out, 0));
  ASSERT_EQ(unknown->kind, KILN_LEAF_PTR);
  const kiln_aval *u = static_cast<const kiln_aval *>(unknown->u.ptr);
  EXPECT_EQ(u->shape[0], 1 << 20);
  ASSERT_NE(kiln_tree_leaf_array(kiln_tree_child(out, 1)), nullptr);
  EXPECT_EQ(Values<float>(kiln_tree_child(out, 1)), (std::vector<float>{1, 2, 3}));
  kiln_tree_free(out);
  free(avals);
  kiln_tree_free(arg);
}

kiln_tree *Dot(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_tanh(t, kiln_matmul(t, x, y)));
}

// A CPU context that dumps plans and kernels to `dir`; NULL on failure.
kiln_ctx *CpuCtxDumpingTo(const std::string &dir) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.dump_dir = dir.c_str();
  kiln_ctx *ctx = nullptr;
  return kiln_ctx_new(&o, &ctx) == KILN_OK ? ctx : nullptr;
}

// A kernel NVRTC refuses (here: an architecture this NVRTC no longer
// targets) is KILN_ERR_COMPILE with NVRTC's reason and the path of the
// kernel's source, which is complete on its own.
TEST(Jit, LoweringNvrtcRefusesNamesTheKernelSource) {
  TempDir dump("lower-dump");
  kiln_ctx *ctx = CpuCtxDumpingTo(dump.path());
  ASSERT_NE(ctx, nullptr) << kiln_last_error();
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  Func f(Double, nullptr, "double");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *x = Leaf<float>(dev, KILN_F32, {4}, {1, 2, 3, 4});
  kiln_lowered *l = nullptr;
  ASSERT_EQ(kiln_jit_lower(j, x, &l), KILN_OK) << kiln_last_error();
  char *text = nullptr;
  EXPECT_EQ(kiln_lowered_cuda_text(l, 51, &text), KILN_ERR_COMPILE);
  EXPECT_EQ(text, nullptr);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "kiln_lowered_cuda_text")) << msg;
  EXPECT_TRUE(Contains(msg, "NVRTC_ERROR_INVALID_OPTION")) << msg;
  size_t at = msg.find("(the kernel's source is in ");
  ASSERT_NE(at, std::string::npos) << msg;
  std::string path = msg.substr(at + 27, msg.find(')', at) - at - 27);
  EXPECT_EQ(path.rfind(dump.path(), 0), 0u) << path;
  EXPECT_TRUE(Contains(ReadFile(path), "extern \"C\" __global__")) << path;
  kiln_lowered_free(l);
  kiln_tree_free(x);
  kiln_jit_free(j);
  kiln_ctx_free(ctx);
}

// exp(x) with its row sums and its column sums: kernels of several groups.
kiln_tree *ExpRowAndColumnSums(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *e = kiln_exp(t, kiln_tree_leaf_get(a)->u.val);
  const int rows[1] = {1}, columns[1] = {0};
  kiln_val *r = kiln_reduce_sum(t, e, 1, rows);
  kiln_val *c = kiln_reduce_sum(t, kiln_mul(t, e, e), 1, columns);
  return Tuple({kiln_tree_val(e), kiln_tree_val(r), kiln_tree_val(c)});
}

// ExpRowAndColumnSums jitted on a CPU context (dumping to `dump` unless it
// is empty) with a [3, 5] argument: what the lowering tests below share.
struct SumsJit {
  kiln_ctx *ctx = nullptr;
  kiln_jit *j = nullptr;
  kiln_tree *x = nullptr;
  Func f{ExpRowAndColumnSums, nullptr, "sums"};
  explicit SumsJit(const std::string &dump) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    if (!dump.empty()) o.dump_dir = dump.c_str();
    kiln_device *dev = nullptr;
    if (kiln_ctx_new(&o, &ctx) || kiln_device_get(ctx, 0, &dev) ||
        kiln_jit_new(ctx, f.f, nullptr, &j))
      return;
    x = Leaf<float>(dev, KILN_F32, {3, 5}, std::vector<float>(15, 0.5f));
  }
  ~SumsJit() {
    kiln_tree_free(x);
    kiln_jit_free(j);
    kiln_ctx_free(ctx);
  }
  kiln_lowered *Lower() {
    kiln_lowered *l = nullptr;
    return x && kiln_jit_lower(j, x, &l) == KILN_OK ? l : nullptr;
  }
};

// Lowering for a chosen sm_XY on a machine without a GPU puts every CUDA
// kernel of the plan into KILN_DUMP_DIR as its own .cu file, the very source
// of the plan text, which NVRTC compiles alone (the prelude is in it).
TEST(Jit, DumpDirHoldsEveryCudaKernelWhenLoweringWithoutADevice) {
  TempDir dump("lower-cu-dump");
  kiln_ctx *ctx = CpuCtxDumpingTo(dump.path());
  ASSERT_NE(ctx, nullptr) << kiln_last_error();
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  Func f(ExpRowAndColumnSums, nullptr, "exp_row_and_column_sums");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *x = Leaf<float>(dev, KILN_F32, {3, 5}, std::vector<float>(15, 0.5f));
  kiln_lowered *l = nullptr;
  ASSERT_EQ(kiln_jit_lower(j, x, &l), KILN_OK) << kiln_last_error();
  char *text = nullptr;
  ASSERT_EQ(kiln_lowered_cuda_text(l, 90, &text), KILN_OK) << kiln_last_error();
  std::string plan = text;
  free(text);

  std::vector<std::filesystem::path> files;
  for (const auto &e : std::filesystem::directory_iterator(dump.path()))
    if (e.path().extension() == ".cu") files.push_back(e.path());
  size_t kernels = 0;
  for (size_t at = plan.find("/* ---- group "); at != std::string::npos;
       at = plan.find("/* ---- group ", at + 1))
    kernels++;
  ASSERT_GE(kernels, 2u) << plan;
  ASSERT_EQ(files.size(), kernels) << plan;
  for (const auto &file : files) {
    std::string source = ReadFile(file.string());
    EXPECT_NE(plan.find(source), std::string::npos) << file << " is not a kernel of the plan";
    nvrtcProgram prog = nullptr;
    ASSERT_EQ(nvrtcCreateProgram(&prog, source.c_str(), file.filename().c_str(), 0, nullptr,
                                 nullptr),
              NVRTC_SUCCESS);
    const char *opts[] = {"-arch=sm_90"};
    nvrtcResult rc = nvrtcCompileProgram(prog, 1, opts);
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(prog, log.data());
    EXPECT_EQ(rc, NVRTC_SUCCESS) << file << ":\n" << log;
    nvrtcDestroyProgram(&prog);
  }
  kiln_lowered_free(l);
  kiln_tree_free(x);
  kiln_jit_free(j);
  kiln_ctx_free(ctx);
}

// kiln_lowered_text takes "<backend>:<arch>" through the table of registered
// backends: cuda:sm_90 gives what kiln_lowered_cuda_text(90) gives; a target
// naming no backend or no architecture is refused naming it; cpu:host gives
// the C kernels.
TEST(Jit, LoweredTextForATargetGoesThroughTheBackendTable) {
  SumsJit s("");
  kiln_lowered *l = s.Lower();
  ASSERT_NE(l, nullptr) << kiln_last_error();
  char *a = nullptr, *b = nullptr, *bad = nullptr;
  ASSERT_EQ(kiln_lowered_text(l, "cuda:sm_90", &a), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_lowered_cuda_text(l, 90, &b), KILN_OK) << kiln_last_error();
  EXPECT_STREQ(a, b);
  EXPECT_EQ(kiln_lowered_text(l, "tpu:v5", &bad), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "target 'tpu:v5' names no registered backend"))
      << kiln_last_error();
  EXPECT_EQ(kiln_lowered_text(l, "cuda", &bad), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "names no architecture")) << kiln_last_error();
  EXPECT_EQ(kiln_lowered_text(l, "cuda:sm_9x", &bad), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "sm_9x is not a CUDA architecture")) << kiln_last_error();
  EXPECT_EQ(kiln_lowered_cuda_text(l, 20, &bad), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_lowered_text(l, "cpu:riscv", &bad), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "the C target compiles for this host only"))
      << kiln_last_error();
  EXPECT_EQ(bad, nullptr);
  // cpu:host: the plan and the C kernels the CPU devices compile.
  char *c = nullptr;
  ASSERT_EQ(kiln_lowered_text(l, "cpu:host", &c), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(Contains(c, "C, ")) << c;
  EXPECT_TRUE(Contains(c, "kiln_kernel_args")) << c;
  EXPECT_FALSE(Contains(c, "__global__")) << c;
  free(c);
  free(a);
  free(b);
  kiln_lowered_free(l);
}

// With a dump directory, the pass pipeline writes the program before the
// passes and after each one (<name>.<NN>.<pass>.txt, as XLA's pass dumps),
// and the last of them is the program the executable was built from.
TEST(Jit, DumpDirHoldsTheProgramAfterEveryPass) {
  TempDir dump("pass-dump");
  SumsJit s(dump.path());
  ASSERT_NE(s.x, nullptr) << kiln_last_error();
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(s.j, s.x, &out), KILN_OK) << kiln_last_error();
  std::vector<std::string> names;
  for (const auto &e : std::filesystem::directory_iterator(dump.path()))
    if (e.path().filename().string().rfind("sums.", 0) == 0 && e.path().extension() == ".txt")
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  const std::vector<std::string> want = {"sums.00.input.txt", "sums.01.dce.txt",
                                         "sums.02.simplify.txt", "sums.03.cse.txt",
                                         "sums.04.fold.txt", "sums.05.dce.txt",
                                         "sums.06.inline_calls.txt", "sums.07.dce.txt"};
  EXPECT_EQ(names, want);
  std::string first = ReadFile(dump.path() + "/sums.00.input.txt");
  std::string last = ReadFile(dump.path() + "/sums.07.dce.txt");
  EXPECT_TRUE(Contains(first, "exp")) << first;
  EXPECT_TRUE(Contains(last, "reduce_sum")) << last;
  kiln_tree_free(out);
}

TEST(Jit, StagesLowerCompileAnalyseAndCall) {
  Ctx c;
  Func f(Dot, nullptr, "dot");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *args = Tuple({Leaf<float>(c.Dev(), KILN_F32, {2, 3}, std::vector<float>(6, 0.5f)),
                           Leaf<float>(c.Dev(), KILN_F32, {3, 4}, std::vector<float>(12, 0.25f))});
  kiln_lowered *l = nullptr;
  ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  char *text = nullptr;
  ASSERT_EQ(kiln_lowered_as_text(l, &text), KILN_OK);
  EXPECT_TRUE(Contains(text, "dot_general")) << text;
  EXPECT_TRUE(Contains(text, "tanh")) << text;
  free(text);
  kiln_compiled *comp = nullptr;
  ASSERT_EQ(kiln_lowered_compile(l, &comp), KILN_OK) << kiln_last_error();
  kiln_compiled *again = nullptr;
  EXPECT_EQ(kiln_lowered_compile(l, &again), KILN_ERR_ARGUMENT);  // moved into the first one
  ASSERT_EQ(kiln_compiled_as_text(comp, &text), KILN_OK) << kiln_last_error();
  free(text);
  kiln_cost_analysis cost;
  ASSERT_EQ(kiln_compiled_cost_analysis(comp, &cost), KILN_OK);
  EXPECT_EQ(cost.flops, 2.0 * 2 * 4 * 3);      // the dot
  EXPECT_EQ(cost.transcendentals, 8.0);          // tanh over f32[2,4]
  EXPECT_EQ(cost.bytes_accessed, (24 + 48 + 32) + (32 + 32.0));
  kiln_memory_analysis mem;
  ASSERT_EQ(kiln_compiled_memory_analysis(comp, &mem), KILN_OK);
  EXPECT_EQ(mem.argument_bytes, 24u + 48u);
  EXPECT_EQ(mem.output_bytes, 32u);
  EXPECT_EQ(mem.temp_bytes, 32u);  // the dot's result before tanh
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_compiled_call(comp, args, &out), KILN_OK) << kiln_last_error();
  EXPECT_NEAR(Values<float>(out)[0], std::tanh(0.375f), 1e-6);
  kiln_tree_free(out);
  kiln_tree *wrong = Tuple({Leaf<float>(c.Dev(), KILN_F32, {1, 3}, std::vector<float>(3, 1.f)),
                            Leaf<float>(c.Dev(), KILN_F32, {3, 4}, std::vector<float>(12, 1.f))});
  EXPECT_EQ(kiln_compiled_call(comp, wrong, &out), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "do not match")) << kiln_last_error();
  kiln_tree_free(wrong);
  kiln_compiled_free(comp);
  kiln_lowered_free(l);
  kiln_tree_free(args);
  kiln_jit_free(j);
}

// ---- debugging ----

kiln_status Square(void *user, int n_in, const kiln_host_buffer *in, int n_out,
                   kiln_host_buffer *out) {
  ++*static_cast<int *>(user);
  if (n_in != 1 || n_out != 1) return KILN_ERR_ARGUMENT;
  const float *x = static_cast<const float *>(in[0].data);
  float *y = static_cast<float *>(out[0].data);
  for (size_t i = 0; i < in[0].nbytes / 4; i++) y[i] = x[i] * x[i];
  return KILN_OK;
}

kiln_tree *WithCallback(kiln_trace *t, const kiln_tree *a, void *calls) {
  kiln_val *x = kiln_tree_leaf_get(a)->u.val;
  kiln_aval r{};
  kiln_val_aval(x, &r);
  kiln_val *y = nullptr;
  kiln_host_callback(t, Square, calls, 1, &x, 1, &r, &y);
  kiln_debug_print(t, "x = {}", 1, &x);
  return kiln_tree_val(kiln_add(t, y, kiln_scalar_f(t, 1.0)));
}

TEST(Jit, HostCallbacksAndDebugPrintRunAtRunTime) {
  Ctx c;
  int calls = 0;
  Func f(WithCallback, &calls, "with_callback");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  kiln_tree *x = Leaf<float>(c.Dev(), KILN_F32, {3}, {1, 2, 3});
  kiln_tree *out = nullptr;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ(kiln_jit_call(j, x, &out), KILN_OK) << kiln_last_error();
    EXPECT_EQ(Values<float>(out), (std::vector<float>{2, 5, 10}));
    kiln_tree_free(out);
  }
  std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls, 2);  // traced once, called on every run
  EXPECT_EQ(printed, "x = [1. 2. 3.]\nx = [1. 2. 3.]\n");
  kiln_tree_free(x);
  kiln_jit_free(j);
}

}  // namespace
