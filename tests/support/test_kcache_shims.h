/* C shims for test_kernel_cache.cc and test_cc_jit.cc: the kernel cache and
 * the host compiler are declared in runtime/runtime.h and
 * backend/cpu/cpu_backend.h, which use C11 atomics that C++ cannot read, so
 * the tests reach them through these plain-typed wrappers (keys as 16 bytes). */
#ifndef KILN_TEST_KCACHE_SHIMS_H
#define KILN_TEST_KCACHE_SHIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kcache kcache;
typedef struct kcpu_cc kcpu_cc;
typedef struct kcpu_cc_module kcpu_cc_module;

typedef struct kcache_test_stats {
  uint64_t memory_hits, disk_hits, builds, corrupt_files, write_failures;
} kcache_test_stats;

typedef kiln_status (*kcache_test_build_fn)(void *user, void **blob, size_t *size);

/* ---- runtime/kernel_cache.c ---- */
void kcache_test_digest(const void *data, size_t size, uint8_t out[16]);
void kcache_test_key(const char *source, const char *target, const char *compiler,
                     const char *const *options, int num_options, uint8_t out[16]);
void kcache_test_hex(const uint8_t key[16], char out[33]);
kiln_status kcache_test_new(const char *dir, kiln_log_level level, kcache **out);
void kcache_test_free(kcache *c);
const char *kcache_test_dir(const kcache *c);
/* key NULL passes a NULL key through. */
kiln_status kcache_test_get_or_build(kcache *c, const uint8_t *key, kcache_test_build_fn build,
                                     void *user, const void **blob, size_t *size);
kiln_status kcache_test_entry_path(const kcache *c, const uint8_t key[16], char *buf, size_t cap);
void kcache_test_stats_get(kcache *c, kcache_test_stats *out);
kiln_status kcache_test_write_file(const char *path, const void *data, size_t size);

/* ---- backend/cpu/cc_jit.c ---- */
bool cc_test_available(void);
kiln_status cc_test_new(const char *dump_dir, kiln_log_level level, kcpu_cc **out);
void cc_test_free(kcpu_cc *cc);
const char *cc_test_version(const kcpu_cc *cc);
const char *cc_test_target(const kcpu_cc *cc);
const char *cc_test_flags(const kcpu_cc *cc);
/* The flags every key holds: the base (compile) flags, then the link's. */
int cc_test_key_flags(const kcpu_cc *cc, const char **out, int cap);
kiln_status cc_test_key(const kcpu_cc *cc, const char *source, const char *const *options,
                        int num_options, uint8_t out[16]);
kiln_status cc_test_compile(const kcpu_cc *cc, const char *name, const char *source,
                            const char *const *options, int num_options, void **so, size_t *size);
kiln_status cc_test_compile_cached(const kcpu_cc *cc, kcache *cache, const char *name,
                                   const char *source, const char *const *options, int num_options,
                                   const void **so, size_t *size);
kiln_status cc_test_load(const kcpu_cc *cc, const char *dir, const char *name, const void *so,
                         size_t size, kcpu_cc_module **out);
kiln_status cc_test_jit(const kcpu_cc *cc, kcache *cache, const char *name, const char *source,
                        const char *const *options, int num_options, kcpu_cc_module **out);
kiln_status cc_test_symbol(const kcpu_cc_module *m, const char *symbol, void **out);
void cc_test_unload(kcpu_cc_module *m);

#ifdef __cplusplus
}
#endif
#endif
