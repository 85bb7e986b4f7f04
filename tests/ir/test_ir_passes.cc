// kiln's IR passes: DCE keeps effects, CSE merges equal equations (and
// compares sub-programs structurally), simplify drops shape equations that
// move no data, fold evaluates constant equations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"
#include "ir_build.h"

using namespace ir_test;

namespace {

// ---------------------------------------------------------------------------
// Passes

TEST(IrPasses, DceDropsDeadCodeKeepsEffects) {
  Program p = NewProgram();
  kir_aval t = A("f32[2]");
  float data[2] = {1, 2};
  kir_vid unused_const;
  ASSERT_EQ(kir_add_const_host(p.get(), &t, data, sizeof data, &unused_const), KILN_OK);
  kir_vid a = Invar(p.get(), "f32[2]");
  Eqn(p.get(), "exp", {Eqn(p.get(), "sin", {unused_const})});  // dead chain
  kir_params par;
  memset(&par, 0, sizeof par);
  par.debug_print.fmt = "{}";
  kir_vid printed = Eqn(p.get(), "cos", {a});
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_DEBUG_PRINT, &par, 1, &printed, nullptr), KILN_OK);
  // A cond whose only effect is inside a branch stays too.
  kir_program *b = Sub(p.get());
  kir_vid y = Invar(b, "f32[2]");
  ASSERT_EQ(kir_add_eqn(b, KIR_PRIM_DEBUG_PRINT, &par, 1, &y, nullptr), KILN_OK);
  Eqn(b, "tanh", {y});  // dead inside the branch
  Outputs(b, {y});
  memset(&par, 0, sizeof par);
  par.cond.branches.n = 1;
  par.cond.branches.v = &b;
  kir_vid in[] = {Lit(p.get(), KILN_I32, 0), a};
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, nullptr), KILN_OK);
  Outputs(p.get(), {Eqn(p.get(), "neg", {a})});
  int removed = -1;
  ASSERT_EQ(kir_dce(p.get(), &removed), KILN_OK);
  EXPECT_EQ(removed, 3);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[2]. let\n"
            "    b:f32[2] = cos a\n"
            "    debug_print[fmt=\"{}\"] b\n"
            "    c:f32[2] = cond[\n"
            "      branches=({ lambda ; d:f32[2]. let debug_print[fmt=\"{}\"] d in (d,) })\n"
            "    ] 0:i32[] a\n"
            "    e:f32[2] = neg a\n"
            "  in (e,) }");
  EXPECT_EQ(kir_dce(nullptr, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_dce: program is NULL"));
}

TEST(IrPasses, CseMergesEqualEquations) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[4]");
  kir_vid x1 = Eqn(p.get(), "mul", {a, Lit(p.get(), KILN_F32, 2.0)});
  kir_vid x2 = Eqn(p.get(), "mul", {a, Lit(p.get(), KILN_F32, 2.0)});  // same literal value
  kir_vid x3 = Eqn(p.get(), "mul", {a, Lit(p.get(), KILN_F32, 2.0, true)});  // weak: differs
  kir_vid s1 = Eqn(p.get(), "reduce_sum", {x1}, "axes=(0,)");
  kir_vid s2 = Eqn(p.get(), "reduce_sum", {x2}, "axes=(0,)");  // equal after x2 -> x1
  kir_vid m = Eqn(p.get(), "reduce_max", {x2}, "axes=(0,)");   // other prim
  kir_params par;
  memset(&par, 0, sizeof par);
  par.host_callback.callback = 1;
  int i1, i2;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_HOST_CALLBACK, &par, 1, &a, &i1), KILN_OK);
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_HOST_CALLBACK, &par, 1, &a, &i2), KILN_OK);
  Outputs(p.get(), {x3, s1, s2, m});
  int removed = -1;
  ASSERT_EQ(kir_cse(p.get(), &removed), KILN_OK);
  EXPECT_EQ(removed, 2);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[4]. let\n"
            "    b:f32[4] = mul a 2.0:f32[]\n"
            "    c:f32[4] = mul a 2.0:~f32[]\n"
            "    d:f32[] = reduce_sum[axes=(0,)] b\n"
            "    e:f32[] = reduce_max[axes=(0,)] b\n"
            "    host_callback[callback=1 result_avals=()] a\n"
            "    host_callback[callback=1 result_avals=()] a\n"
            "  in (c, d, d, e) }");
}

// The transpose of broadcasting a bias to [1, n], as autodiff writes it:
// the reduction over the size-1 axis and the reshapes around it move no
// data, so all of them go; a real reduction and a transpose stay.
TEST(IrPasses, SimplifyDropsShapeEquationsThatMoveNoData) {
  Program p = NewProgram();
  kir_vid g = Invar(p.get(), "f32[8,16]");
  kir_vid b = Invar(p.get(), "f32[16]");
  kir_vid s = Eqn(p.get(), "reduce_sum", {g}, "axes=(0,)");                  // [16], stays
  kir_vid r = Eqn(p.get(), "reshape", {s}, "new_sizes=(1, 16)");             // [1,16]
  kir_vid t = Eqn(p.get(), "reduce_sum", {r}, "axes=(0,)");                  // [16]: a reshape
  kir_vid e = Eqn(p.get(), "expand_dims", {b}, "dimensions=(0,)");           // [1,16]
  kir_vid u = Eqn(p.get(), "broadcast_in_dim", {b},
                  "broadcast_dimensions=(1,) shape=(1, 16)");                 // [1,16]
  kir_vid w = Eqn(p.get(), "broadcast_in_dim", {b},
                  "broadcast_dimensions=(1,) shape=(2, 16)");                 // really broadcasts
  kir_vid m = Eqn(p.get(), "reduce_max", {Eqn(p.get(), "transpose", {u}, "permutation=(1, 0)")},
                  "axes=(1,)");                                               // size-1 axis
  Outputs(p.get(), {t, e, u, w, m});
  int n = -1;
  ASSERT_EQ(kir_simplify(p.get(), &n), KILN_OK);
  EXPECT_GT(n, 0);
  ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[8,16] b:f32[16]. let\n"
            "    c:f32[16] = reduce_sum[axes=(0,)] a\n"
            "    d:f32[1,16] = reshape[new_sizes=(1, 16)] b\n"
            "    e:f32[1,16] = reshape[new_sizes=(1, 16)] b\n"
            "    f:f32[2,16] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(2, 16)] b\n"
            "    g:f32[16,1] = transpose[permutation=(1, 0)] e\n"
            "    h:f32[16] = reshape[new_sizes=(16,)] g\n"
            "  in (c, d, e, f, h) }");
  EXPECT_EQ(kir_simplify(nullptr, nullptr), KILN_ERR_ARGUMENT);
}

TEST(IrPasses, CseComparesSubProgramsStructurally) {
  Program p = NewProgram();
  kir_vid i = Invar(p.get(), "i32[]");
  kir_vid x = Invar(p.get(), "f32[3]");
  kir_vid outs[2];
  for (int k = 0; k < 2; k++) {
    kir_program *b = Sub(p.get());
    kir_vid y = Invar(b, "f32[3]");
    kir_vid z = Eqn(b, "exp", {y});
    Outputs(b, {Eqn(b, "exp", {y}), z});  // CSE inside makes both branches (exp y, exp y)
    kir_params par;
    memset(&par, 0, sizeof par);
    par.cond.branches.n = 1;
    par.cond.branches.v = &b;
    kir_vid in[] = {i, x};
    int idx;
    ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, &idx), KILN_OK);
    outs[k] = p->eqns[idx].out[1];
  }
  Outputs(p.get(), {outs[0], outs[1]});
  int removed = 0;
  ASSERT_EQ(kir_cse(p.get(), &removed), KILN_OK);
  EXPECT_EQ(removed, 3);  // one exp in each branch, then the second cond
  EXPECT_EQ(p->n_eqns, 1);
  EXPECT_EQ(p->outvars[0], p->outvars[1]);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
}

// A tiny evaluator for the fold test: f32 add and mul, broadcast of a scalar.
kiln_status EvalF32(const kir_eqn *e, const kir_buffer *in, kir_buffer *out, void *ctx) {
  ++*static_cast<int *>(static_cast<const kir_eval_env *>(ctx)->user);
  size_t n = out[0].nbytes / sizeof(float);
  const float *a = static_cast<const float *>(in[0].data);
  float *o = static_cast<float *>(out[0].data);
  if (e->prim == KIR_PRIM_BROADCAST_IN_DIM) {
    for (size_t i = 0; i < n; i++) o[i] = a[0];
    return KILN_OK;
  }
  const float *b = static_cast<const float *>(in[1].data);
  bool sa = in[0].aval.rank == 0, sb = in[1].aval.rank == 0;
  for (size_t i = 0; i < n; i++) {
    float x = a[sa ? 0 : i], y = b[sb ? 0 : i];
    o[i] = e->prim == KIR_PRIM_ADD ? x + y : x * y;
  }
  return KILN_OK;
}

kiln_status EvalFails(const kir_eqn *, const kir_buffer *, kir_buffer *, void *) {
  return KILN_ERR_UNIMPLEMENTED;
}

TEST(IrPasses, FoldEvaluatesConstantEquations) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[3]");
  kir_vid three = Eqn(p.get(), "add", {Lit(p.get(), KILN_F32, 1.0), Lit(p.get(), KILN_F32, 2.0)});
  kir_vid row = Eqn(p.get(), "broadcast_in_dim", {three}, "shape=(3,) broadcast_dimensions=()");
  kir_vid big = Eqn(p.get(), "broadcast_in_dim", {three}, "shape=(1000,) broadcast_dimensions=()");
  kir_vid y = Eqn(p.get(), "mul", {Eqn(p.get(), "add", {row, row}), a});
  kir_vid s = Eqn(p.get(), "sin", {three});  // no evaluator: stays
  Outputs(p.get(), {y, s, Eqn(p.get(), "reduce_sum", {big}, "axes=(0,)")});
  kir_eval_table t;
  memset(&t, 0, sizeof t);
  int calls = 0;
  t.ctx = &calls;
  t.fn[KIR_PRIM_ADD] = t.fn[KIR_PRIM_MUL] = t.fn[KIR_PRIM_BROADCAST_IN_DIM] = EvalF32;
  int folded = -1;
  ASSERT_EQ(kir_fold(p.get(), &t, 64, &folded), KILN_OK) << kiln_last_error();
  EXPECT_EQ(folded, 3);  // add 1 2, the small broadcast, add row row
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  int removed;
  ASSERT_EQ(kir_dce(p.get(), &removed), KILN_OK);
  EXPECT_EQ(Print(p.get()),
            "{ lambda a:f32[3]; b:f32[3]. let\n"
            "    c:f32[1000] = broadcast_in_dim[\n"
            "      broadcast_dimensions=()\n"
            "      shape=(1000,)\n"
            "    ] 3.0:f32[]\n"
            "    d:f32[3] = mul a b\n"
            "    e:f32[] = sin 3.0:f32[]\n"
            "    f:f32[] = reduce_sum[axes=(0,)] c\n"
            "  in (d, e, f) }");
  const float *folded_row = static_cast<const float *>(p->vars[p->constvars[0]].u.constant.host);
  EXPECT_EQ(folded_row[0], 6.0f);
  EXPECT_EQ(folded_row[2], 6.0f);

  // An evaluator's failure is reported with the equation.
  Program q = NewProgram();
  Outputs(q.get(), {Eqn(q.get(), "add", {Lit(q.get(), KILN_F32, 1), Lit(q.get(), KILN_F32, 2)})});
  t.fn[KIR_PRIM_ADD] = EvalFails;
  EXPECT_EQ(kir_fold(q.get(), &t, 64, &folded), KILN_ERR_UNIMPLEMENTED);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_fold: equation 0 (add)"));
  EXPECT_EQ(q->n_eqns, 1);  // unchanged
  EXPECT_EQ(kir_verify(q.get()), KILN_OK);
}

TEST(IrPasses, FoldInSubProgramsMakesScalarsOnly) {
  Program p = NewProgram();
  kir_vid x = Invar(p.get(), "f32[3]");
  kir_program *b = Sub(p.get());
  kir_vid y = Invar(b, "f32[3]");
  kir_vid two = Eqn(b, "add", {Lit(b, KILN_F32, 1), Lit(b, KILN_F32, 1)});
  kir_vid v = Eqn(b, "broadcast_in_dim", {two}, "shape=(3,) broadcast_dimensions=()");
  Outputs(b, {Eqn(b, "mul", {y, v})});
  kir_params par;
  memset(&par, 0, sizeof par);
  par.cond.branches.n = 1;
  par.cond.branches.v = &b;
  kir_vid in[] = {Lit(p.get(), KILN_I32, 0), x};
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, &idx), KILN_OK);
  Outputs(p.get(), {p->eqns[idx].out[0]});
  kir_eval_table t;
  memset(&t, 0, sizeof t);
  int calls = 0;
  t.ctx = &calls;
  t.fn[KIR_PRIM_ADD] = t.fn[KIR_PRIM_BROADCAST_IN_DIM] = EvalF32;
  int folded = 0;
  ASSERT_EQ(kir_fold(p.get(), &t, 1024, &folded), KILN_OK);
  EXPECT_EQ(folded, 1);
  ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  std::string text = Print(p.get());
  EXPECT_TRUE(Contains(text, "shape=(3,)\n            ] 2.0:f32[]")) << text;
  EXPECT_FALSE(Contains(text, "add")) << text;
}

}  // namespace
