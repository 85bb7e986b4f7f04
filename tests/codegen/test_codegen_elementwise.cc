// The code generator on elementwise groups: every unary, binary and compare
// primitive over edge values, convert_element_type between every pair of
// dtypes, bitcasts, bit-exact 16-bit floats, and index maps (broadcasts,
// transposes, slices, reshapes) composed without materializing them; C
// kernels against the reference executor, CUDA kernels compiled by NVRTC
// (codegen_checks.h).
#include <gtest/gtest.h>

#include "codegen_checks.h"

using namespace codegen_test;

// ---------------------------------------------------------------------------
// Elementwise primitives

TEST(CodegenElementwise, UnaryFloat) {
  Checks checks;
  const char *prims[] = {"neg",   "abs",   "sign",  "floor", "ceil",     "exp",     "exp2",
                         "expm1", "log",   "log1p", "sqrt",  "rsqrt",    "cbrt",    "tanh",
                         "logistic", "sin", "cos",  "tan",   "asin",     "acos",    "atan",
                         "sinh",  "cosh",  "asinh", "acosh", "atanh",    "erf",     "erf_inv"};
  for (kiln_dtype d : kFloats) {
    std::vector<Op> ops;
    for (const char *p : prims) ops.push_back({p, "", {0}, KILN_INVALID_DTYPE});
    ops.push_back({"round", "rounding_method=0", {0}, KILN_INVALID_DTYPE});
    ops.push_back({"round", "rounding_method=1", {0}, KILN_INVALID_DTYPE});
    ops.push_back({"is_finite", "", {0}, KILN_BOOL});
    Program p = Parse(OpsProgram({{d, {8, 9}}}, ops, {8, 9}));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 1);
    FillValues(in[0], FloatEdges(), 2, Domain::kNormal);
    Tol tol;
    tol.f64 = 4e-15;  // sinh, cosh and erf_inv follow XLA's formulas there
    checks.Add(std::move(p), KFUSE_LOOP, in, tol, std::string("unary ") + kiln_dtype_name(d));
  }
}

TEST(CodegenElementwise, UnaryIntegerAndBool) {
  Checks checks;
  std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> ins;
  std::vector<Op> ops;
  int i = 0;
  for (kiln_dtype d : kInts) {
    ins.push_back({d, {40}});
    for (const char *p : {"neg", "sign", "not", "population_count"}) ops.push_back({p, "", {i}, d});
    if (kiln_dtype_is_signed(d)) ops.push_back({"abs", "", {i}, d});
    i++;
  }
  ins.push_back({KILN_BOOL, {40}});
  ops.push_back({"not", "", {i}, KILN_BOOL});
  Program p = Parse(OpsProgram(ins, ops, {40}));
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 3);
  for (size_t k = 0; k + 1 < in.size(); k++) {
    std::vector<uint64_t> e = IntEdgeBits(in[k].aval.dtype);
    for (size_t j = 0; j < e.size(); j++) in[k].SetBits((int64_t)j, e[j]);
  }
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "unary integers");
}

// The primitives issue 11 added: square, integer_pow, erfc, lgamma, digamma,
// reduce_precision, copy (the C kernel against the reference evaluator).
TEST(CodegenElementwise, UnarySpecial) {
  Checks checks;
  for (kiln_dtype d : kFloats) {
    std::vector<Op> ops;
    for (const char *p : {"square", "erfc", "lgamma", "digamma", "copy"})
      ops.push_back({p, "", {0}, KILN_INVALID_DTYPE});
    for (const char *y : {"y=0", "y=1", "y=5", "y=-3"})
      ops.push_back({"integer_pow", y, {0}, KILN_INVALID_DTYPE});
    for (const char *f : {"exponent_bits=5 mantissa_bits=10", "exponent_bits=8 mantissa_bits=7",
                          "exponent_bits=4 mantissa_bits=3"})
      ops.push_back({"reduce_precision", f, {0}, KILN_INVALID_DTYPE});
    Program p = Parse(OpsProgram({{d, {8, 9}}}, ops, {8, 9}));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 1);
    FillValues(in[0], FloatEdges(), 2, Domain::kNormal);
    Tol tol;
    tol.f64 = 4e-15;
    checks.Add(std::move(p), KFUSE_LOOP, in, tol, std::string("special ") + kiln_dtype_name(d));
  }
  std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> ins;
  std::vector<Op> ops;
  int i = 0;
  for (kiln_dtype d : kInts) {
    ins.push_back({d, {40}});
    for (const char *p : {"square", "copy"}) ops.push_back({p, "", {i}, d});
    ops.push_back({"integer_pow", "y=3", {i}, d});
    i++;
  }
  Program p = Parse(OpsProgram(ins, ops, {40}));
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 3);
  for (size_t k = 0; k < in.size(); k++) {
    std::vector<uint64_t> e = IntEdgeBits(in[k].aval.dtype);
    for (size_t j = 0; j < e.size(); j++) in[k].SetBits((int64_t)j, e[j]);
  }
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "special integers");
}

// Every pair of edge values, for binary primitives.
static void FillPairs(Buf &a, Buf &b, const std::vector<uint64_t> &edges) {
  size_t n = edges.size();
  for (int64_t i = 0; i < a.size() && (size_t)i < n * n; i++) {
    a.SetBits(i, edges[(size_t)i / n]);
    b.SetBits(i, edges[(size_t)i % n]);
  }
}

static std::vector<uint64_t> FloatEdgeBits(kiln_dtype d) {
  std::vector<uint64_t> bits;
  Buf one(kir_aval_make(d, 0, nullptr, false));
  for (double v : std::vector<double>{0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e4, -7.25, INFINITY,
                                      -INFINITY, NAN, 0.1, 2.0}) {
    one.Set(0, v);
    bits.push_back(one.Bits(0));
  }
  return bits;
}

TEST(CodegenElementwise, BinaryAndCompareFloat) {
  Checks checks;
  const char *prims[] = {"add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2",
                         "nextafter"};
  const char *cmps[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  for (kiln_dtype d : kFloats) {
    std::vector<Op> ops;
    for (const char *p : prims) ops.push_back({p, "", {0, 1}, KILN_INVALID_DTYPE});
    for (const char *p : cmps) ops.push_back({p, "", {0, 1}, KILN_BOOL});
    ops.push_back({"pow", "", {0, 2}, KILN_INVALID_DTYPE});  // an integer exponent
    Program p = Parse(OpsProgram({{d, {200}}, {d, {200}}, {KILN_I32, {200}}}, ops, {200}));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 4);
    FillPairs(in[0], in[1], FloatEdgeBits(d));
    std::mt19937_64 rng(5);
    Fill(in[2], rng, Domain::kSmallInt);
    Tol tol;
    tol.f64 = 4e-15;
    checks.Add(std::move(p), KFUSE_LOOP, in, tol, std::string("binary ") + kiln_dtype_name(d));
  }
}

TEST(CodegenElementwise, BinaryAndCompareInteger) {
  Checks checks;
  const char *prims[] = {"add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor",
                         "shift_left", "shift_right_logical", "shift_right_arithmetic"};
  const char *cmps[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  // Two dtypes per kernel keep the argument count under KCG_MAX_ARGS.
  for (int pair = 0; pair < 4; pair++) {
    std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> ins;
    std::vector<Op> ops;
    for (int j = 0; j < 2; j++) {
      kiln_dtype d = kInts[2 * pair + j];
      int a = (int)ins.size();
      ins.push_back({d, {196}});
      ins.push_back({d, {196}});
      for (const char *p : prims) ops.push_back({p, "", {a, a + 1}, d});
      for (const char *p : cmps) ops.push_back({p, "", {a, a + 1}, KILN_BOOL});
    }
    Program p = Parse(OpsProgram(ins, ops, {196}));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 6);
    for (int j = 0; j < 2; j++) FillPairs(in[2 * j], in[2 * j + 1], IntEdgeBits(in[2 * j].aval.dtype));
    checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "binary integers");
  }
  // bool
  std::vector<Op> ops;
  for (const char *p : {"and", "or", "xor", "max", "min"}) ops.push_back({p, "", {0, 1}, KILN_BOOL});
  for (const char *p : cmps) ops.push_back({p, "", {0, 1}, KILN_BOOL});
  Program p = Parse(OpsProgram({{KILN_BOOL, {4}}, {KILN_BOOL, {4}}}, ops, {4}));
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 7);
  FillPairs(in[0], in[1], {0, 1});
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "binary bool");
}

TEST(CodegenElementwise, SelectClampAndBroadcastScalars) {
  Checks checks;
  // select_n with a bool and an int `which` (out of range included), clamp
  // with scalar and full bounds; rank-0 and size-1 operands broadcast.
  Program p = Parse(R"({ lambda ; a:bool[6,5] b:i32[6,5] c:f32[6,5] d:f32[6,5] e:f32[6,5] f:f32[] g:f32[1,5] h:i8[6,5] i:i8[]. let
      g2:f32[6,5] = broadcast_in_dim[broadcast_dimensions=(0, 1) shape=(6, 5)] g
      j:f32[6,5] = select_n a c d
      k:f32[6,5] = select_n b c d e
      l:f32[6,5] = clamp f c g2
      m:f32[6,5] = add c g
      n:f32[6,5] = mul c f
      o:i8[6,5] = clamp i h 3:i8[]
      p:f32[6,5] = clamp d c e
      q:bf16[6,5] = convert_element_type[new_dtype=bfloat16 weak_type=False] k
      r:bf16[6,5] = select_n a q q
    in (j, k, l, m, n, o, p, r) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 8);
  for (int64_t i = 0; i < 30; i++) in[1].Set(i, (double)(i % 7) - 2);  // -2 .. 4
  in[3].Set(0, NAN);
  in[2].Set(1, NAN);
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "select/clamp");
}

namespace {
const kiln_dtype kAll[] = {KILN_BOOL, KILN_I8,  KILN_I16, KILN_I32,  KILN_I64, KILN_U8,  KILN_U16,
                           KILN_U32,  KILN_U64, KILN_F16, KILN_BF16, KILN_F32, KILN_F64};

std::string NumpyName(kiln_dtype d) { return kiln_dtype_name(d); }
}  // namespace

// convert_element_type between every pair of dtypes, edge values included
// (saturation, NaN -> 0, rounding to 16-bit floats, wrap-around).
TEST(CodegenElementwise, ConvertEveryPair) {
  Checks checks;
  for (size_t first = 0; first < 13; first += 4) {
    std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> ins;
    std::vector<Op> ops;
    for (size_t s = first; s < first + 4 && s < 13; s++) {
      int a = (int)ins.size();
      ins.push_back({kAll[s], {48}});
      for (kiln_dtype to : kAll)
        if (to != kAll[s])
          ops.push_back({"convert_element_type",
                         "new_dtype=" + NumpyName(to) + " weak_type=False", {a}, to});
    }
    Program p = Parse(OpsProgram(ins, ops, {48}));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 9);
    for (Buf &b : in) {
      kiln_dtype d = b.aval.dtype;
      if (kiln_dtype_is_float(d)) {
        std::vector<double> v = FloatEdges();
        for (double x : {3e9, -3e9, 2.7, -2.7, 1e20, -1e20, 255.5, 256.0, -128.5, 65520.0,
                         1.0009765625, 70000.0, 1.00390625, 33554433.0})
          v.push_back(x);
        FillValues(b, v, 10, Domain::kNormal);
      } else if (d != KILN_BOOL) {
        std::vector<uint64_t> e = IntEdgeBits(d);
        for (size_t j = 0; j < e.size(); j++) b.SetBits((int64_t)j, e[j]);
        b.Set((int64_t)e.size(), kiln_dtype_is_signed(d) ? -100 : 100);
        if (kiln_dtype_size(d) >= 4) b.SetBits((int64_t)e.size() + 1, 16777217);  // 2^24 + 1
        if (kiln_dtype_size(d) == 8) b.SetBits((int64_t)e.size() + 2, (1ull << 24) + (1ull << 16) + 1);
      }
    }
    checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "convert");
  }
}

// bitcast_convert_type at the same width, to a narrower type (a new minor
// dimension) and to a wider one (the minor dimension glued).
TEST(CodegenElementwise, Bitcast) {
  Checks checks;
  const char *texts[] = {
      "{ lambda ; a:f32[3,4]. let f:i32[3,4] = bitcast_convert_type[new_dtype=int32] a in (f,) }",
      "{ lambda ; a:f32[3,4]. let g:u8[3,4,4] = bitcast_convert_type[new_dtype=uint8] a in (g,) }",
      "{ lambda ; b:u16[3,4,2]. let h:f32[3,4] = bitcast_convert_type[new_dtype=float32] b\n"
      "  m:f32[3,4] = mul h 2.0:f32[] in (m,) }",
      "{ lambda ; c:f16[6]. let i:i16[6] = bitcast_convert_type[new_dtype=int16] c in (i,) }",
      "{ lambda ; d:i64[5]. let j:f64[5] = bitcast_convert_type[new_dtype=float64] d\n"
      "  k:f64[5] = add j 0.0:f64[] in (j,) }",
      "{ lambda ; e:bf16[5,4]. let l:u64[5] = bitcast_convert_type[new_dtype=uint64] e in (l,) }",
      "{ lambda ; e:bf16[5,4]. let k:f16[5,4] = bitcast_convert_type[new_dtype=float16] e\n"
      "  n:u16[5,4] = bitcast_convert_type[new_dtype=uint16] k in (n,) }",
      "{ lambda ; a:u8[3,4,4]. let f:i32[3,4] = bitcast_convert_type[new_dtype=int32] a\n"
      "  g:i32[3,4] = add f 1:i32[] in (g,) }"};
  for (const char *t : texts) {
    Program q = Parse(t);
    ASSERT_TRUE(q);
    std::vector<Buf> qin = Inputs(q.get(), 12);
    if (qin[0].aval.dtype == KILN_U16)
      for (int64_t i = 0; i < qin[0].size(); i++) qin[0].SetBits(i, (uint64_t)(i * 40503u) & 0x3fff);
    if (qin[0].aval.dtype == KILN_I64)  // finite doubles
      for (int64_t i = 0; i < qin[0].size(); i++) qin[0].SetBits(i, 0x3ff0000000000000ull + i * 977);
    checks.Add(std::move(q), KFUSE_LOOP, qin, Tol(), t);
  }
}

// f16/bf16 data that only moves keeps every bit, signaling NaNs included.
TEST(CodegenElementwise, HalfCopiesKeepEveryBit) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f16[3,4] b:bf16[4,3]. let
      c:f16[4,3] = transpose[permutation=(1, 0)] a
      d:u16[4,3] = bitcast_convert_type[new_dtype=uint16] c
      e:bf16[4,3] = rev[dimensions=(0,)] b
      f:u16[4,3] = bitcast_convert_type[new_dtype=uint16] e
      g:f16[4,3] = convert_element_type[new_dtype=float16 weak_type=False] c
    in (d, f, g) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 90);
  const uint64_t half_nans[] = {0x7c01, 0xfd55, 0x7e00, 0x7fff};
  const uint64_t bf16_nans[] = {0x7f81, 0xffc1, 0x7fa0, 0xff80 /* -inf */};
  for (int i = 0; i < 4; i++) {
    in[0].SetBits(i * 3, half_nans[i]);
    in[1].SetBits(i * 2, bf16_nans[i]);
  }
  Group g(p.get(), KFUSE_LOOP);
  checks.Add(std::move(p), std::move(g), in, Tol(), "half copies");
}

// f32 -> bf16 bit for bit (the C target's vector rounding, kernels/host.h):
// ties to even, carries into the exponent and to inf, NaNs of either sign
// with payload only in the low bits, a bf16 sum and product rounded alike.
// f32 -> bf16 conversion bit for bit on every edge (ties, NaN payloads,
// overflow), then bf16 arithmetic rounded each step. The arithmetic reads a
// copy without NaNs: the payload of a NaN that arithmetic produces is the
// hardware's (GPUs give the canonical one, x86 keeps the operand's).
TEST(CodegenElementwise, Bf16RoundingBitForBit) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f32[24] g:f32[24]. let
      b:bf16[24] = convert_element_type[new_dtype=bfloat16 weak_type=False] a
      c:u16[24] = bitcast_convert_type[new_dtype=uint16] b
      h:bf16[24] = convert_element_type[new_dtype=bfloat16 weak_type=False] g
      d:bf16[24] = add h h
      e:bf16[24] = mul d h
      f:u16[24] = bitcast_convert_type[new_dtype=uint16] e
    in (c, f) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 91);
  const uint64_t bits[] = {0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f807fff, 0xbf808000,
                           0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7f8000, 0x7f800000,
                           0xff800000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffc00001,
                           0x7fbfffff, 0x80000000, 0x00000000, 0x3b808000, 0x477fe000};
  for (int64_t i = 0; i < (int64_t)(sizeof bits / sizeof bits[0]); i++) {
    bool nan = (bits[i] & 0x7fffffffu) > 0x7f800000u;
    in[0].SetBits(i, bits[i]);
    in[1].SetBits(i, nan ? 0x3f808000u : bits[i]);
  }
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "bf16 rounding");
}

// Eight primitives in a chain, in f32 and in bf16 (every step rounded).
TEST(CodegenElementwise, EightOpChain) {
  Checks checks;
  for (const char *t : {"f32", "bf16", "f16"}) {
    std::string ty = std::string(t) + "[33,17]";
    std::string text = std::string("{ lambda ; a:") + ty + " b:" + ty + ". let\n" +
                       "  c:" + ty + " = mul a b\n  d:" + ty + " = add c a\n  e:" + ty +
                       " = tanh d\n  f:" + ty + " = sub e b\n  g:" + ty + " = exp f\n  h:" + ty +
                       " = max g a\n  i:" + ty + " = div h 3.0:" + t + "[]\n  j:" + ty +
                       " = sqrt i\n  in (j,) }";
    Program p = Parse(text);
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 13);
    checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), std::string("chain ") + t);
  }
}

// Broadcasts, transposes, slices, reversals, reshapes, squeezes, iotas:
// index maps composed, with their results never materialized.
TEST(CodegenIndexMaps, ComposedMaps) {
  Checks checks;
  const char *texts[] = {
      // broadcast a row and a column, transpose, add
      R"({ lambda ; a:f32[4,6] b:f32[6] c:f32[4,1]. let
        d:f32[4,6] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(4, 6)] b
        e:f32[4,6] = add a d
        f:f32[4,6] = mul e c
        g:f32[6,4] = transpose[permutation=(1, 0)] f
        h:f32[6,4] = exp g
      in (h,) })",
      // a rank-3 transpose of a sliced, reversed operand
      R"({ lambda ; a:f32[5,8,7]. let
        b:f32[5,8,7] = rev[dimensions=(0, 2)] a
        c:f32[3,4,7] = slice[limit_indices=(5, 8, 7) start_indices=(0, 1, 0) strides=(2, 2, 1)] b
        d:f32[7,3,4] = transpose[permutation=(2, 0, 1)] c
        e:f32[7,3,4] = neg d
      in (e,) })",
      // reshape, squeeze, expand_dims around a transposed value
      R"({ lambda ; a:f32[2,3,4] b:f32[4,1,6]. let
        c:f32[6,4] = reshape[new_sizes=(6, 4)] a
        d:f32[4,6] = transpose[permutation=(1, 0)] c
        e:f32[4,6] = squeeze[dimensions=(1,)] b
        f:f32[4,6] = add d e
        g:f32[1,4,6,1] = expand_dims[dimensions=(0, 3)] f
        h:f32[24] = reshape[new_sizes=(24,)] g
        i:f32[24] = sin h
      in (i,) })",
      // iota along each axis, compared with an input; a broadcast scalar
      R"({ lambda ; a:i32[3,5] b:f32[]. let
        c:i32[3,5] = iota[dimension=0 dtype=int32 shape=(3, 5)]
        d:i32[3,5] = iota[dimension=1 dtype=int32 shape=(3, 5)]
        e:i32[3,5] = mul c 5:i32[]
        f:i32[3,5] = add e d
        g:bool[3,5] = eq f a
        h:f32[3,5] = broadcast_in_dim[broadcast_dimensions=() shape=(3, 5)] b
        i:f32[3,5] = iota[dimension=1 dtype=float32 shape=(3, 5)]
        j:f32[3,5] = add h i
        k:f16[3,5] = iota[dimension=0 dtype=float16 shape=(3, 5)]
      in (g, j, f, k) })",
      // a value read under two index maps (itself and its transpose)
      R"({ lambda ; a:f32[5,5]. let
        b:f32[5,5] = exp a
        c:f32[5,5] = transpose[permutation=(1, 0)] b
        d:f32[5,5] = sub b c
      in (d,) })",
      // a reshape that splits and merges dimensions, read reversed
      R"({ lambda ; a:u8[4,6]. let
        b:u8[3,8] = reshape[new_sizes=(3, 8)] a
        c:u8[3,8] = rev[dimensions=(1,)] b
        d:u8[8,3] = transpose[permutation=(1, 0)] c
        e:u8[8,3] = add d 1:u8[]
      in (e,) })",
  };
  int seed = 20;
  for (const char *t : texts) {
    Program p = Parse(t);
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)seed++);
    if (Contains(t, "iota[dimension=0 dtype=int32"))
      for (int64_t i = 0; i < 15; i++) in[0].Set(i, (double)(i % 4 == 0 ? i + 1 : i));
    checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), t);
  }
}

// Loops over rows long enough for the C target's nested form: broadcast,
// transposed and reversed operands read per row, outputs written as rows, the
// kernel run over split row ranges; and a rank-3 group whose row coordinates
// are derived once per row.
TEST(CodegenIndexMaps, NestedRowsWithBroadcastAndTranspose) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f32[40,24] b:f32[24] c:f32[40,1] d:f32[24,40]. let
        e:f32[40,24] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(40, 24)] b
        f:f32[40,24] = add a e
        g:f32[40,24] = mul f c
        h:f32[40,24] = transpose[permutation=(1, 0)] d
        i:f32[40,24] = rev[dimensions=(1,)] h
        j:f32[40,24] = sub g i
        k:f32[40,24] = tanh j
      in (j, k) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 31);
  const kcg_kernel *k = checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "rank 2");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 40);
  EXPECT_EQ(k->row_length, 24);
  std::string body = k->source + std::string(k->source).rfind("void ");
  EXPECT_FALSE(Contains(body, " / ") || Contains(body, " % ")) << body;

  Program q = Parse(R"({ lambda ; a:f32[3,40,20] b:f32[3,1,20] c:f32[20,40,3]. let
        d:f32[3,40,20] = broadcast_in_dim[broadcast_dimensions=(0, 1, 2) shape=(3, 40, 20)] b
        e:f32[3,40,20] = transpose[permutation=(2, 1, 0)] c
        f:f32[3,40,20] = mul a d
        g:f32[3,40,20] = add f e
        h:f32[3,40,20] = exp g
      in (h,) })");
  ASSERT_TRUE(q);
  std::vector<Buf> qin = Inputs(q.get(), 32);
  // On a GPU mul then add contract into one FMA (one rounding, as XLA's
  // kernels do there), a difference of an ulp in g that exp magnifies.
  Tol fma;
  fma.f32 = 4e-6;
  const kcg_kernel *kq = checks.Add(std::move(q), KFUSE_LOOP, qin, fma, "rank 3");
  ASSERT_TRUE(kq);
  EXPECT_EQ(kq->n_items, 120);
  EXPECT_EQ(kq->row_length, 20);
}
