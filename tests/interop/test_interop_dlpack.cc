// DLPack 1.x exchange: round trips, pointer identity, lifetimes, read-only,
// 0-d and zero-size arrays, strided and refused layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/interop.h"
#include "kiln/kiln.h"
#include "support/arrays.h"

namespace {

// A producer's tensor owned by the test: counts deleter calls.
struct Producer {
  std::vector<float> data;
  std::vector<int64_t> shape, strides;
  DLManagedTensorVersioned m{};
  int deleted = 0;

  Producer(std::vector<float> d, std::vector<int64_t> sh, std::vector<int64_t> st = {})
      : data(std::move(d)), shape(std::move(sh)), strides(std::move(st)) {
    m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m.manager_ctx = this;
    m.deleter = [](DLManagedTensorVersioned *self) {
      static_cast<Producer *>(self->manager_ctx)->deleted++;
    };
    m.dl_tensor.data = data.data();
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = (int32_t)shape.size();
    m.dl_tensor.dtype = {kDLFloat, 32, 1};
    m.dl_tensor.shape = shape.data();
    m.dl_tensor.strides = strides.empty() ? nullptr : strides.data();
  }
};

// One CPU device; Floats(shape) counts from 1.
class DlpackTest : public kiln_test::CpuDeviceTest {
 protected:
  std::vector<float> Host(const kiln_array *a) {
    std::vector<float> v(kiln_array_size(a));
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * sizeof(float)), KILN_OK);
    return v;
  }
};

TEST_F(DlpackTest, ExportDescribesTheArrayReadOnly) {
  kiln_array *a = Floats({2, 3});
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, 0, &t), KILN_OK) << kiln_last_error();
  EXPECT_EQ(t->version.major, 1u);
  EXPECT_EQ(t->flags & DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
  EXPECT_EQ(t->flags & DLPACK_FLAG_BITMASK_IS_COPIED, 0u);
  const DLTensor &d = t->dl_tensor;
  EXPECT_EQ(d.device.device_type, kDLCPU);
  EXPECT_EQ(d.ndim, 2);
  EXPECT_EQ(d.dtype.code, kDLFloat);
  EXPECT_EQ(d.dtype.bits, 32);
  EXPECT_EQ(d.dtype.lanes, 1);
  EXPECT_EQ(d.shape[0], 2);
  EXPECT_EQ(d.shape[1], 3);
  EXPECT_EQ(d.strides[0], 3);
  EXPECT_EQ(d.strides[1], 1);
  EXPECT_EQ(d.byte_offset, 0u);
  const float *p = static_cast<const float *>(d.data);
  EXPECT_EQ(std::vector<float>(p, p + 6), Host(a));
  t->deleter(t);
  kiln_array_release(a);
}

TEST_F(DlpackTest, ExportHoldsTheArrayUntilTheDeleter) {
  kiln_array *a = Floats({4});
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, KILN_DLPACK_STREAM_NONE, &t), KILN_OK);
  kiln_array_release(a);  // the consumer's reference keeps the memory alive
  const float *p = static_cast<const float *>(t->dl_tensor.data);
  EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{1, 2, 3, 4}));
  t->deleter(t);  // the last reference: ASan reports a leak if it is not freed
}

TEST_F(DlpackTest, UnversionedExportSharesTheMemory) {
  kiln_array *a = Floats({3, 1});
  DLManagedTensor *u = nullptr, *u2 = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack_unversioned(a, 0, &u), KILN_OK);
  ASSERT_EQ(kiln_array_to_dlpack_unversioned(a, 0, &u2), KILN_OK);
  EXPECT_EQ(u->dl_tensor.data, u2->dl_tensor.data);  // zero-copy: one buffer
  EXPECT_EQ(u->dl_tensor.ndim, 2);
  u->deleter(u);
  u2->deleter(u2);
  kiln_array_release(a);
}

TEST_F(DlpackTest, RoundTripKeepsValuesAndCallsTheProducerDeleterOnce) {
  kiln_array *a = Floats({2, 2});
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(a, 0, &t), KILN_OK);
  kiln_array *b = nullptr;
  ASSERT_EQ(kiln_array_from_dlpack(dev_, t, 0, &b), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_array_dtype(b), KILN_F32);
  EXPECT_EQ(kiln_array_rank(b), 2);
  EXPECT_EQ(Host(b), Host(a));
  kiln_array_release(a);
  kiln_array_release(b);

  Producer p({5, 6, 7}, {3});
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &p.m, 0, &b), KILN_OK);
  EXPECT_EQ(p.deleted, 0);  // kiln views the producer's memory until released
  EXPECT_EQ(Host(b), (std::vector<float>{5, 6, 7}));
  kiln_array_release(b);
  EXPECT_EQ(p.deleted, 1);
}

TEST_F(DlpackTest, ImportIsZeroCopyAndHoldsTheProducerUntilReleased) {
  Producer p({1, 2, 3, 4, 5, 6}, {2, 3});
  kiln_array *b = nullptr;
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &p.m, 0, &b), KILN_OK) << kiln_last_error();
  // Re-exported, the same memory comes back: kiln never copied it.
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_EQ(kiln_array_to_dlpack(b, 0, &t), KILN_OK);
  EXPECT_EQ(t->dl_tensor.data, p.data.data());
  p.data[4] = 50;  // the producer's writes show through
  EXPECT_EQ(Host(b), (std::vector<float>{1, 2, 3, 4, 50, 6}));
  kiln_array_release(b);
  EXPECT_EQ(p.deleted, 0);  // the export still holds kiln's array
  t->deleter(t);
  EXPECT_EQ(p.deleted, 1);
}

TEST_F(DlpackTest, CopyFlagAndMisalignedDataCopy) {
  Producer p({1, 2, 3}, {3});
  kiln_array *b = nullptr;
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &p.m, KILN_DLPACK_COPY, &b), KILN_OK);
  EXPECT_EQ(p.deleted, 1);  // copied: the producer is free at once
  p.data[0] = 9;
  EXPECT_EQ(Host(b), (std::vector<float>{1, 2, 3}));
  kiln_array_release(b);
  // A byte offset that breaks float alignment is copied, not viewed.
  Producer q({0, 1, 2, 3}, {2});
  q.m.dl_tensor.byte_offset = 2;
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &q.m, 0, &b), KILN_OK) << kiln_last_error();
  EXPECT_EQ(q.deleted, 1);
  kiln_array_release(b);
}

TEST_F(DlpackTest, DonatingAnImportIsRefused) {
  // The reference executor hands any donated input of the output's size to
  // the output, so donation is certain to be attempted.
  kiln_ctx_free(ctx_);
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  opts.num_cpu_devices = 1;
  opts.executor = KILN_EXECUTOR_REFERENCE;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_from_ir("{ lambda ; a:f32[3]. let b:f32[3] = mul a 2.0:f32[] in (b,) }",
                              "double", &f),
            KILN_OK)
      << kiln_last_error();
  int donate = 0;
  kiln_jit_options o{};
  o.donate_argnums = &donate;
  o.num_donate = 1;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f, &o, &j), KILN_OK) << kiln_last_error();
  Producer p({1, 2, 3}, {3});
  kiln_array *in = nullptr, *out = nullptr;
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &p.m, 0, &in), KILN_OK);
  EXPECT_EQ(kiln_jit_call_arrays(j, 1, &in, 1, &out), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("zero-copy DLPack import"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(p.data, (std::vector<float>{1, 2, 3}));  // never written
  kiln_array_release(in);
  EXPECT_EQ(p.deleted, 1);
  kiln_jit_free(j);
  kiln_func_free(f);
}

TEST_F(DlpackTest, FuncFromIrRunsAndChecksItsArguments) {
  kiln_func *f = nullptr;
  EXPECT_EQ(kiln_func_from_ir("{ lambda ; a:f32[3]. let b = in (b,) }", "bad", &f),
            KILN_ERR_ARGUMENT);
  EXPECT_EQ(f, nullptr);
  ASSERT_EQ(kiln_func_from_ir("{ lambda ; a:f32[3] b:f32[]. let c:f32[3] = mul a b "
                              "d:f32[] = reduce_sum[axes=(0,)] c in (c, d, 1.5:f32[]) }",
                              "scale", &f),
            KILN_OK)
      << kiln_last_error();
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f, nullptr, &j), KILN_OK);
  kiln_array *in[2] = {Floats({3}), Floats({})}, *out[3] = {};
  ASSERT_EQ(kiln_jit_call_arrays(j, 2, in, 3, out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Host(out[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Host(out[1]), (std::vector<float>{6}));
  EXPECT_EQ(Host(out[2]), (std::vector<float>{1.5f}));
  for (auto *a : out) kiln_array_release(a);
  kiln_array *wrong[2] = {in[1], in[0]};
  EXPECT_EQ(kiln_jit_call_arrays(j, 2, wrong, 3, out), KILN_ERR_SHAPE);
  EXPECT_NE(std::string(kiln_last_error()).find("argument 0 is f32[]; the program's invar is f32[3]"),
            std::string::npos)
      << kiln_last_error();
  for (auto *a : in) kiln_array_release(a);
  kiln_jit_free(j);
  kiln_func_free(f);
}

TEST_F(DlpackTest, ZeroDimensionalAndZeroSize) {
  for (auto shape : {std::vector<int64_t>{}, std::vector<int64_t>{0}, std::vector<int64_t>{2, 0}}) {
    kiln_array *a = Floats(shape), *b = nullptr;
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_EQ(kiln_array_to_dlpack(a, 0, &t), KILN_OK) << kiln_last_error();
    EXPECT_EQ(t->dl_tensor.ndim, (int32_t)shape.size());
    ASSERT_EQ(kiln_array_from_dlpack(dev_, t, 0, &b), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_array_rank(b), (int)shape.size());
    EXPECT_EQ(kiln_array_size(b), kiln_array_size(a));
    EXPECT_EQ(Host(b), Host(a));
    kiln_array_release(a);
    kiln_array_release(b);
  }
}

TEST_F(DlpackTest, StridedLayoutIsCopiedOnlyWhenAllowed) {
  // A transposed 2x3 view of a row-major 3x2 buffer {0..5}.
  Producer p({0, 1, 2, 3, 4, 5}, {2, 3}, {1, 2});
  kiln_array *b = nullptr;
  EXPECT_EQ(kiln_array_from_dlpack(dev_, &p.m, 0, &b), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(std::string(kiln_last_error()).find("strides (1, 2)"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(p.deleted, 1);  // ownership passed even on refusal
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &p.m, KILN_DLPACK_ALLOW_COPY, &b), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(Host(b), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(p.deleted, 2);
  kiln_array_release(b);

  // Unit dimensions may carry any stride and still be compact.
  Producer q({1, 2}, {1, 2}, {99, 1});
  ASSERT_EQ(kiln_array_from_dlpack(dev_, &q.m, 0, &b), KILN_OK) << kiln_last_error();
  kiln_array_release(b);
}

TEST_F(DlpackTest, RefusesForeignDevicesDtypesAndVersions) {
  kiln_array *b = nullptr;
  Producer p({1}, {1});
  p.m.dl_tensor.device = {kDLROCM, 1};
  EXPECT_EQ(kiln_array_from_dlpack(dev_, &p.m, KILN_DLPACK_ALLOW_COPY, &b),
            KILN_ERR_WRONG_DEVICE);
  EXPECT_NE(std::string(kiln_last_error()).find("kDLROCM"), std::string::npos);

  Producer c({1, 2}, {1});
  c.m.dl_tensor.dtype = {kDLComplex, 64, 1};
  EXPECT_EQ(kiln_array_from_dlpack(dev_, &c.m, KILN_DLPACK_ALLOW_COPY, &b), KILN_ERR_DTYPE);
  EXPECT_NE(std::string(kiln_last_error()).find("code 5, 64 bits"), std::string::npos);

  Producer v({1}, {1});
  v.m.version = {2, 0};
  EXPECT_EQ(kiln_array_from_dlpack(dev_, &v.m, 0, &b), KILN_ERR_UNIMPLEMENTED);
  EXPECT_EQ(p.deleted + c.deleted + v.deleted, 3);
  EXPECT_EQ(b, nullptr);
}

TEST_F(DlpackTest, EveryDtypeMapsBothWays) {
  for (int d = KILN_BOOL; d < KILN_NUM_DTYPES; d++) {
    kiln_dtype dt = (kiln_dtype)d;
    std::vector<unsigned char> bytes(3 * kiln_dtype_size(dt), 1);
    int64_t shape[1] = {3};
    kiln_array *a = nullptr, *b = nullptr;
    ASSERT_EQ(kiln_array_from_host(dev_, dt, 1, shape, bytes.data(), bytes.size(), &a), KILN_OK);
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_EQ(kiln_array_to_dlpack(a, 0, &t), KILN_OK);
    EXPECT_EQ(t->dl_tensor.dtype.bits, 8 * kiln_dtype_size(dt)) << kiln_dtype_name(dt);
    ASSERT_EQ(kiln_array_from_dlpack(dev_, t, 0, &b), KILN_OK) << kiln_dtype_name(dt);
    EXPECT_EQ(kiln_array_dtype(b), dt);
    kiln_array_release(a);
    kiln_array_release(b);
  }
}

TEST_F(DlpackTest, DeletedArrayIsRefused) {
  kiln_array *a = Floats({2});
  ASSERT_EQ(kiln_array_delete(a), KILN_OK);
  DLManagedTensorVersioned *t = nullptr;
  EXPECT_EQ(kiln_array_to_dlpack(a, 0, &t), KILN_ERR_DELETED);
  EXPECT_EQ(t, nullptr);
  kiln_array_release(a);
}

}  // namespace
