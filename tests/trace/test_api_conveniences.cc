// The conveniences of issue 29 against JAX (golden/api_conveniences.py):
// jax.nn.relu / gelu / silu, jnp.stack, jnp.tile, jnp.linalg.norm and basic
// indexing, values under kiln_jit and gradients through kiln_grad; pmap
// without an axis name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "nn/train_support.h"

namespace {

using Body = std::function<kiln_val *(kiln_trace *, const std::vector<kiln_val *> &)>;

kiln_tree *run_body(kiln_trace *t, const kiln_tree *args, void *user) {
  std::vector<kiln_val *> in;
  for (size_t i = 0; i < kiln_tree_num_children(args); i++) in.push_back(kiln_arg(args, i));
  kiln_val *v = (*static_cast<Body *>(user))(t, in);
  return v ? kiln_tree_val(v) : nullptr;
}

// Many results from one program (one compile for many cases).
using Bodies = std::function<std::vector<kiln_val *>(kiln_trace *, const std::vector<kiln_val *> &)>;

kiln_tree *run_bodies(kiln_trace *t, const kiln_tree *args, void *user) {
  std::vector<kiln_val *> in;
  for (size_t i = 0; i < kiln_tree_num_children(args); i++) in.push_back(kiln_arg(args, i));
  std::vector<kiln_val *> out = (*static_cast<Bodies *>(user))(t, in);
  return kiln_tuple_of(out.size(), out.data());
}

struct Result {
  std::vector<float> v;
  std::vector<int64_t> shape;
  std::string error;
};

// Bit-for-bit for what is exact (moves, selections, sums of few terms).
void expect_bits(const Result &got, const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.error, "") << what;
  ASSERT_EQ(got.v.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); i++) {
    uint32_t a, b;
    std::memcpy(&a, &got.v[i], 4), std::memcpy(&b, &want[i], 4);
    EXPECT_EQ(a, b) << what << " element " << i << ": " << got.v[i] << " vs " << want[i];
  }
}

// A few ulps for transcendental functions (kiln's tanh / erfc / exp are not
// XLA's own polynomials).
void expect_near(const Result &got, const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.error, "") << what;
  ASSERT_EQ(got.v.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_NEAR(got.v[i], want[i], 2e-6 + 4e-6 * std::fabs(want[i])) << what << " element " << i;
}

class Conveniences : public CpuFixture {
 protected:
  void SetUp() override {
    CpuFixture::SetUp();
    g = load_hex_golden("api_conveniences.txt");
    ASSERT_FALSE(g.empty()) << "missing tests/golden/api_conveniences.txt";
  }
  kiln_tree *arr(const std::string &name, std::vector<int64_t> shape) {
    return array(KILN_F32, g.at(name).data(), shape);
  }
  static Result leaf(const kiln_tree *out) {
    Result r;
    kiln_array *a = kiln_tree_leaf_array(out);
    r.shape.assign(kiln_array_shape(a), kiln_array_shape(a) + kiln_array_rank(a));
    r.v.resize(static_cast<size_t>(kiln_array_size(a)));
    EXPECT_EQ(kiln_array_to_host(a, r.v.data(), r.v.size() * 4), KILN_OK);
    return r;
  }
  static Result fetch(kiln_status st, kiln_tree *out) {
    Result r;
    if (st) {
      r.error = kiln_last_error();
      return r;
    }
    r = leaf(out);
    kiln_tree_free(out);
    return r;
  }
  // The results of one jitted program of many outputs.
  std::vector<Result> run_all(Bodies body, std::vector<kiln_tree *> args) {
    kiln_func *f = nullptr;
    EXPECT_EQ(kiln_func_new(run_bodies, &body, "cases", &f), KILN_OK);
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK);
    kiln_tree *tup = kiln_tree_tuple(args.size(), args.data());
    kiln_tree *out = nullptr;
    std::vector<Result> rs;
    EXPECT_EQ(kiln_jit_call(j, tup, &out), KILN_OK) << kiln_last_error();
    for (size_t i = 0; out && i < kiln_tree_num_children(out); i++)
      rs.push_back(leaf(kiln_tree_child(out, i)));
    kiln_tree_free(out);
    kiln_tree_free(tup);
    kiln_jit_free(j);
    kiln_func_free(f);
    return rs;
  }
  // Jits body over the arguments (taken) and returns its f32 output; with
  // grad, jax.grad of the body (a scalar loss) in argument 0.
  Result run(Body body, std::vector<kiln_tree *> args, bool grad = false) {
    kiln_func *f = nullptr, *df = nullptr;
    EXPECT_EQ(kiln_func_new(run_body, &body, "case", &f), KILN_OK);
    if (grad) {
      EXPECT_EQ(kiln_grad(f, nullptr, 0, 0, &df), KILN_OK) << kiln_last_error();
    }
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_jit_new(ctx, grad ? df : f, nullptr, &j), KILN_OK);
    kiln_tree *tup = kiln_tree_tuple(args.size(), args.data());
    kiln_tree *out = nullptr;
    kiln_status st = kiln_jit_call(j, tup, &out);
    Result r = fetch(st, out);
    kiln_tree_free(tup);
    kiln_jit_free(j);
    kiln_func_free(df);
    kiln_func_free(f);
    return r;
  }
  // sum(y * w) of the body's result y, as the goldens' losses.
  static Body loss(Body y) {
    return [y](kiln_trace *t, const std::vector<kiln_val *> &a) {
      return kiln_sum(t, kiln_mul(t, y(t, a), a.back()), KILN_ALL_AXES, nullptr, 0);
    };
  }
  std::map<std::string, std::vector<float>> g;
};

// ---- activations ----

TEST_F(Conveniences, ActivationsMatchJaxNnWithTheirGradients) {
  struct Act {
    const char *name;
    Body f;
    bool exact;
  } acts[] = {
      {"relu", [](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_relu(t, a[0]); }, true},
      {"gelu_tanh", [](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_gelu(t, a[0], 1); }, false},
      {"gelu_erf", [](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_gelu(t, a[0], 0); }, false},
      {"silu", [](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_silu(t, a[0]); }, false},
  };
  for (const Act &act : acts) {
    Result y = run(act.f, {arr("act_x", {12})});
    Result dy = run(loss(act.f), {arr("act_x", {12}), arr("act_w", {12})}, true);
    EXPECT_EQ(y.shape, std::vector<int64_t>{12});
    if (act.exact) {
      expect_bits(y, g.at(act.name), act.name);
      expect_bits(dy, g.at(std::string(act.name) + "_grad"), std::string(act.name) + " grad");
    } else {
      expect_near(y, g.at(act.name), act.name);
      expect_near(dy, g.at(std::string(act.name) + "_grad"), std::string(act.name) + " grad");
    }
  }
}

TEST_F(Conveniences, ReluGradientAtZeroIsZeroWhereMaxSplitsIt) {
  float zero[3] = {0, -0.f, 1};
  auto sum_of = [](kiln_val *(*f)(kiln_trace *, kiln_val *)) {
    return Body([f](kiln_trace *t, const std::vector<kiln_val *> &a) {
      return kiln_sum(t, f(t, a[0]), KILN_ALL_AXES, nullptr, 0);
    });
  };
  Result relu = run(sum_of(kiln_relu), {array(KILN_F32, zero, {3})}, true);
  Result max0 = run(sum_of([](kiln_trace *t, kiln_val *x) { return kiln_max(t, x, kiln_scalar_f(t, 0)); }),
                    {array(KILN_F32, zero, {3})}, true);
  EXPECT_EQ(relu.v, (std::vector<float>{0, 0, 1})) << relu.error;
  EXPECT_EQ(max0.v, (std::vector<float>{0.5f, 0.5f, 1})) << max0.error;
  // Second order: relu'' is 0 everywhere (the rule's select is linear in g).
  kiln_func *f = nullptr, *df = nullptr;
  Body b = sum_of(kiln_relu);
  ASSERT_EQ(kiln_func_new(run_body, &b, "relu_sum", &f), KILN_OK);
  ASSERT_EQ(kiln_grad(f, nullptr, 0, 0, &df), KILN_OK);
  Body gsum = [df](kiln_trace *t, const std::vector<kiln_val *> &a) {
    kiln_tree *x = kiln_tree_val(a[0]);
    kiln_tree *args = kiln_tree_tuple(1, &x);
    kiln_tree *gx = kiln_call(t, df, args);
    kiln_tree_free(args);
    kiln_val *v = gx ? kiln_tree_leaf_get(gx)->u.val : nullptr;
    kiln_tree_free(gx);
    return kiln_sum(t, v, KILN_ALL_AXES, nullptr, 0);
  };
  Result second = run(gsum, {array(KILN_F32, zero, {3})}, true);
  EXPECT_EQ(second.v, (std::vector<float>{0, 0, 0})) << second.error;
  kiln_func_free(df);
  kiln_func_free(f);
  // Integers: jnp.maximum, no rule.
  int32_t ints[3] = {-2, 0, 5};
  Body ri = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    return kiln_convert(t, kiln_relu(t, a[0]), KILN_F32);
  };
  EXPECT_EQ(run(ri, {array(KILN_I32, ints, {3})}).v, (std::vector<float>{0, 0, 5}));
}

TEST_F(Conveniences, ActivationsRefuseWhatJaxRefuses) {
  int32_t ints[2] = {1, 2};
  Result r = run([](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_silu(t, a[0]); },
                 {array(KILN_I32, ints, {2})});
  EXPECT_NE(r.error.find("logistic"), std::string::npos) << r.error;
  // gelu promotes integers to float32 as promote_args_inexact.
  r = run([](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_gelu(t, a[0], 0); },
          {array(KILN_I32, ints, {2})});
  ASSERT_EQ(r.error, "");
  EXPECT_NEAR(r.v[1], 2 * 0.5 * std::erfc(-2 / std::sqrt(2.0)), 1e-6);
  r = run([](kiln_trace *t, const std::vector<kiln_val *> &) { return kiln_relu(t, nullptr); },
          {array(KILN_I32, ints, {2})});
  EXPECT_NE(r.error.find("kiln_relu: x is NULL"), std::string::npos) << r.error;
}

// ---- stack and tile ----

TEST_F(Conveniences, StackMatchesJnpStack) {
  for (auto [axis, tag, shape] : {std::tuple<int, const char *, std::vector<int64_t>>{0, "0", {2, 2, 3}},
                                  {1, "1", {2, 2, 3}}, {-1, "m1", {2, 3, 2}}}) {
    int ax = axis;
    Result r = run([ax](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_stack(t, 2, a.data(), ax); },
                   {arr("m_a", {2, 3}), arr("m_b", {2, 3})});
    expect_bits(r, g.at(std::string("stack") + tag), std::string("stack axis ") + tag);
    EXPECT_EQ(r.shape, shape) << tag;
  }
  Body s1 = [](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_stack(t, 2, a.data(), 1); };
  Result dg = run(loss(s1), {arr("m_a", {2, 3}), arr("m_b", {2, 3}), arr("m_w", {2, 2, 3})}, true);
  expect_bits(dg, g.at("stack1_grad_a"), "grad of stack");
  // Shapes must agree; the axis must be in [-(rank+1), rank].
  Result bad = run(s1, {arr("m_a", {2, 3}), arr("tile_v", {3})});
  EXPECT_NE(bad.error.find("kiln_stack: all input arrays must have the same shape; array 1 is f32[3]"),
            std::string::npos) << bad.error;
  bad = run([](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_stack(t, 2, a.data(), 3); },
            {arr("m_a", {2, 3}), arr("m_b", {2, 3})});
  EXPECT_NE(bad.error.find("axis 3 is out of range for rank 3"), std::string::npos) << bad.error;
}

TEST_F(Conveniences, TileMatchesJnpTile) {
  auto tile = [](std::vector<int64_t> reps) {
    return Body([reps](kiln_trace *t, const std::vector<kiln_val *> &a) {
      return kiln_tile(t, a[0], static_cast<int>(reps.size()), reps.data());
    });
  };
  Result r = run(tile({2}), {arr("m_a", {2, 3})});
  expect_bits(r, g.at("tile_a_2"), "tile(a, (2,))");
  EXPECT_EQ(r.shape, (std::vector<int64_t>{2, 6}));
  r = run(tile({2, 1, 2}), {arr("m_a", {2, 3})});
  expect_bits(r, g.at("tile_a_212"), "tile(a, (2, 1, 2))");
  EXPECT_EQ(r.shape, (std::vector<int64_t>{2, 2, 6}));
  r = run(tile({2, 2}), {arr("tile_v", {3})});
  expect_bits(r, g.at("tile_v_22"), "tile(v, (2, 2))");
  EXPECT_EQ(r.shape, (std::vector<int64_t>{2, 6}));
  r = run(loss(tile({2, 3})), {arr("m_a", {2, 3}), arr("tile_w", {4, 9})}, true);
  expect_near(r, g.at("tile_grad"), "grad of tile");
  r = run(tile({0, 1}), {arr("m_a", {2, 3})});
  EXPECT_EQ(r.shape, (std::vector<int64_t>{0, 3})) << r.error;
  r = run(tile({-1}), {arr("m_a", {2, 3})});
  EXPECT_NE(r.error.find("kiln_tile: reps[0] = -1 is negative"), std::string::npos) << r.error;
}

// ---- norm ----

TEST_F(Conveniences, NormMatchesJnpLinalgNorm) {
  struct Case {
    const char *ord, *tag;
    std::vector<int> axes; // empty: axis None
  } cases[] = {
      {nullptr, "None_all", {}}, {nullptr, "None_1", {1}}, {nullptr, "None_0", {0}},
      {"1", "1_1", {1}}, {"inf", "inf_0", {0}}, {"-inf", "-inf_1", {1}}, {"0", "0_1", {1}},
      {"3", "3_0", {0}}, {"-1", "-1v_1", {1}}, {"fro", "fro_0_1", {0, 1}}, {"1", "1_0_1", {0, 1}},
      {"-1", "-1_0_1", {0, 1}}, {"inf", "inf_0_1", {0, 1}}, {"-inf", "-inf_1_0", {1, 0}},
      {"1", "1_1_0", {1, 0}},
  };
  Bodies all = [&cases](kiln_trace *t, const std::vector<kiln_val *> &a) {
    std::vector<kiln_val *> out;
    for (const Case &c : cases)
      for (int keep : {0, 1}) {
        int n = c.axes.empty() ? KILN_ALL_AXES : static_cast<int>(c.axes.size());
        out.push_back(kiln_norm(t, a[0], c.ord, n, c.axes.data(), keep));
      }
    return out;
  };
  std::vector<Result> rs = run_all(all, {arr("n_x", {3, 4})});
  ASSERT_EQ(rs.size(), 2 * (sizeof cases / sizeof cases[0]));
  size_t k = 0;
  for (const Case &c : cases) {
    for (int keep : {0, 1}) {
      const Result &r = rs[k++];
      std::string name = std::string("norm_") + c.tag + (keep ? "_k" : "");
      expect_near(r, g.at(name), name);
      // keepdims keeps the reduced axes as 1s.
      size_t rank = keep ? 2 : 2 - (c.axes.empty() ? 2 : c.axes.size());
      EXPECT_EQ(r.shape.size(), rank) << name;
    }
  }
  Body n2 = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    return kiln_norm(t, a[0], nullptr, KILN_ALL_AXES, nullptr, 0);
  };
  expect_near(run(n2, {arr("n_x", {3, 4})}, true), g.at("norm_grad"), "grad of norm(x)");
  Body m1 = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    return kiln_norm(t, a[0], "1", KILN_ALL_AXES, nullptr, 0);
  };
  // Near, not bits: where the cotangent is 0, kiln's abs gives -0 for x < 0, XLA +0.
  expect_near(run(m1, {arr("n_x", {3, 4})}, true), g.at("norm_m1_grad"), "grad of norm(x, 1)");
  // What JAX refuses, and the SVD-based norms kiln lacks.
  auto err = [&](const char *ord, int n) {
    return run([ord, n](kiln_trace *t, const std::vector<kiln_val *> &a) {
      const int axes[3] = {0, 1, 0};
      return kiln_norm(t, a[0], ord, n, axes, 0);
    }, {arr("n_x", {3, 4})}).error;
  };
  EXPECT_NE(err("nuc", 2).find("the nuclear matrix norm needs singular values"), std::string::npos);
  EXPECT_NE(err("2", 2).find("needs singular values"), std::string::npos);
  EXPECT_NE(err("fro", 1).find("invalid order 'fro' for a vector norm"), std::string::npos);
  EXPECT_NE(err("3", 2).find("invalid order '3' for a matrix norm"), std::string::npos);
  EXPECT_NE(err("x", 1).find("invalid order 'x'"), std::string::npos);
  EXPECT_NE(err(nullptr, 3).find("improper number of axes"), std::string::npos);
  // Integers are promoted: norm([3, 4]) = 5.0.
  int32_t v[2] = {3, 4};
  Result r = run(n2, {array(KILN_I32, v, {2})});
  EXPECT_EQ(r.v, std::vector<float>{5.0f}) << r.error;
}

// ---- indexing ----

// The expressions of golden/api_conveniences.py's INDICES, with numpy's shapes.
const std::pair<const char *, std::vector<int64_t>> kIndices[] = {
    {"1", {5, 6}}, {"-1", {5, 6}}, {"1:3", {2, 5, 6}}, {"::-1", {4, 5, 6}}, {"..., 0", {4, 5}},
    {"None, 2, ::2", {1, 3, 6}}, {"1:-1:2, :, -2", {1, 5}}, {"3:0:-2", {2, 5, 6}},
    {"-3:", {3, 5, 6}}, {":, 4:1:-1, 1::2", {4, 3, 3}}, {"2, 1, 0", {}},
    {"::3, None, ..., 5", {2, 1, 5}}, {"10:", {0, 5, 6}}, {"-100:2", {2, 5, 6}},
    {"1, ...", {5, 6}}, {":0", {0, 5, 6}},
};

TEST_F(Conveniences, BasicIndexingMatchesNumpy) {
  Bodies all = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    std::vector<kiln_val *> out;
    for (const auto &ix : kIndices) out.push_back(kiln_getitem(t, a[0], ix.first));
    out.push_back(kiln_index(t, a[0], -1));
    return out;
  };
  std::vector<Result> rs = run_all(all, {arr("ix_x", {4, 5, 6})});
  ASSERT_EQ(rs.size(), sizeof kIndices / sizeof kIndices[0] + 1);
  int n = 0;
  for (const auto &[expr, shape] : kIndices) {
    std::string name = "ix_" + std::to_string(n);
    EXPECT_EQ(rs[n].shape, shape) << expr;
    expect_bits(rs[n++], g.count(name) ? g.at(name) : std::vector<float>{}, std::string("x[") + expr + "]");
  }
  expect_bits(rs[n], g.at("ix_1"), "kiln_index(x, -1)");
  Body sel = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    return kiln_getitem(t, a[0], "1:-1:2, ::-1, -2");
  };
  expect_bits(run(loss(sel), {arr("ix_x", {4, 5, 6}), arr("ix_grad_w", {1, 5})}, true), g.at("ix_grad"),
              "grad of x[1:-1:2, ::-1, -2]");
}

TEST_F(Conveniences, BadIndicesAreRefusedAsNumpyRefusesThem) {
  auto err = [&](const char *expr) {
    return run([expr](kiln_trace *t, const std::vector<kiln_val *> &a) { return kiln_getitem(t, a[0], expr); },
               {arr("ix_x", {4, 5, 6})}).error;
  };
  EXPECT_NE(err("4").find("index 4 is out of bounds for axis 0 with size 4"), std::string::npos);
  EXPECT_NE(err("0, -6").find("index -6 is out of bounds for axis 1 with size 5"), std::string::npos);
  EXPECT_NE(err("0, 0, 0, 0").find("too many indices for f32[4,5,6]: it has 3 dimension(s), but 4"),
            std::string::npos);
  EXPECT_NE(err("::0").find("slice step cannot be zero"), std::string::npos);
  EXPECT_NE(err("..., 1, ...").find("single ellipsis"), std::string::npos);
  EXPECT_NE(err("1:2:3:4").find("cannot parse the index \"1:2:3:4\""), std::string::npos);
  EXPECT_NE(err("a").find("cannot parse"), std::string::npos);
  EXPECT_NE(err("None, None, None, None, None, None").find("gives rank 9"), std::string::npos);
}

// ---- pmap without an axis name ----

kiln_tree *double_it(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_mul(t, x, kiln_scalar_f(t, 2)));
}
kiln_tree *psum_i(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_psum(t, kiln_arg(args, 0), "i"));
}

TEST_F(Conveniences, PmapWithoutAnAxisName) {
  kiln_func *f = nullptr, *pf = nullptr;
  ASSERT_EQ(kiln_func_new(double_it, nullptr, "double", &f), KILN_OK);
  ASSERT_EQ(kiln_pmap(ctx, f, nullptr, 0, nullptr, 0, 0, nullptr, &pf), KILN_OK) << kiln_last_error();
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, pf, nullptr, &j), KILN_OK);
  int n = kiln_device_count(ctx);
  std::vector<float> x(static_cast<size_t>(n) * 2);
  for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>(i);
  kiln_tree *leaf = array(KILN_F32, x.data(), {n, 2});
  kiln_tree *args = kiln_tree_tuple(1, &leaf);
  kiln_tree *out = nullptr;
  kiln_status st = kiln_jit_call(j, args, &out);
  Result r = fetch(st, out);
  ASSERT_EQ(r.error, "");
  for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(r.v[i], 2 * x[i]);
  kiln_jit_free(j);
  kiln_func_free(pf);
  kiln_func_free(f);
  // A collective cannot name the anonymous axis.
  ASSERT_EQ(kiln_func_new(psum_i, nullptr, "psum_i", &f), KILN_OK);
  ASSERT_EQ(kiln_pmap(ctx, f, nullptr, 0, nullptr, 0, 0, nullptr, &pf), KILN_OK);
  ASSERT_EQ(kiln_jit_new(ctx, pf, nullptr, &j), KILN_OK);
  EXPECT_NE(kiln_jit_call(j, args, &out), KILN_OK);
  EXPECT_NE(std::string(kiln_last_error()).find("'i'"), std::string::npos) << kiln_last_error();
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(pf);
  kiln_func_free(f);
}

}  // namespace
