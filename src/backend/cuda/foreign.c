/* Releasing memory another framework lent kiln (a zero-copy DLPack import)
 * without a host wait. Contract: the producer's deleter runs only after every
 * piece of work this device had queued when the array was released (on its
 * compute and copy streams) has finished, and it runs on a kiln thread: at
 * a later release of an import, a wait or synchronize on the device, or the
 * device's teardown, which runs every deleter still owed. A deleter may thus
 * run on another thread than the release; DLPack producers allow that. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

typedef struct kcuda_foreign_entry {
  CUevent done[2]; /* recorded on the compute and the copy stream */
  void (*free_fn)(void *);
  void *arg;
} kcuda_foreign_entry;

kiln_status kcuda_foreign_open(kcuda_device *d) {
  if (pthread_mutex_init(&d->foreign.lock, NULL) != 0)
    return kcore_fail(KILN_ERR_INTERNAL, "%s: pthread_mutex_init failed", d->where);
  d->foreign.lock_ready = true;
  return KILN_OK;
}

/* Takes out the entries whose work is done (all of them when `all`), gives
 * their events back, and runs their deleters outside the lock (a deleter
 * may release another import). Inside the device's context. */
static void kcuda_foreign_run(kcuda_device *d, bool all) {
  if (!d->foreign.lock_ready || atomic_load(&d->foreign.pending) == 0) return;
  pthread_mutex_lock(&d->foreign.lock);
  int n = d->foreign.n, kept = 0, due = 0;
  kcuda_foreign_entry *v = d->foreign.v;
  kcuda_foreign_entry *run = malloc((size_t)n * sizeof *run);
  for (int i = 0; i < n; i++) {
    bool done = all || !run; /* without memory for the list, run them here */
    for (int k = 0; k < 2 && !done; k++) {
      CUresult rc = d->drv->cuEventQuery(v[i].done[k]);
      if (rc == CUDA_ERROR_NOT_READY) break;
      /* A fault ends the stream's work too: nothing will read the memory. */
      if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuEventQuery (releasing a DLPack import)");
      done = k == 1;
    }
    if (!done) {
      v[kept++] = v[i];
      continue;
    }
    for (int k = 0; k < 2; k++) kcuda_event_give(d, v[i].done[k]);
    if (run) run[due++] = v[i];
    else v[i].free_fn(v[i].arg);
  }
  d->foreign.n = kept;
  atomic_store(&d->foreign.pending, kept);
  pthread_mutex_unlock(&d->foreign.lock);
  for (int i = 0; i < due; i++) run[i].free_fn(run[i].arg);
  free(run);
}

void kcuda_foreign_poll(kcuda_device *d) { kcuda_foreign_run(d, false); }

void kcuda_foreign_close(kcuda_device *d) {
  kcuda_foreign_run(d, true);
  free(d->foreign.v);
  if (d->foreign.lock_ready) pthread_mutex_destroy(&d->foreign.lock);
}

static kiln_status kcuda_foreign_queue(kcuda_device *d, kcuda_foreign_entry *e) {
  kiln_status st = KILN_OK;
  CUstream streams[2] = {d->compute, d->copy};
  for (int k = 0; k < 2 && !st; k++) {
    if ((st = kcuda_event_take(d, &e->done[k]))) break;
    KCUDA_CU(d->drv, d->where, cuEventRecord, (e->done[k], streams[k]), out);
  }
  if (st) goto out;
  pthread_mutex_lock(&d->foreign.lock);
  if (d->foreign.n == d->foreign.cap) {
    int cap = d->foreign.cap ? 2 * d->foreign.cap : 16;
    kcuda_foreign_entry *v = realloc(d->foreign.v, (size_t)cap * sizeof *v);
    if (v) d->foreign.v = v, d->foreign.cap = cap;
  }
  if (d->foreign.n < d->foreign.cap) {
    d->foreign.v[d->foreign.n++] = *e;
    atomic_store(&d->foreign.pending, d->foreign.n);
  } else {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", d->where);
  }
  pthread_mutex_unlock(&d->foreign.lock);
out:
  return st;
}

/* kdev_ops.release_foreign. The compute stream first waits for the buffer's
 * last write (the plain release with no memory to free), so the compute
 * event covers that write too. */
void kcuda_release_foreign(kiln_device *dev, kdev_buffer *buf) {
  kcuda_device *d = kcuda_impl(dev);
  kcuda_foreign_entry e = {.free_fn = buf->foreign_free, .arg = buf->foreign};
  kdev_buffer own = *buf;
  own.ptr = 0;
  own.nbytes = 0;
  dev->ops->release(dev, &own);
  bool entered = kcuda_enter(d) == KILN_OK;
  if (entered && kcuda_foreign_queue(d, &e) == KILN_OK) {
    kcuda_foreign_poll(d);
    kcuda_leave(d);
    return;
  }
  /* Could not defer it: wait here instead (streams carry their context). */
  kcore_log(d->log_level, KILN_LOG_ERROR, "releasing a DLPack import on %s: %s", d->where,
            kiln_last_error());
  CUresult rc;
  if ((rc = d->drv->cuStreamSynchronize(d->compute)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuStreamSynchronize");
  if ((rc = d->drv->cuStreamSynchronize(d->copy)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuStreamSynchronize");
  for (int k = 0; k < 2; k++)
    if (e.done[k]) kcuda_event_give(d, e.done[k]);
  if (entered) kcuda_leave(d);
  e.free_fn(e.arg);
}
