/* Reading safetensors files: the layout checks of the reference reader
 * (safetensors' Metadata::validate and the buffer-length check after it),
 * kiln's per-tensor CRC-32s, and tensor bytes. */
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "core/core.h"
#include "data/data.h"

uint32_t kdata_crc32(const void *buf, size_t n) {
  const unsigned char *p = buf;
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n) { /* zlib's length is a uInt */
    uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return (uint32_t)crc;
}

static kiln_status fail(const kdata_st_file *f, const char *fmt, ...) KCORE_PRINTF(2, 3);
static kiln_status fail(const kdata_st_file *f, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return kcore_fail(KILN_ERR_IO, "%s: '%s': %s", f->op, f->path, what);
}

static int by_offsets(const void *a, const void *b) {
  const kdata_st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

typedef struct named {
  const char *name;
  size_t index;
} named;
static int by_name(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static kiln_status tensor_bytes(const kdata_st_file *f, const kdata_st_entry *e, uint64_t *out) {
  uint64_t n = kiln_dtype_size(e->dtype);
  for (int d = 0; d < e->rank; d++) {
    uint64_t dim = (uint64_t)e->shape[d];
    if (dim && n > UINT64_MAX / dim)
      return fail(f, "tensor %s: the byte count of its shape overflows", e->name);
    n *= dim;
  }
  *out = n;
  return KILN_OK;
}

static kiln_status index_names(kdata_st_file *f) {
  kdata_st_header *h = &f->h;
  if (!(h->by_name = malloc((h->n ? h->n : 1) * sizeof *h->by_name)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", f->op);
  named *tmp = malloc((h->n ? h->n : 1) * sizeof *tmp);
  if (!tmp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", f->op);
  for (size_t i = 0; i < h->n; i++) tmp[i] = (named){h->e[i].name, i};
  qsort(tmp, h->n, sizeof *tmp, by_name);
  for (size_t i = 0; i < h->n; i++) h->by_name[i] = tmp[i].index;
  free(tmp);
  for (size_t i = 1; i < h->n; i++)
    if (strcmp(h->e[h->by_name[i]].name, h->e[h->by_name[i - 1]].name) == 0)
      return fail(f, "tensor %s appears twice in the header", h->e[h->by_name[i]].name);
  return KILN_OK;
}

/* Sorts the tensors by data_offsets and checks that they tile the data
 * section exactly, each holding product(shape) * dtype-size bytes. */
static kiln_status check_layout(kdata_st_file *f) {
  kdata_st_header *h = &f->h;
  if (h->n) qsort(h->e, h->n, sizeof *h->e, by_offsets);
  kiln_status s = index_names(f); /* a duplicate name first: clearer than its overlap */
  if (s != KILN_OK) return s;
  uint64_t at = 0;
  char type[160];
  for (size_t i = 0; i < h->n; i++) {
    const kdata_st_entry *e = &h->e[i];
    uint64_t need = 0;
    if ((s = tensor_bytes(f, e, &need)) != KILN_OK) return s;
    if (e->begin > at)
      return fail(f, "a gap of %llu bytes before tensor %s (data_offsets [%llu, %llu])",
                  (unsigned long long)(e->begin - at), e->name, (unsigned long long)e->begin,
                  (unsigned long long)e->end);
    if (e->begin < at)
      return fail(f, "tensor %s's data_offsets [%llu, %llu] overlap tensor %s's [%llu, %llu]",
                  e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                  h->e[i - 1].name, (unsigned long long)h->e[i - 1].begin,
                  (unsigned long long)h->e[i - 1].end);
    if (e->end - e->begin != need) {
      kcore_format_type(e->dtype, e->rank, e->shape, type, sizeof type);
      return fail(f, "tensor %s is %s (%llu bytes) but its data_offsets [%llu, %llu] hold %llu",
                  e->name, type, (unsigned long long)need, (unsigned long long)e->begin,
                  (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    }
    at = e->end;
  }
  if (at > f->data_len)
    return fail(f, "the data section has %llu bytes, the tensors need %llu (truncated)",
                (unsigned long long)f->data_len, (unsigned long long)at);
  if (at < f->data_len)
    return fail(f, "%llu trailing bytes after the last tensor's data (the data section has %llu, "
                "the tensors cover %llu)", (unsigned long long)(f->data_len - at),
                (unsigned long long)f->data_len, (unsigned long long)at);
  return KILN_OK;
}

const kdata_st_entry *kdata_st_find(const kdata_st_file *f, const char *name) {
  size_t lo = 0, hi = f->h.n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const kdata_st_entry *e = &f->h.e[f->h.by_name[mid]];
    int c = strcmp(name, e->name);
    if (!c) return e;
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

/* Reads the "crc32:<name>" keys into the entries: all tensors or none. */
static kiln_status read_checksums(kdata_st_file *f) {
  kdata_st_header *h = &f->h;
  size_t plen = strlen(KDATA_CRC_PREFIX), found = 0;
  for (size_t i = 0; i < h->n_meta; i++) {
    const char *k = h->meta_keys[i], *v = h->meta_values[i];
    if (strncmp(k, KDATA_CRC_PREFIX, plen) != 0) continue;
    kdata_st_entry *e = (kdata_st_entry *)kdata_st_find(f, k + plen);
    if (!e) return fail(f, "__metadata__ has a checksum for %s, which is not a tensor", k + plen);
    if (e->has & 8) return fail(f, "tensor %s has two checksums", e->name);
    char *endp = NULL;
    unsigned long crc = strlen(v) == 8 && strspn(v, "0123456789abcdef") == 8 ? strtoul(v, &endp, 16) : 0;
    if (!endp || *endp)
      return fail(f, "tensor %s's checksum '%s' is not 8 lowercase hex digits", e->name, v);
    e->crc = (uint32_t)crc;
    e->has |= 8;
    found++;
  }
  for (size_t i = 0; found && i < h->n; i++)
    if (!(h->e[i].has & 8))
      return fail(f, "tensor %s has no checksum (%zu of the %zu tensors have one)", h->e[i].name,
                  found, h->n);
  return KILN_OK;
}

static kiln_status open_run(kdata_st_file *f) {
  if (!(f->f = fopen(f->path, "rb")))
    return kcore_fail(KILN_ERR_IO, "%s: cannot open '%s': %s", f->op, f->path, strerror(errno));
  unsigned char len8[8];
  if (fseeko(f->f, 0, SEEK_END) != 0) return fail(f, "cannot seek");
  off_t size = ftello(f->f);
  rewind(f->f);
  if (size < 8 || fread(len8, 1, 8, f->f) != 8) return fail(f, "truncated (no header length)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > KDATA_ST_MAX_HEADER)
    return fail(f, "header length %llu exceeds safetensors' limit of %u bytes",
                (unsigned long long)hlen, KDATA_ST_MAX_HEADER);
  if (hlen > (uint64_t)size - 8)
    return fail(f, "header length %llu does not fit the file's %lld bytes",
                (unsigned long long)hlen, (long long)size);
  char *json = malloc(hlen + 1);
  if (!json) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", f->op);
  kiln_status s = fread(json, 1, hlen, f->f) == hlen ? KILN_OK : fail(f, "truncated header");
  if (s == KILN_OK) s = kdata_st_parse(f->op, f->path, json, hlen, &f->h);
  free(json);
  if (s != KILN_OK) return s;
  f->data_start = 8 + hlen;
  f->data_len = (uint64_t)size - 8 - hlen;
  if ((s = check_layout(f)) != KILN_OK) return s;
  return read_checksums(f);
}

kiln_status kdata_st_open(const char *op, const char *path, kdata_st_file *f) {
  memset(f, 0, sizeof *f);
  f->op = op;
  f->path = path;
  kiln_status s = open_run(f);
  if (s != KILN_OK) kdata_st_close(f);
  return s;
}

kiln_status kdata_st_read(kdata_st_file *f, const kdata_st_entry *e, void *buf) {
  size_t bytes = (size_t)(e->end - e->begin);
  if (fseeko(f->f, (off_t)(f->data_start + e->begin), SEEK_SET) != 0 ||
      fread(buf, 1, bytes, f->f) != bytes)
    return fail(f, "cannot read tensor %s", e->name);
  if (e->has & 8) {
    uint32_t got = kdata_crc32(buf, bytes);
    if (got != e->crc)
      return fail(f, "tensor %s is corrupt: its bytes' CRC-32 is %08x, the header records %08x",
                  e->name, (unsigned)got, (unsigned)e->crc);
  }
  return KILN_OK;
}

kiln_status kdata_st_verify(kdata_st_file *f) {
  size_t cap = 0;
  void *buf = NULL;
  kiln_status s = KILN_OK;
  for (size_t i = 0; s == KILN_OK && i < f->h.n; i++) {
    size_t bytes = (size_t)(f->h.e[i].end - f->h.e[i].begin);
    if (bytes > cap) {
      free(buf);
      if (!(buf = malloc(bytes)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for tensor %s", f->op,
                          f->h.e[i].name);
      cap = bytes;
    }
    s = kdata_st_read(f, &f->h.e[i], buf);
  }
  free(buf);
  return s;
}

void kdata_st_close(kdata_st_file *f) {
  if (f->f) fclose(f->f);
  kdata_st_header_free(&f->h);
  f->f = NULL;
}
