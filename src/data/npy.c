/* NumPy's .npy format: "\x93NUMPY", version, a little-endian header length
 * (u16 for 1.0, u32 for 2.0 and 3.0), then a Python dict literal with
 * 'descr', 'fortran_order' and 'shape', then the raw data. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

static const char *const OP = "kiln_load_npy";

/* The value text after 'key': in the header, or NULL. */
static const char *npy_field(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (isspace((unsigned char)*p)) p++;
  if (*p != ':') return NULL;
  p++;
  while (isspace((unsigned char)*p)) p++;
  return p;
}

/* descr such as '<f4', '|u1', '>i8', '|b1'; *swap when it is big-endian. */
static int npy_dtype(const char *d, size_t n, kiln_dtype *out, int *swap) {
  if (n != 3) return 0;
  char order = d[0], kind = d[1], size = d[2];
  if (order != '<' && order != '>' && order != '|' && order != '=') return 0;
  *swap = order == '>';
  static const struct { char kind, size; kiln_dtype dt; } table[] = {
      {'b', '1', KILN_BOOL}, {'i', '1', KILN_I8},  {'i', '2', KILN_I16}, {'i', '4', KILN_I32},
      {'i', '8', KILN_I64},  {'u', '1', KILN_U8},  {'u', '2', KILN_U16}, {'u', '4', KILN_U32},
      {'u', '8', KILN_U64},  {'f', '2', KILN_F16}, {'f', '4', KILN_F32}, {'f', '8', KILN_F64}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].kind == kind && table[i].size == size) {
      *out = table[i].dt;
      return 1;
    }
  return 0;
}

static kiln_status npy_header(const char *path, const char *h, kiln_dtype *dtype, int *swap,
                              int *rank, int64_t *shape) {
  const char *d = npy_field(h, "descr");
  if (!d || (*d != '\'' && *d != '"'))
    return kcore_fail(KILN_ERR_IO, "%s: '%s': header has no 'descr'", OP, path);
  const char *e = strchr(d + 1, *d);
  if (!e) return kcore_fail(KILN_ERR_IO, "%s: '%s': unterminated 'descr'", OP, path);
  if (!npy_dtype(d + 1, (size_t)(e - d - 1), dtype, swap))
    return kcore_fail(KILN_ERR_IO, "%s: '%s': unknown dtype '%.*s' (kiln reads bool, [u]int8..64, "
                      "float16/32/64)", OP, path, (int)(e - d - 1), d + 1);
  const char *f = npy_field(h, "fortran_order");
  if (!f) return kcore_fail(KILN_ERR_IO, "%s: '%s': header has no 'fortran_order'", OP, path);
  if (strncmp(f, "True", 4) == 0)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': Fortran order is not supported (save C order: "
                      "np.ascontiguousarray)", OP, path);
  if (strncmp(f, "False", 5) != 0)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': bad 'fortran_order' value", OP, path);
  const char *s = npy_field(h, "shape");
  if (!s || *s != '(') return kcore_fail(KILN_ERR_IO, "%s: '%s': header has no 'shape' tuple", OP, path);
  *rank = 0;
  for (s++;;) {
    while (isspace((unsigned char)*s) || *s == ',') s++;
    if (*s == ')') break;
    if (!isdigit((unsigned char)*s))
      return kcore_fail(KILN_ERR_IO, "%s: '%s': bad 'shape' tuple", OP, path);
    if (*rank == KILN_MAX_RANK)
      return kcore_fail(KILN_ERR_IO, "%s: '%s': rank exceeds kiln's %d", OP, path, KILN_MAX_RANK);
    char *end;
    long long v = strtoll(s, &end, 10);
    if (v < 0) return kcore_fail(KILN_ERR_IO, "%s: '%s': negative dimension", OP, path);
    shape[(*rank)++] = v;
    s = end;
  }
  return KILN_OK;
}

static kiln_status npy_parse(const char *path, const unsigned char *b, size_t len,
                             kiln_host_data *out) {
  if (len < 8 || memcmp(b, "\x93NUMPY", 6) != 0)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': bad magic (not a .npy file)", OP, path);
  int major = b[6];
  if (major < 1 || major > 3)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': unsupported format version %d.%d", OP, path, major,
                      b[7]);
  size_t pre = major == 1 ? 10 : 12;
  if (len < pre) return kcore_fail(KILN_ERR_IO, "%s: '%s': truncated header", OP, path);
  size_t hlen = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                           : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                                 (size_t)b[11] << 24;
  if (len - pre < hlen) return kcore_fail(KILN_ERR_IO, "%s: '%s': truncated header", OP, path);
  char *h = malloc(hlen + 1);
  if (!h) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  memcpy(h, b + pre, hlen);
  h[hlen] = 0;
  kiln_dtype dtype = KILN_F32;
  int swap = 0, rank = 0;
  int64_t shape[KILN_MAX_RANK];
  kiln_status s = npy_header(path, h, &dtype, &swap, &rank, shape);
  free(h);
  if (s != KILN_OK) return s;
  if ((s = kdata_alloc(OP, dtype, rank, shape, out)) != KILN_OK) return s;
  return kdata_fill(OP, path, b + pre + hlen, len - pre - hlen, swap, out);
}

kiln_status kiln_load_npy(const char *path, kiln_host_data *out) {
  return kdata_load(OP, path, npy_parse, out);
}
