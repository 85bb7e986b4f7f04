// shard_map / pmap / collectives beyond the value goldens of test_spmd.cc:
// unbound axes (trace and verifier), the IR text, spec trees matched as
// prefixes with errors naming the key path, tree collectives, shard_map
// nested in traced code (threads vs. the reference executor), and a device
// failing mid-collective.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/text.h"

namespace {

using kiln_test::Contains;

class SpmdApi : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = Ctx(KILN_EXECUTOR_DEFAULT); }
  void TearDown() override {
    kiln_mesh_free(mesh_);
    kiln_ctx_free(ctx_);
  }
  static kiln_ctx *Ctx(kiln_executor ex) {
    kiln_options opts;
    kiln_options_init(&opts);
    opts.backend = KILN_BACKEND_CPU;
    opts.num_cpu_devices = 8;
    opts.executor = ex;
    kiln_ctx *ctx = nullptr;
    EXPECT_EQ(kiln_ctx_new(&opts, &ctx), KILN_OK) << kiln_last_error();
    return ctx;
  }
  kiln_mesh *Mesh1D(kiln_ctx *ctx) {
    int64_t n = 8;
    const char *names[] = {"i"};
    kiln_mesh *m = nullptr;
    EXPECT_EQ(kiln_mesh_new(ctx, 1, &n, names, nullptr, &m), KILN_OK) << kiln_last_error();
    return m;
  }
  kiln_array *Iota(kiln_ctx *ctx, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i * 0.5f - 3;
    kiln_device *dev = nullptr;
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
    EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, (int)shape.size(), shape.data(), v.data(),
                                   v.size() * 4, &a), KILN_OK) << kiln_last_error();
    return a;
  }
  // shard_map(f) over mesh_ with in_specs (P(spec),) and out_specs P(out).
  kiln_func *ShardMap(kiln_func *f, const char *in, const char *out, int check_rep = 1) {
    kiln_pspec *ps = nullptr, *po = nullptr;
    EXPECT_EQ(kiln_pspec_parse(in, &ps), KILN_OK);
    EXPECT_EQ(kiln_pspec_parse(out, &po), KILN_OK);
    kiln_tree *leaf = kiln_tree_ptr(ps);
    kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(po);
    kiln_func *sm = nullptr;
    EXPECT_EQ(kiln_shard_map(f, mesh_, ins, outs, check_rep, &sm), KILN_OK) << kiln_last_error();
    kiln_tree_free(ins), kiln_tree_free(outs);
    kiln_pspec_free(ps), kiln_pspec_free(po);
    return sm;
  }
  kiln_status Call(kiln_ctx *ctx, const kiln_func *f, kiln_array *x, std::vector<float> *out) {
    kiln_jit *j = nullptr;
    kiln_array *y = nullptr;
    kiln_status st = kiln_jit_new(ctx, f, nullptr, &j);
    if (st == KILN_OK) st = kiln_jit_call_arrays(j, 1, &x, 1, &y);
    if (st == KILN_OK) {
      out->resize(kiln_array_nbytes(y) / 4);
      st = kiln_array_to_host(y, out->data(), kiln_array_nbytes(y));
    }
    kiln_array_release(y);
    kiln_jit_free(j);
    return st;
  }
  kiln_ctx *ctx_ = nullptr;
  kiln_mesh *mesh_ = nullptr;
};

kiln_tree *PsumOf(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_tree_val(kiln_psum(t, kiln_arg(args, 0), static_cast<const char *>(user)));
}

TEST_F(SpmdApi, UnboundAxisNamesTheAxisAndTheBoundOnes) {
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(PsumOf, (void *)"data", "f", &f), KILN_OK);
  kiln_array *x = Iota(ctx_, {8});
  std::vector<float> out;
  EXPECT_NE(Call(ctx_, f, x, &out), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "unbound axis name 'data'")) << kiln_last_error();
  EXPECT_TRUE(Contains(kiln_last_error(), "no enclosing shard_map or pmap")) << kiln_last_error();
  mesh_ = Mesh1D(ctx_);
  kiln_func *sm = ShardMap(f, "i", "i");
  EXPECT_NE(Call(ctx_, sm, x, &out), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "unbound axis name 'data' (bound axes: 'i')"))
      << kiln_last_error();
  kiln_func_free(sm), kiln_func_free(f);
  kiln_array_release(x);
}

TEST_F(SpmdApi, VerifierChecksAxisBindingAndSize) {
  const char *good =
      "{ lambda ; a:f32[8]. let b:f32[8] = shard_map[check_rep=True in_specs=\"i\" jaxpr={ lambda ; "
      "c:f32[1]. let d:f32[1] = psum[axis_name=\"i\" axis_size=8] c in (d,) } mesh=\"i=8\" "
      "out_specs=\"i\"] a in (b,) }";
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse(good, &p), KILN_OK) << kiln_last_error();
  char *text = nullptr;
  ASSERT_EQ(kir_print(p, &text), KILN_OK);
  kir_program *q = nullptr;
  ASSERT_EQ(kir_parse(text, &q), KILN_OK) << text;
  EXPECT_TRUE(kir_program_equal(p, q));
  free(text);
  kir_program_free(p), kir_program_free(q);
  std::string unbound = good;
  unbound.replace(unbound.find("axis_name=\"i\""), 13, "axis_name=\"j\"");
  EXPECT_NE(kir_parse(unbound.c_str(), &p), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "axis name 'j' is not bound (bound axes: i)"))
      << kiln_last_error();
  std::string size = good;
  size.replace(size.find("axis_size=8"), 11, "axis_size=4");
  EXPECT_NE(kir_parse(size.c_str(), &p), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "axis_size=4")) << kiln_last_error();
  std::string shape = good;  // the body takes whole arrays where the spec splits them
  for (size_t at; (at = shape.find("f32[1]")) != std::string::npos;) shape.replace(at, 6, "f32[2]");
  EXPECT_NE(kir_parse(shape.c_str(), &p), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "operand 0 shards to f32[1] where the body takes f32[2]"))
      << kiln_last_error();
}

TEST_F(SpmdApi, JaxprShowsTheShardMapAndItsCollectives) {
  mesh_ = Mesh1D(ctx_);
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(PsumOf, (void *)"i", "f", &f), KILN_OK);
  kiln_func *sm = ShardMap(f, "i", "");
  kiln_array *x = Iota(ctx_, {16});
  kiln_tree *leaf = kiln_tree_array(x);
  kiln_tree *args = kiln_tree_tuple(1, &leaf);
  char *text = nullptr;
  ASSERT_EQ(kiln_make_jaxpr(ctx_, sm, args, &text), KILN_OK) << kiln_last_error();
  std::string s = text;
  for (const char *part : {"b:f32[2] = shard_map[", "check_rep=True", "in_specs=\"i\"",
                           "jaxpr={ lambda ; c:f32[2]. let",
                           "d:f32[2] = psum[axis_name=\"i\" axis_size=8] c", "mesh=\"i=8\"",
                           "out_specs=\"\""})
    EXPECT_TRUE(Contains(s, part)) << part << " in " << s;
  free(text);
  kiln_tree_free(args);
  kiln_array_release(x);
  kiln_func_free(sm), kiln_func_free(f);
}

kiln_tree *First(kiln_trace *, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_arg_path(args, "[0]['w']"));
}

TEST_F(SpmdApi, SpecTreesAreMatchedAsPrefixesAndErrorsNameTheKeyPath) {
  int64_t shape[] = {4, 2};
  const char *names[] = {"a", "b"};
  ASSERT_EQ(kiln_mesh_new(ctx_, 2, shape, names, nullptr, &mesh_), KILN_OK);
  kiln_func *f = nullptr, *sm = nullptr;
  ASSERT_EQ(kiln_func_new(First, nullptr, "f", &f), KILN_OK);
  kiln_pspec *pa = nullptr, *pb = nullptr;
  ASSERT_EQ(kiln_pspec_parse("a", &pa), KILN_OK);
  ASSERT_EQ(kiln_pspec_parse("a, b", &pb), KILN_OK);
  kiln_tree *leaf = kiln_tree_ptr(pa);  // one spec for the whole dict argument
  kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(pb);
  ASSERT_EQ(kiln_shard_map(f, mesh_, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_array *w = Iota(ctx_, {8, 2}), *v = Iota(ctx_, {6});
  const char *keys[] = {"v", "w"};
  kiln_tree *kids[] = {kiln_tree_array(v), kiln_tree_array(w)};
  kiln_tree *dict = kiln_tree_dict(2, keys, kids);
  kiln_tree *args = kiln_tree_tuple(1, &dict);
  kiln_jit *j = nullptr;
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_jit_new(ctx_, sm, nullptr, &j), KILN_OK);
  EXPECT_NE(kiln_jit_call(j, args, &out), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "PartitionSpec('a') at [0]['v'] splits dimension 0 of "
                       "f32[6] (size 6) 4 ways")) << kiln_last_error();
  kiln_jit_free(j);
  kiln_tree_free(args), kiln_tree_free(ins), kiln_tree_free(outs);
  kiln_func_free(sm), kiln_func_free(f);
  kiln_pspec_free(pa), kiln_pspec_free(pb);
  kiln_array_release(w), kiln_array_release(v);
}

// exp(shard_map(x -> pmean_tree({p: x, q: 2x}) summed)(x * 2)) + 1: the
// shard_map sits between ordinary ops of the jitted function.
kiln_tree *Inner(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = kiln_arg(args, 0);
  const char *keys[] = {"p", "q"};
  kiln_val *vals[] = {x, kiln_mul(t, x, kiln_scalar_f(t, 2))};
  kiln_tree *d = kiln_dict_of(2, keys, vals);
  kiln_tree *m = kiln_pmean_tree(t, d, "i");
  kiln_tree *s = kiln_psum_tree(t, d, "i");
  kiln_val *r = kiln_add(t, kiln_arg_path(m, "['p']"), kiln_arg_path(s, "['q']"));
  kiln_tree_free(d), kiln_tree_free(m), kiln_tree_free(s);
  return kiln_tree_val(r);
}

kiln_tree *Outer(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *x = kiln_mul(t, kiln_arg(args, 0), kiln_scalar_f(t, 0.125));
  kiln_tree *a = kiln_tuple_of(1, &x);
  kiln_tree *r = kiln_call(t, static_cast<const kiln_func *>(user), a);
  kiln_val *y = r ? kiln_add(t, kiln_exp(t, kiln_arg_path(r, "")), kiln_scalar_f(t, 1)) : nullptr;
  kiln_tree_free(a), kiln_tree_free(r);
  return y ? kiln_tree_val(y) : nullptr;
}

TEST_F(SpmdApi, ThreadedDevicesAgreeWithTheReferenceExecutorInsideJit) {
  std::vector<float> got[2];
  kiln_ctx *ctxs[2] = {ctx_, Ctx(KILN_EXECUTOR_REFERENCE)};
  for (int k = 0; k < 2; k++) {
    kiln_mesh_free(mesh_);
    mesh_ = Mesh1D(ctxs[k]);
    kiln_func *inner = nullptr, *outer = nullptr;
    ASSERT_EQ(kiln_func_new(Inner, nullptr, "inner", &inner), KILN_OK);
    kiln_func *sm = ShardMap(inner, "i", "i");
    ASSERT_EQ(kiln_func_new(Outer, sm, "outer", &outer), KILN_OK);
    kiln_array *x = Iota(ctxs[k], {16, 3});
    ASSERT_EQ(Call(ctxs[k], outer, x, &got[k]), KILN_OK) << kiln_last_error();
    kiln_array_release(x);
    kiln_func_free(outer), kiln_func_free(sm), kiln_func_free(inner);
  }
  kiln_mesh_free(mesh_);
  mesh_ = nullptr;
  kiln_ctx_free(ctxs[1]);
  ASSERT_EQ(got[0].size(), 48u);
  for (size_t i = 0; i < got[0].size(); i++) EXPECT_FLOAT_EQ(got[0][i], got[1][i]) << i;
}

// A host callback that fails on one device before a psum: every device
// must stop, the call must fail with that device's error, and the context
// must stay usable.
struct Fault {
  int device;
  std::atomic<int> calls{0};
};

kiln_status FailOn(void *user, int, const kiln_host_buffer *in, int, kiln_host_buffer *out) {
  Fault *f = static_cast<Fault *>(user);
  f->calls++;
  int32_t d;
  memcpy(&d, in[0].data, 4);
  if (d == f->device)
    return kiln_fail(KILN_ERR_ARGUMENT, "injected failure");
  memcpy(out[0].data, in[0].data, 4);
  return KILN_OK;
}

kiln_tree *Faulty(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_val *i = kiln_axis_index(t, "i"), *r = nullptr;
  kiln_aval a{};
  a.dtype = KILN_I32;
  kiln_host_callback(t, FailOn, user, 1, &i, 1, &a, &r);
  kiln_val *x = kiln_add(t, kiln_arg(args, 0), kiln_convert(t, r, KILN_F32));
  return kiln_tree_val(kiln_psum(t, x, "i"));
}

TEST_F(SpmdApi, ADeviceFailingMidCollectiveFailsEveryDevice) {
  mesh_ = Mesh1D(ctx_);
  Fault fault;
  fault.device = 3;
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(Faulty, &fault, "faulty", &f), KILN_OK);
  kiln_func *sm = ShardMap(f, "i", "");
  kiln_array *x = Iota(ctx_, {8});
  std::vector<float> out;
  EXPECT_NE(Call(ctx_, sm, x, &out), KILN_OK);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg, "device 3")) << msg;
  EXPECT_TRUE(Contains(msg, "injected failure")) << msg;
  EXPECT_EQ(fault.calls.load(), 8);  // every device ran up to the psum
  fault.device = -1;  // the same context runs it fine afterwards
  ASSERT_EQ(Call(ctx_, sm, x, &out), KILN_OK) << kiln_last_error();
  ASSERT_EQ(out.size(), 1u);
  // sum over devices of (x_d + d) with x = -3 + 0.5 d
  EXPECT_FLOAT_EQ(out[0], -24 + 14 + 28);
  kiln_array_release(x);
  kiln_func_free(sm), kiln_func_free(f);
}

// A device stuck before a psum past the collective timeout: see
// test_spmd_timeout.cc (the stuck device is abandoned, the context's
// multi-device calls fail from then on).

TEST_F(SpmdApi, PmapNeedsTheMappedAxisToMatchTheDevices) {
  kiln_func *f = nullptr, *pm = nullptr;
  ASSERT_EQ(kiln_func_new(PsumOf, (void *)"i", "f", &f), KILN_OK);
  int in_axes[] = {0};
  ASSERT_EQ(kiln_pmap(ctx_, f, "i", 1, in_axes, 0, 0, nullptr, &pm), KILN_OK) << kiln_last_error();
  kiln_array *x = Iota(ctx_, {16});
  std::vector<float> out;
  EXPECT_NE(Call(ctx_, pm, x, &out), KILN_OK);
  EXPECT_TRUE(Contains(kiln_last_error(), "axis_size must equal the device count 8"))
      << kiln_last_error();
  kiln_array_release(x);
  kiln_func_free(pm), kiln_func_free(f);
}

}  // namespace
