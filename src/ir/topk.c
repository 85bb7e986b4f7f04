/* top_k (lax.top_k): the k largest entries along an axis, in descending
 * order, and their int32 positions. Ties keep the lower position first (a
 * stable descending sort, as XLA's); floats order totally, -NaN < -inf <
 * ... < -0 < +0 < ... < inf < NaN. The jvp gathers the tangent at the
 * positions (JAX's _top_k_jvp); the indices have no tangent. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

kiln_status kir_rule_top_k(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                           kir_avals *out) {
  (void)n_in;
  const kir_aval *x = &in[0];
  const kir_p_top_k *p = &params->top_k;
  char t[KIR_AVAL_STR_CAP];
  TRY(kir_check_dtype_class(prim, 0, in, KIR_DT_NUM));
  if (p->axis < 0 || p->axis >= x->rank)
    return kcore_fail(KILN_ERR_SHAPE, "top_k: axis=%lld is outside [0, %d) for operand %s",
                      (long long)p->axis, x->rank, kir_aval_str(x, t, sizeof t));
  if (p->k < 0 || p->k > x->shape[p->axis])
    return kcore_fail(KILN_ERR_SHAPE, "top_k: k=%lld must lie in [0, %lld] for operand %s",
                      (long long)p->k, (long long)x->shape[p->axis], kir_aval_str(x, t, sizeof t));
  int64_t shape[KIR_MAX_RANK];
  memcpy(shape, x->shape, (size_t)x->rank * sizeof *shape);
  shape[p->axis] = p->k;
  TRY(kir_push(out, x->dtype, x->rank, shape, x->weak));
  return kir_push(out, KILN_I32, x->rank, shape, x->weak); /* JAX keeps the weak flag */
}

/* An entry of a line: its order key (larger first) and position. */
typedef struct topk_entry {
  uint64_t key;
  int64_t pos;
} topk_entry;

static int topk_cmp(const void *a, const void *b) {
  const topk_entry *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* A key whose unsigned order is the dtype's total order. */
static uint64_t topk_key(kiln_dtype dt, const void *p) {
  kir_scalar s = kir_scalar_load(dt, p);
  if (kiln_dtype_is_float(dt)) {
    uint64_t b;
    memcpy(&b, &s.f, sizeof b);
    return b >> 63 ? ~b : b | (1ull << 63);
  }
  return kiln_dtype_is_signed(dt) ? (uint64_t)s.i ^ (1ull << 63) : s.u;
}

static kiln_status eval_top_k(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                              void *ctx) {
  (void)ctx;
  const kir_aval *x = &in[0].aval;
  int axis = (int)e->params.top_k.axis;
  int64_t k = e->params.top_k.k, len = x->shape[axis], inner = 1, outer = 1;
  for (int d = 0; d < axis; d++) outer *= x->shape[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->shape[d];
  if (k == 0 || outer * inner == 0) return KILN_OK;
  topk_entry *line = malloc((size_t)len * sizeof *line);
  if (!line) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "top_k: no host memory for a line of %lld",
                               (long long)len);
  size_t es = kiln_dtype_size(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      for (int64_t i = 0; i < len; i++)
        line[i] = (topk_entry){
            topk_key(x->dtype, (const char *)in[0].data + ((o * len + i) * inner + c) * (int64_t)es),
            i};
      qsort(line, (size_t)len, sizeof *line, topk_cmp);
      for (int64_t j = 0; j < k; j++) {
        int64_t src = (o * len + line[j].pos) * inner + c, dst = (o * k + j) * inner + c;
        memcpy((char *)out[0].data + dst * (int64_t)es,
               (const char *)in[0].data + src * (int64_t)es, es);
        int32_t pos = (int32_t)line[j].pos;
        memcpy((char *)out[1].data + dst * 4, &pos, 4);
      }
    }
  free(line);
  return KILN_OK;
}

void kir_topk_evals(kir_eval_table *t) { t->fn[KIR_PRIM_TOP_K] = eval_top_k; }

/* The tangent at the chosen positions: a gather along axis with every other
 * dimension a batching dimension (take_along_axis). */
static kiln_status jvp_top_k(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                             const kir_vid *tx, kir_vid *ty) {
  (void)x;
  const kir_aval *ia = kir_var_aval(p, y[1]);
  int axis = (int)e->params.top_k.axis, r = ia->rank;
  kir_params pr = {0};
  pr.reshape.new_sizes.n = r + 1;
  memcpy(pr.reshape.new_sizes.v, ia->shape, (size_t)r * sizeof(int64_t));
  pr.reshape.new_sizes.v[r] = 1;
  kir_vid g[2] = {tx[0], KIR_NO_VAR};
  TRY(kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &y[1], &g[1]));
  memset(&pr, 0, sizeof pr);
  kir_gather_dims *d = &pr.gather.dimension_numbers;
  d->collapsed_slice_dims = d->start_index_map = (kir_dims){1, {(int8_t)axis}};
  for (int i = 0; i < r; i++)
    if (i != axis) d->operand_batching_dims.v[d->operand_batching_dims.n++] = (int8_t)i;
  d->start_indices_batching_dims = d->operand_batching_dims;
  pr.gather.slice_sizes.n = r;
  for (int i = 0; i < r; i++) pr.gather.slice_sizes.v[i] = 1;
  pr.gather.mode = KIR_GATHER_PROMISE_IN_BOUNDS;
  ty[1] = KIR_NO_VAR;
  return kir_emit(p, KIR_PRIM_GATHER, &pr, 2, g, &ty[0]);
}

/* The mapped axis goes in front; both results are mapped there. */
static kiln_status batch_top_k(kir_program *p, const kir_program *src, const kir_eqn *e,
                               int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                               int *ybd) {
  (void)src, (void)size;
  kir_vid v;
  TRY(kir_batch_moveaxis(p, x[0], bd[0], 0, &v));
  kir_params pr = e->params;
  pr.top_k.axis++;
  int idx;
  TRY(kir_add_eqn(p, KIR_PRIM_TOP_K, &pr, 1, &v, &idx));
  for (int j = 0; j < 2; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = 0;
  }
  return KILN_OK;
}

void kir_topk_rules(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_TOP_K] = jvp_top_k;
  r->batch[KIR_PRIM_TOP_K] = batch_top_k;
}
