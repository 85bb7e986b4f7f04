/* Digests and keys of the kernel cache: BLAKE2b (RFC 7693) with 16-byte
 * output, written out here so the cache depends on nothing outside kiln. */
#include <string.h>
#include "kcache/kcache.h"

/* ---- BLAKE2b (RFC 7693), 16-byte digests ---- */

static const uint64_t kcache_b2b_iv[8] = {
    0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
    0x510e527fade682d1ull, 0x9b05688c2b3e6c1full, 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};

static const uint8_t kcache_b2b_sigma[12][16] = {
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

uint64_t kcache_load64(const uint8_t *p) {
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

void kcache_store64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t kcache_load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void kcache_store32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t kcache_rotr64(uint64_t x, int n) { return x >> n | x << (64 - n); }

static inline void kcache_hasher_mix(uint64_t *v, int a, int b, int c, int d, uint64_t x,
                                     uint64_t y) {
  v[a] = v[a] + v[b] + x;
  v[d] = kcache_rotr64(v[d] ^ v[a], 32);
  v[c] = v[c] + v[d];
  v[b] = kcache_rotr64(v[b] ^ v[c], 24);
  v[a] = v[a] + v[b] + y;
  v[d] = kcache_rotr64(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = kcache_rotr64(v[b] ^ v[c], 63);
}

static void kcache_hasher_compress(kcache_hasher *s, bool last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; i++) m[i] = kcache_load64(s->buf + 8 * i);
  for (int i = 0; i < 8; i++) {
    v[i] = s->h[i];
    v[i + 8] = kcache_b2b_iv[i];
  }
  v[12] ^= s->t; /* the high word of the counter stays zero */
  if (last) v[14] = ~v[14];
  for (int r = 0; r < 12; r++) {
    const uint8_t *g = kcache_b2b_sigma[r];
    kcache_hasher_mix(v, 0, 4, 8, 12, m[g[0]], m[g[1]]);
    kcache_hasher_mix(v, 1, 5, 9, 13, m[g[2]], m[g[3]]);
    kcache_hasher_mix(v, 2, 6, 10, 14, m[g[4]], m[g[5]]);
    kcache_hasher_mix(v, 3, 7, 11, 15, m[g[6]], m[g[7]]);
    kcache_hasher_mix(v, 0, 5, 10, 15, m[g[8]], m[g[9]]);
    kcache_hasher_mix(v, 1, 6, 11, 12, m[g[10]], m[g[11]]);
    kcache_hasher_mix(v, 2, 7, 8, 13, m[g[12]], m[g[13]]);
    kcache_hasher_mix(v, 3, 4, 9, 14, m[g[14]], m[g[15]]);
  }
  for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

void kcache_hasher_init(kcache_hasher *s) {
  memset(s, 0, sizeof *s);
  memcpy(s->h, kcache_b2b_iv, sizeof s->h);
  s->h[0] ^= 0x01010000u | 16u; /* fanout 1, depth 1, no key, 16-byte digest */
}

void kcache_hasher_update(kcache_hasher *s, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n > 0) {
    /* A full buffer is compressed only once more input arrives: the last
     * block must be compressed with the final flag. */
    if (s->fill == sizeof s->buf) {
      s->t += sizeof s->buf;
      kcache_hasher_compress(s, false);
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

void kcache_hasher_final(kcache_hasher *s, uint8_t out[16]) {
  s->t += s->fill;
  memset(s->buf + s->fill, 0, sizeof s->buf - s->fill);
  kcache_hasher_compress(s, true);
  kcache_store64(out, s->h[0]);
  kcache_store64(out + 8, s->h[1]);
}

void kcache_digest(const void *data, size_t size, kcache_key *out) {
  kcache_hasher s;
  kcache_hasher_init(&s);
  kcache_hasher_update(&s, data, size);
  kcache_hasher_final(&s, out->bytes);
}

/* ---- keys ---- */

/* Each part is length-prefixed, so ("ab", "c") and ("a", "bc") differ;
 * NULL is told apart from "" by a length no string has. */
static void kcache_absorb(kcache_hasher *s, const void *data, size_t n) {
  uint8_t len[8];
  kcache_store64(len, data ? (uint64_t)n : UINT64_MAX);
  kcache_hasher_update(s, len, sizeof len);
  if (data) kcache_hasher_update(s, data, n);
}

static void kcache_absorb_str(kcache_hasher *s, const char *str) {
  kcache_absorb(s, str, str ? strlen(str) : 0);
}

void kcache_key_make(const kcache_key_parts *parts, kcache_key *out) {
  kcache_hasher s;
  kcache_hasher_init(&s);
  kcache_absorb_str(&s, "kiln kernel cache key");
  uint8_t format[4];
  kcache_store32(format, KCACHE_FORMAT);
  kcache_absorb(&s, format, sizeof format);
  kcache_absorb_str(&s, kiln_version());
  kcache_absorb_str(&s, parts->target);
  kcache_absorb_str(&s, parts->compiler);
  uint8_t count[8];
  kcache_store64(count, (uint64_t)(parts->num_options > 0 ? parts->num_options : 0));
  kcache_absorb(&s, count, sizeof count);
  for (int i = 0; i < parts->num_options; i++) kcache_absorb_str(&s, parts->options[i]);
  kcache_absorb(&s, parts->source, parts->source_size);
  kcache_hasher_final(&s, out->bytes);
}

void kcache_key_hex(const kcache_key *key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[key->bytes[i] >> 4];
    out[2 * i + 1] = digits[key->bytes[i] & 15];
  }
  out[32] = '\0';
}
