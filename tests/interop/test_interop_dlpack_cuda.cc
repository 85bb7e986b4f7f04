// DLPack on the CUDA backend over the stand-in driver (fake_cuda/): on
// export the consumer's stream waits on the array's ready event, and an
// import's release defers the producer's deleter until kiln's queued work
// is done; the host never waits. kiln's compute stream is held behind a gate, so that the array's
// upload is still pending when it is exported; a host wait there would be
// the stand-in's stall error, not a hang.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <vector>

#include "fake_cuda/fake_cuda.h"
#include "kiln/interop.h"
#include "kiln/kiln.h"

KCT_USE_FAKE_DRIVER();

namespace {

// The stand-in's entry points a consumer (PyTorch, CuPy) would call itself.
struct Driver {
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease;
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent;
  PFN_cuStreamCreate_v2000 cuStreamCreate;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy;
  PFN_cuStreamQuery_v2000 cuStreamQuery;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize;

  bool load() {
    auto get = KctFakeSymbol<PFN_cuGetProcAddress_v12000>("libcuda.so.1", "cuGetProcAddress_v2");
    if (!get) return false;
    bool ok = true;
    auto one = [&](const char *name, void *slot) {
      void *fn = nullptr;
      ok = ok && get(name, &fn, CUDA_VERSION, 0, nullptr) == CUDA_SUCCESS && fn;
      *static_cast<void **>(slot) = fn;
    };
    one("cuDeviceGet", &cuDeviceGet);
    one("cuDevicePrimaryCtxRetain", &cuDevicePrimaryCtxRetain);
    one("cuDevicePrimaryCtxRelease", &cuDevicePrimaryCtxRelease);
    one("cuCtxPushCurrent", &cuCtxPushCurrent);
    one("cuCtxPopCurrent", &cuCtxPopCurrent);
    one("cuStreamCreate", &cuStreamCreate);
    one("cuStreamDestroy", &cuStreamDestroy);
    one("cuStreamQuery", &cuStreamQuery);
    one("cuStreamSynchronize", &cuStreamSynchronize);
    return ok;
  }
};

int gate_open(void *flag) { return *static_cast<int *>(flag); }

// A producer's deleter that counts its calls, then runs the one it replaced.
int g_deleted = 0;
void (*g_inner_deleter)(DLManagedTensorVersioned *) = nullptr;
void counting_deleter(DLManagedTensorVersioned *t) {
  g_deleted++;
  g_inner_deleter(t);
}

class DlpackFakeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CUDA;
    ASSERT_EQ(kiln_ctx_new(&o, &ctx_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
    ASSERT_TRUE(drv_.load());
    ASSERT_EQ(drv_.cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuDevicePrimaryCtxRetain(&cuctx_, device_), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuCtxPushCurrent(cuctx_), CUDA_SUCCESS);
    ASSERT_EQ(drv_.cuStreamCreate(&consumer_, 0), CUDA_SUCCESS);
    CUcontext popped;
    ASSERT_EQ(drv_.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (consumer_) {
      EXPECT_EQ(drv_.cuStreamDestroy(consumer_), CUDA_SUCCESS);
    }
    if (cuctx_) {
      EXPECT_EQ(drv_.cuDevicePrimaryCtxRelease(device_), CUDA_SUCCESS);
    }
    kiln_ctx_free(ctx_);
    EXPECT_EQ(KctFakeLiveObjects(), 0) << "driver objects left behind";
  }

  // Closes a gate on kiln's compute stream, then uploads {1, 2, 3, 4}: the
  // upload is ordered after the gate, so it is pending until the gate opens.
  kiln_array *PendingArray() {
    int64_t s = 0;
    EXPECT_EQ(kiln_device_dlpack_stream(dev_, &s), KILN_OK);
    auto gate = KctFakeSymbol<unsigned long long (*)(CUstream, int (*)(void *), void *)>(
        "libcuda.so.1", "kiln_fake_cuda_launch_gate");
    EXPECT_NE(gate, nullptr);
    EXPECT_NE(gate(reinterpret_cast<CUstream>(s), gate_open, &open_), 0u);
    std::vector<float> v{1, 2, 3, 4};
    int64_t shape[1] = {4};
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev_, KILN_F32, 1, shape, v.data(), v.size() * sizeof(float), &a),
              KILN_OK)
        << kiln_last_error();
    return a;
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
  Driver drv_{};
  CUdevice device_ = 0;
  CUcontext cuctx_ = nullptr;
  CUstream consumer_ = nullptr;
  int open_ = 0;
};

TEST_F(DlpackFakeCuda, ExportOrdersTheConsumerStreamNotTheHost) {
  kiln_array *a = PendingArray();
  ASSERT_NE(a, nullptr);
  DLManagedTensorVersioned *t = nullptr;
  // A host wait here would meet the closed gate (the stand-in's stall error).
  ASSERT_EQ(kiln_array_to_dlpack(a, reinterpret_cast<int64_t>(consumer_), &t), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(t->dl_tensor.device.device_id, 0);
  // The consumer's stream now holds a wait for the upload.
  EXPECT_EQ(drv_.cuStreamQuery(consumer_), CUDA_ERROR_NOT_READY);
  open_ = 1;
  ASSERT_EQ(drv_.cuStreamSynchronize(consumer_), CUDA_SUCCESS);
  // Past the wait, the upload is done: the stand-in's device memory is host
  // memory, so the consumer's view can be read directly.
  const float *p = static_cast<const float *>(t->dl_tensor.data);
  EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{1, 2, 3, 4}));
  kiln_array_release(a);
  t->deleter(t);
}

TEST_F(DlpackFakeCuda, StreamNoneOrdersNothingAndTheUnversionedExportOrdersToo) {
  kiln_array *a = PendingArray();
  ASSERT_NE(a, nullptr);
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, KILN_DLPACK_STREAM_NONE, &t), KILN_OK) << kiln_last_error();
  EXPECT_EQ(drv_.cuStreamQuery(consumer_), CUDA_SUCCESS);
  DLManagedTensor *u = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack_unversioned(a, reinterpret_cast<int64_t>(consumer_), &u), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(u->dl_tensor.data, t->dl_tensor.data);
  EXPECT_EQ(drv_.cuStreamQuery(consumer_), CUDA_ERROR_NOT_READY);
  open_ = 1;
  ASSERT_EQ(drv_.cuStreamSynchronize(consumer_), CUDA_SUCCESS);
  t->deleter(t);
  u->deleter(u);
  kiln_array_release(a);
}

// stream=1 and 2 (DLPack's legacy and per-thread default streams, what
// Python consumers pass for "the default stream"): the default stream is
// ordered after the upload, again without a host wait.
TEST_F(DlpackFakeCuda, TheDefaultStreamHandlesAreOrderedToo) {
  for (int64_t handle : {int64_t{1}, int64_t{2}}) {
    SCOPED_TRACE(handle);
    open_ = 0;
    kiln_array *a = PendingArray();
    ASSERT_NE(a, nullptr);
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_EQ(kiln_array_to_dlpack(a, handle, &t), KILN_OK) << kiln_last_error();
    CUstream def = reinterpret_cast<CUstream>(handle);  // of the current context
    ASSERT_EQ(drv_.cuCtxPushCurrent(cuctx_), CUDA_SUCCESS);
    EXPECT_EQ(drv_.cuStreamQuery(def), CUDA_ERROR_NOT_READY);
    open_ = 1;
    EXPECT_EQ(drv_.cuStreamSynchronize(def), CUDA_SUCCESS);
    CUcontext popped;
    ASSERT_EQ(drv_.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
    const float *p = static_cast<const float *>(t->dl_tensor.data);
    EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{1, 2, 3, 4}));
    kiln_array_release(a);
    t->deleter(t);
  }
  // Like the real driver, the stand-in will not destroy them.
  ASSERT_EQ(drv_.cuCtxPushCurrent(cuctx_), CUDA_SUCCESS);
  EXPECT_EQ(drv_.cuStreamDestroy(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  CUcontext popped;
  ASSERT_EQ(drv_.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
}

TEST_F(DlpackFakeCuda, AnInvalidConsumerStreamIsAnErrorNamingTheArray) {
  open_ = 1;
  kiln_array *a = PendingArray();
  ASSERT_NE(a, nullptr);
  DLManagedTensorVersioned *t = nullptr;
  // Not a stream the driver made: refused by the driver, reported, no leak.
  EXPECT_NE(kiln_array_to_dlpack(a, 12345, &t), KILN_OK);
  EXPECT_EQ(t, nullptr);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find("stream 12345"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[4]"), std::string::npos) << msg;
  kiln_array_release(a);
}

// Exports a (pending) array and imports it back, the export's deleter
// replaced by one that counts; releases the import. kiln's own export is a
// producer like any other here.
void ImportAndRelease(kiln_device *dev, kiln_array *a) {
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, KILN_DLPACK_STREAM_NONE, &t), KILN_OK) << kiln_last_error();
  g_deleted = 0;
  g_inner_deleter = t->deleter;
  t->deleter = counting_deleter;
  kiln_array *b = nullptr;
  ASSERT_EQ(kiln_array_from_dlpack(dev, t, 0, &b), KILN_OK) << kiln_last_error();
  kiln_array_release(b);
}

// An import read by work still queued (behind the closed gate): releasing it
// returns at once and owes the producer's deleter until that work is done.
// (Before, the release waited on the host: the stand-in's stall error.)
TEST_F(DlpackFakeCuda, ReleasingAnImportDefersTheDeleterUntilQueuedWorkIsDone) {
  kiln_array *a = PendingArray();
  ASSERT_NE(a, nullptr);
  ImportAndRelease(dev_, a);
  EXPECT_EQ(g_deleted, 0) << "the deleter ran while queued work may read the memory";
  open_ = 1;
  ASSERT_EQ(kiln_device_synchronize(dev_), KILN_OK) << kiln_last_error();
  EXPECT_EQ(g_deleted, 1);
  kiln_array_release(a);
}

// A deleter still owed when the context goes runs at its teardown: nothing
// leaks and the producer gets its memory back.
TEST_F(DlpackFakeCuda, TheContextsTeardownRunsTheDeletersStillOwed) {
  kiln_array *a = PendingArray();
  ASSERT_NE(a, nullptr);
  ImportAndRelease(dev_, a);
  kiln_array_release(a); /* the export's reference is the deleter's to drop */
  EXPECT_EQ(g_deleted, 0);
  open_ = 1;
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  EXPECT_EQ(g_deleted, 1);
}

}  // namespace
