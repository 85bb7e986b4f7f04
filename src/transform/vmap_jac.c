/* kiln_jacfwd, kiln_jacrev, kiln_hessian as JAX builds them: the jvp (vjp)
 * program of f is batched (ktf_vmap) over the standard basis of the
 * inputs' (outputs') tangent space, one row of the identity per lane; the
 * lanes are then split per leaf and reshaped to [*out_shape, *in_shape].
 * hessian is jacfwd of jacrev. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/transform.h"
#include "transform/transform.h"

#define TRY(x)             \
  do {                     \
    kiln_status st_ = (x); \
    if (st_) return st_;   \
  } while (0)

typedef struct ktf_jac {
  const kiln_func *f;
  kiln_func *inner; /* owned (hessian's jacrev) */
  int argnum;
  bool rev;
} ktf_jac;

static void ktf_jac_drop(void *user) {
  ktf_jac *g = user;
  kiln_func_free(g->inner);
  free(g);
}

static kiln_status slice0(kir_program *p, kir_vid x, int64_t lo, int64_t hi, kir_vid *out) {
  const kir_aval *a = kir_var_aval(p, x);
  if (lo == 0 && hi == a->shape[0]) {
    *out = x;
    return KILN_OK;
  }
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.slice.start_indices.n = pr.slice.limit_indices.n = pr.slice.strides.n = a->rank;
  for (int i = 0; i < a->rank; i++) {
    pr.slice.limit_indices.v[i] = i ? a->shape[i] : hi;
    pr.slice.start_indices.v[i] = i ? 0 : lo;
    pr.slice.strides.v[i] = 1;
  }
  return kir_emit(p, KIR_PRIM_SLICE, &pr, 1, &x, out);
}

static kiln_status reshape2(kir_program *p, kir_vid x, const kir_aval *a, const kir_aval *b,
                            kir_vid *out) {
  if (a->rank + b->rank > KIR_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "jacobian: rank %d + %d exceeds kiln's rank limit %d",
                      a->rank, b->rank, KIR_MAX_RANK);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = a->rank + b->rank;
  memcpy(pr.reshape.new_sizes.v, a->shape, (size_t)a->rank * sizeof(int64_t));
  memcpy(pr.reshape.new_sizes.v + a->rank, b->shape, (size_t)b->rank * sizeof(int64_t));
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &x, out);
}

/* The rows [off, off + size(a)) of the identity of order k, shaped [k, *a]. */
static kiln_status basis(kir_program *p, int64_t k, int64_t off, const kir_aval *a, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.iota.dtype = KILN_I32;
  pr.iota.shape.n = 2;
  pr.iota.shape.v[0] = pr.iota.shape.v[1] = k;
  kir_vid r, c, eye;
  TRY(kir_emit(p, KIR_PRIM_IOTA, &pr, 0, NULL, &r));
  pr.iota.dimension = 1;
  TRY(kir_emit(p, KIR_PRIM_IOTA, &pr, 0, NULL, &c));
  TRY(kir_emit2(p, KIR_PRIM_EQ, r, c, &eye));
  TRY(kir_emit_convert(p, eye, a->dtype, &eye));
  int64_t n = kir_aval_size(a);
  memset(&pr, 0, sizeof pr);
  pr.slice.start_indices.n = pr.slice.limit_indices.n = pr.slice.strides.n = 2;
  pr.slice.start_indices.v[1] = off;
  pr.slice.limit_indices.v[0] = k;
  pr.slice.limit_indices.v[1] = off + n;
  pr.slice.strides.v[0] = pr.slice.strides.v[1] = 1;
  TRY(kir_emit(p, KIR_PRIM_SLICE, &pr, 1, &eye, &eye));
  kir_aval lane = kir_aval_make(a->dtype, 1, &k, false);
  return reshape2(p, eye, &lane, a, out);
}

/* The jvp (rev: vjp) program of P over the leaves [lo, hi) of its invars:
 * invars (P's, then one tangent per input leaf / cotangent per output),
 * outputs (output tangents / input-leaf cotangents). */
static kiln_status lin_program(const char *op, const kir_program *P, int lo, int hi, bool rev,
                               kir_program **out) {
  int ni = P->n_invars, no = P->n_outvars, nb = rev ? no : hi - lo;
  kir_program *J = NULL;
  kir_vid *v = malloc((size_t)(2 * ni + 2 * no + nb + 1) * sizeof *v);
  bool *diff = calloc((size_t)(ni + 1), sizeof *diff);
  kiln_status st = v && diff ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = kir_program_new(&J);
  kir_vid *x = v, *tx = v + ni, *y = v + 2 * ni, *ty = y + no, *b = ty + no;
  for (int i = 0; !st && i < ni; i++) st = kir_add_invar(J, kir_var_aval(P, P->invars[i]), &x[i]);
  for (int i = 0; !st && i < nb; i++) {
    kir_aval a = *kir_var_aval(P, rev ? P->outvars[i] : P->invars[lo + i]);
    a.weak = false;
    st = kir_add_invar(J, &a, &b[i]);
  }
  for (int i = 0; i < ni; i++) {
    tx[i] = i >= lo && i < hi && !rev ? b[i - lo] : KIR_NO_VAR;
    diff[i] = i >= lo && i < hi;
  }
  if (!st && rev) {
    st = ktf_vjp(op, J, P, x, diff, b, y, tx);
    if (!st) st = kir_set_outputs(J, hi - lo, tx + lo);
  } else if (!st) {
    st = ktf_jvp(op, J, P, x, tx, y, ty);
    for (int i = 0; !st && i < no; i++)
      if (ty[i] == KIR_NO_VAR) st = kir_emit_zeros(J, kir_var_aval(P, P->outvars[i]), &ty[i]);
    if (!st) st = kir_set_outputs(J, no, ty);
  }
  free(v);
  free(diff);
  if (st) kir_program_free(J);
  else *out = J;
  return st;
}

/* Jacobian blocks: jac[i * nin + j] is d out_i / d in_j, [*out_i, *in_j]. */
static kiln_status jacobian(kiln_trace *t, const char *op, const ktf_traced *tr, int lo, int hi,
                            bool rev, kir_vid *jac) {
  const kir_program *P = tr->cl.prog;
  int nc = tr->cl.n_captures, nin = hi - lo, no = P->n_outvars, nx = nc + tr->n;
  for (int j = lo; j < hi + (rev ? no : 0); j++) {
    const kir_aval *a = j < hi ? ktr_aval(tr->vals[j]) : kir_var_aval(P, P->outvars[j - hi]);
    char ty[KIR_AVAL_STR_CAP];
    if (!kiln_dtype_is_float(a->dtype))
      return kcore_fail(KILN_ERR_DTYPE, "%s: the %s leaf %d has type %s; jacobians need real "
                        "(floating) %s", op, j < hi ? "input" : "output", j < hi ? j - lo : j - hi,
                        kir_aval_str(a, ty, sizeof ty), j < hi ? "inputs" : "outputs");
  }
  int nb = rev ? no : nin, nr = rev ? nin : no;
  int64_t *off = calloc((size_t)(nb + 1), sizeof *off);
  kir_vid *xs = malloc((size_t)(nx + nb + nr + 1) * sizeof *xs);
  int *bd = malloc((size_t)(nx + nb + nr + 1) * sizeof *bd);
  kir_program *J = NULL;
  kiln_status st = off && xs && bd ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int k = 0; !st && k < nb; k++)
    off[k + 1] = off[k] + kir_aval_size(kir_var_aval(P, rev ? P->outvars[k] : P->invars[nc + lo + k]));
  if (!st) st = lin_program(op, P, nc + lo, nc + hi, rev, &J);
  for (int i = 0; !st && i < nx; i++) {
    xs[i] = tr->x[i];
    bd[i] = -1;
  }
  for (int k = 0; !st && k < nb; k++) {
    bd[nx + k] = 0;
    st = basis(t->prog, off[nb], off[k],
               kir_var_aval(P, rev ? P->outvars[k] : P->invars[nc + lo + k]), &xs[nx + k]);
  }
  kir_vid *r = xs + nx + nb;
  int *rbd = bd + nx + nb;
  if (!st) st = ktf_vmap(op, t->prog, J, off[nb], xs, bd, r, rbd);
  for (int k = 0; !st && k < nr; k++) {
    kir_aval el = *kir_var_aval(J, J->outvars[k]);
    st = kir_batch_front(t->prog, r[k], rbd[k], off[nb], &el, &r[k]);
  }
  /* split the lanes per leaf and lay the blocks out as [*out, *in] */
  for (int i = 0; !st && i < no; i++)
    for (int j = 0; !st && j < nin; j++) {
      const kir_aval *oa = kir_var_aval(P, P->outvars[i]), *ia = kir_var_aval(P, P->invars[nc + lo + j]);
      kir_vid s, *o = &jac[i * nin + j];
      if (rev) {
        st = slice0(t->prog, r[j], off[i], off[i + 1], &s);
      } else {
        st = slice0(t->prog, r[i], off[j], off[j + 1], &s);
        if (!st) st = kir_batch_moveaxis(t->prog, s, 0, oa->rank, &s);
      }
      if (!st) st = reshape2(t->prog, s, oa, ia, o);
    }
  kir_program_free(J);
  free(off);
  free(xs);
  free(bd);
  return st;
}

static kiln_tree *ktf_jac_fn(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktf_jac *g = user;
  const char *op = g->rev ? "kiln_jacrev" : "kiln_jacfwd";
  size_t nch = kiln_tree_num_children(args);
  kiln_node_kind kind = kiln_tree_kind(args);
  if ((kind != KILN_NODE_TUPLE && kind != KILN_NODE_LIST) || (size_t)g->argnum >= nch) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s(%s): argnums %d is out of range for a function called "
              "with %zu positional arguments", op, kiln_func_name(g->f), g->argnum, nch);
    return NULL;
  }
  ktf_traced tr;
  if (ktf_trace(t, op, g->f, args, &tr)) return NULL;
  int lo = 0;
  for (int c = 0; c < g->argnum; c++) lo += (int)kiln_tree_num_leaves(kiln_tree_child(args, (size_t)c));
  const kiln_tree *child = kiln_tree_child(args, (size_t)g->argnum);
  int nin = (int)kiln_tree_num_leaves(child), no = tr.cl.n_out;
  kir_vid *jac = malloc((size_t)(no * nin + 1) * sizeof *jac);
  kiln_leaf *subs = calloc((size_t)(no + 1), sizeof *subs);
  kiln_treedef *cdef = NULL;
  kiln_tree *res = NULL;
  kiln_status st = jac && subs ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = kiln_tree_flatten(child, NULL, NULL, NULL, NULL, &cdef);
  if (!st) st = jacobian(t, op, &tr, lo, lo + nin, g->rev, jac);
  if (st) kcore_fail_wrap(st, "%s(%s)", op, kiln_func_name(g->f));
  int made = 0;
  for (; !st && made < no; made++) {
    subs[made] = (kiln_leaf){.kind = KILN_LEAF_TREE, .u.tree = ktf_tree(t, cdef, nin, jac + made * nin)};
    if (!subs[made].u.tree) break;
  }
  if (!st && made == no) st = kiln_tree_unflatten(tr.cl.out_def, subs, (size_t)no, &res);
  if (st) ktr_fail(t, st);
  for (int i = 0; i < made; i++) kiln_tree_free(subs[i].u.tree);
  free(subs);
  free(jac);
  kiln_treedef_free(cdef);
  ktf_traced_free(&tr);
  return res;
}

static kiln_status ktf_jac_make(const char *op, const kiln_func *f, int argnum, bool rev,
                                kiln_func *inner, kiln_func **out) {
  if (argnum < 0) {
    kiln_func_free(inner);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s(%s): argnums %d is negative", op, kiln_func_name(f), argnum);
  }
  ktf_jac *g = calloc(1, sizeof *g);
  if (!g) {
    kiln_func_free(inner);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  *g = (ktf_jac){.f = inner ? inner : f, .inner = inner, .argnum = argnum, .rev = rev};
  char name[256];
  snprintf(name, sizeof name, "%s(%s)", rev ? "jacrev" : "jacfwd", kiln_func_name(g->f));
  kiln_status st = kiln_func_new(ktf_jac_fn, g, name, out);
  if (st) {
    ktf_jac_drop(g);
    return st;
  }
  (*out)->drop = ktf_jac_drop;
  return KILN_OK;
}

static kiln_status ktf_jac_check(const char *op, const kiln_func *f, kiln_func **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the function is NULL", op);
  return KILN_OK;
}

kiln_status kiln_jacfwd(const kiln_func *f, int argnum, kiln_func **out) {
  TRY(ktf_jac_check("kiln_jacfwd", f, out));
  return ktf_jac_make("kiln_jacfwd", f, argnum, false, NULL, out);
}

kiln_status kiln_jacrev(const kiln_func *f, int argnum, kiln_func **out) {
  TRY(ktf_jac_check("kiln_jacrev", f, out));
  return ktf_jac_make("kiln_jacrev", f, argnum, true, NULL, out);
}

kiln_status kiln_hessian(const kiln_func *f, int argnum, kiln_func **out) {
  TRY(ktf_jac_check("kiln_hessian", f, out));
  kiln_func *r = NULL;
  TRY(ktf_jac_make("kiln_hessian", f, argnum, true, NULL, &r));
  return ktf_jac_make("kiln_hessian", f, argnum, false, r, out);
}
