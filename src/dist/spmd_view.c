/* Where a device's shard lies inside the global buffer when it is one
 * contiguous run (replicated values, splits of the leading dimensions), so
 * that the CPU shard_map runner reads operands and writes results in place
 * instead of copying them. */
#include "dist/dist.h"

bool kdist_shard_view(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                      const kir_buffer *global, const kir_aval *shard, void **data) {
  const int64_t *g = global->aval.shape;
  int r = shard->rank, j = 0;
  if (!global->data || global->aval.rank != r || kir_aval_size(shard) == 0) return false;
  while (j < r && shard->shape[j] == g[j]) j++;
  int64_t outer = 1, inner = 1, start = 0;
  for (int i = 0; i < j; i++) outer *= g[i];
  for (int i = j + 1; i < r; i++)
    if (shard->shape[i] != g[i]) return false;
    else inner *= g[i];
  if (j < r && outer != 1) return false; /* the shard spans several outer rows */
  if (j < r) {
    for (int k = 0; j < spec->rank && k < spec->n_axes[j]; k++) {
      int a = spec->axes[j][k];
      start = start * m->size[a] + coords[a];
    }
    start *= shard->shape[j];
  }
  *data = (char *)global->data + (size_t)(start * inner) * kiln_dtype_size(shard->dtype);
  return true;
}
