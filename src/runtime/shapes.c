/* Tracing without running: eval_shape, make_jaxpr, partial_eval_by_shape. */
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

/* Traces f over args (arrays or kiln_aval leaves) on the context's first
 * device. */
static kiln_status krt_trace_abstract(const char *op, kiln_ctx *ctx, const kiln_func *f,
                                      const kiln_tree *args, krt_program *p) {
  memset(p, 0, sizeof *p);
  if (!ctx || !f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: ctx or f is NULL", op);
  kiln_device *dev;
  kiln_status st = kiln_device_get(ctx, 0, &dev);
  krt_signature sig;
  if (!st) st = krt_signature_of_avals(op, args, &sig);
  if (st) return st;
  if ((st = krt_trace(ctx, dev, f, &sig, p))) {
    krt_signature_free(&sig);
    return st;
  }
  p->sig = sig;
  return KILN_OK;
}

static kiln_status krt_out_avals(const char *op, const kir_program *prog, kiln_aval **out) {
  *out = malloc((size_t)(prog->n_outvars ? prog->n_outvars : 1) * sizeof **out);
  if (!*out) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; i < prog->n_outvars; i++)
    ktr_aval_export(kir_var_aval(prog, prog->outvars[i]), &(*out)[i]);
  return KILN_OK;
}

kiln_status kiln_eval_shape(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args,
                            kiln_treedef **out_def, kiln_aval **out_avals, size_t *n_out) {
  static const char op[] = "kiln_eval_shape";
  if (!out_def || !out_avals || !n_out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: NULL output", op);
  *out_def = NULL;
  *out_avals = NULL;
  *n_out = 0;
  krt_program p;
  kiln_status st = krt_trace_abstract(op, ctx, f, args, &p);
  if (!st) st = krt_out_avals(op, p.prog, out_avals);
  if (!st) {
    *out_def = p.out_def;
    p.out_def = NULL;
    *n_out = (size_t)p.n_out;
  }
  krt_program_free(&p);
  return st;
}

kiln_status kiln_make_jaxpr(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args, char **text) {
  static const char op[] = "kiln_make_jaxpr";
  if (!text) return kcore_fail(KILN_ERR_ARGUMENT, "%s: text is NULL", op);
  *text = NULL;
  krt_program p;
  kiln_status st = krt_trace_abstract(op, ctx, f, args, &p);
  if (!st) st = kir_print(p.prog, text);
  krt_program_free(&p);
  return st;
}

/* Marks the vars that depend on an invar (directly or through any equation
 * whose operands do); equations with effects count as dependent too, so
 * that they are never run at partial-evaluation time. */
static bool *krt_input_dependent(const kir_program *p) {
  bool *dep = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *dep);
  if (!dep) return NULL;
  for (int i = 0; i < p->n_invars; i++) dep[p->invars[i]] = true;
  for (int i = 0; i < p->n_eqns; i++) {
    const kir_eqn *e = &p->eqns[i];
    bool d = kir_eqn_has_effect(e);
    for (int j = 0; j < e->n_in && !d; j++) d = dep[e->in[j]];
    for (int j = 0; j < e->n_out; j++) dep[e->out[j]] = d;
  }
  return dep;
}

/* Host buffers for a program's invars or outvars; inputs are zero pages
 * (calloc), never read once DCE has dropped their uses. */
static kir_buffer *krt_host_buffers(const kir_program *prog, int n, const kir_vid *vids) {
  kir_buffer *b = calloc((size_t)(n ? n : 1), sizeof *b);
  for (int i = 0; b && i < n; i++) {
    const kir_aval *a = kir_var_aval(prog, vids[i]);
    b[i].aval = *a;
    b[i].nbytes = (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
    if (b[i].nbytes && !(b[i].data = calloc(1, b[i].nbytes))) b[i].nbytes = SIZE_MAX;
  }
  return b;
}

static void krt_host_buffers_free(kir_buffer *b, int n) {
  for (int i = 0; b && i < n; i++) free(b[i].data);
  free(b);
}

static bool krt_host_buffers_ok(const kir_buffer *b, int n) {
  for (int i = 0; b && i < n; i++)
    if (b[i].nbytes == SIZE_MAX) return false;
  return b != NULL;
}

/* Computes the input-independent outputs of p (its program is rewritten to
 * compute only them, then compiled) into known[i] on p's device. */
static kiln_status krt_eval_known(krt_program *p, const bool *dep, kiln_array **known) {
  kir_program *prog = p->prog;
  int n = prog->n_outvars, k = 0;
  int *which = malloc((size_t)(n ? n : 1) * sizeof *which);
  kir_vid *outs = kir_alloc(prog, (size_t)(n ? n : 1) * sizeof *outs);
  if (!which || !outs) {
    free(which);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < n; i++)
    if (!dep[prog->outvars[i]]) {
      which[k] = i;
      outs[k++] = prog->outvars[i];
    }
  kiln_status st = KILN_OK;
  if (k > 0) {
    kiln_compiled c;
    kiln_device *dev = p->dev;
    if (!(st = kir_set_outputs(prog, k, outs)) && !(st = krt_compile(p, &c, false))) {
      kir_program *cp = c.p.prog;
      kir_buffer *in = krt_host_buffers(cp, cp->n_invars, cp->invars);
      kir_buffer *out = krt_host_buffers(cp, cp->n_outvars, cp->outvars);
      if (!krt_host_buffers_ok(in, cp->n_invars) || !krt_host_buffers_ok(out, cp->n_outvars)) {
        st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory");
      } else {
        kir_eval_env env;
        kir_eval_env_init(&env, kir_reference_evals());
        st = kir_eval_program(&env, cp, in, out);
      }
      for (int i = 0; !st && i < k; i++)
        st = kiln_array_from_host(dev, out[i].aval.dtype, out[i].aval.rank, out[i].aval.shape,
                                  out[i].data, out[i].nbytes, &known[which[i]]);
      krt_host_buffers_free(in, cp->n_invars);
      krt_host_buffers_free(out, cp->n_outvars);
      krt_compiled_release(&c);
    }
  }
  free(which);
  return st;
}

kiln_status kiln_partial_eval_by_shape(kiln_ctx *ctx, const kiln_func *f, const kiln_tree *args,
                                       kiln_tree **out, kiln_aval **avals) {
  static const char op[] = "kiln_partial_eval_by_shape";
  if (!out || !avals) return kcore_fail(KILN_ERR_ARGUMENT, "%s: NULL output", op);
  *out = NULL;
  *avals = NULL;
  krt_program p;
  kiln_status st = krt_trace_abstract(op, ctx, f, args, &p);
  if (st) return st;
  int n = p.n_out;
  kiln_array **known = calloc((size_t)(n ? n : 1), sizeof *known);
  kiln_leaf *leaves = calloc((size_t)(n ? n : 1), sizeof *leaves);
  bool *dep = krt_input_dependent(p.prog);
  kiln_treedef *out_def = p.out_def;
  p.out_def = NULL;
  if (!known || !leaves || !dep) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = krt_out_avals(op, p.prog, avals);
  if (!st) st = krt_eval_known(&p, dep, known);
  for (int i = 0; !st && i < n; i++)
    leaves[i] = known[i] ? (kiln_leaf){.kind = KILN_LEAF_ARRAY, .u.array = known[i]}
                         : (kiln_leaf){.kind = KILN_LEAF_PTR, .u.ptr = &(*avals)[i]};
  if (!st) st = kiln_tree_unflatten(out_def, leaves, (size_t)n, out);
  for (int i = 0; known && i < n; i++) kiln_array_release(known[i]);
  if (st) {
    free(*avals);
    *avals = NULL;
    st = kcore_fail_wrap(st, "%s", op);
  }
  kiln_treedef_free(out_def);
  free(known);
  free(leaves);
  free(dep);
  krt_program_free(&p);
  return st;
}
