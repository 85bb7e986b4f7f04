/* cuBLASLt: loading the library at run time, and dot_general groups as
 * strided-batched matmuls queued on a stream. _GNU_SOURCE is for
 * RTLD_NODELETE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

/* Each table entry has exactly the header's prototype. _Generic does not
 * evaluate its operand, so this references no symbol of the library. */
#define KCUDA_BLASLT_CHECK(fn, ret, params)                     \
  _Static_assert(_Generic(&fn, kcuda_pfn_##fn: 1, default: 0), \
                 #fn " does not have the prototype kiln was written against");
KCUDA_BLASLT_FUNCTIONS(KCUDA_BLASLT_CHECK)
#undef KCUDA_BLASLT_CHECK

/* The oldest cuBLASLt kiln accepts (the first with CUDA 12's driver floor). */
#define KCUDA_BLASLT_MIN_VERSION 120000

/* ---- the library ---- */

/* Fills the table from an opened library. */
static kiln_status kcuda_blaslt_resolve(kcuda_blaslt *lt) {
  void *p;
#define KCUDA_BLASLT_RESOLVE(fn, ret, params)                                               \
  dlerror();                                                                                \
  if (!(p = dlsym(lt->library, #fn)))                                                       \
    return kcore_fail(KILN_ERR_DEVICE, "%s is not a usable cuBLASLt: it has no entry point " \
                      #fn, lt->name);                                                        \
  lt->fn = (kcuda_pfn_##fn)p;
  KCUDA_BLASLT_FUNCTIONS(KCUDA_BLASLT_RESOLVE)
#undef KCUDA_BLASLT_RESOLVE
  lt->version = lt->cublasLtGetVersion();
  if (lt->version < KCUDA_BLASLT_MIN_VERSION)
    return kcore_fail(KILN_ERR_DEVICE, "%s is cuBLASLt %zu.%zu; kiln needs %d.%d or newer", lt->name,
                      lt->version / 10000, lt->version / 100 % 100,
                      KCUDA_BLASLT_MIN_VERSION / 10000, KCUDA_BLASLT_MIN_VERSION / 100 % 100);
  return KILN_OK;
}

/* Opens one library; *missing tells a library that is not there (dlopen
 * failed, its reason in `why`) from one that is not usable. */
static kiln_status kcuda_blaslt_load(const char *library, kcuda_blaslt **out, bool *missing,
                                     char *why, size_t cap) {
  *out = NULL;
  *missing = false;
  kcuda_blaslt *lt = calloc(1, sizeof *lt);
  if (!lt) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "cuBLASLt: out of host memory");
  snprintf(lt->name, sizeof lt->name, "%s", library);
  /* NODELETE: the library's static CUDA runtime registers exit handlers, so
   * its code must stay mapped after dlclose. */
  lt->library = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lt->library) {
    snprintf(why, cap, "%s", dlerror());
    *missing = true;
    free(lt);
    return kcore_fail(KILN_ERR_DEVICE, "no cuBLASLt library (dlopen %s: %s)", library, why);
  }
  kiln_status st = kcuda_blaslt_resolve(lt);
  if (st) {
    kcuda_blaslt_close(lt);
    return st;
  }
  *out = lt;
  return KILN_OK;
}

kiln_status kcuda_blaslt_open_library(const char *library, kcuda_blaslt **out) {
  bool missing;
  char why[512];
  return kcuda_blaslt_load(library, out, &missing, why, sizeof why);
}

kiln_status kcuda_blaslt_open(kcuda_blaslt **out) {
  static const char *const libraries[] = {KCUDA_BLASLT_LIBRARIES};
  char tried[1024] = "", why[512];
  size_t used = 0;
  for (size_t i = 0; i < sizeof libraries / sizeof *libraries; i++) {
    bool missing;
    kiln_status st = kcuda_blaslt_load(libraries[i], out, &missing, why, sizeof why);
    if (!missing) return st;
    int n = snprintf(tried + used, sizeof tried - used, "%s%s (%s)", i ? "; " : "",
                     libraries[i], why);
    if (n > 0) used += (size_t)n < sizeof tried - used ? (size_t)n : sizeof tried - used - 1;
  }
  return kcore_fail(KILN_ERR_DEVICE, "no cuBLASLt library: tried %s", tried);
}

void kcuda_blaslt_close(kcuda_blaslt *lt) {
  if (!lt) return;
  if (lt->library) dlclose(lt->library);
  free(lt);
}

/* ---- planning: dot_general dimension numbers onto one batched GEMM ---- */

/* A run of dims read as one index, the first dim the slowest: `size`
 * elements `stride` apart (stride 0 when size is 1: any stride fits). */
typedef struct kcuda_run {
  int64_t size, stride;
} kcuda_run;

/* The dims of x listed in dims[0..n) as one run, if each (size-1 dims
 * aside) steps over exactly the ones after it. x has no zero dimension. */
static bool kcuda_collapse(const kir_aval *x, const int *dims, int n, kcuda_run *r) {
  int64_t stride[KIR_MAX_RANK], size = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    stride[d] = size;
    size *= x->shape[d];
  }
  r->size = 1;
  r->stride = 0;
  for (int i = n - 1; i >= 0; i--) {
    int64_t extent = x->shape[dims[i]];
    if (extent == 1) continue;
    if (r->size == 1)
      r->stride = stride[dims[i]];
    else if (stride[dims[i]] != r->stride * r->size)
      return false;
    r->size *= extent;
  }
  return true;
}

/* An operand whose matrix rows and columns are the runs `rows` and `cols`:
 * unit-stride columns are the plain layout, unit-stride rows the transposed
 * one; anything else needs a copy. */
static bool kcuda_operand(kiln_dtype dtype, kcuda_run batch, kcuda_run rows, kcuda_run cols,
                          kcuda_gemm_operand *o) {
  o->dtype = dtype;
  o->batch_stride = batch.size > 1 ? batch.stride : 0;
  if (cols.stride <= 1) {
    o->trans = false;
    o->ld = rows.stride ? rows.stride : cols.size;
    return o->ld >= cols.size;
  }
  if (rows.stride <= 1) {
    o->trans = true;
    o->ld = cols.stride;
    return o->ld >= rows.size;
  }
  return false;
}

static bool kcuda_dims_has(const kir_dims *d, int v) {
  for (int i = 0; i < d->n; i++)
    if (d->v[i] == v) return true;
  return false;
}

/* The dims of x that are neither batch nor contracting, ascending (the
 * order they take in the result). */
static int kcuda_free_dims(const kir_aval *x, const kir_dims *batch, const kir_dims *contract,
                           int *out) {
  int n = 0;
  for (int d = 0; d < x->rank; d++)
    if (!kcuda_dims_has(batch, d) && !kcuda_dims_has(contract, d)) out[n++] = d;
  return n;
}

static int64_t kcuda_extent(const kir_aval *x, const int *dims, int n) {
  int64_t size = 1;
  for (int i = 0; i < n; i++) size *= x->shape[dims[i]];
  return size;
}

/* The contracting pairs sorted by lhs dim: their order is free (it is a
 * sum), and a run needs the lhs dims in storage order. */
static void kcuda_contracting(const kir_dot_dims *dn, int *lhs, int *rhs) {
  int n = dn->lhs_contracting.n;
  for (int i = 0; i < n; i++) {
    int l = dn->lhs_contracting.v[i], r = dn->rhs_contracting.v[i], j = i;
    for (; j > 0 && lhs[j - 1] > l; j--) {
      lhs[j] = lhs[j - 1];
      rhs[j] = rhs[j - 1];
    }
    lhs[j] = l;
    rhs[j] = r;
  }
}

static void kcuda_copy_dims(const kir_dims *d, int *out) {
  for (int i = 0; i < d->n; i++) out[i] = d->v[i];
}

/* The operand and result dtypes cuBLASLt multiplies, and how. */
static bool kcuda_gemm_types(kiln_dtype lhs, kiln_dtype rhs, kiln_dtype out,
                             kcuda_gemm_compute *compute) {
  if (lhs != rhs) return false;
  switch (lhs) {
    case KILN_F16:
    case KILN_BF16:
      *compute = KCUDA_GEMM_COMPUTE_32F;
      return out == lhs || out == KILN_F32;
    case KILN_F32:
      *compute = KCUDA_GEMM_COMPUTE_32F;
      return out == KILN_F32;
    case KILN_F64:
      *compute = KCUDA_GEMM_COMPUTE_64F;
      return out == KILN_F64;
    default:
      return false;
  }
}

/* "dot_general f32[7,33] . f32[33,5] -> f32[7,5] + bias f32[5], relu" */
static void kcuda_gemm_describe(const kcuda_gemm_desc *d, char *buf, size_t cap) {
  char l[KIR_AVAL_STR_CAP], r[KIR_AVAL_STR_CAP], o[KIR_AVAL_STR_CAP], b[KIR_AVAL_STR_CAP] = "";
  kir_aval_str(&d->lhs, l, sizeof l);
  kir_aval_str(&d->rhs, r, sizeof r);
  kir_aval_str(&d->out, o, sizeof o);
  if (d->epilogue != KFUSE_EPILOGUE_NONE) kir_aval_str(&d->bias, b, sizeof b);
  snprintf(buf, cap, "dot_general %s . %s -> %s%s%s%s", l, r, o, *b ? " + bias " : "", b,
           d->epilogue == KFUSE_EPILOGUE_BIAS_RELU ? ", relu" : "");
}

/* The three operands' layouts; false when one needs a copy. */
static bool kcuda_gemm_layouts(const kir_aval *lhs, const kir_aval *rhs, const kir_dot_dims *dn,
                               kcuda_gemm *out) {
  int lb[KIR_MAX_RANK], rb[KIR_MAX_RANK], lc[KIR_MAX_RANK], rc[KIR_MAX_RANK];
  int lf[KIR_MAX_RANK], rf[KIR_MAX_RANK];
  int nb = dn->lhs_batch.n, nc = dn->lhs_contracting.n;
  kcuda_copy_dims(&dn->lhs_batch, lb);
  kcuda_copy_dims(&dn->rhs_batch, rb);
  kcuda_contracting(dn, lc, rc);
  int nlf = kcuda_free_dims(lhs, &dn->lhs_batch, &dn->lhs_contracting, lf);
  int nrf = kcuda_free_dims(rhs, &dn->rhs_batch, &dn->rhs_contracting, rf);
  kcuda_run a_batch, a_rows, a_cols, b_batch, b_rows, b_cols;
  if (!kcuda_collapse(lhs, lb, nb, &a_batch) || !kcuda_collapse(lhs, lf, nlf, &a_rows) ||
      !kcuda_collapse(lhs, lc, nc, &a_cols) || !kcuda_collapse(rhs, rb, nb, &b_batch) ||
      !kcuda_collapse(rhs, rc, nc, &b_rows) || !kcuda_collapse(rhs, rf, nrf, &b_cols))
    return false;
  out->c = (kcuda_gemm_operand){.dtype = out->c.dtype, .ld = out->n,
                                .batch_stride = out->batch > 1 ? out->m * out->n : 0};
  return kcuda_operand(lhs->dtype, a_batch, a_rows, a_cols, &out->a) &&
         kcuda_operand(rhs->dtype, b_batch, b_rows, b_cols, &out->b);
}

/* The bias must run along n, one value per column of C (per row of D). */
static kiln_status kcuda_gemm_bias(const kcuda_gemm_desc *d, kcuda_gemm *out) {
  out->epilogue = d->epilogue;
  out->bias_dtype = KILN_INVALID_DTYPE;
  if (d->epilogue == KFUSE_EPILOGUE_NONE) return KILN_OK;
  const kir_aval *bias = &d->bias;
  if (bias->rank != 1 || bias->dtype != out->c.dtype || bias->shape[0] != out->n)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcuda_gemm_plan: %s: cuBLASLt's bias takes one %s value per column of the "
                      "%lld x %lld matrix product",
                      out->what, kiln_dtype_short_name(out->c.dtype), (long long)out->m,
                      (long long)out->n);
  out->bias_dtype = bias->dtype;
  return KILN_OK;
}

kiln_status kcuda_gemm_plan(const kcuda_gemm_desc *d, kcuda_gemm *out) {
  memset(out, 0, sizeof *out);
  kcuda_gemm_describe(d, out->what, sizeof out->what);
  const kir_dot_dims *dn = &d->dims;
  const kir_aval *lhs = &d->lhs, *rhs = &d->rhs, *res = &d->out;
  out->c.dtype = res->dtype;
  out->align = KCUDA_GEMM_ALIGN;
  if (!kcuda_gemm_types(lhs->dtype, rhs->dtype, res->dtype, &out->compute))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcuda_gemm_plan: %s: cuBLASLt multiplies f16 or bf16 (into themselves or "
                      "f32), f32 or f64 operands of one dtype",
                      out->what);
  int dims[KIR_MAX_RANK];
  kcuda_copy_dims(&dn->lhs_batch, dims);
  out->batch = kcuda_extent(lhs, dims, dn->lhs_batch.n);
  kcuda_copy_dims(&dn->lhs_contracting, dims);
  out->k = kcuda_extent(lhs, dims, dn->lhs_contracting.n);
  out->m = kcuda_extent(lhs, dims, kcuda_free_dims(lhs, &dn->lhs_batch, &dn->lhs_contracting, dims));
  out->n = kcuda_extent(rhs, dims, kcuda_free_dims(rhs, &dn->rhs_batch, &dn->rhs_contracting, dims));
  kiln_status st = kcuda_gemm_bias(d, out);
  if (st) return st;
  if (out->batch == 0 || out->m == 0 || out->n == 0) return KILN_OK; /* runs as nothing */
  if (out->k == 0)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcuda_gemm_plan: %s: contracts over no elements (the result is zeros%s)",
                      out->what, out->epilogue ? " plus bias" : "");
  if (out->m > INT32_MAX || out->n > INT32_MAX || out->k > INT32_MAX || out->batch > INT32_MAX)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcuda_gemm_plan: %s: batch %lld, M %lld, N %lld or K %lld exceeds "
                      "cuBLASLt's int32 range",
                      out->what, (long long)out->batch, (long long)out->m, (long long)out->n,
                      (long long)out->k);
  if (!kcuda_gemm_layouts(lhs, rhs, dn, out))
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcuda_gemm_plan: %s: an operand is not a strided batch of matrices "
                      "(batch, free and contracting dims must each be one evenly strided run, "
                      "free or contracting dims innermost)",
                      out->what);
  return KILN_OK;
}

/* ---- a handle and a workspace per stream ---- */

kiln_status kcuda_gemm_stream_new(kcuda_blaslt *lt, kcuda_device *d, CUstream s,
                                  kcuda_gemm_stream **out) {
  *out = NULL;
  kcuda_gemm_stream *gs = calloc(1, sizeof *gs);
  if (!gs) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: cuBLASLt: out of host memory", d->where);
  gs->lt = lt;
  gs->d = d;
  gs->stream = s;
  kiln_status st = kcuda_enter(d);
  if (st) {
    free(gs);
    return st;
  }
  int major = 0;
  KCUDA_CU(d->drv, d->where, cuDeviceGetAttribute,
           (&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->device), out);
  gs->workspace_bytes = major >= 9 ? KCUDA_GEMM_WORKSPACE_SM90 : KCUDA_GEMM_WORKSPACE_OLDER;
  KCUDA_LT(lt, d->where, cublasLtCreate, (&gs->handle), out);
  KCUDA_CU(d->drv, d->where, cuMemAllocFromPoolAsync,
           (&gs->workspace, gs->workspace_bytes, d->pool, s), out);
out:
  kcuda_leave(d);
  if (st) {
    kcuda_gemm_stream_free(gs);
    return st;
  }
  *out = gs;
  return KILN_OK;
}

void kcuda_gemm_stream_free(kcuda_gemm_stream *gs) {
  if (!gs) return;
  kcuda_device *d = gs->d;
  /* Handles carry their context: free them even if it cannot be made current. */
  CUresult rc = d->drv->cuCtxPushCurrent(d->context);
  bool entered = rc == CUDA_SUCCESS;
  if (!entered) kcuda_log_failure(d, rc, "cuCtxPushCurrent");
  if (gs->workspace && (rc = d->drv->cuMemFreeAsync(gs->workspace, gs->stream)) != CUDA_SUCCESS)
    kcuda_log_failure(d, rc, "cuMemFreeAsync (cuBLASLt workspace)");
  cublasStatus_t lrc = gs->handle ? gs->lt->cublasLtDestroy(gs->handle) : CUBLAS_STATUS_SUCCESS;
  if (lrc != CUBLAS_STATUS_SUCCESS)
    kcore_log(d->log_level, KILN_LOG_WARN, "%s: cublasLtDestroy failed: %s", d->where,
              gs->lt->cublasLtGetStatusName(lrc));
  if (entered) kcuda_leave(d);
  free(gs);
}

/* Lazy creation is rare and cheap to serialise: one lock for every context. */
static pthread_mutex_t kcuda_gemm_lazy = PTHREAD_MUTEX_INITIALIZER;

kiln_status kcuda_device_gemm(kcuda_state *s, kcuda_device *d, kcuda_gemm_stream **out) {
  pthread_mutex_lock(&kcuda_gemm_lazy);
  kiln_status st = KILN_OK;
  if (!s->blaslt) st = kcuda_blaslt_open(&s->blaslt);
  if (!st && !d->gemm) st = kcuda_gemm_stream_new(s->blaslt, d, d->compute, &d->gemm);
  *out = d->gemm;
  pthread_mutex_unlock(&kcuda_gemm_lazy);
  return st;
}

/* ---- prepared matmuls ---- */

struct kcuda_gemm_op {
  const kcuda_blaslt *lt; /* destroys the descriptors */
  kcuda_gemm g;
  bool empty; /* batch, m or n is zero: nothing to compute */
  cublasLtMatmulDesc_t desc;
  /* cuBLASLt's A (kiln's B), its B (kiln's A), and C = D (kiln's C) */
  cublasLtMatrixLayout_t layout[3];
  cublasLtMatmulAlgo_t algo;
  size_t workspace_bytes; /* what the algorithm needs */
  union {
    float f;
    double d;
  } one, zero; /* alpha and beta in the scale type */
  char where[1280]; /* "<device>: <what>" */
};

static cudaDataType_t kcuda_cuda_type(kiln_dtype d) {
  switch (d) {
    case KILN_F16: return CUDA_R_16F;
    case KILN_BF16: return CUDA_R_16BF;
    case KILN_F64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

/* A column-major rows x cols layout, batched like the gemm. */
static kiln_status kcuda_layout(const kcuda_gemm_stream *gs, kcuda_gemm_op *op, kiln_dtype dtype,
                                int64_t rows, int64_t cols, int64_t ld, int64_t batch_stride,
                                cublasLtMatrixLayout_t *out) {
  kiln_status st = KILN_OK;
  const kcuda_blaslt *lt = gs->lt;
  KCUDA_LT(lt, op->where, cublasLtMatrixLayoutCreate,
           (out, kcuda_cuda_type(dtype), (uint64_t)rows, (uint64_t)cols, ld), fail);
  if (op->g.batch > 1) {
    int32_t count = (int32_t)op->g.batch;
    KCUDA_LT(lt, op->where, cublasLtMatrixLayoutSetAttribute,
             (*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), fail);
    KCUDA_LT(lt, op->where, cublasLtMatrixLayoutSetAttribute,
             (*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof batch_stride),
             fail);
  }
fail:
  return st;
}

/* D (n x m) = op(kiln's B) (n x k) . op(kiln's A) (k x m). */
static kiln_status kcuda_layouts(const kcuda_gemm_stream *gs, kcuda_gemm_op *op) {
  const kcuda_gemm *g = &op->g;
  kiln_status st;
  if ((st = kcuda_layout(gs, op, g->b.dtype, g->b.trans ? g->k : g->n, g->b.trans ? g->n : g->k,
                         g->b.ld, g->b.batch_stride, &op->layout[0])) ||
      (st = kcuda_layout(gs, op, g->a.dtype, g->a.trans ? g->m : g->k, g->a.trans ? g->k : g->m,
                         g->a.ld, g->a.batch_stride, &op->layout[1])))
    return st;
  return kcuda_layout(gs, op, g->c.dtype, g->n, g->m, g->c.ld, g->c.batch_stride, &op->layout[2]);
}

static kiln_status kcuda_matmul_desc(const kcuda_gemm_stream *gs, kcuda_gemm_op *op) {
  kiln_status st = KILN_OK;
  const kcuda_blaslt *lt = gs->lt;
  const kcuda_gemm *g = &op->g;
  bool f64 = g->compute == KCUDA_GEMM_COMPUTE_64F;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                : g->compute == KCUDA_GEMM_COMPUTE_32F_TF32
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  if (f64) {
    op->one.d = 1.0;
    op->zero.d = 0.0;
  } else {
    op->one.f = 1.0f;
    op->zero.f = 0.0f;
  }
  KCUDA_LT(lt, op->where, cublasLtMatmulDescCreate,
           (&op->desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), fail);
  int32_t trans_a = g->b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t trans_b = g->a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
           (op->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a), fail);
  KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
           (op->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b), fail);
  if (g->epilogue == KFUSE_EPILOGUE_NONE) return KILN_OK;
  uint32_t epilogue =
      g->epilogue == KFUSE_EPILOGUE_BIAS_RELU ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
           (op->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), fail);
  /* The heuristic reads the bias pointer's alignment: until a run sets the
   * real one, an address inside the workspace with exactly the alignment
   * runs promise stands in for it. */
  const void *bias = (const void *)(uintptr_t)(gs->workspace + g->align % KCUDA_GEMM_ALIGN);
  KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
           (op->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), fail);
  if (g->bias_dtype != g->c.dtype) {
    int32_t type = kcuda_cuda_type(g->bias_dtype);
    KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
             (op->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type), fail);
  }
fail:
  return st;
}

/* The heuristic's best algorithm within the stream's workspace. */
static kiln_status kcuda_pick_algo(const kcuda_gemm_stream *gs, kcuda_gemm_op *op) {
  kiln_status st = KILN_OK;
  const kcuda_blaslt *lt = gs->lt;
  cublasLtMatmulPreference_t pref = NULL;
  uint64_t workspace = gs->workspace_bytes;
  uint32_t align = op->g.align;
  static const cublasLtMatmulPreferenceAttributes_t aligned[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  KCUDA_LT(lt, op->where, cublasLtMatmulPreferenceCreate, (&pref), out);
  KCUDA_LT(lt, op->where, cublasLtMatmulPreferenceSetAttribute,
           (pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace), out);
  for (int i = 0; i < 4; i++)
    KCUDA_LT(lt, op->where, cublasLtMatmulPreferenceSetAttribute,
             (pref, aligned[i], &align, sizeof align), out);
  cublasLtMatmulHeuristicResult_t best;
  memset(&best, 0, sizeof best);
  int found = 0;
  cublasStatus_t rc = lt->cublasLtMatmulAlgoGetHeuristic(
      gs->handle, op->desc, op->layout[0], op->layout[1], op->layout[2], op->layout[2], pref, 1,
      &best, &found);
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || (rc == CUBLAS_STATUS_SUCCESS && found < 1)) {
    st = kcore_fail(KILN_ERR_UNIMPLEMENTED,
                    "%s: cuBLASLt has no algorithm for it (cublasLtMatmulAlgoGetHeuristic: %s)",
                    op->where, found < 1 && !rc ? "no result" : lt->cublasLtGetStatusName(rc));
  } else if (rc != CUBLAS_STATUS_SUCCESS || best.state != CUBLAS_STATUS_SUCCESS) {
    st = kcuda_cublas_fail(rc ? rc : best.state, "cublasLtMatmulAlgoGetHeuristic", op->where);
  } else if (best.workspaceSize > gs->workspace_bytes) {
    st = kcore_fail(KILN_ERR_INTERNAL,
                    "%s: cuBLASLt picked an algorithm needing %zu bytes of workspace, over the "
                    "%zu allowed",
                    op->where, best.workspaceSize, gs->workspace_bytes);
  } else {
    op->algo = best.algo;
    op->workspace_bytes = best.workspaceSize;
  }
out:
  if (pref) lt->cublasLtMatmulPreferenceDestroy(pref);
  return st;
}

kiln_status kcuda_gemm_prepare(kcuda_gemm_stream *gs, const kcuda_gemm *g, kcuda_gemm_op **out) {
  *out = NULL;
  kcuda_gemm_op *op = calloc(1, sizeof *op);
  if (!op) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: cuBLASLt: out of host memory", g->what);
  op->lt = gs->lt;
  op->g = *g;
  snprintf(op->where, sizeof op->where, "%s: %s", gs->d->where, g->what);
  op->empty = g->batch == 0 || g->m == 0 || g->n == 0;
  if (op->empty) {
    *out = op;
    return KILN_OK;
  }
  if (g->k == 0 || g->align == 0 || (g->align & (g->align - 1))) {
    kcuda_gemm_op_free(op);
    return kcore_fail(KILN_ERR_INTERNAL, "kcuda_gemm_prepare: %s: K %lld, alignment %u", g->what,
                      (long long)g->k, g->align);
  }
  kiln_status st = kcuda_enter(gs->d);
  if (!st) {
    if (!(st = kcuda_matmul_desc(gs, op)) && !(st = kcuda_layouts(gs, op)))
      st = kcuda_pick_algo(gs, op);
    kcuda_leave(gs->d);
  }
  if (st) {
    kcuda_gemm_op_free(op);
    return st;
  }
  *out = op;
  return KILN_OK;
}

void kcuda_gemm_op_free(kcuda_gemm_op *op) {
  if (!op) return;
  /* Descriptors are host objects: no context is needed. */
  for (int i = 0; i < 3; i++)
    if (op->layout[i]) op->lt->cublasLtMatrixLayoutDestroy(op->layout[i]);
  if (op->desc) op->lt->cublasLtMatmulDescDestroy(op->desc);
  free(op);
}

kiln_status kcuda_gemm_run(kcuda_gemm_stream *gs, const kcuda_gemm_op *op, CUstream stream,
                           CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr c) {
  kiln_status st = KILN_OK;
  const kcuda_gemm *g = &op->g;
  if (op->empty) return KILN_OK;
  bool wants_bias = g->epilogue != KFUSE_EPILOGUE_NONE;
  if (!a || !b || !c || wants_bias != (bias != 0))
    return kcore_fail(KILN_ERR_INTERNAL, "%s: kcuda_gemm_run: a null pointer or a bias %s",
                      op->where, wants_bias ? "missing" : "without an epilogue");
  const CUdeviceptr ptrs[4] = {a, b, c, bias};
  for (int i = 0; i < 4; i++)
    if (ptrs[i] % g->align)
      return kcore_fail(KILN_ERR_INTERNAL,
                        "%s: kcuda_gemm_run: %s pointer 0x%llx is not %u-byte aligned as prepared",
                        op->where, (const char *[]){"A", "B", "C", "bias"}[i],
                        (unsigned long long)ptrs[i], g->align);
  if (op->workspace_bytes > gs->workspace_bytes)
    return kcore_fail(KILN_ERR_INTERNAL,
                      "%s: kcuda_gemm_run: the op needs %zu bytes of workspace, the stream has %zu",
                      op->where, op->workspace_bytes, gs->workspace_bytes);
  const kcuda_blaslt *lt = gs->lt;
  if (wants_bias) {
    const void *bias_ptr = (const void *)(uintptr_t)bias;
    KCUDA_LT(lt, op->where, cublasLtMatmulDescSetAttribute,
             (op->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr), out);
  }
  const void *A = (const void *)(uintptr_t)b, *B = (const void *)(uintptr_t)a;
  void *D = (void *)(uintptr_t)c, *work = (void *)(uintptr_t)gs->workspace;
  KCUDA_LT(lt, op->where, cublasLtMatmul,
           (gs->handle, op->desc, &op->one, A, op->layout[0], B, op->layout[1], &op->zero, D,
            op->layout[2], D, op->layout[2], &op->algo, work, gs->workspace_bytes, stream),
           out);
out:
  return st;
}
