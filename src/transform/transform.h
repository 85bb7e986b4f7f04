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

/* jvp of a while equation e (of some program) into dst: x and tx are its
 * operands and their tangents as dst vars; writes its results (from a new
 * loop that carries the tangents too) to y and their tangents to ty. */
kiln_status ktf_jvp_while(const char *op, kir_program *dst, const kir_eqn *e, const kir_vid *x,
                          const kir_vid *tx, kir_vid *y, kir_vid *ty);

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
