/* A rotating checkpoint directory: "checkpoint_<step>.safetensors" files,
 * a "latest" pointer replaced atomically after each save, and the oldest
 * step files deleted beyond `keep`. The pointer is written after the step
 * file is durable, so it never names an incomplete file; when it is lost or
 * names a damaged file, the highest step file that passes its checks is the
 * fallback. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/core.h"
#include "data/data.h"

static const char PREFIX[] = "checkpoint_", SUFFIX[] = ".safetensors", POINTER[] = "latest";

/* 1 when name is "checkpoint_<step>.safetensors", step in canonical decimal
 * (no sign, no leading zero) fitting an int64. */
static int step_of(const char *name, int64_t *step) {
  size_t np = sizeof PREFIX - 1, ns = sizeof SUFFIX - 1, n = strlen(name);
  if (n <= np + ns || strncmp(name, PREFIX, np) != 0 || strcmp(name + n - ns, SUFFIX) != 0) return 0;
  const char *d = name + np;
  size_t nd = n - np - ns;
  if (strspn(d, "0123456789") < nd || (nd > 1 && d[0] == '0')) return 0;
  int64_t v = 0;
  for (size_t i = 0; i < nd; i++) {
    int64_t digit = d[i] - '0';
    if (v > (INT64_MAX - digit) / 10) return 0;
    v = v * 10 + digit;
  }
  *step = v;
  return 1;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static char *step_path(const char *dir, int64_t step) {
  char name[64];
  snprintf(name, sizeof name, "%s%lld%s", PREFIX, (long long)step, SUFFIX);
  return join(dir, name);
}

static int by_step_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of dir's step files, highest first (malloc'ed). A missing dir
 * has none. */
static kiln_status list_steps(const char *op, const char *dir, int64_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return KILN_OK;
    return kcore_fail(KILN_ERR_IO, "%s: cannot read the directory '%s': %s", op, dir, strerror(errno));
  }
  size_t cap = 0;
  kiln_status s = KILN_OK;
  for (struct dirent *ent; (ent = readdir(d));) {
    int64_t step;
    if (!step_of(ent->d_name, &step)) continue;
    if (*n == cap) {
      int64_t *nv = realloc(*out, (cap = cap ? cap * 2 : 16) * sizeof *nv);
      if (!nv) {
        s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
        break;
      }
      *out = nv;
    }
    (*out)[(*n)++] = step;
  }
  closedir(d);
  if (s == KILN_OK && *n) qsort(*out, *n, sizeof **out, by_step_desc);
  return s;
}

/* Temporaries this directory's writers leave: of step files and the pointer. */
static int dir_stem(const char *stem, void *user) {
  (void)user;
  int64_t step;
  return step_of(stem, &step) || strcmp(stem, POINTER) == 0;
}

static kiln_status write_pointer(const char *op, const char *dir, int64_t step) {
  char *ptr = join(dir, POINTER), *tmp = NULL;
  if (!ptr) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  char line[64];
  int len = snprintf(line, sizeof line, "%s%lld%s\n", PREFIX, (long long)step, SUFFIX);
  int fd = -1;
  kiln_status s = kdata_tmp_create(op, ptr, &tmp, &fd);
  if (s == KILN_OK) s = kdata_tmp_commit(op, kdata_write_all(op, fd, line, (size_t)len, tmp), fd, tmp, ptr);
  free(ptr);
  return s;
}

/* Deletes the step files beyond the newest `keep`, never `saved`. */
static kiln_status prune(const char *op, const char *dir, int64_t saved, int keep) {
  int64_t *steps;
  size_t n;
  kiln_status s = list_steps(op, dir, &steps, &n);
  int kept = 1; /* `saved` */
  for (size_t i = 0; s == KILN_OK && i < n; i++) {
    if (steps[i] == saved || kept < keep) {
      kept += steps[i] != saved;
      continue;
    }
    char *p = step_path(dir, steps[i]);
    if (!p) s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
    else if (unlink(p) != 0 && errno != ENOENT)
      s = kcore_fail(KILN_ERR_IO, "%s: step %lld is saved, but the old '%s' cannot be deleted: %s",
                     op, (long long)saved, p, strerror(errno));
    free(p);
  }
  free(steps);
  return s;
}

kiln_status kiln_checkpoint_save_step(const char *dir, int64_t step, const kiln_tree *tree,
                                      const kiln_checkpoint_options *opts, int keep) {
  static const char *const op = "kiln_checkpoint_save_step";
  if (!dir || !tree) return kcore_fail(KILN_ERR_ARGUMENT, "%s: dir or tree is NULL", op);
  if (step < 0 || keep < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: step %lld and keep %d must be >= 0", op,
                      (long long)step, keep);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return kcore_fail(KILN_ERR_IO, "%s: cannot create the directory '%s': %s", op, dir,
                      strerror(errno));
  kdata_sweep_stale(dir, dir_stem, NULL);
  char *path = step_path(dir, step);
  if (!path) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  kiln_status s = kiln_checkpoint_save_with(path, tree, opts);
  free(path);
  if (s == KILN_OK) s = write_pointer(op, dir, step);
  if (s == KILN_OK && keep > 0) s = prune(op, dir, step, keep);
  return s;
}

/* Whether path passes every check a restore makes without an expected tree. */
static int usable(const char *op, const char *path) {
  kdata_st_file f;
  kiln_status s = kdata_st_open(op, path, &f);
  if (s != KILN_OK) return 0;
  s = kdata_st_verify(&f);
  kdata_st_close(&f);
  return s == KILN_OK;
}

/* The step "<dir>/latest" names, or -1 when it is missing or malformed. */
static int64_t pointed_step(const char *dir) {
  char *ptr = join(dir, POINTER), line[128];
  FILE *f = ptr ? fopen(ptr, "rb") : NULL;
  free(ptr);
  if (!f) return -1;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = 0;
  if (n && line[n - 1] == '\n') line[--n] = 0;
  int64_t step;
  return strlen(line) == n && step_of(line, &step) ? step : -1;
}

static kiln_status found(const char *op, const char *dir, int64_t step, char **path, int64_t *out,
                         int *ok) {
  char *p = step_path(dir, step);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  if (!(*ok = usable(op, p))) {
    free(p);
    return KILN_OK;
  }
  *path = p;
  *out = step;
  return KILN_OK;
}

kiln_status kiln_checkpoint_latest(const char *dir, char **path, int64_t *step) {
  static const char *const op = "kiln_checkpoint_latest";
  if (!dir || !path || !step) return kcore_fail(KILN_ERR_ARGUMENT, "%s: dir, path or step is NULL", op);
  *path = NULL;
  int ok = 0;
  int64_t pointed = pointed_step(dir);
  kiln_status s = pointed >= 0 ? found(op, dir, pointed, path, step, &ok) : KILN_OK;
  if (s != KILN_OK || ok) return s;
  int64_t *steps;
  size_t n;
  if ((s = list_steps(op, dir, &steps, &n)) != KILN_OK) return s;
  for (size_t i = 0; s == KILN_OK && !ok && i < n; i++)
    if (steps[i] != pointed) s = found(op, dir, steps[i], path, step, &ok);
  free(steps);
  if (s == KILN_OK && !ok)
    s = kcore_fail(KILN_ERR_NOT_FOUND, "%s: '%s' holds no usable checkpoint: %zu step files, "
                   "none passes its checks; the pointer %s", op, dir, n,
                   pointed >= 0 ? "names a damaged or missing file" : "is missing or malformed");
  return s;
}

kiln_status kiln_checkpoint_all_steps(const char *dir, int64_t **steps, size_t *n) {
  static const char *const op = "kiln_checkpoint_all_steps";
  if (!dir || !steps || !n) return kcore_fail(KILN_ERR_ARGUMENT, "%s: dir, steps or n is NULL", op);
  kiln_status s = list_steps(op, dir, steps, n);
  if (s != KILN_OK) {
    free(*steps);
    *steps = NULL;
    *n = 0;
  }
  return s;
}
