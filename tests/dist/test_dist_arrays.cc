// Sharded arrays: device_put of host data onto named shardings against
// jax.device_put on 8 and 2 CPU devices (golden/dist_arrays.txt: every
// shard's device, index ranges and values), resharding device to device
// between every pair of layouts, gathering onto one device, and the
// lifetime and error rules of sharded arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "dist_test_support.h"

namespace {

using dist_test::Contains;
using dist_test::Ints;
using dist_test::Split;

// One golden case: a layout of arange(size) * 0.5 over a mesh.
struct Case {
  std::string mesh, names, spec, shape_text, shards, line;
  std::vector<int64_t> shape;
};

std::vector<Case> LoadCases(int devices) {
  std::ifstream in(KILN_GOLDEN_DIR "/dist_arrays.txt");
  EXPECT_TRUE(in.good());
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, '|');
    EXPECT_EQ(f.size(), 6u) << line;
    if (f.size() != 6 || std::stoi(f[0]) != devices) continue;
    out.push_back({f[1], f[2], f[3], f[4], f[5], line, Ints(f[4], ',')});
  }
  return out;
}

std::vector<float> Arange(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v((size_t)n);
  for (int64_t i = 0; i < n; i++) v[(size_t)i] = 0.5f * (float)i;
  return v;
}

class DistArrays : public dist_test::CpuDevices {
 protected:
  kiln_mesh *MeshOf(const Case &c) {
    std::vector<std::string> names = Split(c.names, ',');
    std::vector<const char *> cnames;
    for (const std::string &n : names) cnames.push_back(n.c_str());
    // The names' storage dies here: kiln_mesh_new copies them.
    return Mesh(Ints(c.mesh, 'x'), cnames);
  }

  // Every shard of a as the golden case lists them: device, ranges, values.
  void ExpectLayout(const kiln_array *a, const Case &c) {
    std::vector<std::string> shards = Split(c.shards, ';');
    ASSERT_EQ(kiln_array_shard_count(a), (int64_t)shards.size());
    EXPECT_TRUE(kiln_array_is_sharded(a));
    int rank = (int)c.shape.size();
    for (size_t i = 0; i < shards.size(); i++) {
      SCOPED_TRACE("shard " + std::to_string(i));
      std::vector<std::string> dev_rest = Split(shards[i], '@');
      std::vector<std::string> rng_vals = Split(dev_rest[1], '=');
      kiln_array *sh = nullptr;
      std::vector<int64_t> start(rank + 1), stop(rank + 1);
      ASSERT_EQ(kiln_array_shard(a, (int64_t)i, &sh, start.data(), stop.data()), KILN_OK)
          << kiln_last_error();
      EXPECT_FALSE(kiln_array_is_sharded(sh));
      EXPECT_EQ(kiln_device_index(kiln_array_device(sh)), std::stoi(dev_rest[0]));
      std::vector<std::string> dims = rng_vals[0].empty() ? std::vector<std::string>()
                                                          : Split(rng_vals[0], ',');
      ASSERT_EQ((int)dims.size(), rank);
      for (int d = 0; d < rank; d++) {
        EXPECT_EQ(std::to_string(start[d]) + ":" + std::to_string(stop[d]), dims[d]);
        EXPECT_EQ(kiln_array_shape(sh)[d], stop[d] - start[d]);
      }
      std::vector<float> want;
      for (const std::string &v : Split(rng_vals[1], ' ')) want.push_back(std::stof(v));
      EXPECT_EQ(ToHost(sh), want);
      kiln_array_release(sh);
    }
    EXPECT_EQ(ToHost(a), Arange(c.shape));
  }
};

TEST_F(DistArrays, HostDataMatchesJaxDevicePut) {
  std::vector<Case> cases = LoadCases(n_);
  ASSERT_GT(cases.size(), 40u) << "no golden cases for " << n_ << " devices";
  for (const Case &c : cases) {
    SCOPED_TRACE(c.line.substr(0, 80));
    kiln_mesh *mesh = MeshOf(c);
    kiln_sharding *s = Named(mesh, c.spec.c_str());
    kiln_mesh_free(mesh);  // the sharding keeps it alive
    std::vector<float> host = Arange(c.shape);
    kiln_array *a = nullptr;
    ASSERT_EQ(kiln_device_put_host(s, KILN_F32, (int)c.shape.size(), c.shape.data(), host.data(),
                                   host.size() * sizeof(float), &a),
              KILN_OK)
        << kiln_last_error();
    kiln_sharding_free(s);  // and so does the array
    std::fill(host.begin(), host.end(), -1.0f);  // the caller may reuse its data
    ExpectLayout(a, c);
    kiln_sharding *back = nullptr;
    ASSERT_EQ(kiln_array_sharding(a, &back), KILN_OK);
    EXPECT_EQ(kiln_sharding_device_count(back), n_);
    kiln_sharding_free(back);
    kiln_array_release(a);
  }
}

// Every layout to every other on the same mesh and shape, device to device:
// the result must be laid out exactly as a direct put of the host data.
TEST_F(DistArrays, ReshardsBetweenEveryPairOfLayouts) {
  std::vector<Case> cases = LoadCases(n_);
  std::map<std::string, std::vector<const Case *>> groups;
  for (const Case &c : cases) groups[c.mesh + "|" + c.shape_text].push_back(&c);
  int pairs = 0;
  for (auto &g : groups) {
    kiln_mesh *mesh = MeshOf(*g.second[0]);
    const std::vector<int64_t> &shape = g.second[0]->shape;
    std::vector<float> host = Arange(shape);
    for (const Case *from : g.second) {
      kiln_sharding *sf = Named(mesh, from->spec.c_str());
      kiln_array *a = nullptr;
      ASSERT_EQ(kiln_device_put_host(sf, KILN_F32, (int)shape.size(), shape.data(), host.data(),
                                     host.size() * sizeof(float), &a),
                KILN_OK)
          << kiln_last_error();
      for (const Case *to : g.second) {
        SCOPED_TRACE(from->spec + " -> " + to->line.substr(0, 60));
        kiln_sharding *st = Named(mesh, to->spec.c_str());
        kiln_array *b = nullptr;
        ASSERT_EQ(kiln_device_put_sharded(a, st, &b), KILN_OK) << kiln_last_error();
        EXPECT_EQ(a == b, kiln_sharding_equal(sf, st) != 0);
        ExpectLayout(b, *to);
        kiln_array_release(b);
        kiln_sharding_free(st);
        pairs++;
      }
      kiln_array_release(a);
      kiln_sharding_free(sf);
    }
    kiln_mesh_free(mesh);
  }
  EXPECT_GT(pairs, 200);
}

TEST_F(DistArrays, GathersOntoOneDeviceAndSplitsAnOrdinaryArray) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *rows = Named(mesh, "data"), *cols = Named(mesh, "None, data");
  std::vector<int64_t> shape = {2 * n_, 3 * n_};
  std::vector<float> host = Arange(shape);
  kiln_array *plain = nullptr, *split = nullptr, *back = nullptr, *moved = nullptr;
  ASSERT_EQ(kiln_array_from_host(Dev(n_ - 1), KILN_F32, 2, shape.data(), host.data(),
                                 host.size() * sizeof(float), &plain),
            KILN_OK);
  ASSERT_EQ(kiln_device_put_sharded(plain, cols, &split), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_array_shard_count(split), n_);
  kiln_array *shard = nullptr;
  int64_t start[2], stop[2];
  ASSERT_EQ(kiln_array_shard(split, 1, &shard, start, stop), KILN_OK);
  EXPECT_EQ(start[1], 3);
  EXPECT_EQ(stop[1], 6);
  EXPECT_EQ(kiln_array_shape(shard)[1], 3);
  EXPECT_EQ(ToHost(shard)[0], host[3]);
  kiln_array_release(shard);
  // Gathering: kiln_device_put onto one device, and a single-device sharding.
  ASSERT_EQ(kiln_device_put(split, Dev(0), &back), KILN_OK) << kiln_last_error();
  EXPECT_FALSE(kiln_array_is_sharded(back));
  EXPECT_EQ(kiln_array_device(back), Dev(0));
  EXPECT_EQ(ToHost(back), host);
  kiln_sharding *single = nullptr;
  ASSERT_EQ(kiln_sharding_single(Dev(n_ - 1), &single), KILN_OK);
  ASSERT_EQ(kiln_device_put_sharded(split, single, &moved), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_array_shard_count(moved), 1);
  EXPECT_EQ(ToHost(moved), host);
  kiln_array *same = nullptr;
  ASSERT_EQ(kiln_device_put_sharded(plain, single, &same), KILN_OK);
  EXPECT_EQ(same, plain);
  kiln_sharding *of_plain = nullptr;
  ASSERT_EQ(kiln_array_sharding(plain, &of_plain), KILN_OK);
  EXPECT_TRUE(kiln_sharding_equal(of_plain, single));
  EXPECT_FALSE(kiln_sharding_equal(of_plain, rows));
  ASSERT_EQ(kiln_array_shard(plain, 0, &shard, start, stop), KILN_OK);
  EXPECT_EQ(shard, plain);
  EXPECT_EQ(stop[0], shape[0]);
  kiln_array_release(shard);
  char desc[256];
  kiln_array_describe(split, desc, sizeof desc);
  EXPECT_TRUE(Contains(desc, "{sharded: " + Name(0) + "," + Name(1))) << desc;
  for (kiln_array *x : {plain, split, back, moved, same}) kiln_array_release(x);
  for (kiln_sharding *x : {rows, cols, single, of_plain}) kiln_sharding_free(x);
  kiln_mesh_free(mesh);
}

// The array's own layout drawn as its sharding's (whose drawing
// test_dist_sharding checks against JAX's).
TEST_F(DistArrays, VisualizesAnArraysLayout) {
  kiln_mesh *mesh = Mesh({n_ / 2, 2}, {"data", "model"});
  kiln_sharding *s = Named(mesh, "model, data");
  int64_t shape[2] = {4, 2 * n_};
  std::vector<float> host(8 * n_);
  kiln_array *a = nullptr, *plain = nullptr;
  ASSERT_EQ(kiln_device_put_host(s, KILN_F32, 2, shape, host.data(), host.size() * 4, &a),
            KILN_OK);
  char *want = nullptr, *got = nullptr;
  ASSERT_EQ(kiln_visualize_sharding(s, 2, shape, &want), KILN_OK);
  ASSERT_EQ(kiln_visualize_array_sharding(a, &got), KILN_OK) << kiln_last_error();
  EXPECT_STREQ(got, want);
  free(got);
  ASSERT_EQ(kiln_device_put(a, Dev(n_ - 1), &plain), KILN_OK);
  ASSERT_EQ(kiln_visualize_array_sharding(plain, &got), KILN_OK) << kiln_last_error();
  const char *kind = kiln_ctx_backend(ctx_) == KILN_BACKEND_CUDA ? "GPU " : "CPU ";
  EXPECT_TRUE(Contains(got, "| " + (kind + std::to_string(n_ - 1)) + " |")) << got;
  EXPECT_EQ(std::count(got, got + strlen(got), '\n'), 3);  // one cell
  free(got);
  free(want);
  kiln_array_release(plain);
  kiln_array_release(a);
  kiln_sharding_free(s);
  kiln_mesh_free(mesh);
}

// Splitting a replicated [256, 8] into columns takes 256 runs per device:
// on CUDA they go through host staging instead of 256 tiny peer copies, and
// back into rows device to device.
TEST_F(DistArrays, ReshardsManySmallRunsAndBack) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *all = Named(mesh, ""), *cols = Named(mesh, "None, data"),
                *rows = Named(mesh, "data");
  std::vector<int64_t> shape = {256, 4 * n_};
  std::vector<float> host = Arange(shape);
  kiln_array *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(kiln_device_put_host(all, KILN_F32, 2, shape.data(), host.data(), host.size() * 4,
                                 &a),
            KILN_OK);
  ASSERT_EQ(kiln_device_put_sharded(a, cols, &b), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_device_put_sharded(b, rows, &c), KILN_OK) << kiln_last_error();
  EXPECT_EQ(ToHost(b), host);
  EXPECT_EQ(ToHost(c), host);
  kiln_array *last = nullptr;
  int64_t start[2], stop[2];
  ASSERT_EQ(kiln_array_shard(b, n_ - 1, &last, start, stop), KILN_OK);
  std::vector<float> col = ToHost(last), want;
  for (int64_t r = 0; r < 256; r++)
    for (int64_t k = start[1]; k < stop[1]; k++) want.push_back(host[(size_t)(r * shape[1] + k)]);
  EXPECT_EQ(col, want);
  kiln_array_release(last);
  for (kiln_array *x : {a, b, c}) kiln_array_release(x);
  for (kiln_sharding *x : {all, cols, rows}) kiln_sharding_free(x);
  kiln_mesh_free(mesh);
}

TEST_F(DistArrays, FromShardsChecksDevicesAndShapes) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *s = Named(mesh, "data");
  std::vector<int64_t> shard_shape = {2, 2}, global = {2 * n_, 2};
  std::vector<kiln_array *> shards(n_);
  for (int i = 0; i < n_; i++) {
    float v[4] = {(float)i, (float)i, (float)i, (float)i};
    ASSERT_EQ(kiln_array_from_host(Dev(i), KILN_F32, 2, shard_shape.data(), v, sizeof v,
                                   &shards[i]),
              KILN_OK);
  }
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_shards(s, KILN_F32, 2, global.data(), shards.data(), &a), KILN_OK)
      << kiln_last_error();
  std::vector<float> got = ToHost(a);
  for (int i = 0; i < 2 * n_ * 2; i++) EXPECT_EQ(got[i], (float)(i / 4)) << i;
  kiln_array_release(a);
  std::swap(shards[0], shards[1]);
  EXPECT_EQ(kiln_array_from_shards(s, KILN_F32, 2, global.data(), shards.data(), &a),
            KILN_ERR_WRONG_DEVICE);
  EXPECT_TRUE(Contains(kiln_last_error(), "shard 0 f32[2,2]{" + Name(1) + "} is not on " + Name(0)))
      << kiln_last_error();
  std::swap(shards[0], shards[1]);
  global[1] = 4;
  EXPECT_EQ(kiln_array_from_shards(s, KILN_F32, 2, global.data(), shards.data(), &a),
            KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "needs f32[2,4]")) << kiln_last_error();
  global = {2 * n_ + 1, 2};
  EXPECT_EQ(kiln_array_from_shards(s, KILN_F32, 2, global.data(), shards.data(), &a),
            KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "does not divide evenly")) << kiln_last_error();
  for (kiln_array *x : shards) kiln_array_release(x);
  kiln_sharding_free(s);
  kiln_mesh_free(mesh);
}

TEST_F(DistArrays, SingleDeviceOperationsRefuseShardedArraysAndDeletionReachesShards) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *s = Named(mesh, "data");
  int64_t shape[1] = {4 * n_};
  std::vector<float> host = Arange({4 * n_});
  kiln_array *a = nullptr, *other = nullptr;
  ASSERT_EQ(kiln_device_put_host(s, KILN_F32, 1, shape, host.data(), host.size() * 4, &a),
            KILN_OK);
  EXPECT_EQ(kiln_device_put_host(s, KILN_F32, 1, shape, host.data(), 4, &other),
            KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "bytes given")) << kiln_last_error();
  shape[0] = 4 * n_ + 1;
  std::vector<float> odd(4 * n_ + 1);
  EXPECT_EQ(kiln_device_put_host(s, KILN_F32, 1, shape, odd.data(), odd.size() * 4, &other),
            KILN_ERR_SHAPE);
  EXPECT_TRUE(Contains(kiln_last_error(), "dimension 0 of size")) << kiln_last_error();
  EXPECT_EQ(other, nullptr);

  // A jitted elementwise function runs shard by shard over a sharded
  // argument (tests/dist/test_jit_shardings.cc covers the rest).
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new([](kiln_trace *t, const kiln_tree *args, void *) -> kiln_tree * {
              kiln_val *x = kiln_arg(args, 0);
              return kiln_tree_val(kiln_add(t, x, x));
            }, nullptr, "double", &f),
            KILN_OK);
  kiln_jit *jit = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f, nullptr, &jit), KILN_OK);
  kiln_array *out = nullptr;
  ASSERT_EQ(kiln_jit_call_arrays(jit, 1, &a, 1, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_array_shard_count(out), n_);
  std::vector<float> doubled = ToHost(out);
  for (size_t i = 0; kiln_ctx_backend(ctx_) == KILN_BACKEND_CPU && i < doubled.size(); i++)
    EXPECT_EQ(doubled[i], 2 * host[i]);  // the stand-in CUDA driver computes no kernels
  kiln_array_release(out);
  kiln_jit_free(jit);
  kiln_func_free(f);
  DLManagedTensorVersioned *dl = nullptr;
  EXPECT_EQ(kiln_array_to_dlpack(a, KILN_DLPACK_STREAM_NONE, &dl), KILN_ERR_WRONG_DEVICE);
  EXPECT_TRUE(Contains(kiln_last_error(), "is sharded; export one shard")) << kiln_last_error();

  kiln_array *shard = nullptr;
  ASSERT_EQ(kiln_array_shard(a, n_ - 1, &shard, nullptr, nullptr), KILN_OK);
  EXPECT_EQ(kiln_array_shard(a, n_, &other, nullptr, nullptr), KILN_ERR_OUT_OF_RANGE);
  ASSERT_EQ(kiln_array_block_until_ready(a), KILN_OK);
  ASSERT_EQ(kiln_array_delete(a), KILN_OK);
  EXPECT_TRUE(kiln_array_is_deleted(shard));
  EXPECT_EQ(kiln_array_to_host(a, host.data(), host.size() * 4), KILN_ERR_DELETED);
  uint64_t in_use = 1;
  ASSERT_EQ(kiln_device_memory_in_use(Dev(0), &in_use), KILN_OK);
  EXPECT_EQ(in_use, 0u);
  kiln_array_release(shard);
  kiln_array_release(a);
  kiln_sharding_free(s);
  kiln_mesh_free(mesh);
}

}  // namespace
