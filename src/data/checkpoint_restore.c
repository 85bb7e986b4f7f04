/* Restoring a safetensors checkpoint into the structure of an expected tree:
 * every leaf's key path must name a tensor of the leaf's dtype and shape,
 * and the file may hold no other tensor. */
#define _FILE_OFFSET_BITS 64
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

static const char *const OP = "kiln_checkpoint_restore";

/* Header entries sorted by name, for lookup. */
static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const kdata_st_entry *)a)->name, ((const kdata_st_entry *)b)->name);
}

static kiln_status read_header(FILE *f, const char *path, kdata_st_entry **es, size_t *n,
                               uint64_t *data_start, uint64_t *data_len) {
  unsigned char len8[8];
  if (fseeko(f, 0, SEEK_END) != 0) return kcore_fail(KILN_ERR_IO, "%s: '%s': cannot seek", OP, path);
  off_t size = ftello(f);
  rewind(f);
  if (size < 8 || fread(len8, 1, 8, f) != 8)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': truncated (no header length)", OP, path);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > (uint64_t)size - 8 || hlen > (100u << 20))
    return kcore_fail(KILN_ERR_IO, "%s: '%s': header length %llu does not fit the file's %lld bytes",
                      OP, path, (unsigned long long)hlen, (long long)size);
  char *json = malloc(hlen + 1);
  if (!json) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  kiln_status s = KILN_OK;
  if (fread(json, 1, hlen, f) != hlen)
    s = kcore_fail(KILN_ERR_IO, "%s: '%s': truncated header", OP, path);
  if (s == KILN_OK) s = kdata_st_parse(path, json, hlen, es, n);
  free(json);
  *data_start = 8 + hlen;
  *data_len = (uint64_t)size - 8 - hlen;
  return s;
}

/* Checks leaf `name` (the expected array a) against the file's entry. */
static kiln_status check_leaf(const char *path, const char *name, const kiln_array *a,
                              const kdata_st_entry *e, uint64_t data_len) {
  char want[160], got[160];
  kcore_format_type(kiln_array_dtype(a), kiln_array_rank(a), kiln_array_shape(a), want, sizeof want);
  if (!e) return kcore_fail(KILN_ERR_TREE, "%s: '%s' has no tensor %s (expected %s)", OP, path, name, want);
  int same = e->dtype == kiln_array_dtype(a) && e->rank == kiln_array_rank(a);
  for (int d = 0; same && d < e->rank; d++) same = e->shape[d] == kiln_array_shape(a)[d];
  kcore_format_type(e->dtype, e->rank, e->shape, got, sizeof got);
  if (!same)
    return kcore_fail(KILN_ERR_TREE, "%s: '%s': %s is %s in the checkpoint, the expected tree has %s",
                      OP, path, name, got, want);
  if (e->end - e->begin != kiln_array_nbytes(a) || e->end > data_len)
    return kcore_fail(KILN_ERR_IO, "%s: '%s': tensor %s (%s) has data_offsets [%llu, %llu] for %zu "
                      "bytes in a data section of %llu", OP, path, name, got,
                      (unsigned long long)e->begin, (unsigned long long)e->end, kiln_array_nbytes(a),
                      (unsigned long long)data_len);
  return KILN_OK;
}

static kiln_status load_leaf(FILE *f, const char *path, const char *name, const kdata_st_entry *e,
                             uint64_t data_start, kiln_device *dev, kiln_array **out) {
  size_t bytes = (size_t)(e->end - e->begin);
  void *buf = malloc(bytes ? bytes : 1);
  if (!buf) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", OP, name);
  kiln_status s = KILN_OK;
  if (fseeko(f, (off_t)(data_start + e->begin), SEEK_SET) != 0 || fread(buf, 1, bytes, f) != bytes)
    s = kcore_fail(KILN_ERR_IO, "%s: '%s': cannot read tensor %s", OP, path, name);
  if (s == KILN_OK) s = kiln_array_from_host(dev, e->dtype, e->rank, e->shape, buf, bytes, out);
  free(buf);
  return s;
}

typedef struct restore {
  FILE *f;
  kdata_st_entry *es;
  size_t n_es;
  kiln_leaf *want;
  kiln_path *paths;
  size_t n;
  kiln_treedef *def;
  kiln_leaf *got;
  unsigned char *used;
} restore;

static kiln_status restore_run(restore *r, const char *path, const kiln_tree *expected,
                               kiln_device *dev, kiln_tree **out) {
  kiln_status s = kiln_tree_flatten_with_path(expected, NULL, NULL, &r->want, &r->paths, &r->n);
  if (s == KILN_OK) s = kiln_tree_flatten(expected, NULL, NULL, NULL, NULL, &r->def);
  if (s != KILN_OK) return s;
  if (!(r->f = fopen(path, "rb"))) return kcore_fail(KILN_ERR_IO, "%s: cannot open '%s'", OP, path);
  uint64_t data_start = 0, data_len = 0;
  if ((s = read_header(r->f, path, &r->es, &r->n_es, &data_start, &data_len)) != KILN_OK) return s;
  qsort(r->es, r->n_es, sizeof *r->es, entry_cmp);
  r->got = calloc(r->n ? r->n : 1, sizeof *r->got);
  r->used = calloc(r->n_es ? r->n_es : 1, 1);
  if (!r->got || !r->used) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  char name[1024];
  for (size_t i = 0; i < r->n; i++) { /* check every leaf before reading any data */
    kiln_path_str(&r->paths[i], name, sizeof name);
    if (r->want[i].kind != KILN_LEAF_ARRAY)
      return kcore_fail(KILN_ERR_TREE, "%s: expected leaf %s is not an array", OP, name);
    kdata_st_entry key = {.name = name};
    kdata_st_entry *e = bsearch(&key, r->es, r->n_es, sizeof *r->es, entry_cmp);
    if ((s = check_leaf(path, name, r->want[i].u.array, e, data_len)) != KILN_OK) return s;
    r->used[e - r->es] = 1;
  }
  for (size_t j = 0; j < r->n_es; j++)
    if (!r->used[j])
      return kcore_fail(KILN_ERR_TREE, "%s: '%s': tensor %s is not in the expected tree", OP, path,
                        r->es[j].name);
  for (size_t i = 0; i < r->n; i++) {
    kiln_path_str(&r->paths[i], name, sizeof name);
    kdata_st_entry key = {.name = name};
    kdata_st_entry *e = bsearch(&key, r->es, r->n_es, sizeof *r->es, entry_cmp);
    r->got[i].kind = KILN_LEAF_ARRAY;
    if ((s = load_leaf(r->f, path, name, e, data_start, dev, &r->got[i].u.array)) != KILN_OK) return s;
  }
  return kiln_tree_unflatten(r->def, r->got, r->n, out);
}

kiln_status kiln_checkpoint_restore(const char *path, const kiln_tree *expected, kiln_device *dev,
                                    kiln_tree **out) {
  if (!path || !expected || !dev || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: path, expected, dev or out is NULL", OP);
  restore r = {0};
  kiln_status s = restore_run(&r, path, expected, dev, out);
  if (r.f) fclose(r.f);
  kdata_st_free(r.es, r.n_es);
  for (size_t i = 0; r.got && i < r.n; i++) kiln_array_release(r.got[i].u.array);
  free(r.got);
  free(r.used);
  kiln_leaves_free(r.want, r.n);
  kiln_paths_free(r.paths, r.n);
  kiln_treedef_free(r.def);
  return s;
}
