// kiln's IR text: print -> parse -> print round trips over random well-typed
// programs, canonical texts, and malformed text with line:column messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"

#include "ir_program_gen.h"
#include "support/ir_program.h"
#include "support/text.h"

using namespace ir_test;
using namespace kiln_test;

namespace {

TEST(IrParse, RandomProgramsRoundTrip) {
  Gen gen(20240611);
  int programs = 0, eqns = 0;
  for (int i = 0; i < 300; i++) {
    Program p = gen.Make();
    ASSERT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
    std::string text = Print(p.get());
    Program q = Parse(text);
    ASSERT_NE(q, nullptr) << text;
    EXPECT_TRUE(kir_program_equal(p.get(), q.get())) << text;
    EXPECT_TRUE(kir_program_equal(q.get(), p.get())) << text;
    EXPECT_EQ(Print(q.get()), text);
    programs++;
    eqns += p->n_eqns;
  }
  EXPECT_EQ(programs, 300);
  EXPECT_GT(eqns, 1000);
  // The generator reaches every primitive, and mostly builds valid equations.
  for (int prim = 0; prim < KIR_NUM_PRIMS; prim++)
    EXPECT_TRUE(gen.covered_.count((kir_prim)prim)) << kir_prim_name((kir_prim)prim);
  EXPECT_GT(gen.accepted_, 4 * gen.rejected_);
}

TEST(IrParse, EqualityNoticesDifferences) {
  Program a = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 1.0:f32[] in (b,) }");
  Program b = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 2.0:f32[] in (b,) }");
  Program c = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add 1.0:f32[] a in (b,) }");
  Program d = Parse("{ lambda ; x:f32[3]. let y:f32[3] = add x 1.0:f32[] in (y,) }");
  Program e = Parse("{ lambda ; a:f32[3]. let b:f32[3] = add a 1.0:~f32[] in (b,) }");
  EXPECT_FALSE(kir_program_equal(a.get(), b.get()));
  EXPECT_FALSE(kir_program_equal(a.get(), c.get()));
  EXPECT_TRUE(kir_program_equal(a.get(), d.get()));  // names do not matter
  EXPECT_FALSE(kir_program_equal(a.get(), e.get()));
}

// Texts in the printer's canonical form read back and print identically.
TEST(IrParse, CanonicalTextsRoundTrip) {
  const char *texts[] = {
      "{ lambda ; a:f32[4,8] b:f32[4,8]. let c:f32[4,8] = add a b in (c,) }",
      "{ lambda ; . let  in () }",
      "{ lambda a:i64[2]; b:f32[4,3] c:~f32[]. let\n"
      "    d:f32[4,3] = mul b c\n"
      "    e:f32[4] = reduce_sum[axes=(1,)] d\n"
      "    f:i64[2] = neg a\n"
      "  in (e, f, 1:i64[]) }",
      "{ lambda ; a:f32[10,3] b:i32[2,4,1]. let\n"
      "    c:f32[2,4,3] = gather[\n"
      "      dimension_numbers=GatherDimensionNumbers(offset_dims=(2,), "
      "collapsed_slice_dims=(0,), start_index_map=(0,), operand_batching_dims=(), "
      "start_indices_batching_dims=())\n"
      "      fill_value=nan\n"
      "      indices_are_sorted=False\n"
      "      mode=GatherScatterMode.FILL_OR_DROP\n"
      "      slice_sizes=(1, 3)\n"
      "      unique_indices=False\n"
      "    ] a b\n"
      "  in (c,) }",
      "{ lambda ; a:bf16[4,3] b:bf16[3,5]. let\n"
      "    c:f32[4,5] = dot_general[\n"
      "      dimension_numbers=(([1], [0]), ([], []))\n"
      "      preferred_element_type=float32\n"
      "    ] a b\n"
      "  in (c,) }",
      "{ lambda ; a:f32[4,3]. let\n"
      "    b:f32[7,5] = pad[padding_config=((1, 2, 0), (0, 0, 1))] a 0.0:f32[]\n"
      "  in (b,) }",
  };
  for (const char *t : texts) {
    Program p = Parse(t);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Print(p.get()), t);
  }
}

TEST(IrParse, WhitespaceIsInsignificant) {
  Program p = Parse("  {lambda;a:f32[4]  b:f32[4].let\n\n c:f32[4]=add a b\td:bool[4] = lt a "
                    "b in(c,d,)}  \n");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Print(p.get()),
            "{ lambda ; a:f32[4] b:f32[4]. let\n"
            "    c:f32[4] = add a b\n"
            "    d:bool[4] = lt a b\n"
            "  in (c, d) }");
}

// ---------------------------------------------------------------------------
// Malformed text

struct Bad {
  std::string text;
  kiln_status status;
  std::string message;
};

TEST(IrParse, MalformedTextNamesLineColumnAndExpectation) {
  const std::string ok_head = "{ lambda ; a:f32[4]. let ";
  std::string deep = "{ lambda ; . let in () }";
  for (int i = 0; i < 70; i++)
    deep = "{ lambda ; . let cond[branches=(" + deep + ")] 0:i32[] in () }";
  const Bad cases[] = {
      {"{ lambda ; a f32[4]. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:14: expected ':' after variable name 'a', found 'f32[4].'"},
      {"", KILN_ERR_ARGUMENT, "1:1: expected '{' to start a program, found the end of the text"},
      {"{ lambda ; a:f32[4]. in (a,) }", KILN_ERR_ARGUMENT, "1:22: expected 'let', found 'in'"},
      {"{ lamda ; . let in () }", KILN_ERR_ARGUMENT, "1:3: expected 'lambda', found 'lamda'"},
      {ok_head + "b:f32[4] = frob a in (b,) }", KILN_ERR_ARGUMENT,
       "1:37: unknown primitive 'frob'"},
      {"{ lambda ; a:f33[4]. let in (a,) }", KILN_ERR_ARGUMENT, "1:14: unknown dtype 'f33'"},
      {"{ lambda ; a:f32 . let in (a,) }", KILN_ERR_ARGUMENT, "expected '[' after the dtype"},
      {"{ lambda ; a:f32[4. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:18: expected a dimension size, found '4.'"},
      {"{ lambda ; a:f32[-1]. let in (a,) }", KILN_ERR_ARGUMENT, "dimension size -1 is negative"},
      {"{ lambda ; a:f32[1,1,1,1,1,1,1,1,1]. let in (a,) }", KILN_ERR_ARGUMENT,
       "type has more than 8 dimensions"},
      {ok_head + "b:f32[4] = neg c in (b,) }", KILN_ERR_ARGUMENT,
       "1:41: variable 'c' is not defined"},
      {"{ lambda ; a:f32[4] a:f32[4]. let in (a,) }", KILN_ERR_ARGUMENT,
       "1:21: variable 'a' is defined twice"},
      {ok_head + "b:f32[5] = neg a in (b,) }", KILN_ERR_ARGUMENT,
       "1:26: 'b' is declared f32[5] but neg gives f32[4]"},
      {ok_head + "b:f32[4] c:f32[4] = neg a in (b,) }", KILN_ERR_ARGUMENT,
       "1:26: neg gives 1 result but 2 are declared"},
      {"{ lambda ; a:f32[4] c:i32[4]. let b:f32[4] = add a c in (b,) }", KILN_ERR_DTYPE,
       "kir_parse: 1:35: add: operand types f32[4] and i32[4] have different dtypes"},
      {ok_head + "b:f32[] = reduce_sum a in (b,) }", KILN_ERR_ARGUMENT,
       "expected '[' and the params of reduce_sum"},
      {ok_head + "b:f32[] = reduce_sum[axis=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "1:47: reduce_sum has no param 'axis'"},
      {ok_head + "b:i32[] = argmax[axes=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "argmax is missing param 'index_dtype'"},
      {ok_head + "b:f32[] = reduce_sum[axes=(0,) axes=(0,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "param 'axes' is given twice"},
      {ok_head + "b:f32[4] = neg[x=1] a in (b,) }", KILN_ERR_ARGUMENT, "neg takes no params"},
      {ok_head + "b:f32[] = reduce_sum[axes=(0 1)] a in (b,) }", KILN_ERR_ARGUMENT,
       "expected ',' or ')', found '1)]'"},
      {ok_head + "b:f32[] = reduce_sum[axes=0] a in (b,) }", KILN_ERR_ARGUMENT,
       "expected '(', found '0]'"},
      {ok_head + "b:f32[4] = add a 2.0 in (b,) }", KILN_ERR_ARGUMENT,
       "expected ':' and a type after the literal"},
      {ok_head + "b:f32[4] = add a 2.0:f32[4] in (b,) }", KILN_ERR_ARGUMENT,
       "1:43: a literal must have a scalar type"},
      {"{ lambda ; . let b:u8[] = neg 300:u8[] in (b,) }", KILN_ERR_ARGUMENT,
       "kir_parse: 1:31: kir_add_literal: literal 300 does not fit in uint8"},
      {"{ lambda ; . let b:i32[] = neg 2.5:i32[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal 2.5 does not fit type i32"},
      {"{ lambda ; . let b:u32[] = neg -1:u32[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal -1 does not fit type u32"},
      {"{ lambda ; . let b:bool[] = not 1:bool[] in (b,) }", KILN_ERR_ARGUMENT,
       "literal 1 does not fit type bool"},
      {ok_head + "debug_print[fmt=\"abc] a in () }", KILN_ERR_ARGUMENT, "unterminated string"},
      {ok_head + "debug_print[fmt=\"a\\qb\"] a in () }", KILN_ERR_ARGUMENT,
       "unknown escape '\\q' in string"},
      {ok_head + "debug_print[fmt=\"a\\x0g\"] a in () }", KILN_ERR_ARGUMENT,
       "expected two hex digits (not 00) after \\x"},
      {ok_head + "in (a,) } extra", KILN_ERR_ARGUMENT,
       "1:36: expected the end of the text, found 'extra'"},
      {ok_head + "in (a,)", KILN_ERR_ARGUMENT,
       "expected '}' to end the program, found the end of the text"},
      {ok_head + "in a }", KILN_ERR_ARGUMENT, "expected '(' to start the outputs"},
      {ok_head + "in (a b) }", KILN_ERR_ARGUMENT, "expected ',' or ')' in the outputs"},
      {"{ lambda ; in:f32[]. let in (in,) }", KILN_ERR_ARGUMENT,
       "1:12: 'in' is reserved and cannot name a variable"},
      {"{ lambda ; add:f32[]. let in () }", KILN_ERR_ARGUMENT, "'add' is reserved"},
      {"{ lambda ; . let c:f32[] = cond[branches=({ lambda d:f32[]; . let  in (d,) })] "
       "0:i32[] in (c,) }",
       KILN_ERR_ARGUMENT, "kir_add_const: sub-programs are closed"},
      {"{ lambda ; . let c:f32[] = cond[branches=({ lambda ; . let in (1.0:f32[],) })] "
       "0:f32[] in (c,) }",
       KILN_ERR_DTYPE, "1:18: cond: index has type f32[], not i32[]"},
      {"{ lambda ; . let c:f32[] = cond[branches=(1)] 0:i32[] in (c,) }", KILN_ERR_ARGUMENT,
       "expected '{' to start a sub-program"},
      {deep, KILN_ERR_ARGUMENT, "sub-programs nest deeper than 64"},
      {"{ lambda ; a:f32[10,3] b:i32[5,1]. let c:f32[5,3] = gather[dimension_numbers="
       "GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),"
       " operand_batching_dims=(), start_indices_batching_dims=()) fill_value=None "
       "indices_are_sorted=False mode=GatherScatterMode.WRAP slice_sizes=(1, 3) "
       "unique_indices=False] a b in (c,) }",
       KILN_ERR_ARGUMENT, "expected CLIP, FILL_OR_DROP or PROMISE_IN_BOUNDS, found 'WRAP'"},
      {"{ lambda ; a:f32[10,3] b:i32[5,1]. let c:f32[5,3] = gather[dimension_numbers="
       "GatherDimensionNumbers(offset_dims=(1,), start_index_map=(0,))] a b in (c,) }",
       KILN_ERR_ARGUMENT, "1:119: expected 'collapsed_slice_dims', found 'start_index_map='"},
      {"{ lambda ; a:f32[4,3] b:f32[3,5]. let c:f32[4,5] = dot_general[dimension_numbers="
       "(([1], [0]), ([], [])) preferred_element_type=float33] a b in (c,) }",
       KILN_ERR_ARGUMENT, "unknown dtype 'float33'"},
      {ok_head + "b:f32[4] = convert_element_type[new_dtype=float32 weak_type=yes] a in (b,) }",
       KILN_ERR_ARGUMENT, "expected True or False, found 'yes]'"},
      {ok_head + "b:f32[4] = reduce_sum[axes=(300,)] a in (b,) }", KILN_ERR_ARGUMENT,
       "axis 300 is out of range"},
      {"{ lambda ; a:f32[4]. let\n    b:f32[4] = neg a\n    c:f32[4] = sin z\n  in (c,) }",
       KILN_ERR_ARGUMENT, "kir_parse: 3:20: variable 'z' is not defined"},
      {"{ lambda ; a:f32[4]. let\n    b:f32[4] = neg a\n  c = sin b\n  in (c,) }",
       KILN_ERR_ARGUMENT, "kir_parse: 3:3: variable 'c' is not defined"},
  };
  for (const Bad &c : cases) {
    kir_program *p = reinterpret_cast<kir_program *>(0x1);
    kiln_status st = kir_parse(c.text.c_str(), &p);
    EXPECT_EQ(st, c.status) << c.text << "\n  " << kiln_last_error();
    EXPECT_TRUE(Contains(kiln_last_error(), c.message))
        << c.text << "\n  got:  " << kiln_last_error() << "\n  want: " << c.message;
    EXPECT_EQ(std::string(kiln_last_error()).rfind("kir_parse: ", 0), 0u) << kiln_last_error();
    EXPECT_EQ(p, reinterpret_cast<kir_program *>(0x1));  // untouched on failure
  }
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse(nullptr, &p), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_parse: text is NULL"));
}

TEST(IrParse, TypesAlone) {
  kir_aval a;
  ASSERT_EQ(kir_aval_parse("~bf16[2,0,3]", &a), KILN_OK);
  EXPECT_EQ(a.dtype, KILN_BF16);
  EXPECT_TRUE(a.weak);
  EXPECT_EQ(a.rank, 3);
  EXPECT_EQ(a.shape[1], 0);
  EXPECT_EQ(kir_aval_parse("f32[4", &a), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_parse: 1:6: expected ']' to close the shape"));
  EXPECT_EQ(kir_aval_parse("f32[4] x", &a), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "1:8: expected the end of the type, found 'x'"));
}

}  // namespace
