/* The verifier: structure, SSA and types of a program and its
 * sub-programs. Messages name the equation and primitive, with the path
 * through enclosing equations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"

static kiln_status kir_verify_program(const kir_program *p);

static kiln_status kir_bad(const char *what, kir_vid v, const char *problem) {
  return kcore_fail(KILN_ERR_ARGUMENT, "%s (var %d) %s", what, v, problem);
}

/* A var used as an operand or output: in range and already defined. */
static kiln_status kir_verify_use(const kir_program *p, const bool *defined, kir_vid v,
                                  const char *what) {
  if (v < 0 || v >= p->n_vars) return kir_bad(what, v, "is not a var of the program");
  if (!defined[v]) return kir_bad(what, v, "is used before it is defined");
  return KILN_OK;
}

/* A var being defined: in range, of the expected kind, defined only once. */
static kiln_status kir_verify_def(const kir_program *p, bool *defined, kir_vid v,
                                  kir_var_kind kind, const char *what) {
  if (v < 0 || v >= p->n_vars) return kir_bad(what, v, "is not a var of the program");
  if (p->vars[v].kind != kind) return kir_bad(what, v, "has the wrong kind");
  if (defined[v]) return kir_bad(what, v, "is defined twice");
  kiln_status st = kir_aval_check("var", &p->vars[v].aval);
  if (st != KILN_OK) return kcore_fail_wrap(st, "%s (var %d)", what, v);
  defined[v] = true;
  return KILN_OK;
}

static kiln_status kir_verify_sub(const kir_program *p, const kir_program *sub) {
  if (!sub) return kcore_fail(KILN_ERR_ARGUMENT, "sub-program is NULL");
  if (sub->parent != p || sub->root != p->root)
    return kcore_fail(KILN_ERR_ARGUMENT, "sub-program does not belong to this program");
  return kir_verify_program(sub);
}

static kiln_status kir_verify_subs(const kir_program *p, const kir_eqn *e) {
  int n;
  const kir_field *fields = kir_param_fields(kir_prim_get(e->prim)->params, &n);
  for (int i = 0; i < n; i++) {
    const kir_field *f = &fields[i];
    const void *at = (const char *)&e->params + f->offset;
    if (f->type == KIR_FIELD_PROGRAM) {
      const kir_program *sub;
      memcpy(&sub, at, sizeof sub);
      kiln_status st = kir_verify_sub(p, sub);
      if (st != KILN_OK) return kcore_fail_wrap(st, "%s", f->name);
    } else if (f->type == KIR_FIELD_PROGRAMS) {
      const kir_program_list *l = at;
      for (int k = 0; k < l->n; k++) {
        kiln_status st = kir_verify_sub(p, l->v[k]);
        if (st != KILN_OK) return kcore_fail_wrap(st, "%s[%d]", f->name, k);
      }
    }
  }
  return KILN_OK;
}

/* The rule's results must be exactly the outputs' avals. */
static kiln_status kir_verify_types(const kir_program *p, const kir_eqn *e) {
  kir_aval *in = malloc(((size_t)e->n_in + 1) * sizeof *in);
  if (!in) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < e->n_in; i++) in[i] = p->vars[e->in[i]].aval;
  kir_avals outs;
  kir_avals_init(&outs);
  kiln_status st = kir_infer(e->prim, &e->params, e->n_in, in, &outs);
  if (st == KILN_OK && outs.n != e->n_out)
    st = kcore_fail(KILN_ERR_ARGUMENT, "has %d outputs where its rule gives %d", e->n_out, outs.n);
  for (int i = 0; st == KILN_OK && i < outs.n; i++) {
    const kir_aval *have = &p->vars[e->out[i]].aval;
    if (!kir_aval_equal(have, &outs.v[i])) {
      char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
      st = kcore_fail(KILN_ERR_SHAPE, "output %d has type %s where its rule gives %s", i,
                      kir_aval_str(have, t0, sizeof t0), kir_aval_str(&outs.v[i], t1, sizeof t1));
    }
  }
  kir_avals_free(&outs);
  free(in);
  return st;
}

static kiln_status kir_verify_eqn(const kir_program *p, bool *defined, int index) {
  const kir_eqn *e = &p->eqns[index];
  const kir_prim_info *info = kir_prim_get(e->prim);
  if (!info) return kcore_fail(KILN_ERR_ARGUMENT, "has an invalid primitive %d", (int)e->prim);
  if (e->n_in < 0 || e->n_out < 0 || (e->n_in && !e->in) || (e->n_out && !e->out))
    return kcore_fail(KILN_ERR_ARGUMENT, "has invalid operand or output lists");
  for (int i = 0; i < e->n_in; i++) {
    char what[32];
    snprintf(what, sizeof what, "input %d", i);
    kiln_status st = kir_verify_use(p, defined, e->in[i], what);
    if (st != KILN_OK) return st;
  }
  kiln_status st = kir_verify_subs(p, e);
  if (st == KILN_OK) st = kir_verify_types(p, e);
  if (st == KILN_OK && info->family == KIR_FAMILY_COLLECTIVE) st = kir_collective_verify(p, e);
  for (int i = 0; st == KILN_OK && i < e->n_out; i++) {
    char what[32];
    snprintf(what, sizeof what, "output %d", i);
    st = kir_verify_def(p, defined, e->out[i], KIR_VAR_EQN, what);
    if (st == KILN_OK && p->vars[e->out[i]].eqn != index)
      st = kir_bad(what, e->out[i], "does not record this equation as its definition");
  }
  return st;
}

static kiln_status kir_verify_body(const kir_program *p, bool *defined) {
  if (p->parent && p->n_constvars)
    return kcore_fail(KILN_ERR_ARGUMENT, "a sub-program has %d constvars (sub-programs are closed)",
                      p->n_constvars);
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < p->n_constvars; i++)
    st = kir_verify_def(p, defined, p->constvars[i], KIR_VAR_CONSTVAR, "constvar");
  for (int i = 0; st == KILN_OK && i < p->n_invars; i++)
    st = kir_verify_def(p, defined, p->invars[i], KIR_VAR_INVAR, "invar");
  for (kir_vid v = 0; st == KILN_OK && v < p->n_vars; v++) {
    if (p->vars[v].kind != KIR_VAR_LITERAL) continue;
    if (p->vars[v].aval.rank != 0) st = kir_bad("literal", v, "is not a scalar");
    if (st == KILN_OK) st = kir_verify_def(p, defined, v, KIR_VAR_LITERAL, "literal");
  }
  if (st != KILN_OK) return st;
  for (int i = 0; i < p->n_eqns; i++) {
    st = kir_verify_eqn(p, defined, i);
    if (st != KILN_OK)
      return kcore_fail_wrap(st, "equation %d (%s)", i, kir_prim_name(p->eqns[i].prim));
  }
  for (int i = 0; st == KILN_OK && i < p->n_outvars; i++)
    st = kir_verify_use(p, defined, p->outvars[i], "program output");
  return st;
}

static kiln_status kir_verify_program(const kir_program *p) {
  if (p->n_vars < 0 || p->n_eqns < 0 || p->n_invars < 0 || p->n_constvars < 0 ||
      p->n_outvars < 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "negative table size");
  bool *defined = calloc((size_t)p->n_vars + 1, sizeof *defined);
  if (!defined) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory");
  kiln_status st = kir_verify_body(p, defined);
  free(defined);
  return st;
}

kiln_status kir_verify(const kir_program *p) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kir_verify: program is NULL");
  kiln_status st = kir_verify_program(p);
  return st == KILN_OK ? st : kcore_fail_wrap(st, "kir_verify");
}
