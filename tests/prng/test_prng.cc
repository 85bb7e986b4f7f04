// The threefry PRNG (src/prng) against values computed by JAX
// (tests/golden/prng.py), and the shared round function under NVRTC.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/nvrtc_test_util.h"
#include "support/test_files.h"
#include "prng/prng.h"
#include "support/prng_golden.h"

namespace {

// ---- golden data ----

using namespace prng_golden;

std::vector<const Record *> Golden(const std::string &kind) {
  return prng_golden::Golden("prng.txt", kind);
}

int Rank(const ArrayCase &c) { return static_cast<int>(c.shape.size()); }

// jax._src.public_test_util's default tolerances, used as atol and rtol.
double JaxTolerance(kiln_dtype dtype) {
  switch (dtype) {
    case KILN_F16: return 1e-3;
    case KILN_BF16: return 1e-2;
    case KILN_F32: return 1e-6;
    default: return 1e-15;
  }
}

// np.testing.assert_allclose(actual, expected, atol=tol, rtol=tol), with
// NaNs and infinities required to match exactly.
::testing::AssertionResult Close(double actual, double expected, double tol) {
  if (std::isnan(expected)   ? std::isnan(actual)
      : std::isinf(expected) ? actual == expected
                             : std::fabs(actual - expected) <= tol + tol * std::fabs(expected))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << actual << " vs JAX " << expected
                                       << std::defaultfloat << " (tolerance " << tol << ")";
}

// erf_inv and normal: kiln evaluates them as XLA:CPU does, so f16, bf16 and
// f32 results must be JAX's bit patterns (they need only IEEE fmaf and
// sqrtf). f64 also goes through libm's log, exact on glibc but not promised
// elsewhere, so it is held to JAX's f64 tolerance.
::testing::AssertionResult MatchesXla(kiln_dtype dtype, uint64_t got, uint64_t want) {
  const double g = FloatFromBits(dtype, got), w = FloatFromBits(dtype, want);
  if (dtype == KILN_F64) return Close(g, w, JaxTolerance(dtype));
  if (got == want || (std::isnan(g) && std::isnan(w))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << g << " vs JAX " << w;
}

// ---- Random123 known answers and keys ----

TEST(Prng, Threefry2x32KnownAnswers) {
  for (const Record *r : Golden("kat")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    uint32_t x[2] = {Hex32(r->head[2]), Hex32(r->head[3])};
    kprng_threefry2x32(key, x);
    EXPECT_EQ(x[0], Hex32(r->head[4])) << r->head[0] << " " << r->head[1];
    EXPECT_EQ(x[1], Hex32(r->head[5])) << r->head[0] << " " << r->head[1];
  }
}

TEST(Prng, KeyFromSeedMatchesPrngKey) {
  for (const Record *r : Golden("seed64")) {
    uint32_t key[2] = {1, 1};
    ASSERT_EQ(kprng_key_from_seed(std::stoll(r->head[0]), key), KILN_OK);
    EXPECT_EQ(key[0], Hex32(r->head[1])) << "seed " << r->head[0];
    EXPECT_EQ(key[1], Hex32(r->head[2])) << "seed " << r->head[0];
  }
  for (const Record *r : Golden("seed32")) {
    uint32_t key[2] = {1, 1};
    ASSERT_EQ(kprng_key_from_seed32(static_cast<int32_t>(std::stol(r->head[0])), key), KILN_OK);
    EXPECT_EQ(key[0], Hex32(r->head[1])) << "seed " << r->head[0];
    EXPECT_EQ(key[1], Hex32(r->head[2])) << "seed " << r->head[0];
  }
}

TEST(Prng, SplitMatchesJax) {
  for (const Record *r : Golden("split")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    const size_t n = std::stoul(r->head[2]);
    ASSERT_EQ(r->head.size(), 3 + 2 * n);
    std::vector<uint32_t> out(2 * n);
    ASSERT_EQ(kprng_split(key, n, out.data()), KILN_OK);
    for (size_t i = 0; i < 2 * n; i++)
      EXPECT_EQ(out[i], Hex32(r->head[3 + i])) << "split " << n << " word " << i;
  }
}

TEST(Prng, FoldInMatchesJax) {
  for (const Record *r : Golden("fold_in")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    uint32_t out[2];
    ASSERT_EQ(kprng_fold_in(key, Hex32(r->head[2]), out), KILN_OK);
    EXPECT_EQ(out[0], Hex32(r->head[3])) << "data " << r->head[2];
    EXPECT_EQ(out[1], Hex32(r->head[4])) << "data " << r->head[2];
    // In place, as a caller threading one key through a loop does.
    uint32_t k[2] = {key[0], key[1]};
    ASSERT_EQ(kprng_fold_in(k, Hex32(r->head[2]), k), KILN_OK);
    EXPECT_EQ(k[0], out[0]);
    EXPECT_EQ(k[1], out[1]);
  }
}

TEST(Prng, SplitZeroKeysWritesNothing) {
  const uint32_t key[2] = {0, 42};
  EXPECT_EQ(kprng_split(key, 0, nullptr), KILN_OK);
}

// ---- draws ----

TEST(Prng, RandomBitsMatchJax) {
  for (const Record *r : Golden("bits")) {
    ArrayCase c = ParseArray(*r, 1);
    const int width = std::stoi(c.params[0]);
    std::vector<uint8_t> out(c.count * width / 8);
    ASSERT_EQ(kprng_random_bits(c.key, width, Rank(c), c.shape.data(), out.data()), KILN_OK);
    for (size_t j = 0, i = 0; i < c.count; i += c.step, j++)
      ASSERT_EQ(BitsAt(width / 8, out.data(), i), Hex(r->vals[j])) << c.Name() << " index " << i;
  }
}

TEST(Prng, UniformMatchesJaxBitExactly) {
  for (const Record *r : Golden("uniform")) {
    ArrayCase c = ParseArray(*r, 3);
    const kiln_dtype dtype = Dtype(c.params[0]);
    const size_t size = kiln_dtype_size(dtype);
    std::vector<uint8_t> out(c.count * size);
    ASSERT_EQ(kprng_uniform(c.key, dtype, Rank(c), c.shape.data(), Float(c.params[1]),
                            Float(c.params[2]), out.data()),
              KILN_OK);
    for (size_t j = 0, i = 0; i < c.count; i += c.step, j++)
      ASSERT_EQ(BitsAt(size, out.data(), i), Hex(r->vals[j]))
          << c.Name() << " index " << i << ": " << FloatFromBits(dtype, BitsAt(size, out.data(), i))
          << " vs JAX " << FloatFromBits(dtype, Hex(r->vals[j]));
  }
}

TEST(Prng, NormalMatchesJax) {
  for (const Record *r : Golden("normal")) {
    ArrayCase c = ParseArray(*r, 1);
    const kiln_dtype dtype = Dtype(c.params[0]);
    std::vector<uint8_t> out(c.count * kiln_dtype_size(dtype));
    ASSERT_EQ(kprng_normal(c.key, dtype, Rank(c), c.shape.data(), out.data()), KILN_OK);
    for (size_t j = 0, i = 0; i < c.count; i += c.step, j++)
      ASSERT_TRUE(MatchesXla(dtype, BitsAt(kiln_dtype_size(dtype), out.data(), i), Hex(r->vals[j])))
          << c.Name() << " index " << i;
  }
}

TEST(Prng, BernoulliMatchesJax) {
  for (const Record *r : Golden("bernoulli")) {
    ArrayCase c = ParseArray(*r, 2);
    std::unique_ptr<bool[]> b(new bool[c.count]());
    ASSERT_EQ(kprng_bernoulli(c.key, Dtype(c.params[0]), Float(c.params[1]), Rank(c),
                              c.shape.data(), b.get()),
              KILN_OK);
    for (size_t j = 0, i = 0; i < c.count; i += c.step, j++)
      ASSERT_EQ(b[i], r->vals[j] == "1") << c.Name() << " index " << i;
  }
}

TEST(Prng, ErfInvMatchesXla) {
  for (const Record *r : Golden("erf_inv")) {
    const kiln_dtype dtype = Dtype(r->head[0]);
    ASSERT_EQ(r->vals.size() % 2, 0u);
    for (size_t i = 0; i < r->vals.size(); i += 2) {
      const double x = FloatFromBits(dtype, Hex(r->vals[i]));
      uint64_t got = 0;
      if (dtype == KILN_F32) {
        const float y = kprng_erf_inv_f32(static_cast<float>(x));
        std::memcpy(&got, &y, sizeof y);
      } else {
        const double y = kprng_erf_inv_f64(x);
        std::memcpy(&got, &y, sizeof y);
      }
      EXPECT_TRUE(MatchesXla(dtype, got, Hex(r->vals[i + 1]))) << "erf_inv(" << x << ")";
    }
  }
}

// Partitionability: an element depends only on the key and its row-major
// index, so reshaping or truncating a draw does not change its elements.
TEST(Prng, DrawsDependOnlyOnLinearIndex) {
  const uint32_t key[2] = {0x12345678u, 0x9abcdef0u};
  const int64_t mat[] = {3, 5}, flat[] = {15}, head[] = {7};
  uint64_t a[15], b[15], c[7];
  ASSERT_EQ(kprng_random_bits(key, 64, 2, mat, a), KILN_OK);
  ASSERT_EQ(kprng_random_bits(key, 64, 1, flat, b), KILN_OK);
  ASSERT_EQ(kprng_random_bits(key, 64, 1, head, c), KILN_OK);
  EXPECT_EQ(std::memcmp(a, b, sizeof a), 0);
  EXPECT_EQ(std::memcmp(a, c, sizeof c), 0);
  // A scalar draw is element 0; split keys are the 64-bit draws' words.
  uint64_t s;
  ASSERT_EQ(kprng_random_bits(key, 64, 0, nullptr, &s), KILN_OK);
  EXPECT_EQ(s, a[0]);
  uint32_t keys[2 * 15];
  ASSERT_EQ(kprng_split(key, 15, keys), KILN_OK);
  for (int i = 0; i < 15; i++)
    EXPECT_EQ((static_cast<uint64_t>(keys[2 * i]) << 32) | keys[2 * i + 1], a[i]) << i;
}

TEST(Prng, ZeroSizeDrawsAcceptNullOutput) {
  const uint32_t key[2] = {0, 0};
  const int64_t empty[] = {4, 0};
  EXPECT_EQ(kprng_random_bits(key, 32, 2, empty, nullptr), KILN_OK);
  EXPECT_EQ(kprng_uniform(key, KILN_F32, 2, empty, 0.0, 1.0, nullptr), KILN_OK);
  EXPECT_EQ(kprng_normal(key, KILN_BF16, 2, empty, nullptr), KILN_OK);
  EXPECT_EQ(kprng_bernoulli(key, KILN_F64, 0.5, 2, empty, nullptr), KILN_OK);
}

// Edge probabilities and an empty range need no golden data: u is in [0, 1).
TEST(Prng, BernoulliAndUniformEdges) {
  const uint32_t key[2] = {0, 9};
  const int64_t shape[] = {257};
  bool b[257];
  for (kiln_dtype d : {KILN_F16, KILN_BF16, KILN_F32, KILN_F64}) {
    ASSERT_EQ(kprng_bernoulli(key, d, 0.0, 1, shape, b), KILN_OK);
    for (bool v : b) ASSERT_FALSE(v) << kiln_dtype_name(d);
    ASSERT_EQ(kprng_bernoulli(key, d, 1.0, 1, shape, b), KILN_OK);
    for (bool v : b) ASSERT_TRUE(v) << kiln_dtype_name(d);
    ASSERT_EQ(kprng_bernoulli(key, d, NAN, 1, shape, b), KILN_OK);
    for (bool v : b) ASSERT_FALSE(v) << kiln_dtype_name(d);
  }
  float f[257];
  ASSERT_EQ(kprng_uniform(key, KILN_F32, 1, shape, 2.5, 2.5, f), KILN_OK);
  for (float v : f) ASSERT_EQ(v, 2.5f);
}

TEST(Prng, ErfInvEdges) {
  EXPECT_EQ(kprng_erf_inv_f32(0.0f), 0.0f);
  EXPECT_EQ(kprng_erf_inv_f32(1.0f), INFINITY);
  EXPECT_EQ(kprng_erf_inv_f32(-1.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(kprng_erf_inv_f32(1.5f)));
  EXPECT_TRUE(std::isnan(kprng_erf_inv_f32(NAN)));
  EXPECT_EQ(kprng_erf_inv_f64(1.0), INFINITY);
  EXPECT_EQ(kprng_erf_inv_f64(-1.0), -INFINITY);
  EXPECT_TRUE(std::isnan(kprng_erf_inv_f64(-2.0)));
  // Odd symmetry holds exactly: w depends on x*x only.
  EXPECT_EQ(kprng_erf_inv_f64(-0.3), -kprng_erf_inv_f64(0.3));
}

// ---- bad input: a status and a message that names the op ----

void ExpectFailure(kiln_status got, kiln_status want, const char *op) {
  EXPECT_EQ(got, want) << kiln_status_str(got);
  EXPECT_NE(std::string(kiln_last_error()).find(op), std::string::npos) << kiln_last_error();
}

TEST(PrngErrors, NullPointers) {
  uint32_t key[2] = {0, 0}, out[2];
  ExpectFailure(kprng_key_from_seed(1, nullptr), KILN_ERR_ARGUMENT, "random_seed");
  ExpectFailure(kprng_key_from_seed32(1, nullptr), KILN_ERR_ARGUMENT, "random_seed");
  ExpectFailure(kprng_split(nullptr, 2, out), KILN_ERR_ARGUMENT, "random_split");
  ExpectFailure(kprng_split(key, 1, nullptr), KILN_ERR_ARGUMENT, "random_split");
  ExpectFailure(kprng_fold_in(nullptr, 1, out), KILN_ERR_ARGUMENT, "random_fold_in");
  ExpectFailure(kprng_fold_in(key, 1, nullptr), KILN_ERR_ARGUMENT, "random_fold_in");
  const int64_t shape[] = {3};
  float f[3];
  bool b[3];
  ExpectFailure(kprng_random_bits(nullptr, 32, 1, shape, f), KILN_ERR_ARGUMENT, "random_bits");
  ExpectFailure(kprng_random_bits(key, 32, 1, shape, nullptr), KILN_ERR_ARGUMENT, "random_bits");
  ExpectFailure(kprng_random_bits(key, 32, 1, nullptr, f), KILN_ERR_ARGUMENT, "random_bits");
  ExpectFailure(kprng_uniform(nullptr, KILN_F32, 1, shape, 0, 1, f), KILN_ERR_ARGUMENT,
                "random_uniform");
  ExpectFailure(kprng_uniform(key, KILN_F32, 1, shape, 0, 1, nullptr), KILN_ERR_ARGUMENT,
                "random_uniform");
  ExpectFailure(kprng_normal(key, KILN_F32, 1, shape, nullptr), KILN_ERR_ARGUMENT, "random_normal");
  ExpectFailure(kprng_bernoulli(nullptr, KILN_F32, 0.5, 1, shape, b), KILN_ERR_ARGUMENT,
                "random_bernoulli");
  ExpectFailure(kprng_bernoulli(key, KILN_F32, 0.5, 1, shape, nullptr), KILN_ERR_ARGUMENT,
                "random_bernoulli");
}

TEST(PrngErrors, BitWidth) {
  const uint32_t key[2] = {0, 0};
  const int64_t shape[] = {2};
  uint64_t out[2];
  for (int w : {0, 1, 7, 24, 128, -32}) {
    ExpectFailure(kprng_random_bits(key, w, 1, shape, out), KILN_ERR_ARGUMENT, "random_bits");
    EXPECT_NE(std::string(kiln_last_error()).find(std::to_string(w)), std::string::npos);
  }
}

TEST(PrngErrors, NonFloatDtypes) {
  const uint32_t key[2] = {0, 0};
  const int64_t shape[] = {2};
  double out[2];
  bool b[2];
  for (kiln_dtype d : {KILN_BOOL, KILN_I32, KILN_U8, KILN_I64}) {
    ExpectFailure(kprng_uniform(key, d, 1, shape, 0, 1, out), KILN_ERR_DTYPE, "random_uniform");
    EXPECT_NE(std::string(kiln_last_error()).find(kiln_dtype_name(d)), std::string::npos)
        << kiln_last_error();
    ExpectFailure(kprng_normal(key, d, 1, shape, out), KILN_ERR_DTYPE, "random_normal");
    ExpectFailure(kprng_bernoulli(key, d, 0.5, 1, shape, b), KILN_ERR_DTYPE, "random_bernoulli");
  }
  ExpectFailure(kprng_uniform(key, KILN_INVALID_DTYPE, 1, shape, 0, 1, out), KILN_ERR_DTYPE,
                "random_uniform");
  ExpectFailure(kprng_normal(key, static_cast<kiln_dtype>(99), 1, shape, out), KILN_ERR_DTYPE,
                "random_normal");
}

TEST(PrngErrors, BadShapes) {
  const uint32_t key[2] = {0, 0};
  const int64_t negative[] = {2, -3};
  double out[8];
  bool b[8];
  ExpectFailure(kprng_random_bits(key, 8, 2, negative, out), KILN_ERR_SHAPE, "random_bits");
  EXPECT_NE(std::string(kiln_last_error()).find("u8[2,-3]"), std::string::npos)
      << kiln_last_error();
  ExpectFailure(kprng_uniform(key, KILN_F16, 2, negative, 0, 1, out), KILN_ERR_SHAPE,
                "random_uniform");
  ExpectFailure(kprng_normal(key, KILN_F64, 2, negative, out), KILN_ERR_SHAPE, "random_normal");
  ExpectFailure(kprng_bernoulli(key, KILN_F32, 0.5, 2, negative, b), KILN_ERR_SHAPE,
                "random_bernoulli");
  const int64_t deep[KILN_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  ExpectFailure(kprng_random_bits(key, 32, KILN_MAX_RANK + 1, deep, out), KILN_ERR_SHAPE,
                "random_bits");
  ExpectFailure(kprng_normal(key, KILN_F32, -1, deep, out), KILN_ERR_SHAPE, "random_normal");
  const int64_t huge[] = {INT64_MAX, 4};
  ExpectFailure(kprng_random_bits(key, 64, 2, huge, out), KILN_ERR_SIZE_OVERFLOW, "random_bits");
  ExpectFailure(kprng_split(key, SIZE_MAX / 2 + 1, reinterpret_cast<uint32_t *>(out)),
                KILN_ERR_SIZE_OVERFLOW, "random_split");
}

// ---- the shared round function compiles as device code ----

// The header must compile as device code (nvrtc_test_util.h).
TEST(Prng, ThreefryHeaderCompilesUnderNvrtc) {
  const char *src =
      "#include \"threefry.h\"\n"
      "extern \"C\" __global__ void bits32(unsigned k0, unsigned k1, unsigned long long n,\n"
      "                                    unsigned *out) {\n"
      "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
      "  if (i < n) out[i] = kiln_threefry_bits32_at(k0, k1, i);\n"
      "}\n";
  std::string ptx = NvrtcPtx(src, {"threefry.h"});
  if (!ptx.empty()) {
    EXPECT_NE(ptx.find(".entry bits32"), std::string::npos);
  }
}

}  // namespace
