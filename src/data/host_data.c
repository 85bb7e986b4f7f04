/* kiln_host_data: allocation, loading through a format's parser, and the
 * copy to a device array. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

void kiln_host_data_free(kiln_host_data *d) {
  if (!d) return;
  free(d->data);
  memset(d, 0, sizeof *d);
}

kiln_status kdata_alloc(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                        kiln_host_data *out) {
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: rank %d is outside 0..%d", op, rank, KILN_MAX_RANK);
  int64_t n;
  size_t bytes;
  kiln_status s = kcore_shape_bytes(op, dtype, rank, shape, &n, &bytes);
  if (s != KILN_OK) return s;
  memset(out, 0, sizeof *out);
  out->data = calloc(bytes ? bytes : 1, 1);
  if (!out->data) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", op, bytes);
  out->dtype = dtype;
  out->rank = rank;
  for (int i = 0; i < rank; i++) out->shape[i] = shape[i];
  out->nbytes = bytes;
  return KILN_OK;
}

void kdata_swap_bytes(void *buf, size_t count, size_t size) {
  unsigned char *p = buf;
  for (size_t i = 0; i < count; i++, p += size)
    for (size_t a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

kiln_status kdata_load(const char *op, const char *path, kdata_parse_fn parse, kiln_host_data *out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  unsigned char *buf;
  size_t len;
  kiln_status s = kdata_read_file(op, path, &buf, &len);
  if (s != KILN_OK) return s;
  s = parse(path, buf, len, out);
  free(buf);
  return s;
}

kiln_status kdata_fill(const char *op, const char *path, const unsigned char *data, size_t got,
                       int swap, kiln_host_data *out) {
  if (got != out->nbytes) {
    char t[160];
    size_t need = out->nbytes;
    kcore_format_type(out->dtype, out->rank, out->shape, t, sizeof t);
    kiln_host_data_free(out);
    return kcore_fail(KILN_ERR_IO, "%s: '%s': %s needs %zu data bytes, the file has %zu (%s)", op,
                      path, t, need, got, got < need ? "truncated" : "trailing bytes");
  }
  memcpy(out->data, data, got);
  size_t es = kiln_dtype_size(out->dtype);
  if (swap && es > 1) kdata_swap_bytes(out->data, got / es, es);
  return KILN_OK;
}

kiln_status kiln_host_data_to_array(const kiln_host_data *d, kiln_device *dev, kiln_array **out) {
  if (!d || !d->data || !dev || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_host_data_to_array: d, its data, dev or out is NULL");
  return kiln_array_from_host(dev, d->dtype, d->rank, d->shape, d->data, d->nbytes, out);
}
