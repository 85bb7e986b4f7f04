/* Restoring a safetensors checkpoint into the structure of an expected tree:
 * every leaf's key path must name a tensor of the leaf's dtype and shape,
 * and the file may hold no other tensor. The file's layout is checked
 * before any data is read, and each tensor's checksum as it is read. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"

static const char *const OP = "kiln_checkpoint_restore";

/* Checks leaf `name` (the expected array a) against the file's entry. */
static kiln_status check_leaf(const char *path, const char *name, const kiln_array *a,
                              const kdata_st_entry *e) {
  char want[160], got[160];
  kcore_format_type(kiln_array_dtype(a), kiln_array_rank(a), kiln_array_shape(a), want, sizeof want);
  if (!e) return kcore_fail(KILN_ERR_TREE, "%s: '%s' has no tensor %s (expected %s)", OP, path, name, want);
  int same = e->dtype == kiln_array_dtype(a) && e->rank == kiln_array_rank(a);
  for (int d = 0; same && d < e->rank; d++) same = e->shape[d] == kiln_array_shape(a)[d];
  kcore_format_type(e->dtype, e->rank, e->shape, got, sizeof got);
  if (!same)
    return kcore_fail(KILN_ERR_TREE, "%s: '%s': %s is %s in the checkpoint, the expected tree has %s",
                      OP, path, name, got, want);
  return KILN_OK;
}

static kiln_status load_leaf(kdata_st_file *f, const kdata_st_entry *e, kiln_device *dev,
                             kiln_array **out) {
  size_t bytes = (size_t)(e->end - e->begin);
  void *buf = malloc(bytes ? bytes : 1);
  if (!buf) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", OP, e->name);
  kiln_status s = kdata_st_read(f, e, buf);
  if (s == KILN_OK) s = kiln_array_from_host(dev, e->dtype, e->rank, e->shape, buf, bytes, out);
  free(buf);
  return s;
}

typedef struct restore {
  kdata_st_file file;
  kiln_leaf *want;
  kiln_path *paths;
  size_t n;
  kiln_treedef *def;
  kiln_leaf *got;
  const kdata_st_entry **entry; /* the tensor of each expected leaf */
  unsigned char *used;
  char *name; /* the key path being looked at */
  size_t name_cap;
} restore;

static kiln_status name_of(restore *r, size_t i) {
  size_t len = kiln_path_str(&r->paths[i], NULL, 0);
  if (len + 1 > r->name_cap) {
    char *nn = realloc(r->name, len + 1);
    if (!nn) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
    r->name = nn;
    r->name_cap = len + 1;
  }
  kiln_path_str(&r->paths[i], r->name, r->name_cap);
  return KILN_OK;
}

static kiln_status restore_run(restore *r, const char *path, const kiln_tree *expected,
                               kiln_device *dev, kiln_tree **out) {
  kiln_status s = kiln_tree_flatten_with_path(expected, NULL, NULL, &r->want, &r->paths, &r->n);
  if (s == KILN_OK) s = kiln_tree_flatten(expected, NULL, NULL, NULL, NULL, &r->def);
  if (s != KILN_OK) return s;
  kdata_sweep_stale_of(path);
  if ((s = kdata_st_open(OP, path, &r->file)) != KILN_OK) return s;
  size_t n_es = r->file.h.n;
  r->got = calloc(r->n ? r->n : 1, sizeof *r->got);
  r->entry = calloc(r->n ? r->n : 1, sizeof *r->entry);
  r->used = calloc(n_es ? n_es : 1, 1);
  if (!r->got || !r->entry || !r->used)
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", OP);
  for (size_t i = 0; i < r->n; i++) { /* check every leaf before reading any data */
    if ((s = name_of(r, i)) != KILN_OK) return s;
    if (r->want[i].kind != KILN_LEAF_ARRAY)
      return kcore_fail(KILN_ERR_TREE, "%s: expected leaf %s is not an array", OP, r->name);
    const kdata_st_entry *e = kdata_st_find(&r->file, r->name);
    if ((s = check_leaf(path, r->name, r->want[i].u.array, e)) != KILN_OK) return s;
    r->entry[i] = e;
    r->used[e - r->file.h.e] = 1;
  }
  for (size_t j = 0; j < n_es; j++)
    if (!r->used[j])
      return kcore_fail(KILN_ERR_TREE, "%s: '%s': tensor %s is not in the expected tree", OP, path,
                        r->file.h.e[j].name);
  for (size_t i = 0; i < r->n; i++) {
    r->got[i].kind = KILN_LEAF_ARRAY;
    if ((s = load_leaf(&r->file, r->entry[i], dev, &r->got[i].u.array)) != KILN_OK) return s;
  }
  return kiln_tree_unflatten(r->def, r->got, r->n, out);
}

kiln_status kiln_checkpoint_restore(const char *path, const kiln_tree *expected, kiln_device *dev,
                                    kiln_tree **out) {
  if (!path || !expected || !dev || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: path, expected, dev or out is NULL", OP);
  restore r = {0};
  kiln_status s = restore_run(&r, path, expected, dev, out);
  kdata_st_close(&r.file);
  for (size_t i = 0; r.got && i < r.n; i++) kiln_array_release(r.got[i].u.array);
  free(r.got);
  free(r.entry);
  free(r.used);
  free(r.name);
  kiln_leaves_free(r.want, r.n);
  kiln_paths_free(r.paths, r.n);
  kiln_treedef_free(r.def);
  return s;
}

kiln_status kiln_checkpoint_read_metadata(const char *path, const char *key, char **value) {
  static const char *const op = "kiln_checkpoint_read_metadata";
  if (!path || !key || !value)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: path, key or value is NULL", op);
  *value = NULL;
  kdata_st_file f;
  kiln_status s = kdata_st_open(op, path, &f);
  if (s != KILN_OK) return s;
  const char *v = kdata_st_meta(&f.h, key);
  if (!v)
    s = kcore_fail(KILN_ERR_NOT_FOUND, "%s: '%s' has no __metadata__ key '%s'", op, path, key);
  else if (!(*value = kcore_strdup(v)))
    s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  kdata_st_close(&f);
  return s;
}
