/* The IDX format of the MNIST family: two zero bytes, a type byte, a rank
 * byte, then big-endian u32 dimensions and big-endian data. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

static const char *const OP = "kiln_load_idx";

static int idx_dtype(unsigned char code, kiln_dtype *out) {
  switch (code) {
    case 0x08: *out = KILN_U8; return 1;
    case 0x09: *out = KILN_I8; return 1;
    case 0x0B: *out = KILN_I16; return 1;
    case 0x0C: *out = KILN_I32; return 1;
    case 0x0D: *out = KILN_F32; return 1;
    case 0x0E: *out = KILN_F64; return 1;
    default: return 0;
  }
}

static kiln_status idx_parse(const char *path, const unsigned char *b, size_t len,
                             kiln_host_data *out) {
  if (len < 4 || b[0] != 0 || b[1] != 0)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': bad magic (not an IDX file)", OP, path);
  kiln_dtype dtype;
  if (!idx_dtype(b[2], &dtype))
    return kcore_fail(KILN_ERR_IO, "%s: '%s': unknown IDX data type 0x%02x", OP, path, b[2]);
  int rank = b[3];
  if (rank > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': rank %d exceeds kiln's %d", OP, path, rank,
                      KILN_MAX_RANK);
  size_t head = 4 + 4 * (size_t)rank;
  if (len < head)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': truncated in its dimensions (%zu bytes)", OP, path,
                      len);
  int64_t shape[KILN_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    const unsigned char *d = b + 4 + 4 * i;
    shape[i] = (int64_t)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
  }
  kiln_status s = kdata_alloc(OP, dtype, rank, shape, out);
  if (s != KILN_OK) return s;
  return kdata_fill(OP, path, b + head, len - head, 1, out); /* big-endian on disk */
}

kiln_status kiln_load_idx(const char *path, kiln_host_data *out) {
  return kdata_load(OP, path, idx_parse, out);
}
