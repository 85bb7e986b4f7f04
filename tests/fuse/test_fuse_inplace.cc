// Donated inputs written in place by the loop that reads them (fuse.h's
// in-place donation), through the public API: a momentum SGD step under
// jit with its parameters and optimizer state donated gives the same
// results on the fused C target, the unfused one and the reference, and on
// the fused one its outputs take the donated buffers (no memory grows) and
// its kernel declares no argument restrict (they alias).
// The inputs are chosen so that every step is exact in f32.
#include <gtest/gtest.h>
#include <vector>
#include "kiln/jit.h"
#include "support/jit_check.h"
#include "kiln/kiln.h"
#include "support/transform_test_util.h"

namespace {
using ktest::ArgVal;
using ktest::Ctx;
using ktest::Func;
using ktest::Tuple;
using ktest::Values;

// (p, g, m) -> (p - 0.25 * m_new, m_new) with m_new = 0.5 * m + g.
kiln_tree *MomentumStep(kiln_trace *t, const kiln_tree *a, void *) {
  kiln_val *p = ArgVal(a, 0), *g = ArgVal(a, 1), *m = ArgVal(a, 2);
  kiln_val *m2 = kiln_add(t, kiln_mul(t, m, kiln_scalar_f(t, 0.5)), g);
  kiln_val *p2 = kiln_sub(t, p, kiln_mul(t, m2, kiln_scalar_f(t, 0.25)));
  kiln_tree *out[2] = {kiln_tree_val(p2), kiln_tree_val(m2)};
  return kiln_tree_tuple(2, out);
}

kiln_tree *Filled(kiln_device *dev, float first, int64_t n) {
  std::vector<float> v((size_t)n);
  for (int64_t i = 0; i < n; i++) v[(size_t)i] = first + (float)(i % 64) * 0.5f;
  kiln_array *arr = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, 1, &n, v.data(), v.size() * sizeof(float), &arr),
            KILN_OK)
      << kiln_last_error();
  kiln_tree *t = kiln_tree_array(arr);
  kiln_array_release(arr);
  return t;
}

void RunStep(kiln_executor executor, bool expect_in_place) {
  Ctx c(executor);
  if (!c.ctx) GTEST_SKIP() << "no device";
  Func f(MomentumStep, nullptr, "momentum_step");
  int donate[] = {0, 2};
  kiln_jit_options o{};
  o.donate_argnums = donate;
  o.num_donate = 2;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, &o, &j), KILN_OK) << kiln_last_error();
  const int64_t n = 4096;
  for (int call = 0; call < 2; call++) {  // the second call runs the cached executable
    kiln_tree *args = Tuple({Filled(c.dev, 8.f, n), Filled(c.dev, 1.f, n), Filled(c.dev, 2.f, n)});
    uint64_t before = 0, after = 0;
    kiln_device_memory_in_use(c.dev, &before);
    kiln_tree *out = nullptr;
    ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
    kiln_device_memory_in_use(c.dev, &after);
    if (expect_in_place) {
      EXPECT_EQ(after, before) << "outputs outside the donated buffers";
    }
    std::vector<float> p = Values<float>(kiln_tree_child(out, 0));
    std::vector<float> m = Values<float>(kiln_tree_child(out, 1));
    ASSERT_EQ(p.size(), (size_t)n);
    ASSERT_EQ(m.size(), (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      float k = (float)(i % 64) * 0.5f, m2 = 0.5f * (2.f + k) + (1.f + k);
      ASSERT_EQ(m[(size_t)i], m2) << i;
      ASSERT_EQ(p[(size_t)i], (8.f + k) - 0.25f * m2) << i;
    }
    EXPECT_TRUE(kiln_array_is_deleted(kiln_tree_leaf_array(kiln_tree_child(args, 0))));
    EXPECT_TRUE(kiln_array_is_deleted(kiln_tree_leaf_array(kiln_tree_child(args, 2))));
    EXPECT_FALSE(kiln_array_is_deleted(kiln_tree_leaf_array(kiln_tree_child(args, 1))));
    kiln_tree_free(out);
    kiln_tree_free(args);
  }
  if (expect_in_place) {  // the kernel's arguments alias: none is declared restrict
    kiln_tree *args = Tuple({Filled(c.dev, 8.f, n), Filled(c.dev, 1.f, n), Filled(c.dev, 2.f, n)});
    std::string text = JitText(j, args);
    EXPECT_NE(text.find("= (const float *)args.ptr[0]"), std::string::npos) << text;
    EXPECT_EQ(text.find("*KILN_RESTRICT "), std::string::npos) << text;
    kiln_tree_free(args);
  }
  kiln_jit_free(j);
}

TEST(FuseInPlaceJit, FusedStepWritesOverItsDonatedInputs) { RunStep(KILN_EXECUTOR_FUSED, true); }
TEST(FuseInPlaceJit, UnfusedStepGivesTheSameResults) { RunStep(KILN_EXECUTOR_UNFUSED, false); }
TEST(FuseInPlaceJit, ReferenceGivesTheSameResults) { RunStep(KILN_EXECUTOR_REFERENCE, false); }

}  // namespace
