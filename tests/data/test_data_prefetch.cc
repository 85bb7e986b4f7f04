// kiln_prefetch (src/data/prefetch.c), flax.jax_utils.prefetch_to_device:
// order and no loss for every ring size 1..4 on one and two devices, the end
// of the stream, iterator errors and batches unlike the first surfacing with
// the batch number and key path, and freeing mid-stream.
//
// Built twice: test_data_prefetch on CPU devices, and test_data_prefetch_fake
// on the CUDA backend over tests/fake_cuda (two stand-in devices; uploads go
// through the pinned staging buffers and the copy stream, readiness is an
// event), where each test also checks that the context gave back every
// driver object.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data.h"
#include "kiln/kiln.h"
#include "support/scoped_env.h"

#ifdef KILN_FAKE_CUDA_LIBRARY
#include "fake_cuda/fake_cuda.h"
#define KCT_SUITE PrefetchFakeCuda
KCT_USE_FAKE_DRIVER();
#else
#define KCT_SUITE PrefetchCpu
#endif

namespace {

std::string last_error() { return kiln_last_error(); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// A data source of `batches` batches of {'image': f32[rows, 3], 'label':
// i32[rows]} whose values encode the batch and row, so that any loss,
// repetition or reordering shows. The leaves stay valid until the next call,
// as kiln_batch_fn asks.
struct Source {
  int64_t batches = 0;
  int64_t rows = 4;
  int64_t fail_at = -1;   // the iterator fails on this batch
  int64_t wide_at = -1;   // 'image' is f32[rows, 4] on this batch
  int64_t label_at = -1;  // 'label' is i64 on this batch
  int64_t drop_at = -1;   // 'label' is missing on this batch
  std::atomic<int64_t> calls{0};
  kiln_host_data image{}, label{};
  std::vector<float> image_data;
  std::vector<int32_t> label_data;
  std::vector<int64_t> label_wide;

  static float image_value(int64_t b, int64_t r, int64_t c) { return float(b * 1000 + r * 10 + c); }
  static int32_t label_value(int64_t b, int64_t r) { return int32_t(b * 100 + r); }

  static kiln_status next(void *user, kiln_tree **batch) {
    auto *s = static_cast<Source *>(user);
    int64_t b = s->calls++;
    if (b == s->fail_at) return kiln_fail(KILN_ERR_IO, "the disk went away at batch %lld", (long long)b);
    if (b >= s->batches) {
      *batch = nullptr;
      return KILN_OK;
    }
    int64_t cols = b == s->wide_at ? 4 : 3;
    s->image_data.resize(size_t(s->rows * cols));
    for (int64_t r = 0; r < s->rows; r++)
      for (int64_t c = 0; c < cols; c++) s->image_data[size_t(r * cols + c)] = image_value(b, r, c);
    s->image = {KILN_F32, 2, {s->rows, cols}, s->image_data.data(), s->image_data.size() * 4};
    if (b == s->label_at) {
      s->label_wide.assign(size_t(s->rows), 0);
      s->label = {KILN_I64, 1, {s->rows}, s->label_wide.data(), size_t(s->rows) * 8};
    } else {
      s->label_data.resize(size_t(s->rows));
      for (int64_t r = 0; r < s->rows; r++) s->label_data[size_t(r)] = label_value(b, r);
      s->label = {KILN_I32, 1, {s->rows}, s->label_data.data(), size_t(s->rows) * 4};
    }
    const char *keys[] = {"image", "label"};
    kiln_tree *kids[] = {kiln_tree_ptr(&s->image), kiln_tree_ptr(&s->label)};
    *batch = kiln_tree_dict(b == s->drop_at ? 1 : 2, keys, kids);
    if (b == s->drop_at) kiln_tree_free(kids[1]);
    return *batch ? KILN_OK : KILN_ERR_TREE;
  }
};

class KCT_SUITE : public ::testing::Test {
 protected:
  void open(int n_devices) {
    kiln_options opts;
    kiln_options_init(&opts);
#ifdef KILN_FAKE_CUDA_LIBRARY
    opts.backend = KILN_BACKEND_CUDA;
#else
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = n_devices;
#endif
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << last_error();
    ASSERT_GE(kiln_device_count(ctx_), n_devices);
    devices_.resize(size_t(n_devices));
    for (int i = 0; i < n_devices; i++) ASSERT_EQ(kiln_device_get(ctx_, i, &devices_[size_t(i)]), KILN_OK);
  }
  void TearDown() override {
    for (kiln_device *d : devices_) {
      uint64_t bytes = 1;
      ASSERT_EQ(kiln_device_memory_in_use(d, &bytes), KILN_OK);
      EXPECT_EQ(bytes, 0u) << "device memory left behind";
    }
    kiln_ctx_free(ctx_);
#ifdef KILN_FAKE_CUDA_LIBRARY
    int live = KctFakeLiveObjects();
    if (live >= 0) {
      EXPECT_EQ(live, 0) << "driver objects left behind by the context";
    }
#endif
  }

  kiln_prefetch *start(Source *src, int size) {
    kiln_prefetch *pf = nullptr;
    EXPECT_EQ(kiln_prefetch_new(ctx_, Source::next, src, size, devices_.data(), int(devices_.size()), &pf),
              KILN_OK)
        << last_error();
    return pf;
  }

  // Checks that `got` is batch b split over the devices, in pmap's layout.
  void expect_batch(const kiln_tree *got, const Source &src, int64_t b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    size_t n = devices_.size();
    ASSERT_EQ(kiln_tree_kind(got), KILN_NODE_LIST);
    ASSERT_EQ(kiln_tree_num_children(got), n);
    int64_t rows = src.rows / int64_t(n);
    for (size_t d = 0; d < n; d++) {
      const kiln_tree *t = kiln_tree_child(got, d);
      kiln_array *image = kiln_tree_leaf_array(kiln_tree_get(t, "image"));
      kiln_array *label = kiln_tree_leaf_array(kiln_tree_get(t, "label"));
      ASSERT_TRUE(image && label);
      EXPECT_EQ(kiln_array_device(image), devices_[d]);
      EXPECT_EQ(kiln_array_device(label), devices_[d]);
      ASSERT_EQ(kiln_array_rank(image), 2);
      EXPECT_EQ(kiln_array_shape(image)[0], rows);
      EXPECT_EQ(kiln_array_shape(image)[1], 3);
      EXPECT_EQ(kiln_array_dtype(label), KILN_I32);
      std::vector<float> im(static_cast<size_t>(rows * 3));
      std::vector<int32_t> lb(static_cast<size_t>(rows));
      ASSERT_EQ(kiln_array_to_host(image, im.data(), im.size() * 4), KILN_OK) << last_error();
      ASSERT_EQ(kiln_array_to_host(label, lb.data(), lb.size() * 4), KILN_OK) << last_error();
      std::vector<float> want_im(im.size());
      std::vector<int32_t> want_lb(lb.size());
      for (int64_t r = 0; r < rows; r++) {
        int64_t row = int64_t(d) * rows + r;
        want_lb[size_t(r)] = Source::label_value(b, row);
        for (int64_t c = 0; c < 3; c++) want_im[size_t(r * 3 + c)] = Source::image_value(b, row, c);
      }
      EXPECT_TRUE(im == want_im) << "device " << d << "'s 'image' differs";
      EXPECT_TRUE(lb == want_lb) << "device " << d << "'s 'label' differs";
    }
  }

  // Takes every batch up to the failure at `bad`; returns its message.
  std::string fail_at(Source *src, int64_t bad, kiln_status want) {
    kiln_prefetch *pf = start(src, 2);
    if (!pf) return "";
    for (int64_t b = 0; b < bad; b++) {
      kiln_tree *t = nullptr;
      EXPECT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
      expect_batch(t, *src, b);
      kiln_tree_free(t);
    }
    kiln_tree *t = nullptr;
    EXPECT_EQ(kiln_prefetch_next(pf, &t), want);
    std::string msg = last_error();
    EXPECT_EQ(t, nullptr);
    // The stream has ended with the error.
    EXPECT_EQ(kiln_prefetch_next(pf, &t), KILN_OK);
    EXPECT_EQ(t, nullptr);
    kiln_prefetch_free(pf);
    return msg;
  }

  kiln_ctx *ctx_ = nullptr;
  std::vector<kiln_device *> devices_;
};

TEST_F(KCT_SUITE, EveryBatchInOrderForEverySizeOnOneAndTwoDevices) {
  for (int n_devices : {1, 2}) {
    open(n_devices);
    for (int size = 1; size <= 4; size++) {
      SCOPED_TRACE("size " + std::to_string(size) + ", devices " + std::to_string(n_devices));
      Source src;
      src.batches = 11;
      kiln_prefetch *pf = start(&src, size);
      ASSERT_NE(pf, nullptr);
      for (int64_t b = 0; b < src.batches; b++) {
        kiln_tree *t = nullptr;
        ASSERT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
        ASSERT_NE(t, nullptr);
        expect_batch(t, src, b);
        kiln_tree_free(t);
      }
      kiln_tree *t = reinterpret_cast<kiln_tree *>(1);
      EXPECT_EQ(kiln_prefetch_next(pf, &t), KILN_OK);
      EXPECT_EQ(t, nullptr) << "the stream goes on past the iterator's end";
      EXPECT_EQ(src.calls.load(), src.batches + 1) << "the iterator is called once past its end";
      kiln_prefetch_free(pf);
    }
    TearDown();
    ctx_ = nullptr;
    devices_.clear();
  }
}

// On CUDA each shard crosses several chunks of the pinned staging buffers.
TEST_F(KCT_SUITE, LeavesLargerThanTheStagingBuffersArriveWhole) {
  open(2);
  Source src;
  src.batches = 3;
  src.rows = int64_t(1) << 21;  // 'image' is 12 MiB per device
  kiln_prefetch *pf = start(&src, 2);
  ASSERT_NE(pf, nullptr);
  for (int64_t b = 0; b < src.batches; b++) {
    kiln_tree *t = nullptr;
    ASSERT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
    expect_batch(t, src, b);
    kiln_tree_free(t);
  }
  kiln_prefetch_free(pf);
}

TEST_F(KCT_SUITE, TheProducerStaysAtMostSizeBatchesAhead) {
  open(1);
  for (int size = 1; size <= 4; size++) {
    Source src;
    src.batches = 100;
    kiln_prefetch *pf = start(&src, size);
    ASSERT_NE(pf, nullptr);
    // Filled ring: `size` batches waiting, plus the one being produced that
    // waits for a free slot before calling the iterator again.
    while (src.calls.load() < size) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(src.calls.load(), size) << "size " << size;
    kiln_prefetch_free(pf);
  }
}

TEST_F(KCT_SUITE, AnEmptyIteratorEndsAtOnceAndTheDefaultSizeIsTwo) {
  open(1);
  Source src;
  kiln_prefetch *pf = start(&src, 0);
  ASSERT_NE(pf, nullptr);
  kiln_tree *t = nullptr;
  EXPECT_EQ(kiln_prefetch_next(pf, &t), KILN_OK);
  EXPECT_EQ(t, nullptr);
  kiln_prefetch_free(pf);

  Source many;
  many.batches = 100;
  pf = start(&many, 0);
  while (many.calls.load() < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(many.calls.load(), 2);
  kiln_prefetch_free(pf);
}

TEST_F(KCT_SUITE, AnIteratorErrorSurfacesWithTheBatchNumber) {
  open(2);
  Source src;
  src.batches = 10;
  src.fail_at = 3;
  std::string msg = fail_at(&src, 3, KILN_ERR_IO);
  EXPECT_TRUE(contains(msg, "batch 3")) << msg;
  EXPECT_TRUE(contains(msg, "the disk went away at batch 3")) << msg;
  EXPECT_EQ(src.calls.load(), 4) << "the producer stops at the error";
}

TEST_F(KCT_SUITE, ABatchUnlikeTheFirstSurfacesWithItsNumberAndKeyPath) {
  open(2);
  struct Case {
    int64_t Source::*field;  // which batch goes wrong, and how
    int64_t at;
    kiln_status want;
    std::vector<std::string> parts;  // what the message must say
  } cases[] = {
      {&Source::wide_at, 2, KILN_ERR_SHAPE, {"batch 2", "['image']", "f32[4,4]", "f32[4,3]"}},
      {&Source::label_at, 4, KILN_ERR_SHAPE, {"batch 4", "['label']", "i64[4]", "i32[4]"}},
      {&Source::drop_at, 1, KILN_ERR_TREE, {"batch 1", "structure"}},
  };
  for (const Case &c : cases) {
    Source src;
    src.batches = 10;
    src.*c.field = c.at;
    std::string msg = fail_at(&src, c.at, c.want);
    for (const std::string &part : c.parts) EXPECT_TRUE(contains(msg, part)) << msg;
  }
}

TEST_F(KCT_SUITE, HostDataWhoseSizeIsNotItsShapesIsRefused) {
  open(1);
  struct Short : Source {
    static kiln_status next(void *user, kiln_tree **batch) {
      kiln_status st = Source::next(user, batch);
      static_cast<Source *>(user)->label.nbytes -= 4;
      return st;
    }
  } src;
  src.batches = 3;
  kiln_prefetch *pf = nullptr;
  ASSERT_EQ(kiln_prefetch_new(ctx_, Short::next, &src, 2, nullptr, 0, &pf), KILN_OK) << last_error();
  kiln_tree *t = nullptr;
  EXPECT_EQ(kiln_prefetch_next(pf, &t), KILN_ERR_SHAPE);
  std::string msg = last_error();
  EXPECT_TRUE(contains(msg, "batch 0") && contains(msg, "['label']") && contains(msg, "12 bytes"))
      << msg;
  kiln_prefetch_free(pf);
}

TEST_F(KCT_SUITE, ALeadingDimensionThatDoesNotSplitIsRefused) {
  open(2);
  Source src;
  src.batches = 3;
  src.rows = 5;
  std::string msg = fail_at(&src, 0, KILN_ERR_SHAPE);
  EXPECT_TRUE(contains(msg, "batch 0") && contains(msg, "['image']") && contains(msg, "2 devices"))
      << msg;
}

#ifdef KILN_FAKE_CUDA_LIBRARY
// A failed host-to-device copy is the batch's error: batches 0 and 1 make 8
// copies (2 leaves on 2 devices each); the 10th, batch 2's 'label' on
// device 0, fails.
TEST_F(KCT_SUITE, AFailedCopySurfacesWithTheBatchNumberAndKeyPath) {
  open(2);
  auto reset = KctFakeSymbol<void (*)(void)>("libcuda.so.1", "kiln_fake_cuda_reset_faults");
  ASSERT_NE(reset, nullptr);
  std::string msg;
  {
    ScopedEnv fail("KILN_FAKE_CUDA_FAIL", "cuMemcpyHtoDAsync");
    ScopedEnv after("KILN_FAKE_CUDA_FAIL_AFTER", "9");
    reset();
    Source src;
    src.batches = 10;
    msg = fail_at(&src, 2, KILN_ERR_OUT_OF_MEMORY);
  }
  EXPECT_TRUE(contains(msg, "batch 2") && contains(msg, "['label']") && contains(msg, "device 0") &&
              contains(msg, "cuMemcpyHtoDAsync"))
      << msg;
}
#endif

TEST_F(KCT_SUITE, FreeingMidStreamStopsTheProducerAndFreesEverything) {
  open(2);
  for (int size = 1; size <= 4; size++) {
    for (int taken : {0, 1, 3}) {
      Source src;
      src.batches = int64_t(1) << 40;
      kiln_prefetch *pf = start(&src, size);
      ASSERT_NE(pf, nullptr);
      for (int b = 0; b < taken; b++) {
        kiln_tree *t = nullptr;
        ASSERT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
        expect_batch(t, src, b);
        kiln_tree_free(t);
      }
      kiln_prefetch_free(pf);  // TearDown checks that no device memory is left
    }
  }
  // A batch the consumer still holds outlives the prefetcher.
  Source src;
  src.batches = 5;
  kiln_prefetch *pf = start(&src, 2);
  kiln_tree *t = nullptr;
  ASSERT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
  kiln_prefetch_free(pf);
  expect_batch(t, src, 0);
  kiln_tree_free(t);
}

TEST_F(KCT_SUITE, BadArgumentsAreRefused) {
  open(1);
  Source src;
  kiln_prefetch *pf = nullptr;
  EXPECT_EQ(kiln_prefetch_new(ctx_, nullptr, &src, 2, nullptr, 0, &pf), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_prefetch_new(ctx_, Source::next, &src, -1, nullptr, 0, &pf), KILN_ERR_ARGUMENT);
  kiln_device *none[] = {nullptr};
  EXPECT_EQ(kiln_prefetch_new(ctx_, Source::next, &src, 2, none, 1, &pf), KILN_ERR_ARGUMENT);
  EXPECT_EQ(pf, nullptr);
  EXPECT_EQ(kiln_prefetch_next(nullptr, nullptr), KILN_ERR_ARGUMENT);
  kiln_prefetch_free(nullptr);
  // NULL devices: every device of the context.
  src.batches = 1;
  ASSERT_EQ(kiln_prefetch_new(ctx_, Source::next, &src, 2, nullptr, 0, &pf), KILN_OK) << last_error();
  kiln_tree *t = nullptr;
  ASSERT_EQ(kiln_prefetch_next(pf, &t), KILN_OK) << last_error();
  EXPECT_EQ(kiln_tree_num_children(t), size_t(kiln_device_count(ctx_)));
  kiln_tree_free(t);
  kiln_prefetch_free(pf);
}

}  // namespace
