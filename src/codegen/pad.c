/* lax.pad as a kernel of its own (an OPAQUE group, e.g. the transpose of a
 * strided pooling): on CUDA one work item per result element, which reads
 * the operand element it came from or the padding value; on the host one
 * per result row along the last axis, copied as runs. Low/high padding may
 * be negative (a crop); interior padding spaces the operand's elements.
 * Elements move as raw bits, so one form serves every dtype. */
#include <stdio.h>
#include "codegen/codegen.h"

kiln_status kcg_emit_pad(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                         kcg_kernel *out) {
  if (e->prim != KIR_PRIM_PAD)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit_pad: %s is not pad", kir_prim_name(e->prim));
  if (kcg_lone_literal(p, e->in[0], &(uint64_t){0}))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_pad: a literal operand");
  const kir_aval *x = kir_var_aval(p, e->in[0]), *y = kir_var_aval(p, e->out[0]);
  const kir_padding *pc = &e->params.pad.padding_config;
  int r = x->rank;
  int64_t xs[KIR_MAX_RANK], step[KIR_MAX_RANK], n = kir_aval_size(y), s = 1;
  for (int d = r - 1; d >= 0; d--) {
    xs[d] = s;
    s *= x->shape[d];
    step[d] = pc->interior[d] + 1;
  }
  bool cuda = t->target == KCG_TARGET_CUDA, rows = !cuda && r > 0;
  const char *T = kcg_lone_word(kiln_dtype_size(x->dtype));
  kcg_buf b = {0};
  kcg_buf_addf(&b, "{\n  enum { R = %d };\n", r > 0 ? r : 1);
  kcg_lone_array(&b, "OUT", r, y->shape);
  kcg_lone_array(&b, "IN", r, x->shape);
  kcg_lone_array(&b, "LO", r, pc->lo);
  kcg_lone_array(&b, "STEP", r, step);
  kcg_lone_array(&b, "XS", r, xs);
  kcg_buf_addf(&b, "  const %s *x = (const %s *)args.ptr[0];\n", T, T);
  uint64_t lit;
  if (kcg_lone_literal(p, e->in[1], &lit))
    kcg_buf_addf(&b, "  const %s pad = (%s)%lluull;\n", T, T, (unsigned long long)lit);
  else
    kcg_buf_addf(&b, "  const %s pad = *(const %s *)args.ptr[1];\n", T, T);
  kcg_buf_addf(&b, "  %s *y = (%s *)args.ptr[2];\n", T, T); /* a literal's slot stays empty */
  kcg_lone_items(&b, cuda);
  /* item i: a result element (CUDA), or a result row along the last axis (C) */
  kcg_buf_addf(&b, "    long long rem = i, off = 0; int in = 1;\n"
                   "    for (int d = %d; d >= 0 && in; d--) {\n"
                   "      long long q = rem %% OUT[d] - LO[d];\n"
                   "      rem /= OUT[d];\n"
                   "      in = q >= 0 && q %% STEP[d] == 0 && q / STEP[d] < IN[d];\n"
                   "      off += in ? q / STEP[d] * XS[d] : 0;\n"
                   "    }\n",
               rows ? r - 2 : r - 1);
  if (!rows) {
    kcg_buf_add(&b, "    y[i] = in ? x[off] : pad;\n  }\n}\n");
  } else {
    /* The row: padding, the operand's row (a plain copy without interior
     * padding on the last axis), padding. */
    int l = r - 1;
    kcg_buf_addf(&b, "    const long long OL = %lldLL, IL = %lldLL, LOL = %lldLL, SL = %lldLL;\n",
                 (long long)y->shape[l], (long long)x->shape[l], (long long)pc->lo[l],
                 (long long)step[l]);
    kcg_buf_addf(&b, "    %s *yr = y + i * OL;\n    long long k = 0;\n", T);
    kcg_buf_add(&b, "    if (in && SL == 1) {\n"
                    "      long long a = LOL < 0 ? 0 : LOL, e = LOL + IL < OL ? LOL + IL : OL;\n"
                    "      for (; k < a && k < OL; k++) yr[k] = pad;\n"
                    "      for (; k < e; k++) yr[k] = x[off + k - LOL];\n"
                    "    } else if (in) {\n"
                    "      for (; k < OL; k++) {\n"
                    "        long long q = k - LOL;\n"
                    "        yr[k] = q >= 0 && q % SL == 0 && q / SL < IL ? x[off + q / SL] : pad;\n"
                    "      }\n"
                    "    }\n"
                    "    for (; k < OL; k++) yr[k] = pad;\n  }\n}\n");
    n = y->shape[l] > 0 ? n / y->shape[l] : 0;
  }
  char name[64], ts[KIR_AVAL_STR_CAP], what[KIR_AVAL_STR_CAP + 16];
  kcg_lone_name(t, "kiln_pad", &b, name, sizeof name);
  snprintf(what, sizeof what, "pad of %s", kir_aval_str(x, ts, sizeof ts));
  kiln_status st = kcg_lone_finish(t, name, what, NULL, &b, true, n, out);
  out->n_args = 3;
  return st;
}
