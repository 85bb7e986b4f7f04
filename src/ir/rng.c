/* Random numbers: JAX's threefry2x32 primitive. Keys, splitting and
 * random_bits are trace-level compositions of it (and of shifts, iota and
 * bitcasts), as in JAX; the bit-exact host reference is src/prng. */
#include "core/core.h"
#include "ir/ir.h"
#include "prng/prng.h"

/* threefry2x32(key1, key2, x1, x2) -> (y1, y2): all uint32, shapes that
 * broadcast the lax way (rank-0 operands and size-1 dimensions); the two
 * results share the broadcast shape and are never weak. */
kiln_status kir_rule_threefry2x32(kir_prim prim, const kir_params *params, int n_in,
                                  const kir_aval *in, kir_avals *out) {
  (void)params;
  for (int i = 0; i < n_in; i++) {
    if (in[i].dtype != KILN_U32) {
      char t[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_DTYPE, "threefry2x32: operand %d has type %s, not uint32", i,
                        kir_aval_str(&in[i], t, sizeof t));
    }
  }
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kiln_status st = kir_broadcast_shapes(prim, n_in, in, &rank, shape);
  if (st == KILN_OK) st = kir_push(out, KILN_U32, rank, shape, false);
  if (st == KILN_OK) st = kir_push(out, KILN_U32, rank, shape, false);
  return st;
}

/* ---- reference evaluators ---- */

/* threefry2x32 over the broadcast shape: each operand is walked with
 * stride 0 along the dimensions it broadcasts (rank 0, or size 1). */
static kiln_status eval_threefry2x32(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                     void *ctx) {
  (void)e;
  (void)ctx;
  const kir_aval *o = &out[0].aval;
  int rank = o->rank;
  int64_t stride[4][KIR_MAX_RANK], idx[KIR_MAX_RANK] = {0}, off[4] = {0};
  for (int k = 0; k < 4; k++) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
      bool spread = in[k].aval.rank == rank && in[k].aval.shape[d] == o->shape[d];
      stride[k][d] = spread ? s : 0;
      if (in[k].aval.rank == rank) s *= in[k].aval.shape[d];
    }
  }
  const uint32_t *src[4];
  for (int k = 0; k < 4; k++) src[k] = in[k].data;
  uint32_t *y0 = out[0].data, *y1 = out[1].data;
  int64_t n = kir_aval_size(o);
  for (int64_t i = 0; i < n; i++) {
    uint32_t key[2] = {src[0][off[0]], src[1][off[1]]}, x[2] = {src[2][off[2]], src[3][off[3]]};
    kprng_threefry2x32(key, x);
    y0[i] = x[0];
    y1[i] = x[1];
    /* next index, row-major, moving each operand's offset along */
    for (int d = rank - 1; d >= 0; d--) {
      for (int k = 0; k < 4; k++) off[k] += stride[k][d];
      if (++idx[d] < o->shape[d]) break;
      for (int k = 0; k < 4; k++) off[k] -= stride[k][d] * o->shape[d];
      idx[d] = 0;
    }
  }
  return KILN_OK;
}

void kir_rng_evals(kir_eval_table *t) { t->fn[KIR_PRIM_THREEFRY2X32] = eval_threefry2x32; }
