// kiln_vmap through the public API under kiln_jit against JAX
// (golden/transform_vmap.py): every batching rule with mapped axes at 0, 1,
// -1 and None, out_axes, nested vmap, vmap of grad (per-example gradients),
// axis_size, and bad in_axes/out_axes.
#include <functional>

#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

constexpr int kNone = 99;  // None in the golden in_axes/out_axes lines
const char kFile[] = "transform_vmap.txt";

const GoldenArray &V(const std::string &c, const std::string &n) { return G(c, n, kFile); }

using Args = std::vector<kiln_val *>;
using PerExample = std::function<kiln_val *(kiln_trace *, const Args &)>;

kiln_val *Sc(kiln_trace *t, double v) { return kiln_scalar(t, KILN_F32, v); }

// The kiln twin of each per-example function of transform_vmap.py.
const std::map<std::string, PerExample> &Ops() {
  static const std::map<std::string, PerExample> m = [] {
    std::map<std::string, PerExample> o;
#define KILN_UNARY_OP(name) o[#name] = [](kiln_trace *t, const Args &a) { return kiln_##name(t, a[0]); };
#define KILN_BINARY_OP(name) o[#name] = [](kiln_trace *t, const Args &a) { return kiln_##name(t, a[0], a[1]); };
#include "kiln/ops.def"
#undef KILN_UNARY_OP
#undef KILN_BINARY_OP
    o["mul_scalar"] = o["mul"];
    o["lt"] = [](kiln_trace *t, const Args &a) { return kiln_convert(t, kiln_lt(t, a[0], a[1]), KILN_F32); };
    o["where"] = [](kiln_trace *t, const Args &a) {
      return kiln_where(t, kiln_gt(t, a[0], Sc(t, 0)), a[0], a[1]);
    };
    o["select_scalar"] = [](kiln_trace *t, const Args &a) {
      kiln_val *cases[2] = {a[2], a[1]};
      return kiln_select_n(t, kiln_gt(t, a[0], Sc(t, 0)), 2, cases);
    };
    o["clamp"] = [](kiln_trace *t, const Args &a) {
      return kiln_clamp(t, kiln_sub(t, a[0], Sc(t, 1)), a[1], kiln_add(t, a[2], Sc(t, 1)));
    };
    o["convert"] = [](kiln_trace *t, const Args &a) {
      return kiln_convert(t, kiln_convert(t, a[0], KILN_I32), KILN_F32);
    };
    o["iota_add"] = [](kiln_trace *t, const Args &a) {
      int64_t s[2] = {3, 4};
      return kiln_add(t, a[0], kiln_iota(t, KILN_F32, 2, s, 1));
    };
    static const int ax0[1] = {0}, ax1[1] = {1};
    o["reduce_sum"] = [](kiln_trace *t, const Args &a) { return kiln_reduce_sum(t, a[0], 1, ax1); };
    o["reduce_max"] = [](kiln_trace *t, const Args &a) { return kiln_reduce_max(t, a[0], 1, ax0); };
    o["reduce_min"] = [](kiln_trace *t, const Args &a) { return kiln_reduce_min(t, a[0], 1, ax1); };
    o["reduce_prod"] = [](kiln_trace *t, const Args &a) { return kiln_reduce_prod(t, a[0], 1, ax0); };
    o["argmax"] = [](kiln_trace *t, const Args &a) {
      return kiln_convert(t, kiln_argmax(t, a[0], 1, KILN_I32), KILN_F32);
    };
    o["argmin"] = [](kiln_trace *t, const Args &a) {
      return kiln_convert(t, kiln_argmin(t, a[0], 0, KILN_I32), KILN_F32);
    };
    o["cumsum"] = [](kiln_trace *t, const Args &a) { return kiln_cumsum(t, a[0], 0, 0); };
    o["cumprod"] = [](kiln_trace *t, const Args &a) { return kiln_cumprod(t, a[0], 1, 0); };
    o["cummax"] = [](kiln_trace *t, const Args &a) { return kiln_cummax(t, a[0], 0, 1); };
    o["sort"] = [](kiln_trace *t, const Args &a) { return kiln_sort(t, a[0], 1, nullptr); };
    o["matmul"] = [](kiln_trace *t, const Args &a) { return kiln_matmul(t, a[0], a[1]); };
    o["dot_batch"] = [](kiln_trace *t, const Args &a) {
      kiln_dot_dims d = {};
      d.n_contract = 1, d.lhs_contract[0] = 2, d.rhs_contract[0] = 1;
      d.n_batch = 1, d.lhs_batch[0] = 0, d.rhs_batch[0] = 0;
      return kiln_dot_general(t, a[0], a[1], &d, KILN_INVALID_DTYPE);
    };
    o["broadcast_in_dim"] = [](kiln_trace *t, const Args &a) {
      int64_t s[3] = {5, 3, 4};
      int d[2] = {1, 2};
      return kiln_broadcast_in_dim(t, a[0], 3, s, d);
    };
    o["reshape"] = [](kiln_trace *t, const Args &a) {
      int64_t s[2] = {4, 3};
      return kiln_reshape(t, a[0], 2, s);
    };
    o["transpose"] = [](kiln_trace *t, const Args &a) {
      int p[2] = {1, 0};
      return kiln_transpose(t, a[0], p);
    };
    o["expand_dims"] = [](kiln_trace *t, const Args &a) { return kiln_expand_dims(t, a[0], 1, ax1); };
    o["squeeze"] = [](kiln_trace *t, const Args &a) { return kiln_squeeze(t, a[0], 1, ax1); };
    o["rev"] = [](kiln_trace *t, const Args &a) { return kiln_rev(t, a[0], 1, ax0); };
    o["slice"] = [](kiln_trace *t, const Args &a) {
      int64_t lo[2] = {1, 0}, hi[2] = {3, 4}, st[2] = {1, 2};
      return kiln_slice(t, a[0], lo, hi, st);
    };
    o["pad"] = [](kiln_trace *t, const Args &a) {
      int64_t lo[2] = {1, 0}, hi[2] = {0, 2}, in[2] = {0, 1};
      return kiln_pad(t, a[0], Sc(t, 0.5), lo, hi, in);
    };
    o["dynamic_slice"] = [](kiln_trace *t, const Args &a) {
      kiln_val *s[2] = {I32(t, 1), I32(t, 1)};
      int64_t sz[2] = {2, 2};
      return kiln_dynamic_slice(t, a[0], s, sz);
    };
    o["concatenate"] = [](kiln_trace *t, const Args &a) {
      kiln_val *xs[2] = {a[0], a[1]};
      return kiln_concatenate(t, 2, xs, 0);
    };
    o["dynamic_update_slice"] = [](kiln_trace *t, const Args &a) {
      kiln_val *s[2] = {I32(t, 1), I32(t, 2)};
      return kiln_dynamic_update_slice(t, a[0], a[1], s);
    };
    auto idx = [](kiln_trace *t, kiln_val *i) { return kiln_convert(t, i, KILN_I32); };
    o["take"] = [=](kiln_trace *t, const Args &a) { return kiln_take(t, a[0], idx(t, a[1]), 0); };
    o["take_along_axis"] = [=](kiln_trace *t, const Args &a) {
      return kiln_take_along_axis(t, a[0], idx(t, a[1]), 1);
    };
    o["scatter_add"] = [=](kiln_trace *t, const Args &a) {
      return kiln_scatter_add(t, a[0], idx(t, a[1]), a[2], 0);
    };
    o["dynamic_slice_idx"] = [=](kiln_trace *t, const Args &a) {
      kiln_val *s[2] = {idx(t, a[1]), idx(t, a[2])};
      int64_t sz[2] = {2, 2};
      return kiln_dynamic_slice(t, a[0], s, sz);
    };
    return o;
  }();
  return m;
}

kiln_tree *Apply(kiln_trace *t, const kiln_tree *a, void *u) {
  Args args;
  for (size_t i = 0; i < kiln_tree_num_children(a); i++) args.push_back(ArgVal(a, i));
  return kiln_tree_val((*(const PerExample *)u)(t, args));
}

// An in_axes/out_axes tree from the golden axes (99 is None).
kiln_tree *Axes(const GoldenArray &g, bool tuple) {
  std::vector<kiln_tree *> c;
  for (float a : g.v) c.push_back(a == kNone ? kiln_tree_none() : kiln_axis((int)a));
  if (tuple) return Tuple(c);
  return c[0];
}

TEST(Vmap, EveryBatchingRuleMatchesJaxForEachInAxesPlacement) {
  Ctx c;
  int cases = 0;
  for (const auto &[key, arr] : Golden(kFile)) {
    size_t at = key.find('@'), slash = key.rfind('/');
    if (at == std::string::npos || key.substr(slash + 1) != "y") continue;
    std::string name = key.substr(0, slash), op = key.substr(0, at);
    SCOPED_TRACE(name);
    auto it = Ops().find(op);
    ASSERT_NE(it, Ops().end()) << op;
    Func f(Apply, (void *)&it->second, op.c_str());
    kiln_tree *in = Axes(V(name, "in_axes"), true), *out = Axes(V(name, "out_axes"), false);
    kiln_func *v = nullptr;
    ASSERT_EQ(kiln_vmap(f.f, in, out, 0, "batch", &v), KILN_OK) << kiln_last_error();
    kiln_tree_free(in);
    kiln_tree_free(out);
    Func vf(v);
    std::vector<kiln_tree *> args;
    for (size_t i = 0; i < V(name, "in_axes").v.size(); i++)
      args.push_back(Leaf(c.dev, V(name, "a" + std::to_string(i))));
    kiln_tree *res = Jit(c, v, Tuple(args));
    if (res) {
      kiln_array *a = kiln_tree_leaf_array(res);
      ASSERT_NE(a, nullptr);
      std::vector<int64_t> shape(kiln_array_rank(a));
      for (size_t d = 0; d < shape.size(); d++) shape[d] = kiln_array_shape(a)[d];
      EXPECT_EQ(shape, arr.shape);
      ExpectNear(Values<float>(res), arr, name);
    }
    kiln_tree_free(res);
    cases++;
  }
  EXPECT_GT(cases, 200);
}

}  // namespace
