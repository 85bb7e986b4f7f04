// The window kernels of src/codegen (kcg_emit_window): each C kernel, built
// by the host compiler, gives the reference executor's bits; each CUDA
// kernel compiles with NVRTC for sm_90 (not run here: no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "support/cuda_test_support.h"
#include "ir/ir.h"
#include "support/test_kcache_shims.h"

namespace {

struct WinCase {
  const char *prim;
  kiln_dtype dtype;
  std::vector<int64_t> shape;
  std::string params;
  bool ties;  // small integers: equal candidates in a window
};

// An NHWC pooling's params (batch and features untouched): the C target's
// run kernels. pad is the spatial dims' ((lo, hi), (lo, hi)).
std::string Pool(const char *pad, int wh, int ww, int sh, int sw, int base_h = 1, int wdil_w = 1) {
  char s[320];
  snprintf(s, sizeof s,
           "base_dilation=(1, %d, 1, 1) padding=((0, 0), %s, (0, 0)) window_dilation=(1, 1, %d, 1) "
           "window_dimensions=(1, %d, %d, 1) window_strides=(1, %d, %d, 1)",
           base_h, pad, wdil_w, wh, ww, sh, sw);
  return s;
}

const WinCase kCases[] = {
    {"reduce_window_sum", KILN_F32, {7, 8},
     "base_dilation=(2, 1) padding=((1, 2), (0, 1)) window_dilation=(1, 2) "
     "window_dimensions=(2, 3) window_strides=(1, 2)", false},
    {"reduce_window_sum", KILN_BF16, {2, 6, 6, 3}, Pool("(1, 1), (1, 1)", 3, 3, 2, 2), false},
    {"reduce_window_max", KILN_BF16, {2, 6, 6, 3}, Pool("(1, 1), (1, 1)", 3, 3, 2, 2), false},
    {"reduce_window_min", KILN_F64, {5, 6},
     "base_dilation=(1, 1) padding=((1, 0), (0, 1)) window_dilation=(1, 1) "
     "window_dimensions=(2, 2) window_strides=(1, 1)", false},
    // avg_pool 2x2 VALID over odd sizes; SAME's partial last window; its
    // transpose (stride 1 over the padded cotangent); runs past one tile;
    // an overlapping, dilated max pool
    {"reduce_window_sum", KILN_F32, {3, 9, 7, 32}, Pool("(0, 0), (0, 0)", 2, 2, 2, 2), false},
    {"reduce_window_sum", KILN_BF16, {2, 7, 5, 8}, Pool("(0, 1), (0, 1)", 2, 2, 2, 2), false},
    {"reduce_window_sum", KILN_F32, {2, 8, 6, 16}, Pool("(1, 1), (1, 0)", 2, 2, 1, 1), false},
    {"reduce_window_sum", KILN_F32, {2, 4, 5, 300}, Pool("(0, 0), (0, 1)", 2, 2, 2, 2), false},
    {"reduce_window_max", KILN_F32, {2, 5, 5, 12}, Pool("(1, 1), (1, 1)", 3, 3, 2, 2, 2, 2),
     false},
    // trailing untouched dims merged into one run
    {"reduce_window_min", KILN_F64, {5, 3, 10},
     "base_dilation=(1, 1, 1) padding=((1, 0), (0, 0), (0, 0)) "
     "window_dilation=(1, 1, 1) window_dimensions=(2, 1, 1) window_strides=(1, 1, 1)", false},
    {"select_and_gather_add", KILN_F32, {6, 7},
     "base_dilation=(2, 1) padding=((1, 1), (1, 0)) select_prim=ge window_dilation=(1, 1) "
     "window_dimensions=(3, 2) window_strides=(2, 1)", true},
    {"select_and_scatter_add", KILN_F32, {6, 7},
     "padding=((1, 1), (1, 0)) select_prim=ge window_dimensions=(3, 2) window_strides=(2, 1)",
     true},
    {"select_and_scatter_add", KILN_BF16, {2, 5, 5, 2},
     "padding=((0, 0), (1, 1), (1, 1), (0, 0)) select_prim=le window_dimensions=(1, 3, 3, 1) "
     "window_strides=(1, 1, 1, 1)", true},
    {"select_and_scatter_add", KILN_F32, {5, 6},
     "padding=((-1, 0), (0, 1)) select_prim=ge window_dimensions=(2, 2) window_strides=(1, 2)",
     true},
    // the C rows form (NHWC, features as runs): max_pool's 2x2 VALID over odd
    // sizes; padded windows that do not overlap (the anchor clamped into the
    // operand), with a gap between them; overlapping padded windows whose
    // selections add up; a run past one tile
    {"select_and_scatter_add", KILN_F32, {2, 7, 6, 16},
     "padding=((0, 0), (0, 0), (0, 0), (0, 0)) select_prim=ge window_dimensions=(1, 2, 2, 1) "
     "window_strides=(1, 2, 2, 1)", true},
    {"select_and_scatter_add", KILN_BF16, {2, 8, 7, 8},
     "padding=((0, 0), (1, 1), (1, -1), (0, 0)) select_prim=ge window_dimensions=(1, 3, 2, 1) "
     "window_strides=(1, 3, 3, 1)", true},
    {"select_and_scatter_add", KILN_BF16, {2, 6, 5, 12},
     "padding=((0, 0), (1, 1), (1, 0), (0, 0)) select_prim=le window_dimensions=(1, 3, 3, 1) "
     "window_strides=(1, 2, 1, 1)", true},
    {"select_and_scatter_add", KILN_F32, {1, 4, 3, 300},
     "padding=((0, 0), (1, 1), (0, 1), (0, 0)) select_prim=ge window_dimensions=(1, 2, 2, 1) "
     "window_strides=(1, 1, 1, 1)", false},
};

struct Buf {
  kir_buffer b{};
  std::vector<unsigned char> data;
  void Make(const kir_aval &a) {
    b.aval = a;
    data.assign((size_t)kir_aval_size(&a) * kiln_dtype_size(a.dtype) + 1, 0);
    b.data = data.data();
    b.nbytes = data.size() - 1;
  }
};

// One window equation over invars; its inputs filled with random values.
struct Program {
  kir_program *p = nullptr;
  std::vector<Buf> in;
  Program(const WinCase &c, std::mt19937 &rng) {
    EXPECT_EQ(kir_program_new(&p), KILN_OK);
    kir_prim prim;
    EXPECT_TRUE(kir_prim_lookup(c.prim, strlen(c.prim), &prim));
    kir_params par;
    memset(&par, 0, sizeof par);
    EXPECT_EQ(kir_params_parse(p, prim, c.params.c_str(), &par), KILN_OK) << kiln_last_error();
    kir_aval x = kir_aval_make(c.dtype, (int)c.shape.size(), c.shape.data(), false);
    std::vector<kir_aval> avals = {x};
    if (prim == KIR_PRIM_SELECT_AND_GATHER_ADD) avals.insert(avals.begin(), x);
    if (prim == KIR_PRIM_SELECT_AND_SCATTER_ADD) {  // the source has the windows' shape
      kir_window_geom g;
      EXPECT_EQ(kir_window_geom_make(prim, &par.window, &x, &g), KILN_OK);
      avals.insert(avals.begin(), kir_aval_make(c.dtype, g.rank, g.out, false));
    }
    std::vector<kir_vid> vids;
    for (const kir_aval &a : avals) {
      kir_vid v;
      EXPECT_EQ(kir_add_invar(p, &a, &v), KILN_OK);
      vids.push_back(v);
      in.emplace_back();
      in.back().Make(a);
      std::uniform_real_distribution<double> u(-2, 2);
      for (int64_t i = 0; i < kir_aval_size(&a); i++) {
        bool operand = vids.size() == avals.size();
        double val = c.ties && operand ? (double)(rng() % 3) : u(rng);
        kir_scalar_store(a.dtype, kir_scalar_f(val),
                         in.back().data.data() + i * kiln_dtype_size(a.dtype));
      }
    }
    int idx;
    EXPECT_EQ(kir_add_eqn(p, prim, &par, (int)vids.size(), vids.data(), &idx), KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(kir_set_outputs(p, 1, p->eqns[idx].out), KILN_OK);
  }
  ~Program() { kir_program_free(p); }
  const kir_eqn *Eqn() const { return &p->eqns[0]; }
  kir_aval Out() const { return p->vars[p->eqns[0].out[0]].aval; }
};

TEST(WindowCodegen, CKernelsMatchTheReferenceBits) {
  if (!cc_test_available()) GTEST_SKIP() << "no host C compiler";
  kcpu_cc *cc = nullptr;
  ASSERT_EQ(cc_test_new(nullptr, KILN_LOG_ERROR, &cc), KILN_OK) << kiln_last_error();
  // CTest's cache directory, else a private one
  const char *env = getenv("KILN_CACHE_DIR");
  char templ[] = "/tmp/kiln-window-codegen-XXXXXX";
  std::string dir = env && *env ? std::string(env) + "/window_codegen" : mkdtemp(templ);
  kcache *cache = nullptr;
  ASSERT_EQ(kcache_test_new(dir.c_str(), KILN_LOG_ERROR, &cache), KILN_OK) << kiln_last_error();
  std::mt19937 rng(5);
  for (const WinCase &c : kCases) {
    SCOPED_TRACE(std::string(c.prim) + " " + c.params);
    Program prog(c, rng);
    kcg_target_info t{KCG_TARGET_C, 0};
    kcg_kernel k{};
    ASSERT_EQ(kcg_emit_window(prog.p, prog.Eqn(), &t, &k), KILN_OK) << kiln_last_error();
    Buf want, got;
    want.Make(prog.Out());
    got.Make(prog.Out());
    memset(got.b.data, 0xa5, got.b.nbytes);  // the kernel writes every element
    std::vector<kir_buffer> ins;
    for (Buf &b : prog.in) ins.push_back(b.b);
    kir_eval_env env;
    kir_eval_env_init(&env, kir_reference_evals());
    ASSERT_EQ(kir_eval_program(&env, prog.p, ins.data(), &want.b), KILN_OK) << kiln_last_error();
    kcpu_cc_module *m = nullptr;
    ASSERT_EQ(cc_test_jit(cc, cache, k.name, k.source, nullptr, 0, &m), KILN_OK)
        << kiln_last_error() << "\n" << k.source;
    void *sym = nullptr;
    ASSERT_EQ(cc_test_symbol(m, k.name, &sym), KILN_OK);
    kiln_kernel_args args{};
    for (size_t i = 0; i < prog.in.size(); i++) args.ptr[i] = prog.in[i].b.data;
    args.ptr[prog.in.size()] = got.b.data;
    // in uneven parts, as the runtime splits a range across threads (a run
    // kernel then starts and ends mid-run)
    const int64_t cuts[] = {0, k.n_items / 3, k.n_items / 2 + 1, k.n_items};
    for (int i = 0; i < 3; i++)
      if (cuts[i] < cuts[i + 1])
        reinterpret_cast<kcg_c_kernel_fn>(sym)(args, cuts[i], std::min(cuts[i + 1], k.n_items));
    kir_aval out = prog.Out();
    EXPECT_EQ(k.n_items, kir_aval_size(&out));
    EXPECT_EQ(0, memcmp(want.b.data, got.b.data, want.b.nbytes));
    cc_test_unload(m);
    kcg_kernel_free(&k);
  }
  kcache_test_free(cache);
  cc_test_free(cc);
}

TEST(WindowCodegen, CudaKernelsCompileForSm90) {
  std::mt19937 rng(6);
  for (const WinCase &c : kCases) {
    SCOPED_TRACE(c.prim);
    Program prog(c, rng);
    kcg_target_info t{KCG_TARGET_CUDA, 90};
    kcg_kernel k{};
    ASSERT_EQ(kcg_emit_window(prog.p, prog.Eqn(), &t, &k), KILN_OK) << kiln_last_error();
    char *code = nullptr;
    size_t size = 0;
    EXPECT_EQ(kct_nvrtc_compile(k.name, k.source, "-arch=sm_90", true, &code, &size), KILN_OK)
        << kiln_last_error() << "\n" << k.source;
    EXPECT_GT(size, 0u);
    free(code);
    kcg_kernel_free(&k);
  }
}

TEST(WindowCodegen, IntegerOperandsAreDeclined) {
  kir_program *p = nullptr;
  ASSERT_EQ(kir_parse("{ lambda ; a:i32[4,6]. let b:i32[2,3] = reduce_window_max["
                      "base_dilation=(1, 1) padding=((0, 0), (0, 0)) window_dilation=(1, 1) "
                      "window_dimensions=(2, 2) window_strides=(2, 2)] a in (b,) }",
                      &p),
            KILN_OK)
      << kiln_last_error();
  kcg_target_info t{KCG_TARGET_C, 0};
  kcg_kernel k{};
  EXPECT_EQ(kcg_emit_window(p, &p->eqns[0], &t, &k), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(std::string(kiln_last_error()).find("reduce_window_max of i32[4,6]"), std::string::npos)
      << kiln_last_error();
  kir_program_free(p);
}

}  // namespace
