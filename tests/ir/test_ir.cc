// kiln's IR: shape/dtype rules against JAX, building, verification,
// printing and the DCE/CSE/fold passes. (Parsing: test_ir_parse.cc.)
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

namespace {

struct ProgramFree {
  void operator()(kir_program *p) const { kir_program_free(p); }
};
using Program = std::unique_ptr<kir_program, ProgramFree>;

Program NewProgram() {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_program_new(&p), KILN_OK) << kiln_last_error();
  return Program(p);
}

kir_aval A(const char *text) {
  kir_aval a;
  EXPECT_EQ(kir_aval_parse(text, &a), KILN_OK) << text << ": " << kiln_last_error();
  return a;
}

std::string Str(const kir_aval &a) {
  char buf[KIR_AVAL_STR_CAP];
  return kir_aval_str(&a, buf, sizeof buf);
}

std::string Print(const kir_program *p) {
  char *text = nullptr;
  kiln_status st = kir_print(p, &text);
  EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  std::string s = text ? text : "";
  free(text);
  return s;
}

bool Contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

kir_prim Prim(const std::string &name) {
  kir_prim p = KIR_NUM_PRIMS;
  EXPECT_TRUE(kir_prim_lookup(name.data(), name.size(), &p)) << name;
  return p;
}

kir_vid Invar(kir_program *p, const char *type) {
  kir_aval a = A(type);
  kir_vid v = KIR_NO_VAR;
  EXPECT_EQ(kir_add_invar(p, &a, &v), KILN_OK) << kiln_last_error();
  return v;
}

kir_vid Lit(kir_program *p, kiln_dtype dt, double v, bool weak = false) {
  kir_vid out = KIR_NO_VAR;
  kir_scalar s = kiln_dtype_is_float(dt) ? kir_scalar_f(v) : kir_scalar_i((int64_t)v);
  EXPECT_EQ(kir_add_literal(p, dt, weak, s, &out), KILN_OK) << kiln_last_error();
  return out;
}

// Adds prim(ins)[params text]; returns the first output (or KIR_NO_VAR).
kir_vid Eqn(kir_program *p, const char *prim, std::vector<kir_vid> ins, const char *params = "") {
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_prim pr = Prim(prim);
  EXPECT_EQ(kir_params_parse(p, pr, params, &par), KILN_OK) << kiln_last_error();
  int idx = -1;
  kiln_status st = kir_add_eqn(p, pr, &par, (int)ins.size(), ins.data(), &idx);
  EXPECT_EQ(st, KILN_OK) << prim << ": " << kiln_last_error();
  if (st != KILN_OK || p->eqns[idx].n_out == 0) return KIR_NO_VAR;
  return p->eqns[idx].out[0];
}

void Outputs(kir_program *p, std::vector<kir_vid> outs) {
  ASSERT_EQ(kir_set_outputs(p, (int)outs.size(), outs.data()), KILN_OK) << kiln_last_error();
}

// Runs prim's rule on the types; returns "ERROR: <message>" on failure.
std::string Infer(const std::string &prim, const std::vector<std::string> &types,
                  const std::string &params, kiln_status *status = nullptr) {
  Program p = NewProgram();
  std::vector<kir_aval> in;
  for (auto &t : types) in.push_back(A(t.c_str()));
  kir_params par;
  kir_prim pr = Prim(prim);
  kiln_status st = kir_params_parse(p.get(), pr, params.c_str(), &par);
  EXPECT_EQ(st, KILN_OK) << prim << " [" << params << "]: " << kiln_last_error();
  if (st != KILN_OK) return "PARAMS";
  kir_avals outs;
  kir_avals_init(&outs);
  st = kir_infer(pr, &par, (int)in.size(), in.data(), &outs);
  if (status) *status = st;
  std::string r;
  if (st != KILN_OK) {
    r = std::string("ERROR: ") + kiln_last_error();
  } else {
    for (int i = 0; i < outs.n; i++) r += (i ? " " : "") + Str(outs.v[i]);
  }
  kir_avals_free(&outs);
  return r;
}

std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

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

// ---------------------------------------------------------------------------
// Control flow

struct Branch {
  kir_program *p;
};

kir_program *Sub(kir_program *parent) {
  kir_program *s = nullptr;
  EXPECT_EQ(kir_program_new_sub(parent, &s), KILN_OK);
  return s;
}

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
