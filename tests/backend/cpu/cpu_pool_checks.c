/* The CPU backend's thread pool (backend/cpu/pool.c) driven from C for
 * test_cpu_pool.cc, whose C++ cannot include the backend's header. */
#include "cpu_pool_checks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_backend.h"

typedef struct {
  _Atomic int *visits;
  _Atomic int chunks;
  int64_t fail_from; /* items at or past it fail their chunk; -1: none */
} kpt_job;

static kiln_status kpt_visit(void *user, int64_t lo, int64_t hi) {
  kpt_job *j = user;
  atomic_fetch_add(&j->chunks, 1);
  for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->visits[i], 1);
  if (j->fail_from >= 0 && hi > j->fail_from)
    return kcore_fail(KILN_ERR_ARGUMENT, "chunk [%lld, %lld) failed", (long long)lo,
                      (long long)hi);
  return KILN_OK;
}

int kpt_back_to_back(int n_threads, int jobs, int64_t items, int64_t min_chunk, int *max_chunks) {
  kcpu_pool *p = NULL;
  if (kcpu_pool_new(n_threads, &p)) return -1;
  kpt_job j = {calloc((size_t)items + 1, sizeof(_Atomic int)), 0, -1};
  int wrong = j.visits ? 0 : -1;
  *max_chunks = 0;
  for (int r = 0; r < jobs && wrong == 0; r++) {
    for (int64_t i = 0; i < items; i++) atomic_store(&j.visits[i], 0);
    atomic_store(&j.chunks, 0);
    if (kcpu_pool_parallel_for(p, 0, items, min_chunk, kpt_visit, &j)) wrong = -2;
    for (int64_t i = 0; i < items && wrong == 0; i++) wrong += atomic_load(&j.visits[i]) != 1;
    if (atomic_load(&j.chunks) > *max_chunks) *max_chunks = atomic_load(&j.chunks);
  }
  free(j.visits);
  kcpu_pool_free(p);
  return wrong;
}

kiln_status kpt_failing_last_chunk(int n_threads, int64_t items, char *msg, size_t cap) {
  kcpu_pool *p = NULL;
  kiln_status st = kcpu_pool_new(n_threads, &p);
  if (st) return st;
  kpt_job j = {calloc((size_t)items + 1, sizeof(_Atomic int)), 0, items - 1};
  st = kcpu_pool_parallel_for(p, 0, items, 1, kpt_visit, &j);
  strncpy(msg, kiln_last_error(), cap - 1);
  msg[cap - 1] = 0;
  /* the pool still works after a failed job */
  j.fail_from = -1;
  if (st && kcpu_pool_parallel_for(p, 0, items, 1, kpt_visit, &j)) st = KILN_ERR_INTERNAL;
  free(j.visits);
  kcpu_pool_free(p);
  return st;
}

/* Several threads sharing one pool take turns. */
typedef struct {
  kcpu_pool *p;
  int jobs, wrong;
} kpt_caller;

static void *kpt_caller_main(void *arg) {
  kpt_caller *c = arg;
  enum { N = 5000 };
  kpt_job j = {calloc(N, sizeof(_Atomic int)), 0, -1};
  for (int r = 0; r < c->jobs && j.visits; r++) {
    for (int i = 0; i < N; i++) atomic_store(&j.visits[i], 0);
    if (kcpu_pool_parallel_for(c->p, 0, N, 16, kpt_visit, &j)) c->wrong++;
    for (int i = 0; i < N; i++) c->wrong += atomic_load(&j.visits[i]) != 1;
  }
  free(j.visits);
  return NULL;
}

int kpt_shared_by_callers(int n_threads, int callers, int jobs) {
  kcpu_pool *p = NULL;
  if (kcpu_pool_new(n_threads, &p)) return -1;
  pthread_t t[8];
  kpt_caller c[8];
  int wrong = 0;
  if (callers > 8) callers = 8;
  for (int i = 0; i < callers; i++) {
    c[i] = (kpt_caller){p, jobs, 0};
    pthread_create(&t[i], NULL, kpt_caller_main, &c[i]);
  }
  for (int i = 0; i < callers; i++) {
    pthread_join(t[i], NULL);
    wrong += c[i].wrong;
  }
  kcpu_pool_free(p);
  return wrong;
}
