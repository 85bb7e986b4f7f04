// The elementwise records (src/ir/elementwise_*.def): the Python
// translator's PLAIN names are the records' (so that list cannot drift), and
// the primitives added as one record each, bessel_i0e and bessel_i1e,
// through the public API against JAX (golden/ops_records.py): values in
// every float dtype on the reference executor and in compiled kernels,
// jax.grad in f32 and f64, vmap with an unmapped operand, and the rule's
// refusal of integers.
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "ir/ir.h"
#include "kiln/transform.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

// ---- the Python translator's PLAIN list against the records ----

std::set<std::string> PythonPlain() {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/python/kiln/_jaxpr_ops.py");
  std::stringstream s;
  s << f.rdbuf();
  std::string text = s.str();
  size_t a = text.find("PLAIN = \"\"\"");
  EXPECT_NE(a, std::string::npos) << "no PLAIN list in _jaxpr_ops.py";
  if (a == std::string::npos) return {};
  a += std::strlen("PLAIN = \"\"\"");
  std::istringstream names(text.substr(a, text.find("\"\"\"", a) - a));
  std::set<std::string> out;
  for (std::string n; names >> n;) out.insert(n);
  return out;
}

TEST(OpsRecords, PythonPlainNamesAreTheRecordsWithoutParams) {
  // copy and select_n have translation rules of their own (the identity;
  // select_n broadcasts a predicate over PRNG key data).
  const std::set<std::string> own_rule = {"copy", "select_n"};
  std::set<std::string> want;
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    const kir_prim_info *info = kir_prim_get((kir_prim)p);
    if (info->family == KIR_FAMILY_ELEMENTWISE && info->params == KIR_PARAMS_NONE &&
        !own_rule.count(info->name))
      want.insert(info->name);
  }
  std::set<std::string> got = PythonPlain();
  for (const std::string &n : want)
    EXPECT_TRUE(got.count(n)) << n << " has a record without params but is not in PLAIN";
  for (const std::string &n : got)
    EXPECT_TRUE(want.count(n)) << n << " is in PLAIN but is no elementwise record without params";
}

// ---- bessel_i0e and bessel_i1e against JAX ----

// One array of ops_records.txt: its dtype, shape and raw bits.
struct Bits {
  kiln_dtype dtype = KILN_F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> bits;
};

const std::map<std::string, Bits> &Data() {
  static const std::map<std::string, Bits> m = [] {
    std::map<std::string, Bits> out;
    std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/ops_records.txt");
    EXPECT_TRUE(f.good()) << "tests/golden/ops_records.txt";
    const std::map<std::string, kiln_dtype> dt = {
        {"f16", KILN_F16}, {"bf16", KILN_BF16}, {"f32", KILN_F32}, {"f64", KILN_F64}};
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream in(line);
      std::string c, d, shape, x;
      in >> c >> d >> shape;
      Bits b;
      b.dtype = dt.at(d);
      std::istringstream s(shape == "-" ? "" : shape);
      for (std::string n; std::getline(s, n, 'x');) b.shape.push_back(std::stoll(n));
      while (in >> x) b.bits.push_back(std::stoull(x, nullptr, 16));
      out[c] = b;
    }
    return out;
  }();
  return m;
}

const Bits &D(const std::string &c) {
  static const Bits none;
  auto it = Data().find(c);
  EXPECT_NE(it, Data().end()) << c;
  return it == Data().end() ? none : it->second;
}

double Decode(kiln_dtype d, uint64_t b) {
  switch (d) {
    case KILN_F64: {
      double v;
      std::memcpy(&v, &b, 8);
      return v;
    }
    case KILN_F32:
    case KILN_BF16: {
      uint32_t w = d == KILN_BF16 ? (uint32_t)b << 16 : (uint32_t)b;
      float v;
      std::memcpy(&v, &w, 4);
      return v;
    }
    default: {  // f16
      int e = (int)(b >> 10) & 31, m = (int)b & 1023;
      double v = e == 31 ? (m ? NAN : INFINITY)
                 : e == 0 ? std::ldexp(m, -24)
                          : std::ldexp(1024 + m, e - 25);
      return b & 0x8000 ? -v : v;
    }
  }
}

kiln_tree *Arg(kiln_device *dev, const Bits &b) {
  size_t size = kiln_dtype_size(b.dtype);
  std::vector<uint8_t> bytes(b.bits.size() * size);
  for (size_t i = 0; i < b.bits.size(); i++) std::memcpy(&bytes[i * size], &b.bits[i], size);
  kiln_array *a = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, b.dtype, (int)b.shape.size(), b.shape.data(), bytes.data(),
                                 bytes.size(), &a),
            KILN_OK)
      << kiln_last_error();
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

// JAX's default tolerance per dtype, as |got - want| <= tol + tol |want|;
// looser for f32 derivatives, which subtract values of like size.
double Tol(kiln_dtype d, bool grad) {
  switch (d) {
    case KILN_F16: return 1e-3;
    case KILN_BF16: return 1e-2;
    case KILN_F32: return grad ? 2e-5 : 2e-6;
    default: return grad ? 1e-12 : 1e-14;
  }
}

void ExpectMatches(const kiln_tree *out, const Bits &want, bool grad, const std::string &what) {
  kiln_array *a = kiln_tree_leaf_array(out);
  ASSERT_NE(a, nullptr) << what;
  ASSERT_EQ(kiln_array_dtype(a), want.dtype) << what;
  size_t size = kiln_dtype_size(want.dtype), n = want.bits.size();
  ASSERT_EQ((size_t)kiln_array_size(a), n) << what;
  std::vector<uint8_t> bytes(n * size);
  ASSERT_EQ(kiln_array_to_host(a, bytes.data(), bytes.size()), KILN_OK) << kiln_last_error();
  double tol = Tol(want.dtype, grad);
  for (size_t i = 0; i < n; i++) {
    uint64_t b = 0;
    std::memcpy(&b, &bytes[i * size], size);
    double g = Decode(want.dtype, b), w = Decode(want.dtype, want.bits[i]);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "]: " << g;
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(g, w, tol + tol * std::fabs(w)) << what << " [" << i << "]";
    }
  }
}

using Builder = kiln_val *(*)(kiln_trace *, kiln_val *);
struct Prim {
  const char *name;
  Builder f;
};
const Prim kPrims[] = {{"bessel_i0e", kiln_bessel_i0e}, {"bessel_i1e", kiln_bessel_i1e}};
void PrintTo(const Prim &p, std::ostream *os) { *os << p.name; }

kiln_tree *Apply(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_tree_val(static_cast<const Prim *>(user)->f(t, ArgVal(args, 0)));
}

kiln_tree *SumApply(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_tree_val(SumAll(t, static_cast<const Prim *>(user)->f(t, ArgVal(args, 0))));
}

kiln_tree *ApplyTwice(kiln_trace *t, const kiln_tree *args, void *user) {
  Builder f = static_cast<const Prim *>(user)->f;
  return kiln_tree_val(kiln_mul(t, f(t, ArgVal(args, 0)), f(t, ArgVal(args, 1))));
}

class Bessel : public ::testing::TestWithParam<Prim> {};

// Values in every float dtype: the reference executor (the record's
// evaluator) and compiled kernels (its C or CUDA spelling, fused and one
// kernel per primitive).
TEST_P(Bessel, ValuesMatchJax) {
  const Prim &p = GetParam();
  for (kiln_executor ex : {KILN_EXECUTOR_REFERENCE, KILN_EXECUTOR_FUSED, KILN_EXECUTOR_UNFUSED}) {
    Ctx c(ex);
    if (!c.ctx) GTEST_SKIP() << "no device";
    Func f(Apply, (void *)&p, p.name);
    for (const char *d : {"f16", "bf16", "f32", "f64"}) {
      std::string k = std::string(p.name) + "/value/" + d;
      kiln_tree *out = Jit(c, f.f, Tuple({Arg(c.dev, D(k + "/x"))}));
      ExpectMatches(out, D(k + "/y"), false, k + " executor " + std::to_string((int)ex));
      kiln_tree_free(out);
    }
  }
}

// jax.grad of the sum: the record's COEFF derivative (elementwise_bessel.c).
TEST_P(Bessel, GradMatchesJax) {
  const Prim &p = GetParam();
  Ctx c;
  if (!c.ctx) GTEST_SKIP() << "no device";
  Func f(SumApply, (void *)&p, p.name);
  kiln_func *g = nullptr;
  ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK) << kiln_last_error();
  Func gf(g);
  for (const char *d : {"f32", "f64"}) {
    std::string k = std::string(p.name) + "/grad/" + d;
    kiln_tree *out = Jit(c, gf.f, Tuple({Arg(c.dev, D(k + "/x"))}));
    ExpectMatches(out, D(k + "/y"), true, k);
    kiln_tree_free(out);
  }
}

// vmap over x's rows with y unmapped: f(x_row) * f(y).
TEST_P(Bessel, VmapMatchesJax) {
  const Prim &p = GetParam();
  Ctx c;
  if (!c.ctx) GTEST_SKIP() << "no device";
  Func f(ApplyTwice, (void *)&p, p.name);
  kiln_tree *in_axes = Tuple({kiln_axis(0), kiln_tree_none()});
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vmap(f.f, in_axes, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  kiln_tree_free(in_axes);
  Func vf(v);
  std::string k = std::string(p.name) + "/vmap/";
  kiln_tree *out = Jit(c, vf.f, Tuple({Arg(c.dev, D(k + "x")), Arg(c.dev, D(k + "y"))}));
  ExpectMatches(out, D(k + "out"), false, k + "out");
  kiln_tree_free(out);
}

// The record accepts floats only: an integer operand fails the trace with
// the primitive's name and the operand's type.
TEST_P(Bessel, RefusesIntegers) {
  const Prim &p = GetParam();
  Ctx c;
  if (!c.ctx) GTEST_SKIP() << "no device";
  Func f(Apply, (void *)&p, p.name);
  int32_t v[3] = {1, 2, 3};
  int64_t n = 3;
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_I32, 1, &n, v, sizeof v, &a), KILN_OK);
  kiln_tree *arg = kiln_tree_array(a);
  kiln_array_release(a);
  kiln_tree *out = Jit(c, f.f, Tuple({arg}), KILN_ERR_DTYPE);
  EXPECT_EQ(out, nullptr);
  std::string err = kiln_last_error();
  EXPECT_NE(err.find(p.name), std::string::npos) << err;
  EXPECT_NE(err.find("i32"), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(Records, Bessel, ::testing::ValuesIn(kPrims),
                         [](const ::testing::TestParamInfo<Prim> &i) {
                           return std::string(i.param.name);
                         });

}  // namespace
