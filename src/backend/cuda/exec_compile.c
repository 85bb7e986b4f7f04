/* The CUDA executor's kernels: each compiled by NVRTC to a cubin through the
 * kernel cache (several at once), its source dumped to KILN_DUMP_DIR; and
 * the lowered text for a chosen sm_XY, which needs no device. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* ---- building ---- */

typedef struct kcuda_x_nvrtc_job {
  const char *name, *source, *arch;
} kcuda_x_nvrtc_job;

static kiln_status kcuda_x_nvrtc_build(void *user, void **blob, size_t *size) {
  const kcuda_x_nvrtc_job *j = user;
  char *cubin = NULL;
  kiln_status st = kcuda_nvrtc_compile(j->name, j->source, &j->arch, 1, true, &cubin, size);
  *blob = cubin;
  return st;
}

/* Keeps the source of a kernel that does not compile where the user can
 * read it: the dump directory, else the temporary directory. */
static void kcuda_x_dump_failed(const kcore_config *config, const char *name, const char *source) {
  const char *dir = config->opts.dump_dir;
  if (!dir || !*dir) dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char *log = kcore_strdup(kiln_last_error()), *path = NULL;
  if (log && kcache_dump_source(dir, name, "cu", source, &path) == KILN_OK)
    kcore_fail(KILN_ERR_COMPILE, "%s\n(the kernel's source is in %s)", log, path);
  else if (log)
    kcore_fail(KILN_ERR_COMPILE, "%s", log);
  free(path);
  free(log);
}

/* Every kernel's source goes to KILN_DUMP_DIR as its own .cu file, which
 * NVRTC compiles alone (the prelude is in it), whether or not the cubin is
 * cached; a failed dump is a warning. */
static void kcuda_x_dump(const kcore_config *config, const kcg_kernel *k) {
  const char *dir = config->opts.dump_dir;
  if (!dir || !*dir || kcache_dump_source(dir, k->name, "cu", k->source, NULL) == KILN_OK) return;
  kcore_log(config->opts.log_level, KILN_LOG_WARN, "dump of kernel %s: %s", k->name,
            kiln_last_error());
  kiln_clear_error();
}

/* The cubin of kernel k for sm_<sm>, from the cache or NVRTC. */
static kiln_status kcuda_x_cubin(const kcore_config *config, kcache *cache, const kcg_kernel *k,
                                 int sm, const void **cubin, size_t *size) {
  char arch[32], target[16], compiler[32];
  const kcuda_nvrtc *nv;
  kiln_status st = kcuda_nvrtc_get(&nv);
  if (st) return st;
  snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
  snprintf(target, sizeof target, "sm_%d", sm);
  snprintf(compiler, sizeof compiler, "nvrtc %d.%d", nv->major, nv->minor);
  const char *opts[1] = {arch};
  kcache_key_parts parts = {k->source, strlen(k->source), target, compiler, opts, 1};
  kcache_key key;
  kcache_key_make(&parts, &key);
  kcuda_x_nvrtc_job job = {k->name, k->source, arch};
  kcuda_x_dump(config, k);
  st = kcache_get_or_build(cache, &key, kcuda_x_nvrtc_build, &job, cubin, size);
  if (st == KILN_ERR_COMPILE) kcuda_x_dump_failed(config, k->name, k->source);
  return st;
}

/* The device's compute capability as sm_XY's number. */
int kcuda_x_sm(const kiln_device *dev) {
  return dev->info.compute_major * 10 + dev->info.compute_minor;
}

/* Compiling every kernel of an executable at once, NVRTC programs on
 * several threads (NVRTC is thread-safe; the kernel cache too). */
typedef struct kcuda_x_compile_all {
  const kcore_config *config;
  kcache *cache;
  int sm, n;
  const kcg_kernel *k; /* n kernels; name NULL: none */
  const void **cubin;
  _Atomic int next;
  pthread_mutex_t mu;
  kiln_status st; /* the first failure, its message in `why` */
  char *why;
} kcuda_x_compile_all;

static void *kcuda_x_compile_worker(void *user) {
  kcuda_x_compile_all *w = user;
  for (int i; (i = atomic_fetch_add(&w->next, 1)) < w->n;) {
    if (!w->k[i].name) continue;
    size_t size = 0;
    kiln_status st = kcuda_x_cubin(w->config, w->cache, &w->k[i], w->sm, &w->cubin[i], &size);
    if (!st) continue;
    pthread_mutex_lock(&w->mu);
    if (!w->st) {
      w->st = st;
      w->why = kcore_strdup(kiln_last_error());
    }
    pthread_mutex_unlock(&w->mu);
  }
  return NULL;
}

kiln_status kcuda_x_compile(kdev_exec *x, const kcore_config *config, kcache *cache,
                                   const kcg_kernel *k, const void **cubin) {
  kcuda_x_compile_all w = {.config = config,
                           .cache = cache,
                           .sm = kcuda_x_sm(x->dev),
                           .n = x->n_steps,
                           .k = k,
                           .cubin = cubin};
  pthread_mutex_init(&w.mu, NULL);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int kernels = 0;
  for (int i = 0; i < x->n_steps; i++) kernels += k[i].name != NULL;
  int n = kernels < KCUDA_COMPILE_THREADS ? kernels : KCUDA_COMPILE_THREADS;
  if (cores > 0 && n > cores) n = (int)cores;
  pthread_t threads[KCUDA_COMPILE_THREADS];
  int started = 0;
  while (started < n - 1 &&
         pthread_create(&threads[started], NULL, kcuda_x_compile_worker, &w) == 0)
    started++;
  kcuda_x_compile_worker(&w); /* this thread is one of the workers */
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  pthread_mutex_destroy(&w.mu);
  if (w.st) kcore_fail(w.st, "%s", w.why ? w.why : "compiling a kernel failed");
  free(w.why);
  return w.st;
}

/* ---- lowering for a CUDA architecture, with or without a device ---- */

static kiln_status kcuda_x_lower_group(const kcore_config *config, kcache *cache,
                                       const kir_program *p, const kfuse_group *g, int index,
                                       int sm, kcg_buf *text) {
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_CUDA, sm};
  kiln_status st = kcg_emit(p, g, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcg_buf_addf(text, "\n/* ---- group %d (%s): not a kernel: %s ---- */\n", index,
                 kfuse_kind_name(g->kind), kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  const void *cubin = NULL;
  size_t size = 0;
  st = kcuda_x_cubin(config, cache, &k, sm, &cubin, &size);
  if (!st)
    kcg_buf_addf(text,
                 "\n/* ---- group %d (%s): %s, %zu-byte cubin for sm_%d, %lld items ---- */\n%s",
                 index, kfuse_kind_name(g->kind), k.name, size, sm, (long long)k.n_items, k.source);
  kcg_kernel_free(&k);
  return st;
}

kiln_status kcuda_lowered_text(const kcore_config *config, kcache *cache, const kir_program *p,
                               const bool *donated, const char *arch, char **text) {
  char *end = NULL;
  long sm = strncmp(arch, "sm_", 3) == 0 ? strtol(arch + 3, &end, 10) : 0;
  if (!end || *end || sm < 50 || sm > 200)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s is not a CUDA architecture kiln targets (sm_50 to "
                      "sm_200)", arch);
  kfuse_plan *plan = NULL;
  char *plan_text = NULL;
  kcg_buf buf = {0};
  kiln_status st = kfuse_plan_build(p, NULL, donated, &plan);
  if (!st) st = kfuse_plan_print(plan, p, &plan_text);
  if (!st) kcg_buf_add(&buf, plan_text);
  for (int i = 0; !st && plan && i < plan->n_groups; i++)
    st = kcuda_x_lower_group(config, cache, p, &plan->groups[i], i, (int)sm, &buf);
  if (!st && buf.oom) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "as_text: out of host memory");
  if (!st) {
    *text = buf.s;
    buf.s = NULL;
  }
  kcg_buf_free(&buf);
  free(plan_text);
  kfuse_plan_free(plan);
  return st;
}

