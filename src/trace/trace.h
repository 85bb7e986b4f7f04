/* trace: recording kiln_* op calls into a kir_program. The only door of
 * src/trace; prefix ktr_.
 *
 * A trace records into one program. Sub-traces (branches and bodies of
 * control flow) record into sub-programs, which are closed as in JAX: when a
 * sub-trace meets a value of an enclosing trace, ktr_use lifts it into an
 * invar of the sub-program and remembers the capture, so the control-flow
 * op can pass it as an explicit operand ("consts"). Values live in the
 * program's arena and die with it. */
#ifndef KILN_SRC_TRACE_H
#define KILN_SRC_TRACE_H

#include "core/core.h"
#include "ir/ir.h"
#include "kiln/jit.h"
#include "kiln/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kiln_val {
  kiln_trace *trace;
  uint64_t trace_id; /* checked before `trace` is read: it may be gone */
  kir_vid vid;
};

/* One value of an enclosing trace captured by a sub-trace. */
typedef struct ktr_capture {
  kiln_val *outer;
  kir_vid inner; /* the sub-program's invar standing for it */
} ktr_capture;

/* Mesh axes a shard_map binds while its body is traced: collectives look
 * their names up through the frames of the trace and its parents. */
typedef struct ktr_axis_frame {
  const kir_mesh *mesh;
  const struct ktr_axis_frame *prev;
} ktr_axis_frame;

/* A host function registered by kiln_host_callback; the id in the IR
 * indexes the root trace's table. */
typedef struct ktr_host_fn {
  kiln_host_fn fn;
  void *user;
} ktr_host_fn;

typedef struct ktr_host_table {
  int n, cap;
  ktr_host_fn *v;
} ktr_host_table;

struct kiln_trace {
  uint64_t id;        /* unique in the process: tells escaped values apart */
  kiln_trace *parent; /* NULL for the root trace */
  kiln_trace *root;
  kir_program *prog;
  kiln_promotion_mode promotion;
  kiln_status status; /* sticky: the first error */
  char *error;        /* its message (heap) */
  ktr_capture *captures; /* sub-traces: values lifted from enclosing traces */
  int n_captures, cap_captures;
  ktr_host_table *hosts; /* the root's table, shared by sub-traces */
  int depth;             /* calls nested through kiln_call (recursion guard) */
  const ktr_axis_frame *axes; /* axes bound around values traced here (collective.c) */
};

struct kiln_func {
  kiln_fn fn;
  void *user;
  char *name;
  void (*drop)(void *user); /* frees `user` with the function (transformations); may be NULL */
};

/* ---- traces ---- */
/* A root trace over a new program. */
kiln_status ktr_trace_new(kiln_promotion_mode promotion, kiln_trace **out);
/* A sub-trace recording into a new sub-program of parent's program. */
kiln_status ktr_subtrace_new(kiln_trace *parent, kiln_trace **out);
/* Frees the trace object; `keep_program` leaves the program to the caller
 * (a root's program is freed otherwise; sub-programs belong to the root). */
void ktr_trace_free(kiln_trace *t, bool keep_program);
/* Hands the host callback table of a root trace over to the caller. */
ktr_host_table *ktr_take_hosts(kiln_trace *t);
void ktr_host_table_free(ktr_host_table *h);

/* Records the thread's current message as the trace's error (first wins)
 * and returns NULL, for `return ktr_fail(t, st)`. */
kiln_val *ktr_fail(kiln_trace *t, kiln_status st);
/* Puts the trace's first error back as the thread's message (or says the
 * trace is NULL) and returns NULL: an op refusing to run on a failed trace
 * leaves kiln_last_error() naming the failure, as a failing op does. */
kiln_val *ktr_sticky(const kiln_trace *t, const char *op);
/* kcore_fail + ktr_fail. */
kiln_val *ktr_failf(kiln_trace *t, kiln_status st, const char *fmt, ...) KCORE_PRINTF(3, 4);
/* True when the op may go on: the trace has no error and every operand is
 * a value of t or of a trace enclosing it (a NULL operand or a value that
 * escaped another trace is recorded as the error). */
bool ktr_ok(kiln_trace *t, const char *op, int n, kiln_val *const *vals);

/* A value for vid in t's program. */
kiln_val *ktr_val(kiln_trace *t, kir_vid vid);
/* The vid standing for v in t's program, lifting values of enclosing traces
 * (captures) and refusing values of unrelated traces. */
kiln_status ktr_use(kiln_trace *t, const char *op, kiln_val *v, kir_vid *out);
const kir_aval *ktr_aval(const kiln_val *v);

/* Appends prim(in)[params] and returns its first result (all results in
 * outs when outs is non-NULL and n_out > 0). The op name prefixes errors. */
kiln_val *ktr_bind(kiln_trace *t, const char *op, kir_prim prim, const kir_params *params,
                   int n_in, kiln_val *const *in, int n_out, kiln_val **outs);
/* A scalar literal. */
kiln_val *ktr_literal(kiln_trace *t, kiln_dtype dtype, bool weak, kir_scalar v);

/* ---- helpers shared by the op files ---- */
/* x converted to dtype with the given weak flag (x itself if it already is;
 * literals are converted at trace time, as JAX does). */
kiln_val *ktr_convert(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype dtype, bool weak);
/* numpy broadcasting: the common shape of n values, or a message naming op
 * and every operand's type. */
kiln_status ktr_broadcast_shape(const char *op, int n, kiln_val *const *vals, int *rank,
                                int64_t *shape);
/* x broadcast to rank `rank` by adding leading axes (a broadcast_in_dim),
 * size-1 axes left for the primitive's own broadcasting. */
kiln_val *ktr_to_rank(kiln_trace *t, const char *op, kiln_val *x, int rank);
/* Promotes and rank-aligns n operands in place (jnp's _promote_args). */
kiln_status ktr_promote_args(kiln_trace *t, const char *op, int n, kiln_val **vals);
/* Normalises an axis against rank (negative counts from the end). */
kiln_status ktr_axis(const char *op, int axis, int rank, int *out);
/* Copies a kir_aval into a public kiln_aval and back. */
void ktr_aval_export(const kir_aval *in, kiln_aval *out);
kir_aval ktr_aval_import(const kiln_aval *in);

/* True if idx has an integer dtype; else the trace fails naming op. */
bool ktr_int_indices(kiln_trace *t, const char *op, kiln_val *idx);
/* jnp's index normalisation (idx < 0 becomes idx + dim), and indices with a
 * trailing index-vector dimension of size 1 (gather.c). */
kiln_val *ktr_wrap_negative(kiln_trace *t, kiln_val *idx, int64_t dim);
kiln_val *ktr_index_vector(kiln_trace *t, const char *op, kiln_val *idx);

/* ---- helpers of the numpy-level files (numpy_*.c) ---- */
/* Marks the axes a numpy reduction names (n = KILN_ALL_AXES: all); false
 * with the trace failed on a bad axis. */
bool ktr_np_axes(kiln_trace *t, const char *op, kiln_val *x, int n, const int *axes,
                 bool reduced[KIR_MAX_RANK]);
/* lax reduction `prim` of x over the marked axes, keepdims applied. */
kiln_val *ktr_np_reduce(kiln_trace *t, const char *op, kir_prim prim, kiln_val *x,
                        const bool reduced[KIR_MAX_RANK], bool keepdims);
/* jnp.sum over the marked axes: f16/bf16 accumulate in f32, cast back. */
kiln_val *ktr_np_sum(kiln_trace *t, const char *op, kiln_val *x, const bool reduced[KIR_MAX_RANK],
                     bool keepdims);
/* x as jnp's inexact computation type: i64/u64 to f64, other ints and bool
 * to f32, f16/bf16 to f32; *result gets the type the result is cast back to. */
kiln_val *ktr_np_inexact(kiln_trace *t, const char *op, kiln_val *x, kiln_dtype *result);
/* A scalar of x's dtype (strong). */
kiln_val *ktr_np_like(kiln_trace *t, kiln_val *x, double v);

/* ---- mesh axes (collective.c) ---- */
/* The axes named by `names` ("data", "data,model", "(data, model)") as bound
 * around t: their sizes' product in *size and the names normalised to
 * "data,model" in buf. An unbound name fails naming it and the bound ones. */
kiln_status ktr_axes_lookup(kiln_trace *t, const char *op, const char *names, char *buf,
                            size_t cap, int64_t *size);

/* ---- traced functions ---- */
/* Traces f over a tree whose leaves are values of t: the output tree with its
 * leaves as values of t (arrays captured as constants). */
kiln_status ktr_trace_call(kiln_trace *t, const kiln_func *f, const kiln_tree *args,
                           kiln_tree **out);
/* Traces f into a closed sub-program: its invars come from in_avals, its
 * outputs are the flattened results. Returns the output treedef, the
 * sub-program, and the values of t it captured (the sub-trace's captures,
 * lifted into t). */
typedef struct ktr_closed {
  kir_program *prog;
  kiln_treedef *out_def;
  int n_out;
  int n_captures;
  kiln_val **captures; /* values of the calling trace, malloc'ed */
} ktr_closed;
kiln_status ktr_trace_closed(kiln_trace *t, const char *op, const kiln_func *f,
                             const kiln_treedef *in_def, int n_in, const kir_aval *in_avals,
                             ktr_closed *out);
void ktr_closed_free(ktr_closed *c);

/* Flattens a tree of values (or arrays, captured as constants) into vids of
 * t's program. */
kiln_status ktr_flatten_vals(kiln_trace *t, const char *op, const kiln_tree *tree, kiln_val ***vals,
                             int *n, kiln_treedef **def);

#ifdef __cplusplus
}
#endif
#endif
