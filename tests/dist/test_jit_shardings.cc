// jit over sharded arguments (kiln_jit_options.in_shardings/out_shardings)
// and shard_map called on arguments laid out otherwise than its in_specs,
// against JAX (golden/jit_shardings.txt from jit_shardings.py), over 8 and
// over 2 CPU devices: values, result shardings, the cache key, the errors
// for equations that would need automatic partitioning, and the IR.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_support.h"

namespace {

using dist_test::Contains;
using dist_test::Ints;
using dist_test::Split;

struct Case {
  std::vector<std::string> f;  // the fields, as jit_shardings.py writes them
  int devices() const { return std::stoi(f[1]); }
};

std::vector<Case> Cases() {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/jit_shardings.txt");
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') out.push_back({Split(line, '|')});
  return out;
}

std::vector<float> Floats(const std::string &s) {
  std::vector<float> v;
  for (const std::string &x : Split(s, ','))
    if (!x.empty()) v.push_back(std::stof(x));
  return v;
}

// The functions of jit_shardings.py, by name (user points at the name).
kiln_tree *Fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const std::string &fn = *static_cast<const std::string *>(user);
  kiln_val *x = kiln_arg(args, 0), *y = nullptr;
  if (fn == "sin_mul_add") {
    y = kiln_add(t, kiln_mul(t, kiln_sin(t, x), kiln_arg(args, 1)), kiln_scalar_f(t, 1.0));
  } else if (fn == "row_sumsq") {
    const int axis = 1;
    y = kiln_reduce_sum(t, kiln_mul(t, x, x), 1, &axis);
  } else if (fn == "row_sum_split") {  // over the split dimension: refused
    const int axis = 0;
    y = kiln_reduce_sum(t, x, 1, &axis);
  } else if (fn == "bias_t") {
    kiln_val *b = kiln_arg(args, 1);
    const int64_t shape[2] = {kiln_val_shape(x)[0], kiln_val_shape(x)[1]};
    const int dims[1] = {1}, perm[2] = {1, 0};
    kiln_val *bb = kiln_broadcast_in_dim(t, b, 2, shape, dims);
    y = kiln_transpose(t, kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, 2.0)), bb), perm);
  } else if (fn == "exp_sub") {
    y = kiln_sub(t, kiln_exp(t, x), x);
  } else if (fn == "add") {
    y = kiln_add(t, x, kiln_arg(args, 1));
  }
  return y ? kiln_tree_val(y) : nullptr;
}

// shard_map's body: sin(x) + psum(x, 'data').
kiln_tree *SmapBody(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  return kiln_tree_val(kiln_add(t, kiln_sin(t, x), kiln_psum(t, x, "data")));
}

// shard_map(SmapBody) over mesh with in_specs (P('data', None),) and
// out_specs P('data', None); frees what it made.
struct RowsShardMap {
  explicit RowsShardMap(kiln_mesh *mesh) {
    EXPECT_EQ(kiln_func_new(SmapBody, nullptr, "body", &body), KILN_OK);
    EXPECT_EQ(kiln_pspec_parse("data, None", &spec), KILN_OK);
    kiln_tree *leaf = kiln_tree_ptr(spec);
    kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(spec);
    EXPECT_EQ(kiln_shard_map(body, mesh, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
    kiln_tree_free(ins);
    kiln_tree_free(outs);
  }
  ~RowsShardMap() {
    kiln_func_free(sm);
    kiln_func_free(body);
    kiln_pspec_free(spec);
  }
  kiln_func *body = nullptr, *sm = nullptr;
  kiln_pspec *spec = nullptr;
};

class JitShardings : public dist_test::CpuDevices {
 protected:
  kiln_mesh *CaseMesh(const Case &c) {
    std::vector<std::string> names = Split(c.f[3], ',');
    std::vector<const char *> p;
    for (const std::string &n : names) p.push_back(n.c_str());
    return Mesh(Ints(c.f[2], ','), p);
  }

  kiln_array *Host(const std::vector<int64_t> &shape, const std::vector<float> &v) {
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(Dev(0), KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * 4, &a), KILN_OK) << kiln_last_error();
    return a;
  }

  kiln_array *Put(const kiln_sharding *s, const std::vector<int64_t> &shape,
                  const std::vector<float> &v) {
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_device_put_host(s, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * 4, &a), KILN_OK) << kiln_last_error();
    return a;
  }

  void ExpectClose(const std::vector<float> &want, const std::vector<float> &got) {
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); i++)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
  }

  // jit(f) with the given shardings (NULL lists: unset), called on args.
  kiln_status Call(kiln_func *f, const std::vector<kiln_sharding *> &ins,
                   const std::vector<kiln_sharding *> &outs, std::vector<kiln_array *> args,
                   kiln_array **out, kiln_jit **keep = nullptr) {
    kiln_jit_options o = {};
    o.in_shardings = ins.data();
    o.num_in_shardings = (int)ins.size();
    o.out_shardings = outs.data();
    o.num_out_shardings = (int)outs.size();
    kiln_jit *j = nullptr;
    kiln_status st = kiln_jit_new(ctx_, f, &o, &j);
    if (st == KILN_OK) st = kiln_jit_call_arrays(j, args.size(), args.data(), 1, out);
    if (keep) *keep = j;
    else kiln_jit_free(j);
    return st;
  }
};

TEST_F(JitShardings, ElementwiseAndDimensionKeepingFunctionsMatchJax) {
  int ran = 0;
  for (const Case &c : Cases()) {
    if (c.devices() != n_ || c.f[4] == "shard_map") continue;
    SCOPED_TRACE(c.f[0]);
    kiln_mesh *mesh = CaseMesh(c);
    std::vector<std::string> specs = Split(c.f[5], ';'), shapes = Split(c.f[7], ';'),
                             vals = Split(c.f[8], ';');
    kiln_func *f = nullptr;
    ASSERT_EQ(kiln_func_new(Fn, const_cast<std::string *>(&c.f[4]), c.f[4].c_str(), &f), KILN_OK);
    std::vector<kiln_sharding *> in, out;
    for (const std::string &s : specs) in.push_back(Named(mesh, s.c_str()));
    if (c.f[6] != "-") out.push_back(Named(mesh, c.f[6].c_str()));
    kiln_sharding *want = Named(mesh, c.f[9].c_str());
    // Twice: arguments already laid out (their own shardings taken), then
    // ordinary arrays on device 0 that in_shardings reshard.
    for (int pass = 0; pass < 2; pass++) {
      std::vector<kiln_array *> args;
      for (size_t i = 0; i < specs.size(); i++)
        args.push_back(pass == 0 ? Put(in[i], Ints(shapes[i], ','), Floats(vals[i]))
                                 : Host(Ints(shapes[i], ','), Floats(vals[i])));
      kiln_array *y = nullptr;
      ASSERT_EQ(Call(f, pass == 0 ? std::vector<kiln_sharding *>{} : in, out, args, &y), KILN_OK)
          << kiln_last_error();
      std::vector<int64_t> shape = Ints(c.f[10], ',');
      ASSERT_EQ(kiln_array_rank(y), (int)shape.size());
      for (size_t d = 0; d < shape.size(); d++) EXPECT_EQ(kiln_array_shape(y)[d], shape[d]);
      kiln_sharding *got = nullptr;
      ASSERT_EQ(kiln_array_sharding(y, &got), KILN_OK);
      EXPECT_TRUE(kiln_sharding_equal(got, want)) << "result spec should be (" << c.f[9] << ")";
      ExpectClose(Floats(c.f[11]), ToHost(y));
      kiln_sharding_free(got);
      kiln_array_release(y);
      for (kiln_array *a : args) kiln_array_release(a);
    }
    for (kiln_sharding *s : in) kiln_sharding_free(s);
    for (kiln_sharding *s : out) kiln_sharding_free(s);
    kiln_sharding_free(want);
    kiln_func_free(f);
    kiln_mesh_free(mesh);
    ran++;
  }
  EXPECT_EQ(ran, 5);
}

TEST_F(JitShardings, ShardingsArePartOfTheCacheKey) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *rows = Named(mesh, "data, None"), *rep = Named(mesh, "");
  std::string fn = "sin_mul_add";
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(Fn, &fn, "f", &f), KILN_OK);
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f, nullptr, &j), KILN_OK);
  std::vector<float> v(8 * 4, 0.5f);
  auto run = [&](kiln_sharding *s) {
    kiln_array *a[2] = {Put(s, {8, 4}, v), Put(s, {8, 4}, v)}, *y = nullptr;
    ASSERT_EQ(kiln_jit_call_arrays(j, 2, a, 1, &y), KILN_OK) << kiln_last_error();
    ExpectClose(std::vector<float>(32, std::sin(0.5f) * 0.5f + 1), ToHost(y));
    for (kiln_array *x : {a[0], a[1], y}) kiln_array_release(x);
  };
  run(rows);
  EXPECT_EQ(kiln_jit_compile_count(j), 1);
  run(rep);  // the same avals, another sharding: a second program
  EXPECT_EQ(kiln_jit_compile_count(j), 2);
  run(rows);  // seen before: a cache hit
  run(rep);
  EXPECT_EQ(kiln_jit_compile_count(j), 2);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_sharding_free(rows);
  kiln_sharding_free(rep);
  kiln_mesh_free(mesh);
}

TEST_F(JitShardings, EquationsThatNeedPartitioningAskForShardMap) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  kiln_sharding *rows = Named(mesh, "data, None"), *rep = Named(mesh, "");
  std::vector<float> v(8 * 4, 1.f);
  std::string sum = "row_sum_split", add = "add";
  kiln_func *f = nullptr, *g = nullptr;
  ASSERT_EQ(kiln_func_new(Fn, &sum, "row_sum_split", &f), KILN_OK);
  ASSERT_EQ(kiln_func_new(Fn, &add, "add", &g), KILN_OK);
  kiln_array *x = Put(rows, {8, 4}, v), *r = Put(rep, {8, 4}, v), *y = nullptr;
  EXPECT_EQ(Call(f, {}, {}, {x}, &y), KILN_ERR_UNIMPLEMENTED);
  std::string msg = kiln_last_error();
  for (const char *part : {"jit(row_sum_split)", "reduce_sum", "dimension 0", "f32[8,4]",
                           "mesh axis 'data'", "use kiln_shard_map"})
    EXPECT_TRUE(Contains(msg, part)) << part << " in: " << msg;
  if (n_ > 1) {  // over one device nothing is split
    EXPECT_EQ(Call(g, {}, {}, {x, r}, &y), KILN_ERR_UNIMPLEMENTED);
    msg = kiln_last_error();
    EXPECT_TRUE(Contains(msg, "combines operand 0")) << msg;
    EXPECT_TRUE(Contains(msg, "PartitionSpec('data', None)")) << msg;
  }
  // in_shardings must give one per argument, or one for all.
  EXPECT_EQ(Call(g, {rows, rows, rows}, {}, {x, x}, &y), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "3 in_shardings for 2 top-level arguments"))
      << kiln_last_error();
  EXPECT_EQ(y, nullptr);
  kiln_array_release(x);
  kiln_array_release(r);
  kiln_func_free(f);
  kiln_func_free(g);
  kiln_sharding_free(rows);
  kiln_sharding_free(rep);
  kiln_mesh_free(mesh);
}

TEST_F(JitShardings, ShardMapTakesArgumentsOfOtherLayoutsAsJax) {
  int ran = 0;
  for (const Case &c : Cases()) {
    if (c.devices() != n_ || c.f[4] != "shard_map") continue;
    SCOPED_TRACE(c.f[0]);
    kiln_mesh *mesh = CaseMesh(c);
    {
      RowsShardMap f(mesh);
      kiln_sharding *s = Named(mesh, c.f[5].c_str());
      kiln_array *x = Put(s, Ints(c.f[7], ','), Floats(c.f[8])), *y = nullptr;
      ASSERT_EQ(Call(f.sm, {}, {}, {x}, &y), KILN_OK) << kiln_last_error();
      ExpectClose(Floats(c.f[11]), ToHost(y));
      for (kiln_array *a : {x, y}) kiln_array_release(a);
      kiln_sharding_free(s);
    }
    kiln_mesh_free(mesh);
    ran++;
  }
  EXPECT_EQ(ran, 3);
}

// The lowered program shows each move of an argument to a shard_map's
// in_spec as a device_put equation; an argument already laid out so, or an
// ordinary array, needs none.
TEST_F(JitShardings, LoweredIrShowsTheMoveToTheInSpec) {
  kiln_mesh *mesh = Mesh({n_}, {"data"});
  auto f = std::make_unique<RowsShardMap>(mesh);  // freed before the mesh it borrows
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, f->sm, nullptr, &j), KILN_OK);
  std::vector<float> v(2 * n_ * n_, 1.f);
  const std::string global = "f32[" + std::to_string(2 * n_) + "," + std::to_string(n_) + "]";
  const std::string put = "b:" + global + " = device_put[mesh=\"data=" + std::to_string(n_) +
                          "\" spec=\"data, None\"] a";
  for (const char *from : {"", "None, data", "data, None", "ordinary"}) {
    SCOPED_TRACE(from);
    bool ordinary = std::string(from) == "ordinary";
    kiln_sharding *s = ordinary ? nullptr : Named(mesh, from);
    kiln_array *x = ordinary ? Host({2 * n_, n_}, v) : Put(s, {2 * n_, n_}, v);
    kiln_tree *args = kiln_tree_tuple(1, std::vector<kiln_tree *>{kiln_tree_array(x)}.data());
    kiln_lowered *l = nullptr;
    char *text = nullptr;
    ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_lowered_as_text(l, &text), KILN_OK);
    bool moved = !ordinary && std::string(from) != "data, None";
    EXPECT_EQ(Contains(text, put), moved) << text;
    if (moved) {
      EXPECT_TRUE(Contains(text, "in_specs=\"data, None\"")) << text;
    }
    kiln_tree *y = nullptr;  // and the call agrees with the text
    ASSERT_EQ(kiln_jit_call(j, args, &y), KILN_OK) << kiln_last_error();
    free(text);
    kiln_tree_free(y);
    kiln_lowered_free(l);
    kiln_tree_free(args);
    kiln_array_release(x);
    kiln_sharding_free(s);
  }
  kiln_jit_free(j);
  f.reset();
  kiln_mesh_free(mesh);
}

}  // namespace
