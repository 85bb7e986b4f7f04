/* Batching rules of the structural primitives: the mapped axis moves to the
 * front and the parameters gain a leading entry for it (a new dim 0 in
 * shapes, permutations, slices and padding; axes shift by one). Operands
 * that must agree in shape (concatenate, dynamic_update_slice) are
 * broadcast to the batched shape. dynamic_slice with mapped start indices
 * becomes a gather (clamping starts as dynamic_slice does); mapped pad
 * values and mapped start indices of dynamic_update_slice are refused
 * clearly. */
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static kiln_status push_front_sizes(kir_sizes *s, int64_t v) {
  if (s->n + 1 > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "vmap: a batched rank-%d result exceeds kiln's rank limit %d",
                      s->n + 1, KIR_MAX_RANK);
  memmove(s->v + 1, s->v, (size_t)s->n * sizeof s->v[0]);
  s->v[0] = v;
  s->n++;
  return KILN_OK;
}

static kiln_status refuse_mapped(const kir_eqn *e, const int *bd, int from, const char *what) {
  for (int k = from; k < e->n_in; k++)
    if (bd[k] >= 0)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                        "vmap: %s with a mapped %s (operand %d) is not supported yet; map only "
                        "the array operands, or express it as a gather", kir_prim_name(e->prim),
                        what, k);
  return KILN_OK;
}

/* The single-operand structural ops (the pad value, if any, unmapped). */
static kiln_status batch_unary(kir_program *p, const kir_program *src, const kir_eqn *e,
                               int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                               int *ybd) {
  (void)src;
  TRY(refuse_mapped(e, bd, 1, "padding value"));
  kir_vid in[2] = {x[0], e->n_in > 1 ? x[1] : KIR_NO_VAR};
  TRY(kir_batch_moveaxis(p, x[0], bd[0], 0, &in[0]));
  kir_params pr = e->params;
  switch (e->prim) {
    case KIR_PRIM_BROADCAST_IN_DIM:
      TRY(kir_batch_dims_front(&pr.broadcast.broadcast_dimensions));
      TRY(push_front_sizes(&pr.broadcast.shape, size));
      break;
    case KIR_PRIM_RESHAPE: TRY(push_front_sizes(&pr.reshape.new_sizes, size)); break;
    case KIR_PRIM_TRANSPOSE: TRY(kir_batch_dims_front(&pr.transpose.permutation)); break;
    case KIR_PRIM_SLICE:
      TRY(push_front_sizes(&pr.slice.start_indices, 0));
      TRY(push_front_sizes(&pr.slice.limit_indices, size));
      TRY(push_front_sizes(&pr.slice.strides, 1));
      break;
    case KIR_PRIM_PAD: {
      kir_padding *c = &pr.pad.padding_config;
      memmove(c->lo + 1, c->lo, (size_t)c->n * sizeof c->lo[0]);
      memmove(c->hi + 1, c->hi, (size_t)c->n * sizeof c->hi[0]);
      memmove(c->interior + 1, c->interior, (size_t)c->n * sizeof c->interior[0]);
      c->lo[0] = c->hi[0] = c->interior[0] = 0;
      c->n++;
      break;
    }
    default: kir_batch_shift(&pr.dims.dimensions); break; /* squeeze, expand_dims, rev */
  }
  ybd[0] = 0;
  return kir_emit(p, e->prim, &pr, e->n_in, in, &y[0]);
}

/* dynamic_slice with mapped starts, as JAX: the starts stacked into an
 * index vector [size, rank] (converted to i32) drive one gather that takes
 * the whole slice (offset dims = every operand dim, clamped starts). */
static kiln_status dynamic_slice_gather(kir_program *p, const kir_program *src, const kir_eqn *e,
                                        int64_t size, const kir_vid *x, const int *bd,
                                        kir_vid *y) {
  int r = e->n_in - 1;
  kir_vid cols[KIR_MAX_RANK], idx;
  kir_aval one = kir_aval_make(KILN_I32, 0, NULL, false);
  for (int k = 0; k < r; k++) {
    kir_vid v;
    TRY(kir_emit_convert(p, x[k + 1], KILN_I32, &v));
    TRY(kir_batch_front(p, v, bd[k + 1], size, &one, &v));
    kir_params rs;
    memset(&rs, 0, sizeof rs);
    rs.reshape.new_sizes.n = 2;
    rs.reshape.new_sizes.v[0] = size;
    rs.reshape.new_sizes.v[1] = 1;
    TRY(kir_emit(p, KIR_PRIM_RESHAPE, &rs, 1, &v, &cols[k]));
  }
  kir_params cat;
  memset(&cat, 0, sizeof cat);
  cat.concatenate.dimension = 1;
  TRY(kir_emit(p, KIR_PRIM_CONCATENATE, &cat, r, cols, &idx));
  kir_params g;
  memset(&g, 0, sizeof g);
  g.gather.mode = KIR_GATHER_CLIP;
  g.gather.slice_sizes = e->params.dynamic_slice.slice_sizes;
  g.gather.dimension_numbers.offset_dims.n = g.gather.dimension_numbers.start_index_map.n = r;
  for (int k = 0; k < r; k++)
    g.gather.dimension_numbers.offset_dims.v[k] = g.gather.dimension_numbers.start_index_map.v[k] = (int8_t)k;
  kir_aval idx_elem = kir_aval_make(KILN_I32, 1, (int64_t[]){r}, false);
  kir_vid in[2] = {x[0], idx};
  int ibd[2] = {bd[0], 0};
  return kir_batch_gather(p, &g, kir_var_aval(src, e->in[0]), &idx_elem, size, in, ibd, y);
}

/* concatenate, dynamic_slice, dynamic_update_slice: the first n_arrays
 * operands are arrays brought to the batched shape; the rest (start
 * indices) must be unmapped and gain a leading zero index. */
static kiln_status batch_arrays(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd) {
  int n_arrays = e->prim == KIR_PRIM_CONCATENATE ? e->n_in
                 : e->prim == KIR_PRIM_DYNAMIC_SLICE ? 1 : 2;
  ybd[0] = 0;
  if (e->prim == KIR_PRIM_DYNAMIC_SLICE)
    for (int k = 1; k < e->n_in; k++)
      if (bd[k] >= 0) return dynamic_slice_gather(p, src, e, size, x, bd, &y[0]);
  TRY(refuse_mapped(e, bd, n_arrays, "start index"));
  if (e->n_in + 1 > KIR_MAX_RANK * 4)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "vmap: %s with %d operands", kir_prim_name(e->prim),
                      e->n_in);
  kir_vid in[KIR_MAX_RANK * 4];
  for (int k = 0; k < n_arrays; k++)
    TRY(kir_batch_front(p, x[k], bd[k], size, kir_var_aval(src, e->in[k]), &in[k]));
  int n = n_arrays;
  if (n_arrays < e->n_in) {
    kiln_dtype it = kir_var_aval(p, x[n_arrays])->dtype;
    TRY(kir_add_literal(p, it, false, kir_scalar_i(0), &in[n++]));
    for (int k = n_arrays; k < e->n_in; k++) in[n++] = x[k];
  }
  kir_params pr = e->params;
  if (e->prim == KIR_PRIM_CONCATENATE) pr.concatenate.dimension++;
  if (e->prim == KIR_PRIM_DYNAMIC_SLICE) TRY(push_front_sizes(&pr.dynamic_slice.slice_sizes, size));
  ybd[0] = 0;
  return kir_emit(p, e->prim, &pr, n, in, &y[0]);
}

void kir_shape_batch(kir_ad_rules *r) {
  static const kir_prim unary[] = {KIR_PRIM_BROADCAST_IN_DIM, KIR_PRIM_RESHAPE, KIR_PRIM_TRANSPOSE,
                                   KIR_PRIM_SQUEEZE, KIR_PRIM_EXPAND_DIMS, KIR_PRIM_REV,
                                   KIR_PRIM_SLICE, KIR_PRIM_PAD};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) r->batch[unary[i]] = batch_unary;
  r->batch[KIR_PRIM_CONCATENATE] = batch_arrays;
  r->batch[KIR_PRIM_DYNAMIC_SLICE] = batch_arrays;
  r->batch[KIR_PRIM_DYNAMIC_UPDATE_SLICE] = batch_arrays;
}
