/* A fixed pool of worker threads that splits a range of work items into
 * contiguous chunks, one per thread: the C target's "grid". The caller's
 * thread takes the first chunk, so a pool of one thread runs inline.
 *
 * Waking a sleeping thread through a condition variable costs tens of
 * microseconds here (measured: splitting a 65,536-element add over two
 * threads took 30 us against 14 us on one), and a program's kernels come
 * back to back. So a worker that has finished a chunk, and the caller
 * waiting for the workers, first spin for about KCPU_SPIN_ITERS pauses on
 * the job counters before they sleep; the mutex and condition variables
 * remain the way to sleep and to wake, so no wake-up is lost. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"

/* About 50 us of pause instructions on current x86 cores. */
#define KCPU_SPIN_ITERS 2048

static inline void kcpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct kcpu_pool {
  int n_threads; /* workers + the caller */
  pthread_t *workers;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_mutex_t run_mu; /* one parallel_for at a time */
  /* The job in flight: written before generation moves (release), read
   * after it is seen to move (acquire). */
  kcpu_range_fn fn;
  void *user;
  int64_t begin, end;
  _Atomic uint64_t generation;
  _Atomic int pending;
  kiln_status status;
  char error[512];
  _Atomic bool stop;
};

/* Chunk k of n over [begin, end): balanced, contiguous. */
static void kcpu_chunk(int64_t begin, int64_t end, int k, int n, int64_t *lo, int64_t *hi) {
  int64_t len = end - begin, base = len / n, extra = len % n;
  *lo = begin + base * k + (k < extra ? k : extra);
  *hi = *lo + base + (k < extra);
}

static void kcpu_pool_record(kcpu_pool *p, kiln_status st) {
  if (st == KILN_OK) return;
  pthread_mutex_lock(&p->mu);
  if (p->status == KILN_OK) {
    p->status = st;
    strncpy(p->error, kiln_last_error(), sizeof p->error - 1);
  }
  pthread_mutex_unlock(&p->mu);
}

static void *kcpu_worker(void *arg) {
  kcpu_pool *p = ((void **)arg)[0];
  int k = (int)(intptr_t)((void **)arg)[1];
  free(arg);
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < KCPU_SPIN_ITERS && !atomic_load(&p->stop) &&
                    atomic_load_explicit(&p->generation, memory_order_acquire) == seen;
         i++)
      kcpu_relax();
    if (atomic_load_explicit(&p->generation, memory_order_acquire) == seen) {
      pthread_mutex_lock(&p->mu);
      while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen)
        pthread_cond_wait(&p->work, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load_explicit(&p->generation, memory_order_acquire);
    int64_t lo, hi;
    kcpu_chunk(p->begin, p->end, k, p->n_threads, &lo, &hi);
    if (lo < hi) kcpu_pool_record(p, p->fn(p->user, lo, hi));
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu); /* the caller may be asleep on done */
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

kiln_status kcpu_pool_new(int n_threads, kcpu_pool **out) {
  if (n_threads < 1) n_threads = 1;
  kcpu_pool *p = calloc(1, sizeof *p);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kcpu_pool_new: out of host memory");
  p->n_threads = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->run_mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->workers = calloc((size_t)n_threads, sizeof *p->workers);
  int started = 0;
  for (int k = 1; p->workers && k < n_threads; k++, started++) {
    void **arg = malloc(2 * sizeof *arg);
    if (!arg) break;
    arg[0] = p;
    arg[1] = (void *)(intptr_t)k;
    if (pthread_create(&p->workers[k], NULL, kcpu_worker, arg) != 0) {
      free(arg);
      break;
    }
  }
  if (!p->workers || started != n_threads - 1) {
    p->n_threads = started + 1;
    kcpu_pool_free(p);
    return kcore_fail(KILN_ERR_DEVICE, "kcpu_pool_new: could not start %d worker threads",
                      n_threads - 1);
  }
  *out = p;
  return KILN_OK;
}

/* A pool still inside a parallel_for belongs to a device thread that was
 * abandoned in a kernel (see dist's shard_map runner): joining would wait
 * for it, maybe for ever, and freeing would pull the pool from under it when
 * it comes back. Its threads are told to stop and detached, and the pool's
 * memory is left to them. */
void kcpu_pool_free(kcpu_pool *p) {
  if (!p) return;
  bool busy = pthread_mutex_trylock(&p->run_mu) != 0;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  if (busy) {
    for (int k = 1; p->workers && k < p->n_threads; k++) pthread_detach(p->workers[k]);
    return;
  }
  pthread_mutex_unlock(&p->run_mu);
  for (int k = 1; p->workers && k < p->n_threads; k++) pthread_join(p->workers[k], NULL);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->run_mu);
  free(p->workers);
  free(p);
}

int kcpu_pool_threads(const kcpu_pool *p) { return p ? p->n_threads : 1; }

kiln_status kcpu_pool_parallel_for(kcpu_pool *p, int64_t begin, int64_t end, int64_t min_chunk,
                                   kcpu_range_fn fn, void *user) {
  if (end <= begin) return KILN_OK;
  /* Small ranges are not worth waking threads for. */
  if (!p || p->n_threads == 1 || end - begin < 2 * (min_chunk > 0 ? min_chunk : 1))
    return fn(user, begin, end);
  pthread_mutex_lock(&p->run_mu);
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->user = user;
  p->begin = begin;
  p->end = end;
  p->status = KILN_OK;
  atomic_store(&p->pending, p->n_threads - 1);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  int64_t lo, hi;
  kcpu_chunk(begin, end, 0, p->n_threads, &lo, &hi);
  if (lo < hi) kcpu_pool_record(p, fn(user, lo, hi));
  for (int i = 0; i < KCPU_SPIN_ITERS && atomic_load(&p->pending) > 0; i++) kcpu_relax();
  pthread_mutex_lock(&p->mu);
  while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
  kiln_status st = p->status;
  if (st) kcore_fail(st, "%s", p->error);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->run_mu);
  return st;
}
