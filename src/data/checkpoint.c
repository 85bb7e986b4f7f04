/* Saving checkpoints as safetensors files: an 8-byte little-endian header
 * length, a JSON header, then the tensors' bytes back to back, through a
 * temporary file that is fsynced and renamed, so the previous checkpoint
 * survives any failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void text_json_string(text *t, const char *s) {
  text_put(t, "\"", 1);
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
  text_put(t, "\"", 1);
}

/* ---- save ---- */

/* The header: each leaf's tensor in flatten order, then __metadata__,
 * padded with spaces to a multiple of 8 bytes (the data then starts 8-byte
 * aligned, as the safetensors format recommends). */
static kiln_status save_header(const char *path, const kiln_tree *tree, const kiln_leaf *leaves,
                               const kiln_path *paths, size_t n, text *h) {
  static const char *const op = "kiln_checkpoint_save";
  kiln_treedef *def = NULL;
  kiln_status s = kiln_tree_flatten(tree, NULL, NULL, NULL, NULL, &def);
  if (s != KILN_OK) return s;
  uint64_t offset = 0;
  char name[1024];
  text_put(h, "{", 1);
  for (size_t i = 0; i < n; i++) {
    kiln_path_str(&paths[i], name, sizeof name);
    if (leaves[i].kind != KILN_LEAF_ARRAY) {
      kiln_treedef_free(def);
      return kcore_fail(KILN_ERR_TREE, "%s: '%s': leaf %s is not an array", op, path, name);
    }
    const kiln_array *a = leaves[i].u.array;
    const char *dt = kdata_st_dtype_name(kiln_array_dtype(a));
    if (!dt) {
      kiln_treedef_free(def);
      return kcore_fail(KILN_ERR_DTYPE, "%s: '%s': leaf %s has dtype %s, which safetensors lacks",
                        op, path, name, kiln_dtype_name(kiln_array_dtype(a)));
    }
    if (i) text_put(h, ",", 1);
    text_json_string(h, name);
    text_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", dt);
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
  if (!ds) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  text_put(h, n ? "," : "", n ? 1 : 0);
  static const char meta[] = "\"__metadata__\":{\"format\":\"kiln\",\"treedef\":";
  text_put(h, meta, sizeof meta - 1);
  text_json_string(h, ds);
  free(ds);
  text_put(h, "}}", 2);
  while (!h->oom && h->n % 8) text_put(h, " ", 1);
  return h->oom ? kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", op)
                : KILN_OK;
}

static kiln_status write_all(int fd, const void *buf, size_t n, const char *tmp) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return kcore_fail(KILN_ERR_IO, "kiln_checkpoint_save: writing '%s': %s", tmp,
                        w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return KILN_OK;
}

static kiln_status save_body(int fd, const char *tmp, const text *h, const kiln_leaf *leaves,
                             size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
  kiln_status s = write_all(fd, len, 8, tmp);
  if (s == KILN_OK) s = write_all(fd, h->s, h->n, tmp);
  for (size_t i = 0; s == KILN_OK && i < n; i++) {
    size_t bytes = kiln_array_nbytes(leaves[i].u.array);
    if (!bytes) continue;
    void *buf = malloc(bytes);
    if (!buf) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_checkpoint_save: out of memory");
    s = kiln_array_to_host(leaves[i].u.array, buf, bytes);
    if (s == KILN_OK) s = write_all(fd, buf, bytes, tmp);
    free(buf);
  }
  if (s == KILN_OK && fsync(fd) != 0)
    s = kcore_fail(KILN_ERR_IO, "kiln_checkpoint_save: fsync '%s': %s", tmp, strerror(errno));
  return s;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static void sync_dir(const char *path) {
  char *dir = kcore_strdup(path);
  if (!dir) return;
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = 0;
  int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(dir);
}

kiln_status kiln_checkpoint_save(const char *path, const kiln_tree *tree) {
  static const char *const op = "kiln_checkpoint_save";
  if (!path || !tree) return kcore_fail(KILN_ERR_ARGUMENT, "%s: path or tree is NULL", op);
  kiln_leaf *leaves = NULL;
  kiln_path *paths = NULL;
  size_t n = 0;
  kiln_status s = kiln_tree_flatten_with_path(tree, NULL, NULL, &leaves, &paths, &n);
  if (s != KILN_OK) return s;
  text h = {0};
  char *tmp = NULL;
  if ((s = save_header(path, tree, leaves, paths, n, &h)) != KILN_OK) goto done;
  size_t tlen = strlen(path) + 32;
  if (!(tmp = malloc(tlen))) {
    s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
    goto done;
  }
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    s = kcore_fail(KILN_ERR_IO, "%s: cannot create '%s': %s", op, tmp, strerror(errno));
    goto done;
  }
  s = save_body(fd, tmp, &h, leaves, n);
  if (close(fd) != 0 && s == KILN_OK)
    s = kcore_fail(KILN_ERR_IO, "%s: closing '%s': %s", op, tmp, strerror(errno));
  if (s == KILN_OK && rename(tmp, path) != 0)
    s = kcore_fail(KILN_ERR_IO, "%s: renaming '%s' to '%s': %s", op, tmp, path, strerror(errno));
  if (s != KILN_OK) {
    unlink(tmp);
    goto done;
  }
  sync_dir(path);
done:
  free(tmp);
  free(h.s);
  kiln_leaves_free(leaves, n);
  kiln_paths_free(paths, n);
  return s;
}
