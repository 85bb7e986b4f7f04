// shard_map and pmap over CUDA devices: the lockstep driver (src/dist/
// spmd_lockstep.c) with the collectives through NCCL.
//
// Built twice: test_spmd_cuda_fake against the stand-in driver and the
// stand-in NCCL (tests/fake_cuda), run with KILN_FAKE_CUDA_DEVICES=2 and 8;
// and test_spmd_cuda against the real libraries on whatever GPUs there are,
// skipping without them. The stand-in computes no kernels, so every body
// here gets its results straight from collectives (and copies): the values
// are exact sums and copies of small integers, checked against the host.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fake_cuda/fake_cuda.h"
#include "kiln/kiln.h"
#include "support/text.h"

namespace {

using kiln_test::Contains;

#ifdef KILN_FAKE_CUDA_LIBRARY
KCT_USE_FAKE_DRIVER();
#endif
#ifdef KILN_FAKE_NCCL_LIBRARY
#define KILN_FAKE_NCCL_LIBRARY_OR_NULL KILN_FAKE_NCCL_LIBRARY
#else
#define KILN_FAKE_NCCL_LIBRARY_OR_NULL "no stand-in NCCL"
#endif

// A body: one collective of its single argument (Body::fn picks which).
struct Body {
  using Fn = kiln_val *(*)(kiln_trace *t, kiln_val *x, const Body &b);
  explicit Body(Fn f) : fn(f) {}
  Fn fn;
  const char *axes = "i";
  int axis = 0, tiled = 1, split = 0, concat = 0;
  std::vector<std::array<int, 2>> perm;
};

kiln_tree *Apply(kiln_trace *t, const kiln_tree *args, void *user) {
  const Body &b = *static_cast<const Body *>(user);
  return kiln_tree_val(b.fn(t, kiln_arg(args, 0), b));
}

kiln_val *Psum(kiln_trace *t, kiln_val *x, const Body &b) { return kiln_psum(t, x, b.axes); }
kiln_val *Pmax(kiln_trace *t, kiln_val *x, const Body &b) { return kiln_pmax(t, x, b.axes); }
kiln_val *Pmean(kiln_trace *t, kiln_val *x, const Body &b) { return kiln_pmean(t, x, b.axes); }
kiln_val *Gather(kiln_trace *t, kiln_val *x, const Body &b) {
  return kiln_all_gather(t, x, b.axes, b.axis, b.tiled);
}
kiln_val *Scatter(kiln_trace *t, kiln_val *x, const Body &b) {
  return kiln_psum_scatter(t, x, b.axes, b.axis, b.tiled);
}
kiln_val *Permute(kiln_trace *t, kiln_val *x, const Body &b) {
  return kiln_ppermute(t, x, b.axes, (int)b.perm.size(),
                       reinterpret_cast<const int(*)[2]>(b.perm.data()));
}
kiln_val *AllToAll(kiln_trace *t, kiln_val *x, const Body &b) {
  return kiln_all_to_all(t, x, b.axes, b.split, b.concat, b.tiled);
}

class SpmdCuda : public ::testing::Test {
 protected:
  void SetUp() override { Open(0); }
  // A context over the CUDA devices (timeout_s 0: KILN_COLLECTIVE_TIMEOUT's).
  void Open(double timeout_s) {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CUDA;
    opts.collective_timeout_s = timeout_s;
#ifdef KILN_FAKE_NCCL_LIBRARY
    opts.nccl_library = KILN_FAKE_NCCL_LIBRARY;
#endif
    kiln_status st = kiln_ctx_new(&opts, &ctx_);
    if (st == KILN_ERR_DEVICE) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    n_ = kiln_device_count(ctx_);
  }
  void TearDown() override {
    for (kiln_func *f : funcs_) kiln_func_free(f);
    kiln_mesh_free(mesh_);
    kiln_ctx_free(ctx_);
    unsetenv("KILN_FAKE_NCCL_ABSENT_RANK");
#ifdef KILN_FAKE_NCCL_LIBRARY
    // -1: a skipped test never loaded the stand-in NCCL.
    EXPECT_LE(KctFakeLiveObjects(KILN_FAKE_NCCL_LIBRARY, "kiln_fake_nccl_live_objects"), 0)
        << "communicators left behind";
    EXPECT_EQ(KctFakeLiveObjects(), 0) << "driver objects left behind";
#endif
  }

  void Mesh(std::vector<int64_t> shape, std::vector<const char *> names) {
    ASSERT_EQ(kiln_mesh_new(ctx_, (int)shape.size(), shape.data(), names.data(), nullptr, &mesh_),
              KILN_OK) << kiln_last_error();
  }

  // shard_map of body over mesh_, with the spec P(in) for every argument
  // and P(out) for every result.
  kiln_status ShardMap(Body *body, const char *in, const char *out, int check_rep,
                       kiln_func **sm) {
    kiln_func *f = nullptr;
    EXPECT_EQ(kiln_func_new(Apply, body, "body", &f), KILN_OK);
    funcs_.push_back(f);
    return ShardMapOf(f, mesh_, in, out, check_rep, sm);
  }
  kiln_status ShardMapOf(kiln_func *f, kiln_mesh *mesh, const char *in, const char *out,
                         int check_rep, kiln_func **sm) {
    kiln_pspec *ps = nullptr, *po = nullptr;
    EXPECT_EQ(kiln_pspec_parse(in, &ps), KILN_OK);
    EXPECT_EQ(kiln_pspec_parse(out, &po), KILN_OK);
    kiln_tree *ins = kiln_tree_ptr(ps), *outs = kiln_tree_ptr(po);
    kiln_status st = kiln_shard_map(f, mesh, ins, outs, check_rep, sm);
    if (st == KILN_OK) funcs_.push_back(*sm);
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(ps), kiln_pspec_free(po);
    return st;
  }

  // Calls f (jitted) on x = 0, 1, 2, ... of the given global shape.
  kiln_status Call(const kiln_func *f, std::vector<int64_t> shape, std::vector<float> *out,
                   std::vector<int64_t> *out_shape = nullptr) {
    int64_t size = 1;
    for (int64_t s : shape) size *= s;
    std::vector<float> v((size_t)size);
    for (int64_t i = 0; i < size; i++) v[(size_t)i] = (float)i;
    kiln_device *dev = nullptr;
    kiln_array *x = nullptr, *y = nullptr;
    kiln_jit *j = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, 0, &dev), KILN_OK);
    kiln_status st = kiln_array_from_host(dev, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                          v.size() * 4, &x);
    if (st == KILN_OK) st = kiln_jit_new(ctx_, f, nullptr, &j);
    if (st == KILN_OK) st = kiln_jit_call_arrays(j, 1, &x, 1, &y);
    if (st == KILN_OK) {
      out->resize(kiln_array_nbytes(y) / 4);
      st = kiln_array_to_host(y, out->data(), kiln_array_nbytes(y));
      if (out_shape) out_shape->assign(kiln_array_shape(y), kiln_array_shape(y) + kiln_array_rank(y));
    }
    kiln_array_release(x);
    kiln_array_release(y);
    kiln_jit_free(j);
    return st;
  }

  // pmap of body over devices 0 and 1 (axis "i", in_axes 0), into devs.
  void PmapOverTwo(Body *body, kiln_device *devs[2], kiln_func **pm) {
    kiln_func *f = nullptr;
    ASSERT_EQ(kiln_func_new(Apply, body, "body", &f), KILN_OK);
    funcs_.push_back(f);
    for (int i = 0; i < 2; i++) ASSERT_EQ(kiln_device_get(ctx_, i, &devs[i]), KILN_OK);
    int in_axes[] = {0};
    ASSERT_EQ(kiln_pmap(ctx_, f, "i", 1, in_axes, 0, 2, devs, pm), KILN_OK) << kiln_last_error();
    funcs_.push_back(*pm);
  }

  kiln_ctx *ctx_ = nullptr;
  kiln_mesh *mesh_ = nullptr;
  int n_ = 0;
  std::vector<kiln_func *> funcs_;
};

#define SKIP_WITHOUT(k) \
  if (n_ < (k)) GTEST_SKIP() << "needs " << (k) << " devices, the context has " << n_

// x = iota([n * 4]) split over i: psum and pmax are replicated results.
TEST_F(SpmdCuda, PsumAndPmaxOverEveryDevice) {
  Mesh({n_}, {"i"});
  for (auto fn : {Psum, Pmax}) {
    Body b{fn};
    kiln_func *sm = nullptr;
    ASSERT_EQ(ShardMap(&b, "i", "", 1, &sm), KILN_OK) << kiln_last_error();
    std::vector<float> y;
    ASSERT_EQ(Call(sm, {n_ * 4}, &y), KILN_OK) << kiln_last_error();
    ASSERT_EQ(y.size(), 4u);
    for (int j = 0; j < 4; j++) {
      float want = 0;
      for (int d = 0; d < n_; d++) want = fn == Psum ? want + (float)(d * 4 + j) : (float)(d * 4 + j);
      EXPECT_EQ(y[j], want) << "element " << j;
    }
  }
}

// all_gather along dimension 0 is NCCL's own layout; along dimension 1 the
// result is moved from rank-major after the call. x: [2n, 3] split on 0.
TEST_F(SpmdCuda, AllGatherTiledAndUntiledAlongEitherDimension) {
  Mesh({n_}, {"i"});
  struct Case { int axis, tiled; std::vector<int64_t> shape; } cases[] = {
      {0, 1, {2 * n_, 3}}, {0, 0, {n_, 2, 3}}, {1, 1, {2, 3 * n_}}, {1, 0, {2, n_, 3}}};
  for (const Case &c : cases) {
    Body b{Gather};
    b.axis = c.axis, b.tiled = c.tiled;
    kiln_func *sm = nullptr;
    ASSERT_EQ(ShardMap(&b, "i", "", 0, &sm), KILN_OK) << kiln_last_error();
    std::vector<float> y;
    std::vector<int64_t> shape;
    ASSERT_EQ(Call(sm, {2 * n_, 3}, &y, &shape), KILN_OK) << kiln_last_error();
    EXPECT_EQ(shape, c.shape) << "axis " << c.axis << " tiled " << c.tiled;
    // Element (r, k, col) of shard k is global row 2k + r.
    for (int k = 0; k < n_; k++)
      for (int r = 0; r < 2; r++)
        for (int col = 0; col < 3; col++) {
          size_t at = c.axis == 0 ? (size_t)((k * 2 + r) * 3 + col) : (size_t)((r * n_ + k) * 3 + col);
          EXPECT_EQ(y[at], (float)((2 * k + r) * 3 + col)) << "axis " << c.axis << " k " << k;
        }
  }
}

// psum_scatter along dimension 0 (NCCL's layout) and 1 (moved to rank-major
// before the call). x: [n, 2, 2n] split on 0, so shard k is [1, 2, 2n].
TEST_F(SpmdCuda, PsumScatterAlongEitherDimension) {
  Mesh({n_}, {"i"});
  for (int axis : {2, 1}) {
    Body b{Scatter};
    b.axis = axis;
    kiln_func *sm = nullptr;
    const char *out = axis == 2 ? "None, None, i" : "None, i";
    ASSERT_EQ(ShardMap(&b, "i", out, 1, &sm), KILN_OK) << kiln_last_error();
    std::vector<float> y;
    std::vector<int64_t> shape;
    if (axis == 1) {
      // Shard [1, 2n, 2] summed over shards, block d of dimension 1 to device d.
      ASSERT_EQ(Call(sm, {n_, 2 * n_, 2}, &y, &shape), KILN_OK) << kiln_last_error();
      ASSERT_EQ(shape, (std::vector<int64_t>{1, 2 * n_, 2}));
      for (int r = 0; r < 2 * n_; r++)
        for (int c = 0; c < 2; c++) {
          float want = 0;
          for (int k = 0; k < n_; k++) want += (float)((k * 2 * n_ + r) * 2 + c);
          EXPECT_EQ(y[(size_t)(r * 2 + c)], want) << "row " << r;
        }
    } else {
      ASSERT_EQ(Call(sm, {n_, 2, 2 * n_}, &y, &shape), KILN_OK) << kiln_last_error();
      ASSERT_EQ(shape, (std::vector<int64_t>{1, 2, 2 * n_}));
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2 * n_; c++) {
          float want = 0;
          for (int k = 0; k < n_; k++) want += (float)((k * 2 + r) * 2 * n_ + c);
          EXPECT_EQ(y[(size_t)(r * 2 * n_ + c)], want) << "row " << r << " col " << c;
        }
    }
  }
}

// A cyclic shift, then a partial permutation: devices that receive nothing
// get zeros.
TEST_F(SpmdCuda, PpermuteWholeAndPartial) {
  Mesh({n_}, {"i"});
  for (bool partial : {false, true}) {
    Body b{Permute};
    for (int d = 0; d < (partial ? 1 : n_); d++) b.perm.push_back({d, (d + 1) % n_});
    kiln_func *sm = nullptr;
    ASSERT_EQ(ShardMap(&b, "i", "i", 1, &sm), KILN_OK) << kiln_last_error();
    std::vector<float> y;
    ASSERT_EQ(Call(sm, {n_ * 3}, &y), KILN_OK) << kiln_last_error();
    for (int d = 0; d < n_; d++)
      for (int j = 0; j < 3; j++) {
        bool receives = !partial || d == 1 % n_;  // one GPU: 0 -> 0 is the whole cycle
        float want = receives ? (float)(((d + n_ - 1) % n_) * 3 + j) : 0.0f;
        EXPECT_EQ(y[(size_t)(d * 3 + j)], want) << "device " << d << (partial ? " partial" : "");
      }
  }
}

// all_to_all over shards s_k = x[:, k n : (k + 1) n] of x = iota([n, n n]):
// device d gets block d (along split) of every s_k, laid side by side along
// concat in source order. Split 0 is NCCL's layout; split 1 moves the
// operand, concat 1 the result.
TEST_F(SpmdCuda, AllToAllMovesBlocksBetweenDevices) {
  Mesh({n_}, {"i"});
  for (int split : {0, 1})
    for (int concat : {0, 1}) {
      Body b{AllToAll};
      b.split = split, b.concat = concat;
      kiln_func *sm = nullptr;
      ASSERT_EQ(ShardMap(&b, "None, i", "None, i", 1, &sm), KILN_OK) << kiln_last_error();
      std::vector<float> y;
      std::vector<int64_t> shape;
      ASSERT_EQ(Call(sm, {n_, n_ * n_}, &y, &shape), KILN_OK) << kiln_last_error();
      // The block: [1, n] (split 0) or [n, 1]; the result of each device.
      int br = split == 0 ? 1 : n_, bc = split == 0 ? n_ : 1;
      int rr = concat == 0 ? br * n_ : br, rc = concat == 0 ? bc : bc * n_;
      ASSERT_EQ(shape, (std::vector<int64_t>{rr, (int64_t)rc * n_}));
      for (int d = 0; d < n_; d++)
        for (int i = 0; i < rr; i++)
          for (int j = 0; j < rc; j++) {
            int k = concat == 0 ? i / br : j / bc, bi = concat == 0 ? i % br : i,
                bj = concat == 0 ? j : j % bc;
            int a = split == 0 ? d : bi, c = split == 0 ? bj : d;  // in s_k
            float want = (float)(a * n_ * n_ + k * n_ + c);
            EXPECT_EQ(y[(size_t)(i * rc * n_ + d * rc + j)], want)
                << "split " << split << " concat " << concat << " device " << d << " (" << i
                << ", " << j << ")";
          }
    }
}

// On a 2x4 mesh, psum over the inner axis runs on communicators split from
// the whole clique (ncclCommSplit); over both axes on the whole clique.
TEST_F(SpmdCuda, SubAxisPsumOnATwoByFourMesh) {
  SKIP_WITHOUT(8);
  Mesh({2, 4}, {"a", "b"});
  for (const char *axes : {"b", "a", "a,b"}) {
    Body b{Psum};
    b.axes = axes;
    std::string other = std::string(axes) == "b" ? "a" : std::string(axes) == "a" ? "b" : "";
    kiln_func *sm = nullptr;
    ASSERT_EQ(ShardMap(&b, "(a, b)", other.c_str(), 1, &sm), KILN_OK) << kiln_last_error();
    std::vector<float> y;
    ASSERT_EQ(Call(sm, {8 * 2}, &y), KILN_OK) << kiln_last_error();
    for (size_t i = 0; i < y.size(); i++) {
      int g = (int)i / 2, j = (int)i % 2;
      float want = 0;
      for (int a = 0; a < 2; a++)
        for (int bb = 0; bb < 4; bb++) {
          bool in = other == "a" ? a == g : other == "b" ? bb == g : true;
          if (in) want += (float)((a * 4 + bb) * 2 + j);
        }
      EXPECT_EQ(y[i], want) << "psum over " << axes << " element " << i;
    }
  }
  // Another mesh of the same devices with an axis of the same name: its
  // own communicators, not the 2x4 mesh's groups.
  kiln_mesh *flat = nullptr;
  int64_t eight = 8;
  const char *a[] = {"a"};
  ASSERT_EQ(kiln_mesh_new(ctx_, 1, &eight, a, nullptr, &flat), KILN_OK);
  Body b{Psum};
  b.axes = "a";
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(Apply, &b, "body", &f), KILN_OK);
  funcs_.push_back(f);
  ASSERT_EQ(ShardMapOf(f, flat, "a", "", 1, &sm), KILN_OK) << kiln_last_error();
  std::vector<float> y;
  ASSERT_EQ(Call(sm, {8}, &y), KILN_OK) << kiln_last_error();
  EXPECT_EQ(y[0], 28.0f);
  for (kiln_func *g : funcs_) kiln_func_free(g);
  funcs_.clear();
  kiln_mesh_free(flat);
}

kiln_tree *PsumTree(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_psum_tree(t, args, "i");
}

// A pytree's psum (one equation per leaf) is one bucketed all-reduce: a
// bucket per dtype, so 21 leaves of f32 and i32 cost 2 NCCL calls per device.
TEST_F(SpmdCuda, PsumOfAPytreeIsBucketed) {
  Mesh({n_}, {"i"});
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(PsumTree, nullptr, "tree", &f), KILN_OK);
  funcs_.push_back(f);
  ASSERT_EQ(ShardMapOf(f, mesh_, "i", "", 1, &sm), KILN_OK) << kiln_last_error();
  const int kLeaves = 21;
  std::vector<kiln_array *> xs(kLeaves), ys(kLeaves);
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_device_get(ctx_, 0, &dev), KILN_OK);
  for (int l = 0; l < kLeaves; l++) {
    int64_t shape[] = {2 * n_};
    std::vector<int32_t> v(2 * n_);
    for (int i = 0; i < 2 * n_; i++) v[i] = l * 100 + i;
    std::vector<float> fv(v.begin(), v.end());
    bool i32 = l % 3 == 0;
    ASSERT_EQ(kiln_array_from_host(dev, i32 ? KILN_I32 : KILN_F32, 1, shape,
                                   i32 ? (const void *)v.data() : (const void *)fv.data(),
                                   v.size() * 4, &xs[l]), KILN_OK);
  }
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, sm, nullptr, &j), KILN_OK) << kiln_last_error();
  auto calls = KctFakeSymbol<unsigned long (*)()>(KILN_FAKE_NCCL_LIBRARY_OR_NULL, "kiln_fake_nccl_calls");
  for (int round = 0; round < 2; round++) {  // the first call also makes the communicators
    unsigned long before = calls ? calls() : 0;
    ASSERT_EQ(kiln_jit_call_arrays(j, kLeaves, xs.data(), kLeaves, ys.data()), KILN_OK)
        << kiln_last_error();
    if (calls) {
      EXPECT_EQ(calls() - before, 2ul * n_) << "round " << round;
    }
    for (int l = 0; l < kLeaves; l++) {
      std::vector<int32_t> v(2);
      std::vector<float> fv(2);
      bool i32 = l % 3 == 0;
      ASSERT_EQ(kiln_array_to_host(ys[l], i32 ? (void *)v.data() : (void *)fv.data(), 8), KILN_OK);
      for (int i = 0; i < 2; i++) {
        double want = 0;
        for (int d = 0; d < n_; d++) want += l * 100 + d * 2 + i;
        EXPECT_EQ(i32 ? (double)v[i] : (double)fv[i], want) << "leaf " << l;
      }
      kiln_array_release(ys[l]);
    }
  }
  for (kiln_array *x : xs) kiln_array_release(x);
  kiln_jit_free(j);
}

// pmap over two devices, the mapped axis split across them.
TEST_F(SpmdCuda, PmapOverTwoDevices) {
  SKIP_WITHOUT(2);
  Body b{Psum};
  kiln_func *pm = nullptr;
  kiln_device *devs[2];
  PmapOverTwo(&b, devs, &pm);
  std::vector<float> y;
  std::vector<int64_t> shape;
  ASSERT_EQ(Call(pm, {2, 3}, &y, &shape), KILN_OK) << kiln_last_error();
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  for (int d = 0; d < 2; d++)
    for (int j = 0; j < 3; j++) EXPECT_EQ(y[(size_t)(d * 3 + j)], (float)(j + 3 + j));
}

// jit(pmap, donate_argnums=(0,)) over CUDA devices runs on the jit's device
// (the lockstep driver splits the arguments there): an ordinary array on it
// is donated and deleted, as single-device jit does; a sharded one would
// be gathered first, so it is kept (a warning), and both give the sums.
TEST_F(SpmdCuda, PmapDonatesWhatItDoesNotMoveFirst) {
  SKIP_WITHOUT(2);
  Body b{Psum};
  kiln_func *pm = nullptr;
  kiln_device *devs[2];
  PmapOverTwo(&b, devs, &pm);
  const int64_t two[1] = {2};
  const char *names[1] = {"i"};
  ASSERT_EQ(kiln_mesh_new(ctx_, 1, two, names, devs, &mesh_), KILN_OK) << kiln_last_error();
  kiln_pspec *split = nullptr;
  kiln_sharding *s = nullptr;
  ASSERT_EQ(kiln_pspec_parse("i", &split), KILN_OK);
  ASSERT_EQ(kiln_sharding_named(mesh_, split, &s), KILN_OK);
  kiln_pspec_free(split);
  const int donate[1] = {0};
  kiln_jit_options o{};
  o.donate_argnums = donate, o.num_donate = 1;
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, pm, &o, &j), KILN_OK);
  const float v[6] = {0, 1, 2, 3, 4, 5};
  const int64_t shape[2] = {2, 3};
  for (bool sharded : {false, true}) {
    kiln_array *x = nullptr, *y = nullptr;
    ASSERT_EQ(sharded ? kiln_device_put_host(s, KILN_F32, 2, shape, v, sizeof v, &x)
                      : kiln_array_from_host(devs[0], KILN_F32, 2, shape, v, sizeof v, &x),
              KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_array_is_deleted(x), sharded ? 0 : 1) << (sharded ? "sharded" : "ordinary");
    float got[6];
    ASSERT_EQ(kiln_array_to_host(y, got, sizeof got), KILN_OK) << kiln_last_error();
    for (int i = 0; i < 6; i++) EXPECT_EQ(got[i], (float)(2 * (i % 3) + 3)) << i;
    kiln_array_release(x), kiln_array_release(y);
  }
  kiln_jit_free(j);
  kiln_sharding_free(s);
}

kiln_val *GatherIndex(kiln_trace *t, kiln_val *, const Body &b) {
  return kiln_all_gather(t, kiln_axis_index(t, b.axes), b.axes, 0, 0);
}

// axis_index is uploaded per device (gathered here to see every device's);
// pmean's division is a kernel, which the stand-in does not compute, so
// there only that it runs is checked.
TEST_F(SpmdCuda, AxisIndexAndPmean) {
  Mesh({n_}, {"i"});
  Body index{GatherIndex};
  kiln_func *sm = nullptr;
  ASSERT_EQ(ShardMap(&index, "i", "", 0, &sm), KILN_OK) << kiln_last_error();
  std::vector<float> y;
  ASSERT_EQ(Call(sm, {n_}, &y), KILN_OK) << kiln_last_error();
  ASSERT_EQ(y.size(), (size_t)n_);
  for (int d = 0; d < n_; d++) {
    int32_t v;
    memcpy(&v, &y[(size_t)d], 4);
    EXPECT_EQ(v, d);
  }
  Body mean{Pmean};
  ASSERT_EQ(ShardMap(&mean, "i", "", 1, &sm), KILN_OK) << kiln_last_error();
  ASSERT_EQ(Call(sm, {n_ * 2}, &y), KILN_OK) << kiln_last_error();
  ASSERT_EQ(y.size(), 2u);
#ifndef KILN_FAKE_CUDA_LIBRARY
  EXPECT_EQ(y[0], (float)(n_ - 1));
#endif
}

// A device that never arrives: the wait gives up after the context's
// collective_timeout_s (KILN_COLLECTIVE_TIMEOUT), naming the collective, the
// axis, the shapes and the devices; the communicators are dropped and the
// next call works.
TEST_F(SpmdCuda, CollectiveTimeoutIsAnErrorAndTheContextStaysUsable) {
#ifndef KILN_FAKE_NCCL_LIBRARY
  GTEST_SKIP() << "needs the stand-in NCCL's failure controls";
#endif
  SKIP_WITHOUT(2);
  kiln_ctx_free(ctx_);
  ctx_ = nullptr;
  Open(0.3);
  Mesh({n_}, {"i"});
  setenv("KILN_FAKE_NCCL_ABSENT_RANK", "1", 1);
  Body b{Psum};
  kiln_func *sm = nullptr;
  ASSERT_EQ(ShardMap(&b, "i", "", 1, &sm), KILN_OK) << kiln_last_error();
  std::vector<float> y;
  EXPECT_EQ(Call(sm, {n_ * 4}, &y), KILN_ERR_COLLECTIVE);
  std::string msg = kiln_last_error();
  for (const char *want : {"psum", "axis 'i'", "f32[4]", "KILN_COLLECTIVE_TIMEOUT", "cuda:0"})
    EXPECT_TRUE(Contains(msg, want)) << want << " missing from: " << msg;
  unsetenv("KILN_FAKE_NCCL_ABSENT_RANK");
  ASSERT_EQ(Call(sm, {n_ * 4}, &y), KILN_OK) << kiln_last_error();
  EXPECT_EQ(y[0], (float)(4 * n_ * (n_ - 1) / 2));
}

kiln_tree *WithCallback(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_F32;
  a.rank = 1;
  a.shape[0] = 4;
  kiln_host_callback(
      t, [](void *, int, const kiln_host_buffer *, int, kiln_host_buffer *) { return KILN_OK; },
      nullptr, 1, &x, 1, &a, &r);
  return kiln_tree_val(kiln_psum(t, r, "i"));
}

kiln_tree *PsumBranch(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_psum(t, kiln_arg(args, 0), "i"));
}
kiln_tree *Identity(kiln_trace *, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_arg(args, 0));
}
// A psum inside a cond: a control step runs its branch.
kiln_tree *CondPsum(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_func *const *branches = static_cast<kiln_func *const *>(user);
  return kiln_cond(t, kiln_scalar(t, KILN_BOOL, 1), branches[0], branches[1], args);
}

// What the lockstep driver refuses, with the reason; NCCL missing names it.
TEST_F(SpmdCuda, RefusalsNameTheirReason) {
  Mesh({n_}, {"i"});
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(WithCallback, nullptr, "cb", &f), KILN_OK);
  funcs_.push_back(f);
  ASSERT_EQ(ShardMapOf(f, mesh_, "i", "", 1, &sm), KILN_OK) << kiln_last_error();
  std::vector<float> y;
  EXPECT_EQ(Call(sm, {n_ * 4}, &y), KILN_ERR_UNIMPLEMENTED);
  EXPECT_TRUE(Contains(kiln_last_error(), "effects")) << kiln_last_error();
  kiln_func *branches[2] = {nullptr, nullptr}, *cond = nullptr, *sm2 = nullptr;
  ASSERT_EQ(kiln_func_new(PsumBranch, nullptr, "psum", &branches[0]), KILN_OK);
  ASSERT_EQ(kiln_func_new(Identity, nullptr, "id", &branches[1]), KILN_OK);
  ASSERT_EQ(kiln_func_new(CondPsum, branches, "cond", &cond), KILN_OK);
  funcs_.insert(funcs_.end(), {branches[0], branches[1], cond});
  // A psum inside a cond runs now (its values: test_spmd_control.cc).
  ASSERT_EQ(ShardMapOf(cond, mesh_, "i", "i", 0, &sm2), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Call(sm2, {n_ * 4}, &y), KILN_OK) << kiln_last_error();
#ifdef KILN_FAKE_NCCL_LIBRARY
  kiln_ctx *bare = nullptr;
  kiln_mesh *m = nullptr;
  kiln_options opts;
  kiln_options_init(&opts);
  opts.backend = KILN_BACKEND_CUDA;
  opts.nccl_library = "/nonexistent/libnccl.so.2";
  ASSERT_EQ(kiln_ctx_new(&opts, &bare), KILN_OK) << kiln_last_error();
  int64_t shape[] = {n_};
  const char *names[] = {"i"};
  ASSERT_EQ(kiln_mesh_new(bare, 1, shape, names, nullptr, &m), KILN_OK);
  EXPECT_EQ(ShardMapOf(f, m, "i", "", 1, &sm), KILN_ERR_COLLECTIVE);
  EXPECT_TRUE(Contains(kiln_last_error(), "NCCL")) << kiln_last_error();
  kiln_mesh_free(m);
  kiln_ctx_free(bare);
#endif
}

}  // namespace
