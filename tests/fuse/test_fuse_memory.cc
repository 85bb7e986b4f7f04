// The memory planner (src/fuse/memory.c): slots reused along a chain and
// sized for their largest value, donated inputs holding outputs, updates
// written in place over their donated inputs and when that is not allowed,
// outputs that are inputs or literals (fuse_checks.h).
#include <gtest/gtest.h>

#include "fuse_checks.h"

using namespace fuse_test;

namespace {

// ---------------------------------------------------------------------------
// Memory

TEST(FuseMemory, SlotsAreReusedAlongAChain) {
  Builder b;
  kir_vid v = b.In("f32[64]");
  int boundary = 0;
  for (int i = 0; i < 6; i++) {
    v = b.Op("exp", {v});
    v = b.Op("sort", {v}, "dimension=0 is_stable=True num_keys=1");
    boundary += 2;
  }
  b.Out({v});
  boundary--;  // the last sort writes the output
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->n_groups, 12);
  int slot_values = 0;
  for (int i = 0; i < plan->n_places; i++) slot_values += plan->places[i].home == KFUSE_HOME_SLOT;
  EXPECT_EQ(slot_values, boundary);
  EXPECT_EQ(plan->n_slots, 2);  // lives overlap pairwise only
  EXPECT_EQ(plan->temp_bytes, 2 * 64 * sizeof(float));
  EXPECT_EQ(plan->arena_bytes, 2 * (size_t)KFUSE_SLOT_ALIGN);
}

TEST(FuseMemory, SlotsFitTheLargestValue) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid big = b.Op("sort", {b.Op("exp", {x})}, "dimension=1 is_stable=True num_keys=1");
  kir_vid small =
      b.Op("sort", {b.Op("reduce_sum", {big}, kLast)}, "dimension=0 is_stable=True num_keys=1");
  b.Out({b.Op("neg", {small})});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  // exp -> [sort] -> reduce -> [sort] -> neg: four boundary values, two
  // slots sized for the f32[4,8] ones.
  EXPECT_EQ(plan->n_slots, 2);
  EXPECT_EQ(plan->slot_bytes[0], 128u);
  EXPECT_EQ(plan->slot_bytes[1], 128u);
}

TEST(FuseMemory, DonatedInputsHoldOutputs) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), y = b.In("f32[4,8]"), z = b.In("f32[8]"), kept = b.In("f32[4,8]");
  kir_vid s = b.Op("sort", {y}, "dimension=1 is_stable=True num_keys=1");
  kir_vid o0 = b.Op("add", {s, x});  // x and y are read before o0's group ends
  kir_vid o1 = b.Op("neg", {b.Op("sort", {o0}, "dimension=1 is_stable=True num_keys=1")});
  kir_vid o2 = b.Op("abs", {z});
  b.Out({o0, o1, o2, kept});
  bool donated[] = {true, true, true, true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->output_donor[0], 1);   // y: last read by the first sort, before o0's group
  EXPECT_EQ(plan->output_donor[1], 0);   // x: read by o0's group, before o1's
  EXPECT_EQ(plan->output_donor[2], 2);   // z: read at each element by o2's loop, in place
  EXPECT_EQ(plan->output_donor[3], -1);  // an input returned as is
  bool none[] = {false, false, false, false};
  plan = Build(b, Defaults(), none);
  ASSERT_TRUE(plan);
  for (int k = 0; k < 4; k++) EXPECT_EQ(plan->output_donor[k], -1);
}

// An optimizer update (SGD's p - lr * g, Adam's moments) writes each
// result over the donated input its own loop reads at the same element.
TEST(FuseInPlace, OptimizerUpdatesWriteOverTheirDonatedInputs) {
  Builder b;
  kir_vid p = b.In("f32[4,8]"), g = b.In("f32[4,8]"), m = b.In("f32[4,8]"), v = b.In("f32[4,8]");
  kir_vid m2 = b.Op("add", {b.Op("mul", {m, b.Lit(0.9)}), b.Op("mul", {g, b.Lit(0.1)})});
  kir_vid g2 = b.Op("mul", {b.Op("mul", {g, g}), b.Lit(0.001)});
  kir_vid v2 = b.Op("add", {b.Op("mul", {v, b.Lit(0.999)}), g2});
  kir_vid step = b.Op("div", {m2, b.Op("add", {b.Op("sqrt", {v2}), b.Lit(1e-8)})});
  kir_vid p2 = b.Op("sub", {p, b.Op("mul", {step, b.Lit(0.01)})});
  b.Out({p2, m2, v2});
  bool donated[] = {true, false, true, true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1);
  EXPECT_EQ(plan->groups[0].kind, KFUSE_LOOP);
  EXPECT_EQ(plan->output_donor[0], 0);  // p_new over p
  EXPECT_EQ(plan->output_donor[1], 2);  // m_new over m
  EXPECT_EQ(plan->output_donor[2], 3);  // v_new over v
  bool none[] = {false, false, false, false};
  plan = Build(b, Defaults(), none);
  ASSERT_TRUE(plan);
  for (int k = 0; k < 3; k++) EXPECT_EQ(plan->output_donor[k], -1);
}

// p_new = p + f(p) where f reads p at other elements, or a later group, an
// alias or another output of the loop reads p: no output takes p.
TEST(FuseInPlace, OtherReadsOfTheInputKeepItsBuffer) {
  bool donated[] = {true};
  auto donor = [&](kir_vid (*f)(Builder &, kir_vid)) {
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    b.Out({b.Op("sub", {p, f(b, p)})});
    Plan plan = Build(b, Defaults(), donated);
    return plan ? plan->output_donor[0] : -2;
  };
  EXPECT_EQ(donor([](Builder &b, kir_vid p) { return b.Op("mul", {p, b.Lit(2)}); }), 0);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {
              return b.Op("transpose", {p}, "permutation=(1, 0)");
            }),
            -1);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {  // row 0 broadcast down the rows
              kir_vid s = b.Op("slice", {p},
                               "start_indices=(0, 0) limit_indices=(1, 8) strides=(1, 1)");
              kir_vid r = b.Op("reshape", {s}, "new_sizes=(8,)");
              return b.Op("broadcast_in_dim", {r}, "shape=(8, 8) broadcast_dimensions=(1,)");
            }),
            -1);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {  // a ROW group: p minus its row max
              return b.Op("broadcast_in_dim", {b.Op("reduce_max", {p}, kLast)},
                          "shape=(8, 8) broadcast_dimensions=(0,)");
            }),
            -1);
  {  // a later group reads p
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    kir_vid o = b.Op("neg", {p});
    b.Out({o, b.Op("sort", {p}, "dimension=1 is_stable=True num_keys=1")});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->output_donor[0], -1);
  }
  {  // two outputs of one loop read p: neither may store over it first
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    b.Out({b.Op("mul", {p, b.Lit(2)}), b.Op("add", {p, b.Lit(1)})});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    ASSERT_EQ(plan->n_groups, 1);
    EXPECT_EQ(plan->output_donor[0], -1);
    EXPECT_EQ(plan->output_donor[1], -1);
  }
  {  // an alias of p, also read by a dot, read through a transpose in the loop
    Builder b;
    kir_vid p = b.In("f32[1,8,8]");
    kir_vid s = b.Op("squeeze", {p}, "dimensions=(0,)");
    kir_vid d = b.Op("dot_general", {s, s}, kMatmul);
    kir_vid t = b.Op("transpose", {s}, "permutation=(1, 0)");
    b.Out({b.Op("expand_dims", {b.Op("sub", {t, d})}, "dimensions=(0,)")});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->output_donor[0], -1);
  }
}

// A pmapped update reads its parameter through a squeeze that a dot reads
// too (an alias: the same bytes) and expands the result again: in place.
TEST(FuseInPlace, AnAliasOfTheInputReadAtTheItemIsTheInput) {
  Builder b;
  kir_vid p = b.In("f32[1,8,8]");
  kir_vid s = b.Op("squeeze", {p}, "dimensions=(0,)");
  kir_vid d = b.Op("dot_general", {s, s}, kMatmul);
  b.Out({b.Op("expand_dims", {b.Op("sub", {s, d})}, "dimensions=(0,)")});
  bool donated[] = {true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->places[s].home, KFUSE_HOME_INPUT);  // an alias
  EXPECT_EQ(plan->output_donor[0], 0);
}

TEST(FuseMemory, OutputsThatAreInputsOrLiterals) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  kir_vid lit = b.Lit(3.0);
  kir_vid e = b.Op("exp", {x});
  b.Out({e, x, lit, e});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->places[x].home, KFUSE_HOME_INPUT);
  EXPECT_EQ(plan->places[lit].home, KFUSE_HOME_CONST);
  EXPECT_EQ(plan->places[e].home, KFUSE_HOME_OUTPUT);
  EXPECT_EQ(plan->places[e].index, 0);
}

}  // namespace
