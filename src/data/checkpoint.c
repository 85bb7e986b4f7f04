/* Saving checkpoints as safetensors files: an 8-byte little-endian header
 * length, a JSON header, then the tensors' bytes back to back, through a
 * temporary file that is fsynced and renamed, so the previous checkpoint
 * survives any failure. Each leaf is copied to the host once: checked for
 * NaN/inf, checksummed and written; the header's checksums (fixed-width
 * placeholders until then) are patched in at the end. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/core.h"
#include "data/data.h"

/* ---- a growable text buffer for the header ---- */

typedef struct text {
  char *s;
  size_t n, cap;
  int oom;
} text;

static void text_put(text *t, const char *s, size_t n) {
  if (t->oom) return;
  if (t->n + n + 1 > t->cap) {
    size_t cap = (t->n + n + 1) * 2;
    char *ns = realloc(t->s, cap);
    if (!ns) {
      t->oom = 1;
      return;
    }
    t->s = ns;
    t->cap = cap;
  }
  memcpy(t->s + t->n, s, n);
  t->n += n;
  t->s[t->n] = 0;
}

static void text_printf(text *t, const char *fmt, ...) KCORE_PRINTF(2, 3);
static void text_printf(text *t, const char *fmt, ...) {
  char buf[96];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) text_put(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* s as the characters of a JSON string (no quotes). */
static void text_json_chars(text *t, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      text_put(t, e, 2);
    } else if (c < 0x20) {
      text_printf(t, "\\u%04x", c);
    } else {
      text_put(t, (const char *)&c, 1);
    }
  }
}

static void text_json_string(text *t, const char *s) {
  text_put(t, "\"", 1);
  text_json_chars(t, s);
  text_put(t, "\"", 1);
}

/* ---- checks before anything is written ---- */

static const char *const OP = "kiln_checkpoint_save";

void kiln_checkpoint_options_init(kiln_checkpoint_options *opts) {
  if (opts) memset(opts, 0, sizeof *opts);
}

static int reserved_key(const char *k) {
  return strcmp(k, "format") == 0 || strcmp(k, "treedef") == 0 ||
         strncmp(k, KDATA_CRC_PREFIX, strlen(KDATA_CRC_PREFIX)) == 0 || strncmp(k, "kiln.", 5) == 0;
}

static int utf8_ok(const char *s) { return kdata_utf8_invalid_at(s, strlen(s)) == strlen(s); }

static kiln_status check_metadata(const char *path, const kiln_checkpoint_options *o) {
  if (o->n_metadata && (!o->metadata_keys || !o->metadata_values))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: '%s': %zu metadata pairs but no keys or values", OP,
                      path, o->n_metadata);
  for (size_t i = 0; i < o->n_metadata; i++) {
    const char *k = o->metadata_keys[i], *v = o->metadata_values[i];
    if (!k || !v || !*k)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: '%s': metadata pair %zu has a NULL or empty key "
                        "or a NULL value", OP, path, i);
    if (reserved_key(k))
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: '%s': metadata key '%s' is kiln's own (format, "
                        "treedef, crc32:*, kiln.*)", OP, path, k);
    if (!utf8_ok(k) || !utf8_ok(v))
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: '%s': metadata pair '%s' is not valid UTF-8", OP,
                        path, k);
    for (size_t j = 0; j < i; j++)
      if (strcmp(o->metadata_keys[j], k) == 0)
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: '%s': metadata key '%s' is given twice", OP,
                          path, k);
  }
  return KILN_OK;
}

/* Every leaf an array of a dtype safetensors has, named by a UTF-8 key path. */
static kiln_status check_leaves(const char *path, const kiln_leaf *leaves, char *const *names,
                                size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (leaves[i].kind != KILN_LEAF_ARRAY)
      return kcore_fail(KILN_ERR_TREE, "%s: '%s': leaf %s is not an array", OP, path, names[i]);
    kiln_dtype dt = kiln_array_dtype(leaves[i].u.array);
    if (!kdata_st_dtype_name(dt))
      return kcore_fail(KILN_ERR_DTYPE, "%s: '%s': leaf %s has dtype %s, which safetensors lacks",
                        OP, path, names[i], kiln_dtype_name(dt));
    if (!utf8_ok(names[i]))
      return kcore_fail(KILN_ERR_TREE, "%s: '%s': key path %s is not valid UTF-8", OP, path,
                        names[i]);
  }
  return KILN_OK;
}

/* The flat index of the first element of p[0..count) whose exponent bits
 * are all ones (a NaN or an infinity), -1 for none; one typed loop per
 * width, so each element is a single load and mask. */
#define KDATA_SCAN(T, EXP)                                    \
  static int64_t scan_##T(const T *p, int64_t count) {        \
    for (int64_t i = 0; i < count; i++)                       \
      if ((p[i] & (EXP)) == (EXP)) return i;                  \
    return -1;                                                \
  }
KDATA_SCAN(uint16_t, 0x7C00u)
typedef uint16_t bf16_bits;
KDATA_SCAN(bf16_bits, 0x7F80u)
KDATA_SCAN(uint32_t, 0x7F800000u)
KDATA_SCAN(uint64_t, 0x7FF0000000000000ull)
#undef KDATA_SCAN

/* The first NaN or infinity of a floating leaf's host copy (its kind in
 * *what), -1 for none or for other dtypes. The buffer is malloc'ed, so
 * aligned for any of these widths; host order is the file's little-endian. */
static int64_t first_nonfinite(kiln_dtype dt, const void *buf, int64_t count, const char **what) {
  int64_t i;
  uint64_t v, man, sign;
  switch (dt) {
    case KILN_F16: i = scan_uint16_t(buf, count), man = 0x3FF, sign = 0x8000; break;
    case KILN_BF16: i = scan_bf16_bits(buf, count), man = 0x7F, sign = 0x8000; break;
    case KILN_F32: i = scan_uint32_t(buf, count), man = 0x7FFFFF, sign = 0x80000000u; break;
    case KILN_F64: i = scan_uint64_t(buf, count), man = 0xFFFFFFFFFFFFFull, sign = 1ull << 63; break;
    default: return -1;
  }
  if (i < 0) return -1;
  size_t es = kiln_dtype_size(dt);
  v = 0;
  memcpy(&v, (const unsigned char *)buf + (size_t)i * es, es);
  *what = v & man ? "NaN" : v & sign ? "-inf" : "inf";
  return i;
}

/* ---- the header ---- */

/* Each leaf's tensor in flatten order, then __metadata__: kiln's keys, a
 * checksum placeholder per tensor (its offset in h kept in crc_at), the
 * user's pairs; padded with spaces to a multiple of 8 bytes (the data then
 * starts 8-byte aligned, as the safetensors format recommends). */
static kiln_status save_header(const kiln_tree *tree, const kiln_leaf *leaves, char *const *names,
                               size_t n, const kiln_checkpoint_options *o, text *h,
                               size_t *crc_at) {
  kiln_treedef *def = NULL;
  kiln_status s = kiln_tree_flatten(tree, NULL, NULL, NULL, NULL, &def);
  if (s != KILN_OK) return s;
  uint64_t offset = 0;
  text_put(h, "{", 1);
  for (size_t i = 0; i < n; i++) {
    const kiln_array *a = leaves[i].u.array;
    if (i) text_put(h, ",", 1);
    text_json_string(h, names[i]);
    text_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", kdata_st_dtype_name(kiln_array_dtype(a)));
    for (int d = 0; d < kiln_array_rank(a); d++)
      text_printf(h, "%s%lld", d ? "," : "", (long long)kiln_array_shape(a)[d]);
    uint64_t end = offset + kiln_array_nbytes(a);
    text_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                (unsigned long long)end);
    offset = end;
  }
  size_t need = kiln_treedef_str(def, NULL, 0);
  char *ds = malloc(need + 1);
  if (ds) kiln_treedef_str(def, ds, need + 1);
  kiln_treedef_free(def);
  if (!ds) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  text_put(h, n ? "," : "", n ? 1 : 0);
  static const char meta[] = "\"__metadata__\":{\"format\":\"kiln\",\"treedef\":";
  text_put(h, meta, sizeof meta - 1);
  text_json_string(h, ds);
  free(ds);
  for (size_t i = 0; i < n && !h->oom; i++) {
    static const char key[] = ",\"" KDATA_CRC_PREFIX;
    text_put(h, key, sizeof key - 1);
    text_json_chars(h, names[i]);
    text_put(h, "\":\"", 3);
    crc_at[i] = h->n;
    text_put(h, "00000000\"", 9);
  }
  for (size_t i = 0; i < o->n_metadata; i++) {
    text_put(h, ",", 1);
    text_json_string(h, o->metadata_keys[i]);
    text_put(h, ":", 1);
    text_json_string(h, o->metadata_values[i]);
  }
  text_put(h, "}}", 2);
  while (!h->oom && h->n % 8) text_put(h, " ", 1);
  if (h->oom) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", OP);
  if (h->n > KDATA_ST_MAX_HEADER)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: the header would be %zu bytes, more than "
                      "safetensors reads (%u)", OP, h->n, KDATA_ST_MAX_HEADER);
  return KILN_OK;
}

/* ---- the file ---- */

typedef struct save {
  kiln_leaf *leaves;
  kiln_path *paths;
  char **names; /* keystr of each leaf's path */
  size_t n;
  size_t *crc_at;
  text h;
} save;

/* Writes the length and header (checksums still placeholders), the leaves'
 * bytes, then the header again with the checksums. */
static kiln_status save_body(int fd, const char *path, const char *tmp, save *sv,
                             const kiln_checkpoint_options *o) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)sv->h.n >> (8 * i));
  kiln_status s = kdata_write_all(OP, fd, len, 8, tmp);
  if (s == KILN_OK) s = kdata_write_all(OP, fd, sv->h.s, sv->h.n, tmp);
  void *buf = NULL;
  size_t cap = 0;
  for (size_t i = 0; s == KILN_OK && i < sv->n; i++) {
    const kiln_array *a = sv->leaves[i].u.array;
    size_t bytes = kiln_array_nbytes(a);
    if (bytes > cap) {
      void *nb = realloc(buf, bytes);
      if (!nb) {
        s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for leaf %s (%zu bytes)", OP,
                       sv->names[i], bytes);
        break;
      }
      buf = nb;
      cap = bytes;
    }
    if (bytes && (s = kiln_array_to_host(a, buf, bytes)) != KILN_OK) break;
    const char *what = NULL;
    int64_t count = (int64_t)(bytes / kiln_dtype_size(kiln_array_dtype(a)));
    int64_t bad = o->allow_nonfinite ? -1 : first_nonfinite(kiln_array_dtype(a), buf, count, &what);
    if (bad >= 0) {
      char type[160];
      kcore_format_type(kiln_array_dtype(a), kiln_array_rank(a), kiln_array_shape(a), type,
                        sizeof type);
      s = kcore_fail(KILN_ERR_NONFINITE, "%s: '%s': leaf %s (%s) holds %s at flat index %lld; "
                     "nothing was saved (allow_nonfinite saves it anyway)", OP, path,
                     sv->names[i], type, what, (long long)bad);
      break;
    }
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)kdata_crc32(buf, bytes));
    memcpy(sv->h.s + sv->crc_at[i], hex, 8);
    s = kdata_write_all(OP, fd, buf, bytes, tmp);
  }
  free(buf);
  if (s == KILN_OK && lseek(fd, 8, SEEK_SET) != 8)
    s = kcore_fail(KILN_ERR_IO, "%s: seeking in '%s': %s", OP, tmp, strerror(errno));
  if (s == KILN_OK) s = kdata_write_all(OP, fd, sv->h.s, sv->h.n, tmp);
  return s;
}

static kiln_status save_run(const char *path, const kiln_tree *tree,
                            const kiln_checkpoint_options *o, save *sv) {
  kiln_status s = check_metadata(path, o);
  if (s == KILN_OK)
    s = kiln_tree_flatten_with_path(tree, NULL, NULL, &sv->leaves, &sv->paths, &sv->n);
  if (s != KILN_OK) return s;
  sv->names = calloc(sv->n ? sv->n : 1, sizeof *sv->names);
  sv->crc_at = calloc(sv->n ? sv->n : 1, sizeof *sv->crc_at);
  if (!sv->names || !sv->crc_at) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  for (size_t i = 0; i < sv->n; i++) {
    size_t len = kiln_path_str(&sv->paths[i], NULL, 0);
    if (!(sv->names[i] = malloc(len + 1)))
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
    kiln_path_str(&sv->paths[i], sv->names[i], len + 1);
  }
  if ((s = check_leaves(path, sv->leaves, sv->names, sv->n)) != KILN_OK ||
      (s = save_header(tree, sv->leaves, sv->names, sv->n, o, &sv->h, sv->crc_at)) != KILN_OK)
    return s;
  kdata_sweep_stale_of(path);
  char *tmp = NULL;
  int fd = -1;
  if ((s = kdata_tmp_create(OP, path, &tmp, &fd)) != KILN_OK) return s;
  s = save_body(fd, path, tmp, sv, o);
  return kdata_tmp_commit(OP, s, fd, tmp, path);
}

kiln_status kiln_checkpoint_save_with(const char *path, const kiln_tree *tree,
                                      const kiln_checkpoint_options *opts) {
  if (!path || !tree) return kcore_fail(KILN_ERR_ARGUMENT, "%s: path or tree is NULL", OP);
  kiln_checkpoint_options defaults = {0};
  save sv = {0};
  kiln_status s = save_run(path, tree, opts ? opts : &defaults, &sv);
  for (size_t i = 0; sv.names && i < sv.n; i++) free(sv.names[i]);
  free(sv.names);
  free(sv.crc_at);
  free(sv.h.s);
  kiln_leaves_free(sv.leaves, sv.n);
  kiln_paths_free(sv.paths, sv.n);
  return s;
}

kiln_status kiln_checkpoint_save(const char *path, const kiln_tree *tree) {
  return kiln_checkpoint_save_with(path, tree, NULL);
}
