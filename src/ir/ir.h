/* ir: kiln's jaxpr-like SSA IR. The only door of src/ir; prefix kir_.
 *
 * A program (kir_program) is a closed function in SSA form, like a jaxpr:
 *
 *   { lambda a:f32[4,8]; b:f32[4,8] c:f32[]. let
 *       d:f32[4,8] = add b a
 *       e:f32[4,8] = mul d c
 *       f:f32[4] = reduce_sum[axes=(1,)] e
 *     in (f, 1.0:f32[]) }
 *
 * - Values ("vars") live in the program's var table and are named by their
 *   index, a kir_vid. Every var has an abstract value (kir_aval: dtype, shape
 *   of rank <= 8, JAX's weak-type flag) and a kind: an input ("invar"), a
 *   constant captured from outside ("constvar", root programs only), an
 *   output of one equation, or a scalar literal (printed inline as
 *   `2.0:f32[]`, like jaxpr Literals; each use may be its own var).
 * - An equation (kir_eqn) applies one primitive to input vars and defines
 *   fresh output vars. Its parameters are stored inline in the equation (a
 *   tagged union, kir_params); the few variable-length ones (sub-programs,
 *   strings, aval lists) live in the program's arena.
 * - Control flow takes sub-programs as parameters (cond branches, while
 *   cond/body, scan body). Sub-programs are closed, as in JAX: they see only
 *   their own invars and literals, never the enclosing program's vars; what
 *   they capture is passed as explicit operands (scan/while "consts").
 *   fori_loop and map are trace-level sugar over while and scan.
 *
 * Memory: a root program owns one arena; its sub-programs, var/eqn tables,
 * operand lists and parameter payloads all live in it, so kir_program_free of
 * the root frees everything at once. Tables grow geometrically inside the
 * arena. Pointers into tables (kir_eqn *, kir_var *) are invalidated by
 * adding to the same table; indices (kir_vid, equation index) are stable
 * until a pass rewrites the program.
 *
 * Shape/dtype rules follow lax exactly (JAX 0.10): e.g. n-ary elementwise
 * operands must have equal dtypes and shapes that broadcast in lax's limited
 * way (rank-0 operands, and size-1 dimensions of equal-rank operands);
 * comparisons give bool; the weak flag follows each primitive's JAX weak-type
 * rule. Evaluators and emitters must honour that implicit broadcasting. One
 * deliberate difference: reshape checks the element count (JAX's rule has it
 * as a TODO). Every rule lives in its family's file (elementwise.c,
 * shape_ops.c, reduce.c, dot.c, control.c, rng.c) and its primitive's row in
 * prims.def; expand_dims is kiln's own primitive (JAX spells it as a
 * broadcast_in_dim), and no "constant" primitive is needed: scalars are
 * literals, arrays constvars.
 *
 * Text form (kir_print / kir_parse), jaxpr style:
 * - types print as `f32[4,8]`; a weak type carries JAX's own mark, the `~`
 *   prefix of ShapedArray.__str__: `~f32[]`. (jax.make_jaxpr's printer drops
 *   weak types altogether; kiln keeps them so that text round-trips.)
 * - params print in brackets, sorted by name, with JAX's spellings: tuples
 *   `(1,)`, dtypes by numpy name (`new_dtype=float16`), bools `True`/`False`,
 *   `padding_config=((1, 2, 0),)`, dot_general's
 *   `dimension_numbers=(([1], [0]), ([], []))`, gather's
 *   `GatherDimensionNumbers(...)`, `mode=GatherScatterMode.CLIP`. Strings
 *   (debug_print's fmt) are double-quoted with C escapes, where JAX prints
 *   them raw. Sub-programs nest as `jaxpr={ lambda ; ... }`.
 * - var names are a, b, ..., z, ba, bb, ... in order of appearance across the
 *   whole text (outputs of an equation before its sub-programs), skipping
 *   names that are primitives or keywords.
 * - layout: a program or equation that fits in 80 columns stays on one line,
 *   otherwise it breaks like jaxprs do. Whitespace is insignificant to the
 *   parser.
 */
#ifndef KILN_SRC_IR_H
#define KILN_SRC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KIR_MAX_RANK KILN_MAX_RANK

/* ======================================================================
 * Abstract values
 * ====================================================================== */

typedef struct kir_aval {
  kiln_dtype dtype;
  int rank;                      /* 0..KIR_MAX_RANK */
  bool weak;                     /* JAX's weak_type */
  int64_t shape[KIR_MAX_RANK];   /* entries past rank are zero */
} kir_aval;

/* Builds an aval without checks (kir_aval_check validates); a NULL shape
 * leaves the dimensions zero. */
kir_aval kir_aval_make(kiln_dtype dtype, int rank, const int64_t *shape, bool weak);
/* Valid dtype, rank in range, no negative dimension; KILN_ERR_DTYPE or
 * KILN_ERR_SHAPE naming `op` otherwise. */
kiln_status kir_aval_check(const char *op, const kir_aval *a);
/* Same dtype, shape and weak flag. */
bool kir_aval_equal(const kir_aval *a, const kir_aval *b);
/* Same dtype and shape, weak flags ignored (JAX's core.typematch). */
bool kir_aval_typematch(const kir_aval *a, const kir_aval *b);
bool kir_aval_same_shape(const kir_aval *a, const kir_aval *b);
int64_t kir_aval_size(const kir_aval *a); /* element count */
/* "f32[4,8]", "~f32[]" for a weak type; returns buf (always terminated). */
char *kir_aval_str(const kir_aval *a, char *buf, size_t cap);
#define KIR_AVAL_STR_CAP 200

/* A scalar literal's value, read according to its dtype: `f` for floats
 * (the exact value after rounding to the dtype), `i` for signed integers
 * and bool (0 or 1), `u` for unsigned integers. */
typedef union kir_scalar {
  double f;
  int64_t i;
  uint64_t u;
} kir_scalar;

static inline kir_scalar kir_scalar_f(double v) { kir_scalar s; s.f = v; return s; }
static inline kir_scalar kir_scalar_i(int64_t v) { kir_scalar s; s.i = v; return s; }
static inline kir_scalar kir_scalar_u(uint64_t v) { kir_scalar s; s.u = v; return s; }

/* Writes one element of `dtype` in its storage form (f16/bf16 as their 16
 * bits, bool as one byte 0/1) and reads it back. */
void kir_scalar_store(kiln_dtype dtype, kir_scalar v, void *dst);
kir_scalar kir_scalar_load(kiln_dtype dtype, const void *src);
bool kir_scalar_equal(kiln_dtype dtype, kir_scalar a, kir_scalar b); /* bitwise for floats */

/* ======================================================================
 * Primitives (one row each in prims.def)
 * ====================================================================== */

typedef enum kir_family {
  KIR_FAMILY_ELEMENTWISE, /* elementwise.c */
  KIR_FAMILY_SHAPE,       /* shape_ops.c: broadcast, reshape, slice, gather, ... */
  KIR_FAMILY_REDUCE,      /* reduce.c: reductions, arg-reductions, cumulative, sort */
  KIR_FAMILY_DOT,         /* dot.c */
  KIR_FAMILY_CONTROL,     /* control.c: cond, while, scan, debug_print, host_callback */
  KIR_FAMILY_RNG,         /* rng.c */
  KIR_FAMILY_COLLECTIVE,  /* collective.c: psum, all_gather, ..., shard_map */
  KIR_FAMILY_CONV,        /* conv.c: conv_general_dilated */
  KIR_FAMILY_WINDOW,      /* window.c: reduce_window_*, select_and_{gather,scatter}_add */
  KIR_NUM_FAMILIES
} kir_family;

#define KIR_VARIADIC (-1)

/* Flags of a primitive. */
enum {
  KIR_PRIM_PLAIN = 0, /* an elementwise row's cost class when neither below */
  KIR_PRIM_EFFECT = 1u << 0, /* observable side effect: kept by DCE, never CSE'd or folded */
  KIR_PRIM_CHEAP = 1u << 1,  /* elementwise, about one instruction */
  KIR_PRIM_TRANSCENDENTAL = 1u << 2, /* elementwise, a libm-style function */
  KIR_PRIM_INDEX_MAP = 1u << 3 /* out[i] = in[map(i)]: a pure layout change */
};

/* An elementwise primitive's cost class, from its row's flags (see prims.def). */
typedef enum kir_cost { KIR_COST_PLAIN, KIR_COST_CHEAP, KIR_COST_TRANSCENDENTAL } kir_cost;

typedef enum kir_prim {
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags) KIR_PRIM_##ID,
#include "ir/prims.def"
#undef KIR_PRIM
  KIR_NUM_PRIMS
} kir_prim;

#include "ir/params.h"

#include "ir/rules.h"

/* ======================================================================
 * Programs
 * ====================================================================== */

typedef int kir_vid; /* index into a program's var table */
#define KIR_NO_VAR (-1)

typedef enum kir_var_kind {
  KIR_VAR_INVAR,
  KIR_VAR_CONSTVAR,
  KIR_VAR_EQN,     /* an equation's output */
  KIR_VAR_LITERAL  /* a scalar literal */
} kir_var_kind;

/* Where a constvar's value comes from. */
typedef enum kir_const_source {
  KIR_CONST_ABSTRACT, /* only its aval is known (parsed text); bind it before running */
  KIR_CONST_ARRAY,    /* a kiln_array; the program holds a reference */
  KIR_CONST_HOST      /* host bytes (C order, storage form) copied into the arena */
} kir_const_source;

typedef struct kir_var {
  kir_aval aval;
  kir_var_kind kind;
  int eqn; /* KIR_VAR_EQN: index of the defining equation; else -1 */
  union {
    kir_scalar literal; /* KIR_VAR_LITERAL */
    struct {
      kir_const_source source;
      kiln_array *array;
      const void *host;
      size_t nbytes;
    } constant; /* KIR_VAR_CONSTVAR */
  } u;
} kir_var;

typedef struct kir_eqn {
  kir_prim prim;
  int n_in, n_out;
  kir_vid *in;  /* arena */
  kir_vid *out; /* arena */
  kir_params params;
  /* The public op (kiln_log, ...) whose trace added it, in the root's
   * arena; NULL when unknown (parsed text, equations a transformation
   * made). For messages only: no pass or comparison reads it. */
  const char *source;
} kir_eqn;

/* Read the fields freely; change them only through kir_ functions or
 * passes that keep the invariants kir_verify checks. */
struct kir_program {
  kir_program *parent; /* NULL for a root */
  kir_program *root;   /* itself for a root */
  int index;           /* 0 for the root; sub-programs count up in creation order */
  kir_var *vars;
  int n_vars, cap_vars;
  kir_vid *constvars;
  int n_constvars, cap_constvars;
  kir_vid *invars;
  int n_invars, cap_invars;
  kir_vid *outvars;
  int n_outvars;
  kir_eqn *eqns;
  int n_eqns, cap_eqns;
  /* root only */
  struct kir_arena_chunk *arena;
  int n_programs;
};

kiln_status kir_program_new(kir_program **out);
/* Frees a root program with all its sub-programs; releases the arrays its
 * constvars hold. NULL is allowed; a sub-program is freed with its root. */
void kir_program_free(kir_program *p);
/* A new empty sub-program owned by parent's root; pass it as a param of an
 * equation of `parent` (cond branch, while cond/body, scan body). */
kiln_status kir_program_new_sub(kir_program *parent, kir_program **out);

/* Arena memory of p's root, zeroed; lives until the root is freed. */
void *kir_alloc(kir_program *p, size_t nbytes);

kiln_status kir_add_invar(kir_program *p, const kir_aval *aval, kir_vid *out);
/* A constvar (root programs only) with an abstract value, then bound. */
kiln_status kir_add_const(kir_program *p, const kir_aval *aval, kir_vid *out);
/* Binds a kiln_array (retained; dtype and shape must match the aval). */
kiln_status kir_const_bind_array(kir_program *p, kir_vid v, kiln_array *a);
/* Binds host data (copied; nbytes must be the aval's byte size). */
kiln_status kir_const_bind_host(kir_program *p, kir_vid v, const void *data, size_t nbytes);
/* kir_add_const + kir_const_bind_array: the aval is the array's (strong). */
kiln_status kir_add_const_array(kir_program *p, kiln_array *a, kir_vid *out);
kiln_status kir_add_const_host(kir_program *p, const kir_aval *aval, const void *data,
                               size_t nbytes, kir_vid *out);
/* A scalar literal of dtype (rank 0). Floats are rounded to the dtype (any
 * NaN becomes the positive quiet NaN); integers must fit (KILN_ERR_ARGUMENT
 * otherwise); bool is 0 or 1. */
kiln_status kir_add_literal(kir_program *p, kiln_dtype dtype, bool weak, kir_scalar value,
                            kir_vid *out);

/* Appends `prim(in...)[params]`: checks the operands are vars of p, copies
 * params (NULL for none) into the equation, deep-copying its strings and
 * lists into the arena (sub-programs must be p's own, from
 * kir_program_new_sub), runs the rule and creates the output vars. The new
 * equation's index goes to *eqn_index (may be NULL); its outputs are
 * p->eqns[*eqn_index].out[0..n_out). */
kiln_status kir_add_eqn(kir_program *p, kir_prim prim, const kir_params *params, int n_in,
                        const kir_vid *in, int *eqn_index);
/* Sets (replaces) the outputs. */
kiln_status kir_set_outputs(kir_program *p, int n, const kir_vid *outs);

static inline const kir_aval *kir_var_aval(const kir_program *p, kir_vid v) {
  return &p->vars[v].aval;
}

/* Records `source` (copied into the arena) as where equation `eqn` of p
 * came from; a NULL or empty source clears it. */
kiln_status kir_eqn_set_source(kir_program *p, int eqn, const char *source);
/* Equations from..n_eqns of p without a source get "how(source)", as a
 * transformation names what it emitted for one equation ("jvp(kiln_log)");
 * nothing when source is NULL. */
kiln_status kir_eqns_derive_source(kir_program *p, int from, const char *how, const char *source);
/* The equation of sub's parent whose params hold sub (-1 for a root), and
 * the param's name in *field ("branches[1]", "body_jaxpr"; cap bytes). */
int kir_program_owner(const kir_program *sub, char *field, size_t cap);

/* Structural equality: same avals, primitives, params (sub-programs
 * recursively), literal values and dataflow, whatever the var numbering.
 * Constant payloads are not compared. */
bool kir_program_equal(const kir_program *a, const kir_program *b);
/* True if p or a sub-program has an equation with a side effect. */
bool kir_program_has_effect(const kir_program *p);
/* True if e's primitive has an effect or one of its sub-programs has. */
bool kir_eqn_has_effect(const kir_eqn *e);

/* ======================================================================
 * Verification, text
 * ====================================================================== */

/* Checks every equation of p and its sub-programs: var ids and kinds, SSA
 * (each var defined once, before use), operand counts, outputs equal to the
 * rule's result, sub-program ownership, program outputs. The message names
 * the equation index and primitive (and the path through sub-programs). */
kiln_status kir_verify(const kir_program *p);

/* The text form (see the top of this file) in a malloc'd string. */
kiln_status kir_print(const kir_program *p, char **out);
/* Equation `eqn` of p (any program of a root) on one line as kir_print
 * names it, each operand with its type: "c:f32[3] = log b:f32[3]". */
kiln_status kir_print_eqn(const kir_program *p, int eqn, char **out);
/* Parses kir_print's text into a new root program (verified). Bad text is
 * KILN_ERR_ARGUMENT with "line:column: expected ..." in the message; a
 * well-formed program whose types are wrong fails as its rule does. */
kiln_status kir_parse(const char *text, kir_program **out);
/* Parses one type ("f32[4,8]", "~f32[]") in full. */
kiln_status kir_aval_parse(const char *text, kir_aval *out);
/* Parses the inside of an equation's brackets ("axes=(1,) ...") for prim
 * into *out; strings and lists go to p's arena, sub-programs become
 * sub-programs of p. */
kiln_status kir_params_parse(kir_program *p, kir_prim prim, const char *text, kir_params *out);

#include "ir/passes.h"

/* ---- evaluation hook (reference executor) and constant folding ----
 *
 * The reference executor evaluates one equation at a time on host buffers
 * through a kir_eval_table: one kir_eval_fn per primitive. The evaluators
 * live in their family's file next to the rule (e.g. elementwise.c) and are
 * gathered by kir_reference_evals(); kir_eval_program walks a program with
 * them. Every evaluator receives the kir_eval_env as its ctx, so control-flow
 * evaluators run their sub-programs through kir_eval_program(env, ...).
 * kir_fold uses the same table, so folding covers exactly the primitives
 * that have a reference implementation. */

/* Host data of one operand or result: C order, dtype storage form. */
typedef struct kir_buffer {
  kir_aval aval;
  void *data;
  size_t nbytes;
} kir_buffer;

/* Evaluates equation e on host buffers. `in` has e->n_in buffers; `out` has
 * e->n_out buffers whose avals are set and whose data is allocated (nbytes)
 * by the caller. `ctx` is the const kir_eval_env * of the evaluation. */
typedef kiln_status (*kir_eval_fn)(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx);

/* Per-primitive evaluators; a NULL entry means "cannot evaluate". `ctx` is
 * handed to evaluators as the env's `user`. */
typedef struct kir_eval_table {
  kir_eval_fn fn[KIR_NUM_PRIMS];
  void *ctx;
} kir_eval_table;

/* What a whole-program evaluation needs beyond the evaluators. */
typedef struct kir_eval_env {
  const kir_eval_table *table;
  void *user; /* the table's ctx */
  /* host_callback: runs callback `id` (NULL: host callbacks fail). */
  kiln_status (*host_call)(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                           kir_buffer *out);
  void *host_user;
  /* debug_print's sink for each formatted line (NULL: stderr). */
  void (*print)(void *user, const char *text);
  void *print_user;
  /* Called after each equation ran, in sub-programs too, with its operands
   * and results (before any is freed); `member` is the device index for an
   * equation of a shard_map body run in lockstep, else -1. A status other
   * than KILN_OK stops the evaluation with it (NULL: no observer). */
  kiln_status (*observe)(void *user, const kir_program *p, int eqn, int64_t member,
                         const kir_buffer *in, const kir_buffer *out);
  void *observe_user;
} kir_eval_env;

/* An env over `table` with no host callbacks and printing to stderr. */
void kir_eval_env_init(kir_eval_env *env, const kir_eval_table *table);
/* Runs p on host buffers: `in` for its invars, `out` for its outvars
 * (avals set, data allocated by the caller). Constvars bound to arrays are
 * read through kiln_array_to_host. Outputs are written only after every
 * equation ran, and outputs that are invars are copied before any other, so
 * an output may share memory with an input that no later output reads
 * (donation). A primitive without an evaluator is KILN_ERR_UNIMPLEMENTED. */
kiln_status kir_eval_program(const kir_eval_env *env, const kir_program *p, const kir_buffer *in,
                             kir_buffer *out);
/* NaNs and infinities in n elements of dtype (storage form) at data: their
 * counts and the flat index of the first of each (-1: none). Dtypes other
 * than f16, bf16, f32 and f64 hold none. nonfinite.c. */
typedef struct kir_nonfinite {
  int64_t nan, inf;
  int64_t first_nan, first_inf;
} kir_nonfinite;
void kir_nonfinite_scan(kiln_dtype dtype, const void *data, int64_t n, kir_nonfinite *out);
/* Every family's evaluators (built once; thread-safe). */
const kir_eval_table *kir_reference_evals(void);
/* Each family file adds its evaluators to a table. */
void kir_elementwise_evals(kir_eval_table *t);
void kir_shape_evals(kir_eval_table *t);
/* scatter.c: the dtypes a scatter primitive takes, and its update
 * computation over n strided elements (dst combined with src in place). */
unsigned kir_scatter_dtypes(kir_prim prim);
/* The evaluators of top_k (topk.c), cumlogsumexp (cumlogsumexp.c) and
 * optimization_barrier (barrier.c). */
void kir_topk_evals(kir_eval_table *t);
void kir_cumlogsumexp_evals(kir_eval_table *t);
void kir_barrier_evals(kir_eval_table *t);
void kir_scatter_row(kir_prim prim, kiln_dtype dt, char *dst, int64_t ds, const char *src,
                     int64_t ss, int64_t n);
void kir_reduce_evals(kir_eval_table *t);
void kir_dot_evals(kir_eval_table *t);
void kir_control_evals(kir_eval_table *t);
void kir_rng_evals(kir_eval_table *t);
void kir_call_evals(kir_eval_table *t);
/* shard_map's evaluator (collective_eval.c): runs the body for every device
 * of the mesh in lockstep and applies its collectives across them. The
 * collectives have no evaluator of their own: outside a shard_map body they
 * have no devices to run over. */
void kir_collective_evals(kir_eval_table *t);
void kir_window_evals(kir_eval_table *t); /* window_eval.c */
void kir_conv_evals(kir_eval_table *t);
/* A convolution's sizes and strides in the form of kernels/conv.h (which
 * defines the struct), for the C evaluator and the CUDA target's copies. */
struct kiln_conv_geom;
void kir_conv_geom_fill(const kir_p_conv *c, const kir_aval *lhs, const kir_aval *rhs,
                        const kir_aval *out, struct kiln_conv_geom *g);
/* gather's FILL_OR_DROP element of dtype dt (its bits into elem, 8 bytes
 * room): fill_value converted, or JAX's default (NaN, the minimum of signed
 * and maximum of unsigned integers, true). shape_eval.c. */
void kir_gather_fill(kiln_dtype dt, kir_opt_f64 fill, void *elem);

/* Constant folding: evaluates (in program order) every effect-free equation
 * whose operands are all literals or host-bound constvars, whose evaluator
 * exists in `t`, and whose results are at most max_bytes each. Scalar results
 * become literals, others host constvars (root programs only; a sub-program
 * folds scalars only). Runs inside sub-programs too. Dead equations are then
 * left for kir_dce. */
kiln_status kir_fold(kir_program *p, const kir_eval_table *t, size_t max_bytes, int *folded);

/* ======================================================================
 * Internal to src/ir (shared between its files)
 * ====================================================================== */

/* Copies params of prim's kind into dst field by field (other bytes zero),
 * checks list lengths and sub-program ownership, deep-copies strings and
 * lists into p's arena. */
kiln_status kir_params_import(kir_program *p, kir_prim prim, const kir_params *src,
                              kir_params *dst);
/* Rounds v to a float dtype (f16/bf16/f32 round to nearest even; f64 is v);
 * every NaN becomes the one positive quiet NaN. */
double kir_round_to_dtype(kiln_dtype dtype, double v);

/* Drops the equations with drop[i] set, keeping the others in order and
 * their outputs' eqn indices right; dropped outputs get eqn -1. */
void kir_remove_eqns(kir_program *p, const bool *drop);

/* debug_print's text (debug_format.c): fmt formatted over the n values as
 * jax.debug.print shows them, in a malloc'd string without the final
 * newline. A malformed or unsupported format is KILN_ERR_ARGUMENT or
 * KILN_ERR_UNIMPLEMENTED naming debug_print. */
kiln_status kir_debug_format(const char *fmt, int n, const kir_buffer *values, char **out);

/* Checks that every mesh axis a collective equation e of p names is bound
 * by an enclosing shard_map with the sizes e carries (collective.c). */
kiln_status kir_collective_verify(const kir_program *p, const kir_eqn *e);
/* A collective equation's axis_name (its axis_size in *size, may be NULL);
 * NULL for any other equation. */
const char *kir_collective_axes(const kir_eqn *e, int64_t *size);
/* all_to_all's result (out) for one member from the blocks it received:
 * recv holds sender s's block at s * block, each shaped like the operand
 * (in) with split_axis divided by axis_size (collective_eval.c). */
void kir_all_to_all_unpack(const kir_p_all_to_all *p, const kir_aval *in, const kir_aval *out,
                           const void *recv, void *dst);

/* ---- shard_map's params, parsed (collective.c) ---- */
#define KIR_MESH_MAX_AXES 8
#define KIR_AXIS_NAME_MAX 64
typedef struct kir_mesh {
  int ndim;
  int64_t size[KIR_MESH_MAX_AXES];
  char name[KIR_MESH_MAX_AXES][KIR_AXIS_NAME_MAX];
  int64_t n_devices;
} kir_mesh;
/* One partition spec: per dimension (rank <= the value's rank; the rest
 * replicated) the mesh axes it is split over, the first major. */
typedef struct kir_spec {
  int rank;
  int n_axes[KIR_MAX_RANK];
  int8_t axes[KIR_MAX_RANK][KIR_MESH_MAX_AXES];
} kir_spec;
/* "data=2,model=4" */
kiln_status kir_mesh_parse(const char *op, const char *text, kir_mesh *out);
/* Exactly n specs separated by " | " (see kir_p_shard_map), axes of m. */
kiln_status kir_specs_parse(const char *op, const char *text, const kir_mesh *m, int n,
                            kir_spec *out);
/* A collective's axis_name ("data,model") as mesh axis indices. */
kiln_status kir_axes_parse(const char *op, const char *text, const kir_mesh *m, int *n, int *axes);
/* ppermute's perm for an axis group of `size`: pairs[i] = {source, dest}
 * (at most size pairs; sources and destinations each distinct). */
kiln_status kir_perm_parse(const char *text, int64_t size, int *npairs, int (*pairs)[2]);
/* Product of the mesh sizes of the axes spec entry d splits over (1 past
 * the spec's rank). */
int64_t kir_spec_ways(const kir_spec *s, const kir_mesh *m, int d);
/* Device d's coordinates in m (row-major). */
void kir_mesh_coords(const kir_mesh *m, int64_t d, int64_t *coords);
/* Copies the shard a device at `coords` holds of a value split by spec
 * between the global buffer and the shard's (to_global: shard -> global). */
void kir_shard_copy(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                    const kir_buffer *global, const kir_buffer *shard, bool to_global);
/* Whether the device at coords holds the copy of a result with that spec
 * that is written back: coordinate 0 on every axis the spec leaves out. */
bool kir_shard_writes_back(const kir_mesh *m, const int64_t *coords, const kir_spec *spec);

/* ---- window geometry (window.c) ---- */
/* One window op over an operand: per dimension the operand and result
 * sizes, the window, stride, low padding and dilations (ones where the
 * kind has none). */
typedef struct kir_window_geom {
  int rank;
  int64_t in[KIR_MAX_RANK], out[KIR_MAX_RANK], win[KIR_MAX_RANK], stride[KIR_MAX_RANK],
      lo[KIR_MAX_RANK], base[KIR_MAX_RANK], wdil[KIR_MAX_RANK];
} kir_window_geom;
/* Checks p against operand x (list lengths, positive sizes, a window that
 * fits the padded operand), naming prim and x in the message. */
kiln_status kir_window_geom_make(kir_prim prim, const kir_p_window *p, const kir_aval *x,
                                 kir_window_geom *g);
/* The operand index along d that window element k of result index o reads;
 * -1 where it falls on padding or between base-dilated elements. */
int64_t kir_window_source(const kir_window_geom *g, int d, int64_t o, int64_t k);

/* ---- helpers for the rules (rules.c) ---- */

/* Whether v is one of d's entries (shape_ops.c). */
bool kir_dims_contains(const kir_dims *d, int v);

/* dtype classes, as lax's accepted-dtype sets */
enum {
  KIR_DT_BOOL = 1u << 0,
  KIR_DT_SINT = 1u << 1,
  KIR_DT_UINT = 1u << 2,
  KIR_DT_FLOAT = 1u << 3,
  KIR_DT_INT = KIR_DT_SINT | KIR_DT_UINT,
  KIR_DT_NUM = KIR_DT_INT | KIR_DT_FLOAT,
  KIR_DT_ANY = KIR_DT_NUM | KIR_DT_BOOL
};
bool kir_dtype_in(kiln_dtype d, unsigned classes);
/* "floating", "integer or floating", ... for messages */
const char *kir_dtype_class_name(unsigned classes);
/* KILN_ERR_DTYPE "<prim>: operand <i> type <t> is not accepted (<prim> takes <class> dtypes)"
 * unless in[i]'s dtype is in classes. */
kiln_status kir_check_dtype_class(kir_prim prim, int i, const kir_aval *in, unsigned classes);
/* KILN_ERR_DTYPE unless every aval in in[0..n) has in[0]'s dtype. */
kiln_status kir_check_same_dtypes(kir_prim prim, int n, const kir_aval *in);
/* lax's broadcasting_shape_rule: rank-0 operands broadcast; the others
 * must have one rank and, per dimension, equal sizes or 1. */
kiln_status kir_broadcast_shapes(kir_prim prim, int n, const kir_aval *in, int *rank,
                                 int64_t *shape);
/* Each axis in [0, bound), no repeats, and ascending if `sorted`. Names the
 * param and the operand (which may be NULL) in messages. */
kiln_status kir_check_dims(kir_prim prim, const char *param, const kir_dims *d, int bound,
                           bool sorted, const kir_aval *operand);
/* "(1, 2)" / "(1,)" / "()" */
char *kir_dims_str(const kir_dims *d, char *buf, size_t cap);
char *kir_sizes_str(const kir_sizes *s, char *buf, size_t cap);
/* Appends an aval built from the parts. */
kiln_status kir_push(kir_avals *out, kiln_dtype dtype, int rank, const int64_t *shape, bool weak);
bool kir_all_weak(int n, const kir_aval *in);


#include "ir/ad_rules.h"

#ifdef __cplusplus
}
#endif
#endif
