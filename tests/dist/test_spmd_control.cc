// Collectives inside cond, while and scan under shard_map, on CUDA devices
// (the lockstep driver's control steps, src/dist/spmd_control.c) and on
// CPU devices (one thread per device), each checked by value against the
// host: the two ways a backend runs collectives give the same results.
//
// Built twice: test_spmd_control_fake against the stand-in driver and NCCL
// (tests/fake_cuda; KILN_FAKE_CUDA_DEVICES=2 and 8), and test_spmd_control
// against the real libraries (label nccl), skipping without GPUs. The
// stand-in computes no kernels, so every body here is collectives, copies
// and control flow alone (predicates and branch indices come from the
// carry or from literals), over small integers that sum exactly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"

namespace {

#ifdef KILN_FAKE_CUDA_LIBRARY
KCT_USE_FAKE_DRIVER();
#endif

bool Contains(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

// A context of n devices on one backend, a mesh "i" over all of them, and
// the functions made for it.
struct Backend {
  kiln_ctx *ctx = nullptr;
  kiln_mesh *mesh = nullptr;
  int n = 0;
  std::vector<kiln_func *> funcs;

  kiln_status Open(kiln_backend kind, int cpu_devices, double timeout_s = 0) {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = kind;
    opts.num_cpu_devices = cpu_devices;
    opts.collective_timeout_s = timeout_s;
#ifdef KILN_FAKE_NCCL_LIBRARY
    if (kind == KILN_BACKEND_CUDA) opts.nccl_library = KILN_FAKE_NCCL_LIBRARY;
#endif
    kiln_status st = kiln_ctx_new(&opts, &ctx);
    if (st) return st;
    n = kiln_device_count(ctx);
    int64_t shape[] = {n};
    const char *names[] = {"i"};
    return kiln_mesh_new(ctx, 1, shape, names, nullptr, &mesh);
  }
  ~Backend() {
    for (kiln_func *f : funcs) kiln_func_free(f);
    kiln_mesh_free(mesh);
    kiln_ctx_free(ctx);
  }
  kiln_func *Func(kiln_fn fn, void *user, const char *name) {
    kiln_func *f = nullptr;
    EXPECT_EQ(kiln_func_new(fn, user, name, &f), KILN_OK);
    funcs.push_back(f);
    return f;
  }
  // shard_map of f with P(in) for every argument and P(out) for every result.
  kiln_func *ShardMap(kiln_func *f, const char *in, const char *out) {
    kiln_pspec *ps = nullptr, *po = nullptr;
    EXPECT_EQ(kiln_pspec_parse(in, &ps), KILN_OK);
    EXPECT_EQ(kiln_pspec_parse(out, &po), KILN_OK);
    kiln_tree *ins = kiln_tree_ptr(ps), *outs = kiln_tree_ptr(po);
    kiln_func *sm = nullptr;
    EXPECT_EQ(kiln_shard_map(f, mesh, ins, outs, 0, &sm), KILN_OK) << kiln_last_error();
    if (sm) funcs.push_back(sm);
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(ps), kiln_pspec_free(po);
    return sm;
  }
};

// An argument: its dtype, global shape and bytes.
struct Arg {
  kiln_dtype dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};
Arg F32(std::vector<int64_t> shape, const std::vector<float> &v) {
  Arg a{KILN_F32, shape, std::vector<char>(v.size() * 4)};
  memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}
std::vector<float> Iota(int64_t n, float from = 0) {
  std::vector<float> v((size_t)n);
  for (int64_t i = 0; i < n; i++) v[(size_t)i] = from + (float)i;
  return v;
}

// Calls f (jitted) on args; outs receive each result's f32 values.
kiln_status Call(Backend &b, const kiln_func *f, const std::vector<Arg> &args, int n_out,
                 std::vector<std::vector<float>> *outs) {
  kiln_device *dev = nullptr;
  EXPECT_EQ(kiln_device_get(b.ctx, 0, &dev), KILN_OK);
  std::vector<kiln_array *> x(args.size(), nullptr), y((size_t)n_out, nullptr);
  kiln_status st = KILN_OK;
  for (size_t k = 0; !st && k < args.size(); k++)
    st = kiln_array_from_host(dev, args[k].dtype, (int)args[k].shape.size(), args[k].shape.data(),
                              args[k].bytes.data(), args[k].bytes.size(), &x[k]);
  kiln_jit *j = nullptr;
  if (!st) st = kiln_jit_new(b.ctx, f, nullptr, &j);
  if (!st) st = kiln_jit_call_arrays(j, (int)x.size(), x.data(), n_out, y.data());
  outs->assign((size_t)n_out, {});
  for (int k = 0; !st && k < n_out; k++) {
    (*outs)[(size_t)k].resize(kiln_array_nbytes(y[(size_t)k]) / 4);
    st = kiln_array_to_host(y[(size_t)k], (*outs)[(size_t)k].data(), kiln_array_nbytes(y[(size_t)k]));
  }
  for (kiln_array *a : x) kiln_array_release(a);
  for (kiln_array *a : y) kiln_array_release(a);
  kiln_jit_free(j);
  return st;
}

// Every backend of the test: CPU devices, and CUDA devices where there are
// (the stand-in's under KILN_FAKE_CUDA_LIBRARY), as many of each.
class SpmdControl : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_status st = cuda_->Open(KILN_BACKEND_CUDA, 0);
    if (st == KILN_ERR_DEVICE) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    ASSERT_EQ(cpu_->Open(KILN_BACKEND_CPU, cuda_->n), KILN_OK) << kiln_last_error();
    ASSERT_EQ(cpu_->n, cuda_->n);
    n_ = cuda_->n;
  }
  void TearDown() override {
    cuda_.reset(), cpu_.reset();
#ifdef KILN_FAKE_NCCL_LIBRARY
    // -1: a skipped test never loaded the stand-in NCCL.
    EXPECT_LE(KctFakeLiveObjects(KILN_FAKE_NCCL_LIBRARY, "kiln_fake_nccl_live_objects"), 0)
        << "communicators left behind";
    EXPECT_EQ(KctFakeLiveObjects(), 0) << "driver objects left behind";
#endif
  }
  Backend *Both(int i) { return i ? cpu_.get() : cuda_.get(); }
  static const char *Name(int i) { return i ? "cpu" : "cuda"; }

  std::unique_ptr<Backend> cuda_ = std::make_unique<Backend>(), cpu_ = std::make_unique<Backend>();
  int n_ = 0;
};

// ---- cond: a literal predicate picks psum or pmax ----

kiln_tree *PsumOf(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_psum(t, kiln_arg(args, 0), "i"));
}
kiln_tree *PmaxOf(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_pmax(t, kiln_arg(args, 0), "i"));
}
struct CondUser {
  kiln_func *on_true, *on_false;
  bool pred;
};
kiln_tree *CondBody(kiln_trace *t, const kiln_tree *args, void *user) {
  const CondUser *u = static_cast<const CondUser *>(user);
  return kiln_cond(t, kiln_scalar(t, KILN_BOOL, u->pred), u->on_true, u->on_false, args);
}

TEST_F(SpmdControl, CondRunsTheCollectiveOfTheBranchTaken) {
  for (int which = 0; which < 2; which++) {
    for (bool pred : {true, false}) {
      Backend &b = *Both(which);
      CondUser u{b.Func(PsumOf, nullptr, "psum"), b.Func(PmaxOf, nullptr, "pmax"), pred};
      kiln_func *sm = b.ShardMap(b.Func(CondBody, &u, "cond"), "i", "");
      ASSERT_NE(sm, nullptr);
      std::vector<std::vector<float>> y;
      ASSERT_EQ(Call(b, sm, {F32({n_ * 4}, Iota(n_ * 4))}, 1, &y), KILN_OK)
          << Name(which) << ": " << kiln_last_error();
      ASSERT_EQ(y[0].size(), 4u);
      for (int j = 0; j < 4; j++) {
        float want = 0;
        for (int d = 0; d < n_; d++) want = pred ? want + (float)(d * 4 + j) : (float)(d * 4 + j);
        EXPECT_EQ(y[0][(size_t)j], want) << Name(which) << " pred " << pred << " element " << j;
      }
    }
  }
}

// ---- scan: (c, x) -> (psum(x), ppermute(c) one device on) ----

kiln_tree *ScanStep(kiln_trace *t, const kiln_tree *args, void *user) {
  int n = *static_cast<const int *>(user);
  std::vector<int> perm;
  for (int d = 0; d < n; d++) perm.insert(perm.end(), {d, (d + 1) % n});
  kiln_val *c = kiln_arg(args, 0), *x = kiln_arg(args, 1);
  kiln_val *out[2] = {kiln_psum(t, x, "i"),
                      kiln_ppermute(t, c, "i", n, reinterpret_cast<const int(*)[2]>(perm.data()))};
  return kiln_tuple_of(2, out);
}
struct ScanUser {
  kiln_func *step;
  int64_t length;
  int reverse;
};
// (init [4], xs [L, 4]) per device -> (final carry, ys [L, 4]).
kiln_tree *ScanBody(kiln_trace *t, const kiln_tree *args, void *user) {
  const ScanUser *u = static_cast<const ScanUser *>(user);
  kiln_tree *init = kiln_tree_val(kiln_arg(args, 0)), *xs = kiln_tree_val(kiln_arg(args, 1));
  kiln_tree *r = kiln_scan(t, u->step, init, xs, u->length, u->reverse);
  kiln_tree_free(init), kiln_tree_free(xs);
  return r;
}

// The host's answer for ScanBody over n devices: per device, the final
// carry and ys.
void ScanOnHost(int n, int64_t L, int reverse, const std::vector<float> &init,
                const std::vector<float> &xs, std::vector<std::vector<float>> *c,
                std::vector<std::vector<float>> *ys) {
  c->assign((size_t)n, {});
  ys->assign((size_t)n, std::vector<float>((size_t)L * 4));
  for (int d = 0; d < n; d++) (*c)[(size_t)d].assign(init.begin() + d * 4, init.begin() + d * 4 + 4);
  for (int64_t it = 0; it < L; it++) {
    int64_t i = reverse ? L - 1 - it : it;
    std::vector<std::vector<float>> next((size_t)n, std::vector<float>(4, 0.f));
    for (int d = 0; d < n; d++)
      for (int j = 0; j < 4; j++) {
        for (int e = 0; e < n; e++) next[(size_t)d][(size_t)j] += xs[(size_t)((e * L + i) * 4 + j)];
        (*ys)[(size_t)d][(size_t)(i * 4 + j)] = (*c)[(size_t)((d + n - 1) % n)][(size_t)j];
      }
    *c = next;
  }
}

void ExpectScan(const char *what, int n, int64_t L, const std::vector<std::vector<float>> &y,
                const std::vector<std::vector<float>> &c, const std::vector<std::vector<float>> &ys) {
  ASSERT_EQ(y[0].size(), (size_t)n * 4) << what;
  ASSERT_EQ(y[1].size(), (size_t)(n * L * 4)) << what;
  for (int d = 0; d < n; d++) {
    for (int j = 0; j < 4; j++)
      EXPECT_EQ(y[0][(size_t)(d * 4 + j)], c[(size_t)d][(size_t)j]) << what << ": carry of device " << d;
    for (int64_t k = 0; k < L * 4; k++)
      EXPECT_EQ(y[1][(size_t)(d * L * 4 + k)], ys[(size_t)d][(size_t)k])
          << what << ": ys of device " << d << " at " << k;
  }
}

TEST_F(SpmdControl, ScanRunsItsCollectivesEveryIterationInEitherDirection) {
  const int64_t L = 3;
  // init: device d's carry is d*4 + j; xs: device d's rows are its L rows of
  // a [n*L, 4] iota (from 100, apart from init's values).
  std::vector<float> init = Iota(n_ * 4), xs = Iota(n_ * L * 4, 100);
  for (int reverse = 0; reverse < 2; reverse++) {
    std::vector<std::vector<float>> c, ys;
    ScanOnHost(n_, L, reverse, init, xs, &c, &ys);
    for (int which = 0; which < 2; which++) {
      Backend &b = *Both(which);
      ScanUser u{b.Func(ScanStep, &n_, "step"), L, reverse};
      kiln_func *sm = b.ShardMap(b.Func(ScanBody, &u, "scan"), "i", "i");
      ASSERT_NE(sm, nullptr);
      std::vector<std::vector<float>> y;
      ASSERT_EQ(Call(b, sm, {F32({n_ * 4}, init), F32({n_ * L, 4}, xs)}, 2, &y), KILN_OK)
          << Name(which) << ": " << kiln_last_error();
      ExpectScan(reverse ? "reverse" : "forward", n_, L, y, c, ys);
    }
  }
}

// Control steps nest: a cond whose branches are the scans above (forward
// when true, reverse when false).
TEST_F(SpmdControl, AScanInsideACondRunsAsAControlStepOfItsBranch) {
  const int64_t L = 2;
  std::vector<float> init = Iota(n_ * 4), xs = Iota(n_ * L * 4, 50);
  for (bool pred : {true, false}) {
    std::vector<std::vector<float>> c, ys;
    ScanOnHost(n_, L, !pred, init, xs, &c, &ys);
    for (int which = 0; which < 2; which++) {
      Backend &b = *Both(which);
      kiln_func *step = b.Func(ScanStep, &n_, "step");
      ScanUser fwd{step, L, 0}, rev{step, L, 1};
      CondUser u{b.Func(ScanBody, &fwd, "forward"), b.Func(ScanBody, &rev, "reverse"), pred};
      kiln_func *sm = b.ShardMap(b.Func(CondBody, &u, "cond"), "i", "i");
      ASSERT_NE(sm, nullptr);
      std::vector<std::vector<float>> y;
      ASSERT_EQ(Call(b, sm, {F32({n_ * 4}, init), F32({n_ * L, 4}, xs)}, 2, &y), KILN_OK)
          << Name(which) << ": " << kiln_last_error();
      ExpectScan(Name(which), n_, L, y, c, ys);
    }
  }
}

// ---- while: (go, more, x) -> (ppermute(more) around, ppermute(more) to
// no one, psum(x)) while go: `more` turns false on the first trip, `go`
// one trip later, so the body runs twice (or never, from go = false) ----

kiln_tree *WhileCond(kiln_trace *, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_arg(args, 0));
}
kiln_tree *WhileStep(kiln_trace *t, const kiln_tree *args, void *user) {
  int n = *static_cast<const int *>(user);
  std::vector<int> perm;
  for (int d = 0; d < n; d++) perm.insert(perm.end(), {d, (d + 1) % n});
  kiln_val *more = kiln_arg(args, 1);
  kiln_val *out[3] = {
      kiln_ppermute(t, more, "i", n, reinterpret_cast<const int(*)[2]>(perm.data())),
      kiln_ppermute(t, more, "i", 0, nullptr), kiln_psum(t, kiln_arg(args, 2), "i")};
  return kiln_tuple_of(3, out);
}
struct WhileUser {
  kiln_func *cond, *step;
  bool go;
};
kiln_tree *WhileBody(kiln_trace *t, const kiln_tree *args, void *user) {
  const WhileUser *u = static_cast<const WhileUser *>(user);
  kiln_val *init[3] = {kiln_scalar(t, KILN_BOOL, u->go), kiln_scalar(t, KILN_BOOL, 1),
                       kiln_arg(args, 0)};
  kiln_tree *carry = kiln_tuple_of(3, init);
  kiln_tree *r = kiln_while(t, u->cond, u->step, carry);
  kiln_tree_free(carry);
  kiln_val *x = r ? kiln_arg(r, 2) : nullptr;
  kiln_tree *res = kiln_tree_val(x);
  kiln_tree_free(r);
  return res;
}

TEST_F(SpmdControl, WhileRunsItsBodyUntilThePredicateTurnsFalse) {
  for (int which = 0; which < 2; which++) {
    for (bool go : {true, false}) {
      Backend &b = *Both(which);
      WhileUser u{b.Func(WhileCond, nullptr, "cond"), b.Func(WhileStep, &n_, "step"), go};
      kiln_func *sm = b.ShardMap(b.Func(WhileBody, &u, "while"), "i", "i");
      ASSERT_NE(sm, nullptr);
      std::vector<std::vector<float>> y;
      ASSERT_EQ(Call(b, sm, {F32({n_ * 4}, Iota(n_ * 4))}, 1, &y), KILN_OK)
          << Name(which) << ": " << kiln_last_error();
      ASSERT_EQ(y[0].size(), (size_t)n_ * 4);
      for (int d = 0; d < n_; d++)
        for (int j = 0; j < 4; j++) {
          float sum = 0; // psum once: the same on every device; twice: n times that
          for (int e = 0; e < n_; e++) sum += (float)(e * 4 + j);
          float want = go ? sum * (float)n_ : (float)(d * 4 + j);
          EXPECT_EQ(y[0][(size_t)(d * 4 + j)], want)
              << Name(which) << " go " << go << ": device " << d << " element " << j;
        }
    }
  }
}

// ---- devices that disagree on a while's predicate: an error, no hang ----

kiln_tree *SplitWhileBody(kiln_trace *t, const kiln_tree *args, void *user) {
  const WhileUser *u = static_cast<const WhileUser *>(user);
  kiln_val *go = kiln_reshape(t, kiln_arg(args, 1), 0, nullptr); // bool[1] -> bool[]
  kiln_val *init[3] = {go, kiln_scalar(t, KILN_BOOL, 1), kiln_arg(args, 0)};
  kiln_tree *carry = kiln_tuple_of(3, init);
  kiln_tree *r = kiln_while(t, u->cond, u->step, carry);
  kiln_tree_free(carry);
  kiln_tree *res = kiln_tree_val(r ? kiln_arg(r, 2) : nullptr);
  kiln_tree_free(r);
  return res;
}

TEST_F(SpmdControl, DevicesThatDisagreeOnAPredicateFailNamingThem) {
  Backend &b = *cuda_;
  WhileUser u{b.Func(WhileCond, nullptr, "cond"), b.Func(WhileStep, &n_, "step"), true};
  kiln_func *sm = b.ShardMap(b.Func(SplitWhileBody, &u, "while"), "i", "i");
  ASSERT_NE(sm, nullptr);
  Arg go{KILN_BOOL, {n_}, std::vector<char>((size_t)n_, 0)};
  go.bytes[0] = 1; // device 0 alone would go on
  std::vector<std::vector<float>> y;
  EXPECT_EQ(Call(b, sm, {F32({n_ * 4}, Iota(n_ * 4)), go}, 1, &y), KILN_ERR_COLLECTIVE);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "while's predicate")) << msg;
  EXPECT_TRUE(Contains(msg, "device 0 has 1 and device 1 has 0")) << msg;
  // The context stays usable: the same body with every device agreeing.
  go.bytes.assign((size_t)n_, 0);
  ASSERT_EQ(Call(b, sm, {F32({n_ * 4}, Iota(n_ * 4)), go}, 1, &y), KILN_OK) << kiln_last_error();
  EXPECT_EQ(y[0], Iota(n_ * 4));
}

}  // namespace
