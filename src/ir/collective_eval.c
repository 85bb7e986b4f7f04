/* The reference semantics of shard_map and the collectives: the body runs
 * for every device of the mesh in lockstep, one equation at a time; an
 * ordinary equation runs once per device on that device's values, a
 * collective once for all of them, reading every member of each axis group.
 * Reductions go in rank order, each step rounded to the dtype (float32 for
 * f16/bf16, as XLA), so every device gets the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

/* The mesh, and every device's coordinates in it (row-major). */
typedef struct spmd {
  kir_mesh m;
  int64_t n;
  int64_t (*coord)[KIR_MESH_MAX_AXES];
} spmd;

static size_t nbytes_of(const kir_aval *a) {
  return (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
}

/* The device at d's coordinates with those on axes[0..n) set from rank r
 * (axes[n-1] minor). */
static int64_t group_member(const spmd *s, int64_t d, int n, const int *axes, int64_t r) {
  int64_t c[KIR_MESH_MAX_AXES];
  memcpy(c, s->coord[d], sizeof c);
  for (int k = n - 1; k >= 0; k--) {
    c[axes[k]] = r % s->m.size[axes[k]];
    r /= s->m.size[axes[k]];
  }
  int64_t lin = 0;
  for (int a = 0; a < s->m.ndim; a++) lin = lin * s->m.size[a] + c[a];
  return lin;
}

static int64_t group_rank(const spmd *s, int64_t d, int n, const int *axes) {
  int64_t r = 0;
  for (int k = 0; k < n; k++) r = r * s->m.size[axes[k]] + s->coord[d][axes[k]];
  return r;
}

/* ---- moving blocks between a global array and its shards ---- */

/* Copies the block of the global array (shape g) starting at `start` with
 * the shard's shape between the two buffers, in contiguous runs: the inner
 * dimensions the shard spans whole, times the extent of the next one. */
static void block_copy(const kir_aval *shard, const int64_t *g, const int64_t *start, char *global,
                       char *local, bool to_global) {
  size_t es = kiln_dtype_size(shard->dtype);
  int64_t n = kir_aval_size(shard), idx[KIR_MAX_RANK] = {0}, run = 1;
  int r = shard->rank, outer = r;
  while (outer > 0 && shard->shape[outer - 1] == g[outer - 1]) run *= g[--outer];
  if (outer > 0) run *= shard->shape[--outer];
  size_t bytes = (size_t)run * es;
  for (int64_t i = 0; i < n; i += run) {
    int64_t off = 0;
    for (int d = 0; d < r; d++) off = off * g[d] + start[d] + idx[d];
    if (to_global) memcpy(global + (size_t)off * es, local + (size_t)i * es, bytes);
    else memcpy(local + (size_t)i * es, global + (size_t)off * es, bytes);
    for (int d = outer - 1; d >= 0 && ++idx[d] == shard->shape[d]; d--) idx[d] = 0;
  }
}

/* Where the shard of a device at `coords` starts. */
static void shard_start(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                        const kir_aval *shard, int64_t *start) {
  for (int k = 0; k < shard->rank; k++) {
    int64_t i = 0;
    for (int j = 0; k < spec->rank && j < spec->n_axes[k]; j++) {
      int a = spec->axes[k][j];
      i = i * m->size[a] + coords[a];
    }
    start[k] = i * shard->shape[k];
  }
}

void kir_shard_copy(const kir_mesh *m, const int64_t *coords, const kir_spec *spec,
                    const kir_buffer *global, const kir_buffer *shard, bool to_global) {
  int64_t start[KIR_MAX_RANK];
  shard_start(m, coords, spec, &shard->aval, start);
  block_copy(&shard->aval, global->aval.shape, start, global->data, shard->data, to_global);
}

bool kir_shard_writes_back(const kir_mesh *m, const int64_t *coords, const kir_spec *spec) {
  bool split[KIR_MESH_MAX_AXES] = {false};
  for (int d = 0; d < spec->rank; d++)
    for (int j = 0; j < spec->n_axes[d]; j++) split[spec->axes[d][j]] = true;
  for (int a = 0; a < m->ndim; a++)
    if (!split[a] && coords[a] != 0) return false;
  return true;
}

void kir_mesh_coords(const kir_mesh *m, int64_t d, int64_t *coords) {
  for (int a = m->ndim - 1; a >= 0; a--) {
    coords[a] = d % m->size[a];
    d /= m->size[a];
  }
}

/* ---- collectives over all devices at once ---- */

static kir_scalar combine(kir_prim prim, kiln_dtype dt, kir_scalar a, kir_scalar b) {
  kir_scalar r;
  if (kiln_dtype_is_float(dt)) {
    if (prim == KIR_PRIM_PSUM || prim == KIR_PRIM_PSUM_SCATTER) r.f = a.f + b.f;
    else if (isnan(a.f) || isnan(b.f)) r.f = NAN;
    else r.f = prim == KIR_PRIM_PMAX ? (a.f > b.f ? a.f : b.f) : (a.f < b.f ? a.f : b.f);
    /* XLA reduces 16-bit floats in float32 and rounds once at the end. */
    r.f = kir_round_to_dtype(dt == KILN_F16 || dt == KILN_BF16 ? KILN_F32 : dt, r.f);
  } else if (kir_dtype_in(dt, KIR_DT_UINT)) {
    if (prim == KIR_PRIM_PSUM || prim == KIR_PRIM_PSUM_SCATTER) r.u = a.u + b.u;
    else r.u = (prim == KIR_PRIM_PMAX) == (a.u > b.u) ? a.u : b.u;
  } else {
    if (prim == KIR_PRIM_PSUM || prim == KIR_PRIM_PSUM_SCATTER) r.u = a.u + b.u; /* wraps */
    else r.i = (prim == KIR_PRIM_PMAX) == (a.i > b.i) ? a.i : b.i;
  }
  return r;
}

/* Element j of every member's buffer folded in rank order. */
static kir_scalar reduce_at(kir_prim prim, kiln_dtype dt, int64_t n, char *const *src, int64_t j) {
  size_t es = kiln_dtype_size(dt);
  kir_scalar acc = kir_scalar_load(dt, src[0] + (size_t)j * es);
  for (int64_t s = 1; s < n; s++) acc = combine(prim, dt, acc, kir_scalar_load(dt, src[s] + (size_t)j * es));
  return acc;
}

static int64_t prod(const int64_t *v, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= v[i];
  return p;
}

void kir_all_to_all_unpack(const kir_p_all_to_all *p, const kir_aval *in, const kir_aval *out,
                           const void *recv, void *dst) {
  size_t es = kiln_dtype_size(in->dtype);
  int sa = (int)p->split_axis, ca = (int)p->concat_axis;
  int64_t c[KIR_MAX_RANK], idx[KIR_MAX_RANK] = {0}, x[KIR_MAX_RANK];
  memcpy(c, in->shape, sizeof c);
  c[sa] /= p->axis_size;
  int64_t chunk = prod(c, 0, in->rank), n = kir_aval_size(out);
  for (int64_t i = 0; i < n; i++) {
    int64_t s;
    if (p->tiled) { /* blocks side by side along concat_axis */
      memcpy(x, idx, sizeof x);
      s = idx[ca] / c[ca];
      x[ca] = idx[ca] % c[ca];
    } else { /* blocks stacked on a new concat_axis; split_axis (now 1) dropped */
      s = idx[ca];
      int m = 0;
      for (int d = 0; d < out->rank; d++)
        if (d != ca) x[m++] = idx[d];
      memmove(&x[sa + 1], &x[sa], (size_t)(in->rank - 1 - sa) * sizeof x[0]);
      x[sa] = 0;
    }
    int64_t off = 0;
    for (int d = 0; d < in->rank; d++) off = off * c[d] + x[d];
    memcpy((char *)dst + (size_t)i * es, (const char *)recv + (size_t)(s * chunk + off) * es, es);
    for (int d = out->rank - 1; d >= 0 && ++idx[d] == out->shape[d]; d--) idx[d] = 0;
  }
}

/* One collective for every device: in[d] and out[d] are device d's
 * operand and result. */
static kiln_status eval_collective(const spmd *s, const kir_eqn *e, kir_buffer *in,
                                   kir_buffer *out) {
  const char *op = kir_prim_name(e->prim);
  const char *names = kir_collective_axes(e, NULL);
  int64_t size;
  int na, axes[KIR_MESH_MAX_AXES];
  kiln_status st = kir_axes_parse(op, names, &s->m, &na, axes);
  if (st) return st;
  /* JAX numbers ppermute's pairs along the axes in mesh order, whatever
   * order they are named in (the other collectives follow the names). */
  for (int i = 1; e->prim == KIR_PRIM_PPERMUTE && i < na; i++)
    for (int k = i; k > 0 && axes[k - 1] > axes[k]; k--) {
      int tmp = axes[k];
      axes[k] = axes[k - 1], axes[k - 1] = tmp;
    }
  size = 1;
  for (int k = 0; k < na; k++) size *= s->m.size[axes[k]];
  char **src = malloc((size_t)size * sizeof *src);
  char *recv = e->prim == KIR_PRIM_ALL_TO_ALL ? malloc(in[0].nbytes + 1) : NULL;
  int(*pairs)[2] = malloc((size_t)size * sizeof *pairs);
  int npairs = 0;
  if (!src || !pairs || (e->prim == KIR_PRIM_ALL_TO_ALL && !recv))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st && e->prim == KIR_PRIM_PPERMUTE)
    st = kir_perm_parse(e->params.ppermute.perm, size, &npairs, pairs);
  for (int64_t d = 0; !st && d < s->n; d++) {
    int64_t r = group_rank(s, d, na, axes);
    for (int64_t k = 0; k < size && e->n_in; k++)
      src[k] = in[group_member(s, d, na, axes, k)].data;
    const kir_aval *a = e->n_in ? &in[d].aval : NULL;
    kiln_dtype dt = out[d].aval.dtype;
    size_t es = kiln_dtype_size(dt);
    char *dst = out[d].data;
    switch (e->prim) {
      case KIR_PRIM_PSUM:
      case KIR_PRIM_PMAX:
      case KIR_PRIM_PMIN:
        for (int64_t j = 0, m = kir_aval_size(a); j < m; j++)
          kir_scalar_store(dt, reduce_at(e->prim, dt, size, src, j), dst + (size_t)j * es);
        break;
      case KIR_PRIM_ALL_GATHER: {
        int dim = (int)e->params.all_gather.all_gather_dimension;
        int64_t outer = prod(a->shape, 0, dim);
        size_t inner = (size_t)prod(a->shape, dim, a->rank) * es;
        for (int64_t k = 0; k < size; k++)
          for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (size_t)(o * size + k) * inner, src[k] + (size_t)o * inner, inner);
        break;
      }
      case KIR_PRIM_PSUM_SCATTER: {
        int dim = (int)e->params.psum_scatter.scatter_dimension;
        int64_t outer = prod(a->shape, 0, dim);
        int64_t block = a->shape[dim] / size * prod(a->shape, dim + 1, a->rank);
        for (int64_t o = 0; o < outer; o++)
          for (int64_t j = 0; j < block; j++)
            kir_scalar_store(dt, reduce_at(e->prim, dt, size, src, (o * size + r) * block + j),
                             dst + (size_t)(o * block + j) * es);
        break;
      }
      case KIR_PRIM_PPERMUTE:
        memset(dst, 0, out[d].nbytes);
        for (int k = 0; k < npairs; k++)
          if (pairs[k][1] == r) memcpy(dst, src[pairs[k][0]], out[d].nbytes);
        break;
      case KIR_PRIM_ALL_TO_ALL: { /* block r of every sender, then as received */
        int sa = (int)e->params.all_to_all.split_axis;
        int64_t outer = prod(a->shape, 0, sa);
        size_t block = (size_t)(a->shape[sa] / size * prod(a->shape, sa + 1, a->rank)) * es;
        for (int64_t k = 0; k < size; k++)
          for (int64_t o = 0; o < outer; o++)
            memcpy(recv + (size_t)(k * outer + o) * block, src[k] + (size_t)(o * size + r) * block,
                   block);
        kir_all_to_all_unpack(&e->params.all_to_all, a, &out[d].aval, recv, dst);
        break;
      }
      case KIR_PRIM_AXIS_INDEX: {
        int32_t v = (int32_t)r;
        memcpy(dst, &v, sizeof v);
        break;
      }
      default:
        st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: no lockstep evaluator", op);
    }
  }
  free(src);
  free(pairs);
  free(recv);
  return st;
}

/* ---- the body, in lockstep ---- */

typedef struct nested_probe {
  const char *found;
} nested_probe;

static void probe_sub(kir_program *sub, void *user) {
  nested_probe *np = user;
  for (int i = 0; i < sub->n_eqns && !np->found; i++) {
    const kir_eqn *e = &sub->eqns[i];
    if (kir_prim_get(e->prim)->family == KIR_FAMILY_COLLECTIVE) np->found = kir_prim_name(e->prim);
    kir_params_for_each_program(kir_prim_get(e->prim)->params, &e->params, probe_sub, user);
  }
}

/* vals[d * nv + v]: device d's value of body var v; owned[] marks buffers
 * this evaluator allocated (literals are shared by all devices). */
typedef struct lockstep {
  const spmd *s;
  const kir_program *body;
  kir_buffer *vals;
  bool *owned;
} lockstep;

static kir_buffer *val(const lockstep *l, int64_t d, kir_vid v) {
  return &l->vals[(size_t)d * (size_t)l->body->n_vars + (size_t)v];
}

static kiln_status alloc_val(lockstep *l, int64_t d, kir_vid v) {
  kir_buffer *b = val(l, d, v);
  b->aval = *kir_var_aval(l->body, v);
  b->nbytes = nbytes_of(&b->aval);
  b->data = malloc(b->nbytes ? b->nbytes : 1);
  if (!b->data) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  l->owned[(size_t)d * (size_t)l->body->n_vars + (size_t)v] = true;
  return KILN_OK;
}

static kiln_status run_eqn(lockstep *l, const kir_eval_env *env, const kir_eqn *e) {
  const spmd *s = l->s;
  kiln_status st = KILN_OK;
  kir_buffer *in = malloc((size_t)(s->n * (e->n_in + 1)) * sizeof *in);
  kir_buffer *out = malloc((size_t)(s->n * (e->n_out + 1)) * sizeof *out);
  if (!in || !out) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  for (int64_t d = 0; !st && d < s->n; d++) {
    for (int k = 0; k < e->n_in; k++) in[d * e->n_in + k] = *val(l, d, e->in[k]);
    for (int k = 0; !st && k < e->n_out; k++) {
      st = alloc_val(l, d, e->out[k]);
      if (!st) out[d * e->n_out + k] = *val(l, d, e->out[k]);
    }
  }
  bool collective = kir_prim_get(e->prim)->family == KIR_FAMILY_COLLECTIVE &&
                    e->prim != KIR_PRIM_SHARD_MAP;
  if (!st && collective) {
    st = eval_collective(s, e, in, out);
  } else if (!st) {
    kir_eval_fn fn = env->table->fn[e->prim];
    if (!fn)
      st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "the reference executor has no evaluator for %s",
                      kir_prim_name(e->prim));
    for (int64_t d = 0; !st && d < s->n; d++)
      st = fn(e, in + d * e->n_in, out + d * e->n_out, (void *)env);
  }
  for (int64_t d = 0; !st && env->observe && d < s->n; d++)
    st = env->observe(env->observe_user, l->body, (int)(e - l->body->eqns), d, in + d * e->n_in,
                      out + d * e->n_out);
  free(in);
  free(out);
  return st;
}

static kiln_status lockstep_run(lockstep *l, const kir_eval_env *env, const kir_spec *specs,
                                const kir_buffer *gin, kir_buffer *gout) {
  const kir_program *body = l->body;
  const spmd *s = l->s;
  kiln_status st = KILN_OK;
  for (kir_vid v = 0; !st && v < body->n_vars; v++) {
    if (body->vars[v].kind != KIR_VAR_LITERAL) continue;
    if (!(st = alloc_val(l, 0, v))) {
      kir_scalar_store(body->vars[v].aval.dtype, body->vars[v].u.literal, val(l, 0, v)->data);
      for (int64_t d = 1; d < s->n; d++) *val(l, d, v) = *val(l, 0, v);
    }
  }
  for (int i = 0; !st && i < body->n_invars; i++)
    for (int64_t d = 0; !st && d < s->n; d++)
      if (!(st = alloc_val(l, d, body->invars[i])))
        kir_shard_copy(&s->m, s->coord[d], &specs[i], &gin[i], val(l, d, body->invars[i]), false);
  for (int i = 0; !st && i < body->n_eqns; i++) {
    st = run_eqn(l, env, &body->eqns[i]);
    if (st) kcore_fail_wrap(st, "shard_map body equation %d (%s)", i,
                            kir_prim_name(body->eqns[i].prim));
  }
  /* Each result block comes from the device with coordinate 0 on every axis
   * its out_spec does not split over (the others hold copies of it). */
  for (int k = 0; !st && k < body->n_outvars; k++)
    for (int64_t d = 0; d < s->n; d++)
      if (kir_shard_writes_back(&s->m, s->coord[d], &specs[body->n_invars + k]))
        kir_shard_copy(&s->m, s->coord[d], &specs[body->n_invars + k], &gout[k],
                       val(l, d, body->outvars[k]), true);
  return st;
}

static kiln_status eval_shard_map(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                  void *ctx) {
  const kir_p_shard_map *p = &e->params.shard_map;
  const kir_program *body = p->jaxpr;
  spmd s = {0};
  kiln_status st = kir_mesh_parse("shard_map", p->mesh, &s.m);
  if (st) return st;
  s.n = s.m.n_devices;
  nested_probe np = {NULL};
  for (int i = 0; i < body->n_eqns && !np.found; i++)
    kir_params_for_each_program(kir_prim_get(body->eqns[i].prim)->params, &body->eqns[i].params,
                                probe_sub, &np);
  if (np.found)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "shard_map: the reference executor runs collectives "
                      "at the top level of a shard_map body only (%s inside control flow)",
                      np.found);
  size_t cells = (size_t)s.n * (size_t)(body->n_vars ? body->n_vars : 1);
  lockstep l = {&s, body, calloc(cells, sizeof(kir_buffer)), calloc(cells, sizeof(bool))};
  kir_spec *specs = malloc((size_t)(e->n_in + e->n_out + 1) * sizeof *specs);
  s.coord = malloc((size_t)s.n * sizeof *s.coord);
  if (!l.vals || !l.owned || !specs || !s.coord)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) st = kir_specs_parse("shard_map", p->in_specs, &s.m, e->n_in, specs);
  if (!st) st = kir_specs_parse("shard_map", p->out_specs, &s.m, e->n_out, specs + e->n_in);
  for (int64_t d = 0; !st && d < s.n; d++) kir_mesh_coords(&s.m, d, s.coord[d]);
  if (!st) st = lockstep_run(&l, ctx, specs, in, out);
  for (size_t c = 0; l.owned && c < cells; c++)
    if (l.owned[c]) free(l.vals[c].data);
  free(l.vals);
  free(l.owned);
  free(specs);
  free(s.coord);
  return st;
}

/* device_put moves nothing on the host: the value stays what it was. */
static kiln_status eval_device_put(const kir_eqn *e, const kir_buffer *in, kir_buffer *out,
                                   void *ctx) {
  (void)e, (void)ctx;
  if (out[0].nbytes) memmove(out[0].data, in[0].data, out[0].nbytes);
  return KILN_OK;
}

void kir_collective_evals(kir_eval_table *t) {
  t->fn[KIR_PRIM_SHARD_MAP] = eval_shard_map;
  t->fn[KIR_PRIM_DEVICE_PUT] = eval_device_put;
}
