// The code generator: fused groups of small programs are emitted for the C
// target, compiled by the host compiler (through the kernel cache), run over
// the whole range of work items and over split ranges, and compared with the
// reference executor; every kernel is also emitted for CUDA and compiled by
// NVRTC for sm_80 and sm_90. A few edge semantics are checked against values
// JAX computed (tests/golden/codegen.py). Programs and groups:
// codegen_test_programs.h.
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
#include "codegen_test_programs.h"
#include "support/cuda_test_support.h"
#include "gpu_kernel_runner.h"
#include "kiln/kiln.h"
#include "support/test_kcache_shims.h"

namespace fs = std::filesystem;
using namespace codegen_test;

namespace {

bool Contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

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

void Fill(Buf &b, std::mt19937_64 &rng, Domain dom) {
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

std::vector<Buf> Inputs(const kir_program *p, uint64_t seed, Domain dom = Domain::kNormal) {
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
::testing::AssertionResult Same(const Buf &got, const Buf &want, const Tol &tol,
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

std::unique_ptr<Kernel> Emit(const kir_program *p, const kfuse_group *g, kcg_target target,
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
std::string Combined(const std::vector<const kcg_kernel *> &kernels) {
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

std::string Names(const std::vector<const kcg_kernel *> &kernels) {
  std::string names;
  for (const kcg_kernel *k : kernels) names += std::string(" ") + k->name;
  return names;
}

// NVRTC for sm_80 and sm_90; results are kept in the kernel cache, keyed by
// the program text and NVRTC's version.
kiln_status NvrtcBuild(void *user, void **blob, size_t *size) {
  auto *job = static_cast<std::pair<const std::string *, std::string> *>(user);
  char *code = nullptr;
  std::string opt = "-arch=" + job->second;
  kiln_status st =
      kct_nvrtc_compile("codegen_test", job->first->c_str(), opt.c_str(), true, &code, size);
  *blob = code;
  return st;
}

void CompileCuda(const std::string &text, const std::string &what) {
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
void CompileCudaAlone(const kcg_kernel &k) {
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

std::unique_ptr<CModule> CompileC(const std::string &name, const std::string &source) {
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
std::vector<Buf> Reference(const kir_program *p, std::vector<Buf> &in) {
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
std::vector<Buf> GroupInputs(const kir_program *p, const kfuse_group *g, std::vector<Buf> &in) {
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
std::vector<Buf> RunC(kcg_c_kernel_fn fn, const kcg_kernel &k, const kir_program *p,
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

std::string Type(kiln_dtype d, const std::vector<int64_t> &shape) {
  std::string s = kiln_dtype_short_name(d);
  s += "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Var names for generated programs: a0, a1, ... are not valid jaxpr names
// for the parser's printer, but the parser takes any identifier.
std::string V(int i) { return "v" + std::to_string(i); }

}  // namespace

namespace {

// A program of one operation per output over the same operands:
// outs[k] = ops[k](ins...) where an op is "prim[params] operands-by-index".
struct Op {
  std::string prim, params;
  std::vector<int> args;  // indices into the inputs
  kiln_dtype out;         // KILN_INVALID_DTYPE: the first operand's dtype
};

std::string OpsProgram(const std::vector<std::pair<kiln_dtype, std::vector<int64_t>>> &ins,
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
std::vector<double> FloatEdges() {
  return {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 10.0, -10.0, 100.0, -100.0,
          1e-3, -1e-3, INFINITY, -INFINITY, NAN, 0.99, -0.99, 0.25, 7.0, -7.0, 65504.0, 1e30};
}

void FillValues(Buf &b, const std::vector<double> &vals, uint64_t seed, Domain dom) {
  std::mt19937_64 rng(seed);
  Fill(b, rng, dom);
  for (size_t i = 0; i < vals.size() && (int64_t)i < b.size(); i++) b.Set((int64_t)i, vals[i]);
}

const kiln_dtype kFloats[] = {KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
const kiln_dtype kInts[] = {KILN_I8, KILN_I16, KILN_I32, KILN_I64,
                            KILN_U8, KILN_U16, KILN_U32, KILN_U64};

// The extremes and small values of an integer dtype, as doubles that
// Buf::Set stores exactly (64-bit extremes through their bits).
std::vector<uint64_t> IntEdgeBits(kiln_dtype d) {
  int bits = (int)kiln_dtype_size(d) * 8;
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  uint64_t min = kiln_dtype_is_signed(d) ? 1ull << (bits - 1) : 0;
  uint64_t max = kiln_dtype_is_signed(d) ? (1ull << (bits - 1)) - 1 : mask;
  std::vector<uint64_t> v = {0, 1, mask /* -1 */, min, max, 2, (uint64_t)-2 & mask, 7,
                             (uint64_t)(bits - 1), (uint64_t)bits, (uint64_t)(bits + 1), 3,
                             (min + 1) & mask, (max - 1) & mask};
  return v;
}

}  // namespace

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

// ---------------------------------------------------------------------------
// Mixed dtypes, empty arrays, constants

TEST(CodegenMixed, DtypesMeetInOneKernel) {
  Checks checks;
  Program p = Parse(R"({ lambda ; a:f16[7,9] b:bf16[9] c:i32[7,9] d:bool[7,9] e:u8[]. let
      f:f32[7,9] = convert_element_type[new_dtype=float32 weak_type=False] a
      g:f32[9] = convert_element_type[new_dtype=float32 weak_type=False] b
      h:f32[7,9] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(7, 9)] g
      i:f32[7,9] = convert_element_type[new_dtype=float32 weak_type=False] c
      j:f32[7,9] = mul f h
      k:f32[7,9] = add j i
      l:f32[7,9] = select_n d k f
      m:bf16[7,9] = convert_element_type[new_dtype=bfloat16 weak_type=False] l
      n:f16[7,9] = mul a a
      o:i32[7,9] = convert_element_type[new_dtype=int32 weak_type=False] l
      p:u8[7,9] = convert_element_type[new_dtype=uint8 weak_type=False] d
      q:u8[7,9] = add p e
    in (m, n, o, q) })");
  ASSERT_TRUE(p);
  std::vector<Buf> in = Inputs(p.get(), 60);
  std::mt19937_64 rng(61);
  Fill(in[2], rng, Domain::kSmallInt);
  checks.Add(std::move(p), KFUSE_LOOP, in, Tol(), "mixed");
}

TEST(CodegenMixed, ZeroSizeArrays) {
  Checks checks;
  // An empty loop, reductions over an empty axis (the identities), and a
  // ROW group without rows.
  Program loop = Parse(R"({ lambda ; a:f32[0,4] b:f32[1,4]. let
      c:f32[0,4] = add a b
      d:f32[4,0] = transpose[permutation=(1, 0)] c
    in (d,) })");
  ASSERT_TRUE(loop);
  std::vector<Buf> in = Inputs(loop.get(), 70);
  const kcg_kernel *k = checks.Add(std::move(loop), KFUSE_LOOP, in, Tol(), "empty loop");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 0);

  Program red = Parse(R"({ lambda ; a:f32[3,0] b:i32[3,0] c:bool[3,0]. let
      d:f32[3] = reduce_sum[axes=(1,)] a
      e:f32[3] = reduce_max[axes=(1,)] a
      f:i32[3] = reduce_min[axes=(1,)] b
      g:bool[3] = reduce_and[axes=(1,)] c
      h:f32[3] = reduce_prod[axes=(1,)] a
    in (d, e, f, g, h) })");
  ASSERT_TRUE(red);
  in = Inputs(red.get(), 71);
  checks.Add(std::move(red), KFUSE_REDUCE, in, Tol(), "empty reductions");

  Program row = Parse(Softmax(0, 16));
  ASSERT_TRUE(row);
  in = Inputs(row.get(), 72);
  k = checks.Add(std::move(row), KFUSE_ROW, in, Tol(), "no rows");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 0);

  Program empty_rows = Parse(Softmax(3, 0));
  ASSERT_TRUE(empty_rows);
  in = Inputs(empty_rows.get(), 73);
  k = checks.Add(std::move(empty_rows), KFUSE_ROW, in, Tol(), "rows of length 0");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_items, 3);
  EXPECT_EQ(k->row_length, 0);
}

// Constvars are inputs the runtime passes like any other; literals are
// inlined, also when the group lists them among its inputs.
TEST(CodegenMixed, ConstvarsAndLiterals) {
  Checks checks;
  Program p = Parse(R"({ lambda c:f32[5]; a:f32[3,5]. let
      d:f32[3,5] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(3, 5)] c
      e:f32[3,5] = mul a d
      f:f32[3,5] = add e 1.5:f32[]
      g:f32[3,5] = max f -0.0:f32[]
    in (g,) })");
  ASSERT_TRUE(p);
  float cdata[5] = {1.0f, -2.0f, 0.5f, 4.0f, -0.25f};
  ASSERT_EQ(kir_const_bind_host(p.get(), p->constvars[0], cdata, sizeof cdata), KILN_OK)
      << kiln_last_error();
  Group g(p.get(), KFUSE_LOOP);
  // list the literal 1.5 among the inputs, where a planner may put it
  const kir_eqn *add = &p->eqns[2];
  g.in.push_back(add->in[1]);
  ASSERT_EQ(p->vars[add->in[1]].kind, KIR_VAR_LITERAL);
  std::vector<Buf> in = Inputs(p.get(), 80);
  const kcg_kernel *k = checks.Add(std::move(p), std::move(g), in, Tol(), "constvars");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->n_args, 4);
  EXPECT_TRUE(Contains(k->source, "args.ptr[1]"));   // the constvar
  EXPECT_FALSE(Contains(k->source, "args.ptr[2]"));  // the literal is inline
  EXPECT_TRUE(Contains(k->source, "1.5f"));
}

// ---------------------------------------------------------------------------
// Edge semantics against JAX (tests/golden/codegen.py)

namespace {

struct GoldenArray {
  kiln_dtype dtype = KILN_INVALID_DTYPE;
  std::vector<uint64_t> bits;
  double tol = 0;
};

struct GoldenCase {
  std::string name, program;
  std::vector<GoldenArray> inputs;
  GoldenArray output;
};

GoldenArray ParseArray(std::istringstream &in, bool with_tol) {
  GoldenArray a;
  std::string dt;
  size_t n = 0;
  in >> dt >> n;
  EXPECT_EQ(kiln_dtype_from_name(dt.c_str(), &a.dtype), KILN_OK) << dt;
  for (size_t i = 0; i < n; i++) {
    std::string h;
    in >> h;
    a.bits.push_back(std::stoull(h, nullptr, 16));
  }
  if (with_tol) in >> a.tol;
  return a;
}

std::vector<GoldenCase> ReadGolden() {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/codegen.txt");
  EXPECT_TRUE(f.good()) << "missing golden file; run tests/golden/codegen.py";
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "case") {
      cases.emplace_back();
      in >> cases.back().name;
    } else if (word == "program") {
      cases.back().program = line.substr(8);
    } else if (word == "input") {
      cases.back().inputs.push_back(ParseArray(in, false));
    } else if (word == "output") {
      cases.back().output = ParseArray(in, true);
    }
  }
  return cases;
}

}  // namespace

TEST(CodegenGolden, EdgeSemanticsMatchJax) {
  std::vector<GoldenCase> cases = ReadGolden();
  ASSERT_GE(cases.size(), 40u);
  Checks checks;
  for (const GoldenCase &gc : cases) {
    Program p = Parse(gc.program);
    ASSERT_TRUE(p) << gc.name;
    std::vector<Buf> in;
    for (size_t k = 0; k < gc.inputs.size(); k++) {
      in.emplace_back(*kir_var_aval(p.get(), p->invars[k]));
      ASSERT_EQ(in.back().size(), (int64_t)gc.inputs[k].bits.size()) << gc.name;
      for (size_t i = 0; i < gc.inputs[k].bits.size(); i++)
        in.back().SetBits((int64_t)i, gc.inputs[k].bits[i]);
    }
    Buf want(*kir_var_aval(p.get(), p->outvars[0]));
    ASSERT_EQ(want.size(), (int64_t)gc.output.bits.size()) << gc.name;
    for (size_t i = 0; i < gc.output.bits.size(); i++) want.SetBits((int64_t)i, gc.output.bits[i]);
    kfuse_kind kind = Contains(gc.program, "reduce_") ? KFUSE_REDUCE : KFUSE_LOOP;
    ASSERT_TRUE(checks.Add(std::move(p), kind, in, Tol(), gc.name));
    checks.Expect(want, gc.output.tol);
  }
}

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
