// Reference evaluators of the elementwise primitives (src/ir/elementwise.c)
// against JAX: every primitive, every dtype it accepts, edge values
// (NaN, infinities, -0.0, subnormals, integer extremes), lax broadcasting,
// rank 0 and empty arrays. Data: tests/golden/eval_elementwise.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"

namespace {

using kiln_test::Parse;
using kiln_test::Program;

// One array of a golden case: its type and raw element bytes.
struct Array {
  kir_aval aval;
  std::vector<uint8_t> bytes;
};

// prim | params | tol | operand ... | result
struct Case {
  std::string where;  // file:line
  std::string prim, params;
  double tol = 0;
  std::vector<Array> operands;
  Array result;
};

std::vector<std::string> SplitFields(const std::string &line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t bar = line.find(" | ", start);
    out.push_back(line.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) return out;
    start = bar + 3;
  }
}

std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// "f32[2] 3f800000 0" -> the aval and little-endian element bytes.
bool ParseArray(const std::string &text, Array *out, std::string *err) {
  std::istringstream in(text);
  std::string type;
  in >> type;
  if (kir_aval_parse(type.c_str(), &out->aval) != KILN_OK) {
    *err = "bad type " + type + ": " + kiln_last_error();
    return false;
  }
  size_t size = kiln_dtype_size(out->aval.dtype);
  int64_t n = kir_aval_size(&out->aval);
  out->bytes.assign((size_t)n * size, 0);
  std::string tok;
  for (int64_t i = 0; i < n; i++) {
    if (!(in >> tok)) {
      *err = "too few values for " + type;
      return false;
    }
    uint64_t bits = std::stoull(tok, nullptr, 16);
    for (size_t b = 0; b < size; b++) out->bytes[(size_t)i * size + b] = (uint8_t)(bits >> (8 * b));
  }
  if (in >> tok) {
    *err = "too many values for " + type;
    return false;
  }
  return true;
}

std::vector<Case> LoadCases(const std::string &name) {
  std::string path = std::string(KILN_GOLDEN_DIR) + "/" + name;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path << "; run tests/golden/eval_elementwise.py";
  std::vector<Case> cases;
  std::string line;
  for (int lineno = 1; std::getline(f, line); lineno++) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = SplitFields(line);
    Case c;
    c.where = name + ":" + std::to_string(lineno);
    EXPECT_GE(fields.size(), 5u) << c.where;
    if (fields.size() < 5) continue;
    c.prim = Trim(fields[0]);
    c.params = Trim(fields[1]);
    c.tol = std::stod(fields[2]);
    std::string err;
    bool ok = true;
    for (size_t i = 3; ok && i + 1 < fields.size(); i++) {
      c.operands.emplace_back();
      ok = ParseArray(fields[i], &c.operands.back(), &err);
    }
    ok = ok && ParseArray(fields.back(), &c.result, &err);
    EXPECT_TRUE(ok) << c.where << ": " << err;
    if (ok) cases.push_back(std::move(c));
  }
  EXPECT_FALSE(cases.empty()) << path;
  return cases;
}

uint64_t ElementBits(const Array &a, int64_t i) {
  size_t size = kiln_dtype_size(a.aval.dtype);
  uint64_t bits = 0;
  for (size_t b = 0; b < size; b++) bits |= (uint64_t)a.bytes[(size_t)i * size + b] << (8 * b);
  return bits;
}

double FloatValue(kiln_dtype dt, uint64_t bits) {
  switch (dt) {
    case KILN_F16: return kiln_f16_to_f32((uint16_t)bits);
    case KILN_BF16: return kiln_bf16_to_f32((uint16_t)bits);
    case KILN_F32: {
      float f;
      uint32_t u = (uint32_t)bits;
      memcpy(&f, &u, sizeof f);
      return f;
    }
    default: {
      double d;
      memcpy(&d, &bits, sizeof d);
      return d;
    }
  }
}

// Bit for bit (tol 0; any NaN matches any NaN), or JAX's assert_allclose:
// |got - want| <= tol + tol * |want|, equal infinities, NaN for NaN.
bool Matches(kiln_dtype dt, uint64_t got, uint64_t want, double tol) {
  if (!kiln_dtype_is_float(dt)) return got == want;
  double g = FloatValue(dt, got), w = FloatValue(dt, want);
  if (std::isnan(g) || std::isnan(w)) return std::isnan(g) && std::isnan(w);
  if (tol == 0) return got == want;
  if (std::isinf(g) || std::isinf(w)) return g == w;
  return std::fabs(g - w) <= tol + tol * std::fabs(w);
}

// The element of operand `x` that result element i reads under lax
// broadcasting (rank 0, or size-1 dimensions).
int64_t OperandIndex(const kir_aval &x, const kir_aval &out, int64_t i) {
  if (x.rank == 0) return 0;
  int64_t index = 0, step = 1;
  for (int d = out.rank - 1; d >= 0; d--) {
    int64_t coord = i % out.shape[d];
    i /= out.shape[d];
    if (x.shape[d] != 1) index += coord * step;
    step *= x.shape[d];
  }
  return index;
}

std::string Hex(uint64_t v) {
  std::ostringstream s;
  s << std::hex << v;
  return s.str();
}

std::string TypeStr(const kir_aval &a) {
  char buf[KIR_AVAL_STR_CAP];
  return kir_aval_str(&a, buf, sizeof buf);
}

// Builds `prim[params](operands...)` as a one-equation program, evaluates it
// with the reference evaluators and returns the result's bytes.
bool Evaluate(const Case &c, std::vector<uint8_t> *result, std::string *err) {
  kir_program *raw = nullptr;
  if (kir_program_new(&raw) != KILN_OK) {
    *err = kiln_last_error();
    return false;
  }
  Program p(raw);
  kir_prim prim;
  if (!kir_prim_lookup(c.prim.data(), c.prim.size(), &prim)) {
    *err = "unknown primitive " + c.prim;
    return false;
  }
  std::vector<kir_vid> ins;
  for (const Array &a : c.operands) {
    kir_vid v;
    if (kir_add_invar(p.get(), &a.aval, &v) != KILN_OK) {
      *err = kiln_last_error();
      return false;
    }
    ins.push_back(v);
  }
  kir_params params;
  memset(&params, 0, sizeof params);
  int eqn = -1;
  if (kir_params_parse(p.get(), prim, c.params.c_str(), &params) != KILN_OK ||
      kir_add_eqn(p.get(), prim, &params, (int)ins.size(), ins.data(), &eqn) != KILN_OK ||
      kir_set_outputs(p.get(), 1, p->eqns[eqn].out) != KILN_OK) {
    *err = kiln_last_error();
    return false;
  }
  const kir_aval *out_aval = kir_var_aval(p.get(), p->eqns[eqn].out[0]);
  if (!kir_aval_same_shape(out_aval, &c.result.aval) || out_aval->dtype != c.result.aval.dtype) {
    *err = "rule gives " + TypeStr(*out_aval) + ", JAX " + TypeStr(c.result.aval);
    return false;
  }
  std::vector<kir_buffer> in;
  for (const Array &a : c.operands)
    in.push_back(kir_buffer{a.aval, (void *)a.bytes.data(), a.bytes.size()});
  // Never a zero-length pointer, as the executor promises evaluators.
  result->assign(c.result.bytes.size() + 1, 0xcd);
  kir_buffer out{*out_aval, result->data(), c.result.bytes.size()};
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  if (kir_eval_program(&env, p.get(), in.data(), &out) != KILN_OK) {
    *err = kiln_last_error();
    return false;
  }
  EXPECT_EQ(result->back(), 0xcd) << c.where << ": wrote past the result";
  result->pop_back();
  return true;
}

// Runs every case of a golden file; reports each wrong element (up to a few
// per case) with its operands.
void CheckFile(const std::string &name) {
  int checked = 0, failed_cases = 0;
  for (const Case &c : LoadCases(name)) {
    std::vector<uint8_t> bytes;
    std::string err;
    if (!Evaluate(c, &bytes, &err)) {
      ADD_FAILURE() << c.where << " " << c.prim << ": " << err;
      failed_cases++;
      continue;
    }
    Array got{c.result.aval, bytes};
    int64_t n = kir_aval_size(&c.result.aval);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      uint64_t g = ElementBits(got, i), w = ElementBits(c.result, i);
      if (Matches(c.result.aval.dtype, g, w, c.tol)) continue;
      if (++bad > 4) continue;
      std::ostringstream msg;
      msg << c.where << " " << c.prim << "[" << c.params << "] element " << i << " of "
          << TypeStr(c.result.aval) << ": got " << Hex(g) << " want " << Hex(w);
      if (kiln_dtype_is_float(c.result.aval.dtype))
        msg << " (" << FloatValue(c.result.aval.dtype, g) << " vs "
            << FloatValue(c.result.aval.dtype, w) << ", tol " << c.tol << ")";
      msg << "; operands";
      for (const Array &a : c.operands) {
        uint64_t bits = ElementBits(a, OperandIndex(a.aval, c.result.aval, i));
        msg << " " << TypeStr(a.aval) << ":" << Hex(bits);
        if (kiln_dtype_is_float(a.aval.dtype)) msg << "=" << FloatValue(a.aval.dtype, bits);
      }
      ADD_FAILURE() << msg.str();
    }
    if (bad > 4) ADD_FAILURE() << c.where << " " << c.prim << ": " << bad << " wrong elements";
    failed_cases += bad > 0;
    checked++;
  }
  EXPECT_EQ(failed_cases, 0);
  EXPECT_GT(checked, 0);
}

// Runs p on host inputs (raw bytes per invar); returns each output's bytes.
std::vector<std::vector<uint8_t>> RunProgram(const kir_program *p,
                                             const std::vector<std::vector<uint8_t>> &inputs) {
  std::vector<kir_buffer> in;
  for (int i = 0; i < p->n_invars; i++) {
    const kir_aval *a = kir_var_aval(p, p->invars[i]);
    const std::vector<uint8_t> &bytes = inputs.at((size_t)i);
    in.push_back(kir_buffer{*a, (void *)bytes.data(), bytes.size()});
  }
  std::vector<std::vector<uint8_t>> results((size_t)p->n_outvars);
  std::vector<kir_buffer> out;
  for (int i = 0; i < p->n_outvars; i++) {
    const kir_aval *a = kir_var_aval(p, p->outvars[i]);
    results[(size_t)i].resize((size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype) + 1);
    out.push_back(kir_buffer{*a, results[(size_t)i].data(), results[(size_t)i].size() - 1});
  }
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  EXPECT_EQ(kir_eval_program(&env, p, in.data(), out.data()), KILN_OK) << kiln_last_error();
  for (auto &r : results) r.pop_back();
  return results;
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) memcpy(b.data(), v.data(), b.size());
  return b;
}

template <typename T>
std::vector<T> Values(const std::vector<uint8_t> &b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(EvalElementwise, EveryElementwisePrimitiveHasAnEvaluator) {
  const kir_eval_table *t = kir_reference_evals();
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    if (kir_prim_get((kir_prim)p)->family != KIR_FAMILY_ELEMENTWISE) continue;
    EXPECT_NE(t->fn[p], nullptr) << kir_prim_name((kir_prim)p);
  }
}

// Moving data without arithmetic keeps every bit, NaN payloads and
// signaling NaNs included.
TEST(EvalElementwise, SelectSameTypeConvertAndBitcastKeepNaNPayloads) {
  Program p = Parse(
      "{ lambda ; a:f32[4] b:f32[4] c:bool[4] w:i32[]. let\n"
      "    d:f32[4] = select_n c a b\n"
      "    e:f32[4] = select_n w a b\n"
      "    f:f32[4] = convert_element_type[new_dtype=float32 weak_type=False] a\n"
      "    g:u32[4] = bitcast_convert_type[new_dtype=uint32] b\n"
      "  in (d, e, f, g) }");
  ASSERT_TRUE(p);
  std::vector<uint32_t> a = {0x7fc12345u, 0xff800001u, 0x00000001u, 0x80400000u};
  std::vector<uint32_t> b = {0xffc00000u, 0x7f812345u, 0x80000001u, 0x3f800000u};
  std::vector<uint8_t> c = {1, 0, 1, 0};
  std::vector<int32_t> w = {7};  // past the last case: clamped to it
  auto r = RunProgram(p.get(), {Bytes(a), Bytes(b), c, Bytes(w)});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(Values<uint32_t>(r[0]), (std::vector<uint32_t>{b[0], a[1], b[2], a[3]}));
  EXPECT_EQ(Values<uint32_t>(r[1]), b);
  EXPECT_EQ(Values<uint32_t>(r[2]), a);
  EXPECT_EQ(Values<uint32_t>(r[3]), b);
}

// Constant folding runs the same evaluators: add, then convert with
// saturation, over literals; the folded program computes what the
// unfolded one did.
TEST(EvalElementwise, FoldingUsesTheReferenceEvaluators) {
  const char *text =
      "{ lambda ; a:f32[3]. let\n"
      "    b:f32[] = add 2.0:f32[] 3.0:f32[]\n"
      "    c:f32[3] = mul a b\n"
      "    d:i8[] = convert_element_type[new_dtype=int8 weak_type=False] 300.0:f32[]\n"
      "  in (c, d) }";
  Program p = Parse(text);
  ASSERT_TRUE(p);
  std::vector<float> a = {1.5f, -2.0f, 0.25f};
  auto before = RunProgram(p.get(), {Bytes(a)});
  int folded = 0;
  ASSERT_EQ(kir_fold(p.get(), kir_reference_evals(), 64, &folded), KILN_OK) << kiln_last_error();
  EXPECT_EQ(folded, 2);
  ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
  ASSERT_EQ(p->n_eqns, 1);
  EXPECT_EQ(p->eqns[0].prim, KIR_PRIM_MUL);
  auto after = RunProgram(p.get(), {Bytes(a)});
  EXPECT_EQ(after, before);
  EXPECT_EQ(Values<float>(after[0]), (std::vector<float>{7.5f, -10.0f, 1.25f}));
  EXPECT_EQ(Values<int8_t>(after[1]), (std::vector<int8_t>{127}));
}

TEST(EvalElementwise, UnaryMatchesJax) { CheckFile("eval_elementwise_unary.txt"); }
TEST(EvalElementwise, BinaryMatchesJax) { CheckFile("eval_elementwise_binary.txt"); }
TEST(EvalElementwise, ComparisonsMatchJax) { CheckFile("eval_elementwise_compare.txt"); }
TEST(EvalElementwise, SquareIntegerPowSpecialFunctionsReducePrecisionCopyMatchJax) {
  CheckFile("eval_elementwise_special.txt");
}
TEST(EvalElementwise, SelectClampConvertBitcastAndShapesMatchJax) {
  CheckFile("eval_elementwise_misc.txt");
}

}  // namespace
