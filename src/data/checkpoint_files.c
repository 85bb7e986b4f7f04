/* Durable file replacement (write "<path>.tmp.<pid>", fsync, rename, fsync
 * the directory) and the removal of temporaries whose writer was killed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/core.h"
#include "data/data.h"

static const char TMP_INFIX[] = ".tmp.";

char *kdata_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return kcore_strdup(".");
  size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/x" lives in "/" */
  char *dir = malloc(n + 1);
  if (!dir) return NULL;
  memcpy(dir, path, n);
  dir[n] = 0;
  return dir;
}

kiln_status kdata_write_all(const char *op, int fd, const void *buf, size_t n, const char *name) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return kcore_fail(KILN_ERR_IO, "%s: writing '%s': %s", op, name,
                        w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return KILN_OK;
}

kiln_status kdata_tmp_create(const char *op, const char *path, char **tmp, int *fd) {
  size_t n = strlen(path) + sizeof TMP_INFIX + 24;
  if (!(*tmp = malloc(n))) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  snprintf(*tmp, n, "%s%s%ld", path, TMP_INFIX, (long)getpid());
  *fd = open(*tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (*fd >= 0) return KILN_OK;
  kiln_status s = kcore_fail(KILN_ERR_IO, "%s: cannot create '%s': %s", op, *tmp, strerror(errno));
  free(*tmp);
  *tmp = NULL;
  return s;
}

/* fsync of the directory holding path, so a rename in it is durable. */
static void sync_dir(const char *path) {
  char *dir = kdata_dir_of(path);
  int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    fsync(fd); /* best effort: some file systems refuse a directory fsync */
    close(fd);
  }
  free(dir);
}

kiln_status kdata_tmp_commit(const char *op, kiln_status s, int fd, char *tmp, const char *path) {
  if (s == KILN_OK && fsync(fd) != 0)
    s = kcore_fail(KILN_ERR_IO, "%s: fsync '%s': %s", op, tmp, strerror(errno));
  if (close(fd) != 0 && s == KILN_OK)
    s = kcore_fail(KILN_ERR_IO, "%s: closing '%s': %s", op, tmp, strerror(errno));
  if (s == KILN_OK && rename(tmp, path) != 0)
    s = kcore_fail(KILN_ERR_IO, "%s: renaming '%s' to '%s': %s", op, tmp, path, strerror(errno));
  if (s == KILN_OK) sync_dir(path);
  else unlink(tmp);
  free(tmp);
  return s;
}

/* name is "<stem>.tmp.<pid>" with a canonical decimal pid: the stem's
 * length and the pid, or 0. */
static size_t tmp_stem(const char *name, pid_t *pid) {
  const char *infix = NULL;
  for (const char *p = strstr(name, TMP_INFIX); p; p = strstr(p + 1, TMP_INFIX)) infix = p;
  if (!infix || infix == name) return 0;
  const char *digits = infix + sizeof TMP_INFIX - 1;
  size_t nd = strspn(digits, "0123456789");
  if (nd == 0 || nd > 9 || digits[nd] || digits[0] == '0') return 0;
  *pid = (pid_t)strtol(digits, NULL, 10);
  return (size_t)(infix - name);
}

void kdata_sweep_stale(const char *dir, kdata_stem_fn owns, void *user) {
  DIR *d = opendir(dir);
  if (!d) return;
  char stem[1024];
  for (struct dirent *ent; (ent = readdir(d));) {
    pid_t pid;
    size_t n = tmp_stem(ent->d_name, &pid);
    if (!n || n >= sizeof stem || pid == getpid()) continue;
    memcpy(stem, ent->d_name, n);
    stem[n] = 0;
    if (!owns(stem, user)) continue;
    /* ESRCH: no such process. EPERM means it lives (another user's). A
     * recycled pid only delays the removal until that process ends. */
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(d), ent->d_name, 0);
  }
  closedir(d);
}

static int same_stem(const char *stem, void *user) { return strcmp(stem, user) == 0; }

void kdata_sweep_stale_of(const char *path) {
  char *dir = kdata_dir_of(path);
  if (!dir) return;
  const char *slash = strrchr(path, '/');
  kdata_sweep_stale(dir, same_stem, (void *)(slash ? slash + 1 : path));
  free(dir);
}
