/* The stand-in driver's parts (fake_cuda_driver.c and fake_cuda_*.c):
 * its objects, its process-wide state and the helpers the parts share.
 * Everything declared here is hidden: the library exports the driver's
 * entry points and the kiln_fake_cuda_* hooks (fake_cuda.h) only. */
#ifndef KILN_TESTS_FAKE_CUDA_INTERNAL_H
#define KILN_TESTS_FAKE_CUDA_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
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

/* Functions are named fake_<entry point>. */
#define FAKE_BEGIN(needs_init)                                 \
  do {                                                         \
    CUresult fake_rc_ = fake_enter(__func__ + 5, needs_init);  \
    if (fake_rc_ != CUDA_SUCCESS) return fake_leave(fake_rc_); \
  } while (0)

#pragma GCC visibility push(hidden)

/* fake_cuda_driver.c */
extern pthread_mutex_t fake_lock;
extern bool fake_initialized;
extern unsigned long long fake_used[FAKE_MAX_DEVICES];
extern struct CUstream_st *fake_streams;
extern struct CUevent_st *fake_events;
extern struct CUmemPoolHandle_st *fake_pools;
extern fake_alloc *fake_allocs;
extern fake_host *fake_hosts;
extern struct CUmod_st *fake_modules;
extern struct CUfunc_st *fake_functions;
extern struct CUgraph_st *fake_graphs;
extern struct CUgraphExec_st *fake_execs;
extern unsigned long long fake_kernels_run, fake_graph_launches;
extern int fake_devices;
int fake_device_count(void);
unsigned long long fake_device_memory(void);
CUresult fake_enter(const char *name, bool needs_init);
CUresult fake_leave(CUresult rc);
int fake_current_device(void);
bool fake_stream_special(CUstream s);
bool fake_stream_ok(CUstream *s);
bool fake_event_ok(CUevent e);
bool fake_pool_ok(CUmemoryPool pool);
bool fake_context_ok(CUcontext c);
CUresult fake_enqueue(CUstream s, fake_op op);
bool fake_range_live(const char *p, size_t n, int device);
CUresult fake_stall_check(CUresult rc);
fake_host *fake_pinned(const char *p, size_t n);
CUresult fake_run(CUstream s, unsigned long long upto);
bool fake_device_ok(CUdevice dev);

/* fake_cuda_streams.c */
CUresult fake_cuStreamCreate(CUstream *out, unsigned int flags);
CUresult fake_cuStreamDestroy(CUstream s);
CUresult fake_cuStreamSynchronize(CUstream s);
CUresult fake_cuStreamQuery(CUstream s);
CUresult fake_cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags);
CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags);
CUresult fake_cuEventCreate(CUevent *out, unsigned int flags);
CUresult fake_cuEventDestroy(CUevent e);
CUresult fake_cuEventRecord(CUevent e, CUstream s);
CUresult fake_cuEventSynchronize(CUevent e);
CUresult fake_cuEventQuery(CUevent e);
CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user);

/* fake_cuda_memory.c */
CUresult fake_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props);
CUresult fake_cuMemPoolDestroy(CUmemoryPool pool);
CUresult fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v);
CUresult fake_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v);
CUresult fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t n);
CUresult fake_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep);
CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t n, CUmemoryPool pool,
                                      CUstream s);
CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult fake_cuMemHostAlloc(void **out, size_t n, unsigned int flags);
CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags);
CUresult fake_cuMemFreeHost(void *p);
CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                CUcontext src_ctx, size_t n, CUstream s);
CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);

/* fake_cuda_launch.c */
CUresult fake_cuModuleLoadData(CUmodule *out, const void *image);
CUresult fake_cuModuleUnload(CUmodule m);
CUresult fake_cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name);
CUresult fake_launch_make(CUfunction f, const unsigned grid[3], const unsigned block[3],
                          unsigned shared, void **params, void **extra, fake_launch *out);
CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned shared,
                             CUstream s, void **params, void **extra);

/* fake_cuda_graphs.c */
CUresult fake_cuGraphCreate(CUgraph *out, unsigned int flags);
CUresult fake_cuGraphDestroy(CUgraph g);
CUresult fake_cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                   size_t n_deps, const CUDA_KERNEL_NODE_PARAMS *p);
CUresult fake_cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                       size_t n_deps, CUgraph child);
CUresult fake_capture(CUstream s, fake_op op);
CUresult fake_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode);
CUresult fake_cuStreamEndCapture(CUstream s, CUgraph *out);
CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g,
                                          unsigned long long flags);
CUresult fake_cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                             const CUDA_KERNEL_NODE_PARAMS *p);
CUresult fake_cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                 CUgraph child);
CUresult fake_cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult fake_cuGraphExecDestroy(CUgraphExec e);

#pragma GCC visibility pop

#endif /* KILN_TESTS_FAKE_CUDA_INTERNAL_H */
