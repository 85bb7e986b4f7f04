/* Public window ops: lax.reduce_window_sum/max/min, lax's
 * _select_and_scatter_add, and Flax's max_pool / avg_pool over them. */
#include <string.h>
#include "trace/trace.h"

/* w's arrays as params over an operand of rank r (NULL entries: defaults). */
static bool ktr_window_params(kiln_trace *t, const char *op, const kiln_window *w, int r,
                              kir_p_window *out) {
  if (!w || (r > 0 && !w->dimensions)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: the window or its dimensions are NULL", op);
    return false;
  }
  memset(out, 0, sizeof *out);
  kir_sizes *lists[4] = {&out->window_dimensions, &out->window_strides, &out->base_dilation,
                         &out->window_dilation};
  const int64_t *given[4] = {w->dimensions, w->strides, w->base_dilation, w->window_dilation};
  for (int k = 0; k < 4; k++) {
    lists[k]->n = r;
    for (int d = 0; d < r; d++) lists[k]->v[d] = given[k] ? given[k][d] : 1;
  }
  out->padding.n = r;
  for (int d = 0; d < r && w->padding; d++) {
    out->padding.lo[d] = w->padding[2 * d];
    out->padding.hi[d] = w->padding[2 * d + 1];
  }
  return true;
}

static kiln_val *ktr_reduce_window(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                                   const kiln_window *w) {
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  if (!ktr_window_params(t, op, w, ktr_aval(x)->rank, &p.window)) return NULL;
  return ktr_bind(t, op, prim, &p, 1, &x, 1, NULL);
}

kiln_val *kiln_reduce_window_sum(kiln_trace *t, kiln_val *x, const kiln_window *w) {
  return ktr_reduce_window(t, "kiln_reduce_window_sum", KIR_PRIM_REDUCE_WINDOW_SUM, x, w);
}

kiln_val *kiln_reduce_window_max(kiln_trace *t, kiln_val *x, const kiln_window *w) {
  return ktr_reduce_window(t, "kiln_reduce_window_max", KIR_PRIM_REDUCE_WINDOW_MAX, x, w);
}

kiln_val *kiln_reduce_window_min(kiln_trace *t, kiln_val *x, const kiln_window *w) {
  return ktr_reduce_window(t, "kiln_reduce_window_min", KIR_PRIM_REDUCE_WINDOW_MIN, x, w);
}

kiln_val *kiln_select_and_scatter_add(kiln_trace *t, kiln_val *source, kiln_val *operand,
                                      int select_ge, const kiln_window *w) {
  static const char op[] = "kiln_select_and_scatter_add";
  kiln_val *v[2] = {source, operand};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  if (w && (w->base_dilation || w->window_dilation))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: select_and_scatter_add takes no dilations", op);
  kir_params p;
  memset(&p, 0, sizeof p);
  if (!ktr_window_params(t, op, w, ktr_aval(operand)->rank, &p.select_scatter)) return NULL;
  p.select_scatter.base_dilation.n = p.select_scatter.window_dilation.n = 0;
  p.select_scatter.select_prim = select_ge ? KIR_PRIM_GE : KIR_PRIM_LE;
  return ktr_bind(t, op, KIR_PRIM_SELECT_AND_SCATTER_ADD, &p, 2, v, 1, NULL);
}

/* flax.linen.pool's window over x: ones on the batch dims and the feature
 * dim, the pooling window on the n dims before the last; string padding as
 * lax.padtype_to_pads. */
typedef struct ktr_pool {
  int64_t dims[KIR_MAX_RANK], steps[KIR_MAX_RANK], pad[2 * KIR_MAX_RANK];
  kiln_window w;
} ktr_pool;

static bool ktr_pool_window(kiln_trace *t, const char *op, kiln_val *x, int n,
                            const int64_t *window_shape, const int64_t *strides,
                            const char *padding, const int64_t *pads, ktr_pool *pl) {
  if (!ktr_ok(t, op, 1, &x)) return false;
  int64_t *dims = pl->dims, *steps = pl->steps, *pad = pl->pad;
  pl->w = (kiln_window){dims, steps, pad, NULL, NULL};
  const kir_aval *a = ktr_aval(x);
  char ty[KIR_AVAL_STR_CAP];
  if (n < 1 || a->rank < n + 1 || (n > 0 && !window_shape)) {
    ktr_failf(t, KILN_ERR_SHAPE, "%s: %d window dims need an input of rank >= %d "
              "(batch..., spatial, features), got %s", op, n, n + 1, kir_aval_str(a, ty, sizeof ty));
    return false;
  }
  bool same = padding && strcmp(padding, "SAME") == 0;
  if ((padding && !same && strcmp(padding, "VALID") != 0) || (!padding && !pads)) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: padding must be \"VALID\", \"SAME\" or (low, high) "
              "pairs, got %s", op, padding ? padding : "NULL");
    return false;
  }
  int first = a->rank - 1 - n;
  for (int d = 0; d < a->rank; d++) {
    int s = d - first;
    bool spatial = s >= 0 && s < n;
    dims[d] = spatial ? window_shape[s] : 1;
    steps[d] = spatial && strides ? strides[s] : 1;
    pad[2 * d] = pad[2 * d + 1] = 0;
    if (!spatial) continue;
    if (!padding) {
      pad[2 * d] = pads[2 * s], pad[2 * d + 1] = pads[2 * s + 1];
    } else if (same && steps[d] > 0) {
      int64_t out = (a->shape[d] + steps[d] - 1) / steps[d];
      int64_t total = (out - 1) * steps[d] + dims[d] - a->shape[d];
      if (total < 0) total = 0;
      pad[2 * d] = total / 2, pad[2 * d + 1] = total - total / 2;
    }
  }
  return true;
}

kiln_val *kiln_max_pool(kiln_trace *t, kiln_val *x, int n, const int64_t *window_shape,
                        const int64_t *strides, const char *padding, const int64_t *pads) {
  static const char op[] = "kiln_max_pool";
  ktr_pool pl;
  if (!ktr_pool_window(t, op, x, n, window_shape, strides, padding, pads, &pl)) return NULL;
  return ktr_reduce_window(t, op, KIR_PRIM_REDUCE_WINDOW_MAX, x, &pl.w);
}

kiln_val *kiln_avg_pool(kiln_trace *t, kiln_val *x, int n, const int64_t *window_shape,
                        const int64_t *strides, const char *padding, const int64_t *pads,
                        int count_include_pad) {
  static const char op[] = "kiln_avg_pool";
  ktr_pool pl;
  if (!ktr_pool_window(t, op, x, n, window_shape, strides, padding, pads, &pl)) return NULL;
  kiln_val *sum = ktr_reduce_window(t, op, KIR_PRIM_REDUCE_WINDOW_SUM, x, &pl.w);
  if (!sum) return NULL;
  if (count_include_pad) {
    double size = 1;
    for (int s = 0; s < n; s++) size *= (double)window_shape[s];
    return kiln_div(t, sum, kiln_scalar_f(t, size));
  }
  /* Flax divides by the pooled jnp.ones (float32) of shape x.shape[:-1] + (1,). */
  const kir_aval *a = ktr_aval(x);
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, a->shape, sizeof shape);
  shape[a->rank - 1] = 1;
  kiln_val *ones = kiln_full(t, KILN_F32, a->rank, shape, 1.0);
  return kiln_div(t, sum, ktr_reduce_window(t, op, KIR_PRIM_REDUCE_WINDOW_SUM, ones, &pl.w));
}
