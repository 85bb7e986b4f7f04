// BatchNorm, Embed and MultiHeadDotProductAttention (src/nn, nn.h) against
// flax.linen itself (tests/golden/nn_layers.py): initializers bit for bit
// with the keys Flax hands them, forward passes and jax.grad within float32
// tolerances, BatchNorm's pmean over 4 of 8 CPU devices against jax.pmap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "train_support.h"

namespace {

using Fn = std::function<kiln_tree *(kiln_trace *, const kiln_tree *)>;
using Outs = std::vector<std::vector<float>>;

kiln_tree *call_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  return (*static_cast<Fn *>(user))(t, args);
}

kiln_val *val(const kiln_tree *args, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(args, i))->u.val;
}

// Every array leaf of tree, depth first (dict keys sorted, as JAX flattens).
void leaves(const kiln_tree *tree, Outs *out) {
  if (kiln_array *a = kiln_tree_leaf_array(tree)) {
    std::vector<float> v(static_cast<size_t>(kiln_array_size(a)));
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * 4), KILN_OK) << kiln_last_error();
    out->push_back(v);
    return;
  }
  for (size_t i = 0; i < kiln_tree_num_children(tree); i++) leaves(kiln_tree_child(tree, i), out);
}

// JAX's float32 comparison, with the absolute floor scaled to the array's
// magnitude (gradients that are sums of cancelling terms); NaN matches NaN.
// Returns the largest absolute error.
double expect_near_all(const std::vector<float> &got, const std::vector<float> &want, double rtol,
                       const std::string &what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return INFINITY;
  double scale = 0, worst = 0;
  for (float w : want)
    if (!std::isnan(w)) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
      continue;
    }
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err);
    EXPECT_LE(err, rtol * (scale + std::fabs(want[i])) + 1e-7) << what << " element " << i;
  }
  return worst;
}

void expect_bits(const std::vector<float> &got, const std::vector<float> &want,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what;
  for (size_t i = 0, shown = 0; i < got.size() && shown < 3; i++)
    if (std::memcmp(&got[i], &want[i], 4)) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
      shown++;
    }
}

class NnLayers : public CpuFixture {
 protected:
  void SetUp() override {
    CpuFixture::SetUp();
    g = load_hex_golden("nn_layers.txt");
    ASSERT_FALSE(g.empty()) << "missing tests/golden/nn_layers.txt";
  }
  const std::vector<float> &at(const std::string &name) {
    EXPECT_TRUE(g.count(name)) << "golden " << name;
    return g[name];
  }
  kiln_tree *f32(const std::string &name, std::vector<int64_t> shape) {
    return array(KILN_F32, at(name).data(), shape);
  }
  // A golden record of integers (stored as floats) as int32.
  kiln_tree *i32(const std::string &name, std::vector<int64_t> shape) {
    std::vector<int32_t> v;
    for (float x : at(name)) v.push_back(static_cast<int32_t>(x));
    return array(KILN_I32, v.data(), shape);
  }
  // A golden raw key (two uint32 stored as float bits).
  kiln_tree *key(const std::string &name) { return array(KILN_U32, at(name).data(), {2}); }
  static kiln_tree *dict(std::vector<const char *> keys, std::vector<kiln_tree *> kids) {
    return kiln_tree_dict(keys.size(), keys.data(), kids.data());
  }
  // MultiHeadDotProductAttention's params of golden seed s: Flax's kernels
  // and the biases the golden drew.
  kiln_tree *mha_params(int s, int64_t kv_features) {
    std::string S = std::to_string(s);
    auto sub = [&](const char *name, std::vector<int64_t> kshape, std::vector<int64_t> bshape) {
      return dict({"bias", "kernel"},
                  {f32("mha_p" + S + " " + name + ".bias", bshape),
                   f32("mha_init " + S + " " + name, kshape)});
    };
    return dict({"key", "out", "query", "value"},
                {sub("key", {kv_features, 2, 4}, {2, 4}), sub("out", {2, 4, 3}, {3}),
                 sub("query", {8, 2, 4}, {2, 4}), sub("value", {kv_features, 2, 4}, {2, 4})});
  }
  kiln_tree *bn_vars(kiln_tree **stats) {
    *stats = dict({"mean", "var"}, {f32("bn_mean", {5}), f32("bn_var", {5})});
    return dict({"bias", "scale"}, {f32("bn_bias", {5}), f32("bn_scale", {5})});
  }

  // Jits f (grad_argnums non-empty: kiln_grad of f) on ctx and returns the
  // output leaves; the argument trees are freed.
  Outs run(Fn fn, std::vector<kiln_tree *> args, std::vector<int> grad_argnums = {},
           kiln_ctx *on = nullptr) {
    kiln_func *f = nullptr, *gf = nullptr;
    EXPECT_EQ(kiln_func_new(call_fn, &fn, "nn_layers_case", &f), KILN_OK);
    if (!grad_argnums.empty()) {
      EXPECT_EQ(kiln_grad(f, grad_argnums.data(), static_cast<int>(grad_argnums.size()), 0, &gf),
                KILN_OK) << kiln_last_error();
    }
    Outs outs = call(gf ? gf : f, args, on);
    kiln_func_free(gf);
    kiln_func_free(f);
    return outs;
  }
  Outs call(const kiln_func *f, std::vector<kiln_tree *> args, kiln_ctx *on = nullptr) {
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_jit_new(on ? on : ctx, f, nullptr, &j), KILN_OK);
    kiln_tree *tup = kiln_tree_tuple(args.size(), args.data());
    kiln_tree *out = nullptr;
    Outs outs;
    last = kiln_jit_call(j, tup, &out);
    if (last == KILN_OK) leaves(out, &outs);
    kiln_tree_free(out);
    kiln_tree_free(tup);
    kiln_jit_free(j);
    return outs;
  }
  // Runs fn expecting status s and an error naming every needle.
  void expect_error(Fn fn, std::vector<kiln_tree *> args, kiln_status s,
                    std::vector<std::string> needles) {
    run(fn, args);
    EXPECT_EQ(last, s) << kiln_last_error();
    std::string msg = kiln_last_error();
    for (const std::string &n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' missing from: " << msg;
  }

  std::map<std::string, std::vector<float>> g;
  kiln_status last = KILN_OK;
};

TEST_F(NnLayers, EmbedInitIsFlaxsBitForBit) {
  for (const char *seed : {"0", "1", "42"}) {
    Outs o = run([](kiln_trace *t, const kiln_tree *a) {
      return kiln_nn_embed_init(t, val(a, 0), 10, 6, KILN_F32);
    }, {key(std::string("embed_key ") + seed)});
    ASSERT_EQ(o.size(), 1u) << kiln_last_error();
    expect_bits(o[0], at(std::string("embed_init ") + seed), std::string("embedding ") + seed);
  }
}

TEST_F(NnLayers, EmbedLookupAndAttendMatchFlax) {
  // Ids -1 (the last row, as jnp.take counts it) and 10 (out of range: NaN).
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    kiln_tree *p = dict({"embedding"}, {kiln_tree_val(val(a, 0))});
    kiln_tree *kids[2] = {kiln_tree_val(kiln_nn_embed(t, p, val(a, 1))),
                          kiln_tree_val(kiln_nn_embed_attend(t, p, val(a, 2)))};
    kiln_tree_free(p);
    return kiln_tree_tuple(2, kids);
  }, {f32("embed_init 0", {10, 6}), i32("embed_ids", {2, 4}), f32("embed_q", {3, 6})});
  ASSERT_EQ(o.size(), 2u) << kiln_last_error();
  expect_near_all(o[0], at("embed_y"), 0, "embed lookup");  // rows copied exactly
  printf("embed attend: max abs error %.2g\n",
         expect_near_all(o[1], at("embed_attend"), 1e-6, "embed attend"));
}

// Flax's Embed with num_embeddings 1 broadcasts its one row, whatever the ids.
TEST_F(NnLayers, OneRowEmbedBroadcasts) {
  float row[3] = {1.5f, -2.f, 0.25f};
  int32_t ids[4] = {0, 7, -3, 0};
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    kiln_tree *p = dict({"embedding"}, {kiln_tree_val(val(a, 0))});
    kiln_val *y = kiln_nn_embed(t, p, val(a, 1));
    kiln_tree_free(p);
    return kiln_tree_val(y);
  }, {array(KILN_F32, row, {1, 3}), array(KILN_I32, ids, {2, 2})});
  ASSERT_EQ(o.size(), 1u) << kiln_last_error();
  std::vector<float> want;
  for (int i = 0; i < 4; i++) want.insert(want.end(), row, row + 3);
  EXPECT_EQ(o[0], want);
}

TEST_F(NnLayers, MhaInitIsFlaxsBitForBit) {
  for (int s : {0, 1}) {  // 0: inputs_kv with 6 features, 1: self-attention
    std::string S = std::to_string(s);
    Outs o = run([s](kiln_trace *t, const kiln_tree *a) {
      kiln_val *keys[4] = {val(a, 0), val(a, 1), val(a, 2), val(a, 3)};
      return kiln_nn_mha_init(t, keys, 2, 8, s == 0 ? 6 : 0, 8, 3, KILN_F32);
    }, {key("mha_key " + S + " query"), key("mha_key " + S + " key"),
        key("mha_key " + S + " value"), key("mha_key " + S + " out")});
    // Leaves in order: key {bias, kernel}, out, query, value.
    ASSERT_EQ(o.size(), 8u) << kiln_last_error();
    const char *names[4] = {"key", "out", "query", "value"};
    for (int i = 0; i < 4; i++) {
      expect_bits(o[2 * i + 1], at("mha_init " + S + " " + names[i]), S + " " + names[i]);
      EXPECT_EQ(o[2 * i], std::vector<float>(o[2 * i].size(), 0.f)) << names[i] << " bias";
    }
  }
}

TEST_F(NnLayers, MhaMatchesFlaxWithAndWithoutMasks) {
  int32_t ids[10] = {0};
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    const kiln_tree *p1 = kiln_tree_child(a, 0), *p0 = kiln_tree_child(a, 1);
    kiln_val *xq = val(a, 2), *xkv = val(a, 3), *causal = kiln_nn_causal_mask(t, val(a, 4));
    kiln_val *cross_mask = kiln_gt(t, val(a, 5), kiln_scalar_f(t, 0.5));  // bool
    kiln_val *outs[5] = {kiln_nn_mha(t, p1, xq, nullptr, nullptr),
                         kiln_nn_mha(t, p1, xq, nullptr, causal), causal,
                         kiln_nn_mha(t, p0, xq, xkv, cross_mask),
                         kiln_nn_mha(t, p0, xq, xkv, nullptr)};
    kiln_tree *kids[5];
    for (int i = 0; i < 5; i++) kids[i] = kiln_tree_val(outs[i]);
    return kiln_tree_tuple(5, kids);
  }, {mha_params(1, 8), mha_params(0, 6), f32("mha_xq", {2, 5, 8}), f32("mha_xkv", {2, 7, 6}),
      array(KILN_I32, ids, {2, 5}), f32("mha_cross_mask", {2, 1, 5, 7})});
  ASSERT_EQ(o.size(), 5u) << kiln_last_error();
  const char *want[5] = {"mha_self", "mha_causal", "mha_causal_mask", "mha_cross",
                         "mha_cross_nomask"};
  for (int i = 0; i < 5; i++)
    printf("%s: max abs error %.2g\n", want[i],
           expect_near_all(o[i], at(want[i]), 2e-6, want[i]));
}

TEST_F(NnLayers, MhaGradMatchesJax) {
  // jax.grad of sum(sin(causal self-attention)) in the params and in xq.
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    kiln_val *x = val(a, 1);
    kiln_val *y = kiln_nn_mha(t, kiln_tree_child(a, 0), x, nullptr, kiln_nn_causal_mask(t, val(a, 2)));
    int axes[3] = {0, 1, 2};
    return kiln_tree_val(kiln_reduce_sum(t, kiln_sin(t, y), 3, axes));
  }, {mha_params(1, 8), f32("mha_xq", {2, 5, 8}), array(KILN_I32, std::vector<int32_t>(10).data(), {2, 5})},
      {0, 1});
  ASSERT_EQ(o.size(), 9u) << kiln_last_error();
  const char *names[8] = {"key.bias", "key.kernel", "out.bias", "out.kernel",
                          "query.bias", "query.kernel", "value.bias", "value.kernel"};
  double worst = 0;
  for (int i = 0; i < 8; i++)
    worst = std::max(worst, expect_near_all(o[i], at(std::string("mha_grad ") + names[i]), 1e-5,
                                            names[i]));
  worst = std::max(worst, expect_near_all(o[8], at("mha_grad_x"), 1e-5, "d/dxq"));
  printf("mha grads: max abs error %.2g (largest |grad| ~9.6)\n", worst);
}

TEST_F(NnLayers, BatchNormMatchesFlax) {
  Outs init = run([](kiln_trace *t, const kiln_tree *) {
    kiln_tree *stats = nullptr;
    kiln_tree *kids[2] = {kiln_nn_batchnorm_init(t, 5, KILN_F32, &stats), nullptr};
    kids[1] = stats;
    return kiln_tree_tuple(2, kids);
  }, {});
  ASSERT_EQ(init.size(), 4u) << kiln_last_error();  // bias, scale, mean, var
  for (int i = 0; i < 4; i++)
    EXPECT_EQ(init[i], std::vector<float>(5, i % 2 ? 1.f : 0.f)) << "init leaf " << i;

  kiln_tree *stats = nullptr, *params = bn_vars(&stats);
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    kiln_nn_batchnorm_options train, eval;
    kiln_nn_batchnorm_options_init(&train);
    kiln_nn_batchnorm_options_init(&eval);
    eval.use_running_average = 1;
    const kiln_tree *p = kiln_tree_child(a, 0), *s = kiln_tree_child(a, 1);
    kiln_tree *new_stats = nullptr, *eval_stats = nullptr;
    kiln_val *y = kiln_nn_batchnorm(t, p, s, val(a, 2), &train, &new_stats);
    kiln_val *ye = kiln_nn_batchnorm(t, p, s, val(a, 2), &eval, &eval_stats);
    kiln_tree *kids[4] = {kiln_tree_val(y), new_stats, kiln_tree_val(ye), eval_stats};
    return kiln_tree_tuple(4, kids);
  }, {params, stats, f32("bn_x", {4, 3, 5})});
  ASSERT_EQ(o.size(), 6u) << kiln_last_error();
  double worst = std::max({expect_near_all(o[0], at("bn_y"), 2e-6, "train y"),
                           expect_near_all(o[1], at("bn_new_mean"), 1e-6, "new mean"),
                           expect_near_all(o[2], at("bn_new_var"), 1e-6, "new var"),
                           expect_near_all(o[3], at("bn_eval"), 1e-6, "eval y")});
  printf("batchnorm: max abs error %.2g\n", worst);
  expect_bits(o[4], at("bn_mean"), "eval keeps the mean");
  expect_bits(o[5], at("bn_var"), "eval keeps the var");
}

TEST_F(NnLayers, BatchNormGradMatchesJax) {
  kiln_tree *stats = nullptr, *params = bn_vars(&stats);
  Outs o = run([](kiln_trace *t, const kiln_tree *a) {
    kiln_val *x = val(a, 2);
    kiln_val *y = kiln_nn_batchnorm(t, kiln_tree_child(a, 0), kiln_tree_child(a, 1), x, nullptr,
                                    nullptr);
    int axes[3] = {0, 1, 2};
    return kiln_tree_val(kiln_reduce_sum(t, kiln_mul(t, kiln_sin(t, y), x), 3, axes));
  }, {params, stats, f32("bn_x", {4, 3, 5})}, {0, 2});
  ASSERT_EQ(o.size(), 3u) << kiln_last_error();  // bias, scale, x
  double worst = std::max({expect_near_all(o[0], at("bn_grad_bias"), 1e-5, "d/dbias"),
                           expect_near_all(o[1], at("bn_grad_scale"), 1e-5, "d/dscale"),
                           expect_near_all(o[2], at("bn_grad_x"), 1e-5, "d/dx")});
  printf("batchnorm grads: max abs error %.2g (largest |grad| ~11.5)\n", worst);
}

// BatchNorm(axis_name='batch') under pmap over 4 of 8 CPU devices: the
// batch statistics are one pmean across the devices.
TEST_F(NnLayers, BatchNormAveragesStatisticsAcrossPmapDevices) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  opts.num_cpu_devices = 8;
  kiln_ctx *ctx8 = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx8), KILN_OK) << kiln_last_error();
  kiln_device *devs[4];
  for (int i = 0; i < 4; i++) ASSERT_EQ(kiln_device_get(ctx8, i, &devs[i]), KILN_OK);
  std::swap(ctx, ctx8), dev = devs[0];  // arrays on ctx8's first device
  kiln_tree *stats = nullptr, *params = bn_vars(&stats);
  kiln_tree *x = f32("bnp_x", {4, 6, 5});
  Fn fn = [](kiln_trace *t, const kiln_tree *a) {
    kiln_nn_batchnorm_options o;
    kiln_nn_batchnorm_options_init(&o);
    o.axis_name = "batch";
    kiln_tree *new_stats = nullptr;
    kiln_val *y = kiln_nn_batchnorm(t, kiln_tree_child(a, 1), kiln_tree_child(a, 2), val(a, 0), &o,
                                    &new_stats);
    kiln_tree *kids[2] = {kiln_tree_val(y), new_stats};
    return kiln_tree_tuple(2, kids);
  };
  kiln_func *f = nullptr, *pm = nullptr;
  ASSERT_EQ(kiln_func_new(call_fn, &fn, "bn_pmap", &f), KILN_OK);
  int in_axes[3] = {0, KILN_PMAP_NONE, KILN_PMAP_NONE};
  ASSERT_EQ(kiln_pmap(ctx, f, "batch", 3, in_axes, 0, 4, devs, &pm), KILN_OK) << kiln_last_error();
  Outs o = call(pm, {x, params, stats});
  ASSERT_EQ(o.size(), 3u) << kiln_last_error();  // y [4,6,5], mean [4,5], var [4,5]
  double worst = expect_near_all(o[0], at("bnp_y"), 2e-6, "pmap y");
  for (int d = 0; d < 4; d++) {
    std::vector<float> m(o[1].begin() + 5 * d, o[1].begin() + 5 * d + 5);
    std::vector<float> v(o[2].begin() + 5 * d, o[2].begin() + 5 * d + 5);
    worst = std::max({worst, expect_near_all(m, at("bnp_new_mean"), 1e-6, "pmap mean"),
                      expect_near_all(v, at("bnp_new_var"), 1e-6, "pmap var")});
  }
  printf("batchnorm under pmap: max abs error %.2g\n", worst);
  kiln_func_free(pm), kiln_func_free(f);
  std::swap(ctx, ctx8);
  kiln_ctx_free(ctx8);
}

TEST_F(NnLayers, BadInputsAreClearErrors) {
  float zeros[64] = {0};
  // BatchNorm params for 5 features on x with 4.
  kiln_tree *stats = nullptr, *params = bn_vars(&stats);
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    return kiln_tree_val(kiln_nn_batchnorm(t, kiln_tree_child(a, 0), kiln_tree_child(a, 1),
                                           val(a, 2), nullptr, nullptr));
  }, {params, stats, array(KILN_F32, zeros, {3, 4})}, KILN_ERR_SHAPE,
               {"kiln_nn_batchnorm: params['scale'] is f32[5], want float[4]"});
  // axis_name outside pmap / shard_map.
  params = bn_vars(&stats);
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    kiln_nn_batchnorm_options o;
    kiln_nn_batchnorm_options_init(&o);
    o.axis_name = "batch";
    return kiln_tree_val(kiln_nn_batchnorm(t, kiln_tree_child(a, 0), kiln_tree_child(a, 1),
                                           val(a, 2), &o, nullptr));
  }, {params, stats, array(KILN_F32, zeros, {3, 5})}, KILN_ERR_ARGUMENT,
               {"unbound axis name 'batch'", "no enclosing shard_map or pmap"});
  // Float ids.
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    kiln_tree *p = dict({"embedding"}, {kiln_tree_val(val(a, 0))});
    kiln_val *y = kiln_nn_embed(t, p, val(a, 1));
    kiln_tree_free(p);
    return kiln_tree_val(y);
  }, {array(KILN_F32, zeros, {4, 3}), array(KILN_F32, zeros, {2})}, KILN_ERR_DTYPE,
               {"kiln_nn_embed: ids must be integers, got f32[2]"});
  // attend on a query of the wrong width.
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    kiln_tree *p = dict({"embedding"}, {kiln_tree_val(val(a, 0))});
    kiln_val *y = kiln_nn_embed_attend(t, p, val(a, 1));
    kiln_tree_free(p);
    return kiln_tree_val(y);
  }, {array(KILN_F32, zeros, {4, 3}), array(KILN_F32, zeros, {2, 5})}, KILN_ERR_SHAPE,
               {"kiln_nn_embed_attend: query f32[2,5]", "f32[4,3]"});
  // MHA: a mask that does not broadcast, kv of the wrong width, a missing param.
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    return kiln_tree_val(kiln_nn_mha(t, kiln_tree_child(a, 0), val(a, 1), nullptr, val(a, 2)));
  }, {mha_params(1, 8), f32("mha_xq", {2, 5, 8}), array(KILN_F32, zeros, {2, 1, 5, 4})},
               KILN_ERR_SHAPE, {"kiln_nn_mha: mask f32[2,1,5,4] does not fit", "f32[2,2,5,5]"});
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    return kiln_tree_val(kiln_nn_mha(t, kiln_tree_child(a, 0), val(a, 1), val(a, 2), nullptr));
  }, {mha_params(1, 8), f32("mha_xq", {2, 5, 8}), f32("mha_xkv", {2, 7, 6})}, KILN_ERR_SHAPE,
               {"kiln_nn_mha: params['key']['kernel'] is f32[8,2,4], want float[6,2,4]"});
  expect_error([](kiln_trace *t, const kiln_tree *a) {
    return kiln_tree_val(kiln_nn_mha(t, kiln_tree_child(a, 0), val(a, 1), nullptr, nullptr));
  }, {dict({"query"}, {dict({"kernel"}, {array(KILN_F32, zeros, {8, 2, 4})})}),
      f32("mha_xq", {2, 5, 8})}, KILN_ERR_TREE,
               {"kiln_nn_mha: params['key']['kernel'] is missing", "want float[8,2,4]"});
}

}  // namespace
