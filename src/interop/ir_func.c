/* Programs that arrive as IR text (a framework's translated jaxpr) turned
 * into kiln_funcs: the parsed program is verified once, and every trace of
 * the function copies its equations into the tracing program, so jit,
 * eval_shape and the transformations treat it like any traced function. */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "interop/interop.h"
#include "transform/transform.h"

typedef struct kinterop_ir_func {
  kir_program *prog;
  char *name; /* the op name in errors */
} kinterop_ir_func;

static void kinterop_ir_func_drop(void *user) {
  kinterop_ir_func *g = user;
  if (!g) return;
  kir_program_free(g->prog);
  free(g->name);
  free(g);
}

/* The leaves of args must match the program's invars in count, dtype and
 * shape (weak types are the caller's business, as in jax's typematch). */
static kiln_status kinterop_check_args(const kinterop_ir_func *g, kiln_val *const *vals, int n) {
  const kir_program *p = g->prog;
  if (n != p->n_invars)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: called with %d array leaves; the program takes %d",
                      g->name, n, p->n_invars);
  for (int i = 0; i < n; i++) {
    const kir_aval *want = kir_var_aval(p, p->invars[i]), *got = ktr_aval(vals[i]);
    if (!kir_aval_typematch(want, got)) {
      char a[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "%s: argument %d is %s; the program's invar is %s", g->name,
                        i, kir_aval_str(got, a, sizeof a), kir_aval_str(want, b, sizeof b));
    }
  }
  return KILN_OK;
}

static kiln_tree *kinterop_ir_func_trace(kiln_trace *t, const kiln_tree *args, void *user) {
  const kinterop_ir_func *g = user;
  const kir_program *p = g->prog;
  kiln_val **vals = NULL, **outs = NULL;
  int n = 0;
  ktf_map m = {NULL, 0};
  kir_vid *in = NULL;
  kiln_tree *res = NULL;
  kiln_status st = ktr_flatten_vals(t, g->name, args, &vals, &n, NULL);
  if (!st) st = kinterop_check_args(g, vals, n);
  if (!st) st = ktf_map_new(g->name, p->n_vars, &m);
  int arity = 1;
  for (int i = 0; i < p->n_eqns; i++)
    if (p->eqns[i].n_in > arity) arity = p->eqns[i].n_in;
  if (!st && (!(in = malloc((size_t)arity * sizeof *in)) ||
              !(outs = calloc((size_t)p->n_outvars + 1, sizeof *outs))))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
  for (int i = 0; !st && i < n; i++) m.v[p->invars[i]] = vals[i]->vid;
  for (int i = 0; !st && i < p->n_eqns; i++)
    st = ktf_copy_eqn(g->name, t->prog, p, &p->eqns[i], &m, in);
  for (int i = 0; !st && i < p->n_outvars; i++) {
    kir_vid v;
    st = ktf_map_get(g->name, &m, t->prog, p, p->outvars[i], &v);
    if (!st && !(outs[i] = ktr_val(t, v))) st = t->status;
  }
  if (!st && !(res = kiln_tuple_of((size_t)p->n_outvars, outs)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
  if (st) ktr_fail(t, st);
  free(vals);
  free(outs);
  free(in);
  free(m.v);
  return res;
}

kiln_status kiln_func_from_ir(const char *text, const char *name, kiln_func **out) {
  *out = NULL;
  if (!text) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_func_from_ir: text is NULL");
  kinterop_ir_func *g = calloc(1, sizeof *g);
  const char *nm = name ? name : "ir_func";
  if (!g || !(g->name = malloc(strlen(nm) + 1))) {
    free(g);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_func_from_ir: out of host memory");
  }
  memcpy(g->name, nm, strlen(nm) + 1);
  kiln_status st = kir_parse(text, &g->prog);
  if (st) st = kcore_fail_wrap(st, "kiln_func_from_ir(%s)", nm);
  /* Constvars have no values in text: a frontend passes constants as inputs. */
  if (!st && g->prog->n_constvars)
    st = kcore_fail(KILN_ERR_ARGUMENT, "kiln_func_from_ir(%s): the program has %d constvars; "
                    "pass constants as inputs", nm, g->prog->n_constvars);
  kiln_func *f = NULL;
  if (!st) st = kiln_func_new(kinterop_ir_func_trace, g, nm, &f);
  if (st) {
    kinterop_ir_func_drop(g);
    return st;
  }
  f->drop = kinterop_ir_func_drop;
  *out = f;
  return KILN_OK;
}
