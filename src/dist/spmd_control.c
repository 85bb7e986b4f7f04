/* Control steps of the lockstep driver: a cond, while or scan whose bodies
 * hold collectives, run by the host thread that drives the mesh. Each of
 * its sub-programs is a plan of its own (spmd_steps.c), run for every
 * device at once per branch taken or per iteration, so each collective
 * inside is one call of the backend's collective per iteration, as at the
 * body's top level. A branch index or a loop predicate is read back to the
 * host (after the collectives queued so far, bounded by the timeout), and
 * every device of the mesh must agree on it: the collectives inside need
 * all their members, and the driver issues them for the whole mesh. A
 * scan's x slices and y slices move as device copies into and out of the
 * stacked arrays. */
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "runtime/runtime.h"

static int eqn_index(const kdist_lock_call *c, const kir_eqn *e) {
  return (int)(e - c->p->body->eqns);
}

/* Every device's scalar (bool or int32) read back; *out is their common
 * value. Devices that disagree fail the call, naming two of them. */
static kiln_status agreed(kdist_lock_call *c, const kir_eqn *e, const char *what, int64_t it,
                          kiln_array *const *vals, int64_t *out) {
  kiln_status st = kdist_lock_sync(c);
  for (int64_t d = 0; !st && d < c->m.n_devices; d++) {
    const kiln_array *a = vals[d];
    unsigned char bytes[8] = {0};
    if ((st = kiln_array_to_host(vals[d], bytes, kiln_dtype_size(a->dtype)))) break;
    int32_t i32;
    memcpy(&i32, bytes, sizeof i32);
    int64_t v = a->dtype == KILN_BOOL ? bytes[0] != 0 : i32;
    if (d == 0) *out = v;
    else if (v != *out)
      st = kcore_fail(KILN_ERR_COLLECTIVE, "shard_map over %s devices: %s (equation %d, "
                      "iteration %lld): device 0 has %lld and device %lld has %lld, and the "
                      "collectives inside run over every device of the mesh, so all must agree",
                      c->ctx->be.device_kind, what, eqn_index(c, e), (long long)it,
                      (long long)*out, (long long)d, (long long)v);
  }
  return st;
}

static void release_all(kiln_array **a, int64_t n) {
  for (int64_t i = 0; a && i < n; i++) kiln_array_release(a[i]), a[i] = NULL;
}

/* Hands results[d * n + k] over to e->out[at + k] (the references move). */
static void set_outs(kdist_lock_call *c, const kir_eqn *e, int at, int n, kiln_array **results) {
  for (int64_t d = 0; d < c->m.n_devices; d++)
    for (int k = 0; k < n; k++) {
      kdist_lock_set(c, d, e->out[at + k], results[d * n + k]);
      results[d * n + k] = NULL;
    }
}

/* list[d * stride + at + k] = device d's value of e->in[from + k] (borrowed). */
static kiln_status gather_ins(kdist_lock_call *c, const kir_eqn *e, int from, int n,
                              kiln_array **list, int stride, int at) {
  kiln_status st = KILN_OK;
  for (int64_t d = 0; !st && d < c->m.n_devices; d++)
    for (int k = 0; !st && k < n; k++)
      st = kdist_lock_value(c, d, e->in[from + k], &list[d * stride + at + k]);
  return st;
}

static kiln_status run_cond(kdist_lock_call *c, const kdist_step *s) {
  const kir_eqn *e = s->e;
  int64_t n = c->m.n_devices;
  int n_ops = e->n_in - 1;
  kiln_array **idx = calloc((size_t)n, sizeof *idx);
  kiln_array **args = calloc((size_t)(n * n_ops) + 1, sizeof *args);
  kiln_array **res = calloc((size_t)(n * e->n_out) + 1, sizeof *res);
  kiln_status st = idx && args && res ? KILN_OK
                                      : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "cond: out of host memory");
  int64_t k = 0;
  if (!st) st = gather_ins(c, e, 0, 1, idx, 1, 0);
  if (!st) st = gather_ins(c, e, 1, n_ops, args, n_ops, 0);
  if (!st) st = agreed(c, e, "cond's branch index", 0, idx, &k);
  /* As XLA's Conditional (and the reference evaluator): out of range runs
   * the last branch. */
  int b = k < 0 || k >= s->n_sub ? s->n_sub - 1 : (int)k;
  if (!st && (st = kdist_lock_run_sub(c, s->sub[b], args, res)))
    kcore_fail_wrap(st, "cond (equation %d) branches[%d]", eqn_index(c, e), b);
  if (!st) set_outs(c, e, 0, e->n_out, res);
  release_all(res, n * e->n_out);
  free(idx), free(args), free(res);
  return st;
}

static kiln_status run_while(kdist_lock_call *c, const kdist_step *s) {
  const kir_eqn *e = s->e;
  const kir_p_while *p = &e->params.while_loop;
  int64_t n = c->m.n_devices;
  int nc = (int)p->cond_nconsts, nb = (int)p->body_nconsts, nk = e->n_out;
  int wc = nc + nk, wb = nb + nk;
  kiln_array **cargs = calloc((size_t)(n * wc) + 1, sizeof *cargs);
  kiln_array **bargs = calloc((size_t)(n * wb) + 1, sizeof *bargs);
  kiln_array **carry = calloc((size_t)(n * nk) + 1, sizeof *carry);
  kiln_array **next = calloc((size_t)(n * nk) + 1, sizeof *next);
  kiln_array **pred = calloc((size_t)n, sizeof *pred);
  kiln_status st = cargs && bargs && carry && next && pred
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "while: out of host memory");
  if (!st) st = gather_ins(c, e, 0, nc, cargs, wc, 0);
  if (!st) st = gather_ins(c, e, nc, nb, bargs, wb, 0);
  if (!st) st = gather_ins(c, e, nc + nb, nk, carry, nk, 0);
  for (int64_t i = 0; !st && i < n * nk; i++) kiln_array_retain(carry[i]);
  for (int64_t it = 0; !st; it++) {
    int64_t go = 0;
    for (int64_t d = 0; d < n; d++)
      for (int k = 0; k < nk; k++) cargs[d * wc + nc + k] = bargs[d * wb + nb + k] = carry[d * nk + k];
    if ((st = kdist_lock_run_sub(c, s->sub[0], cargs, pred))) {
      kcore_fail_wrap(st, "while (equation %d) cond_jaxpr (iteration %lld)", eqn_index(c, e),
                      (long long)it);
      break;
    }
    st = agreed(c, e, "while's predicate", it, pred, &go);
    release_all(pred, n);
    if (st || !go) break;
    if ((st = kdist_lock_run_sub(c, s->sub[1], bargs, next))) {
      kcore_fail_wrap(st, "while (equation %d) body_jaxpr (iteration %lld)", eqn_index(c, e),
                      (long long)it);
      break;
    }
    release_all(carry, n * nk);
    kiln_array **t = carry;
    carry = next, next = t;
  }
  if (!st) set_outs(c, e, 0, nk, carry);
  release_all(carry, n * nk), release_all(next, n * nk), release_all(pred, n);
  free(cargs), free(bargs), free(carry), free(next), free(pred);
  return st;
}

/* nbytes from src at src_off to dst at dst_off, as a device copy between
 * views of the two buffers; the view's completion marker carries over to
 * dst's buffer (as kdev_gather's pieces). */
static kiln_status copy_part(kiln_array *dst, size_t dst_off, const kiln_array *src, size_t src_off,
                             size_t nbytes) {
  if (!nbytes) return KILN_OK;
  kdev_buffer dv = dst->buf, sv = src->buf;
  dv.ptr += dst_off, dv.nbytes = nbytes;
  sv.ptr += src_off, sv.nbytes = nbytes;
  kiln_device *dd = dst->device;
  kiln_status st = dd->ops->copy(dd, &dv, src->device, &sv, nbytes);
  if (!st && (!dst->buf.ready || dst->buf.ready == dv.ready))
    dst->buf.ready = dv.ready, dst->buf.ready_on = dv.ready_on;
  return st;
}

static size_t aval_bytes(const kir_aval *a) {
  return (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
}

static kiln_status run_scan(kdist_lock_call *c, const kdist_step *s) {
  const kir_eqn *e = s->e;
  const kir_p_scan *p = &e->params.scan;
  const kir_program *body = s->sub[0]->body;
  int64_t n = c->m.n_devices, len = p->length;
  int nC = (int)p->num_consts, nK = (int)p->num_carry, nX = e->n_in - nC - nK, nY = e->n_out - nK;
  int w = nC + nK + nX, wr = nK + nY;
  kiln_array **args = calloc((size_t)(n * w) + 1, sizeof *args);
  kiln_array **xs = calloc((size_t)(n * nX) + 1, sizeof *xs);
  kiln_array **xsl = calloc((size_t)(n * nX) + 1, sizeof *xsl);
  kiln_array **carry = calloc((size_t)(n * nK) + 1, sizeof *carry);
  kiln_array **res = calloc((size_t)(n * wr) + 1, sizeof *res);
  kiln_array **out = calloc((size_t)(n * wr) + 1, sizeof *out); /* carry, then ys */
  kiln_status st = args && xs && xsl && carry && res && out
                       ? KILN_OK
                       : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "scan: out of host memory");
  if (!st) st = gather_ins(c, e, 0, nC, args, w, 0);
  if (!st) st = gather_ins(c, e, nC, nK, carry, nK, 0);
  if (!st) st = gather_ins(c, e, nC + nK, nX, xs, nX, 0);
  for (int64_t i = 0; !st && i < n * nK; i++) kiln_array_retain(carry[i]);
  for (int64_t d = 0; !st && d < n; d++) /* the stacked ys, filled slice by slice */
    for (int j = 0; !st && j < nY; j++) {
      const kir_aval *o = kir_var_aval(c->p->body, e->out[nK + j]);
      st = kdev_array_alloc("scan", &c->ctx->be.devices[d], o->dtype, o->rank, o->shape,
                            &out[d * wr + nK + j]);
    }
  for (int64_t it = 0; !st && it < len; it++) {
    int64_t i = p->reverse ? len - 1 - it : it;
    for (int64_t d = 0; !st && d < n; d++) {
      for (int k = 0; k < nK; k++) args[d * w + nC + k] = carry[d * nK + k];
      for (int k = 0; !st && k < nX; k++) {
        const kir_aval *a = kir_var_aval(body, body->invars[nC + nK + k]);
        kiln_array **x = &xsl[d * nX + k];
        size_t nbytes = aval_bytes(a);
        if (!(st = kdev_array_alloc("scan", &c->ctx->be.devices[d], a->dtype, a->rank, a->shape, x)))
          st = copy_part(*x, 0, xs[d * nX + k], (size_t)i * nbytes, nbytes);
        args[d * w + nC + nK + k] = *x;
      }
    }
    if (!st && (st = kdist_lock_run_sub(c, s->sub[0], args, res)))
      kcore_fail_wrap(st, "scan (equation %d) body (iteration %lld)", eqn_index(c, e), (long long)i);
    release_all(xsl, n * nX);
    for (int64_t d = 0; !st && d < n; d++)
      for (int j = 0; !st && j < nY; j++) {
        kiln_array *y = res[d * wr + nK + j];
        size_t nbytes = aval_bytes(kir_var_aval(body, body->outvars[nK + j]));
        st = copy_part(out[d * wr + nK + j], (size_t)i * nbytes, y, 0, nbytes);
      }
    if (st) break;
    release_all(carry, n * nK);
    for (int64_t d = 0; d < n; d++)
      for (int k = 0; k < nK; k++) carry[d * nK + k] = res[d * wr + k], res[d * wr + k] = NULL;
    release_all(res, n * wr);
  }
  for (int64_t d = 0; !st && d < n; d++)
    for (int k = 0; k < nK; k++) out[d * wr + k] = carry[d * nK + k], carry[d * nK + k] = NULL;
  if (!st) set_outs(c, e, 0, wr, out);
  release_all(carry, n * nK), release_all(res, n * wr), release_all(out, n * wr);
  release_all(xsl, n * nX);
  free(args), free(xs), free(xsl), free(carry), free(res), free(out);
  return st;
}

kiln_status kdist_control_run(kdist_lock_call *c, const kdist_step *s) {
  switch (s->e->prim) {
    case KIR_PRIM_COND: return run_cond(c, s);
    case KIR_PRIM_WHILE: return run_while(c, s);
    case KIR_PRIM_SCAN: return run_scan(c, s);
    default:
      return kcore_fail(KILN_ERR_INTERNAL, "shard_map: %s is no control step",
                        kir_prim_name(s->e->prim));
  }
}
