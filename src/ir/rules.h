/* Shape/dtype rules: the aval list they fill and the rule of every
 * prims.def row. Part of ir.h, the ir module's only door, which includes it
 * where it stands: include ir/ir.h, never this file alone. */
#ifndef KILN_IR_RULES_H
#define KILN_IR_RULES_H

/* ======================================================================
 * Shape/dtype rules
 * ====================================================================== */

/* A growable list of avals that rules append their results to. Starts with
 * inline room for a few and moves to the heap beyond. */
typedef struct kir_avals {
  int n, cap;
  kir_aval *v;
  kir_aval small[4];
} kir_avals;
void kir_avals_init(kir_avals *a);
void kir_avals_free(kir_avals *a);
kiln_status kir_avals_push(kir_avals *a, const kir_aval *v);

/* A shape/dtype rule: checks the operands and params of one application of
 * `prim` and appends the results' avals to `out`. Errors are
 * KILN_ERR_SHAPE / KILN_ERR_DTYPE / KILN_ERR_ARGUMENT with a message that
 * starts with the primitive's name and names the operand types. `n_in`
 * already matches the prim's row (unless variadic). */
typedef kiln_status (*kir_rule_fn)(kir_prim prim, const kir_params *params, int n_in,
                                   const kir_aval *in, kir_avals *out);

/* An elementwise row's public builder (prims.def's builder column). */
typedef enum kir_builder { KIR_BUILDER_NONE, KIR_BUILDER_UNARY, KIR_BUILDER_BINARY, KIR_BUILDER_OWN } kir_builder;

/* How an elementwise row prints in C/CUDA for one dtype class (prims.def's
 * c_float / c_int columns). */
typedef enum kir_spell {
  KIR_SPELL_NONE,       /* not accepted by the rule (or not an elementwise row) */
  KIR_SPELL_MATH,       /* <math.h>'s text / textf (double / float) */
  KIR_SPELL_HELPER,     /* the prelude's kiln_<text>_<dtype> */
  KIR_SPELL_INFIX,      /* (a text b) */
  KIR_SPELL_CAST_INFIX, /* ((result type)(a text b)) */
  KIR_SPELL_PREFIX,     /* (text a) */
  KIR_SPELL_OWN         /* kcg_elementwise's own case */
} kir_spell;

typedef struct kir_c_spelling {
  kir_spell kind;
  const char *text;
  bool exact; /* the value needs no rounding back to f16/bf16 */
} kir_c_spelling;

typedef struct kir_prim_info {
  const char *name; /* as printed: "add", "reduce_sum", "scatter-add", ... */
  kir_family family;
  int n_in;         /* or KIR_VARIADIC */
  int n_out;        /* or KIR_VARIADIC */
  kir_param_kind params;
  kir_rule_fn rule;
  unsigned flags;   /* KIR_PRIM_* */
  /* elementwise rows: a generated public builder, how the code generators
   * print it for float operands and for integer/bool ones (prims.def) */
  kir_builder builder;
  kir_c_spelling c_float, c_int;
} kir_prim_info;

/* NULL for an invalid prim. */
const kir_prim_info *kir_prim_get(kir_prim p);
const char *kir_prim_name(kir_prim p); /* "invalid" for an invalid prim */
/* Finds a prim by its printed name (len bytes); false if none. */
bool kir_prim_lookup(const char *name, size_t len, kir_prim *out);
bool kir_prim_has_effect(kir_prim p);
kir_cost kir_prim_cost(kir_prim p); /* KIR_COST_PLAIN for an invalid prim */
bool kir_prim_is_index_map(kir_prim p); /* broadcast, reshape, transpose, slice, ... */

/* Runs prim's rule after checking the operand count: the results' avals. */
kiln_status kir_infer(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in,
                      kir_avals *out);

/* The rules, one per row group (see prims.def). */
#define KIR_DECLARE_RULE(fn)                                                               \
  kiln_status fn(kir_prim prim, const kir_params *params, int n_in, const kir_aval *in, \
                 kir_avals *out);
/* elementwise.c */
KIR_DECLARE_RULE(kir_rule_unary)
KIR_DECLARE_RULE(kir_rule_nary)
KIR_DECLARE_RULE(kir_rule_compare)
KIR_DECLARE_RULE(kir_rule_pow)
KIR_DECLARE_RULE(kir_rule_select_n)
KIR_DECLARE_RULE(kir_rule_clamp)
KIR_DECLARE_RULE(kir_rule_convert_element_type)
KIR_DECLARE_RULE(kir_rule_bitcast_convert_type)
/* shape_ops.c */
KIR_DECLARE_RULE(kir_rule_broadcast_in_dim)
KIR_DECLARE_RULE(kir_rule_reshape)
KIR_DECLARE_RULE(kir_rule_transpose)
KIR_DECLARE_RULE(kir_rule_squeeze)
KIR_DECLARE_RULE(kir_rule_expand_dims)
KIR_DECLARE_RULE(kir_rule_rev)
KIR_DECLARE_RULE(kir_rule_slice)
KIR_DECLARE_RULE(kir_rule_dynamic_slice)
KIR_DECLARE_RULE(kir_rule_dynamic_update_slice)
KIR_DECLARE_RULE(kir_rule_concatenate)
KIR_DECLARE_RULE(kir_rule_pad)
KIR_DECLARE_RULE(kir_rule_iota)
KIR_DECLARE_RULE(kir_rule_gather)
KIR_DECLARE_RULE(kir_rule_scatter_add)
/* topk.c, cumlogsumexp.c, barrier.c */
KIR_DECLARE_RULE(kir_rule_top_k)
KIR_DECLARE_RULE(kir_rule_cumlogsumexp)
KIR_DECLARE_RULE(kir_rule_optimization_barrier)
/* reduce.c */
KIR_DECLARE_RULE(kir_rule_reduce)
KIR_DECLARE_RULE(kir_rule_argminmax)
KIR_DECLARE_RULE(kir_rule_cumulative)
KIR_DECLARE_RULE(kir_rule_sort)
/* dot.c */
KIR_DECLARE_RULE(kir_rule_dot_general)
/* control.c */
KIR_DECLARE_RULE(kir_rule_cond)
KIR_DECLARE_RULE(kir_rule_while)
KIR_DECLARE_RULE(kir_rule_scan)
KIR_DECLARE_RULE(kir_rule_debug_print)
KIR_DECLARE_RULE(kir_rule_host_callback)
/* call.c */
KIR_DECLARE_RULE(kir_rule_call)
KIR_DECLARE_RULE(kir_rule_custom_lin)
/* rng.c */
KIR_DECLARE_RULE(kir_rule_threefry2x32)
/* collective.c */
KIR_DECLARE_RULE(kir_rule_all_reduce)
KIR_DECLARE_RULE(kir_rule_all_gather)
KIR_DECLARE_RULE(kir_rule_psum_scatter)
KIR_DECLARE_RULE(kir_rule_ppermute)
KIR_DECLARE_RULE(kir_rule_all_to_all)
KIR_DECLARE_RULE(kir_rule_axis_index)
KIR_DECLARE_RULE(kir_rule_shard_map)
KIR_DECLARE_RULE(kir_rule_device_put)
/* conv.c */
KIR_DECLARE_RULE(kir_rule_conv_general_dilated)
/* window.c */
KIR_DECLARE_RULE(kir_rule_reduce_window)
KIR_DECLARE_RULE(kir_rule_select_and_gather_add)
KIR_DECLARE_RULE(kir_rule_select_and_scatter_add)
#undef KIR_DECLARE_RULE

#endif
