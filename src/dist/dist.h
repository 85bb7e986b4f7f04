/* dist: meshes, partition specs and shardings. The only door of src/dist;
 * prefix kdist_. Built on the public device API only. */
#ifndef KILN_SRC_DIST_H
#define KILN_SRC_DIST_H

#include "core/core.h"
#include "device/device.h"
#include "kiln/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDIST_NAME_MAX 64

struct kiln_mesh {
  _Atomic int refs; /* the creator's, and one per sharding over it */
  kiln_ctx *ctx;
  int ndim;
  int64_t shape[KILN_MESH_MAX_AXES];
  char names[KILN_MESH_MAX_AXES][KDIST_NAME_MAX];
  int64_t ndevices;
  kiln_device **devices; /* row-major over shape */
};

typedef struct kdist_entry {
  int naxes; /* 0: None */
  char axes[KILN_MESH_MAX_AXES][KDIST_NAME_MAX];
} kdist_entry;

struct kiln_pspec {
  int rank;
  kdist_entry dims[KILN_SPEC_MAX_RANK];
};

typedef enum kdist_kind { KDIST_NAMED, KDIST_SINGLE } kdist_kind;

struct kiln_sharding {
  kdist_kind kind;
  kiln_mesh *mesh;     /* NAMED */
  kiln_pspec spec;     /* NAMED; P() when replicated */
  int axis_of[KILN_SPEC_MAX_RANK][KILN_MESH_MAX_AXES]; /* mesh axis per spec name */
  kiln_device *device; /* SINGLE */
};

/* Another reference to mesh (kiln_mesh_free drops one). */
void kdist_mesh_retain(kiln_mesh *mesh);
/* The sharding an array carries: borrowed from the array, NULL for an
 * ordinary single-device array. */
const kiln_sharding *kdist_array_sharding(const kiln_array *a);

/* Where a sharding puts each block of a global array of one shape. */
typedef struct kdist_layout {
  int64_t count; /* devices of the sharding */
  int rank;
  int64_t shard_shape[KILN_MAX_RANK];
  kdev_block *blocks; /* per device, in kiln_sharding_device order */
} kdist_layout;
/* Fails (KILN_ERR_SHAPE naming the dimension) where the shape does not
 * divide; the message starts with op. */
kiln_status kdist_layout_new(const char *op, const kiln_sharding *s, int rank,
                             const int64_t *shape, kdist_layout *out);
void kdist_layout_free(kdist_layout *l);
/* A sharded array of the layout's blocks (taking references to shards),
 * carrying a copy of s. */
kiln_status kdist_wrap_shards(const char *op, const kiln_sharding *s, const kdist_layout *l,
                              kiln_dtype dtype, const int64_t *shape, kiln_array *const *shards,
                              kiln_array **out);

/* Copies a name checked for length and emptiness; `what` names the caller. */
kiln_status kdist_copy_name(const char *what, const char *name, char dst[KDIST_NAME_MAX]);

#ifdef __cplusplus
}
#endif
#endif
