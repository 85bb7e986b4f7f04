// kiln's IR printer: the text of programs, params, literals and weak types,
// long equations broken and sub-programs nested, effects and strings,
// reserved names skipped and broken programs refused. (Parsing:
// test_ir_parse.cc.)
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
// Printer

TEST(IrPrint, OneLineProgram) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[4,8]"), b = Invar(p.get(), "f32[4,8]");
  Outputs(p.get(), {Eqn(p.get(), "add", {a, b})});
  EXPECT_EQ(Print(p.get()), "{ lambda ; a:f32[4,8] b:f32[4,8]. let c:f32[4,8] = add a b in (c,) }");
}

// The example at the top of ir.h.
TEST(IrPrint, HeaderExample) {
  Program p = NewProgram();
  kir_aval t = A("f32[4,8]");
  kir_vid a;
  ASSERT_EQ(kir_add_const(p.get(), &t, &a), KILN_OK);
  kir_vid b = Invar(p.get(), "f32[4,8]"), c = Invar(p.get(), "f32[]");
  kir_vid e = Eqn(p.get(), "mul", {Eqn(p.get(), "add", {b, a}), c});
  Outputs(p.get(), {Eqn(p.get(), "reduce_sum", {e}, "axes=(1,)"), Lit(p.get(), KILN_F32, 1.0)});
  EXPECT_EQ(Print(p.get()),
            "{ lambda a:f32[4,8]; b:f32[4,8] c:f32[]. let\n"
            "    d:f32[4,8] = add b a\n"
            "    e:f32[4,8] = mul d c\n"
            "    f:f32[4] = reduce_sum[axes=(1,)] e\n"
            "  in (f, 1.0:f32[]) }");
}

TEST(IrPrint, ParamsLiteralsWeakTypes) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[4,8]");
  kir_vid w = Invar(p.get(), "~f32[]");
  kir_vid c = Eqn(p.get(), "mul", {a, Lit(p.get(), KILN_F32, 2.0, true)});
  kir_vid d = Eqn(p.get(), "reduce_sum", {c}, "axes=(1,)");
  kir_vid e = Eqn(p.get(), "add", {w, Lit(p.get(), KILN_F32, 0.1, true)});
  Outputs(p.get(), {d, e, Lit(p.get(), KILN_BOOL, 1)});
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[4,8] b:~f32[]. let\n"
            "    c:f32[4,8] = mul a 2.0:~f32[]\n"
            "    d:f32[4] = reduce_sum[axes=(1,)] c\n"
            "    e:~f32[] = add b 0.1:~f32[]\n"
            "  in (d, e, True:bool[]) }");
}

TEST(IrPrint, LiteralSpellings) {
  Program p = NewProgram();
  std::vector<kir_vid> outs = {
      Lit(p.get(), KILN_F64, 1e-5),         Lit(p.get(), KILN_F32, -0.0),
      Lit(p.get(), KILN_F16, INFINITY),     Lit(p.get(), KILN_BF16, -INFINITY),
      Lit(p.get(), KILN_F32, NAN),          Lit(p.get(), KILN_I8, -128),
      Lit(p.get(), KILN_F64, 1e16),         Lit(p.get(), KILN_F32, 16777216.0),
      Lit(p.get(), KILN_BOOL, 0),           Lit(p.get(), KILN_F16, 0.1)};
  kir_vid u;
  ASSERT_EQ(kir_add_literal(p.get(), KILN_U64, false, kir_scalar_u(18446744073709551615ull), &u),
            KILN_OK);
  outs.push_back(u);
  Outputs(p.get(), outs);
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; . let\n"
            "  in (1e-05:f64[], -0.0:f32[], inf:f16[], -inf:bf16[], nan:f32[], -128:i8[], "
            "1e+16:f64[], 16777216.0:f32[], False:bool[], 0.1:f16[], "
            "18446744073709551615:u64[]) }");
}

// A layout like jax.make_jaxpr's for a cond, a scan and long params.
TEST(IrPrint, BreaksLongEquationsAndNestsSubPrograms) {
  Program p = NewProgram();
  kir_vid k = Invar(p.get(), "i32[]");
  kir_vid g = Invar(p.get(), "f16[4,3]");
  kir_program *b0 = Sub(p.get()), *b1 = Sub(p.get());
  kir_vid m = Invar(b0, "f16[4,3]");
  Outputs(b0, {Eqn(b0, "sub", {m, Lit(b0, KILN_F16, 1.0)})});
  kir_vid o = Invar(b1, "f16[4,3]");
  Outputs(b1, {Eqn(b1, "add", {o, Lit(b1, KILN_F16, 1.0)})});
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid cin[] = {k, g};
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_COND, &par, 2, cin, &idx), KILN_OK)
      << kiln_last_error();
  kir_vid l = p->eqns[idx].out[0];
  kir_vid s = Eqn(p.get(), "slice", {l},
                  "start_indices=(0, 0) limit_indices=(4, 3) strides=(2, 1)");
  Outputs(p.get(), {s});
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:i32[] b:f16[4,3]. let\n"
            "    c:f16[4,3] = cond[\n"
            "      branches=(\n"
            "        { lambda ; d:f16[4,3]. let e:f16[4,3] = sub d 1.0:f16[] in (e,) }\n"
            "        { lambda ; f:f16[4,3]. let g:f16[4,3] = add f 1.0:f16[] in (g,) }\n"
            "      )\n"
            "    ] a b\n"
            "    h:f16[2,3] = slice[\n"
            "      limit_indices=(4, 3)\n"
            "      start_indices=(0, 0)\n"
            "      strides=(2, 1)\n"
            "    ] c\n"
            "  in (h,) }");
}

TEST(IrPrint, ScanBodyBreaksInsideTheParam) {
  Program p = NewProgram();
  kir_vid init = Invar(p.get(), "f64[5]");
  kir_vid xs = Invar(p.get(), "f32[4,5]");
  kir_program *body = Sub(p.get());
  kir_vid e = Invar(body, "f64[5]"), f = Invar(body, "f32[5]");
  kir_vid g = Eqn(body, "convert_element_type", {f}, "new_dtype=float64 weak_type=False");
  Outputs(body, {Eqn(body, "add", {e, g}), e});
  kir_params par;
  memset(&par, 0, sizeof par);
  par.scan.jaxpr = body;
  par.scan.length = 4;
  par.scan.num_carry = 1;
  par.scan.reverse = true;
  kir_vid in[] = {init, xs};
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_SCAN, &par, 2, in, &idx), KILN_OK)
      << kiln_last_error();
  Outputs(p.get(), {p->eqns[idx].out[0], p->eqns[idx].out[1]});
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f64[5] b:f32[4,5]. let\n"
            "    c:f64[5] d:f64[4,5] = scan[\n"
            "      jaxpr={ lambda ; e:f64[5] f:f32[5]. let\n"
            "          g:f64[5] = convert_element_type[new_dtype=float64 weak_type=False] f\n"
            "          h:f64[5] = add e g\n"
            "        in (h, e) }\n"
            "      length=4\n"
            "      num_carry=1\n"
            "      num_consts=0\n"
            "      reverse=True\n"
            "    ] a b\n"
            "  in (c, d) }");
}

TEST(IrPrint, EffectsAndStrings) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[]");
  kir_params par;
  memset(&par, 0, sizeof par);
  par.debug_print.fmt = "x=\"{}\"\n\t\\ \x01";
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_DEBUG_PRINT, &par, 1, &a, nullptr), KILN_OK);
  memset(&par, 0, sizeof par);
  kir_aval r = A("i32[2]");
  par.host_callback.callback = 3;
  par.host_callback.result_avals.n = 1;
  par.host_callback.result_avals.v = &r;
  int idx;
  ASSERT_EQ(kir_add_eqn(p.get(), KIR_PRIM_HOST_CALLBACK, &par, 1, &a, &idx), KILN_OK);
  Outputs(p.get(), {});
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[]. let\n"
            "    debug_print[fmt=\"x=\\\"{}\\\"\\n\\t\\\\ \\x01\"] a\n"
            "    b:i32[2] = host_callback[callback=3 result_avals=(i32[2],)] a\n"
            "  in () }");
}

TEST(IrPrint, SkipsReservedNamesAndRefusesBrokenPrograms) {
  Program p = NewProgram();
  kir_vid v = Invar(p.get(), "f32[]");
  // 'eq' would be the 121st name; prims and keywords are never names.
  for (int i = 0; i < 130; i++) v = Eqn(p.get(), "neg", {v});
  Outputs(p.get(), {v});
  std::string text = Print(p.get());
  EXPECT_FALSE(Contains(text, " eq:")) << text;
  EXPECT_FALSE(Contains(text, " in:"));
  EXPECT_TRUE(Contains(text, " er:f32[] = neg ep\n")) << text;
  p->eqns[3].in[0] = 999;
  char *out = nullptr;
  EXPECT_EQ(kir_print(p.get(), &out), KILN_ERR_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_print: kir_verify: equation 3 (neg)"));
}

}  // namespace
