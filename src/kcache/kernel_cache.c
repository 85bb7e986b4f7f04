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

#define KCACHE_FORMAT 1u
#define KCACHE_HEADER 64u
#define KCACHE_SUMMED 48u /* header bytes covered by the checksum */
#define KCACHE_SUFFIX ".kiln"
/* A temporary file this old was left by a process that died mid-install. */
#define KCACHE_STALE_SECONDS 3600
static const char kcache_magic[8] = {'k', 'i', 'l', 'n', 'k', 'e', 'r', 'n'};

/* ---- BLAKE2b (RFC 7693), 16-byte digests ---- */

typedef struct krt_b2b {
  uint64_t h[8];
  uint64_t t; /* bytes compressed so far (inputs stay far below 2^64) */
  uint8_t buf[128];
  size_t fill;
} krt_b2b;

static const uint64_t krt_b2b_iv[8] = {
    0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
    0x510e527fade682d1ull, 0x9b05688c2b3e6c1full, 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};

static const uint8_t krt_b2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static uint64_t krt_load64(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t v;
  memcpy(&v, p, sizeof v); /* one load where the byte order already matches */
  return v;
#else
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
#endif
}

static void krt_store64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t krt_load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void krt_store32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t krt_rotr64(uint64_t x, int n) { return x >> n | x << (64 - n); }

static inline void krt_b2b_mix(uint64_t *v, int a, int b, int c, int d, uint64_t x, uint64_t y) {
  v[a] = v[a] + v[b] + x;
  v[d] = krt_rotr64(v[d] ^ v[a], 32);
  v[c] = v[c] + v[d];
  v[b] = krt_rotr64(v[b] ^ v[c], 24);
  v[a] = v[a] + v[b] + y;
  v[d] = krt_rotr64(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = krt_rotr64(v[b] ^ v[c], 63);
}

static void krt_b2b_compress(krt_b2b *s, bool last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; i++) m[i] = krt_load64(s->buf + 8 * i);
  for (int i = 0; i < 8; i++) {
    v[i] = s->h[i];
    v[i + 8] = krt_b2b_iv[i];
  }
  v[12] ^= s->t; /* the high word of the counter stays zero */
  if (last) v[14] = ~v[14];
  for (int r = 0; r < 12; r++) {
    const uint8_t *g = krt_b2b_sigma[r];
    krt_b2b_mix(v, 0, 4, 8, 12, m[g[0]], m[g[1]]);
    krt_b2b_mix(v, 1, 5, 9, 13, m[g[2]], m[g[3]]);
    krt_b2b_mix(v, 2, 6, 10, 14, m[g[4]], m[g[5]]);
    krt_b2b_mix(v, 3, 7, 11, 15, m[g[6]], m[g[7]]);
    krt_b2b_mix(v, 0, 5, 10, 15, m[g[8]], m[g[9]]);
    krt_b2b_mix(v, 1, 6, 11, 12, m[g[10]], m[g[11]]);
    krt_b2b_mix(v, 2, 7, 8, 13, m[g[12]], m[g[13]]);
    krt_b2b_mix(v, 3, 4, 9, 14, m[g[14]], m[g[15]]);
  }
  for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

static void krt_b2b_init(krt_b2b *s) {
  memset(s, 0, sizeof *s);
  memcpy(s->h, krt_b2b_iv, sizeof s->h);
  s->h[0] ^= 0x01010000u | 16u; /* fanout 1, depth 1, no key, 16-byte digest */
}

static void krt_b2b_update(krt_b2b *s, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n > 0) {
    /* A full buffer is compressed only once more input arrives: the last
     * block must be compressed with the final flag. */
    if (s->fill == sizeof s->buf) {
      s->t += sizeof s->buf;
      krt_b2b_compress(s, false);
      s->fill = 0;
    }
    size_t take = sizeof s->buf - s->fill;
    if (take > n) take = n;
    memcpy(s->buf + s->fill, p, take);
    s->fill += take;
    p += take;
    n -= take;
  }
}

static void krt_b2b_final(krt_b2b *s, uint8_t out[16]) {
  s->t += s->fill;
  memset(s->buf + s->fill, 0, sizeof s->buf - s->fill);
  krt_b2b_compress(s, true);
  krt_store64(out, s->h[0]);
  krt_store64(out + 8, s->h[1]);
}

void kcache_digest(const void *data, size_t size, kcache_key *out) {
  krt_b2b s;
  krt_b2b_init(&s);
  krt_b2b_update(&s, data, size);
  krt_b2b_final(&s, out->bytes);
}

/* ---- keys ---- */

/* Each part is length-prefixed, so ("ab", "c") and ("a", "bc") differ;
 * NULL is told apart from "" by a length no string has. */
static void kcache_absorb(krt_b2b *s, const void *data, size_t n) {
  uint8_t len[8];
  krt_store64(len, data ? (uint64_t)n : UINT64_MAX);
  krt_b2b_update(s, len, sizeof len);
  if (data) krt_b2b_update(s, data, n);
}

static void kcache_absorb_str(krt_b2b *s, const char *str) {
  kcache_absorb(s, str, str ? strlen(str) : 0);
}

void kcache_key_make(const kcache_key_parts *parts, kcache_key *out) {
  krt_b2b s;
  krt_b2b_init(&s);
  kcache_absorb_str(&s, "kiln kernel cache key");
  uint8_t format[4];
  krt_store32(format, KCACHE_FORMAT);
  kcache_absorb(&s, format, sizeof format);
  kcache_absorb_str(&s, kiln_version());
  kcache_absorb_str(&s, parts->target);
  kcache_absorb_str(&s, parts->compiler);
  uint8_t count[8];
  krt_store64(count, (uint64_t)(parts->num_options > 0 ? parts->num_options : 0));
  kcache_absorb(&s, count, sizeof count);
  for (int i = 0; i < parts->num_options; i++) kcache_absorb_str(&s, parts->options[i]);
  kcache_absorb(&s, parts->source, parts->source_size);
  krt_b2b_final(&s, out->bytes);
}

void kcache_key_hex(const kcache_key *key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[key->bytes[i] >> 4];
    out[2 * i + 1] = digits[key->bytes[i] & 15];
  }
  out[32] = '\0';
}

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
  return (size_t)krt_load64(key->bytes) & (c->num_buckets - 1);
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
      size_t j = (size_t)krt_load64(e->key.bytes) & (n - 1);
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

/* Writes all n bytes, retrying short writes and interruptions; -1 with
 * errno set on failure. */
/* Reads up to n bytes; returns how many arrived before end of file, or -1. */
static ssize_t krt_read_full(int fd, void *data, size_t n) {
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
static kiln_status krt_install_parts(const char *op, const char *path, const void *const *parts,
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
  return krt_install_parts("kcache_write_file", path, parts, &size, 1, durable);
}

static void kcache_header(uint8_t h[KCACHE_HEADER], const kcache_key *key, const void *blob,
                          size_t size) {
  memset(h, 0, KCACHE_HEADER);
  memcpy(h, kcache_magic, sizeof kcache_magic);
  krt_store32(h + 8, KCACHE_FORMAT);
  krt_store32(h + 12, KCACHE_HEADER);
  memcpy(h + 16, key->bytes, 16);
  krt_store64(h + 32, (uint64_t)size);
  krt_b2b s;
  krt_b2b_init(&s);
  krt_b2b_update(&s, h, KCACHE_SUMMED);
  krt_b2b_update(&s, blob, size);
  krt_b2b_final(&s, h + KCACHE_SUMMED);
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
  if (krt_load32(h + 8) != KCACHE_FORMAT || krt_load32(h + 12) != KCACHE_HEADER) {
    kcore_fail(KILN_ERR_IO, "%s: format %u with a %u-byte header, expected format %u (%u bytes)",
               path, krt_load32(h + 8), krt_load32(h + 12), KCACHE_FORMAT, KCACHE_HEADER);
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
  uint64_t payload = krt_load64(h + 32);
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
  ssize_t got = krt_read_full(fd, h, sizeof h);
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
  got = krt_read_full(fd, data, n);
  uint8_t sum[16];
  if (got == (ssize_t)n) {
    krt_b2b s;
    krt_b2b_init(&s);
    krt_b2b_update(&s, h, KCACHE_SUMMED);
    krt_b2b_update(&s, data, n);
    krt_b2b_final(&s, sum);
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
  if (krt_install_parts("kernel cache", path, parts, sizes, 2, true) == KILN_OK) return;
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
