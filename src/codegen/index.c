/* Index maps: where an operand is read when a result is wanted at some
 * position. Positions are interned kcg_index objects holding a linear index,
 * coordinates, or both; the shape primitives map them without moving data,
 * and the missing half is derived (div/mod or multiply-add) only when a map
 * or a load needs it. */
#include <stdlib.h>
#include "codegen/codegen.h"

static const kcg_term kcg_zero = {"0", 0};

static bool kcg_term_eq(const kcg_term *a, const kcg_term *b) {
  return strcmp(a->expr, b->expr) == 0;
}

/* Dimensions of extent other than 1; with exactly one, coordinates and the
 * linear index coincide. */
static int kcg_nontrivial_dims(int rank, const int64_t *shape, int *only) {
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (shape[d] != 1) {
      n++;
      *only = d;
    }
  return n;
}

static bool kcg_index_same(const kcg_index *x, int rank, const int64_t *shape, const kcg_term *lin,
                           const kcg_term *coords) {
  if (x->rank != rank || (rank && memcmp(x->shape, shape, sizeof(int64_t) * (size_t)rank) != 0))
    return false;
  if (lin && x->lin.expr && kcg_term_eq(lin, &x->lin)) return true;
  if (!coords || !x->has_coords) return false;
  for (int d = 0; d < rank; d++)
    if (!kcg_term_eq(&coords[d], &x->coord[d])) return false;
  return true;
}

/* Every name the index uses is defined here: canonical coordinates can make
 * positions in two loops look alike while their linear indices name each
 * loop's own variable. */
static bool kcg_index_visible(const kcg_ctx *c, const kcg_index *x) {
  if (x->lin.expr && !kcg_scope_visible(c, x->lin.scope)) return false;
  if (x->has_coords)
    for (int d = 0; d < x->rank; d++)
      if (!kcg_scope_visible(c, x->coord[d].scope)) return false;
  return true;
}

int kcg_index_get(kcg_ctx *c, int rank, const int64_t *shape, const kcg_term *lin,
                  const kcg_term *coords) {
  KCORE_ASSERT(lin || coords || rank == 0);
  kcg_term cc[KIR_MAX_RANK], ll;
  int only = -1, nontrivial = kcg_nontrivial_dims(rank, shape, &only);
  /* Canonical form: size-1 dimensions read coordinate 0; with at most one
   * other dimension both halves are known for free. */
  if (coords) {
    for (int d = 0; d < rank; d++) cc[d] = shape[d] == 1 ? kcg_zero : coords[d];
    coords = cc;
  }
  if (nontrivial == 0) {
    ll = kcg_zero;
    lin = &ll;
    for (int d = 0; d < rank; d++) cc[d] = kcg_zero;
    coords = cc;
  } else if (nontrivial == 1) {
    if (!lin) {
      ll = coords[only];
      lin = &ll;
    }
    if (!coords) {
      for (int d = 0; d < rank; d++) cc[d] = d == only ? *lin : kcg_zero;
      coords = cc;
    }
  }
  for (int i = 0; i < c->n_idx; i++) {
    kcg_index *x = &c->idx[i];
    if (!kcg_index_same(x, rank, shape, lin, coords) || !kcg_index_visible(c, x)) continue;
    /* What the request adds is kept only if it is defined wherever x is
     * already used, i.e. no deeper than x's own terms. */
    int depth = c->scopes[kcg_index_scope(c, i)].depth;
    if (lin && !x->lin.expr && c->scopes[lin->scope].depth <= depth) x->lin = *lin;
    if (coords && !x->has_coords) {
      bool shallow = true;
      for (int d = 0; d < rank; d++) shallow = shallow && c->scopes[coords[d].scope].depth <= depth;
      if (shallow) {
        memcpy(x->coord, coords, sizeof(kcg_term) * (size_t)rank);
        x->has_coords = true;
      }
    }
    return i;
  }
  if (!kcg_grow_table(c, (void **)&c->idx, &c->cap_idx, c->n_idx + 1, sizeof(kcg_index)))
    return 0; /* a failure is recorded; callers stop emitting */
  kcg_index *x = &c->idx[c->n_idx];
  memset(x, 0, sizeof *x);
  x->rank = rank;
  if (rank) memcpy(x->shape, shape, sizeof(int64_t) * (size_t)rank);
  if (lin) x->lin = *lin;
  if (coords) {
    memcpy(x->coord, coords, sizeof(kcg_term) * (size_t)rank);
    x->has_coords = true;
  }
  return c->n_idx++;
}

int kcg_index_scope(kcg_ctx *c, int ix) {
  const kcg_index *x = &c->idx[ix];
  int s = 0;
  if (x->lin.expr) s = kcg_scope_deeper(c, s, x->lin.scope);
  if (x->has_coords)
    for (int d = 0; d < x->rank; d++) s = kcg_scope_deeper(c, s, x->coord[d].scope);
  return s;
}

/* Horner over the coordinates, as a local in their scope. */
kcg_term kcg_index_lin(kcg_ctx *c, int ix) {
  kcg_index *x = &c->idx[ix];
  if (x->lin.expr) return x->lin;
  KCORE_ASSERT(x->has_coords);
  const char *e = NULL;
  int scope = 0;
  for (int d = 0; d < x->rank; d++) {
    if (x->shape[d] == 1) continue;
    scope = kcg_scope_deeper(c, scope, x->coord[d].scope);
    e = e ? kcg_strf(c, "(%s * %lld + %s)", e, (long long)x->shape[d], x->coord[d].expr)
          : x->coord[d].expr;
  }
  const char *name = kcg_fresh(c, "x");
  kcg_line(c, scope, "const %s %s = %s;", c->idx_type, name, e ? e : "0");
  x = &c->idx[ix];
  x->lin = kcg_term_make(name, scope);
  return x->lin;
}

/* Division and remainder by the extents below each dimension. */
const kcg_term *kcg_index_coords(kcg_ctx *c, int ix) {
  kcg_index *x = &c->idx[ix];
  if (x->has_coords) return x->coord;
  KCORE_ASSERT(x->lin.expr);
  kcg_term lin = x->lin, out[KIR_MAX_RANK];
  int rank = x->rank, outermost = -1;
  for (int d = 0; d < rank; d++)
    if (x->shape[d] != 1) {
      outermost = d;
      break;
    }
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    int64_t extent = x->shape[d];
    if (extent == 1) {
      out[d] = kcg_zero;
      continue;
    }
    const char *e;
    if (stride == 1)
      e = d == outermost ? lin.expr : kcg_strf(c, "%s %% %lld", lin.expr, (long long)extent);
    else if (d == outermost)
      e = kcg_strf(c, "%s / %lld", lin.expr, (long long)stride);
    else
      e = kcg_strf(c, "%s / %lld %% %lld", lin.expr, (long long)stride, (long long)extent);
    /* Inline: the compiler shares repeated divisions, and coordinates
     * nobody reads cost nothing. */
    out[d] = e == lin.expr ? lin : kcg_term_make(kcg_strf(c, "(%s)", e), lin.scope);
    stride *= extent;
  }
  x = &c->idx[ix];
  memcpy(x->coord, out, sizeof(kcg_term) * (size_t)rank);
  x->has_coords = true;
  return x->coord;
}

static bool kcg_dims_has(const kir_dims *d, int axis) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == axis) return true;
  return false;
}

/* lax's implicit broadcasting: rank-0 operands and size-1 dimensions. */
static int kcg_index_broadcast(kcg_ctx *c, const kir_aval *a, int ix) {
  const kcg_index *x = &c->idx[ix];
  if (a->rank == 0) return kcg_index_get(c, 0, NULL, &kcg_zero, NULL);
  if (a->rank == x->rank && memcmp(a->shape, x->shape, sizeof(int64_t) * (size_t)a->rank) == 0)
    return ix;
  KCORE_ASSERT(a->rank == x->rank);
  const kcg_term *xc = kcg_index_coords(c, ix);
  kcg_term oc[KIR_MAX_RANK];
  for (int d = 0; d < a->rank; d++) oc[d] = a->shape[d] == 1 ? kcg_zero : xc[d];
  return kcg_index_get(c, a->rank, a->shape, NULL, oc);
}

/* An affine coordinate start + stride * x, folded where trivial. */
static kcg_term kcg_affine(kcg_ctx *c, int64_t start, int64_t stride, kcg_term x) {
  const char *e;
  if (stride == 1 && start == 0) return x;
  if (stride == -1)
    e = kcg_strf(c, "(%lld - %s)", (long long)start, x.expr);
  else if (stride == 1)
    e = kcg_strf(c, "(%lld + %s)", (long long)start, x.expr);
  else if (start == 0)
    e = kcg_strf(c, "(%lld * %s)", (long long)stride, x.expr);
  else
    e = kcg_strf(c, "(%lld + %lld * %s)", (long long)start, (long long)stride, x.expr);
  return kcg_term_make(e, x.scope);
}

int kcg_index_operand(kcg_ctx *c, const kir_eqn *e, int k, int ix) {
  const kir_aval *a = kir_var_aval(c->p, e->in[k]);
  const kir_params *pr = &e->params;
  const kcg_index *x = &c->idx[ix];
  kcg_term oc[KIR_MAX_RANK];
  switch (e->prim) {
    case KIR_PRIM_BROADCAST_IN_DIM: {
      const kcg_term *xc = kcg_index_coords(c, ix);
      for (int d = 0; d < a->rank; d++)
        oc[d] = a->shape[d] == 1 ? kcg_zero : xc[pr->broadcast.broadcast_dimensions.v[d]];
      return kcg_index_get(c, a->rank, a->shape, NULL, oc);
    }
    case KIR_PRIM_RESHAPE: {
      kcg_term lin = kcg_index_lin(c, ix);
      return kcg_index_get(c, a->rank, a->shape, &lin, NULL);
    }
    case KIR_PRIM_SQUEEZE:
    case KIR_PRIM_EXPAND_DIMS: {
      /* Both keep the linear order; map coordinates too when known. */
      kcg_term lin = x->lin;
      bool coords = x->has_coords;
      if (coords) {
        const kcg_term *xc = x->coord;
        int j = 0;
        if (e->prim == KIR_PRIM_SQUEEZE) {
          for (int d = 0; d < a->rank; d++)
            oc[d] = kcg_dims_has(&pr->dims.dimensions, d) ? kcg_zero : xc[j++];
        } else {
          for (int d = 0; d < x->rank; d++)
            if (!kcg_dims_has(&pr->dims.dimensions, d)) oc[j++] = xc[d];
        }
      }
      return kcg_index_get(c, a->rank, a->shape, lin.expr ? &lin : NULL, coords ? oc : NULL);
    }
    case KIR_PRIM_TRANSPOSE: {
      const kcg_term *xc = kcg_index_coords(c, ix);
      for (int d = 0; d < x->rank; d++) oc[pr->transpose.permutation.v[d]] = xc[d];
      return kcg_index_get(c, a->rank, a->shape, NULL, oc);
    }
    case KIR_PRIM_REV: {
      const kcg_term *xc = kcg_index_coords(c, ix);
      for (int d = 0; d < a->rank; d++)
        oc[d] = kcg_dims_has(&pr->dims.dimensions, d) ? kcg_affine(c, a->shape[d] - 1, -1, xc[d])
                                                       : xc[d];
      return kcg_index_get(c, a->rank, a->shape, NULL, oc);
    }
    case KIR_PRIM_SLICE: {
      const kcg_term *xc = kcg_index_coords(c, ix);
      const kir_p_slice *s = &pr->slice;
      for (int d = 0; d < a->rank; d++) {
        int64_t stride = s->strides.n ? s->strides.v[d] : 1;
        oc[d] = kcg_affine(c, s->start_indices.v[d], stride, xc[d]);
      }
      return kcg_index_get(c, a->rank, a->shape, NULL, oc);
    }
    default:
      KCORE_ASSERT(kir_prim_get(e->prim)->family == KIR_FAMILY_ELEMENTWISE);
      return kcg_index_broadcast(c, a, ix);
  }
}
