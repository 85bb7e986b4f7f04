// Helpers shared by the autodiff tests (test_transform*.cc): the golden
// data of golden/transform_grad.py, a CPU context, arrays and jit calls.
#ifndef KILN_TESTS_TRANSFORM_TEST_UTIL_H
#define KILN_TESTS_TRANSFORM_TEST_UTIL_H

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "arrays.h"

namespace ktest {


struct GoldenArray {
  std::vector<int64_t> shape;
  std::vector<float> v;
};

// The golden data file `file` (in tests/golden), read once.
const std::map<std::string, GoldenArray> &Golden(const std::string &file = "transform_grad.txt") {
  static std::map<std::string, std::map<std::string, GoldenArray>> cache;
  auto hit = cache.find(file);
  if (hit != cache.end()) return hit->second;
  std::map<std::string, GoldenArray> &g = cache[file] = [&] {
    std::map<std::string, GoldenArray> m;
    std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/" + file);
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream in(line);
      std::string c, n, shape;
      in >> c >> n >> shape;
      GoldenArray a;
      if (shape != "-") {
        std::istringstream s(shape);
        std::string d;
        while (std::getline(s, d, 'x')) a.shape.push_back(std::stoll(d));
      }
      std::string x;  // stof reads nan and inf, which operator>> does not
      while (in >> x) a.v.push_back(std::stof(x));
      m[c + "/" + n] = a;
    }
    return m;
  }();
  return g;
}

const GoldenArray &G(const std::string &c, const std::string &n,
                     const std::string &file = "transform_grad.txt") {
  auto it = Golden(file).find(c + "/" + n);
  EXPECT_NE(it, Golden(file).end()) << c << "/" << n;
  static GoldenArray empty;
  return it == Golden(file).end() ? empty : it->second;
}

// The backend the tests run on: the CPU, or CUDA where a test file is built
// a second time for the GPU (KILN_TEST_CUDA_BACKEND; label cuda).
#ifdef KILN_TEST_CUDA_BACKEND
constexpr kiln_backend kTestBackend = KILN_BACKEND_CUDA;
#else
constexpr kiln_backend kTestBackend = KILN_BACKEND_CPU;
#endif

// A context on kTestBackend, or none (ctx NULL, the test skips) where that
// is CUDA and there is no usable GPU.
class Ctx {
 public:
  explicit Ctx(kiln_executor executor = KILN_EXECUTOR_DEFAULT) { Open(executor); }
  void Open(kiln_executor executor) {
    kiln_ctx_free(ctx);
    ctx = nullptr;
    kiln_options o;
    kiln_options_init(&o);
    o.backend = kTestBackend;
    o.executor = executor;
    kiln_status st = kiln_ctx_new(&o, &ctx);
    if (st == KILN_ERR_DEVICE && kTestBackend == KILN_BACKEND_CUDA) return;
    EXPECT_EQ(st, KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
};

struct Func {
  explicit Func(kiln_func *g) : f(g) {}
  Func(kiln_fn fn, void *user, const char *name) {
    EXPECT_EQ(kiln_func_new(fn, user, name, &f), KILN_OK);
  }
  ~Func() { kiln_func_free(f); }
  kiln_func *f = nullptr;
};

kiln_tree *Leaf(kiln_device *dev, const GoldenArray &a) {
  kiln_array *arr = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, (int)a.shape.size(), a.shape.data(), a.v.data(),
                                 a.v.size() * sizeof(float), &arr),
            KILN_OK)
      << kiln_last_error();
  kiln_tree *t = kiln_tree_array(arr);
  kiln_array_release(arr);
  return t;
}

kiln_tree *LeafF64(kiln_device *dev, const std::vector<double> &v) {
  return kiln_test::ArrayLeaf(dev, KILN_F64, {(int64_t)v.size()}, v.data(),
                              v.size() * sizeof(double));
}

kiln_tree *Tuple(std::vector<kiln_tree *> c) { return kiln_tree_tuple(c.size(), c.data()); }

template <typename T>
std::vector<T> Values(const kiln_tree *t) {
  kiln_array *a = kiln_tree_leaf_array(t);
  EXPECT_NE(a, nullptr);
  if (!a) return {};
  std::vector<T> v(kiln_array_size(a));
  EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(T)), KILN_OK);
  return v;
}

// Runs f under kiln_jit on args (consumed); the result tree (caller frees).
kiln_tree *Jit(Ctx &c, const kiln_func *f, kiln_tree *args, kiln_status want = KILN_OK) {
  kiln_jit *j = nullptr;
  EXPECT_EQ(kiln_jit_new(c.ctx, f, nullptr, &j), KILN_OK);
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_jit_call(j, args, &out), want) << kiln_last_error();
  kiln_jit_free(j);
  kiln_tree_free(args);
  return out;
}

// JAX's f32 tolerance for derivatives (check_grads uses 1e-2 on f32
// numerics; exact rules agree far closer).
void ExpectNear(const std::vector<float> &got, const GoldenArray &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  for (size_t i = 0; i < got.size(); i++) {
    float w = want.v[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]: " << got[i];
      continue;
    }
    if (std::isinf(w)) {
      EXPECT_EQ(got[i], w) << what << " [" << i << "]";
      continue;
    }
    EXPECT_NEAR(got[i], w, 2e-5 + 2e-5 * std::fabs(w)) << what << " [" << i << "]";
  }
}

kiln_val *ArgVal(const kiln_tree *a, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(a, i))->u.val;
}

kiln_val *SumAll(kiln_trace *t, kiln_val *x) {
  int axes[KILN_MAX_RANK];
  for (int i = 0; i < kiln_val_rank(x); i++) axes[i] = i;
  return kiln_reduce_sum(t, x, kiln_val_rank(x), axes);
}

kiln_val *F32(kiln_trace *t, double v) { return kiln_scalar(t, KILN_F32, v); }
kiln_val *I32(kiln_trace *t, double v) { return kiln_scalar(t, KILN_I32, v); }

}  // namespace ktest

#endif
