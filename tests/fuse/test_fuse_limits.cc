// Where the fusion planner cuts (dot, cond, scan and sort are boundaries),
// the cost rule for expensive values read through maps, multi-output loops,
// size limits, and effects kept in order (fuse_checks.h).
#include <gtest/gtest.h>

#include "fuse_checks.h"

using namespace fuse_test;

namespace {

// ---------------------------------------------------------------------------
// Cuts, cost, multi-output, limits

TEST(FuseCut, DotCondScanSortAreBoundaries) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), w = b.In("f32[8,8]"), i = b.In("i32[]");
  kir_vid a = b.Op("exp", {x});
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid n = b.Op("neg", {d});
  kir_vid srt = b.Op("sort", {n}, "dimension=1 is_stable=True num_keys=1");
  kir_vid m = b.Op("mul", {srt, a});
  // cond: branch 0 negates, branch 1 doubles.
  kir_program *b0 = Sub(b.get()), *b1 = Sub(b.get());
  kir_aval t;
  ASSERT_EQ(kir_aval_parse("f32[4,8]", &t), KILN_OK);
  kir_vid y0, y1;
  ASSERT_EQ(kir_add_invar(b0, &t, &y0), KILN_OK);
  ASSERT_EQ(kir_add_invar(b1, &t, &y1), KILN_OK);
  int idx;
  ASSERT_EQ(kir_add_eqn(b0, KIR_PRIM_NEG, nullptr, 1, &y0, &idx), KILN_OK);
  ASSERT_EQ(kir_set_outputs(b0, 1, &b0->eqns[idx].out[0]), KILN_OK);
  ASSERT_EQ(kir_add_eqn(b1, KIR_PRIM_EXP, nullptr, 1, &y1, &idx), KILN_OK);
  ASSERT_EQ(kir_set_outputs(b1, 1, &b1->eqns[idx].out[0]), KILN_OK);
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid c = b.Add(KIR_PRIM_COND, &par, {i, m})[0];
  kir_vid c2 = b.Op("add", {c, a});
  // scan over the rows of c2 with a running sum.
  kir_program *body = Sub(b.get());
  kir_aval r8;
  ASSERT_EQ(kir_aval_parse("f32[8]", &r8), KILN_OK);
  kir_vid acc, row;
  ASSERT_EQ(kir_add_invar(body, &r8, &acc), KILN_OK);
  ASSERT_EQ(kir_add_invar(body, &r8, &row), KILN_OK);
  kir_vid ab[] = {acc, row};
  ASSERT_EQ(kir_add_eqn(body, KIR_PRIM_ADD, nullptr, 2, ab, &idx), KILN_OK);
  kir_vid bo[] = {body->eqns[idx].out[0], body->eqns[idx].out[0]};
  ASSERT_EQ(kir_set_outputs(body, 2, bo), KILN_OK);
  memset(&par, 0, sizeof par);
  par.scan.jaxpr = body;
  par.scan.length = 4;
  par.scan.num_carry = 1;
  kir_vid init = b.Op("reduce_sum", {x}, "axes=(0,)");
  std::vector<kir_vid> sc = b.Add(KIR_PRIM_SCAN, &par, {init, c2});
  kir_vid out = b.Op("sub", {sc[1], c2});
  b.Out({out, sc[0]});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(exp) DOT(dot_general) LOOP(neg) OPAQUE(sort) LOOP(mul) OPAQUE(cond) LOOP(add) "
            "REDUCE(reduce_sum) OPAQUE(scan) LOOP(sub)");
}

TEST(FuseCost, ExpensiveValueReadThroughTwoMapsIsMaterialised) {
  for (const char *prim : {"exp", "neg"}) {
    Builder b;
    kir_vid x = b.In("f32[8,8]");
    kir_vid e = b.Op(prim, {x});
    kir_vid y = b.Op("add", {e, b.Op("transpose", {e}, "permutation=(1, 0)")});
    b.Out({y});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    if (std::string(prim) == "exp") {
      EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) LOOP(transpose add)");
      EXPECT_EQ(plan->places[e].home, KFUSE_HOME_SLOT);
    } else {  // cheap work is recomputed rather than written
      EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(neg transpose add)");
    }
  }
}

TEST(FuseCost, ExpensiveValueBroadcastIsMaterialised) {
  for (const char *prim : {"log", "abs"}) {
    Builder b;
    kir_vid v = b.In("f32[8]"), x = b.In("f32[4,8]");
    kir_vid e = b.Op(prim, {v});
    b.Out({b.Op("mul", {x, b.Op("broadcast_in_dim", {e}, kCol)})});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), std::string(prim) == "log"
                                              ? "LOOP(log) LOOP(broadcast_in_dim mul)"
                                              : "LOOP(abs broadcast_in_dim mul)");
  }
}

TEST(FuseCost, ExpensiveValueReadTwiceThroughOneMapFuses) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid e = b.Op("exp", {x});
  b.Out({b.Op("mul", {e, b.Op("add", {e, b.Lit(1.0)})})});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp add mul)");
}

TEST(FuseLoop, MultiOutputLoops) {
  {  // siblings reading one array
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid a = b.Op("exp", {x}), c = b.Op("log", {x});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    ASSERT_EQ(Shape(b.get(), plan.get()), "LOOP(exp log)");
    EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{a, c}));
  }
  {  // one producer, two consumers
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid y = b.Op("exp", {x});
    kir_vid a = b.Op("add", {y, b.Lit(1.0)}), c = b.Op("mul", {y, b.Lit(2.0)});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    ASSERT_EQ(Shape(b.get(), plan.get()), "LOOP(exp add mul)");
    EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{a, c}));
    EXPECT_EQ(plan->places[y].home, KFUSE_HOME_NONE);
  }
  {  // outputs of different shapes do not share a loop
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid a = b.Op("exp", {x});
    kir_vid c = b.Op("neg", {b.Op("reshape", {x}, "new_sizes=(32,)")});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) LOOP(reshape neg)");
  }
}

TEST(FuseLoop, SizeLimits) {
  Builder b;
  kir_vid x = b.In("f32[64]");
  kir_vid v = x;
  for (int i = 0; i < 8; i++) v = b.Op(i % 2 ? "neg" : "abs", {v});
  b.Out({v});
  kfuse_options o = Defaults();
  o.max_group_eqns = 3;
  Plan plan = Build(b, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->n_groups, 3);
  // Kernel arguments: a sum of ten inputs, at most four buffers per group.
  Builder s;
  std::vector<kir_vid> ins;
  for (int i = 0; i < 10; i++) ins.push_back(s.In("f32[64]"));
  kir_vid acc = ins[0];
  for (int i = 1; i < 10; i++) acc = s.Op("add", {acc, ins[i]});
  s.Out({acc});
  o = Defaults();
  o.max_group_args = 4;
  plan = Build(s, o);
  ASSERT_TRUE(plan);
  EXPECT_GT(plan->n_groups, 1);
  // A single equation with more operands than kernels take runs unfused.
  Builder wide;
  std::vector<kir_vid> cases = {wide.In("i32[64]")};
  for (int i = 0; i < 5; i++) cases.push_back(wide.In("f32[64]"));
  wide.Out({wide.Op("select_n", cases)});
  o.max_group_args = 4;
  plan = Build(wide, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(wide.get(), plan.get()), "OPAQUE(select_n)");
}

TEST(FuseLoop, EffectsKeepTheirOrder) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  kir_params par;
  memset(&par, 0, sizeof par);
  par.debug_print.fmt = "first {}";
  kir_vid a = b.Op("exp", {x});
  b.Add(KIR_PRIM_DEBUG_PRINT, &par, {x});
  kir_vid c = b.Op("neg", {a});
  par.debug_print.fmt = "second {}";
  b.Add(KIR_PRIM_DEBUG_PRINT, &par, {c});
  kir_vid d = b.Op("mul", {a, c});
  b.Out({d});
  Plan plan = Build(b);  // CheckPlan checks the order of the two prints
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(exp neg mul) OPAQUE(debug_print) OPAQUE(debug_print)");
}

}  // namespace
