// The code generator on REDUCE and ROW groups: every axis set, every shape
// class (full, rows, columns, a middle axis) split across CUDA blocks and
// the C target's threads, results independent of the split, and softmax
// and LayerNorm rows of many lengths (codegen_checks.h).
#include <gtest/gtest.h>

#include "codegen_checks.h"

using namespace codegen_test;

// ---------------------------------------------------------------------------
// Reductions

// Every reduction over every non-empty axis set of a rank-3 array, fused with
// a producer and an epilogue; the reductions of one axis set share a kernel.
TEST(CodegenReduce, EveryAxisSetOfRank3) {
  Checks checks;
  const std::vector<std::vector<int>> sets = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  const int64_t shape[3] = {3, 5, 19};
  for (const auto &axes : sets) {
    std::vector<int64_t> kept;
    std::string ax = "(";
    for (int d = 0; d < 3; d++) {
      bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
      if (!reduced) kept.push_back(shape[d]);
    }
    for (size_t k = 0; k < axes.size(); k++) ax += std::to_string(axes[k]) + (axes.size() == 1 ? "," : k + 1 < axes.size() ? ", " : "");
    ax += ")";
    std::string in3 = "[3,5,19]", out = Type(KILN_F32, kept).substr(3);
    std::string text = "{ lambda ; a:f32" + in3 + " b:i32" + in3 + " c:bool" + in3 + " d:f16" + in3 +
                       ". let\n"
                       "  e:f32" + in3 + " = mul a a\n"
                       "  s:f32" + out + " = reduce_sum[axes=" + ax + "] e\n"
                       "  t:f32" + out + " = reduce_max[axes=" + ax + "] a\n"
                       "  u:f32" + out + " = reduce_min[axes=" + ax + "] a\n"
                       "  v:f32" + out + " = reduce_prod[axes=" + ax + "] a\n"
                       "  w:i32" + out + " = reduce_sum[axes=" + ax + "] b\n"
                       "  x:i32" + out + " = reduce_max[axes=" + ax + "] b\n"
                       "  y:bool" + out + " = reduce_and[axes=" + ax + "] c\n"
                       "  z:bool" + out + " = reduce_or[axes=" + ax + "] c\n"
                       "  f:f16" + out + " = reduce_sum[axes=" + ax + "] d\n"
                       "  g:f32" + out + " = sqrt s\n"
                       "  h:f32" + out + " = sub t u\n"
                       "  in (g, h, v, w, x, y, z, f) }";
    Program p = Parse(text);
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), 30);
    std::mt19937_64 rng(31);
    Fill(in[1], rng, Domain::kSmallInt);
    for (int64_t i = 0; i < in[0].size(); i++)  // products of magnitudes near 1
      in[0].Set(i, 0.8 + 0.4 * ((double)(rng() % 1000) / 1000.0));
    for (int64_t i = 0; i < in[2].size(); i++) in[2].Set(i, (rng() % 8) != 0);
    checks.Add(std::move(p), KFUSE_REDUCE, in, Tol::Reductions(), "axes " + ax);
  }
}

// Long reductions: the C target's lanes and the CUDA warp / block modes.
TEST(CodegenReduce, LongRowsAndColumns) {
  Checks checks;
  const char *texts[] = {
      // a long contiguous row per item (CUDA: a warp per item)
      R"({ lambda ; a:f32[6,3001]. let
        b:f32[6,3001] = mul a 0.5:f32[]
        c:f32[6] = reduce_sum[axes=(1,)] b
        d:f32[6] = reduce_max[axes=(1,)] a
      in (c, d) })",
      // one long reduction (CUDA: a block)
      R"({ lambda ; a:f32[20000]. let
        b:f32[] = reduce_sum[axes=(0,)] a
      in (b,) })",
      // down the columns (CUDA: a thread per item)
      R"({ lambda ; a:f64[700,9]. let
        b:f64[9] = reduce_sum[axes=(0,)] a
        c:f64[9] = reduce_min[axes=(0,)] a
      in (b, c) })",
      // long columns over few items (CUDA: a block per item)
      R"({ lambda ; a:f32[2000,3]. let
        b:f32[3] = reduce_max[axes=(0,)] a
      in (b,) })",
      // over the leading axes, more items than one tile of the C target's
      // column loop (64), a producer and an epilogue fused in
      R"({ lambda ; a:f32[37,150] b:f32[37,150]. let
        c:f32[37,150] = mul a b
        d:f32[150] = reduce_sum[axes=(0,)] c
        e:f32[150] = reduce_max[axes=(0,)] a
        f:f32[150] = sub d e
      in (f, d) })",
      R"({ lambda ; a:bf16[5,3,70]. let
        b:bf16[70] = reduce_sum[axes=(0, 1)] a
      in (b,) })",
      // reduced to one element per item, kept as a column
      R"({ lambda ; a:f32[4,3,100]. let
        b:f32[4] = reduce_sum[axes=(1, 2)] a
        c:f32[4,1] = reshape[new_sizes=(4, 1)] b
        d:f32[4,1] = mul c 0.01:f32[]
      in (d,) })",
      // a reduction of nothing, and a reduction of a rank-0 value
      R"({ lambda ; a:f32[3,4] b:f32[]. let
        c:f32[3,4] = reduce_sum[axes=()] a
        d:f32[] = reduce_max[axes=()] b
        e:f32[3,4] = add c d
      in (e,) })",
  };
  int seed = 40;
  for (const char *t : texts) {
    Program p = Parse(t);
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)seed++);
    checks.Add(std::move(p), KFUSE_REDUCE, in, Tol::Reductions(), t);
  }
  // More reductions over one operand shape than one loop computes.
  std::string text = "{ lambda ; a:f32[4,10]. let\n";
  std::string outs;
  for (int k = 0; k < KCG_MAX_SET + 4; k++) {
    std::string m = "m" + std::to_string(k), r = "r" + std::to_string(k);
    text += "  " + m + ":f32[4,10] = mul a " + std::to_string(k + 1) + ".0:f32[]\n";
    text += "  " + r + ":f32[4] = reduce_" + (k % 2 ? "sum" : "max") + "[axes=(1,)] " + m + "\n";
    outs += (k ? ", " : "") + r;
  }
  Program many = Parse(text + "  in (" + outs + ") }");
  ASSERT_TRUE(many);
  std::vector<Buf> in = Inputs(many.get(), 49);
  checks.Add(std::move(many), KFUSE_REDUCE, in, Tol::Reductions(), "many reductions");
}

// Every shape class of reduction, by value on the C target (whole and split
// ranges, against the reference executor) and by NVRTC compile for sm_80 and
// sm_90: full reductions, few long rows, columns, a middle axis; f32, bf16,
// f64, integers, bools; sizes that do and do not divide the CUDA tile (32
// items x 8 threads), block (256) and the C target's shares. Long ones
// split: CUDA kernels across blocks, C kernels across the runtime's threads.
namespace {

// Values k/4 for k in [-8, 8] (f32), k/2 for k in [-2, 2] (bf16): the
// partial sums of the tests' sizes are exact, so sums in any order agree
// bit for bit (bf16 sums round every step).
void Exact(Buf &b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  bool bf16 = b.aval.dtype == KILN_BF16;
  for (int64_t i = 0; i < b.size(); i++)
    b.Set(i, bf16 ? ((double)(rng() % 5) - 2.0) / 2.0 : ((double)(rng() % 17) - 8.0) / 4.0);
}

struct ReduceClass {
  const char *what, *text;
  bool c_split;         // the C kernel splits items into shares
  int cuda_tile;        // CUDA: 0 = no tile (thread/warp), else items per tile
  bool cuda_split;      // CUDA: several blocks per tile
};

const ReduceClass kReduceClasses[] = {
    {"full f32", R"({ lambda ; a:f32[1000003]. let
        s:f32[] = reduce_sum[axes=(0,)] a
        m:f32[] = reduce_max[axes=(0,)] a
        e:f32[] = add s m
      in (s, e) })", true, 1, true},
    {"full f64", R"({ lambda ; a:f64[262147]. let
        s:f64[] = reduce_sum[axes=(0,)] a
        m:f64[] = reduce_min[axes=(0,)] a
      in (s, m) })", true, 1, true},
    {"full i32", R"({ lambda ; a:i32[300000]. let
        s:i32[] = reduce_sum[axes=(0,)] a
        m:i32[] = reduce_max[axes=(0,)] a
      in (s, m) })", true, 1, true},
    {"full bool and bf16", R"({ lambda ; a:bool[140000,2]. let
        s:bool[] = reduce_and[axes=(0, 1)] a
        m:bool[] = reduce_or[axes=(0, 1)] a
      in (s, m) })", true, 1, true},
    {"full bf16 max", R"({ lambda ; a:bf16[200003]. let
        m:bf16[] = reduce_max[axes=(0,)] a
        n:bf16[] = neg m
      in (n,) })", true, 1, true},
    {"few long rows", R"({ lambda ; a:f32[3,200001] b:i32[3,200001]. let
        s:f32[3] = reduce_sum[axes=(1,)] a
        t:i32[3] = reduce_sum[axes=(1,)] b
      in (s, t) })", true, 1, true},
    {"columns f32", R"({ lambda ; a:f32[5000,300]. let
        s:f32[300] = reduce_sum[axes=(0,)] a
        m:f32[300] = reduce_max[axes=(0,)] a
      in (s, m) })", false, 32, true},
    {"columns f64 (7 kept)", R"({ lambda ; a:f64[3001,7]. let
        s:f64[7] = reduce_sum[axes=(0,)] a
      in (s,) })", false, 8, true},
    {"columns i32 (dividing)", R"({ lambda ; a:i32[2048,64]. let
        s:i32[64] = reduce_sum[axes=(0,)] a
        m:i32[64] = reduce_max[axes=(0,)] a
      in (s, m) })", false, 32, true},
    {"columns bf16", R"({ lambda ; a:bf16[300,130]. let
        s:bf16[130] = reduce_sum[axes=(0,)] a
        m:bf16[130] = reduce_max[axes=(0,)] a
      in (s, m) })", false, 32, true},
    {"middle axis f32", R"({ lambda ; a:f32[6,3000,20]. let
        s:f32[6,20] = reduce_sum[axes=(1,)] a
      in (s,) })", false, 32, true},
    {"middle axis i32", R"({ lambda ; a:i32[5,2999,3]. let
        m:i32[5,3] = reduce_max[axes=(1,)] a
      in (m,) })", false, 4, true},
    // two sets (the second reads the first): tiles, not split
    {"column variance", R"({ lambda ; a:f32[300,40]. let
        s:f32[40] = reduce_sum[axes=(0,)] a
        m:f32[40] = mul s 0.0033333333:f32[]
        b:f32[300,40] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(300, 40)] m
        d:f32[300,40] = sub a b
        q:f32[300,40] = mul d d
        v:f32[40] = reduce_sum[axes=(0,)] q
      in (v,) })", false, 32, false},
};

}  // namespace

TEST(CodegenReduce, ShapeClassesSplitAcrossBlocksAndThreads) {
  Checks checks;
  int seed = 60;
  for (const ReduceClass &rc : kReduceClasses) {
    SCOPED_TRACE(rc.what);
    Program p = Parse(rc.text);
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)seed++);
    for (Buf &b : in)
      if (b.aval.dtype == KILN_F32 || b.aval.dtype == KILN_BF16) Exact(b, (uint64_t)seed++);
    Group g(p.get(), KFUSE_REDUCE);
    auto cuda = Emit(p.get(), g.get(), KCG_TARGET_CUDA, 90);
    ASSERT_TRUE(cuda);
    std::string src = cuda->k.source;
    EXPECT_EQ(cuda->k.items_per_block, rc.cuda_tile ? rc.cuda_tile : cuda->k.items_per_block);
    EXPECT_EQ(Contains(src, "kiln_tile_"), rc.cuda_tile > 0) << src;
    EXPECT_EQ(cuda->k.split > 1, rc.cuda_split);
    EXPECT_EQ(cuda->k.scratch_bytes > 0, rc.cuda_split);
    // The only atomic is the integer count of a tile's blocks.
    size_t atomic = src.find("atomicAdd(");
    EXPECT_EQ(atomic != std::string::npos, rc.cuda_split);
    if (atomic != std::string::npos) {
      EXPECT_EQ(src.compare(atomic, 18, "atomicAdd(&tcount["), 0) << src.substr(atomic, 40);
      EXPECT_EQ(src.find("atomicAdd(", atomic + 1), std::string::npos);
    }
    const kcg_kernel *c = checks.Add(std::move(p), std::move(g), in, Tol::Reductions(), rc.what);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->split > 1, rc.c_split);
    EXPECT_EQ(c->scratch_bytes > 0, rc.c_split);
  }
}

// A split C reduction gives the same bits however its shares are spread
// over calls and in whatever order they finish: shares run one call each,
// first to last and last to first, and all in one call.
TEST(CodegenReduce, SplitResultsDoNotDependOnOrder) {
  Program p = Parse(R"({ lambda ; a:f32[777777] b:f64[777777]. let
      c:f32[777777] = mul a 1.37:f32[]
      s:f32[] = reduce_sum[axes=(0,)] c
      t:f32[] = reduce_prod[axes=(0,)] a
      u:f64[] = reduce_sum[axes=(0,)] b
    in (s, t, u) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 71, Domain::kUnit);
  Group g(p.get(), KFUSE_REDUCE);
  auto k = Emit(p.get(), g.get(), KCG_TARGET_C);
  ASSERT_TRUE(k);
  ASSERT_GT(k->k.split, 1);
  EXPECT_EQ(k->k.n_items, k->k.split);
  std::unique_ptr<CModule> mod = CompileC(k->k.name, k->k.source);
  ASSERT_TRUE(mod);
  kcg_c_kernel_fn fn = mod->Symbol(k->k);
  ASSERT_TRUE(fn);
  std::vector<uint64_t> scratch((size_t)(k->k.scratch_bytes + 7) / 8, 0);
  auto run = [&](const std::vector<std::pair<int64_t, int64_t>> &calls) {
    std::vector<Buf> out;
    for (int q = 0; q < g.g.n_out; q++) out.emplace_back(*kir_var_aval(p.get(), g.g.out[q]));
    kiln_kernel_args args;
    memset(&args, 0, sizeof args);
    for (int s = 0; s < g.g.n_in; s++) args.ptr[s] = in[s].data();
    for (int q = 0; q < g.g.n_out; q++) args.ptr[g.g.n_in + q] = out[q].data();
    args.ptr[g.g.n_in + g.g.n_out] = scratch.data();
    for (auto [b, e] : calls) fn(args, b, e);
    return out;
  };
  int64_t n = k->k.n_items;
  std::vector<std::pair<int64_t, int64_t>> forward, backward;
  for (int64_t w = 0; w < n; w++) {
    forward.push_back({w, w + 1});
    backward.push_back({n - 1 - w, n - w});
  }
  std::vector<Buf> whole = run({{0, n}}), fw = run(forward), bw = run(backward);
  for (size_t q = 0; q < whole.size(); q++) {
    EXPECT_EQ(whole[q].bytes, fw[q].bytes) << "output " << q;
    EXPECT_EQ(whole[q].bytes, bw[q].bytes) << "output " << q;
  }
  // The item's counter (the scratch's first word) is left zero for the next call.
  EXPECT_EQ((uint32_t)scratch[0], 0u);
  std::vector<Buf> want = Reference(p.get(), in);
  for (size_t q = 0; q < whole.size(); q++)
    EXPECT_TRUE(Same(whole[q], want[q], Tol::Reductions(), "output " + std::to_string(q)));
}

// ---------------------------------------------------------------------------
// ROW groups (Softmax and LayerNorm: codegen_test_programs.h)

TEST(CodegenRow, SoftmaxRowsOfManyLengths) {
  Checks checks;
  for (int64_t len : {1, 3, 8, 9, 33, 100, 1000, 1025, 8192}) {
    int64_t rows = len >= 4096 ? 2 : 5;
    Program p = Parse(Softmax(rows, len));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)len);
    const kcg_kernel *k = checks.Add(std::move(p), KFUSE_ROW, in, Tol::Reductions(),
                                     "softmax L=" + std::to_string(len));
    ASSERT_TRUE(k);
    EXPECT_EQ(k->n_items, rows);
    EXPECT_EQ(k->row_length, len);
  }
  // bf16 rows: every step rounded; on the C target the bulk of a row runs
  // over KILN_ROW_LANES accumulators and the rest (77 = 64 + 13, 1000 =
  // 992 + 8) over one
  for (int64_t len : {77, 1000}) {
    Program p = Parse(Softmax(3, len, "bf16"));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)len);
    checks.Add(std::move(p), KFUSE_ROW, in, Tol::Reductions(),
               "softmax bf16 L=" + std::to_string(len));
  }
}

TEST(CodegenRow, LayerNormWithPerRowOutputs) {
  Checks checks;
  for (int64_t len : {1, 7, 64, 1000, 4097}) {
    int64_t rows = len > 1000 ? 2 : 6;
    Program p = Parse(LayerNorm(rows, len));
    ASSERT_TRUE(p);
    std::vector<Buf> in = Inputs(p.get(), (uint64_t)len + 100);
    checks.Add(std::move(p), KFUSE_ROW, in, Tol::Reductions(), "layernorm L=" + std::to_string(len));
  }
}

// Rows over several leading dimensions, a per-row output kept as [rows, 1],
// and log-softmax's two passes.
TEST(CodegenRow, RankThreeRowsAndLogSoftmax) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f32[2,3,50]. let
      b:f32[2,3] = reduce_max[axes=(2,)] a
      c:f32[2,3,1] = broadcast_in_dim[broadcast_dimensions=(0, 1) shape=(2, 3, 1)] b
      d:f32[2,3,50] = sub a c
      e:f32[2,3,50] = exp d
      f:f32[2,3] = reduce_sum[axes=(2,)] e
      g:f32[2,3] = log f
      h:f32[2,3,1] = broadcast_in_dim[broadcast_dimensions=(0, 1) shape=(2, 3, 1)] g
      i:f32[2,3,50] = sub d h
      j:f32[2,3,1] = reshape[new_sizes=(2, 3, 1)] f
    in (i, j) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 50);
  checks.Add(std::move(p), KFUSE_ROW, in, Tol::Reductions(), "log-softmax");
}
