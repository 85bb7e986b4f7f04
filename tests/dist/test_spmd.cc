// shard_map, pmap and the collectives against JAX (golden/spmd_shard_map.txt,
// from spmd_shard_map.py): every collective over every axis combination of
// 1-D and 2-D meshes of 8 and of 2 CPU devices, tiled and untiled, partial
// permutations, replicated and sharded results, the replication check, and
// pmap with in_axes/out_axes; each through the fused path and the reference
// executor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dist_test_support.h"
#include "kiln/kiln.h"

namespace {

using dist_test::Ints;
using dist_test::Split;

std::vector<double> Doubles(const std::string &s) {
  std::vector<double> out;
  for (const std::string &x : Split(s, ',')) out.push_back(std::stod(x));
  return out;
}

struct Case {
  std::vector<std::string> f;  // the raw fields
  std::map<std::string, std::string> prm;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> mesh_names;
  int64_t devices = 1;
};

std::vector<Case> LoadCases() {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/spmd_shard_map.txt");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Case c;
    c.f = Split(line, '|');
    c.mesh_shape = Ints(c.f[1]);
    c.mesh_names = Split(c.f[2], ',');
    for (int64_t s : c.mesh_shape) c.devices *= s;
    for (const std::string &kv : Split(c.f[6], ';'))
      if (!kv.empty()) c.prm[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    cases.push_back(c);
  }
  return cases;
}

const std::vector<Case> &Cases() {
  static std::vector<Case> cases = LoadCases();
  return cases;
}

std::string Axes(const Case &c) {
  std::string a = c.prm.at("axes");
  for (char &ch : a)
    if (ch == '+') ch = ',';
  return a;
}

// ---- the body of every shard_map case ----

kiln_tree *Body(kiln_trace *t, const kiln_tree *args, void *user) {
  const Case &c = *static_cast<const Case *>(user);
  kiln_val *x = kiln_arg(args, 0), *y = nullptr;
  const std::string &op = c.f[5];
  std::string axes = Axes(c);
  auto I = [&](const char *k) { return (int)std::stoll(c.prm.at(k)); };
  if (op == "psum") y = kiln_psum(t, x, axes.c_str());
  else if (op == "pmax") y = kiln_pmax(t, x, axes.c_str());
  else if (op == "pmin") y = kiln_pmin(t, x, axes.c_str());
  else if (op == "pmean") y = kiln_pmean(t, x, axes.c_str());
  else if (op == "axis_index") y = kiln_add(t, x, kiln_axis_index(t, axes.c_str()));
  else if (op == "all_gather") y = kiln_all_gather(t, x, axes.c_str(), I("axis"), I("tiled"));
  else if (op == "psum_scatter") y = kiln_psum_scatter(t, x, axes.c_str(), I("dim"), I("tiled"));
  else if (op == "all_to_all")
    y = kiln_all_to_all(t, x, axes.c_str(), I("split"), I("concat"), I("tiled"));
  else if (op == "ppermute") {
    std::vector<int> flat;
    for (const std::string &p : Split(c.prm.at("perm"), '+')) {
      flat.push_back(std::stoi(p.substr(0, p.find('>'))));
      flat.push_back(std::stoi(p.substr(p.find('>') + 1)));
    }
    y = kiln_ppermute(t, x, axes.c_str(), (int)flat.size() / 2,
                      reinterpret_cast<const int(*)[2]>(flat.data()));
  }
  return y ? kiln_tree_val(y) : nullptr;
}

// ---- host data ----

std::vector<char> ToBytes(kiln_dtype dt, const std::vector<double> &v) {
  std::vector<char> b(v.size() * kiln_dtype_size(dt));
  for (size_t i = 0; i < v.size(); i++) {
    char *p = b.data() + i * kiln_dtype_size(dt);
    if (dt == KILN_F32) { float x = (float)v[i]; memcpy(p, &x, 4); }
    else if (dt == KILN_BF16) { uint16_t x = kiln_f32_to_bf16((float)v[i]); memcpy(p, &x, 2); }
    else if (dt == KILN_I32) { int32_t x = (int32_t)v[i]; memcpy(p, &x, 4); }
    else if (dt == KILN_I8) { int8_t x = (int8_t)v[i]; memcpy(p, &x, 1); }
    else ADD_FAILURE() << "dtype " << kiln_dtype_name(dt);
  }
  return b;
}

std::vector<double> FromArray(kiln_array *a) {
  kiln_dtype dt = kiln_array_dtype(a);
  std::vector<char> b(kiln_array_nbytes(a));
  EXPECT_EQ(kiln_array_to_host(a, b.data(), b.size()), KILN_OK) << kiln_last_error();
  std::vector<double> v(b.size() / kiln_dtype_size(dt));
  for (size_t i = 0; i < v.size(); i++) {
    const char *p = b.data() + i * kiln_dtype_size(dt);
    if (dt == KILN_F32) { float x; memcpy(&x, p, 4); v[i] = x; }
    else if (dt == KILN_BF16) { uint16_t x; memcpy(&x, p, 2); v[i] = kiln_bf16_to_f32(x); }
    else if (dt == KILN_I32) { int32_t x; memcpy(&x, p, 4); v[i] = x; }
    else if (dt == KILN_I8) { int8_t x; memcpy(&x, p, 1); v[i] = x; }
  }
  return v;
}

// JAX's test tolerances per dtype (jtu.default_tolerance): integers exact.
double Tol(kiln_dtype dt) { return dt == KILN_BF16 ? 1e-2 : dt == KILN_F32 ? 1e-5 : 0; }

void ExpectClose(const std::string &name, kiln_dtype dt, const std::vector<double> &want,
                 const std::vector<double> &got) {
  ASSERT_EQ(want.size(), got.size()) << name;
  double tol = Tol(dt);
  for (size_t i = 0; i < want.size(); i++)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << name << " element " << i;
}

struct Mode {
  int devices;
  kiln_executor executor;
};

class Spmd : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = GetParam().devices;
    opts.executor = GetParam().executor;
    ASSERT_EQ(kiln_ctx_new(&opts, &ctx_), KILN_OK) << kiln_last_error();
  }
  void TearDown() override { kiln_ctx_free(ctx_); }

  kiln_mesh *Mesh(const Case &c) {
    std::vector<const char *> names;
    for (const std::string &n : c.mesh_names) names.push_back(n.c_str());
    kiln_mesh *m = nullptr;
    EXPECT_EQ(kiln_mesh_new(ctx_, (int)names.size(), c.mesh_shape.data(), names.data(), nullptr, &m),
              KILN_OK) << kiln_last_error();
    return m;
  }

  kiln_array *Array(kiln_dtype dt, const std::string &shape, const std::string &vals) {
    std::vector<int64_t> s = Ints(shape);
    std::vector<char> b = ToBytes(dt, Doubles(vals));
    kiln_array *a = nullptr;
    kiln_device *dev = nullptr;
    EXPECT_EQ(kiln_device_get(ctx_, 0, &dev), KILN_OK);
    EXPECT_EQ(kiln_array_from_host(dev, dt, (int)s.size(), s.data(), b.data(),
                                   b.size(), &a), KILN_OK) << kiln_last_error();
    return a;
  }

  // Runs f on the arrays through jit; on success the one result leaf.
  kiln_status Run(const kiln_func *f, std::vector<kiln_array *> args, kiln_array **out) {
    kiln_jit *j = nullptr;
    kiln_status st = kiln_jit_new(ctx_, f, nullptr, &j);
    if (st == KILN_OK) st = kiln_jit_call_arrays(j, args.size(), args.data(), 1, out);
    kiln_jit_free(j);
    return st;
  }

  kiln_ctx *ctx_ = nullptr;
};

TEST_P(Spmd, ShardMapCollectivesMatchJax) {
  int ran = 0;
  for (const Case &c : Cases()) {
    if (c.f[5] == "pmap" || c.devices != GetParam().devices) continue;
    SCOPED_TRACE(c.f[0] + " " + c.f[6] + " " + c.f[7] + " out_spec=(" + c.f[4] + ")");
    kiln_dtype dt;
    ASSERT_EQ(kiln_dtype_from_name(c.f[7].c_str(), &dt), KILN_OK);
    kiln_mesh *mesh = Mesh(c);
    kiln_pspec *in_spec = nullptr, *out_spec = nullptr;
    ASSERT_EQ(kiln_pspec_parse(c.f[3].c_str(), &in_spec), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_pspec_parse(c.f[4].c_str(), &out_spec), KILN_OK) << kiln_last_error();
    kiln_tree *leaf = kiln_tree_ptr(in_spec);
    kiln_tree *in_specs = kiln_tree_tuple(1, &leaf);
    kiln_tree *out_specs = kiln_tree_ptr(out_spec);
    kiln_func *body = nullptr, *sm = nullptr;
    ASSERT_EQ(kiln_func_new(Body, const_cast<Case *>(&c), c.f[5].c_str(), &body), KILN_OK);
    bool expect_error = c.f[11] == "ERROR";
    ASSERT_EQ(kiln_shard_map(body, mesh, in_specs, out_specs, expect_error, &sm), KILN_OK)
        << kiln_last_error();
    kiln_tree_free(in_specs);
    kiln_tree_free(out_specs);
    kiln_pspec_free(in_spec);
    kiln_pspec_free(out_spec);
    kiln_array *x = Array(dt, c.f[8], c.f[9]), *y = nullptr;
    kiln_status st = Run(sm, {x}, &y);
    if (expect_error) {
      EXPECT_NE(st, KILN_OK);
      std::string msg = kiln_last_error();
      EXPECT_NE(msg.find("not provably replicated"), std::string::npos) << msg;
      bool names_axis = false;
      for (const std::string &a : Split(Axes(c), ','))
        names_axis = names_axis || msg.find("mesh axis '" + a + "'") != std::string::npos;
      EXPECT_TRUE(names_axis) << msg;
    } else {
      ASSERT_EQ(st, KILN_OK) << kiln_last_error();
      std::vector<int64_t> shape = Ints(c.f[10]);
      ASSERT_EQ(kiln_array_rank(y), (int)shape.size());
      for (size_t d = 0; d < shape.size(); d++) EXPECT_EQ(kiln_array_shape(y)[d], shape[d]);
      ExpectClose(c.f[0], dt, Doubles(c.f[11]), FromArray(y));
    }
    kiln_array_release(x);
    kiln_array_release(y);
    kiln_func_free(sm);
    kiln_func_free(body);
    kiln_mesh_free(mesh);
    ran++;
  }
  EXPECT_GT(ran, 50);
}

// ---- pmap ----

struct PmapCase {
  bool replicated;
};

kiln_tree *PmapBody(kiln_trace *t, const kiln_tree *args, void *user) {
  const PmapCase &pc = *static_cast<const PmapCase *>(user);
  kiln_val *s = kiln_psum(t, kiln_mul(t, kiln_arg(args, 0), kiln_arg(args, 1)), "i");
  if (!pc.replicated) s = kiln_add(t, s, kiln_axis_index(t, "i"));
  return s ? kiln_tree_val(s) : nullptr;
}

TEST_P(Spmd, PmapMatchesJax) {
  int ran = 0;
  for (const Case &c : Cases()) {
    if (c.f[5] != "pmap" || c.devices != GetParam().devices) continue;
    SCOPED_TRACE(c.f[0]);
    std::vector<int> in_axes;
    for (const std::string &a : Split(c.f[3], '+'))
      in_axes.push_back(a == "N" ? KILN_PMAP_NONE : std::stoi(a));
    int out_axes = c.f[4] == "N" ? KILN_PMAP_NONE : std::stoi(c.f[4]);
    PmapCase pc{out_axes == KILN_PMAP_NONE};
    kiln_func *body = nullptr, *pm = nullptr;
    ASSERT_EQ(kiln_func_new(PmapBody, &pc, "f", &body), KILN_OK);
    ASSERT_EQ(kiln_pmap(ctx_, body, "i", (int)in_axes.size(), in_axes.data(), out_axes, 0, nullptr,
                        &pm), KILN_OK) << kiln_last_error();
    kiln_array *x = Array(KILN_F32, c.f[8], c.f[9]), *y = Array(KILN_F32, c.f[10], c.f[11]);
    kiln_array *out = nullptr;
    ASSERT_EQ(Run(pm, {x, y}, &out), KILN_OK) << kiln_last_error();
    std::vector<int64_t> shape = Ints(c.f[12]);
    ASSERT_EQ(kiln_array_rank(out), (int)shape.size());
    for (size_t d = 0; d < shape.size(); d++) EXPECT_EQ(kiln_array_shape(out)[d], shape[d]);
    ExpectClose(c.f[0], KILN_F32, Doubles(c.f[13]), FromArray(out));
    kiln_array_release(x);
    kiln_array_release(y);
    kiln_array_release(out);
    kiln_func_free(pm);
    kiln_func_free(body);
    ran++;
  }
  EXPECT_EQ(ran, 4);
}

INSTANTIATE_TEST_SUITE_P(Devices, Spmd,
                         ::testing::Values(Mode{8, KILN_EXECUTOR_DEFAULT},
                                           Mode{2, KILN_EXECUTOR_DEFAULT},
                                           Mode{8, KILN_EXECUTOR_REFERENCE},
                                           Mode{2, KILN_EXECUTOR_REFERENCE}),
                         [](const ::testing::TestParamInfo<Mode> &i) {
                           return std::to_string(i.param.devices) + "_devices_" +
                                  kiln_executor_name(i.param.executor);
                         });

}  // namespace
