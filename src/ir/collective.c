/* Collectives over mesh axes (psum, pmax, pmin, all_gather, reduce_scatter,
 * ppermute, all_to_all, axis_index) and shard_map, which binds the axes:
 * their shape/dtype rules, the parsing of their text params, and the check
 * that every axis a collective names is bound by an enclosing shard_map.
 * The reference semantics live in collective_eval.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "ir/ir.h"

/* ---- text params ---- */

static const char *skip_space(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

/* One identifier at s (trimmed): its length, 0 if none. */
static size_t ident_len(const char *s) {
  size_t n = 0;
  while (s[n] && (isalnum((unsigned char)s[n]) || s[n] == '_')) n++;
  return n;
}

static int mesh_axis(const kir_mesh *m, const char *name, size_t len) {
  for (int a = 0; a < m->ndim; a++)
    if (strlen(m->name[a]) == len && memcmp(m->name[a], name, len) == 0) return a;
  return -1;
}

kiln_status kir_mesh_parse(const char *op, const char *text, kir_mesh *out) {
  memset(out, 0, sizeof *out);
  out->n_devices = 1;
  const char *s = skip_space(text ? text : "");
  while (*s) {
    size_t n = ident_len(s);
    if (!n || n >= KIR_AXIS_NAME_MAX || s[n] != '=' || out->ndim == KIR_MESH_MAX_AXES)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: malformed mesh \"%s\" (expected name=size,...)",
                        op, text);
    char *end;
    long long size = strtoll(s + n + 1, &end, 10);
    if (end == s + n + 1 || size < 1 || mesh_axis(out, s, n) >= 0)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: malformed mesh \"%s\" (bad size or repeated axis)",
                        op, text);
    memcpy(out->name[out->ndim], s, n);
    out->size[out->ndim++] = size;
    out->n_devices *= size;
    s = skip_space(end);
    if (*s == ',') s = skip_space(s + 1);
  }
  if (!out->ndim) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the mesh has no axes", op);
  return KILN_OK;
}

kiln_status kir_axes_parse(const char *op, const char *text, const kir_mesh *m, int *n, int *axes) {
  *n = 0;
  const char *s = skip_space(text ? text : "");
  while (*s) {
    size_t len = ident_len(s);
    int a = len ? mesh_axis(m, s, len) : -1;
    if (a < 0) {
      char bound[KIR_MESH_MAX_AXES * (KIR_AXIS_NAME_MAX + 2) + 1] = "";
      for (int k = 0; k < m->ndim; k++)
        snprintf(bound + strlen(bound), sizeof bound - strlen(bound), "%s%s", k ? ", " : "",
                 m->name[k]);
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis name '%.*s' is not bound (bound axes: %s)",
                        op, (int)(len ? len : strlen(s)), s, m->ndim ? bound : "none");
    }
    for (int k = 0; k < *n; k++)
      if (axes[k] == a)
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis '%s' named twice", op, m->name[a]);
    axes[(*n)++] = a;
    s = skip_space(s + len);
    if (*s == ',') s = skip_space(s + 1);
  }
  if (!*n) return kcore_fail(KILN_ERR_ARGUMENT, "%s: no axis name", op);
  return KILN_OK;
}

/* One spec ("data, None", "(data, model)", "") between s and end. */
static kiln_status spec_parse(const char *op, const char *s, const char *end, const kir_mesh *m,
                              kir_spec *out) {
  memset(out, 0, sizeof *out);
  bool used[KIR_MESH_MAX_AXES] = {false};
  s = skip_space(s);
  while (s < end) {
    if (out->rank == KIR_MAX_RANK)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: a partition spec has more than %d entries", op,
                        KIR_MAX_RANK);
    int d = out->rank++;
    bool group = *s == '(';
    if (group) s = skip_space(s + 1);
    while (s < end && *s != ')' && *s != ',') {
      size_t len = ident_len(s);
      if (!len) return kcore_fail(KILN_ERR_ARGUMENT, "%s: malformed partition spec at '%s'", op, s);
      if (!(len == 4 && memcmp(s, "None", 4) == 0)) {
        int a = mesh_axis(m, s, len);
        if (a < 0)
          return kcore_fail(KILN_ERR_ARGUMENT, "%s: partition spec names axis '%.*s', which the "
                            "mesh lacks", op, (int)len, s);
        if (used[a])
          return kcore_fail(KILN_ERR_ARGUMENT, "%s: partition spec uses axis '%s' twice", op,
                            m->name[a]);
        used[a] = true;
        out->axes[d][out->n_axes[d]++] = (int8_t)a;
      }
      s = skip_space(s + len);
      if (group && s < end && *s == ',') s = skip_space(s + 1);
      if (!group) break;
    }
    if (group) {
      if (s >= end || *s != ')')
        return kcore_fail(KILN_ERR_ARGUMENT, "%s: unclosed '(' in a partition spec", op);
      s = skip_space(s + 1);
    }
    if (s < end && *s == ',') s = skip_space(s + 1);
    else if (s < end) return kcore_fail(KILN_ERR_ARGUMENT, "%s: malformed partition spec at '%s'", op, s);
  }
  return KILN_OK;
}

kiln_status kir_specs_parse(const char *op, const char *text, const kir_mesh *m, int n,
                            kir_spec *out) {
  const char *s = text ? text : "";
  int k = 0;
  for (;;) {
    const char *bar = strchr(s, '|');
    const char *end = bar ? bar : s + strlen(s);
    if (k < n) {
      kiln_status st = spec_parse(op, s, end, m, &out[k]);
      if (st) return kcore_fail_wrap(st, "spec %d", k);
    }
    k++;
    if (!bar) break;
    s = bar + 1;
  }
  if (k != n && !(n == 0 && !*skip_space(text ? text : "")))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %d partition specs for %d values", op, k, n);
  return KILN_OK;
}

kiln_status kir_perm_parse(const char *text, int64_t size, int *npairs, int (*pairs)[2]) {
  *npairs = 0;
  int64_t v[2];
  int half = 0;
  bool src_seen[1024] = {false}, dst_seen[1024] = {false};
  if (size > 1024) return kcore_fail(KILN_ERR_ARGUMENT, "ppermute: axis size %lld is too large",
                                     (long long)size);
  for (const char *s = text ? text : ""; *s;) {
    if (!isdigit((unsigned char)*s) && *s != '-') {
      s++;
      continue;
    }
    char *end;
    v[half++] = strtoll(s, &end, 10);
    s = end;
    if (half < 2) continue;
    half = 0;
    if (v[0] < 0 || v[0] >= size || v[1] < 0 || v[1] >= size)
      return kcore_fail(KILN_ERR_ARGUMENT, "ppermute: pair (%lld, %lld) is outside the axis of "
                        "size %lld", (long long)v[0], (long long)v[1], (long long)size);
    if (src_seen[v[0]] || dst_seen[v[1]])
      return kcore_fail(KILN_ERR_ARGUMENT, "ppermute: perm %s repeats a %s", text,
                        src_seen[v[0]] ? "source" : "destination");
    src_seen[v[0]] = dst_seen[v[1]] = true;
    pairs[*npairs][0] = (int)v[0], pairs[*npairs][1] = (int)v[1];
    (*npairs)++;
  }
  if (half) return kcore_fail(KILN_ERR_ARGUMENT, "ppermute: perm %s has an odd count", text);
  return KILN_OK;
}

int64_t kir_spec_ways(const kir_spec *s, const kir_mesh *m, int d) {
  int64_t w = 1;
  if (d < s->rank)
    for (int k = 0; k < s->n_axes[d]; k++) w *= m->size[s->axes[d][k]];
  return w;
}

/* ---- rules ---- */

static kiln_status check_size(kir_prim prim, int64_t axis_size) {
  if (axis_size < 1)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis_size %lld is not positive", kir_prim_name(prim),
                      (long long)axis_size);
  return KILN_OK;
}

/* psum/pmax/pmin: any numeric operand, the same type out (weak kept). */
kiln_status kir_rule_all_reduce(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  kiln_status st = check_size(prim, params->collective.axis_size);
  if (!st) st = kir_check_dtype_class(prim, 0, in, KIR_DT_NUM);
  if (!st) st = kir_avals_push(out, &in[0]);
  return st;
}

static kiln_status bad_dim(kir_prim prim, const char *param, int64_t v, const kir_aval *x) {
  char t[KIR_AVAL_STR_CAP];
  return kcore_fail(KILN_ERR_SHAPE, "%s: %s=%lld is out of range for an operand of type %s",
                    kir_prim_name(prim), param, (long long)v, kir_aval_str(x, t, sizeof t));
}

/* all_gather: untiled inserts a new axis of axis_size at the dimension,
 * tiled multiplies that dimension by axis_size. */
kiln_status kir_rule_all_gather(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_all_gather *p = &params->all_gather;
  kiln_status st = check_size(prim, p->axis_size);
  if (st) return st;
  kir_aval a = in[0];
  int64_t d = p->all_gather_dimension;
  if (d < 0 || d > a.rank - (p->tiled ? 1 : 0)) return bad_dim(prim, "all_gather_dimension", d, &a);
  if (p->tiled) {
    a.shape[d] *= p->axis_size;
  } else {
    if (a.rank == KIR_MAX_RANK) return bad_dim(prim, "all_gather_dimension", d, &a);
    memmove(&a.shape[d + 1], &a.shape[d], (size_t)(a.rank - d) * sizeof a.shape[0]);
    a.shape[d] = p->axis_size;
    a.rank++;
  }
  return kir_avals_push(out, &a);
}

/* reduce_scatter (lax.psum_scatter): tiled divides the dimension by
 * axis_size; untiled needs it equal to axis_size and removes it. */
kiln_status kir_rule_psum_scatter(kir_prim prim, const kir_params *params, int n_in,
                                  const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_psum_scatter *p = &params->psum_scatter;
  kiln_status st = check_size(prim, p->axis_size);
  if (!st) st = kir_check_dtype_class(prim, 0, in, KIR_DT_NUM);
  if (st) return st;
  kir_aval a = in[0];
  int64_t d = p->scatter_dimension;
  char t[KIR_AVAL_STR_CAP];
  if (d < 0 || d >= a.rank) return bad_dim(prim, "scatter_dimension", d, &a);
  if (p->tiled ? a.shape[d] % p->axis_size != 0 : a.shape[d] != p->axis_size)
    return kcore_fail(KILN_ERR_SHAPE, "%s: dimension %lld of %s must %s the axis size %lld",
                      kir_prim_name(prim), (long long)d, kir_aval_str(&a, t, sizeof t),
                      p->tiled ? "be a multiple of" : "equal", (long long)p->axis_size);
  if (p->tiled) {
    a.shape[d] /= p->axis_size;
  } else {
    memmove(&a.shape[d], &a.shape[d + 1], (size_t)(a.rank - d - 1) * sizeof a.shape[0]);
    a.shape[--a.rank] = 0;
  }
  return kir_avals_push(out, &a);
}

kiln_status kir_rule_ppermute(kir_prim prim, const kir_params *params, int n_in,
                              const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_ppermute *p = &params->ppermute;
  kiln_status st = check_size(prim, p->axis_size);
  int npairs;
  int(*pairs)[2] = st ? NULL : malloc((size_t)p->axis_size * sizeof *pairs);
  if (!st && !pairs) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "ppermute: out of host memory");
  if (!st) st = kir_perm_parse(p->perm, p->axis_size, &npairs, pairs);
  free(pairs);
  if (!st) st = kir_avals_push(out, &in[0]);
  return st;
}

/* all_to_all: tiled splits split_axis into axis_size blocks and
 * concatenates the received ones along concat_axis; untiled needs
 * split_axis of size axis_size, removes it and inserts a new axis of
 * axis_size at concat_axis (np.insert(np.delete(shape, split), concat)). */
kiln_status kir_rule_all_to_all(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const kir_p_all_to_all *p = &params->all_to_all;
  kiln_status st = check_size(prim, p->axis_size);
  if (st) return st;
  kir_aval a = in[0];
  char t[KIR_AVAL_STR_CAP];
  if (p->split_axis < 0 || p->split_axis >= a.rank) return bad_dim(prim, "split_axis", p->split_axis, &a);
  if (p->concat_axis < 0 || p->concat_axis >= a.rank)
    return bad_dim(prim, "concat_axis", p->concat_axis, &a);
  int64_t s = a.shape[p->split_axis];
  if (p->tiled ? s % p->axis_size != 0 : s != p->axis_size)
    return kcore_fail(KILN_ERR_SHAPE, "%s: split_axis %lld of %s must %s the axis size %lld",
                      kir_prim_name(prim), (long long)p->split_axis, kir_aval_str(&a, t, sizeof t),
                      p->tiled ? "be a multiple of" : "equal", (long long)p->axis_size);
  if (p->tiled) {
    a.shape[p->split_axis] /= p->axis_size;
    a.shape[p->concat_axis] *= p->axis_size;
  } else {
    int64_t *sh = a.shape;
    memmove(&sh[p->split_axis], &sh[p->split_axis + 1],
            (size_t)(a.rank - p->split_axis - 1) * sizeof sh[0]);
    memmove(&sh[p->concat_axis + 1], &sh[p->concat_axis],
            (size_t)(a.rank - 1 - p->concat_axis) * sizeof sh[0]);
    sh[p->concat_axis] = p->axis_size;
  }
  return kir_avals_push(out, &a);
}

/* axis_index: the device's int32 position along the axes. */
kiln_status kir_rule_axis_index(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in, (void)in;
  kiln_status st = check_size(prim, params->collective.axis_size);
  if (!st) st = kir_push(out, KILN_I32, 0, NULL, false);
  return st;
}

/* The shard type of operand i (of type in) split by spec s over m: the
 * spec must fit its rank and divide the dimensions it splits. */
static kiln_status split_operand(const char *op, int i, const kir_aval *in, const kir_spec *s,
                                 const kir_mesh *m, kir_aval *shard) {
  char t[KIR_AVAL_STR_CAP];
  *shard = *in;
  if (s->rank > in->rank)
    return kcore_fail(KILN_ERR_SHAPE, "%s: operand %d of type %s has a spec of %d entries", op, i,
                      kir_aval_str(in, t, sizeof t), s->rank);
  for (int d = 0; d < s->rank; d++) {
    int64_t w = kir_spec_ways(s, m, d);
    if (shard->shape[d] % w)
      return kcore_fail(KILN_ERR_SHAPE, "%s: dimension %d of operand %d (%s) is not divisible by "
                        "%lld", op, d, i, kir_aval_str(in, t, sizeof t), (long long)w);
    shard->shape[d] /= w;
  }
  return KILN_OK;
}

/* device_put: the operand's type, which the spec must split evenly. */
kiln_status kir_rule_device_put(kir_prim prim, const kir_params *params, int n_in,
                                const kir_aval *in, kir_avals *out) {
  (void)n_in;
  const char *op = kir_prim_name(prim);
  const kir_p_device_put *p = &params->device_put;
  if (!p->mesh || !p->spec) return kcore_fail(KILN_ERR_ARGUMENT, "%s: no mesh or spec", op);
  kir_mesh m;
  kir_spec s;
  kir_aval shard;
  kiln_status st = kir_mesh_parse(op, p->mesh, &m);
  if (!st) st = kir_specs_parse(op, p->spec, &m, 1, &s);
  if (!st) st = split_operand(op, 0, &in[0], &s, &m, &shard);
  return st ? st : kir_avals_push(out, &in[0]);
}

/* shard_map: each operand, split by its in_spec over the mesh, must have
 * the body's invar type; each result is the body's output grown back by
 * its out_spec. */
kiln_status kir_rule_shard_map(kir_prim prim, const kir_params *params, int n_in,
                               const kir_aval *in, kir_avals *out) {
  const kir_p_shard_map *p = &params->shard_map;
  const char *op = kir_prim_name(prim);
  const kir_program *body = p->jaxpr;
  if (!body) return kcore_fail(KILN_ERR_ARGUMENT, "%s: no body", op);
  if (body->n_invars != n_in)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %d operands for a body of %d inputs", op, n_in,
                      body->n_invars);
  kir_mesh m;
  kiln_status st = kir_mesh_parse(op, p->mesh, &m);
  kir_spec *specs = st ? NULL : malloc((size_t)(n_in + body->n_outvars + 1) * sizeof *specs);
  if (!st && !specs) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (!st) st = kir_specs_parse(op, p->in_specs, &m, n_in, specs);
  if (!st) st = kir_specs_parse(op, p->out_specs, &m, body->n_outvars, specs + n_in);
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  for (int i = 0; !st && i < n_in; i++) {
    kir_aval shard;
    st = split_operand(op, i, &in[i], &specs[i], &m, &shard);
    const kir_aval *want = kir_var_aval(body, body->invars[i]);
    if (!st && !kir_aval_typematch(&shard, want))
      st = kcore_fail(KILN_ERR_SHAPE, "%s: operand %d shards to %s where the body takes %s", op, i,
                      kir_aval_str(&shard, t0, sizeof t0), kir_aval_str(want, t1, sizeof t1));
  }
  for (int k = 0; !st && k < body->n_outvars; k++) {
    kir_aval g = *kir_var_aval(body, body->outvars[k]);
    const kir_spec *s = &specs[n_in + k];
    if (s->rank > g.rank)
      st = kcore_fail(KILN_ERR_SHAPE, "%s: result %d of type %s has a spec of %d entries", op, k,
                      kir_aval_str(&g, t0, sizeof t0), s->rank);
    for (int d = 0; !st && d < s->rank; d++) g.shape[d] *= kir_spec_ways(s, &m, d);
    if (!st) st = kir_avals_push(out, &g);
  }
  free(specs);
  return st;
}

/* ---- binding ---- */

const char *kir_collective_axes(const kir_eqn *e, int64_t *size) {
  const kir_params *p = &e->params;
  int64_t ignored;
  if (!size) size = &ignored;
  switch (kir_prim_get(e->prim)->params) {
    case KIR_PARAMS_COLLECTIVE: *size = p->collective.axis_size; return p->collective.axis_name;
    case KIR_PARAMS_ALL_GATHER: *size = p->all_gather.axis_size; return p->all_gather.axis_name;
    case KIR_PARAMS_PSUM_SCATTER: *size = p->psum_scatter.axis_size; return p->psum_scatter.axis_name;
    case KIR_PARAMS_PPERMUTE: *size = p->ppermute.axis_size; return p->ppermute.axis_name;
    case KIR_PARAMS_ALL_TO_ALL: *size = p->all_to_all.axis_size; return p->all_to_all.axis_name;
    default: return NULL;
  }
}

/* Appends the axes of m to env (inner shard_maps shadow nothing: JAX
 * forbids rebinding a name, and so does this). */
static kiln_status env_add(kir_mesh *env, const kir_mesh *m) {
  for (int a = 0; a < m->ndim; a++) {
    if (mesh_axis(env, m->name[a], strlen(m->name[a])) >= 0)
      return kcore_fail(KILN_ERR_ARGUMENT, "shard_map: axis '%s' is already bound by an enclosing "
                        "shard_map", m->name[a]);
    if (env->ndim == KIR_MESH_MAX_AXES)
      return kcore_fail(KILN_ERR_ARGUMENT, "shard_map: more than %d nested mesh axes",
                        KIR_MESH_MAX_AXES);
    memcpy(env->name[env->ndim], m->name[a], sizeof m->name[a]);
    env->size[env->ndim++] = m->size[a];
  }
  return KILN_OK;
}

/* The axes bound around sub-program p: those of every shard_map whose body
 * encloses it. */
static kiln_status bound_axes(const kir_program *p, kir_mesh *env) {
  memset(env, 0, sizeof *env);
  for (const kir_program *q = p; q->parent; q = q->parent) {
    const kir_program *up = q->parent;
    for (int i = 0; i < up->n_eqns; i++) {
      const kir_eqn *e = &up->eqns[i];
      if (e->prim != KIR_PRIM_SHARD_MAP || e->params.shard_map.jaxpr != q) continue;
      kir_mesh m;
      kiln_status st = kir_mesh_parse("shard_map", e->params.shard_map.mesh, &m);
      if (!st) st = env_add(env, &m);
      if (st) return st;
    }
  }
  return KILN_OK;
}

kiln_status kir_collective_verify(const kir_program *p, const kir_eqn *e) {
  int64_t size = 0;
  const char *name = kir_collective_axes(e, &size);
  if (!name) return KILN_OK; /* shard_map itself: its rule checked it */
  kir_mesh env;
  kiln_status st = bound_axes(p, &env);
  int n, axes[KIR_MESH_MAX_AXES];
  if (!st) st = kir_axes_parse(kir_prim_name(e->prim), name, &env, &n, axes);
  if (st) return st;
  int64_t want = 1;
  for (int k = 0; k < n; k++) want *= env.size[axes[k]];
  if (want != size)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: axis_size=%lld, but the axes '%s' have %lld devices",
                      kir_prim_name(e->prim), (long long)size, name, (long long)want);
  return KILN_OK;
}
