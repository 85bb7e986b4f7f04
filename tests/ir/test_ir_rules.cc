// kiln's IR: the shape/dtype rules against JAX (golden/ir_rules.txt) and
// the errors that name the primitive and types; building programs
// (literals rounded and range-checked, bad arguments, constants).
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
// Shape/dtype rules

TEST(IrRules, MatchJaxGolden) {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/ir_rules.txt");
  ASSERT_TRUE(f.good()) << "missing golden file; run tests/golden/ir_rules.py";
  std::string line;
  int cases = 0, errors = 0;
  std::set<std::string> covered;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> parts;
    size_t start = 0, bar;
    while ((bar = line.find(" | ", start)) != std::string::npos) {
      parts.push_back(line.substr(start, bar - start));
      start = bar + 3;
    }
    parts.push_back(line.substr(start));
    ASSERT_EQ(parts.size(), 4u) << line;
    std::string prim = Trim(parts[0]), expected = Trim(parts[3]);
    std::vector<std::string> types;
    for (auto &t : Split(Trim(parts[1]), ' '))
      if (!t.empty()) types.push_back(t);
    kiln_status st = KILN_OK;
    std::string got = Infer(prim, types, Trim(parts[2]), &st);
    covered.insert(prim);
    cases++;
    if (expected == "ERROR") {
      errors++;
      EXPECT_NE(st, KILN_OK) << line << "\n  kiln accepted it: " << got;
      // The message starts with the primitive's name.
      EXPECT_TRUE(got.rfind("ERROR: " + prim + ":", 0) == 0) << line << "\n  " << got;
      EXPECT_TRUE(st == KILN_ERR_SHAPE || st == KILN_ERR_DTYPE || st == KILN_ERR_ARGUMENT) << got;
    } else {
      EXPECT_EQ(got, expected) << line;
    }
  }
  EXPECT_GT(cases, 400);
  EXPECT_GT(errors, 100);
  // Every primitive except control flow and effects has golden cases
  // (collectives: test_spmd.cc, against JAX inside shard_map; windows:
  // test_window.cc, against JAX's values and errors).
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    const kir_prim_info *info = kir_prim_get((kir_prim)p);
    if (info->family == KIR_FAMILY_CONTROL || info->family == KIR_FAMILY_COLLECTIVE ||
        info->family == KIR_FAMILY_WINDOW)
      continue;
    EXPECT_TRUE(covered.count(info->name)) << info->name << " has no golden case";
  }
}

struct BadCase {
  const char *prim;
  std::vector<std::string> types;
  const char *params;
  kiln_status status;
  const char *message;
};

TEST(IrRules, BadCasesNameThePrimitiveAndTypes) {
  const BadCase cases[] = {
      {"add", {"f32[4,8]", "f32[8]"}, "", KILN_ERR_SHAPE,
       "add: operand types f32[4,8] and f32[8] have incompatible shapes"},
      {"add", {"f32[4]", "i32[4]"}, "", KILN_ERR_DTYPE,
       "add: operand types f32[4] and i32[4] have different dtypes"},
      {"add", {"bool[2]", "bool[2]"}, "", KILN_ERR_DTYPE,
       "add: operand 0 type bool[2] is not accepted (add takes integer or floating dtypes)"},
      {"add", {"f32[2]", "f32[2]", "f32[2]"}, "", KILN_ERR_ARGUMENT,
       "add: expected 2 operands, got 3"},
      {"exp", {"~i32[4]"}, "", KILN_ERR_DTYPE,
       "exp: operand 0 type ~i32[4] is not accepted (exp takes floating dtypes)"},
      {"shift_left", {"i32[3]", "u32[3]"}, "", KILN_ERR_DTYPE, "have different dtypes"},
      {"round", {"f32[3]"}, "rounding_method=2", KILN_ERR_ARGUMENT, "round: rounding_method=2"},
      {"pow", {"f32[3]", "f64[3]"}, "", KILN_ERR_DTYPE, "pow: operand types f32[3] and f64[3]"},
      {"select_n", {"bool[2]", "f32[2]", "f32[2]", "f32[2]"}, "", KILN_ERR_ARGUMENT,
       "select_n: a bool `which` (bool[2]) selects among at most 2 cases"},
      {"clamp", {"f32[3]", "f32[4]", "f32[]"}, "", KILN_ERR_SHAPE,
       "clamp: min type f32[3] is neither scalar nor of x's shape (f32[4])"},
      {"bitcast_convert_type", {"u16[2,3]"}, "new_dtype=float32", KILN_ERR_SHAPE,
       "bitcast_convert_type: u16[2,3] to float32 needs a last dimension of 2"},
      {"broadcast_in_dim", {"f32[3]"}, "shape=(2, 4) broadcast_dimensions=(1,)", KILN_ERR_SHAPE,
       "broadcast_in_dim: operand f32[3] cannot broadcast to shape=(2, 4)"},
      {"broadcast_in_dim", {"f32[3,3]"}, "shape=(3, 3) broadcast_dimensions=(0, 0)",
       KILN_ERR_ARGUMENT, "broadcast_in_dim: broadcast_dimensions=(0, 0) repeats 0"},
      {"reshape", {"f32[4,5]"}, "new_sizes=(7,)", KILN_ERR_SHAPE,
       "reshape: cannot reshape f32[4,5] to new_sizes=(7,) (7 elements)"},
      {"transpose", {"f32[2,3]"}, "permutation=(0,)", KILN_ERR_SHAPE,
       "transpose: permutation=(0,) is not a permutation of the dimensions of f32[2,3]"},
      {"squeeze", {"f32[2,3]"}, "dimensions=(0,)", KILN_ERR_SHAPE,
       "squeeze: dimension 0 of f32[2,3] has size 2, not 1"},
      {"slice", {"f32[4]"}, "start_indices=(0,) limit_indices=(5,) strides=(1,)", KILN_ERR_SHAPE,
       "slice: start_indices=(0,) limit_indices=(5,) strides=(1,) do not fit operand f32[4]"},
      {"dynamic_slice", {"f32[4,5]", "i32[]"}, "slice_sizes=(2, 2)", KILN_ERR_SHAPE,
       "dynamic_slice: operand f32[4,5] needs 2 start indices, got 1"},
      {"concatenate", {"f32[2,3]", "f32[2,4]"}, "dimension=0", KILN_ERR_SHAPE,
       "concatenate: operand types f32[2,3] and f32[2,4] differ in more than dimension 0"},
      {"pad", {"f32[4]", "f32[1]"}, "padding_config=((0, 0, 0),)", KILN_ERR_SHAPE,
       "pad: padding value f32[1] is not a scalar"},
      {"iota", {}, "dimension=0 dtype=bool shape=(2,)", KILN_ERR_DTYPE,
       "iota: dtype bool is not accepted"},
      {"gather",
       {"f32[10,3]", "f32[2,1]"},
       "dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), "
       "start_index_map=(0,), operand_batching_dims=(), start_indices_batching_dims=()) "
       "fill_value=None indices_are_sorted=False mode=GatherScatterMode.CLIP slice_sizes=(1, 3) "
       "unique_indices=False",
       KILN_ERR_DTYPE, "gather: indices f32[2,1] must have an integer dtype"},
      {"reduce_sum", {"f32[4,8]"}, "axes=(2,)", KILN_ERR_SHAPE,
       "reduce_sum: axes=(2,) has 2 outside [0, 2) for operand f32[4,8]"},
      {"reduce_max", {"f32[4,8]"}, "axes=(1, 1)", KILN_ERR_ARGUMENT,
       "reduce_max: axes=(1, 1) repeats 1"},
      {"reduce_sum", {"bool[3]"}, "axes=(0,)", KILN_ERR_DTYPE,
       "reduce_sum: operand 0 type bool[3] is not accepted"},
      {"argmax", {"f32[4,8]"}, "axes=(0, 1) index_dtype=int32", KILN_ERR_ARGUMENT,
       "argmax: axes=(0, 1) must name exactly one axis"},
      {"argmin", {"f32[4,8]"}, "axes=(1,) index_dtype=float32", KILN_ERR_DTYPE,
       "argmin: index_dtype float32 is not an integer dtype"},
      {"cumsum", {"f32[4]"}, "axis=1 reverse=False", KILN_ERR_SHAPE,
       "cumsum: axis=1 is outside [0, 1) for operand f32[4]"},
      {"sort", {"f32[4,5]"}, "dimension=0 is_stable=True num_keys=2", KILN_ERR_ARGUMENT,
       "sort: num_keys=2 is outside [1, 1]"},
      {"dot_general", {"f32[4,3]", "f32[4,5]"},
       "dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=None", KILN_ERR_SHAPE,
       "dot_general: contracting dimensions of f32[4,3] and f32[4,5] differ in size"},
      {"dot_general", {"i32[4,3]", "i32[3,5]"},
       "dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=int8", KILN_ERR_DTYPE,
       "dot_general: preferred_element_type int8 is narrower than the result type int32"},
      {"threefry2x32", {"u32[]", "u32[]", "i32[3]", "u32[3]"}, "", KILN_ERR_DTYPE,
       "threefry2x32: operand 2 has type i32[3], not uint32"},
      {"convert_element_type", {"f32[2]"}, "new_dtype=float32 weak_type=False", KILN_OK, ""},
  };
  for (const auto &c : cases) {
    kiln_status st = KILN_OK;
    std::string got = Infer(c.prim, c.types, c.params, &st);
    EXPECT_EQ(st, c.status) << c.prim << ": " << got;
    if (c.status != KILN_OK) {
      EXPECT_TRUE(Contains(got, c.message)) << got;
    }
  }
}

// ---------------------------------------------------------------------------
// Building

TEST(IrBuild, LiteralsAreRoundedAndRangeChecked) {
  Program p = NewProgram();
  kir_vid v;
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F16, false, kir_scalar_f(0.1), &v), KILN_OK);
  EXPECT_EQ(p->vars[v].u.literal.f, (double)kiln_f16_to_f32(kiln_f32_to_f16(0.1f)));
  ASSERT_EQ(kir_add_literal(p.get(), KILN_BF16, true, kir_scalar_f(1.0 / 3), &v), KILN_OK);
  EXPECT_EQ(p->vars[v].u.literal.f, (double)kiln_bf16_to_f32(kiln_f32_to_bf16(1.0f / 3)));
  EXPECT_TRUE(p->vars[v].aval.weak);
  // 65519 lies below f16's overflow edge (65520): it rounds to the largest f16, 65504.
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F16, false, kir_scalar_f(65519.0), &v), KILN_OK);
  EXPECT_EQ(p->vars[v].u.literal.f, 65504.0);
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F16, false, kir_scalar_f(65520.0), &v), KILN_OK);
  EXPECT_TRUE(std::isinf(p->vars[v].u.literal.f));
  // Double rounding through f32 would give the wrong f16 here: 1 + 2^-11 + 2^-40
  // rounds to 1 + 2^-11 in f32 (a tie in f16, to even: 1.0); the true nearest is 1 + 2^-10.
  double tricky = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F16, false, kir_scalar_f(tricky), &v), KILN_OK);
  EXPECT_EQ(p->vars[v].u.literal.f, 1.0 + std::ldexp(1.0, -10));

  EXPECT_EQ(kir_add_literal(p.get(), KILN_U8, false, kir_scalar_u(256), &v), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_literal: literal 256 does not fit in uint8"));
  EXPECT_EQ(kir_add_literal(p.get(), KILN_I8, false, kir_scalar_i(-129), &v), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_literal: literal -129 does not fit in int8"));
  EXPECT_EQ(kir_add_literal(p.get(), KILN_BOOL, false, kir_scalar_i(2), &v), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_literal: bool literal must be 0 or 1"));
  EXPECT_EQ(kir_add_literal(p.get(), KILN_INVALID_DTYPE, false, kir_scalar_i(0), &v),
            KILN_ERR_DTYPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_literal: invalid dtype"));
  ASSERT_EQ(kir_add_literal(p.get(), KILN_U64, false, kir_scalar_u(~0ull), &v), KILN_OK);
  EXPECT_EQ(p->vars[v].u.literal.u, ~0ull);
  // Every NaN becomes the one positive quiet NaN (the text form has just "nan").
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F32, false, kir_scalar_f(-NAN), &v), KILN_OK);
  EXPECT_TRUE(std::isnan(p->vars[v].u.literal.f));
  EXPECT_FALSE(std::signbit(p->vars[v].u.literal.f));
  kir_vid w;
  ASSERT_EQ(kir_add_literal(p.get(), KILN_F32, false, kir_scalar_f(NAN), &w), KILN_OK);
  EXPECT_TRUE(kir_scalar_equal(KILN_F32, p->vars[v].u.literal, p->vars[w].u.literal));
}

TEST(IrBuild, BadArgumentsAreRejected) {
  Program p = NewProgram();
  kir_vid a = Invar(p.get(), "f32[4]");
  kir_vid v;
  kir_aval bad = kir_aval_make(KILN_F32, 9, nullptr, false);
  EXPECT_EQ(kir_add_invar(p.get(), &bad, &v), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_invar: rank 9 is outside [0, 8]"));
  int64_t neg[] = {-1};
  bad = kir_aval_make(KILN_F32, 1, neg, false);
  EXPECT_EQ(kir_add_invar(p.get(), &bad, &v), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_invar: dimension 0 of f32[-1] is negative"));
  EXPECT_EQ(kir_add_invar(nullptr, &bad, &v), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_invar: program is NULL"));

  kir_vid ins[] = {a, 42};
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_ADD, nullptr, 2, ins, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "add: operand 1 (var 42) is not a var of the program"));
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_REDUCE_SUM, nullptr, 1, &a, nullptr),
            KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "reduce_sum: params are NULL"));
  EXPECT_EQ(kir_add_eqn(p.get(), (kir_prim)999, nullptr, 1, &a, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_eqn: invalid primitive 999"));
  kir_params par;
  memset(&par, 0, sizeof par);
  par.axes.axes.n = 12;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_REDUCE_SUM, &par, 1, &a, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "reduce_sum: param axes has 12 entries (at most 8)"));
  // A failed equation leaves no equation behind.
  EXPECT_EQ(p->n_eqns, 0);
  EXPECT_EQ(kir_set_outputs(p.get(), 1, ins + 1), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_set_outputs: operand 0 (var 42)"));
}

TEST(IrBuild, ConstantsAreRootOnlyAndChecked) {
  Program p = NewProgram();
  kir_aval t = A("f32[3]");
  float data[3] = {1, 2, 3};
  kir_vid c;
  EXPECT_EQ(kir_add_const_host(p.get(), &t, data, 8, &c), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_const_bind_host: 8 bytes given for f32[3]"));
  ASSERT_EQ(kir_add_const_host(p.get(), &t, data, sizeof data, &c), KILN_OK);
  data[0] = 99;  // copied, not borrowed
  float got;
  memcpy(&got, p->vars[c].u.constant.host, sizeof got);
  EXPECT_EQ(got, 1.0f);
  EXPECT_EQ(kir_const_bind_host(p.get(), c, data, sizeof data), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_const_bind_host: constvar"));
  kir_program *sub;
  ASSERT_EQ(kir_program_new_sub(p.get(), &sub), KILN_OK);
  EXPECT_EQ(kir_add_const(sub, &t, &c), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kir_add_const: sub-programs are closed"));
}

TEST(IrBuild, ArrayConstantsHoldAReference) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.num_cpu_devices = 1;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  const int64_t shape[] = {2, 2};
  int32_t data[4] = {1, 2, 3, 4};
  kiln_array *arr = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev, KILN_I32, 2, shape, data, sizeof data, &arr), KILN_OK);
  {
    Program p = NewProgram();
    kir_vid c;
    ASSERT_EQ(kir_add_const_array(p.get(), arr, &c), KILN_OK) << kiln_last_error();
    kiln_array_release(arr);  // the program keeps it alive
    kir_vid x = Invar(p.get(), "i32[2,2]");
    Outputs(p.get(), {Eqn(p.get(), "add", {c, x})});
    EXPECT_EQ(Print(p.get()),
              "{ lambda a:i32[2,2]; b:i32[2,2]. let c:i32[2,2] = add a b in (c,) }");
    int32_t back[4];
    ASSERT_EQ(kiln_array_to_host(p->vars[c].u.constant.array, back, sizeof back), KILN_OK);
    EXPECT_EQ(back[3], 4);
    kir_aval wrong = A("f32[2,2]");
    kir_vid c2;
    ASSERT_EQ(kir_add_const(p.get(), &wrong, &c2), KILN_OK);
    EXPECT_EQ(kir_const_bind_array(p.get(), c2, p->vars[c].u.constant.array), KILN_ERR_SHAPE);
    EXPECT_TRUE(Contains(kiln_last_error(),
                         "kir_const_bind_array: array i32[2,2] does not match the constvar's "
                         "type f32[2,2]"));
  }  // freeing the program releases the last reference
  kiln_ctx_free(ctx);
}

}  // namespace
