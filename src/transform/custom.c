/* Custom derivative rules (jax.custom_jvp, jax.custom_vjp): the public
 * kiln_custom_jvp / kiln_custom_vjp, which trace the function and its
 * rules into one custom_jvp_call / custom_vjp_call equation, and the
 * rules of those equations (and of custom_lin) under jvp, transposition
 * and vmap.
 *
 * Every sub-program of one call takes the union of all their captures
 * first (the consts). A capture is a constant to the rule: if autodiff
 * finds a tangent on one, it fails (JAX asks for closure_convert there)
 * rather than drop it silently. */
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

typedef struct ktf_custom {
  const kiln_func *f, *jvp, *fwd, *bwd;
} ktf_custom;

/* Adds n invars of avals at position `at` of p's invars. */
static kiln_status ktf_insert_invars(kir_program *p, int at, int n, kiln_val *const *vals) {
  int before = p->n_invars;
  for (int i = 0; i < n; i++) {
    kir_vid v;
    kiln_status st = kir_add_invar(p, ktr_aval(vals[i]), &v);
    if (st) return st;
  }
  kir_vid *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
  if (!tmp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "custom rule: out of host memory");
  memcpy(tmp, p->invars + before, (size_t)n * sizeof *tmp);
  memmove(p->invars + at + n, p->invars + at, (size_t)(before - at) * sizeof *tmp);
  memcpy(p->invars + at, tmp, (size_t)n * sizeof *tmp);
  free(tmp);
  return KILN_OK;
}

/* Makes each of the n closed programs take every program's captures, in
 * order, before its own arguments; writes them as vars of t to consts
 * (room for all) and their count to *nc. */
static kiln_status ktf_join_consts(kiln_trace *t, const char *op, int n, ktr_closed *const *cl,
                                   kir_vid *consts, int *nc) {
  int total = 0;
  for (int k = 0; k < n; k++) {
    for (int i = 0; i < cl[k]->n_captures; i++) {
      kiln_status st = ktr_use(t, op, cl[k]->captures[i], &consts[total + i]);
      if (st) return st;
    }
    total += cl[k]->n_captures;
  }
  for (int k = 0; k < n; k++) {
    int at = 0;
    for (int o = 0; o < n; o++) {
      if (o != k) {
        kiln_status st = ktf_insert_invars(cl[k]->prog, at, cl[o]->n_captures, cl[o]->captures);
        if (st) return st;
      }
      at += cl[o]->n_captures;
    }
  }
  *nc = total;
  return KILN_OK;
}

/* A custom call's operands: the n closed programs' captures, joined
 * (ktf_join_consts), then f's own arguments; *in is malloc'ed (free it),
 * *nc the captures' count. */
static kiln_status ktf_call_operands(kiln_trace *t, const char *op, int n, ktr_closed *const *cl,
                                     const ktf_traced *f, kir_vid **in, int *nc) {
  int ncap = 0;
  for (int k = 0; k < n; k++) ncap += cl[k]->n_captures;
  if (!(*in = malloc((size_t)(ncap + f->n + 1) * sizeof **in)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kiln_status st = ktf_join_consts(t, op, n, cl, *in, nc);
  for (int i = 0; !st && i < f->n; i++) (*in)[*nc + i] = f->x[f->cl.n_captures + i];
  return st;
}

/* The output avals of prog from `from` agree with those of ref (typematch). */
static kiln_status ktf_check_outs(const char *op, const char *what, const kir_program *prog,
                                  int from, const kir_program *ref) {
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  for (int i = 0; i < ref->n_outvars; i++) {
    const kir_aval *a = kir_var_aval(prog, prog->outvars[from + i]);
    const kir_aval *b = kir_var_aval(ref, ref->outvars[i]);
    if (!kir_aval_typematch(a, b))
      return kcore_fail(KILN_ERR_SHAPE, "%s: %s output %d is %s but the function's is %s", op, what,
                        i, kir_aval_str(a, t0, sizeof t0), kir_aval_str(b, t1, sizeof t1));
  }
  return KILN_OK;
}

/* Emits prim over (consts, args) with params pr into t; the results as
 * f's output tree. */
static kiln_tree *ktf_bind_call(kiln_trace *t, kir_prim prim, const kir_params *pr, int n,
                                const kir_vid *in, const ktr_closed *f) {
  int idx;
  kiln_status st = kir_add_eqn(t->prog, prim, pr, n, in, &idx);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  return ktf_tree(t, f->out_def, f->n_out, t->prog->eqns[idx].out);
}

/* ---- kiln_custom_jvp ---- */

static kiln_tree *ktf_custom_jvp_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_custom *c = user;
  static const char op[] = "kiln_custom_jvp";
  ktf_traced tf, tj;
  kiln_tree *pair = NULL, *res = NULL;
  kir_vid *in = NULL;
  memset(&tj, 0, sizeof tj);
  kiln_status st = ktf_trace(t, op, c->f, args, &tf);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  kiln_tree *kids[2] = {kiln_tree_clone(args), kiln_tree_clone(args)};
  if (kids[0] && kids[1]) pair = kiln_tree_tuple(2, kids);
  if (!pair) {
    kiln_tree_free(kids[0]);
    kiln_tree_free(kids[1]);
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  if (!st) st = ktf_trace(t, op, c->jvp, pair, &tj);
  kiln_tree_free(pair);
  int no = tf.cl.n_out;
  if (!st && tj.cl.n_out != 2 * no)
    st = kcore_fail(KILN_ERR_TREE,
                    "%s(%s): the jvp rule %s must return (primal outputs, tangent outputs), %d "
                    "leaves in all, but returns %d", op, kiln_func_name(c->f),
                    kiln_func_name(c->jvp), 2 * no, tj.cl.n_out);
  if (!st) st = ktf_check_outs(op, "the jvp rule's primal", tj.cl.prog, 0, tf.cl.prog);
  if (!st) st = ktf_check_outs(op, "the jvp rule's tangent", tj.cl.prog, no, tf.cl.prog);
  ktr_closed *cl[2] = {&tf.cl, &tj.cl};
  int nc = 0;
  if (!st) st = ktf_call_operands(t, op, 2, cl, &tf, &in, &nc);
  if (st) {
    ktr_fail(t, st);
  } else {
    kir_params pr;
    memset(&pr, 0, sizeof pr);
    pr.custom_jvp = (kir_p_custom_jvp){tf.cl.prog, tj.cl.prog, nc};
    res = ktf_bind_call(t, KIR_PRIM_CUSTOM_JVP_CALL, &pr, nc + tf.n, in, &tf.cl);
  }
  free(in);
  ktf_traced_free(&tf);
  ktf_traced_free(&tj);
  return res;
}

static kiln_status ktf_custom_new(const char *op, kiln_fn fn, const char *prefix, ktf_custom c,
                                  kiln_func **out) {
  ktf_custom *u = malloc(sizeof *u);
  if (!u) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  *u = c;
  return ktf_func_new(fn, u, prefix, c.f, out);
}

kiln_status kiln_custom_jvp(const kiln_func *f, const kiln_func *jvp, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_custom_jvp: out is NULL");
  *out = NULL;
  if (!f || !jvp) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_custom_jvp: the function or its rule is NULL");
  return ktf_custom_new("kiln_custom_jvp", ktf_custom_jvp_fn, "custom_jvp", (ktf_custom){f, jvp, NULL, NULL}, out);
}

/* ---- kiln_custom_vjp ---- */

/* The tree def of (residuals, output cotangents) from fwd's (outputs,
 * residuals); fails unless fwd returns such a pair. */
static kiln_status ktf_bwd_def(const char *op, const ktf_custom *c, const ktr_closed *w, int no,
                               kiln_treedef **def) {
  kiln_leaf *ph = calloc((size_t)(w->n_out ? w->n_out : 1), sizeof *ph);
  kiln_tree *s = NULL, *pair = NULL;
  if (!ph) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; i < w->n_out; i++) ph[i] = (kiln_leaf){.kind = KILN_LEAF_PTR};
  kiln_status st = kiln_tree_unflatten(w->out_def, ph, (size_t)w->n_out, &s);
  free(ph);
  bool ok = !st && (kiln_tree_kind(s) == KILN_NODE_TUPLE || kiln_tree_kind(s) == KILN_NODE_LIST) &&
            kiln_tree_num_children(s) == 2 &&
            kiln_tree_num_leaves(kiln_tree_child(s, 0)) == (size_t)no;
  if (ok) {
    kiln_tree *kids[2] = {kiln_tree_clone(kiln_tree_child(s, 1)), kiln_tree_clone(kiln_tree_child(s, 0))};
    if (kids[0] && kids[1]) pair = kiln_tree_tuple(2, kids);
    if (!pair) {
      kiln_tree_free(kids[0]);
      kiln_tree_free(kids[1]);
    }
  }
  kiln_tree_free(s);
  if (!ok)
    return kcore_fail(KILN_ERR_TREE,
                      "%s(%s): fwd %s must return the pair (outputs, residuals) with the "
                      "function's %d output leaves first", op, kiln_func_name(c->f),
                      kiln_func_name(c->fwd), no);
  if (!pair) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kiln_leaf *lv = NULL;
  size_t nl = 0;
  st = kiln_tree_flatten(pair, NULL, NULL, &lv, &nl, def);
  kiln_leaves_free(lv, nl);
  kiln_tree_free(pair);
  return st;
}

static kiln_tree *ktf_custom_vjp_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_custom *c = user;
  static const char op[] = "kiln_custom_vjp";
  ktf_traced tf, tw;
  ktr_closed bw;
  kiln_treedef *bdef = NULL;
  kir_aval *avals = NULL;
  kir_vid *in = NULL;
  kiln_tree *res = NULL;
  memset(&tw, 0, sizeof tw);
  memset(&bw, 0, sizeof bw);
  kiln_status st = ktf_trace(t, op, c->f, args, &tf);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  int no = tf.cl.n_out, nr = 0;
  st = ktf_trace(t, op, c->fwd, args, &tw);
  if (!st) st = ktf_bwd_def(op, c, &tw.cl, no, &bdef);
  if (!st) st = ktf_check_outs(op, "fwd", tw.cl.prog, 0, tf.cl.prog);
  if (!st) {
    nr = tw.cl.n_out - no;
    if (!(avals = malloc((size_t)(nr + no + 1) * sizeof *avals)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (int i = 0; !st && i < nr + no; i++) {
    const kir_program *w = tw.cl.prog;
    avals[i] = *kir_var_aval(w, w->outvars[i < nr ? no + i : i - nr]);
    if (i >= nr) avals[i].weak = false;
  }
  if (!st) st = ktr_trace_closed(t, op, c->bwd, bdef, nr + no, avals, &bw);
  if (!st && bw.n_out != tf.n)
    st = kcore_fail(KILN_ERR_TREE,
                    "%s(%s): bwd %s must return one cotangent per argument leaf (%d), it returns %d",
                    op, kiln_func_name(c->f), kiln_func_name(c->bwd), tf.n, bw.n_out);
  for (int i = 0; !st && i < tf.n; i++) {
    const kir_aval *a = ktr_aval(tf.vals[i]), *b = kir_var_aval(bw.prog, bw.prog->outvars[i]);
    char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
    if (!kir_aval_same_shape(a, b) || (kiln_dtype_is_float(a->dtype) && a->dtype != b->dtype))
      st = kcore_fail(KILN_ERR_SHAPE, "%s(%s): bwd gives %s as the cotangent of argument leaf %d "
                      "of type %s", op, kiln_func_name(c->f), kir_aval_str(b, t0, sizeof t0), i,
                      kir_aval_str(a, t1, sizeof t1));
  }
  ktr_closed *cl[3] = {&tf.cl, &tw.cl, &bw};
  int nc = 0;
  if (!st) st = ktf_call_operands(t, op, 3, cl, &tf, &in, &nc);
  if (st) {
    ktr_fail(t, st);
  } else {
    kir_params pr;
    memset(&pr, 0, sizeof pr);
    pr.custom_vjp = (kir_p_custom_vjp){bw.prog, tf.cl.prog, tw.cl.prog, nc};
    res = ktf_bind_call(t, KIR_PRIM_CUSTOM_VJP_CALL, &pr, nc + tf.n, in, &tf.cl);
  }
  free(in);
  free(avals);
  kiln_treedef_free(bdef);
  ktr_closed_free(&bw);
  ktf_traced_free(&tf);
  ktf_traced_free(&tw);
  return res;
}

kiln_status kiln_custom_vjp(const kiln_func *f, const kiln_func *fwd, const kiln_func *bwd,
                            kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_custom_vjp: out is NULL");
  *out = NULL;
  if (!f || !fwd || !bwd)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_custom_vjp: the function, fwd or bwd is NULL");
  return ktf_custom_new("kiln_custom_vjp", ktf_custom_vjp_fn, "custom_vjp", (ktf_custom){f, NULL, fwd, bwd}, out);
}

/* ---- rules ---- */

/* The consts must have no tangent; the args' tangents, zeros materialised,
 * go to targs. */
static kiln_status ktf_custom_tangents(const char *op, kir_program *dst, const kir_eqn *e, int nc,
                                       const kir_vid *x, const kir_vid *tx, kir_vid *targs) {
  for (int i = 0; i < nc; i++)
    if (tx[i] != KIR_NO_VAR)
      return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                        "%s: %s closes over a value that is being differentiated (a capture of "
                        "the function or of its rules); pass it as an argument instead", op,
                        kir_prim_name(e->prim));
  for (int i = nc; i < e->n_in; i++) {
    targs[i - nc] = tx[i];
    if (tx[i] != KIR_NO_VAR) continue;
    kir_aval a = *kir_var_aval(dst, x[i]);
    a.weak = false;
    kiln_status st = kir_emit_zeros(dst, &a, &targs[i - nc]);
    if (st) return st;
  }
  return KILN_OK;
}

/* jvp of custom_jvp_call: the user's rule, inlined (its primal outputs are
 * the results, as in JAX). */
kiln_status ktf_jvp_custom_jvp(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_p_custom_jvp *c = &e->params.custom_jvp;
  int n = e->n_in, nc = (int)c->num_consts, no = e->n_out;
  kir_vid *in = malloc((size_t)(2 * n + 2 * no) * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  memcpy(in, x, (size_t)n * sizeof *in);
  kiln_status st = ktf_custom_tangents(op, dst, e, nc, x, tx, in + n);
  kir_vid *out = in + 2 * n - nc;
  if (!st) st = ktf_inline(op, dst, c->jvp_jaxpr, in, out);
  for (int i = 0; !st && i < no; i++) {
    y[i] = out[i];
    ty[i] = out[no + i];
  }
  free(in);
  return st;
}

/* jvp of custom_vjp_call: fwd inlined for the outputs and residuals, and a
 * custom_lin of the tangents that only transposition can evaluate. */
kiln_status ktf_jvp_custom_vjp(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_p_custom_vjp *c = &e->params.custom_vjp;
  int n = e->n_in, nc = (int)c->num_consts, no = e->n_out, nf = c->fwd_jaxpr->n_outvars;
  int nr = nf - no, na = n - nc;
  kir_vid *out = malloc((size_t)(nf + nc + nr + na + 1) * sizeof *out);
  kir_aval *avals = malloc((size_t)(no + 1) * sizeof *avals);
  kiln_status st = out && avals ? KILN_OK
                                : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kir_vid *lin_in = out + nf;
  if (!st) st = ktf_inline(op, dst, c->fwd_jaxpr, x, out);
  if (!st) {
    memcpy(lin_in, x, (size_t)nc * sizeof *lin_in);
    memcpy(lin_in + nc, out + no, (size_t)nr * sizeof *lin_in);
    st = ktf_custom_tangents(op, dst, e, nc, x, tx, lin_in + nc + nr);
  }
  for (int i = 0; !st && i < no; i++) {
    y[i] = out[i];
    avals[i] = *kir_var_aval(dst, out[i]);
    avals[i].weak = false;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.custom_lin = (kir_p_custom_lin){NULL, nc, nr, {no, avals}};
  int idx;
  if (!st) st = ktf_copy_sub(dst, c->bwd_jaxpr, &pr.custom_lin.bwd_jaxpr);
  if (!st) st = kir_add_eqn(dst, KIR_PRIM_CUSTOM_LIN, &pr, nc + nr + na, lin_in, &idx);
  for (int i = 0; !st && i < no; i++) ty[i] = dst->eqns[idx].out[i];
  free(out);
  free(avals);
  return st;
}

kiln_status ktf_jvp_custom_lin(const char *op, kir_program *dst, const kir_eqn *e,
                               const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  (void)dst, (void)e, (void)x, (void)tx, (void)y, (void)ty;
  return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                    "%s: can't apply forward-mode autodiff (jvp) to a custom_vjp function (as JAX)",
                    op);
}

/* custom_lin is linear in the tangents: bwd maps the output cotangents to
 * theirs. */
kiln_status ktf_transpose_custom_lin(kir_program *p, const kir_program *src, const kir_eqn *e,
                                     const bool *lin, const kir_vid *x, const kir_vid *ct,
                                     kir_vid *ct_x) {
  (void)src;
  const kir_p_custom_lin *l = &e->params.custom_lin;
  int nk = (int)(l->num_consts + l->num_res), no = e->n_out;
  for (int i = 0; i < nk; i++)
    if (lin[i])
      return kcore_fail(KILN_ERR_INTERNAL, "custom_lin: a const or residual is linear");
  kir_vid *in = malloc((size_t)(nk + no + e->n_in) * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "custom_lin: out of host memory");
  memcpy(in, x, (size_t)nk * sizeof *in);
  memcpy(in + nk, ct, (size_t)no * sizeof *in);
  kiln_status st = ktf_inline("custom_lin", p, l->bwd_jaxpr, in, ct_x + nk);
  for (int i = nk; !st && i < e->n_in; i++)
    if (!lin[i]) ct_x[i] = KIR_NO_VAR;
  free(in);
  return st;
}

/* A call equation's n operands with their batch axes moved to the front
 * (*in), and their batch dims (*b, room for `extra` more after them); the
 * caller frees both, also on failure. */
static kiln_status ktf_batch_call_operands(const char *op, kir_program *p, int n,
                                           const kir_vid *x, const int *bd, int extra,
                                           kir_vid **in, int **b) {
  *in = malloc((size_t)n * sizeof **in);
  *b = malloc((size_t)(n + extra) * sizeof **b);
  if (!*in || !*b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  return ktf_batch_operands_front(p, n, x, bd, *in, *b);
}

/* vmap: every sub-program batched with its operands mapped at 0 and its
 * results forced to 0, so that the function and its rules agree. */
kiln_status ktf_batch_custom_jvp(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd) {
  (void)src;
  static const char op[] = "vmap of custom_jvp_call";
  const kir_p_custom_jvp *c = &e->params.custom_jvp;
  int n = e->n_in, nc = (int)c->num_consts;
  kir_vid *in;
  int *b;
  kiln_status st = ktf_batch_call_operands(op, p, n, x, bd, n, &in, &b);
  if (!st) memcpy(b + n, b + nc, (size_t)(n - nc) * sizeof *b); /* tangents as their primals */
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.custom_jvp.num_consts = nc;
  if (!st) st = ktf_batch_sub(op, p, c->call_jaxpr, size, b, NULL, &pr.custom_jvp.call_jaxpr);
  if (!st) st = ktf_batch_sub(op, p, c->jvp_jaxpr, size, b, NULL, &pr.custom_jvp.jvp_jaxpr);
  if (!st) st = ktf_emit_mapped(p, KIR_PRIM_CUSTOM_JVP_CALL, &pr, n, in, e->n_out, y, ybd);
  free(in);
  free(b);
  return st;
}

kiln_status ktf_batch_custom_vjp(kir_program *p, const kir_program *src, const kir_eqn *e,
                                 int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                 int *ybd) {
  (void)src;
  static const char op[] = "vmap of custom_vjp_call";
  const kir_p_custom_vjp *c = &e->params.custom_vjp;
  int n = e->n_in, nc = (int)c->num_consts, nb = c->bwd_jaxpr->n_invars;
  kir_vid *in;
  int *b;
  kiln_status st = ktf_batch_call_operands(op, p, n, x, bd, nb, &in, &b);
  int *bb = b ? b + n : NULL;
  for (int i = 0; !st && i < nb; i++) bb[i] = i < nc ? b[i] : 0; /* residuals and cotangents */
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.custom_vjp.num_consts = nc;
  if (!st) st = ktf_batch_sub(op, p, c->call_jaxpr, size, b, NULL, &pr.custom_vjp.call_jaxpr);
  if (!st) st = ktf_batch_sub(op, p, c->fwd_jaxpr, size, b, NULL, &pr.custom_vjp.fwd_jaxpr);
  if (!st) st = ktf_batch_sub(op, p, c->bwd_jaxpr, size, bb, NULL, &pr.custom_vjp.bwd_jaxpr);
  /* an unmapped argument's cotangent is the sum over the batch */
  kir_program *bw = st ? NULL : pr.custom_vjp.bwd_jaxpr;
  for (int i = 0; !st && i < n - nc; i++) {
    if (b[nc + i] >= 0) continue;
    kir_params r;
    memset(&r, 0, sizeof r);
    r.axes.axes.n = 1;
    st = kir_emit(bw, KIR_PRIM_REDUCE_SUM, &r, 1, &bw->outvars[i], &bw->outvars[i]);
  }
  if (!st) st = ktf_emit_mapped(p, KIR_PRIM_CUSTOM_VJP_CALL, &pr, n, in, e->n_out, y, ybd);
  free(in);
  free(b);
  return st;
}
