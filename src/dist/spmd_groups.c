/* The CPU rendezvous groups of a shard_map call: for every set of mesh axes
 * its body's collectives span, one kcpu_coll_group per group of devices
 * along them, each member named by its device index (messages name the
 * devices, from the side of those that waited). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "dist/dist.h"

kdist_axis_groups *kdist_groups_find(kdist_spmd_run *r, int na, const int *ax) {
  for (int i = 0; i < r->n_sets; i++)
    if (r->sets[i].na == na && !memcmp(r->sets[i].ax, ax, (size_t)na * sizeof *ax)) return &r->sets[i];
  return NULL;
}

static kiln_status add_set(kdist_spmd_run *r, int na, const int *ax) {
  if (kdist_groups_find(r, na, ax)) return KILN_OK;
  kdist_axis_groups *grown = realloc(r->sets, (size_t)(r->n_sets + 1) * sizeof *grown);
  if (!grown) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  r->sets = grown;
  kdist_axis_groups *s = &r->sets[r->n_sets];
  memset(s, 0, sizeof *s);
  s->na = na, s->size = 1;
  memcpy(s->ax, ax, (size_t)na * sizeof *ax);
  for (int k = 0; k < na; k++) {
    s->size *= r->m.size[ax[k]];
    size_t len = strlen(s->axes);
    snprintf(s->axes + len, sizeof s->axes - len, "%s%s", k ? "," : "", r->m.name[ax[k]]);
  }
  s->n_groups = r->n / s->size;
  if (!(s->g = calloc((size_t)s->n_groups, sizeof *s->g)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  r->n_sets++;
  for (int64_t i = 0; i < s->n_groups; i++) {
    kiln_status st = kcpu_coll_group_new((int)s->size, s->axes, r->timeout_s, &s->g[i]);
    if (st) return st;
  }
  return KILN_OK;
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

/* The group along a set of the device at coord, and its rank in it. */
static int64_t group_index(const kdist_spmd_run *run, const kdist_axis_groups *s, const int64_t *coord,
                           int *rank) {
  int64_t gi = 0, r = 0;
  bool in_set[KIR_MESH_MAX_AXES] = {false};
  for (int k = 0; k < s->na; k++) in_set[s->ax[k]] = true, r = r * run->m.size[s->ax[k]] + coord[s->ax[k]];
  for (int a = 0; a < run->m.ndim; a++)
    if (!in_set[a]) gi = gi * run->m.size[a] + coord[a];
  *rank = (int)r;
  return gi;
}

kcpu_coll_group *kdist_group_of(const kdist_spmd_run *r, const kdist_axis_groups *s,
                                const int64_t *coord, int *rank) {
  return s->g[group_index(r, s, coord, rank)];
}

/* Has every group name its members by their device index (messages). */
static kiln_status name_groups(kdist_spmd_run *r) {
  int64_t *ids = malloc((size_t)r->n * sizeof *ids), coord[KIR_MESH_MAX_AXES];
  kiln_status st = ids ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int i = 0; !st && i < r->n_sets; i++) {
    kdist_axis_groups *s = &r->sets[i];
    for (int64_t d = 0; d < r->n; d++) {
      int rank;
      kir_mesh_coords(&r->m, d, coord);
      int64_t gi = group_index(r, s, coord, &rank);
      ids[gi * s->size + rank] = d;
    }
    for (int64_t g = 0; !st && g < s->n_groups; g++) st = kcpu_coll_group_name(s->g[g], ids + g * s->size);
  }
  free(ids);
  return st;
}

kiln_status kdist_groups_build(kdist_spmd_run *r, const kir_program *body) {
  scan_state scan = {r, KILN_OK};
  scan_program((kir_program *)body, &scan);
  return scan.st ? scan.st : name_groups(r);
}

void kdist_groups_free(kdist_spmd_run *r) {
  for (int i = 0; i < r->n_sets; i++) {
    for (int64_t k = 0; r->sets[i].g && k < r->sets[i].n_groups; k++)
      kcpu_coll_group_free(r->sets[i].g[k]);
    free(r->sets[i].g);
  }
  free(r->sets);
}
