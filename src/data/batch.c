/* Shuffling as jax.random.permutation does it, and batches of rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"
#include "prng/prng.h"

typedef struct sort_item {
  uint32_t key;
  int64_t value;
} sort_item;

static int item_cmp(const void *a, const void *b) {
  const sort_item *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key;
}

/* Stable merge sort by key (qsort is not stable; JAX's sort_key_val is). */
static void merge_sort(sort_item *a, sort_item *tmp, size_t n) {
  if (n < 2) return;
  size_t h = n / 2;
  merge_sort(a, tmp, h);
  merge_sort(a + h, tmp, n - h);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = item_cmp(&a[j], &a[i]) < 0 ? a[j++] : a[i++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, n * sizeof *a);
}

/* JAX's _shuffle: ceil(3 ln(n) / ln(2^32 - 1)) rounds; each splits the key
 * into (key, subkey), draws 32 random bits per element from subkey and
 * stably sorts the elements by them. */
kiln_status kiln_permutation(const uint32_t key[2], int64_t n, int64_t *out) {
  const char *op = "kiln_permutation";
  if (!key || (n > 0 && !out)) return kcore_fail(KILN_ERR_ARGUMENT, "%s: key or out is NULL", op);
  if (n < 0) return kcore_fail(KILN_ERR_ARGUMENT, "%s: n = %lld is negative", op, (long long)n);
  if (n == 0) return KILN_OK;
  int rounds = (int)ceil(3.0 * log((double)n) / log(4294967295.0));
  sort_item *items = malloc((size_t)n * sizeof *items);
  sort_item *tmp = malloc((size_t)n * sizeof *tmp);
  uint32_t *bits = malloc((size_t)n * sizeof *bits);
  kiln_status s = KILN_OK;
  if (!items || !tmp || !bits) {
    s = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for n = %lld", op, (long long)n);
    goto done;
  }
  for (int64_t i = 0; i < n; i++) items[i].value = i;
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < rounds; r++) {
    uint32_t split[4];
    if ((s = kprng_split(k, 2, split)) != KILN_OK) goto done;
    k[0] = split[0];
    k[1] = split[1];
    if ((s = kprng_random_bits(split + 2, 32, 1, &n, bits)) != KILN_OK) goto done;
    for (int64_t i = 0; i < n; i++) items[i].key = bits[i];
    merge_sort(items, tmp, (size_t)n);
  }
  for (int64_t i = 0; i < n; i++) out[i] = items[i].value;
done:
  free(items);
  free(tmp);
  free(bits);
  return s;
}

int64_t kiln_batch_count(int64_t n, int64_t batch_size, int drop_remainder) {
  if (n <= 0 || batch_size <= 0) return 0;
  return drop_remainder ? n / batch_size : (n + batch_size - 1) / batch_size;
}

kiln_status kiln_host_data_batch(const kiln_host_data *src, const int64_t *order,
                                 int64_t batch_size, int64_t index, kiln_host_data *out) {
  const char *op = "kiln_host_data_batch";
  if (!src || !src->data || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: src, its data or out is NULL", op);
  if (src->rank < 1) return kcore_fail(KILN_ERR_SHAPE, "%s: src is a scalar (rank 0)", op);
  int64_t n = src->shape[0];
  if (batch_size <= 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: batch_size %lld is not positive", op,
                      (long long)batch_size);
  int64_t count = kiln_batch_count(n, batch_size, 0);
  if (index < 0 || index >= count)
    return kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: batch %lld of %lld (%lld rows, batch_size %lld)",
                      op, (long long)index, (long long)count, (long long)n, (long long)batch_size);
  int64_t first = index * batch_size;
  int64_t rows = n - first < batch_size ? n - first : batch_size;
  size_t row_bytes = n ? src->nbytes / (size_t)n : 0;
  int64_t shape[KILN_MAX_RANK];
  memcpy(shape, src->shape, sizeof shape);
  shape[0] = rows;
  kiln_status s = kdata_alloc(op, src->dtype, src->rank, shape, out);
  if (s != KILN_OK) return s;
  for (int64_t r = 0; r < rows; r++) {
    int64_t from = order ? order[first + r] : first + r;
    if (from < 0 || from >= n) {
      kiln_host_data_free(out);
      return kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: order[%lld] = %lld is outside 0..%lld", op,
                        (long long)(first + r), (long long)from, (long long)(n - 1));
    }
    memcpy((char *)out->data + (size_t)r * row_bytes, (const char *)src->data + (size_t)from * row_bytes,
           row_bytes);
  }
  return KILN_OK;
}
