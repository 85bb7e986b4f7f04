/* kiln_mesh: devices arranged on named axes. */
#include <stdlib.h>
#include "dist/dist.h"

kiln_status kdist_copy_name(const char *what, const char *name, char dst[KDIST_NAME_MAX]) {
  if (!name || !name[0]) return kcore_fail(KILN_ERR_ARGUMENT, "%s: an axis name is empty", what);
  size_t n = strlen(name);
  if (n >= KDIST_NAME_MAX)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis name '%.20s...' is longer than %d characters", what,
                      name, KDIST_NAME_MAX - 1);
  memcpy(dst, name, n + 1);
  return KILN_OK;
}

static kiln_status mesh_check(kiln_ctx *ctx, int ndim, const int64_t *shape, const char *const *names,
                              int64_t *count) {
  if (!ctx || !shape || !names) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: null argument");
  if (ndim < 1 || ndim > KILN_MESH_MAX_AXES)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: ndim=%d is outside [1, %d]", ndim,
                      KILN_MESH_MAX_AXES);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 1 || shape[i] > (1 << 20))
      return kcore_fail(KILN_ERR_SHAPE, "kiln_mesh_new: axis %d has size %lld", i, (long long)shape[i]);
    n *= shape[i];
    if (n > (1 << 20)) return kcore_fail(KILN_ERR_SHAPE, "kiln_mesh_new: the mesh is too large");
    if (!names[i] || !names[i][0])
      return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: the name of axis %d is empty", i);
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0)
        return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: axes %d and %d are both named '%s'", j, i,
                          names[i]);
  }
  *count = n;
  return KILN_OK;
}

kiln_status kiln_mesh_new(kiln_ctx *ctx, int ndim, const int64_t *shape, const char *const *names,
                          kiln_device *const *devices, kiln_mesh **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: out is null");
  *out = NULL;
  int64_t n = 0;
  kiln_status st = mesh_check(ctx, ndim, shape, names, &n);
  if (st) return st;
  if (!devices && n != kiln_device_count(ctx))
    return kcore_fail(KILN_ERR_SHAPE,
                      "kiln_mesh_new: the mesh shape holds %lld devices but the context has %d",
                      (long long)n, kiln_device_count(ctx));
  kiln_mesh *m = calloc(1, sizeof *m);
  kiln_device **devs = calloc((size_t)n, sizeof *devs);
  if (!m || !devs) {
    free(m), free(devs);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_mesh_new: out of host memory");
  }
  atomic_init(&m->refs, 1);
  m->ctx = ctx, m->ndim = ndim, m->ndevices = n, m->devices = devs;
  for (int i = 0; i < ndim; i++) {
    m->shape[i] = shape[i];
    if ((st = kdist_copy_name("kiln_mesh_new", names[i], m->names[i]))) goto fail;
  }
  for (int64_t i = 0; i < n; i++) {
    if (!devices) {
      if ((st = kiln_device_get(ctx, (int)i, &devs[i]))) goto fail;
      continue;
    }
    devs[i] = devices[i];
    if (!devs[i]) {
      st = kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_new: device %lld is null", (long long)i);
      goto fail;
    }
    if (kiln_device_ctx(devs[i]) != ctx) {
      st = kcore_fail(KILN_ERR_WRONG_DEVICE, "kiln_mesh_new: device %lld belongs to another context",
                      (long long)i);
      goto fail;
    }
    for (int64_t j = 0; j < i; j++)
      if (devs[j] == devs[i]) {
        st = kcore_fail(KILN_ERR_ARGUMENT,
                        "kiln_mesh_new: device %d is listed twice (mesh positions %lld and %lld)",
                        kiln_device_index(devs[i]), (long long)j, (long long)i);
        goto fail;
      }
  }
  kdist_jit_install(ctx); /* arrays over the mesh may now reach jit */
  *out = m;
  return KILN_OK;
fail:
  kiln_mesh_free(m);
  return st;
}

void kdist_mesh_retain(kiln_mesh *mesh) {
  if (mesh) atomic_fetch_add(&mesh->refs, 1);
}

void kiln_mesh_free(kiln_mesh *mesh) {
  if (!mesh || atomic_fetch_sub(&mesh->refs, 1) != 1) return;
  free(mesh->devices);
  free(mesh);
}

int kiln_mesh_ndim(const kiln_mesh *mesh) { return mesh ? mesh->ndim : 0; }

int64_t kiln_mesh_axis_size(const kiln_mesh *mesh, int axis) {
  return mesh && axis >= 0 && axis < mesh->ndim ? mesh->shape[axis] : -1;
}

const char *kiln_mesh_axis_name(const kiln_mesh *mesh, int axis) {
  if (mesh && axis >= 0 && axis < mesh->ndim) return mesh->names[axis];
  if (!mesh)
    kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_axis_name: the mesh is NULL");
  else
    kcore_fail(KILN_ERR_OUT_OF_RANGE, "kiln_mesh_axis_name: axis %d is out of range (the mesh "
               "has %d axes)", axis, mesh->ndim);
  return NULL;
}

int kiln_mesh_axis_index(const kiln_mesh *mesh, const char *name) {
  if (!mesh || !name) return -1;
  for (int i = 0; i < mesh->ndim; i++)
    if (strcmp(mesh->names[i], name) == 0) return i;
  return -1;
}

int64_t kiln_mesh_device_count(const kiln_mesh *mesh) { return mesh ? mesh->ndevices : 0; }

kiln_status kiln_mesh_device_at(const kiln_mesh *mesh, const int64_t *coords, kiln_device **out) {
  if (!mesh || !coords || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_mesh_device_at: null argument");
  int64_t flat = 0;
  for (int i = 0; i < mesh->ndim; i++) {
    if (coords[i] < 0 || coords[i] >= mesh->shape[i])
      return kcore_fail(KILN_ERR_OUT_OF_RANGE,
                        "kiln_mesh_device_at: coordinate %lld of axis '%s' is outside [0, %lld)",
                        (long long)coords[i], mesh->names[i], (long long)mesh->shape[i]);
    flat = flat * mesh->shape[i] + coords[i];
  }
  *out = mesh->devices[flat];
  return KILN_OK;
}
