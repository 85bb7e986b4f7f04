// backend/cuda's NCCL collectives (collective.c, collective_bucket.c, nccl.c).
//
// Built twice: as test_nccl_fake (label cpu) against the stand-in driver with
// 4 devices and the stand-in NCCL (tests/fake_cuda), which perform the
// collectives for real on host memory; and as test_nccl (label nccl) against
// the real library on whatever GPUs the machine has (1-rank NCCL on one GPU),
// skipping where there is no GPU or no NCCL. Expected values are sums, maxima
// and copies of small integers, exact in every dtype used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"
#include "nccl_test_support.h"

namespace {

std::string last_error() { return kiln_last_error(); }

#ifdef KILN_FAKE_NCCL_LIBRARY
#define KCT_SUITE FakeNccl
const char *const kLibrary = KILN_FAKE_NCCL_LIBRARY;
// Four stand-in devices, set before the driver enumerates them (at cuInit).
class FourDevices : public ::testing::Environment {
 public:
  void SetUp() override { setenv("KILN_FAKE_CUDA_DEVICES", "4", 1); }
};
const ::testing::Environment *const kct_four = ::testing::AddGlobalTestEnvironment(new FourDevices);
KCT_USE_FAKE_DRIVER();
unsigned long NcclCalls() {
  auto calls = KctFakeSymbol<unsigned long (*)()>(KILN_FAKE_NCCL_LIBRARY, "kiln_fake_nccl_calls");
  return calls ? calls() : 0;
}
#else
#define KCT_SUITE Nccl
const char *const kLibrary = nullptr;
#endif

class KCT_SUITE : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CUDA;
    kiln_status st = kiln_ctx_new(&opts, &ctx_);
    if (st == KILN_ERR_DEVICE) GTEST_SKIP() << "no usable CUDA device: " << last_error();
    ASSERT_EQ(st, KILN_OK) << last_error();
    n_ = kiln_device_count(ctx_);
    st = kctn_mesh_new(kLibrary, ctx_, n_, 0, &mesh_);
    if (st != KILN_OK && !kLibrary) GTEST_SKIP() << "no usable NCCL: " << last_error();
    ASSERT_EQ(st, KILN_OK) << last_error();
    ASSERT_EQ(kctn_group(mesh_, "data", nullptr, nullptr), KILN_OK) << last_error();
  }
  void TearDown() override {
    for (auto &b : buffers_) kct_buffer_free(b.first, b.second);
    kctn_mesh_free(mesh_);
    kiln_ctx_free(ctx_);
#ifdef KILN_FAKE_NCCL_LIBRARY
    auto live = KctFakeSymbol<int (*)(int)>(KILN_FAKE_NCCL_LIBRARY, "kiln_fake_nccl_live_objects");
    ASSERT_NE(live, nullptr);
    EXPECT_EQ(live(1), 0) << "communicators left behind";
    EXPECT_EQ(KctFakeLiveObjects(), 0) << "driver objects left behind";
#endif
  }

  kiln_device *device(int i) {
    kiln_device *d = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, i, &d), KILN_OK);
    return d;
  }
  kct_buffer *buffer(int i, size_t bytes) {
    kct_buffer *b = nullptr;
    EXPECT_EQ(kct_buffer_new(device(i), bytes, &b), KILN_OK) << last_error();
    buffers_.push_back({device(i), b});
    return b;
  }
  template <typename T>
  kct_buffer *upload(int i, const std::vector<T> &v) {
    kct_buffer *b = buffer(i, v.size() * sizeof(T));
    EXPECT_EQ(kct_upload(device(i), b, v.data(), v.size() * sizeof(T), false), KILN_OK) << last_error();
    return b;
  }
  template <typename T>
  std::vector<T> download(int i, const kct_buffer *b, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(kct_download(device(i), b, v.data(), n * sizeof(T), false), KILN_OK) << last_error();
    return v;
  }
  // in[i][j] = (i + 1) * 10 + j % 7 as T, for every device.
  template <typename T>
  std::vector<kct_buffer *> inputs(size_t count, double scale = 1) {
    std::vector<kct_buffer *> in;
    for (int i = 0; i < n_; i++) {
      std::vector<T> v(count);
      for (size_t j = 0; j < count; j++) v[j] = T(((i + 1) * 10 + double(j % 7)) * scale);
      in.push_back(upload(i, v));
    }
    return in;
  }
  std::vector<kct_buffer *> outputs(size_t bytes) {
    std::vector<kct_buffer *> out;
    for (int i = 0; i < n_; i++) out.push_back(buffer(i, bytes));
    return out;
  }
  static double value(int i, size_t j) { return (i + 1) * 10 + double(j % 7); }

  kiln_ctx *ctx_ = nullptr;
  kctn_mesh *mesh_ = nullptr;
  int n_ = 0;
  std::vector<std::pair<kiln_device *, kct_buffer *>> buffers_;
};

TEST_F(KCT_SUITE, AllReduceSumMaxMinF32) {
  const size_t count = 1000;
  auto in = inputs<float>(count);
  for (int red = 0; red < 3; red++) {
    auto out = outputs(count * sizeof(float));
    ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, KILN_F32, count, in.data(), out.data(), red, 0, nullptr), KILN_OK)
        << last_error();
    ASSERT_EQ(kctn_wait(mesh_), KILN_OK) << last_error();
    for (int i = 0; i < n_; i++) {
      auto got = download<float>(i, out[i], count);
      for (size_t j = 0; j < count; j++) {
        double want = red == 0 ? 0 : value(red == 1 ? n_ - 1 : 0, j);
        for (int r = 0; red == 0 && r < n_; r++) want += value(r, j);
        ASSERT_EQ(got[j], float(want)) << "reduction " << red << " device " << i << " element " << j;
      }
    }
  }
}

// psum of every dtype NCCL has, in place (out is in).
TEST_F(KCT_SUITE, AllReduceInPlaceEveryDtype) {
  const size_t count = 333;
  auto check = [&](kiln_dtype dt, auto zero) {
    using T = decltype(zero);
    auto in = inputs<T>(count);
    ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, dt, count, in.data(), in.data(), 0, 0, nullptr), KILN_OK)
        << last_error();
    for (int i = 0; i < n_; i++) {
      auto got = download<T>(i, in[i], count);
      for (size_t j = 0; j < count; j++) {
        double want = 0;
        for (int r = 0; r < n_; r++) want += value(r, j);
        ASSERT_EQ(double(got[j]), want) << kiln_dtype_name(dt) << " device " << i << " element " << j;
      }
    }
  };
  check(KILN_F64, 0.0);
  check(KILN_I32, int32_t(0));
  check(KILN_I64, int64_t(0));
  check(KILN_U8, uint8_t(0));
  check(KILN_U32, uint32_t(0));
  // bf16 and f16 as their bits: small integers are exact in both.
  for (kiln_dtype dt : {KILN_BF16, KILN_F16}) {
    std::vector<kct_buffer *> in;
    for (int i = 0; i < n_; i++) {
      std::vector<uint16_t> v(count);
      for (size_t j = 0; j < count; j++) {
        float f = float(value(i, j));
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        v[j] = dt == KILN_BF16 ? uint16_t(bits >> 16) : uint16_t(0);
        if (dt == KILN_F16) { // exact small integer to binary16
          int e = int(std::floor(std::log2(f)));
          v[j] = uint16_t(((e + 15) << 10) | uint32_t((f / std::ldexp(1.0f, e) - 1) * 1024));
        }
      }
      in.push_back(upload(i, v));
    }
    ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, dt, count, in.data(), in.data(), 0, 0, nullptr), KILN_OK)
        << last_error();
    auto got = download<uint16_t>(0, in[0], count);
    for (size_t j = 0; j < count; j++) {
      double want = 0;
      for (int r = 0; r < n_; r++) want += value(r, j);
      float f;
      if (dt == KILN_BF16) {
        uint32_t bits = uint32_t(got[j]) << 16;
        std::memcpy(&f, &bits, 4);
      } else {
        f = std::ldexp(1.0f + float(got[j] & 1023) / 1024, int((got[j] >> 10) & 31) - 15);
      }
      ASSERT_EQ(double(f), want) << kiln_dtype_name(dt) << " element " << j;
    }
  }
  kiln_dtype unsupported = KILN_BOOL;
  auto in = inputs<uint8_t>(4);
  EXPECT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, unsupported, 4, in.data(), in.data(), 0, 0, nullptr),
            KILN_ERR_DTYPE);
  EXPECT_NE(last_error().find("bool"), std::string::npos) << last_error();
}

TEST_F(KCT_SUITE, AllGatherReduceScatterAllToAll) {
  const size_t count = 8 * size_t(n_);
  auto in = inputs<float>(count);
  auto gathered = outputs(count * n_ * sizeof(float));
  auto scattered = outputs(count / n_ * sizeof(float));
  auto exchanged = outputs(count * sizeof(float));
  ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_GATHER, KILN_F32, count, in.data(), gathered.data(), 0, 0, nullptr), KILN_OK)
      << last_error();
  ASSERT_EQ(kctn_collective(mesh_, KCTN_REDUCE_SCATTER, KILN_F32, count, in.data(), scattered.data(), 0, 0, nullptr),
            KILN_OK) << last_error();
  ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_TO_ALL, KILN_F32, count, in.data(), exchanged.data(), 0, 0, nullptr),
            KILN_OK) << last_error();
  ASSERT_EQ(kctn_wait(mesh_), KILN_OK) << last_error();
  size_t block = count / n_;
  for (int i = 0; i < n_; i++) {
    auto g = download<float>(i, gathered[i], count * n_);
    auto s = download<float>(i, scattered[i], block);
    auto x = download<float>(i, exchanged[i], count);
    for (int r = 0; r < n_; r++)
      for (size_t j = 0; j < count; j++) ASSERT_EQ(g[r * count + j], float(value(r, j)));
    for (size_t j = 0; j < block; j++) {
      double want = 0;
      for (int r = 0; r < n_; r++) want += value(r, i * block + j);
      ASSERT_EQ(s[j], float(want)) << "psum_scatter device " << i;
    }
    for (int r = 0; r < n_; r++) // block r of device i: device r's block i
      for (size_t j = 0; j < block; j++) ASSERT_EQ(x[r * block + j], float(value(r, i * block + j)));
  }
}

// A partial permutation: rank r sends to r + 1, the last sends nothing, and
// rank 0 (which no pair sends to) gets zeros.
TEST_F(KCT_SUITE, PpermuteReceiversOfNothingGetZeros) {
  const size_t count = 100;
  std::vector<int> flat;
  for (int r = 0; r + 1 < n_; r++) flat.push_back(r), flat.push_back(r + 1);
  auto in = inputs<int32_t>(count);
  auto out = outputs(count * sizeof(int32_t));
  ASSERT_EQ(kctn_collective(mesh_, KCTN_PPERMUTE, KILN_I32, count, in.data(), out.data(), 0, int(flat.size() / 2),
                            reinterpret_cast<const int(*)[2]>(flat.data())),
            KILN_OK) << last_error();
  for (int i = 0; i < n_; i++) {
    auto got = download<int32_t>(i, out[i], count);
    for (size_t j = 0; j < count; j++) ASSERT_EQ(got[j], i == 0 ? 0 : int32_t(value(i - 1, j))) << i;
  }
  int bad[2][2] = {{0, 0}, {1, 0}};
  EXPECT_EQ(kctn_collective(mesh_, KCTN_PPERMUTE, KILN_I32, count, in.data(), out.data(), 0, 2, bad),
            KILN_ERR_ARGUMENT);
}

// A 2x2 mesh's 'model' axis: pairs {0,1} and {2,3} reduce separately over
// communicators split from the root.
TEST_F(KCT_SUITE, SplitAxisReducesWithinGroups) {
  if (n_ < 4 || n_ % 2) GTEST_SKIP() << "needs an even number of devices, at least 4";
  std::vector<int> color(n_), rank(n_);
  for (int i = 0; i < n_; i++) color[i] = i / 2, rank[i] = i % 2;
  ASSERT_EQ(kctn_group(mesh_, "model", color.data(), rank.data()), KILN_OK) << last_error();
  const size_t count = 64;
  auto in = inputs<float>(count);
  auto out = outputs(count * sizeof(float));
  ASSERT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, KILN_F32, count, in.data(), out.data(), 0, 0, nullptr), KILN_OK)
      << last_error();
  for (int i = 0; i < n_; i++) {
    auto got = download<float>(i, out[i], count);
    int mate = i ^ 1;
    for (size_t j = 0; j < count; j++) ASSERT_EQ(got[j], float(value(i, j) + value(mate, j)));
  }
  color[0] = 1; // the cached axis is bound to its partition
  EXPECT_EQ(kctn_group(mesh_, "model", color.data(), rank.data()), KILN_ERR_ARGUMENT);
}

// 40 f32 leaves of 1 KiB, 6 i32 leaves of 2 KiB and one f32 leaf of 16 KiB
// with 8 KiB buckets: f32 in 5 buckets + the big leaf alone, i32 in 2
// buckets: 8 NCCL calls per device instead of 47.
TEST_F(KCT_SUITE, BucketingPacksLeavesIntoFewCalls) {
  std::vector<kiln_dtype> dtypes;
  std::vector<int64_t> counts;
  for (int l = 0; l < 47; l++) {
    bool i32 = l % 7 == 3, big = l == 46;
    dtypes.push_back(i32 ? KILN_I32 : KILN_F32);
    counts.push_back(big ? 4096 : i32 ? 512 : 256);
  }
  std::vector<kct_buffer *> leaves;
  for (size_t l = 0; l < dtypes.size(); l++)
    for (int i = 0; i < n_; i++) {
      if (dtypes[l] == KILN_I32) {
        std::vector<int32_t> v(counts[l]);
        for (size_t j = 0; j < v.size(); j++) v[j] = int32_t((i + 1) * (l + 1) + j % 5);
        leaves.push_back(upload(i, v));
      } else {
        std::vector<float> v(counts[l]);
        for (size_t j = 0; j < v.size(); j++) v[j] = float((i + 1) * (l + 1) + j % 5);
        leaves.push_back(upload(i, v));
      }
    }
#ifdef KILN_FAKE_NCCL_LIBRARY
  unsigned long before = NcclCalls();
#endif
  ASSERT_EQ(kctn_all_reduce_leaves(mesh_, int(dtypes.size()), dtypes.data(), counts.data(), leaves.data(), 8192),
            KILN_OK) << last_error();
  ASSERT_EQ(kctn_wait(mesh_), KILN_OK) << last_error();
#ifdef KILN_FAKE_NCCL_LIBRARY
  EXPECT_EQ(NcclCalls() - before, 8ul * n_);
#endif
  double ranks = n_ * (n_ + 1) / 2.0;
  for (size_t l = 0; l < dtypes.size(); l++)
    for (int i = 0; i < n_; i++) {
      kct_buffer *b = leaves[l * n_ + i];
      std::vector<double> got;
      if (dtypes[l] == KILN_I32)
        for (int32_t x : download<int32_t>(i, b, counts[l])) got.push_back(x);
      else
        for (float x : download<float>(i, b, counts[l])) got.push_back(x);
      for (size_t j = 0; j < got.size(); j++)
        ASSERT_EQ(got[j], ranks * double(l + 1) + n_ * double(j % 5)) << "leaf " << l << " device " << i;
    }
}

TEST_F(KCT_SUITE, MismatchedShapesAreAnErrorNotAHang) {
  auto in = inputs<float>(16);
  auto out = outputs(16 * sizeof(float));
  out[n_ - 1] = buffer(n_ - 1, 8 * sizeof(float));
  EXPECT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, KILN_F32, 16, in.data(), out.data(), 0, 0, nullptr),
            KILN_ERR_SHAPE);
  std::string msg = last_error();
  EXPECT_NE(msg.find("psum over axis 'data'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:" + std::to_string(n_ - 1)), std::string::npos) << msg;
  if (n_ > 1) {
    EXPECT_EQ(kctn_collective(mesh_, KCTN_REDUCE_SCATTER, KILN_F32, 16 * n_ + 1, in.data(), in.data(), 0, 0, nullptr),
              KILN_ERR_SHAPE);
  }
  ASSERT_EQ(kctn_wait(mesh_), KILN_OK) << last_error(); // nothing was queued
}

#ifdef KILN_FAKE_NCCL_LIBRARY
// A participant that never arrives: the wait gives up after the timeout,
// aborts the communicators and names what is stuck; later collectives fail
// the same way and the devices still work.
TEST_F(KCT_SUITE, TimeoutAbortsAndLeavesTheContextUsable) {
  kctn_mesh_free(mesh_);
  mesh_ = nullptr;
  ASSERT_EQ(kctn_mesh_new(kLibrary, ctx_, n_, 0.2, &mesh_), KILN_OK) << last_error();
  ASSERT_EQ(kctn_group(mesh_, "data", nullptr, nullptr), KILN_OK) << last_error();
  auto in = inputs<float>(32);
  auto out = outputs(32 * sizeof(float));
  setenv("KILN_FAKE_NCCL_ABSENT_RANK", "1", 1);
  kiln_status st = kctn_collective(mesh_, KCTN_ALL_REDUCE, KILN_F32, 32, in.data(), out.data(), 0, 0, nullptr);
  unsetenv("KILN_FAKE_NCCL_ABSENT_RANK");
  ASSERT_EQ(st, KILN_OK) << last_error();
  EXPECT_EQ(kctn_wait(mesh_), KILN_ERR_COLLECTIVE);
  std::string msg = last_error();
  for (const char *part : {"psum over axis 'data'", "f32[32]", "did not finish within 0.2 s",
                           "still waiting on cuda:0", "aborted"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  EXPECT_EQ(kctn_collective(mesh_, KCTN_ALL_REDUCE, KILN_F32, 32, in.data(), out.data(), 0, 0, nullptr),
            KILN_ERR_COLLECTIVE);
  EXPECT_NE(last_error().find("aborted"), std::string::npos) << last_error();
  // Single-device work goes on.
  std::vector<float> host(32, 1.5f);
  kct_buffer *b = upload(0, host);
  EXPECT_EQ(download<float>(0, b, 32), host);
}

// The stand-in refuses what NCCL would hang on or leave undefined.
TEST_F(KCT_SUITE, StandInIsStrict) {
  int codes[4] = {-1, -1, -1, -1};
  ASSERT_EQ(kctn_stand_in_checks(kLibrary, ctx_, codes), KILN_OK) << last_error();
  EXPECT_EQ(codes[0], 5) << "a 2-rank collective outside a group: ncclInvalidUsage";
  EXPECT_EQ(codes[1], 5) << "ranks that disagree on the count: ncclInvalidUsage, asynchronously";
  EXPECT_EQ(codes[2], 4) << "a destroyed communicator: ncclInvalidArgument";
  EXPECT_EQ(codes[3], 5) << "a GPU listed twice: ncclInvalidUsage";
}
#endif

TEST(NcclLibrary, MissingLibraryIsAClearError) {
  kiln_options opts;
  kiln_options_init(&opts);
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << last_error();
  kctn_mesh *m = nullptr;
  // The CPU context's devices are no CUDA devices either; the library is
  // looked at first only when there is one, so open a missing one directly.
  EXPECT_EQ(kctn_mesh_new("/nonexistent/libnccl.so.2", ctx, 1, 0, &m), KILN_ERR_COLLECTIVE);
  EXPECT_NE(last_error().find("no NCCL library"), std::string::npos) << last_error();
  kiln_ctx_free(ctx);
}

}  // namespace
