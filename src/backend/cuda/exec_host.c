/* Host steps of the CUDA executor: the groups no kernel or matmul runs.
 * Their inputs come down, the reference evaluators run, their outputs go
 * back up. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"
#include "codegen/codegen.h"
#include "fuse/fuse.h"

/* ---- host steps ---- */

typedef struct kcuda_x_host_view {
  const kir_program *p;
  void **data; /* per var: its host copy */
} kcuda_x_host_view;

static void *kcuda_x_host_addr(void *user, kir_vid v) {
  return ((kcuda_x_host_view *)user)->data[v];
}

size_t kcuda_x_var_bytes(const kir_program *p, kir_vid v) {
  const kir_aval *a = kir_var_aval(p, v);
  return (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
}

/* Host copies of the values group g reads (constants in place) and room
 * for the values it writes. */
static kiln_status kcuda_x_host_fetch(const kcuda_x_call *r, const kfuse_group *g,
                                      kcuda_x_host_view *h, bool *owned) {
  kiln_status st = KILN_OK;
  const kcuda_device *d = r->d;
  for (int pass = 0; pass < 2; pass++) {
    int n = pass ? g->n_out : g->n_in;
    const kir_vid *vs = pass ? g->out : g->in;
    for (int i = 0; i < n; i++) {
      kir_vid v = vs[i];
      if (h->data[v]) continue;
      if (!pass && r->x->plan->places[v].home == KFUSE_HOME_CONST) {
        h->data[v] = r->x->consts.data[v];
        continue;
      }
      size_t nb = kcuda_x_var_bytes(h->p, v);
      if (!(h->data[v] = malloc(nb ? nb : 1)))
        return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory for %zu bytes", nb);
      owned[v] = true;
      if (!pass && nb)
        KCUDA_CU(d->drv, d->where, cuMemcpyDtoHAsync,
                 (h->data[v], kcuda_x_addr(r, v), nb, d->compute), out);
    }
  }
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
out:
  return st;
}

static kiln_status kcuda_x_host_store(const kcuda_x_call *r, const kfuse_group *g,
                                      kcuda_x_host_view *h) {
  kiln_status st = KILN_OK;
  const kcuda_device *d = r->d;
  for (int i = 0; i < g->n_out; i++) {
    size_t nb = kcuda_x_var_bytes(h->p, g->out[i]);
    CUdeviceptr to = kcuda_x_addr(r, g->out[i]);
    if (nb && to)
      KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, (to, h->data[g->out[i]], nb, d->compute), out);
  }
  /* The host copies are freed next: the uploads must have read them. */
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->compute), out);
out:
  return st;
}

/* A group on the host: waits for its inputs, evaluates, uploads. */
kiln_status kcuda_step_host(const kcuda_x_call *r, const kcuda_step *s) {
  const kir_program *p = r->x->prog;
  size_t n = (size_t)(p->n_vars ? p->n_vars : 1);
  kcuda_x_host_view h = {p, calloc(n, sizeof(void *))};
  bool *owned = calloc(n, sizeof *owned);
  kiln_status st = !h.data || !owned
                       ? kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory")
                       : kcuda_x_host_fetch(r, s->g, &h, owned);
  kir_eval_env env;
  env = r->x->env;
  if (!st) st = kfuse_eval_group(p, r->x->plan, s->g, &env, kcuda_x_host_addr, &h);
  if (!st) st = kcuda_x_host_store(r, s->g, &h);
  for (size_t v = 0; owned && v < n; v++)
    if (owned[v]) free(h.data[v]);
  free(h.data);
  free(owned);
  return st;
}

