/* kiln_visualize_sharding: a text grid of which device holds which block,
 * the way jax.debug.visualize_array_sharding draws it ("CPU 0,1" in a cell
 * held by devices 0 and 1), with plain + - | borders. */
#include <stdio.h>
#include <stdlib.h>
#include "dist/dist.h"

#define VIS_LABEL 256

typedef struct grid {
  int64_t rows, cols;
  char *labels; /* rows * cols labels of VIS_LABEL bytes */
  size_t width; /* widest label */
} grid;

/* Appends device i's index to the label of the block it holds. */
static void grid_add(grid *g, const kiln_sharding *s, int64_t i, int rank, const int64_t *start,
                     const int64_t *shard) {
  int64_t r = rank == 2 ? start[0] / (shard[0] ? shard[0] : 1) : 0;
  int64_t c = rank == 2 ? start[1] / (shard[1] ? shard[1] : 1) : start[0] / (shard[0] ? shard[0] : 1);
  char *label = g->labels + (size_t)(r * g->cols + c) * VIS_LABEL;
  kiln_device *dev = kiln_sharding_device(s, i);
  size_t n = strlen(label);
  if (n == 0)
    n = (size_t)snprintf(label, VIS_LABEL, "%s %d",
                         dev->backend->device_kind,
                         kiln_device_index(dev));
  else if (n + 16 < VIS_LABEL)
    n += (size_t)snprintf(label + n, VIS_LABEL - n, ",%d", kiln_device_index(dev));
  if (n > g->width) g->width = n;
}

static void put_border(char **p, const grid *g) {
  for (int64_t c = 0; c < g->cols; c++) {
    *(*p)++ = '+';
    memset(*p, '-', g->width + 2), *p += g->width + 2;
  }
  *(*p)++ = '+', *(*p)++ = '\n';
}

kiln_status kiln_visualize_sharding(const kiln_sharding *s, int rank, const int64_t *global,
                                    char **text) {
  if (!s || !global || !text) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_visualize_sharding: null argument");
  *text = NULL;
  if (rank != 1 && rank != 2)
    return kcore_fail(KILN_ERR_SHAPE, "kiln_visualize_sharding: only 1-D and 2-D arrays are drawn (rank %d)",
                      rank);
  int64_t shard[2], start[2], stop[2];
  kiln_status st = kiln_sharding_shard_shape(s, rank, global, shard);
  if (st) return st;
  grid g = {.rows = 1, .cols = 1};
  if (rank == 2) g.rows = shard[0] ? global[0] / shard[0] : 1;
  int64_t cdim = rank - 1;
  g.cols = shard[cdim] ? global[cdim] / shard[cdim] : 1;
  g.labels = calloc((size_t)(g.rows * g.cols), VIS_LABEL);
  if (!g.labels) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_visualize_sharding: out of host memory");
  for (int64_t i = 0; i < kiln_sharding_device_count(s); i++) {
    if ((st = kiln_sharding_device_indices(s, i, rank, global, start, stop))) break;
    grid_add(&g, s, i, rank, start, shard);
  }
  size_t line = (size_t)g.cols * (g.width + 3) + 2;
  char *out = st ? NULL : malloc(line * (size_t)(2 * g.rows + 1) + 1);
  if (!st && !out) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_visualize_sharding: out of host memory");
  if (st) {
    free(g.labels);
    return st;
  }
  char *p = out;
  for (int64_t r = 0; r < g.rows; r++) {
    put_border(&p, &g);
    for (int64_t c = 0; c < g.cols; c++) {
      const char *label = g.labels + (size_t)(r * g.cols + c) * VIS_LABEL;
      size_t n = strlen(label), left = (g.width - n) / 2;
      p += sprintf(p, "| %*s%s%*s ", (int)left, "", label, (int)(g.width - n - left), "");
    }
    *p++ = '|', *p++ = '\n';
  }
  put_border(&p, &g);
  *p = 0;
  free(g.labels);
  *text = out;
  return KILN_OK;
}

kiln_status kiln_visualize_array_sharding(const kiln_array *a, char **text) {
  static const char op[] = "kiln_visualize_array_sharding";
  if (text) *text = NULL;
  kiln_sharding *s = NULL;
  kiln_status st = text ? kiln_array_sharding(a, &s)
                        : kcore_fail(KILN_ERR_ARGUMENT, "%s: text is null", op);
  if (!st) st = kiln_visualize_sharding(s, a->rank, a->shape, text);
  kiln_sharding_free(s);
  return st;
}
