// Optimizers and schedules (src/nn, optim.h) against optax, step by step,
// through jitted init and update functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "train_support.h"
#include "kiln/optim.h"

namespace {

// tests/golden/optim.txt, records keyed by their leading words.

int only_w(const kiln_path *p, void *) {
  return p->len == 1 && p->keys[0].name && std::strcmp(p->keys[0].name, "w") == 0;
}

// The optimizers of optim.py, by name.
std::map<std::string, kiln_optimizer> optimizers() {
  kiln_schedule linear = kiln_linear_schedule(0.1, 0.01, 4, 1);
  kiln_schedule stair = kiln_exponential_decay(0.1, 2, 0.5, 1, 1, 0.03);
  kiln_schedule cosine = kiln_cosine_decay_schedule(0.1, 5, 0.1, 1.0);
  kiln_schedule warm = kiln_warmup_cosine_decay_schedule(0.0, 1e-2, 2, 6, 1e-3, 1.0);
  std::map<std::string, kiln_optimizer> o;
  o["sgd"] = kiln_sgd(kiln_constant_schedule(0.1), 0, 0);
  o["sgd_momentum"] = kiln_sgd(kiln_constant_schedule(0.05), 0.9, 0);
  o["sgd_nesterov"] = kiln_sgd(kiln_constant_schedule(0.05), 0.9, 1);
  o["sgd_linear"] = kiln_sgd(linear, 0, 0);
  o["sgd_exponential"] = kiln_sgd(stair, 0, 0);
  o["sgd_cosine"] = kiln_sgd(cosine, 0.5, 0);
  o["adam"] = kiln_adam(kiln_constant_schedule(1e-2), 0.9, 0.999, 1e-8);
  o["adam_b"] = kiln_adam(kiln_constant_schedule(3e-2), 0.5, 0.9, 1e-3);
  o["adamw"] = kiln_adamw(kiln_constant_schedule(1e-2), 0.9, 0.999, 1e-8, 1e-2);
  o["adamw_mask"] = kiln_adamw(kiln_constant_schedule(1e-2), 0.9, 0.999, 1e-8, 0.1);
  o["adamw_mask"].mask = only_w;
  o["rmsprop"] = kiln_rmsprop(kiln_constant_schedule(1e-2), 0.9, 1e-8);
  o["rmsprop_momentum"] = kiln_rmsprop(kiln_constant_schedule(1e-2), 0.8, 1e-6);
  o["rmsprop_momentum"].momentum = 0.9;
  o["clip_adam_warmup"] = kiln_adam(warm, 0.9, 0.999, 1e-8);
  o["clip_adam_warmup"].clip_norm = 1.0;
  o["clip_sgd"] = kiln_sgd(kiln_constant_schedule(0.1), 0, 0);
  o["clip_sgd"].clip_norm = 0.5;
  return o;
}

kiln_tree *init_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_optim_init(t, static_cast<const kiln_optimizer *>(user), args);
}

// (params, state, grads) -> (params, state)
kiln_tree *step_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const kiln_tree *params = kiln_tree_child(args, 0);
  kiln_tree *state = nullptr;
  kiln_tree *u = kiln_optim_update(t, static_cast<const kiln_optimizer *>(user),
                                   kiln_tree_child(args, 2), kiln_tree_child(args, 1), params, &state);
  kiln_tree *p = u ? kiln_apply_updates(t, params, u) : nullptr;
  kiln_tree_free(u);
  if (!p || !state) {
    kiln_tree_free(p);
    kiln_tree_free(state);
    return nullptr;
  }
  kiln_tree *kids[2] = {p, state};
  return kiln_tree_tuple(2, kids);
}

class Optim : public CpuFixture {
 protected:
  void SetUp() override {
    CpuFixture::SetUp();
    golden = load_hex_golden("optim.txt");
    ASSERT_FALSE(golden.empty()) << "missing tests/golden/optim.txt";
  }
  // {'b': f32[3], 'w': f32[2,3]} from 9 values, b first (flatten order).
  kiln_tree *params_tree(const std::vector<float> &v) {
    const char *keys[2] = {"b", "w"};
    kiln_tree *kids[2] = {array(KILN_F32, v.data(), {3}), array(KILN_F32, v.data() + 3, {2, 3})};
    return kiln_tree_dict(2, keys, kids);
  }
  static std::vector<float> values(const kiln_tree *t) {
    std::vector<float> out;
    kiln_leaf *leaves = nullptr;
    size_t n = 0;
    EXPECT_EQ(kiln_tree_flatten(t, nullptr, nullptr, &leaves, &n, nullptr), KILN_OK);
    for (size_t i = 0; i < n; i++) {
      std::vector<float> v(static_cast<size_t>(kiln_array_size(leaves[i].u.array)));
      EXPECT_EQ(kiln_array_to_host(leaves[i].u.array, v.data(), v.size() * 4), KILN_OK);
      out.insert(out.end(), v.begin(), v.end());
    }
    kiln_leaves_free(leaves, n);
    return out;
  }

  std::map<std::string, std::vector<float>> golden;
};

// JAX's float32 tolerance, relative, with an absolute floor for values near 0.

TEST_F(Optim, EveryOptimizerMatchesOptaxStepByStep) {
  for (auto &[name, opt] : optimizers()) {
    SCOPED_TRACE(name);
    kiln_func *fi = nullptr, *fs = nullptr;
    ASSERT_EQ(kiln_func_new(init_fn, &opt, "optim_init", &fi), KILN_OK);
    ASSERT_EQ(kiln_func_new(step_fn, &opt, "train_step", &fs), KILN_OK);
    kiln_jit *ji = nullptr, *js = nullptr;
    ASSERT_EQ(kiln_jit_new(ctx, fi, nullptr, &ji), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_jit_new(ctx, fs, nullptr, &js), KILN_OK) << kiln_last_error();
    kiln_tree *params = params_tree(golden.at("params"));
    kiln_tree *state = nullptr;
    ASSERT_EQ(kiln_jit_call(ji, params, &state), KILN_OK) << kiln_last_error();
    for (int s = 0; s < 6; s++) {
      kiln_tree *kids[3] = {params, state, params_tree(golden.at("grads " + std::to_string(s)))};
      kiln_tree *args = kiln_tree_tuple(3, kids);
      kiln_tree *out = nullptr;
      ASSERT_EQ(kiln_jit_call(js, args, &out), KILN_OK) << kiln_last_error();
      kiln_tree_free(args);
      params = kiln_tree_clone(kiln_tree_child(out, 0));
      state = kiln_tree_clone(kiln_tree_child(out, 1));
      kiln_tree_free(out);
      std::string key = "case " + name + " " + std::to_string(s + 1);
      expect_close(values(params), golden.at(key), key);
      int32_t count = -1;
      ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(kiln_tree_get(state, "count")), &count, 4),
                KILN_OK);
      EXPECT_EQ(count, s + 1);
    }
    EXPECT_EQ(kiln_jit_compile_count(js), 1);
    kiln_tree_free(params);
    kiln_tree_free(state);
    kiln_jit_free(ji);
    kiln_jit_free(js);
    kiln_func_free(fi);
    kiln_func_free(fs);
  }
}

kiln_tree *schedule_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *count = kiln_tree_leaf_get(args)->u.val;
  return kiln_tree_val(kiln_schedule_value(t, static_cast<const kiln_schedule *>(user), count));
}

TEST_F(Optim, SchedulesMatchOptax) {
  std::map<std::string, kiln_schedule> s = {
      {"constant", kiln_constant_schedule(0.1)},
      {"linear", kiln_linear_schedule(0.1, 0.01, 4, 1)},
      {"cosine", kiln_cosine_decay_schedule(0.1, 5, 0.1, 1.0)},
      {"cosine_exp", kiln_cosine_decay_schedule(0.2, 7, 0.0, 2.0)},
      {"warmup_cosine", kiln_warmup_cosine_decay_schedule(0.0, 1e-2, 2, 6, 1e-3, 1.0)},
      {"exponential", kiln_exponential_decay(0.1, 2, 0.5, 1, 0, NAN)},
      {"exponential_stair", kiln_exponential_decay(0.1, 2, 0.5, 1, 1, 0.03)}};
  for (auto &[name, sched] : s) {
    kiln_func *f = nullptr;
    ASSERT_EQ(kiln_func_new(schedule_fn, &sched, "schedule", &f), KILN_OK);
    kiln_jit *j = nullptr;
    ASSERT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK);
    const std::vector<float> &want = golden.at("sched " + name);
    std::vector<float> got;
    for (int32_t c = 0; c < static_cast<int32_t>(want.size()); c++) {
      kiln_array *a = nullptr;
      ASSERT_EQ(kiln_array_from_host(dev, KILN_I32, 0, nullptr, &c, 4, &a), KILN_OK);
      kiln_tree *arg = kiln_tree_array(a);
      kiln_array_release(a);
      kiln_tree *out = nullptr;
      ASSERT_EQ(kiln_jit_call(j, arg, &out), KILN_OK) << name << ": " << kiln_last_error();
      float v;
      ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(out), &v, 4), KILN_OK);
      got.push_back(v);
      kiln_tree_free(out);
      kiln_tree_free(arg);
    }
    expect_close(got, want, "schedule " + name);
    kiln_jit_free(j);
    kiln_func_free(f);
  }
}

kiln_tree *mismatch_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_tree *state = nullptr;
  kiln_tree *u = kiln_optim_update(t, static_cast<const kiln_optimizer *>(user),
                                   kiln_tree_child(args, 1), kiln_tree_child(args, 0),
                                   kiln_tree_child(args, 2), &state);
  kiln_tree_free(state);
  return u;
}

TEST_F(Optim, GradsOfAnotherStructureAreATreeError) {
  kiln_optimizer adam = kiln_adam(kiln_constant_schedule(1e-3), 0.9, 0.999, 1e-8);
  kiln_func *fi = nullptr, *fm = nullptr;
  ASSERT_EQ(kiln_func_new(init_fn, &adam, "init", &fi), KILN_OK);
  ASSERT_EQ(kiln_func_new(mismatch_fn, &adam, "update", &fm), KILN_OK);
  kiln_jit *ji = nullptr, *jm = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, fi, nullptr, &ji), KILN_OK);
  ASSERT_EQ(kiln_jit_new(ctx, fm, nullptr, &jm), KILN_OK);
  kiln_tree *params = params_tree(golden.at("params"));
  kiln_tree *state = nullptr;
  ASSERT_EQ(kiln_jit_call(ji, params, &state), KILN_OK) << kiln_last_error();
  const float g[3] = {1, 2, 3};
  const char *k = "b";
  kiln_tree *gb = array(KILN_F32, g, {3});
  kiln_tree *kids[3] = {state, kiln_tree_dict(1, &k, &gb), params};
  kiln_tree *args = kiln_tree_tuple(3, kids);
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(jm, args, &out), KILN_ERR_TREE);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_optim_update: grads and state['mu'] differ"),
            std::string::npos)
      << kiln_last_error();
  kiln_tree_free(args);
  kiln_jit_free(ji);
  kiln_jit_free(jm);
  kiln_func_free(fi);
  kiln_func_free(fm);
}

}  // namespace
