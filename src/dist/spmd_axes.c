/* What the SPMD runners read off a collective: the mesh axes it spans and
 * how long its members wait for each other. */
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
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

double kdist_collective_timeout(void) {
  const char *v = getenv("KILN_COLLECTIVE_TIMEOUT");
  char *end;
  double x = v && *v ? strtod(v, &end) : 0;
  return v && *v && !*end && x > 0 ? x : KCPU_COLL_DEFAULT_TIMEOUT_S;
}
