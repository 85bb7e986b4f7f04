/* Public control flow: switch/cond, while, fori_loop, scan and map. Each
 * branch or body is traced into a closed sub-program; the values it captures
 * from enclosing traces become explicit operands (JAX's consts). */
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

/* Flattened operands of a control-flow op. */
typedef struct ktr_flat {
  kiln_val **vals;
  int n;
  kiln_treedef *def;
  kir_aval *avals;
} ktr_flat;

static void ktr_flat_free(ktr_flat *f) {
  free(f->vals);
  free(f->avals);
  kiln_treedef_free(f->def);
  memset(f, 0, sizeof *f);
}

static kiln_status ktr_flat_make(kiln_trace *t, const char *op, const kiln_tree *tree, ktr_flat *f) {
  memset(f, 0, sizeof *f);
  if (!tree) return kcore_fail(KILN_ERR_ARGUMENT, "%s: operand tree is NULL", op);
  kiln_status st = ktr_flatten_vals(t, op, tree, &f->vals, &f->n, &f->def);
  if (st) return st;
  f->avals = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->avals);
  if (!f->avals) {
    ktr_flat_free(f);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  for (int i = 0; i < f->n; i++) f->avals[i] = *ktr_aval(f->vals[i]);
  return KILN_OK;
}

/* The output tree of an op: out_def filled with n values. */
static kiln_tree *ktr_unflatten_vals(kiln_trace *t, const kiln_treedef *def, int n,
                                     kiln_val *const *vals) {
  kiln_leaf *leaves = calloc(n ? (size_t)n : 1, sizeof *leaves);
  if (!leaves) {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    return NULL;
  }
  for (int i = 0; i < n; i++) leaves[i] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = vals[i]};
  kiln_tree *out = NULL;
  kiln_status st = kiln_tree_unflatten(def, leaves, (size_t)n, &out);
  free(leaves);
  if (st) ktr_fail(t, st);
  return out;
}

/* Binds prim over operands and returns its n_out results in a new array. */
static kiln_val **ktr_bind_multi(kiln_trace *t, const char *op, kir_prim prim, const kir_params *p,
                                 int n_in, kiln_val *const *in, int n_out) {
  kiln_val **outs = calloc(n_out ? (size_t)n_out : 1, sizeof *outs);
  if (!outs) {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return NULL;
  }
  ktr_bind(t, op, prim, p, n_in, in, n_out, outs);
  if (t->status) {
    free(outs);
    return NULL;
  }
  return outs;
}

/* ---- switch / cond ---- */

/* Makes every branch take the union of all branches' captures, in one order,
 * before its ordinary operands (a cond's branches share one signature). */
static kiln_status ktr_join_captures(kiln_trace *t, const char *op, int n, ktr_closed *br,
                                     int n_ops, kiln_val ***consts, int *n_consts) {
  int total = 0;
  for (int k = 0; k < n; k++) total += br[k].n_captures;
  kiln_val **all = malloc((size_t)(total ? total : 1) * sizeof *all);
  if (!all) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  int m = 0;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < br[k].n_captures; i++) {
      int j = 0;
      while (j < m && all[j]->vid != br[k].captures[i]->vid) j++;
      if (j == m) all[m++] = br[k].captures[i];
    }
  for (int k = 0; k < n; k++) {
    kir_program *p = br[k].prog;
    kir_vid *order = kir_alloc(p, (size_t)(m + n_ops) * sizeof *order);
    if (!order) {
      free(all);
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (int j = 0; j < m; j++) {
      int i = 0;
      while (i < br[k].n_captures && br[k].captures[i]->vid != all[j]->vid) i++;
      kiln_status st = KILN_OK;
      if (i < br[k].n_captures)
        order[j] = p->invars[i];
      else
        st = kir_add_invar(p, ktr_aval(all[j]), &order[j]);
      if (st) {
        free(all);
        return st;
      }
    }
    memcpy(order + m, p->invars + br[k].n_captures, (size_t)n_ops * sizeof *order);
    memcpy(p->invars, order, (size_t)(m + n_ops) * sizeof *order);
  }
  (void)t;
  *consts = all;
  *n_consts = m;
  return KILN_OK;
}

static kiln_tree *ktr_cond_bind(kiln_trace *t, const char *op, kiln_val *index, int n,
                                ktr_closed *br, ktr_flat *ops) {
  for (int k = 1; k < n; k++)
    if (!kiln_treedef_equal(br[0].out_def, br[k].out_def)) {
      char diff[256];
      kiln_treedef_diff(br[0].out_def, br[k].out_def, diff, sizeof diff);
      ktr_failf(t, KILN_ERR_TREE, "%s: branch %d returns another structure than branch 0: %s", op,
                k, diff);
      return NULL;
    }
  kiln_val **consts = NULL;
  int nc = 0;
  kiln_status st = ktr_join_captures(t, op, n, br, ops->n, &consts, &nc);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  int n_in = 1 + nc + ops->n;
  kiln_val **in = malloc((size_t)n_in * sizeof *in);
  kir_program **progs = kir_alloc(t->prog, (size_t)n * sizeof *progs);
  kiln_tree *res = NULL;
  if (in && progs) {
    in[0] = index;
    memcpy(in + 1, consts, (size_t)nc * sizeof *in);
    memcpy(in + 1 + nc, ops->vals, (size_t)ops->n * sizeof *in);
    for (int k = 0; k < n; k++) progs[k] = br[k].prog;
    kir_params p;
    memset(&p, 0, sizeof p);
    p.cond.branches.n = n;
    p.cond.branches.v = progs;
    kiln_val **outs = ktr_bind_multi(t, op, KIR_PRIM_COND, &p, n_in, in, br[0].n_out);
    if (outs) res = ktr_unflatten_vals(t, br[0].out_def, br[0].n_out, outs);
    free(outs);
  } else {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  free(in);
  free(consts);
  return res;
}

static kiln_tree *ktr_switch(kiln_trace *t, const char *op, kiln_val *index, int n,
                             const kiln_func *const *branches, const kiln_tree *operands) {
  if (!ktr_ok(t, op, 1, &index)) return NULL;
  if (n < 1 || !branches) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %d branches", op, n);
    return NULL;
  }
  ktr_flat ops;
  kiln_status st = ktr_flat_make(t, op, operands, &ops);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  ktr_closed *br = calloc((size_t)n, sizeof *br);
  kiln_tree *res = NULL;
  int traced = 0;
  if (!br) ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (; br && traced < n; traced++) {
    if (!branches[traced]) {
      ktr_failf(t, KILN_ERR_ARGUMENT, "%s: branch %d is NULL", op, traced);
      break;
    }
    if (ktr_trace_closed(t, op, branches[traced], ops.def, ops.n, ops.avals, &br[traced])) break;
  }
  if (br && traced == n) res = ktr_cond_bind(t, op, index, n, br, &ops);
  for (int k = 0; br && k < traced; k++) ktr_closed_free(&br[k]);
  free(br);
  ktr_flat_free(&ops);
  return res;
}

kiln_tree *kiln_switch(kiln_trace *t, kiln_val *index, int n, const kiln_func *const *branches,
                       const kiln_tree *operands) {
  static const char op[] = "kiln_switch";
  if (!ktr_ok(t, op, 1, &index)) return NULL;
  const kir_aval *a = ktr_aval(index);
  if (a->rank != 0 || !kiln_dtype_is_integer(a->dtype)) {
    char ty[KIR_AVAL_STR_CAP];
    ktr_failf(t, KILN_ERR_DTYPE, "%s: the index must be an integer scalar, got %s", op,
              kir_aval_str(a, ty, sizeof ty));
    return NULL;
  }
  /* lax.switch clamps the index into [0, n-1]. */
  kiln_val *i32 = ktr_convert(t, op, index, KILN_I32, false);
  kiln_val *lo = kiln_scalar(t, KILN_I32, 0), *hi = kiln_scalar(t, KILN_I32, n - 1);
  return ktr_switch(t, op, kiln_clamp(t, lo, i32, hi), n, branches, operands);
}

kiln_tree *kiln_cond(kiln_trace *t, kiln_val *pred, const kiln_func *on_true,
                     const kiln_func *on_false, const kiln_tree *operands) {
  static const char op[] = "kiln_cond";
  if (!ktr_ok(t, op, 1, &pred)) return NULL;
  const kir_aval *a = ktr_aval(pred);
  if (a->rank != 0 || a->dtype != KILN_BOOL) {
    char ty[KIR_AVAL_STR_CAP];
    ktr_failf(t, KILN_ERR_DTYPE, "%s: the predicate must be a bool scalar, got %s", op,
              kir_aval_str(a, ty, sizeof ty));
    return NULL;
  }
  const kiln_func *branches[2] = {on_false, on_true}; /* index 1 is true */
  return ktr_switch(t, op, ktr_convert(t, op, pred, KILN_I32, false), 2, branches, operands);
}

/* ---- while ---- */

/* Weak-typed carries whose body result came back strong are made strong and
 * the loop is traced again, as JAX does; any other mismatch is an error. */
static int ktr_carry_mismatch(kiln_trace *t, const char *op, const ktr_flat *carry,
                              const ktr_closed *body, int first_out, bool *retry) {
  *retry = false;
  if (!kiln_treedef_equal(carry->def, body->out_def)) {
    char diff[256];
    kiln_treedef_diff(carry->def, body->out_def, diff, sizeof diff);
    ktr_failf(t, KILN_ERR_TREE, "%s: the body returns another structure than its carry: %s", op,
              diff);
    return -1;
  }
  for (int i = 0; i < carry->n; i++) {
    const kir_aval *out = kir_var_aval(body->prog, body->prog->outvars[first_out + i]);
    if (kir_aval_equal(&carry->avals[i], out)) continue;
    if (kir_aval_typematch(&carry->avals[i], out) && carry->avals[i].weak) {
      *retry = true;
      continue;
    }
    char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
    ktr_failf(t, KILN_ERR_SHAPE, "%s: carry leaf %d enters as %s and leaves the body as %s", op, i,
              kir_aval_str(&carry->avals[i], a, sizeof a), kir_aval_str(out, b, sizeof b));
    return -1;
  }
  return 0;
}

static void ktr_strengthen(kiln_trace *t, const char *op, ktr_flat *carry) {
  for (int i = 0; i < carry->n; i++)
    if (carry->avals[i].weak) {
      carry->vals[i] = ktr_convert(t, op, carry->vals[i], carry->avals[i].dtype, false);
      if (carry->vals[i]) carry->avals[i].weak = false;
    }
}

/* The operand list (*a, *b, *c) of a loop. */
static kiln_val **ktr_concat3(kiln_trace *t, const char *op, int na, kiln_val *const *a, int nb,
                              kiln_val *const *b, int nc, kiln_val *const *c) {
  kiln_val **v = malloc((size_t)(na + nb + nc + 1) * sizeof *v);
  if (!v) {
    ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return NULL;
  }
  if (na) memcpy(v, a, (size_t)na * sizeof *v);
  if (nb) memcpy(v + na, b, (size_t)nb * sizeof *v);
  if (nc) memcpy(v + na + nb, c, (size_t)nc * sizeof *v);
  return v;
}

static kiln_tree *ktr_while_bind(kiln_trace *t, const char *op, ktr_closed *cond,
                                 ktr_closed *body, ktr_flat *carry) {
  kiln_val **in = ktr_concat3(t, op, cond->n_captures, cond->captures, body->n_captures,
                              body->captures, carry->n, carry->vals);
  if (!in) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  p.while_loop.cond_jaxpr = cond->prog;
  p.while_loop.cond_nconsts = cond->n_captures;
  p.while_loop.body_jaxpr = body->prog;
  p.while_loop.body_nconsts = body->n_captures;
  int n_in = cond->n_captures + body->n_captures + carry->n;
  kiln_val **outs = ktr_bind_multi(t, op, KIR_PRIM_WHILE, &p, n_in, in, carry->n);
  kiln_tree *res = outs ? ktr_unflatten_vals(t, carry->def, carry->n, outs) : NULL;
  free(outs);
  free(in);
  return res;
}

kiln_tree *kiln_while(kiln_trace *t, const kiln_func *cond, const kiln_func *body,
                      const kiln_tree *init) {
  static const char op[] = "kiln_while";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  if (!cond || !body) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s is NULL", op, cond ? "body" : "cond");
    return NULL;
  }
  ktr_flat carry;
  kiln_status st = ktr_flat_make(t, op, init, &carry);
  if (st) {
    ktr_fail(t, st);
    return NULL;
  }
  kiln_tree *res = NULL;
  for (int attempt = 0; attempt < 2 && !t->status && !res; attempt++) {
    ktr_closed c, b;
    if (ktr_trace_closed(t, op, cond, carry.def, carry.n, carry.avals, &c)) break;
    if (ktr_trace_closed(t, op, body, carry.def, carry.n, carry.avals, &b)) {
      ktr_closed_free(&c);
      break;
    }
    bool retry = false;
    const kir_aval *pa = c.n_out == 1 ? kir_var_aval(c.prog, c.prog->outvars[0]) : NULL;
    if (!pa || pa->rank != 0 || pa->dtype != KILN_BOOL)
      ktr_failf(t, KILN_ERR_DTYPE, "%s: cond must return one bool scalar", op);
    else if (ktr_carry_mismatch(t, op, &carry, &b, 0, &retry) == 0 && !retry)
      res = ktr_while_bind(t, op, &c, &b, &carry);
    else if (retry)
      ktr_strengthen(t, op, &carry);
    ktr_closed_free(&c);
    ktr_closed_free(&b);
  }
  ktr_flat_free(&carry);
  return res;
}

/* ---- fori_loop: a while loop over the carry (i, x) ---- */

typedef struct ktr_fori {
  int64_t upper;
  const kiln_func *body;
} ktr_fori;

static kiln_tree *ktr_fori_cond(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktr_fori *f = user;
  kiln_val *i = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  return kiln_tree_val(kiln_lt(t, i, kiln_scalar(t, KILN_I32, (double)f->upper)));
}

static kiln_tree *ktr_fori_body(kiln_trace *t, const kiln_tree *args, void *user) {
  const ktr_fori *f = user;
  kiln_val *i = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_tree *x = kiln_call(t, f->body, args); /* the user's body sees (i, x) */
  if (!x) return NULL;
  kiln_tree *next = kiln_tree_val(kiln_add(t, i, kiln_scalar(t, KILN_I32, 1)));
  return kiln_tree_tuple(2, (kiln_tree *[]){next, x});
}

kiln_tree *kiln_fori_loop(kiln_trace *t, int64_t lower, int64_t upper, const kiln_func *body,
                          const kiln_tree *init) {
  static const char op[] = "kiln_fori_loop";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  if (!body || !init) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s is NULL", op, body ? "init" : "body");
    return NULL;
  }
  if (lower < INT32_MIN || upper > INT32_MAX) {
    ktr_failf(t, KILN_ERR_OUT_OF_RANGE, "%s: bounds [%lld, %lld) do not fit the i32 counter", op,
              (long long)lower, (long long)upper);
    return NULL;
  }
  ktr_fori f = {upper, body};
  struct kiln_func cond = {ktr_fori_cond, &f, (char *)"fori_loop_cond", NULL};
  struct kiln_func step = {ktr_fori_body, &f, body->name, NULL};
  kiln_tree *start = kiln_tree_tuple(2, (kiln_tree *[]){
      kiln_tree_val(kiln_scalar(t, KILN_I32, (double)lower)), kiln_tree_clone(init)});
  if (!start) {
    ktr_fail(t, t->status ? t->status : KILN_ERR_OUT_OF_MEMORY);
    return NULL;
  }
  kiln_tree *out = kiln_while(t, &cond, &step, start);
  kiln_tree_free(start);
  if (!out) return NULL;
  kiln_tree *x = kiln_tree_clone(kiln_tree_child(out, 1));
  kiln_tree_free(out);
  return x;
}

/* ---- scan ---- */

/* The treedef of tuple(a, b) and its leaf counts. */
static kiln_status ktr_pair(const kiln_tree *a, const kiln_tree *b, kiln_treedef **def) {
  kiln_tree *pair = kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_clone(a), kiln_tree_clone(b)});
  if (!pair) return KILN_ERR_OUT_OF_MEMORY;
  kiln_status st = kiln_tree_flatten(pair, NULL, NULL, NULL, NULL, def);
  kiln_tree_free(pair);
  return st;
}

/* Splits the treedef of a (carry, y) pair returned by a scan body. */
static kiln_status ktr_split_pair(const char *op, const kiln_treedef *def, kiln_treedef **first,
                                  kiln_treedef **second) {
  size_t n = kiln_treedef_num_leaves(def);
  kiln_leaf *leaves = calloc(n ? n : 1, sizeof *leaves);
  kiln_tree *tree = NULL;
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (size_t i = 0; i < n; i++) leaves[i] = (kiln_leaf){.kind = KILN_LEAF_PTR, .u.ptr = NULL};
  kiln_status st = kiln_tree_unflatten(def, leaves, n, &tree);
  free(leaves);
  if (st) return st;
  kiln_node_kind k = kiln_tree_kind(tree);
  if ((k != KILN_NODE_TUPLE && k != KILN_NODE_LIST) || kiln_tree_num_children(tree) != 2)
    st = kcore_fail(KILN_ERR_TREE, "%s: the body must return a pair (carry, y)", op);
  if (!st) st = kiln_tree_flatten(kiln_tree_child(tree, 0), NULL, NULL, NULL, NULL, first);
  if (!st) st = kiln_tree_flatten(kiln_tree_child(tree, 1), NULL, NULL, NULL, NULL, second);
  kiln_tree_free(tree);
  return st;
}

typedef struct ktr_scan {
  ktr_flat carry, xs;
  int64_t length;
  kiln_treedef *in_def, *carry_out_def, *y_def;
  kir_aval *in_avals;
} ktr_scan;

static void ktr_scan_free(ktr_scan *s) {
  ktr_flat_free(&s->carry);
  ktr_flat_free(&s->xs);
  kiln_treedef_free(s->in_def);
  kiln_treedef_free(s->carry_out_def);
  kiln_treedef_free(s->y_def);
  free(s->in_avals);
}

/* Checks xs' leading axes and builds the body's input avals (carry, x slice). */
static kiln_status ktr_scan_inputs(const char *op, ktr_scan *s) {
  for (int i = 0; i < s->xs.n; i++) {
    const kir_aval *a = &s->xs.avals[i];
    if (a->rank == 0 || (s->length >= 0 && a->shape[0] != s->length)) {
      char ty[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "%s: xs leaf %d has type %s, without a leading axis of "
                        "length %lld", op, i, kir_aval_str(a, ty, sizeof ty), (long long)s->length);
    }
    s->length = a->shape[0];
  }
  if (s->length < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: no xs and no length: the trip count is unknown", op);
  int n = s->carry.n + s->xs.n;
  s->in_avals = malloc((size_t)(n ? n : 1) * sizeof *s->in_avals);
  if (!s->in_avals) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  memcpy(s->in_avals, s->carry.avals, (size_t)s->carry.n * sizeof *s->in_avals);
  for (int i = 0; i < s->xs.n; i++) {
    const kir_aval *a = &s->xs.avals[i];
    s->in_avals[s->carry.n + i] = kir_aval_make(a->dtype, a->rank - 1, a->shape + 1, a->weak);
  }
  return KILN_OK;
}

static kiln_tree *ktr_scan_bind(kiln_trace *t, const char *op, ktr_scan *s, ktr_closed *b,
                                int reverse) {
  kiln_val **in = ktr_concat3(t, op, b->n_captures, b->captures, s->carry.n, s->carry.vals, s->xs.n,
                              s->xs.vals);
  if (!in) return NULL;
  kir_params p;
  memset(&p, 0, sizeof p);
  p.scan.jaxpr = b->prog;
  p.scan.length = s->length;
  p.scan.num_carry = s->carry.n;
  p.scan.num_consts = b->n_captures;
  p.scan.reverse = reverse != 0;
  int n_in = b->n_captures + s->carry.n + s->xs.n;
  kiln_val **outs = ktr_bind_multi(t, op, KIR_PRIM_SCAN, &p, n_in, in, b->n_out);
  free(in);
  if (!outs) return NULL;
  kiln_tree *carry = ktr_unflatten_vals(t, s->carry.def, s->carry.n, outs);
  kiln_tree *ys = ktr_unflatten_vals(t, s->y_def, b->n_out - s->carry.n, outs + s->carry.n);
  free(outs);
  if (!carry || !ys) {
    kiln_tree_free(carry);
    kiln_tree_free(ys);
    return NULL;
  }
  return kiln_tree_tuple(2, (kiln_tree *[]){carry, ys});
}

kiln_tree *kiln_scan(kiln_trace *t, const kiln_func *body, const kiln_tree *init,
                     const kiln_tree *xs, int64_t length, int reverse) {
  static const char op[] = "kiln_scan";
  if (!ktr_ok(t, op, 0, NULL)) return NULL;
  if (!body || !init || !xs) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: body, init or xs is NULL", op);
    return NULL;
  }
  ktr_scan s;
  memset(&s, 0, sizeof s);
  s.length = length;
  kiln_tree *res = NULL;
  kiln_status st = ktr_flat_make(t, op, init, &s.carry);
  if (!st) st = ktr_flat_make(t, op, xs, &s.xs);
  if (!st) st = ktr_scan_inputs(op, &s);
  if (!st) st = ktr_pair(init, xs, &s.in_def);
  for (int attempt = 0; !st && attempt < 2 && !res; attempt++) {
    ktr_closed b;
    if ((st = ktr_trace_closed(t, op, body, s.in_def, s.carry.n + s.xs.n, s.in_avals, &b))) break;
    kiln_treedef_free(s.carry_out_def);
    kiln_treedef_free(s.y_def);
    s.carry_out_def = s.y_def = NULL;
    bool retry = false;
    st = ktr_split_pair(op, b.out_def, &s.carry_out_def, &s.y_def);
    if (!st) {
      ktr_closed view = b; /* the carry part of the body's outputs */
      view.out_def = s.carry_out_def;
      if (ktr_carry_mismatch(t, op, &s.carry, &view, 0, &retry) == 0 && !retry)
        res = ktr_scan_bind(t, op, &s, &b, reverse);
      else if (retry) {
        ktr_strengthen(t, op, &s.carry);
        memcpy(s.in_avals, s.carry.avals, (size_t)s.carry.n * sizeof *s.in_avals);
      }
      st = t->status;
    }
    ktr_closed_free(&b);
  }
  if (st && !t->status) ktr_fail(t, st);
  ktr_scan_free(&s);
  return res;
}

/* ---- map: a scan without carry ---- */

static kiln_tree *ktr_map_body(kiln_trace *t, const kiln_tree *args, void *user) {
  const kiln_func *f = user;
  kiln_tree *y = kiln_call(t, f, kiln_tree_child(args, 1));
  if (!y) return NULL;
  return kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_tuple(0, NULL), y});
}

kiln_tree *kiln_map(kiln_trace *t, const kiln_func *f, const kiln_tree *xs) {
  if (!ktr_ok(t, "kiln_map", 0, NULL)) return NULL;
  if (!f) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "kiln_map: the function is NULL");
    return NULL;
  }
  struct kiln_func body = {ktr_map_body, (void *)f, f->name, NULL};
  kiln_tree *none = kiln_tree_tuple(0, NULL);
  kiln_tree *out = none ? kiln_scan(t, &body, none, xs, -1, 0) : NULL;
  kiln_tree_free(none);
  if (!out) return NULL;
  kiln_tree *ys = kiln_tree_clone(kiln_tree_child(out, 1));
  kiln_tree_free(out);
  return ys;
}
