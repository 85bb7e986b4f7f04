// Arrays on virtual CPU devices: round trips, devices, deletion, bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

bool Contains(const char *haystack, const char *needle) {
  return std::string(haystack).find(needle) != std::string::npos;
}

class ArrayTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(4, 0); }
  void TearDown() override { kiln_ctx_free(ctx_); }

  void Open(int devices, uint64_t memory) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.num_cpu_devices = devices;
    o.cpu_device_memory = memory;
    ASSERT_EQ(kiln_ctx_new(&o, &ctx_), KILN_OK) << kiln_last_error();
  }
  kiln_device *Dev(int i) {
    kiln_device *d = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, i, &d), KILN_OK);
    return d;
  }
  kiln_array *Floats(int dev, std::vector<int64_t> shape, float start = 0) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), start);
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(Dev(dev), KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * sizeof(float), &a),
              KILN_OK)
        << kiln_last_error();
    return a;
  }
  kiln_ctx *ctx_ = nullptr;
};

TEST_F(ArrayTest, RoundTripsEveryDtype) {
  for (int d = KILN_BOOL; d < KILN_NUM_DTYPES; d++) {
    kiln_dtype dt = static_cast<kiln_dtype>(d);
    const int64_t shape[] = {3, 5};
    size_t nb = 15 * kiln_dtype_size(dt);
    std::vector<unsigned char> in(nb), out(nb, 0xAA);
    for (size_t i = 0; i < nb; i++) in[i] = static_cast<unsigned char>(i * 7 + d);
    if (dt == KILN_BOOL)
      for (auto &b : in) b &= 1;
    kiln_array *a = nullptr;
    ASSERT_EQ(kiln_array_from_host(Dev(0), dt, 2, shape, in.data(), nb, &a), KILN_OK);
    EXPECT_EQ(kiln_array_dtype(a), dt);
    EXPECT_EQ(kiln_array_rank(a), 2);
    EXPECT_EQ(kiln_array_size(a), 15);
    EXPECT_EQ(kiln_array_nbytes(a), nb);
    EXPECT_EQ(kiln_array_block_until_ready(a), KILN_OK);
    ASSERT_EQ(kiln_array_to_host(a, out.data(), nb), KILN_OK);
    EXPECT_EQ(in, out) << kiln_dtype_name(dt);
    kiln_array_release(a);
  }
}

TEST_F(ArrayTest, ScalarsZeroSizeAndRankEight) {
  kiln_array *s = Floats(0, {}, 42);
  float v = 0;
  ASSERT_EQ(kiln_array_to_host(s, &v, sizeof v), KILN_OK);
  EXPECT_EQ(v, 42.f);
  EXPECT_EQ(kiln_array_rank(s), 0);
  kiln_array_release(s);

  const int64_t empty[] = {4, 0, 3};
  kiln_array *e = nullptr;
  ASSERT_EQ(kiln_array_from_host(Dev(0), KILN_F64, 3, empty, nullptr, 0, &e), KILN_OK);
  EXPECT_EQ(kiln_array_size(e), 0);
  EXPECT_EQ(kiln_array_to_host(e, nullptr, 0), KILN_OK);
  char desc[64];
  kiln_array_describe(e, desc, sizeof desc);
  EXPECT_STREQ(desc, "f64[4,0,3]{cpu:0}");
  kiln_array_release(e);

  kiln_array *r8 = Floats(1, {2, 1, 2, 1, 2, 1, 2, 3});
  std::vector<float> out(48);
  ASSERT_EQ(kiln_array_to_host(r8, out.data(), out.size() * 4), KILN_OK);
  EXPECT_EQ(out[47], 47.f);
  kiln_array_release(r8);
}

TEST_F(ArrayTest, DevicePutCopiesBetweenSeparateMemories) {
  kiln_array *a = Floats(0, {8, 8});
  kiln_array *b = nullptr;
  ASSERT_EQ(kiln_device_put(a, Dev(2), &b), KILN_OK) << kiln_last_error();
  EXPECT_NE(a, b);
  EXPECT_EQ(kiln_array_device(b), Dev(2));
  uint64_t in_use0 = 0, in_use2 = 0;
  kiln_device_memory_in_use(Dev(0), &in_use0);
  kiln_device_memory_in_use(Dev(2), &in_use2);
  EXPECT_EQ(in_use0, 256u);
  EXPECT_EQ(in_use2, 256u);
  kiln_array_release(a);  // the copy owns its own memory
  std::vector<float> out(64);
  ASSERT_EQ(kiln_array_to_host(b, out.data(), 256), KILN_OK);
  EXPECT_EQ(out[63], 63.f);
  kiln_array *same = nullptr;
  ASSERT_EQ(kiln_device_put(b, Dev(2), &same), KILN_OK);
  EXPECT_EQ(same, b);  // already there: a new reference, no copy
  kiln_array_release(same);
  kiln_array_release(b);
  kiln_device_memory_in_use(Dev(2), &in_use2);
  EXPECT_EQ(in_use2, 0u);
}

TEST_F(ArrayTest, DeletedArraysRefuseEveryUse) {
  kiln_array *a = Floats(0, {2, 3});
  ASSERT_EQ(kiln_array_delete(a), KILN_OK);
  EXPECT_TRUE(kiln_array_is_deleted(a));
  float out[6];
  EXPECT_EQ(kiln_array_to_host(a, out, sizeof out), KILN_ERR_DELETED);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_array_to_host: array f32[2,3]{cpu:0} has been deleted"))
      << kiln_last_error();
  EXPECT_EQ(kiln_array_block_until_ready(a), KILN_ERR_DELETED);
  kiln_array *b = nullptr;
  EXPECT_EQ(kiln_device_put(a, Dev(1), &b), KILN_ERR_DELETED);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(kiln_array_delete(a), KILN_OK);  // twice is harmless
  uint64_t in_use = 1;
  kiln_device_memory_in_use(Dev(0), &in_use);
  EXPECT_EQ(in_use, 0u);  // the buffer went at delete, before the handle
  kiln_array_release(a);
}

TEST_F(ArrayTest, BadInputIsAClearError) {
  float data[6] = {};
  const int64_t shape[] = {2, 3};
  kiln_array *a = reinterpret_cast<kiln_array *>(0x1);
  EXPECT_EQ(kiln_array_from_host(nullptr, KILN_F32, 2, shape, data, 24, &a), KILN_ERR_ARGUMENT);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, shape, data, 24, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, shape, nullptr, 24, &a), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, nullptr, data, 24, &a), KILN_ERR_ARGUMENT);

  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, shape, data, 20, &a), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_array_from_host: 20 bytes given, f32[2,3] needs 24"))
      << kiln_last_error();

  const int64_t neg[] = {2, -3};
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, neg, data, 24, &a), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "negative")) << kiln_last_error();

  const int64_t huge[] = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 2, huge, data, 24, &a), KILN_ERR_SIZE_OVERFLOW);
  EXPECT_TRUE(Contains(kiln_last_error(), "f32[1099511627776,1099511627776]")) << kiln_last_error();

  const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, 9, nine, data, 4, &a), KILN_ERR_SHAPE);
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, -1, nine, data, 4, &a), KILN_ERR_SHAPE);
  EXPECT_EQ(kiln_array_from_host(Dev(0), static_cast<kiln_dtype>(99), 2, shape, data, 24, &a),
            KILN_ERR_DTYPE);

  kiln_array *ok = Floats(0, {2, 3});
  EXPECT_EQ(kiln_array_to_host(ok, data, 12), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "destination holds 12 bytes, f32[2,3]{cpu:0} has 24"))
      << kiln_last_error();
  EXPECT_EQ(kiln_array_to_host(ok, nullptr, 24), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_array_to_host(nullptr, data, 24), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_device_put(ok, nullptr, &a), KILN_ERR_ARGUMENT);
  kiln_array_release(ok);

  kiln_device *d = nullptr;
  EXPECT_EQ(kiln_device_get(ctx_, 4, &d), KILN_ERR_OUT_OF_RANGE);
  EXPECT_TRUE(Contains(kiln_last_error(), "device index 4 is out of range (the cpu backend has 4"))
      << kiln_last_error();
  EXPECT_EQ(kiln_device_get(ctx_, -1, &d), KILN_ERR_OUT_OF_RANGE);
  EXPECT_EQ(kiln_device_get(nullptr, 0, &d), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_device_info_get(nullptr, nullptr), KILN_ERR_ARGUMENT);
  kiln_array_release(nullptr);  // allowed, like free(NULL)
}

TEST_F(ArrayTest, DevicesOfAnotherContextAreRefused) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *other = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &other), KILN_OK);
  kiln_device *od = nullptr;
  ASSERT_EQ(kiln_device_get(other, 0, &od), KILN_OK);
  kiln_array *a = Floats(0, {4});
  kiln_array *b = nullptr;
  EXPECT_EQ(kiln_device_put(a, od, &b), KILN_ERR_WRONG_DEVICE);
  EXPECT_TRUE(Contains(kiln_last_error(), "another context")) << kiln_last_error();
  kiln_array_release(a);
  kiln_ctx_free(other);
}

TEST_F(ArrayTest, OutOfDeviceMemoryNamesDeviceAndBytesAndLeavesContextUsable) {
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  Open(2, 1 << 20);  // 1 MiB per device
  std::vector<float> big(300000);
  const int64_t shape[] = {300000};
  kiln_array *a = Floats(1, {200000});  // 800 kB of the 1 MiB
  kiln_array *b = nullptr;
  EXPECT_EQ(kiln_array_from_host(Dev(1), KILN_F32, 1, shape, big.data(), big.size() * 4, &b),
            KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(b, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "cpu:1: out of device memory: 1200000 bytes requested"))
      << kiln_last_error();
  EXPECT_TRUE(Contains(kiln_last_error(), "f32[300000]")) << kiln_last_error();
  // device_put of the big array into the full device fails the same way...
  kiln_array *c = Floats(0, {200000});
  EXPECT_EQ(kiln_device_put(c, Dev(1), &b), KILN_ERR_OUT_OF_MEMORY);
  // ...and once memory is given back everything works again.
  kiln_array_release(a);
  ASSERT_EQ(kiln_device_put(c, Dev(1), &b), KILN_OK) << kiln_last_error();
  kiln_array_release(b);
  kiln_array_release(c);
  kiln_device_info info;
  kiln_device_info_get(Dev(1), &info);
  EXPECT_EQ(info.total_memory, 1u << 20);
}

TEST_F(ArrayTest, HugeHostAllocationFailsCleanly) {
  const int64_t shape[] = {int64_t(1) << 58};
  kiln_array *a = nullptr;
  // The byte count fits in size_t but no machine has it.
  std::vector<char> dummy(1);
  EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_I8, 1, shape, dummy.data(), size_t(1) << 58, &a),
            KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(a, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "288230376151711744 bytes")) << kiln_last_error();
  EXPECT_TRUE(Contains(kiln_last_error(), "cpu:0")) << kiln_last_error();
}

TEST_F(ArrayTest, ReferenceCountsAreThreadSafe) {
  kiln_array *a = Floats(0, {16});
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++)
    ts.emplace_back([a] {
      for (int i = 0; i < 10000; i++) {
        kiln_array_retain(a);
        kiln_array_release(a);
      }
    });
  for (auto &t : ts) t.join();
  float out[16];
  EXPECT_EQ(kiln_array_to_host(a, out, sizeof out), KILN_OK);
  kiln_array_release(a);
}

TEST_F(ArrayTest, DeviceInfoDescribesVirtualDevices) {
  EXPECT_EQ(kiln_device_count(ctx_), 4);
  for (int i = 0; i < 4; i++) {
    kiln_device_info info;
    ASSERT_EQ(kiln_device_info_get(Dev(i), &info), KILN_OK);
    EXPECT_EQ(info.index, i);
    EXPECT_EQ(info.platform, KILN_BACKEND_CPU);
    EXPECT_EQ(std::string(info.name), "cpu:" + std::to_string(i));
    EXPECT_GT(info.total_memory, 0u);
    EXPECT_EQ(kiln_device_index(Dev(i)), i);
    EXPECT_EQ(kiln_device_ctx(Dev(i)), ctx_);
    EXPECT_EQ(kiln_device_synchronize(Dev(i)), KILN_OK);
  }
}

}  // namespace
