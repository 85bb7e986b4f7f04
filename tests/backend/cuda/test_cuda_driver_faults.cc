// backend/cuda against tests/fake_cuda, a stand-in libcuda.so.1, with driver
// failures injected: every reason CUDA cannot be used is reported as such,
// a failure at any step of opening the devices gives back everything taken
// so far, and a failed copy leaves the context usable.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/cuda_test_support.h"
#include "kiln/kiln.h"

namespace {

std::string last_error() { return kiln_last_error(); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

class FakeDriver : public ::testing::Test {
 protected:
  // Loaded by path first, the stand-in's soname (libcuda.so.1) is what the
  // backend's dlopen finds from then on in this process.
  static void SetUpTestSuite() {
    library_ = dlopen(KILN_FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << dlerror();
    live_ = reinterpret_cast<int (*)(int)>(dlsym(library_, "kiln_fake_cuda_live_objects"));
    reset_ = reinterpret_cast<void (*)(void)>(dlsym(library_, "kiln_fake_cuda_reset_faults"));
    ASSERT_NE(live_, nullptr);
    ASSERT_NE(reset_, nullptr);
  }
  static void TearDownTestSuite() { dlclose(library_); }

  void SetUp() override {
    ASSERT_NE(live_, nullptr) << "the stand-in driver did not load";
    reset_();
  }
  void TearDown() override {
    kiln_ctx_free(ctx_);
    EXPECT_EQ(live_(/*verbose=*/1), 0) << "driver objects left behind";
  }

  kiln_status open(kiln_backend backend = KILN_BACKEND_CUDA) {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = backend;
    opts.log_level = KILN_LOG_OFF;  // injected failures that only warn stay quiet
    return kiln_ctx_new(&opts, &ctx_);
  }

  kiln_device *device(int i) {
    kiln_device *dev = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, i, &dev), KILN_OK);
    return dev;
  }

  static void *library_;
  static int (*live_)(int);
  static void (*reset_)(void);
  kiln_ctx *ctx_ = nullptr;
};

void *FakeDriver::library_ = nullptr;
int (*FakeDriver::live_)(int) = nullptr;
void (*FakeDriver::reset_)(void) = nullptr;

TEST_F(FakeDriver, OpensEveryDeviceWithItsInfo) {
  KctScopedEnv devices("KILN_FAKE_CUDA_DEVICES", "3");
  ASSERT_EQ(open(), KILN_OK) << last_error();
  EXPECT_EQ(kiln_ctx_backend(ctx_), KILN_BACKEND_CUDA);
  ASSERT_EQ(kiln_device_count(ctx_), 3);
  for (int i = 0; i < 3; i++) {
    kiln_device_info info;
    ASSERT_EQ(kiln_device_info_get(device(i), &info), KILN_OK);
    EXPECT_EQ(info.index, i);
    EXPECT_EQ(info.platform, KILN_BACKEND_CUDA);
    EXPECT_EQ(std::string(info.name), "Fake CUDA Device " + std::to_string(i));
    EXPECT_EQ(info.compute_major, 9);
    EXPECT_EQ(info.compute_minor, 0);
    EXPECT_EQ(info.multiprocessors, 4 + i);
    EXPECT_EQ(info.total_memory, uint64_t{512} << 20);
  }
}

// The driver floor is the toolkit kiln is built with (CUDA_VERSION of its
// headers), and the message names both versions.
static std::string too_old_message(int driver) {
  char toolkit[16];
  snprintf(toolkit, sizeof toolkit, "%d.%d", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  return "kiln_ctx_new: CUDA backend: driver too old: supports CUDA " +
         std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
         ", kiln is built with CUDA " + toolkit + " and needs a driver for CUDA " + toolkit +
         " or newer";
}

TEST_F(FakeDriver, DriverTooOld) {
  KctScopedEnv version("KILN_FAKE_CUDA_VERSION", "11080");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(), too_old_message(11080));
}

// A driver one minor release older than the toolkit is refused, though it
// would have met the old fixed floor of CUDA 12.0; the toolkit's own version
// is accepted.
TEST_F(FakeDriver, DriverOlderThanToolkit) {
  const int older = CUDA_VERSION % 1000 >= 10 ? CUDA_VERSION - 10 : CUDA_VERSION - 1000 + 90;
  {
    KctScopedEnv version("KILN_FAKE_CUDA_VERSION", std::to_string(older).c_str());
    EXPECT_EQ(open(), KILN_ERR_DEVICE);
    EXPECT_EQ(last_error(), too_old_message(older));
  }
  KctScopedEnv version("KILN_FAKE_CUDA_VERSION", std::to_string(CUDA_VERSION).c_str());
  EXPECT_EQ(open(), KILN_OK) << last_error();
}

TEST_F(FakeDriver, CuInitFailure) {
  KctScopedEnv init("KILN_FAKE_CUDA_INIT_ERROR", "100");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(),
            "kiln_ctx_new: CUDA backend: cuInit(0) failed: CUDA_ERROR_NO_DEVICE (no "
            "CUDA-capable device is detected)");
}

TEST_F(FakeDriver, NoDevice) {
  KctScopedEnv devices("KILN_FAKE_CUDA_DEVICES", "0");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(), "kiln_ctx_new: CUDA backend: no CUDA device");
}

TEST_F(FakeDriver, MissingEntryPoint) {
  KctScopedEnv version("KILN_FAKE_CUDA_VERSION", std::to_string(CUDA_VERSION).c_str());
  KctScopedEnv hide("KILN_FAKE_CUDA_HIDE", "cuMemPoolTrimTo");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  char driver[16];
  snprintf(driver, sizeof driver, "%d.%d", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  EXPECT_EQ(last_error(), std::string("kiln_ctx_new: CUDA backend: the CUDA driver (CUDA ") +
                              driver + ") has no entry point cuMemPoolTrimTo for CUDA 11.2");
}

TEST_F(FakeDriver, DeviceWithoutMemoryPools) {
  KctScopedEnv pools("KILN_FAKE_CUDA_NO_POOLS", "1");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(),
            "kiln_ctx_new: CUDA backend: cuda:0 (Fake CUDA Device 0) does not "
            "support stream-ordered memory pools");
}

TEST_F(FakeDriver, AutoFallsBackToTheCpuWhenCudaFails) {
  KctScopedEnv init("KILN_FAKE_CUDA_INIT_ERROR", "100");
  ASSERT_EQ(open(KILN_BACKEND_AUTO), KILN_OK) << last_error();
  EXPECT_EQ(kiln_ctx_backend(ctx_), KILN_BACKEND_CPU);
}

// Every driver call made while opening two devices, failed in turn: the
// context is refused with the call, the error and the device named, and
// nothing stays allocated.
TEST_F(FakeDriver, FailureAtAnyStepOfOpeningReleasesEverything) {
  struct Step {
    const char *fn;
    int calls;  // how many times opening two devices calls it
  } steps[] = {
      {"cuDeviceGetCount", 1},     {"cuDeviceGet", 2},      {"cuDeviceGetName", 2},
      {"cuDeviceGetAttribute", 8}, {"cuDeviceTotalMem", 2}, {"cuDevicePrimaryCtxRetain", 2},
      {"cuCtxPushCurrent", 2},     {"cuStreamCreate", 4},   {"cuEventCreate", 6},
      {"cuEventRecord", 4},        {"cuMemPoolCreate", 2},  {"cuMemPoolSetAttribute", 2},
      {"cuMemHostAlloc", 6},       {"cuMemHostGetDevicePointer", 2}};
  for (const Step &step : steps) {
    for (int after = 0; after < step.calls; after++) {
      SCOPED_TRACE(std::string(step.fn) + " failing after " + std::to_string(after) + " calls");
      reset_();
      {
        KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", step.fn);
        KctScopedEnv at("KILN_FAKE_CUDA_FAIL_AFTER", std::to_string(after).c_str());
        ASSERT_EQ(open(), KILN_ERR_OUT_OF_MEMORY);
        EXPECT_EQ(ctx_, nullptr);
        std::string msg = last_error();
        EXPECT_EQ(msg.rfind("kiln_ctx_new: CUDA backend: ", 0), 0u) << msg;
        EXPECT_TRUE(contains(msg, std::string(step.fn) + "(")) << msg;
        EXPECT_TRUE(contains(msg, "failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")) << msg;
      }
      EXPECT_EQ(live_(1), 0);
    }
    // One call more than opening makes: the context opens.
    reset_();
    KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", step.fn);
    KctScopedEnv at("KILN_FAKE_CUDA_FAIL_AFTER", std::to_string(step.calls).c_str());
    ASSERT_EQ(open(), KILN_OK) << step.fn << ": " << last_error();
    kiln_ctx_free(ctx_);
    ctx_ = nullptr;
  }
}

TEST_F(FakeDriver, FailingDeviceIsNamed) {
  KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuStreamCreate");
  KctScopedEnv at("KILN_FAKE_CUDA_FAIL_AFTER", "3");  // device 1's copy stream
  KctScopedEnv code("KILN_FAKE_CUDA_FAIL_ERROR", "999");
  EXPECT_EQ(open(), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(),
            "kiln_ctx_new: CUDA backend: cuda:1 (Fake CUDA Device 1): "
            "cuStreamCreate(&d->copy, CU_STREAM_NON_BLOCKING) failed: "
            "CUDA_ERROR_UNKNOWN (unknown error)");
}

TEST_F(FakeDriver, PeerAccessFailureOnlyWarns) {
  {
    KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuMemPoolSetAccess");
    ASSERT_EQ(open(), KILN_OK) << last_error();
  }
  // Copies between the devices still work (the driver stages them).
  std::vector<uint8_t> data(1000, 7), back(1000);
  int64_t shape[1] = {1000};
  kiln_array *a = nullptr, *b = nullptr;
  ASSERT_EQ(kiln_array_from_host(device(0), KILN_U8, 1, shape, data.data(), 1000, &a), KILN_OK);
  ASSERT_EQ(kiln_device_put(a, device(1), &b), KILN_OK) << last_error();
  ASSERT_EQ(kiln_array_to_host(b, back.data(), 1000), KILN_OK) << last_error();
  EXPECT_EQ(back, data);
  kiln_array_release(a);
  kiln_array_release(b);
}

// A copy that fails half-way: the array is not created, the staging buffers
// are drained before the next copy uses them, and the context goes on.
TEST_F(FakeDriver, FailedUploadLeavesTheContextUsable) {
  ASSERT_EQ(open(), KILN_OK) << last_error();
  const size_t n = 3 * kct_staging_bytes() + 11;
  std::vector<uint8_t> data(n, 1);
  int64_t shape[1] = {static_cast<int64_t>(n)};
  kiln_array *a = nullptr;
  {
    KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuMemcpyHtoDAsync");
    KctScopedEnv at("KILN_FAKE_CUDA_FAIL_AFTER", "1");
    KctScopedEnv code("KILN_FAKE_CUDA_FAIL_ERROR", "999");
    EXPECT_EQ(kiln_array_from_host(device(0), KILN_U8, 1, shape, data.data(), n, &a),
              KILN_ERR_DEVICE);
    EXPECT_EQ(a, nullptr);
    std::string msg = last_error();
    EXPECT_EQ(msg.rfind("kiln_array_from_host: copying u8[" + std::to_string(n) +
                            "] to Fake CUDA Device 0: uploading " + std::to_string(n) +
                            " bytes: cuda:0 (Fake CUDA Device 0): cuMemcpyHtoDAsync(",
                        0),
              0u)
        << msg;
    EXPECT_TRUE(contains(msg, "failed: CUDA_ERROR_UNKNOWN (unknown error)")) << msg;
  }
  uint64_t in_use = 1;
  ASSERT_EQ(kiln_device_memory_in_use(device(0), &in_use), KILN_OK);
  EXPECT_EQ(in_use, 0u);
  std::vector<uint8_t> back(n);
  data.assign(n, 2);
  ASSERT_EQ(kiln_array_from_host(device(0), KILN_U8, 1, shape, data.data(), n, &a), KILN_OK)
      << last_error();
  ASSERT_EQ(kiln_array_to_host(a, back.data(), n), KILN_OK) << last_error();
  EXPECT_EQ(back, data);
  kiln_array_release(a);
}

TEST_F(FakeDriver, FailedDownloadLeavesTheContextUsable) {
  ASSERT_EQ(open(), KILN_OK) << last_error();
  const size_t n = 2 * kct_staging_bytes() + 5;
  std::vector<uint8_t> data(n, 3), back(n);
  int64_t shape[1] = {static_cast<int64_t>(n)};
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(device(0), KILN_U8, 1, shape, data.data(), n, &a), KILN_OK);
  {
    KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuMemcpyDtoHAsync");
    KctScopedEnv at("KILN_FAKE_CUDA_FAIL_AFTER", "2");
    KctScopedEnv code("KILN_FAKE_CUDA_FAIL_ERROR", "999");
    EXPECT_EQ(kiln_array_to_host(a, back.data(), n), KILN_ERR_DEVICE);
    EXPECT_TRUE(contains(last_error(), "downloading " + std::to_string(n) +
                                           " bytes: cuda:0 "
                                           "(Fake CUDA Device 0): cuMemcpyDtoHAsync("))
        << last_error();
  }
  ASSERT_EQ(kiln_array_to_host(a, back.data(), n), KILN_OK) << last_error();
  EXPECT_EQ(back, data);
  kiln_array_release(a);
}

TEST_F(FakeDriver, AllocationErrorsOtherThanOutOfMemory) {
  ASSERT_EQ(open(), KILN_OK) << last_error();
  KctScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuMemAllocFromPoolAsync");
  KctScopedEnv code("KILN_FAKE_CUDA_FAIL_ERROR", "1");
  kiln_array *a = nullptr;
  EXPECT_EQ(kct_array_alloc(device(0), 4096, &a), KILN_ERR_INTERNAL);
  EXPECT_EQ(last_error(),
            "kct_array_alloc: allocating u8[4096]: cuda:0 (Fake CUDA Device 0): "
            "allocating 4096 bytes: cuMemAllocFromPoolAsync failed: "
            "CUDA_ERROR_INVALID_VALUE (invalid argument)");
}

// Out of memory while earlier frees are still queued: the allocation waits
// for them and succeeds rather than failing.
TEST_F(FakeDriver, OutOfMemoryWaitsForQueuedFrees) {
  ASSERT_EQ(open(), KILN_OK) << last_error();
  const int64_t big = int64_t{300} << 20;  // two do not fit the fake's 512 MiB
  kiln_array *a = nullptr, *b = nullptr;
  ASSERT_EQ(kct_array_alloc(device(0), big, &a), KILN_OK) << last_error();
  kiln_array_release(a);  // the free is queued, not run
  ASSERT_EQ(kct_array_alloc(device(0), big, &b), KILN_OK) << last_error();
  kiln_array *c = nullptr;
  EXPECT_EQ(kct_array_alloc(device(0), big, &c), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(contains(last_error(), "out of device memory allocating 314572800 bytes"))
      << last_error();
  kiln_array_release(b);
}

}  // namespace
