/* Reduction building blocks for generated kernels; pasted after the prelude
 * (kernels/prelude.h), whose combine functions (kiln_add_f32, kiln_max_i32,
 * ...) they take as COMBINE. A kernel instantiates what it uses, e.g.
 *
 *   KILN_DEFINE_WARP_REDUCE(sum_f32, float, kiln_add_f32)
 *   KILN_DEFINE_BLOCK_REDUCE(sum_f32, float, 0.0f)
 *
 * CUDA: the warp reduction is a butterfly over __shfl_xor_sync, so every lane
 * ends with the result; the block reduction reduces each warp, meets in 32
 * shared slots and reduces those again in every warp, so every thread ends
 * with the result without a broadcast. Both must be reached by every lane
 * (every thread of the block) with the same control flow.
 *
 * Host C: element loops keep KILN_LANES independent accumulators, which the
 * compiler vectorizes (one chain would need reassociation, which it may not
 * do on floats); kiln_lanes_<name> folds them as a balanced tree. */
#ifndef KILN_KERNELS_REDUCE_H
#define KILN_KERNELS_REDUCE_H

#define KILN_LANES 8

#define KILN_DEFINE_LANES_REDUCE(NAME, T, COMBINE)                                 \
  KILN_FN T kiln_lanes_##NAME(const T *a) {                                        \
    return COMBINE(COMBINE(COMBINE(a[0], a[1]), COMBINE(a[2], a[3])),              \
                   COMBINE(COMBINE(a[4], a[5]), COMBINE(a[6], a[7])));             \
  }

/* Blocked sums (src/codegen/reduce.c): an accumulator adds at most a block
 * of elements in sequence, then its value joins a pairwise cascade of block
 * totals, a binary counter over the blocks: level h of `stack` (n partials
 * per level) holds the total of 2^h blocks, so the error of a sum of b
 * blocks of B elements grows as B + log2(b), not as b * B. push adds
 * acc[0..n) as block number blk (0, 1, ...) and restarts acc at the
 * identity; end folds the levels left after `blocks` pushes into acc. Only
 * levels a push wrote are read. */
#define KILN_DEFINE_CASCADE(NAME, T, COMBINE, IDENTITY)                            \
  KILN_FN void kiln_cascade_push_##NAME(T *stack, T *acc, int n, kiln_i64 blk) {   \
    int h = 0;                                                                     \
    for (; blk & 1; blk >>= 1, ++h)                                                \
      for (int l = 0; l < n; ++l) acc[l] = COMBINE(stack[h * n + l], acc[l]);      \
    for (int l = 0; l < n; ++l) {                                                  \
      stack[h * n + l] = acc[l];                                                   \
      acc[l] = (T)(IDENTITY);                                                      \
    }                                                                              \
  }                                                                                \
  KILN_FN void kiln_cascade_end_##NAME(const T *stack, T *acc, int n, kiln_i64 blocks) { \
    for (int h = 0; (blocks >> h) != 0; ++h)                                       \
      if ((blocks >> h) & 1)                                                       \
        for (int l = 0; l < n; ++l) acc[l] = COMBINE(stack[h * n + l], acc[l]);    \
  }

#ifdef KILN_CUDA
#define KILN_FULL_MASK 0xffffffffu

/* __shfl_xor_sync moves 32- and 64-bit words; narrower types ride in an int. */
KILN_FN float kiln_shfl_xor(float v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN double kiln_shfl_xor(double v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN kiln_i32 kiln_shfl_xor(kiln_i32 v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN kiln_u32 kiln_shfl_xor(kiln_u32 v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN kiln_i64 kiln_shfl_xor(kiln_i64 v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN kiln_u64 kiln_shfl_xor(kiln_u64 v, int m) { return __shfl_xor_sync(KILN_FULL_MASK, v, m); }
KILN_FN kiln_i8 kiln_shfl_xor(kiln_i8 v, int m) {
  return (kiln_i8)__shfl_xor_sync(KILN_FULL_MASK, (int)v, m);
}
KILN_FN kiln_i16 kiln_shfl_xor(kiln_i16 v, int m) {
  return (kiln_i16)__shfl_xor_sync(KILN_FULL_MASK, (int)v, m);
}
KILN_FN kiln_u8 kiln_shfl_xor(kiln_u8 v, int m) {
  return (kiln_u8)__shfl_xor_sync(KILN_FULL_MASK, (int)v, m);
}
KILN_FN kiln_u16 kiln_shfl_xor(kiln_u16 v, int m) {
  return (kiln_u16)__shfl_xor_sync(KILN_FULL_MASK, (int)v, m);
}

#define KILN_DEFINE_WARP_REDUCE(NAME, T, COMBINE)                                  \
  KILN_FN T kiln_warp_##NAME(T v) {                                                \
    _Pragma("unroll") for (int o = 16; o > 0; o >>= 1) v = COMBINE(v, kiln_shfl_xor(v, o)); \
    return v;                                                                      \
  }

/* blockDim.x must be a multiple of 32; `scratch` is __shared__ T[32]. The
 * first barrier keeps a warp from overwriting a slot that a slower warp is
 * still reading from the previous call. */
#define KILN_DEFINE_BLOCK_REDUCE(NAME, T, IDENTITY)                                \
  KILN_FN T kiln_block_##NAME(T v, T *scratch) {                                   \
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;              \
    v = kiln_warp_##NAME(v);                                                       \
    __syncthreads();                                                               \
    if (lane == 0) scratch[warp] = v;                                              \
    __syncthreads();                                                               \
    v = lane < (blockDim.x >> 5) ? scratch[lane] : (T)(IDENTITY);                  \
    return kiln_warp_##NAME(v);                                                    \
  }

/* Tiles (REDUCE kernels): thread threadIdx.x = tr * nk + tk holds v of item
 * tk; every thread gets its item's combination over tr, in a fixed tree
 * (so a result is the same bits in every run). blockDim.x / nk must be a
 * power of two; `scratch` is __shared__ T[blockDim.x]. The first barrier
 * keeps a thread from overwriting a slot still read from the previous call. */
#define KILN_DEFINE_TILE_REDUCE(NAME, T, COMBINE)                                  \
  KILN_FN T kiln_tile_##NAME(T v, T *scratch, unsigned nk) {                       \
    const unsigned t = threadIdx.x;                                                \
    __syncthreads();                                                               \
    scratch[t] = v;                                                                \
    __syncthreads();                                                               \
    for (unsigned h = blockDim.x >> 1; h >= nk; h >>= 1) {                         \
      if (t < h) scratch[t] = COMBINE(scratch[t], scratch[t + h]);                 \
      __syncthreads();                                                             \
    }                                                                              \
    return scratch[t % nk];                                                        \
  }
#endif

#endif
