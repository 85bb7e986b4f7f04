/* Autodiff and batching of shard_map (JAX's, jax/_src/shard_map.py).
 *
 * jvp: the primal shard_map plus a tangent shard_map whose body is the
 * body's jvp (operands and their non-zero tangents in, the non-zero output
 * tangents out), tangents split as their primals. The tangent shard_map is
 * linear in the tangents and recomputes the primal part it needs (as
 * cond's, control_ad.c), so partial evaluation needs no residuals laid out
 * over the mesh.
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

kiln_status ktf_jvp_shard_map(const char *op, kir_program *dst, const kir_eqn *e,
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
