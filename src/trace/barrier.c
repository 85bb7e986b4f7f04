/* lax.optimization_barrier: the identity on a tuple of values, bound as one
 * equation so that nothing fuses or moves across it. */
#include "trace/trace.h"

kiln_status kiln_optimization_barrier(kiln_trace *t, int n, kiln_val *const *xs, kiln_val **outs) {
  static const char op[] = "kiln_optimization_barrier";
  if (!ktr_ok(t, op, 0, NULL)) return t ? t->status : KILN_ERR_ARGUMENT;
  if (n < 1 || !xs || !outs) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: needs n >= 1 values and an outs array (n=%d)", op, n);
    return t->status;
  }
  if (ktr_ok(t, op, n, xs)) ktr_bind(t, op, KIR_PRIM_OPTIMIZATION_BARRIER, NULL, n, xs, n, outs);
  return t->status;
}
