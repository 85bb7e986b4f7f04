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

/* Reverses each `size`-byte element of buf in place (big/little endian). */
void kdata_swap_bytes(void *buf, size_t count, size_t size);

#ifdef __cplusplus
}
#endif
#endif
