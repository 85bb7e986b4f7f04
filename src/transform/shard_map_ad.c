/* Autodiff and batching of shard_map (JAX's, jax/_src/shard_map.py).
 *
 * jvp: the body is linearized and split (partial evaluation, as scan's in
 * control_ad.c) into a known shard_map, which computes the primal results
 * and outputs the residuals the tangents need, each member's as one row of
 * a [members, ...] array split over every mesh axis, and a linear
 * shard_map over (residuals, non-zero tangents) giving the non-zero output
 * tangents, split as their primals. The forward body runs once, in jvp and
 * in grad. A residual of the highest rank (no room for the leading axis)
 * falls back to a tangent shard_map that recomputes the primal part.
 *
 * transpose: a shard_map over (known operands, output cotangents) whose
 * body is the body's transpose, giving the linear operands' cotangents.
 * These are JAX's check_vma=False rules (kiln types no value by the mesh
 * axes it varies over): a cotangent of a result whose out_spec leaves mesh
 * axes out is divided by their size first, since every member holds the
 * whole replicated value; the cotangent of an operand whose in_spec leaves
 * axes out (a replicated operand, captured values too) is psummed over them
 * last; and psum transposes to psum (collective_ad.c). For a shard_map
 * they give JAX's check_vma=True gradients as well (the golden script
 * checks both agree).
 *
 * batch (vmap): the mapped axis goes in front of every operand and result;
 * the specs gain a leading None and the body is batched over its shards. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transform/transform.h"

#define KTF_OOM(op) kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op)

/* ---- specs ---- */

typedef struct smap_specs {
  kir_mesh m;
  kir_spec *in, *out; /* in[n_in], out[n_out] in one block */
  int n_in, n_out;
} smap_specs;

static kiln_status specs_get(const char *op, const kir_eqn *e, smap_specs *s) {
  const kir_p_shard_map *p = &e->params.shard_map;
  s->n_in = e->n_in;
  s->n_out = e->n_out;
  s->in = malloc((size_t)(e->n_in + e->n_out + 1) * sizeof *s->in);
  if (!s->in) return KTF_OOM(op);
  s->out = s->in + e->n_in;
  kiln_status st = kir_mesh_parse(op, p->mesh, &s->m);
  if (!st) st = kir_specs_parse(op, p->in_specs, &s->m, e->n_in, s->in);
  if (!st) st = kir_specs_parse(op, p->out_specs, &s->m, e->n_out, s->out);
  return st;
}

/* The mesh axes spec s leaves out: their names joined by ',' into names
 * (cap bytes), the product of their sizes returned (1: none). */
static int64_t unmentioned(const kir_spec *s, const kir_mesh *m, char *names, size_t cap) {
  bool used[KIR_MESH_MAX_AXES] = {false};
  for (int d = 0; d < s->rank; d++)
    for (int k = 0; k < s->n_axes[d]; k++) used[s->axes[d][k]] = true;
  int64_t size = 1;
  size_t n = 0;
  names[0] = '\0';
  for (int a = 0; a < m->ndim; a++)
    if (!used[a]) {
      n += (size_t)snprintf(names + n, cap - n, "%s%s", n ? "," : "", m->name[a]);
      size *= m->size[a];
    }
  return size;
}

/* A growing text (kir_specs_parse's form: "a, None | (a, b)"). */
typedef struct text {
  char *s;
  size_t n, cap;
  bool oom;
} text;

static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = t->oom ? 0 : vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (t->oom || (t->s && (size_t)k < t->cap - t->n)) {
      t->n += t->oom ? 0 : (size_t)k;
      return;
    }
    size_t cap = 2 * (t->cap + (size_t)k) + 64;
    char *g = realloc(t->s, cap);
    if (!g) {
      t->oom = true;
      return;
    }
    t->s = g, t->cap = cap;
  }
}

/* n specs joined by " | ". */
static char *specs_text(const kir_mesh *m, int n, const kir_spec *const *specs) {
  text t = {0};
  put(&t, "%s", "");
  for (int i = 0; i < n; i++) {
    put(&t, "%s", i ? " | " : "");
    for (int d = 0; d < specs[i]->rank; d++) {
      int na = specs[i]->n_axes[d];
      put(&t, "%s%s", d ? ", " : "", na == 0 ? "None" : na > 1 ? "(" : "");
      for (int k = 0; k < na; k++) put(&t, "%s%s", k ? ", " : "", m->name[specs[i]->axes[d][k]]);
      if (na > 1) put(&t, ")");
    }
  }
  if (t.oom) free(t.s);
  return t.oom ? NULL : t.s;
}

/* Emits shard_map[like's mesh and check_rep](ops) over body with these specs. */
static kiln_status emit_smap(const char *op, kir_program *dst, const kir_eqn *like,
                             const kir_mesh *m, kir_program *body, int n_in,
                             const kir_spec *const *in, int n_out, const kir_spec *const *out,
                             const kir_vid *ops, int *idx) {
  char *it = specs_text(m, n_in, in), *ot = specs_text(m, n_out, out);
  kiln_status st = it && ot ? KILN_OK : KTF_OOM(op);
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.shard_map = (kir_p_shard_map){like->params.shard_map.check_rep, it, body,
                                   like->params.shard_map.mesh, ot};
  if (!st) st = kir_add_eqn(dst, KIR_PRIM_SHARD_MAP, &pr, n_in, ops, idx);
  free(it);
  free(ot);
  return st;
}

/* ---- jvp ---- */

/* Lists J's var a as a residual unless it is linear, a literal or listed:
 * kind -1 when the known shard_map must output it, else the operand (of
 * the n) it is. True when it needs a leading axis it cannot get. */
static bool add_residual(const kir_program *J, int n, const bool *lin, kir_vid a, kir_vid *res,
                         int *kind, int *nres) {
  for (int r = 0; r < *nres; r++)
    if (res[r] == a) return false;
  if (lin[a] || J->vars[a].kind == KIR_VAR_LITERAL) return false;
  kind[*nres] = -1;
  for (int j = 0; j < n; j++)
    if (J->invars[j] == a) kind[*nres] = j;
  res[(*nres)++] = a;
  return kind[*nres - 1] < 0 && kir_var_aval(J, a)->rank == KIR_MAX_RANK;
}

/* x reshaped to shape (rank dims), emitted into p. */
static kiln_status reshape(kir_program *p, kir_vid x, int rank, const int64_t *shape, kir_vid *out) {
  kir_params pr;
  memset(&pr, 0, sizeof pr);
  pr.reshape.new_sizes.n = rank;
  memcpy(pr.reshape.new_sizes.v, shape, (size_t)rank * sizeof *shape);
  return kir_emit(p, KIR_PRIM_RESHAPE, &pr, 1, &x, out);
}

/* A residual's shape with a leading 1: each member's value of it, laid out
 * over the mesh as [members, ...] by the spec `stacked`. */
static void lead_one(const kir_aval *a, int64_t *shape) {
  shape[0] = 1;
  memcpy(shape + 1, a->shape, (size_t)a->rank * sizeof *shape);
}

/* The primal shard_map plus a tangent one that recomputes the primal part
 * (the fallback for a residual of the highest rank, which cannot gain the
 * leading axis its layout over the mesh needs). */
static kiln_status jvp_recompute(const char *op, kir_program *dst, const kir_eqn *e,
                                 const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_program *B = e->params.shard_map.jaxpr;
  int n = e->n_in, no = e->n_out;
  smap_specs sp = {0};
  bool *nz = calloc((size_t)(n + no + 1), sizeof *nz), *onz = nz ? nz + n : NULL;
  kir_vid *v = malloc((size_t)(4 * n + 2 * no + 2) * sizeof *v);
  const kir_spec **specs = malloc((size_t)(2 * n + no + 1) * sizeof *specs);
  kiln_status st = nz && v && specs ? specs_get(op, e, &sp) : KTF_OOM(op);
  kir_program *T = NULL;
  int idx, nt = 0, nto = 0;
  /* the primal shard_map */
  kir_params pr;
  if (!st) st = ktf_copy_params(dst, e, &pr);
  if (!st) st = kir_add_eqn(dst, KIR_PRIM_SHARD_MAP, &pr, n, x, &idx);
  for (int j = 0; !st && j < no; j++) {
    y[j] = dst->eqns[idx].out[j];
    ty[j] = KIR_NO_VAR;
  }
  for (int i = 0; !st && i < n; i++) nz[i] = tx[i] != KIR_NO_VAR;
  if (!st) st = ktf_nonzero_outs(op, B, nz, onz);
  for (int j = 0; !st && j < no; j++) nto += onz[j];
  /* the tangent shard_map: (operands, non-zero tangents) -> non-zero output tangents */
  kir_vid *bx = v, *btx = v + n, *by = v + 2 * n, *bty = by + no, *in = bty + no;
  if (!st && nto) st = kir_program_new_sub(dst, &T);
  for (int i = 0; !st && nto && i < n; i++) {
    st = kir_add_invar(T, kir_var_aval(B, B->invars[i]), &bx[i]);
    in[nt] = x[i];
    specs[nt++] = &sp.in[i];
  }
  for (int i = 0; !st && nto && i < n; i++) {
    btx[i] = KIR_NO_VAR;
    if (!nz[i]) continue;
    kir_aval a = *kir_var_aval(B, B->invars[i]);
    a.weak = false;
    st = kir_add_invar(T, &a, &btx[i]);
    in[nt] = tx[i];
    specs[nt++] = &sp.in[i];
  }
  if (!st && nto) st = ktf_jvp(op, T, B, bx, btx, by, bty);
  int k = 0;
  for (int j = 0; !st && nto && j < no; j++) {
    if (!onz[j]) continue;
    if (bty[j] == KIR_NO_VAR) {
      kir_aval a = *kir_var_aval(B, B->outvars[j]);
      a.weak = false;
      st = kir_emit_zeros(T, &a, &bty[j]);
    }
    by[k] = bty[j];
    specs[nt + k++] = &sp.out[j];
  }
  if (!st && nto) st = kir_set_outputs(T, nto, by);
  if (!st && nto)
    st = emit_smap(op, dst, e, &sp.m, T, nt, specs, nto, specs + nt, in, &idx);
  for (int j = 0, q = 0; !st && nto && j < no; j++)
    if (onz[j]) ty[j] = dst->eqns[idx].out[q++];
  free(sp.in);
  free(specs);
  free(nz);
  free(v);
  return st;
}

kiln_status ktf_jvp_shard_map(const char *op, kir_program *dst, const kir_eqn *e,
                              const kir_vid *x, const kir_vid *tx, kir_vid *y, kir_vid *ty) {
  const kir_program *B = e->params.shard_map.jaxpr;
  int n = e->n_in, no = e->n_out;
  bool *nz = calloc((size_t)(n + no + 1), sizeof *nz), *has_t = nz ? nz + n : NULL;
  kir_program *J = NULL;
  kiln_status st = nz ? KILN_OK : KTF_OOM(op);
  for (int i = 0; !st && i < n; i++) nz[i] = tx[i] != KIR_NO_VAR;
  if (!st) st = ktf_linearize(op, B, nz, &J, has_t);
  int nv = st ? 1 : J->n_vars + 1, ne = st ? 1 : J->n_eqns + 1, nj = st ? 0 : J->n_invars;
  bool *lin = calloc((size_t)(2 * nv + 2 * ne + nj + 1), sizeof *lin), *live = lin + nv;
  bool *lin_eqn = live + nv, *known_eqn = lin_eqn + ne, *lin_in = known_eqn + ne;
  int w = 1; /* the widest equation of J: ktf_copy_eqn's scratch */
  for (int i = 0; !st && i < J->n_eqns; i++) w = J->eqns[i].n_in > w ? J->eqns[i].n_in : w;
  kir_vid *v = malloc((size_t)(4 * nv + 2 * nj + 2 * no + w + 4) * sizeof *v);
  int *kind = malloc((size_t)nv * sizeof *kind); /* per residual: -1 stacked, else its operand */
  const kir_spec **specs = malloc((size_t)(2 * nv + 2 * nj + 2 * no + 2) * sizeof *specs);
  smap_specs sp = {0};
  if (!st && (!lin || !v || !kind || !specs)) st = KTF_OOM(op);
  if (!st) st = specs_get(op, e, &sp);
  if (!st) {
    for (int i = 0; i < nj; i++) lin_in[i] = i >= n;
    ktf_mark_linear(J, lin_in, lin, lin_eqn);
    for (int i = 0; i < J->n_eqns; i++) known_eqn[i] = !lin_eqn[i];
  }
  /* the residuals: known values the linear equations read */
  kir_vid *res = v;
  int nres = 0;
  bool fallback = false;
  for (int i = 0; !st && i < J->n_eqns; i++)
    for (int k = 0; lin_eqn[i] && k < J->eqns[i].n_in; k++)
      fallback |= add_residual(J, n, lin, J->eqns[i].in[k], res, kind, &nres);
  for (int j = no; !st && j < J->n_outvars; j++) /* a tangent that is a known value */
    fallback |= add_residual(J, n, lin, J->outvars[j], res, kind, &nres);
  if (!st && fallback) st = jvp_recompute(op, dst, e, x, tx, y, ty);
  /* the known shard_map: operands -> (outputs, stacked residuals) */
  kir_spec stacked = {.rank = 1};
  for (int a = 0; a < sp.m.ndim; a++) stacked.axes[0][stacked.n_axes[0]++] = (int8_t)a;
  kir_vid *kout = res + nres, *ops = kout + nv + no;
  int nko = 0, idx = -1, m = 0;
  for (int j = 0; !st && !fallback && j < no; j++) {
    kout[nko] = J->outvars[j];
    specs[nko++] = &sp.out[j];
  }
  for (int r = 0; !st && !fallback && r < nres; r++)
    if (kind[r] < 0) {
      kout[nko] = res[r];
      specs[nko++] = &stacked;
    }
  kir_program *K = NULL, *L = NULL;
  if (!st && !fallback) {
    ktf_mark_live(J, nko, kout, NULL, live);
    st = ktf_extract(op, dst, J, n, J->invars, live, NULL, nko, kout, &K);
  }
  kir_vid *ko = ops + nv + nj; /* K's outputs, the stacked ones reshaped */
  for (int k = 0; !st && !fallback && k < nko; k++) {
    ko[k] = K->outvars[k];
    if (k < no) continue;
    const kir_aval *a = kir_var_aval(K, ko[k]);
    int64_t shape[KIR_MAX_RANK];
    lead_one(a, shape);
    st = reshape(K, ko[k], a->rank + 1, shape, &ko[k]);
  }
  if (!st && !fallback) st = kir_set_outputs(K, nko, ko);
  const kir_spec **kspecs = specs + nko;
  for (int i = 0; !st && i < n; i++) kspecs[i] = &sp.in[i];
  if (!st && !fallback) st = emit_smap(op, dst, e, &sp.m, K, n, kspecs, nko, specs, x, &idx);
  for (int j = 0; !st && !fallback && j < no; j++) {
    y[j] = dst->eqns[idx].out[j];
    ty[j] = KIR_NO_VAR;
  }
  /* the linear shard_map: (residuals, non-zero tangents) -> non-zero output
   * tangents; a stacked residual comes in as [1, ...] and is reshaped */
  ktf_map map = {0};
  int nlo = 0;
  for (int j = 0; !st && j < no; j++) nlo += has_t[j];
  if (!st && !fallback && nlo) st = kir_program_new_sub(dst, &L);
  if (!st && !fallback && nlo) st = ktf_map_new(op, J->n_vars, &map);
  for (int r = 0, k = no; !st && !fallback && nlo && r < nres; r++) {
    const kir_aval *a = kir_var_aval(J, res[r]);
    if (kind[r] >= 0) {
      st = kir_add_invar(L, a, &map.v[res[r]]);
      ops[m] = x[kind[r]];
      specs[m++] = &sp.in[kind[r]];
      continue;
    }
    kir_aval big = *a;
    big.rank = a->rank + 1;
    lead_one(a, big.shape);
    kir_vid in;
    st = kir_add_invar(L, &big, &in);
    if (!st) st = reshape(L, in, a->rank, a->shape, &map.v[res[r]]);
    ops[m] = dst->eqns[idx].out[k++];
    specs[m++] = &stacked;
  }
  for (int i = 0, k = n; !st && !fallback && nlo && i < n; i++) {
    if (!nz[i]) continue;
    kir_vid tv = J->invars[k++];
    st = kir_add_invar(L, kir_var_aval(J, tv), &map.v[tv]);
    ops[m] = tx[i];
    specs[m++] = &sp.in[i];
  }
  kir_vid *buf = ko + nv + no, *lo = kout; /* kout is no longer needed */
  for (int i = 0; !st && !fallback && nlo && i < J->n_eqns; i++) {
    const kir_eqn *q = &J->eqns[i];
    if (lin_eqn[i]) st = ktf_copy_eqn(op, L, J, q, &map, buf);
  }
  for (int j = 0, k = no, q = 0; !st && !fallback && nlo && j < no; j++) {
    if (!has_t[j]) continue;
    st = ktf_map_get(op, &map, L, J, J->outvars[k++], &lo[q]);
    specs[m + q++] = &sp.out[j];
  }
  if (!st && !fallback && nlo) st = kir_set_outputs(L, nlo, lo);
  if (!st && !fallback && nlo) st = emit_smap(op, dst, e, &sp.m, L, m, specs, nlo, specs + m, ops, &idx);
  for (int j = 0, q = 0; !st && !fallback && nlo && j < no; j++)
    if (has_t[j]) ty[j] = dst->eqns[idx].out[q++];
  free(map.v);
  free(sp.in);
  free(specs);
  free(kind);
  free(v);
  free(lin);
  free(nz);
  kir_program_free(J);
  return st;
}

/* ---- transpose ---- */

kiln_status ktf_transpose_shard_map(kir_program *p, const kir_program *src, const kir_eqn *e,
                                    const bool *lin, const kir_vid *x, const kir_vid *ct,
                                    kir_vid *ct_x) {
  (void)src;
  static const char op[] = "transpose of shard_map";
  const kir_program *L = e->params.shard_map.jaxpr;
  int n = e->n_in, no = e->n_out;
  smap_specs sp = {0};
  kir_vid *v = malloc((size_t)(3 * n + 2 * no + 2) * sizeof *v);
  const kir_spec **specs = malloc((size_t)(2 * n + no + 1) * sizeof *specs);
  kiln_status st = v && specs ? specs_get(op, e, &sp) : KTF_OOM(op);
  kir_program *T = NULL;
  kir_vid *tx = v, *tct = v + n, *tout = tct + no, *ops = tout + n;
  int m = 0, nl = 0;
  char names[KIR_MESH_MAX_AXES * (KIR_AXIS_NAME_MAX + 1) + 1];
  if (!st) st = kir_program_new_sub(p, &T);
  for (int i = 0; !st && i < n; i++) {
    tx[i] = KIR_NO_VAR;
    if (lin[i]) continue;
    st = kir_add_invar(T, kir_var_aval(L, L->invars[i]), &tx[i]);
    ops[m] = x[i];
    specs[m++] = &sp.in[i];
  }
  for (int j = 0; !st && j < no; j++) {
    kir_aval a = *kir_var_aval(L, L->outvars[j]);
    a.weak = false;
    st = kir_add_invar(T, &a, &tct[j]);
    ops[m] = ct[j];
    specs[m++] = &sp.out[j];
    int64_t ways = st ? 1 : unmentioned(&sp.out[j], &sp.m, names, sizeof names);
    kir_vid w;
    if (ways > 1 && !(st = kir_emit_scalar(T, tct[j], (double)ways, &w)))
      st = kir_emit2(T, KIR_PRIM_DIV, tct[j], w, &tct[j]);
  }
  if (!st) st = ktf_transpose_linear(op, T, L, lin, tx, tct, NULL, tout, NULL);
  for (int i = 0; !st && i < n; i++) {
    if (!lin[i]) continue;
    if (tout[i] == KIR_NO_VAR) {
      kir_aval a = *kir_var_aval(L, L->invars[i]);
      a.weak = false;
      st = kir_emit_zeros(T, &a, &tout[i]);
    }
    int64_t ways = st ? 1 : unmentioned(&sp.in[i], &sp.m, names, sizeof names);
    if (ways > 1) {
      kir_params pr;
      memset(&pr, 0, sizeof pr);
      pr.collective = (kir_p_collective){names, ways};
      st = kir_emit(T, KIR_PRIM_PSUM, &pr, 1, &tout[i], &tout[i]);
    }
    tout[nl] = tout[i];
    specs[m + nl++] = &sp.in[i];
  }
  if (!st) st = kir_set_outputs(T, nl, tout);
  int idx;
  if (!st) st = emit_smap(op, p, e, &sp.m, T, m, specs, nl, specs + m, ops, &idx);
  for (int i = 0, k = 0; !st && i < n; i++) ct_x[i] = lin[i] ? p->eqns[idx].out[k++] : KIR_NO_VAR;
  free(sp.in);
  free(specs);
  free(v);
  return st;
}

/* ---- batching ---- */

kiln_status ktf_batch_shard_map(kir_program *p, const kir_program *src, const kir_eqn *e,
                                int64_t size, const kir_vid *x, const int *bd, kir_vid *y,
                                int *ybd) {
  (void)src;
  static const char op[] = "vmap of shard_map";
  int n = e->n_in, no = e->n_out;
  smap_specs sp = {0};
  kir_vid *xs = malloc((size_t)(n + 1) * sizeof *xs);
  int *bd0 = malloc((size_t)(n + 1) * sizeof *bd0);
  const kir_spec **specs = malloc((size_t)(n + no + 1) * sizeof *specs);
  kir_spec *grown = malloc((size_t)(n + no + 1) * sizeof *grown);
  kiln_status st = xs && bd0 && specs && grown ? specs_get(op, e, &sp) : KTF_OOM(op);
  if (!st) st = ktf_batch_operands_front(p, n, x, bd, xs, bd0);
  kir_program *body = NULL;
  if (!st) st = ktf_batch_sub(op, p, e->params.shard_map.jaxpr, size, bd0, NULL, &body);
  /* mapped operands and every result get a leading None entry */
  for (int i = 0; !st && i < n + no; i++) {
    const kir_spec *s = i < n ? &sp.in[i] : &sp.out[i - n];
    bool mapped = i >= n || bd0[i] == 0;
    if (mapped && s->rank == KIR_MAX_RANK)
      st = kcore_fail(KILN_ERR_SHAPE, "%s: a batched spec would exceed rank %d", op, KIR_MAX_RANK);
    grown[i] = *s;
    if (!st && mapped) {
      memset(&grown[i], 0, sizeof grown[i]);
      grown[i].rank = s->rank + 1;
      for (int d = 0; d < s->rank; d++) {
        grown[i].n_axes[d + 1] = s->n_axes[d];
        memcpy(grown[i].axes[d + 1], s->axes[d], sizeof s->axes[d]);
      }
    }
    specs[i] = &grown[i];
  }
  int idx;
  if (!st) st = emit_smap(op, p, e, &sp.m, body, n, specs, no, specs + n, xs, &idx);
  for (int j = 0; !st && j < no; j++) {
    y[j] = p->eqns[idx].out[j];
    ybd[j] = 0;
  }
  free(sp.in);
  free(xs);
  free(bd0);
  free(specs);
  free(grown);
  return st;
}
