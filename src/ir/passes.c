/* The pass pipeline: one table of IR passes, run in order by
 * kir_run_passes for jit, stages and lowering alike, so that what a stage
 * prints, what a lowering emits and what a call runs come from the same
 * program. Debug builds verify the program after every pass (a pass that
 * breaks an invariant is named, not the executor that trips over it later);
 * with a dump directory the program is written after every pass, as XLA's
 * --xla_dump_hlo_pass_re does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/ir.h"
#include "kcache/kcache.h"

static kiln_status kir_pass_fold(kir_program *p, int *changed) {
  return kir_fold(p, kir_reference_evals(), KIR_FOLD_MAX_BYTES, changed);
}

typedef struct kir_pass {
  const char *name;
  kiln_status (*run)(kir_program *p, int *changed);
  bool fusing_only; /* the reference executor keeps calls as written */
} kir_pass;

/* DCE first so that the later passes see only live equations; CSE after
 * simplify (simplified shapes compare equal); inlining after CSE (a
 * checkpoint's recomputation must not merge with the forward values), and
 * then DCE again for what inlining left dead. */
static const kir_pass kir_passes[] = {
    {"dce", kir_dce, false},          {"simplify", kir_simplify, false},
    {"cse", kir_cse, false},          {"fold", kir_pass_fold, false},
    {"dce", kir_dce, false},          {"inline_calls", kir_inline_calls, true},
    {"dce", kir_dce, true},
};

/* <dir>/<name>.<index>.<pass>.txt; a failed dump is reported, never fatal. */
static void kir_dump_pass(const kir_program *p, const kir_pass_opts *o, int index,
                          const char *pass) {
  char *text = NULL;
  if (kir_print(p, &text)) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.%02d.%s.txt", o->dump_dir, o->name ? o->name : "program",
           index, pass);
  kiln_status st = kcache_write_file(path, text, strlen(text), false);
  free(text);
  if (st) kcore_log(o->log_level, KILN_LOG_WARN, "dump: %s", kiln_last_error());
}

kiln_status kir_run_passes(kir_program *p, const kir_pass_opts *o) {
  static const kir_pass_opts none = {0};
  if (!o) o = &none;
  if (o->dump_dir) kir_dump_pass(p, o, 0, "input");
  int n = (int)(sizeof kir_passes / sizeof kir_passes[0]);
  for (int i = 0; i < n; i++) {
    const kir_pass *pass = &kir_passes[i];
    if (pass->fusing_only && !o->fusing) continue;
    int changed = 0;
    kiln_status st = pass->run(p, &changed);
    if (st) return kcore_fail_wrap(st, "IR pass %d (%s)", i + 1, pass->name);
#ifndef NDEBUG
    if ((st = kir_verify(p)))
      return kcore_fail_wrap(st, "the program after IR pass %d (%s) does not verify", i + 1,
                             pass->name);
#endif
    if (o->dump_dir) kir_dump_pass(p, o, i + 1, pass->name);
  }
  return kir_verify(p);
}
