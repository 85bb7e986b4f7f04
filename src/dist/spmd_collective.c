/* The one mapping from a collective equation of a shard_map body to the
 * backend interface's collective (kdev_coll), for both ways a backend runs
 * them: threaded, each device's part on its own thread (CPU devices,
 * spmd_run.c), and lockstep, one thread for every device (CUDA,
 * spmd_lockstep.c). It says which mesh axes the collective spans, each
 * device's group and rank along them, the collective's kind, reduction and
 * pairs, and the layout moves around the backend's rank-major exchange.
 * (How long members wait for each other is the context's
 * kiln_options.collective_timeout_s.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int kdist_coll_rank(const kir_mesh *m, const int64_t *coord, int na, const int *ax, int *color) {
  int64_t g = 0, r = 0;
  bool in_set[KIR_MESH_MAX_AXES] = {false};
  for (int k = 0; k < na; k++) in_set[ax[k]] = true, r = r * m->size[ax[k]] + coord[ax[k]];
  for (int a = 0; a < m->ndim; a++)
    if (!in_set[a]) g = g * m->size[a] + coord[a];
  if (color) *color = (int)g;
  return (int)r;
}

kiln_status kdist_coll_groups_new(const kir_mesh *m, int na, const int *ax, kdist_coll_groups *g) {
  memset(g, 0, sizeof *g);
  g->na = na, g->size = 1;
  memcpy(g->ax, ax, (size_t)na * sizeof *ax);
  for (int k = 0; k < na; k++) {
    g->size *= m->size[ax[k]];
    size_t len = strlen(g->axes);
    snprintf(g->axes + len, sizeof g->axes - len, "%s%s", k ? "," : "", m->name[ax[k]]);
  }
  g->n_groups = m->n_devices / g->size;
  g->color = malloc((size_t)m->n_devices * sizeof *g->color);
  g->rank = malloc((size_t)m->n_devices * sizeof *g->rank);
  if (!g->color || !g->rank) {
    kdist_coll_groups_free(g);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  }
  for (int64_t d = 0; d < m->n_devices; d++) {
    int64_t coord[KIR_MESH_MAX_AXES];
    kir_mesh_coords(m, d, coord);
    g->rank[d] = kdist_coll_rank(m, coord, na, ax, &g->color[d]);
  }
  return KILN_OK;
}

void kdist_coll_groups_free(kdist_coll_groups *g) {
  free(g->color), free(g->rank);
  g->color = g->rank = NULL;
}

static int64_t prod(const int64_t *v, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= v[i];
  return p;
}

kiln_status kdist_coll_describe(const kir_eqn *e, const kir_aval *a, const kir_aval *o,
                                const kdist_coll_groups *g, int (*pairs)[2], kdev_coll *c) {
  int64_t n = g->size;
  memset(c, 0, sizeof *c);
  c->name = kir_prim_name(e->prim);
  c->axes = g->axes, c->color = g->color, c->rank = g->rank;
  c->dtype = a->dtype;
  c->count = kir_aval_size(a);
  c->in_outer = c->out_outer = 1;
  switch (e->prim) {
    case KIR_PRIM_PSUM:
    case KIR_PRIM_PMAX:
    case KIR_PRIM_PMIN:
      c->kind = KDEV_COLL_ALL_REDUCE;
      c->reduce = e->prim == KIR_PRIM_PSUM ? 0 : e->prim == KIR_PRIM_PMAX ? 1 : 2;
      return KILN_OK;
    case KIR_PRIM_ALL_GATHER: {
      int dim = (int)e->params.all_gather.all_gather_dimension;
      c->kind = KDEV_COLL_ALL_GATHER;
      c->out_outer = prod(a->shape, 0, dim), c->out_block = prod(a->shape, dim, a->rank);
      return KILN_OK;
    }
    case KIR_PRIM_PSUM_SCATTER: {
      int dim = (int)e->params.psum_scatter.scatter_dimension;
      c->kind = KDEV_COLL_REDUCE_SCATTER;
      c->in_outer = prod(a->shape, 0, dim);
      c->in_block = a->shape[dim] / n * prod(a->shape, dim + 1, a->rank);
      return KILN_OK;
    }
    case KIR_PRIM_PPERMUTE:
      c->kind = KDEV_COLL_PPERMUTE;
      c->pairs = (const int(*)[2])pairs;
      return kir_perm_parse(e->params.ppermute.perm, n, &c->npairs, pairs);
    case KIR_PRIM_ALL_TO_ALL: {
      const kir_p_all_to_all *p = &e->params.all_to_all;
      int sa = (int)p->split_axis, ca = (int)p->concat_axis;
      c->kind = KDEV_COLL_ALL_TO_ALL;
      c->in_outer = prod(a->shape, 0, sa);
      c->in_block = a->shape[sa] / n * prod(a->shape, sa + 1, a->rank);
      /* Received blocks are chunks of the operand split along split_axis;
       * they line up along concat_axis (tiled) or stack on a new one. */
      c->out_outer = prod(o->shape, 0, ca);
      c->out_block = p->tiled ? o->shape[ca] / n * prod(o->shape, ca + 1, o->rank)
                              : prod(o->shape, ca + 1, o->rank);
      return KILN_OK;
    }
    default:
      return kcore_fail(KILN_ERR_INTERNAL, "%s: not a collective the backends run",
                        kir_prim_name(e->prim));
  }
}
