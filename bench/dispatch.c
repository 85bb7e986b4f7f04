/* bench_dispatch: the host's share of running kernels: jit dispatch,
 * tracing + compiling, NVRTC compiles and kernel-cache hits.
 *
 *   bench_dispatch [--iters N] [--compile-iters N] [--quick] [--json PATH]
 *
 * Rows (the notes under the table say what each is compared with):
 *   cached_call_1_kernel    kiln_jit_call of x + 1 on f32[4], program cached,
 *                           on the context's first device (KILN_BACKEND)
 *   cached_call_20_kernels  the same for a 20-equation elementwise chain
 *                           under the unfused executor: 20 kernels per call
 *                           (replayed as a CUDA graph on a GPU)
 *   trace_compile_N         kiln_jit_lower + kiln_lowered_compile of an
 *                           N-equation chain (N = 10, 100, 1000)
 *   first_call_cold         the first call of an 8-equation program, nothing
 *                           cached (first_call.c), by phase
 *   nvrtc:<case>            NVRTC compiles (CUDA C for sm_90 to a cubin) of
 *                           the fused kernels of bench_fusion's cases
 *   nvrtc_compile_sm90, cubin_cache_hit, c_compile, c_so_cache_hit
 *                           the same over every kernel, and the kernel
 *                           cache: a kernel stored on disk, loaded by a new
 *                           cache object (read + checksum; for the C target
 *                           also written out and dlopen'ed)
 * Call times are medians over --iters calls after ten warm-up calls;
 * compile times medians over --compile-iters compiles, cache hits over ten
 * times as many loads. NVRTC needs no GPU: the compile rows are real on any
 * machine. --quick: cached_call_1_kernel and first_call_cold only (for
 * bench/side_by_side.py, which sets them beside jax.jit's). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cases.h"
#include "first_call.h"
#include "codegen/codegen.h"
#include "core/core.h"
#include "fuse/fuse.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "report.h"
#include "runtime/runtime.h"

/* Issue 4's targets, on the GPU machine. */
#define TARGET_CALL_US 5.0       /* a cached call of a one-kernel program */
#define TARGET_REPLAY_US 1.0     /* per kernel of a 20-kernel program (graph replay) */
#define TARGET_NVRTC_MS 150.0    /* NVRTC compile per kernel */
#define TARGET_CACHE_HIT_MS 2.0  /* disk-cache hit per kernel */
#define NVRTC_SM 90
#define MAX_KERNELS 256

/* The fusion cases whose kernels are compiled (row lengths and dtypes
 * change the emitted code; 2048 and 4096 add nothing 1024 and 8192 lack). */
static const char *const kCompileCases[] = {
    "chain8_f32",         "broadcast_f32",      "softmax_1024_f32",   "layernorm_1024_f32",
    "softmax_8192_f32",   "layernorm_8192_f32", "softmax_1024_bf16",  "layernorm_1024_bf16",
    "softmax_8192_bf16",  "layernorm_8192_bf16"};
#define NUM_COMPILE_CASES ((int)(sizeof kCompileCases / sizeof kCompileCases[0]))

typedef struct dispatch_args {
  int iters, compile_iters;
  bool quick;
  const char *json;
} dispatch_args;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median and maximum of n values (sorted in place); NaN when n is 0. */
static void median_max(double *v, int n, double *median, double *max) {
  *median = *max = NAN;
  if (n == 0) return;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  *median = v[n / 2];
  *max = v[n - 1];
}

static kiln_status add_target(kbench_report *r, double target, bool applies, bool met) {
  kiln_status st = kbench_report_value(r, "target", target);
  if (!st) st = kbench_report_value(r, "target_applies", applies);
  if (!st) st = kbench_report_value(r, "target_met", applies ? met : NAN);
  return st;
}

/* ---- cached calls ---- */

static kiln_tree *add_one(kiln_trace *t, const kiln_tree *args, void *user) {
  (void)user;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  return kiln_tree_val(kiln_add(t, x, kiln_scalar_f(t, 1.0)));
}

/* (f32[4],) on dev. */
static kiln_status small_input(kiln_device *dev, kiln_tree **out) {
  float v[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  kiln_array *a = NULL;
  kiln_tree *leaf = NULL;
  *out = NULL;
  kiln_status st = kiln_array_from_host(dev, KILN_F32, 1, shape, v, sizeof v, &a);
  if (!st && !(leaf = kiln_tree_array(a))) st = KILN_ERR_OUT_OF_MEMORY;
  kiln_array_release(a);
  if (!st && !(*out = kiln_tree_tuple(1, &leaf))) st = KILN_ERR_OUT_OF_MEMORY;
  return st == KILN_ERR_OUT_OF_MEMORY ? kcore_fail(st, "bench_dispatch: out of host memory") : st;
}

/* A jitted function with its compiled program and fusion plan, as the
 * executors plan it (fused, or one group per primitive). */
typedef struct planned {
  kiln_jit *j;
  kiln_lowered *l;
  kiln_compiled *c;
  kfuse_plan *plan;
} planned;

static void planned_free(planned *p) {
  kfuse_plan_free(p->plan);
  kiln_compiled_free(p->c);
  kiln_lowered_free(p->l);
  kiln_jit_free(p->j);
  *p = (planned){0};
}

static kiln_status planned_make(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args, bool fuse,
                                planned *out) {
  *out = (planned){0};
  kfuse_options fo;
  kfuse_options_default(&fo);
  fo.fuse = fuse;
  kiln_status st = kiln_jit_new(ctx, f, NULL, &out->j);
  if (!st) st = kiln_jit_lower(out->j, args, &out->l);
  if (!st) st = kiln_lowered_compile(out->l, &out->c);
  if (!st) st = kfuse_plan_build(out->c->p.prog, &fo, out->c->p.donated, &out->plan);
  if (st) planned_free(out);
  return st;
}

static bool is_kernel(const kfuse_group *g) {
  return g->kind == KFUSE_LOOP || g->kind == KFUSE_REDUCE || g->kind == KFUSE_ROW;
}

static int plan_kernels(const kfuse_plan *plan) {
  int n = 0;
  for (int i = 0; i < plan->n_groups; i++) n += is_kernel(&plan->groups[i]);
  return n;
}

/* Medians of the host time of kiln_jit_call (until it returns) and of the
 * wall time until the result is ready, after ten warm-up calls. */
static kiln_status timed_calls(kiln_jit *j, const kiln_tree *x, int iters, double *host_us,
                               double *wall_us) {
  uint64_t *host = calloc((size_t)iters, sizeof *host), *wall = calloc((size_t)iters, sizeof *wall);
  kiln_status st =
      host && wall ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: no memory");
  for (int i = -10; i < iters && !st; i++) {
    kiln_tree *out = NULL;
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_call(j, x, &out);
    uint64_t t1 = kcore_now_ns();
    if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
    uint64_t t2 = kcore_now_ns();
    kiln_tree_free(out);
    if (i >= 0) {
      host[i] = t1 - t0;
      wall[i] = t2 - t0;
    }
  }
  if (!st) {
    *host_us = kbench_median_ns(host, iters) / 1e3;
    *wall_us = kbench_median_ns(wall, iters) / 1e3;
  }
  free(host);
  free(wall);
  return st;
}

/* One cached-call row: the function `fn` on (f32[4],) in ctx. */
static kiln_status bench_call(kbench_report *r, const char *row, kiln_ctx *ctx, kiln_fn fn,
                              void *user, bool fuse, int iters, double target_us) {
  kiln_device *dev = NULL;
  kiln_device_info info;
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_tree *x = NULL;
  planned p = {0};
  double host = 0, wall = 0;
  kiln_status st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) st = small_input(dev, &x);
  if (!st) st = kiln_func_new(fn, user, row, &f);
  if (!st) st = planned_make(ctx, f, x, fuse, &p);
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  if (!st) st = timed_calls(j, x, iters, &host, &wall);
  int kernels = p.plan ? plan_kernels(p.plan) : 0;
  double per_kernel = host / (kernels > 0 ? kernels : 1);
  if (!st) st = kbench_report_row(r, row);
  if (!st) st = kbench_report_value(r, "kernels", kernels);
  if (!st) st = kbench_report_value(r, "host_us", host);
  if (!st) st = kbench_report_value(r, "wall_us", wall);
  if (!st) st = kbench_report_value(r, "us_per_kernel", per_kernel);
  if (!st)
    st = add_target(r, target_us, info.platform == KILN_BACKEND_CUDA, per_kernel <= target_us);
  planned_free(&p);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_tree_free(x);
  return st;
}

static kiln_status bench_trace_compile(kbench_report *r, kiln_ctx *ctx, int n_eqns, int iters) {
  kiln_device *dev = NULL;
  kiln_func *f = NULL;
  kiln_tree *x = NULL;
  uint64_t *ns = calloc((size_t)iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: no memory");
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = small_input(dev, &x);
  if (!st) st = kiln_func_new(kbench_chain, &n_eqns, "chain", &f);
  for (int i = 0; i < iters && !st; i++) {
    planned p = {0};
    uint64_t t0 = kcore_now_ns();
    st = kiln_jit_new(ctx, f, NULL, &p.j);
    if (!st) st = kiln_jit_lower(p.j, x, &p.l);
    if (!st) st = kiln_lowered_compile(p.l, &p.c);
    ns[i] = kcore_now_ns() - t0;
    planned_free(&p);
  }
  char name[32];
  snprintf(name, sizeof name, "trace_compile_%d", n_eqns);
  double us = st ? 0 : kbench_median_ns(ns, iters) / 1e3;
  if (!st) st = kbench_report_row(r, name);
  if (!st) st = kbench_report_value(r, "host_us", us);
  if (!st) st = kbench_report_value(r, "us_per_eqn", us / n_eqns);
  free(ns);
  kiln_func_free(f);
  kiln_tree_free(x);
  return st;
}

/* ---- compiles and cache hits ---- */

typedef struct compile_bench {
  int iters, hit_iters;
  char dir[512]; /* the temporary cache directory */
  kcpu_cc *cc;   /* NULL: no host compiler; the C rows are n/a */
  char nvrtc_version[32];
  int n, n_c; /* kernels measured for CUDA, for C */
  double nvrtc_ms[MAX_KERNELS], cubin_hit_ms[MAX_KERNELS];
  double c_compile_ms[MAX_KERNELS], c_hit_ms[MAX_KERNELS];
} compile_bench;

/* A blob handed to the cache on its first store (a copy it owns). */
typedef struct blob_ref {
  const void *data;
  size_t size;
} blob_ref;

static kiln_status give_blob(void *user, void **blob, size_t *size) {
  const blob_ref *b = user;
  if (!(*blob = malloc(b->size ? b->size : 1)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: out of host memory");
  memcpy(*blob, b->data, b->size);
  *size = b->size;
  return KILN_OK;
}

/* A hit is expected; a build means the disk lookup failed. */
static kiln_status refuse_build(void *user, void **blob, size_t *size) {
  (void)blob, (void)size;
  return kcore_fail(KILN_ERR_INTERNAL, "cache hit expected for %s, but the kernel was missing",
                    (const char *)user);
}

/* A kernel loaded by a fresh cache object came from disk, unbuilt. */
static kiln_status check_disk_hit(kcache *c, const char *name) {
  kcache_stats s;
  kcache_stats_get(c, &s);
  if (s.disk_hits == 1 && s.builds == 0) return KILN_OK;
  return kcore_fail(KILN_ERR_INTERNAL, "%s: expected one disk hit, got %llu hits and %llu builds",
                    name, (unsigned long long)s.disk_hits, (unsigned long long)s.builds);
}

/* Median ms of loading `key` through a new cache object over b->dir. */
static kiln_status time_cubin_hits(compile_bench *b, const kcache_key *key, const char *name,
                                   double *ms) {
  uint64_t *ns = calloc((size_t)b->hit_iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: no memory");
  for (int i = 0; i < b->hit_iters && !st; i++) {
    kcache *c = NULL;
    const void *blob = NULL;
    size_t size = 0;
    st = kcache_new(b->dir, KILN_LOG_WARN, &c);
    uint64_t t0 = kcore_now_ns();
    if (!st) st = kcache_get_or_build(c, key, refuse_build, (void *)name, &blob, &size);
    ns[i] = kcore_now_ns() - t0;
    if (!st) st = check_disk_hit(c, name);
    kcache_free(c);
  }
  if (!st) *ms = kbench_median_ns(ns, b->hit_iters) / 1e6;
  free(ns);
  return st;
}

/* NVRTC compiles of one kernel, its store in the cache, and disk hits. */
static kiln_status bench_cuda_kernel(compile_bench *b, const kcg_kernel *k) {
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d", NVRTC_SM);
  const char *opts[1] = {arch};
  uint64_t *ns = calloc((size_t)b->iters, sizeof *ns);
  char *cubin = NULL;
  size_t size = 0;
  kcache *store = NULL;
  kiln_status st = ns ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: no memory");
  for (int i = 0; i < b->iters && !st; i++) {
    free(cubin);
    uint64_t t0 = kcore_now_ns();
    st = kcuda_nvrtc_compile(k->name, k->source, opts, 1, true, &cubin, &size);
    ns[i] = kcore_now_ns() - t0;
  }
  kcache_key key;
  kcache_key_parts parts = {k->source, strlen(k->source), "sm_90", b->nvrtc_version, opts, 1};
  kcache_key_make(&parts, &key);
  blob_ref ref = {cubin, size};
  const void *blob = NULL;
  if (!st) st = kcache_new(b->dir, KILN_LOG_WARN, &store);
  if (!st) st = kcache_get_or_build(store, &key, give_blob, &ref, &blob, &size);
  kcache_free(store);
  if (!st) st = time_cubin_hits(b, &key, k->name, &b->cubin_hit_ms[b->n]);
  if (!st) b->nvrtc_ms[b->n++] = kbench_median_ns(ns, b->iters) / 1e6;
  free(cubin);
  free(ns);
  return st;
}

/* The C kernel compiled by the host compiler into a fresh cache, then
 * loaded (disk hit, written out and dlopen'ed) by new cache objects. */
static kiln_status bench_c_kernel(compile_bench *b, const kcg_kernel *k) {
  uint64_t *ns = calloc((size_t)b->hit_iters, sizeof *ns);
  kiln_status st = ns ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: no memory");
  for (int i = -1; i < b->hit_iters && !st; i++) { /* i = -1: the build */
    kcache *c = NULL;
    kcpu_cc_module *m = NULL;
    st = kcache_new(b->dir, KILN_LOG_WARN, &c);
    uint64_t t0 = kcore_now_ns();
    if (!st) st = kcpu_cc_jit(b->cc, c, k->name, k->source, NULL, 0, &m);
    uint64_t t = kcore_now_ns() - t0;
    if (!st && i >= 0) st = check_disk_hit(c, k->name);
    if (i < 0) b->c_compile_ms[b->n_c] = (double)t / 1e6;
    else ns[i] = t;
    kcpu_cc_unload(m);
    kcache_free(c);
  }
  if (!st) b->c_hit_ms[b->n_c++] = kbench_median_ns(ns, b->hit_iters) / 1e6;
  free(ns);
  return st;
}

/* Emits group g for one target; *emitted false when the emitter declines
 * it (the group runs on the reference executor). */
static kiln_status emit(const kir_program *p, const kfuse_group *g, kcg_target target,
                        kcg_kernel *k, bool *emitted) {
  kcg_target_info t = {target, NVRTC_SM};
  kiln_status st = kcg_emit(p, g, &t, k);
  *emitted = st == KILN_OK;
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kiln_clear_error();
    return KILN_OK;
  }
  return st;
}

static kiln_status bench_group(compile_bench *b, const kir_program *p, const kfuse_group *g) {
  if (b->n >= MAX_KERNELS) return KILN_OK;
  kcg_kernel k;
  bool emitted = false;
  kiln_status st = emit(p, g, KCG_TARGET_CUDA, &k, &emitted);
  if (st || !emitted) return st;
  st = bench_cuda_kernel(b, &k);
  kcg_kernel_free(&k);
  if (st || !b->cc) return st;
  if ((st = emit(p, g, KCG_TARGET_C, &k, &emitted)) || !emitted) return st;
  st = bench_c_kernel(b, &k);
  kcg_kernel_free(&k);
  return st;
}

/* The fused kernels of one bench_fusion case (at its full size), each
 * compiled for sm_90 and for the host; a row for its NVRTC times. */
static kiln_status bench_case_kernels(compile_bench *b, kbench_report *r, kiln_ctx *lower_ctx,
                                      const char *name) {
  kbench_case c;
  if (!kbench_fusion_case(1.0, name, &c))
    return kcore_fail(KILN_ERR_ARGUMENT, "bench_dispatch: no fusion case %s", name);
  kiln_device *dev = NULL;
  kiln_func *f = NULL;
  kiln_tree *args = NULL;
  planned p = {0};
  int first = b->n;
  kiln_status st = kiln_device_get(lower_ctx, 0, &dev);
  if (!st) st = kbench_case_args(dev, &c, &args);
  if (!st) st = kiln_func_new(c.fn, c.user, c.name, &f);
  if (!st) st = planned_make(lower_ctx, f, args, true, &p);
  for (int i = 0; !st && i < p.plan->n_groups; i++)
    if (is_kernel(&p.plan->groups[i])) st = bench_group(b, p.c->p.prog, &p.plan->groups[i]);
  double times[MAX_KERNELS], median, max;
  int n = b->n - first;
  if (n > 0) memcpy(times, b->nvrtc_ms + first, (size_t)n * sizeof *times);
  median_max(times, n, &median, &max);
  char row[80];
  snprintf(row, sizeof row, "nvrtc:%s", name);
  if (!st) st = kbench_report_row(r, row);
  if (!st) st = kbench_report_value(r, "kernels", n);
  if (!st) st = kbench_report_value(r, "median_ms", median);
  if (!st) st = kbench_report_value(r, "max_ms", max);
  if (st) kcore_fail_wrap(st, "compiling the kernels of %s", name);
  planned_free(&p);
  kiln_func_free(f);
  kiln_tree_free(args);
  return st;
}

/* A summary row over every kernel: median and max against a target that
 * every kernel must meet. */
static kiln_status summary_row(kbench_report *r, const char *row, double *ms, int n,
                               double target_ms) {
  double median, max;
  median_max(ms, n, &median, &max);
  kiln_status st = kbench_report_row(r, row);
  if (!st) st = kbench_report_value(r, "kernels", n);
  if (!st) st = kbench_report_value(r, "median_ms", median);
  if (!st) st = kbench_report_value(r, "max_ms", max);
  if (!st && !isnan(target_ms)) st = add_target(r, target_ms, n > 0, max <= target_ms);
  return st;
}

static kiln_status bench_compiles(kbench_report *r, int iters) {
  compile_bench *b = calloc(1, sizeof *b);
  kiln_ctx *ctx = NULL;
  if (!b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "bench_dispatch: out of host memory");
  b->iters = iters;
  b->hit_iters = 10 * iters;
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  snprintf(b->nvrtc_version, sizeof b->nvrtc_version, "nvrtc %d.%d", major, minor);
  const char *tmp = getenv("TMPDIR");
  snprintf(b->dir, sizeof b->dir, "%s/kiln-bench-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  kiln_status st = KILN_OK;
  if (!mkdtemp(b->dir)) {
    st = kcore_fail(KILN_ERR_IO, "bench_dispatch: cannot create %s", b->dir);
    free(b);
    return st;
  }
  if (kcpu_cc_new(NULL, KILN_LOG_WARN, &b->cc)) kiln_clear_error(); /* no compiler: no C rows */
  /* The programs are traced and optimized on a CPU context with the
   * reference executor: nothing is compiled there. */
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.executor = KILN_EXECUTOR_REFERENCE;
  st = kiln_ctx_new(&o, &ctx);
  for (int i = 0; i < NUM_COMPILE_CASES && !st; i++)
    st = bench_case_kernels(b, r, ctx, kCompileCases[i]);
  if (!st) st = summary_row(r, "nvrtc_compile_sm90", b->nvrtc_ms, b->n, TARGET_NVRTC_MS);
  if (!st) st = summary_row(r, "cubin_cache_hit", b->cubin_hit_ms, b->n, TARGET_CACHE_HIT_MS);
  if (!st) st = summary_row(r, "c_compile", b->c_compile_ms, b->n_c, NAN);
  if (!st) st = summary_row(r, "c_so_cache_hit", b->c_hit_ms, b->n_c, TARGET_CACHE_HIT_MS);
  if (!st)
    st = kbench_report_note(r, "nvrtc*: %s, -arch=sm_%d to a cubin, per kernel (median of %d); "
                               "target <= %.0f ms for every kernel (max_ms); host-side, applies on "
                               "any machine",
                            b->nvrtc_version, NVRTC_SM, b->iters, TARGET_NVRTC_MS);
  if (!st)
    st = kbench_report_note(r, "cubin_cache_hit: a new kernel cache object's get of a stored "
                               "cubin (file read + checksum, page cache warm; median of %d); "
                               "c_so_cache_hit: the same for the C target's shared object, "
                               "written out and dlopen'ed (kcpu_cc_jit); target <= %.0f ms",
                            b->hit_iters, TARGET_CACHE_HIT_MS);
  if (!st)
    st = kbench_report_note(r, "c_compile: the host C compiler's build of the same kernels "
                               "(one sample, cache cold; no target)");
  kiln_ctx_free(ctx);
  kcpu_cc_free(b->cc);
  kbench_remove_tree(b->dir);
  free(b);
  return st;
}

/* ---- the program ---- */

static bool parse_args(int argc, char **argv, dispatch_args *a) {
  *a = (dispatch_args){.iters = 2000, .compile_iters = 3, .json = NULL};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--iters") && v) a->iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compile-iters") && v) a->compile_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && v) a->json = argv[++i];
    else if (!strcmp(argv[i], "--quick")) a->quick = true;
    else return false;
  }
  return a->iters > 0 && a->compile_iters > 0;
}

static kiln_status run(const dispatch_args *a, kbench_report *r) {
  static int twenty = 20;
  kiln_ctx *ctx = NULL, *unfused = NULL;
  kiln_device *dev = NULL;
  kiln_device_info info;
  kiln_options o;
  kiln_options_init(&o);
  o.executor = KILN_EXECUTOR_UNFUSED;
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kiln_ctx_new(&o, &unfused);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_device_info_get(dev, &info);
  if (!st) st = kbench_report_add_device(r, info.name, kiln_backend_name(info.platform));
  if (!st) st = kbench_report_param(r, "iters", a->iters);
  if (!st) st = kbench_report_param(r, "compile_iters", a->compile_iters);
  if (!st)
    st = bench_call(r, "cached_call_1_kernel", ctx, add_one, NULL, true, a->iters, TARGET_CALL_US);
  double fc[KBENCH_FIRST_CALL_PHASES];
  if (!st) st = kbench_first_call(a->compile_iters, fc);
  if (!st) st = kbench_report_row(r, "first_call_cold");
  if (!st) st = kbench_report_value(r, "lower_ms", fc[0]);
  if (!st) st = kbench_report_value(r, "compile_ms", fc[1]);
  if (!st) st = kbench_report_value(r, "call_ms", fc[2]);
  if (!st) st = kbench_report_value(r, "total_ms", fc[3]);
  if (a->quick) goto done;
  if (!st)
    st = bench_call(r, "cached_call_20_kernels", unfused, kbench_chain, &twenty, false, a->iters,
                    TARGET_REPLAY_US);
  bool gpu = info.platform == KILN_BACKEND_CUDA;
  if (!st)
    st = kbench_report_note(
        r, "cached_call_*: host_us = kiln_jit_call until it returns, wall_us = until the result "
           "is ready; us_per_kernel = host_us / kernels; targets (issue 4, on the GPU machine): "
           "<= %.0f us per one-kernel call, <= %.0f us per kernel of the 20-kernel program (graph "
           "replay): %s on %s",
        TARGET_CALL_US, TARGET_REPLAY_US, gpu ? "apply" : "do not apply", info.name);
  if (!st)
    st = kbench_report_note(r, "trace_compile_N: jit_lower + lowered_compile of an N-equation "
                               "chain on %s (host C kernels cached on disk); no target",
                            info.name);
  const int sizes[3] = {10, 100, 1000};
  for (int k = 0; k < 3 && !st; k++) {
    int iters = a->iters / (sizes[k] / 10);
    st = bench_trace_compile(r, ctx, sizes[k], iters > 5 ? iters : 5);
  }
  if (!st) st = bench_compiles(r, a->compile_iters);
done:
  kiln_ctx_free(unfused);
  kiln_ctx_free(ctx);
  return st;
}

int main(int argc, char **argv) {
  dispatch_args a;
  if (!parse_args(argc, argv, &a)) {
    fprintf(stderr,
            "usage: bench_dispatch [--iters N] [--compile-iters N] [--quick] [--json PATH]\n");
    return 2;
  }
  kbench_report *r = NULL;
  kiln_status st = kbench_report_new("dispatch", &r);
  if (!st) st = run(&a, r);
  char path[512] = "";
  if (!st) {
    kbench_report_print(r, stdout);
    st = kbench_report_write_json(r, a.json, path, sizeof path);
  }
  if (st)
    fprintf(stderr, "bench_dispatch: %s: %s\n", kiln_status_str(st), kiln_last_error());
  else
    printf("wrote %s\n", path);
  kbench_report_free(r);
  return st ? 1 : 0;
}
