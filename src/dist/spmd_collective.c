/* One CPU device's part of a collective inside a shard_map body: its
 * operand reshaped as the collective needs (16-bit floats widened, blocks
 * moved to the front), exchanged through its rendezvous group
 * (kcpu_coll_*) and unpacked into its result. */
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"
#include "dist/dist.h"

static int64_t prod(const int64_t *v, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= v[i];
  return p;
}

/* Moves block r of dimension dim to the front: [outer][n][block] ->
 * [n][outer][block] (back = the inverse). */
static void blocks_to_front(const char *src, char *dst, int64_t outer, int64_t n, size_t block,
                            bool back) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t r = 0; r < n; r++) {
      size_t a = (size_t)(o * n + r) * block, b = (size_t)(r * outer + o) * block;
      memcpy(dst + (back ? a : b), src + (back ? b : a), block);
    }
}

kiln_status kdist_cpu_collective(kcpu_coll_group *g, int rank, int64_t n, const kir_eqn *e,
                                 const kir_buffer *in, kir_buffer *out) {
  const kir_aval *a = &in[0].aval;
  kiln_dtype dt = a->dtype;
  int64_t count = kir_aval_size(a);
  kiln_status st = KILN_OK;
  size_t es = kiln_dtype_size(dt);
  /* 16-bit floats travel as float32: XLA reduces them in float32 too. */
  bool widen = (dt == KILN_F16 || dt == KILN_BF16) && e->prim != KIR_PRIM_ALL_GATHER &&
               e->prim != KIR_PRIM_PPERMUTE && e->prim != KIR_PRIM_ALL_TO_ALL;
  int64_t out_count = kir_aval_size(&out[0].aval);
  char *src = in[0].data, *tmp = NULL, *wide_out = NULL;
  size_t tmp_bytes = (size_t)(count > out_count * n ? count : out_count * n) * (widen ? 4 : es) + 1;
  /* A plain reduction works on the device's buffers: no scratch. */
  bool scratch = widen || (e->prim != KIR_PRIM_PSUM && e->prim != KIR_PRIM_PMAX &&
                           e->prim != KIR_PRIM_PMIN && e->prim != KIR_PRIM_PPERMUTE);
  if (scratch && (!(tmp = malloc(tmp_bytes)) || !(wide_out = malloc(tmp_bytes))))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kir_prim_name(e->prim));
  if (!st && widen) {
    for (int64_t i = 0; i < count; i++) {
      float f = (float)kir_scalar_load(dt, src + (size_t)i * es).f;
      memcpy(tmp + (size_t)i * 4, &f, 4);
    }
    src = tmp, tmp = malloc(tmp_bytes), dt = KILN_F32, es = 4;
    if (!tmp) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kir_prim_name(e->prim));
  }
  char *dst = widen ? wide_out : out[0].data;
  switch (st ? KIR_NUM_PRIMS : e->prim) {
    case KIR_PRIM_PSUM:
    case KIR_PRIM_PMAX:
    case KIR_PRIM_PMIN:
      st = kcpu_coll_all_reduce(g, rank, dt, count, src, dst,
                                e->prim == KIR_PRIM_PSUM ? KCPU_COLL_SUM
                                : e->prim == KIR_PRIM_PMAX ? KCPU_COLL_MAX : KCPU_COLL_MIN);
      break;
    case KIR_PRIM_ALL_GATHER: {
      int dim = (int)e->params.all_gather.all_gather_dimension;
      st = kcpu_coll_all_gather(g, rank, dt, count, src, tmp);
      if (!st) blocks_to_front(tmp, dst, prod(a->shape, 0, dim), n,
                               (size_t)prod(a->shape, dim, a->rank) * es, true);
      break;
    }
    case KIR_PRIM_PSUM_SCATTER: {
      int dim = (int)e->params.psum_scatter.scatter_dimension;
      blocks_to_front(src, tmp, prod(a->shape, 0, dim), n,
                      (size_t)(a->shape[dim] / n * prod(a->shape, dim + 1, a->rank)) * es, false);
      st = kcpu_coll_reduce_scatter(g, rank, dt, count, tmp, dst);
      break;
    }
    case KIR_PRIM_PPERMUTE: {
      int npairs;
      int(*pairs)[2] = malloc((size_t)n * sizeof *pairs);
      st = pairs ? kir_perm_parse(e->params.ppermute.perm, n, &npairs, pairs)
                 : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "ppermute: out of host memory");
      if (!st) st = kcpu_coll_ppermute(g, rank, dt, count, src, dst, npairs, (const int(*)[2])pairs);
      free(pairs);
      break;
    }
    case KIR_PRIM_ALL_TO_ALL: {
      const kir_p_all_to_all *p = &e->params.all_to_all;
      int sa = (int)p->split_axis;
      /* chunk j (split_axis block j) goes to rank j */
      blocks_to_front(src, tmp, prod(a->shape, 0, sa), n,
                      (size_t)(a->shape[sa] / n * prod(a->shape, sa + 1, a->rank)) * es, false);
      st = kcpu_coll_all_to_all(g, rank, dt, count, tmp, wide_out);
      if (!st) kir_all_to_all_unpack(p, a, &out[0].aval, wide_out, out[0].data);
      break;
    }
    case KIR_NUM_PRIMS: break;
    default:
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: not a collective", kir_prim_name(e->prim));
  }
  if (!st && widen)
    for (int64_t i = 0; i < out_count; i++) {
      float f;
      memcpy(&f, wide_out + (size_t)i * 4, 4);
      kir_scalar_store(out[0].aval.dtype, kir_scalar_f(f), (char *)out[0].data + (size_t)i * kiln_dtype_size(out[0].aval.dtype));
    }
  if (widen) free(src);
  free(tmp);
  free(wide_out);
  return st;
}

