/* A stand-in for libnccl.so.2 over the stand-in driver (fake_cuda_driver.c):
 * communicators over its devices, and collectives performed for real on
 * their host-backed memory, so kiln's NCCL path runs by value without a GPU.
 *
 * Each participant's part of a collective is a gate on its stream
 * (kiln_fake_cuda_launch_gate): when a stream reaches its gate and every
 * participant has posted its part, the gate runs the other participants'
 * streams up to theirs and moves the data (reductions in rank order). It is
 * strict where NCCL is undefined or would hang:
 *   - unknown, destroyed or aborted communicators, a stream of another
 *     device, NULL buffers, bad types or ops and a split with a config are
 *     refused at the call;
 *   - a multi-rank communicator used outside ncclGroupStart/End (one thread
 *     drives every rank here, where NCCL would wait forever) is
 *     ncclInvalidUsage; so is a split that not every rank joins;
 *   - participants that disagree (counts, types, ops, a send without its
 *     receive's size) get ncclInvalidUsage from ncclCommGetAsyncError instead
 *     of corrupt data or a hang, and nothing is written.
 * KILN_FAKE_NCCL_ABSENT_RANK=r (read at each call) makes rank r of every
 * multi-rank communicator never arrive: its calls succeed and post nothing,
 * so the others' streams stall at their gates until ncclCommAbort.
 * One thread drives the communicators (as kiln does). */
#include <cuda.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h" /* the f16/bf16 conversions */

unsigned long long kiln_fake_cuda_launch_gate(CUstream s, int (*gate)(void *), void *user);
int kiln_fake_cuda_stream_run(CUstream s, unsigned long long upto);
int kiln_fake_cuda_stream_device(CUstream s);
int kiln_fake_cuda_device_count(void);
int kiln_fake_cuda_range_live(const void *p, size_t n);

typedef struct clique clique;

struct ncclComm {
  clique *cl;
  int rank, device;
  bool dead;                /* destroyed or aborted: every use is refused */
  bool aborted;
  ncclResult_t async_error; /* what ncclCommGetAsyncError reports */
  unsigned long long coll_seq;
  unsigned long long *sent, *received; /* point-to-point calls per peer */
  struct ncclComm *next;
};

struct clique {
  int n;
  struct ncclComm **ranks;
  clique *next;
};

typedef enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_P2P } kind;

typedef struct op op;
typedef struct part {
  op *o;
  bool posted;
  struct ncclComm *comm;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t red;
  CUstream stream;
  struct batch *b; /* the gate it passes with */
} part;

/* What one group call queues on one stream passes one gate, as NCCL launches
 * a group's work on a stream as one kernel: so sends and receives between two
 * ranks in either order cannot wait for each other. */
typedef struct batch {
  CUstream stream;
  unsigned long long pos; /* the gate's position on the stream */
  int n, cap;
  part **parts;
  bool running; /* its gate is on the stack: a re-entry waits */
  struct batch *next;
} batch;

/* One collective (n parts, by rank) or one transfer (part 0 sends, 1 receives). */
struct op {
  clique *cl;
  kind k;
  unsigned long long seq;
  int src, dst; /* K_P2P */
  int n;     /* parts */
  int gates; /* gates not yet passed */
  bool done;
  part *parts;
  op *next;
};

/* A test double may have globals: every communicator and clique ever made,
 * and the operations whose gates have not all passed. */
static struct ncclComm *comms;
static clique *cliques;
static op *ops;
static batch *batches; /* gates not yet passed */
static unsigned long calls;
static char last_error[512];
static _Thread_local int group_depth;

typedef struct deferred {
  bool split;
  struct ncclComm *comm;
  int color, key;
  struct ncclComm **out;
  part p; /* for a post: its operation's fields */
  kind k;
  int peer;
  struct deferred *next;
} deferred;
static _Thread_local deferred *pending, **pending_tail; /* NULL: &pending */
static _Thread_local ncclResult_t group_error;

static void queue(deferred *d) {
  if (!pending_tail) pending_tail = &pending;
  *pending_tail = d, pending_tail = &d->next;
}

static ncclResult_t fail(ncclResult_t rc, const char *fmt, const char *what) {
  snprintf(last_error, sizeof last_error, fmt, what);
  fprintf(stderr, "fake libnccl: %s\n", last_error);
  return rc;
}

static bool comm_ok(const struct ncclComm *c) {
  for (struct ncclComm *p = comms; p; p = p->next)
    if (p == c) return !p->dead;
  return false;
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

static int absent_rank(void) {
  const char *v = getenv("KILN_FAKE_NCCL_ABSENT_RANK");
  return v && *v ? atoi(v) : -1;
}

/* ---- communicators ---- */

static struct ncclComm *comm_new(clique *cl, int rank, int device) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->sent = calloc((size_t)cl->n, sizeof *c->sent);
  c->received = calloc((size_t)cl->n, sizeof *c->received);
  if (!c->sent || !c->received) {
    free(c->sent), free(c->received), free(c);
    return NULL;
  }
  c->cl = cl, c->rank = rank, c->device = device;
  c->next = comms;
  comms = c;
  cl->ranks[rank] = c;
  return c;
}

static clique *clique_new(int n) {
  clique *cl = calloc(1, sizeof *cl);
  if (cl && !(cl->ranks = calloc((size_t)n, sizeof *cl->ranks))) free(cl), cl = NULL;
  if (!cl) return NULL;
  cl->n = n;
  cl->next = cliques;
  cliques = cl;
  return cl;
}

ncclResult_t ncclGetVersion(int *version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *out, int ndev, const int *devlist) {
  if (!out || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: %s", "invalid argument");
  int count = kiln_fake_cuda_device_count();
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= count) return fail(ncclInvalidArgument, "ncclCommInitAll: %s", "no such device");
    for (int j = 0; j < i; j++)
      if (devlist && devlist[j] == d) return fail(ncclInvalidUsage, "ncclCommInitAll: %s", "Duplicate GPU detected");
  }
  clique *cl = clique_new(ndev);
  if (!cl) return ncclSystemError;
  for (int i = 0; i < ndev; i++)
    if (!(out[i] = comm_new(cl, i, devlist ? devlist[i] : i))) return ncclSystemError;
  return ncclSuccess;
}

static ncclResult_t comm_end(ncclComm_t c, bool abort) {
  if (!comm_ok(c)) return fail(ncclInvalidArgument, "%s: not a live communicator", abort ? "ncclCommAbort" : "ncclCommDestroy");
  c->dead = true;
  c->aborted = abort;
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) { return comm_end(c, false); }
ncclResult_t ncclCommAbort(ncclComm_t c) { return comm_end(c, true); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
  if (!comm_ok(c) || !err) return fail(ncclInvalidArgument, "%s: invalid argument", "ncclCommGetAsyncError");
  *err = c->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
  if (!comm_ok(c) || !out) return fail(ncclInvalidArgument, "%s: invalid argument", "ncclCommSplit");
  if (config) return fail(ncclInvalidArgument, "%s: the stand-in takes no config", "ncclCommSplit");
  if (!group_depth && c->cl->n > 1)
    return fail(ncclInvalidUsage, "%s outside a group on a multi-rank communicator: it would wait "
                "forever for the other ranks of this thread", "ncclCommSplit");
  deferred *d = calloc(1, sizeof *d);
  if (!d) return ncclSystemError;
  *d = (deferred){.split = true, .comm = c, .color = color, .key = key, .out = out};
  queue(d);
  return ncclSuccess;
}

/* All the splits of one parent clique queued in the group. */
static ncclResult_t run_splits(clique *parent) {
  int n = parent->n;
  deferred **by_rank = calloc((size_t)n, sizeof *by_rank);
  if (!by_rank) return ncclSystemError;
  for (deferred *d = pending; d; d = d->next)
    if (d->split && d->comm->cl == parent) by_rank[d->comm->rank] = d;
  ncclResult_t rc = ncclSuccess;
  for (int r = 0; r < n; r++)
    if (!by_rank[r]) rc = fail(ncclInvalidUsage, "%s: a rank of the parent did not join the split "
                               "(it would hang)", "ncclCommSplit");
  bool *made = calloc((size_t)n, sizeof *made);
  if (!made) rc = ncclSystemError;
  for (int r = 0; r < n && rc == ncclSuccess; r++) {
    deferred *me = by_rank[r];
    if (me->color < 0) *me->out = NULL; /* NCCL_SPLIT_NOCOLOR: no new communicator */
    if (me->color < 0 || made[r]) continue;
    int size = 0;
    for (int q = 0; q < n; q++) size += by_rank[q]->color == me->color;
    clique *cl = clique_new(size);
    if (!cl) {
      rc = ncclSystemError;
      break;
    }
    for (int q = 0; q < n; q++) { /* new rank: by key, then by parent rank */
      if (by_rank[q]->color != me->color) continue;
      int newrank = 0;
      for (int o = 0; o < n; o++)
        newrank += by_rank[o]->color == me->color &&
                   (by_rank[o]->key < by_rank[q]->key || (by_rank[o]->key == by_rank[q]->key && o < q));
      if (!(*by_rank[q]->out = comm_new(cl, newrank, by_rank[q]->comm->device))) rc = ncclSystemError;
      made[q] = true;
    }
  }
  free(made);
  for (int r = 0; r < n; r++)
    if (by_rank[r]) by_rank[r]->comm = NULL; /* handled */
  free(by_rank);
  return rc;
}

/* ---- moving the data ---- */

static double load(const void *p, size_t i, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    case ncclInt64: return (double)((const int64_t *)p)[i];
    case ncclUint64: return (double)((const uint64_t *)p)[i];
    case ncclFloat16: return kcore_f16_to_f32(((const uint16_t *)p)[i]);
    case ncclBfloat16: return kcore_bf16_to_f32(((const uint16_t *)p)[i]);
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
  }
}

static void store(void *p, size_t i, ncclDataType_t t, double v) {
  switch (t) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)(int64_t)v; break; /* wraps */
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break; /* wraps */
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)(int64_t)v; break; /* wraps */
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)(int64_t)v; break; /* wraps */
    case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)p)[i] = kcore_f32_to_f16((float)v); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = kcore_f32_to_bf16((float)v); break;
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
  }
}

/* Reduces element i over the parts in rank order, each step rounded to the
 * type as a device would (64-bit integers go through double: exact to 2^53,
 * which the tests stay within). */
static void reduce_into(const op *o, size_t from, size_t n, void *out) {
  ncclDataType_t t = o->parts[0].type;
  for (size_t i = 0; i < n; i++) {
    store(out, i, t, load(o->parts[0].send, from + i, t));
    for (int r = 1; r < o->n; r++) {
      double a = load(out, i, t), b = load(o->parts[r].send, from + i, t);
      ncclRedOp_t red = o->parts[0].red;
      double v = red == ncclSum ? a + b : red == ncclProd ? a * b
                 : (a != a || b != b) ? (a != a ? a : b) /* max and min propagate NaN */
                 : red == ncclMax ? (a > b ? a : b) : (a < b ? a : b);
      store(out, i, t, v);
    }
  }
}

static bool parts_agree(const op *o) {
  for (int r = 1; r < o->n; r++) {
    const part *a = &o->parts[0], *b = &o->parts[r];
    if (a->count != b->count || a->type != b->type || (o->k != K_P2P && a->red != b->red)) return false;
  }
  return true;
}

static void perform(op *o) {
  part *p = o->parts;
  size_t es = type_size(p[0].type), n = p[0].count;
  size_t in_n = o->k == K_REDUCE_SCATTER ? n * (size_t)o->n : n;
  size_t out_n = o->k == K_ALL_GATHER ? n * (size_t)o->n : n;
  for (int r = 0; r < o->n; r++) {
    bool sends = o->k != K_P2P || r == 0, receives = o->k != K_P2P || r == 1;
    if ((sends && !kiln_fake_cuda_range_live(p[r].send, in_n * es + !in_n)) ||
        (receives && !kiln_fake_cuda_range_live(p[r].recv, out_n * es + !out_n))) {
      fprintf(stderr, "fake libnccl: a buffer of rank %d lies outside a live allocation\n", r);
      for (int q = 0; q < o->n; q++) p[q].comm->async_error = ncclInvalidArgument;
      return;
    }
  }
  char **results = o->n > 0 ? calloc((size_t)o->n, sizeof *results) : NULL;
  for (int r = 0; results && r < o->n; r++) {
    if (o->k == K_P2P && r == 0) continue;
    results[r] = malloc(out_n * es + 1);
    if (!results[r]) continue;
    if (o->k == K_ALL_REDUCE) reduce_into(o, 0, n, results[r]);
    else if (o->k == K_REDUCE_SCATTER) reduce_into(o, (size_t)r * n, n, results[r]);
    else if (o->k == K_ALL_GATHER)
      for (int q = 0; q < o->n; q++) memcpy(results[r] + (size_t)q * n * es, p[q].send, n * es);
    else memcpy(results[r], p[0].send, n * es);
  }
  for (int r = 0; results && r < o->n; r++)
    if (results[r]) memcpy(p[r].recv, results[r], out_n * es), free(results[r]);
  free(results);
}

/* Whether every operation of the batch can happen; runs the streams of
 * their other parts up to those parts' gates. */
static int batch_ready(batch *me) {
  for (int i = 0; i < me->n; i++) {
    op *o = me->parts[i]->o;
    if (o->done) continue;
    bool aborted = false, all = true;
    for (int r = 0; r < o->n; r++) {
      all &= o->parts[r].posted;
      aborted |= o->parts[r].comm && o->parts[r].comm->aborted;
    }
    if (aborted) o->done = true; /* an abort ends what is in flight; nothing is written */
    else if (!all) return 0;
  }
  for (int i = 0; i < me->n; i++) {
    op *o = me->parts[i]->o;
    for (int r = 0; r < o->n && !o->done; r++) {
      batch *other = o->parts[r].b;
      if (other == me || other->stream == me->stream) continue;
      int rc = kiln_fake_cuda_stream_run(other->stream, other->pos - 1);
      if (rc > 0) return 0;
      if (rc < 0) o->done = true;
    }
  }
  return 1;
}

static int gate(void *user) {
  batch *me = user;
  if (me->running) return 0;
  me->running = true;
  int ready = batch_ready(me);
  me->running = false;
  if (!ready) return 0;
  for (int i = 0; i < me->n; i++) {
    op *o = me->parts[i]->o;
    if (!o->done) {
      o->done = true;
      if (!parts_agree(o)) {
        fprintf(stderr, "fake libnccl: the participants of a collective disagree on count, type or op\n");
        for (int r = 0; r < o->n; r++) o->parts[r].comm->async_error = ncclInvalidUsage;
      } else {
        perform(o);
      }
    }
    o->gates--;
  }
  for (batch **p = &batches; *p; p = &(*p)->next)
    if (*p == me) {
      *p = me->next;
      break;
    }
  free(me->parts), free(me);
  return 1;
}

/* ---- posting ---- */

static void prune(void) {
  for (op **p = &ops; *p;) {
    op *o = *p;
    bool live = o->gates > 0;
    if (live) { p = &o->next; continue; }
    *p = o->next;
    free(o->parts), free(o);
  }
}

/* The operation a post joins: the clique's seq-th collective, or the seq-th
 * transfer from src to dst. */
static op *op_find(clique *cl, kind k, unsigned long long seq, int src, int dst) {
  for (op *o = ops; o; o = o->next)
    if (o->cl == cl && (o->k == K_P2P) == (k == K_P2P) && o->seq == seq && o->src == src && o->dst == dst)
      return o;
  op *o = calloc(1, sizeof *o);
  int n = k == K_P2P ? 2 : cl->n;
  if (!o || !(o->parts = calloc((size_t)n, sizeof *o->parts))) return free(o), NULL;
  *o = (op){cl, k, seq, src, dst, n, 0, false, o->parts, ops};
  for (int i = 0; i < n; i++) o->parts[i].o = o;
  ops = o;
  return o;
}

static ncclResult_t post(const deferred *d, part **out) {
  struct ncclComm *c = d->comm;
  *out = NULL;
  if (!comm_ok(c)) return fail(ncclInvalidArgument, "%s: the communicator died in the group", "ncclGroupEnd");
  if (c->cl->n > 1 && c->rank == absent_rank()) return ncclSuccess; /* never arrives */
  bool sends = d->k == K_P2P && d->peer >= 0;
  int slot = d->k != K_P2P ? c->rank : sends ? 0 : 1;
  unsigned long long seq = d->k != K_P2P ? c->coll_seq++ : sends ? c->sent[d->peer]++ : c->received[-d->peer - 1]++;
  int peer = d->k != K_P2P ? 0 : sends ? d->peer : -d->peer - 1;
  op *o = op_find(c->cl, d->k, seq, d->k != K_P2P ? 0 : sends ? c->rank : peer,
                  d->k != K_P2P ? 0 : sends ? peer : c->rank);
  if (!o) return ncclSystemError;
  if (o->k != d->k) return fail(ncclInvalidUsage, "%s: the ranks call different collectives", "ncclGroupEnd");
  part *p = &o->parts[slot];
  *p = d->p;
  p->o = o, p->comm = c;
  p->posted = true;
  o->gates++;
  calls++;
  *out = p;
  return ncclSuccess;
}

/* Posts the queued calls, gathering each stream's parts into one batch, then
 * queues each batch's gate. */
static ncclResult_t post_all(deferred *list) {
  batch *made = NULL;
  ncclResult_t rc = ncclSuccess;
  for (deferred *d = list; d && rc == ncclSuccess; d = d->next) {
    part *p;
    if (d->split || (rc = post(d, &p)) != ncclSuccess || !p) continue;
    batch *b = made;
    while (b && b->stream != p->stream) b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) b->stream = p->stream, b->next = made, made = b;
    if (b && b->n == b->cap) {
      part **grown = realloc(b->parts, (size_t)(b->cap = b->cap ? 2 * b->cap : 8) * sizeof *grown);
      if (grown) b->parts = grown;
      else b->cap = b->n;
    }
    if (!b || b->n == b->cap) {
      rc = ncclSystemError;
      break;
    }
    b->parts[b->n++] = p;
    p->b = b;
  }
  for (batch *b = made, *next; b; b = next) {
    next = b->next;
    b->next = batches, batches = b;
    b->pos = kiln_fake_cuda_launch_gate(b->stream, gate, b);
    if (!b->pos && rc == ncclSuccess)
      rc = fail(ncclUnhandledCudaError, "%s: queueing on the stream failed", "ncclGroupEnd");
  }
  return rc;
}

/* Checks a call and queues it (in a group) or posts it (a 1-rank comm). */
static ncclResult_t submit(const char *name, kind k, ncclComm_t c, const void *send, void *recv,
                           size_t count, ncclDataType_t t, ncclRedOp_t red, int peer, CUstream s) {
  if (!comm_ok(c)) return fail(ncclInvalidArgument, "%s: not a live communicator", name);
  if (!type_size(t)) return fail(ncclInvalidArgument, "%s: invalid data type", name);
  if (k != K_ALL_GATHER && k != K_P2P && (red < ncclSum || red > ncclMin))
    return fail(ncclInvalidArgument, "%s: the stand-in reduces with sum, prod, max and min", name);
  if (count && ((k != K_P2P || peer >= 0) ? !send : !recv) ) return fail(ncclInvalidArgument, "%s: NULL buffer", name);
  if (count && k != K_P2P && !recv) return fail(ncclInvalidArgument, "%s: NULL buffer", name);
  int p = k == K_P2P ? (peer >= 0 ? peer : -peer - 1) : 0;
  if (p >= c->cl->n) return fail(ncclInvalidArgument, "%s: peer out of range", name);
  if (kiln_fake_cuda_stream_device(s) != c->device)
    return fail(ncclInvalidArgument, "%s: the stream is not on the communicator's device", name);
  deferred d = {.comm = c, .k = k, .peer = peer,
                .p = {.send = send, .recv = recv, .count = count, .type = t, .red = red, .stream = s}};
  if (!group_depth) {
    if (c->cl->n > 1)
      return fail(ncclInvalidUsage, "%s outside a group on a multi-rank communicator: it would "
                  "wait forever for the other ranks of this thread", name);
    prune();
    return post_all(&d);
  }
  deferred *q = malloc(sizeof *q);
  if (!q) return ncclSystemError;
  *q = d;
  q->next = NULL;
  queue(q);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t red, ncclComm_t c, cudaStream_t s) {
  return submit("ncclAllReduce", K_ALL_REDUCE, c, send, recv, count, t, red, 0, (CUstream)s);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s) {
  return submit("ncclAllGather", K_ALL_GATHER, c, send, recv, count, t, ncclSum, 0, (CUstream)s);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t red, ncclComm_t c, cudaStream_t s) {
  return submit("ncclReduceScatter", K_REDUCE_SCATTER, c, send, recv, count, t, red, 0, (CUstream)s);
}
/* peer >= 0 for a send, -peer - 1 for a receive. */
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  if (peer < 0) return fail(ncclInvalidArgument, "%s: negative peer", "ncclSend");
  return submit("ncclSend", K_P2P, c, send, NULL, count, t, ncclSum, peer, (CUstream)s);
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  if (peer < 0) return fail(ncclInvalidArgument, "%s: negative peer", "ncclRecv");
  return submit("ncclRecv", K_P2P, c, NULL, recv, count, t, ncclSum, -peer - 1, (CUstream)s);
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return fail(ncclInvalidUsage, "%s without ncclGroupStart", "ncclGroupEnd");
  if (--group_depth) return ncclSuccess;
  ncclResult_t rc = group_error;
  prune();
  for (deferred *d = pending; d; d = d->next) /* splits first: their comms are made here */
    if (d->split && d->comm && rc == ncclSuccess) rc = run_splits(d->comm->cl);
  if (rc == ncclSuccess) rc = post_all(pending);
  for (deferred *d = pending, *next; d; d = next) next = d->next, free(d);
  pending = NULL, pending_tail = &pending, group_error = ncclSuccess;
  return rc;
}

const char *ncclGetErrorString(ncclResult_t rc) {
  switch (rc) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t c) {
  (void)c;
  return last_error;
}

/* Test hooks: communicators not destroyed or aborted (listed on stderr when
 * verbose), and the collective and point-to-point calls posted so far. */
int kiln_fake_nccl_live_objects(int verbose) {
  int n = 0;
  for (struct ncclComm *c = comms; c; c = c->next) n += !c->dead;
  if (verbose && n) fprintf(stderr, "fake libnccl: live: %d communicators\n", n);
  return n;
}

unsigned long kiln_fake_nccl_calls(void) { return calls; }
