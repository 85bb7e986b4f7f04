/* dist: meshes, partition specs and shardings. The only door of src/dist;
 * prefix kdist_. Built on the public device API only. */
#ifndef KILN_SRC_DIST_H
#define KILN_SRC_DIST_H

#include "core/core.h"
#include "kiln/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDIST_NAME_MAX 64

struct kiln_mesh {
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

/* Makes the context's jitted programs run shard_map on one thread per
 * device of its mesh, the body compiled once per device and the collectives
 * through the CPU rendezvous (spmd_run.c); idempotent. */
kiln_status kdist_spmd_install(kiln_ctx *ctx);

/* Copies a name checked for length and emptiness; `what` names the caller. */
kiln_status kdist_copy_name(const char *what, const char *name, char dst[KDIST_NAME_MAX]);

#ifdef __cplusplus
}
#endif
#endif
