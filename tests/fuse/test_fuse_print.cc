// The unfused baseline (one group per equation), the printed plan's exact
// text, and the errors for bad arguments and invalid programs.
#include <gtest/gtest.h>

#include "fuse_checks.h"

using namespace fuse_test;

namespace {

// ---------------------------------------------------------------------------
// The unfused baseline and the text

TEST(FuseBaseline, OneGroupPerEquation) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  b.Out({Softmax(b, x)});
  kfuse_options o = Defaults();
  o.fuse = false;
  Plan plan = Build(b, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "REDUCE(reduce_max) LOOP(broadcast_in_dim) LOOP(sub) LOOP(exp) REDUCE(reduce_sum) "
            "LOOP(broadcast_in_dim) LOOP(div)");
  int slot_values = 0;
  for (int i = 0; i < plan->n_places; i++) slot_values += plan->places[i].home == KFUSE_HOME_SLOT;
  EXPECT_EQ(slot_values, 6);
  EXPECT_LT(plan->n_slots, 6);
}

TEST(FusePrint, ExactText) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid v = b.Op("neg", {b.Op("exp", {x})});
  v = b.Op("sort", {v}, "dimension=1 is_stable=True num_keys=1");
  v = b.Op("mul", {v, b.Lit(2.0)});
  kir_vid s = b.Op("reduce_sum", {v}, kLast);
  b.Out({v, s});
  bool donated[] = {true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Text(b.get(), plan.get()),
            "plan: 3 groups, 2 slots, 256 temp bytes\n"
            "g0 LOOP items=32: exp#0 neg#1 | in v0:f32[4,8]@in0 | out v2:f32[4,8]@slot0\n"
            "g1 OPAQUE: sort#2 | in v2:f32[4,8]@slot0 | out v3:f32[4,8]@slot1\n"
            "g2 ROW rows=4x8: mul#3 reduce_sum#4 | in v3:f32[4,8]@slot1 v4:f32[]@const"
            " | out v5:f32[4,8]@out0 v6:f32[4]@out1\n"
            "slot0 128 bytes at 0: v2 g0-g1\n"
            "slot1 128 bytes at 256: v3 g1-g2\n"
            "out0 reuses donated in0\n");
}

TEST(FusePrint, DotEpilogueAndRowText) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid r = b.Op("max", {b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)}), b.Lit(0.0)});
  b.Out({Softmax(b, r)});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  std::string text = Text(b.get(), plan.get());
  EXPECT_TRUE(
      Contains(text, "g0 DOT epilogue=bias_relu(v2): dot_general#0 broadcast_in_dim#1 add#2 max#3"))
      << text;
  EXPECT_TRUE(Contains(text, "g1 ROW rows=4x8: reduce_max#4")) << text;
}

// ---------------------------------------------------------------------------
// Bad input

TEST(FuseErrors, BadArgumentsAreRefused) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  kfuse_options o = Defaults();
  kfuse_plan *plan = nullptr;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: out is NULL"));
  EXPECT_EQ(kfuse_plan_build(nullptr, &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: program is NULL"));
  EXPECT_EQ(plan, nullptr);
  o.max_group_eqns = 0;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: max_group_eqns=0"));
  o = Defaults();
  o.max_group_args = -1;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: max_group_args=-1"));
  o = Defaults();
  o.row_max_elements = 0;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: row_max_elements=0"));
  // max_group_args 0 (options filled without the field) means 64.
  o = Defaults();
  o.max_group_args = 0;
  ASSERT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_OK) << kiln_last_error();
  kfuse_plan_free(plan);
  // NULL options mean the defaults.
  ASSERT_EQ(kfuse_plan_build(b.get(), nullptr, nullptr, &plan), KILN_OK) << kiln_last_error();
  Plan owned(plan);
  EXPECT_EQ(owned->n_groups, 1);
}

TEST(FuseErrors, AnInvalidProgramIsRefused) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  kir_vid saved = b.get()->eqns[0].in[0];
  b.get()->eqns[0].in[0] = 999;  // a var that does not exist
  kfuse_plan *plan = nullptr;
  kfuse_options o = Defaults();
  kiln_status st = kfuse_plan_build(b.get(), &o, nullptr, &plan);
  b.get()->eqns[0].in[0] = saved;
  EXPECT_NE(st, KILN_OK);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: invalid program"))
      << kiln_last_error();
}

TEST(FuseErrors, PrintRefusesBadArguments) {
  Builder b, other;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  other.Out({other.In("f32[4]")});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  char *text = nullptr;
  EXPECT_EQ(kfuse_plan_print(plan.get(), b.get(), nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: text is NULL"));
  EXPECT_EQ(kfuse_plan_print(nullptr, b.get(), &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: plan or program is NULL"));
  EXPECT_EQ(kfuse_plan_print(plan.get(), other.get(), &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: the plan has 2 places"));
  EXPECT_EQ(text, nullptr);
  kfuse_plan_free(nullptr);
  EXPECT_STREQ(kfuse_kind_name((kfuse_kind)99), "invalid");
}

}  // namespace
