/* Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11), exactly as JAX's threefry2x32 primitive computes
 * it, and JAX's partitionable counter scheme on top of it.
 *
 * This header is the single source of the round function: the host library
 * (src/prng) includes it as C11, and device code includes it under NVRTC or
 * nvcc. It therefore uses no headers and only built-in integer types there. */
#ifndef KILN_KERNELS_THREEFRY_H
#define KILN_KERNELS_THREEFRY_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KILN_THREEFRY_FN __host__ __device__ __forceinline__
typedef unsigned int kiln_tf_u32;
typedef unsigned long long kiln_tf_u64;
#else
#include <stdint.h>
#define KILN_THREEFRY_FN static inline
typedef uint32_t kiln_tf_u32;
typedef uint64_t kiln_tf_u64;
#endif

/* Skein's key-schedule parity constant, as Threefry uses it. */
#define KILN_THREEFRY_PARITY 0x1BD11BDAu

KILN_THREEFRY_FN kiln_tf_u32 kiln_threefry_rotl(kiln_tf_u32 x, int r) {
  return (x << r) | (x >> (32 - r));
}

/* One round: add, rotate, xor. */
KILN_THREEFRY_FN void kiln_threefry_mix(kiln_tf_u32 *a, kiln_tf_u32 *b, int r) {
  *a += *b;
  *b = kiln_threefry_rotl(*b, r) ^ *a;
}

/* Four rounds; the rotation constants alternate between two sets of four. */
KILN_THREEFRY_FN void kiln_threefry_mix4(kiln_tf_u32 *a, kiln_tf_u32 *b, int r0, int r1, int r2,
                                         int r3) {
  kiln_threefry_mix(a, b, r0);
  kiln_threefry_mix(a, b, r1);
  kiln_threefry_mix(a, b, r2);
  kiln_threefry_mix(a, b, r3);
}

/* Encrypts the counter (x0, x1) in place under the key (k0, k1). A key word
 * is injected after every four rounds, with the injection index added to the
 * second word, as in Random123 and JAX. */
KILN_THREEFRY_FN void kiln_threefry2x32(kiln_tf_u32 k0, kiln_tf_u32 k1, kiln_tf_u32 *x0,
                                        kiln_tf_u32 *x1) {
  const kiln_tf_u32 k2 = k0 ^ k1 ^ KILN_THREEFRY_PARITY;
  kiln_tf_u32 a = *x0 + k0, b = *x1 + k1;
  kiln_threefry_mix4(&a, &b, 13, 15, 26, 6);
  a += k1;
  b += k2 + 1u;
  kiln_threefry_mix4(&a, &b, 17, 29, 16, 24);
  a += k2;
  b += k0 + 2u;
  kiln_threefry_mix4(&a, &b, 13, 15, 26, 6);
  a += k0;
  b += k1 + 3u;
  kiln_threefry_mix4(&a, &b, 17, 29, 16, 24);
  a += k1;
  b += k2 + 4u;
  kiln_threefry_mix4(&a, &b, 13, 15, 26, 6);
  a += k2;
  b += k0 + 5u;
  *x0 = a;
  *x1 = b;
}

/* JAX's partitionable scheme (jax_threefry_partitionable=True): element i of
 * an output, in row-major order, is the block that encrypts the 64-bit counter
 * i split into (high word, low word). Any slice of an array can thus be
 * generated independently of the rest, which is what makes it shardable. */
KILN_THREEFRY_FN void kiln_threefry_block_at(kiln_tf_u32 k0, kiln_tf_u32 k1, kiln_tf_u64 i,
                                             kiln_tf_u32 *y0, kiln_tf_u32 *y1) {
  *y0 = (kiln_tf_u32)(i >> 32);
  *y1 = (kiln_tf_u32)i;
  kiln_threefry2x32(k0, k1, y0, y1);
}

/* 32 random bits at linear index i; 8- and 16-bit draws keep the low bits. */
KILN_THREEFRY_FN kiln_tf_u32 kiln_threefry_bits32_at(kiln_tf_u32 k0, kiln_tf_u32 k1,
                                                     kiln_tf_u64 i) {
  kiln_tf_u32 y0, y1;
  kiln_threefry_block_at(k0, k1, i, &y0, &y1);
  return y0 ^ y1;
}

/* 64 random bits at linear index i: the block's words, first word high. */
KILN_THREEFRY_FN kiln_tf_u64 kiln_threefry_bits64_at(kiln_tf_u32 k0, kiln_tf_u32 k1,
                                                     kiln_tf_u64 i) {
  kiln_tf_u32 y0, y1;
  kiln_threefry_block_at(k0, k1, i, &y0, &y1);
  return ((kiln_tf_u64)y0 << 32) | y1;
}

#endif
