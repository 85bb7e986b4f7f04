/* CPU collectives: N participants (one thread per virtual device) meet at a
 * rendezvous per collective, read each other's host buffers and write their
 * own results. Two barrier crossings per collective: after the first every
 * participant's inputs are visible; after the second no one still reads
 * them, so callers may reuse their buffers. Waiting sleeps on a condition
 * variable with a deadline; a timeout or a participant's reported failure
 * breaks the group and every participant returns KILN_ERR_COLLECTIVE. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/cpu/cpu_backend.h"

typedef struct slot {
  const char *op; /* the collective's name, for matching and messages */
  kiln_dtype dtype;
  int64_t count;
  int64_t param; /* the op's parameter (reduction kind); must agree */
  const void *in;
  const void *part; /* all-reduce of many elements: this participant's reduced part */
  uint64_t arrived_gen; /* generation of this slot's last arrival */
} slot;

struct kcpu_coll_group {
  int n;
  char axis[64];
  double timeout_s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t gen;   /* barrier generation: bumped when all have arrived */
  int arrived;
  kiln_status broken; /* once set, every call fails with broken_msg */
  bool timed_out;     /* broken because a member did not arrive in time */
  char broken_msg[1024];
  slot *slots;
  int64_t *ids; /* per rank: the device it is, for messages (NULL: the rank) */
};

kiln_status kcpu_coll_group_new(int n, const char *axis, double timeout_s, kcpu_coll_group **out) {
  if (!out || n < 1 || !axis || timeout_s <= 0)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_coll_group_new: invalid argument (n=%d)", n);
  kcpu_coll_group *g = calloc(1, sizeof *g);
  slot *slots = calloc((size_t)n, sizeof *slots);
  pthread_condattr_t ca;
  if (!g || !slots) {
    free(g), free(slots);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_coll_group_new: out of host memory");
  }
  g->n = n, g->timeout_s = timeout_s, g->slots = slots;
  snprintf(g->axis, sizeof g->axis, "%s", axis);
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = g;
  return KILN_OK;
}

void kcpu_coll_group_free(kcpu_coll_group *g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->slots), free(g->ids);
  free(g);
}

kiln_status kcpu_coll_group_name(kcpu_coll_group *g, const int64_t *device_of_rank) {
  int64_t *ids = malloc((size_t)g->n * sizeof *ids);
  if (!ids) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_coll_group_name: out of host memory");
  memcpy(ids, device_of_rank, (size_t)g->n * sizeof *ids);
  free(g->ids);
  g->ids = ids;
  return KILN_OK;
}

bool kcpu_coll_timed_out(kcpu_coll_group *g) {
  pthread_mutex_lock(&g->mu);
  bool t = g->timed_out;
  pthread_mutex_unlock(&g->mu);
  return t;
}

/* "device 3" / "participant 3" for rank r. */
static long long who(const kcpu_coll_group *g, int r) { return g->ids ? (long long)g->ids[r] : r; }
static const char *noun(const kcpu_coll_group *g, bool many) {
  return g->ids ? (many ? "devices" : "device") : (many ? "participants" : "participant");
}

/* The ranks that have (arrived: true) or have not arrived at generation
 * `gen` as a list of names, into buf; returns how many. */
static int ranks_where(const kcpu_coll_group *g, uint64_t gen, bool arrived, char *buf, size_t cap) {
  size_t len = 0;
  int count = 0;
  bool cut = false;
  buf[0] = 0;
  for (int r = 0; r < g->n; r++) {
    if ((g->slots[r].arrived_gen == gen) != arrived) continue;
    if (len < cap - 24) len += (size_t)snprintf(buf + len, cap - len, "%s%lld", count ? ", " : "", who(g, r));
    else if (!cut) cut = true, snprintf(buf + len, cap - len, ", ...");
    count++;
  }
  return count;
}

static void describe(const slot *s, char *buf, size_t cap) {
  snprintf(buf, cap, "%s[%lld]", kiln_dtype_name(s->dtype), (long long)s->count);
}

/* Breaks the group (mu held): every waiting and later call fails. */
static void group_break(kcpu_coll_group *g, const char *fmt, ...) KCORE_PRINTF(2, 3);
static void group_break(kcpu_coll_group *g, const char *fmt, ...) {
  if (g->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->broken_msg, sizeof g->broken_msg, fmt, ap);
  va_end(ap);
  g->broken = KILN_ERR_COLLECTIVE;
  pthread_cond_broadcast(&g->cv);
}

kiln_status kcpu_coll_fail(kcpu_coll_group *g, int rank, const char *op, const char *why) {
  if (!g || rank < 0 || rank >= g->n) return kcore_fail(KILN_ERR_ARGUMENT, "kcpu_coll_fail: bad rank");
  pthread_mutex_lock(&g->mu);
  group_break(g, "%s over axis '%s': %s %lld failed: %s", op, g->axis, noun(g, false), who(g, rank), why);
  pthread_mutex_unlock(&g->mu);
  return KILN_OK;
}

/* Arrives at the barrier and waits (mu held) until all n have arrived. */
static kiln_status barrier(kcpu_coll_group *g, int rank, const char *op) {
  if (g->broken) return kcore_fail(g->broken, "%s", g->broken_msg);
  uint64_t my = g->gen;
  g->slots[rank].arrived_gen = my + 1;
  if (++g->arrived == g->n) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
    return KILN_OK;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  double whole = (double)(time_t)g->timeout_s;
  deadline.tv_sec += (time_t)g->timeout_s;
  deadline.tv_nsec += (long)((g->timeout_s - whole) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
  while (g->gen == my && !g->broken) {
    if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) != ETIMEDOUT) continue;
    if (g->gen != my || g->broken) break;
    /* Named from the waiting members' side: who is late, and who waited. */
    char late[400], waited[400], shape[96];
    int n_late = ranks_where(g, my + 1, false, late, sizeof late);
    int n_waited = ranks_where(g, my + 1, true, waited, sizeof waited);
    describe(&g->slots[rank], shape, sizeof shape);
    group_break(g, "%s over axis '%s' (%s): %s %s did not arrive within %g s (%s %s waited)", op,
                g->axis, shape, noun(g, n_late > 1), late, g->timeout_s, noun(g, n_waited > 1),
                waited);
    g->timed_out = true;
  }
  if (g->broken && g->gen == my) return kcore_fail(g->broken, "%s", g->broken_msg);
  return KILN_OK;
}

/* First crossing: publishes this participant's call and checks that all
 * agree (every participant sees the same slots, so all fail alike). */
static kiln_status meet(kcpu_coll_group *g, int rank, const slot *mine) {
  if (!g || rank < 0 || rank >= g->n)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: rank %d is outside the group", mine->op, rank);
  pthread_mutex_lock(&g->mu);
  uint64_t arrived = g->slots[rank].arrived_gen;
  g->slots[rank] = *mine;
  g->slots[rank].arrived_gen = arrived;
  kiln_status st = barrier(g, rank, mine->op);
  pthread_mutex_unlock(&g->mu);
  if (st) return st;
  for (int r = 0; r < g->n; r++) {
    const slot *a = &g->slots[0], *b = &g->slots[r];
    if (strcmp(a->op, b->op) || a->dtype != b->dtype || a->count != b->count || a->param != b->param) {
      char sa[96], sb[96];
      describe(a, sa, sizeof sa), describe(b, sb, sizeof sb);
      return kcore_fail(KILN_ERR_COLLECTIVE,
                        "%s over axis '%s': participants disagree: 0 calls %s(%s, param %lld), %d calls "
                        "%s(%s, param %lld)",
                        mine->op, g->axis, a->op, sa, (long long)a->param, r, b->op, sb,
                        (long long)b->param);
    }
  }
  return KILN_OK;
}

/* Second crossing: no one reads the inputs any more. */
static kiln_status leave(kcpu_coll_group *g, int rank, const char *op) {
  pthread_mutex_lock(&g->mu);
  kiln_status st = barrier(g, rank, op);
  pthread_mutex_unlock(&g->mu);
  return st;
}

/* ---- all-reduce: in rank order, so every participant's result is the same bits ---- */

#define REDUCE_CASE(DT, T)                                                            \
  case DT: {                                                                          \
    T *o = out;                                                                       \
    memcpy(o, (const T *)g->slots[0].in + offset, (size_t)count * sizeof(T));         \
    for (int r = 1; r < g->n; r++) {                                                  \
      const T *x = (const T *)g->slots[r].in + offset;                                \
      if (op == KCPU_COLL_SUM)                                                        \
        for (int64_t i = 0; i < count; i++) o[i] = (T)(o[i] + x[i]);                  \
      else if (op == KCPU_COLL_MAX)                                                   \
        for (int64_t i = 0; i < count; i++) o[i] = (x[i] > o[i] || x[i] != x[i]) ? x[i] : o[i]; \
      else                                                                            \
        for (int64_t i = 0; i < count; i++) o[i] = (x[i] < o[i] || x[i] != x[i]) ? x[i] : o[i]; \
    }                                                                                 \
    break;                                                                            \
  }

static const char *reduce_name(kcpu_coll_reduce op) {
  return op == KCPU_COLL_SUM ? "psum" : op == KCPU_COLL_MAX ? "pmax" : "pmin";
}

/* out[0, count) = op over ranks of in[offset, offset + count), in rank order. */
static void reduce_ranks(const kcpu_coll_group *g, kiln_dtype dtype, int64_t offset, int64_t count,
                         kcpu_coll_reduce op, void *out) {
  switch (dtype) {
    REDUCE_CASE(KILN_F32, float)
    REDUCE_CASE(KILN_F64, double)
    REDUCE_CASE(KILN_I8, int8_t)
    REDUCE_CASE(KILN_I16, int16_t)
    REDUCE_CASE(KILN_I32, int32_t)
    REDUCE_CASE(KILN_I64, int64_t)
    REDUCE_CASE(KILN_U8, uint8_t)
    REDUCE_CASE(KILN_U16, uint16_t)
    REDUCE_CASE(KILN_U32, uint32_t)
    REDUCE_CASE(KILN_U64, uint64_t)
    default: break;
  }
}

/* Shared by psum and psum_scatter: each participant reduces [offset,
 * offset + n_out) of every input into a private buffer (out may alias in),
 * then copies it out after the second crossing. */
static kiln_status reduce_dtype_check(kcpu_coll_group *g, int rank, const slot *mine) {
  switch (mine->dtype) {
    case KILN_F32: case KILN_F64: case KILN_I8: case KILN_I16: case KILN_I32: case KILN_I64:
    case KILN_U8: case KILN_U16: case KILN_U32: case KILN_U64: return KILN_OK;
    default:
      if (g) kcpu_coll_fail(g, rank, mine->op, "unsupported dtype");
      return kcore_fail(KILN_ERR_DTYPE, "%s: dtype %s is not supported by the CPU collectives",
                        mine->op, kiln_dtype_name(mine->dtype));
  }
}

static kiln_status reduce_common(kcpu_coll_group *g, int rank, const slot *mine, int64_t offset,
                                 int64_t n_out, void *out, kcpu_coll_reduce op) {
  kiln_status st = reduce_dtype_check(g, rank, mine);
  if (!st) st = meet(g, rank, mine);
  if (st) return st;
  size_t bytes = (size_t)n_out * kiln_dtype_size(mine->dtype);
  void *acc = malloc(bytes ? bytes : 1);
  if (!acc) {
    kcpu_coll_fail(g, rank, mine->op, "out of host memory");
    leave(g, rank, mine->op);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", mine->op);
  }
  reduce_ranks(g, mine->dtype, offset, n_out, op, acc);
  st = leave(g, rank, mine->op);
  if (!st) memcpy(out, acc, bytes);
  free(acc);
  return st;
}

/* Below this many elements a participant reduces the whole buffer itself:
 * a third crossing costs more than splitting the work saves. */
#define SPLIT_REDUCE_MIN 4096

kiln_status kcpu_coll_all_reduce(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out, kcpu_coll_reduce op) {
  slot mine = {reduce_name(op), dtype, count, op, in, NULL, 0};
  if (!g || g->n == 1 || count < SPLIT_REDUCE_MIN) return reduce_common(g, rank, &mine, 0, count, out, op);
  /* Each participant reduces one part (in rank order: the same bits as one
   * participant's whole reduction) and then copies every part: the work is
   * split instead of repeated. out is written only once no one reads the
   * inputs (out may alias in). */
  kiln_status st = reduce_dtype_check(g, rank, &mine);
  if (!st) st = meet(g, rank, &mine);
  if (st) return st;
  int64_t part = (count + g->n - 1) / g->n;
  size_t es = kiln_dtype_size(dtype);
  void *acc = malloc((size_t)part * es);
  if (!acc) {
    kcpu_coll_fail(g, rank, mine.op, "out of host memory");
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", mine.op);
  }
  int64_t first = part * rank, n_mine = first >= count ? 0 : count - first < part ? count - first : part;
  reduce_ranks(g, dtype, first, n_mine, op, acc);
  g->slots[rank].part = acc;
  pthread_mutex_lock(&g->mu);
  st = barrier(g, rank, mine.op);
  pthread_mutex_unlock(&g->mu);
  for (int r = 0; !st && r < g->n; r++) {
    int64_t f = part * r, n = f >= count ? 0 : count - f < part ? count - f : part;
    memcpy((char *)out + (size_t)f * es, g->slots[r].part, (size_t)n * es);
  }
  if (!st) st = leave(g, rank, mine.op); /* no one still reads acc */
  free(acc);
  return st;
}

kiln_status kcpu_coll_reduce_scatter(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                     const void *in, void *out) {
  slot mine = {"psum_scatter", dtype, count, 0, in, NULL, 0};
  if (g && count % g->n) {
    kcpu_coll_fail(g, rank, mine.op, "count does not divide over the group");
    return kcore_fail(KILN_ERR_SHAPE, "psum_scatter over axis '%s': %lld elements do not divide over %d participants",
                      g->axis, (long long)count, g->n);
  }
  int64_t part = g ? count / g->n : 0;
  return reduce_common(g, rank, &mine, (int64_t)rank * part, part, out, KCPU_COLL_SUM);
}

/* ---- data movement ---- */

kiln_status kcpu_coll_all_gather(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out) {
  slot mine = {"all_gather", dtype, count, 0, in, NULL, 0};
  kiln_status st = meet(g, rank, &mine);
  if (st) return st;
  size_t bytes = (size_t)count * kiln_dtype_size(dtype);
  for (int r = 0; r < g->n; r++)
    if (r != rank) memcpy((char *)out + (size_t)r * bytes, g->slots[r].in, bytes);
  if ((const char *)in != (char *)out + (size_t)rank * bytes)
    memmove((char *)out + (size_t)rank * bytes, in, bytes);
  return leave(g, rank, mine.op);
}

kiln_status kcpu_coll_ppermute(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                               const void *in, void *out, int npairs, const int (*pairs)[2]) {
  slot mine = {"ppermute", dtype, count, npairs, in, NULL, 0};
  for (int i = 0; g && i < npairs; i++) {
    int bad = pairs[i][0] < 0 || pairs[i][1] < 0 || pairs[i][0] >= g->n || pairs[i][1] >= g->n;
    for (int j = 0; j < i; j++) bad |= pairs[i][0] == pairs[j][0] || pairs[i][1] == pairs[j][1];
    if (bad) {
      kcpu_coll_fail(g, rank, mine.op, "invalid permutation");
      return kcore_fail(KILN_ERR_ARGUMENT,
                        "ppermute: pair %d (%d, %d) makes the pairs no partial permutation of %d ranks",
                        i, pairs[i][0], pairs[i][1], g->n);
    }
  }
  kiln_status st = meet(g, rank, &mine);
  if (st) return st;
  size_t bytes = (size_t)count * kiln_dtype_size(dtype);
  void *tmp = malloc(bytes ? bytes : 1); /* out may alias in */
  if (!tmp) {
    kcpu_coll_fail(g, rank, mine.op, "out of host memory");
    leave(g, rank, mine.op);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "ppermute: out of host memory");
  }
  memset(tmp, 0, bytes); /* receivers of nothing get zeros */
  for (int i = 0; i < npairs; i++)
    if (pairs[i][1] == rank) memcpy(tmp, g->slots[pairs[i][0]].in, bytes);
  st = leave(g, rank, mine.op);
  if (!st) memcpy(out, tmp, bytes);
  free(tmp);
  return st;
}

kiln_status kcpu_coll_all_to_all(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out) {
  slot mine = {"all_to_all", dtype, count, 0, in, NULL, 0};
  if (g && count % g->n) {
    kcpu_coll_fail(g, rank, mine.op, "count does not divide over the group");
    return kcore_fail(KILN_ERR_SHAPE, "all_to_all over axis '%s': %lld elements do not divide over %d participants",
                      g->axis, (long long)count, g->n);
  }
  kiln_status st = meet(g, rank, &mine);
  if (st) return st;
  size_t chunk = (size_t)(count / g->n) * kiln_dtype_size(dtype);
  char *tmp = malloc(chunk * (size_t)g->n + 1); /* out may alias in */
  if (!tmp) {
    kcpu_coll_fail(g, rank, mine.op, "out of host memory");
    leave(g, rank, mine.op);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "all_to_all: out of host memory");
  }
  for (int r = 0; r < g->n; r++) /* block r of the result: rank r's block `rank` */
    memcpy(tmp + (size_t)r * chunk, (const char *)g->slots[r].in + (size_t)rank * chunk, chunk);
  st = leave(g, rank, mine.op);
  if (!st) memcpy(out, tmp, chunk * (size_t)g->n);
  free(tmp);
  return st;
}
