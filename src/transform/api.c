/* The public transformations: kiln_grad, kiln_value_and_grad, kiln_jvp,
 * kiln_vjp.
 * Each is a kiln_func that traces f into a closed sub-program of the
 * calling trace and emits the transformed program into the calling trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

typedef struct ktf_fn {
  const kiln_func *f;
  int argnums[KILN_MAX_RANK * 4];
  int num_argnums;
  bool has_aux, value;
  const char *op;
} ktf_fn;

static void ktf_drop(void *user) { free(user); }

kiln_status ktf_func_new(kiln_fn fn, void *user, const char *prefix, const kiln_func *f,
                         kiln_func **out) {
  char name[256];
  snprintf(name, sizeof name, "%s(%s)", prefix, kiln_func_name(f));
  kiln_status st = kiln_func_new(fn, user, name, out);
  if (st) {
    free(user);
    return st;
  }
  (*out)->drop = ktf_drop;
  return KILN_OK;
}

static kiln_status ktf_wrap(kiln_fn fn, ktf_fn *g, const char *prefix, kiln_func **out) {
  return ktf_func_new(fn, g, prefix, g->f, out);
}

void ktf_traced_free(ktf_traced *tr) {
  free(tr->vals);
  kiln_treedef_free(tr->def);
  ktr_closed_free(&tr->cl);
  free(tr->x);
  memset(tr, 0, sizeof *tr);
}

kiln_status ktf_trace(kiln_trace *t, const char *op, const kiln_func *f,
                             const kiln_tree *args, ktf_traced *tr) {
  memset(tr, 0, sizeof *tr);
  kiln_status st = ktr_flatten_vals(t, op, args, &tr->vals, &tr->n, &tr->def);
  if (st) return st;
  kir_aval *avals = malloc((size_t)(tr->n ? tr->n : 1) * sizeof *avals);
  if (!avals) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < tr->n; i++) avals[i] = *ktr_aval(tr->vals[i]);
  if (!st) st = ktr_trace_closed(t, op, f, tr->def, tr->n, avals, &tr->cl);
  free(avals);
  int nx = st ? 0 : tr->cl.n_captures + tr->n;
  if (!st && !(tr->x = malloc((size_t)(nx ? nx : 1) * sizeof *tr->x)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; !st && i < tr->cl.n_captures; i++)
    st = ktr_use(t, op, tr->cl.captures[i], &tr->x[i]);
  for (int i = 0; !st && i < tr->n; i++) tr->x[tr->cl.n_captures + i] = tr->vals[i]->vid;
  if (st) ktf_traced_free(tr);
  return st;
}

kiln_tree *ktf_tree(kiln_trace *t, const kiln_treedef *def, int n, const kir_vid *v) {
  kiln_leaf *leaves = calloc((size_t)(n ? n : 1), sizeof *leaves);
  if (!leaves) {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "autodiff: out of host memory");
    return NULL;
  }
  for (int i = 0; i < n; i++) leaves[i] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = ktr_val(t, v[i])};
  kiln_tree *out = NULL;
  kiln_status st = kiln_tree_unflatten(def, leaves, (size_t)n, &out);
  free(leaves);
  if (st) ktr_fail(t, st);
  return out;
}

static kiln_tree *ktf_pair(kiln_tree *a, kiln_tree *b) {
  kiln_tree *res = NULL;
  if (a && b) {
    kiln_tree *kids[2] = {a, b};
    res = kiln_tree_tuple(2, kids);
  }
  if (!res) {
    kiln_tree_free(a);
    kiln_tree_free(b);
  }
  return res;
}

/* The first output leaf must be a float scalar; with has_aux the output
 * must be a pair whose first entry is that leaf. */
static kiln_status ktf_check_out(const char *op, const kiln_func *f, const ktf_traced *tr,
                                 bool has_aux, const kir_aval *out0) {
  char ty[KIR_AVAL_STR_CAP];
  if (has_aux) {
    kiln_leaf *ph = calloc((size_t)(tr->cl.n_out ? tr->cl.n_out : 1), sizeof *ph);
    kiln_tree *s = NULL;
    if (!ph) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int i = 0; i < tr->cl.n_out; i++) ph[i] = (kiln_leaf){.kind = KILN_LEAF_PTR};
    kiln_status st = kiln_tree_unflatten(tr->cl.out_def, ph, (size_t)tr->cl.n_out, &s);
    free(ph);
    bool ok = !st && (kiln_tree_kind(s) == KILN_NODE_TUPLE || kiln_tree_kind(s) == KILN_NODE_LIST) &&
              kiln_tree_num_children(s) == 2 && kiln_tree_leaf_get(kiln_tree_child(s, 0));
    kiln_tree_free(s);
    if (!ok)
      return kcore_fail(KILN_ERR_TREE,
                        "%s(%s, has_aux=True): the function must return a pair (output, aux) "
                        "whose output is a single array", op, kiln_func_name(f));
  } else if (tr->cl.n_out != 1) {
    return kcore_fail(KILN_ERR_TREE,
                      "%s(%s): the function must return a single scalar, got a tree of %d leaves "
                      "(use has_aux for extra outputs)", op, kiln_func_name(f), tr->cl.n_out);
  }
  if (!kiln_dtype_is_float(out0->dtype))
    return kcore_fail(KILN_ERR_DTYPE,
                      "%s(%s): grad requires a real-valued (floating) output, got %s", op,
                      kiln_func_name(f), kir_aval_str(out0, ty, sizeof ty));
  if (out0->rank != 0)
    return kcore_fail(KILN_ERR_SHAPE,
                      "%s(%s): gradient only defined for scalar-output functions, the output is %s",
                      op, kiln_func_name(f), kir_aval_str(out0, ty, sizeof ty));
  return KILN_OK;
}

static kiln_tree *ktf_grad_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_fn *g = user;
  const char *op = g->op;
  kiln_node_kind kind = kiln_tree_kind(args);
  size_t nch = kiln_tree_num_children(args);
  if (kind != KILN_NODE_TUPLE && kind != KILN_NODE_LIST) {
    ktr_failf(t, KILN_ERR_TREE, "%s(%s): the arguments must be a tuple or list", op,
              kiln_func_name(g->f));
    return NULL;
  }
  for (int a = 0; a < g->num_argnums; a++)
    if (g->argnums[a] < 0 || (size_t)g->argnums[a] >= nch) {
      ktr_failf(t, KILN_ERR_ARGUMENT,
                "%s(%s): argnums %d is out of range for a function called with %zu positional "
                "arguments", op, kiln_func_name(g->f), g->argnums[a], nch);
      return NULL;
    }
  ktf_traced tr;
  if (ktf_trace(t, op, g->f, args, &tr)) return NULL;
  int nc = tr.cl.n_captures, nx = nc + tr.n;
  bool *diff = calloc((size_t)nx, sizeof *diff);
  size_t *off = calloc(nch + 1, sizeof *off);
  kir_vid *buf = malloc((size_t)(nx + 2 * tr.cl.n_out + 1) * sizeof *buf);
  kiln_tree *res = NULL, *grads = NULL, *value = NULL;
  kiln_status st = diff && off && buf ? KILN_OK
                                      : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (size_t c = 0; !st && c < nch; c++) off[c + 1] = off[c] + kiln_tree_num_leaves(kiln_tree_child(args, c));
  for (int a = 0; !st && a < g->num_argnums; a++)
    for (size_t i = off[g->argnums[a]]; !st && i < off[g->argnums[a] + 1]; i++) {
      const kir_aval *av = ktr_aval(tr.vals[i]);
      char ty[KIR_AVAL_STR_CAP];
      if (!kiln_dtype_is_float(av->dtype))
        st = kcore_fail(KILN_ERR_DTYPE,
                        "%s(%s): grad requires real-valued (floating) inputs, argument %d has a "
                        "leaf of type %s", op, kiln_func_name(g->f), g->argnums[a],
                        kir_aval_str(av, ty, sizeof ty));
      diff[nc + i] = true;
    }
  kir_vid *ctx = buf, *ct = buf + nx, *y = buf + nx + tr.cl.n_out;
  if (!st) st = ktf_check_out(op, g->f, &tr, g->has_aux, kir_var_aval(tr.cl.prog, tr.cl.prog->outvars[0]));
  for (int i = 0; !st && i < tr.cl.n_out; i++) ct[i] = KIR_NO_VAR;
  if (!st)
    st = kir_add_literal(t->prog, kir_var_aval(tr.cl.prog, tr.cl.prog->outvars[0])->dtype, false,
                         kir_scalar_f(1.0), &ct[0]);
  if (!st) st = ktf_vjp(op, t->prog, tr.cl.prog, tr.x, diff, ct, y, ctx);
  if (st) {
    ktr_fail(t, st);
  } else {
    kiln_tree **parts = calloc((size_t)g->num_argnums, sizeof *parts);
    int made = 0;
    for (; parts && made < g->num_argnums; made++) {
      const kiln_tree *child = kiln_tree_child(args, (size_t)g->argnums[made]);
      kiln_leaf *lv = NULL;
      size_t nl = 0;
      kiln_treedef *cdef = NULL;
      if (kiln_tree_flatten(child, NULL, NULL, &lv, &nl, &cdef)) break;
      kiln_leaves_free(lv, nl);
      parts[made] = ktf_tree(t, cdef, (int)nl, ctx + nc + off[g->argnums[made]]);
      kiln_treedef_free(cdef);
      if (!parts[made]) break;
    }
    if (made == g->num_argnums)
      grads = g->num_argnums == 1 ? parts[0] : kiln_tree_tuple((size_t)made, parts);
    if (g->num_argnums != 1 || !grads)
      for (int i = 0; i < made; i++) kiln_tree_free(parts[i]);
    free(parts);
    value = grads ? ktf_tree(t, tr.cl.out_def, tr.cl.n_out, y) : NULL;
    if (!grads || !value) {
      if (!t->status) ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
      kiln_tree_free(grads);
      kiln_tree_free(value);
    } else if (g->value) {
      res = ktf_pair(value, grads);
    } else if (g->has_aux) {
      kiln_tree *aux = kiln_tree_clone(kiln_tree_child(value, 1));
      kiln_tree_free(value);
      res = ktf_pair(grads, aux);
    } else {
      kiln_tree_free(value);
      res = grads;
    }
  }
  free(diff);
  free(off);
  free(buf);
  ktf_traced_free(&tr);
  return res;
}

static kiln_status ktf_make(const char *op, const kiln_func *f, const int *argnums,
                            int num_argnums, int has_aux, bool value, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the function is NULL", op);
  if (num_argnums < 0 || num_argnums > (int)(sizeof ((ktf_fn *)0)->argnums / sizeof(int)) ||
      (num_argnums > 0 && !argnums))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s(%s): invalid argnums (%d entries)", op,
                      kiln_func_name(f), num_argnums);
  ktf_fn *g = calloc(1, sizeof *g);
  if (!g) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  g->f = f;
  g->op = op;
  g->has_aux = has_aux != 0;
  g->value = value;
  g->num_argnums = num_argnums ? num_argnums : 1;
  for (int i = 0; i < num_argnums; i++) {
    for (int j = 0; j < i; j++)
      if (argnums[j] == argnums[i]) {
        free(g);
        return kcore_fail(KILN_ERR_ARGUMENT, "%s(%s): argnums %d is repeated", op,
                          kiln_func_name(f), argnums[i]);
      }
    g->argnums[i] = argnums[i];
  }
  return ktf_wrap(ktf_grad_fn, g, value ? "value_and_grad" : "grad", out);
}

kiln_status kiln_grad(const kiln_func *f, const int *argnums, int num_argnums, int has_aux,
                      kiln_func **out) {
  return ktf_make("kiln_grad", f, argnums, num_argnums, has_aux, false, out);
}

kiln_status kiln_value_and_grad(const kiln_func *f, const int *argnums, int num_argnums,
                                int has_aux, kiln_func **out) {
  return ktf_make("kiln_value_and_grad", f, argnums, num_argnums, has_aux, true, out);
}

/* ---- jvp ---- */

static kiln_tree *ktf_jvp_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_fn *g = user;
  static const char op[] = "kiln_jvp";
  if (kiln_tree_num_children(args) != 2) {
    ktr_failf(t, KILN_ERR_TREE, "%s(%s): takes the pair (primals, tangents)", op,
              kiln_func_name(g->f));
    return NULL;
  }
  const kiln_tree *prim = kiln_tree_child(args, 0), *tan = kiln_tree_child(args, 1);
  kiln_val **tv = NULL;
  int nt = 0;
  kiln_treedef *tdef = NULL;
  ktf_traced tr;
  kiln_status st = ktr_flatten_vals(t, op, tan, &tv, &nt, &tdef);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  st = ktf_trace(t, op, g->f, prim, &tr);
  if (!st && !kiln_treedef_equal(tr.def, tdef)) {
    char diff[256];
    kiln_treedef_diff(tr.def, tdef, diff, sizeof diff);
    st = kcore_fail(KILN_ERR_TREE, "%s(%s): primals and tangents differ in structure: %s", op,
                    kiln_func_name(g->f), diff);
  }
  for (int i = 0; !st && i < nt; i++) {
    const kir_aval *pa = ktr_aval(tr.vals[i]), *ta = ktr_aval(tv[i]);
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP];
    if (!kir_aval_typematch(pa, ta))
      st = kcore_fail(KILN_ERR_DTYPE, "%s(%s): leaf %d: primal type %s but tangent type %s", op,
                      kiln_func_name(g->f), i, kir_aval_str(pa, t1, sizeof t1),
                      kir_aval_str(ta, t2, sizeof t2));
  }
  int nc = st ? 0 : tr.cl.n_captures, nx = nc + nt, no = st ? 0 : tr.cl.n_out;
  kir_vid *buf = st ? NULL : malloc((size_t)(nx + 2 * no + 1) * sizeof *buf);
  if (!st && !buf) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kir_vid *tx = buf, *y = buf + nx, *ty = buf + nx + no;
  for (int i = 0; !st && i < nc; i++) tx[i] = KIR_NO_VAR;
  for (int i = 0; !st && i < nt; i++) st = ktr_use(t, op, tv[i], &tx[nc + i]);
  if (!st) st = ktf_jvp(op, t->prog, tr.cl.prog, tr.x, tx, y, ty);
  for (int i = 0; !st && i < no; i++) {
    const kir_aval *a = kir_var_aval(t->prog, y[i]);
    if (ty[i] == KIR_NO_VAR) st = kir_emit_zeros(t->prog, a, &ty[i]);
  }
  kiln_tree *res = NULL;
  if (st)
    ktr_fail(t, st);
  else
    res = ktf_pair(ktf_tree(t, tr.cl.out_def, no, y), ktf_tree(t, tr.cl.out_def, no, ty));
  ktf_traced_free(&tr);
  free(buf);
  free(tv);
  kiln_treedef_free(tdef);
  return res;
}

kiln_status kiln_jvp(const kiln_func *f, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jvp: out is NULL");
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_jvp: the function is NULL");
  ktf_fn *g = calloc(1, sizeof *g);
  if (!g) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_jvp: out of host memory");
  g->f = f;
  return ktf_wrap(ktf_jvp_fn, g, "jvp", out);
}

/* ---- vjp ---- */

static kiln_tree *ktf_vjp_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_fn *g = user;
  static const char op[] = "kiln_vjp";
  if (kiln_tree_num_children(args) != 2) {
    ktr_failf(t, KILN_ERR_TREE, "%s(%s): takes the pair (primals, cotangents)", op,
              kiln_func_name(g->f));
    return NULL;
  }
  kiln_val **cv = NULL;
  int nct = 0;
  kiln_treedef *cdef = NULL;
  ktf_traced tr;
  kiln_status st = ktr_flatten_vals(t, op, kiln_tree_child(args, 1), &cv, &nct, &cdef);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  st = ktf_trace(t, op, g->f, kiln_tree_child(args, 0), &tr);
  if (!st && !kiln_treedef_equal(tr.cl.out_def, cdef)) {
    char diff[256];
    kiln_treedef_diff(tr.cl.out_def, cdef, diff, sizeof diff);
    st = kcore_fail(KILN_ERR_TREE, "%s(%s): the cotangents differ in structure from the outputs: %s",
                    op, kiln_func_name(g->f), diff);
  }
  for (int i = 0; !st && i < nct; i++) {
    const kir_aval *oa = kir_var_aval(tr.cl.prog, tr.cl.prog->outvars[i]), *ca = ktr_aval(cv[i]);
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP];
    if (!kir_aval_typematch(oa, ca))
      st = kcore_fail(KILN_ERR_DTYPE, "%s(%s): output leaf %d has type %s but its cotangent %s", op,
                      kiln_func_name(g->f), i, kir_aval_str(oa, t1, sizeof t1),
                      kir_aval_str(ca, t2, sizeof t2));
  }
  int nc = st ? 0 : tr.cl.n_captures, nx = st ? 0 : nc + tr.n;
  kir_vid *buf = st ? NULL : malloc((size_t)(nx + 2 * nct + 1) * sizeof *buf);
  bool *diff = st ? NULL : calloc((size_t)(nx ? nx : 1), sizeof *diff);
  if (!st && (!buf || !diff)) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kir_vid *ctx = buf, *ct = buf + nx, *y = buf + nx + nct;
  for (int i = 0; !st && i < tr.n; i++) diff[nc + i] = kiln_dtype_is_float(ktr_aval(tr.vals[i])->dtype);
  for (int i = 0; !st && i < nct; i++)
    ct[i] = kiln_dtype_is_float(ktr_aval(cv[i])->dtype) ? cv[i]->vid : KIR_NO_VAR;
  if (!st) st = ktf_vjp(op, t->prog, tr.cl.prog, tr.x, diff, ct, y, ctx);
  /* integer and bool inputs: float0-like zeros (bool, the input's shape) */
  for (int i = 0; !st && i < tr.n; i++)
    if (!diff[nc + i]) {
      kir_aval z = *ktr_aval(tr.vals[i]);
      z.dtype = KILN_BOOL;
      z.weak = false;
      st = kir_emit_zeros(t->prog, &z, &ctx[nc + i]);
    }
  kiln_tree *res = NULL;
  if (st)
    ktr_fail(t, st);
  else
    res = ktf_pair(ktf_tree(t, tr.cl.out_def, nct, y), ktf_tree(t, tr.def, tr.n, ctx + nc));
  ktf_traced_free(&tr);
  free(buf);
  free(diff);
  free(cv);
  kiln_treedef_free(cdef);
  return res;
}

kiln_status kiln_vjp(const kiln_func *f, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_vjp: out is NULL");
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_vjp: the function is NULL");
  ktf_fn *g = calloc(1, sizeof *g);
  if (!g) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_vjp: out of host memory");
  g->f = f;
  return ktf_wrap(ktf_vjp_fn, g, "vjp", out);
}
