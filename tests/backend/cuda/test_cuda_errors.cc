// backend/cuda without a GPU: translating the driver's, NVRTC's, cuBLAS's and
// NCCL's errors, the checking macros, and what asking for CUDA reports on a
// machine that cannot run it.
#include <cublas_api.h>
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/cuda_test_support.h"
#include "kiln/kiln.h"

namespace {

std::string last_error() { return kiln_last_error(); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Whether this process can load a CUDA driver at all; the messages differ.
bool driver_library_present() {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

// Expects a failed kiln_ctx_new for CUDA to say why, precisely when the
// reason is known to be the missing driver library.
void expect_cuda_unavailable(kiln_status st, kiln_ctx *ctx) {
  EXPECT_EQ(st, KILN_ERR_DEVICE);
  EXPECT_EQ(ctx, nullptr);
  std::string msg = last_error();
  EXPECT_EQ(msg.rfind("kiln_ctx_new: CUDA backend: ", 0), 0u) << msg;
  if (!driver_library_present()) {
    EXPECT_TRUE(contains(msg, "no CUDA driver library (dlopen libcuda.so.1: ")) << msg;
  } else {
    EXPECT_TRUE(contains(msg, "cuInit") || contains(msg, "no CUDA device") ||
                contains(msg, "driver too old") || contains(msg, "stub library"))
        << msg;
  }
}

TEST(CudaDriverErrors, StatusMapping) {
  EXPECT_EQ(kct_driver_status(CUDA_SUCCESS), KILN_OK);
  EXPECT_EQ(kct_driver_status(CUDA_ERROR_OUT_OF_MEMORY), KILN_ERR_OUT_OF_MEMORY);
  for (int rc : {CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_DEINITIALIZED,
                 CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_DEVICE_UNAVAILABLE,
                 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_ILLEGAL_ADDRESS,
                 CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_ECC_UNCORRECTABLE, CUDA_ERROR_UNKNOWN})
    EXPECT_EQ(kct_driver_status(rc), KILN_ERR_DEVICE) << "CUresult " << rc;
  for (int rc : {CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_NO_BINARY_FOR_GPU,
                 CUDA_ERROR_UNSUPPORTED_PTX_VERSION})
    EXPECT_EQ(kct_driver_status(rc), KILN_ERR_COMPILE) << "CUresult " << rc;
  for (int rc : {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_CONTEXT})
    EXPECT_EQ(kct_driver_status(rc), KILN_ERR_INTERNAL) << "CUresult " << rc;
}

TEST(CudaDriverErrors, MessageWithoutDriverNamesTheCode) {
  EXPECT_EQ(kct_driver_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(&p, 4096)", "cuda:3 (Fake GPU)"),
            KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(last_error(), "cuda:3 (Fake GPU): cuMemAlloc(&p, 4096) failed: CUresult 2");
  EXPECT_EQ(kct_driver_fail(CUDA_ERROR_NO_DEVICE, "cuInit(0)", nullptr), KILN_ERR_DEVICE);
  EXPECT_EQ(last_error(), "cuInit(0) failed: CUresult 100");
}

TEST(CudaDriverErrors, MacroNamesCallErrorAndDeviceThroughTheTable) {
  bool cleaned = false;
  EXPECT_EQ(kct_driver_macro(CUDA_ERROR_OUT_OF_MEMORY, "cuda:7 (Fake GPU)", &cleaned),
            KILN_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(cleaned);
  EXPECT_EQ(last_error(),
            "cuda:7 (Fake GPU): cuInit((unsigned)cu_result) failed: CUDA_ERROR_OUT_OF_MEMORY (out "
            "of memory)");

  EXPECT_EQ(kct_driver_macro(CUDA_ERROR_NO_DEVICE, nullptr, &cleaned), KILN_ERR_DEVICE);
  EXPECT_TRUE(cleaned);
  EXPECT_EQ(last_error(),
            "cuInit((unsigned)cu_result) failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is "
            "detected)");

  // A code the driver's tables do not know is still reported, by number.
  EXPECT_EQ(kct_driver_macro(CUDA_ERROR_LAUNCH_FAILED, "cuda:0", &cleaned), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "failed: CUresult 719")) << last_error();

  kiln_clear_error();
  EXPECT_EQ(kct_driver_macro(CUDA_SUCCESS, "cuda:0", &cleaned), KILN_OK);
  EXPECT_FALSE(cleaned);
  EXPECT_EQ(last_error(), "");
}

TEST(CudaDriverErrors, MissingLibraryIsReportedWithDlerror) {
  EXPECT_EQ(kct_driver_load("libkiln-no-such-driver.so.1"), KILN_ERR_DEVICE);
  std::string msg = last_error();
  EXPECT_TRUE(contains(msg, "no CUDA driver library (dlopen libkiln-no-such-driver.so.1: ")) << msg;
  EXPECT_TRUE(contains(msg, "libkiln-no-such-driver.so.1: cannot open shared object file")) << msg;
}

#ifdef KILN_CUDA_STUB_LIBRARY
// The toolkit's stub answers every call with CUDA_ERROR_STUB_LIBRARY. Loaded
// in a child process: once loaded, its soname would satisfy later dlopens of
// libcuda.so.1 in this one.
TEST(CudaDriverErrors, StubLibraryIsNotADriver) {
  EXPECT_EXIT(
      {
        kiln_status st = kct_driver_load(KILN_CUDA_STUB_LIBRARY);
        bool ok = st == KILN_ERR_DEVICE && contains(last_error(), "stub library") &&
                  contains(last_error(), "CUDA_ERROR_STUB_LIBRARY");
        fprintf(stderr, "%s\n", last_error().c_str());
        exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "is the CUDA toolkit's stub library, not a driver");
}
#endif

TEST(CudaBackendUnavailable, OptionsBackendCudaSaysWhy) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CUDA;
  kiln_ctx *ctx = nullptr;
  kiln_status st = kiln_ctx_new(&opts, &ctx);
  if (st == KILN_OK) {
    EXPECT_EQ(kiln_ctx_backend(ctx), KILN_BACKEND_CUDA);
    kiln_ctx_free(ctx);
    GTEST_SKIP() << "a CUDA device is present; test_cuda_device covers it";
  }
  expect_cuda_unavailable(st, ctx);
}

TEST(CudaBackendUnavailable, EnvironmentBackendCudaSaysWhy) {
  KctScopedEnv env("KILN_BACKEND", "cuda");
  kiln_ctx *ctx = nullptr;
  kiln_status st = kiln_ctx_new(nullptr, &ctx);
  if (st == KILN_OK) {
    EXPECT_EQ(kiln_ctx_backend(ctx), KILN_BACKEND_CUDA);
    kiln_ctx_free(ctx);
    GTEST_SKIP() << "a CUDA device is present; test_cuda_device covers it";
  }
  expect_cuda_unavailable(st, ctx);
}

TEST(CudaBackendUnavailable, AutoFallsBackToTheCpu) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_AUTO;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << last_error();
  if (!driver_library_present()) {
    EXPECT_EQ(kiln_ctx_backend(ctx), KILN_BACKEND_CPU);
  }
  EXPECT_GE(kiln_device_count(ctx), 1);
  // The reason CUDA was passed over is not left behind as an error.
  EXPECT_EQ(last_error(), "");
  kiln_ctx_free(ctx);
}

TEST(CudaNvrtcErrors, StatusMapping) {
  EXPECT_EQ(kct_nvrtc_status(NVRTC_SUCCESS), KILN_OK);
  EXPECT_EQ(kct_nvrtc_status(NVRTC_ERROR_COMPILATION), KILN_ERR_COMPILE);
  EXPECT_EQ(kct_nvrtc_status(NVRTC_ERROR_INVALID_OPTION), KILN_ERR_COMPILE);
  EXPECT_EQ(kct_nvrtc_status(NVRTC_ERROR_OUT_OF_MEMORY), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(kct_nvrtc_status(NVRTC_ERROR_INVALID_PROGRAM), KILN_ERR_INTERNAL);
  EXPECT_EQ(kct_nvrtc_status(NVRTC_ERROR_INTERNAL_ERROR), KILN_ERR_INTERNAL);
  EXPECT_EQ(kct_nvrtc_fail(NVRTC_ERROR_INVALID_INPUT, "nvrtcCreateProgram(&p, src, name, 0, 0, 0)",
                           "fused_3"),
            KILN_ERR_INTERNAL);
  EXPECT_EQ(
      last_error(),
      "fused_3: nvrtcCreateProgram(&p, src, name, 0, 0, 0) failed: NVRTC_ERROR_INVALID_INPUT");
}

// NVRTC is dlopen'ed: a missing library is a device error that names it and
// the CUDA major kiln needs; the toolkit's own opens, at the toolkit's major.
TEST(CudaNvrtcErrors, MissingLibraryIsNamed) {
  int major = 0;
  EXPECT_EQ(kct_nvrtc_open("libkiln-no-such-nvrtc.so.1", &major), KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "no NVRTC library (dlopen libkiln-no-such-nvrtc.so.1: "))
      << last_error();
  EXPECT_TRUE(contains(last_error(), "install NVRTC of CUDA " + std::to_string(CUDA_VERSION / 1000)))
      << last_error();
  const std::string toolkit_nvrtc = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
  ASSERT_EQ(kct_nvrtc_open(toolkit_nvrtc.c_str(), &major), KILN_OK) << last_error();
  EXPECT_EQ(major, CUDA_VERSION / 1000);
}

TEST(CudaNvrtcErrors, BadSourceIsACompileErrorWithTheLog) {
  char *code = nullptr;
  size_t size = 0;
  const char *src = "extern \"C\" __global__ void k(float *x) { x[0] = undefined_thing; }\n";
  EXPECT_EQ(
      kct_nvrtc_compile("bad_kernel.cu", src, "--gpu-architecture=compute_80", false, &code, &size),
      KILN_ERR_COMPILE);
  EXPECT_EQ(code, nullptr);
  EXPECT_EQ(size, 0u);
  std::string msg = last_error();
  EXPECT_TRUE(contains(msg, "bad_kernel.cu: nvrtcCompileProgram failed: NVRTC_ERROR_COMPILATION"))
      << msg;
  // NVRTC's log: the file, the line and the offending name.
  EXPECT_TRUE(contains(msg, "bad_kernel.cu(1)")) << msg;
  EXPECT_TRUE(contains(msg, "undefined_thing")) << msg;
}

TEST(CudaNvrtcErrors, BadOptionIsACompileError) {
  char *code = nullptr;
  size_t size = 0;
  EXPECT_EQ(kct_nvrtc_compile("opt.cu", "__global__ void k() {}\n", "--no-such-option", false,
                              &code, &size),
            KILN_ERR_COMPILE);
  EXPECT_TRUE(contains(last_error(),
                       "opt.cu: nvrtcCompileProgram failed: "
                       "NVRTC_ERROR_INVALID_OPTION"))
      << last_error();
}

TEST(CudaNvrtcErrors, GoodSourceGivesPtxAndCubin) {
  const char *src = "extern \"C\" __global__ void kiln_fill(float *x) { x[threadIdx.x] = 1.0f; }\n";
  char *code = nullptr;
  size_t size = 0;
  ASSERT_EQ(kct_nvrtc_compile("fill.cu", src, "--gpu-architecture=compute_80", false, &code, &size),
            KILN_OK)
      << last_error();
  ASSERT_NE(code, nullptr);
  EXPECT_GT(size, 0u);
  EXPECT_TRUE(contains(std::string(code, size), ".entry kiln_fill"));
  free(code);

  ASSERT_EQ(kct_nvrtc_compile("fill.cu", src, "--gpu-architecture=sm_80", true, &code, &size),
            KILN_OK)
      << last_error();
  ASSERT_GT(size, 4u);
  EXPECT_EQ(std::memcmp(code,
                        "\x7f"
                        "ELF",
                        4),
            0);
  free(code);
}

TEST(CudaCublasErrors, StatusMapping) {
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_SUCCESS), KILN_OK);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_ALLOC_FAILED), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_NOT_INITIALIZED), KILN_ERR_DEVICE);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_ARCH_MISMATCH), KILN_ERR_DEVICE);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_EXECUTION_FAILED), KILN_ERR_DEVICE);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_INVALID_VALUE), KILN_ERR_INTERNAL);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_INTERNAL_ERROR), KILN_ERR_INTERNAL);
  EXPECT_EQ(kct_cublas_status(CUBLAS_STATUS_NOT_SUPPORTED), KILN_ERR_UNIMPLEMENTED);
  EXPECT_EQ(kct_cublas_fail(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmul(...)", "cuda:1"),
            KILN_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(
      contains(last_error(), "cuda:1: cublasLtMatmul(...) failed: CUBLAS_STATUS_ALLOC_FAILED ("))
      << last_error();
}

TEST(CudaCublasErrors, CreateWithoutAGpuFailsAsADeviceError) {
  kiln_status st = kct_blaslt_create();
  if (st == KILN_OK) GTEST_SKIP() << "cuBLASLt found a GPU";
  EXPECT_EQ(st, KILN_ERR_DEVICE);
  EXPECT_TRUE(contains(last_error(), "cublasLtCreate(&handle) failed: CUBLAS_STATUS_NOT_INITIALIZED"))
      << last_error();
}

TEST(CudaNcclErrors, EveryErrorIsACollectiveError) {
  EXPECT_EQ(kct_nccl_status(ncclSuccess), KILN_OK);
  for (int rc : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
                 ncclInvalidUsage, ncclRemoteError})
    EXPECT_EQ(kct_nccl_status(rc), KILN_ERR_COLLECTIVE) << "ncclResult_t " << rc;
  EXPECT_EQ(kct_nccl_fail(ncclSystemError, "ncclAllReduce(...)", "cuda:2"), KILN_ERR_COLLECTIVE);
  EXPECT_TRUE(contains(last_error(), "cuda:2: ncclAllReduce(...) failed: NCCL error 2: "))
      << last_error();
  EXPECT_TRUE(contains(last_error(), ncclGetErrorString(ncclSystemError))) << last_error();
}

TEST(CudaNcclErrors, RealCallsThroughTheMacro) {
  int version = 0;
  ASSERT_EQ(kct_nccl_version(&version), KILN_OK) << last_error();
  EXPECT_GE(version, 20000);  // NCCL 2.x codes versions as major*10000 + minor*100 + patch
  EXPECT_EQ(kct_nccl_comm_count_null(), KILN_ERR_COLLECTIVE);
  EXPECT_TRUE(contains(last_error(), "a test: ncclCommCount(NULL, &count) failed: NCCL error 4: "))
      << last_error();
}

}  // namespace
