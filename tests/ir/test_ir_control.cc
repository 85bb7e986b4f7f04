// kiln's IR: cond, while and scan types (and against JAX,
// golden/ir_control.txt), bad control flow, and the verifier (wrong types,
// rule failures, use before definition, bad ids, paths into sub-programs).
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
// Control flow

TEST(IrControl, CondWhileScanTypes) {
  Program p = NewProgram();
  kir_vid i = Invar(p.get(), "i32[]");
  kir_vid x = Invar(p.get(), "f32[4]");
  kir_vid xs = Invar(p.get(), "f32[5,4]");

  // cond: two branches over (x,), branch 0 gives a weak-free f32[4].
  kir_program *b0 = Sub(p.get()), *b1 = Sub(p.get());
  kir_vid y0 = Invar(b0, "f32[4]");
  Outputs(b0, {Eqn(b0, "neg", {y0})});
  kir_vid y1 = Invar(b1, "f32[4]");
  Outputs(b1, {Eqn(b1, "mul", {y1, Lit(b1, KILN_F32, 2.0)})});
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid cin[] = {i, x};
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, cin, &idx), KILN_OK)
      << kiln_last_error();
  kir_vid c = p->eqns[idx].out[0];
  EXPECT_EQ(Str(p->vars[c].aval), "f32[4]");

  // while: one cond const (a bound), carry (count, x).
  kir_program *wc = Sub(p.get()), *wb = Sub(p.get());
  kir_vid bound = Invar(wc, "i32[]"), k = Invar(wc, "i32[]");
  Invar(wc, "f32[4]");
  Outputs(wc, {Eqn(wc, "lt", {k, bound})});
  kir_vid k2 = Invar(wb, "i32[]"), v2 = Invar(wb, "f32[4]");
  Outputs(wb, {Eqn(wb, "add", {k2, Lit(wb, KILN_I32, 1)}), Eqn(wb, "sin", {v2})});
  memset(&par, 0, sizeof par);
  par.while_loop.cond_jaxpr = wc;
  par.while_loop.body_jaxpr = wb;
  par.while_loop.cond_nconsts = 1;
  kir_vid win[] = {Lit(p.get(), KILN_I32, 10), Lit(p.get(), KILN_I32, 0), c};
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_WHILE, &par, 3, win, &idx), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(p->eqns[idx].n_out, 2);
  kir_vid w = p->eqns[idx].out[1];

  // scan: const x, carry acc, xs rows; ys = acc * row stacked.
  kir_program *body = Sub(p.get());
  kir_vid bc = Invar(body, "f32[4]"), acc = Invar(body, "f32[4]"), row = Invar(body, "f32[4]");
  kir_vid nacc = Eqn(body, "add", {acc, row});
  Outputs(body, {nacc, Eqn(body, "mul", {bc, row}), Eqn(body, "reduce_sum", {row}, "axes=(0,)")});
  memset(&par, 0, sizeof par);
  par.scan.jaxpr = body;
  par.scan.length = 5;
  par.scan.num_consts = 1;
  par.scan.num_carry = 1;
  par.scan.reverse = true;
  kir_vid sin[] = {x, w, xs};
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_SCAN, &par, 3, sin, &idx), KILN_OK)
      << kiln_last_error();
  const kir_eqn &s = p->eqns[idx];
  ASSERT_EQ(s.n_out, 3);
  EXPECT_EQ(Str(p->vars[s.out[0]].aval), "f32[4]");
  EXPECT_EQ(Str(p->vars[s.out[1]].aval), "f32[5,4]");
  EXPECT_EQ(Str(p->vars[s.out[2]].aval), "f32[5]");
  Outputs(p.get(), {s.out[0], s.out[1], s.out[2]});
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();

  // Effects: debug_print has no outputs, host_callback the declared ones.
  memset(&par, 0, sizeof par);
  par.debug_print.fmt = "x={}";
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_DEBUG_PRINT, &par, 1, &x, &idx), KILN_OK);
  EXPECT_EQ(p->eqns[idx].n_out, 0);
  memset(&par, 0, sizeof par);
  kir_aval results[] = {A("f32[2]"), A("~i64[]")};
  par.host_callback.callback = 7;
  par.host_callback.result_avals.n = 2;
  par.host_callback.result_avals.v = results;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_HOST_CALLBACK, &par, 1, &x, &idx), KILN_OK);
  ASSERT_EQ(p->eqns[idx].n_out, 2);
  EXPECT_EQ(Str(p->vars[p->eqns[idx].out[1]].aval), "~i64[]");
  par.host_callback.callback = -1;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_HOST_CALLBACK, &par, 1, &x, &idx), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "host_callback: callback id -1 is negative"));
}

// Programs whose control-flow results are typed by JAX (ir_rules.py).
TEST(IrControl, MatchJaxGolden) {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/ir_control.txt");
  ASSERT_TRUE(f.good()) << "missing golden file; run tests/golden/ir_rules.py";
  std::string line;
  int programs = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    kir_program *p = nullptr;
    // The parser checks every declared type against kiln's rules.
    EXPECT_EQ(kir_parse(line.c_str(), &p), KILN_OK) << line << "\n  " << kiln_last_error();
    if (p) {
      EXPECT_EQ(p->n_eqns, 1);
      EXPECT_EQ(kir_prim_get(p->eqns[0].prim)->family, KIR_FAMILY_CONTROL);
    }
    kir_program_free(p);
    programs++;
  }
  EXPECT_EQ(programs, 6);
}

TEST(IrControl, BadControlFlowIsRejected) {
  Program p = NewProgram();
  kir_vid fi = Invar(p.get(), "f32[]");
  kir_vid i = Invar(p.get(), "i32[]");
  kir_vid x = Invar(p.get(), "f32[4]");
  kir_program *b0 = Sub(p.get()), *b1 = Sub(p.get());
  Outputs(b0, {Invar(b0, "f32[4]")});
  kir_vid y = Invar(b1, "f32[4]");
  Outputs(b1, {Eqn(b1, "reduce_sum", {y}, "axes=(0,)")});
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid in[] = {fi, x};
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, nullptr), KILN_ERR_DTYPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "cond: index has type f32[], not i32[]"));
  in[0] = i;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, nullptr), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "cond: output 0 is f32[4] in branch 0 but f32[] in branch 1"));
  par.cond.branches.n = 0;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "cond: needs at least one branch"));

  // A program that is not a sub-program of p.
  Program other = NewProgram();
  kir_program *foreign = Sub(other.get());
  par.cond.branches.n = 1;
  branches[0] = foreign;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "cond: param branches is not a sub-program of this program"));

  // while: cond must give bool[]; body must keep the carry's types.
  kir_program *wc = Sub(p.get()), *wb = Sub(p.get());
  Outputs(wc, {Invar(wc, "f32[4]")});
  kir_vid v = Invar(wb, "f32[4]");
  Outputs(wb, {Eqn(wb, "reduce_max", {v}, "axes=(0,)")});
  memset(&par, 0, sizeof par);
  par.while_loop.cond_jaxpr = wc;
  par.while_loop.body_jaxpr = wb;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_WHILE, &par, 1, &x, nullptr), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "while: cond_jaxpr must return one bool[]"));
  kir_program *wc2 = Sub(p.get());
  kir_vid c2 = Invar(wc2, "f32[4]");
  Outputs(wc2, {Eqn(wc2, "reduce_or", {Eqn(wc2, "gt", {c2, Lit(wc2, KILN_F32, 0)})}, "axes=(0,)")});
  par.while_loop.cond_jaxpr = wc2;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_WHILE, &par, 1, &x, nullptr), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "while: body_jaxpr output 0 has type f32[], the carry f32[4]"));
  par.while_loop.body_nconsts = 3;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_WHILE, &par, 1, &x, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "while: cond_nconsts=0 and body_nconsts=3 do not fit 1"));

  // scan: xs need the leading axis; the carry must keep its type.
  kir_program *body = Sub(p.get());
  kir_vid acc = Invar(body, "f32[4]"), row = Invar(body, "f32[4]");
  Outputs(body, {Eqn(body, "add", {acc, row})});
  memset(&par, 0, sizeof par);
  par.scan.jaxpr = body;
  par.scan.length = 3;
  par.scan.num_carry = 1;
  kir_vid sin[] = {x, x};
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_SCAN, &par, 2, sin, nullptr), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "scan: xs operand 0 has type f32[4], without a leading axis of length 3"));
  par.scan.length = 4;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_SCAN, &par, 2, sin, nullptr), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "scan: jaxpr input 1 has type f32[4] but is given f32[]"));
  par.scan.length = -1;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_SCAN, &par, 2, sin, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "scan: length=-1 is negative"));
}

// ---------------------------------------------------------------------------
// Verifier

// a:f32[4,8] -> (reduce_sum(add(a, a), axes=(1,)),)
Program SmallProgram() {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[4,8]");
  kir_vid b = Eqn(p.get(), "add", {a, a});
  Outputs(p.get(), {Eqn(p.get(), "reduce_sum", {b}, "axes=(1,)")});
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  return p;
}

TEST(IrVerify, CatchesWrongTypes) {
  Program p = SmallProgram();
  p->vars[p->eqns[1].out[0]].aval = A("f32[8]");
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kir_verify: equation 1 (reduce_sum): output 0 has type f32[8] where its "
                       "rule gives f32[4]"))
      << kiln_last_error();
  p->vars[p->eqns[1].out[0]].aval = A("~f32[4]");  // the weak flag counts too
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "output 0 has type ~f32[4] where its rule gives f32[4]"));
}

TEST(IrVerify, CatchesRuleFailures) {
  Program p = SmallProgram();
  p->eqns[1].params.axes.axes.v[0] = 5;
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kir_verify: equation 1 (reduce_sum): reduce_sum: axes=(5,) has 5 outside"));
}

TEST(IrVerify, CatchesUseBeforeDefinition) {
  Program p = SmallProgram();
  std::swap(p->eqns[0], p->eqns[1]);
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kir_verify: equation 0 (reduce_sum): input 0 (var 1) is used before it is "
                       "defined"))
      << kiln_last_error();
}

TEST(IrVerify, CatchesDoubleDefinitionAndBadIds) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[3]");
  Eqn(p.get(), "neg", {a});
  Outputs(p.get(), {Eqn(p.get(), "neg", {a})});
  p->eqns[1].out[0] = p->eqns[0].out[0];
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kir_verify: equation 1 (neg): output 0 (var 1) is defined twice"))
      << kiln_last_error();
  Program q = SmallProgram();
  q->eqns[0].in[1] = 77;
  EXPECT_EQ(kir_verify(q.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "equation 0 (add): input 1 (var 77) is not a var of the program"));
  Program r = SmallProgram();
  r->outvars[0] = 0;
  r->vars[0].kind = KIR_VAR_EQN;  // the invar claims to be an equation output
  EXPECT_EQ(kir_verify(r.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_verify: invar (var 0) has the wrong kind"));
  Program s = SmallProgram();
  s->eqns[0].n_in = 1;
  EXPECT_EQ(kir_verify(s.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "equation 0 (add): add: expected 2 operands, got 1"));
  Program t = SmallProgram();
  t->vars[t->eqns[0].out[0]].eqn = 1;
  EXPECT_EQ(kir_verify(t.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "does not record this equation as its definition"));
}

TEST(IrVerify, NamesThePathIntoSubPrograms) {
  Program p = NewProgram();
  kir_vid i = Invar(p.get(), "i32[]");
  kir_vid x = Invar(p.get(), "f32[3]");
  kir_program *b0 = Sub(p.get()), *b1 = Sub(p.get());
  Outputs(b0, {Invar(b0, "f32[3]")});
  kir_vid y = Invar(b1, "f32[3]");
  Outputs(b1, {Eqn(b1, "exp", {y})});
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid in[] = {i, x};
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, in, &idx), KILN_OK);
  Outputs(p.get(), {p->eqns[idx].out[0]});
  ASSERT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  b1->vars[b1->eqns[0].out[0]].aval = A("f64[3]");
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kir_verify: equation 0 (cond): branches[1]: equation 0 (exp): output 0 "
                       "has type f64[3] where its rule gives f32[3]"))
      << kiln_last_error();
  b1->vars[b1->eqns[0].out[0]].aval = A("f32[3]");
  b1->outvars[0] = 99;
  EXPECT_EQ(kir_verify(p.get()), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "equation 0 (cond): branches[1]: program output (var 99) is not a var"))
      << kiln_last_error();
  EXPECT_EQ(kir_verify(nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_verify: program is NULL"));
}

}  // namespace
