// backend/cuda on a real GPU: device info, copies through the staging buffers
// and directly, copies between devices, running out of memory, the memory
// pool. Every test skips itself when no CUDA device can be opened.
//
// The same tests are also built as test_cuda_device_fake, against
// tests/fake_cuda, a stand-in libcuda.so.1 that runs stream work lazily and
// checks ordering and handles, so that they run on every machine; there, each
// test also checks that the context gave back every object it took from the
// driver.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/cuda_test_support.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"

namespace {

std::string last_error() { return kiln_last_error(); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Distinct, non-periodic bytes, so that a chunk landing at the wrong offset
// shows up.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

#ifdef KILN_FAKE_CUDA_LIBRARY
#define KCT_SUITE FakeCudaDevice
KCT_USE_FAKE_DRIVER();
#else
#define KCT_SUITE CudaDevice
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
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK) << last_error();
    staging_ = kct_staging_bytes();
  }
  void TearDown() override {
    kiln_ctx_free(ctx_);
    ctx_ = nullptr;
    int live = KctFakeLiveObjects();
    if (live >= 0) {
      EXPECT_EQ(live, 0) << "driver objects left behind by the context";
    }
  }

  // Uploads `data` into a new u8 array and reads it back.
  void round_trip(kiln_device *dev, const std::vector<uint8_t> &data) {
    int64_t shape[1] = {static_cast<int64_t>(data.size())};
    kiln_array *a = nullptr;
    ASSERT_EQ(kiln_array_from_host(dev, KILN_U8, 1, shape, data.empty() ? nullptr : data.data(),
                                   data.size(), &a),
              KILN_OK)
        << last_error();
    std::vector<uint8_t> back(data.size(), 0xAB);
    EXPECT_EQ(kiln_array_to_host(a, back.empty() ? nullptr : back.data(), back.size()), KILN_OK)
        << last_error();
    EXPECT_TRUE(back == data) << data.size() << " bytes differ after the round trip";
    kiln_array_release(a);
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
  size_t staging_ = 0;
};

TEST_F(KCT_SUITE, InfoIsSane) {
  ASSERT_EQ(kiln_ctx_backend(ctx_), KILN_BACKEND_CUDA);
  ASSERT_GE(kiln_device_count(ctx_), 1);
  for (int i = 0; i < kiln_device_count(ctx_); i++) {
    kiln_device *dev = nullptr;
    ASSERT_EQ(kiln_device_get(ctx_, i, &dev), KILN_OK);
    kiln_device_info info;
    ASSERT_EQ(kiln_device_info_get(dev, &info), KILN_OK);
    EXPECT_EQ(info.index, i);
    EXPECT_EQ(info.platform, KILN_BACKEND_CUDA);
    EXPECT_GT(std::strlen(info.name), 0u);
    EXPECT_GE(info.compute_major, 5);  // CUDA 12 supports Maxwell (5.x) and later
    EXPECT_GE(info.compute_minor, 0);
    EXPECT_GT(info.multiprocessors, 0);
    EXPECT_GE(info.total_memory, uint64_t{256} << 20);
    uint64_t in_use = 1;
    ASSERT_EQ(kiln_device_memory_in_use(dev, &in_use), KILN_OK);
    EXPECT_EQ(in_use, 0u);
  }
}

TEST_F(KCT_SUITE, RoundTripOfManySizes) {
  const size_t s = staging_;
  const size_t sizes[] = {0, 1,     3,     4096,        65537,     s - 1,
                          s, s + 1, 2 * s, 2 * s + 123, 3 * s + 5, 5 * s - 17};
  uint32_t seed = 1;
  for (size_t n : sizes) {
    SCOPED_TRACE(n);
    round_trip(dev_, pattern(n, seed++));
  }
}

TEST_F(KCT_SUITE, SourceMayBeReusedAsSoonAsUploadReturns) {
  const size_t n = 3 * staging_ + 5;
  std::vector<uint8_t> data = pattern(n, 7), original = data;
  int64_t shape[1] = {static_cast<int64_t>(n)};
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev_, KILN_U8, 1, shape, data.data(), n, &a), KILN_OK)
      << last_error();
  std::memset(data.data(), 0, n);  // the last chunks may still be in flight
  std::vector<uint8_t> back(n);
  ASSERT_EQ(kiln_array_to_host(a, back.data(), n), KILN_OK) << last_error();
  EXPECT_TRUE(back == original);
  EXPECT_EQ(kiln_array_block_until_ready(a), KILN_OK) << last_error();
  kiln_array_release(a);
}

// The free is queued on the compute stream while the upload may still be in
// flight on the copy stream: it must wait for the upload.
TEST_F(KCT_SUITE, ReleaseRightAfterUploadWaitsForIt) {
  const size_t n = 3 * staging_ + 1;
  std::vector<uint8_t> data = pattern(n, 9);
  int64_t shape[1] = {static_cast<int64_t>(n)};
  for (int i = 0; i < 3; i++) {
    kiln_array *a = nullptr;
    ASSERT_EQ(kiln_array_from_host(dev_, KILN_U8, 1, shape, data.data(), n, &a), KILN_OK)
        << last_error();
    kiln_array_release(a);
  }
  EXPECT_EQ(kiln_device_synchronize(dev_), KILN_OK) << last_error();
  round_trip(dev_, data);
}

TEST_F(KCT_SUITE, StagedAndDirectCopiesAgree) {
  const size_t n = 2 * staging_ + 7;
  std::vector<uint8_t> data = pattern(n, 11), back(n);
  kct_buffer *buf = nullptr;
  ASSERT_EQ(kct_buffer_new(dev_, n, &buf), KILN_OK) << last_error();

  ASSERT_EQ(kct_upload(dev_, buf, data.data(), n, /*direct=*/true), KILN_OK) << last_error();
  ASSERT_EQ(kct_download(dev_, buf, back.data(), n, /*direct=*/false), KILN_OK) << last_error();
  EXPECT_TRUE(back == data) << "direct upload, staged download";

  data = pattern(n, 12);
  ASSERT_EQ(kct_upload(dev_, buf, data.data(), n, /*direct=*/false), KILN_OK) << last_error();
  // A staged upload may still be in flight: it leaves an event behind.
  EXPECT_TRUE(kct_buffer_has_ready(buf));
  EXPECT_EQ(kct_order_after_ready(dev_, buf), KILN_OK) << last_error();
  EXPECT_EQ(kct_wait(dev_, buf), KILN_OK) << last_error();
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(kct_download(dev_, buf, back.data(), n, /*direct=*/true), KILN_OK) << last_error();
  EXPECT_TRUE(back == data) << "staged upload, direct download";
  kct_buffer_free(dev_, buf);
}

TEST_F(KCT_SUITE, CopyLargerThanTheBufferIsRefused) {
  kct_buffer *buf = nullptr;
  ASSERT_EQ(kct_buffer_new(dev_, 100, &buf), KILN_OK) << last_error();
  std::vector<uint8_t> data(200);
  EXPECT_EQ(kct_upload(dev_, buf, data.data(), 200, false), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "upload of 200 bytes does not fit a buffer of 100 bytes"))
      << last_error();
  EXPECT_EQ(kct_download(dev_, buf, data.data(), 200, true), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "cuda:0")) << last_error();
  kct_buffer_free(dev_, buf);
}

TEST_F(KCT_SUITE, CopyWithinOneDevice) {
  const size_t n = staging_ + 99;
  std::vector<uint8_t> data = pattern(n, 21), back(n);
  kct_buffer *a = nullptr, *b = nullptr;
  ASSERT_EQ(kct_buffer_new(dev_, n, &a), KILN_OK) << last_error();
  ASSERT_EQ(kct_buffer_new(dev_, n, &b), KILN_OK) << last_error();
  ASSERT_EQ(kct_upload(dev_, a, data.data(), n, false), KILN_OK) << last_error();
  ASSERT_EQ(kct_copy(dev_, b, dev_, a, n), KILN_OK) << last_error();
  kct_buffer_free(dev_, a);  // freed in stream order, after the copy has read it
  ASSERT_EQ(kct_download(dev_, b, back.data(), n, false), KILN_OK) << last_error();
  EXPECT_TRUE(back == data);
  kct_buffer_free(dev_, b);
}

TEST_F(KCT_SUITE, DevicePutBetweenGpus) {
  if (kiln_device_count(ctx_) < 2) GTEST_SKIP() << "needs two CUDA devices";
  kiln_device *other = nullptr;
  ASSERT_EQ(kiln_device_get(ctx_, 1, &other), KILN_OK);
  const size_t n = 2 * staging_ + 321;
  std::vector<uint8_t> data = pattern(n, 31), back(n);
  int64_t shape[1] = {static_cast<int64_t>(n)};
  kiln_array *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev_, KILN_U8, 1, shape, data.data(), n, &a), KILN_OK)
      << last_error();
  ASSERT_EQ(kiln_device_put(a, other, &b), KILN_OK) << last_error();
  EXPECT_EQ(kiln_array_device(b), other);
  kiln_array_release(a);  // the source goes while the copy may still read it
  ASSERT_EQ(kiln_device_synchronize(dev_), KILN_OK) << last_error();
  ASSERT_EQ(kiln_device_put(b, dev_, &c), KILN_OK) << last_error();
  ASSERT_EQ(kiln_array_to_host(b, back.data(), n), KILN_OK) << last_error();
  EXPECT_TRUE(back == data) << "on device 1";
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(kiln_array_to_host(c, back.data(), n), KILN_OK) << last_error();
  EXPECT_TRUE(back == data) << "back on device 0";
  kiln_array_release(b);
  kiln_array_release(c);
}

TEST_F(KCT_SUITE, OutOfMemoryLeavesTheContextUsable) {
  kiln_device_info info;
  ASSERT_EQ(kiln_device_info_get(dev_, &info), KILN_OK);
  const uint64_t huge = 2 * info.total_memory;
  kiln_array *a = nullptr;
  EXPECT_EQ(kct_array_alloc(dev_, static_cast<int64_t>(huge), &a), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(a, nullptr);
  std::string msg = last_error();
  EXPECT_TRUE(contains(msg, "kct_array_alloc")) << msg;
  EXPECT_TRUE(contains(msg, "cuda:0 (")) << msg;
  EXPECT_TRUE(contains(msg, "out of device memory allocating " + std::to_string(huge) + " bytes"))
      << msg;
  EXPECT_TRUE(contains(msg, "CUDA_ERROR_OUT_OF_MEMORY")) << msg;
  uint64_t in_use = 1;
  ASSERT_EQ(kiln_device_memory_in_use(dev_, &in_use), KILN_OK);
  EXPECT_EQ(in_use, 0u);
  // The failure is not sticky: allocations and copies go on working.
  round_trip(dev_, pattern(staging_ + 3, 41));
  EXPECT_EQ(kiln_device_synchronize(dev_), KILN_OK) << last_error();
}

TEST_F(KCT_SUITE, PoolKeepsFreedMemoryUntilTrimmed) {
  const int64_t n = int64_t{64} << 20;
  kiln_array *a = nullptr;
  ASSERT_EQ(kct_array_alloc(dev_, n, &a), KILN_OK) << last_error();
  uint64_t reserved = 0, used = 0;
  ASSERT_EQ(kiln_device_synchronize(dev_), KILN_OK) << last_error();
  ASSERT_EQ(kct_pool_usage(dev_, &reserved, &used), KILN_OK) << last_error();
  EXPECT_GE(used, static_cast<uint64_t>(n));
  EXPECT_GE(reserved, used);
  kiln_array_release(a);
  ASSERT_EQ(kiln_device_synchronize(dev_), KILN_OK) << last_error();
  ASSERT_EQ(kct_pool_usage(dev_, &reserved, &used), KILN_OK) << last_error();
  EXPECT_EQ(used, 0u);
  // The release threshold keeps the memory cached for the next allocation...
  EXPECT_GE(reserved, static_cast<uint64_t>(n));
  // ...until it is trimmed.
  ASSERT_EQ(kct_pool_trim(dev_), KILN_OK) << last_error();
  ASSERT_EQ(kct_pool_usage(dev_, &reserved, &used), KILN_OK) << last_error();
  EXPECT_LT(reserved, static_cast<uint64_t>(n));
}

TEST_F(KCT_SUITE, ConcurrentCopiesFromSeveralThreads) {
  const size_t n = staging_ + 12345;
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      int64_t shape[1] = {static_cast<int64_t>(n)};
      for (int r = 0; r < 5; r++) {
        std::vector<uint8_t> data = pattern(n, static_cast<uint32_t>(100 * t + r)), back(n);
        kiln_array *a = nullptr;
        if (kiln_array_from_host(dev_, KILN_U8, 1, shape, data.data(), n, &a) != KILN_OK ||
            kiln_array_to_host(a, back.data(), n) != KILN_OK || back != data)
          failures[t]++;
        kiln_array_release(a);
      }
    });
  }
  for (auto &th : threads) th.join();
  for (int t = 0; t < 4; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST_F(KCT_SUITE, TwoContextsShareThePrimaryContext) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CUDA;
  kiln_ctx *second = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &second), KILN_OK) << last_error();
  kiln_device *dev2 = nullptr;
  ASSERT_EQ(kiln_device_get(second, 0, &dev2), KILN_OK);
  round_trip(dev2, pattern(4097, 51));
  // Freeing one context must leave the other's device working.
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  round_trip(dev2, pattern(staging_ + 1, 52));
  kiln_ctx_free(second);
}

// DLPack on the GPU: a kDLCUDA tensor of the same device is imported in
// place (its deleter runs when kiln releases it, after kiln's queued work),
// and the producer is asked for kiln's compute stream.
TEST_F(KCT_SUITE, DlpackImportOfDeviceMemoryIsZeroCopy) {
  int64_t stream = 0;
  ASSERT_EQ(kiln_device_dlpack_stream(dev_, &stream), KILN_OK);
  EXPECT_NE(stream, 0) << "a CUDA device names its compute stream";
  std::vector<uint8_t> data = pattern(1000, 7);
  int64_t shape[1] = {1000};
  kiln_array *a = nullptr, *b = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev_, KILN_U8, 1, shape, data.data(), data.size(), &a), KILN_OK)
      << last_error();
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, stream, &t), KILN_OK) << last_error();
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
  void *ptr = t->dl_tensor.data;
  kiln_array_release(a);  // the export holds it now
  ASSERT_EQ(kiln_array_from_dlpack(dev_, t, 0, &b), KILN_OK) << last_error();
  DLManagedTensorVersioned *again = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(b, KILN_DLPACK_STREAM_NONE, &again), KILN_OK);
  EXPECT_EQ(again->dl_tensor.data, ptr);  // the same device memory
  again->deleter(again);
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(kiln_array_to_host(b, back.data(), back.size()), KILN_OK) << last_error();
  EXPECT_TRUE(back == data);
  kiln_array_release(b);  // calls the export's deleter, which frees a
}

}  // namespace
