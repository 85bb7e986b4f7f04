/* prng: JAX's threefry2x32 random numbers on host buffers, bit for bit.
 * The only door of src/prng; prefix kprng_.
 *
 * A key is two uint32 words, the data of a legacy jax.random.PRNGKey. Every
 * draw follows jax_threefry_partitionable=True, JAX's default: element i (in
 * row-major order) of any output depends only on the key and i. Outputs are
 * dense row-major buffers the caller owns, sized for the shape's element
 * count. These functions are the reference semantics that the IR's rng rules
 * and the generated kernels (kernels/threefry.h) are tested against. */
#ifndef KILN_SRC_PRNG_H
#define KILN_SRC_PRNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kiln/dtype.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- keys ---- */

/* jax.random.PRNGKey(seed) for a 64-bit seed (jax_enable_x64=True): the key
 * is the seed's two's-complement bits, high word first, so -1 gives
 * (0xffffffff, 0xffffffff). */
kiln_status kprng_key_from_seed(int64_t seed, uint32_t key[2]);
/* PRNGKey(seed) for a 32-bit seed (an int32 array, or any Python int with
 * x64 disabled): the high word is 0, so -1 gives (0, 0xffffffff). */
kiln_status kprng_key_from_seed32(int32_t seed, uint32_t key[2]);
/* jax.random.split(key, n): n keys, 2*n words. split(key, (a, b)) is the
 * same words as split(key, a*b). n == 0 writes nothing (out may be NULL). */
kiln_status kprng_split(const uint32_t key[2], size_t n, uint32_t *out);
/* jax.random.fold_in(key, data); out may alias key. */
kiln_status kprng_fold_in(const uint32_t key[2], uint32_t data, uint32_t out[2]);

/* ---- draws ---- */

/* jax.random.bits: bit_width 8, 16, 32 or 64 selects uint8..uint64 output. */
kiln_status kprng_random_bits(const uint32_t key[2], int bit_width, int rank, const int64_t *shape,
                              void *out);
/* jax.random.uniform(key, shape, dtype, minval, maxval) for f16, bf16, f32
 * and f64. minval and maxval are rounded to dtype first, as JAX converts
 * them (half types through f32, as with x64 disabled: a value just off a
 * half-way point can round differently from JAX with x64 enabled). The
 * scale-and-shift rounds like XLA:CPU on an FMA host: one fused
 * multiply-add for f16 (in f32), f32 and f64, per-operation rounding for
 * bf16. With the default [0, 1) every path is exact. */
kiln_status kprng_uniform(const uint32_t key[2], kiln_dtype dtype, int rank, const int64_t *shape,
                          double minval, double maxval, void *out);
/* jax.random.normal: sqrt(2) * erf_inv(u), u uniform on (-1, 1), with
 * erf_inv evaluated as XLA:CPU does (see kprng_erf_inv_f32). f16, bf16 and
 * f32 results are JAX's bit for bit; f64 ones too where libm's log is
 * correctly rounded (glibc), and within JAX's f64 tolerance elsewhere. */
kiln_status kprng_normal(const uint32_t key[2], kiln_dtype dtype, int rank, const int64_t *shape,
                         void *out);
/* jax.random.bernoulli(key, p, shape) in its default mode='low':
 * uniform(p_dtype) < p, where p_dtype is the float dtype of p (float32 for a
 * Python float with x64 disabled, float64 with it enabled). */
kiln_status kprng_bernoulli(const uint32_t key[2], kiln_dtype p_dtype, double p, int rank,
                            const int64_t *shape, bool *out);

/* ---- building blocks, shared with the IR's reference rules ---- */

/* One threefry2x32 block (the threefry2x32 primitive on scalars): x is
 * encrypted in place under key. */
void kprng_threefry2x32(const uint32_t key[2], uint32_t x[2]);
/* lax.erf_inv as XLA:CPU computes it: M. Giles' single- and double-precision
 * approximations over XLA's own log1p, with XLA's FMA contractions.
 * erf_inv(+-1) = +-inf, NaN outside [-1, 1]. Half types use the f32 one. */
float kprng_erf_inv_f32(float x);
double kprng_erf_inv_f64(double x);

#ifdef __cplusplus
}
#endif
#endif
