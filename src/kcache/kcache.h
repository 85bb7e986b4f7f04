/* kcache: compiled kernels (host shared objects, cubins) by a 128-bit key:
 * in memory, then on disk, one checksummed file per key installed by rename.
 * Safe for concurrent threads (a key is built once per process: others wait
 * for it) and for processes sharing one directory (one of their files wins).
 * The only door of src/kcache; prefix kcache_. It depends on core alone, so
 * the backends and the runtime share one cache without depending on each
 * other. */
#ifndef KILN_SRC_KCACHE_H
#define KILN_SRC_KCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names in the cache directory that contain this are temporary files; those
 * older than an hour were left by a crash and are removed by kcache_new. */
#define KCACHE_TEMP_MARK ".kiln.tmp-"

typedef struct kcache_key {
  uint8_t bytes[16];
} kcache_key;

/* Everything a compiled kernel depends on; kcache_key_make adds kiln's
 * version and the cache's format version. */
typedef struct kcache_key_parts {
  const void *source;
  size_t source_size;
  const char *target;   /* "sm_90", or a host triple with -march=native and its CPU */
  const char *compiler; /* the compiler's version string */
  const char *const *options;
  int num_options;
} kcache_key_parts;

/* BLAKE2b-128 over the length-prefixed parts. */
void kcache_key_make(const kcache_key_parts *parts, kcache_key *out);
/* BLAKE2b with a 16-byte digest (RFC 7693) of `size` bytes. */
void kcache_digest(const void *data, size_t size, kcache_key *out);
/* 32 lowercase hex digits and a NUL. */
void kcache_key_hex(const kcache_key *key, char out[33]);

typedef struct kcache kcache;

typedef struct kcache_stats {
  uint64_t memory_hits;    /* served from memory, waits for another thread's build included */
  uint64_t disk_hits;      /* valid files loaded */
  uint64_t builds;         /* calls to a build function */
  uint64_t corrupt_files;  /* files that failed a check, were reported and removed */
  uint64_t write_failures; /* kernels that could not be stored (kept in memory) */
} kcache_stats;

/* Produces the compiled bytes on a miss: *blob from malloc, owned by the
 * cache from then on. A failure sets the message, which threads waiting for
 * the same key receive as well. */
typedef kiln_status (*kcache_build_fn)(void *user, void **blob, size_t *size);

/* `dir` is created (0700) if needed. NULL or "" means memory only, and so
 * does a directory that cannot be created or written, with a warning. */
kiln_status kcache_new(const char *dir, kiln_log_level level, kcache **out);
/* Frees every kernel; no thread may be inside get_or_build. */
void kcache_free(kcache *c);
/* The directory in use; NULL when memory-only. */
const char *kcache_dir(const kcache *c);
/* The kernel for `key`: from memory, else from disk, else built by `build`
 * and stored. *blob stays valid until kcache_free. A corrupt or
 * unreadable file and a failed store are warnings, never failures. A build
 * may use the cache for other keys, never for its own (it would wait for
 * itself); after a failed build the next call for the key builds again. */
kiln_status kcache_get_or_build(kcache *c, const kcache_key *key, kcache_build_fn build, void *user,
                                const void **blob, size_t *size);
/* The file that holds (or would hold) `key`; KILN_ERR_ARGUMENT when memory-only. */
kiln_status kcache_entry_path(const kcache *c, const kcache_key *key, char *buf, size_t cap);
void kcache_stats_get(kcache *c, kcache_stats *out);
/* Writes a whole file atomically: a temporary file in the same directory,
 * renamed over `path`; `durable` syncs the data before the rename.
 * KILN_ERR_IO names the path and the system's reason. */
kiln_status kcache_write_file(const char *path, const void *data, size_t size, bool durable);

/* Writes `source` to "<dir>/<name>.<16 hex digits of its digest>.<ext>",
 * creating `dir` (one level) when missing: named by content so that runs and
 * processes agree. *path (malloc'ed) is the file, when path is not NULL.
 * For KILN_DUMP_DIR. */
kiln_status kcache_dump_source(const char *dir, const char *name, const char *ext,
                               const char *source, char **path);

/* ---- shared by the files of src/kcache only ---- */

#define KCACHE_FORMAT 1u /* of keys and entry files: bumping it drops old entries */

/* BLAKE2b-128, fed in pieces (digest.c). */
typedef struct kcache_hasher {
  uint64_t h[8];
  uint64_t t; /* bytes compressed so far (inputs stay far below 2^64) */
  uint8_t buf[128];
  size_t fill;
} kcache_hasher;

void kcache_hasher_init(kcache_hasher *s);
void kcache_hasher_update(kcache_hasher *s, const void *data, size_t n);
void kcache_hasher_final(kcache_hasher *s, uint8_t out[16]);
/* Little-endian loads and stores. */
uint64_t kcache_load64(const uint8_t *p);
void kcache_store64(uint8_t *p, uint64_t v);
uint32_t kcache_load32(const uint8_t *p);
void kcache_store32(uint8_t *p, uint32_t v);

/* files.c: reads up to n bytes (fewer at end of file), -1 on error; writes
 * the parts into a temporary file beside `path` renamed over it. */
ssize_t kcache_read_full(int fd, void *data, size_t n);
kiln_status kcache_install_parts(const char *op, const char *path, const void *const *parts,
                                 const size_t *sizes, int num_parts, bool durable);

#ifdef __cplusplus
}
#endif

#endif
