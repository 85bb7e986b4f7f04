// Reference evaluators of the structural primitives (src/ir/shape_ops.c)
// against JAX (and, on the same goldens, the kernels that stand in for some
// of them: pad's C kernel, the CUDA gather/scatter index walk): every case of
// tests/golden/eval_shape.txt is one equation
// built through the IR API and run by kir_eval_program; its result must
// match JAX's bit for bit, NaN payloads included, with two exceptions where
// a NaN only has to stay a NaN: scatter-add (the bits of inf + -inf are the
// hardware's) and bf16 (XLA's CPU compiler widens bf16 to f32 around
// concatenate, pad and dynamic_update_slice, which resets NaN payloads to
// 0x7fc0; kiln moves the bits unchanged).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "scatter_kernel_host.h"
#include "support/ir_program.h"
#include "support/jit_check.h"
#include "kiln/kiln.h"
#include "support/text.h"

namespace {

using kiln_test::Program;
using kiln_test::Split;
using kiln_test::Trim;

struct Array {
  kir_aval aval;
  std::vector<uint8_t> bytes;
};

struct Case {
  std::string name, prim, params;
  std::vector<Array> in;
  Array out;
};

std::string Str(const kir_aval &a) {
  char buf[KIR_AVAL_STR_CAP];
  return kir_aval_str(&a, buf, sizeof buf);
}

// "f32[2,3]:0000803f..." ("-" for no bytes).
Array ParseArray(const std::string &tok) {
  Array a;
  size_t colon = tok.find(':');
  EXPECT_NE(colon, std::string::npos) << tok;
  std::string type = tok.substr(0, colon), hex = tok.substr(colon + 1);
  EXPECT_EQ(kir_aval_parse(type.c_str(), &a.aval), KILN_OK) << type << ": " << kiln_last_error();
  if (hex == "-") hex.clear();
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    a.bytes.push_back((uint8_t)std::stoi(hex.substr(i, 2), nullptr, 16));
  EXPECT_EQ(a.bytes.size(), (size_t)kir_aval_size(&a.aval) * kiln_dtype_size(a.aval.dtype)) << tok;
  return a;
}

const std::vector<Case> &Cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    // scatter.txt: the scatter family (golden/scatter.py), in the same format.
    for (const char *file : {"/eval_shape.txt", "/scatter.txt"}) {
    std::ifstream f(std::string(KILN_GOLDEN_DIR) + file);
    EXPECT_TRUE(f.good()) << "missing " << KILN_GOLDEN_DIR << file;
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f5 = Split(line, '|');
      EXPECT_EQ(f5.size(), 5u) << line;
      if (f5.size() != 5) continue;
      Case c;
      c.name = Trim(f5[0]);
      c.prim = Trim(f5[1]);
      c.params = Trim(f5[2]);
      for (const std::string &tok : Split(Trim(f5[3]), ' '))
        if (!tok.empty()) c.in.push_back(ParseArray(tok));
      c.out = ParseArray(Trim(f5[4]));
      all.push_back(std::move(c));
    }
    }
    return all;
  }();
  return cases;
}

// Builds prim[params](in...) as a one-equation program.
Program Build(const std::string &prim_name, const std::string &params,
              const std::vector<kir_aval> &in, kiln_status *st) {
  kir_program *raw = nullptr;
  *st = kir_program_new(&raw);
  Program p(raw);
  if (*st) return p;
  kir_prim prim;
  if (!kir_prim_lookup(prim_name.data(), prim_name.size(), &prim)) {
    ADD_FAILURE() << "unknown primitive " << prim_name;
    *st = KILN_ERR_ARGUMENT;
    return p;
  }
  std::vector<kir_vid> vids(in.size());
  for (size_t i = 0; i < in.size() && !*st; i++) *st = kir_add_invar(p.get(), &in[i], &vids[i]);
  kir_params par;
  memset(&par, 0, sizeof par);
  if (!*st) *st = kir_params_parse(p.get(), prim, params.c_str(), &par);
  int eqn = -1;
  if (!*st) *st = kir_add_eqn(p.get(), prim, &par, (int)in.size(), vids.data(), &eqn);
  if (!*st) *st = kir_set_outputs(p.get(), p->eqns[eqn].n_out, p->eqns[eqn].out);
  return p;
}

// Runs p (one output) on host bytes; out gets the result's bytes.
kiln_status Evaluate(const kir_program *p, const std::vector<Array> &in,
                     std::vector<uint8_t> *out) {
  static uint8_t empty[1];
  std::vector<kir_buffer> bufs;
  for (size_t i = 0; i < in.size(); i++) {
    kir_buffer b = {in[i].aval, (void *)(in[i].bytes.empty() ? empty : in[i].bytes.data()),
                    in[i].bytes.size()};
    bufs.push_back(b);
  }
  const kir_aval *oa = kir_var_aval(p, p->outvars[0]);
  size_t nbytes = (size_t)kir_aval_size(oa) * kiln_dtype_size(oa->dtype);
  out->assign(nbytes + 1, 0xAB);  // never a zero-length buffer
  kir_buffer ob = {*oa, out->data(), nbytes};
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  kiln_status st = kir_eval_program(&env, p, bufs.data(), &ob);
  EXPECT_EQ((*out)[nbytes], 0xAB) << "written past the result";
  out->resize(nbytes);
  return st;
}

std::string Hex(const uint8_t *p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = n; i-- > 0;) {  // little endian: most significant byte first
    snprintf(b, sizeof b, "%02x", p[i]);
    s += b;
  }
  return s;
}

bool IsNan(kiln_dtype dt, const uint8_t *p) {
  if (!kiln_dtype_is_float(dt)) return false;
  return std::isnan(kir_scalar_load(dt, p).f);
}

// Bitwise equality, element by element; NaNs match any NaN if nan_any.
void ExpectSameBits(const Case &c, const std::vector<uint8_t> &got, bool nan_any) {
  kiln_dtype dt = c.out.aval.dtype;
  size_t es = kiln_dtype_size(dt), n = c.out.bytes.size() / es;
  ASSERT_EQ(got.size(), c.out.bytes.size());
  for (size_t i = 0; i < n; i++) {
    const uint8_t *g = &got[i * es], *w = &c.out.bytes[i * es];
    if (memcmp(g, w, es) == 0 || (nan_any && IsNan(dt, g) && IsNan(dt, w))) continue;
    ADD_FAILURE() << c.name << ": " << c.prim << "[" << c.params << "] -> " << Str(c.out.aval)
                  << "\n  element " << i << " (flat) is 0x" << Hex(g, es) << ", JAX gives 0x"
                  << Hex(w, es);
    return;
  }
}

// Case c's equation over its inputs' types (null after a failed expectation).
Program BuildCase(const Case &c) {
  std::vector<kir_aval> avals;
  for (const Array &a : c.in) avals.push_back(a.aval);
  kiln_status st;
  Program p = Build(c.prim, c.params, avals, &st);
  EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  return st ? nullptr : std::move(p);
}

void RunCase(const Case &c) {
  SCOPED_TRACE(c.name);
  Program p = BuildCase(c);
  ASSERT_TRUE(p);
  ASSERT_EQ(Str(*kir_var_aval(p.get(), p->outvars[0])), Str(c.out.aval));
  std::vector<uint8_t> got;
  ASSERT_EQ(Evaluate(p.get(), c.in, &got), KILN_OK) << kiln_last_error();
  ExpectSameBits(c, got, c.prim == "scatter-add" || c.out.aval.dtype == KILN_BF16);
}

// Runs every golden case of each primitive named, each must have some.
// (A few primitives per test: under ASan every test process costs a second.)
void RunPrims(std::initializer_list<const char *> prims) {
  for (const char *prim : prims) {
    int n = 0;
    for (const Case &c : Cases())
      if (c.prim == prim) {
        RunCase(c);
        n++;
      }
    EXPECT_GT(n, 0) << "no golden cases for " << prim;
  }
}

TEST(EvalShape, Relayouts) {
  RunPrims({"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "rev"});
}

TEST(EvalShape, Slices) { RunPrims({"slice", "dynamic_slice", "dynamic_update_slice"}); }

TEST(EvalShape, ConcatenatePadIota) { RunPrims({"concatenate", "pad", "iota"}); }

TEST(EvalShape, Gather) { RunPrims({"gather"}); }

TEST(EvalShape, ScatterAdd) { RunPrims({"scatter-add"}); }

TEST(EvalShape, ScatterSetMulMinMax) {
  RunPrims({"scatter", "scatter-mul", "scatter-min", "scatter-max"});
}

// Every primitive of the family has an evaluator and golden cases.
// The CUDA target's gather and scatter kernels walk kernels/scatter.h with
// the geometry codegen bakes in (kcg_scatter_geom); run on the host in index
// order, that walk gives JAX's bits for every golden case it can combine.
TEST(EvalShape, KernelIndexWalkMatchesJax) {
  int n = 0;
  for (const Case &c : Cases()) {
    if (c.prim != "gather" && c.prim.rfind("scatter", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    std::vector<const void *> in;
    for (const Array &a : c.in) in.push_back(a.bytes.data());
    Program p = BuildCase(c);
    ASSERT_TRUE(p);
    std::vector<uint8_t> got(c.out.bytes.size() + 1);
    if (kct_scatter_host(p.get(), &p->eqns[0], in.data(), got.data()) < 0) continue;
    got.pop_back();
    ExpectSameBits(c, got, c.prim == "scatter-add" || c.out.aval.dtype == KILN_BF16);
    n++;
  }
  EXPECT_GE(n, 20);
}

// pad through kiln_jit on the CPU's fused executor, which runs the C kernel
// of codegen/pad.c (rows copied as runs): JAX's bits on every golden case.
struct PadCase {
  int64_t lo[KIR_MAX_RANK], hi[KIR_MAX_RANK], interior[KIR_MAX_RANK];
};
kiln_tree *PadFn(kiln_trace *t, const kiln_tree *a, void *u) {
  const PadCase *c = (const PadCase *)u;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  kiln_val *v = kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val;
  return kiln_tree_val(kiln_pad(t, x, v, c->lo, c->hi, c->interior));
}

TEST(EvalShape, PadKernelsOnTheCTargetMatchJax) {
  kiln_device *dev = nullptr;
  kiln_ctx *ctx = FusedCpuContext(&dev);
  ASSERT_TRUE(ctx && dev);
  int n = 0;
  for (const Case &c : Cases()) {
    if (c.prim != "pad") continue;
    SCOPED_TRACE(c.name);
    Program p = BuildCase(c);
    ASSERT_TRUE(p);
    const kir_padding &pc = p->eqns[0].params.pad.padding_config;
    PadCase pcase;
    for (int d = 0; d < pc.n; d++)
      pcase.lo[d] = pc.lo[d], pcase.hi[d] = pc.hi[d], pcase.interior[d] = pc.interior[d];
    std::vector<kiln_tree *> leaves;
    for (const Array &a : c.in) {
      kiln_array *arr = nullptr;
      ASSERT_EQ(kiln_array_from_host(dev, a.aval.dtype, a.aval.rank, a.aval.shape, a.bytes.data(),
                                     a.bytes.size(), &arr),
                KILN_OK)
          << kiln_last_error();
      leaves.push_back(kiln_tree_array(arr));
      kiln_array_release(arr);
    }
    kiln_tree *args = kiln_tree_tuple(leaves.size(), leaves.data());
    std::string text;
    std::vector<uint8_t> got = JitBytes(ctx, PadFn, &pcase, args, n == 0 ? &text : nullptr);
    ExpectSameBits(c, got, c.out.aval.dtype == KILN_BF16);
    if (n == 0) {  // the kernel ran, not the reference evaluator
      EXPECT_NE(text.find("void kiln_pad_"), std::string::npos) << text;
    }
    n++;
  }
  EXPECT_GE(n, 10);
  kiln_ctx_free(ctx);
}

TEST(EvalShape, EveryShapePrimitiveIsCovered) {
  std::set<std::string> golden;
  for (const Case &c : Cases()) golden.insert(c.prim);
  const kir_eval_table *t = kir_reference_evals();
  for (int i = 0; i < KIR_NUM_PRIMS; i++) {
    const kir_prim_info *info = kir_prim_get((kir_prim)i);
    if (info->family != KIR_FAMILY_SHAPE) continue;
    EXPECT_NE(t->fn[i], nullptr) << info->name << " has no reference evaluator";
    EXPECT_TRUE(golden.count(info->name)) << info->name << " has no golden cases";
  }
}

// Builds and runs prim[params](in...) expecting a failure naming the op.
void ExpectEvalFailure(const char *prim, const char *params, std::vector<Array> in,
                       kiln_status want, const char *needle) {
  std::vector<kir_aval> avals;
  for (const Array &a : in) avals.push_back(a.aval);
  kiln_status st;
  Program p = Build(prim, params, avals, &st);
  ASSERT_EQ(st, KILN_OK) << "the rule accepts this case: " << kiln_last_error();
  std::vector<uint8_t> got;
  EXPECT_EQ(Evaluate(p.get(), in, &got), want);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find(prim), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
}

Array Zeros(const char *type) {
  Array a;
  EXPECT_EQ(kir_aval_parse(type, &a.aval), KILN_OK) << kiln_last_error();
  a.bytes.assign((size_t)kir_aval_size(&a.aval) * kiln_dtype_size(a.aval.dtype), 0);
  return a;
}

// lax's add does not take bool, so JAX rejects a bool scatter-add, and so
// does kiln's rule, before anything runs.
TEST(EvalShape, ScatterAddOfBoolIsRejectedByTheRule) {
  std::vector<kir_aval> avals;
  for (const char *type : {"bool[4]", "i32[2,1]", "bool[2]"}) avals.push_back(Zeros(type).aval);
  kiln_status st;
  Program p = Build("scatter-add",
                    "dimension_numbers=ScatterDimensionNumbers(update_window_dims=(), "
                    "inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), "
                    "operand_batching_dims=(), scatter_indices_batching_dims=()) "
                    "indices_are_sorted=False mode=GatherScatterMode.FILL_OR_DROP "
                    "unique_indices=False",
                    avals, &st);
  EXPECT_EQ(st, KILN_ERR_DTYPE);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find("scatter-add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bool[4]"), std::string::npos) << msg;
}

// JAX's rule skips the slice-size check when the indices are empty, but a
// non-empty result would then read past the operand (XLA rejects it).
TEST(EvalShape, GatherWindowLargerThanOperandFails) {
  ExpectEvalFailure(
      "gather",
      "dimension_numbers=GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(), "
      "start_index_map=(), operand_batching_dims=(), start_indices_batching_dims=()) "
      "fill_value=None indices_are_sorted=False mode=GatherScatterMode.CLIP slice_sizes=(5,) "
      "unique_indices=False",
      {Zeros("f32[2]"), Zeros("i32[3,0]")}, KILN_ERR_SHAPE, "slice_sizes=(5,)");
}

// Data movement composes: a chain of primitives that undo each other gives
// its input back (intermediate buffers are the executor's own, so ASan
// checks the evaluators' reads and writes there too).
TEST(EvalShape, ChainedProgramRoundTrips) {
  const char *text =
      "{ lambda ; a:f32[3,4] b:i32[]. let\n"
      "    c:f32[4,3] = transpose[permutation=(1, 0)] a\n"
      "    d:f32[4,3] = rev[dimensions=(0, 1)] c\n"
      "    e:f32[6,3] = pad[padding_config=((1, 1, 0), (0, 0, 0))] d 0.0:f32[]\n"
      "    f:f32[4,3] = dynamic_slice[slice_sizes=(4, 3)] e b 0:i32[]\n"
      "    g:f32[4,3] = rev[dimensions=(0, 1)] f\n"
      "    h:f32[3,4] = transpose[permutation=(1, 0)] g\n"
      "    i:f32[1,3,4] = expand_dims[dimensions=(0,)] h\n"
      "    j:f32[3,4] = squeeze[dimensions=(0,)] i\n"
      "  in (j,) }";
  kir_program *raw = nullptr;
  ASSERT_EQ(kir_parse(text, &raw), KILN_OK) << kiln_last_error();
  Program p(raw);
  Array a = Zeros("f32[3,4]"), b = Zeros("i32[]");
  for (int i = 0; i < 12; i++) {
    float v = (float)i - 5.5f;
    memcpy(&a.bytes[i * 4], &v, 4);
  }
  int32_t start = 1;  // the padded rows are 0 and 5
  memcpy(b.bytes.data(), &start, 4);
  std::vector<uint8_t> got;
  ASSERT_EQ(Evaluate(p.get(), {a, b}, &got), KILN_OK) << kiln_last_error();
  EXPECT_EQ(got, a.bytes);
}

}  // namespace
