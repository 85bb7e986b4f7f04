// The fusion planner's groups (src/fuse): elementwise loops through
// broadcasts, reshapes and transposes; row-wise chains (softmax, norms and
// their backward passes); reductions with producers and epilogues; lone
// aliases; dot epilogues. Every plan is checked by fuse_checks.h.
#include <gtest/gtest.h>

#include "fuse_checks.h"

using namespace fuse_test;

namespace {

TEST(FuseLoop, ElementwiseChainIsOneLoop) {
  Builder b;
  kir_vid x = b.In("f32[16,32]"), y = b.In("f32[16,32]");
  kir_vid v = b.Op("neg", {x});
  v = b.Op("exp", {v});
  v = b.Op("add", {v, y});
  v = b.Op("mul", {v, b.Lit(0.5)});
  v = b.Op("tanh", {v});
  v = b.Op("max", {v, x});
  v = b.Op("select_n", {b.Op("gt", {v, y}), v, y});
  v = b.Op("convert_element_type", {v}, "new_dtype=float16 weak_type=False");
  b.Out({v});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(neg exp add mul tanh max gt select_n convert_element_type)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 16 * 32);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{x, y, b.get()->eqns[3].in[1]}));
  EXPECT_EQ(g.n_in_literals, 1);
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{v});
  EXPECT_EQ(plan->n_slots, 0);
  EXPECT_EQ(plan->places[b.get()->eqns[2].out[0]].home, KFUSE_HOME_NONE);
  EXPECT_EQ(plan->places[v].home, KFUSE_HOME_OUTPUT);
}

TEST(FuseLoop, BroadcastsReshapesTransposesFuse) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), col = b.In("f32[8]"), row = b.In("f32[4]"), s = b.In("f32[]");
  kir_vid t = b.Op("transpose", {b.Op("reshape", {x}, "new_sizes=(8, 4)")}, "permutation=(1, 0)");
  kir_vid v = b.Op("add", {t, b.Op("broadcast_in_dim", {col}, kCol)});
  v = b.Op("mul", {v, b.Op("broadcast_in_dim", {row}, kRow)});
  v = b.Op("sub", {v, s});  // lax's implicit broadcast of a rank-0 operand
  kir_vid io = b.Op("iota", {}, "dimension=1 dtype=float32 shape=(4, 8)");
  v = b.Op("add", {v, b.Op("rev", {io}, "dimensions=(1,)")});
  kir_vid k = b.Op("expand_dims",
                   {b.Op("slice", {row}, "start_indices=(0,) limit_indices=(4,) strides=(1,)")},
                   "dimensions=(1,)");
  v = b.Op("mul", {v, k});  // [4,8] * [4,1]: implicit size-1 broadcast
  v = b.Op("squeeze", {b.Op("reshape", {v}, "new_sizes=(1, 4, 8)")}, "dimensions=(0,)");
  b.Out({v});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_LOOP);
  EXPECT_EQ(plan->groups[0].n_eqns, b.get()->n_eqns);
  EXPECT_EQ(Ins(plan->groups[0]), (std::vector<kir_vid>{x, col, row, s}));
}

TEST(FuseRow, SoftmaxIsOneRowGroup) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid y = Softmax(b, x);
  b.Out({y});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "ROW(reduce_max broadcast_in_dim sub exp reduce_sum broadcast_in_dim div)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 4);
  EXPECT_EQ(g.row_length, 8);
  EXPECT_EQ(Ins(g), std::vector<kir_vid>{x});
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{y});
  EXPECT_EQ(plan->n_slots, 0);
}

TEST(FuseRow, SoftmaxWithKeepdimsAndImplicitBroadcast) {
  Builder b;
  kir_vid x = b.In("f32[2,3,16]");
  const char *axes = "axes=(2,)", *keep = "dimensions=(2,)";
  kir_vid m = b.Op("expand_dims", {b.Op("reduce_max", {x}, axes)}, keep);  // [2,3,1]
  kir_vid e = b.Op("exp", {b.Op("sub", {x, m})});
  kir_vid s = b.Op("expand_dims", {b.Op("reduce_sum", {e}, axes)}, keep);
  kir_vid y = b.Op("div", {e, s});
  b.Out({y, s});  // the per-row sums are an output too
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[0].n_items, 6);
  EXPECT_EQ(plan->groups[0].row_length, 16);
  EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{s, y}));
}

TEST(FuseRow, LayerNormAndRmsNormAreOneRowGroupEach) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), gamma = b.In("f32[8]"), beta = b.In("f32[8]");
  kir_vid ln = LayerNorm(b, x, gamma, beta);
  int ln_eqns = b.get()->n_eqns;
  // RMSnorm of a different tensor.
  kir_vid z = b.In("f32[4,8]");
  kir_vid ms = Mean(b, b.Op("mul", {z, z}));
  kir_vid r = b.Op("rsqrt", {b.Op("add", {ms, b.Lit(1e-6)})});
  kir_vid n = b.Op("mul", {z, b.Op("broadcast_in_dim", {r}, kRow)});
  kir_vid rms = b.Op("mul", {n, b.Op("broadcast_in_dim", {gamma}, kCol)});
  b.Out({ln, rms});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  int g_ln = GroupOf(plan.get(), ln, b.get()), g_rms = GroupOf(plan.get(), rms, b.get());
  ASSERT_NE(g_ln, g_rms);
  EXPECT_EQ(plan->groups[g_ln].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[g_ln].n_eqns, ln_eqns);
  std::vector<kir_vid> ins = Ins(plan->groups[g_ln]);
  ins.resize((size_t)(plan->groups[g_ln].n_in - plan->groups[g_ln].n_in_literals));
  EXPECT_EQ(ins, (std::vector<kir_vid>{x, gamma, beta}));
  EXPECT_EQ(plan->groups[g_ln].n_in_literals, 3);  // 8.0 twice and the epsilon
  EXPECT_EQ(plan->groups[g_rms].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[g_rms].n_eqns, b.get()->n_eqns - ln_eqns);
  EXPECT_EQ(plan->n_slots, 0);
}

TEST(FuseRow, LogSoftmaxIsOneRowGroup) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid d = b.Op("sub", {x, b.Op("broadcast_in_dim", {b.Op("reduce_max", {x}, kLast)}, kRow)});
  kir_vid lse = b.Op("log", {b.Op("reduce_sum", {b.Op("exp", {d})}, kLast)});
  kir_vid y = b.Op("sub", {d, b.Op("broadcast_in_dim", {lse}, kRow)});
  b.Out({y});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "ROW(reduce_max broadcast_in_dim sub exp reduce_sum log broadcast_in_dim sub)");
}

TEST(FuseRow, SoftmaxBackwardIsOneRowGroup) {
  Builder b;
  kir_vid y = b.In("f32[4,8]"), g = b.In("f32[4,8]");
  kir_vid s = b.Op("reduce_sum", {b.Op("mul", {g, y})}, kLast);
  kir_vid dx = b.Op("mul", {y, b.Op("sub", {g, b.Op("broadcast_in_dim", {s}, kRow)})});
  b.Out({dx});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "ROW(mul reduce_sum broadcast_in_dim sub mul)");
}

TEST(FuseRow, LayerNormBackwardKeepsRowsTogether) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), dy = b.In("f32[4,8]"), gamma = b.In("f32[8]");
  kir_vid c = b.Op("sub", {x, b.Op("broadcast_in_dim", {Mean(b, x)}, kRow)});
  kir_vid rstd = b.Op("rsqrt", {b.Op("add", {Mean(b, b.Op("mul", {c, c})), b.Lit(1e-5)})});
  kir_vid rb = b.Op("broadcast_in_dim", {rstd}, kRow);
  kir_vid xhat = b.Op("mul", {c, rb});
  kir_vid g = b.Op("mul", {dy, b.Op("broadcast_in_dim", {gamma}, kCol)});
  kir_vid m1 = b.Op("broadcast_in_dim", {Mean(b, g)}, kRow);
  kir_vid m2 = b.Op("broadcast_in_dim", {Mean(b, b.Op("mul", {g, xhat}))}, kRow);
  kir_vid t = b.Op("sub", {b.Op("sub", {g, m1}), b.Op("mul", {xhat, m2})});
  kir_vid dx = b.Op("mul", {rb, t});
  kir_vid dgamma = b.Op("reduce_sum", {b.Op("mul", {dy, xhat})}, "axes=(0,)");
  kir_vid dbeta = b.Op("reduce_sum", {dy}, "axes=(0,)");
  b.Out({dx, dgamma, dbeta});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  int row = GroupOf(plan.get(), dx, b.get());
  ASSERT_EQ(plan->groups[row].kind, KFUSE_ROW) << Shape(b.get(), plan.get());
  // Every last-axis reduction is in the ROW group; the column sums form
  // one REDUCE group with two reductions.
  for (int e = 0; e < b.get()->n_eqns; e++) {
    const kir_eqn &q = b.get()->eqns[e];
    if (q.prim == KIR_PRIM_REDUCE_SUM && q.params.axes.axes.v[0] == 1) {
      EXPECT_EQ(GroupOf(plan.get(), q.out[0], b.get()), row) << "equation " << e;
    }
  }
  // The column sums (over axis 0) are REDUCE groups of their own: the ROW
  // group writes dy * xhat for dgamma, dbeta reads dy.
  for (kir_vid v : {dgamma, dbeta}) {
    const kfuse_group &g = plan->groups[GroupOf(plan.get(), v, b.get())];
    EXPECT_EQ(g.kind, KFUSE_REDUCE);
    EXPECT_EQ(g.n_items, 8);
    EXPECT_EQ(g.row_length, 4);
  }
  EXPECT_EQ(plan->n_groups, 3) << Shape(b.get(), plan.get());
}

TEST(FuseRow, LimitsAndSwitch) {
  for (int variant = 0; variant < 2; variant++) {
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    b.Out({Softmax(b, x)});
    kfuse_options o = Defaults();
    if (variant == 0)
      o.row_max_elements = 4;  // rows of 8 do not fit
    else
      o.allow_row = false;
    Plan plan = Build(b, o);
    ASSERT_TRUE(plan);
    // Without ROW the reductions stand alone: each is read again after its
    // broadcast, which a REDUCE epilogue cannot express.
    EXPECT_EQ(Shape(b.get(), plan.get()),
              "REDUCE(reduce_max) LOOP(broadcast_in_dim sub exp) REDUCE(reduce_sum) "
              "LOOP(broadcast_in_dim div)");
  }
}

TEST(FuseRow, ResidualAddJoinsTheNormAndStaysAnOutput) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), h = b.In("f32[4,8]"), gamma = b.In("f32[8]"), beta = b.In("f32[8]");
  kir_vid res = b.Op("add", {x, h});
  kir_vid y = LayerNorm(b, res, gamma, beta);
  kir_vid after = b.Op("sort", {res}, "dimension=1 is_stable=True num_keys=1");
  b.Out({y, after});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_ROW);
  EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{res, y}));
  EXPECT_EQ(plan->places[res].home, KFUSE_HOME_SLOT);
}

// ---------------------------------------------------------------------------
// Reductions and dots

TEST(FuseReduce, ProducersAndEpilogueShareTheReduction) {
  Builder b;
  kir_vid x = b.In("f32[16,8]"), scale = b.In("f32[8]"), bias = b.In("f32[8]");
  kir_vid w = b.Op("mul", {b.Op("exp", {x}), b.Op("broadcast_in_dim", {scale},
                                                  "shape=(16, 8) broadcast_dimensions=(1,)")});
  kir_vid s = b.Op("reduce_sum", {w}, "axes=(0,)");
  kir_vid o = b.Op("add", {b.Op("sqrt", {s}), bias});
  b.Out({o});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "REDUCE(exp broadcast_in_dim mul reduce_sum sqrt add)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 8);
  EXPECT_EQ(g.row_length, 16);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{x, scale, bias}));
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{o});
}

TEST(FuseReduce, SiblingReductionsShareOneGroupAndProducersStayInternal) {
  Builder b;
  kir_vid x = b.In("f32[6,5,4]");
  kir_vid sq = b.Op("mul", {x, x});
  kir_vid s1 = b.Op("reduce_sum", {x}, "axes=(0, 2)");
  kir_vid s2 = b.Op("reduce_sum", {sq}, "axes=(0, 2)");
  kir_vid mx = b.Op("reduce_max", {x}, "axes=(0, 2)");
  kir_vid other = b.Op("reduce_sum", {x}, "axes=(0,)");  // different axes: its own group
  b.Out({s1, s2, mx, other});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  int g = GroupOf(plan.get(), s1, b.get());
  EXPECT_EQ(GroupOf(plan.get(), s2, b.get()), g);
  EXPECT_EQ(GroupOf(plan.get(), mx, b.get()), g);
  EXPECT_EQ(plan->groups[g].kind, KFUSE_REDUCE);
  EXPECT_EQ(plan->groups[g].n_items, 5);
  EXPECT_EQ(plan->groups[g].row_length, 24);
  EXPECT_EQ(plan->places[sq].home, KFUSE_HOME_NONE);
}

TEST(FuseReduce, ProducerValueUsedElsewhereIsMaterialised) {
  Builder b;
  kir_vid x = b.In("f32[16,8]");
  kir_vid e = b.Op("exp", {x});
  kir_vid s = b.Op("reduce_sum", {e}, "axes=(0,)");
  kir_vid srt = b.Op("sort", {e}, "dimension=0 is_stable=True num_keys=1");
  b.Out({s, srt});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) REDUCE(reduce_sum) OPAQUE(sort)");
  EXPECT_EQ(plan->places[e].home, KFUSE_HOME_SLOT);
}

// A reshape, squeeze or expand_dims alone in its group runs nothing: its
// result is its operand's bytes in place (pmap's squeeze of a parameter
// before a matmul, a reshape between two opaque steps).
TEST(FuseAlias, ALoneReshapeTakesItsOperandsPlace) {
  {  // of an input, read by a matmul
    Builder b;
    kir_vid x = b.In("f32[1,4,16]"), w = b.In("f32[16,8]");
    kir_vid sq = b.Op("squeeze", {x}, "dimensions=(0,)");
    kir_vid d = b.Op("dot_general", {sq, w}, kMatmul);
    b.Out({d});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general)");
    EXPECT_EQ(plan->places[sq].home, KFUSE_HOME_INPUT);
    EXPECT_EQ(plan->places[sq].index, 0);
  }
  {  // a chain over a temporary, which lives until the chain's last reader
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid e = b.Op("exp", {x});
    kir_vid srt = b.Op("sort", {e}, "dimension=1 is_stable=True num_keys=1");
    kir_vid r = b.Op("expand_dims", {b.Op("reshape", {e}, "new_sizes=(32,)")}, "dimensions=(0,)");
    kir_vid s2 = b.Op("sort", {r}, "dimension=1 is_stable=True num_keys=1");
    b.Out({srt, s2});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) OPAQUE(sort) OPAQUE(sort)");
    ASSERT_EQ(plan->places[r].home, KFUSE_HOME_SLOT);
    EXPECT_EQ(plan->places[r].index, plan->places[e].index);
  }
  {  // a result the program returns is written to its own buffer
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid r = b.Op("reshape", {x}, "new_sizes=(32,)");
    b.Out({r});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(reshape)");
    EXPECT_EQ(plan->places[r].home, KFUSE_HOME_OUTPUT);
  }
  {  // an input donated to an output is not taken while an alias is still read
    Builder b;
    kir_vid x = b.In("f32[64]"), w = b.In("f32[16,4]");
    kir_vid n = b.Op("neg", {x});
    kir_vid r = b.Op("reshape", {x}, "new_sizes=(4, 16)");
    kir_vid d = b.Op("dot_general", {r, w}, kMatmul);
    b.Out({n, d});
    bool donated[2] = {true, false};
    Plan plan = Build(b.get(), Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->places[r].home, KFUSE_HOME_INPUT);
    int made = GroupOf(plan.get(), n, b.get()), read = GroupOf(plan.get(), d, b.get());
    EXPECT_EQ(plan->output_donor[0], made > read ? 0 : -1);
  }
}

TEST(FuseDot, BiasAndReluJoinTheDot) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)});
  kir_vid zero = b.Lit(0.0);
  kir_vid r = b.Op("max", {s, zero});
  b.Out({r});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general broadcast_in_dim add max)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.epilogue, KFUSE_EPILOGUE_BIAS_RELU);
  EXPECT_EQ(g.bias, bias);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{a, w, bias, zero}));
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{r});
}

TEST(FuseDot, BiasOnlyThenActivationLoop) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid bb = b.Op("broadcast_in_dim", {bias}, kCol);
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {bb, d});
  kir_vid t = b.Op("tanh", {s});
  b.Out({t});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(broadcast_in_dim dot_general add) LOOP(tanh)");
  EXPECT_EQ(plan->groups[0].epilogue, KFUSE_EPILOGUE_BIAS);
}

TEST(FuseDot, NoEpilogueWhenTheDotIsReadTwice) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)});
  b.Out({s, d});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general) LOOP(broadcast_in_dim add)");
  EXPECT_EQ(plan->groups[0].epilogue, KFUSE_EPILOGUE_NONE);
  EXPECT_EQ(plan->groups[0].bias, KIR_NO_VAR);
}

}  // namespace
