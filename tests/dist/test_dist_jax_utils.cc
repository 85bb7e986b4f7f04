// The flax.jax_utils equivalents against flax itself on 8 and 2 CPU devices
// (golden/dist_jax_utils.txt): replicate's layout and unreplicate's values,
// and pad_shard_unpad around a pmap for batch sizes 0, 1, 7, 8, 9 and 63
// with min_device_batch unset and 3. The pmap is emulated the way it runs:
// one jitted program per device over that device's shard, the outputs
// assembled into arrays split over the devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dist_test_support.h"

namespace {

using dist_test::Contains;
using dist_test::Ints;
using dist_test::Split;

std::vector<std::vector<std::string>> Records(int devices, const std::string &kind) {
  std::ifstream in(KILN_GOLDEN_DIR "/dist_jax_utils.txt");
  EXPECT_TRUE(in.good());
  std::vector<std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, '|');
    if (f.size() > 2 && std::stoi(f[0]) == devices && f[1] == kind) out.push_back(f);
  }
  return out;
}

std::vector<int64_t> ShapeOf(const kiln_array *a) {
  return std::vector<int64_t>(kiln_array_shape(a), kiln_array_shape(a) + kiln_array_rank(a));
}

// Values of any f32 or i32 array as doubles.
std::vector<double> Values(const kiln_array *a) {
  std::vector<double> out((size_t)kiln_array_size(a));
  if (kiln_array_dtype(a) == KILN_I32) {
    std::vector<int32_t> v(out.size());
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * 4), KILN_OK) << kiln_last_error();
    for (size_t i = 0; i < v.size(); i++) out[i] = v[i];
  } else {
    std::vector<float> v(out.size());
    EXPECT_EQ(kiln_array_to_host(a, v.data(), v.size() * 4), KILN_OK) << kiln_last_error();
    for (size_t i = 0; i < v.size(); i++) out[i] = v[i];
  }
  return out;
}

std::vector<double> Doubles(const std::string &s) {
  std::vector<double> out;
  for (const std::string &x : Split(s, ' '))
    if (!x.empty()) out.push_back(std::stod(x));
  return out;
}

class DistJaxUtils : public dist_test::CpuDevices {
 protected:
  kiln_array *Host(kiln_dtype dt, std::vector<int64_t> shape, const void *data, size_t nbytes) {
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(Dev(0), dt, (int)shape.size(), shape.data(), data, nbytes, &a),
              KILN_OK)
        << kiln_last_error();
    return a;
  }

  // {'b': f32 3.0, 'i': arange(4) i32, 'w': arange(6) * 0.5 as f32[2,3]}
  kiln_tree *ReplicaTree() {
    float b = 3.0f, w[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};
    int32_t i[4] = {0, 1, 2, 3};
    kiln_array *arrays[3] = {Host(KILN_F32, {}, &b, 4), Host(KILN_I32, {4}, i, sizeof i),
                             Host(KILN_F32, {2, 3}, w, sizeof w)};
    const char *keys[3] = {"b", "i", "w"};
    kiln_tree *kids[3];
    for (int k = 0; k < 3; k++) kids[k] = kiln_tree_array(arrays[k]), kiln_array_release(arrays[k]);
    return kiln_tree_dict(3, keys, kids);
  }
};

TEST_F(DistJaxUtils, ReplicateAndUnreplicateMatchFlax) {
  kiln_tree *tree = ReplicaTree(), *rep = nullptr, *un = nullptr;
  ASSERT_EQ(kiln_replicate(ctx_, tree, 0, nullptr, &rep), KILN_OK) << kiln_last_error();
  auto reps = Records(n_, "replicate");
  ASSERT_EQ(reps.size(), 3u);
  for (const auto &f : reps) {
    SCOPED_TRACE(f[2]);
    kiln_array *x = kiln_tree_leaf_array(kiln_tree_get(rep, f[2].c_str()));
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(ShapeOf(x), Ints(f[3], ','));
    EXPECT_EQ(kiln_dtype_name(kiln_array_dtype(x)), f[4]);
    std::vector<std::string> shards = Split(f[5], ';');
    ASSERT_EQ(kiln_array_shard_count(x), (int64_t)shards.size());
    kiln_array *orig = kiln_tree_leaf_array(kiln_tree_get(tree, f[2].c_str()));
    for (size_t i = 0; i < shards.size(); i++) {
      kiln_array *sh = nullptr;
      int64_t start[KILN_MAX_RANK], stop[KILN_MAX_RANK];
      ASSERT_EQ(kiln_array_shard(x, (int64_t)i, &sh, start, stop), KILN_OK);
      std::vector<std::string> dev_rng = Split(shards[i], '@');
      EXPECT_EQ(kiln_device_index(kiln_array_device(sh)), std::stoi(dev_rng[0]));
      std::string rng;
      for (int d = 0; d < kiln_array_rank(x); d++)
        rng += (d ? "," : "") + std::to_string(start[d]) + ":" + std::to_string(stop[d]);
      EXPECT_EQ(rng, dev_rng[1]);
      EXPECT_EQ(Values(sh), Values(orig));  // every device holds the whole leaf
      kiln_array_release(sh);
    }
  }
  ASSERT_EQ(kiln_unreplicate(rep, &un), KILN_OK) << kiln_last_error();
  auto uns = Records(n_, "unreplicate");
  ASSERT_EQ(uns.size(), 3u);
  for (const auto &f : uns) {
    SCOPED_TRACE(f[2]);
    kiln_array *x = kiln_tree_leaf_array(kiln_tree_get(un, f[2].c_str()));
    ASSERT_NE(x, nullptr);
    EXPECT_FALSE(kiln_array_is_sharded(x));
    EXPECT_EQ(ShapeOf(x), Ints(f[3], ','));
    EXPECT_EQ(kiln_device_index(kiln_array_device(x)), std::stoi(f[4]));
    EXPECT_EQ(Values(x), Doubles(f[5]));
  }
  // unreplicate of a fully replicated array is its first copy; a scalar stays.
  kiln_tree_free(un);
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *all = Named(mesh, "");
  kiln_array *w = kiln_tree_leaf_array(kiln_tree_get(tree, "w")), *ws = nullptr;
  ASSERT_EQ(kiln_device_put_sharded(w, all, &ws), KILN_OK);
  kiln_tree *wt = kiln_tree_array(ws);
  ASSERT_EQ(kiln_unreplicate(wt, &un), KILN_OK) << kiln_last_error();
  EXPECT_EQ(ShapeOf(kiln_tree_leaf_array(un)), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values(kiln_tree_leaf_array(un)), Values(w));
  kiln_tree_free(un);
  kiln_tree_free(wt);
  kiln_array_release(ws);
  kiln_sharding_free(all);
  kiln_mesh_free(mesh);
  kiln_tree_free(rep);
  kiln_tree_free(tree);
}

// kiln_replicate's layout put on a pmap's sharding (axis "data" over the
// same devices, split along axis 0) is the same blocks on the same devices:
// the result shares the replicas' buffers and carries the new sharding.
// Over the devices in another order it is a real move, with equal values.
TEST_F(DistJaxUtils, ReplicasPutOnAnEquivalentShardingAreNotCopied) {
  kiln_tree *tree = ReplicaTree(), *rep = nullptr;
  ASSERT_EQ(kiln_replicate(ctx_, tree, 0, nullptr, &rep), KILN_OK) << kiln_last_error();
  kiln_array *w = kiln_tree_leaf_array(kiln_tree_get(rep, "w"));
  std::vector<kiln_device *> order;
  for (int i = 0; i < n_; i++) order.push_back(Dev(i));
  kiln_pspec *spec = nullptr;
  ASSERT_EQ(kiln_pspec_parse("data", &spec), KILN_OK);
  for (bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "devices reversed" : "same devices");
    std::vector<kiln_device *> devs(order);
    if (reversed) std::reverse(devs.begin(), devs.end());
    kiln_mesh *mesh = Mesh({(int64_t)n_}, {"data"}, devs.data());
    kiln_sharding *s = nullptr, *got = nullptr;
    ASSERT_EQ(kiln_sharding_named(mesh, spec, &s), KILN_OK) << kiln_last_error();
    kiln_array *moved = nullptr;
    ASSERT_EQ(kiln_device_put_sharded(w, s, &moved), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_array_sharding(moved, &got), KILN_OK);
    EXPECT_TRUE(kiln_sharding_equal(got, s));
    for (int64_t i = 0; i < n_; i++) {
      kiln_array *a = nullptr, *b = nullptr;
      ASSERT_EQ(kiln_array_shard(w, i, &a, nullptr, nullptr), KILN_OK);
      ASSERT_EQ(kiln_array_shard(moved, i, &b, nullptr, nullptr), KILN_OK);
      EXPECT_EQ(a == b, !reversed) << "shard " << i;
      kiln_array_release(a);
      kiln_array_release(b);
    }
    EXPECT_EQ(Values(moved), Values(w));
    kiln_array_release(moved);
    kiln_sharding_free(got);
    kiln_sharding_free(s);
    kiln_mesh_free(mesh);
  }
  kiln_pspec_free(spec);
  kiln_tree_free(rep);
  kiln_tree_free(tree);
}

TEST_F(DistJaxUtils, ReplicateOntoChosenDevicesAndErrors) {
  kiln_tree *tree = ReplicaTree(), *rep = nullptr;
  std::vector<kiln_device *> devs = {Dev(n_ - 1), Dev(0)};
  ASSERT_EQ(kiln_replicate(ctx_, tree, 2, devs.data(), &rep), KILN_OK) << kiln_last_error();
  kiln_array *w = kiln_tree_leaf_array(kiln_tree_get(rep, "w")), *sh = nullptr;
  EXPECT_EQ(ShapeOf(w), (std::vector<int64_t>{2, 2, 3}));
  ASSERT_EQ(kiln_array_shard(w, 0, &sh, nullptr, nullptr), KILN_OK);
  EXPECT_EQ(kiln_array_device(sh), Dev(n_ - 1));
  kiln_array_release(sh);
  kiln_tree *un = nullptr;
  ASSERT_EQ(kiln_unreplicate(rep, &un), KILN_OK);
  EXPECT_EQ(kiln_array_device(kiln_tree_leaf_array(kiln_tree_get(un, "w"))), Dev(n_ - 1));
  kiln_tree_free(un);
  kiln_tree_free(rep);

  const char *keys[2] = {"ok", "bad"};
  kiln_tree *kids[2] = {kiln_tree_clone(tree), kiln_tree_ptr(nullptr)};
  kiln_tree *mixed = kiln_tree_dict(2, keys, kids);
  EXPECT_EQ(kiln_replicate(ctx_, mixed, 0, nullptr, &rep), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "the leaf at ['bad'] is not an array"))
      << kiln_last_error();
  EXPECT_EQ(rep, nullptr);
  kiln_device *twice[2] = {Dev(0), Dev(0)};
  EXPECT_EQ(kiln_replicate(ctx_, tree, 2, twice, &rep), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "listed twice")) << kiln_last_error();
  kiln_tree_free(mixed);
  kiln_tree_free(tree);
}

// pmap(f, static_broadcasted_argnums=0) as it runs: f(s, x, d) = {'a': x *
// s + 1, 'n': d['y'] * 2, 's': x.sum(-1)} jitted once per device over that
// device's block [1, r, ...] of x and d['y'].
struct Pmap {
  kiln_ctx *ctx;
  std::vector<kiln_jit *> jits;
  double scale = 0;
  std::string seen;  // the shapes the wrapped function got: "x;y"
  int calls = 0;

  static kiln_tree *Body(kiln_trace *t, const kiln_tree *args, void *user) {
    double s = *(const double *)user;
    kiln_val *x = kiln_arg(args, 0), *y = kiln_arg(args, 1);
    int last = 2;
    const char *keys[3] = {"a", "n", "s"};
    kiln_val *outs[3] = {kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, s)), kiln_scalar_f(t, 1)),
                         kiln_mul(t, y, kiln_scalar_i(t, 2)), kiln_reduce_sum(t, x, 1, &last)};
    return kiln_dict_of(3, keys, outs);
  }

  static kiln_status Apply(void *user, const kiln_tree *args, kiln_tree **out) {
    Pmap *p = (Pmap *)user;
    p->calls++;
    const kiln_leaf *s = kiln_tree_leaf_get(kiln_tree_child(args, 0));
    if (!s || s->kind != KILN_LEAF_PTR) return KILN_ERR_ARGUMENT;  // static: forwarded as is
    p->scale = *(const double *)s->u.ptr;
    kiln_array *x = kiln_tree_leaf_array(kiln_tree_child(args, 1));
    kiln_array *y = kiln_tree_leaf_array(kiln_tree_get(kiln_tree_child(args, 2), "y"));
    if (!x || !y) return KILN_ERR_ARGUMENT;
    auto str = [](const kiln_array *a) {
      std::string r;
      for (int d = 0; d < kiln_array_rank(a); d++)
        r += (d ? "," : "") + std::to_string(kiln_array_shape(a)[d]);
      return r;
    };
    p->seen = str(x) + ";" + str(y);
    int64_t d = kiln_array_shard_count(x);
    std::vector<kiln_array *> outs[3];
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < d && !st; i++) {
      kiln_array *in[2] = {nullptr, nullptr}, *res[3] = {nullptr, nullptr, nullptr};
      st = kiln_array_shard(x, i, &in[0], nullptr, nullptr);
      if (!st) st = kiln_array_shard(y, i, &in[1], nullptr, nullptr);
      if (!st) st = kiln_jit_call_arrays(p->jits[(size_t)i], 2, in, 3, res);
      for (int k = 0; k < 3; k++) outs[k].push_back(res[k]);
      kiln_array_release(in[0]);
      kiln_array_release(in[1]);
    }
    kiln_sharding *layout = nullptr;
    if (!st) st = kiln_array_sharding(x, &layout);
    const char *keys[3] = {"a", "n", "s"};
    kiln_tree *kids[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3 && !st; k++) {
      kiln_array *global = nullptr;
      std::vector<int64_t> shape(kiln_array_shape(outs[k][0]),
                                 kiln_array_shape(outs[k][0]) + kiln_array_rank(outs[k][0]));
      shape[0] = d;
      st = kiln_array_from_shards(layout, kiln_array_dtype(outs[k][0]), (int)shape.size(),
                                  shape.data(), outs[k].data(), &global);
      kids[k] = st ? nullptr : kiln_tree_array(global);
      kiln_array_release(global);
    }
    if (!st) {
      *out = kiln_tree_dict(3, keys, kids);  // takes the children
      kids[0] = kids[1] = kids[2] = nullptr;
    }
    for (int k = 0; k < 3; k++) {
      kiln_tree_free(kids[k]);
      for (kiln_array *a : outs[k]) kiln_array_release(a);
    }
    kiln_sharding_free(layout);
    return st;
  }
};

class DistPadShardUnpad : public DistJaxUtils {
 protected:
  void SetUp() override {
    DistJaxUtils::SetUp();
    ASSERT_EQ(kiln_func_new(Pmap::Body, &pmap_.scale, "f", &f_), KILN_OK);
    for (int i = 0; i < n_; i++) {
      kiln_jit_options o = {};
      o.device = i;
      kiln_jit *j = nullptr;
      ASSERT_EQ(kiln_jit_new(ctx_, f_, &o, &j), KILN_OK);
      pmap_.jits.push_back(j);
    }
  }
  void TearDown() override {
    for (kiln_jit *j : pmap_.jits) kiln_jit_free(j);
    kiln_func_free(f_);
    DistJaxUtils::TearDown();
  }

  // (2.0 as a static pointer leaf, x f32[b,3], {'y': y i32[b]})
  kiln_tree *Args(int64_t b, int64_t by = -1) {
    std::vector<float> x((size_t)(3 * b));
    std::vector<int32_t> y((size_t)(by < 0 ? b : by));
    for (size_t i = 0; i < x.size(); i++) x[i] = 0.5f * (float)i;
    for (size_t i = 0; i < y.size(); i++) y[i] = (int32_t)i;
    kiln_array *xa = Host(KILN_F32, {b, 3}, x.data(), x.size() * 4);
    kiln_array *ya = Host(KILN_I32, {(int64_t)y.size()}, y.data(), y.size() * 4);
    const char *key = "y";
    kiln_tree *yt = kiln_tree_array(ya);
    kiln_tree *kids[3] = {kiln_tree_ptr(&scale_), kiln_tree_array(xa), kiln_tree_dict(1, &key, &yt)};
    kiln_array_release(xa);
    kiln_array_release(ya);
    return kiln_tree_tuple(3, kids);
  }

  kiln_padded *Wrap(int64_t min_device_batch, int static_return) {
    kiln_pad_shard_unpad_options o;
    kiln_pad_shard_unpad_options_init(&o);
    o.min_device_batch = min_device_batch;
    o.static_return = static_return;
    kiln_padded *p = nullptr;
    EXPECT_EQ(kiln_pad_shard_unpad(ctx_, Pmap::Apply, &pmap_, &o, &p), KILN_OK)
        << kiln_last_error();
    return p;
  }

  // The wrapped pmap called on Args(b) with min_device_batch ("-": unset);
  // the result's leaf `key` (a new tree in *out, NULL on failure).
  kiln_array *Run(const std::string &b, const std::string &mdb, int static_return,
                  const std::string &key, kiln_tree **out) {
    kiln_padded *p = Wrap(mdb == "-" ? 0 : std::stoll(mdb), static_return);
    kiln_tree *args = Args(std::stoll(b));
    *out = nullptr;
    EXPECT_EQ(kiln_padded_call(p, args, out), KILN_OK) << kiln_last_error();
    kiln_tree_free(args);
    kiln_padded_free(p);
    return *out ? kiln_tree_leaf_array(kiln_tree_get(*out, key.c_str())) : nullptr;
  }

  double scale_ = 2.0;
  Pmap pmap_{};
  kiln_func *f_ = nullptr;
};

TEST_F(DistPadShardUnpad, MatchesFlaxForEveryBatchSize) {
  auto recs = Records(n_, "psu");
  ASSERT_EQ(recs.size(), 36u);
  for (const auto &f : recs) {
    SCOPED_TRACE("b=" + f[2] + " min_device_batch=" + f[3] + " leaf " + f[5]);
    kiln_tree *out = nullptr;
    kiln_array *leaf = Run(f[2], f[3], 0, f[5], &out);
    ASSERT_NE(leaf, nullptr);
    EXPECT_EQ(pmap_.seen, f[4]);
    EXPECT_EQ(pmap_.scale, 2.0);
    EXPECT_FALSE(kiln_array_is_sharded(leaf));
    EXPECT_EQ(kiln_array_device(leaf), Dev(0));
    EXPECT_EQ(ShapeOf(leaf), Ints(f[6], ','));
    EXPECT_EQ(Values(leaf), Doubles(f.size() > 7 ? f[7] : ""));
    kiln_tree_free(out);
  }
}

TEST_F(DistPadShardUnpad, StaticReturnKeepsThePaddedLayout) {
  auto recs = Records(n_, "psu_static");
  ASSERT_EQ(recs.size(), 36u);
  for (const auto &f : recs) {
    SCOPED_TRACE("b=" + f[2] + " min_device_batch=" + f[3] + " leaf " + f[4]);
    kiln_tree *out = nullptr;
    kiln_array *leaf = Run(f[2], f[3], 1, f[4], &out);
    ASSERT_NE(leaf, nullptr);
    EXPECT_EQ(kiln_array_shard_count(leaf), n_);
    EXPECT_EQ(ShapeOf(leaf), Ints(f[5], ','));
    kiln_tree_free(out);
  }
}

TEST_F(DistPadShardUnpad, ExplainsWhatItCannotPad) {
  kiln_padded *p = Wrap(0, 0);
  kiln_tree *out = nullptr;
  // Leaves with different batch sizes (flax: "Inconsistent batch-sizes").
  kiln_tree *args = Args(7, 8);
  EXPECT_EQ(kiln_padded_call(p, args, &out), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "inconsistent batch sizes: 7 at [1], 8 at [2]['y']"))
      << kiln_last_error();
  kiln_tree_free(args);
  // A leaf that is not an array, named by its key path.
  const char *key = "y";
  kiln_tree *bad = kiln_tree_ptr(nullptr);
  kiln_tree *kids[2] = {kiln_tree_ptr(&scale_), kiln_tree_dict(1, &key, &bad)};
  args = kiln_tree_tuple(2, kids);
  EXPECT_EQ(kiln_padded_call(p, args, &out), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "the leaf at [1]['y'] is not an array"))
      << kiln_last_error();
  kiln_tree_free(args);
  // A scalar has no batch axis; nothing but static arguments has no batch.
  float one = 1;
  kiln_array *s = Host(KILN_F32, {}, &one, 4);
  kiln_tree *kids2[2] = {kiln_tree_ptr(&scale_), kiln_tree_array(s)};
  args = kiln_tree_tuple(2, kids2);
  EXPECT_EQ(kiln_padded_call(p, args, &out), KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "argument leaf [1] is a scalar f32[]"))
      << kiln_last_error();
  kiln_tree_free(args);
  kiln_array_release(s);
  kiln_tree *only = kiln_tree_ptr(&scale_);
  args = kiln_tree_tuple(1, &only);
  EXPECT_EQ(kiln_padded_call(p, args, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "no argument leaf")) << kiln_last_error();
  kiln_tree_free(args);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(pmap_.calls, 0);
  kiln_padded_free(p);
}

}  // namespace
