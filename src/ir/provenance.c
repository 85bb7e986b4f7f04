/* Where an equation came from and where a sub-program sits: what messages
 * about one equation of a large program need to point at it. */
#include <stdio.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

kiln_status kir_eqn_set_source(kir_program *p, int eqn, const char *source) {
  if (!p || eqn < 0 || eqn >= p->n_eqns)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_eqn_set_source: no equation %d", eqn);
  if (!source || !*source) {
    p->eqns[eqn].source = NULL;
    return KILN_OK;
  }
  /* Runs of equations from one op share the previous copy. */
  if (eqn > 0 && p->eqns[eqn - 1].source && strcmp(p->eqns[eqn - 1].source, source) == 0) {
    p->eqns[eqn].source = p->eqns[eqn - 1].source;
    return KILN_OK;
  }
  size_t n = strlen(source) + 1;
  char *copy = kir_alloc(p, n);
  if (!copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_eqn_set_source: out of memory");
  memcpy(copy, source, n);
  p->eqns[eqn].source = copy;
  return KILN_OK;
}

kiln_status kir_eqns_derive_source(kir_program *p, int from, const char *how, const char *source) {
  if (!source || !p) return KILN_OK;
  char buf[256];
  snprintf(buf, sizeof buf, "%s(%s)", how, source);
  for (int i = from < 0 ? 0 : from; i < p->n_eqns; i++) {
    if (p->eqns[i].source) continue;
    kiln_status st = kir_eqn_set_source(p, i, buf);
    if (st) return st;
  }
  return KILN_OK;
}

/* Whether param field f of e holds sub; its name (with the index in a
 * list) goes to field. */
static bool kir_field_holds(const kir_eqn *e, const kir_field *f, const kir_program *sub,
                            char *field, size_t cap) {
  const char *base = (const char *)&e->params + f->offset;
  if (f->type == KIR_FIELD_PROGRAM) {
    if (*(kir_program *const *)(const void *)base != sub) return false;
    snprintf(field, cap, "%s", f->name);
    return true;
  }
  if (f->type != KIR_FIELD_PROGRAMS) return false;
  const kir_program_list *l = (const kir_program_list *)(const void *)base;
  for (int k = 0; k < l->n; k++)
    if (l->v[k] == sub) {
      snprintf(field, cap, "%s[%d]", f->name, k);
      return true;
    }
  return false;
}

int kir_program_owner(const kir_program *sub, char *field, size_t cap) {
  if (cap) field[0] = '\0';
  const kir_program *p = sub ? sub->parent : NULL;
  for (int i = 0; p && i < p->n_eqns; i++) {
    const kir_eqn *e = &p->eqns[i];
    int n;
    const kir_field *fields = kir_param_fields(kir_prim_get(e->prim)->params, &n);
    for (int k = 0; k < n; k++)
      if (kir_field_holds(e, &fields[k], sub, field, cap)) return i;
  }
  return -1;
}
