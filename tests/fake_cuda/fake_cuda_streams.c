/* The stand-in driver's streams and events, host functions, and the hooks
 * the stand-in NCCL and the tests call (fake_cuda_driver.c says how strict
 * it is). */
#include "fake_cuda_internal.h"

/* ---- streams and events ---- */

CUresult fake_cuStreamCreate(CUstream *out, unsigned int flags) {
  FAKE_BEGIN(true);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  s->device = fake_current_device();
  s->next = fake_streams;
  fake_streams = s;
  *out = s;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuStreamDestroy(CUstream s) {
  FAKE_BEGIN(true);
  if (fake_stream_special(s) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  CUresult rc = fake_stall_check(fake_run(s, s->enqueued)); /* queued work completes */
  s->destroyed = true;
  free(s->ops);
  s->ops = NULL;
  s->cap = s->head = s->count = 0;
  return fake_leave(rc);
}

CUresult fake_cuStreamSynchronize(CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (s->capture) return fake_leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return fake_leave(fake_stall_check(fake_run(s, s->enqueued)));
}

/* Forces nothing, as the driver: NOT_READY while work is queued. */
CUresult fake_cuStreamQuery(CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(s->head < s->count ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

/* The v2 entry point: flags other than DEFAULT are not supported. */
CUresult fake_cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != CU_STREAM_WRITE_VALUE_DEFAULT || !addr || addr % sizeof value)
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  fake_op op = {.kind = FAKE_WRITE_VALUE, .dst = (char *)(uintptr_t)addr, .seq = value};
  return fake_leave(fake_enqueue(s, op));
}

CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s) || !fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  if (!e->recorded) return fake_leave(CUDA_SUCCESS);
  fake_op op = {.kind = FAKE_WAIT, .stream = e->stream, .seq = e->seq};
  return fake_leave(fake_enqueue(s, op));
}

CUresult fake_cuEventCreate(CUevent *out, unsigned int flags) {
  FAKE_BEGIN(true);
  (void)flags;
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (!e) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  e->device = fake_current_device();
  e->next = fake_events;
  fake_events = e;
  *out = e;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuEventDestroy(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  e->destroyed = true;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuEventRecord(CUevent e, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (e->device != s->device) {
    fprintf(stderr, "fake libcuda: cuEventRecord: event of device %d on a stream of device %d\n",
            e->device, s->device);
    return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  }
  e->recorded = true;
  e->stream = s;
  e->seq = s->enqueued;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuEventSynchronize(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(e->recorded ? fake_stall_check(fake_run(e->stream, e->seq)) : CUDA_SUCCESS);
}

/* A real GPU makes progress while the host polls, so a query runs the work
 * up to the event (the stand-in has no background progress): NOT_READY only
 * behind a gate that is not open. */
CUresult fake_cuEventQuery(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(e->recorded ? fake_run(e->stream, e->seq) : CUDA_SUCCESS);
}

/* ---- host functions ---- */

CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (!fn) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  fake_op op = {.kind = FAKE_HOST_FN, .host_fn = fn, .host_user = user};
  return fake_leave(fake_enqueue(s, op));
}

/* Exported too, for stand-ins of other libraries (tests/fake_cuda) that
 * queue their work on a stream. fn runs under the fake's lock: like the
 * driver, it must not call back into the driver. */
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) {
  return fake_cuLaunchHostFunc(s, fn, user);
}

/* For the stand-in NCCL (fake_nccl.c), which queues each participant's part
 * of a collective as a gate: gate(user) runs under the fake's lock when the
 * stream reaches it and returns nonzero once the collective has happened
 * (it may run other streams up to a position with
 * kiln_fake_cuda_stream_run); until then the stream stalls there. Returns
 * the gate's position (the stream's operation count after it), 0 on error. */
unsigned long long kiln_fake_cuda_launch_gate(CUstream s, int (*gate)(void *), void *user) {
  CUresult rc = fake_enter("cuLaunchHostFunc", true);
  if (rc == CUDA_SUCCESS && (!fake_stream_ok(&s) || s->capture)) rc = CUDA_ERROR_INVALID_HANDLE;
  if (rc == CUDA_SUCCESS) rc = fake_enqueue(s, (fake_op){.kind = FAKE_GATE, .gate = gate, .host_user = user});
  unsigned long long at = rc == CUDA_SUCCESS ? s->enqueued : 0;
  fake_leave(rc);
  return at;
}

/* From a gate: runs s until `upto` operations have run (its own gate not
 * included); 0 on success, 1 if s stalls, -1 on a failure. */
int kiln_fake_cuda_stream_run(CUstream s, unsigned long long upto) {
  CUresult rc = fake_run(s, upto);
  return rc == CUDA_SUCCESS ? 0 : rc == CUDA_ERROR_NOT_READY ? 1 : -1;
}

/* The device a live stream belongs to, -1 for none (takes the lock). */
int kiln_fake_cuda_stream_device(CUstream s) {
  pthread_mutex_lock(&fake_lock);
  int d = fake_stream_ok(&s) ? s->device : -1;
  pthread_mutex_unlock(&fake_lock);
  return d;
}

int kiln_fake_cuda_device_count(void) {
  pthread_mutex_lock(&fake_lock);
  int n = fake_initialized ? fake_devices : 0;
  pthread_mutex_unlock(&fake_lock);
  return n;
}

/* For those host functions: whether [p, p+n) lies in one live allocation of
 * any device (the lock is already held while stream work runs). */
int kiln_fake_cuda_range_live(const void *p, size_t n) {
  for (int d = 0; d < fake_device_count(); d++)
    if (fake_range_live(p, n, d)) return 1;
  return 0;
}
