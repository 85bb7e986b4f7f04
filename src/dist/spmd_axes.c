/* What the SPMD runners read off a collective: the mesh axes it spans. (How
 * long its members wait for each other is the context's
 * kiln_options.collective_timeout_s.) */
#include "dist/dist.h"

kiln_status kdist_coll_axes(const kir_mesh *m, const kir_eqn *e, int *na, int *ax) {
  kiln_status st = kir_axes_parse(kir_prim_name(e->prim), kir_collective_axes(e, NULL), m, na, ax);
  for (int i = 1; !st && e->prim == KIR_PRIM_PPERMUTE && i < *na; i++)
    for (int k = i; k > 0 && ax[k - 1] > ax[k]; k--) {
      int t = ax[k];
      ax[k] = ax[k - 1], ax[k - 1] = t;
    }
  return st;
}
