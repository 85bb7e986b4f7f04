/* Batching (vmap) on programs: each equation with a mapped operand is
 * replaced by its primitive's batching rule (kir_ad_rules.batch); the
 * others are copied as they are, so values that do not depend on the mapped
 * inputs stay unbatched (JAX's not_mapped). */
#include <stdlib.h>
#include "transform/transform.h"

kiln_status ktf_vmap(const char *op, kir_program *dst, const kir_program *src, int64_t size,
                     const kir_vid *x, const int *bd, kir_vid *y, int *ybd) {
  if (src->n_constvars)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: the program has constvars", op);
  const kir_ad_rules *rules = kir_ad_rules_get();
  int w = 1;
  for (int i = 0; i < src->n_eqns; i++) {
    if (src->eqns[i].n_in > w) w = src->eqns[i].n_in;
    if (src->eqns[i].n_out > w) w = src->eqns[i].n_out;
  }
  ktf_map m = {0};
  int *mb = malloc((size_t)(src->n_vars + 2 * w + 1) * sizeof *mb);
  kir_vid *buf = malloc((size_t)(2 * w) * sizeof *buf);
  kiln_status st = mb && buf ? KILN_OK
                             : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = ktf_map_new(op, src->n_vars, &m);
  int *bin = mb ? mb + src->n_vars : NULL, *bout = bin ? bin + w : NULL;
  for (int i = 0; !st && i < src->n_vars; i++) mb[i] = -1;
  for (int i = 0; !st && i < src->n_invars; i++) {
    m.v[src->invars[i]] = x[i];
    mb[src->invars[i]] = bd[i];
  }
  kir_vid *in = buf, *out = buf ? buf + w : NULL;
  for (int i = 0; !st && i < src->n_eqns; i++) {
    const kir_eqn *e = &src->eqns[i];
    bool any = false;
    for (int k = 0; k < e->n_in; k++) any |= (bin[k] = mb[e->in[k]]) >= 0;
    if (!any) {
      st = ktf_copy_eqn(op, dst, src, e, &m, in);
      continue;
    }
    kir_batch_fn rule = rules->batch[e->prim];
    if (!rule) {
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: no batching rule for %s yet", op,
                      kir_prim_name(e->prim));
      break;
    }
    for (int k = 0; !st && k < e->n_in; k++) st = ktf_map_get(op, &m, dst, src, e->in[k], &in[k]);
    if (!st) st = rule(dst, src, e, size, in, bin, out, bout);
    if (st) {
      kcore_fail_wrap(st, "%s: batching %s", op, kir_prim_name(e->prim));
      break;
    }
    for (int j = 0; j < e->n_out; j++) {
      m.v[e->out[j]] = out[j];
      mb[e->out[j]] = bout[j];
    }
  }
  for (int i = 0; !st && i < src->n_outvars; i++) {
    st = ktf_map_get(op, &m, dst, src, src->outvars[i], &y[i]);
    ybd[i] = mb[src->outvars[i]];
  }
  free(m.v);
  free(mb);
  free(buf);
  return st;
}
