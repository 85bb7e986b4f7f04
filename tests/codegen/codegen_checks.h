// The code generator's test harness (test_codegen_*.cc): host buffers and
// their comparison, the host compiler and kernel cache (one per process),
// NVRTC builds for sm_80 and sm_90, and Checks, which emits a test's groups
// for C and CUDA, compiles them together, runs the C kernels over whole and
// split ranges and compares them with the reference executor. Programs and
// groups: codegen_test_programs.h.
#ifndef KILN_TESTS_CODEGEN_CHECKS_H
#define KILN_TESTS_CODEGEN_CHECKS_H

#include <gtest/gtest.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "support/cuda_test_support.h"
#include "gpu_kernel_runner.h"
#include "kiln/kiln.h"
#include "support/test_kcache_shims.h"
#include "codegen_test_programs.h"
#include "support/text.h"

namespace codegen_test {

using kiln_test::Contains;

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Host buffers

struct Buf {
  kir_aval aval{};
  std::vector<uint8_t> bytes;

  Buf() = default;
  explicit Buf(const kir_aval &a) : aval(a) {
    size_t n = (size_t)kir_aval_size(&a) * kiln_dtype_size(a.dtype);
    bytes.assign(n ? n : 1, 0xcd);  // poison: an element never written shows
    bytes.resize(n ? n : 1);
  }
  int64_t size() const { return kir_aval_size(&aval); }
  size_t nbytes() const { return (size_t)size() * kiln_dtype_size(aval.dtype); }
  void *data() { return bytes.data(); }
  kir_buffer view() { return kir_buffer{aval, bytes.data(), nbytes()}; }

  // Element i as a double (floats) or its integer value.
  double F(int64_t i) const {
    kir_scalar s = kir_scalar_load(aval.dtype, bytes.data() + i * kiln_dtype_size(aval.dtype));
    if (kiln_dtype_is_float(aval.dtype)) return s.f;
    return kiln_dtype_is_unsigned(aval.dtype) ? (double)s.u : (double)s.i;
  }
  uint64_t Bits(int64_t i) const {
    uint64_t b = 0;
    size_t w = kiln_dtype_size(aval.dtype);
    memcpy(&b, bytes.data() + i * w, w);
    return b;
  }
  void Set(int64_t i, double v) {
    kir_scalar s;
    if (kiln_dtype_is_float(aval.dtype))
      s = kir_scalar_f(v);
    else if (kiln_dtype_is_unsigned(aval.dtype))
      s = kir_scalar_u((uint64_t)v);
    else
      s = kir_scalar_i((int64_t)v);
    if (kiln_dtype_is_float(aval.dtype)) s.f = RoundTo(aval.dtype, v);
    kir_scalar_store(aval.dtype, s, bytes.data() + i * kiln_dtype_size(aval.dtype));
  }
  void SetBits(int64_t i, uint64_t b) {
    memcpy(bytes.data() + i * kiln_dtype_size(aval.dtype), &b, kiln_dtype_size(aval.dtype));
  }
  static double RoundTo(kiln_dtype d, double v) {
    switch (d) {
      case KILN_F16: return kiln_f16_to_f32(kiln_f32_to_f16((float)v));
      case KILN_BF16: return kiln_bf16_to_f32(kiln_f32_to_bf16((float)v));
      case KILN_F32: return (float)v;
      default: return v;
    }
  }
};

// Values a test draws its inputs from.
enum class Domain {
  kNormal,   // floats in [-3, 3], integers over their whole range, bools
  kPositive, // floats in [0.1, 4]
  kUnit,     // floats in (-1, 1)
  kSmallInt  // integers in [-8, 8] (unsigned: [0, 16])
};

inline void Fill(Buf &b, std::mt19937_64 &rng, Domain dom) {
  kiln_dtype d = b.aval.dtype;
  for (int64_t i = 0; i < b.size(); i++) {
    if (kiln_dtype_is_float(d)) {
      std::uniform_real_distribution<double> u(dom == Domain::kPositive ? 0.1
                                               : dom == Domain::kUnit   ? -0.99
                                                                        : -3.0,
                                               dom == Domain::kPositive ? 4.0
                                               : dom == Domain::kUnit   ? 0.99
                                                                        : 3.0);
      b.Set(i, u(rng));
    } else if (d == KILN_BOOL) {
      b.Set(i, (double)(rng() & 1));
    } else if (dom == Domain::kSmallInt) {
      int64_t v = (int64_t)(rng() % 17);
      b.Set(i, (double)(kiln_dtype_is_signed(d) ? v - 8 : v));
    } else {
      b.SetBits(i, rng());  // the whole range; the store keeps the low bytes
    }
  }
}

inline std::vector<Buf> Inputs(const kir_program *p, uint64_t seed, Domain dom = Domain::kNormal) {
  std::mt19937_64 rng(seed);
  std::vector<Buf> in;
  for (int i = 0; i < p->n_invars; i++) {
    in.emplace_back(*kir_var_aval(p, p->invars[i]));
    Fill(in.back(), rng, dom);
  }
  return in;
}

// ---------------------------------------------------------------------------
// Comparing

struct Tol {
  double f16 = 1e-3, bf16 = 1e-2, f32 = 1e-6, f64 = 1e-15;  // JAX's defaults
  double For(kiln_dtype d) const {
    return d == KILN_F16 ? f16 : d == KILN_BF16 ? bf16 : d == KILN_F32 ? f32 : f64;
  }
  static Tol Reductions() {  // sums in another order
    Tol t;
    t.f16 = 1e-2;
    t.bf16 = 5e-2;
    t.f32 = 2e-5;
    t.f64 = 1e-12;
    return t;
  }
};

// Every element equal (integers, bools: exactly; floats: within rtol and
// atol = the dtype's tolerance, NaN equal to NaN, infinities exact).
inline ::testing::AssertionResult Same(const Buf &got, const Buf &want, const Tol &tol,
                                       const std::string &what) {
  if (got.size() != want.size() || got.aval.dtype != want.aval.dtype)
    return ::testing::AssertionFailure() << what << ": different sizes or dtypes";
  bool fl = kiln_dtype_is_float(want.aval.dtype);
  double t = fl ? tol.For(want.aval.dtype) : 0;
  int bad = 0;
  std::ostringstream msg;
  for (int64_t i = 0; i < want.size(); i++) {
    bool ok;
    double g = got.F(i), w = want.F(i);
    if (!fl)
      ok = got.Bits(i) == want.Bits(i);
    else if (std::isnan(w) || std::isnan(g))
      ok = std::isnan(w) && std::isnan(g);
    else if (std::isinf(w) || std::isinf(g))
      ok = g == w;
    else
      ok = std::fabs(g - w) <= t + t * std::fabs(w);
    if (!ok && bad++ < 6)
      msg << "\n  [" << i << "] got " << std::setprecision(17) << g << " want " << w;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char type[KIR_AVAL_STR_CAP];
  return ::testing::AssertionFailure() << what << " (" << kir_aval_str(&want.aval, type, sizeof type)
                                       << "): " << bad << " of " << want.size()
                                       << " elements differ" << msg.str();
}

// ---------------------------------------------------------------------------
// The host compiler and kernel cache, one per process

class Host {
 public:
  static Host &Get() {
    static Host host;
    return host;
  }
  bool ok() const { return cc_ && cache_; }
  kcpu_cc *cc() const { return cc_; }
  kcache *cache() const { return cache_; }

 private:
  Host() {
    if (!cc_test_available()) return;
    // The build's cache directory when the tests run under CTest, so that
    // reruns find their kernels; else a private one.
    const char *env = getenv("KILN_CACHE_DIR");
    if (env && *env) {
      dir_ = std::string(env) + "/codegen";
    } else {
      char templ[] = "/tmp/kiln-codegen-test-XXXXXX";
      if (mkdtemp(templ)) {
        dir_ = templ;
        remove_dir_ = true;
      }
    }
    EXPECT_EQ(cc_test_new(nullptr, KILN_LOG_ERROR, &cc_), KILN_OK) << kiln_last_error();
    EXPECT_EQ(kcache_test_new(dir_.c_str(), KILN_LOG_ERROR, &cache_), KILN_OK)
        << kiln_last_error();
  }
  ~Host() {
    kcache_test_free(cache_);
    cc_test_free(cc_);
    std::error_code ec;
    if (remove_dir_) fs::remove_all(dir_, ec);
  }
  kcpu_cc *cc_ = nullptr;
  kcache *cache_ = nullptr;
  std::string dir_;
  bool remove_dir_ = false;
};

// ---------------------------------------------------------------------------
// Kernels

struct Kernel {
  kcg_kernel k{};
  Kernel() = default;
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;
  ~Kernel() { kcg_kernel_free(&k); }
};

inline std::unique_ptr<Kernel> Emit(const kir_program *p, const kfuse_group *g, kcg_target target,
                                    int sm = 80) {
  auto k = std::make_unique<Kernel>();
  kcg_target_info t{target, sm};
  kiln_status st = kcg_emit(p, g, &t, &k->k);
  EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  if (st != KILN_OK) return nullptr;
  return k;
}

// Several kernels of one target in one translation unit: the first kernel's
// text up to its kiln_kernel_args (the prelude untrimmed, reduce.h and
// special.h spliced in when it lacks them), then every kernel's definitions
// after it, each reduction instantiated once. Compiling a test's kernels together costs one host
// compiler run and one NVRTC program per architecture; that each file also
// compiles alone is checked by CodegenAbi.
inline std::string Combined(const std::vector<const kcg_kernel *> &kernels) {
  const std::string mark = "} kiln_kernel_args;\n";
  std::string out;
  std::set<std::string> seen;
  for (size_t i = 0; i < kernels.size(); i++) {
    std::string s = kernels[i]->source;
    size_t at = s.find(mark);
    EXPECT_NE(at, std::string::npos) << kernels[i]->name;
    if (at == std::string::npos) continue;
    at += mark.size();
    if (i == 0) {
      std::string head = s.substr(0, at);
      for (const char *h : {"special.h", "reduce.h"})
        if (!Contains(head, kcg_embedded_source(h)))
          head.insert(head.find("\ntypedef struct kiln_kernel_args"),
                      std::string("\n") + kcg_embedded_source(h));
      const std::string trim = "#define KILN_PRELUDE_TRIM 1\n";  // later kernels name other types
      if (size_t t = head.find(trim); t != std::string::npos) head.erase(t, trim.size());
      out += head;
    }
    std::istringstream lines(s.substr(at));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("KILN_DEFINE_", 0) == 0 && !seen.insert(line).second) continue;
      out += line + "\n";
    }
  }
  return out;
}

inline std::string Names(const std::vector<const kcg_kernel *> &kernels) {
  std::string names;
  for (const kcg_kernel *k : kernels) names += std::string(" ") + k->name;
  return names;
}

// NVRTC for sm_80 and sm_90; results are kept in the kernel cache, keyed by
// the program text and NVRTC's version.
inline kiln_status NvrtcBuild(void *user, void **blob, size_t *size) {
  auto *job = static_cast<std::pair<const std::string *, std::string> *>(user);
  char *code = nullptr;
  std::string opt = "-arch=" + job->second;
  kiln_status st =
      kct_nvrtc_compile("codegen_test", job->first->c_str(), opt.c_str(), true, &code, size);
  *blob = code;
  return st;
}

inline void CompileCuda(const std::string &text, const std::string &what) {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::string version = "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
  for (std::string arch : {"sm_80", "sm_90"}) {
    uint8_t key[16];
    kcache_test_key(text.c_str(), arch.c_str(), version.c_str(), nullptr, 0, key);
    std::pair<const std::string *, std::string> job(&text, arch);
    const void *blob = nullptr;
    size_t size = 0;
    kiln_status st;
    if (Host::Get().cache()) {
      st = kcache_test_get_or_build(Host::Get().cache(), key, NvrtcBuild, &job, &blob, &size);
    } else {
      void *code = nullptr;
      st = NvrtcBuild(&job, &code, &size);
      free(code);
    }
    EXPECT_EQ(st, KILN_OK) << "NVRTC for " << arch << ", kernels" << what << ":\n"
                           << kiln_last_error();
  }
}

// One kernel's own file, standalone, for both architectures.
inline void CompileCudaAlone(const kcg_kernel &k) {
  for (const char *arch : {"sm_80", "sm_90"}) {
    char *code = nullptr;
    size_t size = 0;
    std::string opt = std::string("-arch=") + arch;
    EXPECT_EQ(kct_nvrtc_compile(k.name, k.source, opt.c_str(), true, &code, &size), KILN_OK)
        << k.name << " for " << arch << ": " << kiln_last_error();
    EXPECT_GT(size, 0u);
    free(code);
  }
}

// A loaded host module and the entry points of the kernels it holds.
struct CModule {
  kcpu_cc_module *m = nullptr;
  ~CModule() {
    if (m) cc_test_unload(m);
  }
  kcg_c_kernel_fn Symbol(const kcg_kernel &k) const {
    void *sym = nullptr;
    EXPECT_EQ(cc_test_symbol(m, k.name, &sym), KILN_OK) << kiln_last_error();
    return reinterpret_cast<kcg_c_kernel_fn>(sym);
  }
};

inline std::unique_ptr<CModule> CompileC(const std::string &name, const std::string &source) {
  auto mod = std::make_unique<CModule>();
  Host &h = Host::Get();
  if (!h.ok()) {
    ADD_FAILURE() << "no host C compiler";
    return nullptr;
  }
  EXPECT_EQ(cc_test_jit(h.cc(), h.cache(), name.c_str(), source.c_str(), nullptr, 0, &mod->m),
            KILN_OK)
      << kiln_last_error();
  return mod->m ? std::move(mod) : nullptr;
}

// The reference executor's outputs.
inline std::vector<Buf> Reference(const kir_program *p, std::vector<Buf> &in) {
  std::vector<kir_buffer> iv, ov;
  for (auto &b : in) iv.push_back(b.view());
  std::vector<Buf> out;
  for (int k = 0; k < p->n_outvars; k++) out.emplace_back(*kir_var_aval(p, p->outvars[k]));
  for (auto &b : out) ov.push_back(b.view());
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  EXPECT_EQ(kir_eval_program(&env, p, iv.data(), ov.data()), KILN_OK) << kiln_last_error();
  return out;
}

// Host data for the group's inputs: the program's invars (`in`), then its
// constvars' bound data.
inline std::vector<Buf> GroupInputs(const kir_program *p, const kfuse_group *g,
                                    std::vector<Buf> &in) {
  std::vector<Buf> gin;
  for (int s = 0; s < g->n_in; s++) {
    kir_vid v = g->in[s];
    const kir_var *var = &p->vars[v];
    Buf b(var->aval);
    for (int i = 0; i < p->n_invars; i++)
      if (p->invars[i] == v) b = in[i];
    if (var->kind == KIR_VAR_CONSTVAR && var->u.constant.source == KIR_CONST_HOST)
      memcpy(b.data(), var->u.constant.host, var->u.constant.nbytes);
    gin.push_back(b);
  }
  return gin;
}

// Runs a C kernel over [0, n) cut at `cuts`; in are the group's inputs.
inline std::vector<Buf> RunC(kcg_c_kernel_fn fn, const kcg_kernel &k, const kir_program *p,
                             const kfuse_group *g, std::vector<Buf> &in,
                             const std::vector<int64_t> &cuts) {
  std::vector<Buf> out;
  for (int q = 0; q < g->n_out; q++) out.emplace_back(*kir_var_aval(p, g->out[q]));
  kiln_kernel_args args;
  memset(&args, 0, sizeof args);
  for (int s = 0; s < g->n_in; s++) args.ptr[s] = in[s].data();
  for (int q = 0; q < g->n_out; q++) args.ptr[g->n_in + q] = out[q].data();
  std::vector<uint64_t> scratch((size_t)(k.scratch_bytes + 7) / 8, 0);  // zeroed, 8-aligned
  if (k.scratch_bytes) args.ptr[g->n_in + g->n_out] = scratch.data();
  int64_t from = 0;
  for (int64_t cut : cuts) {
    fn(args, from, cut);
    from = cut;
  }
  fn(args, from, k.n_items);
  return out;
}

// The groups of one test: each is emitted for C and CUDA when added; Run()
// compiles them (one host module, one NVRTC program per architecture), runs
// each C kernel over its whole range and over split ranges, and compares
// every output with the reference executor's (or with given values).
class Checks {
 public:
  ~Checks() { Run(); }

  // Returns the C kernel, for checks of its fields.
  const kcg_kernel *Add(Program p, Group g, std::vector<Buf> in, const Tol &tol = Tol(),
                        const std::string &what = "") {
    auto c = std::make_unique<Case>();
    c->p = std::move(p);
    c->g = std::move(g);
    c->in = std::move(in);
    c->tol = tol;
    c->what = what;
    if (!c->p) return nullptr;
    c->cuda = Emit(c->p.get(), c->g.get(), KCG_TARGET_CUDA);
    c->c = Emit(c->p.get(), c->g.get(), KCG_TARGET_C);
    if (!c->c || !c->cuda) return nullptr;
    cases_.push_back(std::move(c));
    return &cases_.back()->c->k;
  }
  // The same, over every equation of p.
  const kcg_kernel *Add(Program p, kfuse_kind kind, std::vector<Buf> in, const Tol &tol = Tol(),
                        const std::string &what = "") {
    if (!p) return nullptr;
    Group g(p.get(), kind);
    return Add(std::move(p), std::move(g), std::move(in), tol, what);
  }
  // Compares the last case's first output with `want` instead of the
  // reference; floats bit for bit (any NaN matches any NaN) when tol is 0.
  void Expect(Buf want, double tol) {
    ASSERT_FALSE(cases_.empty());
    cases_.back()->want = std::move(want);
    cases_.back()->want_tol = tol;
    cases_.back()->given = true;
  }

  void Run() {
    if (cases_.empty()) return;
    std::vector<const kcg_kernel *> c_kernels, cuda_kernels;
    for (auto &c : cases_) {
      c_kernels.push_back(&c->c->k);
      cuda_kernels.push_back(&c->cuda->k);
    }
    std::string cuda = Combined(cuda_kernels);
    CompileCuda(cuda, Names(cuda_kernels));
    std::unique_ptr<CModule> mod = CompileC(c_kernels[0]->name, Combined(c_kernels));
    if (mod)
      for (auto &c : cases_) {
        kcg_c_kernel_fn fn = mod->Symbol(c->c->k);
        if (!fn) continue;
        Compare(*c, c->c->k, [&](std::vector<Buf> &gin, const std::vector<int64_t> &cuts) {
          return RunC(fn, c->c->k, c->p.get(), c->g.get(), gin, cuts);
        });
      }
    RunOnGpu(cuda);
    cases_.clear();
  }

 private:
  struct Case {
    Program p;
    Group g;
    std::vector<Buf> in;
    Tol tol;
    std::string what;
    std::unique_ptr<Kernel> c, cuda;
    Buf want;
    double want_tol = 0;
    bool given = false;
  };
  using Runner =
      std::function<std::vector<Buf>(std::vector<Buf> &, const std::vector<int64_t> &)>;

  // Where a GPU is present, the CUDA kernels run there too and must give
  // the same results (the CUDA target's tests on a GPU machine).
  void RunOnGpu(const std::string &cuda) {
    kct_gpu *gpu = Gpu();
    if (!gpu) return;
    std::string arch = "-arch=sm_" + std::to_string(kct_gpu_sm(gpu));
    char *cubin = nullptr;
    size_t size = 0;
    ASSERT_EQ(kct_nvrtc_compile("codegen_test", cuda.c_str(), arch.c_str(), true, &cubin, &size),
              KILN_OK)
        << kiln_last_error();
    for (auto &c : cases_) {
      const kcg_kernel &k = c->cuda->k;
      Compare(*c, k, [&](std::vector<Buf> &gin, const std::vector<int64_t> &cuts) {
        const kfuse_group *g = c->g.get();
        std::vector<Buf> out;
        for (int q = 0; q < g->n_out; q++) out.emplace_back(*kir_var_aval(c->p.get(), g->out[q]));
        std::vector<void *> in_ptr, out_ptr;
        std::vector<size_t> in_bytes, out_bytes;
        for (int s = 0; s < g->n_in; s++) {
          bool literal = s >= g->n_in - g->n_in_literals;
          in_ptr.push_back(literal ? nullptr : gin[s].data());
          in_bytes.push_back(gin[s].nbytes());
        }
        for (auto &b : out) {
          out_ptr.push_back(b.data());
          out_bytes.push_back(b.nbytes());
        }
        kct_gpu_kernel gk = {k.name,    (unsigned)k.block_threads, k.items_per_block,
                             k.n_items, k.split,                   k.scratch_bytes};
        EXPECT_EQ(kct_gpu_run(gpu, cubin, &gk, cuts.data(), (int)cuts.size(), g->n_in,
                              in_ptr.data(), in_bytes.data(), g->n_out, out_ptr.data(),
                              out_bytes.data()),
                  KILN_OK)
            << k.name << ": " << kiln_last_error();
        return out;
      });
    }
    free(cubin);
  }

  // One context for the whole process; none without a GPU.
  static kct_gpu *Gpu() {
    static kct_gpu *gpu = [] {
      kct_gpu *g = nullptr;
      return kct_gpu_open(&g) == KILN_OK ? g : nullptr;
    }();
    return gpu;
  }

  static void Compare(Case &c, const kcg_kernel &k, const Runner &run) {
    const kir_program *p = c.p.get();
    const kfuse_group *g = c.g.get();
    std::vector<Buf> want;
    if (!c.given) want = Reference(p, c.in);
    std::vector<Buf> gin = GroupInputs(p, g, c.in);
    int64_t n = k.n_items;
    for (const std::vector<int64_t> &cuts :
         {std::vector<int64_t>{}, std::vector<int64_t>{n / 3, n / 3, (2 * n) / 3}}) {
      std::vector<Buf> got = run(gin, cuts);
      std::string how = c.what + (cuts.empty() ? "" : " (split range)");
      if (c.given) {
        ExpectGiven(got[0], c.want, c.want_tol, how);
        continue;
      }
      for (int q = 0; q < g->n_out; q++) {
        int o = -1;
        for (int j = 0; j < p->n_outvars; j++)
          if (p->outvars[j] == g->out[q]) o = j;
        EXPECT_GE(o, 0);
        if (o < 0) continue;
        EXPECT_TRUE(Same(got[q], want[(size_t)o], c.tol, how + ", output " + std::to_string(q)))
            << k.name;
      }
    }
  }

  static void ExpectGiven(const Buf &got, const Buf &want, double tol, const std::string &what) {
    if (tol > 0 || !kiln_dtype_is_float(want.aval.dtype)) {
      Tol t;
      t.f16 = t.bf16 = t.f32 = t.f64 = tol;
      EXPECT_TRUE(Same(got, want, t, what));
      return;
    }
    for (int64_t i = 0; i < want.size(); i++) {
      if (std::isnan(want.F(i)) && std::isnan(got.F(i))) continue;
      EXPECT_EQ(got.Bits(i), want.Bits(i))
          << what << " [" << i << "] got " << got.F(i) << " want " << want.F(i);
    }
  }

  std::vector<std::unique_ptr<Case>> cases_;
};

// ---------------------------------------------------------------------------
// Program text

inline std::string Type(kiln_dtype d, const std::vector<int64_t> &shape) {
  std::string s = kiln_dtype_short_name(d);
  s += "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Var names for generated programs: a0, a1, ... are not valid jaxpr names
// for the parser's printer, but the parser takes any identifier.
inline std::string V(int i) { return "v" + std::to_string(i); }

// A program of one operation per output over the same operands:
// outs[k] = ops[k](ins...) where an op is "prim[params] operands-by-index".
struct Op {
  std::string prim, params;
  std::vector<int> args;  // indices into the inputs
  kiln_dtype out;         // KILN_INVALID_DTYPE: the first operand's dtype
};

inline std::string OpsProgram(const std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> &ins,
                              const std::vector<Op> &ops, const std::vector<int64_t> &out_shape) {
  std::ostringstream t;
  t << "{ lambda ; ";
  for (size_t i = 0; i < ins.size(); i++) t << "x" << i << ":" << Type(ins[i].first, ins[i].second) << " ";
  t << ". let\n";
  for (size_t k = 0; k < ops.size(); k++) {
    const Op &op = ops[k];
    kiln_dtype d = op.out != KILN_INVALID_DTYPE ? op.out : ins[op.args[0]].first;
    t << "  " << V((int)k) << ":" << Type(d, out_shape) << " = " << op.prim;
    if (!op.params.empty()) t << "[" << op.params << "]";
    for (int a : op.args) t << " x" << a;
    t << "\n";
  }
  t << "  in (";
  for (size_t k = 0; k < ops.size(); k++) t << (k ? ", " : "") << V((int)k);
  t << ",) }";
  return t.str();
}

// Edge values first, then random ones in [-3, 3].
inline std::vector<double> FloatEdges() {
  return {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 10.0, -10.0, 100.0, -100.0,
          1e-3, -1e-3, INFINITY, -INFINITY, NAN, 0.99, -0.99, 0.25, 7.0, -7.0, 65504.0, 1e30};
}

inline void FillValues(Buf &b, const std::vector<double> &vals, uint64_t seed, Domain dom) {
  std::mt19937_64 rng(seed);
  Fill(b, rng, dom);
  for (size_t i = 0; i < vals.size() && (int64_t)i < b.size(); i++) b.Set((int64_t)i, vals[i]);
}

const kiln_dtype kFloats[] = {KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
const kiln_dtype kInts[] = {KILN_I8, KILN_I16, KILN_I32, KILN_I64,
                            KILN_U8, KILN_U16, KILN_U32, KILN_U64};

// The extremes and small values of an integer dtype, as doubles that
// Buf::Set stores exactly (64-bit extremes through their bits).
inline std::vector<uint64_t> IntEdgeBits(kiln_dtype d) {
  int bits = (int)kiln_dtype_size(d) * 8;
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  uint64_t min = kiln_dtype_is_signed(d) ? 1ull << (bits - 1) : 0;
  uint64_t max = kiln_dtype_is_signed(d) ? (1ull << (bits - 1)) - 1 : mask;
  std::vector<uint64_t> v = {0, 1, mask /* -1 */, min, max, 2, (uint64_t)-2 & mask, 7,
                             (uint64_t)(bits - 1), (uint64_t)bits, (uint64_t)(bits + 1), 3,
                             (min + 1) & mask, (max - 1) & mask};
  return v;
}

}  // namespace codegen_test

#endif  // KILN_TESTS_CODEGEN_CHECKS_H
