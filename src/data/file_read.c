/* Reading a whole data file, gunzipped when it starts with gzip's magic.
 * zlib's gzread accepts a member cut short before its CRC-32/ISIZE trailer
 * and ignores garbage after the last member; this reader, as gzip(1) and
 * Python's gzip module, refuses both: every member must end with a trailer
 * that matches its data, and only zero padding may follow the last one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "core/core.h"
#include "data/data.h"

#define CHUNK (1u << 30) /* zlib counts in uInt */

static kiln_status read_all(const char *op, const char *path, unsigned char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return kcore_fail(KILN_ERR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *b = malloc(cap);
  kiln_status s = b ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
  while (s == KILN_OK) {
    if (n == cap) {
      unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
      if (!nb) {
        s = KILN_ERR_OUT_OF_MEMORY;
        break;
      }
      b = nb;
      cap *= 2;
    }
    size_t got = fread(b + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) s = kcore_fail(KILN_ERR_IO, "%s: '%s': read failed after %zu bytes", op, path, n);
      break;
    }
  }
  fclose(f);
  if (s == KILN_ERR_OUT_OF_MEMORY)
    s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory after %zu bytes", op, path, n);
  if (s != KILN_OK) {
    free(b);
    return s;
  }
  *buf = b;
  *len = n;
  return KILN_OK;
}

typedef struct gz {
  const char *op, *path;
  const unsigned char *in;
  size_t n, pos;  /* input bytes, and how many have been handed to zlib */
  unsigned char *out;
  size_t got, cap;
  int member;     /* 1-based, for messages */
  z_stream zs;
} gz;

static kiln_status gz_bad(gz *g, const char *what) {
  return kcore_fail(KILN_ERR_IO, "%s: '%s': gzip member %d %s", g->op, g->path, g->member, what);
}

/* After a member's end: another member, zero padding, or garbage. */
static kiln_status gz_next_member(gz *g, int *done) {
  size_t rest = g->n - g->pos + g->zs.avail_in;
  const unsigned char *r = g->in + g->n - rest;
  *done = 1;
  if (rest >= 2 && r[0] == 0x1f && r[1] == 0x8b) {
    *done = 0;
    g->member++;
    return inflateReset(&g->zs) == Z_OK ? KILN_OK : gz_bad(g, "cannot be restarted");
  }
  for (size_t i = 0; i < rest; i++)
    if (r[i]) return kcore_fail(KILN_ERR_IO, "%s: '%s': %zu bytes of trailing garbage after gzip "
                                "member %d", g->op, g->path, rest, g->member);
  return KILN_OK;
}

static kiln_status gz_run(gz *g) {
  for (;;) {
    if (g->zs.avail_in == 0 && g->pos < g->n) {
      size_t chunk = g->n - g->pos < CHUNK ? g->n - g->pos : CHUNK;
      g->zs.next_in = (unsigned char *)g->in + g->pos;
      g->zs.avail_in = (uInt)chunk;
      g->pos += chunk;
    }
    if (g->got == g->cap) {
      size_t cap = g->cap > SIZE_MAX / 2 ? 0 : g->cap * 2;
      unsigned char *nb = cap ? realloc(g->out, cap) : NULL;
      if (!nb)
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory after %zu gunzipped "
                          "bytes", g->op, g->path, g->got);
      g->out = nb;
      g->cap = cap;
    }
    g->zs.next_out = g->out + g->got;
    g->zs.avail_out = (uInt)(g->cap - g->got < CHUNK ? g->cap - g->got : CHUNK);
    int ret = inflate(&g->zs, Z_NO_FLUSH);
    g->got = (size_t)(g->zs.next_out - g->out);
    if (ret == Z_STREAM_END) { /* zlib has checked the trailer's CRC-32 and ISIZE */
      int done;
      kiln_status s = gz_next_member(g, &done);
      if (s != KILN_OK || done) return s;
    } else if (ret == Z_MEM_ERROR) {
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory in zlib", g->op, g->path);
    } else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
      const char *m = g->zs.msg ? g->zs.msg : "corrupt";
      if (strcmp(m, "incorrect data check") == 0)
        return gz_bad(g, "fails its CRC-32 check: the data is corrupt");
      if (strcmp(m, "incorrect length check") == 0)
        return gz_bad(g, "fails its ISIZE check: the length in its trailer is wrong");
      char what[160];
      snprintf(what, sizeof what, "is corrupt (zlib: %s)", m);
      return gz_bad(g, what);
    } else if (g->zs.avail_in == 0 && g->pos == g->n && g->zs.avail_out != 0) {
      return gz_bad(g, "is truncated: the file ends before its data and its CRC-32/ISIZE "
                       "trailer are complete");
    }
  }
}

static kiln_status gunzip(const char *op, const char *path, const unsigned char *in, size_t n,
                          unsigned char **out, size_t *len) {
  gz g = {op, path, in, n, 0, NULL, 0, n < SIZE_MAX / 4 ? n * 4 + 4096 : n, 1, {0}};
  if (!(g.out = malloc(g.cap)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory", op, path);
  if (inflateInit2(&g.zs, 16 + MAX_WBITS) != Z_OK) { /* gzip only */
    free(g.out);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: '%s': zlib cannot start", op, path);
  }
  kiln_status s = gz_run(&g);
  inflateEnd(&g.zs);
  if (s != KILN_OK) {
    free(g.out);
    return s;
  }
  *out = g.out;
  *len = g.got;
  return KILN_OK;
}

kiln_status kdata_read_file(const char *op, const char *path, unsigned char **buf, size_t *len) {
  if (!path || !buf || !len) return kcore_fail(KILN_ERR_ARGUMENT, "%s: path, buf or len is NULL", op);
  unsigned char *raw = NULL;
  size_t n = 0;
  kiln_status s = read_all(op, path, &raw, &n);
  if (s != KILN_OK || n < 2 || raw[0] != 0x1f || raw[1] != 0x8b) {
    if (s == KILN_OK) *buf = raw, *len = n;
    return s;
  }
  s = gunzip(op, path, raw, n, buf, len);
  free(raw);
  return s;
}
