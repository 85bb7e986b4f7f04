/* Meshes of devices, partition specs and shardings (JAX's jax.sharding). */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/array.h"
#include "kiln/device.h"
#include "kiln/status.h"
#include "kiln/tree.h"
#include "kiln/trace.h"

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

/* A named sharding keeps a copy of spec and a reference to mesh (the mesh
 * lives until its last sharding, and every array laid out by one, is
 * freed; kiln_mesh_free drops the caller's reference). An axis used twice
 * in spec, or a name the mesh lacks, is an error. */
kiln_status kiln_sharding_named(kiln_mesh *mesh, const kiln_pspec *spec, kiln_sharding **out);
kiln_status kiln_sharding_replicated(kiln_mesh *mesh, kiln_sharding **out);
kiln_status kiln_sharding_single(kiln_device *device, kiln_sharding **out);
void kiln_sharding_free(kiln_sharding *s);
kiln_status kiln_sharding_copy(const kiln_sharding *s, kiln_sharding **out);
/* 1 when both lay arrays out alike: the same kind, the same devices on the
 * same mesh axes, the same spec ignoring trailing Nones (JAX's ==). */
int kiln_sharding_equal(const kiln_sharding *a, const kiln_sharding *b);
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

/* ---- sharded arrays (see kiln/array.h for reading their shards) ----
 * As jax.device_put(x, sharding): each device of the sharding gets the
 * block of the global array that kiln_sharding_device_indices gives it (a
 * replica where the spec leaves mesh axes unused). A single-device sharding
 * gives an ordinary array; a named one a sharded array, even over one
 * device. Copies are asynchronous (each buffer carries its completion
 * event) and ordered with later work on the same buffers. */

/* Splits host data (row-major, nbytes = the global shape's bytes) into the
 * sharding's shards. data may be reused when this returns. */
kiln_status kiln_device_put_host(const kiln_sharding *s, kiln_dtype dtype, int rank,
                                 const int64_t *shape, const void *data, size_t nbytes,
                                 kiln_array **out);
/* Moves or reshards a device array (ordinary or sharded) to s: a new
 * reference to a itself when it is already laid out as s, else new buffers
 * filled device to device (on CUDA through the driver's peer copies, or
 * through pinned host staging where a block would take many small copies). */
kiln_status kiln_device_put_sharded(kiln_array *a, const kiln_sharding *s, kiln_array **out);
/* A sharded array laid out as s from one ordinary array per device of s (in
 * kiln_sharding_device order), each on that device with the shard's shape
 * and the given dtype (jax.make_array_from_single_device_arrays). Takes new
 * references to the shards. */
kiln_status kiln_array_from_shards(const kiln_sharding *s, kiln_dtype dtype, int rank,
                                   const int64_t *shape, kiln_array *const *shards,
                                   kiln_array **out);
/* The array's sharding as a new object the caller frees: a copy of a
 * sharded array's, or the single-device sharding of an ordinary array. */
kiln_status kiln_array_sharding(const kiln_array *a, kiln_sharding **out);

/* kiln_visualize_sharding for an array's own layout (an ordinary array is
 * one block on its device). */
kiln_status kiln_visualize_array_sharding(const kiln_array *a, char **text);

/* ---- flax.jax_utils equivalents ---- */
/* flax.jax_utils.replicate: every array leaf x of tree becomes an array of
 * shape [n, *x.shape] split along axis 0 over the n devices (NULL: the
 * context's, in order), device i holding copy i: the layout pmap maps over.
 * The copies go device to device. A leaf that is not an array is
 * KILN_ERR_TREE naming its key path. */
kiln_status kiln_replicate(kiln_ctx *ctx, const kiln_tree *tree, int ndevices,
                           kiln_device *const *devices, kiln_tree **out);
/* flax.jax_utils.unreplicate: each leaf's first device's copy, as a new
 * ordinary array on that device (copied there, the others never leave their
 * devices): x[0] of a replicated or ordinary array, the first shard of a
 * fully replicated one; a scalar stays as it is. */
kiln_status kiln_unreplicate(const kiln_tree *tree, kiln_tree **out);

/* A function over concrete arrays, called eagerly (not traced): a jitted
 * program, a pmap or shard_map called at top level. On success *out is a
 * new tree the caller frees. */
typedef kiln_status (*kiln_apply_fn)(void *user, const kiln_tree *args, kiln_tree **out);
/* Adapts a kiln_jit (user) to kiln_apply_fn: kiln_jit_call. */
kiln_status kiln_apply_jit(void *jit, const kiln_tree *args, kiln_tree **out);

typedef struct kiln_pad_shard_unpad_options {
  /* Arguments forwarded as they are, not padded: positions when the call's
   * arguments are a tuple or list, names when they are a dict (keywords). */
  const int *static_argnums; /* default {0}: params first, as flax */
  int num_static_argnums;
  const char *const *static_argnames;
  int num_static_argnames;
  int static_return;        /* return the wrapped function's result as it is */
  int64_t min_device_batch; /* pad to at least this many rows per device; 0: unset */
  int ndevices;             /* the devices to shard over; NULL: all of the context's */
  kiln_device *const *devices;
} kiln_pad_shard_unpad_options;
void kiln_pad_shard_unpad_options_init(kiln_pad_shard_unpad_options *o);

/* flax.jax_utils.pad_shard_unpad. kiln_padded_call(p, args, &out): every
 * leaf of every non-static argument must be an array with a leading batch
 * axis, all of one length b (else KILN_ERR_SHAPE naming both key paths; a
 * leaf that is not an array is KILN_ERR_TREE naming its key path; no such
 * leaf at all is KILN_ERR_ARGUMENT). Each is padded with zero rows on the
 * host to [d * r, ...], r = max(ceil(b / d), min_device_batch) for d
 * devices, and put on the devices as [d, r, ...] split along axis 0 (the
 * layout of kiln_replicate and pmap); an empty batch gives r = 0 or
 * min_device_batch. f gets the arguments with these in place. Unless
 * static_return, every output leaf, [d, r, ...], comes back to the host,
 * is cut to its first b rows of d * r and becomes an ordinary array [b,
 * ...] on the first device. The wrapper is eager: the padding happens on
 * concrete values, which a traced kiln_func never holds. */
typedef struct kiln_padded kiln_padded;
kiln_status kiln_pad_shard_unpad(kiln_ctx *ctx, kiln_apply_fn f, void *user,
                                 const kiln_pad_shard_unpad_options *opts, kiln_padded **out);
kiln_status kiln_padded_call(kiln_padded *p, const kiln_tree *args, kiln_tree **out);
void kiln_padded_free(kiln_padded *p);
/* ---- shard_map and pmap ---- */
/* jax.shard_map: a function that runs f once per device of mesh, on that
 * device's shard of every argument. in_specs / out_specs are pytrees whose
 * leaves are kiln_pspec pointers (KILN_LEAF_PTR; copied), matched as
 * prefixes of the argument tuple and of f's result tree. f is traced once
 * over the per-shard types with the mesh's axes bound for collectives. An
 * out spec that leaves an axis out asserts that the value is replicated
 * over it; with check_rep, one not provably so is a trace-time error naming
 * the axis. Values f captures are passed to every device whole. f and mesh
 * are borrowed and must outlive the result. Call it inside a trace or
 * through kiln_jit; a jitted argument laid out otherwise than its in_spec
 * (replicated, split another way, on one device) is moved, which the
 * jitted program's IR shows as `device_put[mesh=.. spec=..]`. jit of a
 * shard_map (or pmap) alone on CPU devices returns sharded arrays laid out
 * as the out_specs, for ordinary arguments too (as jax.jit does). On CPU devices each device of the mesh runs the body on
 * its own thread, the collectives moving data between them; the reference
 * executor (KILN_EXECUTOR=reference) evaluates the body for every device in
 * lockstep instead. On CUDA devices one thread enqueues every device's
 * work in lockstep, the collectives through NCCL (libnccl.so.2, or the
 * library KILN_NCCL_LIBRARY names; without one this fails with
 * KILN_ERR_COLLECTIVE naming NCCL). Collectives inside cond, while and
 * scan run there too, per branch taken or per iteration: every device of
 * the mesh must take the same branch and the same number of iterations
 * (else KILN_ERR_COLLECTIVE naming two devices that differ). Bodies with
 * effects, and collectives nested in other equations, are
 * KILN_ERR_UNIMPLEMENTED there.
 * Collectives give up after KILN_COLLECTIVE_TIMEOUT seconds (300) with
 * KILN_ERR_COLLECTIVE. The mesh's devices are taken to be the context's
 * first ones in order. */
kiln_status kiln_shard_map(const kiln_func *f, kiln_mesh *mesh, const kiln_tree *in_specs,
                           const kiln_tree *out_specs, int check_rep, kiln_func **out);

/* in_axes / out_axes entry for an argument or result that is not mapped. */
#define KILN_PMAP_NONE (-1000)
/* jax.pmap as shard_map over a one-axis mesh named axis_name (NULL: pmap's
 * axis_name=None, an anonymous axis no collective can name) over the
 * devices (NULL: all of ctx's): in_axes[i] (n_in_axes entries, one per
 * top-level argument; NULL: 0 for all) is the mapped axis of every leaf of
 * argument i, whose size must equal the device count; f sees each leaf with
 * that axis removed. Every result leaf gets the mapped axis back at
 * out_axes (>= 0), or is returned replicated (KILN_PMAP_NONE). f is
 * borrowed. */
kiln_status kiln_pmap(kiln_ctx *ctx, const kiln_func *f, const char *axis_name, int n_in_axes,
                      const int *in_axes, int out_axes, int n_devices,
                      kiln_device *const *devices, kiln_func **out);

/* ---- collectives inside shard_map / pmap bodies (jax.lax's) ----
 * `axes` names one mesh axis ("data") or several ("data,model" or
 * "(data, model)", the first major); each must be bound by an enclosing
 * shard_map or pmap, else the trace fails naming it and the bound axes. */
kiln_val *kiln_psum(kiln_trace *t, kiln_val *x, const char *axes); /* bool sums as int32 */
kiln_val *kiln_pmax(kiln_trace *t, kiln_val *x, const char *axes);
kiln_val *kiln_pmin(kiln_trace *t, kiln_val *x, const char *axes);
/* psum divided by the axis size (integers as jnp's true division: float32). */
kiln_val *kiln_pmean(kiln_trace *t, kiln_val *x, const char *axes);
/* Stacks every member's x along a new axis at `axis` (tiled: concatenates
 * along `axis`). */
kiln_val *kiln_all_gather(kiln_trace *t, kiln_val *x, const char *axes, int axis, int tiled);
/* Sums over the members and keeps this member's block of
 * scatter_dimension (tiled; untiled that dimension equals the axis size
 * and is removed). */
kiln_val *kiln_psum_scatter(kiln_trace *t, kiln_val *x, const char *axes, int scatter_dimension,
                            int tiled);
/* Sends x from perm[i][0] to perm[i][1] (positions along the axes); a
 * member that receives nothing gets zeros. */
kiln_val *kiln_ppermute(kiln_trace *t, kiln_val *x, const char *axes, int n_pairs,
                        const int (*perm)[2]);
/* Splits split_axis into one block per member, sends block j to member j
 * and concatenates the blocks received along concat_axis (tiled; untiled
 * split_axis equals the axis size, is removed, and the received blocks are
 * stacked on a new axis at concat_axis). */
kiln_val *kiln_all_to_all(kiln_trace *t, kiln_val *x, const char *axes, int split_axis,
                          int concat_axis, int tiled);
/* This member's int32 position along the axes. */
kiln_val *kiln_axis_index(kiln_trace *t, const char *axes);
/* The number of members along the axes (lax.axis_size), known at trace
 * time; -1 with the trace failed when an axis is not bound. */
int64_t kiln_axis_size(kiln_trace *t, const char *axes);
/* psum / pmean over every leaf of a tree of values (flax.jax_utils.pmean):
 * a new tree of the same structure. */
kiln_tree *kiln_psum_tree(kiln_trace *t, const kiln_tree *x, const char *axes);
kiln_tree *kiln_pmean_tree(kiln_trace *t, const kiln_tree *x, const char *axes);

#ifdef __cplusplus
}
#endif
#endif
