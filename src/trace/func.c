/* kiln_func objects, inline calls, and closed sub-programs for control flow. */
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

#define KTR_MAX_CALL_DEPTH 256

kiln_status kiln_func_new(kiln_fn fn, void *user, const char *name, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_func_new: out is NULL");
  *out = NULL;
  if (!fn) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_func_new: fn is NULL");
  kiln_func *f = calloc(1, sizeof *f);
  char *n = kcore_strdup(name && *name ? name : "fn");
  if (!f || !n) {
    free(f);
    free(n);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_func_new: out of host memory");
  }
  f->fn = fn;
  f->user = user;
  f->name = n;
  *out = f;
  return KILN_OK;
}

void kiln_func_free(kiln_func *f) {
  if (!f) return;
  if (f->drop) f->drop(f->user);
  free(f->name);
  free(f);
}

const char *kiln_func_name(const kiln_func *f) { return f ? f->name : ""; }

/* Runs the user function, turning a NULL result or an error recorded on the
 * trace into a failure. */
static kiln_status ktr_run(kiln_trace *t, const kiln_func *f, const kiln_tree *args,
                           kiln_tree **out) {
  if (t->depth >= KTR_MAX_CALL_DEPTH) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: calls nest deeper than %d (unbounded recursion?)",
              f->name, KTR_MAX_CALL_DEPTH);
    return t->status;
  }
  t->depth++;
  kiln_clear_error();
  kiln_tree *res = f->fn(t, args, f->user);
  t->depth--;
  if (t->status) {
    kiln_tree_free(res);
    return t->status;
  }
  if (!res) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s returned NULL%s%s", f->name,
              kiln_last_error()[0] ? ": " : " without recording an error", kiln_last_error());
    return t->status;
  }
  *out = res;
  return KILN_OK;
}

kiln_status ktr_trace_call(kiln_trace *t, const kiln_func *f, const kiln_tree *args,
                           kiln_tree **out) {
  return ktr_run(t, f, args, out);
}

kiln_tree *kiln_call(kiln_trace *t, const kiln_func *f, const kiln_tree *args) {
  if (!t || t->status) {
    ktr_sticky(t, "kiln_call");
    return NULL;
  }
  if (!f || !args) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "kiln_call: %s is NULL", f ? "args" : "the function");
    return NULL;
  }
  kiln_tree *out = NULL;
  return ktr_run(t, f, args, &out) ? NULL : out;
}

/* A leaf of a function's result as a value of t: traced values are used
 * as they are (lifted if they come from an enclosing trace), arrays become
 * constants. */
static kiln_status ktr_leaf_vid(kiln_trace *t, const char *op, const kiln_leaf *l, size_t i,
                                kir_vid *out) {
  if (l->kind == KILN_LEAF_VAL) return ktr_use(t, op, l->u.val, out);
  if (l->kind == KILN_LEAF_ARRAY) {
    kiln_val *c = kiln_const_array(t, l->u.array);
    if (!c) return t->status;
    *out = c->vid;
    return KILN_OK;
  }
  return kcore_fail(KILN_ERR_TREE,
                    "%s: leaf %zu of the result is neither a traced value nor an array", op, i);
}

kiln_status ktr_flatten_vals(kiln_trace *t, const char *op, const kiln_tree *tree,
                             kiln_val ***vals, int *n, kiln_treedef **def) {
  kiln_leaf *leaves = NULL;
  size_t nl = 0;
  kiln_treedef *d = NULL;
  kiln_status st = kiln_tree_flatten(tree, NULL, NULL, &leaves, &nl, &d);
  if (st) return kcore_fail_wrap(st, "%s", op);
  kiln_val **v = calloc(nl ? nl : 1, sizeof *v);
  if (!v) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (size_t i = 0; i < nl && !st; i++) {
    kir_vid vid;
    st = ktr_leaf_vid(t, op, &leaves[i], i, &vid);
    if (!st && !(v[i] = ktr_val(t, vid))) st = t->status;
  }
  kiln_leaves_free(leaves, nl);
  if (st) {
    free(v);
    kiln_treedef_free(d);
    return st;
  }
  *vals = v;
  *n = (int)nl;
  if (def)
    *def = d;
  else
    kiln_treedef_free(d);
  return KILN_OK;
}

/* A tree of fresh invars of t's program, shaped like in_def. */
static kiln_status ktr_invar_tree(kiln_trace *t, const kiln_treedef *in_def, int n_in,
                                  const kir_aval *in_avals, kiln_tree **out) {
  kiln_leaf *leaves = calloc(n_in ? (size_t)n_in : 1, sizeof *leaves);
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < n_in && !st; i++) {
    kir_vid vid;
    st = kir_add_invar(t->prog, &in_avals[i], &vid);
    kiln_val *v = st ? NULL : ktr_val(t, vid);
    if (!st && !v) st = t->status;
    leaves[i] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = v};
  }
  if (!st) st = kiln_tree_unflatten(in_def, leaves, (size_t)n_in, out);
  free(leaves);
  return st;
}

/* Moves the captured invars to the front: closed programs take their
 * consts before their ordinary inputs. */
static void ktr_captures_first(kiln_trace *sub) {
  kir_program *p = sub->prog;
  int nc = sub->n_captures, n = p->n_invars;
  if (nc == 0) return;
  kir_vid *order = kir_alloc(p, (size_t)n * sizeof *order);
  for (int i = 0; i < nc; i++) order[i] = sub->captures[i].inner;
  memcpy(order + nc, p->invars, (size_t)(n - nc) * sizeof *order);
  memcpy(p->invars, order, (size_t)n * sizeof *order);
}

void ktr_closed_free(ktr_closed *c) {
  kiln_treedef_free(c->out_def);
  free(c->captures);
  memset(c, 0, sizeof *c);
}

kiln_status ktr_trace_closed(kiln_trace *t, const char *op, const kiln_func *f,
                             const kiln_treedef *in_def, int n_in, const kir_aval *in_avals,
                             ktr_closed *out) {
  memset(out, 0, sizeof *out);
  kiln_trace *sub = NULL;
  kiln_tree *args = NULL, *res = NULL;
  kiln_val **vals = NULL;
  int n_out = 0;
  kiln_status st = ktr_subtrace_new(t, &sub);
  if (!st) st = ktr_invar_tree(sub, in_def, n_in, in_avals, &args);
  if (!st) st = ktr_run(sub, f, args, &res);
  if (!st) st = ktr_flatten_vals(sub, op, res, &vals, &n_out, &out->out_def);
  kir_vid *outs = NULL;
  if (!st && n_out > 0 && !(outs = kir_alloc(sub->prog, (size_t)n_out * sizeof *outs)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < n_out; i++) outs[i] = vals[i]->vid;
  if (!st) st = kir_set_outputs(sub->prog, n_out, outs);
  if (!st && sub->n_captures &&
      !(out->captures = malloc((size_t)sub->n_captures * sizeof *out->captures)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) {
    ktr_captures_first(sub);
    for (int i = 0; i < sub->n_captures; i++) out->captures[i] = sub->captures[i].outer;
    out->n_captures = sub->n_captures;
    out->prog = sub->prog;
    out->n_out = n_out;
  } else {
    if (sub && sub->status) kcore_fail(sub->status, "%s", kiln_trace_error(sub));
    kcore_fail_wrap(st, "%s: in %s", op, f->name);
    ktr_fail(t, st);
    ktr_closed_free(out);
  }
  free(vals);
  kiln_tree_free(res);
  kiln_tree_free(args);
  ktr_trace_free(sub, true);
  return st;
}
