// Layers and initializers (src/nn, nn.h) against Flax and optax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "train_support.h"
#include "kiln/nn.h"

namespace {


using Body = std::function<kiln_val *(kiln_trace *, const std::vector<kiln_val *> &)>;

kiln_tree *run_body(kiln_trace *t, const kiln_tree *args, void *user) {
  std::vector<kiln_val *> in;
  for (size_t i = 0; i < kiln_tree_num_children(args); i++)
    in.push_back(kiln_tree_leaf_get(kiln_tree_child(args, i))->u.val);
  kiln_val *v = (*static_cast<Body *>(user))(t, in);
  return v ? kiln_tree_val(v) : nullptr;
}

class Nn : public CpuFixture {
 protected:
  void SetUp() override {
    CpuFixture::SetUp();
    g = load_hex_golden("nn.txt");
    ASSERT_FALSE(g.empty()) << "missing tests/golden/nn.txt";
  }
  kiln_tree *key(uint32_t seed) {
    uint32_t k[2] = {0, seed};
    return array(KILN_U32, k, {2});
  }
  // Jits body over the argument leaves and returns its f32 output.
  std::vector<float> run(Body body, std::vector<kiln_tree *> args) {
    kiln_func *f = nullptr;
    EXPECT_EQ(kiln_func_new(run_body, &body, "nn_case", &f), KILN_OK);
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK);
    kiln_tree *tup = kiln_tree_tuple(args.size(), args.data());
    kiln_tree *out = nullptr;
    std::vector<float> v;
    EXPECT_EQ(kiln_jit_call(j, tup, &out), KILN_OK) << kiln_last_error();
    if (out) {
      kiln_array *a = kiln_tree_leaf_array(out);
      v.resize(static_cast<size_t>(kiln_array_size(a)));
      EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * 4), KILN_OK);
    }
    kiln_tree_free(out);
    kiln_tree_free(tup);
    kiln_jit_free(j);
    kiln_func_free(f);
    return v;
  }
  static kiln_tree *params2(kiln_trace *, const char *k0, kiln_val *v0, const char *k1, kiln_val *v1) {
    const char *keys[2] = {k0, k1};
    kiln_tree *kids[2] = {kiln_tree_val(v0), kiln_tree_val(v1)};
    return kiln_tree_dict(2, keys, kids);
  }

  std::map<std::string, std::vector<float>> g;
};

void expect_bits(const std::vector<float> &got, const std::vector<float> &want, const std::string &w) {
  ASSERT_EQ(got.size(), want.size()) << w;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << w;
  for (size_t i = 0; i < got.size() && i < 4; i++) EXPECT_EQ(got[i], want[i]) << w << " at " << i;
}


TEST_F(Nn, InitializersAreJaxsBitForBit) {
  for (uint32_t seed : {0u, 1u, 42u}) {
    std::string s = std::to_string(seed);
    expect_bits(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                  kiln_tree *p = kiln_nn_dense_init(t, a[0], 4, 5, KILN_F32);
                  kiln_val *k = p ? kiln_tree_leaf_get(kiln_tree_get(p, "kernel"))->u.val : nullptr;
                  kiln_tree_free(p);
                  return k;
                }, {key(seed)}),
                g.at("lecun " + s), "dense kernel " + s);
    expect_bits(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                  const int64_t shape[4] = {3, 3, 2, 4};
                  return kiln_nn_lecun_normal(t, a[0], KILN_F32, 4, shape);
                }, {key(seed)}),
                g.at("lecun3 " + s), "lecun_normal conv kernel " + s);
    expect_bits(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                  const int64_t n = 7;
                  return kiln_nn_truncated_normal(t, a[0], -2, 2, KILN_F32, 1, &n);
                }, {key(seed)}),
                g.at("trunc " + s), "truncated_normal " + s);
  }
  std::vector<float> bias = run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
    kiln_tree *p = kiln_nn_dense_init(t, a[0], 4, 5, KILN_F32);
    kiln_val *b = p ? kiln_tree_leaf_get(kiln_tree_get(p, "bias"))->u.val : nullptr;
    kiln_tree_free(p);
    return b;
  }, {key(0)});
  EXPECT_EQ(bias, std::vector<float>(5, 0.f));
}

TEST_F(Nn, DenseAndLayerNormMatchFlax) {
  std::vector<float> bias(5), lb(6), ls(6);
  for (int i = 0; i < 5; i++) bias[i] = static_cast<float>(i) * 0.1f;
  for (int i = 0; i < 6; i++) lb[i] = static_cast<float>(i) * 0.1f, ls[i] = 1 + static_cast<float>(i) * 0.05f;
  expect_close(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                 kiln_tree *p = params2(t, "bias", a[1], "kernel", a[2]);
                 kiln_val *y = kiln_nn_dense(t, p, a[0]);
                 kiln_tree_free(p);
                 return y;
               }, {array(KILN_F32, g.at("dense_x").data(), {2, 4}), array(KILN_F32, bias.data(), {5}),
                   array(KILN_F32, g.at("lecun 0").data(), {4, 5})}),
               g.at("dense_y"), "dense");
  expect_close(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                 kiln_tree *p = params2(t, "bias", a[1], "scale", a[2]);
                 kiln_val *y = kiln_nn_layernorm(t, p, a[0], 1e-6);
                 kiln_tree_free(p);
                 return y;
               }, {array(KILN_F32, g.at("ln_x").data(), {3, 6}), array(KILN_F32, lb.data(), {6}),
                   array(KILN_F32, ls.data(), {6})}),
               g.at("ln_y"), "layernorm");
}

// flax.linen.Conv: its initializer is lecun_normal over the HWIO kernel (the
// golden's lecun3), and SAME / strided VALID convolutions plus the bias.
TEST_F(Nn, ConvMatchesFlax) {
  for (uint32_t seed : {0u, 1u, 42u})
    expect_bits(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                  const int64_t ks[2] = {3, 3};
                  kiln_tree *p = kiln_nn_conv_init(t, a[0], 2, ks, 2, 4, KILN_F32);
                  kiln_val *k = p ? kiln_tree_leaf_get(kiln_tree_get(p, "kernel"))->u.val : nullptr;
                  kiln_tree_free(p);
                  return k;
                }, {key(seed)}),
                g.at("lecun3 " + std::to_string(seed)), "conv kernel " + std::to_string(seed));
  std::vector<float> bias(4);
  for (int i = 0; i < 4; i++) bias[i] = static_cast<float>(i) * 0.1f;
  for (const char *padding : {"SAME", "VALID"}) {
    Body body = [padding](kiln_trace *t, const std::vector<kiln_val *> &a) {
      kiln_tree *p = params2(t, "bias", a[1], "kernel", a[2]);
      const int64_t strides[2] = {2, 2};
      bool same = std::string(padding) == "SAME";
      kiln_val *y = kiln_nn_conv(t, p, a[0], same ? nullptr : strides, padding);
      kiln_tree_free(p);
      return y;
    };
    std::vector<float> got = run(body, {array(KILN_F32, g.at("conv_x").data(), {2, 5, 6, 3}),
                                        array(KILN_F32, bias.data(), {4}),
                                        array(KILN_F32, g.at("conv_kernel").data(), {3, 3, 3, 4})});
    const std::vector<float> &want =
        g.at(std::string("conv_") + (padding[0] == 'S' ? "same" : "valid"));
    ASSERT_EQ(got.size(), want.size()) << padding;
    for (size_t i = 0; i < got.size(); i++)  // sums of 27 products in another order
      EXPECT_NEAR(got[i], want[i], 2e-6 + 1e-5 * std::fabs(want[i])) << padding << " element " << i;
  }
}

TEST_F(Nn, DropoutAndCrossEntropy) {
  std::vector<float> x(20);
  for (int i = 0; i < 20; i++) x[i] = 1 + static_cast<float>(i % 5);
  expect_close(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                 return kiln_nn_dropout(t, a[0], a[1], 0.3, 0);
               }, {key(3), array(KILN_F32, x.data(), {4, 5})}),
               g.at("dropout"), "dropout");
  expect_close(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                 return kiln_nn_dropout(t, a[0], a[1], 0.3, 1);
               }, {key(3), array(KILN_F32, x.data(), {4, 5})}),
               x, "deterministic dropout");
  std::vector<int32_t> labels;
  for (float l : g.at("xent_labels")) labels.push_back(static_cast<int32_t>(l));
  expect_close(run([](kiln_trace *t, const std::vector<kiln_val *> &a) {
                 return kiln_nn_softmax_cross_entropy(t, a[0], a[1]);
               }, {array(KILN_F32, g.at("xent_logits").data(), {4, 10}),
                   array(KILN_I32, labels.data(), {4})}),
               g.at("xent"), "softmax cross-entropy");
}

TEST_F(Nn, MissingParamIsATreeErrorNamingTheKey) {
  kiln_func *f = nullptr;
  Body body = [](kiln_trace *t, const std::vector<kiln_val *> &a) {
    kiln_tree *p = params2(t, "bias", a[1], "kern", a[1]);
    kiln_val *y = kiln_nn_dense(t, p, a[0]);
    kiln_tree_free(p);
    return y;
  };
  ASSERT_EQ(kiln_func_new(run_body, &body, "bad_dense", &f), KILN_OK);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK);
  float v[4] = {0};
  kiln_tree *kids[2] = {array(KILN_F32, v, {1, 4}), array(KILN_F32, v, {4})};
  kiln_tree *args = kiln_tree_tuple(2, kids);
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_ERR_TREE);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_nn_dense: params has no traced ['kernel']"),
            std::string::npos) << kiln_last_error();
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
}

}  // namespace
