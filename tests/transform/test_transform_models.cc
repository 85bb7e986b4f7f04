// Whole-program gradients through the public API under kiln_jit against
// jax.value_and_grad (golden/transform_models.py): the models of
// grad_models.c that bench/grad times (an MLP, a CNN with max-pool, a
// 2-layer transformer block: layernorm, causal attention, GELU, residuals),
// with respect to every parameter and the input (the transformer also
// with its layers under kiln_checkpoint); and bf16 gradients of a
// few primitives with JAX's bf16 tolerance. (The scan RNN's gradient is in
// test_transform_control.cc.)
#include "grad_models.h"
#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "transform_models.txt";
const GoldenArray &M(const std::string &c, const std::string &n) { return G(c, n, kFile); }

// |got - want| <= tol (1 + |want|), f32 (1e-4: a 2-layer block's gradient
// sums many products) or bf16 (JAX's 1e-2)
void Close(const std::vector<float> &got, const GoldenArray &want, double tol,
           const std::string &what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isinf(want.v[i]))  // log1p's derivative at -1 in bf16
      EXPECT_EQ(got[i], want.v[i]) << what << " [" << i << "]";
    else
      EXPECT_NEAR(got[i], want.v[i], tol * (1 + std::fabs(want.v[i]))) << what << " [" << i << "]";
  }
}

struct Model {
  std::string name;
  kiln_fn loss;
  std::vector<std::string> leaves;  // the params' golden names, flattened
  void *user = nullptr;
};

kiln_tree *Params(Ctx &c, const Model &m) {
  std::vector<kiln_tree *> v;
  if (m.name != "transformer") {
    for (const std::string &n : m.leaves) v.push_back(Leaf(c.dev, M(m.name, n)));
    return Tuple(v);
  }
  for (int l = 0; l < 2; l++) {
    std::vector<kiln_tree *> layer;
    for (const char *n : kGradModelsLayerLeaves)
      layer.push_back(Leaf(c.dev, M(m.name, "l" + std::to_string(l) + "_" + n)));
    v.push_back(Tuple(layer));
  }
  return Tuple(v);
}

std::vector<std::string> Leaves(const std::string &model, int n) {
  std::vector<std::string> v;
  if (model == "transformer") {
    for (int l = 0; l < 2; l++)
      for (const char *k : kGradModelsLayerLeaves) v.push_back("l" + std::to_string(l) + "_" + k);
  } else {
    for (int i = 0; i < n; i++) v.push_back("p" + std::to_string(i));
  }
  return v;
}

// The i-th leaf of a tree in depth-first order.
const kiln_tree *NthLeaf(const kiln_tree *t, size_t &i) {
  if (kiln_tree_leaf_get(t)) return i-- == 0 ? t : nullptr;
  for (size_t k = 0; k < kiln_tree_num_children(t); k++)
    if (const kiln_tree *r = NthLeaf(kiln_tree_child(t, k), i)) return r;
  return nullptr;
}

class Models : public ::testing::TestWithParam<kiln_executor> {};

TEST_P(Models, ValueAndGradMatchJax) {
  Ctx c(GetParam());
  // the transformer also with each layer under kiln_checkpoint: the same values
  kiln_remat_policy remat = KILN_REMAT_NOTHING_SAVEABLE;
  const Model models[] = {{"mlp", grad_models_mlp_loss, Leaves("mlp", 4)},
                          {"cnn", grad_models_cnn_loss, Leaves("cnn", 6)},
                          {"transformer", grad_models_transformer_loss, Leaves("transformer", 0)},
                          {"transformer", grad_models_transformer_loss, Leaves("transformer", 0),
                           &remat}};
  for (const Model &m : models) {
    SCOPED_TRACE(m.name + (m.user ? " (remat)" : ""));
    Func f(m.loss, m.user, m.name.c_str());
    kiln_func *vg = nullptr;
    int argnums[2] = {0, 1};
    ASSERT_EQ(kiln_value_and_grad(f.f, argnums, 2, 0, &vg), KILN_OK) << kiln_last_error();
    Func vgf(vg);
    kiln_tree *out = Jit(c, vg, Tuple({Params(c, m), Leaf(c.dev, M(m.name, "x")),
                                       Leaf(c.dev, M(m.name, "target"))}));
    ASSERT_NE(out, nullptr);
    Close(Values<float>(kiln_tree_child(out, 0)), M(m.name, "loss"), 1e-5, "loss");
    const kiln_tree *g = kiln_tree_child(out, 1);
    for (size_t i = 0; i < m.leaves.size(); i++) {
      size_t k = i;
      const kiln_tree *leaf = NthLeaf(kiln_tree_child(g, 0), k);
      ASSERT_NE(leaf, nullptr) << m.leaves[i];
      Close(Values<float>(leaf), M(m.name, "g_" + m.leaves[i]), 1e-4, m.leaves[i]);
    }
    Close(Values<float>(kiln_tree_child(g, 1)), M(m.name, "g_x"), 1e-4, "g_x");
    kiln_tree_free(out);
  }
}

// The attention scores q . transpose(k) and their gradients run as GEMMs on
// the operands as stored: kir_simplify folds every transpose into the
// dot_generals' dimension numbers, so the compiled plan copies none (the
// layers under kiln_checkpoint too).
TEST(Models, TransformerGradientMaterialisesNoTranspose) {
  kiln_remat_policy remat = KILN_REMAT_NOTHING_SAVEABLE;
  for (void *user : {(void *)nullptr, (void *)&remat}) {
    SCOPED_TRACE(user ? "remat" : "no remat");
    Ctx c;
    Model m{"transformer", grad_models_transformer_loss, Leaves("transformer", 0)};
    Func f(m.loss, user, "transformer");
    kiln_func *vg = nullptr;
    int argnums[2] = {0, 1};
    ASSERT_EQ(kiln_value_and_grad(f.f, argnums, 2, 0, &vg), KILN_OK) << kiln_last_error();
    Func vgf(vg);
    kiln_tree *args =
        Tuple({Params(c, m), Leaf(c.dev, M(m.name, "x")), Leaf(c.dev, M(m.name, "target"))});
    kiln_jit *j = nullptr;
    kiln_lowered *l = nullptr;
    kiln_compiled *cc = nullptr;
    char *text = nullptr;
    ASSERT_EQ(kiln_jit_new(c.ctx, vg, nullptr, &j), KILN_OK);
    ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_lowered_compile(l, &cc), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_compiled_as_text(cc, &text), KILN_OK);
    std::string plan(text);
    free(text);
    std::string groups = plan.substr(0, plan.find("\nslot"));
    EXPECT_EQ(groups.find("transpose#"), std::string::npos) << groups;
    EXPECT_NE(groups.find("DOT"), std::string::npos) << groups;
    kiln_compiled_free(cc);
    kiln_lowered_free(l);
    kiln_jit_free(j);
    kiln_tree_free(args);
  }
}

// ---- bf16: x (f32) converted to bf16, op, times c in bf16, summed in f32 ----

using Op = kiln_val *(*)(kiln_trace *, kiln_val *);
kiln_val *Cube(kiln_trace *t, kiln_val *x) { return kiln_mul(t, kiln_mul(t, x, x), x); }
kiln_val *Softmax(kiln_trace *t, kiln_val *x) { return kiln_softmax(t, x, 1, nullptr); }
kiln_val *RsqrtSq(kiln_trace *t, kiln_val *x) {
  return kiln_rsqrt(t, kiln_add(t, kiln_mul(t, x, x), kiln_scalar(t, KILN_BF16, 1)));
}

kiln_tree *Bf16Loss(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *y = ((Op)u)(t, kiln_convert(t, ArgVal(a, 0), KILN_BF16));
  y = kiln_mul(t, y, kiln_convert(t, ArgVal(a, 1), KILN_BF16));
  return kiln_tree_val(SumAll(t, kiln_convert(t, y, KILN_F32)));
}

TEST_P(Models, Bf16GradientsMatchJaxWithinItsTolerance) {
  Ctx c(GetParam());
  const std::pair<const char *, Op> ops[] = {
      {"tanh", kiln_tanh},        {"exp", kiln_exp},          {"logistic", kiln_logistic},
      {"log1p", kiln_log1p},      {"square_mul", Cube},       {"softmax", Softmax},
      {"rsqrt", RsqrtSq}};
  for (const auto &[name, op] : ops) {
    std::string cs = std::string("bf16_") + name;
    SCOPED_TRACE(cs);
    Func f(Bf16Loss, (void *)op, cs.c_str());
    kiln_func *g = nullptr;
    ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK);
    Func gf(g);
    kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, M(cs, "x")), Leaf(c.dev, M(cs, "c"))}));
    if (out) Close(Values<float>(out), M(cs, "vjp"), 1e-2, cs);
    kiln_tree_free(out);
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, Models,
                         ::testing::Values(KILN_EXECUTOR_FUSED, KILN_EXECUTOR_REFERENCE));

}  // namespace
