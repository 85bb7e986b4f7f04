/* Executables through the backend interface: the device's backend builds
 * one for a compiled program (fused kernels, library calls, host steps), or
 * declines and the reference executor runs; plans and kernel sources go to
 * KILN_DUMP_DIR. The context's kernel cache is opened here, on first use. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

struct krt_kcache_slot {
  pthread_mutex_t mu;
  bool tried;
  kiln_status status; /* why there is no cache */
  kcache *cache;
};

kiln_status krt_ctx_kcache(kiln_ctx *ctx, kcache **out) {
  static pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER; /* guards the pointer only */
  pthread_mutex_lock(&init);
  if (!ctx->kcache && (ctx->kcache = calloc(1, sizeof *ctx->kcache)))
    pthread_mutex_init(&ctx->kcache->mu, NULL);
  struct krt_kcache_slot *k = ctx->kcache;
  pthread_mutex_unlock(&init);
  *out = NULL;
  if (!k) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kernel cache: out of host memory");
  pthread_mutex_lock(&k->mu);
  if (!k->tried) {
    k->tried = true;
    const kiln_options *o = &ctx->config.opts;
    k->status = kcache_new(o->cache_dir, o->log_level, &k->cache);
  }
  kiln_status st = k->status;
  *out = k->cache;
  pthread_mutex_unlock(&k->mu);
  return st;
}

void krt_ctx_kcache_free(kiln_ctx *ctx) {
  if (!ctx->kcache) return;
  kcache_free(ctx->kcache->cache);
  pthread_mutex_destroy(&ctx->kcache->mu);
  free(ctx->kcache);
  ctx->kcache = NULL;
}

kiln_status krt_exec_text(const kiln_compiled *c, char **text) {
  if (c->exec) return c->exec_ops->describe(c->exec, text);
  return kir_print(c->p.prog, text);
}

/* Writes the plan and the kernels' sources to KILN_DUMP_DIR. */
static void krt_dump_exec(const kiln_compiled *c, const char *name) {
  kiln_ctx *ctx = c->p.ctx;
  const char *dir = ctx->config.opts.dump_dir;
  char *text = NULL;
  if (!dir || !c->exec || c->exec_ops->describe(c->exec, &text)) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s-%016llx.plan.txt", dir, name,
           (unsigned long long)kcore_hash_str(KCORE_HASH_SEED, text));
  if (kcache_write_file(path, text, strlen(text), false))
    KRT_LOG(ctx, KILN_LOG_WARN, "dump: %s", kiln_last_error());
  free(text);
}

kiln_status krt_build_exec(kiln_compiled *c) {
  kiln_device *dev = c->p.dev;
  const kdev_exec_ops *ops = dev->backend->exec;
  if (!ops) return KILN_OK;
  kcache *cache = NULL;
  kiln_status st = krt_ctx_kcache(c->p.ctx, &cache);
  if (st) return st;
  char name[80];
  snprintf(name, sizeof name, "jit(%s)", c->p.f && c->p.f->name ? c->p.f->name : "program");
  kdev_build b = {.name = name,
                  .prog = c->p.prog,
                  .donated = c->p.donated,
                  .env = &c->env,
                  .cache = cache,
                  .config = &c->p.ctx->config};
  if ((st = ops->build(dev, &b, &c->exec))) return st;
  if (c->exec) {
    c->exec_ops = ops;
    krt_dump_exec(c, c->p.f ? c->p.f->name : "program");
  }
  return KILN_OK;
}
