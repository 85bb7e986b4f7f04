/* Lowering for the C target without a device: the fusion plan and every C
 * kernel the CPU executables would compile (kcpu_exec_build emits the same
 * ones), as text. The kernels are plain C for the host compiler, so the
 * architectures are this host's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

#if defined(__x86_64__)
#define KCPU_HOST_ARCH "x86_64"
#elif defined(__aarch64__)
#define KCPU_HOST_ARCH "aarch64"
#else
#define KCPU_HOST_ARCH "host"
#endif

static kiln_status kcpu_lower_group(const kir_program *p, const kfuse_group *g, int index,
                                    kcg_buf *text) {
  const kir_eqn *lone = kcg_lone_eqn(p, g);
  if (!lone && g->kind != KFUSE_LOOP && g->kind != KFUSE_REDUCE && g->kind != KFUSE_ROW) {
    kcg_buf_addf(text, "\n/* ---- group %d (%s): runs on the reference evaluators ---- */\n",
                 index, kfuse_kind_name(g->kind));
    return KILN_OK;
  }
  kcg_kernel k;
  kcg_target_info target = {KCG_TARGET_C, 0};
  kiln_status st = lone ? kcg_emit_lone(p, lone, &target, &k) : kcg_emit(p, g, &target, &k);
  if (st == KILN_ERR_UNIMPLEMENTED) {
    kcg_buf_addf(text, "\n/* ---- group %d (%s): not a kernel: %s ---- */\n", index,
                 kfuse_kind_name(g->kind), kiln_last_error());
    kiln_clear_error();
    return KILN_OK;
  }
  if (st) return st;
  kcg_buf_addf(text, "\n/* ---- group %d (%s): %s, C, %lld items ---- */\n%s", index,
               kfuse_kind_name(g->kind), k.name, (long long)k.n_items, k.source);
  kcg_kernel_free(&k);
  return KILN_OK;
}

kiln_status kcpu_lowered_text(const kcore_config *config, kcache *cache, const kir_program *p,
                              const bool *donated, const char *arch, char **text) {
  (void)config, (void)cache; /* nothing is compiled */
  if (strcmp(arch, "host") && strcmp(arch, "c") && strcmp(arch, KCPU_HOST_ARCH))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: the C target compiles for this host only (cpu:host, "
                      "cpu:c or cpu:" KCPU_HOST_ARCH ")", arch);
  kfuse_plan *plan = NULL;
  char *plan_text = NULL;
  kcg_buf buf = {0};
  kiln_status st = kfuse_plan_build(p, NULL, donated, &plan);
  if (!st) st = kfuse_plan_print(plan, p, &plan_text);
  if (!st) kcg_buf_add(&buf, plan_text);
  for (int i = 0; !st && i < plan->n_groups; i++) st = kcpu_lower_group(p, &plan->groups[i], i, &buf);
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
