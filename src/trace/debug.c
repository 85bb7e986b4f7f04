/* Debugging ops: run-time printing and host callbacks. */
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

kiln_status kiln_debug_print(kiln_trace *t, const char *fmt, int n, kiln_val *const *vals) {
  static const char op[] = "kiln_debug_print";
  if (!ktr_ok(t, op, 0, NULL)) return t ? t->status : KILN_ERR_ARGUMENT;
  if (!fmt || n < 0 || (n > 0 && !vals)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: fmt or values missing", op);
    return t->status;
  }
  if (!ktr_ok(t, op, n, vals)) return t->status;
  kir_params p;
  memset(&p, 0, sizeof p);
  p.debug_print.fmt = fmt; /* copied into the program's arena by the IR */
  ktr_bind(t, op, KIR_PRIM_DEBUG_PRINT, &p, n, vals, 0, NULL);
  return t->status;
}

static kiln_status ktr_register_host(kiln_trace *t, kiln_host_fn cb, void *user, int *id) {
  ktr_host_table *h = t->root->hosts;
  if (h->n == h->cap) {
    int cap = h->cap ? 2 * h->cap : 4;
    ktr_host_fn *v = realloc(h->v, (size_t)cap * sizeof *v);
    if (!v) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_host_callback: out of host memory");
    h->v = v;
    h->cap = cap;
  }
  h->v[h->n] = (ktr_host_fn){cb, user};
  *id = h->n++;
  return KILN_OK;
}

kiln_status kiln_host_callback(kiln_trace *t, kiln_host_fn cb, void *user, int n_in,
                               kiln_val *const *in, int n_out, const kiln_aval *result_avals,
                               kiln_val **out) {
  static const char op[] = "kiln_host_callback";
  if (!ktr_ok(t, op, 0, NULL)) return t ? t->status : KILN_ERR_ARGUMENT;
  if (!cb || n_in < 0 || n_out < 0 || (n_in && !in) || (n_out && (!result_avals || !out))) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: callback, inputs or results missing", op);
    return t->status;
  }
  if (!ktr_ok(t, op, n_in, in)) return t->status;
  int id = -1;
  kiln_status st = ktr_register_host(t, cb, user, &id);
  if (st) {
    ktr_fail(t, st);
    return st;
  }
  kir_params p;
  memset(&p, 0, sizeof p);
  p.host_callback.callback = id;
  p.host_callback.result_avals.n = n_out;
  kir_aval *avals = n_out ? kir_alloc(t->prog, (size_t)n_out * sizeof *avals) : NULL;
  if (n_out && !avals) {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return t->status;
  }
  for (int i = 0; i < n_out; i++) avals[i] = ktr_aval_import(&result_avals[i]);
  p.host_callback.result_avals.v = avals;
  ktr_bind(t, op, KIR_PRIM_HOST_CALLBACK, &p, n_in, in, n_out, out);
  return t->status;
}
