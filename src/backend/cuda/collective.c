/* Collectives over CUDA devices through NCCL (see cuda_backend.h).
 *
 * One host thread drives every device of a mesh, so each collective is one
 * ncclGroupStart/End holding every device's call (NCCL requires that grouping
 * when one thread drives several ranks, or the first call would wait for the
 * others forever). Each device has its own collective stream: it waits for
 * what the compute stream has queued (the inputs' producers, the outputs'
 * allocations), and the compute stream waits for it in turn, so later kernels
 * and stream-ordered frees see the results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cuda/cuda_backend.h"

typedef struct coll_dev {
  kiln_device *dev;
  kcuda_device *d;
  CUstream stream; /* NCCL's work on this device */
  CUevent done;    /* recorded after the device's last queued collective */
  bool pending;    /* done recorded and not yet seen complete */
} coll_dev;

struct kcuda_coll_group {
  kcuda_coll_mesh *m;
  char axis[64];
  int size;        /* ranks per group */
  int *color, *rank; /* per device */
  int *member;     /* member[color * size + rank]: the device index */
  ncclComm_t *comms; /* per device; the root's when the group is the whole mesh */
  bool owns_comms;
  struct kcuda_coll_group *next;
};

struct kcuda_coll_mesh {
  const kcuda_nccl *nc;
  int n;
  double timeout_s;
  coll_dev *devs;
  ncclComm_t *root; /* ncclCommInitAll over every device; NULL entries until first use */
  bool root_ready;
  kcuda_coll_group *groups;
  kiln_status broken; /* after an abort: every collective fails with broken_msg */
  char broken_msg[1024];
  char last[384]; /* the last queued collective, for a timeout's message */
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

kiln_status kcuda_coll_mesh_new(const kcuda_nccl *nc, kiln_device *const *devices, int n,
                                double timeout_s, kcuda_coll_mesh **out) {
  if (!nc || !devices || n < 1 || !out)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcuda_coll_mesh_new: invalid argument (n=%d)", n);
  *out = NULL;
  for (int i = 0; i < n; i++) {
    if (!devices[i] || devices[i]->backend->kind != KILN_BACKEND_CUDA)
      return kcore_fail(KILN_ERR_WRONG_DEVICE, "NCCL collectives: device %d of the mesh is not a CUDA device", i);
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return kcore_fail(KILN_ERR_ARGUMENT, "NCCL collectives: %s is listed twice in the mesh",
                          kcuda_impl(devices[i])->where);
  }
  kcuda_coll_mesh *m = calloc(1, sizeof *m);
  coll_dev *devs = calloc((size_t)n, sizeof *devs);
  ncclComm_t *root = calloc((size_t)n, sizeof *root);
  if (!m || !devs || !root) {
    free(m), free(devs), free(root);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL collectives: out of host memory");
  }
  m->nc = nc, m->n = n, m->devs = devs, m->root = root;
  m->timeout_s = timeout_s > 0 ? timeout_s : KCUDA_COLL_DEFAULT_TIMEOUT_S;
  kiln_status st = KILN_OK;
  for (int i = 0; i < n && !st; i++) {
    coll_dev *c = &devs[i];
    c->dev = devices[i], c->d = kcuda_impl(devices[i]);
    if ((st = kcuda_enter(c->d))) break;
    KCUDA_CU(c->d->drv, c->d->where, cuStreamCreate, (&c->stream, CU_STREAM_NON_BLOCKING), left);
    KCUDA_CU(c->d->drv, c->d->where, cuEventCreate, (&c->done, CU_EVENT_DISABLE_TIMING), left);
  left:
    kcuda_leave(c->d);
  }
  if (st) {
    kcuda_coll_mesh_free(m);
    return st;
  }
  *out = m;
  return KILN_OK;
}

/* Every communicator of the mesh, for polling and aborting: calls fn on
 * each live one (the root last, as groups are split from it). */
static void each_comm(kcuda_coll_mesh *m, void (*fn)(kcuda_coll_mesh *, ncclComm_t *, void *),
                      void *user) {
  for (kcuda_coll_group *g = m->groups; g; g = g->next)
    for (int i = 0; g->owns_comms && i < m->n; i++)
      if (g->comms[i]) fn(m, &g->comms[i], user);
  for (int i = 0; i < m->n; i++)
    if (m->root[i]) fn(m, &m->root[i], user);
}

static void comm_destroy(kcuda_coll_mesh *m, ncclComm_t *c, void *user) {
  (void)user;
  ncclResult_t rc = m->nc->ncclCommDestroy(*c);
  if (rc != ncclSuccess)
    kcore_log(m->devs[0].d->log_level, KILN_LOG_WARN, "ncclCommDestroy failed: %s",
              m->nc->ncclGetErrorString(rc));
  *c = NULL;
}

static void comm_abort(kcuda_coll_mesh *m, ncclComm_t *c, void *user) {
  (void)user;
  m->nc->ncclCommAbort(*c); /* tears down whatever it can; nothing to report on top */
  *c = NULL;
}

static void comm_poll(kcuda_coll_mesh *m, ncclComm_t *c, void *user) {
  ncclResult_t *first = user, e = ncclSuccess;
  if (*first != ncclSuccess) return;
  ncclResult_t rc = m->nc->ncclCommGetAsyncError(*c, &e);
  if (rc != ncclSuccess) e = rc;
  if (e != ncclSuccess && e != ncclInProgress) *first = e;
}

/* Aborts every communicator and breaks the mesh with the message set now. */
static kiln_status mesh_abort(kcuda_coll_mesh *m, kiln_status st) {
  snprintf(m->broken_msg, sizeof m->broken_msg, "%s; every NCCL communicator of the mesh was "
           "aborted (collectives over it now fail; the devices stay usable)", kiln_last_error());
  m->broken = KILN_ERR_COLLECTIVE;
  kcuda_enter(m->devs[0].d); /* NCCL may switch the thread's device: keep kiln's stack balanced */
  each_comm(m, comm_abort, NULL);
  kcuda_leave(m->devs[0].d);
  for (int i = 0; i < m->n; i++) m->devs[i].pending = false; /* aborted work ends by itself */
  return kcore_fail(st, "%s", m->broken_msg);
}

void kcuda_coll_mesh_free(kcuda_coll_mesh *m) {
  if (!m) return;
  if (!m->broken && kcuda_coll_wait(m))
    kcore_log(m->devs[0].d ? m->devs[0].d->log_level : KILN_LOG_WARN, KILN_LOG_WARN,
              "freeing a collective mesh: %s", kiln_last_error());
  if (m->devs[0].d) {
    kcuda_enter(m->devs[0].d);
    each_comm(m, comm_destroy, NULL);
    kcuda_leave(m->devs[0].d);
  }
  for (kcuda_coll_group *g = m->groups, *next; g; g = next) {
    next = g->next;
    free(g->color), free(g->rank), free(g->member);
    if (g->owns_comms) free(g->comms);
    free(g);
  }
  for (int i = 0; i < m->n; i++) {
    coll_dev *c = &m->devs[i];
    if (!c->d || kcuda_enter(c->d)) continue;
    if (c->done) c->d->drv->cuEventDestroy(c->done);
    if (c->stream) c->d->drv->cuStreamDestroy(c->stream);
    kcuda_leave(c->d);
  }
  free(m->devs), free(m->root);
  free(m);
}

static kiln_status root_ready(kcuda_coll_mesh *m) {
  if (m->root_ready) return KILN_OK;
  int *ordinals = malloc((size_t)m->n * sizeof *ordinals);
  if (!ordinals) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL collectives: out of host memory");
  for (int i = 0; i < m->n; i++) ordinals[i] = m->devs[i].d->ordinal;
  kiln_status st = kcuda_enter(m->devs[0].d);
  if (!st) {
    KCUDA_NCCL(m->nc, "NCCL collectives", ncclCommInitAll, (m->root, m->n, ordinals), out);
  out:
    kcuda_leave(m->devs[0].d);
  }
  free(ordinals);
  if (st) memset(m->root, 0, (size_t)m->n * sizeof *m->root);
  m->root_ready = !st;
  return st;
}

/* The partition must give every group the ranks 0..size-1 once each. */
static kiln_status group_check(const kcuda_coll_mesh *m, kcuda_coll_group *g) {
  int ngroups = m->n / g->size;
  if (g->size < 1 || m->n % g->size)
    return kcore_fail(KILN_ERR_ARGUMENT, "axis '%s': groups of %d do not divide %d devices", g->axis,
                      g->size, m->n);
  for (int i = 0; i < ngroups * g->size; i++) g->member[i] = -1;
  for (int i = 0; i < m->n; i++) {
    int c = g->color[i], r = g->rank[i];
    if (c < 0 || c >= ngroups || r < 0 || r >= g->size || g->member[c * g->size + r] >= 0)
      return kcore_fail(KILN_ERR_ARGUMENT, "axis '%s': device %d is rank %d of group %d, which is "
                        "no partition into %d groups of %d", g->axis, i, r, c, ngroups, g->size);
    g->member[c * g->size + r] = i;
  }
  return KILN_OK;
}

static kiln_status group_make(kcuda_coll_mesh *m, kcuda_coll_group *g) {
  bool whole = true;
  for (int i = 0; i < m->n; i++) whole &= g->color[i] == 0 && g->rank[i] == i;
  kiln_status st = root_ready(m);
  if (st) return st;
  if (whole) {
    g->comms = m->root;
    return KILN_OK;
  }
  if (!(g->comms = calloc((size_t)m->n, sizeof *g->comms)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL collectives: out of host memory");
  g->owns_comms = true;
  if ((st = kcuda_enter(m->devs[0].d))) return st;
  /* ncclCommSplit is collective over the root: every device's call in one group. */
  KCUDA_NCCL(m->nc, g->axis, ncclGroupStart, (), out);
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < m->n && first == ncclSuccess; i++)
    first = m->nc->ncclCommSplit(m->root[i], g->color[i], g->rank[i], &g->comms[i], NULL);
  ncclResult_t end = m->nc->ncclGroupEnd(); /* closes the group even after a failure */
  if (first != ncclSuccess) st = kcuda_nccl_table_fail(m->nc, first, "ncclCommSplit", g->axis);
  else if (end != ncclSuccess) st = kcuda_nccl_table_fail(m->nc, end, "ncclGroupEnd()", g->axis);
out:
  kcuda_leave(m->devs[0].d);
  if (st) memset(g->comms, 0, (size_t)m->n * sizeof *g->comms);
  return st;
}

kiln_status kcuda_coll_group_get(kcuda_coll_mesh *m, const char *axis, const int *color,
                                 const int *rank, kcuda_coll_group **out) {
  if (!m || !axis || !out || !color != !rank)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcuda_coll_group_get: invalid argument");
  if (m->broken) return kcore_fail(m->broken, "%s", m->broken_msg);
  for (kcuda_coll_group *g = m->groups; g; g = g->next) {
    if (strcmp(g->axis, axis)) continue;
    for (int i = 0; color && i < m->n; i++)
      if (g->color[i] != color[i] || g->rank[i] != rank[i])
        return kcore_fail(KILN_ERR_ARGUMENT, "axis '%s' was first used with another partition of the mesh", axis);
    *out = g;
    return KILN_OK;
  }
  kcuda_coll_group *g = calloc(1, sizeof *g);
  if (g) {
    g->color = calloc((size_t)m->n, sizeof *g->color);
    g->rank = calloc((size_t)m->n, sizeof *g->rank);
    g->member = calloc((size_t)m->n, sizeof *g->member);
  }
  if (!g || !g->color || !g->rank || !g->member) {
    if (g) free(g->color), free(g->rank), free(g->member);
    free(g);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL collectives: out of host memory");
  }
  snprintf(g->axis, sizeof g->axis, "%s", axis);
  g->m = m;
  int ngroups = 0;
  for (int i = 0; i < m->n; i++) {
    g->color[i] = color ? color[i] : 0, g->rank[i] = rank ? rank[i] : i;
    ngroups = g->color[i] + 1 > ngroups ? g->color[i] + 1 : ngroups;
  }
  g->size = ngroups > 0 ? m->n / ngroups : 0;
  kiln_status st = group_check(m, g);
  if (!st) st = group_make(m, g);
  if (st) {
    free(g->color), free(g->rank), free(g->member);
    if (g->owns_comms) free(g->comms);
    free(g);
    return st;
  }
  g->next = m->groups;
  m->groups = g;
  *out = g;
  return KILN_OK;
}

int kcuda_coll_group_size(const kcuda_coll_group *g) { return g ? g->size : 0; }

int kcuda_coll_mesh_devices(const kcuda_coll_group *g, kiln_device **out) {
  for (int i = 0; out && i < g->m->n; i++) out[i] = g->m->devs[i].dev;
  return g->m->n;
}

/* ---- one collective ---- */

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, PPERMUTE } coll_kind;

typedef struct coll_call {
  coll_kind kind;
  const char *name;
  kiln_dtype dtype;
  int64_t count;
  kcuda_coll_reduce op;
  int npairs;
  const int (*pairs)[2];
} coll_call;

/* NCCL's type for d in call kind k: booleans (one byte) only move, as
 * bytes (the CPU engine moves them too). */
static bool nccl_dtype(kiln_dtype d, int k, ncclDataType_t *out) {
  switch (d) {
    case KILN_BOOL: *out = ncclUint8; return k != ALL_REDUCE && k != REDUCE_SCATTER;
    case KILN_I8: *out = ncclInt8; return true;
    case KILN_U8: *out = ncclUint8; return true;
    case KILN_I32: *out = ncclInt32; return true;
    case KILN_U32: *out = ncclUint32; return true;
    case KILN_I64: *out = ncclInt64; return true;
    case KILN_U64: *out = ncclUint64; return true;
    case KILN_F16: *out = ncclFloat16; return true;
    case KILN_BF16: *out = ncclBfloat16; return true;
    case KILN_F32: *out = ncclFloat32; return true;
    case KILN_F64: *out = ncclFloat64; return true;
    default: return false;
  }
}

static const char *reduce_name(kcuda_coll_reduce op) {
  return op == KCUDA_COLL_SUM ? "psum" : op == KCUDA_COLL_MAX ? "pmax" : "pmin";
}

static void describe(const kcuda_coll_group *g, const coll_call *c, char *buf, size_t cap) {
  snprintf(buf, cap, "%s over axis '%s' (%s[%lld] per device, %d devices in groups of %d)", c->name,
           g->axis, kiln_dtype_short_name(c->dtype), (long long)c->count, g->m->n, g->size);
}

/* Elements of in and out per device. */
static void call_extent(const kcuda_coll_group *g, const coll_call *c, int64_t *in, int64_t *out) {
  *in = c->count;
  *out = c->kind == ALL_GATHER ? c->count * g->size : c->kind == REDUCE_SCATTER ? c->count / g->size : c->count;
}

static kiln_status call_check(const kcuda_coll_group *g, const coll_call *c, const char *what,
                              kdev_buffer *const *in, kdev_buffer *const *out) {
  if (g->m->broken) return kcore_fail(g->m->broken, "%s: %s", what, g->m->broken_msg);
  ncclDataType_t t;
  if (!nccl_dtype(c->dtype, c->kind, &t))
    return kcore_fail(KILN_ERR_DTYPE, "%s: NCCL has no type for dtype %s", what, kiln_dtype_name(c->dtype));
  if (c->count < 0 || ((c->kind == REDUCE_SCATTER || c->kind == ALL_TO_ALL) && c->count % g->size))
    return kcore_fail(KILN_ERR_SHAPE, "%s: %lld elements do not divide over %d ranks", what,
                      (long long)c->count, g->size);
  int64_t nin, nout;
  call_extent(g, c, &nin, &nout);
  size_t es = kiln_dtype_size(c->dtype);
  for (int i = 0; i < g->m->n; i++) {
    const char *where = g->m->devs[i].d->where;
    if (!in || !out || !in[i] || !out[i])
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: no buffer for %s", what, where);
    if (in[i]->nbytes < (size_t)nin * es || out[i]->nbytes < (size_t)nout * es)
      return kcore_fail(KILN_ERR_SHAPE, "%s: on %s the input holds %zu bytes and the output %zu, "
                        "it needs %lld and %lld", what, where, in[i]->nbytes, out[i]->nbytes,
                        (long long)nin * (long long)es, (long long)nout * (long long)es);
    if ((c->kind == ALL_TO_ALL || c->kind == PPERMUTE) && in[i]->ptr == out[i]->ptr && nin)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: on %s the output aliases the input, which "
                        "point-to-point transfers cannot do in place", what, where);
  }
  for (int i = 0; c->kind == PPERMUTE && i < c->npairs; i++) {
    bool bad = c->pairs[i][0] < 0 || c->pairs[i][1] < 0 || c->pairs[i][0] >= g->size || c->pairs[i][1] >= g->size;
    for (int j = 0; j < i; j++) bad |= c->pairs[i][0] == c->pairs[j][0] || c->pairs[i][1] == c->pairs[j][1];
    if (bad)
      return kcore_fail(KILN_ERR_ARGUMENT, "%s: pair %d (%d, %d) makes the pairs no partial "
                        "permutation of %d ranks", what, i, c->pairs[i][0], c->pairs[i][1], g->size);
  }
  return KILN_OK;
}

/* Device i's NCCL calls for c (inside the group). */
static ncclResult_t enqueue(const kcuda_coll_group *g, const coll_call *c, int i, const void *in,
                            void *out, bool *receives) {
  const kcuda_nccl *nc = g->m->nc;
  ncclComm_t comm = g->comms[i];
  CUstream s = g->m->devs[i].stream;
  ncclDataType_t t;
  nccl_dtype(c->dtype, c->kind, &t);
  ncclRedOp_t op = c->op == KCUDA_COLL_SUM ? ncclSum : c->op == KCUDA_COLL_MAX ? ncclMax : ncclMin;
  size_t n = (size_t)c->count, es = kiln_dtype_size(c->dtype);
  ncclResult_t rc = ncclSuccess;
  *receives = true;
  switch (c->kind) {
    case ALL_REDUCE: return nc->ncclAllReduce(in, out, n, t, op, comm, s);
    case ALL_GATHER: return nc->ncclAllGather(in, out, n, t, comm, s);
    case REDUCE_SCATTER: return nc->ncclReduceScatter(in, out, n / (size_t)g->size, t, ncclSum, comm, s);
    case ALL_TO_ALL: {
      size_t block = n / (size_t)g->size;
      for (int j = 0; j < g->size && rc == ncclSuccess; j++) {
        rc = nc->ncclSend((const char *)in + (size_t)j * block * es, block, t, j, comm, s);
        if (rc == ncclSuccess) rc = nc->ncclRecv((char *)out + (size_t)j * block * es, block, t, j, comm, s);
      }
      return rc;
    }
    case PPERMUTE:
      *receives = false;
      for (int p = 0; p < c->npairs && rc == ncclSuccess; p++) {
        if (c->pairs[p][0] == g->rank[i]) rc = nc->ncclSend(in, n, t, c->pairs[p][1], comm, s);
        if (c->pairs[p][1] == g->rank[i] && rc == ncclSuccess) {
          rc = nc->ncclRecv(out, n, t, c->pairs[p][0], comm, s);
          *receives = true;
        }
      }
      return rc;
  }
  return ncclInvalidArgument;
}

/* Orders every device's collective stream after its compute stream. */
static kiln_status order_before(kcuda_coll_mesh *m, kdev_buffer *const *in, kdev_buffer *const *out) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < m->n && !st; i++) {
    coll_dev *c = &m->devs[i];
    if ((st = kcuda_enter(c->d))) break;
    if (!(st = kcuda_trail_settle(c->d)) && !(st = kcuda_after_compute(c->d, c->stream)) &&
        !(st = kcuda_after_ready(c->d, c->stream, in[i])))
      st = kcuda_after_ready(c->d, c->stream, out[i]);
    kcuda_leave(c->d);
  }
  return st;
}

/* Zeros outputs that receive nothing, then orders each compute stream
 * after the collective stream and marks the outputs written. */
static kiln_status order_after(kcuda_coll_mesh *m, kdev_buffer *const *out, const bool *receives,
                               size_t out_bytes) {
  kiln_status st = KILN_OK;
  for (int i = 0; i < m->n && !st; i++) {
    coll_dev *c = &m->devs[i];
    const kcuda_driver *drv = c->d->drv;
    if ((st = kcuda_enter(c->d))) break;
    if (!receives[i] && out_bytes)
      KCUDA_CU(drv, c->d->where, cuMemsetD8Async, ((CUdeviceptr)out[i]->ptr, 0, out_bytes, c->stream), left);
    KCUDA_CU(drv, c->d->where, cuEventRecord, (c->done, c->stream), left);
    KCUDA_CU(drv, c->d->where, cuStreamWaitEvent, (c->d->compute, c->done, 0), left);
    c->pending = true;
    st = kcuda_mark_ready(c->d, out[i], c->stream);
  left:
    kcuda_leave(c->d);
  }
  return st;
}

static kiln_status coll_run(kcuda_coll_group *g, const coll_call *c, kdev_buffer *const *in,
                            kdev_buffer *const *out) {
  char what[256];
  describe(g, c, what, sizeof what);
  kiln_status st = call_check(g, c, what, in, out);
  if (st) return st;
  kcuda_coll_mesh *m = g->m;
  int64_t nin, nout;
  call_extent(g, c, &nin, &nout);
  bool *receives = calloc((size_t)m->n, sizeof *receives);
  if (!receives) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  if ((st = order_before(m, in, out))) goto done;
  if ((st = kcuda_enter(m->devs[0].d))) goto done;
  KCUDA_NCCL(m->nc, what, ncclGroupStart, (), left);
  ncclResult_t first = ncclSuccess;
  int failed = -1;
  for (int i = 0; i < m->n && first == ncclSuccess; i++)
    if ((first = enqueue(g, c, i, (const void *)in[i]->ptr, (void *)out[i]->ptr, &receives[i])) != ncclSuccess)
      failed = i;
  ncclResult_t end = m->nc->ncclGroupEnd(); /* always closes the group, even after a failure */
  if (first != ncclSuccess) {
    st = kcuda_nccl_table_fail(m->nc, first, c->name, m->devs[failed].d->where);
    kcore_fail_wrap(st, "%s", what);
  } else if (end != ncclSuccess) {
    st = kcuda_nccl_table_fail(m->nc, end, "ncclGroupEnd()", what);
  }
left:
  kcuda_leave(m->devs[0].d);
  if (!st) st = order_after(m, out, receives, (size_t)nout * kiln_dtype_size(c->dtype));
  if (!st) snprintf(m->last, sizeof m->last, "%s", what);
done:
  free(receives);
  return st;
}

kiln_status kcuda_coll_all_reduce(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out,
                                  kcuda_coll_reduce op) {
  coll_call c = {ALL_REDUCE, reduce_name(op), dtype, count, op, 0, NULL};
  return coll_run(g, &c, in, out);
}

kiln_status kcuda_coll_all_gather(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out) {
  coll_call c = {ALL_GATHER, "all_gather", dtype, count, KCUDA_COLL_SUM, 0, NULL};
  return coll_run(g, &c, in, out);
}

kiln_status kcuda_coll_reduce_scatter(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                      kdev_buffer *const *in, kdev_buffer *const *out) {
  coll_call c = {REDUCE_SCATTER, "psum_scatter", dtype, count, KCUDA_COLL_SUM, 0, NULL};
  return coll_run(g, &c, in, out);
}

kiln_status kcuda_coll_all_to_all(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                  kdev_buffer *const *in, kdev_buffer *const *out) {
  coll_call c = {ALL_TO_ALL, "all_to_all", dtype, count, KCUDA_COLL_SUM, 0, NULL};
  return coll_run(g, &c, in, out);
}

kiln_status kcuda_coll_ppermute(kcuda_coll_group *g, kiln_dtype dtype, int64_t count,
                                kdev_buffer *const *in, kdev_buffer *const *out, int npairs,
                                const int (*pairs)[2]) {
  coll_call c = {PPERMUTE, "ppermute", dtype, count, KCUDA_COLL_SUM, npairs, pairs};
  if (npairs < 0 || (npairs && !pairs))
    return kcore_fail(KILN_ERR_ARGUMENT, "ppermute: %d pairs without a list", npairs);
  return coll_run(g, &c, in, out);
}

/* ---- waiting, with the timeout and NCCL's asynchronous errors ---- */

kiln_status kcuda_coll_wait(kcuda_coll_mesh *m) {
  if (!m) return kcore_fail(KILN_ERR_ARGUMENT, "kcuda_coll_wait: no mesh");
  if (m->broken) return kcore_fail(m->broken, "%s", m->broken_msg);
  double start = now_s();
  long sleep_ns = 2000;
  for (;;) {
    int pending = 0;
    for (int i = 0; i < m->n; i++) {
      coll_dev *c = &m->devs[i];
      if (!c->pending) continue;
      kiln_status st = kcuda_enter(c->d);
      if (st) return st;
      CUresult rc = c->d->drv->cuEventQuery(c->done);
      kcuda_leave(c->d);
      if (rc == CUDA_SUCCESS) c->pending = false;
      else if (rc == CUDA_ERROR_NOT_READY) pending++;
      else return kcore_fail_wrap(kcuda_driver_fail(c->d->drv, rc, "cuEventQuery", c->d->where),
                                  "waiting for %s", m->last);
    }
    if (!pending) return KILN_OK;
    ncclResult_t async = ncclSuccess;
    each_comm(m, comm_poll, &async);
    if (async != ncclSuccess) {
      kcuda_nccl_table_fail(m->nc, async, "ncclCommGetAsyncError", NULL);
      kcore_fail_wrap(KILN_ERR_COLLECTIVE, "%s: NCCL reported an asynchronous error", m->last);
      return mesh_abort(m, KILN_ERR_COLLECTIVE);
    }
    if (now_s() - start > m->timeout_s) {
      char waiting[512] = "", done[512] = "";
      size_t lw = 0, ld = 0;
      for (int i = 0; i < m->n; i++) {
        bool w = m->devs[i].pending;
        char *buf = w ? waiting : done;
        size_t *len = w ? &lw : &ld;
        if (*len < 400)
          *len += (size_t)snprintf(buf + *len, 512 - *len, "%s%s", *len ? ", " : "", m->devs[i].d->where);
      }
      kcore_fail(KILN_ERR_COLLECTIVE, "%s did not finish within %g s (KILN_COLLECTIVE_TIMEOUT): "
                 "still waiting on %s; finished or never arrived: %s", m->last, m->timeout_s,
                 waiting, ld ? done : "none");
      return mesh_abort(m, KILN_ERR_COLLECTIVE);
    }
    nanosleep(&(struct timespec){0, sleep_ns}, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}
