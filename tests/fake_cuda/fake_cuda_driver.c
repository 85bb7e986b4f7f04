/* A stand-in for libcuda.so.1, built as tests/fake_cuda/libcuda.so.1, so that
 * backend/cuda can run -- and be checked -- on machines without a GPU.
 *
 * It implements the driver entry points kiln resolves, over host memory, and
 * is strict where the real driver is undefined or lenient:
 *   - stream work runs lazily, only when something forces it (a stream or
 *     event synchronisation, an event query -- a GPU progresses while the
 *     host polls -- or a wait on an event of another stream that is
 *     itself forced), which is a legal but adversarial schedule: a missing
 *     wait shows up as a copy into memory whose allocation has not run yet,
 *     or as data read from a staging buffer after the host overwrote it;
 *   - a copy that touches device memory outside a live allocation, an event
 *     recorded on another context's stream, a call that needs a current
 *     context without one, an unknown or destroyed handle, and unbalanced
 *     context pushes or retains are errors;
 *   - kiln_fake_cuda_live_objects() counts what is still allocated, so tests
 *     can check that a context gives back everything it took;
 *   - modules are checked to be cubins or PTX naming the kernels looked up;
 *     a launched kernel computes nothing (there is no GPU), but when it
 *     "runs" every pointer it was given (kiln's kernel ABI) must lie in a
 *     live allocation; graphs replay their nodes in insertion order;
 *   - stream capture records kernels and host functions only (the work a
 *     matmul library queues): anything else queued on a capturing stream,
 *     or a synchronisation of one, is an error; graphs of kernel, child
 *     graph and captured nodes are supported, and a child graph node can
 *     only be given a graph of the same kernels.
 *   - the stand-in NCCL (fake_nccl.c) queues gates: a stream stalls at one
 *     until its collective can happen; a synchronisation that would wait on
 *     a stall forever fails with CUDA_ERROR_LAUNCH_TIMEOUT instead.
 * A violation found while running stream work is reported on stderr and
 * becomes a sticky CUDA_ERROR_ILLEGAL_ADDRESS, as a crashed kernel would.
 *
 * Configuration, read at each call (the device count at cuInit):
 * KILN_FAKE_CUDA_DEVICES (default 2),
 * KILN_FAKE_CUDA_MEMORY_MB per device (512), KILN_FAKE_CUDA_VERSION (the toolkit's CUDA_VERSION),
 * KILN_FAKE_CUDA_INIT_ERROR (a CUresult for cuInit to return, default 0),
 * KILN_FAKE_CUDA_NO_POOLS (1: devices without memory pools),
 * KILN_FAKE_CUDA_HIDE (an entry point cuGetProcAddress does not find),
 * KILN_FAKE_CUDA_KERNEL_FAULT (kernels whose name contains it fault when
 * they run, as an illegal address would), and
 * KILN_FAKE_CUDA_FAIL* (below) to make one entry point fail. */
#define _GNU_SOURCE /* memmem */
#include <cuda.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_DEVICES 8

struct CUctx_st {
  int device;
  int retains;
};

typedef enum {
  FAKE_ALLOC,
  FAKE_FREE,
  FAKE_COPY,
  FAKE_WAIT,
  FAKE_HOST_FN,
  FAKE_KERNEL,
  FAKE_WRITE_VALUE,
  FAKE_MEMSET,
  FAKE_GATE
} fake_op_kind;

/* The fake knows kiln's kernel ABI (src/codegen/codegen.h): three parameters,
 * a struct of FAKE_KILN_ARGS pointers by value, then begin and end as long
 * long. That is how it copies a launch's parameters, as the driver does from
 * the kernel's metadata, and checks every pointer when the kernel "runs". */
#define FAKE_KILN_ARGS 64
typedef struct fake_launch {
  struct CUfunc_st *func;
  unsigned grid[3], block[3], shared;
  void *ptr[FAKE_KILN_ARGS];
  long long begin, end;
} fake_launch;

typedef struct fake_op {
  fake_op_kind kind;
  struct fake_alloc *alloc; /* FAKE_ALLOC, FAKE_FREE */
  char *dst;                /* FAKE_COPY, FAKE_WRITE_VALUE */
  const char *src;
  size_t n;
  int dst_device, src_device; /* -1: host memory */
  const char *what;           /* the call, for reports */
  struct CUstream_st *stream; /* FAKE_WAIT: the stream and position waited for */
  unsigned long long seq;     /* FAKE_WAIT; FAKE_WRITE_VALUE: the value */
  CUhostFn host_fn; /* FAKE_HOST_FN */
  void *host_user;  /* FAKE_HOST_FN, FAKE_GATE */
  int (*gate)(void *user); /* FAKE_GATE: nonzero once the stream may go past it */
  fake_launch launch; /* FAKE_KERNEL */
} fake_op;

struct CUmod_st {
  char *image;
  size_t size;
  bool unloaded;
  struct CUmod_st *next;
};

struct CUfunc_st {
  struct CUmod_st *module;
  char name[256];
  unsigned long long runs, items; /* launches that ran, and their work items */
  struct CUfunc_st *next;
};

/* A node is the work it stands for: one kernel or host function, or the
 * flattened work of a child graph. */
struct CUgraphNode_st {
  struct CUgraph_st *graph;
  int n;
  struct fake_op *ops;
  struct CUgraphNode_st *next; /* in the graph, in insertion order */
};

struct CUgraph_st {
  bool destroyed;
  struct CUgraphNode_st *first, *last;
  struct CUgraph_st *next;
};

typedef struct fake_exec_node {
  struct CUgraphNode_st *node; /* the node it was instantiated from */
  int n;
  struct fake_op *ops; /* its own copy */
} fake_exec_node;

struct CUgraphExec_st {
  bool destroyed;
  int n;
  fake_exec_node *nodes;
  struct CUgraphExec_st *next;
};

struct CUstream_st {
  int device;
  bool destroyed;
  fake_op *ops; /* pending work, ops[head..count) */
  size_t head, count, cap;
  unsigned long long enqueued, executed;
  struct CUgraph_st *capture; /* the graph being captured, or NULL */
  struct CUstream_st *next;
};

struct CUevent_st {
  int device;
  bool destroyed, recorded;
  struct CUstream_st *stream;
  unsigned long long seq;
  struct CUevent_st *next;
};

struct CUmemPoolHandle_st {
  int device;
  bool destroyed;
  unsigned long long threshold, reserved;
  struct CUmemPoolHandle_st *next;
};

typedef enum { FAKE_PENDING, FAKE_LIVE, FAKE_FREED } fake_alloc_state;

typedef struct fake_alloc {
  char *base;
  size_t n;
  int device;
  struct CUmemPoolHandle_st *pool;
  fake_alloc_state state;
  bool free_queued;
  struct fake_alloc *next;
} fake_alloc;

typedef struct fake_host {
  void *p;
  size_t n;
  unsigned flags; /* cuMemHostAlloc's */
  struct fake_host *next;
} fake_host;

/* The driver's process-wide state: a test double may have globals. */
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fake_initialized;
static CUresult fake_sticky = CUDA_SUCCESS;
static struct CUctx_st fake_primary[FAKE_MAX_DEVICES];
static unsigned long long fake_used[FAKE_MAX_DEVICES];
static struct CUstream_st *fake_streams;
static struct CUevent_st *fake_events;
static struct CUmemPoolHandle_st *fake_pools;
static fake_alloc *fake_allocs;
static fake_host *fake_hosts;
static struct CUmod_st *fake_modules;
static struct CUfunc_st *fake_functions;
static struct CUgraph_st *fake_graphs;
static struct CUgraphExec_st *fake_execs;
static unsigned long long fake_kernels_run, fake_graph_launches;
static _Thread_local CUcontext fake_ctx_stack[16];
static _Thread_local int fake_ctx_depth;

static long fake_env(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

/* Read at cuInit, as a driver enumerates its devices once. */
static int fake_devices;

static int fake_device_count(void) { return fake_devices; }

static unsigned long long fake_device_memory(void) {
  return (unsigned long long)fake_env("KILN_FAKE_CUDA_MEMORY_MB", 512) << 20;
}

static CUresult fake_violation(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fake libcuda: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fake_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
  return fake_sticky;
}

/* KILN_FAKE_CUDA_FAIL=<entry point> makes that function fail with
 * KILN_FAKE_CUDA_FAIL_ERROR (default CUDA_ERROR_OUT_OF_MEMORY) from its
 * (KILN_FAKE_CUDA_FAIL_AFTER + 1)-th call on, counted since the last
 * kiln_fake_cuda_reset_faults(). */
static unsigned long fake_fault_calls;

static bool fake_should_fail(const char *name) {
  const char *target = getenv("KILN_FAKE_CUDA_FAIL");
  if (!target || strcmp(target, name) != 0) return false;
  return fake_fault_calls++ >= (unsigned long)fake_env("KILN_FAKE_CUDA_FAIL_AFTER", 0);
}

/* Every entry point starts here, under the lock; `name` is the driver's name
 * for it. */
static CUresult fake_enter(const char *name, bool needs_init) {
  pthread_mutex_lock(&fake_lock);
  if (fake_sticky != CUDA_SUCCESS) return fake_sticky;
  if (needs_init && !fake_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (fake_should_fail(name)) return (CUresult)fake_env("KILN_FAKE_CUDA_FAIL_ERROR", 2);
  return CUDA_SUCCESS;
}

static CUresult fake_leave(CUresult rc) {
  pthread_mutex_unlock(&fake_lock);
  return rc;
}

/* Functions are named fake_<entry point>. */
#define FAKE_BEGIN(needs_init)                                 \
  do {                                                         \
    CUresult fake_rc_ = fake_enter(__func__ + 5, needs_init);  \
    if (fake_rc_ != CUDA_SUCCESS) return fake_leave(fake_rc_); \
  } while (0)

static int fake_current_device(void) {
  return fake_ctx_depth > 0 ? fake_ctx_stack[fake_ctx_depth - 1]->device : -1;
}

/* The special handles real CUDA takes wherever a stream goes: the legacy
 * and the per-thread default stream of the current context. The stand-in
 * gives each device one default stream for both (ordered like any other),
 * not counted as a live object. */
static struct CUstream_st fake_default_streams[FAKE_MAX_DEVICES];

static bool fake_stream_special(CUstream s) {
  return s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Whether *s is a stream, a special handle resolved in place. */
static bool fake_stream_ok(CUstream *s) {
  if (fake_stream_special(*s)) {
    int d = fake_current_device();
    if (d < 0) return false;
    fake_default_streams[d].device = d;
    *s = &fake_default_streams[d];
    return true;
  }
  for (struct CUstream_st *p = fake_streams; p; p = p->next)
    if (p == *s) return !p->destroyed;
  return false;
}

static bool fake_event_ok(CUevent e) {
  for (struct CUevent_st *p = fake_events; p; p = p->next)
    if (p == e) return !p->destroyed;
  return false;
}

static bool fake_pool_ok(CUmemoryPool pool) {
  for (struct CUmemPoolHandle_st *p = fake_pools; p; p = p->next)
    if (p == pool) return !p->destroyed;
  return false;
}

static bool fake_context_ok(CUcontext c) {
  for (int i = 0; i < fake_device_count(); i++)
    if (c == &fake_primary[i]) return c->retains > 0;
  return false;
}

/* ---- stream work ---- */

static CUresult fake_capture(CUstream s, fake_op op);

static CUresult fake_enqueue(CUstream s, fake_op op) {
  if (s->capture) return fake_capture(s, op);
  if (s->count == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    fake_op *ops = realloc(s->ops, cap * sizeof *ops);
    if (!ops) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ops = ops;
    s->cap = cap;
  }
  s->ops[s->count++] = op;
  s->enqueued++;
  return CUDA_SUCCESS;
}

/* Device memory [p, p+n) must lie in one live allocation of `device`. */
static bool fake_range_live(const char *p, size_t n, int device) {
  for (fake_alloc *a = fake_allocs; a; a = a->next)
    if (a->state == FAKE_LIVE && a->device == device && p >= a->base && p + n <= a->base + a->n)
      return true;
  return false;
}

static void fake_pool_settle(struct CUmemPoolHandle_st *pool) {
  if (pool->reserved > pool->threshold) {
    unsigned long long used = fake_used[pool->device];
    pool->reserved = used > pool->threshold ? used : pool->threshold;
  }
}

static CUresult fake_run(CUstream s, unsigned long long upto);

/* Blocking on a stalled stream would hang on a GPU: the stand-in says so
 * and fails instead (not sticky, so the process stays usable). */
static CUresult fake_stall_check(CUresult rc) {
  if (rc != CUDA_ERROR_NOT_READY) return rc;
  fprintf(stderr, "fake libcuda: a synchronisation waits for a collective that can never "
                  "complete (a GPU would hang here)\n");
  return CUDA_ERROR_LAUNCH_TIMEOUT;
}

/* The pinned allocation holding [p, p+n), or NULL. */
static fake_host *fake_pinned(const char *p, size_t n) {
  for (fake_host *h = fake_hosts; h; h = h->next)
    if (p >= (const char *)h->p && p + n <= (const char *)h->p + h->n) return h;
  return NULL;
}

/* A kernel "runs": every pointer it was given must lie in a live allocation
 * of its device now (the data itself is not computed: there is no GPU). */
static CUresult fake_kernel_run(const fake_launch *l, int device) {
  const char *fault = getenv("KILN_FAKE_CUDA_KERNEL_FAULT");
  if (fault && *fault && strstr(l->func->name, fault))
    return fake_violation("kernel %s faulted (KILN_FAKE_CUDA_KERNEL_FAULT)", l->func->name);
  if (l->begin < 0 || l->end < l->begin)
    return fake_violation("kernel %s launched over items [%lld, %lld)", l->func->name, l->begin,
                          l->end);
  for (int i = 0; i < FAKE_KILN_ARGS; i++)
    if (l->ptr[i] && !fake_range_live(l->ptr[i], 1, device))
      return fake_violation("kernel %s: argument %d (%p) is not in a live allocation of device %d",
                            l->func->name, i, l->ptr[i], device);
  fake_kernels_run++;
  l->func->runs++;
  l->func->items += (unsigned long long)(l->end - l->begin);
  return CUDA_SUCCESS;
}

static CUresult fake_execute(fake_op *op) {
  switch (op->kind) {
    case FAKE_ALLOC:
      op->alloc->state = FAKE_LIVE;
      return CUDA_SUCCESS;
    case FAKE_FREE:
      op->alloc->state = FAKE_FREED;
      fake_used[op->alloc->device] -= op->alloc->n;
      free(op->alloc->base);
      op->alloc->base = NULL;
      if (!op->alloc->pool->destroyed) fake_pool_settle(op->alloc->pool);
      return CUDA_SUCCESS;
    case FAKE_WAIT:
      return fake_run(op->stream, op->seq);
    case FAKE_HOST_FN:
      op->host_fn(op->host_user);
      return CUDA_SUCCESS;
    case FAKE_GATE:
      return op->gate(op->host_user) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    case FAKE_MEMSET:
      if (!fake_range_live(op->dst, op->n, op->dst_device))
        return fake_violation("cuMemsetD8Async of %zu bytes at %p outside a live allocation of "
                              "device %d", op->n, (void *)op->dst, op->dst_device);
      memset(op->dst, (int)op->seq, op->n);
      return CUDA_SUCCESS;
    case FAKE_KERNEL:
      return fake_kernel_run(&op->launch, op->dst_device);
    case FAKE_WRITE_VALUE:
      /* Device-mapped pinned memory (the only kind kiln writes this way). */
      if (!fake_pinned(op->dst, sizeof(cuuint32_t)))
        return fake_violation("cuStreamWriteValue32 to %p, which is not pinned host memory",
                              (void *)op->dst);
      memcpy(op->dst, &(cuuint32_t){(cuuint32_t)op->seq}, sizeof(cuuint32_t));
      return CUDA_SUCCESS;
    case FAKE_COPY:
      if (op->dst_device >= 0 && !fake_range_live(op->dst, op->n, op->dst_device))
        return fake_violation(
            "%s writes %zu bytes at %p of device %d outside a live allocation "
            "(before its allocation ran, or after its free)",
            op->what, op->n, (void *)op->dst, op->dst_device);
      if (op->src_device >= 0 && !fake_range_live(op->src, op->n, op->src_device))
        return fake_violation("%s reads %zu bytes at %p of device %d outside a live allocation",
                              op->what, op->n, (const void *)op->src, op->src_device);
      memmove(op->dst, op->src, op->n);
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_UNKNOWN;
}

/* Runs s's work until `upto` operations have run. A gate that is not open
 * (a collective some participant never joined) stalls the stream there, and
 * a wait on a stalled stream stalls too: CUDA_ERROR_NOT_READY, with the op
 * left queued. */
static CUresult fake_run(CUstream s, unsigned long long upto) {
  while (s->executed < upto && s->head < s->count) {
    fake_op op = s->ops[s->head];
    CUresult rc = fake_execute(&op);
    if (rc == CUDA_ERROR_NOT_READY) return rc;
    s->head++;
    s->executed++;
    if (rc != CUDA_SUCCESS) return rc;
  }
  if (s->head == s->count) s->head = s->count = 0;
  return CUDA_SUCCESS;
}

/* ---- errors and versions (no cuInit needed) ---- */

static const struct {
  CUresult rc;
  const char *name, *text;
} fake_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult fake_cuGetErrorName(CUresult rc, const char **out) {
  for (size_t i = 0; i < sizeof fake_errors / sizeof fake_errors[0]; i++)
    if (fake_errors[i].rc == rc) {
      *out = fake_errors[i].name;
      return CUDA_SUCCESS;
    }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuGetErrorString(CUresult rc, const char **out) {
  for (size_t i = 0; i < sizeof fake_errors / sizeof fake_errors[0]; i++)
    if (fake_errors[i].rc == rc) {
      *out = fake_errors[i].text;
      return CUDA_SUCCESS;
    }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = (int)fake_env("KILN_FAKE_CUDA_VERSION", CUDA_VERSION);
  return CUDA_SUCCESS;
}

static CUresult fake_cuInit(unsigned int flags) {
  FAKE_BEGIN(false);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  CUresult rc = (CUresult)fake_env("KILN_FAKE_CUDA_INIT_ERROR", 0);
  if (rc == CUDA_SUCCESS) {
    long n = fake_env("KILN_FAKE_CUDA_DEVICES", 2);
    fake_devices = n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (int)n;
    fake_initialized = true;
  }
  return fake_leave(rc);
}

/* ---- devices and contexts ---- */

static CUresult fake_cuDeviceGetCount(int *count) {
  FAKE_BEGIN(true);
  *count = fake_device_count();
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGet(CUdevice *dev, int ordinal) {
  FAKE_BEGIN(true);
  if (ordinal < 0 || ordinal >= fake_device_count()) return fake_leave(CUDA_ERROR_INVALID_DEVICE);
  *dev = ordinal;
  return fake_leave(CUDA_SUCCESS);
}

static bool fake_device_ok(CUdevice dev) { return dev >= 0 && dev < fake_device_count(); }

static CUresult fake_cuDeviceGetName(char *name, int len, CUdevice dev) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev) || len <= 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceGetAttribute(int *out, CUdevice_attribute attr, CUdevice dev) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev)) return fake_leave(CUDA_ERROR_INVALID_DEVICE);
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *out = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *out = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *out = 4 + dev;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *out = fake_env("KILN_FAKE_CUDA_NO_POOLS", 0) ? 0 : 1;
      break;
    default:
      return fake_leave(CUDA_ERROR_INVALID_VALUE);
  }
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev)) return fake_leave(CUDA_ERROR_INVALID_DEVICE);
  *bytes = (size_t)fake_device_memory();
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev) || !fake_device_ok(peer)) return fake_leave(CUDA_ERROR_INVALID_DEVICE);
  *can = dev != peer;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev)) return fake_leave(CUDA_ERROR_INVALID_DEVICE);
  fake_primary[dev].device = dev;
  fake_primary[dev].retains++;
  *ctx = &fake_primary[dev];
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice dev) {
  FAKE_BEGIN(true);
  if (!fake_device_ok(dev) || fake_primary[dev].retains <= 0)
    return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_primary[dev].retains--;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuCtxPushCurrent(CUcontext ctx) {
  FAKE_BEGIN(true);
  if (!fake_context_ok(ctx) || fake_ctx_depth == 16) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_ctx_stack[fake_ctx_depth++] = ctx;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuCtxPopCurrent(CUcontext *ctx) {
  FAKE_BEGIN(true);
  if (fake_ctx_depth == 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  CUcontext top = fake_ctx_stack[--fake_ctx_depth];
  if (ctx) *ctx = top;
  return fake_leave(CUDA_SUCCESS);
}

/* ---- streams and events ---- */

static CUresult fake_cuStreamCreate(CUstream *out, unsigned int flags) {
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

static CUresult fake_cuStreamDestroy(CUstream s) {
  FAKE_BEGIN(true);
  if (fake_stream_special(s) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  CUresult rc = fake_stall_check(fake_run(s, s->enqueued)); /* queued work completes */
  s->destroyed = true;
  free(s->ops);
  s->ops = NULL;
  s->cap = s->head = s->count = 0;
  return fake_leave(rc);
}

static CUresult fake_cuStreamSynchronize(CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (s->capture) return fake_leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return fake_leave(fake_stall_check(fake_run(s, s->enqueued)));
}

/* Forces nothing, as the driver: NOT_READY while work is queued. */
static CUresult fake_cuStreamQuery(CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(s->head < s->count ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS);
}

/* The v2 entry point: flags other than DEFAULT are not supported. */
static CUresult fake_cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != CU_STREAM_WRITE_VALUE_DEFAULT || !addr || addr % sizeof value)
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  fake_op op = {.kind = FAKE_WRITE_VALUE, .dst = (char *)(uintptr_t)addr, .seq = value};
  return fake_leave(fake_enqueue(s, op));
}

static CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s) || !fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  if (!e->recorded) return fake_leave(CUDA_SUCCESS);
  fake_op op = {.kind = FAKE_WAIT, .stream = e->stream, .seq = e->seq};
  return fake_leave(fake_enqueue(s, op));
}

static CUresult fake_cuEventCreate(CUevent *out, unsigned int flags) {
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

static CUresult fake_cuEventDestroy(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  e->destroyed = true;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuEventRecord(CUevent e, CUstream s) {
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

static CUresult fake_cuEventSynchronize(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(e->recorded ? fake_stall_check(fake_run(e->stream, e->seq)) : CUDA_SUCCESS);
}

/* A real GPU makes progress while the host polls, so a query runs the work
 * up to the event (the stand-in has no background progress): NOT_READY only
 * behind a gate that is not open. */
static CUresult fake_cuEventQuery(CUevent e) {
  FAKE_BEGIN(true);
  if (!fake_event_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  return fake_leave(e->recorded ? fake_run(e->stream, e->seq) : CUDA_SUCCESS);
}

/* ---- memory pools ---- */

static CUresult fake_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
  FAKE_BEGIN(true);
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fake_device_ok(props->location.id))
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
  if (!p) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  p->device = props->location.id;
  p->next = fake_pools;
  fake_pools = p;
  *out = p;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemPoolDestroy(CUmemoryPool pool) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  pool->destroyed = true;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  pool->threshold = *(cuuint64_t *)v;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *(cuuint64_t *)v = pool->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *(cuuint64_t *)v = fake_used[pool->device];
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *(cuuint64_t *)v = pool->threshold;
      break;
    default:
      return fake_leave(CUDA_ERROR_INVALID_VALUE);
  }
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t n) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  for (size_t i = 0; i < n; i++)
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !fake_device_ok(map[i].location.id) || map[i].location.id == pool->device ||
        map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return fake_leave(CUDA_ERROR_INVALID_VALUE);
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  unsigned long long used = fake_used[pool->device];
  if (pool->reserved > keep) pool->reserved = used > keep ? used : keep;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t n, CUmemoryPool pool,
                                             CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_pool_ok(pool) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (n == 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  int dev = pool->device;
  if (n > fake_device_memory() - fake_used[dev]) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  fake_alloc *a = calloc(1, sizeof *a);
  /* 256-byte aligned, as the driver's allocations are (cuBLASLt relies on it). */
  char *base = a ? aligned_alloc(256, (n + 255) / 256 * 256) : NULL;
  if (!base) {
    free(a);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  *a = (fake_alloc){.base = base,
                    .n = n,
                    .device = dev,
                    .pool = pool,
                    .state = FAKE_PENDING,
                    .next = fake_allocs};
  fake_op op = {.kind = FAKE_ALLOC, .alloc = a};
  CUresult rc = fake_enqueue(s, op);
  if (rc != CUDA_SUCCESS) {
    free(base);
    free(a);
    return fake_leave(rc);
  }
  fake_allocs = a;
  fake_used[dev] += n;
  if (pool->reserved < fake_used[dev]) pool->reserved = fake_used[dev];
  *out = (CUdeviceptr)(uintptr_t)base;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  for (fake_alloc *a = fake_allocs; a; a = a->next) {
    if (a->state == FAKE_FREED || a->free_queued || (CUdeviceptr)(uintptr_t)a->base != p) continue;
    a->free_queued = true;
    fake_op op = {.kind = FAKE_FREE, .alloc = a};
    return fake_leave(fake_enqueue(s, op));
  }
  fprintf(stderr, "fake libcuda: cuMemFreeAsync of %p, which is not a live allocation\n",
          (void *)(uintptr_t)p);
  return fake_leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---- pinned host memory ---- */

static CUresult fake_cuMemHostAlloc(void **out, size_t n, unsigned int flags) {
  FAKE_BEGIN(true);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_host *h = calloc(1, sizeof *h);
  void *p = h ? malloc(n ? n : 1) : NULL;
  if (!p) {
    free(h);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  h->p = p;
  h->n = n;
  h->flags = flags;
  h->next = fake_hosts;
  fake_hosts = h;
  *out = p;
  return fake_leave(CUDA_SUCCESS);
}

/* Unified addressing: the device sees mapped pinned memory at its host
 * address. Only memory allocated with CU_MEMHOSTALLOC_DEVICEMAP is mapped. */
static CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags) {
  FAKE_BEGIN(true);
  fake_host *h = fake_pinned(p, 1);
  if (flags != 0 || !h || !(h->flags & CU_MEMHOSTALLOC_DEVICEMAP))
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  *out = (CUdeviceptr)(uintptr_t)p;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuMemFreeHost(void *p) {
  FAKE_BEGIN(true);
  for (fake_host **link = &fake_hosts; *link; link = &(*link)->next) {
    fake_host *h = *link;
    if (h->p != p) continue;
    *link = h->next;
    free(h->p);
    free(h);
    return fake_leave(CUDA_SUCCESS);
  }
  return fake_leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---- copies ---- */

/* A device of -2 stands for the stream's own device, known once s is checked. */
#define FAKE_STREAM_DEVICE (-2)

static CUresult fake_copy(CUstream s, const char *what, void *dst, int dst_device, const void *src,
                          int src_device, size_t n) {
  CUresult rc = fake_enter(what, true);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_COPY,
                .dst = dst,
                .src = src,
                .n = n,
                .what = what,
                .dst_device = dst_device == FAKE_STREAM_DEVICE ? s->device : dst_device,
                .src_device = src_device == FAKE_STREAM_DEVICE ? s->device : src_device};
  return fake_leave(fake_enqueue(s, op));
}

static CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyHtoDAsync", (void *)(uintptr_t)dst, FAKE_STREAM_DEVICE, src, -1, n);
}

static CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyDtoHAsync", dst, -1, (const void *)(uintptr_t)src,
                   FAKE_STREAM_DEVICE, n);
}

static CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return fake_copy(s, "cuMemcpyDtoDAsync", (void *)(uintptr_t)dst, FAKE_STREAM_DEVICE,
                   (const void *)(uintptr_t)src, FAKE_STREAM_DEVICE, n);
}

static CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                       CUcontext src_ctx, size_t n, CUstream s) {
  pthread_mutex_lock(&fake_lock);
  bool ok = fake_context_ok(dst_ctx) && fake_context_ok(src_ctx);
  pthread_mutex_unlock(&fake_lock);
  if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
  return fake_copy(s, "cuMemcpyPeerAsync", (void *)(uintptr_t)dst, dst_ctx->device,
                   (const void *)(uintptr_t)src, src_ctx->device, n);
}

static CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_MEMSET, .dst = (char *)(uintptr_t)dst, .n = n, .seq = value,
                .dst_device = s->device};
  return fake_leave(fake_enqueue(s, op));
}

/* ---- host functions ---- */

static CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) {
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

/* ---- modules and kernels ---- */

/* The byte size of a module image: an ELF cubin's section headers end it;
 * PTX is text. */
static size_t fake_image_size(const char *image) {
  static const char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (memcmp(image, elf, 4) != 0) return strlen(image);
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, image + 0x28, sizeof shoff);
  memcpy(&shentsize, image + 0x3a, sizeof shentsize);
  memcpy(&shnum, image + 0x3c, sizeof shnum);
  return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

static bool fake_module_ok(CUmodule m) {
  for (struct CUmod_st *p = fake_modules; p; p = p->next)
    if (p == m) return !p->unloaded;
  return false;
}

static bool fake_function_ok(CUfunction f) {
  for (struct CUfunc_st *p = fake_functions; p; p = p->next)
    if (p == f) return fake_module_ok(p->module);
  return false;
}

static CUresult fake_cuModuleLoadData(CUmodule *out, const void *image) {
  FAKE_BEGIN(true);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  if (!image) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  const char *text = image;
  bool ptx = strstr(text, ".version") != NULL;
  if (memcmp(text, "\177ELF", 4) != 0 && !ptx) return fake_leave(CUDA_ERROR_INVALID_IMAGE);
  struct CUmod_st *m = calloc(1, sizeof *m);
  size_t n = fake_image_size(text);
  if (m) m->image = malloc(n);
  if (!m || !m->image) {
    free(m);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  memcpy(m->image, text, n);
  m->size = n;
  m->next = fake_modules;
  fake_modules = m;
  *out = m;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuModuleUnload(CUmodule m) {
  FAKE_BEGIN(true);
  if (!fake_module_ok(m)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  m->unloaded = true;
  free(m->image);
  m->image = NULL;
  return fake_leave(CUDA_SUCCESS);
}

/* A kernel is found when its name, NUL-terminated, is in the image (the
 * cubin's string table; PTX names it after .entry). */
static CUresult fake_cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
  FAKE_BEGIN(true);
  if (!fake_module_ok(m)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  size_t len = strlen(name);
  if (len >= sizeof ((struct CUfunc_st *)0)->name) return fake_leave(CUDA_ERROR_NOT_FOUND);
  if (!memmem(m->image, m->size, name, len + 1) && !memmem(m->image, m->size, name, len))
    return fake_leave(CUDA_ERROR_NOT_FOUND);
  struct CUfunc_st *f = calloc(1, sizeof *f);
  if (!f) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  f->module = m;
  memcpy(f->name, name, len + 1);
  f->next = fake_functions;
  fake_functions = f;
  *out = f;
  return fake_leave(CUDA_SUCCESS);
}

/* Checks a launch's shape and copies its parameters (kiln's ABI). */
static CUresult fake_launch_make(CUfunction f, const unsigned grid[3], const unsigned block[3],
                                 unsigned shared, void **params, void **extra, fake_launch *out) {
  if (!fake_function_ok(f)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
  if (!params || extra || threads == 0 || threads > 1024 || grid[0] == 0 || grid[1] == 0 ||
      grid[2] == 0 || grid[1] > 65535 || grid[2] > 65535 || shared > 48 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  *out = (fake_launch){.func = f, .shared = shared};
  memcpy(out->grid, grid, sizeof out->grid);
  memcpy(out->block, block, sizeof out->block);
  memcpy(out->ptr, params[0], sizeof out->ptr);
  memcpy(&out->begin, params[1], sizeof out->begin);
  memcpy(&out->end, params[2], sizeof out->end);
  return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                    CUstream s, void **params, void **extra) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() != s->device) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_KERNEL, .dst_device = s->device};
  CUresult rc = fake_launch_make(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, shared,
                                 params, extra, &op.launch);
  if (rc == CUDA_SUCCESS) rc = fake_enqueue(s, op);
  return fake_leave(rc);
}

/* ---- graphs (run in insertion order) and stream capture ---- */

static bool fake_graph_ok(CUgraph g) {
  for (struct CUgraph_st *p = fake_graphs; p; p = p->next)
    if (p == g) return !p->destroyed;
  return false;
}

static bool fake_exec_ok(CUgraphExec e) {
  for (struct CUgraphExec_st *p = fake_execs; p; p = p->next)
    if (p == e) return !p->destroyed;
  return false;
}

static CUresult fake_cuGraphCreate(CUgraph *out, unsigned int flags) {
  FAKE_BEGIN(true);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  g->next = fake_graphs;
  fake_graphs = g;
  *out = g;
  return fake_leave(CUDA_SUCCESS);
}

static void fake_graph_free_nodes(struct CUgraph_st *g) {
  for (struct CUgraphNode_st *n = g->first, *next; n; n = next) {
    next = n->next;
    free(n->ops);
    free(n);
  }
  g->first = g->last = NULL;
}

static CUresult fake_cuGraphDestroy(CUgraph g) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  g->destroyed = true;
  fake_graph_free_nodes(g);
  return fake_leave(CUDA_SUCCESS);
}

static bool fake_node_in(const struct CUgraph_st *g, CUgraphNode node) {
  for (struct CUgraphNode_st *n = g->first; n; n = n->next)
    if (n == node) return true;
  return false;
}

static CUresult fake_launch_of(const CUDA_KERNEL_NODE_PARAMS *p, fake_launch *out) {
  if (p->kern || p->ctx) return CUDA_ERROR_INVALID_VALUE; /* kiln passes func */
  return fake_launch_make(p->func, (unsigned[]){p->gridDimX, p->gridDimY, p->gridDimZ},
                          (unsigned[]){p->blockDimX, p->blockDimY, p->blockDimZ},
                          p->sharedMemBytes, p->kernelParams, p->extra, out);
}

/* The work of g, flattened in order, in a new array (*n ops). */
static CUresult fake_graph_ops(const struct CUgraph_st *g, fake_op **out, int *n) {
  *n = 0;
  for (const struct CUgraphNode_st *p = g->first; p; p = p->next) *n += p->n;
  if (!(*out = calloc((size_t)(*n ? *n : 1), sizeof **out))) return CUDA_ERROR_OUT_OF_MEMORY;
  int k = 0;
  for (const struct CUgraphNode_st *p = g->first; p; p = p->next)
    for (int i = 0; i < p->n; i++) (*out)[k++] = p->ops[i];
  return CUDA_SUCCESS;
}

/* Appends a node doing ops[0..n) (taken over) to g. Nodes run in insertion
 * order, so each must come after its dependencies. */
static CUresult fake_graph_append(CUgraph g, const CUgraphNode *deps, size_t n_deps, fake_op *ops,
                                  int n, CUgraphNode *out) {
  CUresult rc = CUDA_SUCCESS;
  for (size_t i = 0; i < n_deps && rc == CUDA_SUCCESS; i++)
    if (!fake_node_in(g, deps[i])) rc = CUDA_ERROR_INVALID_VALUE;
  struct CUgraphNode_st *node = rc == CUDA_SUCCESS ? calloc(1, sizeof *node) : NULL;
  if (!node) {
    free(ops);
    return rc == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : rc;
  }
  *node = (struct CUgraphNode_st){.graph = g, .n = n, .ops = ops};
  if (g->last)
    g->last->next = node;
  else
    g->first = node;
  g->last = node;
  if (out) *out = node;
  return CUDA_SUCCESS;
}

static CUresult fake_cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                          size_t n_deps, const CUDA_KERNEL_NODE_PARAMS *p) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_op *op = calloc(1, sizeof *op);
  if (!op) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  op->kind = FAKE_KERNEL;
  CUresult rc = fake_launch_of(p, &op->launch);
  if (rc != CUDA_SUCCESS) {
    free(op);
    return fake_leave(rc);
  }
  return fake_leave(fake_graph_append(g, deps, n_deps, op, 1, out));
}

/* The child's work is copied in, as the driver clones the child graph. */
static CUresult fake_cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                              size_t n_deps, CUgraph child) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g) || !fake_graph_ok(child)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_op *ops;
  int n;
  CUresult rc = fake_graph_ops(child, &ops, &n);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  return fake_leave(fake_graph_append(g, deps, n_deps, ops, n, out));
}

/* Captured work becomes a node of the capture's graph, after the last. */
static CUresult fake_capture(CUstream s, fake_op op) {
  if (op.kind != FAKE_KERNEL && op.kind != FAKE_HOST_FN)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fake_op *copy = malloc(sizeof *copy);
  if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
  *copy = op;
  struct CUgraph_st *g = s->capture;
  return fake_graph_append(g, g->last ? (CUgraphNode[]){g->last} : NULL, g->last ? 1 : 0, copy, 1,
                           NULL);
}

static CUresult fake_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (s->capture || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  g->next = fake_graphs;
  fake_graphs = g;
  s->capture = g;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuStreamEndCapture(CUstream s, CUgraph *out) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (!s->capture) return fake_leave(CUDA_ERROR_ILLEGAL_STATE);
  *out = s->capture;
  s->capture = NULL;
  return fake_leave(CUDA_SUCCESS);
}

/* Exported too, for the stand-in cuBLASLt, whose queued matmuls must then
 * outlive their first run. */
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s) || !status) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g,
                                                 unsigned long long flags) {
  FAKE_BEGIN(true);
  if (!fake_graph_ok(g)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (flags != 0) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  struct CUgraphExec_st *e = calloc(1, sizeof *e);
  int n = 0;
  for (struct CUgraphNode_st *p = g->first; p; p = p->next) n++;
  if (e) e->nodes = calloc((size_t)(n ? n : 1), sizeof *e->nodes);
  bool ok = e && e->nodes;
  for (struct CUgraphNode_st *p = g->first; ok && p; p = p->next, e->n++) {
    fake_exec_node *x = &e->nodes[e->n];
    *x = (fake_exec_node){p, p->n, malloc(sizeof(fake_op) * (size_t)(p->n ? p->n : 1))};
    if ((ok = x->ops != NULL)) memcpy(x->ops, p->ops, sizeof(fake_op) * (size_t)p->n);
  }
  if (!ok) {
    for (int i = 0; e && i < e->n; i++) free(e->nodes[i].ops);
    if (e) free(e->nodes);
    free(e);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  e->next = fake_execs;
  fake_execs = e;
  *out = e;
  return fake_leave(CUDA_SUCCESS);
}

static fake_exec_node *fake_exec_find(CUgraphExec e, CUgraphNode node) {
  for (int i = 0; i < e->n; i++)
    if (e->nodes[i].node == node) return &e->nodes[i];
  return NULL;
}

static CUresult fake_cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                    const CUDA_KERNEL_NODE_PARAMS *p) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_exec_node *x = fake_exec_find(e, node);
  if (!x || x->n != 1 || x->ops[0].kind != FAKE_KERNEL) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  fake_launch l;
  CUresult rc = fake_launch_of(p, &l);
  if (rc == CUDA_SUCCESS && l.func != x->ops[0].launch.func) rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) x->ops[0].launch = l;
  return fake_leave(rc);
}

/* As the driver: only a child graph of the same shape (here: the same
 * kinds of work, the same kernels) may replace the node's. */
static CUresult fake_cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                        CUgraph child) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e) || !fake_graph_ok(child)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  fake_exec_node *x = fake_exec_find(e, node);
  fake_op *ops;
  int n;
  if (!x) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  CUresult rc = fake_graph_ops(child, &ops, &n);
  if (rc != CUDA_SUCCESS) return fake_leave(rc);
  bool same = n == x->n;
  for (int i = 0; same && i < n; i++)
    same = ops[i].kind == x->ops[i].kind &&
           (ops[i].kind != FAKE_KERNEL || ops[i].launch.func == x->ops[i].launch.func);
  if (!same) {
    free(ops);
    return fake_leave(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  }
  free(x->ops);
  x->ops = ops;
  return fake_leave(CUDA_SUCCESS);
}

static CUresult fake_cuGraphLaunch(CUgraphExec e, CUstream s) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e) || !fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  CUresult rc = CUDA_SUCCESS;
  for (int i = 0; i < e->n; i++)
    for (int k = 0; k < e->nodes[i].n && rc == CUDA_SUCCESS; k++) {
      fake_op op = e->nodes[i].ops[k];
      op.dst_device = s->device;
      rc = fake_enqueue(s, op);
    }
  if (rc == CUDA_SUCCESS) fake_graph_launches++;
  return fake_leave(rc);
}

static CUresult fake_cuGraphExecDestroy(CUgraphExec e) {
  FAKE_BEGIN(true);
  if (!fake_exec_ok(e)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  e->destroyed = true;
  for (int i = 0; i < e->n; i++) free(e->nodes[i].ops);
  free(e->nodes);
  e->nodes = NULL;
  e->n = 0;
  return fake_leave(CUDA_SUCCESS);
}

/* Kernels that have run (their pointers checked) and graphs launched. */
void kiln_fake_cuda_kernel_counts(unsigned long long *kernels_run,
                                  unsigned long long *graph_launches) {
  pthread_mutex_lock(&fake_lock);
  if (kernels_run) *kernels_run = fake_kernels_run;
  if (graph_launches) *graph_launches = fake_graph_launches;
  pthread_mutex_unlock(&fake_lock);
}

/* Runs and work items of the kernels whose name contains `part`, over every
 * function looked up so far (a launch over no items computes nothing on a
 * GPU either: tests check that the kernels they expect did work). */
void kiln_fake_cuda_kernel_work(const char *part, unsigned long long *runs,
                                unsigned long long *items) {
  pthread_mutex_lock(&fake_lock);
  *runs = *items = 0;
  for (struct CUfunc_st *f = fake_functions; f; f = f->next)
    if (strstr(f->name, part)) *runs += f->runs, *items += f->items;
  pthread_mutex_unlock(&fake_lock);
}

/* ---- entry points ---- */

static const struct {
  const char *name;
  int version; /* the CUDA version that introduced this ABI */
  void *fn;
} fake_table[] = {
    {"cuGetErrorName", 6000, (void *)fake_cuGetErrorName},
    {"cuGetErrorString", 6000, (void *)fake_cuGetErrorString},
    {"cuInit", 2000, (void *)fake_cuInit},
    {"cuDeviceGetCount", 2000, (void *)fake_cuDeviceGetCount},
    {"cuDeviceGet", 2000, (void *)fake_cuDeviceGet},
    {"cuDeviceGetName", 2000, (void *)fake_cuDeviceGetName},
    {"cuDeviceGetAttribute", 2000, (void *)fake_cuDeviceGetAttribute},
    {"cuDeviceTotalMem", 3020, (void *)fake_cuDeviceTotalMem},
    {"cuDeviceCanAccessPeer", 4000, (void *)fake_cuDeviceCanAccessPeer},
    {"cuDevicePrimaryCtxRetain", 7000, (void *)fake_cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)fake_cuDevicePrimaryCtxRelease},
    {"cuCtxPushCurrent", 4000, (void *)fake_cuCtxPushCurrent},
    {"cuCtxPopCurrent", 4000, (void *)fake_cuCtxPopCurrent},
    {"cuStreamCreate", 2000, (void *)fake_cuStreamCreate},
    {"cuStreamDestroy", 4000, (void *)fake_cuStreamDestroy},
    {"cuStreamSynchronize", 2000, (void *)fake_cuStreamSynchronize},
    {"cuStreamQuery", 2000, (void *)fake_cuStreamQuery},
    {"cuStreamWriteValue32", 11070, (void *)fake_cuStreamWriteValue32},
    {"cuStreamWaitEvent", 3020, (void *)fake_cuStreamWaitEvent},
    {"cuEventCreate", 2000, (void *)fake_cuEventCreate},
    {"cuEventDestroy", 4000, (void *)fake_cuEventDestroy},
    {"cuEventRecord", 2000, (void *)fake_cuEventRecord},
    {"cuEventSynchronize", 2000, (void *)fake_cuEventSynchronize},
    {"cuEventQuery", 2000, (void *)fake_cuEventQuery},
    {"cuMemsetD8Async", 3020, (void *)fake_cuMemsetD8Async},
    {"cuMemPoolCreate", 11020, (void *)fake_cuMemPoolCreate},
    {"cuMemPoolDestroy", 11020, (void *)fake_cuMemPoolDestroy},
    {"cuMemPoolSetAttribute", 11020, (void *)fake_cuMemPoolSetAttribute},
    {"cuMemPoolGetAttribute", 11020, (void *)fake_cuMemPoolGetAttribute},
    {"cuMemPoolSetAccess", 11020, (void *)fake_cuMemPoolSetAccess},
    {"cuMemPoolTrimTo", 11020, (void *)fake_cuMemPoolTrimTo},
    {"cuMemAllocFromPoolAsync", 11020, (void *)fake_cuMemAllocFromPoolAsync},
    {"cuMemFreeAsync", 11020, (void *)fake_cuMemFreeAsync},
    {"cuMemHostAlloc", 2020, (void *)fake_cuMemHostAlloc},
    {"cuMemFreeHost", 2000, (void *)fake_cuMemFreeHost},
    {"cuMemHostGetDevicePointer", 3020, (void *)fake_cuMemHostGetDevicePointer},
    {"cuMemcpyHtoDAsync", 3020, (void *)fake_cuMemcpyHtoDAsync},
    {"cuMemcpyDtoHAsync", 3020, (void *)fake_cuMemcpyDtoHAsync},
    {"cuMemcpyDtoDAsync", 3020, (void *)fake_cuMemcpyDtoDAsync},
    {"cuMemcpyPeerAsync", 4000, (void *)fake_cuMemcpyPeerAsync},
    {"cuLaunchHostFunc", 10000, (void *)fake_cuLaunchHostFunc},
    {"cuModuleLoadData", 2000, (void *)fake_cuModuleLoadData},
    {"cuModuleUnload", 2000, (void *)fake_cuModuleUnload},
    {"cuModuleGetFunction", 2000, (void *)fake_cuModuleGetFunction},
    {"cuLaunchKernel", 4000, (void *)fake_cuLaunchKernel},
    {"cuGraphCreate", 10000, (void *)fake_cuGraphCreate},
    {"cuGraphDestroy", 10000, (void *)fake_cuGraphDestroy},
    {"cuGraphAddKernelNode", 12000, (void *)fake_cuGraphAddKernelNode},
    {"cuGraphInstantiateWithFlags", 11040, (void *)fake_cuGraphInstantiateWithFlags},
    {"cuGraphExecKernelNodeSetParams", 12000, (void *)fake_cuGraphExecKernelNodeSetParams},
    {"cuGraphAddChildGraphNode", 10000, (void *)fake_cuGraphAddChildGraphNode},
    {"cuGraphExecChildGraphNodeSetParams", 11010, (void *)fake_cuGraphExecChildGraphNodeSetParams},
    {"cuStreamBeginCapture", 10010, (void *)fake_cuStreamBeginCapture},
    {"cuStreamEndCapture", 10000, (void *)fake_cuStreamEndCapture},
    {"cuGraphLaunch", 10000, (void *)fake_cuGraphLaunch},
    {"cuGraphExecDestroy", 10000, (void *)fake_cuGraphExecDestroy},
};

/* As the driver: the newest ABI not newer than the requested version, a NULL
 * pointer with a status for a symbol it lacks, an error for a version newer
 * than the driver. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
  int driver = 0;
  cuDriverGetVersion(&driver);
  *pfn = NULL;
  if (version > driver || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    return CUDA_ERROR_INVALID_VALUE;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const char *hidden = getenv("KILN_FAKE_CUDA_HIDE");
  bool hide = hidden && strcmp(hidden, symbol) == 0;
  for (size_t i = 0; !hide && i < sizeof fake_table / sizeof fake_table[0]; i++) {
    if (strcmp(fake_table[i].name, symbol) != 0) continue;
    found = version >= fake_table[i].version ? CU_GET_PROC_ADDRESS_SUCCESS
                                             : CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    if (found == CU_GET_PROC_ADDRESS_SUCCESS) *pfn = fake_table[i].fn;
  }
  if (status) *status = found;
  return CUDA_SUCCESS;
}

/* What the process still holds: streams, events and pools not destroyed,
 * device and pinned allocations not freed, primary context retains. Lists
 * them on stderr when `verbose`. */
int kiln_fake_cuda_live_objects(int verbose) {
  pthread_mutex_lock(&fake_lock);
  int n = 0, streams = 0, events = 0, pools = 0, allocs = 0, hosts = 0, retains = 0;
  for (struct CUstream_st *s = fake_streams; s; s = s->next) streams += !s->destroyed;
  for (struct CUevent_st *e = fake_events; e; e = e->next) events += !e->destroyed;
  for (struct CUmemPoolHandle_st *p = fake_pools; p; p = p->next) pools += !p->destroyed;
  for (fake_alloc *a = fake_allocs; a; a = a->next) allocs += a->state != FAKE_FREED;
  for (fake_host *h = fake_hosts; h; h = h->next) hosts++;
  for (int i = 0; i < FAKE_MAX_DEVICES; i++) retains += fake_primary[i].retains;
  int modules = 0, graphs = 0;
  for (struct CUmod_st *m = fake_modules; m; m = m->next) modules += !m->unloaded;
  for (struct CUgraph_st *g = fake_graphs; g; g = g->next) graphs += !g->destroyed;
  for (struct CUgraphExec_st *e = fake_execs; e; e = e->next) graphs += !e->destroyed;
  n = streams + events + pools + allocs + hosts + retains + modules + graphs;
  if (verbose && n)
    fprintf(stderr,
            "fake libcuda: live: %d streams, %d events, %d pools, %d device allocations, %d "
            "pinned buffers, %d primary context retains, %d modules, %d graphs\n",
            streams, events, pools, allocs, hosts, retains, modules, graphs);
  pthread_mutex_unlock(&fake_lock);
  return n;
}

void kiln_fake_cuda_reset_faults(void) {
  pthread_mutex_lock(&fake_lock);
  fake_fault_calls = 0;
  pthread_mutex_unlock(&fake_lock);
}
