/* fuse: the fusion planner and the memory planner. The only door of
 * src/fuse; prefix kfuse_.
 *
 * A plan splits the top-level equations of a compiled kir_program into
 * groups, in an order that respects data flow; each group becomes one kernel
 * (or one library call, or one step of the reference executor):
 *
 *   LOOP    elementwise equations with the broadcasts, reshapes, transposes,
 *           slices and converts between them, evaluated per output element;
 *           index maps, never materialised. Several outputs of the same
 *           shape may share one loop (multi-output).
 *   REDUCE  a reduction fused with the elementwise work feeding it
 *           (producer side) and consuming its result (epilogue).
 *   ROW     a row-wise chain over the last axis (softmax, log-softmax,
 *           layernorm, RMSnorm and their backward passes): reductions and
 *           elementwise work over rows of one length, one kernel that keeps
 *           each row on chip when it fits.
 *   DOT     one dot_general (cuBLASLt / CBLAS), possibly with a bias and
 *           activation epilogue.
 *   OPAQUE  anything else (control flow, sort, gather/scatter, host
 *           callbacks, debug_print, rng): one equation, run by the reference
 *           executor.
 *
 * Groups are cut at dot_general, collectives, control flow and host
 * callbacks. A cost rule keeps a fusion from recomputing expensive work
 * (an expensive value used by several consumers with different index maps
 * is materialised) or growing past a size limit.
 *
 * The memory planner gives every value that crosses a group boundary and is
 * not a program input or output a buffer slot; values whose lives do not
 * overlap share a slot. Donated inputs may be reused for outputs.
 *
 * ---- What a plan guarantees (the emitter and the runtime rely on it) ----
 *
 * Vocabulary. A group's values are the outputs of its equations. A value is
 * materialised (written to memory) iff it is in its group's `out`: it is
 * read by an equation of another group, or is a program output, or nobody
 * reads it (only when DCE did not run). Every other value is internal
 * (place NONE) and exists only inside its group's kernel. "Linear index"
 * means the row-major element index; reshape, squeeze, expand_dims and a
 * size-preserving broadcast_in_dim with increasing broadcast_dimensions keep
 * it ("linear-identity" equations).
 *
 * All kinds:
 * - Every top-level equation is in exactly one group; a group's `eqns` are
 *   ascending program indices. Groups are in a topological order: every
 *   entry of `in` is an invar, a constvar, a literal, or in the `out` of an
 *   earlier group. Equations with side effects (debug_print, host_callback,
 *   control flow with effects inside) keep their program order.
 * - `in`: every var an equation of the group reads that the group does not
 *   define, each once, in order of first use; scalar literals come last
 *   (n_in_literals of them) so a kernel can take in[0 .. n_in -
 *   n_in_literals) as buffers and inline the literals' values.
 * - `out`: ascending by defining equation, then by output position.
 *
 * LOOP (n_items = elements of the loop shape): only elementwise equations
 *   (convert_element_type, select_n, clamp, same-width bitcast included),
 *   broadcast_in_dim, reshape, transpose, squeeze, expand_dims, rev, slice
 *   and iota. Every `out` value has the same shape (the loop shape); each
 *   work item is one element of it. Internal values are computed at the
 *   index the chain of index maps (explicit ops and lax's implicit
 *   broadcasting of rank-0 and size-1 operands) gives.
 * REDUCE (n_items = elements of the reductions' result, row_length =
 *   elements folded into each): one or more reduce_{sum,max,min,prod,and,or}
 *   equations with the same operand shape and the same axes; the others are
 *   LOOP-kind equations. Producer equations feed only reductions (or other
 *   producers) and are never in `out`; no reduction depends on another. The
 *   epilogue (everything else) is evaluated per result element: every `out`
 *   value has the reductions' result element count and is indexed by the
 *   result's linear index, and each epilogue equation that depends on a
 *   reduction is elementwise or linear-identity with operands of that
 *   element count.
 * ROW (n_items = rows, row_length = L; a set the REDUCE rules admit is
 *   REDUCE, even over the last axis): every reduction reduces exactly the
 *   last axis of operands of one shape T = [..., L], 2 <= L <=
 *   row_max_elements. Values that depend on a reduction are either per-row
 *   ("RED": n_items elements, indexed by the row) or row-space ("ROW": shape
 *   T, indexed by row * L + column). A RED value enters row space only by a
 *   broadcast back along the last axis: broadcast_in_dim (increasing
 *   broadcast_dimensions, last axis new or from size 1) or lax's implicit
 *   broadcast of a [..., 1] operand in an elementwise equation. Values
 *   independent of the reductions are read through any index maps.
 *   Reductions may depend on earlier ones (max then sum for softmax); every
 *   `out` value has shape T or n_items elements. A ROW value used by several
 *   passes over the row is meant to be kept on chip, not recomputed.
 * DOT (n_items = 1): a dot_general alone, or followed by
 *   `add(dot, broadcast_in_dim(bias))` (bias of rank 1 along the result's
 *   last axis, float dtypes) and optionally `max(., 0)` (relu): see
 *   `epilogue` and `bias`. Only the last value is in `out`.
 * OPAQUE (n_items = 1): one equation, every output in `out` (used or not).
 *   An equation of a fusible kind that no rule admits even alone (e.g. more
 *   operands than max_group_args) is OPAQUE too.
 *
 * Cost rule: an expensive value (a transcendental: exp, log, tanh, pow, ...)
 * read through two different index maps, or through a broadcast that reads
 * one element for several work items, is never internal: it is materialised
 * at a group boundary. Reduction results inside REDUCE and ROW groups are
 * computed once per row by construction. Fused groups have at most
 * max_group_eqns equations and max_group_args inputs (literals included)
 * plus outputs.
 *
 * Places and slots: inputs are INPUT (invar position), constvars and
 * literals CONST (var id), equation outputs that are program outputs
 * OUTPUT (their first outvar position; an outvar that is an invar or a
 * constant keeps its INPUT/CONST place), other materialised values SLOT,
 * internal (or dropped) values NONE. A SLOT value lives from its group's
 * position to the position of the last group that reads it, both ends
 * included; two values sharing a slot never have overlapping lives, so a
 * kernel never reads and writes the same slot. Donation: output_donor[k]
 * names a donated invar of the same dtype and shape whose buffer program
 * output k may take: the invar is not itself an output, is read by no group
 * after the one producing output k, and donates to one output only. If
 * that group reads it (in place, XLA's input_output_alias: an optimizer
 * update), the group is a LOOP, no alias reads the invar, and every read of
 * it in the group is at the work item's own element (identity edges, see
 * kfuse_edge_identity, from it to the items) by an equation that output k
 * depends on: each item loads its element before storing output k's over
 * it, in one pass and in the reference's equation order. Inputs dead before
 * the group are preferred.
 * Aliases: a LOOP group of reshapes, squeezes and expand_dims only, with
 * one operand that is no constant or literal and one result that is no
 * program output, runs nothing: the group is dropped (its equations are in
 * no group) and each of their results takes its operand's place (the same
 * bytes in the same row-major order), the operand living until the last
 * reader of any alias of it. Fused with other work, a reshape stays an
 * index map. Not done: donated inputs do not serve as slots for
 * temporaries. */
#ifndef KILN_SRC_FUSE_H
#define KILN_SRC_FUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/core.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kfuse_kind {
  KFUSE_LOOP,
  KFUSE_REDUCE,
  KFUSE_ROW,
  KFUSE_DOT,
  KFUSE_OPAQUE
} kfuse_kind;

const char *kfuse_kind_name(kfuse_kind k);

/* A DOT group's fused epilogue (kiln addition). */
typedef enum kfuse_epilogue {
  KFUSE_EPILOGUE_NONE,
  KFUSE_EPILOGUE_BIAS,     /* dot + broadcast(bias) */
  KFUSE_EPILOGUE_BIAS_RELU /* max(dot + broadcast(bias), 0) */
} kfuse_epilogue;

const char *kfuse_epilogue_name(kfuse_epilogue e);

typedef struct kfuse_group {
  kfuse_kind kind;
  int n_eqns;
  int *eqns;   /* indices into the program's equations, in program order */
  int n_in;
  kir_vid *in; /* values read from outside the group (vars of the program) */
  int n_out;
  kir_vid *out; /* values of the group used after it or as program outputs */
  /* ---- kiln additions (see the guarantees above) ---- */
  int n_in_literals;       /* the last n_in_literals entries of `in` are scalar literals */
  int64_t n_items;         /* LOOP: loop elements; REDUCE, ROW: rows; DOT, OPAQUE: 1 */
  int64_t row_length;      /* REDUCE: elements per row; ROW: the row length L; else 0 */
  kfuse_epilogue epilogue; /* DOT only; NONE elsewhere */
  kir_vid bias;            /* DOT with an epilogue: the bias vector; else KIR_NO_VAR */
  /* An output of the group takes the buffer of a donated input the group
   * reads (in place, see Donation above): its kernel's arguments alias. */
  bool in_place;
} kfuse_group;

/* Where a value lives at run time. */
typedef enum kfuse_home {
  KFUSE_HOME_NONE = 0, /* internal to a group (never materialised) or unused */
  KFUSE_HOME_INPUT,    /* a program input: index = invar position */
  KFUSE_HOME_CONST,    /* a constvar or literal: index = var id */
  KFUSE_HOME_OUTPUT,   /* a program output buffer: index = outvar position */
  KFUSE_HOME_SLOT      /* a temporary: index = slot */
} kfuse_home;

typedef struct kfuse_place {
  kfuse_home home;
  int index;
} kfuse_place;

/* Slots placed back to back in one arena start at multiples of this. */
#define KFUSE_SLOT_ALIGN 256

typedef struct kfuse_plan {
  int n_groups;
  kfuse_group *groups;
  kfuse_place *places; /* one per var of the program */
  int n_slots;
  size_t *slot_bytes; /* each slot's size (the largest value it holds) */
  size_t temp_bytes;  /* sum of slot_bytes */
  /* ---- kiln additions ---- */
  int n_places;        /* the program's n_vars */
  size_t *slot_offset; /* each slot's offset in one arena, KFUSE_SLOT_ALIGN-aligned */
  size_t arena_bytes;  /* that arena's size (temp_bytes plus alignment padding) */
  int n_outputs;       /* the program's n_outvars */
  int *output_donor;   /* per program output: the invar position it may reuse, or -1 */
} kfuse_plan;

typedef struct kfuse_options {
  int max_group_eqns;       /* cost rule: cap on a group's equations (default 64) */
  int64_t row_max_elements; /* ROW groups keep rows up to this length on chip (default 8192) */
  bool allow_row;           /* plan ROW groups (default true) */
  bool fuse;                /* false: one group per equation (the unfused baseline) */
  /* kiln addition: cap on a fused group's inputs (literals included) plus
   * outputs (default 64, codegen's KCG_MAX_ARGS; 0 also means 64, so
   * options filled field by field without it keep working). */
  int max_group_args;
} kfuse_options;

/* What an equation can take part in. */
typedef enum kfuse_class {
  KFUSE_CLASS_ELEM,   /* elementwise */
  KFUSE_CLASS_INDEX,  /* broadcast_in_dim, reshape, transpose, squeeze, expand_dims, rev, slice */
  KFUSE_CLASS_IOTA,
  KFUSE_CLASS_REDUCE, /* reduce_{sum,max,min,prod,and,or} */
  KFUSE_CLASS_DOT,
  KFUSE_CLASS_OPAQUE
} kfuse_class;

/* A primitive's class, as far as its row tells (kfuse_classify refines it
 * per equation: effects, result count, a bitcast between widths): what the
 * fusion planner may put into a kernel, what the executors run as a matmul
 * library call, and what stays an OPAQUE step. */
kfuse_class kfuse_prim_class(kir_prim prim);

void kfuse_options_default(kfuse_options *o);

/* Plans p (a verified program; kir_verify runs again, its failure is
 * wrapped as "kfuse_plan_build: invalid program: ..."). `o` NULL means the
 * defaults. `donated` has one flag per invar (may be NULL). */
kiln_status kfuse_plan_build(const kir_program *p, const kfuse_options *o, const bool *donated,
                             kfuse_plan **out);
void kfuse_plan_free(kfuse_plan *plan);

/* ---- running a plan on the host (group_eval.c), for every backend ---- */
/* Host data of every constant and literal a plan's groups read or its
 * program returns (data[v] per var; owned[v] when malloc'ed here). */
typedef struct kfuse_consts {
  int n;
  void **data;
  bool *owned;
} kfuse_consts;
kiln_status kfuse_consts_init(kfuse_consts *k, const kfuse_plan *plan, const kir_program *p);
void kfuse_consts_free(kfuse_consts *k);
/* The host address of value v (the group's inputs and materialised outputs). */
typedef void *(*kfuse_addr_fn)(void *user, kir_vid v);
/* Runs group g's equations one by one on env's evaluators (plain f32/f64
 * GEMMs through CBLAS); values internal to the group live in temporaries. */
kiln_status kfuse_eval_group(const kir_program *p, const kfuse_plan *plan, const kfuse_group *g,
                             const kir_eval_env *env, kfuse_addr_fn addr, void *user);
/* A readable rendering: one line per group with its kind, equations
 * (primitive names), inputs, outputs and their places; then the slots. */
kiln_status kfuse_plan_print(const kfuse_plan *plan, const kir_program *p, char **text);

/* ======================================================================
 * Internal to src/fuse (shared between its files)
 * ====================================================================== */


kfuse_class kfuse_classify(const kir_program *p, const kir_eqn *e);
static inline bool kfuse_class_fusible(kfuse_class c) {
  return c == KFUSE_CLASS_ELEM || c == KFUSE_CLASS_INDEX || c == KFUSE_CLASS_IOTA ||
         c == KFUSE_CLASS_REDUCE;
}
/* Operand i of e is read at the output's linear index. */
bool kfuse_edge_identity(const kir_program *p, const kir_eqn *e, int i);

/* A candidate group while planning. */
typedef struct kfuse_set {
  int n;
  int *eqns;        /* ascending */
  kfuse_kind kind;
  bool alive;       /* false once merged into another set */
  bool fusible;     /* may still merge (LOOP, REDUCE, ROW) */
  kfuse_epilogue epilogue;
  kir_vid bias;
  int64_t n_items, row_length;
} kfuse_set;

/* One value of a trial set, for the rules. Fusible equations have exactly
 * one output, so locals are indexed like the trial's equations. */
#define KFUSE_MAX_SIGS 4
typedef struct kfuse_sig {
  uint64_t key;   /* identifies the index map from the work item to the element */
  bool injective; /* no two work items read the same element */
} kfuse_sig;

typedef struct kfuse_local {
  bool external;  /* materialised: read outside the trial, a program output, or unused */
  bool up, down;  /* REDUCE: feeds a reduction / depends on one */
  uint8_t space;  /* ROW: kfuse_space */
  bool many;      /* more index maps than sigs holds */
  int n_sigs;
  kfuse_sig sigs[KFUSE_MAX_SIGS];
} kfuse_local;

typedef struct kfuse_graph {
  const kir_program *p;
  kfuse_options opt;
  int n_eqns, n_vars;
  uint8_t *cls;              /* per equation: kfuse_class */
  int *use_start, *uses;     /* consumers of var v: uses[use_start[v] .. use_start[v+1]) */
  bool *outvar;              /* per var: a program output */
  int *effect_next;          /* per equation with an effect: the next one, or -1 */
  int *effect_prev;          /* ... and the previous one, or -1 */
  int *set_of;               /* per equation: its set */
  kfuse_set *sets;           /* n_eqns of them, set i starts as equation i */
  int *pos;                  /* per live set: its place in a topological order */
  /* scratch, reused by every trial */
  unsigned *eqn_mark, *var_mark, *set_mark;
  unsigned eqn_gen, var_gen, set_gen;
  int *eqn_local;            /* per marked equation: its position in the trial */
  int *stack, *ahead;        /* n_eqns each: searches, sets to reorder */
  kfuse_local *loc;          /* max_group_eqns */
  int *trial;                /* max_group_eqns */
} kfuse_graph;

/* The verdict of the rules on one trial set. */
typedef struct kfuse_verdict {
  kfuse_kind kind;
  int64_t n_items, row_length;
  const char *why; /* the rule that refused (for debugging), NULL if admitted */
} kfuse_verdict;

/* Can equations eqns[0..n) (ascending, fusible classes) form one group?
 * Fills *v either way. */
bool kfuse_rules_check(kfuse_graph *g, const int *eqns, int n, kfuse_verdict *v);

/* graph.c */
kiln_status kfuse_graph_init(kfuse_graph *g, const kir_program *p, const kfuse_options *o);
void kfuse_graph_free(kfuse_graph *g);
/* Moves set b's equations into set a, unchecked. */
kiln_status kfuse_set_absorb(kfuse_graph *g, int a, int b);
/* Merges b into a unless a path leads from one to the other through a third
 * set (*joined says which), keeping the topological positions valid. */
kiln_status kfuse_join(kfuse_graph *g, int a, int b, bool *joined);
/* Merges b into a (a survives) if both are fusible, the rules admit the
 * union and no path leads from one to the other through a third set. */
kiln_status kfuse_try_merge(kfuse_graph *g, int a, int b, bool *merged);
/* The live sets in a topological order (malloc'd). */
kiln_status kfuse_graph_order(kfuse_graph *g, int **order, int *n_order);

/* memory.c: places, slots and donation for a plan whose groups are built. */
kiln_status kfuse_memory_plan(const kir_program *p, const bool *donated, kfuse_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
