// The scatter family through the public API (kiln_scatter*, kiln_at_*)
// under kiln_jit, on the C target (fused) and on the reference executor
// (and, built as test_scatter_cuda, the golden cases on a GPU),
// against JAX (golden/scatter.py -> scatter_grad.txt): values, vjp and jvp
// of x.at[idx].set/add/mul/min/max(u) with repeated indices and ties, vmap
// over the operand, the updates and the indices; and bad input. The
// evaluators' bitwise goldens are in test_eval_shape.cc (scatter.txt).
#include <functional>

#include "codegen/codegen.h"
#include "ir/ir.h"
#include "kiln/transform.h"
#include "support/nvrtc_test_util.h"
#include "support/transform_test_util.h"

namespace {
using namespace ktest;

const char kFile[] = "scatter_grad.txt";
const GoldenArray &S(const std::string &c, const std::string &n) { return G(c, n, kFile); }

using AtFn = kiln_val *(*)(kiln_trace *, kiln_val *, kiln_val *, int, kiln_val *,
                           kiln_index_mode, int);
const std::map<std::string, AtFn> &AtOps() {
  static const std::map<std::string, AtFn> m = {
      {"set", kiln_at_set}, {"add", kiln_at_add}, {"mul", kiln_at_mul},
      {"min", kiln_at_min}, {"max", kiln_at_max}};
  return m;
}

// One case: the op, its axis and whether it promises unique indices (the
// golden script's at(); mul's update gradient needs them, as in JAX).
struct AtCase {
  AtFn fn;
  int axis;
  int flags;
};

// The indices travel as an f32 argument (exact small integers).
kiln_val *Apply(kiln_trace *t, const AtCase &k, kiln_val *x, kiln_val *u, kiln_val *i) {
  return k.fn(t, x, kiln_convert(t, i, KILN_I32), k.axis, u, KILN_INDEX_FILL, k.flags);
}

// (x, u, i) -> f; (x, u, i, c) -> sum(f * c)
kiln_tree *ApplyFn(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(Apply(t, *(AtCase *)u, ArgVal(a, 0), ArgVal(a, 1), ArgVal(a, 2)));
}
kiln_tree *LossFn(kiln_trace *t, const kiln_tree *a, void *u) {
  kiln_val *f = Apply(t, *(AtCase *)u, ArgVal(a, 0), ArgVal(a, 1), ArgVal(a, 2));
  return kiln_tree_val(SumAll(t, kiln_mul(t, f, ArgVal(a, 3))));
}

GoldenArray Floats(std::vector<float> v) { return {{(int64_t)v.size()}, std::move(v)}; }


void CheckGrad(Ctx &c, const std::string &name, AtCase k, const std::vector<float> &idx) {
  SCOPED_TRACE(name);
  Func loss(LossFn, &k, name.c_str()), apply(ApplyFn, &k, name.c_str());
  kiln_func *g = nullptr, *j = nullptr;
  int argnums[2] = {0, 1};
  ASSERT_EQ(kiln_grad(loss.f, argnums, 2, 0, &g), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_jvp(apply.f, &j), KILN_OK);
  Func gf(g), jf(j);
  GoldenArray i = Floats(idx), zi = Floats(std::vector<float>(idx.size(), 0));
  kiln_tree *out = Jit(c, apply.f, Tuple({Leaf(c.dev, S(name, "x")), Leaf(c.dev, S(name, "u")),
                                          Leaf(c.dev, i)}));
  if (out) ExpectNear(Values<float>(out), S(name, "y"), name + " value");
  kiln_tree_free(out);
  out = Jit(c, g, Tuple({Leaf(c.dev, S(name, "x")), Leaf(c.dev, S(name, "u")), Leaf(c.dev, i),
                         Leaf(c.dev, S(name, "c"))}));
  if (out) {
    ExpectNear(Values<float>(kiln_tree_child(out, 0)), S(name, "vjp_x"), name + " vjp x");
    ExpectNear(Values<float>(kiln_tree_child(out, 1)), S(name, "vjp_u"), name + " vjp u");
  }
  kiln_tree_free(out);
  out = Jit(c, j,
            Tuple({Tuple({Leaf(c.dev, S(name, "x")), Leaf(c.dev, S(name, "u")), Leaf(c.dev, i)}),
                   Tuple({Leaf(c.dev, S(name, "tx")), Leaf(c.dev, S(name, "tu")),
                          Leaf(c.dev, zi)})}));
  if (out) ExpectNear(Values<float>(kiln_tree_child(out, 1)), S(name, "jvp"), name + " jvp");
  kiln_tree_free(out);
}

void CheckAllGrads(kiln_executor e) {
  Ctx c(e);
  if (!c.ctx) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
  for (const auto &[op, fn] : AtOps()) {
    int unique = op == "mul" ? KILN_SCATTER_UNIQUE_INDICES : 0;
    CheckGrad(c, op + "_dup", {fn, 0, unique}, op == "mul" ? std::vector<float>{2, 0, 4}
                                                           : std::vector<float>{2, 0, 2});
    CheckGrad(c, op + "_axis1", {fn, 1, unique}, {2, 0, 4});
  }
  CheckGrad(c, "min_ties", {kiln_at_min, 0, 0}, {0, 0, 2});
  CheckGrad(c, "max_ties", {kiln_at_max, 0, 0}, {0, 0, 2});
}

TEST(Scatter, ValuesJvpAndVjpMatchJaxOnTheCTarget) { CheckAllGrads(KILN_EXECUTOR_FUSED); }
TEST(Scatter, ValuesJvpAndVjpMatchJaxOnTheReferenceExecutor) {
  CheckAllGrads(KILN_EXECUTOR_REFERENCE);
}

TEST(Scatter, VmapOverOperandUpdatesAndIndicesMatchesJax) {
  Ctx c(KILN_EXECUTOR_FUSED);
  if (!c.ctx) GTEST_SKIP() << "no usable CUDA device: " << kiln_last_error();
  const std::pair<const char *, std::vector<int>> placements[] = {
      {"x", {0, -1, -1}}, {"u", {-1, 0, -1}}, {"i", {-1, -1, 0}}, {"all", {0, 0, 0}}};
  for (const auto &[op, fn] : AtOps()) {
    AtCase k{fn, 0, 0};
    Func apply(ApplyFn, &k, op.c_str());
    for (const auto &[where, axes] : placements) {
      std::string name = "vmap_" + op + "_" + where;
      SCOPED_TRACE(name);
      std::vector<kiln_tree *> in;
      for (int a : axes) in.push_back(a < 0 ? kiln_tree_none() : kiln_axis(a));
      kiln_tree *in_axes = Tuple(in);
      kiln_func *v = nullptr;
      ASSERT_EQ(kiln_vmap(apply.f, in_axes, nullptr, 0, nullptr, &v), KILN_OK)
          << kiln_last_error();
      kiln_tree_free(in_axes);
      Func vf(v);
      kiln_tree *out = Jit(c, v, Tuple({Leaf(c.dev, S(name, "x")), Leaf(c.dev, S(name, "u")),
                                        Leaf(c.dev, S(name, "i"))}));
      if (out) ExpectNear(Values<float>(out), S(name, "y"), name);
      kiln_tree_free(out);
    }
  }
}

// ---- bad input: a kiln_status naming the op, the shapes and dtypes ----

// (From here on, checks that need no GPU: the test_scatter_cuda build runs
// only the golden cases above, on a GPU.)
#ifndef KILN_TEST_CUDA_BACKEND
struct Bad {
  std::function<kiln_val *(kiln_trace *, kiln_val *)> f;
};
kiln_tree *BadFn(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(((Bad *)u)->f(t, ArgVal(a, 0)));
}

void ExpectTraceError(const Bad &b, kiln_status want, std::vector<std::string> needles) {
  Ctx c(KILN_EXECUTOR_FUSED);
  Func f(BadFn, (void *)&b, "bad");
  kiln_tree *out = Jit(c, f.f, Tuple({Leaf(c.dev, {{5, 4}, std::vector<float>(20, 1)})}), want);
  kiln_tree_free(out);
  std::string msg = kiln_last_error();
  for (const std::string &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

TEST(Scatter, FloatIndicesAreRejectedNamingTheOp) {
  ExpectTraceError({[](kiln_trace *t, kiln_val *x) {
                     int64_t n = 3;
                     kiln_val *i = kiln_iota(t, KILN_F32, 1, &n, 0);
                     return kiln_scatter_max(t, x, i, F32(t, 1), 0);
                   }},
                   KILN_ERR_DTYPE, {"kiln_scatter_max", "f32[3]"});
}

TEST(Scatter, UpdatesOfTheWrongShapeAreRejected) {
  ExpectTraceError({[](kiln_trace *t, kiln_val *x) {
                     int64_t n = 3, us[2] = {3, 5};
                     kiln_val *i = kiln_iota(t, KILN_I32, 1, &n, 0);
                     return kiln_scatter(t, x, i, kiln_full(t, KILN_F32, 2, us, 1), 0);
                   }},
                   KILN_ERR_SHAPE, {"f32[3,5]"});
}

TEST(Scatter, WrapModeIsRefused) {
  ExpectTraceError({[](kiln_trace *t, kiln_val *x) {
                     int64_t n = 3;
                     kiln_val *i = kiln_iota(t, KILN_I32, 1, &n, 0);
                     return kiln_at_mul(t, x, i, 0, F32(t, 2), KILN_INDEX_WRAP, 0);
                   }},
                   KILN_ERR_ARGUMENT, {"kiln_at_mul", "wrap"});
}

// The shape rule, reached through the IR: mismatched dtypes, a wrong index
// vector, bool in scatter-mul.
void ExpectRuleError(const char *text, kiln_status want, std::vector<std::string> needles) {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse(text, &p), want) << text;
  kir_program_free(p);
  std::string msg = kiln_last_error();
  for (const std::string &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

#define DNUMS                                                                     \
  "dimension_numbers=ScatterDimensionNumbers(update_window_dims=(), "             \
  "inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), "                \
  "operand_batching_dims=(), scatter_indices_batching_dims=()) "                  \
  "indices_are_sorted=False mode=GatherScatterMode.FILL_OR_DROP unique_indices=False"

TEST(Scatter, TheShapeRuleNamesOpShapesAndDtypes) {
  ExpectRuleError("{ lambda ; a:f32[4] b:i32[2,1] c:i32[2]. let\n"
                  "    d:f32[4] = scatter-min[" DNUMS "] a b c\n  in (d,) }",
                  KILN_ERR_DTYPE, {"scatter-min", "f32", "i32"});
  ExpectRuleError("{ lambda ; a:f32[4] b:i32[2,2] c:f32[2]. let\n"
                  "    d:f32[4] = scatter[" DNUMS "] a b c\n  in (d,) }",
                  KILN_ERR_SHAPE, {"scatter", "i32[2,2]", "scatter_dims_to_operand_dims"});
  ExpectRuleError("{ lambda ; a:bool[4] b:i32[2,1] c:bool[2]. let\n"
                  "    d:bool[4] = scatter-mul[" DNUMS "] a b c\n  in (d,) }",
                  KILN_ERR_DTYPE, {"scatter-mul", "bool[4]"});
  ExpectRuleError("{ lambda ; a:f32[4] b:i32[3,1] c:f32[2]. let\n"
                  "    d:f32[4] = scatter-max[" DNUMS "] a b c\n  in (d,) }",
                  KILN_ERR_SHAPE, {"scatter-max", "f32[2]", "i32[3,1]"});
}

// scatter-mul's gradient in its updates needs unique indices, as in JAX.
TEST(Scatter, MulGradientInTheUpdatesNeedsUniqueIndices) {
  Ctx c(KILN_EXECUTOR_FUSED);
  AtCase k{kiln_at_mul, 0, 0};
  Func loss(LossFn, &k, "mul_loss");
  kiln_func *g = nullptr;
  int argnum = 1;
  ASSERT_EQ(kiln_grad(loss.f, &argnum, 1, 0, &g), KILN_OK);
  Func gf(g);
  kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, S("mul_dup", "x")), Leaf(c.dev, S("mul_dup", "u")),
                                    Leaf(c.dev, Floats({2, 0, 2})), Leaf(c.dev, S("mul_dup", "c"))}),
                       KILN_ERR_UNIMPLEMENTED);
  kiln_tree_free(out);
  std::string msg = kiln_last_error();
  EXPECT_NE(msg.find("scatter-mul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unique_indices"), std::string::npos) << msg;
}

// ---- the CUDA kernels (codegen's kcg_emit_gather/_scatter over
// kernels/scatter.h) compile as device code; the index walk they share is
// checked against JAX's bits on the host in test_eval_shape ----

// take_along_axis's gather and its transpose, scatter-add, over [8, 10].
const char kGatherText[] =
    "{ lambda ; a:@DT@[8,10] b:i32[8,1,1]. let\n"
    "    c:@DT@[8,1] = gather[dimension_numbers=GatherDimensionNumbers(offset_dims=(), "
    "collapsed_slice_dims=(1,), start_index_map=(1,), operand_batching_dims=(0,), "
    "start_indices_batching_dims=(0,)) fill_value=None indices_are_sorted=False "
    "mode=GatherScatterMode.FILL_OR_DROP slice_sizes=(1, 1) unique_indices=False] a b\n"
    "  in (c,) }";
const char kScatterText[] =
    "{ lambda ; a:@DT@[8,10] b:i32[8,1,1] c:@DT@[8,1]. let\n"
    "    d:@DT@[8,10] = @OP@[dimension_numbers=ScatterDimensionNumbers(update_window_dims=(), "
    "inserted_window_dims=(1,), scatter_dims_to_operand_dims=(1,), operand_batching_dims=(0,), "
    "scatter_indices_batching_dims=(0,)) indices_are_sorted=False "
    "mode=GatherScatterMode.FILL_OR_DROP unique_indices=False] a b c\n"
    "  in (d,) }";

std::string Fill(std::string t, const std::string &key, const std::string &v) {
  for (size_t at; (at = t.find(key)) != std::string::npos;) t.replace(at, key.size(), v);
  return t;
}

std::string Ptx(const kcg_kernel &k) {
  std::string src = k.source;
  return NvrtcPtx(src.c_str(), {});
}

TEST(ScatterKernels, EmittedGatherAndScattersCompileUnderNvrtc) {
  kcg_target_info cuda{KCG_TARGET_CUDA, 80};
  for (const char *dt : {"f32", "bf16", "f16", "i32", "f64", "bool"}) {
    SCOPED_TRACE(dt);
    kir_program *p = nullptr;
    ASSERT_EQ(kir_parse(Fill(kGatherText, "@DT@", dt).c_str(), &p), KILN_OK) << kiln_last_error();
    kcg_kernel k;
    ASSERT_EQ(kcg_emit_gather(p, &p->eqns[0], &cuda, &k), KILN_OK) << kiln_last_error();
    EXPECT_NE(Ptx(k).find(std::string(".entry ") + k.name), std::string::npos) << k.source;
    kcg_kernel_free(&k);
    kir_program_free(p);
  }
  for (const char *op : {"scatter", "scatter-add", "scatter-mul", "scatter-min", "scatter-max"})
    for (const char *dt : {"f32", "i32", "f16", "bf16"})
      for (bool ordered : {false, true}) {
        SCOPED_TRACE(std::string(op) + " " + dt + (ordered ? " ordered" : " atomic"));
        kir_program *p = nullptr;
        std::string text = Fill(Fill(kScatterText, "@DT@", dt), "@OP@", op);
        ASSERT_EQ(kir_parse(text.c_str(), &p), KILN_OK) << kiln_last_error() << text;
        kcg_parts parts;
        ASSERT_EQ(kcg_emit_scatter(p, &p->eqns[0], &cuda, ordered, &parts), KILN_OK)
            << kiln_last_error();
        EXPECT_EQ(parts.items[0], 80);
        EXPECT_EQ(parts.items[1], ordered ? 80 : 8);
        std::string ptx = Ptx(parts.k), name = parts.k.name;
        EXPECT_NE(ptx.find(".entry " + name + "_copy"), std::string::npos);
        EXPECT_NE(ptx.find(".entry " + name + "_apply"), std::string::npos);
        if (!ordered && !strcmp(dt, "f32") && !strcmp(op, "scatter-add")) {
          EXPECT_NE(ptx.find("atom.global.add.f32"), std::string::npos) << "f32 adds use atomicAdd";
        }
        kcg_kernel_free(&parts.k);
        kir_program_free(p);
      }
  // The combining scatters of other dtypes stay on the host.
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse(Fill(Fill(kScatterText, "@DT@", "f64"), "@OP@", "scatter-add").c_str(), &p),
            KILN_OK);
  kcg_parts parts;
  EXPECT_EQ(kcg_emit_scatter(p, &p->eqns[0], &cuda, false, &parts), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(std::string(kiln_last_error()).find("f64[8,10]"), std::string::npos);
  kir_program_free(p);
}

#endif  // KILN_TEST_CUDA_BACKEND

}  // namespace
