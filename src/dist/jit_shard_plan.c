/* Whether a jitted program over sharded arguments runs shard by shard, and
 * the program each device then runs. Every var gets a split: which mesh
 * axes divide each of its dimensions. Elementwise equations keep their
 * operands' split; broadcast_in_dim, transpose and reductions over
 * dimensions that are not split carry it to their result's dimensions; an
 * equation none of whose operands is split runs whole on every device
 * (replicated). Anything else over a split operand would need automatic
 * partitioning, which kiln leaves to shard_map: the error says so, naming
 * the equation, the operand, the dimension and the mesh axis. The
 * dimensions a broadcast_in_dim creates hold the same data at every index
 * (flexible): they take the split their consumers need, so `x + b[None]`
 * splits b's broadcast along x's split rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "ir/ir.h"

typedef struct planner {
  const char *fname;
  const kiln_mesh *mesh;
  const kir_program *prog;
  unsigned *flex;  /* per var: its flexible dimensions (bit d); 0: its split is set */
  kdist_split *s;  /* per var: its split (set, or resolved for a flexible var) */
  bool *need;      /* per flexible var: a consumer fixed its split */
} planner;

static unsigned split_dims(const kdist_split *s, int rank) {
  unsigned m = 0;
  for (int d = 0; d < rank; d++)
    if (s->na[d]) m |= 1u << d;
  return m;
}

static bool split_any(const kdist_split *s, int rank) {
  for (int d = 0; d < rank; d++)
    if (s->na[d]) return true;
  return false;
}

static bool split_equal(const kdist_split *a, const kdist_split *b, int rank) {
  for (int d = 0; d < rank; d++)
    if (a->na[d] != b->na[d] || memcmp(a->ax[d], b->ax[d], (size_t)a->na[d])) return false;
  return true;
}

static void split_copy_dim(kdist_split *dst, int dd, const kdist_split *src, int sd) {
  dst->na[dd] = src->na[sd];
  memcpy(dst->ax[dd], src->ax[sd], sizeof dst->ax[dd]);
}

/* "PartitionSpec('data', None)" for a split of `rank` dimensions. */
static const char *split_str(const kiln_mesh *m, const kdist_split *s, int rank, char *buf,
                             size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "PartitionSpec(");
  for (int d = 0; d < rank && n < cap; d++) {
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", d ? ", " : "", s->na[d] > 1 ? "(" : "");
    for (int k = 0; k < s->na[d] && n < cap; k++)
      n += (size_t)snprintf(buf + n, cap - n, "%s'%s'", k ? ", " : "", m->names[s->ax[d][k]]);
    if (n < cap)
      n += (size_t)snprintf(buf + n, cap - n, "%s", !s->na[d] ? "None" : s->na[d] > 1 ? ")" : "");
  }
  if (n < cap) snprintf(buf + n, cap - n, ")");
  return buf;
}

/* The number of blocks dimension d is split into. */
static int64_t split_ways(const kiln_mesh *mesh, const kdist_split *s, int d) {
  int64_t w = 1;
  for (int k = 0; k < s->na[d]; k++) w *= mesh->shape[s->ax[d][k]];
  return w;
}

static kiln_status refuse(const planner *p, int i, int k, int d, const char *what) {
  const kir_eqn *e = &p->prog->eqns[i];
  const kdist_split *s = &p->s[e->in[k]];
  char t[KIR_AVAL_STR_CAP];
  return kcore_fail(KILN_ERR_UNIMPLEMENTED, "jit(%s): equation %d (%s) %s dimension %d of operand "
                    "%d (%s), which the shardings split over mesh axis '%s'; kiln runs a jitted "
                    "function over sharded arguments only where every equation is elementwise or "
                    "keeps the sharded dimensions (automatic partitioning is not implemented): "
                    "use kiln_shard_map", p->fname, i, kir_prim_name(e->prim), what, d, k,
                    kir_aval_str(kir_var_aval(p->prog, e->in[k]), t, sizeof t),
                    p->mesh->names[s->ax[d][0]]);
}

static void count_program(kir_program *sub, void *user) {
  (void)sub;
  (*(int *)user)++;
}

static bool has_program(const kir_eqn *e) {
  int n = 0;
  kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, count_program, &n);
  return n > 0;
}

static bool reduces(const kir_eqn *e) {
  const kir_prim_info *info = kir_prim_get(e->prim);
  return info->family == KIR_FAMILY_REDUCE && info->params == KIR_PARAMS_AXES;
}

static bool is_reduced(const kir_eqn *e, int d) {
  for (int k = 0; k < e->params.axes.axes.n; k++)
    if (e->params.axes.axes.v[k] == d) return true;
  return false;
}

/* An elementwise equation's operands must be split alike (a flexible one
 * may take the split). */
static kiln_status elementwise_split(const planner *p, int i, int ks, kdist_split *out) {
  const kir_eqn *e = &p->prog->eqns[i];
  const kdist_split *want = &p->s[e->in[ks]];
  for (int k = 0; k < e->n_in; k++) {
    const kir_aval *a = kir_var_aval(p->prog, e->in[k]);
    unsigned flex = p->flex[e->in[k]];
    if (a->rank == 0 || (flex && !(split_dims(want, a->rank) & ~flex)) ||
        (!flex && split_equal(&p->s[e->in[k]], want, a->rank)))
      continue;
    char t1[KIR_AVAL_STR_CAP], t2[KIR_AVAL_STR_CAP], s1[512], s2[512];
    const kir_aval *wa = kir_var_aval(p->prog, e->in[ks]);
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "jit(%s): equation %d (%s) combines operand %d (%s "
                      "split as %s) with operand %d (%s split as %s); per-shard execution needs "
                      "them split alike (automatic partitioning is not implemented): reshard the "
                      "arguments alike or use kiln_shard_map", p->fname, i, kir_prim_name(e->prim),
                      ks, kir_aval_str(wa, t1, sizeof t1), split_str(p->mesh, want, wa->rank, s1, sizeof s1),
                      k, kir_aval_str(a, t2, sizeof t2),
                      split_str(p->mesh, &p->s[e->in[k]], a->rank, s2, sizeof s2));
  }
  *out = *want;
  return KILN_OK;
}

/* The split of equation i's results from its operands'. */
static kiln_status forward(planner *p, int i) {
  const kir_eqn *e = &p->prog->eqns[i];
  const kir_prim_info *info = kir_prim_get(e->prim);
  int ks = -1;
  unsigned flex_all = ~0u; /* the dimensions flexible in every operand */
  for (int k = 0; k < e->n_in; k++) {
    const kir_aval *a = kir_var_aval(p->prog, e->in[k]);
    if (a->rank == 0) continue;
    flex_all &= p->flex[e->in[k]];
    if (ks < 0 && !p->flex[e->in[k]] && split_any(&p->s[e->in[k]], a->rank)) ks = k;
  }
  kdist_split out;
  memset(&out, 0, sizeof out);
  unsigned flex = 0;
  const kdist_split *in = ks >= 0 ? &p->s[e->in[ks]] : NULL;
  const kir_aval *ia = ks >= 0 ? kir_var_aval(p->prog, e->in[ks]) : NULL;
  const kir_aval *oa = e->n_out ? kir_var_aval(p->prog, e->out[0]) : NULL;
  kiln_status st = KILN_OK;
  if (has_program(e)) {
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "jit(%s): equation %d (%s) holds a sub-program, "
                      "which kiln does not run shard by shard over sharded arguments: use "
                      "kiln_shard_map", p->fname, i, kir_prim_name(e->prim));
  } else if (ks < 0 && e->prim == KIR_PRIM_BROADCAST_IN_DIM) { /* new dimensions are flexible */
    const kir_aval *xa = kir_var_aval(p->prog, e->in[0]);
    unsigned xf = xa->rank ? p->flex[e->in[0]] : 0, mapped = 0;
    const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
    for (int d = 0; d < xa->rank; d++)
      if (xa->shape[d] == oa->shape[bd->v[d]] && !(xf & (1u << d))) mapped |= 1u << bd->v[d];
    flex = ((1u << oa->rank) - 1) & ~mapped;
  } else if (ks < 0) { /* nothing split: whole on every device */
    if (info->family == KIR_FAMILY_ELEMENTWISE && oa && oa->rank) flex = flex_all & ((1u << oa->rank) - 1);
  } else if (info->family == KIR_FAMILY_ELEMENTWISE) {
    st = elementwise_split(p, i, ks, &out);
  } else if (e->prim == KIR_PRIM_BROADCAST_IN_DIM) {
    const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
    for (int d = 0; !st && d < ia->rank; d++) {
      if (!in->na[d]) continue;
      if (ia->shape[d] != oa->shape[bd->v[d]]) st = refuse(p, i, ks, d, "broadcasts");
      else split_copy_dim(&out, bd->v[d], in, d);
    }
  } else if (e->prim == KIR_PRIM_TRANSPOSE) {
    for (int d = 0; d < oa->rank; d++) split_copy_dim(&out, d, in, e->params.transpose.permutation.v[d]);
  } else if (reduces(e)) {
    for (int d = 0, od = 0; !st && d < ia->rank; d++) {
      if (!is_reduced(e, d)) split_copy_dim(&out, od++, in, d);
      else if (in->na[d]) st = refuse(p, i, ks, d, "reduces");
    }
  } else {
    int d = 0;
    while (!in->na[d]) d++;
    st = refuse(p, i, ks, d, "does not keep");
  }
  for (int k = 0; !st && k < e->n_out; k++) p->flex[e->out[k]] = flex, p->s[e->out[k]] = out;
  return st;
}

/* A consumer needs flexible var v split as s (checked against its
 * flexible dimensions by the consumer's forward rule). */
static kiln_status require(planner *p, kir_vid v, const kdist_split *s) {
  const kir_aval *a = kir_var_aval(p->prog, v);
  if (!p->flex[v] || a->rank == 0) return KILN_OK;
  if (!p->need[v]) {
    p->need[v] = true, p->s[v] = *s;
    return KILN_OK;
  }
  if (split_equal(&p->s[v], s, a->rank)) return KILN_OK;
  char t[KIR_AVAL_STR_CAP], s1[512], s2[512];
  return kcore_fail(KILN_ERR_UNIMPLEMENTED, "jit(%s): a broadcast value (%s) is used both split as "
                    "%s and as %s; per-shard execution gives a value one layout (broadcast it "
                    "once per use, or use kiln_shard_map)", p->fname, kir_aval_str(a, t, sizeof t),
                    split_str(p->mesh, &p->s[v], a->rank, s1, sizeof s1),
                    split_str(p->mesh, s, a->rank, s2, sizeof s2));
}

/* Passes equation i's result split back to its uniform operands. */
static kiln_status backward(planner *p, int i) {
  const kir_eqn *e = &p->prog->eqns[i];
  if (!e->n_out) return KILN_OK;
  const kdist_split *out = &p->s[e->out[0]];
  const kir_aval *oa = kir_var_aval(p->prog, e->out[0]);
  kiln_status st = KILN_OK;
  for (int k = 0; !st && k < e->n_in; k++) {
    const kir_aval *ia = kir_var_aval(p->prog, e->in[k]);
    kdist_split s;
    memset(&s, 0, sizeof s);
    if (kir_prim_get(e->prim)->family == KIR_FAMILY_ELEMENTWISE) {
      s = *out;
    } else if (e->prim == KIR_PRIM_BROADCAST_IN_DIM) {
      const kir_dims *bd = &e->params.broadcast.broadcast_dimensions;
      for (int d = 0; d < ia->rank; d++)
        if (ia->shape[d] == oa->shape[bd->v[d]]) split_copy_dim(&s, d, out, bd->v[d]);
    } else if (e->prim == KIR_PRIM_TRANSPOSE) {
      for (int d = 0; d < oa->rank; d++) split_copy_dim(&s, e->params.transpose.permutation.v[d], out, d);
    } else if (reduces(e)) {
      for (int d = 0, od = 0; d < ia->rank; d++)
        if (!is_reduced(e, d)) split_copy_dim(&s, d, out, od++);
    }
    st = require(p, e->in[k], &s);
  }
  return st;
}

static kiln_status shard_aval(const planner *p, kir_vid v, kir_aval *out) {
  *out = *kir_var_aval(p->prog, v);
  for (int d = 0; d < out->rank; d++) {
    int64_t w = split_ways(p->mesh, &p->s[v], d);
    if (out->shape[d] % w) {
      char t[KIR_AVAL_STR_CAP];
      return kcore_fail(KILN_ERR_SHAPE, "jit(%s): dimension %d of %s (size %lld) does not split "
                        "%lld ways", p->fname, d, kir_aval_str(out, t, sizeof t),
                        (long long)out->shape[d], (long long)w);
    }
    out->shape[d] /= w;
  }
  return KILN_OK;
}

/* The per-shard program: the same equations over per-shard types. */
static kiln_status rewrite(const planner *p, kir_program *q, kir_vid *map) {
  const kir_program *g = p->prog;
  kiln_status st = KILN_OK;
  kir_aval a;
  for (int i = 0; !st && i < g->n_invars; i++)
    if (!(st = shard_aval(p, g->invars[i], &a))) st = kir_add_invar(q, &a, &map[g->invars[i]]);
  for (int i = 0; !st && i < g->n_constvars; i++) {
    const kir_var *v = &g->vars[g->constvars[i]];
    kir_vid *m = &map[g->constvars[i]];
    st = kir_add_const(q, &v->aval, m);
    if (!st && v->u.constant.source == KIR_CONST_ARRAY) st = kir_const_bind_array(q, *m, v->u.constant.array);
    else if (!st) st = kir_const_bind_host(q, *m, v->u.constant.host, v->u.constant.nbytes);
  }
  for (kir_vid v = 0; !st && v < g->n_vars; v++)
    if (g->vars[v].kind == KIR_VAR_LITERAL)
      st = kir_add_literal(q, g->vars[v].aval.dtype, g->vars[v].aval.weak, g->vars[v].u.literal, &map[v]);
  kir_vid in[64];
  for (int i = 0; !st && i < g->n_eqns; i++) {
    const kir_eqn *e = &g->eqns[i];
    if (e->n_in > 64) return kcore_fail(KILN_ERR_UNIMPLEMENTED, "jit(%s): equation %d has %d operands", p->fname, i, e->n_in);
    for (int k = 0; k < e->n_in; k++) in[k] = map[e->in[k]];
    kir_params prm = e->params;
    if (e->prim == KIR_PRIM_BROADCAST_IN_DIM)
      for (int d = 0; d < prm.broadcast.shape.n; d++)
        prm.broadcast.shape.v[d] /= split_ways(p->mesh, &p->s[e->out[0]], d);
    int at;
    if ((st = kir_add_eqn(q, e->prim, &prm, e->n_in, in, &at))) break;
    for (int k = 0; !st && k < e->n_out; k++) {
      map[e->out[k]] = q->eqns[at].out[k];
      if (!(st = shard_aval(p, e->out[k], &a)) && !kir_aval_equal(&a, kir_var_aval(q, map[e->out[k]])))
        st = kcore_fail(KILN_ERR_INTERNAL, "jit(%s): equation %d (%s) gives another per-shard type "
                        "than planned", p->fname, i, kir_prim_name(e->prim));
    }
  }
  kir_vid *outs = st ? NULL : kir_alloc(q, (size_t)(g->n_outvars + 1) * sizeof *outs);
  if (!st && !outs) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit(%s): out of host memory", p->fname);
  for (int k = 0; !st && k < g->n_outvars; k++) outs[k] = map[g->outvars[k]];
  if (!st) st = kir_set_outputs(q, g->n_outvars, outs);
  return st;
}

kiln_status kdist_shard_program(const char *fname, const kiln_mesh *mesh, const kir_program *prog,
                                const kdist_split *in, kdist_split *out_splits, kir_program **out) {
  *out = NULL;
  size_t nv = (size_t)prog->n_vars + 1;
  planner p = {fname, mesh, prog, calloc(nv, sizeof(unsigned)), calloc(nv, sizeof(kdist_split)),
               calloc(nv, sizeof(bool))};
  kir_vid *map = calloc(nv, sizeof *map);
  kir_program *q = NULL;
  kiln_status st = p.flex && p.s && p.need && map
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "jit(%s): out of host memory", fname);
  for (int i = 0; !st && i < prog->n_invars; i++) p.s[prog->invars[i]] = in[i];
  for (int i = 0; !st && i < prog->n_eqns; i++) st = forward(&p, i);
  kdist_split none;
  memset(&none, 0, sizeof none);
  for (int k = 0; !st && k < prog->n_outvars; k++) /* a flexible result comes back replicated */
    if (!p.need[prog->outvars[k]]) st = require(&p, prog->outvars[k], &none);
  for (int i = prog->n_eqns - 1; !st && i >= 0; i--) st = backward(&p, i);
  if (!st) st = kir_program_new(&q);
  if (!st) st = rewrite(&p, q, map);
  if (!st) st = kir_verify(q);
  for (int k = 0; !st && k < prog->n_outvars; k++) out_splits[k] = p.s[prog->outvars[k]];
  if (st) kir_program_free(q);
  else *out = q;
  free(p.flex), free(p.s), free(p.need), free(map);
  return st;
}
