// The code generator's refusals (bad arguments, unsupported primitives,
// malformed groups: a clear error, no kernel) and its kernels' ABI: the
// signatures and launch geometry, self-contained sources, 64-bit indices,
// and the embedded kernel sources against kernels/ (codegen_checks.h).
#include <gtest/gtest.h>

#include "codegen_checks.h"

using namespace codegen_test;

// ---------------------------------------------------------------------------
// Groups the emitter refuses

namespace {

void ExpectRefused(kiln_status want, const std::string &message, const kir_program *p,
                   const kfuse_group *g, kcg_target target = KCG_TARGET_C, int sm = 80) {
  kcg_kernel k;
  memset(&k, 0x5a, sizeof k);
  kcg_target_info t{target, sm};
  EXPECT_EQ(kcg_emit(p, g, &t, &k), want) << message;
  std::string err = kiln_last_error();
  EXPECT_TRUE(Contains(err, "kcg_emit")) << err;
  EXPECT_TRUE(Contains(err, message)) << err;
  EXPECT_EQ(k.name, nullptr);
  EXPECT_EQ(k.source, nullptr);
  kcg_kernel_free(&k);
}

}  // namespace

TEST(CodegenErrors, BadArgumentsAndTargets) {
  Program p = Parse("{ lambda ; a:f32[4]. let b:f32[4] = exp a in (b,) }");
  ASSERT_TRUE(p);
  Group g(p.get(), KFUSE_LOOP);
  kcg_target_info t{KCG_TARGET_C, 0};
  kcg_kernel k;
  EXPECT_EQ(kcg_emit(p.get(), g.get(), &t, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcg_emit: NULL output"));
  EXPECT_EQ(kcg_emit(nullptr, g.get(), &t, &k), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcg_emit: NULL program"));
  EXPECT_EQ(kcg_emit(p.get(), nullptr, &t, &k), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcg_emit: NULL group"));
  EXPECT_EQ(kcg_emit(p.get(), g.get(), nullptr, &k), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcg_emit: NULL target"));
  kcg_kernel_free(nullptr);  // allowed

  kcg_target_info bad{(kcg_target)7, 80};
  EXPECT_EQ(kcg_emit(p.get(), g.get(), &bad, &k), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kcg_emit: unknown target 7"));
  ExpectRefused(KILN_ERR_ARGUMENT, "sm_35 is not supported", p.get(), g.get(), KCG_TARGET_CUDA, 35);

  Group dot(p.get(), KFUSE_DOT);
  ExpectRefused(KILN_ERR_UNIMPLEMENTED, "DOT groups are not generated code", p.get(), dot.get());
  Group opaque(p.get(), KFUSE_OPAQUE);
  ExpectRefused(KILN_ERR_UNIMPLEMENTED, "OPAQUE groups", p.get(), opaque.get());
}

TEST(CodegenErrors, UnsupportedPrimitivesAndShapes) {
  struct Refused {
    const char *program;
    kfuse_kind kind;
    kiln_status status;
    const char *message;
  };
  const Refused cases[] = {
      {"{ lambda ; a:f32[4]. let b:f32[4] = cumsum[axis=0 reverse=False] a in (b,) }", KFUSE_LOOP,
       KILN_ERR_UNIMPLEMENTED, "cumsum (equation 0) is not fused"},
      {"{ lambda ; a:f32[4,3] b:f32[3,2]. let c:f32[4,2] = dot_general[dimension_numbers=(([1], "
       "[0]), ([], [])) preferred_element_type=None] a b in (c,) }",
       KFUSE_LOOP, KILN_ERR_UNIMPLEMENTED, "dot_general (equation 0) is not fused"},
      {"{ lambda ; a:f32[4] b:f32[2]. let c:f32[6] = concatenate[dimension=0] a b in (c,) }",
       KFUSE_LOOP, KILN_ERR_UNIMPLEMENTED, "concatenate"},
      {"{ lambda ; a:f32[4,3]. let b:f32[4] = reduce_sum[axes=(1,)] a in (b,) }", KFUSE_LOOP,
       KILN_ERR_UNIMPLEMENTED, "LOOP group holds reduce_sum (equation 0)"},
      {"{ lambda ; a:f32[4]. let b:f32[4] = exp a in (b,) }", KFUSE_REDUCE,
       KILN_ERR_UNIMPLEMENTED, "REDUCE group holds no reduction"},
      {"{ lambda ; a:f32[4,3]. let b:f32[3] = reduce_sum[axes=(0,)] a in (b,) }", KFUSE_ROW,
       KILN_ERR_UNIMPLEMENTED, "is not over the last axis"},
      {"{ lambda ; a:f32[4,3] b:f32[2,6]. let c:f32[4] = reduce_sum[axes=(1,)] a\n"
       "  d:f32[2] = reduce_sum[axes=(1,)] b in (c, d) }",
       KFUSE_ROW, KILN_ERR_UNIMPLEMENTED, "is not over the last axis of the row shape f32[4,3]"},
      {"{ lambda ; a:f32[4,3] b:f32[5]. let c:f32[4] = reduce_sum[axes=(1,)] a\n"
       "  d:f32[5] = exp b in (c, d) }",
       KFUSE_ROW, KILN_ERR_UNIMPLEMENTED, "output f32[5] is neither row-shaped"},
      {"{ lambda ; a:f32[4] b:f32[5]. let c:f32[4] = exp a\n d:f32[5] = exp b in (c, d) }",
       KFUSE_LOOP, KILN_ERR_UNIMPLEMENTED, "outputs f32[4] and f32[5] differ in size"},
  };
  // select_n with more cases than a fused equation takes
  std::string text = "{ lambda ; w:i32[3] x:f32[3]. let y:f32[3] = select_n w";
  for (int k = 0; k < KCG_MAX_OPERANDS; k++) text += " x";
  Program wide = Parse(text + " in (y,) }");
  ASSERT_TRUE(wide);
  Group gw(wide.get(), KFUSE_LOOP);
  ExpectRefused(KILN_ERR_UNIMPLEMENTED, "select_n (equation 0) has 33 operands", wide.get(),
                gw.get());
  for (const Refused &r : cases) {
    Program p = Parse(r.program);
    ASSERT_TRUE(p) << r.program;
    Group g(p.get(), r.kind);
    ExpectRefused(r.status, r.message, p.get(), g.get());
    ExpectRefused(r.status, r.message, p.get(), g.get(), KCG_TARGET_CUDA, 90);
  }
}

TEST(CodegenErrors, MalformedGroups) {
  Program p = Parse("{ lambda ; a:f32[4] b:f32[4]. let c:f32[4] = add a b\n"
                    "  d:f32[4] = exp c in (d,) }");
  ASSERT_TRUE(p);
  {
    Group g(p.get(), KFUSE_LOOP);
    g.eqns = {1, 0};
    ExpectRefused(KILN_ERR_ARGUMENT, "group equation 1 is 0, not a program equation in order",
                  p.get(), g.get());
    g.eqns = {0, 7};
    ExpectRefused(KILN_ERR_ARGUMENT, "group equation 1 is 7", p.get(), g.get());
  }
  {
    Group g(p.get(), KFUSE_LOOP);
    g.in = {p->invars[0]};  // b is read but not an input
    ExpectRefused(KILN_ERR_ARGUMENT, "var 1 is read by the group but neither defined", p.get(),
                  g.get());
    g.in = {p->invars[0], 99};
    ExpectRefused(KILN_ERR_ARGUMENT, "group input 1 is var 99", p.get(), g.get());
    g.in = {p->invars[0], p->invars[1], p->eqns[0].out[0]};
    ExpectRefused(KILN_ERR_ARGUMENT, "is defined by the group's equation 0", p.get(), g.get());
  }
  {
    Group g(p.get(), KFUSE_LOOP);
    g.out.clear();
    ExpectRefused(KILN_ERR_ARGUMENT, "malformed group (2 equations, 2 inputs, 0 outputs)", p.get(),
                  g.get());
    g.out = {-3};
    ExpectRefused(KILN_ERR_ARGUMENT, "group output 0 is var -3", p.get(), g.get());
  }
  {
    // more arguments than a kernel has room for
    Group g(p.get(), KFUSE_LOOP);
    for (int i = 0; i < KCG_MAX_ARGS; i++) g.out.push_back(p->outvars[0]);
    ExpectRefused(KILN_ERR_UNIMPLEMENTED, "more than the 64 kernel arguments", p.get(), g.get());
  }
}

// ---------------------------------------------------------------------------
// The kernels' ABI and text

TEST(CodegenAbi, SignaturesGeometryAndSelfContainedSources) {
  Program loop = Parse("{ lambda ; a:f32[1000] b:f16[1000]. let c:f32[1000] = convert_element_type"
                       "[new_dtype=float32 weak_type=False] b\n d:f32[1000] = add a c in (d,) }");
  Program red = Parse("{ lambda ; a:f32[64,300]. let b:f32[64] = reduce_sum[axes=(1,)] a in (b,) }");
  Program row = Parse(Softmax(10, 700));
  ASSERT_TRUE(loop && red && row);
  Group gl(loop.get(), KFUSE_LOOP), gr(red.get(), KFUSE_REDUCE), gw(row.get(), KFUSE_ROW);

  auto cl = Emit(loop.get(), gl.get(), KCG_TARGET_C);
  ASSERT_TRUE(cl);
  EXPECT_EQ(cl->k.kind, KFUSE_LOOP);
  EXPECT_EQ(cl->k.n_args, 3);
  EXPECT_EQ(cl->k.n_items, 1000);
  EXPECT_EQ(cl->k.items_per_block, 1);
  EXPECT_EQ(std::string(cl->k.name).rfind("kiln_loop_", 0), 0u) << cl->k.name;
  std::string csrc = cl->k.source;
  EXPECT_TRUE(Contains(csrc, std::string("void ") + cl->k.name +
                                 "(kiln_kernel_args args, int64_t begin, int64_t end)"));
  EXPECT_TRUE(Contains(csrc, kcg_embedded_source("prelude.h")));  // complete on its own
  EXPECT_TRUE(Contains(csrc, "KILN_RESTRICT"));
  EXPECT_TRUE(Contains(csrc, "void *ptr[64];"));
  EXPECT_FALSE(Contains(csrc, "__global__"));

  auto kl = Emit(loop.get(), gl.get(), KCG_TARGET_CUDA, 90);
  ASSERT_TRUE(kl);
  std::string src = kl->k.source;
  EXPECT_TRUE(Contains(src, std::string("extern \"C\" __global__ void __launch_bounds__(256)\n") +
                                kl->k.name + "(kiln_kernel_args args, long long begin, long long end)"));
  EXPECT_EQ(kl->k.block_threads, 256);
  EXPECT_EQ(kl->k.items_per_block, 256 * 8);  // eight f16 per 128-bit access
  EXPECT_TRUE(Contains(src, "union { uint4 v[2]; float e[8]; }"));   // the f32 operand and result
  EXPECT_TRUE(Contains(src, "union { uint4 v[1]; kiln_half e[8]; }"));  // the f16 operand
  EXPECT_TRUE(Contains(src, "kiln_u32 lo"));  // 32-bit indices
  EXPECT_NE(std::string(kl->k.name), std::string(cl->k.name));

  // A costly bf16 body keeps 16-byte accesses: eight halves per load and
  // per store, however many transcendental functions it repeats per item.
  Program heavy = Parse("{ lambda ; a:bf16[4096]. let b:bf16[4096] = exp a\n"
                        " c:bf16[4096] = tanh b\n d:bf16[4096] = log c\n"
                        " e:bf16[4096] = sin d in (e,) }");
  ASSERT_TRUE(heavy);
  Group gh(heavy.get(), KFUSE_LOOP);
  auto kh = Emit(heavy.get(), gh.get(), KCG_TARGET_CUDA, 90);
  ASSERT_TRUE(kh);
  EXPECT_EQ(kh->k.items_per_block, (int64_t)kh->k.block_threads * 8);
  EXPECT_TRUE(Contains(kh->k.source, "union { uint4 v[1]; kiln_half e[8]; }"));
  EXPECT_FALSE(Contains(kh->k.source, "uint2"));
  CompileCudaAlone(kh->k);

  auto kr = Emit(red.get(), gr.get(), KCG_TARGET_CUDA);
  ASSERT_TRUE(kr);
  EXPECT_EQ(kr->k.n_items, 64);
  EXPECT_EQ(kr->k.items_per_block, kr->k.block_threads / 32);  // a warp per row
  EXPECT_TRUE(Contains(kr->k.source, "kiln_warp_add_f32"));

  auto kw = Emit(row.get(), gw.get(), KCG_TARGET_CUDA);
  ASSERT_TRUE(kw);
  EXPECT_EQ(kw->k.kind, KFUSE_ROW);
  EXPECT_EQ(kw->k.n_items, 10);
  EXPECT_EQ(kw->k.row_length, 700);
  // a block per row of 700: 128 threads, at most 6 elements each
  EXPECT_EQ(kw->k.items_per_block, 1);
  EXPECT_EQ(kw->k.block_threads, 128);
  // the row (x) and exp(x - max) are kept in registers between passes
  EXPECT_TRUE(Contains(kw->k.source, "float row"));
  EXPECT_TRUE(Contains(kw->k.source, "#pragma unroll"));

  // Each file compiles alone.
  for (const Kernel *k : {kl.get(), kr.get(), kw.get()}) CompileCudaAlone(k->k);
  // and the C file too
  std::unique_ptr<CModule> mod = CompileC(cl->k.name, cl->k.source);
  ASSERT_TRUE(mod);
  EXPECT_NE(mod->Symbol(cl->k), nullptr);

  // The same group gives the same kernel; another target another name.
  auto again = Emit(loop.get(), gl.get(), KCG_TARGET_CUDA, 90);
  ASSERT_TRUE(again);
  EXPECT_STREQ(again->k.name, kl->k.name);
  EXPECT_STREQ(again->k.source, kl->k.source);
  auto other = Emit(loop.get(), gl.get(), KCG_TARGET_CUDA, 80);
  ASSERT_TRUE(other);
  EXPECT_STRNE(other->k.name, kl->k.name);
}

// A host kernel's prelude keeps the integer helpers of the types the kernel
// names only (a tenth of a small kernel's compile); each such kernel still
// compiles and runs alone (CodegenElementwise compiles them combined).
TEST(CodegenAbi, HostPreludeKeepsTheIntegerTypesTheKernelNames) {
  Program f = Parse("{ lambda ; a:f32[16]. let b:f32[16] = mul a a in (b,) }");
  Program i = Parse("{ lambda ; a:i8[16] b:f32[16]. let c:i8[16] = mul a a\n"
                    " d:u16[16] = convert_element_type[new_dtype=uint16 weak_type=False] b in (c, d) }");
  ASSERT_TRUE(f && i);
  Group gf(f.get(), KFUSE_LOOP), gi(i.get(), KFUSE_LOOP);
  auto kf = Emit(f.get(), gf.get(), KCG_TARGET_C), ki = Emit(i.get(), gi.get(), KCG_TARGET_C);
  ASSERT_TRUE(kf && ki);
  std::string sf = kf->k.source, si = ki->k.source;
  EXPECT_TRUE(Contains(sf, "#define KILN_PRELUDE_TRIM 1\n"));
  EXPECT_FALSE(Contains(sf, "#define KILN_USE_"));
  EXPECT_FALSE(Contains(sf, "KILN_KERNELS_SPECIAL_H"));  // no digamma, no reduce_precision
  EXPECT_TRUE(Contains(si, "#define KILN_USE_i8 1\n"));
  EXPECT_TRUE(Contains(si, "#define KILN_USE_u16 1\n"));
  EXPECT_FALSE(Contains(si, "#define KILN_USE_i32 1\n"));
  auto kc = Emit(i.get(), gi.get(), KCG_TARGET_CUDA, 90);  // NVRTC keeps the whole prelude
  ASSERT_TRUE(kc);
  EXPECT_FALSE(Contains(kc->k.source, "KILN_PRELUDE_TRIM 1"));
  EXPECT_TRUE(Contains(kc->k.source, "KILN_KERNELS_SPECIAL_H"));
  for (const auto *k : {&kf->k, &ki->k}) EXPECT_TRUE(CompileC(k->name, k->source)) << k->name;
}

TEST(CodegenAbi, SixtyFourBitIndicesForLargeArrays) {
  Program p = Parse("{ lambda ; a:f32[3,1073741824]. let b:f32[3,1073741824] = neg a in (b,) }");
  ASSERT_TRUE(p);
  Group g(p.get(), KFUSE_LOOP);
  auto k = Emit(p.get(), g.get(), KCG_TARGET_CUDA);
  ASSERT_TRUE(k);
  EXPECT_TRUE(Contains(k->k.source, "kiln_u64 lo")) << k->k.source;
  EXPECT_EQ(k->k.n_items, 3ll << 30);
  CompileCuda(Combined({&k->k}), k->k.name);
}

TEST(CodegenAbi, EmbeddedKernelSourcesMatchTheFiles) {
  for (const char *name : {"prelude.h", "reduce.h", "threefry.h"}) {
    std::ifstream f(std::string(KILN_KERNELS_DIR) + "/" + name, std::ios::binary);
    ASSERT_TRUE(f.good()) << name;
    std::string disk((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const char *embedded = kcg_embedded_source(name);
    ASSERT_NE(embedded, nullptr) << name;
    EXPECT_EQ(std::string(embedded), disk) << name;
  }
  EXPECT_EQ(kcg_embedded_source("missing.h"), nullptr);
  EXPECT_EQ(kcg_embedded_source(nullptr), nullptr);
}
