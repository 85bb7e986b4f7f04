/* backend/cuda: NVIDIA GPUs through the CUDA driver API, NVRTC, cuBLAS(Lt)
 * and NCCL. The only door of src/backend/cuda; prefix kcuda_. The backend's
 * entry point, kcuda_backend_open, is declared in runtime/runtime.h.
 *
 * The driver library is not linked: it is dlopen'ed when a context opens the
 * backend, so kiln links and runs on machines without a GPU or a driver, and
 * every entry point is resolved through cuGetProcAddress at the ABI version
 * of the prototype kiln was written against. */
#ifndef KILN_SRC_BACKEND_CUDA_H
#define KILN_SRC_BACKEND_CUDA_H

#include <cublas_api.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nccl.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdbool.h>
#include "codegen/codegen.h"
#include "device/device.h"
#include "fuse/fuse.h"
#include "kcache/kcache.h"

/* Opens every visible GPU into b. Reports why CUDA cannot be used (no driver
 * library, no device, driver too old) as KILN_ERR_DEVICE; on failure nothing
 * is left allocated. */
kiln_status kcuda_backend_open(const kcore_config *config, kdev_backend *b);

/* ==== executables (exec_*.c) ====
 * Fused CUDA kernels, cuBLASLt matmuls and host steps, run on device arrays
 * (the interface's `run`): see exec_call.c for the contract. */
extern const kdev_exec_ops kcuda_exec_ops;
/* Plans p and emits every fused kernel as CUDA C for `arch` ("sm_90"),
 * each compiled by NVRTC to a cubin through `cache` (no device needed): the
 * plan and the sources (malloc'ed). An architecture kiln does not target is
 * KILN_ERR_ARGUMENT. */
kiln_status kcuda_lowered_text(const kcore_config *config, kcache *cache, const kir_program *p,
                               const bool *donated, const char *arch, char **text);
/* ==== end of executables ==== */

/* The oldest driver kiln runs on: one that supports the toolkit kiln is
 * built with (its NVRTC emits cubins of that CUDA version, and the entry
 * points are resolved at its ABI). */
#define KCUDA_MIN_DRIVER_VERSION CUDA_VERSION
/* NCCL is not linked: its error strings come from the NCCL in the process. */
#define KCUDA_NCCL_LIBRARY "libnccl.so.2"
#define KCUDA_DRIVER_LIBRARY "libcuda.so.1"
/* Size of each of a device's two pinned staging buffers: large enough that a
 * chunk's DMA costs far more than the call that starts it, small enough that
 * the pipeline fills after one chunk. */
#define KCUDA_STAGING_BYTES ((size_t)8 << 20)

/* ---- the driver's entry points ---- */

/* Every driver function kiln calls, with the CUDA version of the ABI it was
 * written against: cuGetProcAddress is asked for exactly that version, and the
 * table's field has the matching PFN_<name>_v<version> type from
 * cudaTypedefs.h, so a newer driver can never hand over a changed signature. */
#define KCUDA_DRIVER_FUNCTIONS(X)     \
  X(cuGetErrorName, 6000)             \
  X(cuGetErrorString, 6000)           \
  X(cuInit, 2000)                     \
  X(cuDeviceGetCount, 2000)           \
  X(cuDeviceGet, 2000)                \
  X(cuDeviceGetName, 2000)            \
  X(cuDeviceGetAttribute, 2000)       \
  X(cuDeviceTotalMem, 3020)           \
  X(cuDeviceCanAccessPeer, 4000)      \
  X(cuDevicePrimaryCtxRetain, 7000)   \
  X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxPushCurrent, 4000)           \
  X(cuCtxPopCurrent, 4000)            \
  X(cuStreamCreate, 2000)             \
  X(cuStreamDestroy, 4000)            \
  X(cuStreamSynchronize, 2000)        \
  X(cuStreamQuery, 2000)              \
  X(cuStreamWriteValue32, 11070)      \
  X(cuStreamWaitEvent, 3020)          \
  X(cuEventCreate, 2000)              \
  X(cuEventDestroy, 4000)             \
  X(cuEventRecord, 2000)              \
  X(cuEventSynchronize, 2000)         \
  X(cuEventQuery, 2000)               \
  X(cuMemsetD8Async, 3020)            \
  X(cuMemPoolCreate, 11020)           \
  X(cuMemPoolDestroy, 11020)          \
  X(cuMemPoolSetAttribute, 11020)     \
  X(cuMemPoolGetAttribute, 11020)     \
  X(cuMemPoolSetAccess, 11020)        \
  X(cuMemPoolTrimTo, 11020)           \
  X(cuMemAllocFromPoolAsync, 11020)   \
  X(cuMemFreeAsync, 11020)            \
  X(cuMemHostAlloc, 2020)             \
  X(cuMemFreeHost, 2000)              \
  X(cuMemHostGetDevicePointer, 3020)  \
  X(cuMemcpyHtoDAsync, 3020)          \
  X(cuMemcpyDtoHAsync, 3020)          \
  X(cuMemcpyDtoDAsync, 3020)          \
  X(cuMemcpyPeerAsync, 4000)          \
  X(cuLaunchHostFunc, 10000)          \
  X(cuModuleLoadData, 2000)           \
  X(cuModuleUnload, 2000)             \
  X(cuModuleGetFunction, 2000)        \
  X(cuLaunchKernel, 4000)             \
  X(cuGraphCreate, 10000)             \
  X(cuGraphDestroy, 10000)            \
  X(cuGraphAddKernelNode, 12000)      \
  X(cuGraphInstantiateWithFlags, 11040) \
  X(cuGraphExecKernelNodeSetParams, 12000) \
  X(cuGraphAddChildGraphNode, 10000)  \
  X(cuGraphExecChildGraphNodeSetParams, 11010) \
  X(cuStreamBeginCapture, 10010)      \
  X(cuStreamEndCapture, 10000)        \
  X(cuGraphLaunch, 10000)             \
  X(cuGraphExecDestroy, 10000)

typedef struct kcuda_driver {
  void *library; /* the dlopen handle */
  int version;   /* cuDriverGetVersion: 1000 * major + 10 * minor */
#define KCUDA_DRIVER_FIELD(name, abi) PFN_##name##_v##abi name;
  KCUDA_DRIVER_FUNCTIONS(KCUDA_DRIVER_FIELD)
#undef KCUDA_DRIVER_FIELD
} kcuda_driver;

/* Opens `library` (normally KCUDA_DRIVER_LIBRARY), checks the driver's
 * version, resolves the table and calls cuInit. Every failure is
 * KILN_ERR_DEVICE saying why (no library, driver too old, a missing entry
 * point, cuInit's error) and leaves nothing open. */
kiln_status kcuda_driver_load(const char *library, kcuda_driver *drv);
void kcuda_driver_unload(kcuda_driver *drv);

/* ---- translating foreign errors ---- */

/* The status a driver error stands for: out of memory, a device that is
 * missing or broken, a module that does not load (KILN_ERR_COMPILE), or kiln
 * misusing the API (KILN_ERR_INTERNAL). */
kiln_status kcuda_driver_status(CUresult rc);
/* Writes "CUDA_ERROR_NAME (description)" into buf, through the driver's own
 * tables when drv has them, else "CUresult <n>". Touches no error message, so
 * teardown code can log with it. Returns buf. */
char *kcuda_driver_describe(const kcuda_driver *drv, CUresult rc, char *buf, size_t cap);
/* Sets the message "<call> failed: <name> (<description>)[ on <where>]" and
 * returns kcuda_driver_status(rc). drv and where may be NULL. */
kiln_status kcuda_driver_fail(const kcuda_driver *drv, CUresult rc, const char *call,
                              const char *where);

/* "<where>: <call> failed: <what>" as status st (no "<where>: " when where
 * is NULL or empty). */
kiln_status kcuda_call_fail(kiln_status st, const char *where, const char *call,
                            const char *what);
kiln_status kcuda_nvrtc_status(nvrtcResult rc);
kiln_status kcuda_nvrtc_fail(nvrtcResult rc, const char *call, const char *where);
kiln_status kcuda_cublas_status(cublasStatus_t rc);
kiln_status kcuda_cublas_fail(cublasStatus_t rc, const char *call, const char *where);
/* Every NCCL error is KILN_ERR_COLLECTIVE. */
kiln_status kcuda_nccl_status(ncclResult_t rc);
kiln_status kcuda_nccl_fail(ncclResult_t rc, const char *call, const char *where);

/* The checking macros, one per library, for functions written in the
 * goto-cleanup style: on failure they set the caller's `st` to the translated
 * status, with a message naming the call, the library's error and `where`
 * (the device or the program, may be NULL), and jump to `label`.
 *
 * The driver is called through its table: KCUDA_CU(drv, where, cuInit, (0), fail)
 * calls drv->cuInit(0) and names "cuInit(0)" in the message. */
#define KCUDA_CU(drv, where, fn, args, label)                       \
  do {                                                              \
    CUresult kcuda_rc_ = (drv)->fn args;                            \
    if (kcuda_rc_ != CUDA_SUCCESS) {                                \
      st = kcuda_driver_fail((drv), kcuda_rc_, #fn #args, (where)); \
      goto label;                                                   \
    }                                                               \
  } while (0)

/* KCUDA_CU for the NVRTC table (NVRTC is dlopen'ed): the message names the
 * call as NVRTC spells it. KCUDA_NVRTC(nv, where, nvrtcGetPTX, (p, c), fail). */
#define KCUDA_NVRTC(nv, where, fn, args, label)             \
  do {                                                      \
    nvrtcResult kcuda_rc_ = (nv)->fn args;                  \
    if (kcuda_rc_ != NVRTC_SUCCESS) {                       \
      st = kcuda_nvrtc_fail(kcuda_rc_, #fn #args, (where)); \
      goto label;                                           \
    }                                                       \
  } while (0)

#define KCUDA_CUBLAS_CHECK(where, expr, label)           \
  do {                                                   \
    cublasStatus_t kcuda_rc_ = (expr);                   \
    if (kcuda_rc_ != CUBLAS_STATUS_SUCCESS) {            \
      st = kcuda_cublas_fail(kcuda_rc_, #expr, (where)); \
      goto label;                                        \
    }                                                    \
  } while (0)

#define KCUDA_NCCL_CHECK(where, expr, label)           \
  do {                                                 \
    ncclResult_t kcuda_rc_ = (expr);                   \
    if (kcuda_rc_ != ncclSuccess) {                    \
      st = kcuda_nccl_fail(kcuda_rc_, #expr, (where)); \
      goto label;                                      \
    }                                                  \
  } while (0)

/* ---- devices ---- */

/* The fault trail (trail.c): the last RING steps queued on a device's
 * compute stream, by token, and the host word the stream writes each step's
 * token into as it reaches it. */
#define KCUDA_TRAIL_RING 1024
typedef struct kcuda_trail_entry {
  uint32_t token;
  char what[124]; /* "jit(f) step 3 (kernel kiln_loop_2)" */
} kcuda_trail_entry;

typedef struct kcuda_trail {
  volatile uint32_t *word; /* pinned, device-mapped */
  CUdeviceptr word_dev;
  pthread_mutex_t lock; /* a step's mark and the step are adjacent on the stream */
  bool lock_ready;
  uint32_t last; /* the last token handed out */
  bool owed;     /* last's end mark is owed (kcuda_trail_finish) */
  kcuda_trail_entry *ring;
} kcuda_trail;

/* Spare CUDA events, so that marking a fresh buffer ready costs no
 * cuEventCreate in steady state. */
#define KCUDA_EVENT_SPARES 256
typedef struct kcuda_events {
  pthread_mutex_t lock;
  bool lock_ready;
  int n;
  CUevent spare[KCUDA_EVENT_SPARES];
} kcuda_events;

/* DLPack imports released while queued work may still read them; their
 * producers' deleters are owed until that work is done (foreign.c). */
typedef struct kcuda_foreign {
  pthread_mutex_t lock;
  bool lock_ready;
  atomic_int pending; /* n, readable without the lock */
  int n, cap;
  struct kcuda_foreign_entry *v;
} kcuda_foreign;

/* One GPU's state: kiln_device.impl. */
typedef struct kcuda_device {
  const kcuda_driver *drv;
  kiln_log_level log_level;
  int ordinal;
  CUdevice device;
  CUcontext context; /* the device's primary context, retained */
  CUstream compute;  /* kernels, allocations and frees */
  CUstream copy;     /* host <-> device copies */
  /* Recorded on the compute stream and waited on by another stream, to order
   * that stream after everything the compute stream has queued so far (an
   * allocation, a kernel still writing a buffer). Reusing one event is safe:
   * a wait captures the event's state when it is enqueued. */
  CUevent handoff;
  CUmemoryPool pool;
  /* Two pinned buffers used in turn by copies between pageable host memory
   * and the device; staging_done[k] marks the last DMA that touched buffer k.
   * The lock serialises copies from several threads. */
  pthread_mutex_t staging_lock;
  bool staging_lock_ready;
  void *staging[2];
  CUevent staging_done[2];
  char where[192]; /* "cuda:0 (NVIDIA H100 80GB HBM3)", for messages */
  /* cuBLASLt on the compute stream, made on first use (kcuda_device_gemm),
   * freed by the device's teardown. */
  struct kcuda_gemm_stream *gemm;
  kcuda_trail trail;
  kcuda_events events;
  kcuda_foreign foreign;
} kcuda_device;

/* The backend's state: kiln_ctx.backend_state. */
typedef struct kcuda_state {
  kcuda_driver drv;
  const kcore_config *config; /* the context's, which outlives the backend */
  int num_devices;
  kcuda_device *devices;
  struct kcuda_blaslt *blaslt; /* cuBLASLt, opened on first use; closed after the devices */
} kcuda_state;

static inline kcuda_device *kcuda_impl(const kiln_device *dev) { return (kcuda_device *)dev->impl; }

/* Makes the device's primary context current on this thread (pushed, so the
 * caller's own current context is restored by kcuda_leave). */
kiln_status kcuda_enter(kcuda_device *d);
void kcuda_leave(kcuda_device *d);
/* Logs a failed driver call made where no status can be returned (teardown). */
void kcuda_log_failure(const kcuda_device *d, CUresult rc, const char *call);

/* A spare event or a new one; kcuda_event_give keeps it as a spare or
 * destroys it. Inside the device's context. */
kiln_status kcuda_event_take(kcuda_device *d, CUevent *ev);
void kcuda_event_give(kcuda_device *d, CUevent ev);

/* ---- DLPack imports' release (foreign.c) ----
 * kcuda_release_foreign is kdev_ops.release_foreign; poll runs the deleters
 * whose work is done (inside the context); open/close by device setup and
 * teardown (close runs every deleter still owed, after the streams' sync). */
void kcuda_release_foreign(kiln_device *dev, kdev_buffer *buf);
void kcuda_foreign_poll(kcuda_device *d);
kiln_status kcuda_foreign_open(kcuda_device *d);
void kcuda_foreign_close(kcuda_device *d);

/* Orders `stream` after all work queued so far on the device's compute
 * stream. Call inside kcuda_enter. */
kiln_status kcuda_after_compute(kcuda_device *d, CUstream stream);
/* Orders `stream` after the buffer's last write (a no-op when it has none). */
kiln_status kcuda_after_ready(kcuda_device *d, CUstream stream, const kdev_buffer *buf);
/* Records the buffer's last write as the end of what `stream` has queued,
 * creating buf->ready (owned by the buffer, destroyed by release) if needed. */
kiln_status kcuda_mark_ready(kcuda_device *d, kdev_buffer *buf, CUstream stream);
/* Orders the device's compute stream after the buffer's pending writes
 * without blocking the host: what a kernel launch does for each input. */
kiln_status kcuda_order_after_ready(kiln_device *dev, const kdev_buffer *buf);

/* ---- the fault trail (trail.c) ---- */

/* Both called inside the device's context by device open / close. */
kiln_status kcuda_trail_open(kcuda_device *d);
void kcuda_trail_close(kcuda_device *d);
/* Marks the start of the step `what` on the compute stream and returns
 * holding the trail's lock, so that the step the caller queues next follows
 * its mark on the stream; kcuda_trail_leave releases it. On failure nothing
 * is held. Inside the device's context. */
kiln_status kcuda_trail_enter(kcuda_device *d, const char *what);
void kcuda_trail_leave(kcuda_device *d);
/* Marks the end of the last marked step (the end of a program's work): owes
 * the mark, which the next step's mark replaces or kcuda_trail_settle
 * queues. Every queue of device work other than a marked step (copies,
 * collectives, on any stream) settles first. Inside the device's context. */
kiln_status kcuda_trail_finish(kcuda_device *d);
kiln_status kcuda_trail_settle(kcuda_device *d);
/* For a failure of work on the device: when the compute stream has failed
 * (an asynchronous fault, found by a wait or by a later call), prefixes the
 * message with the step it failed in. Returns st. Needs no current context
 * (the stream names its own). */
kiln_status kcuda_trail_blame(kcuda_device *d, kiln_status st);
/* Whether the device's compute stream has failed (a sticky fault), as
 * opposed to a call refused with the device still usable. */
bool kcuda_device_failed(kcuda_device *d);

/* The device's memory pool: bytes reserved from the driver (kept cached up to
 * the release threshold) and bytes handed out to live buffers. */
kiln_status kcuda_pool_usage(kiln_device *dev, uint64_t *reserved, uint64_t *used);
/* Waits for the device's queued work, then returns the pool's cached memory
 * that no live buffer needs to the driver. */
kiln_status kcuda_pool_trim(kiln_device *dev);

/* The kdev_ops entries for copies (copy.c). */
kiln_status kcuda_upload(kiln_device *dev, kdev_buffer *dst, const void *src, size_t nbytes,
                         kdev_copy_mode mode);
kiln_status kcuda_download(kiln_device *dev, const kdev_buffer *src, void *dst, size_t nbytes,
                           kdev_copy_mode mode);
kiln_status kcuda_copy(kiln_device *dst_dev, kdev_buffer *dst, kiln_device *src_dev,
                       const kdev_buffer *src, size_t nbytes);

/* ---- kernels, launches and graphs (launch.c) ---- */

/* One compiled kernel loaded on a device: its module and entry point. */
typedef struct kcuda_kernel {
  CUmodule module;
  CUfunction fn;
} kcuda_kernel;

/* Loads `image` (a cubin or PTX) and finds kernel `name` in it. A module the
 * driver rejects is KILN_ERR_COMPILE naming the kernel and the device. Call
 * inside kcuda_enter. */
kiln_status kcuda_kernel_load(kcuda_device *d, const void *image, const char *name,
                              kcuda_kernel *out);
/* Unloads the module (logs a failure; call inside kcuda_enter). */
void kcuda_kernel_unload(kcuda_device *d, kcuda_kernel *k);

/* One launch: a 1-D grid of 1-D blocks, no dynamic shared memory, and the
 * kernel's parameters as cuLaunchKernel takes them. `name` is for messages. */
typedef struct kcuda_launch {
  CUfunction fn;
  const char *name;
  unsigned grid, block;
  void **params;
} kcuda_launch;

/* Queues the launch on `stream`; a failure names the kernel and its shape. */
kiln_status kcuda_launch_kernel(kcuda_device *d, CUstream stream, const kcuda_launch *l);

/* Runs fn(user) on the host once the stream's earlier work is done; fn must
 * not call the driver. */
kiln_status kcuda_launch_host(kcuda_device *d, CUstream stream, CUhostFn fn, void *user);

/* Work recorded by stream capture: enqueue(user, stream) queues it. */
typedef kiln_status (*kcuda_enqueue_fn)(void *user, CUstream stream);

/* One node of a graph chain: a kernel launch, or (launch NULL) the work
 * `capture` queues, recorded on a stream of the graph's own and added as a
 * child graph (how library calls such as cuBLASLt's join a graph). */
typedef struct kcuda_graph_node {
  const kcuda_launch *launch;
  kcuda_enqueue_fn capture;
  void *user;
} kcuda_graph_node;

/* A chain of nodes instantiated as a CUDA graph: replayed with one call,
 * each node updatable between replays. */
typedef struct kcuda_graph {
  CUgraph graph;
  CUgraphExec exec;
  CUstream capture; /* for captured nodes, created with the first */
  int n;
  CUgraphNode *nodes;
} kcuda_graph;

/* Builds and instantiates the chain nodes[0] -> nodes[1] -> ... (inside
 * kcuda_enter). */
kiln_status kcuda_graph_build(kcuda_device *d, int n, const kcuda_graph_node *nodes,
                              kcuda_graph *out);
/* Gives node i new work of the same shape: the same kernel with new
 * parameters, or a new capture of the same library call. */
kiln_status kcuda_graph_update(kcuda_device *d, kcuda_graph *g, int i,
                               const kcuda_graph_node *node);
kiln_status kcuda_graph_launch(kcuda_device *d, kcuda_graph *g, CUstream stream);
void kcuda_graph_destroy(kcuda_device *d, kcuda_graph *g);

/* ---- NVRTC (nvrtc.c) ---- */

/* libnvrtc is dlopen'ed like the driver, so kiln loads where it is absent
 * (the C target needs none of it). The soname is pinned to the major version
 * of the toolkit kiln is built with: NVRTC's ABI is stable within a major. */
#if CUDA_VERSION >= 14000
#error "kiln's NVRTC table is checked against CUDA 12 and 13 only"
#elif CUDA_VERSION >= 13000
#define KCUDA_NVRTC_LIBRARY "libnvrtc.so.13"
#elif CUDA_VERSION >= 12000
#define KCUDA_NVRTC_LIBRARY "libnvrtc.so.12"
#else
#error "kiln needs the CUDA 12 toolkit or newer"
#endif

/* Every NVRTC function kiln calls: X(name, return type, parameter types).
 * nvrtc.c checks each prototype against nvrtc.h at compile time. */
#define KCUDA_NVRTC_FUNCTIONS(X)                                                        \
  X(nvrtcGetErrorString, const char *, (nvrtcResult))                                   \
  X(nvrtcVersion, nvrtcResult, (int *, int *))                                          \
  X(nvrtcCreateProgram, nvrtcResult,                                                    \
    (nvrtcProgram *, const char *, const char *, int, const char *const *,              \
     const char *const *))                                                              \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *))                                 \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *))         \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *))                      \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *))                            \
  X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram, size_t *))                             \
  X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram, char *))                                   \
  X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t *))                           \
  X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char *))

#define KCUDA_NVRTC_PFN(fn, ret, params) typedef ret(*kcuda_pfn_##fn) params;
KCUDA_NVRTC_FUNCTIONS(KCUDA_NVRTC_PFN)
#undef KCUDA_NVRTC_PFN

/* The library and its entry points. */
typedef struct kcuda_nvrtc {
  void *library;  /* the dlopen handle */
  char name[256]; /* the library that opened */
  int major, minor; /* nvrtcVersion() */
#define KCUDA_NVRTC_FIELD(fn, ret, params) kcuda_pfn_##fn fn;
  KCUDA_NVRTC_FUNCTIONS(KCUDA_NVRTC_FIELD)
#undef KCUDA_NVRTC_FIELD
} kcuda_nvrtc;

/* The process's NVRTC, opened (KCUDA_NVRTC_LIBRARY) on first use and kept:
 * a missing library or entry point is KILN_ERR_DEVICE naming the library,
 * the same on every call. */
kiln_status kcuda_nvrtc_get(const kcuda_nvrtc **out);
/* Opens `library` (a name or a path) into a table of its own, outside the
 * process's one: for tests. Close with kcuda_nvrtc_close (NULL allowed). */
kiln_status kcuda_nvrtc_open_library(const char *library, kcuda_nvrtc **out);
void kcuda_nvrtc_close(kcuda_nvrtc *nv);

/* Compiles CUDA C `source` with NVRTC; `name` names the program in messages
 * and in NVRTC's log. On success *out (malloc'ed, caller frees) holds the PTX,
 * or the cubin when `cubin` is true (then the options must name a real
 * architecture, -arch=sm_XY), and *out_size its size in bytes. A program that
 * does not compile is KILN_ERR_COMPILE with NVRTC's log in the message. */
kiln_status kcuda_nvrtc_compile(const char *name, const char *source, const char *const *options,
                                int num_options, bool cubin, char **out, size_t *out_size);

/* The rest of the door, in parts by subject. */
#include "backend/cuda/cuda_blaslt.h"
#include "backend/cuda/cuda_exec.h"
#include "backend/cuda/cuda_nccl.h"

#endif
