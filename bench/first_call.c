/* bench_dispatch's first_call_cold row: the first call of a small fused
 * program with nothing cached, split into its phases. Each sample is a new
 * context whose kernel cache is an empty folder and a program of its own
 * (its constant differs), so that nothing from an earlier sample is reused:
 * kiln_jit_new + kiln_jit_lower (tracing, passes, fusion plan), then
 * kiln_lowered_compile (emitting, the host compiler or NVRTC, loading), then
 * the call until its result is ready. bench/jax_reference.py times
 * jax.jit's first call of the same function (first_call_cold). */
#include "first_call.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"

/* x -> x * c + 0.5, four times: eight equations, one fused kernel. */
static kiln_tree *chain_c(kiln_trace *t, const kiln_tree *args, void *user) {
  double c = *(const double *)user;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  for (int i = 0; i < 4; i++) x = kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, c)), kiln_scalar_f(t, 0.5));
  return kiln_tree_val(x);
}

void kbench_remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    char path[1024];
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      struct stat s;
      if (lstat(path, &s) == 0 && S_ISDIR(s.st_mode)) kbench_remove_tree(path);
      else unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static kiln_status one_sample(double c, uint64_t ns[KBENCH_FIRST_CALL_PHASES]) {
  char dir[] = "/tmp/kiln-first-call-XXXXXX";
  if (!mkdtemp(dir)) return kiln_fail(KILN_ERR_IO, "first_call: no temporary folder under /tmp");
  kiln_options o;
  kiln_options_init(&o);
  o.cache_dir = dir;
  kiln_ctx *ctx = NULL;
  kiln_device *dev = NULL;
  kiln_func *f = NULL;
  kiln_jit *j = NULL;
  kiln_lowered *l = NULL;
  kiln_compiled *comp = NULL;
  kiln_tree *args = NULL, *out = NULL;
  float host[KBENCH_FIRST_CALL_ELEMENTS];
  for (int i = 0; i < KBENCH_FIRST_CALL_ELEMENTS; i++) host[i] = (float)i / 1024.0f;
  int64_t shape[1] = {KBENCH_FIRST_CALL_ELEMENTS};
  kiln_array *x = NULL;
  kiln_status st = kiln_ctx_new(&o, &ctx);
  if (!st) st = kiln_device_get(ctx, 0, &dev);
  if (!st) st = kiln_array_from_host(dev, KILN_F32, 1, shape, host, sizeof host, &x);
  if (!st) {
    kiln_tree *leaf = kiln_tree_array(x);
    args = leaf ? kiln_tree_tuple(1, &leaf) : NULL;
    if (!args) st = kiln_fail(KILN_ERR_OUT_OF_MEMORY, "first_call: out of host memory");
  }
  kiln_array_release(x);
  if (!st) st = kiln_func_new(chain_c, &c, "first_call", &f);
  uint64_t t0 = kbench_now_ns();
  if (!st) st = kiln_jit_new(ctx, f, NULL, &j);
  if (!st) st = kiln_jit_lower(j, args, &l);
  uint64_t t1 = kbench_now_ns();
  if (!st) st = kiln_lowered_compile(l, &comp);
  uint64_t t2 = kbench_now_ns();
  if (!st) st = kiln_compiled_call(comp, args, &out);
  if (!st) st = kiln_array_block_until_ready(kiln_tree_leaf_array(out));
  uint64_t t3 = kbench_now_ns();
  ns[0] = t1 - t0;
  ns[1] = t2 - t1;
  ns[2] = t3 - t2;
  ns[3] = t3 - t0;
  kiln_tree_free(out);
  kiln_compiled_free(comp);
  kiln_lowered_free(l);
  kiln_jit_free(j);
  kiln_func_free(f);
  kiln_tree_free(args);
  kiln_ctx_free(ctx);
  kbench_remove_tree(dir);
  return st;
}

kiln_status kbench_first_call(int iters, double ms[KBENCH_FIRST_CALL_PHASES]) {
  uint64_t *ns = calloc((size_t)iters * KBENCH_FIRST_CALL_PHASES, sizeof *ns);
  if (!ns) return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "first_call: out of host memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < iters && !st; i++) {
    uint64_t one[KBENCH_FIRST_CALL_PHASES];
    st = one_sample(1.0001 + 1e-3 * i + 1e-6 * (double)(kbench_now_ns() % 1000), one);
    for (int p = 0; p < KBENCH_FIRST_CALL_PHASES; p++) ns[p * iters + i] = one[p];
  }
  for (int p = 0; p < KBENCH_FIRST_CALL_PHASES && !st; p++)
    ms[p] = kbench_median_ns(ns + p * iters, iters) / 1e6;
  free(ns);
  return st;
}
