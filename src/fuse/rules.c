/* What may share a kernel: the classes of equations, the index maps between
 * a work item and the elements it reads, and the rules that admit a set of
 * equations as one LOOP, REDUCE or ROW group (see fuse.h for the contract
 * these rules enforce). */
#include <string.h>

#include "fuse/fuse.h"

/* ---- classes ---- */

kfuse_class kfuse_prim_class(kir_prim prim) {
  const kir_prim_info *info = kir_prim_get(prim);
  if (!info || (info->flags & KIR_PRIM_EFFECT) || info->n_out != 1) return KFUSE_CLASS_OPAQUE;
  switch (info->family) {
    case KIR_FAMILY_ELEMENTWISE:
      /* erf_inv stays on the reference evaluator, the one implementation of
       * XLA's exact f32 algorithm (jax.random.normal relies on its bits). */
      return prim == KIR_PRIM_ERF_INV ? KFUSE_CLASS_OPAQUE : KFUSE_CLASS_ELEM;
    case KIR_FAMILY_SHAPE:
      if (kir_prim_is_index_map(prim)) return KFUSE_CLASS_INDEX;
      if (prim == KIR_PRIM_IOTA) return KFUSE_CLASS_IOTA;
      return KFUSE_CLASS_OPAQUE; /* dynamic slices, pad, concatenate, gather, scatter */
    case KIR_FAMILY_REDUCE:
      switch (prim) {
        case KIR_PRIM_REDUCE_SUM:
        case KIR_PRIM_REDUCE_MAX:
        case KIR_PRIM_REDUCE_MIN:
        case KIR_PRIM_REDUCE_PROD:
        case KIR_PRIM_REDUCE_AND:
        case KIR_PRIM_REDUCE_OR: return KFUSE_CLASS_REDUCE;
        default: return KFUSE_CLASS_OPAQUE; /* argmax/argmin, cumulative ops, sort */
      }
    case KIR_FAMILY_DOT: return KFUSE_CLASS_DOT;
    default: return KFUSE_CLASS_OPAQUE;
  }
}

kfuse_class kfuse_classify(const kir_program *p, const kir_eqn *e) {
  if (!kir_prim_get(e->prim) || kir_eqn_has_effect(e) || e->n_out != 1) return KFUSE_CLASS_OPAQUE;
  /* A bitcast between widths adds or drops a dimension: not per element. */
  if (e->prim == KIR_PRIM_BITCAST_CONVERT_TYPE &&
      !kir_aval_same_shape(kir_var_aval(p, e->in[0]), kir_var_aval(p, e->out[0])))
    return KFUSE_CLASS_OPAQUE;
  return kfuse_prim_class(e->prim);
}

/* ---- index maps ---- */

static bool kfuse_dims_increasing(const kir_dims *d) {
  for (int i = 1; i < d->n; i++)
    if (d->v[i] <= d->v[i - 1]) return false;
  return true;
}

static bool kfuse_slice_full(const kir_p_slice *s, const kir_aval *in) {
  for (int d = 0; d < in->rank; d++) {
    if (s->start_indices.v[d] != 0 || s->limit_indices.v[d] != in->shape[d]) return false;
    if (s->strides.v[d] != 1 && in->shape[d] > 1) return false;
  }
  return true;
}

bool kfuse_edge_identity(const kir_program *p, const kir_eqn *e, int i) {
  const kir_aval *in = kir_var_aval(p, e->in[i]), *out = kir_var_aval(p, e->out[0]);
  switch (e->prim) {
    case KIR_PRIM_RESHAPE:
    case KIR_PRIM_SQUEEZE:
    case KIR_PRIM_EXPAND_DIMS: return true;
    case KIR_PRIM_BROADCAST_IN_DIM:
      return kir_aval_size(in) == kir_aval_size(out) &&
             kfuse_dims_increasing(&e->params.broadcast.broadcast_dimensions);
    case KIR_PRIM_TRANSPOSE: {
      const kir_dims *perm = &e->params.transpose.permutation;
      for (int d = 0; d < perm->n; d++)
        if (perm->v[d] != d) return false;
      return true;
    }
    case KIR_PRIM_REV: {
      const kir_dims *dims = &e->params.dims.dimensions;
      for (int d = 0; d < dims->n; d++)
        if (in->shape[dims->v[d]] > 1) return false;
      return true;
    }
    case KIR_PRIM_SLICE: return kfuse_slice_full(&e->params.slice, in);
    default: /* elementwise: the same shape, or lax's implicit broadcasting */
      return kir_aval_same_shape(in, out);
  }
}

static uint64_t kfuse_hash_shape(uint64_t h, const kir_aval *a) {
  h = kcore_hash_u64(h, (uint64_t)a->rank);
  return kcore_hash_bytes(h, a->shape, (size_t)a->rank * sizeof a->shape[0]);
}

/* A key for the map of a non-identity edge: elementwise implicit broadcasts
 * depend only on the shapes, index equations on their params too. */
static uint64_t kfuse_edge_key(const kir_program *p, const kir_eqn *e, int i) {
  const kir_aval *in = kir_var_aval(p, e->in[i]), *out = kir_var_aval(p, e->out[0]);
  uint64_t h = KCORE_HASH_SEED;
  if (kir_prim_get(e->prim)->family == KIR_FAMILY_SHAPE) {
    h = kcore_hash_u64(h, (uint64_t)e->prim + 1);
    h = kir_params_hash(kir_prim_get(e->prim)->params, &e->params, h);
  }
  return kfuse_hash_shape(kfuse_hash_shape(h, in), out);
}

/* A broadcast (explicit or implicit) reads each element for several items. */
static bool kfuse_edge_injective(const kir_program *p, const kir_eqn *e, int i) {
  return kir_aval_size(kir_var_aval(p, e->in[i])) >= kir_aval_size(kir_var_aval(p, e->out[0]));
}

/* ---- the trial set ---- */

enum { KFUSE_DOM_LOOP = 1, KFUSE_DOM_IN, KFUSE_DOM_OUT, KFUSE_DOM_ROW, KFUSE_DOM_RED };

/* Where a value of a ROW trial is evaluated. */
typedef enum kfuse_space {
  KFUSE_SPACE_FREE, /* independent of the reductions: wherever it is read */
  KFUSE_SPACE_ROW,  /* per element of a row */
  KFUSE_SPACE_RED   /* once per row */
} kfuse_space;

static bool kfuse_refuse(kfuse_verdict *v, const char *why) {
  v->why = why;
  return false;
}

static bool kfuse_in_trial(const kfuse_graph *g, int eqn) {
  return eqn >= 0 && g->eqn_mark[eqn] == g->eqn_gen;
}

/* The trial position of the equation defining v, or -1 if v comes from outside. */
static int kfuse_local_of(const kfuse_graph *g, kir_vid v) {
  const kir_var *var = &g->p->vars[v];
  if (var->kind != KIR_VAR_EQN || !kfuse_in_trial(g, var->eqn)) return -1;
  return g->eqn_local[var->eqn];
}

static const kir_eqn *kfuse_eqn(const kfuse_graph *g, const int *eqns, int i) {
  return &g->p->eqns[eqns[i]];
}

static bool kfuse_external(const kfuse_graph *g, kir_vid v) {
  if (g->outvar[v] || g->use_start[v] == g->use_start[v + 1]) return true;
  for (int u = g->use_start[v]; u < g->use_start[v + 1]; u++)
    if (!kfuse_in_trial(g, g->uses[u])) return true;
  return false;
}

/* Kernel arguments: distinct inputs (literals too: they keep their
 * position in the argument list) plus outputs. */
static int kfuse_count_args(kfuse_graph *g, const int *eqns, int n) {
  int count = 0;
  g->var_gen++;
  for (int i = 0; i < n; i++) {
    const kir_eqn *e = kfuse_eqn(g, eqns, i);
    if (g->loc[i].external) count++;
    for (int k = 0; k < e->n_in; k++) {
      kir_vid v = e->in[k];
      if (kfuse_local_of(g, v) >= 0) continue;
      if (g->var_mark[v] == g->var_gen) continue;
      g->var_mark[v] = g->var_gen;
      count++;
    }
  }
  return count;
}

/* ---- index-map signatures and the cost rule ---- */

static kfuse_sig kfuse_seed(int domain) {
  kfuse_sig s = {(uint64_t)domain, true};
  return s;
}

static void kfuse_sig_add(kfuse_local *l, kfuse_sig s) {
  if (l->many) return;
  for (int k = 0; k < l->n_sigs; k++)
    if (l->sigs[k].key == s.key && l->sigs[k].injective == s.injective) return;
  if (l->n_sigs == KFUSE_MAX_SIGS) {
    l->many = true;
    return;
  }
  l->sigs[l->n_sigs++] = s;
}

/* Pushes the index maps of each value down to its operands, consumers
 * before producers. A reduction's operand is read once per element of its
 * own domain; in ROW mode a broadcast back from a RED value to row space
 * reads the per-row value, computed once. */
static void kfuse_propagate(kfuse_graph *g, const int *eqns, int n, bool row_mode) {
  for (int i = n - 1; i >= 0; i--) {
    const kir_eqn *e = kfuse_eqn(g, eqns, i);
    kfuse_local *l = &g->loc[i];
    if (g->cls[eqns[i]] == KFUSE_CLASS_REDUCE) {
      int u = kfuse_local_of(g, e->in[0]);
      if (u >= 0) kfuse_sig_add(&g->loc[u], kfuse_seed(row_mode ? KFUSE_DOM_ROW : KFUSE_DOM_IN));
      continue;
    }
    for (int k = 0; k < e->n_in; k++) {
      int u = kfuse_local_of(g, e->in[k]);
      if (u < 0) continue;
      kfuse_local *lu = &g->loc[u];
      if (row_mode && l->space == KFUSE_SPACE_ROW && lu->space == KFUSE_SPACE_RED) {
        kfuse_sig_add(lu, kfuse_seed(KFUSE_DOM_RED));
        continue;
      }
      if (l->many) lu->many = true;
      bool identity = kfuse_edge_identity(g->p, e, k);
      uint64_t key = identity ? 0 : kfuse_edge_key(g->p, e, k);
      bool injective = identity || kfuse_edge_injective(g->p, e, k);
      for (int s = 0; s < l->n_sigs; s++) {
        kfuse_sig t = l->sigs[s];
        if (!identity) t.key = kcore_hash_u64(t.key * 0x9e3779b97f4a7c15ull, key);
        t.injective = t.injective && injective;
        kfuse_sig_add(lu, t);
      }
    }
  }
}

/* An expensive value must be read through one injective map. */
static bool kfuse_cost_ok(const kfuse_graph *g, const int *eqns, int n, kfuse_verdict *v) {
  for (int i = 0; i < n; i++) {
    if (kir_prim_cost(kfuse_eqn(g, eqns, i)->prim) != KIR_COST_TRANSCENDENTAL) continue;
    const kfuse_local *l = &g->loc[i];
    if (l->many || l->n_sigs > 1)
      return kfuse_refuse(v, "cost: expensive value read through several index maps");
    if (l->n_sigs == 1 && !l->sigs[0].injective)
      return kfuse_refuse(v, "cost: expensive value broadcast");
  }
  return true;
}

static void kfuse_reset_sigs(kfuse_graph *g, int n) {
  for (int i = 0; i < n; i++) {
    g->loc[i].n_sigs = 0;
    g->loc[i].many = false;
  }
}

/* ---- LOOP ---- */

static bool kfuse_check_loop(kfuse_graph *g, const int *eqns, int n, kfuse_verdict *v) {
  const kir_aval *shape = NULL;
  kfuse_reset_sigs(g, n);
  for (int i = 0; i < n; i++) {
    if (!g->loc[i].external) continue;
    const kir_aval *a = kir_var_aval(g->p, kfuse_eqn(g, eqns, i)->out[0]);
    if (shape && !kir_aval_same_shape(shape, a))
      return kfuse_refuse(v, "loop: outputs differ in shape");
    shape = a;
    kfuse_sig_add(&g->loc[i], kfuse_seed(KFUSE_DOM_LOOP));
  }
  KCORE_ASSERT(shape != NULL); /* the last equation's value is always external */
  kfuse_propagate(g, eqns, n, false);
  if (!kfuse_cost_ok(g, eqns, n, v)) return false;
  v->kind = KFUSE_LOOP;
  v->n_items = kir_aval_size(shape);
  v->row_length = 0;
  return true;
}

/* ---- REDUCE ---- */

static bool kfuse_dims_equal(const kir_dims *a, const kir_dims *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n) == 0;
}

/* Every reduction has reductions[0]'s operand shape and axes. */
static bool kfuse_same_reductions(const kfuse_graph *g, const int *eqns, int n, const kir_eqn *r0) {
  for (int i = 0; i < n; i++) {
    const kir_eqn *e = kfuse_eqn(g, eqns, i);
    if (g->cls[eqns[i]] != KFUSE_CLASS_REDUCE) continue;
    if (!kir_aval_same_shape(kir_var_aval(g->p, e->in[0]), kir_var_aval(g->p, r0->in[0])) ||
        !kfuse_dims_equal(&e->params.axes.axes, &r0->params.axes.axes))
      return false;
  }
  return true;
}

/* down: depends on a reduction; up: feeds one (through in-trial consumers). */
static bool kfuse_mark_up_down(kfuse_graph *g, const int *eqns, int n, kfuse_verdict *v) {
  for (int i = 0; i < n; i++) {
    const kir_eqn *e = kfuse_eqn(g, eqns, i);
    bool dep = false;
    for (int k = 0; k < e->n_in; k++) {
      int u = kfuse_local_of(g, e->in[k]);
      dep = dep || (u >= 0 && g->loc[u].down);
    }
    bool red = g->cls[eqns[i]] == KFUSE_CLASS_REDUCE;
    if (red && dep) return kfuse_refuse(v, "reduce: a reduction depends on another");
    g->loc[i].down = red || dep;
  }
  for (int i = n - 1; i >= 0; i--) {
    kir_vid x = kfuse_eqn(g, eqns, i)->out[0];
    bool up = false;
    if (g->cls[eqns[i]] != KFUSE_CLASS_REDUCE)
      for (int u = g->use_start[x]; u < g->use_start[x + 1]; u++) {
        int c = g->uses[u];
        if (kfuse_in_trial(g, c))
          up = up || g->cls[c] == KFUSE_CLASS_REDUCE || g->loc[g->eqn_local[c]].up;
      }
    g->loc[i].up = up;
  }
  return true;
}

/* Producers feed only producers and reductions and stay internal. */
static bool kfuse_producer_ok(const kfuse_graph *g, const int *eqns, int i) {
  kir_vid x = kfuse_eqn(g, eqns, i)->out[0];
  if (g->loc[i].external || g->loc[i].down) return false;
  for (int u = g->use_start[x]; u < g->use_start[x + 1]; u++) {
    int c = g->uses[u];
    if (g->cls[c] != KFUSE_CLASS_REDUCE && !g->loc[g->eqn_local[c]].up) return false;
  }
  return true;
}

/* An epilogue equation that depends on a reduction stays in result space. */
static bool kfuse_epilogue_ok(const kfuse_graph *g, const int *eqns, int i, int64_t n_result) {
  const kir_eqn *e = kfuse_eqn(g, eqns, i);
  if (kir_aval_size(kir_var_aval(g->p, e->out[0])) != n_result) return false;
  for (int k = 0; k < e->n_in; k++) {
    int u = kfuse_local_of(g, e->in[k]);
    if (u >= 0 && g->loc[u].down && !kfuse_edge_identity(g->p, e, k)) return false;
  }
  return true;
}

static bool kfuse_check_reduce(kfuse_graph *g, const int *eqns, int n, const kir_eqn *r0,
                               kfuse_verdict *v) {
  if (!kfuse_same_reductions(g, eqns, n, r0))
    return kfuse_refuse(v, "reduce: reductions differ in operand shape or axes");
  if (!kfuse_mark_up_down(g, eqns, n, v)) return false;
  const kir_aval *in = kir_var_aval(g->p, r0->in[0]);
  int64_t n_result = kir_aval_size(kir_var_aval(g->p, r0->out[0]));
  kfuse_reset_sigs(g, n);
  for (int i = 0; i < n; i++) {
    kfuse_local *l = &g->loc[i];
    if (g->cls[eqns[i]] == KFUSE_CLASS_REDUCE) {
      /* results are in result space by construction */
    } else if (l->up) {
      if (!kfuse_producer_ok(g, eqns, i))
        return kfuse_refuse(v, "reduce: producer value used outside the reduction");
    } else if (l->down && !kfuse_epilogue_ok(g, eqns, i, n_result)) {
      return kfuse_refuse(v, "reduce: epilogue leaves the result space");
    }
    if (!l->external) continue;
    if (kir_aval_size(kir_var_aval(g->p, kfuse_eqn(g, eqns, i)->out[0])) != n_result)
      return kfuse_refuse(v, "reduce: output outside the result space");
    kfuse_sig_add(l, kfuse_seed(KFUSE_DOM_OUT));
  }
  kfuse_propagate(g, eqns, n, false);
  if (!kfuse_cost_ok(g, eqns, n, v)) return false;
  int64_t row = 1;
  for (int k = 0; k < r0->params.axes.axes.n; k++) row *= in->shape[r0->params.axes.axes.v[k]];
  v->kind = KFUSE_REDUCE;
  v->n_items = n_result;
  v->row_length = row;
  return true;
}

/* ---- ROW ---- */

typedef struct kfuse_rows {
  const kir_aval *t;      /* the reductions' operand shape T = [..., L] */
  int64_t n_rows, length; /* rows of T and its last dimension L */
} kfuse_rows;

static bool kfuse_row_shape(const kfuse_rows *r, const kir_aval *a) {
  return kir_aval_same_shape(a, r->t);
}

static bool kfuse_red_shape(const kfuse_rows *r, const kir_aval *a) {
  return kir_aval_size(a) == r->n_rows;
}

/* lax's implicit broadcasting of a [..., 1] (or, for one row, a rank-0)
 * operand along the last axis of a row-space result. */
static bool kfuse_implicit_row_broadcast(const kfuse_rows *r, const kir_aval *in,
                                         const kir_aval *out) {
  if (in->rank == 0) return r->n_rows == 1;
  if (in->rank != out->rank || in->shape[in->rank - 1] != 1) return false;
  for (int d = 0; d + 1 < in->rank; d++)
    if (in->shape[d] != out->shape[d]) return false;
  return true;
}

/* broadcast_in_dim from a per-row value to row space: each row's value
 * fills that row (leading dimensions kept in order, the last one new). */
static bool kfuse_explicit_row_broadcast(const kfuse_rows *r, const kir_program *p,
                                         const kir_eqn *e) {
  const kir_aval *in = kir_var_aval(p, e->in[0]), *out = kir_var_aval(p, e->out[0]);
  const kir_dims *dims = &e->params.broadcast.broadcast_dimensions;
  if (!kfuse_red_shape(r, in) || !kfuse_row_shape(r, out) || !kfuse_dims_increasing(dims))
    return false;
  for (int d = 0; d < dims->n; d++)
    if (dims->v[d] == out->rank - 1 && in->shape[d] != 1) return false;
  return true;
}

/* The space of an elementwise equation's result from its operands'. */
static bool kfuse_row_elementwise(const kfuse_graph *g, const kfuse_rows *r, const kir_eqn *e,
                                  uint8_t *space) {
  const kir_aval *out = kir_var_aval(g->p, e->out[0]);
  bool row = kfuse_row_shape(r, out);
  if (!row && !kfuse_red_shape(r, out)) return false;
  for (int k = 0; k < e->n_in; k++) {
    int u = kfuse_local_of(g, e->in[k]);
    if (u < 0 || g->loc[u].space == KFUSE_SPACE_FREE) continue;
    const kir_aval *in = kir_var_aval(g->p, e->in[k]);
    bool same = kir_aval_same_shape(in, out);
    if (g->loc[u].space == KFUSE_SPACE_ROW
            ? !(row && same)
            : !(row ? kfuse_implicit_row_broadcast(r, in, out) : same))
      return false;
  }
  *space = row ? KFUSE_SPACE_ROW : KFUSE_SPACE_RED;
  return true;
}

/* The space of an index equation's result from its (dependent) operand's. */
static bool kfuse_row_index(const kfuse_graph *g, const kfuse_rows *r, const kir_eqn *e,
                            uint8_t operand, uint8_t *space) {
  const kir_aval *out = kir_var_aval(g->p, e->out[0]);
  if (kfuse_edge_identity(g->p, e, 0)) {
    if (operand == KFUSE_SPACE_ROW && kfuse_row_shape(r, out))
      *space = KFUSE_SPACE_ROW;
    else if (operand == KFUSE_SPACE_RED && kfuse_red_shape(r, out))
      *space = KFUSE_SPACE_RED;
    else
      return false;
    return true;
  }
  if (e->prim != KIR_PRIM_BROADCAST_IN_DIM || operand != KFUSE_SPACE_RED ||
      !kfuse_explicit_row_broadcast(r, g->p, e))
    return false;
  *space = KFUSE_SPACE_ROW;
  return true;
}

/* Assigns every value its space, in program order. */
static bool kfuse_row_spaces(kfuse_graph *g, const int *eqns, int n, const kfuse_rows *r,
                             kfuse_verdict *v) {
  for (int i = 0; i < n; i++) {
    const kir_eqn *e = kfuse_eqn(g, eqns, i);
    kfuse_local *l = &g->loc[i];
    uint8_t dep = KFUSE_SPACE_FREE;
    for (int k = 0; k < e->n_in; k++) {
      int u = kfuse_local_of(g, e->in[k]);
      if (u >= 0 && g->loc[u].space != KFUSE_SPACE_FREE) dep = g->loc[u].space;
    }
    if (g->cls[eqns[i]] == KFUSE_CLASS_REDUCE) {
      if (dep == KFUSE_SPACE_RED) return kfuse_refuse(v, "row: reduction of a per-row value");
      l->space = KFUSE_SPACE_RED;
    } else if (dep == KFUSE_SPACE_FREE) {
      l->space = KFUSE_SPACE_FREE;
    } else if (g->cls[eqns[i]] == KFUSE_CLASS_ELEM) {
      if (!kfuse_row_elementwise(g, r, e, &l->space))
        return kfuse_refuse(v, "row: elementwise step leaves the rows");
    } else if (!kfuse_row_index(g, r, e, dep, &l->space)) {
      return kfuse_refuse(v, "row: index map across rows");
    }
  }
  return true;
}

static bool kfuse_check_row(kfuse_graph *g, const int *eqns, int n, const kir_eqn *r0,
                            kfuse_verdict *v) {
  const kir_aval *t = kir_var_aval(g->p, r0->in[0]);
  const kir_dims *axes = &r0->params.axes.axes;
  if (t->rank < 1 || axes->n != 1 || axes->v[0] != t->rank - 1)
    return kfuse_refuse(v, "row: not a last-axis reduction");
  kfuse_rows r = {t, 0, t->shape[t->rank - 1]};
  if (r.length < 2 || r.length > g->opt.row_max_elements)
    return kfuse_refuse(v, "row: row length out of range");
  r.n_rows = kir_aval_size(t) / r.length;
  if (r.n_rows < 1) return kfuse_refuse(v, "row: no rows");
  if (!kfuse_same_reductions(g, eqns, n, r0))
    return kfuse_refuse(v, "row: reductions differ in shape");
  if (!kfuse_row_spaces(g, eqns, n, &r, v)) return false;
  kfuse_reset_sigs(g, n);
  for (int i = 0; i < n; i++) {
    kfuse_local *l = &g->loc[i];
    if (!l->external) continue;
    const kir_aval *a = kir_var_aval(g->p, kfuse_eqn(g, eqns, i)->out[0]);
    if (l->space == KFUSE_SPACE_FREE)
      l->space = kfuse_row_shape(&r, a)   ? KFUSE_SPACE_ROW
                 : kfuse_red_shape(&r, a) ? KFUSE_SPACE_RED
                                          : KFUSE_SPACE_FREE;
    if (l->space == KFUSE_SPACE_FREE)
      return kfuse_refuse(v, "row: output neither per row nor per element");
    kfuse_sig_add(l, kfuse_seed(l->space == KFUSE_SPACE_ROW ? KFUSE_DOM_ROW : KFUSE_DOM_RED));
  }
  kfuse_propagate(g, eqns, n, true);
  if (!kfuse_cost_ok(g, eqns, n, v)) return false;
  v->kind = KFUSE_ROW;
  v->n_items = r.n_rows;
  v->row_length = r.length;
  return true;
}

/* ---- the verdict ---- */

bool kfuse_rules_check(kfuse_graph *g, const int *eqns, int n, kfuse_verdict *v) {
  memset(v, 0, sizeof *v);
  v->kind = KFUSE_OPAQUE;
  if (n < 1 || n > g->opt.max_group_eqns) return kfuse_refuse(v, "size: too many equations");
  g->eqn_gen++;
  const kir_eqn *r0 = NULL;
  for (int i = 0; i < n; i++) {
    if (!kfuse_class_fusible((kfuse_class)g->cls[eqns[i]]))
      return kfuse_refuse(v, "class: not fusible");
    KCORE_ASSERT(i == 0 || eqns[i] > eqns[i - 1]);
    g->eqn_mark[eqns[i]] = g->eqn_gen;
    g->eqn_local[eqns[i]] = i;
    if (!r0 && g->cls[eqns[i]] == KFUSE_CLASS_REDUCE) r0 = kfuse_eqn(g, eqns, i);
  }
  for (int i = 0; i < n; i++) {
    memset(&g->loc[i], 0, sizeof g->loc[i]);
    g->loc[i].external = kfuse_external(g, kfuse_eqn(g, eqns, i)->out[0]);
  }
  if (kfuse_count_args(g, eqns, n) > g->opt.max_group_args)
    return kfuse_refuse(v, "size: too many kernel arguments");
  if (!r0) return kfuse_check_loop(g, eqns, n, v);
  if (kfuse_check_reduce(g, eqns, n, r0, v)) return true;
  if (!g->opt.allow_row) return false;
  return kfuse_check_row(g, eqns, n, r0, v);
}
