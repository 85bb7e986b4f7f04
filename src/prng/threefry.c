/* Threefry keys: seeding, split and fold_in, as jax.random does them. */
#include "core/core.h"
#include "prng/prng.h"
/* The round function lives with the device kernels so both run one source. */
#include "../../kernels/threefry.h"

void kprng_threefry2x32(const uint32_t key[2], uint32_t x[2]) {
  kiln_threefry2x32(key[0], key[1], &x[0], &x[1]);
}

kiln_status kprng_key_from_seed(int64_t seed, uint32_t key[2]) {
  if (!key) return kcore_fail(KILN_ERR_ARGUMENT, "random_seed: key output is NULL");
  /* JAX: (seed >> 32 logical, seed & 0xffffffff), i.e. the bits of the seed. */
  uint64_t bits = (uint64_t)seed;
  key[0] = (uint32_t)(bits >> 32);
  key[1] = (uint32_t)bits;
  return KILN_OK;
}

kiln_status kprng_key_from_seed32(int32_t seed, uint32_t key[2]) {
  if (!key) return kcore_fail(KILN_ERR_ARGUMENT, "random_seed: key output is NULL");
  /* A logical shift of a 32-bit value by 32 yields 0 in XLA, so a negative
   * 32-bit seed is not sign-extended into the high word. */
  key[0] = 0;
  key[1] = (uint32_t)seed;
  return KILN_OK;
}

kiln_status kprng_split(const uint32_t key[2], size_t n, uint32_t *out) {
  if (!key) return kcore_fail(KILN_ERR_ARGUMENT, "random_split: key is NULL");
  if (n > 0 && !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "random_split: output is NULL for %zu keys", n);
  if (n > SIZE_MAX / 2)
    return kcore_fail(KILN_ERR_SIZE_OVERFLOW, "random_split: %zu keys overflow the output size", n);
  /* Partitionable split: new key i is the whole block for counter i. */
  const uint32_t k0 = key[0], k1 = key[1];
  for (size_t i = 0; i < n; i++)
    kiln_threefry_block_at(k0, k1, (uint64_t)i, &out[2 * i], &out[2 * i + 1]);
  return KILN_OK;
}

kiln_status kprng_fold_in(const uint32_t key[2], uint32_t data, uint32_t out[2]) {
  if (!key || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "random_fold_in: %s is NULL", key ? "output" : "key");
  /* JAX hashes the seed words of data, (0, data), under the key. */
  uint32_t x[2] = {0, data};
  kiln_threefry2x32(key[0], key[1], &x[0], &x[1]);
  out[0] = x[0];
  out[1] = x[1];
  return KILN_OK;
}
