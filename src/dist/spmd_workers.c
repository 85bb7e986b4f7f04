/* Persistent threads for the CPU shard_map runner: created once per context
 * and woken per call, so a training step pays a condition-variable wake-up
 * per device instead of a pthread_create. Every device runs on a worker (the
 * caller only waits), so that a device stuck in foreign code (a host
 * callback, a kernel, BLAS) cannot hold the caller: once a device has
 * finished, the others get the grace the runner gives them and then are
 * abandoned. An abandoned thread is detached and keeps a reference to the
 * pool, so that whenever it comes back it finds the memory it touches alive;
 * it hands its arguments to `left` and exits. A pool that left a thread
 * behind runs no more calls. One call at a time holds the workers; a call
 * that finds them busy (another thread's shard_map) runs on a pool of its
 * own, made and freed around it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "dist/dist.h"

struct kdist_workers {
  int n; /* threads, one per index 0..n-1 */
  pthread_t *threads;
  bool *finished;       /* per index of the current call */
  bool *noted;          /* per index: its grace was taken (the caller's) */
  bool *abandoned;      /* per thread: left inside a call, detached */
  uint64_t *seen;       /* per index: its progress at the last look */
  int refs;             /* the owner's and one per abandoned thread still running */
  int stuck;            /* the first index a call left behind; -1: none */
  pthread_mutex_t busy; /* held by the call that owns the workers */
  pthread_mutex_t mu;   /* guards what follows and the fields above */
  pthread_cond_t wake, done;
  uint64_t gen; /* bumped per call */
  int want;     /* indices of this call: 0..want-1 */
  int pending;  /* workers of this call not finished */
  bool quit;
  kdist_work_fn fn, left;
  void *arg;
};

typedef struct worker_arg {
  kdist_workers *w;
  int i;
} worker_arg;

static void workers_destroy(kdist_workers *w) {
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->busy);
  free(w->threads), free(w->finished), free(w->noted), free(w->abandoned), free(w->seen);
  free(w);
}

/* Drops a reference (mu held; released here); the last one frees w. */
static void workers_unref(kdist_workers *w) {
  bool last = --w->refs == 0;
  pthread_mutex_unlock(&w->mu);
  if (last) workers_destroy(w);
}

static void *worker_main(void *p) {
  worker_arg a = *(worker_arg *)p;
  free(p);
  kdist_workers *w = a.w;
  uint64_t seen = 0;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->quit && w->gen == seen) pthread_cond_wait(&w->wake, &w->mu);
    if (w->quit) break;
    seen = w->gen;
    if (a.i >= w->want) continue;
    kdist_work_fn fn = w->fn, left = w->left;
    void *arg = w->arg;
    pthread_mutex_unlock(&w->mu);
    fn(arg, a.i);
    pthread_mutex_lock(&w->mu);
    if (w->abandoned[a.i]) {
      /* Back after the call gave up on it: the call's state is the
       * runner's to release; the pool's memory is kept by our reference. */
      pthread_mutex_unlock(&w->mu);
      if (left) left(arg, a.i);
      pthread_mutex_lock(&w->mu);
      workers_unref(w);
      return NULL;
    }
    w->finished[a.i] = true;
    w->pending--;
    pthread_cond_signal(&w->done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

kiln_status kdist_workers_new(int n, kdist_workers **out) {
  size_t cells = (size_t)(n > 0 ? n : 1);
  kdist_workers *w = calloc(1, sizeof *w);
  if (w) {
    w->threads = calloc(cells, sizeof *w->threads);
    w->finished = calloc(cells, sizeof *w->finished);
    w->noted = calloc(cells, sizeof *w->noted);
    w->abandoned = calloc(cells, sizeof *w->abandoned);
    w->seen = calloc(cells, sizeof *w->seen);
  }
  if (!w || !w->threads || !w->finished || !w->noted || !w->abandoned || !w->seen) {
    if (w) free(w->threads), free(w->finished), free(w->noted), free(w->abandoned), free(w->seen);
    free(w);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  }
  w->refs = 1, w->stuck = -1;
  pthread_mutex_init(&w->busy, NULL);
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->wake, NULL);
  pthread_cond_init(&w->done, &ca);
  pthread_condattr_destroy(&ca);
  for (; w->n < n; w->n++) {
    worker_arg *a = malloc(sizeof *a);
    if (a) *a = (worker_arg){w, w->n};
    if (!a || pthread_create(&w->threads[w->n], NULL, worker_main, a)) {
      free(a);
      kdist_workers_free(w);
      return kcore_fail(KILN_ERR_INTERNAL, "shard_map: cannot start the thread of device %d", n);
    }
  }
  *out = w;
  return KILN_OK;
}

/* Idle threads are joined; abandoned ones were detached when they were left
 * behind and are not waited for (one may be stuck for good: waiting would
 * hang the context's free and the process's exit). The last of the owner
 * and the abandoned threads frees the memory. */
void kdist_workers_free(kdist_workers *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->quit = true;
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  /* abandoned[] only changes inside a call, and none runs now. */
  for (int i = 0; i < w->n; i++)
    if (!w->abandoned[i]) pthread_join(w->threads[i], NULL);
  pthread_mutex_lock(&w->mu);
  workers_unref(w);
}

int kdist_workers_stuck(kdist_workers *w) {
  if (!w) return -1;
  pthread_mutex_lock(&w->mu);
  int s = w->stuck;
  pthread_mutex_unlock(&w->mu);
  return s;
}

static struct timespec deadline_after(double s) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  if (s > 1e9) s = 1e9;
  time_t whole = (time_t)s;
  t.tv_sec += whole;
  t.tv_nsec += (long)((s - (double)whole) * 1e9);
  if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
  return t;
}

static bool before(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Runs one call on w's threads (w not busy, large enough, healthy). */
static void run_on(kdist_workers *w, int n, const kdist_call *c, bool *left) {
  pthread_mutex_lock(&w->mu);
  w->fn = c->fn, w->left = c->left, w->arg = c->arg, w->want = n, w->pending = n;
  for (int i = 0; i < n; i++) w->finished[i] = w->noted[i] = false;
  w->gen++;
  pthread_cond_broadcast(&w->wake);
  /* Until a device finishes, the clock runs from the start: a period of
   * grace(-1) in which no running device moves means all are stuck. */
  struct timespec deadline = deadline_after(c->grace(c->arg, -1));
  bool timed = false, moved = false;
  for (int i = 0; i < n; i++) w->seen[i] = c->progress(c->arg, i);
  while (w->pending) {
    int rc = pthread_cond_timedwait(&w->done, &w->mu, &deadline);
    /* Each device that finished bounds how long the others may take; their
     * progress is judged from then. */
    bool newly = false;
    for (int i = 0; i < n; i++)
      if (w->finished[i] && !w->noted[i]) {
        w->noted[i] = newly = true;
        struct timespec d = deadline_after(c->grace(c->arg, i));
        if (!timed || before(&d, &deadline)) deadline = d;
        timed = true;
      }
    for (int i = 0; newly && i < n; i++) w->seen[i] = c->progress(c->arg, i);
    if (rc != ETIMEDOUT || !w->pending) continue;
    /* A device waiting in a rendezvous comes back by itself (its wait is
     * bounded): give it that time again before judging the others; so does
     * one that moved in the last period (slow, say on a loaded machine, but
     * not stuck). */
    bool waiting = false;
    for (int i = 0; i < n && !waiting; i++) waiting = !w->finished[i] && c->waiting(c->arg, i);
    for (int i = 0; i < n; i++) {
      uint64_t now = c->progress(c->arg, i);
      moved |= !w->finished[i] && now != w->seen[i];
      w->seen[i] = now;
    }
    if (waiting || moved) {
      moved = false;
      deadline = deadline_after(c->grace(c->arg, -1));
      continue;
    }
    for (int i = 0; i < n; i++)
      if (!w->finished[i]) {
        w->abandoned[i] = left[i] = true;
        c->give_up(c->arg, i);
        w->refs++;
        if (w->stuck < 0) w->stuck = i;
        pthread_detach(w->threads[i]);
      }
    break;
  }
  pthread_mutex_unlock(&w->mu);
}

kiln_status kdist_workers_run(kdist_workers *w, int n, const kdist_call *c, bool *left) {
  for (int i = 0; i < n; i++) left[i] = false;
  if (w && n <= w->n && !pthread_mutex_trylock(&w->busy)) {
    int stuck = kdist_workers_stuck(w);
    if (stuck < 0) run_on(w, n, c, left);
    pthread_mutex_unlock(&w->busy);
    if (stuck >= 0)
      return kcore_fail(KILN_ERR_COLLECTIVE, "shard_map: an earlier call was abandoned because "
                        "device %d was stuck; this context's multi-device calls fail", stuck);
    return KILN_OK;
  }
  kdist_workers *own = NULL;
  kiln_status st = kdist_workers_new(n, &own);
  if (st) return st;
  run_on(own, n, c, left);
  kdist_workers_free(own);
  return KILN_OK;
}
