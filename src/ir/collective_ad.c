/* jvp and transpose rules of the collectives (JAX's, jax/_src/lax/parallel.py).
 *
 * Every collective but pmax/pmin is linear, so its jvp is the collective
 * applied to the tangent. The transposes: psum -> psum (JAX's psum_p rule,
 * "psum + pbroadcast"; it goes with shard_map's transpose dividing the
 * cotangents of replicated results and psumming those of replicated
 * operands, src/transform/shard_map_ad.c: JAX's check_vma=False rules, which
 * give the check_vma=True gradients of a shard_map without typing values by
 * the axes they vary over); all_gather <-> reduce_scatter (psum_scatter) on
 * the same dimension and tiling; ppermute -> ppermute with the inverse
 * permutation; all_to_all -> all_to_all with split and concat axes swapped
 * (kiln's untiled all_to_all is a primitive of its own, so that one
 * transposes too, where JAX 0.10.2's expand_dims + tiled + squeeze fails).
 * pmax/pmin have no derivative in JAX and none here; axis_index is an
 * integer. The batching rules are in collective_batch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

static kiln_status jvp_linear(kir_program *p, const kir_eqn *e, const kir_vid *x,
                              const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)x, (void)y;
  return kir_emit_like(p, e, 1, tx, ty);
}

static kiln_status jvp_refused(kir_program *p, const kir_eqn *e, const kir_vid *x,
                               const kir_vid *y, const kir_vid *tx, kir_vid *ty) {
  (void)p, (void)x, (void)y, (void)tx, (void)ty;
  const char *name = kir_prim_name(e->prim);
  return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                    "%s over '%s' has no derivative (JAX defines no jvp for pmax/pmin either: "
                    "differentiate psum of the selected values, or all_gather and reduce_max)",
                    name, e->params.collective.axis_name);
}

static kiln_status tr_psum(kir_program *p, const kir_program *src, const kir_eqn *e,
                           const bool *lin, const kir_vid *x, const kir_vid *ct, kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  return kir_emit_like(p, e, 1, ct, &ct_x[0]);
}

static kiln_status tr_all_gather(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 const bool *lin, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  const kir_p_all_gather *g = &e->params.all_gather;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.psum_scatter = (kir_p_psum_scatter){g->axis_name, g->axis_size, g->all_gather_dimension,
                                         g->tiled};
  return kir_emit(p, KIR_PRIM_PSUM_SCATTER, &pr, 1, ct, &ct_x[0]);
}

static kiln_status tr_psum_scatter(kir_program *p, const kir_program *src, const kir_eqn *e,
                                   const bool *lin, const kir_vid *x, const kir_vid *ct,
                                   kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  const kir_p_psum_scatter *s = &e->params.psum_scatter;
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.all_gather = (kir_p_all_gather){s->scatter_dimension, s->axis_name, s->axis_size, s->tiled};
  return kir_emit(p, KIR_PRIM_ALL_GATHER, &pr, 1, ct, &ct_x[0]);
}

/* ppermute's transpose sends every cotangent back: each pair reversed. */
static kiln_status tr_ppermute(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  const kir_p_ppermute *pp = &e->params.ppermute;
  int npairs = 0;
  int(*pairs)[2] = malloc((size_t)(pp->axis_size + 1) * sizeof *pairs);
  size_t cap = (size_t)(pp->axis_size + 1) * 48 + 8;
  char *text = malloc(cap);
  kiln_status st = pairs && text ? KILN_OK
                                 : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "ppermute: out of host memory");
  if (!st) st = kir_perm_parse(pp->perm, pp->axis_size, &npairs, pairs);
  if (!st) {
    size_t n = (size_t)snprintf(text, cap, "(");
    for (int i = 0; i < npairs; i++)
      n += (size_t)snprintf(text + n, cap - n, "%s(%d, %d)", i ? ", " : "", pairs[i][1], pairs[i][0]);
    snprintf(text + n, cap - n, ")");
    kir_params pr = e->params;
    pr.ppermute.perm = text;
    st = kir_emit(p, KIR_PRIM_PPERMUTE, &pr, 1, ct, &ct_x[0]);
  }
  free(pairs);
  free(text);
  return st;
}

static kiln_status tr_all_to_all(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 const bool *lin, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *ct_x) {
  (void)src, (void)lin, (void)x;
  kir_params pr = e->params;
  pr.all_to_all.split_axis = e->params.all_to_all.concat_axis;
  pr.all_to_all.concat_axis = e->params.all_to_all.split_axis;
  return kir_emit(p, KIR_PRIM_ALL_TO_ALL, &pr, 1, ct, &ct_x[0]);
}

void kir_collective_ad(kir_ad_rules *r) {
  r->jvp[KIR_PRIM_PSUM] = jvp_linear;
  r->transpose[KIR_PRIM_PSUM] = tr_psum;
  r->jvp[KIR_PRIM_ALL_GATHER] = jvp_linear;
  r->transpose[KIR_PRIM_ALL_GATHER] = tr_all_gather;
  r->jvp[KIR_PRIM_PSUM_SCATTER] = jvp_linear;
  r->transpose[KIR_PRIM_PSUM_SCATTER] = tr_psum_scatter;
  r->jvp[KIR_PRIM_PPERMUTE] = jvp_linear;
  r->transpose[KIR_PRIM_PPERMUTE] = tr_ppermute;
  r->jvp[KIR_PRIM_ALL_TO_ALL] = jvp_linear;
  r->transpose[KIR_PRIM_ALL_TO_ALL] = tr_all_to_all;
  r->jvp[KIR_PRIM_PMAX] = jvp_refused;
  r->jvp[KIR_PRIM_PMIN] = jvp_refused;
  r->jvp[KIR_PRIM_AXIS_INDEX] = kir_ad_jvp_zero;
}
