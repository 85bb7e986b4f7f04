/* The kernel cache: compiled kernels (host shared objects, cubins) by a
 * 128-bit key, in memory and then on disk.
 *
 * In memory, a chained hash table under one mutex; a key being built is an
 * entry in the BUILDING state, and other threads asking for it wait on the
 * condition variable, so each kernel is compiled once per process.
 *
 * On disk, one file per key, "<dir>/<32 hex digits>.kiln": a 64-byte header
 * (little endian) and the payload.
 *     0  magic "kilnkern"        8  format version (u32)   12  header size (u32)
 *    16  key (16 bytes)         32  payload size (u64)     40  reserved (u64, 0)
 *    48  BLAKE2b-128 of bytes [0, 48) and of the payload
 * Files are written under a unique temporary name in the same directory and
 * renamed into place, so readers (other processes included) see a whole file
 * or none; two processes installing one key both succeed and one file wins.
 * A file that fails any check is reported, removed and rebuilt, never used. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "kcache/kcache.h"

#define KCACHE_HEADER 64u
#define KCACHE_SUMMED 48u /* header bytes covered by the checksum */
#define KCACHE_SUFFIX ".kiln"
/* A temporary file this old was left by a process that died mid-install. */
#define KCACHE_STALE_SECONDS 3600
static const char kcache_magic[8] = {'k', 'i', 'l', 'n', 'k', 'e', 'r', 'n'};

/* ---- the cache object ---- */

typedef enum kcache_state {
  KCACHE_BUILDING, /* one thread is loading or building it; others wait */
  KCACHE_READY,
  KCACHE_FAILED /* the last attempt failed; the next caller retries */
} kcache_state;

typedef struct kcache_entry {
  struct kcache_entry *next;
  kcache_key key;
  kcache_state state;
  void *blob;
  size_t size;
  kiln_status status; /* FAILED: the builder's status and message, for waiters */
  char *message;
} kcache_entry;

struct kcache {
  pthread_mutex_t lock;
  pthread_cond_t settled; /* broadcast whenever an entry leaves BUILDING */
  kcache_entry **buckets;
  size_t num_buckets; /* a power of two */
  size_t count;
  char *dir; /* NULL: memory only */
  kiln_log_level level;
  kcache_stats stats;
};

#define KCACHE_LOG(c, lvl, ...) kcore_log((c)->level, (lvl), __VA_ARGS__)

static size_t kcache_bucket(const kcache *c, const kcache_key *key) {
  return (size_t)kcache_load64(key->bytes) & (c->num_buckets - 1);
}

static kcache_entry *kcache_find(kcache *c, const kcache_key *key) {
  for (kcache_entry *e = c->buckets[kcache_bucket(c, key)]; e; e = e->next)
    if (memcmp(e->key.bytes, key->bytes, sizeof key->bytes) == 0) return e;
  return NULL;
}

/* Doubles the table past a load of 1. Entries keep their addresses (waiters
 * hold pointers to them); a failed allocation only leaves chains longer. */
static void kcache_grow(kcache *c) {
  size_t n = c->num_buckets * 2;
  kcache_entry **b = calloc(n, sizeof *b);
  if (!b) return;
  for (size_t i = 0; i < c->num_buckets; i++) {
    for (kcache_entry *e = c->buckets[i], *next; e; e = next) {
      next = e->next;
      size_t j = (size_t)kcache_load64(e->key.bytes) & (n - 1);
      e->next = b[j];
      b[j] = e;
    }
  }
  free(c->buckets);
  c->buckets = b;
  c->num_buckets = n;
}

static kcache_entry *kcache_insert(kcache *c, const kcache_key *key) {
  kcache_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = *key;
  e->state = KCACHE_BUILDING;
  if (c->count >= c->num_buckets) kcache_grow(c);
  size_t i = kcache_bucket(c, key);
  e->next = c->buckets[i];
  c->buckets[i] = e;
  c->count++;
  return e;
}

static void kcache_count(kcache *c, uint64_t *counter) {
  pthread_mutex_lock(&c->lock);
  (*counter)++;
  pthread_mutex_unlock(&c->lock);
}

/* ---- files ---- */

/* "<dir>/<hex><suffix>", or NULL when out of memory. */
static char *kcache_path_new(const char *dir, const kcache_key *key, const char *suffix) {
  char hex[33];
  kcache_key_hex(key, hex);
  size_t n = strlen(dir) + 1 + 32 + strlen(suffix) + 1;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s%s", dir, hex, suffix);
  return p;
}

kiln_status kcache_entry_path(const kcache *c, const kcache_key *key, char *buf, size_t cap) {
  if (!c || !key || !buf)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcache_entry_path: c, key or buf is NULL");
  if (!c->dir) return kcore_fail(KILN_ERR_ARGUMENT, "kcache_entry_path: the cache is memory-only");
  char hex[33];
  kcache_key_hex(key, hex);
  int n = snprintf(buf, cap, "%s/%s%s", c->dir, hex, KCACHE_SUFFIX);
  if (n < 0 || (size_t)n >= cap)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcache_entry_path: %zu bytes are too few for %s/%s%s",
                      cap, c->dir, hex, KCACHE_SUFFIX);
  return KILN_OK;
}

static void kcache_header(uint8_t h[KCACHE_HEADER], const kcache_key *key, const void *blob,
                          size_t size) {
  memset(h, 0, KCACHE_HEADER);
  memcpy(h, kcache_magic, sizeof kcache_magic);
  kcache_store32(h + 8, KCACHE_FORMAT);
  kcache_store32(h + 12, KCACHE_HEADER);
  memcpy(h + 16, key->bytes, 16);
  kcache_store64(h + 32, (uint64_t)size);
  kcache_hasher s;
  kcache_hasher_init(&s);
  kcache_hasher_update(&s, h, KCACHE_SUMMED);
  kcache_hasher_update(&s, blob, size);
  kcache_hasher_final(&s, h + KCACHE_SUMMED);
}

typedef enum kcache_file {
  KCACHE_ABSENT,
  KCACHE_VALID,
  KCACHE_CORRUPT,   /* present but fails a check: removed and rebuilt */
  KCACHE_UNREADABLE /* present but cannot be read: rebuilt */
} kcache_file;

/* Checks everything in the header that does not need the payload. */
static kcache_file kcache_check_header(const char *path, const uint8_t *h, const kcache_key *key,
                                       off_t file_size) {
  char want[33], got[33];
  if (memcmp(h, kcache_magic, sizeof kcache_magic) != 0) {
    kcore_fail(KILN_ERR_IO, "%s: bad magic, not a kiln kernel cache file", path);
    return KCACHE_CORRUPT;
  }
  if (kcache_load32(h + 8) != KCACHE_FORMAT || kcache_load32(h + 12) != KCACHE_HEADER) {
    kcore_fail(KILN_ERR_IO, "%s: format %u with a %u-byte header, expected format %u (%u bytes)",
               path, kcache_load32(h + 8), kcache_load32(h + 12), KCACHE_FORMAT, KCACHE_HEADER);
    return KCACHE_CORRUPT;
  }
  if (memcmp(h + 16, key->bytes, 16) != 0) {
    kcache_key_hex(key, want);
    kcache_key other;
    memcpy(other.bytes, h + 16, 16);
    kcache_key_hex(&other, got);
    kcore_fail(KILN_ERR_IO, "%s: holds key %s, expected %s", path, got, want);
    return KCACHE_CORRUPT;
  }
  uint64_t payload = kcache_load64(h + 32);
  if (payload != (uint64_t)file_size - KCACHE_HEADER) {
    kcore_fail(KILN_ERR_IO,
               "%s: truncated or overlong: the header says %llu payload bytes, the "
               "file holds %lld",
               path, (unsigned long long)payload, (long long)file_size - KCACHE_HEADER);
    return KCACHE_CORRUPT;
  }
  return KCACHE_VALID;
}

static kcache_file kcache_read_fd(int fd, const char *path, const kcache_key *key, void **blob,
                                  size_t *size, struct stat *st) {
  uint8_t h[KCACHE_HEADER];
  if (fstat(fd, st) != 0) {
    kcore_fail(KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    return KCACHE_UNREADABLE;
  }
  if (!S_ISREG(st->st_mode)) {
    kcore_fail(KILN_ERR_IO, "%s: cannot read: not a regular file", path);
    return KCACHE_UNREADABLE;
  }
  ssize_t got = kcache_read_full(fd, h, sizeof h);
  if (got < 0) {
    kcore_fail(KILN_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    return KCACHE_UNREADABLE;
  }
  if ((size_t)got < sizeof h) {
    kcore_fail(KILN_ERR_IO, "%s: truncated: %zd bytes, shorter than the %u-byte header", path, got,
               KCACHE_HEADER);
    return KCACHE_CORRUPT;
  }
  kcache_file r = kcache_check_header(path, h, key, st->st_size);
  if (r != KCACHE_VALID) return r;
  size_t n = (size_t)(st->st_size - KCACHE_HEADER);
  uint8_t *data = malloc(n ? n : 1);
  if (!data) {
    kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes", path, n);
    return KCACHE_UNREADABLE;
  }
  got = kcache_read_full(fd, data, n);
  uint8_t sum[16];
  if (got == (ssize_t)n) {
    kcache_hasher s;
    kcache_hasher_init(&s);
    kcache_hasher_update(&s, h, KCACHE_SUMMED);
    kcache_hasher_update(&s, data, n);
    kcache_hasher_final(&s, sum);
  }
  if (got != (ssize_t)n || memcmp(sum, h + KCACHE_SUMMED, sizeof sum) != 0) {
    if (got < 0)
      kcore_fail(KILN_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    else if (got != (ssize_t)n)
      kcore_fail(KILN_ERR_IO, "%s: truncated while reading: %zd of %zu payload bytes", path, got,
                 n);
    else
      kcore_fail(KILN_ERR_IO, "%s: checksum mismatch, the file is corrupt", path);
    free(data);
    return got < 0 ? KCACHE_UNREADABLE : KCACHE_CORRUPT;
  }
  *blob = data;
  *size = n;
  return KCACHE_VALID;
}

/* On anything but VALID the thread's message says why. */
static kcache_file kcache_read(const char *path, const kcache_key *key, void **blob, size_t *size,
                               struct stat *st) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return KCACHE_ABSENT;
    kcore_fail(KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return KCACHE_UNREADABLE;
  }
  kcache_file r = kcache_read_fd(fd, path, key, blob, size, st);
  close(fd);
  return r;
}

/* Removes a corrupt file unless another process has meanwhile renamed a new
 * one into place (then the name no longer points to the inode we read). */
static void kcache_remove_corrupt(const char *path, const struct stat *read_st) {
  struct stat now;
  if (stat(path, &now) == 0 && now.st_dev == read_st->st_dev && now.st_ino == read_st->st_ino)
    unlink(path);
}

/* True when the disk held a valid entry (then *blob owns it). Problems are
 * warnings: the caller builds the kernel instead. */
static bool kcache_load(kcache *c, const char *path, const kcache_key *key, void **blob,
                        size_t *size) {
  struct stat st;
  memset(&st, 0, sizeof st);
  switch (kcache_read(path, key, blob, size, &st)) {
    case KCACHE_VALID:
      kcache_count(c, &c->stats.disk_hits);
      return true;
    case KCACHE_ABSENT:
      return false;
    case KCACHE_CORRUPT:
      KCACHE_LOG(c, KILN_LOG_WARN, "kernel cache: %s; removing it and recompiling",
                 kiln_last_error());
      kcache_remove_corrupt(path, &st);
      kcache_count(c, &c->stats.corrupt_files);
      break;
    case KCACHE_UNREADABLE:
      KCACHE_LOG(c, KILN_LOG_WARN, "kernel cache: %s; recompiling", kiln_last_error());
      break;
  }
  kiln_clear_error();
  return false;
}

/* A failed install costs a recompilation later, nothing else: it is a warning. */
static void kcache_store(kcache *c, const char *path, const kcache_key *key, const void *blob,
                         size_t size) {
  uint8_t h[KCACHE_HEADER];
  kcache_header(h, key, blob, size);
  const void *parts[2] = {h, blob};
  const size_t sizes[2] = {sizeof h, size};
  if (kcache_install_parts("kernel cache", path, parts, sizes, 2, true) == KILN_OK) return;
  KCACHE_LOG(c, KILN_LOG_WARN, "%s; keeping the kernel in memory only", kiln_last_error());
  kiln_clear_error();
  kcache_count(c, &c->stats.write_failures);
}

/* The work of a miss, outside the lock: the disk, else build and store. */
static kiln_status kcache_fill(kcache *c, const kcache_key *key, kcache_build_fn build, void *user,
                               void **blob, size_t *size) {
  char *path = NULL;
  if (c->dir) {
    if (!(path = kcache_path_new(c->dir, key, KCACHE_SUFFIX)))
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcache_get_or_build: out of host memory");
    if (kcache_load(c, path, key, blob, size)) {
      free(path);
      return KILN_OK;
    }
  }
  kcache_count(c, &c->stats.builds);
  kiln_status st = build(user, blob, size);
  if (st == KILN_OK) {
    KCORE_ASSERT(*blob != NULL || *size == 0);
    if (!*blob && !(*blob = malloc(1))) /* an empty kernel still needs an address */
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcache_get_or_build: out of host memory");
  }
  if (st == KILN_OK && path) kcache_store(c, path, key, *blob, *size);
  free(path);
  return st;
}

/* Called with the lock held, on an entry another thread is building. */
static kiln_status kcache_await(kcache *c, kcache_entry *e, const void **blob, size_t *size) {
  while (e->state == KCACHE_BUILDING) pthread_cond_wait(&c->settled, &c->lock);
  if (e->state == KCACHE_FAILED)
    return kcore_fail(e->status, "%s", e->message ? e->message : "the kernel build failed");
  c->stats.memory_hits++;
  *blob = e->blob;
  *size = e->size;
  return KILN_OK;
}

/* Called with the lock held: publishes the builder's outcome to waiters. */
static void kcache_settle(kcache *c, kcache_entry *e, kiln_status st, void *blob, size_t size) {
  free(e->message);
  e->message = NULL;
  if (st == KILN_OK) {
    e->blob = blob;
    e->size = size;
    e->state = KCACHE_READY;
  } else {
    e->status = st;
    e->message = kcore_strdup(kiln_last_error()); /* NULL: waiters get a generic text */
    e->state = KCACHE_FAILED;
  }
  pthread_cond_broadcast(&c->settled);
}

kiln_status kcache_get_or_build(kcache *c, const kcache_key *key, kcache_build_fn build, void *user,
                                const void **blob, size_t *size) {
  if (!c || !key || !build || !blob || !size)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "kcache_get_or_build: c, key, build, blob or size is NULL");
  *blob = NULL;
  *size = 0;
  pthread_mutex_lock(&c->lock);
  kcache_entry *e = kcache_find(c, key);
  if (e && e->state != KCACHE_FAILED) {
    kiln_status st = kcache_await(c, e, blob, size);
    pthread_mutex_unlock(&c->lock);
    return st;
  }
  if (!e && !(e = kcache_insert(c, key))) {
    pthread_mutex_unlock(&c->lock);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcache_get_or_build: out of host memory");
  }
  e->state = KCACHE_BUILDING;
  pthread_mutex_unlock(&c->lock);

  void *b = NULL;
  size_t n = 0;
  kiln_status st = kcache_fill(c, key, build, user, &b, &n);
  pthread_mutex_lock(&c->lock);
  kcache_settle(c, e, st, b, n);
  pthread_mutex_unlock(&c->lock);
  if (st == KILN_OK) {
    *blob = b;
    *size = n;
  }
  return st;
}

/* ---- opening the directory ---- */

/* mkdir -p with 0700 for what it creates: the directory will hold code that
 * kiln loads and runs, so it is private (the XDG cache convention too). */
static kiln_status kcache_mkdirs(const char *dir) {
  char *p = kcore_strdup(dir);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", dir);
  kiln_status st = KILN_OK;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char saved = *s;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      st = kcore_fail(KILN_ERR_IO, "%s: cannot create the directory: %s", p, strerror(errno));
      break;
    }
    *s = saved;
    if (saved == '\0') break;
  }
  free(p);
  if (st != KILN_OK) return st;
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return kcore_fail(KILN_ERR_IO, "%s: cannot use the directory: %s", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return kcore_fail(KILN_ERR_IO, "%s: cannot use the directory: %s", dir, strerror(ENOTDIR));
  if (access(dir, W_OK | X_OK) != 0)
    return kcore_fail(KILN_ERR_IO, "%s: cannot write to the directory: %s", dir, strerror(errno));
  return KILN_OK;
}

/* Removes temporary files that processes which died mid-install left. A file
 * younger than the limit may be another process's install in progress. */
static void kcache_sweep(kcache *c) {
  DIR *d = opendir(c->dir);
  if (!d) return;
  time_t now = time(NULL);
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (!strstr(ent->d_name, KCACHE_TEMP_MARK)) continue;
    struct stat st;
    if (fstatat(dirfd(d), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (now - st.st_mtime > KCACHE_STALE_SECONDS && unlinkat(dirfd(d), ent->d_name, 0) == 0)
      KCACHE_LOG(c, KILN_LOG_INFO, "kernel cache: removed the stale temporary file %s/%s", c->dir,
                 ent->d_name);
  }
  closedir(d);
}

kiln_status kcache_new(const char *dir, kiln_log_level level, kcache **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kcache_new: out is NULL");
  *out = NULL;
  kcache *c = calloc(1, sizeof *c);
  if (!c) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcache_new: out of host memory");
  c->level = level;
  c->num_buckets = 64;
  if (!(c->buckets = calloc(c->num_buckets, sizeof *c->buckets)) ||
      (dir && *dir && !(c->dir = kcore_strdup(dir)))) {
    free(c->buckets);
    free(c);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcache_new: out of host memory");
  }
  if (c->dir && kcache_mkdirs(c->dir) != KILN_OK) {
    KCACHE_LOG(c, KILN_LOG_WARN, "kernel cache: %s; caching kernels in memory only",
               kiln_last_error());
    kiln_clear_error();
    free(c->dir);
    c->dir = NULL;
  }
  if (c->dir) kcache_sweep(c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->settled, NULL);
  *out = c;
  return KILN_OK;
}

void kcache_free(kcache *c) {
  if (!c) return;
  for (size_t i = 0; i < c->num_buckets; i++) {
    for (kcache_entry *e = c->buckets[i], *next; e; e = next) {
      next = e->next;
      KCORE_ASSERT(e->state != KCACHE_BUILDING); /* freed while a thread uses it */
      free(e->blob);
      free(e->message);
      free(e);
    }
  }
  free(c->buckets);
  free(c->dir);
  pthread_cond_destroy(&c->settled);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

const char *kcache_dir(const kcache *c) { return c ? c->dir : NULL; }

void kcache_stats_get(kcache *c, kcache_stats *out) {
  pthread_mutex_lock(&c->lock);
  *out = c->stats;
  pthread_mutex_unlock(&c->lock);
}
