/* Persistent threads for the CPU shard_map runner: created once per context
 * and woken per call, so a training step pays a condition-variable wake-up
 * per device instead of a pthread_create. The caller runs index 0 itself.
 * One call at a time holds the workers; a call that finds them busy (another
 * thread's shard_map, or one started from inside a device program) runs on
 * threads of its own, as before. */
#include <pthread.h>
#include <stdlib.h>
#include "dist/dist.h"

struct kdist_workers {
  int n; /* threads: indices 1..n */
  pthread_t *threads;
  pthread_mutex_t busy; /* held by the call that owns the workers */
  pthread_mutex_t mu;   /* guards what follows */
  pthread_cond_t wake, done;
  uint64_t gen;  /* bumped per call */
  int want;      /* indices of this call: 0..want-1 */
  int pending;   /* workers of this call not finished */
  bool quit;
  kdist_work_fn fn;
  void *arg;
};

typedef struct worker_arg {
  kdist_workers *w;
  int i;
} worker_arg;

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
    kdist_work_fn fn = w->fn;
    void *arg = w->arg;
    pthread_mutex_unlock(&w->mu);
    fn(arg, a.i);
    pthread_mutex_lock(&w->mu);
    if (--w->pending == 0) pthread_cond_signal(&w->done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

kiln_status kdist_workers_new(int n, kdist_workers **out) {
  kdist_workers *w = calloc(1, sizeof *w);
  if (w) w->threads = calloc((size_t)(n > 0 ? n : 1), sizeof *w->threads);
  if (!w || !w->threads) {
    if (w) free(w->threads);
    free(w);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "shard_map: out of host memory");
  }
  pthread_mutex_init(&w->busy, NULL);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->wake, NULL);
  pthread_cond_init(&w->done, NULL);
  for (; w->n < n; w->n++) {
    worker_arg *a = malloc(sizeof *a);
    if (a) *a = (worker_arg){w, w->n + 1};
    if (!a || pthread_create(&w->threads[w->n], NULL, worker_main, a)) {
      free(a);
      kdist_workers_free(w);
      return kcore_fail(KILN_ERR_INTERNAL, "shard_map: cannot start the thread of device %d", n);
    }
  }
  *out = w;
  return KILN_OK;
}

void kdist_workers_free(kdist_workers *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->quit = true;
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->n; i++) pthread_join(w->threads[i], NULL);
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->busy);
  free(w->threads);
  free(w);
}

typedef struct spawned {
  kdist_work_fn fn;
  void *arg;
  int i;
} spawned;

static void *spawned_main(void *p) {
  spawned *s = p;
  s->fn(s->arg, s->i);
  return NULL;
}

/* Threads of this call's own: the workers are busy or too few. Indices
 * whose thread does not start are given to skip (so that no one waits for
 * them), the others run. */
static kiln_status run_spawned(int n, kdist_work_fn fn, kdist_work_fn skip, void *arg) {
  pthread_t *t = calloc((size_t)n, sizeof *t);
  spawned *s = calloc((size_t)n, sizeof *s);
  int started = 1;
  for (; t && s && started < n; started++) {
    s[started] = (spawned){fn, arg, started};
    if (pthread_create(&t[started], NULL, spawned_main, &s[started])) break;
  }
  kiln_status st = started == n ? KILN_OK
                   : kcore_fail(KILN_ERR_INTERNAL, "shard_map: cannot start the thread of "
                                "device %d", started);
  for (int i = started; i < n; i++) skip(arg, i);
  if (st) skip(arg, 0);
  else fn(arg, 0);
  for (int i = 1; i < started; i++) pthread_join(t[i], NULL);
  free(t), free(s);
  return st;
}

kiln_status kdist_workers_run(kdist_workers *w, int n, kdist_work_fn fn, kdist_work_fn skip,
                              void *arg) {
  if (!w || n - 1 > w->n || pthread_mutex_trylock(&w->busy)) return run_spawned(n, fn, skip, arg);
  pthread_mutex_lock(&w->mu);
  w->fn = fn, w->arg = arg, w->want = n, w->pending = n - 1;
  w->gen++;
  if (n > 1) pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  fn(arg, 0);
  pthread_mutex_lock(&w->mu);
  while (w->pending) pthread_cond_wait(&w->done, &w->mu);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&w->busy);
  return KILN_OK;
}
