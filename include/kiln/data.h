/* Data sets on the host: loaders for the IDX format (MNIST and its family,
 * gzip'd or not) and NumPy .npy files, shuffling in the order
 * jax.random.permutation gives for the same key, and batching.
 *
 * A loaded data set is a kiln_host_data: a dense C-order buffer the caller
 * owns (kiln_host_data_free), with a kiln dtype and a shape whose leading
 * dimension is the example axis.
 *
 * Checkpoints: pytrees saved as safetensors files, checksummed and replaced
 * atomically, and rotating checkpoint directories. */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/array.h"
#include "kiln/dtype.h"
#include "kiln/status.h"
#include "kiln/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_host_data {
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  void *data;    /* shape's element count * dtype size bytes, row-major */
  size_t nbytes;
} kiln_host_data;

/* Frees d's buffer and zeroes d; NULL and a zeroed struct are allowed. */
void kiln_host_data_free(kiln_host_data *d);

/* Reads an IDX file (magic 0,0,type,rank; big-endian dimensions and data),
 * gzip'd or plain. Types u8, i8, i16, i32, f32 and f64 map to kiln's
 * dtypes; multi-byte values are converted to host order. A bad magic, an
 * unknown type, a truncated file or trailing bytes is KILN_ERR_IO with the
 * path and what is wrong; so is gzip input that gzip -t refuses: a member
 * cut short (its CRC-32/ISIZE trailer missing), a trailer that does not
 * match the data, or bytes other than zero padding after the last member.
 * Members concatenate, as gzip -d reads them. (kiln_load_npy reads gzip the
 * same way.) */
kiln_status kiln_load_idx(const char *path, kiln_host_data *out);

/* Reads a NumPy .npy file (format 1.0, 2.0 or 3.0 headers), C order, of a
 * dtype kiln has (bool, [u]int8..64, float16, float32, float64, either byte
 * order; bfloat16 is not a NumPy dtype). Fortran order, an unknown dtype, a
 * bad magic or a truncated file is KILN_ERR_IO naming the path and the
 * problem. A 0-d array loads with rank 0. */
kiln_status kiln_load_npy(const char *path, kiln_host_data *out);

/* jax.random.permutation(key, n) for a raw key (u32[2], as
 * jax.random.PRNGKey) and the default jax_threefry_partitionable=True:
 * writes the n indices 0..n-1 in the order JAX gives, bit for bit. */
kiln_status kiln_permutation(const uint32_t key[2], int64_t n, int64_t *out);

/* Batches over n examples of batch_size: with drop_remainder the last
 * partial batch is left out (floor), without it it is kept (ceil). */
int64_t kiln_batch_count(int64_t n, int64_t batch_size, int drop_remainder);

/* The rows of batch `index` of src in the given order (NULL: 0, 1, 2, ...)
 * copied into a new kiln_host_data whose leading dimension is the batch's
 * size (batch_size, or the remainder for a final partial batch). order, when
 * given, holds src->shape[0] row indices (e.g. from kiln_permutation). */
kiln_status kiln_host_data_batch(const kiln_host_data *src, const int64_t *order,
                                 int64_t batch_size, int64_t index, kiln_host_data *out);

/* A copy of d as a kiln_array on dev. */
kiln_status kiln_host_data_to_array(const kiln_host_data *d, kiln_device *dev, kiln_array **out);

/* ---- checkpoints: pytrees of arrays as safetensors files ---- */

typedef struct kiln_checkpoint_options {
  /* Save leaves holding NaN or infinity instead of refusing the tree. */
  int allow_nonfinite;
  /* User metadata: n_metadata string pairs kept in the file's __metadata__
   * (e.g. a run's flags, read back with kiln_checkpoint_read_metadata). Keys
   * are non-empty, distinct, valid UTF-8 and not kiln's own: "format",
   * "treedef", or any beginning with "crc32:" or "kiln."; values are UTF-8. */
  size_t n_metadata;
  const char *const *metadata_keys;
  const char *const *metadata_values;
} kiln_checkpoint_options;

/* The defaults, which a zeroed struct also gives. */
void kiln_checkpoint_options_init(kiln_checkpoint_options *opts);

/* Saves every leaf of tree (all must be arrays: params, optimizer state, the
 * step, a PRNG key, ...) as one safetensors tensor named by its key path as
 * jax.tree_util.keystr writes it ("['params']['w']"), in flatten order,
 * dtypes as safetensors names them (F32, BF16, I32, U32, ...). __metadata__
 * holds {"format": "kiln", "treedef": <the structure>}, the CRC-32 of each
 * tensor's bytes ("crc32:<name>": 8 lowercase hex digits, zlib's CRC-32, the
 * one Python's zlib.crc32 computes; chosen over CRC-32C because zlib is
 * already kiln's dependency and any Python can check it), then the user's
 * pairs. Python's safetensors reads the file as any other.
 *
 * A floating leaf (f16, bf16, f32, f64) holding a NaN or an infinity is
 * KILN_ERR_NONFINITE naming its key path and the flat index of the first
 * such element, unless opts->allow_nonfinite; nothing at path changes.
 *
 * The file is written to "<path>.tmp.<pid>", fsynced and renamed over path
 * (then the directory fsynced), so a failure or a crash mid-write leaves any
 * previous checkpoint at path intact; a failed save removes its temporary,
 * and the temporaries of writers that were killed (their pid no longer
 * exists) are removed by the next save to or restore from path. opts NULL
 * is the defaults. */
kiln_status kiln_checkpoint_save_with(const char *path, const kiln_tree *tree,
                                      const kiln_checkpoint_options *opts);
/* kiln_checkpoint_save_with(path, tree, NULL). */
kiln_status kiln_checkpoint_save(const char *path, const kiln_tree *tree);

/* Restores a checkpoint into a tree of the same structure as `expected`
 * (whose array leaves give the names, shapes and dtypes to check; their
 * values are not used), with new arrays on dev. A missing tensor, a shape or
 * dtype mismatch, or a tensor the expected tree lacks is KILN_ERR_TREE naming
 * the first offending key path.
 *
 * The file is checked as strictly as safetensors' own reader: header length
 * at most 100,000,000 bytes, well-formed UTF-8 JSON, __metadata__ all
 * strings, each tensor's data_offsets holding product(shape) * dtype-size
 * bytes, and the tensors tiling the data section from its start with no
 * gap, overlap or trailing byte. Any of these, and a tensor whose bytes do
 * not match their CRC-32, is KILN_ERR_IO naming the file, the tensor and
 * what is wrong. Files without checksums (written before kiln kept them, or
 * by other writers) load unchecked; a file with checksums must have one for
 * every tensor. */
kiln_status kiln_checkpoint_restore(const char *path, const kiln_tree *expected, kiln_device *dev,
                                    kiln_tree **out);

/* The __metadata__ value of key in the safetensors file at path, as a
 * malloc'ed string (free() it). A key the file lacks is KILN_ERR_NOT_FOUND;
 * a malformed file KILN_ERR_IO, as kiln_checkpoint_restore. Reads only the
 * header. */
kiln_status kiln_checkpoint_read_metadata(const char *path, const char *key, char **value);

/* A checkpoint directory, as orbax's CheckpointManager keeps one: step files
 * "<dir>/checkpoint_<step>.safetensors" and a pointer file "<dir>/latest"
 * holding the newest one's name.
 *
 * kiln_checkpoint_save_step saves tree as kiln_checkpoint_save_with does
 * (creating dir if it is missing, one level), then replaces "latest" the
 * same durable way (temporary, fsync, rename), then deletes the step files
 * beyond the newest `keep` (0: keep all): it keeps the step just saved and
 * the keep - 1 highest other steps. A crash at any point leaves the previous
 * pointer or the new one, each naming a complete file. Only files named
 * exactly "checkpoint_<step>.safetensors" (step in canonical decimal) and
 * temporaries of killed writers are ever deleted. step >= 0. One writer per
 * directory at a time. */
kiln_status kiln_checkpoint_save_step(const char *dir, int64_t step, const kiln_tree *tree,
                                      const kiln_checkpoint_options *opts, int keep);

/* The newest usable checkpoint in dir: *path (malloc'ed, free() it) and
 * *step. It is the file "latest" names when that file passes every check of
 * kiln_checkpoint_restore that needs no expected tree (layout and
 * checksums: the file is read once). When "latest" is missing, unreadable,
 * or names a missing or damaged file, it falls back to the highest step
 * file that passes them. No usable checkpoint is KILN_ERR_NOT_FOUND (a fresh
 * start); a dir that cannot be read is KILN_ERR_IO. */
kiln_status kiln_checkpoint_latest(const char *dir, char **path, int64_t *step);

/* The steps of dir's step files (named as above; their contents unchecked),
 * highest first, as orbax's CheckpointManager.all_steps lists them: a
 * malloc'ed array in *steps (free() it; NULL when there are none), their
 * count in *n. A missing dir has none; one that cannot be read is
 * KILN_ERR_IO. */
kiln_status kiln_checkpoint_all_steps(const char *dir, int64_t **steps, size_t *n);

/* ---- prefetch_to_device: batches uploaded ahead of the consumer ---- */

/* The user's iterator. Sets *batch to the next batch, a pytree whose leaves
 * are pointer leaves (kiln_tree_ptr) to kiln_host_data that the iterator
 * owns and keeps valid until its next call; the tree itself passes to the
 * prefetcher. *batch NULL with KILN_OK ends the stream; any other status is
 * an error (its message is kept). Called from the producer thread only. */
typedef kiln_status (*kiln_batch_fn)(void *user, kiln_tree **batch);

typedef struct kiln_prefetch kiln_prefetch;

/* flax.jax_utils.prefetch_to_device(iterator, size, devices): a producer
 * thread calls next(user, ...), splits each leaf's leading dimension evenly
 * across the n_devices devices (NULL: all of ctx's, in order) and uploads the
 * shards through each device's staged copy path (pinned staging and copy
 * stream on CUDA), keeping up to `size` batches (0: 2, as flax recommends)
 * ahead of the consumer. A batch is handed over once its copies are done, so
 * using it never waits on the host. Every batch must have the first one's
 * structure, dtypes and shapes. */
kiln_status kiln_prefetch_new(kiln_ctx *ctx, kiln_batch_fn next, void *user, int size,
                              kiln_device *const *devices, int n_devices, kiln_prefetch **out);

/* The next batch, in the iterator's order, as pmap sees it: a list of
 * n_devices trees (flax's leading device axis), tree d holding device d's
 * shard (leading dimension / n_devices rows) of every leaf as kiln_arrays
 * with the batch's structure. The caller owns *out (kiln_tree_free). At the
 * end of the stream *out is NULL with KILN_OK (and stays so). An iterator
 * error or a batch unlike the first fails here, naming the batch number and
 * the key path; the stream ends with it. */
kiln_status kiln_prefetch_next(kiln_prefetch *pf, kiln_tree **out);

/* Stops the producer (after the iterator call in progress returns) and frees
 * every batch not handed out. NULL is allowed. */
void kiln_prefetch_free(kiln_prefetch *pf);

#ifdef __cplusplus
}
#endif
#endif
