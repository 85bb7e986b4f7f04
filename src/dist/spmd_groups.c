/* The collective groups of a CPU shard_map call: for every set of mesh axes
 * its body's collectives span (nested control flow included), each
 * device's group and rank along them, and the backend's mesh the call's
 * collectives run on (its threaded collectives, kdev_coll_ops). The mesh
 * lives with the call's frame: a failure breaks it, and the next call
 * builds a new frame. */
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"

kdist_coll_groups *kdist_groups_find(kdist_spmd_run *r, int na, const int *ax) {
  for (int i = 0; i < r->n_sets; i++)
    if (r->sets[i].na == na && !memcmp(r->sets[i].ax, ax, (size_t)na * sizeof *ax)) return &r->sets[i];
  return NULL;
}

static kiln_status add_set(kdist_spmd_run *r, int na, const int *ax) {
  if (kdist_groups_find(r, na, ax)) return KILN_OK;
  kdist_coll_groups *grown = realloc(r->sets, (size_t)(r->n_sets + 1) * sizeof *grown);
  if (!grown) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  r->sets = grown;
  kiln_status st = kdist_coll_groups_new(&r->m, na, ax, &r->sets[r->n_sets]);
  if (!st) r->n_sets++;
  return st;
}

typedef struct scan_state {
  kdist_spmd_run *r;
  kiln_status st;
} scan_state;

static void scan_program(kir_program *p, void *user) {
  scan_state *s = user;
  for (int i = 0; i < p->n_eqns && !s->st; i++) {
    const kir_eqn *e = &p->eqns[i];
    int na, ax[KIR_MESH_MAX_AXES];
    if (kir_collective_axes(e, NULL) && e->prim != KIR_PRIM_AXIS_INDEX) {
      s->st = kdist_coll_axes(&s->r->m, e, &na, ax);
      if (!s->st) s->st = add_set(s->r, na, ax);
    }
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, scan_program, user);
  }
}

kiln_status kdist_groups_build(kdist_spmd_run *r, kdev_backend *be, const kir_program *body) {
  scan_state scan = {r, KILN_OK};
  scan_program((kir_program *)body, &scan);
  if (scan.st || !r->n_sets) return scan.st;
  if (!r->coll || !r->coll->run_part)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "shard_map: the body's collectives over '%s' need a "
                      "backend that runs them on each device's thread, and %s has none",
                      r->sets[0].axes, be ? kiln_backend_name(be->kind) : "this context");
  return r->coll->mesh_new(be, (int)r->n, r->timeout_s, &r->mesh);
}

void kdist_groups_free(kdist_spmd_run *r) {
  if (r->mesh) r->coll->mesh_free(r->mesh);
  r->mesh = NULL;
  for (int i = 0; i < r->n_sets; i++) kdist_coll_groups_free(&r->sets[i]);
  free(r->sets);
  r->sets = NULL, r->n_sets = 0;
}
