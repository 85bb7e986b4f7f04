/* The table of autodiff and batching rules and the emit helpers the rules
 * use (ad_emit.c, the *_ad.c and *_batch.c family files). Part of ir.h, the
 * ir module's only door, which includes it where it stands: include
 * ir/ir.h, never this file alone. */
#ifndef KILN_IR_AD_RULES_H
#define KILN_IR_AD_RULES_H

/* ======================================================================
 * Autodiff rules (ad_emit.c and the *_ad.c family files)
 *
 * Each primitive has a jvp rule and, if it can be linear in an operand, a
 * transpose rule; the slot for batching rules is reserved for vmap. Rules
 * emit equations into a program through kir_add_eqn (the kir_emit_*
 * helpers below). A tangent or cotangent of KIR_NO_VAR is a symbolic zero.
 * ====================================================================== */

/* jvp: the primal equation e (of some source program) was already emitted
 * into p; x are its operands and y its results as vars of p, tx the
 * operands' tangents. Writes the results' tangents to ty (KIR_NO_VAR for a
 * zero). What the rule emits must be linear in tx, with all non-linear work
 * done on primal values only (so partial evaluation can split it). */
typedef kiln_status (*kir_jvp_fn)(kir_program *p, const kir_eqn *e, const kir_vid *x,
                                  const kir_vid *y, const kir_vid *tx, kir_vid *ty);
/* transpose of a linear equation e of program src: lin[i] marks the
 * operands e is linear in (they have no value); the others are x[i], vars
 * of p. ct are the results' cotangents (at least one non-zero). Writes the
 * cotangents of the linear operands to ct_x (KIR_NO_VAR for a zero). */
typedef kiln_status (*kir_transpose_fn)(kir_program *p, const kir_program *src, const kir_eqn *e,
                                        const bool *lin, const kir_vid *x, const kir_vid *ct,
                                        kir_vid *ct_x);

/* batch (vmap): the equation e of src, applied to operands x (vars of p)
 * that carry a mapped axis of `size` at bd[i] (-1: not mapped, at least one
 * is). Emits the batched equation(s) into p and writes each result to y with
 * its mapped axis at ybd (-1 for a result that does not depend on it). */
typedef kiln_status (*kir_batch_fn)(kir_program *p, const kir_program *src, const kir_eqn *e,
                                    int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                    int *ybd);

typedef struct kir_ad_rules {
  kir_jvp_fn jvp[KIR_NUM_PRIMS];             /* NULL: not differentiable (yet) */
  kir_transpose_fn transpose[KIR_NUM_PRIMS]; /* NULL: not linear */
  kir_batch_fn batch[KIR_NUM_PRIMS];         /* NULL: no vmap rule (yet) */
} kir_ad_rules;

/* Every family's rules (built once; thread-safe). */
const kir_ad_rules *kir_ad_rules_get(void);
void kir_elementwise_ad(kir_ad_rules *r);
void kir_reduce_ad(kir_ad_rules *r);
void kir_shape_ad(kir_ad_rules *r);
void kir_scatter_ad(kir_ad_rules *r); /* scatter_ad.c: the scatter family */
/* jvp, transpose and batching rules of top_k, cumlogsumexp, optimization_barrier */
void kir_topk_rules(kir_ad_rules *r);
void kir_cumlogsumexp_rules(kir_ad_rules *r);
void kir_barrier_rules(kir_ad_rules *r);
void kir_dot_ad(kir_ad_rules *r);
/* The batching rules of each family (the *_batch.c files). */
void kir_elementwise_batch(kir_ad_rules *r);
void kir_reduce_batch(kir_ad_rules *r);
void kir_shape_batch(kir_ad_rules *r);
void kir_dot_batch(kir_ad_rules *r);
void kir_gather_batch(kir_ad_rules *r);
void kir_conv_ad(kir_ad_rules *r); /* conv_ad.c: jvp, transposes and batching */
void kir_window_ad(kir_ad_rules *r);    /* window_ad.c */
void kir_window_batch(kir_ad_rules *r); /* window_batch.c */
void kir_collective_ad(kir_ad_rules *r);    /* collective_ad.c */
void kir_collective_batch(kir_ad_rules *r); /* collective_batch.c */
/* The batched gather of params over operand x[0] and indices x[1] (mapped
 * at bd, -1 for neither; op_elem/idx_elem their per-example types); the
 * result is mapped at 0. */
kiln_status kir_batch_gather(kir_program *p, const kir_params *params, const kir_aval *op_elem,
                             const kir_aval *idx_elem, int64_t size, const kir_vid *x,
                             const int *bd, kir_vid *y);
/* x with its mapped axis (at bd, of `size`; bd -1: not mapped, then
 * broadcast) moved to the front, as [size, *elem's shape] where elem is the
 * per-example type: a mapped operand with size-1 or missing (rank 0) dims
 * is broadcast up to elem's shape as well. */
kiln_status kir_batch_front(kir_program *p, kir_vid x, int bd, int64_t size, const kir_aval *elem,
                            kir_vid *out);
/* Every entry of d plus one (the mapped axis went in front). */
void kir_batch_shift(kir_dims *d);
/* d shifted by one with 0 put first (the mapped axis joins the list). */
kiln_status kir_batch_dims_front(kir_dims *d);
/* x with axis `from` moved to `to` (x itself if they agree). */
kiln_status kir_batch_moveaxis(kir_program *p, kir_vid x, int from, int to, kir_vid *out);
/* The jvp rule of primitives without tangents (piecewise constant, integer
 * or boolean results): every result's tangent is a symbolic zero. */
kiln_status kir_ad_jvp_zero(kir_program *p, const kir_eqn *e, const kir_vid *x, const kir_vid *y,
                            const kir_vid *tx, kir_vid *ty);

/* ---- emitting helpers for the rules (ad_emit.c); each writes the new
 * equation's first result to *out ---- */
kiln_status kir_emit(kir_program *p, kir_prim prim, const kir_params *params, int n,
                     const kir_vid *in, kir_vid *out);
kiln_status kir_emit1(kir_program *p, kir_prim prim, kir_vid x, kir_vid *out);
kiln_status kir_emit2(kir_program *p, kir_prim prim, kir_vid a, kir_vid b, kir_vid *out);
/* A rank-0 literal of like's dtype (strong). */
kiln_status kir_emit_scalar(kir_program *p, kir_vid like, double v, kir_vid *out);
/* x (rank 0, or of aval's rank with size-1 dims) broadcast to aval's shape;
 * x itself if it already has it. */
kiln_status kir_emit_broadcast_to(kir_program *p, kir_vid x, const kir_aval *aval, kir_vid *out);
/* Zeros of aval's type. */
kiln_status kir_emit_zeros(kir_program *p, const kir_aval *aval, kir_vid *out);
/* x converted to dtype (x itself if it has it). */
kiln_status kir_emit_convert(kir_program *p, kir_vid x, kiln_dtype dtype, kir_vid *out);
/* a + b where either may be a symbolic zero (KIR_NO_VAR). */
kiln_status kir_emit_add_any(kir_program *p, kir_vid a, kir_vid b, kir_vid *out);
/* The cotangent ct of a result of shape out reduced to an operand of aval
 * `to` that the elementwise primitive broadcast implicitly (rank 0 or
 * size-1 dims): sums over the broadcast dims. */
kiln_status kir_emit_unbroadcast(kir_program *p, kir_vid ct, const kir_aval *to, kir_vid *out);
/* select_n(pred, on_false, on_true) with every operand broadcast to aval. */
kiln_status kir_emit_select(kir_program *p, kir_vid pred, kir_vid on_false, kir_vid on_true,
                            const kir_aval *aval, kir_vid *out);
/* e's primitive applied to x alone with e's params (structural rules). */
kiln_status kir_emit_like(kir_program *p, const kir_eqn *e, int n, const kir_vid *x, kir_vid *out);

#endif
