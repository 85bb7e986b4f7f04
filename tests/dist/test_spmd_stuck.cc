// A device stuck inside a compiled shard_map body (here: inside BLAS, the
// matmul of a dot) on CPU devices. The caller gets KILN_ERR_COLLECTIVE
// within about the collective timeout — also when every device is stuck and
// none reached a collective — and when the late thread comes back it stops
// before its next step, and writes only into memory kiln kept for it: the
// caller's released buffers are not reused meanwhile (checked by value, and
// under ASan as a use after free), and kiln_ctx_free does not wait for it.
//
// The stall: this file defines cblas_sgemm, which the executable's kiln
// calls instead of OpenBLAS's; it holds the first `hold` callers until
// Release() and then forwards to OpenBLAS (RTLD_NEXT).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);

// Outlives every test: a late thread reads it.
struct Stall {
  std::mutex mu;
  std::condition_variable cv;
  int hold = 0;  // callers still to hold
  bool open = true;
  std::atomic<int> calls{0}, held{0}, returned{0};

  void Arm(int n) {
    std::lock_guard<std::mutex> l(mu);
    hold = n, open = false, calls = 0, held = 0, returned = 0;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
  // Waits (bounded) until n held callers returned from OpenBLAS, then a
  // little for what their threads do next (stop, release).
  bool AwaitReturn(int n) {
    for (int i = 0; i < 500 && returned.load() < n; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return returned.load() >= n;
  }
};
Stall stall;

}  // namespace

extern "C" void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha,
                            const float *a, int lda, const float *b, int ldb, float beta, float *c,
                            int ldc) {
  static SgemmFn real = reinterpret_cast<SgemmFn>(dlsym(RTLD_NEXT, "cblas_sgemm"));
  stall.calls++;
  bool held = false;
  {
    std::unique_lock<std::mutex> l(stall.mu);
    if (stall.hold > 0) {
      stall.hold--, held = true, stall.held++;
      stall.cv.wait(l, [] { return stall.open; });
    }
  }
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (held) stall.returned++;
}

namespace {

constexpr int64_t kRows = 512, kInner = 64, kCols = 1024;  // y: 2 MiB, reused when kept

// y = x @ w (each device its rows); z = y @ wt, a second matmul the late
// thread must not start; with psum, z summed over "data" (a collective the
// device that was not held waits in).
kiln_tree *Body(kiln_trace *t, const kiln_tree *args, void *user) {
  bool psum = user != nullptr;
  kiln_val *y = kiln_matmul(t, kiln_arg(args, 0), kiln_arg(args, 1));
  kiln_val *z = kiln_matmul(t, y, kiln_arg(args, 2));
  if (psum) z = kiln_psum(t, z, "data");
  kiln_tree *leaves[] = {kiln_tree_val(y), kiln_tree_val(z)};
  return kiln_tree_tuple(2, leaves);
}

kiln_tree *Double(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_add(t, x, x));
}

class SpmdStuck : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = 2;
    opts.collective_timeout_s = 0.3;
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
    x_ = Full({kRows, kInner}, 0.5f);
    w_ = Full({kInner, kCols}, 0.25f);
    wt_ = Full({kCols, 8}, 1.0f);
  }
  void TearDown() override {
    stall.Release();
    EXPECT_TRUE(stall.AwaitReturn(stall.held.load()));
    if (ctx_) FreeCtx();
  }
  void FreeCtx() {
    kiln_array_release(x_), kiln_array_release(w_), kiln_array_release(wt_);
    kiln_jit_free(jit_);
    kiln_func_free(sm_), kiln_func_free(body_);
    kiln_mesh_free(mesh_);
    x_ = w_ = wt_ = nullptr, jit_ = nullptr, sm_ = body_ = nullptr, mesh_ = nullptr;
    auto t = Clock::now();
    kiln_ctx_free(ctx_);  // must not wait for a stuck device
    ctx_ = nullptr;
    EXPECT_LT(Since(t), 1.0);
  }
  void Build(bool psum) {
    int64_t n = 2;
    const char *names[] = {"data"};
    ASSERT_EQ(kiln_mesh_new(ctx_, 1, &n, names, nullptr, &mesh_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_func_new(Body, psum ? this : nullptr, "body", &body_), KILN_OK);
    kiln_pspec *rows = nullptr, *rep = nullptr;
    ASSERT_EQ(kiln_pspec_parse("data", &rows), KILN_OK);
    ASSERT_EQ(kiln_pspec_parse("", &rep), KILN_OK);
    kiln_tree *in_leaves[] = {kiln_tree_ptr(rows), kiln_tree_ptr(rep), kiln_tree_ptr(rep)};
    kiln_tree *out_leaves[] = {kiln_tree_ptr(rows), kiln_tree_ptr(psum ? rep : rows)};
    kiln_tree *ins = kiln_tree_tuple(3, in_leaves), *outs = kiln_tree_tuple(2, out_leaves);
    EXPECT_EQ(kiln_shard_map(body_, mesh_, ins, outs, 1, &sm_), KILN_OK) << kiln_last_error();
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(rows), kiln_pspec_free(rep);
    ASSERT_EQ(kiln_jit_new(ctx_, sm_, nullptr, &jit_), KILN_OK) << kiln_last_error();
  }
  kiln_array *Full(std::vector<int64_t> shape, float v) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> h(n, v);
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev_, KILN_F32, (int)shape.size(), shape.data(), h.data(),
                                   h.size() * 4, &a),
              KILN_OK);
    return a;
  }
  kiln_status Call() {
    kiln_array *in[] = {x_, w_, wt_}, *out[2] = {nullptr, nullptr};
    kiln_status st = kiln_jit_call_arrays(jit_, 3, in, 2, out);
    kiln_array_release(out[0]), kiln_array_release(out[1]);
    return st;
  }
  // The call fails within `limit` s naming every piece of want.
  void ExpectAbandoned(const std::vector<std::string> &want, double limit) {
    auto t = Clock::now();
    EXPECT_EQ(Call(), KILN_ERR_COLLECTIVE);
    double s = Since(t);
    std::string msg = kiln_last_error();
    EXPECT_LT(s, limit) << msg;
    for (const std::string &w : want)
      EXPECT_NE(msg.find(w), std::string::npos) << w << " missing from: " << msg;
    if (getenv("KILN_TEST_SHOW")) printf("%.2f s: %s\n", s, msg.c_str());
  }
  void ExpectLaterCallsFailButSingleDeviceWorks() {
    auto t = Clock::now();
    EXPECT_EQ(Call(), KILN_ERR_COLLECTIVE);
    EXPECT_LT(Since(t), 0.25);
    EXPECT_NE(std::string(kiln_last_error()).find("an earlier call on this context was abandoned"),
              std::string::npos)
        << kiln_last_error();
    kiln_func *dbl = nullptr;
    kiln_jit *j = nullptr;
    kiln_array *y = nullptr;
    ASSERT_EQ(kiln_func_new(Double, nullptr, "double", &dbl), KILN_OK);
    ASSERT_EQ(kiln_jit_new(ctx_, dbl, nullptr, &j), KILN_OK);
    ASSERT_EQ(kiln_jit_call_arrays(j, 1, &wt_, 1, &y), KILN_OK) << kiln_last_error();
    std::vector<float> v(kCols * 8);
    ASSERT_EQ(kiln_array_to_host(y, v.data(), v.size() * 4), KILN_OK) << kiln_last_error();
    EXPECT_EQ(v[0], 2.0f);
    kiln_array_release(y), kiln_jit_free(j), kiln_func_free(dbl);
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
  kiln_mesh *mesh_ = nullptr;
  kiln_func *body_ = nullptr, *sm_ = nullptr;
  kiln_jit *jit_ = nullptr;
  kiln_array *x_ = nullptr, *w_ = nullptr, *wt_ = nullptr;
};

TEST_F(SpmdStuck, RunsWhenNothingIsHeld) {
  Build(true);
  kiln_array *in[] = {x_, w_, wt_}, *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 3, in, 2, out), KILN_OK) << kiln_last_error();
  std::vector<float> z(kRows / 2 * 8);
  ASSERT_EQ(kiln_array_to_host(out[1], z.data(), z.size() * 4), KILN_OK);
  // y = 64 * 0.5 * 0.25 = 8; z = 1024 * 8 = 8192 per device, psum: 16384.
  EXPECT_EQ(z[0], 16384.0f);
  EXPECT_EQ(z.back(), 16384.0f);
  kiln_array_release(out[0]), kiln_array_release(out[1]);
}

// No device reaches a collective: no clock started by an arrival; the call
// ends after a timeout without progress anyway. When the devices come back
// they write y (memory the caller released and kiln kept from reuse: an
// array made meanwhile keeps its values) and do not start the second matmul.
TEST_F(SpmdStuck, EveryDeviceStuckInBlasEndsTheCall) {
  Build(false);
  ASSERT_EQ(Call(), KILN_OK) << kiln_last_error();  // compiled, warm
  stall.Arm(2);
  ExpectAbandoned({"no device made progress for 0.3 s", "devices 0, 1 are stuck"}, 2.0);
  EXPECT_EQ(stall.held.load(), 2);
  ExpectLaterCallsFailButSingleDeviceWorks();
  // Blocks of the released y's sizes (whole, and each device's shard), on
  // each device: what the CPU devices would hand out again.
  std::vector<kiln_array *> fresh;
  for (int d = 0; d < 2; d++) {
    ASSERT_EQ(kiln_device_get(ctx_, d, &dev_), KILN_OK);
    fresh.push_back(Full({kRows, kCols}, 7.0f));
    fresh.push_back(Full({kRows / 2, kCols}, 7.0f));
  }
  int calls = stall.calls.load();
  stall.Release();
  ASSERT_TRUE(stall.AwaitReturn(2));
  EXPECT_EQ(stall.calls.load(), calls) << "a late device started its next matmul";
  for (kiln_array *a : fresh) {
    std::vector<float> h(kiln_array_nbytes(a) / 4);
    ASSERT_EQ(kiln_array_to_host(a, h.data(), h.size() * 4), KILN_OK);
    int64_t changed = 0;
    for (float v : h) changed += v != 7.0f;
    EXPECT_EQ(changed, 0) << "a late device wrote into memory handed out again";
    kiln_array_release(a);
  }
  FreeCtx();
}

// One device held in BLAS, the other waits in the psum: the call fails
// within the timeout; the context is freed while the device is still stuck
// (no wait), and the thread comes back afterwards to a quiet exit.
TEST_F(SpmdStuck, OneDeviceStuckInBlasAndTheContextFreedBeforeItReturns) {
  Build(true);
  ASSERT_EQ(Call(), KILN_OK) << kiln_last_error();
  stall.Arm(1);
  ExpectAbandoned({"psum", "did not arrive", "stuck and was abandoned"}, 2.0);
  ExpectLaterCallsFailButSingleDeviceWorks();
  int calls = stall.calls.load();
  FreeCtx();
  stall.Release();
  ASSERT_TRUE(stall.AwaitReturn(1));
  EXPECT_EQ(stall.calls.load(), calls) << "a late device started its next matmul";
}

}  // namespace
