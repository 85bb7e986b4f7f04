/* Device kernels of the scatter family (scatter, scatter-add, -mul, -min,
 * -max) for the CUDA target, over f32, f16, bf16 and i32, in two forms:
 *
 *  - atomic: one thread per update element, combined into the output with
 *    atomics (native atomicAdd for f32/i32 adds, atomicMin/Max for i32, a
 *    compare-and-swap loop on the aligned 32-bit word for f16/bf16 and for
 *    f32 mul/min/max). Fast; the order of repeated indices is the
 *    hardware's, so float sums are not reproducible bit for bit and `set`
 *    keeps an arbitrary one of the repeated updates (as XLA on GPU).
 *  - serial per output (the deterministic mode): one thread per output
 *    element walks every update in index order and combines those that land
 *    on it, so results are bitwise those of the reference evaluator. Work is
 *    outputs x updates: meant for training runs that need reproducibility.
 *
 * Both read the same geometry (kiln_scatter_geom, filled on the host from
 * the equation's dimension numbers and mode, src/codegen/scatter.c, and
 * baked into the kernel as the constant KILN_SCATTER_GEOM) and share the
 * index walk (kiln_scatter_target), which also compiles as C. gather walks
 * it too, with its result in the updates' place: each result element reads
 * the operand element a scatter would have written, or the fill value.
 * Every kernel has kiln's ABI (src/codegen/codegen.h): args are the
 * equation's operands then its result, one work item per element. The CUDA
 * executor runs a scatter as two kernels (NAME_copy of the operand into the
 * result, then NAME_apply; a set whose indices may repeat claims first, so
 * that the last update wins as in the reference), a gather as one. */
#ifndef KILN_KERNELS_SCATTER_H
#define KILN_KERNELS_SCATTER_H

#ifndef KILN_KERNELS_PRELUDE_H /* pasted before this file in generated kernels */
#include "prelude.h"
#endif

#define KILN_SCATTER_MAX_RANK 8

/* Where an update element lands; ranks and shapes in elements, indices
 * C-order dense with the index vector last. */
typedef struct kiln_scatter_geom {
  int x_rank, u_rank, i_rank; /* i_rank counts the index vector dimension */
  kiln_i64 x_shape[KILN_SCATTER_MAX_RANK], u_shape[KILN_SCATTER_MAX_RANK];
  kiln_i64 i_shape[KILN_SCATTER_MAX_RANK];
  int n_map, map[KILN_SCATTER_MAX_RANK];         /* scatter_dims_to_operand_dims */
  int n_window, window[KILN_SCATTER_MAX_RANK];   /* update_window_dims */
  unsigned inserted, obatch_mask;                /* operand dims: inserted / batching */
  int n_batch, obatch[KILN_SCATTER_MAX_RANK], ibatch[KILN_SCATTER_MAX_RANK];
  int mode;                                      /* 0 clip, 1 fill-or-drop, 2 promise */
  int index_bytes, index_signed;                 /* 1, 2, 4 or 8 bytes */
  int wrap32; /* gather's fill-or-drop: indices wrap to int32 first (as JAX converts them) */
} kiln_scatter_geom;

KILN_FN kiln_i64 kiln_scatter_index(const kiln_scatter_geom *g, const void *idx, kiln_i64 at) {
  const char *p = (const char *)idx;
  switch (g->index_bytes) {
    case 1: return g->index_signed ? (kiln_i64)((const kiln_i8 *)p)[at] : ((const kiln_u8 *)p)[at];
    case 2: return g->index_signed ? (kiln_i64)((const kiln_i16 *)p)[at] : ((const kiln_u16 *)p)[at];
    case 4: return g->index_signed ? (kiln_i64)((const kiln_i32 *)p)[at] : ((const kiln_u32 *)p)[at];
    default: {
      /* u64 indices past 2^63 saturate: far out of bounds, as the reference reads them */
      kiln_u64 v = ((const kiln_u64 *)p)[at];
      return g->index_signed || v <= 0x7fffffffffffffffull ? (kiln_i64)v : 0x7fffffffffffffffll;
    }
  }
}

/* The operand offset of update element u (C-order linear index); 0 if the
 * window is out of bounds and dropped (fill-or-drop, promise), else 1. */
KILN_FN int kiln_scatter_target(const kiln_scatter_geom *g, const void *idx, kiln_i64 u,
                                kiln_i64 *x_off) {
  kiln_i64 ui[KILN_SCATTER_MAX_RANK], bi[KILN_SCATTER_MAX_RANK], wi[KILN_SCATTER_MAX_RANK];
  kiln_i64 wsize[KILN_SCATTER_MAX_RANK];
  for (int d = g->u_rank - 1; d >= 0; d--) {
    ui[d] = u % g->u_shape[d];
    u /= g->u_shape[d];
  }
  /* Update dims split into window dims (in order) and scatter dims, which
   * are the indices' batch dims in order. */
  int nb = 0, nw = 0;
  for (int d = 0; d < g->u_rank; d++) {
    int is_window = 0;
    for (int k = 0; k < g->n_window; k++) is_window |= g->window[k] == d;
    if (is_window) {
      wsize[nw] = g->u_shape[d];
      wi[nw++] = ui[d];
    } else {
      bi[nb++] = ui[d];
    }
  }
  kiln_i64 vec = 0; /* offset of the index vector */
  for (int d = 0; d < g->i_rank - 1; d++) vec = vec * g->i_shape[d] + bi[d];
  vec *= g->i_shape[g->i_rank - 1];
  kiln_i64 off = 0;
  for (int d = 0, k = 0; d < g->x_rank; d++) {
    int kept = !((g->inserted | g->obatch_mask) >> d & 1u);
    kiln_i64 size = kept ? wsize[k] : 1, start = 0;
    for (int m = 0; m < g->n_map; m++)
      if (g->map[m] == d) start = kiln_scatter_index(g, idx, vec + m);
    if (g->wrap32) start = (kiln_i64)(kiln_i32)(kiln_u32)start;
    for (int b = 0; b < g->n_batch; b++)
      if (g->obatch[b] == d) start = bi[g->ibatch[b]];
    kiln_i64 hi = g->x_shape[d] - size;
    if (hi < 0) return 0;
    if (start < 0 || start > hi) {
      if (g->mode != 0) return 0;
      start = start < 0 ? 0 : hi;
    }
    off = off * g->x_shape[d] + start + (kept ? wi[k++] : 0);
  }
  *x_off = off;
  return 1;
}

/* ---- the update computations (a: the output's element, b: the update's) ---- */
#define KILN_SC_SET(a, b) (b)
#define KILN_SC_ADD(a, b) ((a) + (b))
#define KILN_SC_MUL(a, b) ((a) * (b))
/* NaN propagates; -0 orders below +0 (lax.min / lax.max). */
KILN_FN float kiln_sc_fmin(float a, float b) {
  if (a != a || b != b) return a != a ? a : b;
  if (a == b) return kiln_f32_bits(b) >> 31 ? b : a;
  return b < a ? b : a;
}
KILN_FN float kiln_sc_fmax(float a, float b) {
  if (a != a || b != b) return a != a ? a : b;
  if (a == b) return kiln_f32_bits(b) >> 31 ? a : b;
  return b > a ? b : a;
}
#define KILN_SC_MIN(a, b) kiln_sc_fmin(a, b)
#define KILN_SC_MAX(a, b) kiln_sc_fmax(a, b)
#define KILN_SC_IMIN(a, b) ((b) < (a) ? (b) : (a))
#define KILN_SC_IMAX(a, b) ((b) > (a) ? (b) : (a))

/* Integer add/mul wrap: do them on unsigned bits. */
#define KILN_SC_IADD(a, b) ((int)((unsigned)(a) + (unsigned)(b)))
#define KILN_SC_IMUL(a, b) ((int)((unsigned)(a) * (unsigned)(b)))
/* f16 / bf16 combines: in f32, rounded once. */
#define KILN_SC_H(OP, a, b) kiln_f2h(OP(kiln_h2f(a), kiln_h2f(b)))
#define KILN_SC_BH(OP, a, b) kiln_f2bh(OP(kiln_bh2f(a), kiln_bh2f(b)))
#define KILN_SC_H_ADD(a, b) KILN_SC_H(KILN_SC_ADD, a, b)
#define KILN_SC_H_MUL(a, b) KILN_SC_H(KILN_SC_MUL, a, b)
#define KILN_SC_H_MIN(a, b) KILN_SC_H(KILN_SC_MIN, a, b)
#define KILN_SC_H_MAX(a, b) KILN_SC_H(KILN_SC_MAX, a, b)
#define KILN_SC_BH_ADD(a, b) KILN_SC_BH(KILN_SC_ADD, a, b)
#define KILN_SC_BH_MUL(a, b) KILN_SC_BH(KILN_SC_MUL, a, b)
#define KILN_SC_BH_MIN(a, b) KILN_SC_BH(KILN_SC_MIN, a, b)
#define KILN_SC_BH_MAX(a, b) KILN_SC_BH(KILN_SC_MAX, a, b)

#ifdef KILN_CUDA
/* A 16-bit element combined through a CAS on its aligned 32-bit word. */
#define KILN_SC_CAS16(p, b, EXPR)                                                   \
  do {                                                                              \
    unsigned *w_ = (unsigned *)((kiln_uptr)(p) & ~(kiln_uptr)3);                    \
    unsigned sh_ = ((kiln_uptr)(p) & 2) ? 16u : 0u, old_ = *w_, as_;                \
    do {                                                                            \
      as_ = old_;                                                                   \
      kiln_half a = (kiln_half)(as_ >> sh_);                                        \
      kiln_half r_ = (EXPR);                                                        \
      old_ = atomicCAS(w_, as_, (as_ & ~(0xffffu << sh_)) | ((unsigned)r_ << sh_)); \
    } while (old_ != as_);                                                          \
  } while (0)
/* A 32-bit float combined through a CAS loop on its bits. */
#define KILN_SC_CAS32F(p, b, EXPR)                                                  \
  do {                                                                              \
    unsigned *w_ = (unsigned *)(p), old_ = *w_, as_;                                \
    do {                                                                            \
      as_ = old_;                                                                   \
      float a = __uint_as_float(as_);                                               \
      old_ = atomicCAS(w_, as_, __float_as_uint(EXPR));                             \
    } while (old_ != as_);                                                          \
  } while (0)
#define KILN_SC_CAS32I(p, b, EXPR)                                                  \
  do {                                                                              \
    int *w_ = (int *)(p), old_ = *w_, as_;                                          \
    do {                                                                            \
      as_ = old_;                                                                   \
      int a = as_;                                                                  \
      old_ = atomicCAS(w_, as_, (int)(EXPR));                                       \
    } while (old_ != as_);                                                          \
  } while (0)

/* The grid-stride loop of a kernel of kiln's ABI over items [begin, end). */
#define KILN_SC_ITEMS(i)                                                                    \
  for (long long i = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < end; \
       i += (long long)gridDim.x * blockDim.x)
#define KILN_SC_ENTRY(NAME)                             \
  extern "C" __global__ void __launch_bounds__(256) NAME( \
      kiln_kernel_args args, long long begin, long long end)

/* args: operand, indices, updates, result. NAME_copy: the operand into the
 * result, one element per item. */
#define KILN_SC_COPY_KERNEL(NAME, T)                              \
  KILN_SC_ENTRY(NAME) {                                           \
    const T *x = (const T *)args.ptr[0];                          \
    T *out = (T *)args.ptr[3];                                    \
    KILN_SC_ITEMS(i) out[i] = x[i];                               \
  }

/* One update element per item; APPLY(p, b) combines update b into *p. */
#define KILN_SC_ATOMIC_KERNEL(NAME, T, APPLY)                                     \
  KILN_SC_ENTRY(NAME) {                                                           \
    const kiln_scatter_geom g = KILN_SCATTER_GEOM;                                \
    const T *upd = (const T *)args.ptr[2];                                        \
    T *out = (T *)args.ptr[3];                                                    \
    KILN_SC_ITEMS(i) {                                                            \
      kiln_i64 off;                                                               \
      if (kiln_scatter_target(&g, args.ptr[1], i, &off)) APPLY(out + off, upd[i]); \
    }                                                                             \
  }

/* scatter (set) with indices that may repeat, as the reference: the last
 * update in index order wins. NAME_copy also clears the claims (args.ptr[4],
 * one per result element), NAME_claim has each update claim its element
 * with atomicMax of its position + 1, NAME_apply stores the winners. */
#define KILN_SC_COPY_CLEAR_KERNEL(NAME, T)                      \
  KILN_SC_ENTRY(NAME) {                                         \
    const T *x = (const T *)args.ptr[0];                        \
    T *out = (T *)args.ptr[3];                                  \
    unsigned long long *claim = (unsigned long long *)args.ptr[4]; \
    KILN_SC_ITEMS(i) {                                          \
      out[i] = x[i];                                            \
      claim[i] = 0;                                             \
    }                                                           \
  }
#define KILN_SC_CLAIM_KERNEL(NAME)                                                     \
  KILN_SC_ENTRY(NAME) {                                                                \
    const kiln_scatter_geom g = KILN_SCATTER_GEOM;                                     \
    unsigned long long *claim = (unsigned long long *)args.ptr[4];                     \
    KILN_SC_ITEMS(i) {                                                                 \
      kiln_i64 off;                                                                    \
      if (kiln_scatter_target(&g, args.ptr[1], i, &off))                               \
        atomicMax(claim + off, (unsigned long long)i + 1);                             \
    }                                                                                  \
  }
#define KILN_SC_WINNER_KERNEL(NAME, T)                                                 \
  KILN_SC_ENTRY(NAME) {                                                                \
    const kiln_scatter_geom g = KILN_SCATTER_GEOM;                                     \
    const T *upd = (const T *)args.ptr[2];                                             \
    T *out = (T *)args.ptr[3];                                                         \
    const unsigned long long *claim = (const unsigned long long *)args.ptr[4];         \
    KILN_SC_ITEMS(i) {                                                                 \
      kiln_i64 off;                                                                    \
      if (kiln_scatter_target(&g, args.ptr[1], i, &off) &&                            \
          claim[off] == (unsigned long long)i + 1)                                     \
        out[off] = upd[i];                                                             \
    }                                                                                  \
  }

/* One result element per item, every update (N_UPD of them) in index
 * order; COMBINE(a, b) is the new value. */
#define KILN_SC_SERIAL_KERNEL(NAME, T, COMBINE, N_UPD)                               \
  KILN_SC_ENTRY(NAME) {                                                              \
    const kiln_scatter_geom g = KILN_SCATTER_GEOM;                                   \
    const T *upd = (const T *)args.ptr[2];                                           \
    T *out = (T *)args.ptr[3];                                                       \
    KILN_SC_ITEMS(o) {                                                               \
      T a = out[o];                                                                  \
      for (kiln_i64 i = 0; i < (N_UPD); i++) {                                       \
        kiln_i64 off;                                                                \
        if (kiln_scatter_target(&g, args.ptr[1], i, &off) && off == o)               \
          a = COMBINE(a, upd[i]);                                                    \
      }                                                                              \
      out[o] = a;                                                                    \
    }                                                                                \
  }

/* gather: args operand, indices, result; one result element per item, the
 * operand element it names or FILL (fill-or-drop). */
#define KILN_GATHER_KERNEL(NAME, T, FILL)                                              \
  KILN_SC_ENTRY(NAME) {                                                                \
    const kiln_scatter_geom g = KILN_SCATTER_GEOM;                                     \
    const T *x = (const T *)args.ptr[0];                                               \
    T *out = (T *)args.ptr[2];                                                         \
    KILN_SC_ITEMS(i) {                                                                 \
      kiln_i64 off;                                                                    \
      out[i] = kiln_scatter_target(&g, args.ptr[1], i, &off) ? x[off] : (T)(FILL);      \
    }                                                                                  \
  }

/* The atomic applications: plain stores for set (32- and 16-bit stores are
 * atomic), native atomics where they exist, CAS loops for the rest. */
#define KILN_SC_STORE(p, b) (*(p) = (b))
#define KILN_SC_ATOMIC_ADD(p, b) atomicAdd(p, b)
#define KILN_SC_ATOMIC_IMIN(p, b) atomicMin(p, b)
#define KILN_SC_ATOMIC_IMAX(p, b) atomicMax(p, b)
#define KILN_SC_F32_MUL(p, b) KILN_SC_CAS32F(p, b, a * b)
#define KILN_SC_F32_MIN(p, b) KILN_SC_CAS32F(p, b, kiln_sc_fmin(a, b))
#define KILN_SC_F32_MAX(p, b) KILN_SC_CAS32F(p, b, kiln_sc_fmax(a, b))
#define KILN_SC_I32_MUL(p, b) KILN_SC_CAS32I(p, b, KILN_SC_IMUL(a, b))
#define KILN_SC_CAS_H_ADD(p, b) KILN_SC_CAS16(p, b, KILN_SC_H_ADD(a, b))
#define KILN_SC_CAS_H_MUL(p, b) KILN_SC_CAS16(p, b, KILN_SC_H_MUL(a, b))
#define KILN_SC_CAS_H_MIN(p, b) KILN_SC_CAS16(p, b, KILN_SC_H_MIN(a, b))
#define KILN_SC_CAS_H_MAX(p, b) KILN_SC_CAS16(p, b, KILN_SC_H_MAX(a, b))
#define KILN_SC_CAS_BH_ADD(p, b) KILN_SC_CAS16(p, b, KILN_SC_BH_ADD(a, b))
#define KILN_SC_CAS_BH_MUL(p, b) KILN_SC_CAS16(p, b, KILN_SC_BH_MUL(a, b))
#define KILN_SC_CAS_BH_MIN(p, b) KILN_SC_CAS16(p, b, KILN_SC_BH_MIN(a, b))
#define KILN_SC_CAS_BH_MAX(p, b) KILN_SC_CAS16(p, b, KILN_SC_BH_MAX(a, b))

#endif /* KILN_CUDA */

#endif
