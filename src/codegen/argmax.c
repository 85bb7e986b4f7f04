/* argmax / argmin along one axis as a kernel of its own (an OPAQUE group:
 * the accuracy of a classifier): one work item per result element walks
 * its line, keeping lax's reducer's choice: the first NaN, else the first
 * extreme value; float subnormals compare as zero, as the reference
 * evaluator (XLA's flush) does. */
#include <stdio.h>
#include "codegen/codegen.h"

/* x's element as a comparable C value. */
static const char *kcg_arg_load(kiln_dtype d) {
  return d == KILN_F16 ? "kiln_h2f" : d == KILN_BF16 ? "kiln_bh2f" : "";
}

kiln_status kcg_emit_argmax(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out) {
  bool is_max = e->prim == KIR_PRIM_ARGMAX;
  if (!is_max && e->prim != KIR_PRIM_ARGMIN)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit_argmax: %s is not argmax or argmin",
                      kir_prim_name(e->prim));
  kiln_status lit = kcg_lone_no_literals(p, e);
  if (lit) return lit;
  const kir_aval *x = kir_var_aval(p, e->in[0]), *y = kir_var_aval(p, e->out[0]);
  int axis = e->params.argminmax.axes.v[0];
  int64_t len = x->shape[axis], inner = 1;
  for (int d = axis + 1; d < x->rank; d++) inner *= x->shape[d];
  kiln_dtype dt = x->dtype;
  bool fl = kiln_dtype_is_float(dt);
  const char *tiny = dt == KILN_F64 ? "2.2250738585072014e-308" : "1.17549435e-38f";
  const char *C = kcg_ctype(dt), *S = kcg_stype(dt), *I = kcg_stype(y->dtype);
  kcg_buf b = {0};
  kcg_buf_addf(&b, "{\n  const long long LEN = %lldLL, INNER = %lldLL;\n", (long long)len,
               (long long)inner);
  kcg_buf_addf(&b, "  const %s *x = (const %s *)args.ptr[0];\n  %s *y = (%s *)args.ptr[1];\n", S,
               S, I, I);
  kcg_lone_items(&b, t->target == KCG_TARGET_CUDA);
  kcg_buf_add(&b, "    const long long base = i / INNER * LEN * INNER + i % INNER;\n"
                  "    long long best = 0;\n");
  kcg_buf_addf(&b, "    %s bv = %s(x[base]);\n", C, kcg_arg_load(dt));
  if (fl && dt != KILN_F16)
    kcg_buf_addf(&b, "    if (bv < %s && bv > -%s) bv = 0;\n", tiny, tiny);
  kcg_buf_add(&b, "    for (long long k = 1; k < LEN; k++) {\n");
  kcg_buf_addf(&b, "      %s v = %s(x[base + k * INNER]);\n", C, kcg_arg_load(dt));
  if (fl && dt != KILN_F16) kcg_buf_addf(&b, "      if (v < %s && v > -%s) v = 0;\n", tiny, tiny);
  if (fl)
    kcg_buf_addf(&b, "      if (bv == bv && (v != v || v %s bv)) { best = k; bv = v; }\n",
                 is_max ? ">" : "<");
  else
    kcg_buf_addf(&b, "      if (v %s bv) { best = k; bv = v; }\n", is_max ? ">" : "<");
  kcg_buf_addf(&b, "    }\n    y[i] = (%s)best;\n  }\n}\n", I);
  char name[64], ts[KIR_AVAL_STR_CAP], what[KIR_AVAL_STR_CAP + 32];
  kcg_lone_name(t, is_max ? "kiln_argmax" : "kiln_argmin", &b, name, sizeof name);
  snprintf(what, sizeof what, "%s of %s along axis %d", kir_prim_name(e->prim),
           kir_aval_str(x, ts, sizeof ts), axis);
  kiln_status st = kcg_lone_finish(t, name, what, NULL, &b, true, kir_aval_size(y), out);
  out->n_args = 2;
  return st;
}
