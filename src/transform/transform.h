/* transform: program transformations on kiln's IR (jaxpr in, jaxpr out).
 * The only door of src/transform; prefix ktf_.
 *
 * Autodiff is JAX's: forward mode (jvp) applies each primitive's jvp rule
 * with symbolic zeros; reverse mode linearizes (jvp, then partial evaluation
 * splits the jvp program into the known primal part and the part linear in
 * the tangents) and transposes the linear part, equation by equation in
 * reverse, with each linear primitive's transpose rule. The per-primitive
 * rules live in src/ir (kir_ad_rules). */
#ifndef KILN_SRC_TRANSFORM_H
#define KILN_SRC_TRANSFORM_H

#include "ir/ir.h"
#include "trace/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Emits the jvp of src into dst: x are dst vars standing for src's invars,
 * tx their tangents (KIR_NO_VAR: a symbolic zero). Writes src's outputs as
 * dst vars to y and their tangents to ty (KIR_NO_VAR where zero). `op`
 * names the transformation in errors. src must have no constvars. */
kiln_status ktf_jvp(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                    const kir_vid *tx, kir_vid *y, kir_vid *ty);

/* Emits the vjp of src into dst: x as above, diff[i] marks the invars to
 * differentiate, ct the cotangents of src's outputs (dst vars; KIR_NO_VAR
 * for zero). Writes the outputs to y and the invars' cotangents to ct_x
 * (zeros materialised for differentiated invars; KIR_NO_VAR for the
 * others). Linearizes src into a scratch program, partially evaluates it
 * (the known part is emitted into dst) and transposes the linear part. */
kiln_status ktf_vjp(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                    const bool *diff, const kir_vid *ct, kir_vid *y, kir_vid *ct_x);

/* The jvp of src as its own program J: invars (src's invars, then the
 * tangents of the diff ones), outputs (src's outputs, then the non-zero
 * output tangents; has_t[i] says whether output i has one), cleaned by CSE
 * and DCE. The caller frees J. */
kiln_status ktf_linearize(const char *op, const kir_program *src, const bool *diff,
                          kir_program **out, bool *has_t);

/* A growable list of dst vars (malloc'ed; free v). */
typedef struct ktf_residuals {
  kir_vid *v;
  int n;
} ktf_residuals;

/* Marks the vars and equations of J that depend on the invars marked
 * lin_in; fails when one of them cannot be transposed (while, or a
 * primitive without a transpose rule). */
void ktf_mark_linear(const kir_program *J, const bool *lin_in, bool *lin, bool *lin_eqn);
kiln_status ktf_linear_vars(const char *op, const kir_program *J, const bool *lin_in, bool *lin,
                            bool *lin_eqn);
/* Partial evaluation and transposition of J, linear in its invars marked
 * lin_in: the known part (what does not depend on them) is emitted into
 * dst over x (dst vars for the other invars), then the linear part is
 * transposed against ct (one per output of J, KIR_NO_VAR for zero). Writes
 * the known outputs to y (may be NULL; KIR_NO_VAR for linear ones), the
 * cotangents of the linear invars to ct_in (one per invar; KIR_NO_VAR for
 * zeros and the others) and, when res is not NULL, appends the known
 * values the linear part reads (the residuals a backward pass saves). */
kiln_status ktf_transpose_linear(const char *op, kir_program *dst, const kir_program *J,
                                 const bool *lin_in, const kir_vid *x, const kir_vid *ct,
                                 kir_vid *y, kir_vid *ct_in, ktf_residuals *res);
/* ktf_vjp that also lists the residuals (res may be NULL). */
kiln_status ktf_vjp_residuals(const char *op, kir_program *dst, const kir_program *src,
                              const kir_vid *x, const bool *diff, const kir_vid *ct, kir_vid *y,
                              kir_vid *ct_x, ktf_residuals *res);

/* A jvp rule that emits the primal computation too (for primitives whose
 * primal results come out of the rule, such as a loop carrying tangents):
 * x and tx are e's operands and their tangents as dst vars (KIR_NO_VAR:
 * zero); writes the results to y and their tangents to ty. */
typedef kiln_status (*ktf_jvp_full_fn)(const char *op, kir_program *dst, const kir_eqn *e,
                                       const kir_vid *x, const kir_vid *tx, kir_vid *y,
                                       kir_vid *ty);
/* The rules of the primitives whose rules transform sub-programs (NULL:
 * none, use kir_ad_rules); transpose and batch fall back to kir_ad_rules. */
ktf_jvp_full_fn ktf_jvp_full_rule(kir_prim prim);
kir_transpose_fn ktf_transpose_rule(kir_prim prim);
kir_batch_fn ktf_batch_rule(kir_prim prim);

/* while: a new loop that carries the tangents too (control_jvp.c). */
kiln_status ktf_jvp_while(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                          const kir_vid *tx, kir_vid *y, kir_vid *ty);
/* custom_jvp_call, custom_vjp_call, custom_lin (custom.c) */
kiln_status ktf_jvp_custom_jvp(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_jvp_custom_vjp(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_jvp_custom_lin(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_transpose_custom_lin(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     const bool *lin, const kir_vid *x, const kir_vid *ct,
                                     kir_vid *ct_x);
kiln_status ktf_batch_custom_jvp(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd);
kiln_status ktf_batch_custom_vjp(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd);
/* cond and scan (control_ad.c) */
kiln_status ktf_jvp_cond(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                         const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_transpose_cond(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x);
kiln_status ktf_jvp_scan(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                         const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_transpose_scan(kir_program *p, const kir_program *src, const kir_eqn *e,
                               const bool *lin, const kir_vid *x, const kir_vid *ct,
                               kir_vid *ct_x);
kiln_status ktf_batch_cond(kir_program *p, const kir_program *src, const kir_eqn *e,
                           int64_t size, const kir_vid *x, const int *bd, kir_vid *y, int *ybd);
kiln_status ktf_batch_scan(kir_program *p, const kir_program *src, const kir_eqn *e,
                           int64_t size, const kir_vid *x, const int *bd, kir_vid *y, int *ybd);
/* shard_map (shard_map_ad.c) */
kiln_status ktf_jvp_shard_map(const char *op, kir_program *dst, const kir_eqn *e,
                              const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_transpose_shard_map(kir_program *p, const kir_program *src, const kir_eqn *e,
                                    const bool *lin, const kir_vid *x, const kir_vid *ct,
                                    kir_vid *ct_x);
kiln_status ktf_batch_shard_map(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd);
/* checkpoint (remat.c) */
kiln_status ktf_jvp_checkpoint(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty);
kiln_status ktf_transpose_checkpoint(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     const bool *lin, const kir_vid *x, const kir_vid *ct,
                                     kir_vid *ct_x);
kiln_status ktf_batch_checkpoint(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd);

/* Which outputs of prog's jvp are non-zero for the non-zero inputs nz. */
kiln_status ktf_nonzero_outs(const char *op, const kir_program *prog, const bool *nz,
                             bool *out_nz);
/* live[v] for the vars of J that its n vars outs need (effects kept);
 * equations marked in skip_eqn (may be NULL) keep their outputs live but
 * not their operands. */
void ktf_mark_live(const kir_program *J, int n, const kir_vid *outs, const bool *skip_eqn,
                   bool *live);
/* A new sub-program of dst over n invars standing for the vars `from` of
 * J, with J's equations that `live` needs (less those in skip_eqn) and the
 * n_out vars outs of J as outputs. */
kiln_status ktf_extract(const char *op, kir_program *dst, const kir_program *J, int n,
                        const kir_vid *from, const bool *live, const bool *skip_eqn, int n_out,
                        const kir_vid *outs, kir_program **out);
/* Emits src applied to x (dst vars for its invars) into dst, its outputs
 * to y. */
kiln_status ktf_inline(const char *op, kir_program *dst, const kir_program *src, const kir_vid *x,
                       kir_vid *y);
/* A new sub-program of dst that is sub batched (vmap) with its invar i
 * mapped at axis 0 where bd[i] is 0 (-1: not mapped), every output i with
 * force[i] (force NULL: every output) mapped at axis 0 (broadcast where it
 * does not depend on the mapped inputs); the others must come out
 * unmapped. */
kiln_status ktf_batch_sub(const char *op, kir_program *dst, const kir_program *sub, int64_t size,
                          const int *bd, const bool *force, kir_program **out);
/* Where sub's outputs come out mapped (ybd, -1: not) when its invars are
 * mapped as bd says (0 or -1). */
kiln_status ktf_batched_outs(const char *op, const kir_program *sub, int64_t size, const int *bd,
                             int *ybd);
/* x with its mapped axis moved to 0 (bd[i] becomes 0 or stays -1). */
kiln_status ktf_batch_operands_front(kir_program *p, int n, const kir_vid *x, const int *bd,
                                     kir_vid *out, int *out_bd);

/* A var map from one program's vars to another's (KIR_NO_VAR: not yet
 * defined); literals are copied on first use. */
typedef struct ktf_map {
  kir_vid *v;
  int n;
} ktf_map;
kiln_status ktf_map_new(const char *op, int n, ktf_map *m);
kiln_status ktf_map_get(const char *op, ktf_map *m, kir_program *dst, const kir_program *src,
                        kir_vid v, kir_vid *out);
/* Copies equation e of src into dst with its operands mapped through m
 * (in: scratch for e->n_in vars) and records its results in m. */
kiln_status ktf_copy_eqn(const char *op, kir_program *dst, const kir_program *src,
                         const kir_eqn *e, ktf_map *m, kir_vid *in);

/* Emits the batched src into dst (vmap): x are dst vars for src's invars,
 * with the mapped axis (of `size`) at bd[i] (-1: not mapped). Writes the
 * outputs to y with their mapped axis at ybd (-1: not mapped). */
kiln_status ktf_vmap(const char *op, kir_program *dst, const kir_program *src, int64_t size,
                     const kir_vid *x, const int *bd, kir_vid *y, int *ybd);

/* A kiln_func named `prefix(f)` over fn that owns (frees) user, a malloc'ed
 * block; user is freed here too on failure. */
kiln_status ktf_func_new(kiln_fn fn, void *user, const char *prefix, const kiln_func *f,
                         kiln_func **out);
/* Emits prim(in)[params] whose n_out results are all mapped at 0 (vmap). */
kiln_status ktf_emit_mapped(kir_program *p, kir_prim prim, const kir_params *params, int n,
                            const kir_vid *in, int n_out, kir_vid *y, int *ybd);

/* f traced over the flattened args of t, with its captures first. */
typedef struct ktf_traced {
  kiln_val **vals; /* args' leaves */
  int n;
  kiln_treedef *def;
  ktr_closed cl;
  kir_vid *x; /* captures then leaves, as vars of t */
} ktf_traced;
kiln_status ktf_trace(kiln_trace *t, const char *op, const kiln_func *f, const kiln_tree *args,
                      ktf_traced *tr);
void ktf_traced_free(ktf_traced *tr);

/* A tree of def's shape over the n vars v of t (NULL with t failed). */
kiln_tree *ktf_tree(kiln_trace *t, const kiln_treedef *def, int n, const kir_vid *v);

/* A copy of the closed program src as a new sub-program of parent (any
 * root), its own sub-programs copied too. */
kiln_status ktf_copy_sub(kir_program *parent, const kir_program *src, kir_program **out);
/* e's params with every sub-program copied under dst, ready for
 * kir_add_eqn(dst, ...). */
kiln_status ktf_copy_params(kir_program *dst, const kir_eqn *e, kir_params *out);

#ifdef __cplusplus
}
#endif
#endif
