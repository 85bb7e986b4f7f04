/* Programs: the arena, building (invars, constants, literals, equations,
 * outputs), freeing, structural equality. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ir/ir.h"
#include "device/device.h"

/* ---- arena: zeroed bump allocation in chunks, freed all at once ---- */

struct kir_arena_chunk {
  struct kir_arena_chunk *next;
  size_t used, cap;
  max_align_t data[];
};

#define KIR_CHUNK_MIN ((size_t)16 << 10)
#define KIR_CHUNK_MAX ((size_t)1 << 20)

void *kir_alloc(kir_program *p, size_t nbytes) {
  kir_program *root = p->root;
  size_t align = sizeof(max_align_t);
  size_t need = (nbytes + align - 1) / align * align;
  if (need < nbytes) return NULL; /* overflow */
  struct kir_arena_chunk *c = root->arena;
  if (!c || c->cap - c->used < need) {
    /* Chunks double up to 1 MiB; a larger request gets a chunk of its own. */
    size_t cap = c ? c->cap * 2 : KIR_CHUNK_MIN;
    if (cap > KIR_CHUNK_MAX) cap = KIR_CHUNK_MAX;
    if (cap < need) cap = need;
    if (cap > SIZE_MAX - sizeof *c) return NULL;
    struct kir_arena_chunk *n = calloc(1, sizeof *n + cap);
    if (!n) return NULL;
    n->cap = cap;
    n->next = c;
    root->arena = n;
    c = n;
  }
  void *out = (char *)c->data + c->used;
  c->used += need;
  return out;
}

/* Makes room for `need` elements of a table in the arena, doubling it. The
 * old block stays in the arena (at most as large as the live one). */
static kiln_status kir_reserve(kir_program *p, void **table, int *cap, int need, size_t elem,
                               const char *op) {
  if (need <= *cap) return KILN_OK;
  if (need > INT_MAX / 2) return kcore_fail(KILN_ERR_SIZE_OVERFLOW, "%s: table too large", op);
  int ncap = *cap ? *cap : 8;
  while (ncap < need) ncap *= 2;
  void *n = kir_alloc(p, (size_t)ncap * elem);
  if (!n) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  if (*cap) memcpy(n, *table, (size_t)*cap * elem);
  *table = n;
  *cap = ncap;
  return KILN_OK;
}

#define KIR_RESERVE(p, table, cap, need, op) \
  kir_reserve((p), (void **)&(table), &(cap), (need), sizeof *(table), (op))

/* ---- program lifetime ---- */

kiln_status kir_program_new(kir_program **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kir_program_new: out is NULL");
  kir_program *p = calloc(1, sizeof *p);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_program_new: out of memory");
  p->root = p;
  p->n_programs = 1;
  *out = p;
  return KILN_OK;
}

void kir_program_free(kir_program *p) {
  if (!p || p->root != p) return;
  /* Only a root holds constvars, so only its array references need releasing. */
  for (int i = 0; i < p->n_constvars; i++) {
    kir_var *v = &p->vars[p->constvars[i]];
    if (v->u.constant.source == KIR_CONST_ARRAY) kiln_array_release(v->u.constant.array);
  }
  struct kir_arena_chunk *c = p->arena;
  while (c) {
    struct kir_arena_chunk *next = c->next;
    free(c);
    c = next;
  }
  free(p);
}

kiln_status kir_program_new_sub(kir_program *parent, kir_program **out) {
  if (!parent || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kir_program_new_sub: %s is NULL",
                      parent ? "out" : "parent");
  kir_program *s = kir_alloc(parent, sizeof *s);
  if (!s) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_program_new_sub: out of memory");
  s->parent = parent;
  s->root = parent->root;
  s->index = parent->root->n_programs++;
  *out = s;
  return KILN_OK;
}

/* ---- vars ---- */

static kiln_status kir_new_var(kir_program *p, const kir_aval *aval, kir_var_kind kind,
                               const char *op, kir_vid *out) {
  kiln_status st = KIR_RESERVE(p, p->vars, p->cap_vars, p->n_vars + 1, op);
  if (st != KILN_OK) return st;
  kir_var *v = &p->vars[p->n_vars];
  memset(v, 0, sizeof *v);
  v->aval = kir_aval_make(aval->dtype, aval->rank, aval->shape, aval->weak);
  v->kind = kind;
  v->eqn = -1;
  *out = p->n_vars++;
  return KILN_OK;
}

static kiln_status kir_check_out(const char *op, kir_program *p, const void *out) {
  if (!p || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", op, p ? "out" : "program");
  return KILN_OK;
}

kiln_status kir_add_invar(kir_program *p, const kir_aval *aval, kir_vid *out) {
  const char *op = "kir_add_invar";
  kiln_status st = kir_check_out(op, p, out);
  if (st == KILN_OK) st = kir_aval_check(op, aval);
  if (st == KILN_OK) st = KIR_RESERVE(p, p->invars, p->cap_invars, p->n_invars + 1, op);
  kir_vid v;
  if (st == KILN_OK) st = kir_new_var(p, aval, KIR_VAR_INVAR, op, &v);
  if (st != KILN_OK) return st;
  p->invars[p->n_invars++] = v;
  *out = v;
  return KILN_OK;
}

kiln_status kir_add_const(kir_program *p, const kir_aval *aval, kir_vid *out) {
  const char *op = "kir_add_const";
  kiln_status st = kir_check_out(op, p, out);
  if (st != KILN_OK) return st;
  if (p->parent)
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: sub-programs are closed and cannot hold constants (pass the value "
                      "as an operand of the enclosing equation)",
                      op);
  st = kir_aval_check(op, aval);
  if (st == KILN_OK) st = KIR_RESERVE(p, p->constvars, p->cap_constvars, p->n_constvars + 1, op);
  kir_vid v;
  if (st == KILN_OK) st = kir_new_var(p, aval, KIR_VAR_CONSTVAR, op, &v);
  if (st != KILN_OK) return st;
  p->vars[v].u.constant.source = KIR_CONST_ABSTRACT;
  p->constvars[p->n_constvars++] = v;
  *out = v;
  return KILN_OK;
}

static kiln_status kir_const_lookup(const char *op, kir_program *p, kir_vid v, kir_var **out) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "%s: program is NULL", op);
  if (v < 0 || v >= p->n_vars || p->vars[v].kind != KIR_VAR_CONSTVAR)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: var %d is not a constvar of the program", op, v);
  if (p->vars[v].u.constant.source != KIR_CONST_ABSTRACT)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: constvar %d is already bound", op, v);
  *out = &p->vars[v];
  return KILN_OK;
}

kiln_status kir_const_bind_array(kir_program *p, kir_vid v, kiln_array *a) {
  const char *op = "kir_const_bind_array";
  kir_var *var;
  kiln_status st = kir_const_lookup(op, p, v, &var);
  if (st != KILN_OK) return st;
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "%s: array is NULL", op);
  kir_aval aa = kir_aval_make(a->dtype, a->rank, a->shape, var->aval.weak);
  if (!kir_aval_typematch(&aa, &var->aval)) {
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "%s: array %s does not match the constvar's type %s", op,
                      kir_aval_str(&aa, t1, sizeof t1), kir_aval_str(&var->aval, t2, sizeof t2));
  }
  kiln_array_retain(a);
  var->u.constant.source = KIR_CONST_ARRAY;
  var->u.constant.array = a;
  var->u.constant.nbytes = a->buf.nbytes;
  return KILN_OK;
}

kiln_status kir_const_bind_host(kir_program *p, kir_vid v, const void *data, size_t nbytes) {
  const char *op = "kir_const_bind_host";
  kir_var *var;
  kiln_status st = kir_const_lookup(op, p, v, &var);
  if (st != KILN_OK) return st;
  size_t want;
  st = kcore_shape_bytes(op, var->aval.dtype, var->aval.rank, var->aval.shape, NULL, &want);
  if (st != KILN_OK) return st;
  if (nbytes != want) {
    char t[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_SHAPE, "%s: %zu bytes given for %s, which needs %zu", op, nbytes,
                      kir_aval_str(&var->aval, t, sizeof t), want);
  }
  if (nbytes && !data) return kcore_fail(KILN_ERR_ARGUMENT, "%s: data is NULL", op);
  void *copy = nbytes ? kir_alloc(p, nbytes) : NULL;
  if (nbytes && !copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  if (nbytes) memcpy(copy, data, nbytes);
  var = &p->vars[v];
  var->u.constant.source = KIR_CONST_HOST;
  var->u.constant.host = copy;
  var->u.constant.nbytes = nbytes;
  return KILN_OK;
}

kiln_status kir_add_const_array(kir_program *p, kiln_array *a, kir_vid *out) {
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "kir_add_const_array: array is NULL");
  kir_aval aval = kir_aval_make(a->dtype, a->rank, a->shape, false);
  kir_vid v;
  kiln_status st = kir_add_const(p, &aval, &v);
  if (st == KILN_OK) st = kir_const_bind_array(p, v, a);
  if (st != KILN_OK) return st;
  *out = v;
  return KILN_OK;
}

kiln_status kir_add_const_host(kir_program *p, const kir_aval *aval, const void *data,
                               size_t nbytes, kir_vid *out) {
  kir_vid v;
  kiln_status st = kir_add_const(p, aval, &v);
  if (st == KILN_OK) st = kir_const_bind_host(p, v, data, nbytes);
  if (st != KILN_OK) return st;
  *out = v;
  return KILN_OK;
}

/* The integer range of dtype as [lo, hi] in signed or unsigned terms. */
static kiln_status kir_literal_check_int(const char *op, kiln_dtype dtype, kir_scalar v) {
  size_t bits = kiln_dtype_size(dtype) * 8;
  if (kiln_dtype_is_bool(dtype)) {
    if (v.i == 0 || v.i == 1) return KILN_OK;
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: bool literal must be 0 or 1, got %lld", op,
                      (long long)v.i);
  }
  if (kiln_dtype_is_unsigned(dtype)) {
    if (bits == 64 || v.u < ((uint64_t)1 << bits)) return KILN_OK;
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: literal %llu does not fit in %s", op,
                      (unsigned long long)v.u, kiln_dtype_name(dtype));
  }
  if (bits == 64) return KILN_OK;
  int64_t lim = (int64_t)1 << (bits - 1);
  if (v.i >= -lim && v.i < lim) return KILN_OK;
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: literal %lld does not fit in %s", op, (long long)v.i,
                    kiln_dtype_name(dtype));
}

kiln_status kir_add_literal(kir_program *p, kiln_dtype dtype, bool weak, kir_scalar value,
                            kir_vid *out) {
  const char *op = "kir_add_literal";
  kiln_status st = kir_check_out(op, p, out);
  if (st != KILN_OK) return st;
  if (!kiln_dtype_is_valid(dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  if (kiln_dtype_is_float(dtype)) {
    value.f = kir_round_to_dtype(dtype, value.f);
  } else {
    st = kir_literal_check_int(op, dtype, value);
    if (st != KILN_OK) return st;
  }
  kir_aval aval = kir_aval_make(dtype, 0, NULL, weak);
  kir_vid v;
  st = kir_new_var(p, &aval, KIR_VAR_LITERAL, op, &v);
  if (st != KILN_OK) return st;
  p->vars[v].u.literal = value;
  *out = v;
  return KILN_OK;
}

/* ---- equations ---- */

static kiln_status kir_check_operands(const char *op, const kir_program *p, int n,
                                      const kir_vid *vids) {
  if (n < 0 || (n > 0 && !vids))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: invalid operand list (%d operands)", op, n);
  for (int i = 0; i < n; i++)
    if (vids[i] < 0 || vids[i] >= p->n_vars)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: operand %d (var %d) is not a var of the program",
                        op, i, vids[i]);
  return KILN_OK;
}

/* Copies operand avals into a caller array (stack for small counts). */
static kiln_status kir_gather_avals(const kir_program *p, int n, const kir_vid *vids,
                                    kir_aval *small, int n_small, kir_aval **out) {
  kir_aval *a = small;
  if (n > n_small) {
    a = malloc((size_t)n * sizeof *a);
    if (!a) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kir_add_eqn: out of memory");
  }
  for (int i = 0; i < n; i++) a[i] = p->vars[vids[i]].aval;
  *out = a;
  return KILN_OK;
}

kiln_status kir_add_eqn(kir_program *p, kir_prim prim, const kir_params *params, int n_in,
                        const kir_vid *in, int *eqn_index) {
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "kir_add_eqn: program is NULL");
  const kir_prim_info *info = kir_prim_get(prim);
  if (!info) return kcore_fail(KILN_ERR_ARGUMENT, "kir_add_eqn: invalid primitive %d", (int)prim);
  kiln_status st = kir_check_operands(info->name, p, n_in, in);
  if (st != KILN_OK) return st;
  kir_params imported;
  st = kir_params_import(p, prim, params, &imported);
  if (st != KILN_OK) return st;

  kir_aval small[8], *in_avals = NULL;
  kir_avals outs;
  kir_avals_init(&outs);
  st = kir_gather_avals(p, n_in, in, small, 8, &in_avals);
  if (st == KILN_OK) st = kir_infer(prim, &imported, n_in, in_avals, &outs);
  if (st != KILN_OK) goto done;

  st = KIR_RESERVE(p, p->eqns, p->cap_eqns, p->n_eqns + 1, info->name);
  if (st != KILN_OK) goto done;
  kir_vid *ins = n_in ? kir_alloc(p, (size_t)n_in * sizeof *ins) : NULL;
  kir_vid *outv = outs.n ? kir_alloc(p, (size_t)outs.n * sizeof *outv) : NULL;
  if ((n_in && !ins) || (outs.n && !outv)) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", info->name);
    goto done;
  }
  if (n_in) memcpy(ins, in, (size_t)n_in * sizeof *ins);
  for (int i = 0; i < outs.n; i++) {
    st = kir_new_var(p, &outs.v[i], KIR_VAR_EQN, info->name, &outv[i]);
    if (st != KILN_OK) goto done;
    p->vars[outv[i]].eqn = p->n_eqns;
  }
  kir_eqn *e = &p->eqns[p->n_eqns];
  e->prim = prim;
  e->n_in = n_in;
  e->in = ins;
  e->n_out = outs.n;
  e->out = outv;
  e->params = imported;
  e->source = NULL; /* the slot may hold a removed equation's */
  if (eqn_index) *eqn_index = p->n_eqns;
  p->n_eqns++;
done:
  /* Output vars made before a failure stay unused in the table (harmless). */
  if (in_avals != small) free(in_avals);
  kir_avals_free(&outs);
  return st;
}

kiln_status kir_set_outputs(kir_program *p, int n, const kir_vid *outs) {
  const char *op = "kir_set_outputs";
  if (!p) return kcore_fail(KILN_ERR_ARGUMENT, "%s: program is NULL", op);
  kiln_status st = kir_check_operands(op, p, n, outs);
  if (st != KILN_OK) return st;
  kir_vid *copy = n ? kir_alloc(p, (size_t)n * sizeof *copy) : NULL;
  if (n && !copy) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
  if (n) memcpy(copy, outs, (size_t)n * sizeof *copy);
  p->outvars = copy;
  p->n_outvars = n;
  return KILN_OK;
}

/* ---- structural equality ---- */

/* a's vids map to b's as definitions are walked in order; uses must agree. */
typedef struct kir_eq_state {
  const kir_program *a, *b;
  kir_vid *map; /* a vid -> b vid, KIR_NO_VAR if not yet defined */
} kir_eq_state;

static bool kir_eq_define(kir_eq_state *s, kir_vid va, kir_vid vb) {
  if (!kir_aval_equal(&s->a->vars[va].aval, &s->b->vars[vb].aval)) return false;
  if (s->map[va] != KIR_NO_VAR) return false; /* defined twice: not SSA */
  s->map[va] = vb;
  return true;
}

static bool kir_eq_use(kir_eq_state *s, kir_vid va, kir_vid vb) {
  const kir_var *x = &s->a->vars[va], *y = &s->b->vars[vb];
  if (x->kind == KIR_VAR_LITERAL || y->kind == KIR_VAR_LITERAL)
    return x->kind == y->kind && kir_aval_equal(&x->aval, &y->aval) &&
           kir_scalar_equal(x->aval.dtype, x->u.literal, y->u.literal);
  return s->map[va] == vb;
}

static bool kir_eq_list_define(kir_eq_state *s, int na, const kir_vid *a, int nb,
                               const kir_vid *b) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (!kir_eq_define(s, a[i], b[i])) return false;
  return true;
}

static bool kir_eq_list_use(kir_eq_state *s, int na, const kir_vid *a, int nb, const kir_vid *b) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (!kir_eq_use(s, a[i], b[i])) return false;
  return true;
}

static bool kir_eq_body(kir_eq_state *s) {
  const kir_program *a = s->a, *b = s->b;
  if (!kir_eq_list_define(s, a->n_constvars, a->constvars, b->n_constvars, b->constvars) ||
      !kir_eq_list_define(s, a->n_invars, a->invars, b->n_invars, b->invars) ||
      a->n_eqns != b->n_eqns)
    return false;
  for (int i = 0; i < a->n_eqns; i++) {
    const kir_eqn *x = &a->eqns[i], *y = &b->eqns[i];
    if (x->prim != y->prim || !kir_eq_list_use(s, x->n_in, x->in, y->n_in, y->in) ||
        !kir_params_equal(kir_prim_get(x->prim)->params, &x->params, &y->params) ||
        !kir_eq_list_define(s, x->n_out, x->out, y->n_out, y->out))
      return false;
  }
  return kir_eq_list_use(s, a->n_outvars, a->outvars, b->n_outvars, b->outvars);
}

bool kir_program_equal(const kir_program *a, const kir_program *b) {
  if (a == b) return true;
  if (!a || !b) return false;
  kir_eq_state s = {a, b, malloc(((size_t)a->n_vars + 1) * sizeof(kir_vid))};
  if (!s.map) return false; /* out of memory: "not known equal" is the safe answer */
  for (int i = 0; i < a->n_vars; i++) s.map[i] = KIR_NO_VAR;
  bool eq = kir_eq_body(&s);
  free(s.map);
  return eq;
}

static void kir_effect_visit(kir_program *sub, void *user) {
  if (kir_program_has_effect(sub)) *(bool *)user = true;
}

bool kir_eqn_has_effect(const kir_eqn *e) {
  if (kir_prim_has_effect(e->prim)) return true;
  bool found = false;
  kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, kir_effect_visit,
                              &found);
  return found;
}

bool kir_program_has_effect(const kir_program *p) {
  for (int i = 0; i < p->n_eqns; i++)
    if (kir_eqn_has_effect(&p->eqns[i])) return true;
  return false;
}

void kir_remove_eqns(kir_program *p, const bool *drop) {
  int n = 0;
  for (int i = 0; i < p->n_eqns; i++) {
    kir_eqn *e = &p->eqns[i];
    for (int k = 0; k < e->n_out; k++)
      if (p->vars[e->out[k]].kind == KIR_VAR_EQN) p->vars[e->out[k]].eqn = drop[i] ? -1 : n;
    if (!drop[i]) p->eqns[n++] = *e;
  }
  p->n_eqns = n;
}
