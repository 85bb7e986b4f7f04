/* Random numbers: JAX's threefry2x32 primitive. Keys, splitting and
 * random_bits are trace-level compositions of it (and of shifts, iota and
 * bitcasts), as in JAX; the bit-exact host reference is src/prng. */
#include "core/core.h"
#include "ir/ir.h"

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

void kir_rng_evals(kir_eval_table *t) { (void)t; }
