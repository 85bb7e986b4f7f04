/* data: host-side data sets (IDX and .npy loaders, permutation, batches)
 * and checkpoints (safetensors files, checkpoint directories).
 * The only door of src/data; prefix kdata_. */
#ifndef KILN_SRC_DATA_H
#define KILN_SRC_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "kiln/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The whole content of path, gunzipped when it starts with gzip's magic
 * (file_read.c): every member must end with a CRC-32/ISIZE trailer that
 * matches its data, and only zero padding may follow the last member, else
 * KILN_ERR_IO naming path. *buf is malloc'ed; `op` names the caller. */
kiln_status kdata_read_file(const char *op, const char *path, unsigned char **buf, size_t *len);

/* Fills out's dtype and shape and allocates its zeroed buffer. */
kiln_status kdata_alloc(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                        kiln_host_data *out);

/* Parses a whole file's bytes into out (a format's reader). */
typedef kiln_status (*kdata_parse_fn)(const char *path, const unsigned char *b, size_t len,
                                      kiln_host_data *out);
/* Reads path (through kdata_read_file) and parses it. */
kiln_status kdata_load(const char *op, const char *path, kdata_parse_fn parse, kiln_host_data *out);
/* Copies the data section (got bytes) into out, allocated by kdata_alloc,
 * byte-swapping each element when swap; a size other than out's is
 * KILN_ERR_IO (truncated or trailing bytes) and frees out. */
kiln_status kdata_fill(const char *op, const char *path, const unsigned char *data, size_t got,
                       int swap, kiln_host_data *out);

/* Reverses each `size`-byte element of buf in place (big/little endian). */
void kdata_swap_bytes(void *buf, size_t count, size_t size);

/* ---- safetensors headers (st_header.c) ---- */

/* safetensors' dtype name ("F32", "BF16", ...), NULL for none. */
const char *kdata_st_dtype_name(kiln_dtype d);

/* kiln's checksum of a tensor: the __metadata__ key "crc32:<tensor name>"
 * holds the CRC-32 (zlib's, as Python's zlib.crc32) of its bytes as 8
 * lowercase hex digits. */
#define KDATA_CRC_PREFIX "crc32:"

typedef struct kdata_st_entry {
  char *name;
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  uint64_t begin, end; /* data_offsets, relative to the end of the header */
  unsigned has;        /* 1, 2, 4: dtype, shape, data_offsets seen; 8: crc holds a checksum */
  uint32_t crc;
} kdata_st_entry;

typedef struct kdata_st_header {
  kdata_st_entry *e; /* the tensors: file order after parsing, data order once checked */
  size_t n;
  size_t *by_name;   /* once checked: indices of e sorted by name */
  char **meta_keys, **meta_values; /* __metadata__, in file order */
  size_t n_meta;
} kdata_st_header;

/* The offset of the first byte of s[0..n) that is not valid UTF-8; n if all is. */
size_t kdata_utf8_invalid_at(const char *s, size_t n);

/* Parses a header's JSON (len bytes) into h (zeroed first; freed on
 * failure). A malformed header is KILN_ERR_IO naming op, path and the byte. */
kiln_status kdata_st_parse(const char *op, const char *path, const char *json, size_t len,
                           kdata_st_header *h);
/* The __metadata__ value of key, NULL when there is none. */
const char *kdata_st_meta(const kdata_st_header *h, const char *key);
void kdata_st_header_free(kdata_st_header *h);

/* ---- safetensors files (st_file.c): layout, checksums, tensor bytes ---- */

/* The largest header the reference implementation reads (its MAX_HEADER_SIZE). */
#define KDATA_ST_MAX_HEADER 100000000u

typedef struct kdata_st_file {
  FILE *f;
  const char *op, *path;
  kdata_st_header h;
  uint64_t data_start, data_len; /* the data section's file offset and size */
} kdata_st_file;

/* Opens path and checks it as safetensors' reader does: the header length
 * bound, the JSON, every tensor's byte count (product(shape) * dtype size),
 * data_offsets that tile the data section exactly (sorted, from 0, no gap,
 * no overlap, no trailing bytes), unique names; and kiln's checksums (all or
 * none of the tensors have one, each names a tensor). KILN_ERR_IO naming op,
 * path and what is wrong; f is closed on failure. */
kiln_status kdata_st_open(const char *op, const char *path, kdata_st_file *f);
/* The tensor called name, NULL for none. */
const kdata_st_entry *kdata_st_find(const kdata_st_file *f, const char *name);
/* Reads e's bytes into buf (e->end - e->begin of them) and checks its
 * checksum when it has one: a mismatch is KILN_ERR_IO naming the tensor. */
kiln_status kdata_st_read(kdata_st_file *f, const kdata_st_entry *e, void *buf);
/* Reads every tensor, checking every checksum. */
kiln_status kdata_st_verify(kdata_st_file *f);
void kdata_st_close(kdata_st_file *f);

/* zlib's CRC-32 of n bytes (any n). */
uint32_t kdata_crc32(const void *buf, size_t n);

/* ---- durable files (checkpoint_files.c) ---- */

/* Creates "<path>.tmp.<pid>" for writing: *tmp (malloc'ed) and *fd. */
kiln_status kdata_tmp_create(const char *op, const char *path, char **tmp, int *fd);
/* Finishes a kdata_tmp_create whose writing ended with status s: when s is
 * KILN_OK, fsyncs and closes fd, renames tmp over path and fsyncs the
 * directory; otherwise (or when any of that fails) closes fd and unlinks tmp.
 * Frees tmp. Returns s or the first failure. */
kiln_status kdata_tmp_commit(const char *op, kiln_status s, int fd, char *tmp, const char *path);
/* write(2) of all n bytes; name is the file in messages. */
kiln_status kdata_write_all(const char *op, int fd, const void *buf, size_t n, const char *name);
/* Removes "<dir>/<stem>.tmp.<pid>" files whose writer is gone (kill(pid, 0)
 * gives ESRCH; never this process's) for each stem owns() accepts. Best
 * effort: a failure leaves the file. */
typedef int (*kdata_stem_fn)(const char *stem, void *user);
void kdata_sweep_stale(const char *dir, kdata_stem_fn owns, void *user);
/* kdata_sweep_stale for path's own temporaries. */
void kdata_sweep_stale_of(const char *path);
/* The directory part of path ("." for none), malloc'ed; NULL when out of memory. */
char *kdata_dir_of(const char *path);

#ifdef __cplusplus
}
#endif
#endif
