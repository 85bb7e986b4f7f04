/* data: host-side data sets (IDX and .npy loaders, permutation, batches).
 * The only door of src/data; prefix kdata_. */
#ifndef KILN_SRC_DATA_H
#define KILN_SRC_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The whole content of path, gunzipped when it is gzip'd (zlib passes plain
 * files through). *buf is malloc'ed; `op` names the caller in messages. */
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

/* ---- safetensors (st_header.c) ---- */

/* safetensors' dtype name ("F32", "BF16", ...), NULL for none. */
const char *kdata_st_dtype_name(kiln_dtype d);

typedef struct kdata_st_entry {
  char *name;
  kiln_dtype dtype;
  int rank;
  int64_t shape[KILN_MAX_RANK];
  uint64_t begin, end; /* data_offsets, relative to the end of the header */
  unsigned has;        /* parse state: which of dtype, shape, offsets were seen */
} kdata_st_entry;

/* Parses a header's JSON (len bytes) into its tensors, in file order;
 * __metadata__ is skipped. A malformed header is KILN_ERR_IO naming path. */
kiln_status kdata_st_parse(const char *path, const char *json, size_t len, kdata_st_entry **out,
                           size_t *n);
void kdata_st_free(kdata_st_entry *e, size_t n);

#ifdef __cplusplus
}
#endif
#endif
