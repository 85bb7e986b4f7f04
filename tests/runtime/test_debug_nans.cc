// KILN_DEBUG_NANS (jax_debug_nans): a jitted call whose results hold a NaN
// or an infinity fails with KILN_ERR_NONFINITE naming the argument that held
// it or the first equation that made it (found by re-running the program
// one equation at a time), inside cond branches, scan bodies, shard_map
// bodies and the equations autodiff emits; with the option off the values
// come back silently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kiln/dist.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "kiln/transform.h"
#include "support/scoped_env.h"

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

class Ctx {
 public:
  explicit Ctx(kiln_debug_nans mode, int devices = 1) {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.num_cpu_devices = devices;
    o.debug_nans = mode;
    EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_array *F32(std::vector<float> v) {
    int64_t n = (int64_t)v.size();
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, 1, &n, v.data(), v.size() * 4, &a), KILN_OK)
        << kiln_last_error();
    return a;
  }
  kiln_tree *Leaf(std::vector<float> v) {
    kiln_array *a = F32(std::move(v));
    kiln_tree *t = kiln_tree_array(a);
    kiln_array_release(a);
    return t;
  }
  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
};

struct Func {
  Func(kiln_fn fn, const char *name, void *user = nullptr) {
    EXPECT_EQ(kiln_func_new(fn, user, name, &f), KILN_OK);
  }
  ~Func() { kiln_func_free(f); }
  kiln_func *f = nullptr;
};

kiln_val *Val(const kiln_tree *t) {
  const kiln_leaf *l = kiln_tree_leaf_get(t);
  return l && l->kind == KILN_LEAF_VAL ? l->u.val : nullptr;
}
kiln_val *Arg(const kiln_tree *args, size_t i) { return Val(kiln_tree_child(args, i)); }

// Calls f on args (consumed) through a fresh jit; the status, the message
// and, on success, the first result's values.
struct Outcome {
  kiln_status st;
  std::string msg;
  std::vector<float> values;
};

Outcome CallJit(kiln_ctx *ctx, const kiln_func *f, kiln_tree *args,
            const kiln_jit_options *opts = nullptr) {
  kiln_jit *j = nullptr;
  EXPECT_EQ(kiln_jit_new(ctx, f, opts, &j), KILN_OK) << kiln_last_error();
  kiln_tree *out = reinterpret_cast<kiln_tree *>(1);
  Outcome o{kiln_jit_call(j, args, &out), kiln_last_error(), {}};
  if (o.st == KILN_OK) {
    kiln_array *a = kiln_tree_leaf_array(out);
    if (!a) a = kiln_tree_leaf_array(kiln_tree_child(out, 0));
    o.values.resize(kiln_array_size(a));
    EXPECT_EQ(kiln_array_to_host(a, o.values.data(), o.values.size() * 4), KILN_OK);
  } else {
    EXPECT_EQ(out, nullptr) << "a failed call leaves no results";
  }
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  return o;
}

bool Has(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

#define EXPECT_HAS(msg, needle) EXPECT_TRUE(Has(msg, needle)) << "missing \"" << (needle) << "\" in: " << (msg)

// 2 * log(x) + 1
kiln_tree *LogFn(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *y = kiln_log(t, Arg(args, 0));
  return kiln_tree_val(kiln_add(t, kiln_mul(t, y, kiln_scalar_f(t, 2.0)), kiln_scalar_f(t, 1.0)));
}

TEST(DebugNans, LogOfNegativeIsNamedAtLog) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogFn, "log_fn");
  kiln_tree *a = c.Leaf({1, -1, 4});
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "jit(log_fn): result holds a NaN (1 of 3 elements, the first at flat index 1)");
  EXPECT_HAS(o.msg, "the first NaN comes from `");
  EXPECT_HAS(o.msg, "f32[3] = log ");
  EXPECT_HAS(o.msg, ":f32[3]`");  // the operand with its type
  EXPECT_HAS(o.msg, "traced by kiln_log");
  EXPECT_HAS(o.msg, "of the compiled program");
  EXPECT_HAS(o.msg, "while its operands hold no NaN or infinity");
  EXPECT_FALSE(Has(o.msg, "mul")) << o.msg;  // mul and add only pass it on
}

TEST(DebugNans, OffReturnsTheNaNSilently) {
  for (kiln_debug_nans mode : {KILN_DEBUG_NANS_DEFAULT, KILN_DEBUG_NANS_OFF}) {
    ScopedEnv env("KILN_DEBUG_NANS", nullptr);
    Ctx c(mode);
    Func f(LogFn, "log_fn");
    kiln_tree *a = c.Leaf({1, -1, 4});
    Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a));
    ASSERT_EQ(o.st, KILN_OK) << o.msg;
    ASSERT_EQ(o.values.size(), 3u);
    EXPECT_FLOAT_EQ(o.values[0], 1.0f);
    EXPECT_TRUE(std::isnan(o.values[1]));
  }
}

TEST(DebugNans, EnvironmentTurnsItOn) {
  ScopedEnv env("KILN_DEBUG_NANS", "on");
  Ctx c(KILN_DEBUG_NANS_DEFAULT);
  Func f(LogFn, "log_fn");
  kiln_tree *a = c.Leaf({-2});
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "traced by kiln_log");
}

TEST(DebugNans, FiniteResultsPass) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogFn, "log_fn");
  kiln_tree *a = c.Leaf({1, 2, 4});
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a));
  ASSERT_EQ(o.st, KILN_OK) << o.msg;
  EXPECT_FLOAT_EQ(o.values[2], 2 * std::log(4.0f) + 1);
}

kiln_tree *NegFn(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_neg(t, Arg(args, 0)));
}

// Every float dtype by its bits: 5000 elements (a full scan block and a
// tail), the largest finite value at 10, an infinity at 4097 and, when
// with_nan, a NaN at 4500. NaN wins over infinity in the report.
template <typename T>
void CheckDtype(kiln_dtype dt, T max_finite, T inf, T nan, bool with_nan) {
  SCOPED_TRACE(kiln_dtype_name(dt));
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(NegFn, "neg_fn");
  std::vector<T> v(5000, T(0));
  v[10] = max_finite;
  v[4097] = inf;
  if (with_nan) v[4500] = nan;
  int64_t n = (int64_t)v.size();
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, dt, 1, &n, v.data(), v.size() * sizeof(T), &a), KILN_OK);
  kiln_tree *leaf = kiln_tree_array(a);
  kiln_array_release(a);
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &leaf));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  if (with_nan) {
    EXPECT_HAS(o.msg, "result holds a NaN (1 of 5000 elements, the first at flat index 4500)");
    EXPECT_HAS(o.msg, "argument 0 already holds a NaN (1 of 5000 elements, the first at flat "
                      "index 4500)");
  } else {
    EXPECT_HAS(o.msg, "result holds an infinity (1 of 5000 elements, the first at flat index "
                      "4097)");
    EXPECT_HAS(o.msg, "argument 0 already holds an infinity");
  }
}

TEST(DebugNans, EveryFloatDtypeIsScanned) {
  for (bool with_nan : {true, false}) {
    CheckDtype<uint16_t>(KILN_F16, 0x7BFF, 0x7C00, 0x7E01, with_nan);
    CheckDtype<uint16_t>(KILN_BF16, 0x7F7F, 0xFF80, 0xFFC1, with_nan);
    CheckDtype<float>(KILN_F32, std::numeric_limits<float>::max(),
                      -std::numeric_limits<float>::infinity(), kNaN, with_nan);
    CheckDtype<double>(KILN_F64, std::numeric_limits<double>::max(),
                       std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN(), with_nan);
  }
}

// (x / y) * 3
kiln_tree *DivFn(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *q = kiln_div(t, Arg(args, 0), Arg(args, 1));
  return kiln_tree_val(kiln_mul(t, q, kiln_scalar_f(t, 3.0)));
}

TEST(DebugNans, DivisionByZeroIsAnInfinityAtDiv) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(DivFn, "div_fn");
  kiln_tree *a[2] = {c.Leaf({1, 2}), c.Leaf({1, 0})};
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(2, a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "result holds an infinity (1 of 2 elements, the first at flat index 1)");
  EXPECT_HAS(o.msg, "the first infinity comes from `");
  EXPECT_HAS(o.msg, "f32[2] = div ");
  EXPECT_HAS(o.msg, "traced by kiln_div");
}

// x + params['params']['w']
kiln_tree *AddParamFn(kiln_trace *t, const kiln_tree *args, void *) {
  const kiln_tree *p = kiln_tree_at_str(args, "[1]['params']['w']");
  return kiln_tree_val(kiln_add(t, Arg(args, 0), Val(p)));
}

TEST(DebugNans, ANaNArgumentIsNamedAsTheArgument) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(AddParamFn, "add_param");
  const char *wkey = "w", *pkey = "params";
  kiln_tree *w = c.Leaf({0, kNaN});
  kiln_tree *inner = kiln_tree_dict(1, &wkey, &w);
  kiln_tree *params = kiln_tree_dict(1, &pkey, &inner);
  kiln_tree *a[2] = {c.Leaf({1, 2}), params};
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(2, a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "argument 1 ['params']['w'] already holds a NaN (1 of 2 elements, the first "
                    "at flat index 1): it was passed in");
  EXPECT_FALSE(Has(o.msg, "comes from")) << o.msg;
}

TEST(DebugNans, AnArgumentTheProgramNeverReadsIsNotBlamed) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogFn, "log_fn");  // reads argument 0 only
  kiln_tree *a[2] = {c.Leaf({-1}), c.Leaf({kNaN})};
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(2, a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_FALSE(Has(o.msg, "argument")) << o.msg;
  EXPECT_HAS(o.msg, "traced by kiln_log");
}

// where(x > 0, x, nan): the NaN is a literal of the program.
kiln_tree *WhereNaNFn(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *x = Arg(args, 0);
  kiln_val *nan = kiln_scalar(t, KILN_F32, std::nan(""));
  return kiln_tree_val(kiln_where(t, kiln_gt(t, x, kiln_scalar_f(t, 0)), x, nan));
}

TEST(DebugNans, ANaNConstantIsNamedAsTheConstant) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(WhereNaNFn, "where_nan");
  kiln_tree *a = c.Leaf({1, -1});
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  // where is select_n(pred, on_false, on_true); the NaN is its case 0.
  EXPECT_HAS(o.msg, "it comes from constant operand 1 of `");
  EXPECT_HAS(o.msg, "= select_n ");
  EXPECT_HAS(o.msg, "traced by kiln_select_n");
}

kiln_tree *LogBranch(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_log(t, Arg(args, 0)));
}
kiln_tree *NegBranch(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_neg(t, Arg(args, 0)));
}

// cond(p > 0, log, neg, x) + 1
kiln_tree *CondFn(kiln_trace *t, const kiln_tree *args, void *user) {
  const kiln_func *const *br = static_cast<const kiln_func *const *>(user);
  kiln_tree *x = kiln_tree_val(Arg(args, 1));
  kiln_tree *operands = kiln_tree_tuple(1, &x);
  kiln_val *pred = kiln_gt(t, Arg(args, 0), kiln_scalar_f(t, 0));
  kiln_tree *r = kiln_cond(t, pred, br[0], br[1], operands);
  kiln_tree_free(operands);
  if (!r) return nullptr;
  kiln_val *y = Val(r);
  if (!y) y = Val(kiln_tree_child(r, 0));
  kiln_tree *res = kiln_tree_val(kiln_add(t, y, kiln_scalar_f(t, 1)));
  kiln_tree_free(r);
  return res;
}

TEST(DebugNans, ANaNMadeInACondBranchIsNamedInsideIt) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func log_branch(LogBranch, "log_branch"), neg_branch(NegBranch, "neg_branch");
  const kiln_func *br[2] = {log_branch.f, neg_branch.f};
  Func f(CondFn, "cond_fn", br);
  kiln_array *p = nullptr;
  float one = 1;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 0, nullptr, &one, 4, &p), KILN_OK);
  kiln_tree *a[2] = {kiln_tree_array(p), c.Leaf({2, -3})};
  kiln_array_release(p);
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(2, a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "= log ");
  EXPECT_HAS(o.msg, "traced by kiln_log");
  EXPECT_HAS(o.msg, "of branches[1] of equation");
  EXPECT_HAS(o.msg, "(cond) of the compiled program");
}

// scan over xs with carry c: c' = c - x, y = log(c'): the third step goes
// negative.
kiln_tree *ScanBody(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *carry = Arg(args, 0), *x = Arg(args, 1);
  kiln_val *next = kiln_sub(t, carry, x);
  kiln_tree *parts[2] = {kiln_tree_val(next), kiln_tree_val(kiln_log(t, next))};
  return kiln_tree_tuple(2, parts);
}

kiln_tree *ScanFn(kiln_trace *t, const kiln_tree *args, void *user) {
  const kiln_func *body = static_cast<const kiln_func *>(user);
  kiln_tree *init = kiln_tree_val(Arg(args, 0));
  kiln_tree *xs = kiln_tree_val(Arg(args, 1));
  kiln_tree *r = kiln_scan(t, body, init, xs, -1, 0);
  kiln_tree_free(init);
  kiln_tree_free(xs);
  if (!r) return nullptr;
  kiln_tree *ys = kiln_tree_clone(kiln_tree_child(r, 1));
  kiln_tree_free(r);
  return ys;
}

TEST(DebugNans, ANaNMadeInAScanBodyIsNamedInsideIt) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func body(ScanBody, "scan_body");
  Func f(ScanFn, "scan_fn", body.f);
  kiln_array *init = nullptr;
  float three = 3;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 0, nullptr, &three, 4, &init), KILN_OK);
  kiln_tree *a[2] = {kiln_tree_array(init), c.Leaf({1, 1, 2, 1})};
  kiln_array_release(init);
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(2, a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "result holds a NaN (2 of 4 elements, the first at flat index 2)");
  EXPECT_HAS(o.msg, "f32[] = log ");
  EXPECT_HAS(o.msg, "traced by kiln_log");
  EXPECT_HAS(o.msg, "(scan) of the compiled program");
}

// sum(sqrt(x) * 0): finite forward, but the backward pass multiplies the
// zero cotangent by sqrt's infinite derivative at 0.
kiln_tree *SqrtTimesZero(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *y = kiln_mul(t, kiln_sqrt(t, Arg(args, 0)), kiln_scalar_f(t, 0));
  return kiln_tree_val(kiln_sum(t, y, KILN_ALL_AXES, nullptr, 0));
}

TEST(DebugNans, ANaNOfTheBackwardPassIsNamedAtTheTransformedEquation) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(SqrtTimesZero, "sqrt_times_zero");
  kiln_func *g = nullptr;
  ASSERT_EQ(kiln_grad(f.f, nullptr, 0, 0, &g), KILN_OK) << kiln_last_error();
  kiln_tree *a = c.Leaf({0, 1});
  Outcome o = CallJit(c.ctx, g, kiln_tree_tuple(1, &a));
  kiln_func_free(g);
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "result holds a NaN (1 of 2 elements, the first at flat index 0)");
  EXPECT_HAS(o.msg, "the first NaN comes from `");
  // The transposed product made the NaN from the infinity of sqrt's
  // derivative, 0.5 / sqrt(0), which the message names as well.
  EXPECT_HAS(o.msg, "= mul ");
  EXPECT_HAS(o.msg, "traced by transpose(jvp(kiln_sqrt))): its result 0 holds a NaN");
  EXPECT_HAS(o.msg, "from operands holding an infinity, the first made by `");
  EXPECT_HAS(o.msg, "= div 0.5:f32[] ");
  EXPECT_HAS(o.msg, "traced by jvp(kiln_sqrt))");
}

TEST(DebugNans, AVmappedEquationNamesTheBatchedOp) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogBranch, "log_rows");
  kiln_func *v = nullptr;
  ASSERT_EQ(kiln_vmap(f.f, nullptr, nullptr, 0, nullptr, &v), KILN_OK) << kiln_last_error();
  int64_t shape[2] = {2, 2};
  float x[4] = {1, 2, 3, -4};
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(c.dev, KILN_F32, 2, shape, x, sizeof x, &a), KILN_OK);
  kiln_tree *leaf = kiln_tree_array(a);
  kiln_array_release(a);
  Outcome o = CallJit(c.ctx, v, kiln_tree_tuple(1, &leaf));
  kiln_func_free(v);
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "f32[2,2] = log ");
  EXPECT_HAS(o.msg, "traced by vmap(kiln_log)");
}

TEST(DebugNans, DonatedInputsAreReRunFromTheirCopy) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogFn, "log_fn");
  int donate = 0;
  kiln_jit_options opts;
  memset(&opts, 0, sizeof opts);
  opts.donate_argnums = &donate;
  opts.num_donate = 1;
  kiln_tree *a = c.Leaf({1, -1, 4});
  Outcome o = CallJit(c.ctx, f.f, kiln_tree_tuple(1, &a), &opts);
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "traced by kiln_log");
}

TEST(DebugNans, StagesAndCallArraysAreChecked) {
  Ctx c(KILN_DEBUG_NANS_ON);
  Func f(LogFn, "log_fn");
  kiln_jit *j = nullptr;
  ASSERT_EQ(kiln_jit_new(c.ctx, f.f, nullptr, &j), KILN_OK);
  kiln_array *x = c.F32({-1, 1});
  kiln_array *y = reinterpret_cast<kiln_array *>(1);
  EXPECT_EQ(kiln_jit_call_arrays(j, 1, &x, 1, &y), KILN_ERR_NONFINITE);
  EXPECT_EQ(y, nullptr);
  EXPECT_HAS(std::string(kiln_last_error()), "traced by kiln_log");

  kiln_tree *leaf = kiln_tree_array(x);
  kiln_tree *args = kiln_tree_tuple(1, &leaf);
  kiln_lowered *l = nullptr;
  kiln_compiled *cc = nullptr;
  ASSERT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_lowered_compile(l, &cc), KILN_OK) << kiln_last_error();
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_compiled_call(cc, args, &out), KILN_ERR_NONFINITE);
  EXPECT_EQ(out, nullptr);
  EXPECT_HAS(std::string(kiln_last_error()), "f32[2] = log ");
  kiln_compiled_free(cc);
  kiln_lowered_free(l);
  kiln_tree_free(args);
  kiln_array_release(x);
  kiln_jit_free(j);
}

// shard_map over two CPU devices of log, inside a function with more to do
// (so the jit runs it unsharded): the NaN is made on device 1 only.
struct SmapUser {
  kiln_func *smap;
};
kiln_tree *LogShard(kiln_trace *t, const kiln_tree *args, void *) {
  return kiln_tree_val(kiln_log(t, Arg(args, 0)));
}
kiln_tree *AroundSmap(kiln_trace *t, const kiln_tree *args, void *user) {
  kiln_tree *r = kiln_call(t, static_cast<SmapUser *>(user)->smap, args);
  if (!r) return nullptr;
  kiln_tree *res = kiln_tree_val(kiln_mul(t, Val(r), kiln_scalar_f(t, 2)));
  kiln_tree_free(r);
  return res;
}

kiln_func *ShardMapOver(kiln_mesh *mesh, const kiln_func *body) {
  kiln_pspec *ps = nullptr, *po = nullptr;
  EXPECT_EQ(kiln_pspec_parse("i", &ps), KILN_OK);
  EXPECT_EQ(kiln_pspec_parse("i", &po), KILN_OK);
  kiln_tree *leaf = kiln_tree_ptr(ps);
  kiln_tree *ins = kiln_tree_tuple(1, &leaf), *outs = kiln_tree_ptr(po);
  kiln_func *sm = nullptr;
  EXPECT_EQ(kiln_shard_map(body, mesh, ins, outs, 1, &sm), KILN_OK) << kiln_last_error();
  kiln_tree_free(ins);
  kiln_tree_free(outs);
  kiln_pspec_free(ps);
  kiln_pspec_free(po);
  return sm;
}

TEST(DebugNans, ShardMapBodiesAreSearchedPerDevice) {
  Ctx c(KILN_DEBUG_NANS_ON, 2);
  int64_t n = 2;
  const char *names[] = {"i"};
  kiln_mesh *mesh = nullptr;
  ASSERT_EQ(kiln_mesh_new(c.ctx, 1, &n, names, nullptr, &mesh), KILN_OK) << kiln_last_error();
  Func body(LogShard, "log_shard");
  SmapUser u{ShardMapOver(mesh, body.f)};
  Func around(AroundSmap, "around_smap", &u);
  kiln_tree *a = c.Leaf({1, 2, 3, -4});
  Outcome o = CallJit(c.ctx, around.f, kiln_tree_tuple(1, &a));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "f32[2] = log ");
  EXPECT_HAS(o.msg, "(shard_map) of the compiled program on mesh device 1");
  EXPECT_HAS(o.msg, "traced by kiln_log");

  // shard_map alone returns sharded results: they are checked, not re-run.
  kiln_tree *b = c.Leaf({1, 2, 3, -4});
  o = CallJit(c.ctx, u.smap, kiln_tree_tuple(1, &b));
  EXPECT_EQ(o.st, KILN_ERR_NONFINITE);
  EXPECT_HAS(o.msg, "result holds a NaN (1 of 4 elements, the first at flat index 3)");
  kiln_func_free(u.smap);
  kiln_mesh_free(mesh);
}

}  // namespace
