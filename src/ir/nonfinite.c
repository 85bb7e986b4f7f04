/* Finding NaNs and infinities in float buffers by their bits: an all-ones
 * exponent is non-finite, a non-zero mantissa with it a NaN. Integer tests
 * keep the loop free of float traps and the same for f16/bf16, which the
 * host has no arithmetic for. Blocks are first tested with a branch-free
 * OR (which the compiler vectorizes), so finite data costs one pass at
 * memory speed; only a block that holds something is counted element by
 * element. */
#include <string.h>
#include "ir/ir.h"

#define KIR_NONFINITE_BLOCK 4096

/* Full blocks run the OR over a constant count (vectorized at -O2); the
 * tail and any block that holds something are counted one by one. */
#define KIR_NONFINITE_LOOP(T, EXP, MAN)                                       \
  do {                                                                        \
    const T *v = data;                                                        \
    for (int64_t b = 0; b < n; b += KIR_NONFINITE_BLOCK) {                    \
      int64_t end = n - b < KIR_NONFINITE_BLOCK ? n : b + KIR_NONFINITE_BLOCK; \
      if (end - b == KIR_NONFINITE_BLOCK) {                                   \
        const T *blk = v + b;                                                 \
        T any = 0;                                                            \
        for (int i = 0; i < KIR_NONFINITE_BLOCK; i++)                         \
          any |= (T)((blk[i] & (EXP)) == (EXP));                              \
        if (!any) continue;                                                   \
      }                                                                       \
      for (int64_t i = b; i < end; i++) {                                     \
        T bits = v[i];                                                        \
        if ((bits & (EXP)) != (EXP)) continue;                                \
        if (bits & (MAN)) {                                                   \
          if (out->nan++ == 0) out->first_nan = i;                            \
        } else if (out->inf++ == 0) {                                         \
          out->first_inf = i;                                                 \
        }                                                                     \
      }                                                                       \
    }                                                                         \
  } while (0)

void kir_nonfinite_scan(kiln_dtype dtype, const void *data, int64_t n, kir_nonfinite *out) {
  memset(out, 0, sizeof *out);
  out->first_nan = out->first_inf = -1;
  if (!data || n <= 0) return;
  switch (dtype) {
    case KILN_F16:
      KIR_NONFINITE_LOOP(uint16_t, 0x7C00u, 0x03FFu);
      break;
    case KILN_BF16:
      KIR_NONFINITE_LOOP(uint16_t, 0x7F80u, 0x007Fu);
      break;
    case KILN_F32:
      KIR_NONFINITE_LOOP(uint32_t, 0x7F800000u, 0x007FFFFFu);
      break;
    case KILN_F64:
      KIR_NONFINITE_LOOP(uint64_t, 0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull);
      break;
    default:
      break;
  }
}
