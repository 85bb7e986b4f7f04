// Sums that stay exact enough (issue 26): reduce(broadcast(x)) folded by
// kir_simplify where the result is exactly what a summation would give (the
// 2^36-ones sum is 68719476736 as in JAX), not folded where it would not be;
// long f32 sums on the C target blocked and combined as a pairwise cascade,
// against JAX's results (tests/golden/reduce_exact.py) in the shapes that
// take each of its reduction loops; and the CUDA kernels of long sums emitted
// with the same blocks and cascade, compiled by NVRTC (not run: CI has no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "support/cuda_test_support.h"
#include "fuse/fuse.h"
#include "ir/ir.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"

namespace {

bool Contains(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

struct Ctx {
  explicit Ctx(kiln_executor executor = KILN_EXECUTOR_DEFAULT) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.executor = executor;
    EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK) << kiln_last_error();
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
};

// What a traced function does: a broadcast of `operand` to `shape`, then a
// reduction over `axes`.
struct Case {
  enum Operand { kLiteral, kArgument } operand;
  kiln_dtype dtype;
  double literal;                 // kLiteral: its value
  std::vector<int64_t> arg_shape; // kArgument: the argument's shape
  std::vector<int64_t> shape;     // the broadcast's
  std::vector<int> dims;          // broadcast_dimensions (kArgument)
  std::vector<int> axes;
  const char *reduce = "sum";
};

kiln_tree *Trace(kiln_trace *t, const kiln_tree *args, void *user) {
  const Case *c = static_cast<const Case *>(user);
  kiln_val *x = c->operand == Case::kLiteral
                    ? kiln_scalar(t, c->dtype, c->literal)
                    : kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *b = kiln_broadcast_in_dim(t, x, (int)c->shape.size(), c->shape.data(),
                                      c->operand == Case::kLiteral ? nullptr : c->dims.data());
  int n = (int)c->axes.size();
  std::string r = c->reduce;
  kiln_val *y = r == "sum"   ? kiln_reduce_sum(t, b, n, c->axes.data())
                : r == "max" ? kiln_reduce_max(t, b, n, c->axes.data())
                : r == "min" ? kiln_reduce_min(t, b, n, c->axes.data())
                             : kiln_reduce_prod(t, b, n, c->axes.data());
  return kiln_tree_val(y);
}

kiln_tree *Args(kiln_device *dev, kiln_dtype dt, const std::vector<int64_t> &shape,
                const void *data, size_t nbytes) {
  kiln_array *a = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, dt, (int)shape.size(), shape.data(), data, nbytes, &a),
            KILN_OK)
      << kiln_last_error();
  kiln_tree *leaf = kiln_tree_array(a);
  kiln_array_release(a);
  return kiln_tree_tuple(1, &leaf);
}

// Runs the case through jit: the lowered program's text and the result.
template <typename T>
std::vector<T> Call(Ctx &c, const Case &k, const kiln_tree *args, std::string *lowered) {
  kiln_func *f = nullptr;
  kiln_jit *j = nullptr;
  kiln_lowered *l = nullptr;
  kiln_tree *out = nullptr;
  std::vector<T> v;
  EXPECT_EQ(kiln_func_new(Trace, const_cast<Case *>(&k), "reduce_of_broadcast", &f), KILN_OK);
  EXPECT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK) << kiln_last_error();
  kiln_compiled *comp = nullptr;
  char *text = nullptr;
  EXPECT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_lowered_compile(l, &comp), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_compiled_as_text(comp, &text), KILN_OK) << kiln_last_error();
  *lowered = text ? text : "";
  free(text);
  kiln_compiled_free(comp);
  EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  if (out) {
    kiln_array *a = kiln_tree_leaf_array(out);
    v.resize(kiln_array_size(a));
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(T)), KILN_OK);
  }
  kiln_tree_free(out);
  kiln_lowered_free(l);
  kiln_jit_free(j);
  kiln_func_free(f);
  return v;
}

kiln_tree *NoArgs() { return kiln_tree_tuple(0, nullptr); }

// ---- the fold ----

// jnp.broadcast_to(1.0, (2**18, 2**18)).sum() is 2^36 exactly in JAX (XLA
// folds it); kiln folds it too, on every executor, instead of adding 2^36
// ones (which took minutes and gave 2^35).
TEST(ReduceOfBroadcast, TwoToThe36OnesSumExactly) {
  for (kiln_executor ex : {KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE}) {
    Ctx c(ex);
    Case k{Case::kLiteral, KILN_F32, 1.0, {}, {1 << 18, 1 << 18}, {}, {0, 1}};
    kiln_tree *args = NoArgs();
    std::string text;
    std::vector<float> v = Call<float>(c, k, args, &text);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0], 68719476736.0f);
    EXPECT_FALSE(Contains(text, "reduce_sum")) << text;
    kiln_tree_free(args);
  }
}

// Partial sums of a broadcast literal: a literal broadcast to the result,
// f64 too; counts that are not powers of two when every multiple is exact.
// (Broadcasts over 1 MiB, which constant folding leaves to kir_simplify.)
TEST(ReduceOfBroadcast, LiteralSumsBecomeLiterals) {
  Ctx c;
  struct {
    Case k;
    double want;
  } cases[] = {
      {{Case::kLiteral, KILN_F32, 0.75, {}, {1 << 20, 3}, {}, {0}}, 0.75 * (1 << 20)},
      {{Case::kLiteral, KILN_F32, 3.0, {}, {3, 1 << 18, 7}, {}, {0, 2}}, 63.0},
      {{Case::kLiteral, KILN_F64, 0.375, {}, {1 << 12, 1 << 12}, {}, {0, 1}}, 0.375 * (1 << 24)},
      {{Case::kLiteral, KILN_F32, -INFINITY, {}, {1 << 18, 5}, {}, {0}}, -INFINITY},
  };
  for (auto &t : cases) {
    kiln_tree *args = NoArgs();
    std::string text;
    if (t.k.dtype == KILN_F64) {
      std::vector<double> v = Call<double>(c, t.k, args, &text);
      ASSERT_FALSE(v.empty());
      for (double x : v) EXPECT_EQ(x, t.want);
    } else {
      std::vector<float> v = Call<float>(c, t.k, args, &text);
      ASSERT_FALSE(v.empty());
      for (float x : v) EXPECT_EQ(x, (float)t.want);
    }
    EXPECT_FALSE(Contains(text, "reduce_sum")) << text;
    kiln_tree_free(args);
  }
}

// Integer sums of a runtime value are value * count, wrapping as the sum
// does: 3 added 2^32 times in i32 is 0; a broadcast row summed down the
// columns is the row times the number of rows.
TEST(ReduceOfBroadcast, IntegerSumsBecomeProducts) {
  Ctx c;
  int32_t three = 3;
  kiln_tree *a = Args(c.dev, KILN_I32, {}, &three, sizeof three);
  Case wrap{Case::kArgument, KILN_I32, 0, {}, {1 << 16, 1 << 16}, {}, {0, 1}};
  std::string text;
  std::vector<int32_t> v = Call<int32_t>(c, wrap, a, &text);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], 0);
  EXPECT_FALSE(Contains(text, "reduce_sum")) << text;
  EXPECT_TRUE(Contains(text, "mul")) << text;
  kiln_tree_free(a);

  std::vector<int8_t> row = {1, -2, 3, 100};
  a = Args(c.dev, KILN_I8, {4}, row.data(), row.size());
  Case cols{Case::kArgument, KILN_I8, 0, {4}, {5, 4}, {1}, {0}};
  std::vector<int8_t> s = Call<int8_t>(c, cols, a, &text);
  ASSERT_EQ(s.size(), 4u);
  for (int k = 0; k < 4; k++) EXPECT_EQ(s[k], (int8_t)(row[k] * 5)) << k;  // 500 wraps to -12
  EXPECT_FALSE(Contains(text, "reduce_sum")) << text;
  kiln_tree_free(a);
}

// max/min of a broadcast are the operand, broadcast to the result; a
// stretched size-1 axis reduced away leaves a reshape.
TEST(ReduceOfBroadcast, MaxAndMinAreTheOperand) {
  Ctx c;
  std::vector<float> x = {1.5f, NAN, -3.0f};
  kiln_tree *a = Args(c.dev, KILN_F32, {3}, x.data(), x.size() * sizeof(float));
  Case max{Case::kArgument, KILN_F32, 0, {3}, {7, 3, 4}, {1}, {0}, "max"};
  std::string text;
  std::vector<float> v = Call<float>(c, max, a, &text);
  ASSERT_EQ(v.size(), 12u);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(v[i * 4 + j]));
      } else {
        EXPECT_EQ(v[i * 4 + j], x[i]);
      }
    }
  EXPECT_FALSE(Contains(text, "reduce_max")) << text;
  kiln_tree_free(a);

  a = Args(c.dev, KILN_F32, {1, 3}, x.data(), x.size() * sizeof(float));
  Case min{Case::kArgument, KILN_F32, 0, {1, 3}, {9, 3}, {0, 1}, {0}, "min"};
  v = Call<float>(c, min, a, &text);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], -3.0f);
  EXPECT_FALSE(Contains(text, "reduce_min")) << text;
  kiln_tree_free(a);
}

// Left alone where the product is not what a summation gives, where the
// reduced axis is the operand's own, for an empty reduction (the identity),
// for reduce_prod, and for a runtime float (its partial sums round).
TEST(ReduceOfBroadcast, NotFoldedWhereNotExact) {
  Ctx c;
  struct {
    Case k;
    const char *prim;
  } literal_cases[] = {
      // 0.1f has a 24-bit significand: 0.1f + 0.1f + 0.1f rounds
      {{Case::kLiteral, KILN_F32, 0.1, {}, {3, 1 << 19}, {}, {0, 1}}, "reduce_sum"},
      {{Case::kLiteral, KILN_F32, 0.1, {}, {1 << 10, 1 << 10}, {}, {0, 1}}, "reduce_sum"},
      // a denormal: the kernels flush it to zero
      {{Case::kLiteral, KILN_F32, 1e-40, {}, {1 << 20}, {}, {0}}, "reduce_sum"},
      // bf16 sums round every step
      {{Case::kLiteral, KILN_BF16, 1.0, {}, {1 << 20}, {}, {0}}, "reduce_sum"},
      {{Case::kLiteral, KILN_F32, 1.0, {}, {1 << 19, 2}, {}, {0, 1}, "prod"}, "reduce_prod"},
  };
  for (auto &t : literal_cases) {
    kiln_tree *args = NoArgs();
    std::string text;
    if (t.k.dtype == KILN_BF16) {
      EXPECT_EQ(Call<uint16_t>(c, t.k, args, &text).size(), 1u);
    } else {
      std::vector<float> v = Call<float>(c, t.k, args, &text);
      ASSERT_EQ(v.size(), 1u);
      if (t.k.reduce == std::string("prod")) {
        EXPECT_EQ(v[0], 1.0f);
      }
    }
    EXPECT_TRUE(Contains(text, t.prim)) << text;
    kiln_tree_free(args);
  }
  // An empty reduction is the identity, not count * x (0 * inf).
  {
    Case empty{Case::kLiteral, KILN_F32, INFINITY, {}, {0, 4}, {}, {0}};
    kiln_tree *args = NoArgs();
    std::string text;
    std::vector<float> v = Call<float>(c, empty, args, &text);
    ASSERT_EQ(v.size(), 4u);
    for (float x : v) EXPECT_EQ(x, 0.0f);
    kiln_tree_free(args);
  }
  // An axis of the operand's own is summed, not multiplied.
  std::vector<int32_t> row = {1, 2, 3};
  kiln_tree *a = Args(c.dev, KILN_I32, {3}, row.data(), row.size() * sizeof(int32_t));
  Case own{Case::kArgument, KILN_I32, 0, {3}, {2, 3}, {1}, {1}};
  std::string text;
  std::vector<int32_t> s = Call<int32_t>(c, own, a, &text);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], 6);
  EXPECT_EQ(s[1], 6);
  EXPECT_TRUE(Contains(text, "reduce_sum")) << text;
  kiln_tree_free(a);
  // A runtime f32 operand: summed by the kernel (blocked, so 2^25 ones are
  // still exact: one accumulator per column would stop at 2^24).
  std::vector<float> ones = {1.0f, 1.0f};
  a = Args(c.dev, KILN_F32, {2}, ones.data(), 2 * sizeof(float));
  Case cols{Case::kArgument, KILN_F32, 0, {2}, {1 << 25, 2}, {1}, {0}};
  std::vector<float> v = Call<float>(c, cols, a, &text);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], 33554432.0f);
  EXPECT_EQ(v[1], 33554432.0f);
  EXPECT_TRUE(Contains(text, "reduce_sum")) << text;
  kiln_tree_free(a);
}

// ---- blocked sums against JAX ----

// x[k] of tests/golden/reduce_exact.py.
std::vector<float> Values(int64_t n) {
  std::vector<float> v((size_t)n);
  for (int64_t k = 0; k < n; k++) {
    uint64_t z = (uint64_t)k * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[(size_t)k] = (float)((double)(z >> 40) / 16777216.0);
  }
  return v;
}

struct Golden {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int> axes;
  std::vector<float> jax;
  std::vector<double> exact;
};

std::vector<Golden> ReadGolden() {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/reduce_exact.txt");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name, dims, axes;
    in >> name;
    if (name == "exact") {
      in >> name;
      double d;
      while (in >> d) out.back().exact.push_back(d);
      continue;
    }
    Golden g;
    g.name = name;
    in >> dims >> axes;
    for (std::istringstream ds(dims); std::getline(ds, name, 'x');)
      g.shape.push_back(std::stoll(name));
    for (std::istringstream as(axes); std::getline(as, name, ',');)
      g.axes.push_back(std::stoi(name));
    float v;
    while (in >> v) g.jax.push_back(v);
    out.push_back(g);
  }
  return out;
}

kiln_tree *SumAxes(kiln_trace *t, const kiln_tree *args, void *user) {
  const Golden *g = static_cast<const Golden *>(user);
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  return kiln_tree_val(kiln_reduce_sum(t, x, (int)g->axes.size(), g->axes.data()));
}

// One f32 accumulator per result, adding in index order: what the C target's
// loops amounted to per lane before blocking.
std::vector<float> Sequential(const Golden &g, const std::vector<float> &x) {
  int rank = (int)g.shape.size();
  std::vector<int64_t> kept(rank, 0);  // per axis: its stride in the result, 0 if reduced
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    bool reduced = false;
    for (int a : g.axes) reduced |= a == d;
    if (!reduced) {
      kept[d] = s;
      s *= g.shape[d];
    }
  }
  std::vector<float> acc(g.jax.size(), 0.0f);
  std::vector<int64_t> idx(rank, 0);
  int64_t o = 0;  // the result's flat index at idx
  for (size_t k = 0; k < x.size(); k++) {
    acc[(size_t)o] += x[k];
    for (int d = rank - 1; d >= 0; d--) {
      o += kept[d];
      if (++idx[d] < g.shape[d]) break;
      o -= kept[d] * g.shape[d];
      idx[d] = 0;
    }
  }
  return acc;
}

// One golden case on one executor: x its input, seq its sequential sums.
void CheckGolden(const Golden &g, kiln_executor ex, const std::vector<float> &x,
                 const std::vector<float> &seq) {
  Ctx c(ex);
  SCOPED_TRACE(g.name + (ex == KILN_EXECUTOR_REFERENCE ? " (reference executor)" : ""));
  ASSERT_EQ(g.jax.size(), g.exact.size());
  kiln_tree *args = Args(c.dev, KILN_F32, g.shape, x.data(), x.size() * sizeof(float));
  kiln_func *f = nullptr;
  kiln_jit *j = nullptr;
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_func_new(SumAxes, const_cast<Golden *>(&g), "sum", &f), KILN_OK);
  ASSERT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
  ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  std::vector<float> got(g.jax.size());
  ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(out), got.data(), got.size() * sizeof(float)),
            KILN_OK);
  bool drifts = false;
  double worst = 0, worst_seq = 0, worst_jax = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double ulp = std::ldexp(1.0, std::ilogb(g.exact[i]) - 23);
    worst = std::max(worst, std::fabs(got[i] - g.exact[i]) / ulp);
    worst_seq = std::max(worst_seq, std::fabs(seq[i] - g.exact[i]) / ulp);
    worst_jax = std::max(worst_jax, std::fabs(g.jax[i] - g.exact[i]) / ulp);
    double tol = 1e-6 * std::fabs(g.exact[i]);  // jax's test tolerance for f32
    EXPECT_NEAR(got[i], g.jax[i], tol) << "result " << i;
    EXPECT_NEAR(got[i], g.exact[i], tol) << "result " << i;
    drifts |= std::fabs(seq[i] - g.exact[i]) > tol;
  }
  EXPECT_TRUE(drifts) << "a sequential sum is within the tolerance: the case tests nothing";
  std::string tag = g.name + (ex == KILN_EXECUTOR_REFERENCE ? "_reference" : "");
  ::testing::Test::RecordProperty(tag + "_ulps_kiln", std::to_string(worst));
  ::testing::Test::RecordProperty(tag + "_ulps_jax", std::to_string(worst_jax));
  ::testing::Test::RecordProperty(tag + "_ulps_sequential", std::to_string(worst_seq));
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
}

// Full sums, few and many long rows, long columns and a middle axis of up
// to 2^23 values in [0, 1): kiln's result within JAX's f32 test tolerance
// (rtol 1e-6, about 8 ulps) of JAX's and of the exact sum, where a
// sequential f32 sum is further off (so the blocks matter). The largest
// errors in ulps are recorded (--gtest_output=json shows them).
TEST(BlockedSums, MatchJaxWhereSequentialSumsDrift) {
  std::vector<Golden> golden = ReadGolden();
  ASSERT_EQ(golden.size(), 5u) << "tests/golden/reduce_exact.txt";
  for (const Golden &g : golden) {
    int64_t n = 1;
    for (int64_t d : g.shape) n *= d;
    std::vector<float> x = Values(n), seq = Sequential(g, x);
    for (kiln_executor ex : {KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE})
      CheckGolden(g, ex, x, seq);
  }
}

// ---- the kernels' text, C and CUDA ----

struct Emitted {
  std::string c, cuda;
  kcg_kernel cuda_kernel{};
};

// The kernels of the one fused group of `text`, for the C target and for
// CUDA (sm_90).
void EmitBoth(const char *text, Emitted *out) {
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse(text, &p), KILN_OK) << kiln_last_error();
  kfuse_plan *plan = nullptr;
  ASSERT_EQ(kfuse_plan_build(p, nullptr, nullptr, &plan), KILN_OK) << kiln_last_error();
  ASSERT_EQ(plan->n_groups, 1);
  kcg_target_info c_target = {KCG_TARGET_C, 0}, cuda_target = {KCG_TARGET_CUDA, 90};
  kcg_kernel k{};
  EXPECT_EQ(kcg_emit(p, &plan->groups[0], &c_target, &k), KILN_OK) << kiln_last_error();
  out->c = k.source ? k.source : "";
  kcg_kernel_free(&k);
  EXPECT_EQ(kcg_emit(p, &plan->groups[0], &cuda_target, &out->cuda_kernel), KILN_OK)
      << kiln_last_error();
  out->cuda = out->cuda_kernel.source ? out->cuda_kernel.source : "";
  kfuse_plan_free(plan);
  kir_program_free(p);
}

void CompileCuda(const Emitted &e) {
  for (const char *arch : {"-arch=sm_80", "-arch=sm_90"}) {
    char *code = nullptr;
    size_t size = 0;
    EXPECT_EQ(kct_nvrtc_compile("reduce_exact", e.cuda.c_str(), arch, true, &code, &size), KILN_OK)
        << arch << ": " << kiln_last_error() << "\n"
        << e.cuda;
    free(code);
  }
}

// Long f32 sums carry the block loop and the cascade in every loop shape of
// both targets; short ones, integers and max keep the loops they had.
TEST(BlockedSums, KernelsOfBothTargetsUseTheCascade) {
  const char *long_sums[] = {
      // a full sum: C shares; CUDA 1024 blocks of a split tile, whose
      // threads each add 2^14 elements of 2^32
      R"({ lambda ; a:f32[4294967296]. let b:f32[] = reduce_sum[axes=(0,)] a in (b,) })",
      // long columns: C tiles of columns, CUDA a thread per column
      R"({ lambda ; a:f32[262144,70000]. let b:f32[70000] = reduce_sum[axes=(0,)] a in (b,) })",
      // long rows over many items: C nested lanes, CUDA a warp per row
      R"({ lambda ; a:f64[1024,262144]. let b:f64[1024] = reduce_sum[axes=(1,)] a in (b,) })",
      // a middle axis: C rows flushed into the cascade, CUDA split tiles
      R"({ lambda ; a:f32[4096,300,2048]. let b:f32[300] = reduce_sum[axes=(0, 2)] a in (b,) })",
  };
  for (const char *t : long_sums) {
    SCOPED_TRACE(t);
    Emitted e;
    EmitBoth(t, &e);
    EXPECT_TRUE(Contains(e.c, "KILN_DEFINE_CASCADE(add_f")) << e.c;
    EXPECT_TRUE(Contains(e.c, "kiln_cascade_push_add_f")) << e.c;
    EXPECT_TRUE(Contains(e.c, "kiln_cascade_end_add_f")) << e.c;
    EXPECT_TRUE(Contains(e.c, "KILN_LANES_LOOP") || Contains(e.c, "tn; ++u")) << e.c;
    EXPECT_TRUE(Contains(e.cuda, "kiln_cascade_push_add_f")) << e.cuda;
    EXPECT_TRUE(Contains(e.cuda, "kiln_cascade_end_add_f")) << e.cuda;
    CompileCuda(e);
    kcg_kernel_free(&e.cuda_kernel);
  }
  const char *short_or_exact[] = {
      R"({ lambda ; a:f32[64,4096]. let b:f32[64] = reduce_sum[axes=(1,)] a in (b,) })",
      R"({ lambda ; a:i32[16777216]. let b:i32[] = reduce_sum[axes=(0,)] a in (b,) })",
      R"({ lambda ; a:f32[16777216]. let b:f32[] = reduce_max[axes=(0,)] a in (b,) })",
  };
  for (const char *t : short_or_exact) {
    SCOPED_TRACE(t);
    Emitted e;
    EmitBoth(t, &e);
    // (the kernels paste reduce.h, macro definitions included)
    EXPECT_FALSE(Contains(e.c, "kiln_cascade_push_add")) << e.c;
    EXPECT_FALSE(Contains(e.cuda, "kiln_cascade_push_add")) << e.cuda;
    kcg_kernel_free(&e.cuda_kernel);
  }
}

}  // namespace
