// jit(shard_map) over sharded arguments on CPU devices, as JAX runs it:
// operands already laid out as their in_specs are used in place (no
// gather: each device's program reads the very buffer of its shard),
// results are sharded arrays with NamedSharding(mesh, out_spec), and
// feeding them back gives the values of the gathered path (itself checked
// against JAX's goldens in test_spmd.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "kiln/interop.h"

namespace {

using dist_test::CpuDevices;

// (w, x) -> (w + psum(sum_rows(x * w)), x * w): a data-parallel update
// (w replicated, P()) and a per-example value (x split over "i").
kiln_tree *Step(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *w = kiln_arg(args, 0), *x = kiln_arg(args, 1);
  kiln_val *y = kiln_mul(t, x, w);
  int axis = 0;
  kiln_val *s = kiln_psum(t, kiln_sum(t, y, 1, &axis, 0), "i");
  kiln_tree *out[2] = {kiln_tree_val(kiln_add(t, w, s)), kiln_tree_val(y)};
  return kiln_tree_tuple(2, out);
}

// Records the address each device's program reads its w from.
struct Seen {
  std::mutex mu;
  std::vector<std::vector<float>> data; // per device: the operand its callback saw
};

kiln_status Record(void *user, int, const kiln_host_buffer *in, int, kiln_host_buffer *out) {
  Seen *s = static_cast<Seen *>(user);
  int32_t d;
  memcpy(&d, in[0].data, 4);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (d >= 0 && (size_t)d < s->data.size()) {
      const float *p = static_cast<const float *>(in[1].data);
      s->data[(size_t)d].assign(p, p + in[1].nbytes / sizeof(float));
    }
  }
  memset(out[0].data, 0, 4);
  return KILN_OK;
}

// Step with a host callback that reports w's address on every device.
kiln_tree *Watched(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *in[2] = {kiln_axis_index(t, "i"), kiln_arg(args, 0)}, *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_F32;
  kiln_host_callback(t, Record, user, 2, in, 1, &a, &r);
  kiln_tree *out = Step(t, args, nullptr);
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(out, 1))->u.val;
  kiln_tree *res[2] = {kiln_tree_clone(kiln_tree_child(out, 0)), kiln_tree_val(kiln_add(t, y, r))};
  kiln_tree_free(out);
  return kiln_tree_tuple(2, res);
}

class SpmdSharded : public CpuDevices {
 protected:
  void SetUp() override {
    CpuDevices::SetUp();
    mesh_ = Mesh({n_}, {"i"});
  }
  void TearDown() override {
    kiln_jit_free(jit_);
    kiln_func_free(sm_), kiln_func_free(f_);
    kiln_mesh_free(mesh_);
    CpuDevices::TearDown();
  }
  void Build(kiln_fn fn, void *user, const kiln_jit_options *opts = nullptr) {
    ASSERT_EQ(kiln_func_new(fn, user, "step", &f_), KILN_OK);
    kiln_pspec *rep = nullptr, *split = nullptr;
    ASSERT_EQ(kiln_pspec_parse("", &rep), KILN_OK);
    ASSERT_EQ(kiln_pspec_parse("i", &split), KILN_OK);
    kiln_tree *in_leaves[2] = {kiln_tree_ptr(rep), kiln_tree_ptr(split)};
    kiln_tree *out_leaves[2] = {kiln_tree_ptr(rep), kiln_tree_ptr(split)};
    kiln_tree *ins = kiln_tree_tuple(2, in_leaves), *outs = kiln_tree_tuple(2, out_leaves);
    ASSERT_EQ(kiln_shard_map(f_, mesh_, ins, outs, 1, &sm_), KILN_OK) << kiln_last_error();
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(rep), kiln_pspec_free(split);
    ASSERT_EQ(kiln_jit_new(ctx_, sm_, opts, &jit_), KILN_OK) << kiln_last_error();
  }
  // w: 3 floats, x: (2n, 3), on device 0 or laid out by `s` (NULL: plain).
  kiln_array *Put(const std::vector<float> &v, std::vector<int64_t> shape, kiln_sharding *s) {
    kiln_array *a = nullptr;
    if (s) {
      EXPECT_EQ(kiln_device_put_host(s, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                     v.size() * 4, &a), KILN_OK) << kiln_last_error();
      kiln_sharding_free(s);
    } else {
      EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                     v.size() * 4, &a), KILN_OK) << kiln_last_error();
    }
    return a;
  }
  std::vector<float> X() {
    std::vector<float> x((size_t)(6 * n_));
    for (size_t i = 0; i < x.size(); i++) x[i] = 0.5f * (float)i - 2;
    return x;
  }
  // k steps from w0: w <- step(w, x)[0]; returns the arrays of the last.
  void Run(bool sharded, int k, kiln_array **w_out, kiln_array **y_out) {
    kiln_array *w = Put({1, -2, 0.5f}, {3}, sharded ? Named(mesh_, "") : nullptr);
    kiln_array *x = Put(X(), {2 * n_, 3}, sharded ? Named(mesh_, "i") : nullptr);
    kiln_array *y = nullptr;
    for (int i = 0; i < k; i++) {
      kiln_array *in[2] = {w, x}, *out[2] = {nullptr, nullptr};
      ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, out), KILN_OK) << kiln_last_error();
      kiln_array_release(w), kiln_array_release(y);
      w = out[0], y = out[1];
    }
    kiln_array_release(x);
    *w_out = w, *y_out = y;
  }
  bool ShardedAs(const kiln_array *a, const char *spec) {
    kiln_sharding *have = nullptr, *want = Named(mesh_, spec);
    EXPECT_EQ(kiln_array_sharding(a, &have), KILN_OK);
    bool same = have && kiln_sharding_equal(have, want);
    kiln_sharding_free(have), kiln_sharding_free(want);
    return same;
  }
  // Options donating these top-level arguments (kept by the fixture).
  const kiln_jit_options *Donating(std::vector<int> argnums) {
    donate_ = argnums;
    opts_ = kiln_jit_options{};
    opts_.donate_argnums = donate_.data(), opts_.num_donate = (int)donate_.size();
    return &opts_;
  }
  // jit_ of f donating argument 0, and *plain the same without donation.
  void DonatingJits(kiln_func *f, kiln_jit **plain) {
    ASSERT_EQ(kiln_jit_new(ctx_, f, nullptr, plain), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_jit_new(ctx_, f, Donating({0}), &jit_), KILN_OK) << kiln_last_error();
  }
  std::vector<int> donate_;
  kiln_jit_options opts_{};
  kiln_mesh *mesh_ = nullptr;
  kiln_func *f_ = nullptr, *sm_ = nullptr;
  kiln_jit *jit_ = nullptr;
};

TEST_F(SpmdSharded, ResultsAreShardedAsTheOutSpecsWithTheGatheredValues) {
  Build(Step, nullptr);
  kiln_array *w[2], *y[2];
  Run(false, 3, &w[0], &y[0]);
  Run(true, 3, &w[1], &y[1]);
  ASSERT_TRUE(w[1] && y[1]);
  EXPECT_TRUE(ShardedAs(w[1], "")) << "a P() result is replicated over the mesh";
  EXPECT_TRUE(ShardedAs(y[1], "i"));
  EXPECT_EQ(kiln_array_shard_count(w[1]), n_);
  EXPECT_EQ(kiln_array_shard_count(y[1]), n_);
  for (int k = 0; k < 2; k++) {
    std::vector<float> a = ToHost(k ? y[0] : w[0]), b = ToHost(k ? y[1] : w[1]);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i], b[i]) << "result " << k << " at " << i;
  }
  // Every replica of w holds the same value.
  for (int64_t d = 0; d < n_; d++) {
    kiln_array *s = nullptr;
    ASSERT_EQ(kiln_array_shard(w[1], d, &s, nullptr, nullptr), KILN_OK);
    EXPECT_EQ(ToHost(s), ToHost(w[0])) << "replica " << d;
    kiln_array_release(s);
  }
  for (int k = 0; k < 2; k++) kiln_array_release(w[k]), kiln_array_release(y[k]);
}

const void *DataOf(kiln_array *a) {
  DLManagedTensorVersioned *t = nullptr;
  EXPECT_EQ(kiln_array_to_dlpack(a, KILN_DLPACK_STREAM_NONE, &t), KILN_OK) << kiln_last_error();
  const void *p = t ? t->dl_tensor.data : nullptr;
  if (t && t->deleter) t->deleter(t);
  return p;
}

// A body with a host callback runs fenced (spmd_run.c: on memory of the
// call's own, so that a device abandoned in the callback touches nothing of
// the caller's later): the callback sees a copy of its replica, not its
// address, so what is checked is that every device read its own replica.
TEST_F(SpmdSharded, AResultFedBackIsReadOnEveryDevice) {
  Seen seen;
  seen.data.assign((size_t)n_, {});
  Build(Watched, &seen);
  kiln_array *w = nullptr, *y = nullptr;
  Run(true, 1, &w, &y);
  ASSERT_TRUE(w);
  kiln_array *x = Put(X(), {2 * n_, 3}, Named(mesh_, "i"));
  kiln_array *in[2] = {w, x}, *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, out), KILN_OK) << kiln_last_error();
  for (int64_t d = 0; d < n_; d++) {
    kiln_array *s = nullptr;
    ASSERT_EQ(kiln_array_shard(w, d, &s, nullptr, nullptr), KILN_OK);
    EXPECT_EQ(seen.data[(size_t)d], ToHost(s)) << "device " << d << " did not read its replica";
    kiln_array_release(s);
  }
  EXPECT_TRUE(ShardedAs(out[0], ""));
  for (kiln_array *a : {w, y, x, out[0], out[1]}) kiln_array_release(a);
}

TEST_F(SpmdSharded, APlainOperandIsLaidOutAsItsInSpec) {
  Build(Step, nullptr);
  kiln_array *w0 = nullptr, *y0 = nullptr;
  Run(false, 1, &w0, &y0);
  kiln_array *w = Put({1, -2, 0.5f}, {3}, Named(mesh_, ""));
  kiln_array *x = Put(X(), {2 * n_, 3}, nullptr);  // on device 0 only
  kiln_array *in[2] = {w, x}, *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, out), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(ShardedAs(out[1], "i"));
  EXPECT_EQ(ToHost(out[0]), ToHost(w0));
  EXPECT_EQ(ToHost(out[1]), ToHost(y0));
  for (kiln_array *a : {w0, y0, w, x, out[0], out[1]}) kiln_array_release(a);
}

// As jax.jit(shard_map(f)) on ordinary arrays: the operands are laid out as
// their in_specs and the results come back sharded as the out_specs, so
// that the next call takes them in place. A function that does more than
// the shard_map keeps the results on the jit's device.
TEST_F(SpmdSharded, PlainArgumentsGiveShardedResultsToo) {
  Build(Step, nullptr);
  kiln_array *w = nullptr, *y = nullptr;
  Run(false, 2, &w, &y);
  ASSERT_TRUE(w && y);
  EXPECT_TRUE(ShardedAs(w, ""));
  EXPECT_TRUE(ShardedAs(y, "i"));
  kiln_array *w1 = nullptr, *y1 = nullptr;
  Run(true, 2, &w1, &y1);
  EXPECT_EQ(ToHost(w), ToHost(w1));
  EXPECT_EQ(ToHost(y), ToHost(y1));
  for (kiln_array *a : {w, y, w1, y1}) kiln_array_release(a);
}

kiln_tree *PsumI(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_psum(t, kiln_arg(args, 0), "i"));
}

// A psum of many elements (the CPU rendezvous splits the reduction over the
// participants, a part each): every element, a length that does not divide.
TEST_F(SpmdSharded, ALargePsumAgreesOnEveryElement) {
  const int64_t len = 5001;
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(PsumI, nullptr, "psum", &f), KILN_OK);
  kiln_pspec *split = nullptr, *rep = nullptr;
  ASSERT_EQ(kiln_pspec_parse("i", &split), KILN_OK);
  ASSERT_EQ(kiln_pspec_parse("", &rep), KILN_OK);
  kiln_tree *in_leaf = kiln_tree_ptr(split);
  kiln_tree *ins = kiln_tree_tuple(1, &in_leaf), *outs = kiln_tree_ptr(rep);
  ASSERT_EQ(kiln_shard_map(f, mesh_, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_tree_free(ins), kiln_tree_free(outs);
  kiln_pspec_free(split), kiln_pspec_free(rep);
  std::vector<float> v((size_t)(n_ * len));
  for (size_t i = 0; i < v.size(); i++) v[i] = (float)((i * 7) % 13) - 6;  // sums are exact
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, sm, nullptr, &j), KILN_OK);
  for (bool sharded : {false, true}) {
    kiln_array *x = Put(v, {n_ * len}, sharded ? Named(mesh_, "i") : nullptr), *y = nullptr;
    ASSERT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_OK) << kiln_last_error();
    std::vector<float> got = ToHost(y);
    ASSERT_EQ(got.size(), (size_t)len);
    for (int64_t e = 0; e < len; e++) {
      float want = 0;
      for (int64_t d = 0; d < n_; d++) want += v[(size_t)(d * len + e)];
      ASSERT_EQ(got[(size_t)e], want) << "element " << e << (sharded ? " (sharded)" : "");
    }
    kiln_array_release(x), kiln_array_release(y);
  }
  kiln_jit_free(j);
  kiln_func_free(sm), kiln_func_free(f);
}

// ---- donation (jax.jit(shard_map, donate_argnums), jax.pmap's) ----

// Each device's data address of a sharded array's shards.
std::vector<const void *> ShardData(kiln_array *a) {
  std::vector<const void *> v;
  for (int64_t d = 0; d < kiln_array_shard_count(a); d++) {
    kiln_array *s = nullptr;
    EXPECT_EQ(kiln_array_shard(a, d, &s, nullptr, nullptr), KILN_OK) << kiln_last_error();
    v.push_back(s ? DataOf(s) : nullptr);
    kiln_array_release(s);
  }
  return v;
}

// Donating w and x: both are deleted, the values are the undonated call's,
// and the results can be donated in turn.
TEST_F(SpmdSharded, DonatedArgumentsAreDeletedWithTheValuesUnchanged) {
  Build(Step, nullptr);
  kiln_array *w0 = nullptr, *y0 = nullptr;
  Run(true, 1, &w0, &y0);
  kiln_jit_free(jit_), kiln_func_free(sm_), kiln_func_free(f_);
  Build(Step, nullptr, Donating({0, 1}));
  kiln_array *w = Put({1, -2, 0.5f}, {3}, Named(mesh_, ""));
  kiln_array *x = Put(X(), {2 * n_, 3}, Named(mesh_, "i"));
  kiln_array *in[2] = {w, x}, *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, out), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(kiln_array_is_deleted(w));
  EXPECT_TRUE(kiln_array_is_deleted(x));
  EXPECT_EQ(ToHost(out[0]), ToHost(w0));
  EXPECT_EQ(ToHost(out[1]), ToHost(y0));
  EXPECT_TRUE(ShardedAs(out[0], ""));
  EXPECT_TRUE(ShardedAs(out[1], "i"));
  // A donated array used again fails the way a single-device jit's does.
  kiln_array *again[2] = {w, out[1]}, *res[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_jit_call_arrays(jit_, 2, again, 2, res), KILN_ERR_DELETED);
  EXPECT_NE(std::string(kiln_last_error()).find("deleted"), std::string::npos) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_deleted(out[1])) << "a failed call donates nothing";
  EXPECT_EQ(kiln_array_to_host(w, nullptr, 0), KILN_ERR_DELETED);
  // The results are donated in turn.
  kiln_array *next[2] = {out[0], out[1]};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, next, 2, res), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(kiln_array_is_deleted(out[0]) && kiln_array_is_deleted(out[1]));
  for (kiln_array *a : {w0, y0, w, x, out[0], out[1], res[0], res[1]}) kiln_array_release(a);
}

kiln_tree *Twice(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *a = kiln_arg(args, 0);
  return kiln_tree_val(kiln_psum(t, kiln_mul(t, a, kiln_scalar_f(t, 2.0)), "i"));
}

// Each device's result is written over its donated replica of a (a is
// dead once a * 2 is made), as XLA aliases a donated buffer: no new
// buffers, call after call.
TEST_F(SpmdSharded, EachDeviceWritesItsResultOverItsDonatedShard) {
  ASSERT_EQ(kiln_func_new(Twice, nullptr, "twice", &f_), KILN_OK);
  kiln_pspec *rep = nullptr;
  ASSERT_EQ(kiln_pspec_parse("", &rep), KILN_OK);
  kiln_tree *in_leaf = kiln_tree_ptr(rep);
  kiln_tree *ins = kiln_tree_tuple(1, &in_leaf), *outs = kiln_tree_ptr(rep);
  ASSERT_EQ(kiln_shard_map(f_, mesh_, ins, outs, 1, &sm_), KILN_OK) << kiln_last_error();
  kiln_tree_free(ins), kiln_tree_free(outs), kiln_pspec_free(rep);
  ASSERT_EQ(kiln_jit_new(ctx_, sm_, Donating({0}), &jit_), KILN_OK);
  kiln_array *a = Put({1, -2, 0.5f}, {3}, Named(mesh_, ""));
  std::vector<const void *> ap = ShardData(a);
  float k = 1;
  for (int step = 0; step < 3; step++) {
    kiln_array *b = nullptr;
    ASSERT_EQ(kiln_jit_call_arrays(jit_, 1, &a, 1, &b), KILN_OK) << kiln_last_error();
    EXPECT_TRUE(kiln_array_is_deleted(a));
    kiln_array_release(a);
    a = b;
    k *= 2 * (float)n_;
    EXPECT_EQ(ToHost(a), (std::vector<float>{k, -2 * k, 0.5f * k})) << "step " << step;
    EXPECT_EQ(ShardData(a), ap) << "step " << step << " took new buffers";
  }
  kiln_array_release(a);
}

kiln_tree *SinTwice(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_mul(t, kiln_sin(t, x), kiln_scalar_f(t, 2.0)));
}

// jit without a shard_map over a sharded argument runs shard by shard: a
// donated argument's shards go to each device's call and it is deleted.
TEST_F(SpmdSharded, PerShardJitDonatesTheShardsItRunsOn) {
  ASSERT_EQ(kiln_func_new(SinTwice, nullptr, "sin_twice", &f_), KILN_OK);
  kiln_jit *plain = nullptr;
  DonatingJits(f_, &plain);
  kiln_array *x = Put(X(), {2 * n_, 3}, Named(mesh_, "i")), *want = nullptr, *got = nullptr;
  ASSERT_EQ(kiln_jit_call_arrays(plain, 1, &x, 1, &want), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 1, &x, 1, &got), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(kiln_array_is_deleted(x));
  EXPECT_TRUE(ShardedAs(got, "i"));
  EXPECT_EQ(ToHost(got), ToHost(want));
  kiln_array *res = nullptr;
  EXPECT_EQ(kiln_jit_call_arrays(jit_, 1, &x, 1, &res), KILN_ERR_DELETED);
  kiln_jit_free(plain);
  for (kiln_array *a : {x, want, got}) kiln_array_release(a);
}

// A donated argument that must be laid out first (an ordinary array for a
// P('i') operand) is not donated, as JAX warns and keeps it: the call gives
// the undonated values and the argument stays usable.
TEST_F(SpmdSharded, ADonatedArgumentThatIsReshardedIsKept) {
  Build(Step, nullptr);
  kiln_array *w0 = nullptr, *y0 = nullptr;
  Run(false, 1, &w0, &y0);
  kiln_jit_free(jit_), kiln_func_free(sm_), kiln_func_free(f_);
  Build(Step, nullptr, Donating({1}));
  kiln_array *w = Put({1, -2, 0.5f}, {3}, Named(mesh_, ""));
  kiln_array *x = Put(X(), {2 * n_, 3}, nullptr);  // on device 0 only
  kiln_array *in[2] = {w, x}, *out[2] = {nullptr, nullptr};
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, out), KILN_OK) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_deleted(x));
  EXPECT_FALSE(kiln_array_is_deleted(w)) << "w is not donated";
  EXPECT_EQ(ToHost(x), X());
  EXPECT_EQ(ToHost(out[0]), ToHost(w0));
  EXPECT_EQ(ToHost(out[1]), ToHost(y0));
  for (kiln_array *a : {w0, y0, w, x, out[0], out[1]}) kiln_array_release(a);
}

// (p, g) -> (pmean(p * g), g * 2): a pmapped step.
kiln_tree *Update(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *p = kiln_arg(args, 0), *g = kiln_arg(args, 1);
  kiln_tree *out[2] = {kiln_tree_val(kiln_pmean(t, kiln_mul(t, p, g), "i")),
                       kiln_tree_val(kiln_mul(t, g, kiln_scalar_f(t, 2.0)))};
  return kiln_tree_tuple(2, out);
}

// jax.pmap(update, donate_argnums=(0,)): p's device copies become the new
// p's; passing p twice in one call is an error that names both leaves.
TEST_F(SpmdSharded, PmapDonatesItsArgumentsPerDevice) {
  ASSERT_EQ(kiln_func_new(Update, nullptr, "update", &f_), KILN_OK);
  ASSERT_EQ(kiln_pmap(ctx_, f_, "i", 0, nullptr, 0, 0, nullptr, &sm_), KILN_OK)
      << kiln_last_error();
  kiln_jit *plain = nullptr;
  DonatingJits(sm_, &plain);
  std::vector<float> pv((size_t)(4 * n_)), gv(pv.size());
  for (size_t i = 0; i < pv.size(); i++) pv[i] = (float)(i % 4), gv[i] = (float)i - 3;
  auto put = [&](const std::vector<float> &v) { return Put(v, {n_, 4}, Named(mesh_, "i")); };
  kiln_array *p = put(pv), *g = put(gv);
  kiln_array *want[2] = {nullptr, nullptr}, *got[2] = {nullptr, nullptr};
  kiln_array *in[2] = {p, g};
  ASSERT_EQ(kiln_jit_call_arrays(plain, 2, in, 2, want), KILN_OK) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_deleted(p));
  std::vector<const void *> pp = ShardData(p);
  ASSERT_EQ(kiln_jit_call_arrays(jit_, 2, in, 2, got), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(kiln_array_is_deleted(p));
  EXPECT_FALSE(kiln_array_is_deleted(g));
  EXPECT_EQ(ToHost(got[0]), ToHost(want[0]));
  EXPECT_EQ(ToHost(got[1]), ToHost(want[1]));
  EXPECT_EQ(ShardData(got[0]), pp);
  kiln_array *p2 = put(pv), *twice[2] = {p2, p2}, *res[2] = {nullptr, nullptr};
  EXPECT_EQ(kiln_jit_call_arrays(jit_, 2, twice, 2, res), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("donated argument leaf 0 is also passed as leaf 1"),
            std::string::npos) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_deleted(p2));
  kiln_jit_free(plain);
  for (kiln_array *a : {p, g, p2, want[0], want[1], got[0], got[1]}) kiln_array_release(a);
}

}  // namespace
