/* A CPU shard_map call's frame: each device's run and buffers (views of
 * the global values where a shard is one run of them, else memory of the
 * frame's own; all its own when fenced), the call's rendezvous groups, the
 * host callbacks as the call began, and the call's error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"

void kdist_frame_free(kdist_frame *f) {
  if (!f) return;
  for (size_t k = 0; f->own && k < (size_t)f->run.n * f->nio; k++) free(f->own[k]);
  kdist_groups_free(&f->run);
  free(f->specs), free(f->devs), free(f->bufs), free(f->own), free(f->left), free(f->hosts.v);
  free(f);
}

kiln_status kdist_frame_new(const kir_p_shard_map *p, struct kdist_spmd_state *state,
                            kdev_backend *be, double timeout_s, bool fenced, kdist_frame **out) {
  const kir_program *body = p->jaxpr;
  kdist_frame *f = calloc(1, sizeof *f);
  if (!f) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  kiln_status st = kir_mesh_parse("shard_map", p->mesh, &f->run.m);
  f->run.n = f->run.m.n_devices;
  f->run.timeout_s = timeout_s;
  f->run.coll = be ? be->coll : NULL;
  f->state = state, f->fenced = fenced;
  f->nio = (size_t)(body->n_invars + body->n_outvars);
  size_t cells = (size_t)f->run.n * f->nio + 1;
  if (!st && (!(f->specs = calloc(f->nio + 1, sizeof *f->specs)) ||
              !(f->devs = calloc((size_t)f->run.n, sizeof *f->devs)) ||
              !(f->bufs = calloc(cells, sizeof *f->bufs)) || !(f->own = calloc(cells, sizeof *f->own)) ||
              !(f->left = calloc((size_t)f->run.n, sizeof *f->left))))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  if (!st) st = kir_specs_parse("shard_map", p->in_specs, &f->run.m, body->n_invars, f->specs);
  if (!st) st = kir_specs_parse("shard_map", p->out_specs, &f->run.m, body->n_outvars, f->specs + body->n_invars);
  if (!st) st = kdist_groups_build(&f->run, be, body);
  for (int64_t d = 0; !st && d < f->run.n; d++) {
    kdist_device_run *dr = &f->devs[d];
    dr->run = &f->run, dr->d = d, dr->body = body;
    dr->in = f->bufs + (size_t)d * f->nio, dr->out = dr->in + body->n_invars;
    kir_mesh_coords(&f->run.m, d, dr->coord);
    for (size_t k = 0; k < f->nio; k++) {
      kir_vid v = k < (size_t)body->n_invars ? body->invars[k] : body->outvars[k - body->n_invars];
      kir_buffer *b = &dr->in[k];
      b->aval = *kir_var_aval(body, v);
      b->nbytes = (size_t)kir_aval_size(&b->aval) * kiln_dtype_size(b->aval.dtype);
    }
  }
  if (st) kdist_frame_free(f);
  *out = st ? NULL : f;
  return st;
}

static bool overlaps(const kir_buffer *a, const kir_buffer *b) {
  const char *pa = a->data, *pb = b->data;
  return pa && pb && pa < pb + b->nbytes && pb < pa + a->nbytes;
}

kiln_status kdist_frame_bind(kdist_frame *f, int64_t d, size_t k, const kir_buffer *g,
                             const kir_buffer *in, int n_in) {
  kdist_device_run *dr = &f->devs[d];
  kir_buffer *b = &dr->in[k];
  const kir_spec *spec = &f->specs[k];
  bool result = k >= (size_t)n_in;
  bool view = !f->fenced && (!result || kir_shard_writes_back(&f->run.m, dr->coord, spec));
  for (int i = 0; view && result && i < n_in; i++) view = !overlaps(g, &in[i]);
  if (view && kdist_shard_view(&f->run.m, dr->coord, spec, g, &b->aval, &b->data)) return KILN_OK;
  void **own = &f->own[(size_t)d * f->nio + k];
  if (!*own && !(*own = malloc(b->nbytes + 1)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  b->data = *own;
  if (!result) kir_shard_copy(&f->run.m, dr->coord, spec, g, b, false);
  return KILN_OK;
}

kiln_status kdist_frame_error(kdist_frame *f, const kir_eqn *e, int64_t stuck) {
  const char *mesh = e->params.shard_map.mesh;
  const kdist_device_run *first = NULL;
  for (int pass = 0; !first && pass < 2; pass++)
    for (int64_t d = 0; !first && d < f->run.n; d++)
      if (!f->left[d] && f->devs[d].st && (pass || f->devs[d].st != KILN_ERR_COLLECTIVE))
        first = &f->devs[d];
  if (stuck < 0) return first ? kcore_fail(first->st, "shard_map over %s: %s", mesh, first->msg) : KILN_OK;
  bool all_left = true;
  for (int64_t d = 0; d < f->run.n; d++) all_left &= f->left[d];
  if (first) snprintf(f->why, sizeof f->why, "%s", first->msg);
  else if (all_left)
    snprintf(f->why, sizeof f->why, "no device made progress for %g s (every one stuck in a "
             "host callback, a kernel or BLAS?)", f->run.timeout_s);
  else snprintf(f->why, sizeof f->why, "device %lld did not finish within %g s of the others "
                "(stuck in a host callback, a kernel or BLAS?)", (long long)stuck, f->run.timeout_s);
  char list[256] = "";
  size_t len = 0;
  int n_left = 0;
  for (int64_t d = 0; d < f->run.n; d++)
    if (f->left[d] && len < sizeof list - 24)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", n_left++ ? ", " : "", (long long)d);
  return kcore_fail(KILN_ERR_COLLECTIVE, "shard_map over %s: %s; device%s %s %s stuck and %s "
                    "abandoned (left running, detached): this context's multi-device calls fail "
                    "from now on", mesh, f->why, n_left > 1 ? "s" : "", list,
                    n_left > 1 ? "are" : "is", n_left > 1 ? "were" : "was");
}

kiln_status kdist_frame_fence(kdist_frame *f, int n_in, void *const *local, bool out) {
  for (int64_t d = 0; d < f->run.n; d++)
    for (size_t k = out ? (size_t)n_in : 0; k < (out ? f->nio : (size_t)n_in); k++) {
      size_t i = (size_t)d * f->nio + k;
      kir_buffer *b = &f->bufs[i];
      if (!out && !f->own[i] && !(f->own[i] = malloc(b->nbytes + 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
      if (out) memcpy(local[i], f->own[i], b->nbytes);
      else memcpy(f->own[i], local[i], b->nbytes), b->data = f->own[i];
    }
  for (int64_t d = 0; !out && d < f->run.n; d++) /* results: made before any is copied out */
    for (size_t k = (size_t)n_in; k < f->nio; k++) {
      size_t i = (size_t)d * f->nio + k;
      if (!f->own[i] && !(f->own[i] = malloc(f->bufs[i].nbytes + 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
      f->bufs[i].data = f->own[i];
    }
  return KILN_OK;
}

kiln_status kdist_frame_hosts(kdist_frame *f, const ktr_host_table *h) {
  int n = h ? h->n : 0;
  if (n > f->hosts.cap) {
    ktr_host_fn *v = realloc(f->hosts.v, (size_t)n * sizeof *v);
    if (!v) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
    f->hosts.v = v, f->hosts.cap = n;
  }
  if (n) memcpy(f->hosts.v, h->v, (size_t)n * sizeof *h->v);
  f->hosts.n = n;
  return KILN_OK;
}
