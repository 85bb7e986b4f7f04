// The code generator where dtypes meet in one kernel, on zero-size arrays,
// constvars and literals, and edge semantics against values JAX computed
// (tests/golden/codegen.py; codegen_checks.h).
#include <gtest/gtest.h>

#include "codegen_checks.h"

using namespace codegen_test;

// ---------------------------------------------------------------------------
// Mixed dtypes, empty arrays, constants

TEST(CodegenMixed, DtypesMeetInOneKernel) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f16[7,9] b:bf16[9] c:i32[7,9] d:bool[7,9] e:u8[]. let
      f:f32[7,9] = convert_element_type[new_dtype=float32 weak_type=False] a
      g:f32[9] = convert_element_type[new_dtype=float32 weak_type=False] b
      h:f32[7,9] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(7, 9)] g
      i:f32[7,9] = convert_element_type[new_dtype=float32 weak_type=False] c
      j:f32[7,9] = mul f h
      k:f32[7,9] = add j i
      l:f32[7,9] = select_n d k f
      m:bf16[7,9] = convert_element_type[new_dtype=bfloat16 weak_type=False] l
      n:f16[7,9] = mul a a
      o:i32[7,9] = convert_element_type[new_dtype=int32 weak_type=False] l
      p:u8[7,9] = convert_element_type[new_dtype=uint8 weak_type=False] d
      q:u8[7,9] = add p e
    in (m, n, o, q) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 60);
  std::mt19937_64 rng(61);
  Fill(in[2], rng, Domain::kSmallInt);
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "mixed");
}

TEST(CodegenMixed, ZeroSizeArrays) {
  Checks checks;
  // An empty loop, reductions over an empty axis (the identities), and a
  // ROW group without rows.
  Program loop = Parse(R"({ lambda ; a:f32[0,4] b:f32[1,4]. let
      c:f32[0,4] = add a b
      d:f32[4,0] = transpose[permutation=(1, 0)] c
    in (d,) })");
  ASSERT_TRUE(loop);
  std::vector<Buf> in = Inputs(loop.get(), 70);
  const kcg_kernel *k = checks.Add(std::move(loop), KFUSE_LOOP, in, Tol(), "empty loop");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 0);

  Program red = Parse(R"({ lambda ; a:f32[3,0] b:i32[3,0] c:bool[3,0]. let
      d:f32[3] = reduce_sum[axes=(1,)] a
      e:f32[3] = reduce_max[axes=(1,)] a
      f:i32[3] = reduce_min[axes=(1,)] b
      g:bool[3] = reduce_and[axes=(1,)] c
      h:f32[3] = reduce_prod[axes=(1,)] a
    in (d, e, f, g, h) })");
  ASSERT_TRUE(red);
  in = Inputs(red.get(), 71);
  checks.Add(std::move(red), KFUSE_REDUCE, in, Tol(), "empty reductions");

  Program row = Parse(Softmax(0, 16));
  ASSERT_TRUE(row);
  in = Inputs(row.get(), 72);
  k = checks.Add(std::move(row), KFUSE_ROW, in, Tol(), "no rows");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 0);

  Program empty_rows = Parse(Softmax(3, 0));
  ASSERT_TRUE(empty_rows);
  in = Inputs(empty_rows.get(), 73);
  k = checks.Add(std::move(empty_rows), KFUSE_ROW, in, Tol(), "rows of length 0");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 3);
  EXPECT_EQ(k->row_length, 0);
}

// Constvars are inputs the runtime passes like any other; literals are
// inlined, also when the group lists them among its inputs.
TEST(CodegenMixed, ConstvarsAndLiterals) {
  Checks checks;
  Program p = Parse(R"({ lambda c:f32[5]; a:f32[3,5]. let
      d:f32[3,5] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(3, 5)] c
      e:f32[3,5] = mul a d
      f:f32[3,5] = add e 1.5:f32[]
      g:f32[3,5] = max f -0.0:f32[]
    in (g,) })");
  ASSERT_TRUE(p);
  float cdata[5] = {1.0f, -2.0f, 0.5f, 4.0f, -0.25f};
  ASSERT_EQ(kir_const_bind_host(p.get(), p->constvars[0], cdata, sizeof cdata), KILN_OK)
      << kiln_last_error();
  Group g(p.get(), KFUSE_LOOP);
  // list the literal 1.5 among the inputs, where a planner may put it
  const kir_eqn *add = &p->eqns[2];
  g.in.push_back(add->in[1]);
  ASSERT_EQ(p->vars[add->in[1]].kind, KIR_VAR_LITERAL);
  std::vector<Buf> in = Inputs(p.get(), 80);
  const kcg_kernel *k = checks.Add(std::move(p), std::move(g), in, Tol(), "constvars");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_args, 4);
  EXPECT_TRUE(Contains(k->source, "args.ptr[1]"));   // the constvar
  EXPECT_FALSE(Contains(k->source, "args.ptr[2]"));  // the literal is inline
  EXPECT_TRUE(Contains(k->source, "1.5f"));
}

// ---------------------------------------------------------------------------
// Edge semantics against JAX (tests/golden/codegen.py)

namespace {

struct GoldenArray {
  kiln_dtype dtype = KILN_INVALID_DTYPE;
  std::vector<uint64_t> bits;
  double tol = 0;
};

struct GoldenCase {
  std::string name, program;
  std::vector<GoldenArray> inputs;
  GoldenArray output;
};

GoldenArray ParseArray(std::istringstream &in, bool with_tol) {
  GoldenArray a;
  std::string dt;
  size_t n = 0;
  in >> dt >> n;
  EXPECT_EQ(kiln_dtype_from_name(dt.c_str(), &a.dtype), KILN_OK) << dt;
  for (size_t i = 0; i < n; i++) {
    std::string h;
    in >> h;
    a.bits.push_back(std::stoull(h, nullptr, 16));
  }
  if (with_tol) in >> a.tol;
  return a;
}

std::vector<GoldenCase> ReadGolden() {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/codegen.txt");
  EXPECT_TRUE(f.good()) << "missing golden file; run tests/golden/codegen.py";
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "case") {
      cases.emplace_back();
      in >> cases.back().name;
    } else if (word == "program") {
      cases.back().program = line.substr(8);
    } else if (word == "input") {
      cases.back().inputs.push_back(ParseArray(in, false));
    } else if (word == "output") {
      cases.back().output = ParseArray(in, true);
    }
  }
  return cases;
}

}  // namespace

TEST(CodegenGolden, EdgeSemanticsMatchJax) {
  std::vector<GoldenCase> cases = ReadGolden();
  ASSERT_GE(cases.size(), 40u);
  Checks checks;
  for (const GoldenCase &gc : cases) {
    Program p = Parse(gc.program);
    ASSERT_TRUE(p) << gc.name;
    std::vector<Buf> in;
    for (size_t k = 0; k < gc.inputs.size(); k++) {
      in.emplace_back(*kir_var_aval(p.get(), p->invars[k]));
      ASSERT_EQ(in.back().size(), (int64_t)gc.inputs[k].bits.size()) << gc.name;
      for (size_t i = 0; i < gc.inputs[k].bits.size(); i++)
        in.back().SetBits((int64_t)i, gc.inputs[k].bits[i]);
    }
    Buf want(*kir_var_aval(p.get(), p->outvars[0]));
    ASSERT_EQ(want.size(), (int64_t)gc.output.bits.size()) << gc.name;
    for (size_t i = 0; i < gc.output.bits.size(); i++) want.SetBits((int64_t)i, gc.output.bits[i]);
    kfuse_kind kind = Contains(gc.program, "reduce_") ? KFUSE_REDUCE : KFUSE_LOOP;
    ASSERT_TRUE(checks.Add(std::move(p), kind, in, Tol(), gc.name));
    checks.Expect(want, gc.output.tol);
  }
}
