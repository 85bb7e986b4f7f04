/* Shardings: which block of a global array each device holds. */
#include <stdio.h>
#include <stdlib.h>
#include "dist/dist.h"

static kiln_status sharding_alloc(const char *what, kiln_sharding **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", what);
  *out = calloc(1, sizeof **out);
  return *out ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
}

kiln_status kiln_sharding_named(kiln_mesh *mesh, const kiln_pspec *spec, kiln_sharding **out) {
  if (out) *out = NULL;
  if (!mesh || !spec) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_named: null argument");
  char text[512];
  int used[KILN_MESH_MAX_AXES] = {0};
  kiln_sharding tmp = {.kind = KDIST_NAMED, .mesh = mesh, .spec = *spec};
  for (int d = 0; d < spec->rank; d++)
    for (int k = 0; k < spec->dims[d].naxes; k++) {
      const char *name = spec->dims[d].axes[k];
      int a = kiln_mesh_axis_index(mesh, name);
      if (a < 0)
        return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_named: %s names axis '%s' the mesh lacks",
                          kiln_pspec_format(spec, text, sizeof text), name);
      if (used[a])
        return kcore_fail(KILN_ERR_ARGUMENT,
                          "kiln_sharding_named: %s uses mesh axis '%s' more than once",
                          kiln_pspec_format(spec, text, sizeof text), name);
      used[a] = 1;
      tmp.axis_of[d][k] = a;
    }
  kiln_status st = sharding_alloc("kiln_sharding_named", out);
  if (!st) **out = tmp, kdist_mesh_retain(mesh);
  return st;
}

kiln_status kiln_sharding_replicated(kiln_mesh *mesh, kiln_sharding **out) {
  if (out) *out = NULL;
  if (!mesh) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_replicated: mesh is null");
  kiln_status st = sharding_alloc("kiln_sharding_replicated", out);
  if (!st) (*out)->kind = KDIST_NAMED, (*out)->mesh = mesh, kdist_mesh_retain(mesh);
  return st;
}

kiln_status kiln_sharding_single(kiln_device *device, kiln_sharding **out) {
  if (out) *out = NULL;
  if (!device) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_single: device is null");
  kiln_status st = sharding_alloc("kiln_sharding_single", out);
  if (!st) (*out)->kind = KDIST_SINGLE, (*out)->device = device;
  if (!st) kdist_jit_install(kiln_device_ctx(device)); /* it may reach jit's in_shardings */
  return st;
}

void kiln_sharding_free(kiln_sharding *s) {
  if (!s) return;
  if (s->kind == KDIST_NAMED) kiln_mesh_free(s->mesh);
  free(s);
}

kiln_status kiln_sharding_copy(const kiln_sharding *s, kiln_sharding **out) {
  if (out) *out = NULL;
  if (!s) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_copy: sharding is null");
  kiln_status st = sharding_alloc("kiln_sharding_copy", out);
  if (st) return st;
  **out = *s;
  if (s->kind == KDIST_NAMED) kdist_mesh_retain(s->mesh);
  return KILN_OK;
}

/* The spec without its trailing Nones: P('x', None) lays out as P('x'). */
static int spec_rank(const kiln_sharding *s) {
  int r = s->spec.rank;
  while (r > 0 && s->spec.dims[r - 1].naxes == 0) r--;
  return r;
}

int kiln_sharding_equal(const kiln_sharding *a, const kiln_sharding *b) {
  if (!a || !b) return a == b;
  if (a->kind != b->kind) return 0;
  if (a->kind == KDIST_SINGLE) return a->device == b->device;
  const kiln_mesh *m = a->mesh, *n = b->mesh;
  if (m != n) {
    if (m->ndim != n->ndim || m->ndevices != n->ndevices) return 0;
    for (int i = 0; i < m->ndim; i++)
      if (m->shape[i] != n->shape[i] || strcmp(m->names[i], n->names[i])) return 0;
    for (int64_t i = 0; i < m->ndevices; i++)
      if (m->devices[i] != n->devices[i]) return 0;
  }
  int r = spec_rank(a);
  if (r != spec_rank(b)) return 0;
  for (int d = 0; d < r; d++) {
    if (a->spec.dims[d].naxes != b->spec.dims[d].naxes) return 0;
    for (int k = 0; k < a->spec.dims[d].naxes; k++)
      if (strcmp(a->spec.dims[d].axes[k], b->spec.dims[d].axes[k])) return 0;
  }
  return 1;
}

int64_t kiln_sharding_device_count(const kiln_sharding *s) {
  if (!s) return 0;
  return s->kind == KDIST_SINGLE ? 1 : s->mesh->ndevices;
}

kiln_device *kiln_sharding_device(const kiln_sharding *s, int64_t i) {
  if (i < 0 || i >= kiln_sharding_device_count(s)) {
    if (!s)
      kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_device: the sharding is NULL");
    else
      kcore_fail(KILN_ERR_OUT_OF_RANGE, "kiln_sharding_device: device %lld is out of range (the "
                 "sharding has %lld)", (long long)i, (long long)kiln_sharding_device_count(s));
    return NULL;
  }
  return s->kind == KDIST_SINGLE ? s->device : s->mesh->devices[i];
}

/* The number of blocks dimension d is split into. */
static int64_t split_of(const kiln_sharding *s, int d) {
  int64_t p = 1;
  for (int k = 0; s->kind == KDIST_NAMED && d < s->spec.rank && k < s->spec.dims[d].naxes; k++)
    p *= s->mesh->shape[s->axis_of[d][k]];
  return p;
}

kiln_status kiln_sharding_shard_shape(const kiln_sharding *s, int rank, const int64_t *global,
                                      int64_t *shard) {
  if (!s || (rank > 0 && (!global || !shard)))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_shard_shape: null argument");
  char text[512];
  if (rank < 0 || rank > KILN_SPEC_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "kiln_sharding_shard_shape: rank %d is outside [0, %d]", rank,
                      KILN_SPEC_MAX_RANK);
  if (s->kind == KDIST_NAMED && s->spec.rank > rank)
    return kcore_fail(KILN_ERR_SHAPE,
                      "kiln_sharding_shard_shape: %s has %d entries but the array has rank %d",
                      kiln_pspec_format(&s->spec, text, sizeof text), s->spec.rank, rank);
  for (int d = 0; d < rank; d++) {
    if (global[d] < 0)
      return kcore_fail(KILN_ERR_SHAPE, "kiln_sharding_shard_shape: dimension %d has size %lld", d,
                        (long long)global[d]);
    int64_t p = split_of(s, d);
    if (global[d] % p) {
      char axes[KILN_MESH_MAX_AXES * (KDIST_NAME_MAX + 4)] = "";
      for (int k = 0; k < s->spec.dims[d].naxes; k++)
        snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s'%s'", k ? ", " : "",
                 s->spec.dims[d].axes[k]);
      return kcore_fail(KILN_ERR_SHAPE,
                        "kiln_sharding_shard_shape: dimension %d of size %lld does not divide evenly "
                        "over mesh axis %s (%lld devices) of %s",
                        d, (long long)global[d], axes, (long long)p,
                        kiln_pspec_format(&s->spec, text, sizeof text));
    }
    shard[d] = global[d] / p;
  }
  return KILN_OK;
}

kiln_status kiln_sharding_device_indices(const kiln_sharding *s, int64_t i, int rank,
                                         const int64_t *global, int64_t *start, int64_t *stop) {
  int64_t shard[KILN_SPEC_MAX_RANK];
  if (rank > 0 && (!start || !stop))
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_sharding_device_indices: null argument");
  kiln_status st = kiln_sharding_shard_shape(s, rank, global, shard);
  if (st) return st;
  if (i < 0 || i >= kiln_sharding_device_count(s))
    return kcore_fail(KILN_ERR_OUT_OF_RANGE,
                      "kiln_sharding_device_indices: device %lld is outside [0, %lld)", (long long)i,
                      (long long)kiln_sharding_device_count(s));
  int64_t coords[KILN_MESH_MAX_AXES] = {0};
  for (int a = s->kind == KDIST_NAMED ? s->mesh->ndim - 1 : -1, r = (int)i; a >= 0; a--) {
    coords[a] = r % s->mesh->shape[a];
    r /= (int)s->mesh->shape[a];
  }
  for (int d = 0; d < rank; d++) {
    int64_t block = 0; /* mixed radix over the entry's axes, the first major */
    for (int k = 0; s->kind == KDIST_NAMED && d < s->spec.rank && k < s->spec.dims[d].naxes; k++) {
      int a = s->axis_of[d][k];
      block = block * s->mesh->shape[a] + coords[a];
    }
    start[d] = block * shard[d];
    stop[d] = start[d] + shard[d];
  }
  return KILN_OK;
}
