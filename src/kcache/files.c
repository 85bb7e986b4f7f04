/* Writing files whole: a temporary file beside the target, renamed over
 * it, so readers (other processes included) see a whole file or none. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kcache/kcache.h"

/* Reads up to n bytes; returns how many arrived before end of file, or -1. */
ssize_t kcache_read_full(int fd, void *data, size_t n) {
  char *p = data;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* Writes the parts into a fresh temporary file beside `path` and renames it
 * over `path`. `durable` syncs the data first, so that after a crash the name
 * never points to a file whose blocks were not written. The directory is not
 * synced: a rename lost in a crash costs one recompilation, nothing more. */
kiln_status kcache_install_parts(const char *op, const char *path, const void *const *parts,
                                     const size_t *sizes, int num_parts, bool durable) {
  static const char mark[] = ".tmp-XXXXXX"; /* after ".kiln": KCACHE_TEMP_MARK */
  size_t n = strlen(path) + sizeof mark;
  char *tmp = malloc(n);
  if (!tmp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: %s: out of host memory", op, path);
  snprintf(tmp, n, "%s%s", path, mark);
  kiln_status st = KILN_OK;
  int fd = -1, rc;
  bool created = false;
  KCORE_IO_CHECK(fd = mkstemp(tmp), op, tmp, "mkstemp", done);
  created = true;
  for (int i = 0; i < num_parts; i++)
    KCORE_IO_CHECK(kcore_write_all(fd, parts[i], sizes[i]), op, tmp, "write", done);
  if (durable) KCORE_IO_CHECK(fsync(fd), op, tmp, "fsync", done);
  rc = close(fd);
  fd = -1;
  KCORE_IO_CHECK(rc, op, tmp, "close", done);
  KCORE_IO_CHECK(rename(tmp, path), op, path, "rename", done);
done:
  if (fd >= 0) close(fd);
  if (st != KILN_OK && created) unlink(tmp);
  free(tmp);
  return st;
}

kiln_status kcache_write_file(const char *path, const void *data, size_t size, bool durable) {
  if (!path || (!data && size > 0))
    return kcore_fail(KILN_ERR_ARGUMENT, "kcache_write_file: path or data is NULL");
  const void *parts[1] = {data};
  return kcache_install_parts("kcache_write_file", path, parts, &size, 1, durable);
}

kiln_status kcache_dump_source(const char *dir, const char *name, const char *ext,
                               const char *source, char **path) {
  if (path) *path = NULL;
  kcache_key digest;
  char hex[33];
  kcache_digest(source, strlen(source), &digest);
  kcache_key_hex(&digest, hex);
  size_t n = strlen(dir) + strlen(name) + strlen(ext) + 20;
  char *file = malloc(n);
  if (!file) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "dump of %s: out of host memory", name);
  snprintf(file, n, "%s/%s.%.16s.%s", dir, name, hex, ext);
  kiln_status st = KILN_OK;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    st = kcore_fail(KILN_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
  else
    st = kcache_write_file(file, source, strlen(source), false);
  if (st == KILN_OK && path)
    *path = file;
  else
    free(file);
  return st;
}
