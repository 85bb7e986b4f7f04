// A device stuck in foreign code (here a host callback) on CPU devices: the
// caller gets KILN_ERR_COLLECTIVE within about the context's
// collective_timeout_s, named from the side of the devices that waited; the
// stuck thread is abandoned (not waited for), the context's multi-device
// calls fail clearly from then on, single-device work and kiln_ctx_free
// still work, and the thread finds everything it touches alive when it
// comes back (run under ASan for that).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "support/text.h"

namespace {

using kiln_test::Contains;

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Holds device `device` in the host callback: for sleep_ms, or (sleep_ms 0)
// until Release(). Outlives every test (a late thread may still read it).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int device = -1;
  int sleep_ms = 0;
  bool open = false;
  std::atomic<int> entered{0}, returned{0};

  void Arm(int d, int ms) {
    std::lock_guard<std::mutex> l(mu);
    device = d, sleep_ms = ms, open = false, entered = 0, returned = 0;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
  // Waits (bounded) until the held device's callback has returned.
  bool AwaitReturn(int n) {
    for (int i = 0; i < 1000 && returned.load() < n; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // What the thread does after the callback (stopping, releasing) is short.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return returned.load() >= n;
  }
};
Gate gate;

kiln_status Hold(void *user, int, const kiln_host_buffer *in, int, kiln_host_buffer *out) {
  Gate *g = static_cast<Gate *>(user);
  int32_t d;
  memcpy(&d, in[0].data, 4);
  if (d == g->device) {
    g->entered++;
    if (g->sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(g->sleep_ms));
    } else {
      std::unique_lock<std::mutex> l(g->mu);
      g->cv.wait(l, [g] { return g->open; });
    }
    g->returned++;
  }
  memcpy(out[0].data, in[0].data, 4);
  return KILN_OK;
}

// psum(x + device index through the callback) over "data".
kiln_tree *Body(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *i = kiln_axis_index(t, "data"), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_I32;
  kiln_host_callback(t, Hold, user, 1, &i, 1, &a, &r);
  kiln_val *x = kiln_add(t, kiln_arg(args, 0), kiln_convert(t, r, KILN_F32));
  return kiln_tree_val(kiln_psum(t, x, "data"));
}

// The same over a 2x4 mesh: the callback gets the device's index over both
// axes (its device number), the psum spans "data".
kiln_tree *MeshBody(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *i = kiln_axis_index(t, "data,model"), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_I32;
  kiln_host_callback(t, Hold, user, 1, &i, 1, &a, &r);
  kiln_val *x = kiln_add(t, kiln_arg(args, 0), kiln_convert(t, r, KILN_F32));
  return kiln_tree_val(kiln_psum(t, x, "data"));
}

// x + device index through the callback: no collective to time out.
kiln_tree *NoCollective(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *i = kiln_axis_index(t, "data"), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_I32;
  kiln_host_callback(t, Hold, user, 1, &i, 1, &a, &r);
  return kiln_tree_val(kiln_add(t, kiln_arg(args, 0), kiln_convert(t, r, KILN_F32)));
}

kiln_tree *Double(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_add(t, x, x));
}

class SpmdTimeout : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = 2;
    opts.collective_timeout_s = 0.3;
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
    int64_t n = 2;
    const char *names[] = {"data"};
    ASSERT_EQ(kiln_mesh_new(ctx_, 1, &n, names, nullptr, &mesh_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_func_new(Body, &gate, "body", &body_), KILN_OK);
    kiln_pspec *ps = nullptr, *po = nullptr;
    ASSERT_EQ(kiln_pspec_parse("data", &ps), KILN_OK);
    ASSERT_EQ(kiln_pspec_parse("", &po), KILN_OK);
    kiln_tree *leaf = kiln_tree_ptr(ps);
    kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(po);
    EXPECT_EQ(kiln_shard_map(body_, mesh_, ins, outs, 1, &sm_), KILN_OK) << kiln_last_error();
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(ps), kiln_pspec_free(po);
    x_ = Iota(4);
  }
  void TearDown() override {
    if (ctx_) FreeCtx();
  }
  // Frees everything, the context last.
  void FreeCtx() {
    kiln_array_release(x_);
    kiln_jit_free(jit_);
    kiln_func_free(sm_), kiln_func_free(body_);
    kiln_mesh_free(mesh_);
    x_ = nullptr, jit_ = nullptr, sm_ = body_ = nullptr, mesh_ = nullptr;
    auto t = Clock::now();
    kiln_ctx_free(ctx_);  // must not wait for a stuck device
    ctx_ = nullptr;
    EXPECT_LT(Since(t), 1.0);
  }
  kiln_array *Iota(int64_t n) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    kiln_device *dev = nullptr;
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, 0, &dev), KILN_OK);
    EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, 1, &n, v.data(), v.size() * 4, &a), KILN_OK);
    return a;
  }
  // jit(f)(x); f = sm_ goes through one jit kept for the test (its later
  // calls run the compiled program at once).
  kiln_status Call(const kiln_func *f, kiln_array *x, std::vector<float> *out) {
    kiln_jit *j = f == sm_ ? jit_ : nullptr;
    kiln_array *y = nullptr;
    kiln_status st = j ? KILN_OK : kiln_jit_new(ctx_, f, nullptr, &j);
    if (f == sm_) jit_ = j;
    if (st == KILN_OK) st = kiln_jit_call_arrays(j, 1, &x, 1, &y);
    if (st == KILN_OK) {
      out->resize(kiln_array_nbytes(y) / 4);
      st = kiln_array_to_host(y, out->data(), kiln_array_nbytes(y));
    }
    kiln_array_release(y);
    if (f != sm_) kiln_jit_free(j);
    return st;
  }
  // The call must fail within `limit` seconds with every piece of `want`.
  void ExpectAbandoned(const std::vector<std::string> &want, double limit = 2.0) {
    std::vector<float> out;
    auto t = Clock::now();
    EXPECT_EQ(Call(sm_, x_, &out), KILN_ERR_COLLECTIVE);
    double s = Since(t);
    std::string msg = kiln_last_error();
    EXPECT_LT(s, limit) << msg;
    EXPECT_GE(s, 0.3) << msg;  // the devices that arrived waited the timeout
    for (const std::string &w : want) EXPECT_TRUE(Contains(msg, w)) << w << " missing from: " << msg;
    if (getenv("KILN_TEST_SHOW")) printf("%.2f s: %s\n", s, msg.c_str());
  }
  // A later multi-device call fails at once, naming the stuck device; a
  // single-device jit still runs.
  void ExpectContextFailedButUsable(int stuck) {
    std::vector<float> out;
    auto t = Clock::now();
    EXPECT_EQ(Call(sm_, x_, &out), KILN_ERR_COLLECTIVE);
    EXPECT_LT(Since(t), 0.25);
    std::string msg = kiln_last_error();
    std::string want = "an earlier call on this context was abandoned because device " +
                       std::to_string(stuck) + " was stuck";
    EXPECT_TRUE(Contains(msg, want)) << msg;
    if (getenv("KILN_TEST_SHOW")) printf("later: %s\n", msg.c_str());
    kiln_func *dbl = nullptr;
    ASSERT_EQ(kiln_func_new(Double, nullptr, "double", &dbl), KILN_OK);
    ASSERT_EQ(Call(dbl, x_, &out), KILN_OK) << kiln_last_error();
    EXPECT_EQ(out, (std::vector<float>{0, 2, 4, 6}));
    kiln_func_free(dbl);
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_mesh *mesh_ = nullptr;
  kiln_func *body_ = nullptr, *sm_ = nullptr;
  kiln_jit *jit_ = nullptr;
  kiln_array *x_ = nullptr;
};

TEST_F(SpmdTimeout, RunsWhenNoDeviceIsLate) {
  gate.Arm(-1, 0);
  std::vector<float> out;
  ASSERT_EQ(Call(sm_, x_, &out), KILN_OK) << kiln_last_error();
  // device 0: {0, 1} + 0, device 1: {2, 3} + 1
  EXPECT_EQ(out, (std::vector<float>{3, 5}));
}

// A callback sleeping 3 s against a 0.3 s timeout: the call returns long
// before it does.
TEST_F(SpmdTimeout, ASleepingDeviceIsAbandonedWithinTheTimeout) {
  gate.Arm(1, 3000);
  ExpectAbandoned({"psum over axis 'data' (float32[2]): device 1 did not arrive within 0.3 s "
                   "(device 0 waited)",
                   "device 1 is stuck and was abandoned"});
  EXPECT_EQ(gate.entered.load(), 1);
  EXPECT_EQ(gate.returned.load(), 0);
  ExpectContextFailedButUsable(1);
  FreeCtx();
  EXPECT_TRUE(gate.AwaitReturn(1));  // it comes back after the context is gone
}

// Stuck until released: released only after the context is freed.
TEST_F(SpmdTimeout, ADeviceStuckForeverIsAbandonedAndComesBackQuietly) {
  gate.Arm(1, 0);
  ExpectAbandoned({"device 1 did not arrive within 0.3 s (device 0 waited)",
                   "device 1 is stuck and was abandoned"});
  ExpectContextFailedButUsable(1);
  FreeCtx();
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(1));
}

// The late device is named from the side of the one that waited, also when
// it is device 0 (which runs on a worker: the caller only waits).
TEST_F(SpmdTimeout, DeviceZeroLateIsNamedByTheDeviceThatWaited) {
  gate.Arm(0, 0);
  ExpectAbandoned({"device 0 did not arrive within 0.3 s (device 1 waited)"});
  ExpectContextFailedButUsable(0);
  // Released while the context is alive: the thread comes back into the
  // failed state and exits; the context is freed after.
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(1));
  ExpectContextFailedButUsable(0);
}

// No collective after the stuck callback: the end of the body is the
// barrier, with the same bound.
TEST_F(SpmdTimeout, ADeviceThatDoesNotFinishIsAbandonedAfterTheTimeout) {
  gate.Arm(1, 0);
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(NoCollective, &gate, "body", &f), KILN_OK);
  kiln_pspec *ps = nullptr;
  ASSERT_EQ(kiln_pspec_parse("data", &ps), KILN_OK);
  kiln_tree *leaf = kiln_tree_ptr(ps);
  kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(ps);
  ASSERT_EQ(kiln_shard_map(f, mesh_, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_tree_free(ins), kiln_tree_free(outs);
  kiln_pspec_free(ps);
  std::vector<float> out;
  auto t = Clock::now();
  EXPECT_EQ(Call(sm, x_, &out), KILN_ERR_COLLECTIVE);
  double s = Since(t);
  EXPECT_GE(s, 0.3);
  EXPECT_LT(s, 2.0);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "device 1 did not finish within 0.3 s of the others")) << msg;
  EXPECT_TRUE(Contains(msg, "device 1 is stuck and was abandoned")) << msg;
  kiln_func_free(sm), kiln_func_free(f);
  ExpectContextFailedButUsable(1);
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(1));
}

// Two threads' calls at once, device 1 stuck in both: the second finds the
// context's workers busy and runs on threads of its own, which are
// abandoned the same way; both late threads come back after the context is
// freed.
TEST_F(SpmdTimeout, ACallOnThreadsOfItsOwnIsAbandonedToo) {
  gate.Arm(1, 0);
  kiln_jit *ja = nullptr, *jb = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, sm_, nullptr, &ja), KILN_OK);
  ASSERT_EQ(kiln_jit_new(ctx_, sm_, nullptr, &jb), KILN_OK);
  kiln_array *xb = Iota(8);  // another shape: another body, not waiting on the first's
  kiln_status sa = KILN_OK, sb = KILN_OK;
  std::string ma, mb;
  std::thread a([&] {
    kiln_array *y = nullptr;
    sa = kiln_jit_call_arrays(ja, 1, &x_, 1, &y);
    ma = kiln_last_error();
    kiln_array_release(y);
  });
  for (int i = 0; i < 500 && gate.entered.load() < 1; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kiln_array *y = nullptr;
  auto t = Clock::now();
  sb = kiln_jit_call_arrays(jb, 1, &xb, 1, &y);
  double s = Since(t);
  mb = kiln_last_error();
  a.join();
  EXPECT_EQ(sa, KILN_ERR_COLLECTIVE) << ma;
  EXPECT_EQ(sb, KILN_ERR_COLLECTIVE) << mb;
  EXPECT_LT(s, 2.0);
  EXPECT_EQ(gate.entered.load(), 2) << "both calls' device 1 entered the callback";
  EXPECT_TRUE(Contains(ma, "device 1 did not arrive within 0.3 s (device 0 waited)")) << ma;
  EXPECT_TRUE(Contains(mb, "device 1 did not arrive within 0.3 s (device 0 waited)")) << mb;
  kiln_array_release(xb);
  kiln_jit_free(ja), kiln_jit_free(jb);
  ExpectContextFailedButUsable(1);
  FreeCtx();
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(2));
}

// pmap over the same body: the same bound and error.
TEST_F(SpmdTimeout, PmapOfAStuckDeviceFailsWithinTheTimeout) {
  gate.Arm(1, 0);
  kiln_func *pm = nullptr;
  int in_axes[] = {0};
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(Body, &gate, "body", &f), KILN_OK);
  ASSERT_EQ(kiln_pmap(ctx_, f, "data", 1, in_axes, 0, 0, nullptr, &pm), KILN_OK) << kiln_last_error();
  kiln_array *x = Iota(2);
  std::vector<float> out;
  auto t = Clock::now();
  EXPECT_EQ(Call(pm, x, &out), KILN_ERR_COLLECTIVE);
  EXPECT_LT(Since(t), 2.0);
  EXPECT_TRUE(Contains(kiln_last_error(), "device 1 did not arrive within 0.3 s (device 0 waited)"))
      << kiln_last_error();
  kiln_array_release(x);
  kiln_func_free(pm), kiln_func_free(f);
  FreeCtx();
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(1));
}

// Eight devices on a 2x4 mesh, device 6 late in a psum over "data" (groups
// {0, 4}, {1, 5}, {2, 6}, {3, 7}): the message names the late device and
// the one of its group that waited, by their device numbers.
TEST(SpmdTimeoutMesh, TheLateDeviceIsNamedByItsGroupOnATwoByFourMesh) {
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CPU;
  opts.num_cpu_devices = 8;
  opts.collective_timeout_s = 0.3;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << kiln_last_error();
  int64_t shape[] = {2, 4};
  const char *names[] = {"data", "model"};
  kiln_mesh *mesh = nullptr;
  ASSERT_EQ(kiln_mesh_new(ctx, 2, shape, names, nullptr, &mesh), KILN_OK) << kiln_last_error();
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(MeshBody, &gate, "body", &f), KILN_OK);
  kiln_pspec *ps = nullptr, *po = nullptr;
  ASSERT_EQ(kiln_pspec_parse("(data, model)", &ps), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_pspec_parse("model", &po), KILN_OK);
  kiln_tree *leaf = kiln_tree_ptr(ps);
  kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(po);
  ASSERT_EQ(kiln_shard_map(f, mesh, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_tree_free(ins), kiln_tree_free(outs);
  kiln_pspec_free(ps), kiln_pspec_free(po);
  std::vector<float> v(16, 1.0f);
  int64_t n = 16;
  kiln_device *dev = nullptr;
  kiln_array *x = nullptr, *y = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  ASSERT_EQ(kiln_array_from_host(dev, KILN_F32, 1, &n, v.data(), 64, &x), KILN_OK);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx, sm, nullptr, &j), KILN_OK);
  gate.Arm(6, 0);
  auto t = Clock::now();
  EXPECT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_ERR_COLLECTIVE);
  EXPECT_LT(Since(t), 2.0);
  std::string msg = kiln_last_error();
  // Device 6 is at (1, 2): its group along "data" is {2, 6}.
  EXPECT_TRUE(Contains(msg, "psum over axis 'data' (float32[2]): device 6 did not arrive within "
                            "0.3 s (device 2 waited)")) << msg;
  EXPECT_TRUE(Contains(msg, "device 6 is stuck and was abandoned")) << msg;
  kiln_jit_free(j);
  kiln_array_release(x);
  kiln_func_free(sm), kiln_func_free(f);
  kiln_mesh_free(mesh);
  kiln_ctx_free(ctx);
  gate.Release();
  EXPECT_TRUE(gate.AwaitReturn(1));
}

}  // namespace
