// Traced random ops (src/trace/random.c), jitted on a CPU context, against
// values computed by JAX: tests/golden/prng.txt (the host PRNG's data, every
// draw kind over several keys and shapes) and tests/golden/trace_random.txt
// (uniform's fused multiply-add corner cases, draws in a scan, a key chain).
// Plus the IR they build (make_jaxpr) and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "support/arrays.h"
#include "support/prng_golden.h"

namespace {

using namespace prng_golden;
using kiln_test::ArrayLeaf;

// Bit patterns must match; NaNs of either sign count as equal.
::testing::AssertionResult SameBits(kiln_dtype dtype, uint64_t got, uint64_t want) {
  if (got == want) return ::testing::AssertionSuccess();
  const double g = FloatFromBits(dtype, got), w = FloatFromBits(dtype, want);
  if (kiln_dtype_is_float(dtype) && std::isnan(g) && std::isnan(w))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << got << " vs JAX " << want << std::dec
                                       << std::hexfloat << " (" << g << " vs " << w << ")";
}

// f64 normals go through the evaluator's erf_inv, which uses libm's log:
// exact on glibc, not promised elsewhere, so JAX's f64 tolerance applies
// (as in test_prng.cc). Every other float draw must be JAX's bits.
::testing::AssertionResult MatchesXla(kiln_dtype dtype, uint64_t got, uint64_t want) {
  if (dtype != KILN_F64) return SameBits(dtype, got, want);
  const double g = FloatFromBits(dtype, got), w = FloatFromBits(dtype, want), tol = 1e-15;
  if (std::fabs(g - w) <= tol + tol * std::fabs(w)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << g << " vs JAX " << w;
}

// ---- jit plumbing ----

class Ctx {
 public:
  Ctx() {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  }
  ~Ctx() { kiln_ctx_free(ctx); }
  kiln_device *Dev() {
    kiln_device *d = nullptr;
    EXPECT_EQ(kiln_device_get(ctx, 0, &d), KILN_OK);
    return d;
  }
  kiln_ctx *ctx = nullptr;
};

kiln_tree *KeyLeaf(kiln_device *dev, const uint32_t key[2]) {
  return ArrayLeaf(dev, KILN_U32, {2}, key, 2 * sizeof(uint32_t));
}

kiln_tree *Tuple(std::vector<kiln_tree *> c) { return kiln_tree_tuple(c.size(), c.data()); }

kiln_val *Arg(const kiln_tree *args, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(args, i))->u.val;
}

// A traced function with its jit; the function's configuration is `user`.
struct Jitted {
  Jitted(kiln_ctx *ctx, kiln_fn fn, void *user) {
    EXPECT_EQ(kiln_func_new(fn, user, "draw", &f), KILN_OK);
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK) << kiln_last_error();
  }
  ~Jitted() {
    kiln_jit_free(j);
    kiln_func_free(f);
  }
  // Calls with `args` (taken) and returns output leaf i's bytes, its dtype and shape.
  std::vector<unsigned char> Call(kiln_tree *args, size_t i = 0, kiln_dtype *dtype = nullptr,
                                  std::vector<int64_t> *shape = nullptr) {
    kiln_tree *out = nullptr;
    std::vector<unsigned char> bytes;
    if (dtype) *dtype = KILN_INVALID_DTYPE;
    if (shape) shape->clear();
    kiln_status st = kiln_jit_call(j, args, &out);
    kiln_tree_free(args);
    EXPECT_EQ(st, KILN_OK) << kiln_last_error();
    if (st) return bytes;
    kiln_leaf *leaves = nullptr;
    size_t n = 0;
    EXPECT_EQ(kiln_tree_flatten(out, nullptr, nullptr, &leaves, &n, nullptr), KILN_OK);
    EXPECT_LT(i, n);
    if (i < n) {
      kiln_array *a = leaves[i].u.array;
      bytes.resize(kiln_array_nbytes(a));
      EXPECT_EQ(kiln_array_to_host(a, bytes.data(), bytes.size()), KILN_OK) << kiln_last_error();
      if (dtype) *dtype = kiln_array_dtype(a);
      if (shape) shape->assign(kiln_array_shape(a), kiln_array_shape(a) + kiln_array_rank(a));
    }
    kiln_leaves_free(leaves, n);
    kiln_tree_free(out);
    return bytes;
  }
  kiln_func *f = nullptr;
  kiln_jit *j = nullptr;
};

// ---- draws: one configuration per record shape, the key an argument ----

enum class Kind { kBits, kUniform, kNormal, kBernoulli, kBernoulliOf };

struct Draw {
  explicit Draw(Kind k) : kind(k) {}
  Kind kind;
  int width = 0;                          // kBits
  kiln_dtype dtype = KILN_INVALID_DTYPE;  // float draws; kBernoulliOf: p's dtype
  double lo = 0, hi = 1, p = 0.5;
  std::vector<int64_t> shape;
};

kiln_tree *DrawFn(kiln_trace *t, const kiln_tree *args, void *user) {
  const Draw &d = *static_cast<const Draw *>(user);
  kiln_val *key = Arg(args, 0);
  const int rank = static_cast<int>(d.shape.size());
  const int64_t *shape = d.shape.data();
  switch (d.kind) {
    case Kind::kBits: return kiln_tree_val(kiln_random_bits(t, key, d.width, rank, shape));
    case Kind::kUniform:
      return kiln_tree_val(kiln_random_uniform(t, key, d.dtype, rank, shape, d.lo, d.hi));
    case Kind::kNormal: return kiln_tree_val(kiln_random_normal(t, key, d.dtype, rank, shape));
    case Kind::kBernoulli: return kiln_tree_val(kiln_random_bernoulli(t, key, d.p, rank, shape));
    case Kind::kBernoulliOf: {
      // bernoulli with p of another dtype (a Python float without x64 is
      // f32): uniform of p's dtype < p, as jax.random.bernoulli does.
      kiln_val *u = kiln_random_uniform(t, key, d.dtype, rank, shape, 0.0, 1.0);
      return kiln_tree_val(kiln_lt(t, u, kiln_scalar(t, d.dtype, d.p)));
    }
  }
  return nullptr;
}

// Runs every record of `kind` through one jit per configuration (the key
// varies per record) and checks each listed element with `match`.
template <typename Config, typename Match>
void CheckDraws(const std::string &file, const std::string &kind, size_t nparams, Config config,
                Match match) {
  Ctx c;
  std::map<std::string, std::pair<std::unique_ptr<Draw>, std::unique_ptr<Jitted>>> jits;
  for (const Record *r : Golden(file, kind)) {
    ArrayCase ac = ParseArray(*r, nparams);
    std::unique_ptr<Draw> d(new Draw(config(ac)));
    d->shape = ac.shape;
    std::string name = ac.Name().substr(ac.Name().find(')') + 1);
    auto &slot = jits[name];
    if (!slot.second) {
      slot.first = std::move(d);
      slot.second.reset(new Jitted(c.ctx, DrawFn, slot.first.get()));
    }
    kiln_dtype dtype;
    std::vector<int64_t> shape;
    std::vector<unsigned char> out =
        slot.second->Call(Tuple({KeyLeaf(c.Dev(), ac.key)}), 0, &dtype, &shape);
    ASSERT_EQ(shape, ac.shape) << ac.Name();
    const size_t size = kiln_dtype_size(dtype);
    ASSERT_EQ(out.size(), ac.count * size) << ac.Name();
    for (size_t j = 0, i = 0; i < ac.count; i += ac.step, j++)
      ASSERT_TRUE(match(*slot.first, dtype, BitsAt(size, out, i), r->vals[j]))
          << ac.Name() << " index " << i;
  }
  // One compile per configuration, whatever the key.
  for (auto &kv : jits) EXPECT_EQ(kiln_jit_compile_count(kv.second.second->j), 1) << kv.first;
}

TEST(TraceRandom, BitsMatchJax) {
  CheckDraws(
      "prng.txt", "bits", 1,
      [](const ArrayCase &ac) {
        Draw d(Kind::kBits);
        d.width = std::stoi(ac.params[0]);
        return d;
      },
      [](const Draw &d, kiln_dtype dt, uint64_t got, const std::string &want) {
        EXPECT_EQ(kiln_dtype_size(dt) * 8, static_cast<size_t>(d.width));
        return SameBits(dt, got, Hex(want));
      });
}

Draw UniformOf(const ArrayCase &ac) {
  Draw d(Kind::kUniform);
  d.dtype = Dtype(ac.params[0]);
  d.lo = Float(ac.params[1]);
  d.hi = Float(ac.params[2]);
  return d;
}

// Every dtype and range is JAX's bits: uniform emulates XLA's fused
// multiply-add exactly where the plain ops would round twice.
::testing::AssertionResult UniformMatches(const Draw &, kiln_dtype dt, uint64_t got,
                                          const std::string &want) {
  return SameBits(dt, got, Hex(want));
}

TEST(TraceRandom, UniformMatchesJax) {
  CheckDraws("prng.txt", "uniform", 3, UniformOf, UniformMatches);
}

// Where rounding the exact f64 sum u * span + lo to f32 would round twice
// the wrong way (built by trace_random.py), and wide-exponent f32 and f64
// ranges.
TEST(TraceRandom, UniformFusedMultiplyAddCorners) {
  CheckDraws("trace_random.txt", "uniform", 3, UniformOf, UniformMatches);
}

TEST(TraceRandom, NormalMatchesJax) {
  CheckDraws(
      "prng.txt", "normal", 1,
      [](const ArrayCase &ac) {
        Draw d(Kind::kNormal);
        d.dtype = Dtype(ac.params[0]);
        return d;
      },
      [](const Draw &, kiln_dtype dt, uint64_t got, const std::string &want) {
        return MatchesXla(dt, got, Hex(want));
      });
}

TEST(TraceRandom, BernoulliMatchesJax) {
  CheckDraws(
      "prng.txt", "bernoulli", 2,
      [](const ArrayCase &ac) {
        Draw d(Kind::kBernoulli);
        d.dtype = Dtype(ac.params[0]);
        d.p = Float(ac.params[1]);
        // kiln_random_bernoulli's p is f64; other dtypes go through uniform < p.
        if (d.dtype != KILN_F64) d.kind = Kind::kBernoulliOf;
        return d;
      },
      [](const Draw &, kiln_dtype dt, uint64_t got, const std::string &want) {
        EXPECT_EQ(dt, KILN_BOOL);
        return SameBits(dt, got, want == "1" ? 1 : 0);
      });
}

// ---- keys ----

kiln_tree *KeyFromSeed(kiln_trace *t, const kiln_tree *, void *user) {
  return kiln_tree_val(kiln_random_key(t, *static_cast<const int64_t *>(user)));
}

TEST(TraceRandom, KeyFromSeedMatchesPrngKey) {
  Ctx c;
  for (const Record *r : Golden("prng.txt", "seed64")) {
    int64_t seed = std::stoll(r->head[0]);
    Jitted jit(c.ctx, KeyFromSeed, &seed);
    kiln_dtype dt;
    std::vector<int64_t> shape;
    std::vector<unsigned char> out = jit.Call(Tuple({}), 0, &dt, &shape);
    ASSERT_EQ(dt, KILN_U32);
    ASSERT_EQ(shape, std::vector<int64_t>{2});
    EXPECT_EQ(BitsAt(4, out, 0), Hex(r->head[1])) << "seed " << seed;
    EXPECT_EQ(BitsAt(4, out, 1), Hex(r->head[2])) << "seed " << seed;
  }
}

kiln_tree *Split(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_tree_val(kiln_random_split(t, Arg(args, 0), *static_cast<const int64_t *>(user)));
}

TEST(TraceRandom, SplitMatchesJax) {
  Ctx c;
  for (const Record *r : Golden("prng.txt", "split")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    int64_t n = std::stoll(r->head[2]);
    Jitted jit(c.ctx, Split, &n);
    std::vector<int64_t> shape;
    std::vector<unsigned char> out = jit.Call(Tuple({KeyLeaf(c.Dev(), key)}), 0, nullptr, &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{n, 2}));
    for (int64_t i = 0; i < 2 * n; i++)
      EXPECT_EQ(BitsAt(4, out, i), Hex(r->head[3 + i])) << "split " << n << " word " << i;
  }
}

// fold_in's data in every form: a traced u32 or i32 (wrapping), a typed
// literal, and a Python-style weak integer literal.
enum class Data { kTracedU32, kTracedI32, kLiteralU32, kWeakLiteral };
struct FoldIn {
  Data data;
  uint32_t value;
};

kiln_tree *FoldInFn(kiln_trace *t, const kiln_tree *args, void *user) {
  const FoldIn &f = *static_cast<const FoldIn *>(user);
  kiln_val *data = nullptr;
  switch (f.data) {
    case Data::kTracedU32:
    case Data::kTracedI32: data = Arg(args, 1); break;
    case Data::kLiteralU32: data = kiln_scalar(t, KILN_U32, f.value); break;
    case Data::kWeakLiteral: data = kiln_scalar_i(t, f.value); break;
  }
  return kiln_tree_val(kiln_random_fold_in(t, Arg(args, 0), data));
}

TEST(TraceRandom, FoldInMatchesJax) {
  Ctx c;
  for (const Record *r : Golden("prng.txt", "fold_in")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    const uint32_t value = Hex32(r->head[2]);
    for (Data kind : {Data::kTracedU32, Data::kTracedI32, Data::kLiteralU32, Data::kWeakLiteral}) {
      FoldIn f{kind, value};
      Jitted jit(c.ctx, FoldInFn, &f);
      std::vector<kiln_tree *> args = {KeyLeaf(c.Dev(), key)};
      if (kind == Data::kTracedU32 || kind == Data::kTracedI32)
        args.push_back(ArrayLeaf(c.Dev(), kind == Data::kTracedU32 ? KILN_U32 : KILN_I32, {},
                                 &value, sizeof value));
      std::vector<unsigned char> out = jit.Call(Tuple(args));
      ASSERT_EQ(out.size(), 8u);
      EXPECT_EQ(BitsAt(4, out, 0), Hex(r->head[3]))
          << "data " << r->head[2] << " form " << (int)kind;
      EXPECT_EQ(BitsAt(4, out, 1), Hex(r->head[4]))
          << "data " << r->head[2] << " form " << (int)kind;
    }
  }
}

// ---- inside control flow, and chained ----

// scan body: (key, i) -> (key, bits(fold_in(key, i), (), 32)).
kiln_tree *FoldBody(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *key = Arg(args, 0), *i = Arg(args, 1);
  kiln_val *bits = kiln_random_bits(t, kiln_random_fold_in(t, key, i), 32, 0, nullptr);
  return Tuple({kiln_tree_val(key), kiln_tree_val(bits)});
}

kiln_tree *FoldScan(kiln_trace *t, const kiln_tree *args, void *user) {
  const kiln_func *body = static_cast<const kiln_func *>(user);
  const int64_t n = 6;
  kiln_tree *xs = kiln_tree_val(kiln_iota(t, KILN_U32, 1, &n, 0));
  kiln_tree *init = kiln_tree_val(Arg(args, 0));
  kiln_tree *res = kiln_scan(t, body, init, xs, n, 0);
  kiln_tree_free(xs);
  kiln_tree_free(init);
  if (!res) return nullptr;
  kiln_tree *ys = kiln_tree_clone(kiln_tree_child(res, 1));
  kiln_tree_free(res);
  return ys;
}

TEST(TraceRandom, FoldInInsideScanMatchesJax) {
  Ctx c;
  kiln_func *body = nullptr;
  ASSERT_EQ(kiln_func_new(FoldBody, nullptr, "body", &body), KILN_OK);
  Jitted jit(c.ctx, FoldScan, body);
  for (const Record *r : Golden("trace_random.txt", "fold_scan")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    std::vector<unsigned char> out = jit.Call(Tuple({KeyLeaf(c.Dev(), key)}));
    ASSERT_EQ(out.size(), 4 * r->vals.size());
    for (size_t i = 0; i < r->vals.size(); i++)
      EXPECT_EQ(BitsAt(4, out, i), Hex(r->vals[i]))
          << r->head[0] << " " << r->head[1] << " i " << i;
  }
  kiln_func_free(body);
}

// normal(split(fold_in(key, 5), 3)[2], (4,), f32)
kiln_tree *Chain(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *keys =
      kiln_random_split(t, kiln_random_fold_in(t, Arg(args, 0), kiln_scalar_i(t, 5)), 3);
  const int64_t start[] = {2, 0}, limit[] = {3, 2}, two[] = {2}, four[] = {4};
  kiln_val *key = kiln_reshape(t, kiln_slice(t, keys, start, limit, nullptr), 1, two);
  return kiln_tree_val(kiln_random_normal(t, key, KILN_F32, 1, four));
}

TEST(TraceRandom, KeyChainMatchesJax) {
  Ctx c;
  Jitted jit(c.ctx, Chain, nullptr);
  for (const Record *r : Golden("trace_random.txt", "chain")) {
    const uint32_t key[2] = {Hex32(r->head[0]), Hex32(r->head[1])};
    std::vector<unsigned char> out = jit.Call(Tuple({KeyLeaf(c.Dev(), key)}));
    ASSERT_EQ(out.size(), 4 * r->vals.size());
    for (size_t i = 0; i < r->vals.size(); i++)
      EXPECT_TRUE(SameBits(KILN_F32, BitsAt(4, out, i), Hex(r->vals[i]))) << r->head[1] << " " << i;
  }
}

// A key made in the trace is a constant: the whole draw folds at compile
// time and still gives JAX's bits (bits of PRNGKey(42) from prng.txt).
kiln_tree *BitsOfSeed42(kiln_trace *t, const kiln_tree *, void *) {
  const int64_t shape[] = {7};
  return kiln_tree_val(kiln_random_bits(t, kiln_random_key(t, 42), 32, 1, shape));
}

TEST(TraceRandom, DrawFromConstantKey) {
  Ctx c;
  Jitted jit(c.ctx, BitsOfSeed42, nullptr);
  std::vector<unsigned char> out = jit.Call(Tuple({}));
  bool found = false;
  for (const Record *r : Golden("prng.txt", "bits")) {
    ArrayCase ac = ParseArray(*r, 1);
    if (ac.key[0] != 0 || ac.key[1] != 42 || ac.params[0] != "32" ||
        ac.shape != std::vector<int64_t>{7})
      continue;
    found = true;
    ASSERT_EQ(out.size(), 28u);
    for (size_t i = 0; i < 7; i++) EXPECT_EQ(BitsAt(4, out, i), Hex(r->vals[i])) << i;
  }
  EXPECT_TRUE(found);
}

// ---- empty draws ----

kiln_tree *EmptyDraws(kiln_trace *t, const kiln_tree *args, void *) {
  kiln_val *key = Arg(args, 0);
  const int64_t empty[] = {4, 0};
  return Tuple({kiln_tree_val(kiln_random_bits(t, key, 64, 2, empty)),
                kiln_tree_val(kiln_random_normal(t, key, KILN_BF16, 2, empty)),
                kiln_tree_val(kiln_random_uniform(t, key, KILN_F32, 2, empty, -1.0, 3.0)),
                kiln_tree_val(kiln_random_bernoulli(t, key, 0.5, 2, empty)),
                kiln_tree_val(kiln_random_split(t, key, 0))});
}

TEST(TraceRandom, EmptyDraws) {
  Ctx c;
  Jitted jit(c.ctx, EmptyDraws, nullptr);
  const uint32_t key[2] = {0, 7};
  const std::vector<int64_t> empty = {4, 0};
  const kiln_dtype dtypes[] = {KILN_U64, KILN_BF16, KILN_F32, KILN_BOOL, KILN_U32};
  for (size_t i = 0; i < 5; i++) {
    kiln_dtype dt;
    std::vector<int64_t> shape;
    std::vector<unsigned char> out = jit.Call(Tuple({KeyLeaf(c.Dev(), key)}), i, &dt, &shape);
    EXPECT_TRUE(out.empty()) << i;
    EXPECT_EQ(dt, dtypes[i]) << i;
    EXPECT_EQ(shape, i == 4 ? (std::vector<int64_t>{0, 2}) : empty) << i;
  }
}

// ---- the IR ----

struct Jaxpr {
  kiln_fn fn;
  void *user;
  std::string text;
  kiln_status status;
};

// make_jaxpr of fn over a u32[2] key given by its aval (nothing runs).
Jaxpr MakeJaxpr(kiln_fn fn, void *user = nullptr) {
  Ctx c;
  Jaxpr j{fn, user, "", KILN_OK};
  kiln_func *f = nullptr;
  EXPECT_EQ(kiln_func_new(fn, user, "f", &f), KILN_OK);
  kiln_aval key{};
  key.dtype = KILN_U32;
  key.rank = 1;
  key.shape[0] = 2;
  kiln_tree *args = Tuple({kiln_tree_ptr(&key)});
  char *text = nullptr;
  j.status = kiln_make_jaxpr(c.ctx, f, args, &text);
  if (text) j.text = text;
  free(text);
  kiln_tree_free(args);
  kiln_func_free(f);
  return j;
}

size_t Count(const std::string &s, const std::string &needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) n++;
  return n;
}

TEST(TraceRandomIr, BitsAreThreefryOverAnIota) {
  Draw d(Kind::kBits);
  d.width = 32;
  d.shape = {3, 5};
  Jaxpr j = MakeJaxpr(DrawFn, &d);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_EQ(Count(j.text, "threefry2x32"), 1u) << j.text;
  EXPECT_NE(j.text.find("iota[dimension=0 dtype=uint32 shape=(15,)"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("reshape[new_sizes=(3, 5)"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("xor"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("u32[3,5]"), std::string::npos) << j.text;
}

// Past 2^32 elements the counter needs its high word: a u64 iota is split.
TEST(TraceRandomIr, HugeDrawsSplitAWideCounter) {
  Draw d(Kind::kBits);
  d.width = 8;
  d.shape = {65536, 65537};
  Jaxpr j = MakeJaxpr(DrawFn, &d);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_NE(j.text.find("dtype=uint64 shape=(4295032832,)"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("shift_right_logical"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("u8[65536,65537]"), std::string::npos) << j.text;
}

// The default range is the unit draw itself; other ranges scale, shift and
// clamp at minval; a span that is no power of two needs the exact fused
// multiply-add (f32 through f64, f64 through a split product).
TEST(TraceRandomIr, UniformRangesChooseTheirArithmetic) {
  Draw unit(Kind::kUniform);
  unit.dtype = KILN_F32;
  unit.shape = {4};
  Jaxpr j = MakeJaxpr(DrawFn, &unit);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_EQ(Count(j.text, " max "), 0u) << j.text;
  EXPECT_EQ(Count(j.text, " mul "), 0u) << j.text;
  EXPECT_NE(j.text.find("shift_right_logical"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("bitcast_convert_type[new_dtype=float32]"), std::string::npos) << j.text;

  Draw sym = unit;
  sym.lo = -1;  // span 2: u * 2 is exact, the plain ops round like XLA's FMA
  j = MakeJaxpr(DrawFn, &sym);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_EQ(Count(j.text, "f64"), 0u) << j.text;
  EXPECT_EQ(Count(j.text, " max "), 1u) << j.text;

  Draw odd = unit;
  odd.lo = 0.1;
  odd.hi = 0.7;
  j = MakeJaxpr(DrawFn, &odd);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_NE(j.text.find("new_dtype=float64"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("bitcast_convert_type[new_dtype=uint64]"), std::string::npos) << j.text;
  EXPECT_EQ(Count(j.text, " max "), 1u) << j.text;

  // f64: the product split in two exact halves.
  odd.dtype = KILN_F64;
  j = MakeJaxpr(DrawFn, &odd);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_GE(Count(j.text, " mul "), 5u) << j.text;
  EXPECT_EQ(Count(j.text, "f32"), 0u) << j.text;
}

TEST(TraceRandomIr, NormalIsErfInvOfUniform) {
  Draw d(Kind::kNormal);
  d.dtype = KILN_F16;
  d.shape = {8};
  Jaxpr j = MakeJaxpr(DrawFn, &d);
  ASSERT_EQ(j.status, KILN_OK) << kiln_last_error();
  EXPECT_NE(j.text.find("erf_inv"), std::string::npos) << j.text;
  // Half types: erf_inv in f32, as XLA evaluates it.
  EXPECT_NE(j.text.find("f32[8] = erf_inv"), std::string::npos) << j.text;
  EXPECT_NE(j.text.find("f16[8] = mul"), std::string::npos) << j.text;
}

// ---- bad input: a status, and a message naming the op ----

struct Bad {
  const char *op;
  kiln_status want;
  std::function<kiln_val *(kiln_trace *, kiln_val *key)> body;
};

kiln_tree *BadFn(kiln_trace *t, const kiln_tree *args, void *user) {
  return kiln_tree_val(static_cast<const Bad *>(user)->body(t, Arg(args, 0)));
}

// Traces body over a u32[2] key (eval_shape: nothing runs) and checks the
// failure; `also` must appear in the message too.
void ExpectBad(const Bad &bad, const std::string &also = "") {
  Ctx c;
  kiln_func *f = nullptr;
  ASSERT_EQ(kiln_func_new(BadFn, const_cast<Bad *>(&bad), "bad", &f), KILN_OK);
  kiln_aval key{};
  key.dtype = KILN_U32;
  key.rank = 1;
  key.shape[0] = 2;
  kiln_tree *args = Tuple({kiln_tree_ptr(&key)});
  kiln_treedef *def = nullptr;
  kiln_aval *avals = nullptr;
  size_t n = 0;
  kiln_status st = kiln_eval_shape(c.ctx, f, args, &def, &avals, &n);
  EXPECT_EQ(st, bad.want) << kiln_status_str(st) << ": " << kiln_last_error();
  const std::string msg = kiln_last_error();
  EXPECT_NE(msg.find(bad.op), std::string::npos) << msg;
  EXPECT_NE(msg.find(also), std::string::npos) << msg;
  free(avals);
  kiln_treedef_free(def);
  kiln_tree_free(args);
  kiln_func_free(f);
}

const int64_t kShape3[] = {3};

TEST(TraceRandomErrors, NonFloatDtypes) {
  for (kiln_dtype d : {KILN_BOOL, KILN_I32, KILN_U8, KILN_I64}) {
    SCOPED_TRACE(kiln_dtype_name(d));
    ExpectBad({"kiln_random_uniform", KILN_ERR_DTYPE,
               [d](kiln_trace *t, kiln_val *k) {
                 return kiln_random_uniform(t, k, d, 1, kShape3, 0, 1);
               }},
              kiln_dtype_name(d));
    ExpectBad({"kiln_random_normal", KILN_ERR_DTYPE,
               [d](kiln_trace *t, kiln_val *k) { return kiln_random_normal(t, k, d, 1, kShape3); }},
              kiln_dtype_name(d));
  }
  ExpectBad({"kiln_random_uniform", KILN_ERR_DTYPE, [](kiln_trace *t, kiln_val *k) {
               return kiln_random_uniform(t, k, static_cast<kiln_dtype>(99), 1, kShape3, 0, 1);
             }});
}

TEST(TraceRandomErrors, BitWidth) {
  for (int w : {0, 1, 7, 24, 128, -32}) {
    ExpectBad({"kiln_random_bits", KILN_ERR_ARGUMENT,
               [w](kiln_trace *t, kiln_val *k) { return kiln_random_bits(t, k, w, 1, kShape3); }},
              "bit width " + std::to_string(w));
  }
}

TEST(TraceRandomErrors, KeysMustBeU32Pairs) {
  const int64_t three[] = {3}, pairs[] = {4, 2};
  // A key of the wrong dtype, of the wrong length, and a batch of keys.
  ExpectBad({"kiln_random_bits", KILN_ERR_DTYPE,
             [](kiln_trace *t, kiln_val *k) {
               return kiln_random_bits(t, kiln_convert(t, k, KILN_I32), 32, 1, kShape3);
             }},
            "i32[2]");
  ExpectBad({"kiln_random_normal", KILN_ERR_SHAPE,
             [three](kiln_trace *t, kiln_val *) {
               kiln_val *wide =
                   kiln_broadcast_in_dim(t, kiln_scalar(t, KILN_U32, 1), 1, three, nullptr);
               return kiln_random_normal(t, wide, KILN_F32, 1, kShape3);
             }},
            "u32[3]");
  ExpectBad({"kiln_random_split", KILN_ERR_SHAPE,
             [pairs](kiln_trace *t, kiln_val *k) {
               return kiln_random_split(t, kiln_broadcast_in_dim(t, k, 2, pairs, nullptr), 2);
             }},
            "kiln_vmap");
  ExpectBad({"kiln_random_fold_in", KILN_ERR_SHAPE, [](kiln_trace *t, kiln_val *) {
               return kiln_random_fold_in(t, kiln_scalar(t, KILN_U32, 1), kiln_scalar_i(t, 1));
             }});
  ExpectBad({"kiln_random_uniform", KILN_ERR_ARGUMENT, [](kiln_trace *t, kiln_val *) {
               return kiln_random_uniform(t, nullptr, KILN_F32, 1, kShape3, 0, 1);
             }});
  ExpectBad({"kiln_random_bernoulli", KILN_ERR_DTYPE, [](kiln_trace *t, kiln_val *k) {
               return kiln_random_bernoulli(t, kiln_convert(t, k, KILN_F32), 0.5, 1, kShape3);
             }});
}

TEST(TraceRandomErrors, BadShapes) {
  const int64_t negative[] = {2, -3};
  ExpectBad(
      {"kiln_random_bits", KILN_ERR_SHAPE,
       [negative](kiln_trace *t, kiln_val *k) { return kiln_random_bits(t, k, 8, 2, negative); }},
      "u8[2,-3]");
  ExpectBad({"kiln_random_uniform", KILN_ERR_SHAPE, [](kiln_trace *t, kiln_val *k) {
               return kiln_random_uniform(t, k, KILN_F32, 9, kShape3, 0, 1);
             }});
  ExpectBad({"kiln_random_normal", KILN_ERR_ARGUMENT, [](kiln_trace *t, kiln_val *k) {
               return kiln_random_normal(t, k, KILN_F32, 2, nullptr);
             }});
  ExpectBad({"kiln_random_split", KILN_ERR_SHAPE,
             [](kiln_trace *t, kiln_val *k) { return kiln_random_split(t, k, -1); }});
  const int64_t huge[] = {INT64_MAX / 2, 3};
  ExpectBad({"kiln_random_bernoulli", KILN_ERR_SIZE_OVERFLOW, [huge](kiln_trace *t, kiln_val *k) {
               return kiln_random_bernoulli(t, k, 0.5, 2, huge);
             }});
}

TEST(TraceRandomErrors, FoldInData) {
  const int64_t two[] = {2};
  ExpectBad({"kiln_random_fold_in", KILN_ERR_SHAPE,
             [two](kiln_trace *t, kiln_val *k) {
               return kiln_random_fold_in(t, k, kiln_iota(t, KILN_U32, 1, two, 0));
             }},
            "scalar");
  ExpectBad(
      {"kiln_random_fold_in", KILN_ERR_DTYPE,
       [](kiln_trace *t, kiln_val *k) { return kiln_random_fold_in(t, k, kiln_scalar_f(t, 1.5)); }},
      "integer");
  // A Python int must fit uint32 (JAX raises OverflowError); a typed value wraps.
  ExpectBad(
      {"kiln_random_fold_in", KILN_ERR_OUT_OF_RANGE,
       [](kiln_trace *t, kiln_val *k) { return kiln_random_fold_in(t, k, kiln_scalar_i(t, -1)); }},
      "-1");
  ExpectBad({"kiln_random_fold_in", KILN_ERR_OUT_OF_RANGE,
             [](kiln_trace *t, kiln_val *k) {
               return kiln_random_fold_in(t, k, kiln_scalar_i(t, INT64_C(1) << 32));
             }},
            "4294967296");
  ExpectBad({"kiln_random_fold_in", KILN_ERR_ARGUMENT,
             [](kiln_trace *t, kiln_val *k) { return kiln_random_fold_in(t, k, nullptr); }});
}

// Errors are sticky: a failed op makes later random ops no-ops, and the
// trace keeps the first message.
TEST(TraceRandomErrors, StickyAfterTheFirstFailure) {
  ExpectBad({"kiln_random_bits", KILN_ERR_ARGUMENT,
             [](kiln_trace *t, kiln_val *k) {
               kiln_val *bad = kiln_random_bits(t, k, 12, 1, kShape3);
               EXPECT_EQ(bad, nullptr);
               EXPECT_EQ(kiln_random_split(t, k, 2), nullptr);
               EXPECT_EQ(kiln_random_key(t, 1), nullptr);
               return kiln_random_normal(t, k, KILN_F32, 1, kShape3);
             }},
            "bit width 12");
}

TEST(TraceRandomErrors, NullTrace) {
  EXPECT_EQ(kiln_random_key(nullptr, 1), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_random_key"), std::string::npos);
  EXPECT_EQ(kiln_random_bits(nullptr, nullptr, 32, 0, nullptr), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_random_bits"), std::string::npos);
}

}  // namespace
