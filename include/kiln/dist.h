/* Meshes of devices, partition specs and shardings (JAX's jax.sharding). */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/device.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MESH_MAX_AXES 8 /* mesh dimensions */
#define KILN_SPEC_MAX_RANK 16 /* entries of a partition spec */

typedef struct kiln_mesh kiln_mesh;
typedef struct kiln_pspec kiln_pspec;
typedef struct kiln_sharding kiln_sharding;

/* A mesh of ndim axes with the given sizes and (non-empty, distinct) names.
 * devices lists prod(shape) distinct devices of ctx in row-major mesh order;
 * NULL takes the context's devices in order (their count must match). */
kiln_status kiln_mesh_new(kiln_ctx *ctx, int ndim, const int64_t *shape, const char *const *names,
                          kiln_device *const *devices, kiln_mesh **out);
void kiln_mesh_free(kiln_mesh *mesh);
int kiln_mesh_ndim(const kiln_mesh *mesh);
int64_t kiln_mesh_axis_size(const kiln_mesh *mesh, int axis); /* -1 if out of range */
const char *kiln_mesh_axis_name(const kiln_mesh *mesh, int axis); /* NULL if out of range */
/* The axis called name, or -1. */
int kiln_mesh_axis_index(const kiln_mesh *mesh, const char *name);
int64_t kiln_mesh_device_count(const kiln_mesh *mesh);
/* The device at mesh coordinates coords[ndim]; KILN_ERR_OUT_OF_RANGE names
 * the coordinate that is outside its axis. */
kiln_status kiln_mesh_device_at(const kiln_mesh *mesh, const int64_t *coords, kiln_device **out);

/* Partition specs as JAX writes them: one entry per array dimension, each
 * None (replicated) or one or more mesh axis names (split over their
 * product, the first axis major). "data, None", "(data, model)", "" = P(). */
kiln_status kiln_pspec_parse(const char *text, kiln_pspec **out);
/* An empty spec P(), to which entries are appended. */
kiln_status kiln_pspec_new(kiln_pspec **out);
kiln_status kiln_pspec_append_none(kiln_pspec *spec);
/* Appends an entry splitting over naxes axes (naxes 0 appends None). */
kiln_status kiln_pspec_append(kiln_pspec *spec, int naxes, const char *const *axes);
void kiln_pspec_free(kiln_pspec *spec);
int kiln_pspec_rank(const kiln_pspec *spec);
int kiln_pspec_entry_axes(const kiln_pspec *spec, int dim); /* 0 for None, -1 if out of range */
const char *kiln_pspec_entry_axis(const kiln_pspec *spec, int dim, int k);
/* Writes JAX's spelling, e.g. "PartitionSpec('data', None)"; returns buf. */
char *kiln_pspec_format(const kiln_pspec *spec, char *buf, size_t cap);

/* A named sharding keeps a copy of spec and borrows mesh (which must outlive
 * it). An axis used twice in spec, or a name the mesh lacks, is an error. */
kiln_status kiln_sharding_named(kiln_mesh *mesh, const kiln_pspec *spec, kiln_sharding **out);
kiln_status kiln_sharding_replicated(kiln_mesh *mesh, kiln_sharding **out);
kiln_status kiln_sharding_single(kiln_device *device, kiln_sharding **out);
void kiln_sharding_free(kiln_sharding *s);
/* The devices holding shards, in mesh order (one for a single-device one). */
int64_t kiln_sharding_device_count(const kiln_sharding *s);
kiln_device *kiln_sharding_device(const kiln_sharding *s, int64_t i);
/* Every shard's shape for a global shape. The spec's rank must not exceed
 * rank; a dimension that its axes do not divide evenly is KILN_ERR_SHAPE
 * naming the dimension, its size and the axes. */
kiln_status kiln_sharding_shard_shape(const kiln_sharding *s, int rank, const int64_t *global,
                                      int64_t *shard);
/* The block of the global array that device i (as kiln_sharding_device)
 * holds: [start[d], stop[d]) per dimension. */
kiln_status kiln_sharding_device_indices(const kiln_sharding *s, int64_t i, int rank,
                                         const int64_t *global, int64_t *start, int64_t *stop);
/* Draws which device holds which block of a 1-D or 2-D global array, as
 * jax.debug.visualize_array_sharding does, in plain characters. The text is
 * malloc'd; the caller frees it. */
kiln_status kiln_visualize_sharding(const kiln_sharding *s, int rank, const int64_t *global,
                                    char **text);

#ifdef __cplusplus
}
#endif
#endif
