/* Memory held for a thread kiln gave up on. A device thread abandoned in
 * foreign code (a kernel, BLAS, a host callback) may still read and write
 * the buffers it was given when it comes back, long after its caller failed
 * and released them. Its runner holds those ranges here; the allocators that
 * would free or reuse memory (the CPU device's buffers, an executable's
 * arena) ask first, and memory under a hold is kept out of reuse and freed
 * when the last hold over it is dropped (the thread came back) — or never,
 * if it never does. Nothing is held in a healthy process, and the check is
 * then one atomic load. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include "core/core.h"

typedef struct hold {
  const void *token;
  uintptr_t lo, hi;
  struct hold *next;
} hold;

typedef struct deferred {
  void *p;
  size_t nbytes;
  struct deferred *next;
} deferred;

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static hold *holds;       /* guarded by hold_mu */
static deferred *pending; /* freed memory waiting for its holds to go */
static _Atomic int n_holds;

void kcore_hold_add(const void *token, const void *p, size_t nbytes) {
  if (!p || !nbytes) return;
  hold *h = malloc(sizeof *h);
  if (!h) return; /* out of memory: the range is not held; nothing better to do here */
  h->token = token, h->lo = (uintptr_t)p, h->hi = (uintptr_t)p + nbytes;
  pthread_mutex_lock(&hold_mu);
  h->next = holds, holds = h;
  atomic_fetch_add(&n_holds, 1);
  pthread_mutex_unlock(&hold_mu);
}

/* Whether any hold overlaps [p, p + nbytes) (hold_mu held). Holds are
 * ranges inside blocks (a shard is a view into an array's memory), and a
 * block is released whole. */
static bool held(const void *p, size_t nbytes) {
  uintptr_t lo = (uintptr_t)p, hi = lo + (nbytes ? nbytes : 1);
  for (const hold *h = holds; h; h = h->next)
    if (h->lo < hi && lo < h->hi) return true;
  return false;
}

bool kcore_hold_defer_free(void *p, size_t nbytes) {
  if (!p || atomic_load(&n_holds) == 0) return false;
  pthread_mutex_lock(&hold_mu);
  bool yes = held(p, nbytes);
  deferred *d = yes ? malloc(sizeof *d) : NULL;
  if (d) d->p = p, d->nbytes = nbytes, d->next = pending, pending = d; /* else leaked: still never reused */
  pthread_mutex_unlock(&hold_mu);
  return yes;
}

void kcore_hold_drop(const void *token) {
  deferred *done = NULL;
  pthread_mutex_lock(&hold_mu);
  for (hold **h = &holds; *h;) {
    if ((*h)->token != token) {
      h = &(*h)->next;
      continue;
    }
    hold *gone = *h;
    *h = gone->next;
    free(gone);
    atomic_fetch_sub(&n_holds, 1);
  }
  for (deferred **d = &pending; *d;) {
    if (held((*d)->p, (*d)->nbytes)) {
      d = &(*d)->next;
      continue;
    }
    deferred *free_now = *d;
    *d = free_now->next;
    free_now->next = done, done = free_now;
  }
  pthread_mutex_unlock(&hold_mu);
  while (done) {
    deferred *next = done->next;
    free(done->p), free(done);
    done = next;
  }
}
