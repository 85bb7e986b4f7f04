/* cuBLASLt matmuls (blaslt.c): part of backend/cuda's door, cuda_backend.h, which includes it
 * where it stands; not to be included on its own. */
#ifndef KILN_SRC_BACKEND_CUDA_BLASLT_H
#define KILN_SRC_BACKEND_CUDA_BLASLT_H

/* dot_general (a KFUSE_DOT group: the dot, maybe with a bias and relu
 * epilogue) as one strided-batched cuBLASLt matmul. libcublasLt is dlopen'ed
 * like the driver (though as long as kiln links libcublas for check.c's
 * status names, libcublas loads it anyway). Row-major
 * C = A.B is handed to cuBLASLt (column-major) as C^T = B^T . A^T: its "A" is
 * kiln's B, its "B" kiln's A, and D is C read column-major (n x m), whose
 * rows are C's columns, which is what the per-row BIAS epilogue needs. */
#include <cublasLt.h>

#define KCUDA_BLASLT_LIBRARIES "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"
/* NVIDIA's recommended cuBLASLt workspace: 32 MiB from Hopper (sm_90) on,
 * 4 MiB before. */
#define KCUDA_GEMM_WORKSPACE_SM90 ((size_t)32 << 20)
#define KCUDA_GEMM_WORKSPACE_OLDER ((size_t)4 << 20)
/* The pointer alignment plans assume: cuBLASLt's default, and what kiln's
 * allocations (pool blocks, 256-byte slots) give. */
#define KCUDA_GEMM_ALIGN 256

/* Every cuBLASLt function kiln calls: X(name, return type, parameter types).
 * The prototypes are checked against cublasLt.h at compile time. */
#define KCUDA_BLASLT_FUNCTIONS(X)                                                                 \
  X(cublasLtGetVersion, size_t, (void))                                                            \
  X(cublasLtGetStatusName, const char *, (cublasStatus_t))                                         \
  X(cublasLtGetStatusString, const char *, (cublasStatus_t))                                       \
  X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t *))                                          \
  X(cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t))                                           \
  X(cublasLtMatmulDescCreate, cublasStatus_t,                                                      \
    (cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t))                                 \
  X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t))                             \
  X(cublasLtMatmulDescSetAttribute, cublasStatus_t,                                                \
    (cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t))                  \
  X(cublasLtMatrixLayoutCreate, cublasStatus_t,                                                    \
    (cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t))                         \
  X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t))                         \
  X(cublasLtMatrixLayoutSetAttribute, cublasStatus_t,                                              \
    (cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t))               \
  X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t *))                \
  X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t))                 \
  X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t,                                          \
    (cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t))      \
  X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t,                                                \
    (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,       \
     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,              \
     cublasLtMatmulHeuristicResult_t *, int *))                                                    \
  X(cublasLtMatmul, cublasStatus_t,                                                                \
    (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,   \
     const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,     \
     void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t))

#define KCUDA_BLASLT_PFN(fn, ret, params) typedef ret(*kcuda_pfn_##fn) params;
KCUDA_BLASLT_FUNCTIONS(KCUDA_BLASLT_PFN)
#undef KCUDA_BLASLT_PFN

/* The library and its entry points. */
typedef struct kcuda_blaslt {
  void *library;     /* the dlopen handle */
  char name[256];    /* the library that opened */
  size_t version;    /* cublasLtGetVersion(): 10000 * major + 100 * minor + patch */
#define KCUDA_BLASLT_FIELD(fn, ret, params) kcuda_pfn_##fn fn;
  KCUDA_BLASLT_FUNCTIONS(KCUDA_BLASLT_FIELD)
#undef KCUDA_BLASLT_FIELD
} kcuda_blaslt;

/* Opens the first of KCUDA_BLASLT_LIBRARIES that loads; _library opens that
 * one library (a name or a path: the tests load a stand-in by path). A
 * missing library or entry point is KILN_ERR_DEVICE naming what was tried. */
kiln_status kcuda_blaslt_open(kcuda_blaslt **out);
kiln_status kcuda_blaslt_open_library(const char *library, kcuda_blaslt **out);
void kcuda_blaslt_close(kcuda_blaslt *lt); /* NULL is allowed */

/* KCUDA_CU for the table: KCUDA_LT(lt, where, cublasLtCreate, (&h), fail). */
#define KCUDA_LT(lt, where, fn, args, label)                       \
  do {                                                             \
    cublasStatus_t kcuda_rc_ = (lt)->fn args;                      \
    if (kcuda_rc_ != CUBLAS_STATUS_SUCCESS) {                      \
      st = kcuda_cublas_fail(kcuda_rc_, #fn #args, (where));         \
      goto label;                                                  \
    }                                                              \
  } while (0)

/* One matrix operand in row-major terms: matrix i of the batch starts
 * batch_stride elements after matrix i-1; a stored row is ld elements from
 * the next. trans: the matrix is stored transposed ([cols, rows]). */
typedef struct kcuda_gemm_operand {
  kiln_dtype dtype;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
} kcuda_gemm_operand;

typedef enum kcuda_gemm_compute {
  KCUDA_GEMM_COMPUTE_32F,      /* f32 accumulation, f32 products (f16/bf16/f32 inputs) */
  KCUDA_GEMM_COMPUTE_32F_TF32, /* f32 inputs rounded to TF32 (lax Precision.DEFAULT on GPUs) */
  KCUDA_GEMM_COMPUTE_64F
} kcuda_gemm_compute;

/* A dot_general as `batch` row-major products C[m, n] = A[m, k] . B[k, n]
 * (+ bias[n], then relu). C is [batch..., lhs free..., rhs free...]
 * contiguous: c.ld = n, c.batch_stride = m * n, never transposed. */
typedef struct kcuda_gemm {
  int64_t batch, m, n, k;
  kcuda_gemm_operand a, b, c;
  kcuda_gemm_compute compute;
  kfuse_epilogue epilogue;
  kiln_dtype bias_dtype; /* KILN_INVALID_DTYPE without an epilogue */
  /* The alignment in bytes of every pointer kcuda_gemm_run gets
   * (KCUDA_GEMM_ALIGN from the plan; lower it before preparing, never raise
   * it past what the buffers have). */
  uint32_t align;
  char what[1024]; /* "dot_general bf16[8,64,32] . bf16[8,32,16] -> f32[8,64,16] ..." */
} kcuda_gemm;

/* A dot_general to run as one cuBLASLt matmul, told without the fusion plan:
 * its operands' and result's types, its dimension numbers, and an optional
 * epilogue (a bias along the result's last axis, then relu). */
typedef struct kcuda_gemm_desc {
  kir_aval lhs, rhs, out;
  kir_dot_dims dims;
  kfuse_epilogue epilogue;
  kir_aval bias; /* with an epilogue */
} kcuda_gemm_desc;

/* Maps a dot_general (and its epilogue) onto a kcuda_gemm. Operand dims must collapse
 * to a strided batch of matrices: the batch dims (in the dot's batch order),
 * the free dims and the contracting dims each form one evenly strided run
 * (size-1 dims ignored), and the contracting or the free run has stride 1
 * (which one gives the transpose flag); contracting dims may be listed in
 * any order as long as both operands store them in the same one. Inputs:
 * f16 or bf16 (to themselves or f32), f32 (to f32), f64 (to f64), both
 * operands of one dtype. f32 dots use exact f32 arithmetic
 * (KCUDA_GEMM_COMPUTE_32F): the IR has no precision field, so lax's DEFAULT
 * (TF32 on tensor cores) cannot be told apart from HIGHEST; a caller may set
 * KCUDA_GEMM_COMPUTE_32F_TF32 itself. A bias must run along n (rhs free dims
 * of total size equal to the result's last axis). An empty result (batch, m
 * or n zero) plans fine and runs as nothing; k == 0 with a non-empty result
 * is KILN_ERR_UNIMPLEMENTED (the result is zeros plus bias, which cuBLASLt
 * does not compute), as is anything else not expressible, with a message
 * naming the shapes: the caller then runs the group another way. */
kiln_status kcuda_gemm_plan(const kcuda_gemm_desc *d, kcuda_gemm *out);
/* The description of a KFUSE_DOT group of p (exec.c); KILN_ERR_INTERNAL
 * for a group without a dot_general. */
kiln_status kcuda_gemm_desc_of_group(const kir_program *p, const kfuse_group *g,
                                     kcuda_gemm_desc *out);

/* One cuBLASLt handle and one workspace (from the device's pool, allocated
 * and freed in the order of `stream`) for the matmuls queued on one stream. */
typedef struct kcuda_gemm_stream {
  kcuda_blaslt *lt;
  kcuda_device *d;
  CUstream stream;
  cublasLtHandle_t handle;
  CUdeviceptr workspace;
  size_t workspace_bytes;
} kcuda_gemm_stream;

kiln_status kcuda_gemm_stream_new(kcuda_blaslt *lt, kcuda_device *d, CUstream s,
                                  kcuda_gemm_stream **out);
/* Frees the workspace in stream order, so queued matmuls finish first.
 * NULL is allowed. */
void kcuda_gemm_stream_free(kcuda_gemm_stream *gs);
/* The device's gemm stream on its compute stream, opening cuBLASLt
 * (s->blaslt) and the stream on first use. Thread-safe. */
kiln_status kcuda_device_gemm(kcuda_state *s, kcuda_device *d, kcuda_gemm_stream **out);

/* The descriptors and the heuristic's best algorithm for one kcuda_gemm on
 * one device, made once per compiled step. */
typedef struct kcuda_gemm_op kcuda_gemm_op;
/* No algorithm for the gemm is KILN_ERR_UNIMPLEMENTED naming its shapes. */
kiln_status kcuda_gemm_prepare(kcuda_gemm_stream *gs, const kcuda_gemm *g, kcuda_gemm_op **out);
void kcuda_gemm_op_free(kcuda_gemm_op *op); /* NULL is allowed */
/* Queues C = A.B (+ bias, relu) on `stream` with gs's handle and workspace
 * (stream is gs->stream, or one being captured into a graph that will run
 * on it): a, b, c (and bias, 0 without an epilogue) are device pointers laid
 * out as the kcuda_gemm says, aligned to its `align`. Call inside
 * kcuda_enter(gs->d). The bias pointer is set on the op's descriptor, so
 * one op must not run on two threads at once. */
kiln_status kcuda_gemm_run(kcuda_gemm_stream *gs, const kcuda_gemm_op *op, CUstream stream,
                           CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr c);
#endif
