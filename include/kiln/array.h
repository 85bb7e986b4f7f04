/* Arrays: immutable, reference-counted, on one device. */
#ifndef KILN_ARRAY_H
#define KILN_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAX_RANK 8

typedef struct kiln_array kiln_array;

/* Copies `nbytes` of host data (C order) into a new array on `dev`. nbytes
 * must equal the shape's element count times the dtype's size; zero-size
 * dimensions are allowed (then data may be NULL). The copy may still be in
 * flight when this returns; `data` may be reused at once. */
kiln_status kiln_array_from_host(kiln_device *dev, kiln_dtype dtype, int rank,
                                 const int64_t *shape, const void *data, size_t nbytes,
                                 kiln_array **out);
/* Copies the array into `dst` (exactly kiln_array_nbytes bytes), waiting for
 * pending work first. */
kiln_status kiln_array_to_host(const kiln_array *a, void *dst, size_t nbytes);
kiln_status kiln_array_block_until_ready(const kiln_array *a);
/* A copy of `a` on `dev` (a new reference to `a` itself when it already lives
 * there), like jax.device_put(x, device). */
kiln_status kiln_device_put(kiln_array *a, kiln_device *dev, kiln_array **out);

/* The array as NumPy prints it (str(np.asarray(x)), print(x) in JAX), e.g.
 * "[[1.  2.5]\n [3.  4. ]]", with NumPy's defaults: lines of at most 75
 * characters, arrays of more than 1000 elements summarised with "..." and
 * 3 items at each edge, floats in the shortest digits that round-trip in
 * their type (at most 8 decimals), positional or, when the magnitudes ask
 * for it, scientific for the whole array; bool as " True"/"False", bf16 as
 * ml_dtypes prints it ("%g"). 0-d arrays print as NumPy scalars ("1.5").
 * Waits for pending work and copies the array to the host (a sharded one is
 * gathered). buf gets at most cap bytes, NUL-terminated (buf may be NULL
 * when cap is 0); *len (may be NULL) the full length. */
kiln_status kiln_array_format(const kiln_array *a, char *buf, size_t cap, size_t *len);
/* kiln_array_format and a newline to stream (NULL: stdout), as print(x). */
kiln_status kiln_array_print(const kiln_array *a, FILE *stream);

void kiln_array_retain(kiln_array *a);
void kiln_array_release(kiln_array *a); /* NULL is allowed */
/* Frees the array's buffer now; every later use is KILN_ERR_DELETED (the
 * handle stays valid until released). Donation deletes its inputs this way. */
kiln_status kiln_array_delete(kiln_array *a);
int kiln_array_is_deleted(const kiln_array *a);

kiln_dtype kiln_array_dtype(const kiln_array *a);
int kiln_array_rank(const kiln_array *a);
const int64_t *kiln_array_shape(const kiln_array *a);
int64_t kiln_array_size(const kiln_array *a);   /* element count */
size_t kiln_array_nbytes(const kiln_array *a);
kiln_device *kiln_array_device(const kiln_array *a);
/* Writes e.g. "f32[2,3]{cpu:0}" into buf (always NUL-terminated); a sharded
 * array lists its shards' devices: "f32[8,2]{sharded: cpu:0,cpu:1}". */
void kiln_array_describe(const kiln_array *a, char *buf, size_t cap);

/* Sharded arrays (made by kiln/dist.h: kiln_device_put_sharded and friends)
 * have one global shape and one buffer per device, each holding a block of
 * the global array (replicas hold the same block). kiln_array_to_host,
 * kiln_array_block_until_ready, kiln_array_delete and kiln_device_put (which
 * gathers the global value onto one device) accept them; operations that
 * run on one device refuse them with KILN_ERR_WRONG_DEVICE.
 * kiln_array_device of a sharded array is its first shard's device. */
int kiln_array_is_sharded(const kiln_array *a);
/* The number of shards: 1 for an ordinary array, 0 for NULL. */
int64_t kiln_array_shard_count(const kiln_array *a);
/* Shard i as an ordinary single-device array (a new reference sharing its
 * buffer; release it) and the block it holds, [start[d], stop[d]) for each
 * of the rank dimensions. Any output may be NULL. Shard 0 of an ordinary
 * array is the array itself. */
kiln_status kiln_array_shard(const kiln_array *a, int64_t i, kiln_array **shard, int64_t *start,
                             int64_t *stop);

#ifdef __cplusplus
}
#endif
#endif
