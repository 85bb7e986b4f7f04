/* The IR passes and their pipeline. Part of ir.h, the ir module's only
 * door, which includes it where it stands: include ir/ir.h, never this file
 * alone. */
#ifndef KILN_IR_PASSES_H
#define KILN_IR_PASSES_H

/* ======================================================================
 * Passes (in place)
 * ====================================================================== */

/* Dead code elimination: drops equations whose outputs are unused (unless
 * they, or their sub-programs, have effects), inside sub-programs too, and
 * unused constvars. Invars and sub-program signatures are kept.
 * *removed (may be NULL) counts the equations dropped. */
kiln_status kir_dce(kir_program *p, int *removed);

/* Common subexpression elimination: an equation with the same primitive,
 * the same operands (literals by value) and equal params as an earlier one
 * is dropped and its uses redirected; effectful ones are kept. Runs inside
 * sub-programs too. */
kiln_status kir_cse(kir_program *p, int *removed);

/* Shape equations that move no data (reductions over size-1 axes only,
 * broadcasts that add size-1 axes only, squeeze, expand_dims) become
 * reshapes; a reshape of a reshape reads the first one's operand; a reshape
 * to its operand's own type is dropped and its uses redirected; transposes
 * feeding a dot_general fold into it (kir_dot_fold_transposes); a reduction
 * of a broadcast over the axes it made reads the broadcast's operand
 * (kir_simplify_reduce_of_broadcast). Runs inside sub-programs too; *simplified (may be NULL) counts the rewrites. */
kiln_status kir_simplify(kir_program *p, int *simplified);

/* A dot_general that BLAS (and cuBLASLt) runs on its operands as stored:
 * batch dims leading and paired in order, each operand's contracting dims
 * one ascending run right after the batch dims or at the end. The product is
 * batch x ([m, k] or, trans_a, its transpose) . ([k, n] or, trans_b, its
 * transpose). */
typedef struct kir_gemm_layout {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
} kir_gemm_layout;
bool kir_dot_gemm_layout(const kir_aval *lhs, const kir_aval *rhs, const kir_dot_dims *d,
                         kir_gemm_layout *out);
/* kir_simplify's rewrite of dot_general(transpose(x), y) into dot_general(x,
 * y) with the dimension numbers permuted, where the result is the same and
 * the dot a GEMM of that layout (dot_layout.c); the number folded. */
int kir_dot_fold_transposes(const kir_program *p, kir_eqn *e);
/* kir_simplify's rewrite of equation i, a reduction of a broadcast_in_dim
 * over axes the broadcast made, where the result is exactly the same
 * (simplify_reduce.c): 0 if left alone, 1 if rewritten in place, 2 if its
 * result is now the literal *to (the caller redirects its uses). *st is set
 * on failure (out of memory). */
int kir_simplify_reduce_of_broadcast(kir_program *p, int i, kir_vid *to, kiln_status *st);

/* Replaces each custom_jvp_call, custom_vjp_call and checkpoint of the root
 * program p by the equations of the program it calls (recursively; calls
 * whose body has constvars stay). Run it after kir_cse, not before: a
 * checkpoint's recomputation must not be merged with the forward values.
 * *inlined (may be NULL) counts the calls of p replaced. On failure p is as
 * it was. */
kiln_status kir_inline_calls(kir_program *p, int *inlined);

/* The pass pipeline (passes.c): DCE, simplify, CSE, constant folding (up to
 * KIR_FOLD_MAX_BYTES per folded value), DCE and, for fusing executors,
 * inlining of calls and DCE again; the program verified at the end (and
 * after every pass in debug builds). With dump_dir set, the program is
 * written before and after every pass as <dump_dir>/<name>.<NN>.<pass>.txt.
 * A failing pass is named in the message. */
#define KIR_FOLD_MAX_BYTES ((size_t)1 << 20)
typedef struct kir_pass_opts {
  bool fusing;          /* inline custom-rule and checkpoint calls */
  const char *dump_dir; /* NULL: no dumps */
  const char *name;     /* the dumps' file name stem */
  kiln_log_level log_level;
} kir_pass_opts;
kiln_status kir_run_passes(kir_program *p, const kir_pass_opts *o);

#endif
