/* The fault trail: which queued step an asynchronous device fault belongs to.
 *
 * A kernel that faults is only seen at the next wait, long after kiln queued
 * it and possibly after many more steps. So before each step it queues on a
 * device's compute stream, kiln queues a write of the step's token into a
 * pinned, device-mapped host word (cuStreamWriteValue32, ordered after the
 * stream's earlier work) and keeps the step's description under that token
 * in a ring. Work behind a fault never runs: once the context has failed,
 * the word holds the token of the step the stream was in. Reading it is a
 * plain host load, which works on a failed context. The end of a program is
 * marked too, so that a fault in later work is not blamed on its last step:
 * lazily, by kcuda_trail_settle before any work other than a marked step
 * (copies, collectives), since the next step's mark makes it moot. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

/* Tokens are 31 bits; the top bit marks "finished" rather than "started". */
#define KCUDA_TRAIL_DONE 0x80000000u

kiln_status kcuda_trail_open(kcuda_device *d) {
  kcuda_trail *t = &d->trail;
  kiln_status st = KILN_OK;
  if (pthread_mutex_init(&t->lock, NULL) != 0)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: pthread_mutex_init failed", d->where);
  t->lock_ready = true;
  if (!(t->ring = calloc(KCUDA_TRAIL_RING, sizeof *t->ring)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for the fault trail",
                      d->where);
  void *word = NULL;
  KCUDA_CU(d->drv, d->where, cuMemHostAlloc, (&word, sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP),
           out);
  t->word = word;
  *t->word = 0;
  KCUDA_CU(d->drv, d->where, cuMemHostGetDevicePointer, (&t->word_dev, word, 0), out);
out:
  return st;
}

/* Inside the device's context. */
void kcuda_trail_close(kcuda_device *d) {
  kcuda_trail *t = &d->trail;
  if (t->word) {
    CUresult rc = d->drv->cuMemFreeHost((void *)t->word);
    if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuMemFreeHost");
  }
  free(t->ring);
  if (t->lock_ready) pthread_mutex_destroy(&t->lock);
  memset(t, 0, sizeof *t);
}

/* Queues the write of `token`, under the lock. */
static kiln_status kcuda_trail_write(kcuda_device *d, uint32_t token) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuStreamWriteValue32,
           (d->compute, d->trail.word_dev, token, CU_STREAM_WRITE_VALUE_DEFAULT), out);
out:
  return st;
}

kiln_status kcuda_trail_enter(kcuda_device *d, const char *what) {
  kcuda_trail *t = &d->trail;
  pthread_mutex_lock(&t->lock);
  uint32_t token = (t->last + 1) & ~KCUDA_TRAIL_DONE;
  if (token == 0) token = 1; /* 0 is "nothing marked yet" */
  kcuda_trail_entry *e = &t->ring[token % KCUDA_TRAIL_RING];
  e->token = token;
  /* Every step of every call passes here: a bounded copy, not snprintf. */
  size_t n = strnlen(what, sizeof e->what - 1);
  memcpy(e->what, what, n);
  e->what[n] = '\0';
  kiln_status st = kcuda_trail_write(d, token);
  if (st) {
    pthread_mutex_unlock(&t->lock);
    return st;
  }
  t->last = token;
  t->owed = false; /* this mark replaces the end mark owed */
  return KILN_OK;
}

void kcuda_trail_leave(kcuda_device *d) { pthread_mutex_unlock(&d->trail.lock); }

/* The end mark is owed, not queued: the next step's mark would overwrite it
 * unread, so a program called in a loop pays one stream write per call, not
 * two (each is about a microsecond of host time). kcuda_trail_settle queues
 * it before any other work. */
kiln_status kcuda_trail_finish(kcuda_device *d) {
  kcuda_trail *t = &d->trail;
  pthread_mutex_lock(&t->lock);
  t->owed = t->last != 0;
  pthread_mutex_unlock(&t->lock);
  return KILN_OK;
}

kiln_status kcuda_trail_settle(kcuda_device *d) {
  kcuda_trail *t = &d->trail;
  if (!t->lock_ready) return KILN_OK;
  pthread_mutex_lock(&t->lock);
  kiln_status st = t->owed ? kcuda_trail_write(d, t->last | KCUDA_TRAIL_DONE) : KILN_OK;
  if (!st) t->owed = false;
  pthread_mutex_unlock(&t->lock);
  return st;
}

bool kcuda_device_failed(kcuda_device *d) {
  CUresult rc = d->drv->cuStreamQuery(d->compute);
  return rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_READY;
}

kiln_status kcuda_trail_blame(kcuda_device *d, kiln_status st) {
  kcuda_trail *t = &d->trail;
  if (st != KILN_ERR_DEVICE || !t->word) return st;
  /* Only a failed stream has a step to blame (not, say, a launch refused
   * for its resources). */
  if (!kcuda_device_failed(d)) return st;
  uint32_t word = *t->word;
  uint32_t token = word & ~KCUDA_TRAIL_DONE;
  if (token == 0) return st;
  pthread_mutex_lock(&t->lock);
  const kcuda_trail_entry *e = &t->ring[token % KCUDA_TRAIL_RING];
  char what[sizeof e->what];
  bool known = e->token == token;
  if (known) memcpy(what, e->what, sizeof what);
  pthread_mutex_unlock(&t->lock);
  if (!known)
    return kcore_fail_wrap(st, "the device failed in a step queued over %d steps before the latest",
                           KCUDA_TRAIL_RING);
  if (word & KCUDA_TRAIL_DONE)
    return kcore_fail_wrap(st, "the device failed after %s had finished, in work queued later",
                           what);
  return kcore_fail_wrap(st, "the device failed in %s", what);
}
