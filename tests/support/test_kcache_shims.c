/* Plain-typed wrappers over the kernel cache and the host compiler. */
#include "test_kcache_shims.h"
#include <string.h>
#include "backend/cpu/cpu_backend.h"

static kcache_key kcache_test_key_of(const uint8_t bytes[16]) {
  kcache_key k;
  memcpy(k.bytes, bytes, sizeof k.bytes);
  return k;
}

void kcache_test_digest(const void *data, size_t size, uint8_t out[16]) {
  kcache_key k;
  kcache_digest(data, size, &k);
  memcpy(out, k.bytes, 16);
}

void kcache_test_key(const char *source, const char *target, const char *compiler,
                     const char *const *options, int num_options, uint8_t out[16]) {
  kcache_key_parts parts = {source,     source ? strlen(source) : 0, target, compiler, options,
                            num_options};
  kcache_key k;
  kcache_key_make(&parts, &k);
  memcpy(out, k.bytes, 16);
}

void kcache_test_hex(const uint8_t key[16], char out[33]) {
  kcache_key k = kcache_test_key_of(key);
  kcache_key_hex(&k, out);
}

kiln_status kcache_test_new(const char *dir, kiln_log_level level, kcache **out) {
  return kcache_new(dir, level, out);
}

void kcache_test_free(kcache *c) { kcache_free(c); }

const char *kcache_test_dir(const kcache *c) { return kcache_dir(c); }

kiln_status kcache_test_get_or_build(kcache *c, const uint8_t *key, kcache_test_build_fn build,
                                     void *user, const void **blob, size_t *size) {
  kcache_key k;
  if (key) k = kcache_test_key_of(key);
  return kcache_get_or_build(c, key ? &k : NULL, build, user, blob, size);
}

kiln_status kcache_test_entry_path(const kcache *c, const uint8_t key[16], char *buf, size_t cap) {
  kcache_key k = kcache_test_key_of(key);
  return kcache_entry_path(c, &k, buf, cap);
}

void kcache_test_stats_get(kcache *c, kcache_test_stats *out) {
  kcache_stats s;
  kcache_stats_get(c, &s);
  *out = (kcache_test_stats){s.memory_hits, s.disk_hits, s.builds, s.corrupt_files,
                             s.write_failures};
}

kiln_status kcache_test_write_file(const char *path, const void *data, size_t size) {
  return kcache_write_file(path, data, size, true);
}

bool cc_test_available(void) { return kcpu_cc_available(); }

kiln_status cc_test_new(const char *dump_dir, kiln_log_level level, kcpu_cc **out) {
  return kcpu_cc_new(dump_dir, level, out);
}

void cc_test_free(kcpu_cc *cc) { kcpu_cc_free(cc); }
const char *cc_test_version(const kcpu_cc *cc) { return kcpu_cc_version(cc); }
const char *cc_test_target(const kcpu_cc *cc) { return kcpu_cc_target(cc); }
const char *cc_test_flags(const kcpu_cc *cc) { return kcpu_cc_flags(cc); }

int cc_test_key_flags(const kcpu_cc *cc, const char **out, int cap) {
  int n = 0;
  for (int i = 0; i < KCPU_CC_NUM_BASE_FLAGS && n < cap; i++) out[n++] = kcpu_cc_base_flags[i];
  for (int i = 0; i < cc->num_link_flags && n < cap; i++) out[n++] = cc->link_flags[i];
  return n;
}

kiln_status cc_test_key(const kcpu_cc *cc, const char *source, const char *const *options,
                        int num_options, uint8_t out[16]) {
  kcache_key k;
  kiln_status st = kcpu_cc_key(cc, source, options, num_options, &k);
  if (st == KILN_OK) memcpy(out, k.bytes, 16);
  return st;
}

kiln_status cc_test_compile(const kcpu_cc *cc, const char *name, const char *source,
                            const char *const *options, int num_options, void **so, size_t *size) {
  return kcpu_cc_compile(cc, name, source, options, num_options, so, size);
}

kiln_status cc_test_compile_cached(const kcpu_cc *cc, kcache *cache, const char *name,
                                   const char *source, const char *const *options, int num_options,
                                   const void **so, size_t *size) {
  return kcpu_cc_compile_cached(cc, cache, name, source, options, num_options, so, size);
}

kiln_status cc_test_load(const kcpu_cc *cc, const char *dir, const char *name, const void *so,
                         size_t size, kcpu_cc_module **out) {
  return kcpu_cc_load(cc, dir, name, so, size, out);
}

kiln_status cc_test_jit(const kcpu_cc *cc, kcache *cache, const char *name, const char *source,
                        const char *const *options, int num_options, kcpu_cc_module **out) {
  return kcpu_cc_jit(cc, cache, name, source, options, num_options, out);
}

kiln_status cc_test_symbol(const kcpu_cc_module *m, const char *symbol, void **out) {
  return kcpu_cc_symbol(m, symbol, out);
}

void cc_test_unload(kcpu_cc_module *m) { kcpu_cc_unload(m); }
