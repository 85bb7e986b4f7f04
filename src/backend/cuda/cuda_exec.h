/* Inside the executor (exec_*.c): part of backend/cuda's door, cuda_backend.h, which includes it
 * where it stands; not to be included on its own. */
#ifndef KILN_SRC_BACKEND_CUDA_EXEC_H
#define KILN_SRC_BACKEND_CUDA_EXEC_H

/* ==== inside the executor (exec_*.c) ====
 * exec_compile.c: kernels to cubins (NVRTC, the kernel cache, dumps);
 * exec_build.c: the executable and the interface's table; exec_steps.c: one
 * step on the device; exec_host.c: host steps; exec_graph.c: CUDA graphs;
 * exec_call.c: a call, over all of these. */

/* Blocks per multiprocessor a grid-stride kernel is launched with at most:
 * enough to fill every SM several times over; the kernel strides past it. */
#define KCUDA_BLOCKS_PER_SM 32
/* Threads compiling one executable's kernels at once, at most. */
#define KCUDA_COMPILE_THREADS 8

typedef enum kcuda_step_kind {
  KCUDA_STEP_KERNEL,
  KCUDA_STEP_GEMM,
  KCUDA_STEP_PARTS,
  KCUDA_STEP_HOST
} kcuda_step_kind;

/* A step of several kernels for one equation (exec_parts.c, codegen's
 * kcg_parts): kernels fn[i] = NAME_<part[i]> over items[i] elements (none:
 * not launched), the step's matmul before part gemm_at (-1: none), scratch
 * buffer i at off[i] in the executable's parts scratch when used[i] (else
 * its argument is NULL). */
typedef struct kcuda_parts_step {
  int n, gemm_at, n_scratch;
  const char *part[KCG_MAX_PARTS];
  CUfunction fn[KCG_MAX_PARTS];
  int64_t items[KCG_MAX_PARTS];
  unsigned grid[KCG_MAX_PARTS];
  size_t off[KCG_MAX_PARTS];
  bool used[KCG_MAX_PARTS];
  int64_t n_out;     /* result elements: no work when 0 */
  const char *label; /* what the step is, for messages */
} kcuda_parts_step;

typedef struct kcuda_step {
  kcuda_step_kind kind;
  const kfuse_group *g;
  char *name;     /* the kernel's symbol */
  char *source;   /* its CUDA C, for as_text */
  char what[112]; /* "jit(f) step 3 (kernel kiln_loop_2)", for messages and the fault trail */
  kcuda_kernel kernel;
  unsigned grid, block;
  int64_t n_items; /* KERNEL: the kernel's work items (its range is [0, n_items)) */
  kdev_buffer scratch; /* a split reduction's counters and partials (kcg_kernel.scratch_bytes) */
  int node;        /* its node in the graph, -1 when it queues nothing (no work) */
  kcuda_gemm gemm; /* GEMM, and a convolution's PARTS */
  kcuda_gemm_op *gemm_op;
  kcuda_gemm_stream *gemm_stream;
  kcuda_parts_step parts; /* PARTS (kernel holds their module) */
} kcuda_step;

struct kdev_exec {
  kiln_device *dev;
  const kir_program *prog; /* outlives the executable */
  const bool *donated;     /* per invar */
  kir_eval_env env;        /* for host steps (a copy of the build's) */
  int n_in, n_out;
  kiln_log_level log_level;
  kfuse_plan *plan;
  int n_steps;
  kcuda_step *steps;
  int n_nodes;    /* steps with work */
  bool graphable; /* several kernels and matmuls, and nothing else */
  kfuse_consts consts;
  kdev_buffer *const_dev; /* per var: the device copy of a constant kernels read */
  pthread_mutex_t mu;     /* one call at a time enqueues (arena, graph) */
  kdev_buffer arena;
  /* The PARTS steps' scratch (im2col matrices), shared: steps run one
   * after another on the compute stream. */
  kdev_buffer parts_scratch;
  size_t parts_scratch_bytes;
  unsigned long long calls;
  kcuda_graph graph;
  kiln_kernel_args *node_args; /* per node: the addresses it holds */
  char label[48];              /* "jit(f)", for messages and buffers' origin */
  char graph_what[96];         /* "jit(f) graph of 3 steps", for the fault trail */
};

/* One call in flight: the executable, its device, the call's arrays. */
typedef struct kcuda_x_call {
  kdev_exec *x;
  kcuda_device *d;
  kiln_array *const *args;
  kiln_array **outs;
  CUdeviceptr *out_ptr; /* per program output: where it is written */
} kcuda_x_call;

/* exec_build.c */
/* Blocks of a grid-stride launch of kernel k on dev. */
unsigned kcuda_x_grid(const kiln_device *dev, const kcg_kernel *k);
/* Plans s->gemm from desc and prepares it on x's device (the options'
 * matmul precision applied); KILN_ERR_UNIMPLEMENTED where cuBLASLt cannot
 * run it. */
kiln_status kcuda_step_gemm_prepare(kdev_exec *x, const kdev_build *b, const kcuda_gemm_desc *desc,
                                    kcuda_step *s);
/* exec_parts.c */
/* A PARTS step for lone equation e (a convolution or a scatter; s->kind
 * set), its source in *k for compiling; one the emitter or cuBLASLt cannot
 * run stays a host step (KILN_OK, k->name NULL). */
kiln_status kcuda_step_parts_emit(kdev_exec *x, const kdev_build *b, const kir_eqn *e,
                                  kcuda_step *s, kcg_kernel *k);
/* Loads a PARTS step's kernels from its cubin. */
kiln_status kcuda_step_parts_load(kdev_exec *x, kcuda_step *s, kcg_kernel *k, const void *cubin);
/* The parts scratch, sized for every PARTS step (after they are emitted). */
kiln_status kcuda_x_parts_scratch(kdev_exec *x);
void kcuda_step_parts_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a);
/* Queues a PARTS step's kernels (and matmul) on `stream` (compute, or a capture). */
kiln_status kcuda_step_parts_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream);
/* exec_compile.c */
int kcuda_x_sm(const kiln_device *dev);
/* Cubins of the n kernels of x's steps, compiled at once through `cache`. */
kiln_status kcuda_x_compile(kdev_exec *x, const kcore_config *config, kcache *cache,
                            const kcg_kernel *k, const void **cubin);
/* exec_steps.c */
CUdeviceptr kcuda_x_addr(const kcuda_x_call *r, kir_vid v);
void kcuda_step_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a);
kcuda_launch kcuda_step_launch(const kcuda_step *s, kiln_kernel_args *a, long long *range,
                               void **params);
void kcuda_step_gemm_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a);
kiln_status kcuda_step_gemm_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream);
kiln_status kcuda_step_kernel(const kcuda_x_call *r, const kcuda_step *s);
/* A GEMM or PARTS step's work queued on `stream`; a step's node's addresses. */
kiln_status kcuda_step_queue(const kcuda_x_call *r, const kcuda_step *s, CUstream stream);
void kcuda_step_node_args(const kcuda_x_call *r, const kcuda_step *s, kiln_kernel_args *a);
/* exec_call.c */
kiln_status kcuda_x_run(kdev_exec *x, kiln_array *const *args, kiln_array **outs);
/* exec_host.c */
size_t kcuda_x_var_bytes(const kir_program *p, kir_vid v);
kiln_status kcuda_step_host(const kcuda_x_call *r, const kcuda_step *s);
/* exec_graph.c */
kiln_status kcuda_x_replay(const kcuda_x_call *r);
#endif
