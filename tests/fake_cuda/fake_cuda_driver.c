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
/* This file holds the state, fault injection, stream work, devices and
 * contexts, and the entry point table; fake_cuda_streams.c,
 * fake_cuda_memory.c, fake_cuda_launch.c and fake_cuda_graphs.c the rest
 * (fake_cuda_internal.h between them). */
#include "fake_cuda_internal.h"

/* The driver's process-wide state: a test double may have globals. */
pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
bool fake_initialized;
static CUresult fake_sticky = CUDA_SUCCESS;
static struct CUctx_st fake_primary[FAKE_MAX_DEVICES];
unsigned long long fake_used[FAKE_MAX_DEVICES];
struct CUstream_st *fake_streams;
struct CUevent_st *fake_events;
struct CUmemPoolHandle_st *fake_pools;
fake_alloc *fake_allocs;
fake_host *fake_hosts;
struct CUmod_st *fake_modules;
struct CUfunc_st *fake_functions;
struct CUgraph_st *fake_graphs;
struct CUgraphExec_st *fake_execs;
unsigned long long fake_kernels_run, fake_graph_launches;
static _Thread_local CUcontext fake_ctx_stack[16];
static _Thread_local int fake_ctx_depth;

static long fake_env(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

/* Read at cuInit, as a driver enumerates its devices once. */
int fake_devices;

int fake_device_count(void) { return fake_devices; }

unsigned long long fake_device_memory(void) {
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
CUresult fake_enter(const char *name, bool needs_init) {
  pthread_mutex_lock(&fake_lock);
  if (fake_sticky != CUDA_SUCCESS) return fake_sticky;
  if (needs_init && !fake_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (fake_should_fail(name)) return (CUresult)fake_env("KILN_FAKE_CUDA_FAIL_ERROR", 2);
  return CUDA_SUCCESS;
}

CUresult fake_leave(CUresult rc) {
  pthread_mutex_unlock(&fake_lock);
  return rc;
}
int fake_current_device(void) {
  return fake_ctx_depth > 0 ? fake_ctx_stack[fake_ctx_depth - 1]->device : -1;
}

/* The special handles real CUDA takes wherever a stream goes: the legacy
 * and the per-thread default stream of the current context. The stand-in
 * gives each device one default stream for both (ordered like any other),
 * not counted as a live object. */
static struct CUstream_st fake_default_streams[FAKE_MAX_DEVICES];

bool fake_stream_special(CUstream s) {
  return s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Whether *s is a stream, a special handle resolved in place. */
bool fake_stream_ok(CUstream *s) {
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

bool fake_event_ok(CUevent e) {
  for (struct CUevent_st *p = fake_events; p; p = p->next)
    if (p == e) return !p->destroyed;
  return false;
}

bool fake_pool_ok(CUmemoryPool pool) {
  for (struct CUmemPoolHandle_st *p = fake_pools; p; p = p->next)
    if (p == pool) return !p->destroyed;
  return false;
}

bool fake_context_ok(CUcontext c) {
  for (int i = 0; i < fake_device_count(); i++)
    if (c == &fake_primary[i]) return c->retains > 0;
  return false;
}

/* ---- stream work ---- */

CUresult fake_enqueue(CUstream s, fake_op op) {
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
bool fake_range_live(const char *p, size_t n, int device) {
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

/* Blocking on a stalled stream would hang on a GPU: the stand-in says so
 * and fails instead (not sticky, so the process stays usable). */
CUresult fake_stall_check(CUresult rc) {
  if (rc != CUDA_ERROR_NOT_READY) return rc;
  fprintf(stderr, "fake libcuda: a synchronisation waits for a collective that can never "
                  "complete (a GPU would hang here)\n");
  return CUDA_ERROR_LAUNCH_TIMEOUT;
}

/* The pinned allocation holding [p, p+n), or NULL. */
fake_host *fake_pinned(const char *p, size_t n) {
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
CUresult fake_run(CUstream s, unsigned long long upto) {
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

bool fake_device_ok(CUdevice dev) { return dev >= 0 && dev < fake_device_count(); }

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
