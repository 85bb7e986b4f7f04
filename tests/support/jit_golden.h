// The golden programs of tests/golden/trace_jit.py (their C twins are in
// jit_cases.c): loading the data JAX computed and running one case through
// kiln_jit on a device, shared by the jit tests of every backend.
#ifndef KILN_TESTS_JIT_GOLDEN_H
#define KILN_TESTS_JIT_GOLDEN_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jit_cases.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"

namespace {

struct GoldenArray {
  std::string aval;  // "~f64[3]"
  kiln_dtype dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

struct GoldenCase {
  std::string name;
  std::vector<GoldenArray> in, out;
};

GoldenArray ParseArray(const std::string &aval, const std::string &hex) {
  GoldenArray g;
  g.aval = aval;
  std::string body = aval[0] == '~' ? aval.substr(1) : aval;
  size_t br = body.find('[');
  EXPECT_EQ(kiln_dtype_from_name(body.substr(0, br).c_str(), &g.dtype), KILN_OK) << aval;
  std::string dims = body.substr(br + 1, body.size() - br - 2);
  std::stringstream ds(dims);
  for (std::string d; std::getline(ds, d, ',');)
    if (!d.empty()) g.shape.push_back(std::stoll(d));
  if (hex != "-")
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      g.bytes.push_back((unsigned char)std::stoi(hex.substr(i, 2), nullptr, 16));
  return g;
}

std::vector<GoldenCase> LoadGolden(const std::string &file = "trace_jit.txt") {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/" + file);
  EXPECT_TRUE(f.good()) << "missing " << file;
  std::vector<GoldenCase> cases;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream ls(line);
    std::string kind, a, b;
    ls >> kind >> a >> b;
    if (kind == "case")
      cases.push_back({a, {}, {}});
    else if (kind == "in")
      cases.back().in.push_back(ParseArray(a, b));
    else if (kind == "out")
      cases.back().out.push_back(ParseArray(a, b));
  }
  return cases;
}

// JAX's default test tolerance per dtype (jax._src.public_test_util).
double Tolerance(kiln_dtype d) {
  switch (d) {
    case KILN_F16: return 1e-3;
    case KILN_BF16: return 1e-2;
    case KILN_F32: return 1e-6;
    case KILN_F64: return 1e-15;
    default: return 0;
  }
}

double AsDouble(kiln_dtype d, const unsigned char *p) {
  switch (d) {
    case KILN_F16: { uint16_t h; memcpy(&h, p, 2); return kiln_f16_to_f32(h); }
    case KILN_BF16: { uint16_t h; memcpy(&h, p, 2); return kiln_bf16_to_f32(h); }
    case KILN_F32: { float f; memcpy(&f, p, 4); return f; }
    case KILN_F64: { double f; memcpy(&f, p, 8); return f; }
    default: return 0;
  }
}

// numpy.testing.assert_allclose with atol = rtol = tol, as JAX's tests do.
void ExpectClose(const GoldenArray &want, const std::vector<unsigned char> &got,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.bytes.size()) << what;
  double tol = Tolerance(want.dtype);
  size_t es = kiln_dtype_size(want.dtype);
  if (tol == 0) {
    EXPECT_EQ(got, want.bytes) << what;
    return;
  }
  for (size_t i = 0; i < got.size(); i += es) {
    double w = AsDouble(want.dtype, &want.bytes[i]), g = AsDouble(want.dtype, &got[i]);
    if ((std::isnan(w) && std::isnan(g)) || w == g) continue;  // NaNs and equal infinities
    EXPECT_LE(std::fabs(w - g), tol + tol * std::fabs(w)) << what << " element " << i / es;
  }
}

const jit_case *FindCase(const std::string &name, const jit_case *table = kJitCases) {
  for (const jit_case *c = table; c->name; c++)
    if (name == c->name) return c;
  return nullptr;
}

// Runs golden case gc on dev: output types from eval_shape, then `calls`
// calls of the jitted function, each output compared with JAX's values when
// check_values. With cuda_kernels, the program is also lowered for sm_80 and
// sm_90 and every kernel NVRTC-compiled (counted there).
inline void RunGoldenCase(kiln_ctx *ctx, kiln_device *dev, const GoldenCase &gc,
                          bool check_values, int *cuda_kernels, int calls = 1,
                          const jit_case *table = kJitCases) {
  SCOPED_TRACE(gc.name);
  const jit_case *jc = FindCase(gc.name, table);
  ASSERT_NE(jc, nullptr) << "no C twin for " << gc.name;
  std::vector<kiln_tree *> leaves;
  for (const auto &in : gc.in) {
    kiln_array *a = nullptr;
    ASSERT_EQ(kiln_array_from_host(dev, in.dtype, (int)in.shape.size(), in.shape.data(),
                                   in.bytes.data(), in.bytes.size(), &a),
              KILN_OK);
    leaves.push_back(kiln_tree_array(a));
    kiln_array_release(a);
  }
  kiln_tree *args = kiln_tree_tuple(leaves.size(), leaves.data());
  kiln_func *fn = nullptr;
  ASSERT_EQ(kiln_func_new(jc->fn, nullptr, jc->name, &fn), KILN_OK);
  std::unique_ptr<kiln_func, void (*)(kiln_func *)> fn_owner(fn, kiln_func_free);
  // Output types, weak flags included, from eval_shape.
  kiln_treedef *def = nullptr;
  kiln_aval *avals = nullptr;
  size_t n = 0;
  ASSERT_EQ(kiln_eval_shape(ctx, fn, args, &def, &avals, &n), KILN_OK) << kiln_last_error();
  ASSERT_EQ(n, gc.out.size());
  for (size_t i = 0; i < n; i++) {
    std::string s = avals[i].weak ? "~" : "";
    s += kiln_dtype_short_name(avals[i].dtype);
    s += "[";
    for (int d = 0; d < avals[i].rank; d++) s += (d ? "," : "") + std::to_string(avals[i].shape[d]);
    s += "]";
    EXPECT_EQ(s, gc.out[i].aval) << "output " << i;
  }
  free(avals);
  kiln_treedef_free(def);
  // Values, from jit.
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, fn, nullptr, &j), KILN_OK);
  // Every fused kernel of the program compiles with NVRTC for sm_80 and
  // sm_90, without a GPU.
  for (int sm : {80, 90}) {
    if (!cuda_kernels) break;
    kiln_lowered *l = nullptr;
    ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
    char *cuda = nullptr;
    EXPECT_EQ(kiln_lowered_cuda_text(l, sm, &cuda), KILN_OK) << kiln_last_error();
    for (const char *k = cuda; k && (k = strstr(k, "-byte cubin for sm_")); k++) {
      ++*cuda_kernels;
      EXPECT_EQ(std::atoi(k + strlen("-byte cubin for sm_")), sm);
    }
    free(cuda);
    kiln_lowered_free(l);
  }
  for (int call = 0; call < calls; call++) {
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  kiln_leaf *ol = nullptr;
  size_t no = 0;
  ASSERT_EQ(kiln_tree_flatten(out, nullptr, nullptr, &ol, &no, nullptr), KILN_OK);
  ASSERT_EQ(no, gc.out.size());
  for (size_t i = 0; i < no; i++) {
    std::vector<unsigned char> got(kiln_array_nbytes(ol[i].u.array));
    ASSERT_EQ(kiln_array_to_host(ol[i].u.array, got.data(), got.size()), KILN_OK);
    if (check_values)
      ExpectClose(gc.out[i], got, gc.name + " output " + std::to_string(i) + " call " +
                                      std::to_string(call));
  }
  kiln_leaves_free(ol, no);
  kiln_tree_free(out);
  }
  kiln_jit_free(j);
  kiln_tree_free(args);
}

}  // namespace
#endif
