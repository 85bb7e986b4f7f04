/* A stand-in libcublasLt.so.13 for tests without a GPU, over the stand-in
 * driver (fake_cuda_driver.c): device pointers are host pointers, and each
 * cublasLtMatmul is queued on its stream with cuLaunchHostFunc, so it runs
 * in stream order when the stream's work is forced, like a kernel.
 *
 * It implements the entry points kiln calls with cuBLASLt's documented
 * semantics: column-major matrices, op(A) and op(B) transposes, leading
 * dimensions, strided batches, alpha and beta in the scale type, the BIAS
 * and RELU epilogues (one bias value per row of D, added before the relu),
 * f16/bf16/f32/f64 data and the 32F, 32F_FAST_TF32 and 64F compute types.
 * It validates like the real library, and stricter where kiln's mistakes
 * would otherwise pass silently: attribute sizes, ld >= rows, equal batch
 * counts, supported type combinations, the epilogue's bias pointer, the
 * workspace the algorithm needs, pointer alignment against the heuristic's
 * preferences, non-overlapping output batches. When a queued matmul runs,
 * every matrix, the bias and the workspace it touches must lie in live
 * device memory (kiln_fake_cuda_range_live); a violation is printed and
 * makes every later call (except the destroys) fail with
 * CUBLAS_STATUS_EXECUTION_FAILED, like a sticky illegal address. A matmul
 * queued on a capturing stream becomes part of the captured graph and runs
 * at each launch of it; it lives until its handle is destroyed.
 *
 * Test controls (environment, read at each call):
 *   KILN_FAKE_CUBLASLT_FAIL=<entry point>: that function fails with
 *     KILN_FAKE_CUBLASLT_FAIL_STATUS (a cublasStatus_t, default
 *     CUBLAS_STATUS_INTERNAL_ERROR);
 *   KILN_FAKE_CUBLASLT_NO_ALGO=1: the heuristic succeeds with no result;
 *   KILN_FAKE_CUBLASLT_VERSION: what cublasLtGetVersion reports. */
#include <cublasLt.h>
#include <cuda.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h" /* f16/bf16 conversions (inline) */

/* Exported by the stand-in driver for libraries like this one. */
int kiln_fake_cuda_range_live(const void *p, size_t n);

#define FAKE_VERSION 130100
#define FAKE_ALGO_MAGIC 0x6b696c6e6c74ull /* "kilnlt" */
/* The workspace the stand-in's algorithms ask for when they may. */
#define FAKE_WORKSPACE_WANT ((size_t)1 << 20)

typedef enum { FAKE_HANDLE = 1, FAKE_DESC, FAKE_LAYOUT, FAKE_PREF, FAKE_KINDS } fake_kind;

typedef struct fake_obj {
  fake_kind kind;
  struct fake_obj *next;
} fake_obj;

struct cublasLtContext {
  fake_obj obj;
};

typedef struct fake_desc {
  fake_obj obj;
  int32_t compute, scale, pointer_mode, transa, transb, transc;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type;
  int64_t bias_batch_stride;
} fake_desc;

typedef struct fake_layout {
  fake_obj obj;
  uint32_t type;
  int32_t order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
} fake_layout;

typedef struct fake_pref {
  fake_obj obj;
  uint32_t search;
  uint64_t max_workspace;
  uint32_t align[4]; /* A, B, C, D */
} fake_pref;

/* What an algorithm records (in cublasLtMatmulAlgo_t's 64 bytes) about the
 * problem it was chosen for. */
typedef struct fake_algo {
  uint64_t magic;
  int32_t compute, transa, transb;
  uint32_t epilogue;
  uint32_t types[4];     /* A, B, C, D */
  uint32_t align[5];     /* A, B, C, D, bias */
  uint32_t workspace_kb; /* the workspace it needs, in KiB */
} fake_algo;
_Static_assert(sizeof(fake_algo) <= sizeof(cublasLtMatmulAlgo_t), "fake_algo too large");

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_obj *fake_objects;
/* Set by a queued matmul that touched memory it must not; returned by every
 * later call (the destroys aside) until taken. */
static _Atomic int fake_sticky = CUBLAS_STATUS_SUCCESS;
static _Atomic unsigned long long fake_pending, fake_matmuls_run;

static void fake_say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fake libcublasLt: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

/* A refusal the real library would also make (or should): said on stderr,
 * so a failing test shows why. */
static cublasStatus_t fake_refuse(cublasStatus_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fake libcublasLt: refused (%d): ", (int)rc);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return rc;
}

static long fake_env(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

/* Every entry point but the destroys starts here. */
static cublasStatus_t fake_enter(const char *name) {
  int sticky = atomic_load(&fake_sticky);
  if (sticky != CUBLAS_STATUS_SUCCESS) return (cublasStatus_t)sticky;
  const char *target = getenv("KILN_FAKE_CUBLASLT_FAIL");
  if (target && strcmp(target, name) == 0)
    return (cublasStatus_t)fake_env("KILN_FAKE_CUBLASLT_FAIL_STATUS", CUBLAS_STATUS_INTERNAL_ERROR);
  return CUBLAS_STATUS_SUCCESS;
}

#define FAKE_ENTER()                                  \
  do {                                                \
    cublasStatus_t fake_rc_ = fake_enter(__func__);   \
    if (fake_rc_ != CUBLAS_STATUS_SUCCESS) return fake_rc_; \
  } while (0)

/* ---- objects ---- */

static cublasStatus_t fake_new(fake_kind kind, size_t size, void **out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  fake_obj *o = calloc(1, size);
  if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
  o->kind = kind;
  pthread_mutex_lock(&fake_lock);
  o->next = fake_objects;
  fake_objects = o;
  pthread_mutex_unlock(&fake_lock);
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

/* p, if it is a live object of that kind (checked before any access). */
static void *fake_find(const void *p, fake_kind kind) {
  pthread_mutex_lock(&fake_lock);
  fake_obj *o = fake_objects;
  while (o && (o != p || o->kind != kind)) o = o->next;
  pthread_mutex_unlock(&fake_lock);
  return o;
}

static cublasStatus_t fake_destroy(void *p, fake_kind kind) {
  pthread_mutex_lock(&fake_lock);
  fake_obj **link = &fake_objects;
  while (*link && (*link != p || (*link)->kind != kind)) link = &(*link)->next;
  fake_obj *o = *link;
  if (o) *link = o->next;
  pthread_mutex_unlock(&fake_lock);
  if (!o) return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "destroying %p: not a live object", p);
  free(o);
  return CUBLAS_STATUS_SUCCESS;
}

/* An attribute's value is exactly its documented size. */
static cublasStatus_t fake_set(void *field, size_t field_size, const void *buf, size_t size,
                               const char *what) {
  if (!buf || size != field_size)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %zu bytes given, it takes %zu", what,
                       size, field_size);
  memcpy(field, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}
#define FAKE_SET(field, name) fake_set(&(field), sizeof(field), buf, size, name)

/* ---- the library ---- */

size_t cublasLtGetVersion(void) { return (size_t)fake_env("KILN_FAKE_CUBLASLT_VERSION", FAKE_VERSION); }

const char *cublasLtGetStatusName(cublasStatus_t rc) {
  switch (rc) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "<unrecognized>";
  }
}

const char *cublasLtGetStatusString(cublasStatus_t rc) {
  switch (rc) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    default: return "an error (stand-in library)";
  }
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  FAKE_ENTER();
  return fake_new(FAKE_HANDLE, sizeof(struct cublasLtContext), (void **)handle);
}

static void fake_free_captured(const void *handle);

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  fake_free_captured(handle);
  return fake_destroy(handle, FAKE_HANDLE);
}

/* ---- descriptors ---- */

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  FAKE_ENTER();
  fake_desc *d;
  cublasStatus_t rc = fake_new(FAKE_DESC, sizeof *d, (void **)&d);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  d->compute = compute;
  d->scale = scale;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  *out = (cublasLtMatmulDesc_t)d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return fake_destroy(desc, FAKE_DESC);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size) {
  FAKE_ENTER();
  fake_desc *d = fake_find(desc, FAKE_DESC);
  if (!d) return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor %p is not live", desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return FAKE_SET(d->compute, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return FAKE_SET(d->scale, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return FAKE_SET(d->pointer_mode, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA: return FAKE_SET(d->transa, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return FAKE_SET(d->transb, "TRANSB");
    case CUBLASLT_MATMUL_DESC_TRANSC: return FAKE_SET(d->transc, "TRANSC");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return FAKE_SET(d->epilogue, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return FAKE_SET(d->bias, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return FAKE_SET(d->bias_type, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return FAKE_SET(d->bias_batch_stride, "BIAS_BATCH_STRIDE");
    default:
      return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul attribute %d is not modelled",
                         (int)attr);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  FAKE_ENTER();
  fake_layout *l;
  cublasStatus_t rc = fake_new(FAKE_LAYOUT, sizeof *l, (void **)&l);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  l->type = (uint32_t)type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  l->batch = 1;
  *out = (cublasLtMatrixLayout_t)l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return fake_destroy(layout, FAKE_LAYOUT);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
  FAKE_ENTER();
  fake_layout *l = fake_find(layout, FAKE_LAYOUT);
  if (!l) return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "layout %p is not live", layout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return FAKE_SET(l->type, "TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return FAKE_SET(l->order, "ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return FAKE_SET(l->rows, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return FAKE_SET(l->cols, "COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return FAKE_SET(l->ld, "LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return FAKE_SET(l->batch, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return FAKE_SET(l->stride, "STRIDED_BATCH_OFFSET");
    default:
      return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "layout attribute %d is not modelled",
                         (int)attr);
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
  FAKE_ENTER();
  fake_pref *p;
  cublasStatus_t rc = fake_new(FAKE_PREF, sizeof *p, (void **)&p);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  for (int i = 0; i < 4; i++) p->align[i] = 256; /* the documented default */
  *out = (cublasLtMatmulPreference_t)p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return fake_destroy(pref, FAKE_PREF);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
  FAKE_ENTER();
  fake_pref *p = fake_find(pref, FAKE_PREF);
  if (!p) return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "preference %p is not live", pref);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return FAKE_SET(p->search, "SEARCH_MODE");
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return FAKE_SET(p->max_workspace, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return FAKE_SET(p->align[0], "ALIGNMENT_A");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return FAKE_SET(p->align[1], "ALIGNMENT_B");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return FAKE_SET(p->align[2], "ALIGNMENT_C");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return FAKE_SET(p->align[3], "ALIGNMENT_D");
    default:
      return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "preference attribute %d is not modelled",
                         (int)attr);
  }
}

/* ---- the problem ---- */

static size_t fake_type_size(uint32_t t) {
  switch (t) {
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    default: return 0;
  }
}

/* cuBLASLt's table for the types used here: (compute, scale, A=B, C=D). */
static bool fake_types_supported(const fake_desc *d, uint32_t a, uint32_t b, uint32_t c) {
  if (a != b) return false;
  switch (d->compute) {
    case CUBLAS_COMPUTE_32F:
      if (d->scale != CUDA_R_32F) return false;
      if (a == CUDA_R_16F || a == CUDA_R_16BF) return c == a || c == CUDA_R_32F;
      return a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return d->scale == CUDA_R_32F && a == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
      return d->scale == CUDA_R_64F && a == CUDA_R_64F && c == CUDA_R_64F;
    default:
      return false;
  }
}

static bool fake_epilogue_has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS;
}

/* One matrix's own consistency. */
static cublasStatus_t fake_check_layout(const fake_layout *l, const char *name) {
  if (!fake_type_size(l->type))
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: data type %u", name, l->type);
  if (l->order != CUBLASLT_ORDER_COL)
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: order %d is not modelled", name, l->order);
  if (l->rows > INT32_MAX || l->cols > INT32_MAX || l->rows == 0 || l->cols == 0)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: %llu x %llu", name,
                       (unsigned long long)l->rows, (unsigned long long)l->cols);
  if (l->ld < 1 || (uint64_t)l->ld < l->rows)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: ld %lld < rows %llu", name,
                       (long long)l->ld, (unsigned long long)l->rows);
  if (l->batch < 1 || l->stride < 0)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: batch %d, stride %lld", name, l->batch,
                       (long long)l->stride);
  return CUBLAS_STATUS_SUCCESS;
}

/* The whole problem D = op(A) op(B) (+ C), as the heuristic and the matmul
 * both check it. */
static cublasStatus_t fake_check_problem(const fake_desc *d, const fake_layout *a,
                                         const fake_layout *b, const fake_layout *c,
                                         const fake_layout *dd) {
  const char *names[4] = {"A", "B", "C", "D"};
  const fake_layout *l[4] = {a, b, c, dd};
  for (int i = 0; i < 4; i++) {
    cublasStatus_t rc = fake_check_layout(l[i], names[i]);
    if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  }
  if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST || d->transc != CUBLAS_OP_N)
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d, transc %d", d->pointer_mode,
                       d->transc);
  bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  if ((!ta && d->transa != CUBLAS_OP_N) || (!tb && d->transb != CUBLAS_OP_N))
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "transa %d, transb %d", d->transa, d->transb);
  uint64_t m = dd->rows, n = dd->cols, k = ta ? a->rows : a->cols;
  if ((ta ? a->cols : a->rows) != m || (tb ? b->cols : b->rows) != k || (tb ? b->rows : b->cols) != n)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE,
                       "op(A) %llux%llu . op(B) %llux%llu does not make D %llux%llu",
                       (unsigned long long)(ta ? a->cols : a->rows), (unsigned long long)k,
                       (unsigned long long)(tb ? b->cols : b->rows),
                       (unsigned long long)(tb ? b->rows : b->cols), (unsigned long long)m,
                       (unsigned long long)n);
  if (c->rows != m || c->cols != n || c->type != dd->type)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "C and D differ");
  if (a->batch != dd->batch || b->batch != dd->batch || c->batch != dd->batch)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts %d, %d, %d, %d differ", a->batch,
                       b->batch, c->batch, dd->batch);
  if (dd->batch > 1 && dd->stride < dd->ld * (int64_t)dd->cols)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "D's batches overlap (stride %lld < %lld)",
                       (long long)dd->stride, (long long)(dd->ld * (int64_t)dd->cols));
  if (!fake_types_supported(d, a->type, b->type, dd->type))
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "compute %d scale %d with A %u B %u D %u",
                       d->compute, d->scale, a->type, b->type, dd->type);
  switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS: break;
    default: return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u", d->epilogue);
  }
  if (fake_epilogue_has_bias(d->epilogue) && d->bias_type != -1 && (uint32_t)d->bias_type != dd->type)
    return fake_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %d with D type %u", d->bias_type,
                       dd->type);
  return CUBLAS_STATUS_SUCCESS;
}

/* The largest power of two (up to 256) dividing p; 256 for NULL. */
static uint32_t fake_alignment(const void *p) {
  uintptr_t u = (uintptr_t)p;
  uint32_t a = 1;
  while (a < 256 && !(u & a)) a <<= 1;
  return u ? a : 256;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t adesc,
                                              cublasLtMatrixLayout_t bdesc,
                                              cublasLtMatrixLayout_t cdesc,
                                              cublasLtMatrixLayout_t ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned) {
  FAKE_ENTER();
  fake_desc *d = fake_find(desc, FAKE_DESC);
  fake_layout *a = fake_find(adesc, FAKE_LAYOUT), *b = fake_find(bdesc, FAKE_LAYOUT);
  fake_layout *c = fake_find(cdesc, FAKE_LAYOUT), *dd = fake_find(ddesc, FAKE_LAYOUT);
  fake_pref *p = fake_find(pref, FAKE_PREF);
  if (!fake_find(handle, FAKE_HANDLE) || !d || !a || !b || !c || !dd || !p || requested <= 0 ||
      !results || !returned)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "heuristic: a handle, descriptor or count");
  cublasStatus_t rc = fake_check_problem(d, a, b, c, dd);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  *returned = 0;
  if (fake_env("KILN_FAKE_CUBLASLT_NO_ALGO", 0)) return CUBLAS_STATUS_SUCCESS;
  fake_algo algo = {.magic = FAKE_ALGO_MAGIC,
                    .compute = d->compute,
                    .transa = d->transa,
                    .transb = d->transb,
                    .epilogue = d->epilogue,
                    .types = {a->type, b->type, c->type, dd->type},
                    .align = {p->align[0], p->align[1], p->align[2], p->align[3],
                              fake_alignment(d->bias)}};
  size_t workspace = p->max_workspace >= FAKE_WORKSPACE_WANT ? FAKE_WORKSPACE_WANT : 0;
  algo.workspace_kb = (uint32_t)(workspace >> 10);
  memset(&results[0], 0, sizeof results[0]);
  memcpy(&results[0].algo, &algo, sizeof algo);
  results[0].workspaceSize = workspace;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- running a matmul ---- */

/* Everything a queued matmul needs, captured when it is queued (the
 * descriptors may change or go before it runs). */
typedef struct fake_job {
  fake_desc desc;
  fake_layout l[4]; /* A, B, C, D */
  const void *ptr[4];
  void *workspace;
  size_t workspace_bytes;
  double alpha, beta;
  const void *handle;
  struct fake_job *next_captured; /* captured: in fake_captured, run at every launch */
  bool captured;
} fake_job;

/* Matmuls recorded into graphs, freed with their handle (under fake_lock). */
static fake_job *fake_captured;

static void fake_free_captured(const void *handle) {
  pthread_mutex_lock(&fake_lock);
  for (fake_job **link = &fake_captured; *link;) {
    fake_job *j = *link;
    if (j->handle != handle) {
      link = &j->next_captured;
      continue;
    }
    *link = j->next_captured;
    free(j);
  }
  pthread_mutex_unlock(&fake_lock);
}

static size_t fake_extent(const fake_layout *l) {
  uint64_t elements = (uint64_t)(l->batch - 1) * (uint64_t)l->stride +
                      (l->cols - 1) * (uint64_t)l->ld + l->rows;
  return (size_t)elements * fake_type_size(l->type);
}

static double fake_load(uint32_t type, const void *base, int64_t i) {
  switch (type) {
    case CUDA_R_16F: return kcore_f16_to_f32(((const uint16_t *)base)[i]);
    case CUDA_R_16BF: return kcore_bf16_to_f32(((const uint16_t *)base)[i]);
    case CUDA_R_32F: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
  }
}

/* v is already in the scale type's precision: one rounding to D's type. */
static void fake_store(uint32_t type, void *base, int64_t i, double v) {
  switch (type) {
    case CUDA_R_16F: ((uint16_t *)base)[i] = kcore_f32_to_f16((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)base)[i] = kcore_f32_to_bf16((float)v); break;
    case CUDA_R_32F: ((float *)base)[i] = (float)v; break;
    default: ((double *)base)[i] = v; break;
  }
}

/* An f32 input as tensor cores read it in TF32 (10 mantissa bits, nearest
 * even). */
static float fake_tf32(float f) {
  uint32_t u = kcore_f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u = (u + 0x0fffu + ((u >> 13) & 1u)) & ~0x1fffu;
  return kcore_bits_f32(u);
}

/* op(X)(row, col) of a batch member, by the layout and transpose. */
static double fake_op(const fake_layout *l, const void *base, int64_t batch, bool trans,
                      int64_t row, int64_t col, int32_t compute) {
  int64_t i = batch * l->stride + (trans ? col + row * l->ld : row + col * l->ld);
  double v = fake_load(l->type, base, i);
  return compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? fake_tf32((float)v) : v;
}

/* One output element: the sum in the compute type, then the epilogue in
 * the scale type. */
static double fake_element(const fake_job *j, int64_t batch, int64_t r, int64_t c) {
  const fake_desc *d = &j->desc;
  bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  int64_t k = (int64_t)(ta ? j->l[0].rows : j->l[0].cols);
  bool f64 = d->compute == CUBLAS_COMPUTE_64F;
  double acc64 = 0;
  float acc32 = 0;
  for (int64_t p = 0; p < k; p++) {
    double x = fake_op(&j->l[0], j->ptr[0], batch, ta, r, p, d->compute);
    double y = fake_op(&j->l[1], j->ptr[1], batch, tb, p, c, d->compute);
    if (f64)
      acc64 += x * y;
    else
      acc32 = fmaf((float)x, (float)y, acc32);
  }
  double v = f64 ? acc64 : acc32;
  v = j->alpha * v;
  if (j->beta != 0) /* C is not read when beta is zero */
    v += j->beta * fake_load(j->l[2].type, j->ptr[2],
                             batch * j->l[2].stride + r + c * j->l[2].ld);
  if (fake_epilogue_has_bias(d->epilogue)) {
    uint32_t bt = d->bias_type == -1 ? j->l[3].type : (uint32_t)d->bias_type;
    v += fake_load(bt, d->bias, batch * d->bias_batch_stride + r);
  }
  if (d->epilogue == CUBLASLT_EPILOGUE_RELU || d->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS)
    v = v > 0 ? v : 0;
  return f64 ? v : (double)(float)v;
}

static bool fake_job_memory_ok(const fake_job *j) {
  const char *names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++) {
    if (i == 2 && j->beta == 0) continue;
    size_t n = fake_extent(&j->l[i]);
    if (!kiln_fake_cuda_range_live(j->ptr[i], n)) {
      fake_say("matrix %s [%p, +%zu bytes) is not in live device memory", names[i], j->ptr[i], n);
      return false;
    }
  }
  const fake_desc *d = &j->desc;
  if (fake_epilogue_has_bias(d->epilogue)) {
    uint32_t bt = d->bias_type == -1 ? j->l[3].type : (uint32_t)d->bias_type;
    size_t n = ((size_t)(j->l[3].batch - 1) * (size_t)d->bias_batch_stride + j->l[3].rows) *
               fake_type_size(bt);
    if (!kiln_fake_cuda_range_live(d->bias, n)) {
      fake_say("bias [%p, +%zu bytes) is not in live device memory", d->bias, n);
      return false;
    }
  }
  if (j->workspace_bytes && !kiln_fake_cuda_range_live(j->workspace, j->workspace_bytes)) {
    fake_say("workspace [%p, +%zu bytes) is not in live device memory", j->workspace,
             j->workspace_bytes);
    return false;
  }
  return true;
}

/* The queued work, run by the stand-in driver in stream order (under its
 * lock: no driver calls here). */
static void CUDA_CB fake_job_run(void *user) {
  fake_job *j = user;
  if (fake_job_memory_ok(j)) {
    /* The algorithm owns its workspace while it runs: clobber it, so that
     * anything else kept there shows up. */
    if (j->workspace_bytes) memset(j->workspace, 0xa5, j->workspace_bytes);
    const fake_layout *dl = &j->l[3];
    for (int64_t batch = 0; batch < dl->batch; batch++)
      for (int64_t c = 0; c < (int64_t)dl->cols; c++)
        for (int64_t r = 0; r < (int64_t)dl->rows; r++)
          fake_store(dl->type, (void *)j->ptr[3], batch * dl->stride + r + c * dl->ld,
                     fake_element(j, batch, r, c));
    atomic_fetch_add(&fake_matmuls_run, 1);
  } else {
    atomic_store(&fake_sticky, CUBLAS_STATUS_EXECUTION_FAILED);
  }
  if (j->captured) return;
  atomic_fetch_sub(&fake_pending, 1);
  free(j);
}

/* The pointers must be as aligned as the algorithm was chosen for. */
static cublasStatus_t fake_check_alignment(const fake_algo *algo, const void *const ptr[4],
                                           const void *bias, bool has_bias) {
  const char *names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++)
    if (fake_alignment(ptr[i]) < algo->align[i])
      return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "%s pointer %p is less than %u-byte aligned",
                         names[i], ptr[i], algo->align[i]);
  if (has_bias && fake_alignment(bias) < algo->align[4])
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE,
                       "bias pointer %p is less aligned than the heuristic's (%u bytes)", bias,
                       algo->align[4]);
  return CUBLAS_STATUS_SUCCESS;
}

/* The algorithm came from the heuristic for this kind of problem. */
static cublasStatus_t fake_check_algo(const fake_algo *algo, const fake_desc *d,
                                      const fake_layout *const l[4]) {
  bool same = algo->magic == FAKE_ALGO_MAGIC && algo->compute == d->compute &&
              algo->transa == d->transa && algo->transb == d->transb &&
              algo->epilogue == d->epilogue;
  for (int i = 0; i < 4; i++) same = same && algo->types[i] == l[i]->type;
  return same ? CUBLAS_STATUS_SUCCESS
              : fake_refuse(CUBLAS_STATUS_INVALID_VALUE,
                            "the algorithm was not chosen for this problem");
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t adesc,
                              const void *B, cublasLtMatrixLayout_t bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t cdesc, void *D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  FAKE_ENTER();
  fake_desc *d = fake_find(desc, FAKE_DESC);
  const fake_layout *l[4] = {fake_find(adesc, FAKE_LAYOUT), fake_find(bdesc, FAKE_LAYOUT),
                             fake_find(cdesc, FAKE_LAYOUT), fake_find(ddesc, FAKE_LAYOUT)};
  if (!fake_find(handle, FAKE_HANDLE) || !d || !l[0] || !l[1] || !l[2] || !l[3] || !alpha ||
      !beta || !algo || !A || !B || !C || !D)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: a handle, descriptor or pointer");
  cublasStatus_t rc = fake_check_problem(d, l[0], l[1], l[2], l[3]);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  fake_algo fa;
  memcpy(&fa, algo, sizeof fa);
  if ((rc = fake_check_algo(&fa, d, l)) != CUBLAS_STATUS_SUCCESS) return rc;
  bool has_bias = fake_epilogue_has_bias(d->epilogue);
  if (has_bias && !d->bias)
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "the epilogue needs a bias pointer");
  const void *ptr[4] = {A, B, C, D};
  if ((rc = fake_check_alignment(&fa, ptr, d->bias, has_bias)) != CUBLAS_STATUS_SUCCESS) return rc;
  size_t need = (size_t)fa.workspace_kb << 10;
  if (workspace_bytes < need || (need && !workspace))
    return fake_refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace %p of %zu bytes, the algorithm needs %zu",
                       workspace, workspace_bytes, need);
  fake_job *j = calloc(1, sizeof *j);
  if (!j) return CUBLAS_STATUS_ALLOC_FAILED;
  j->desc = *d;
  for (int i = 0; i < 4; i++) {
    j->l[i] = *l[i];
    j->ptr[i] = ptr[i];
  }
  j->workspace = workspace;
  j->workspace_bytes = need;
  bool f64 = d->scale == CUDA_R_64F;
  j->alpha = f64 ? *(const double *)alpha : *(const float *)alpha;
  j->beta = f64 ? *(const double *)beta : *(const float *)beta;
  j->handle = handle;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cuStreamIsCapturing((CUstream)stream, &capture) != CUDA_SUCCESS)
    capture = CU_STREAM_CAPTURE_STATUS_NONE; /* the launch below reports the stream */
  j->captured = capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (!j->captured) atomic_fetch_add(&fake_pending, 1);
  CUresult cr = cuLaunchHostFunc((CUstream)stream, fake_job_run, j);
  if (cr == CUDA_SUCCESS && j->captured) {
    pthread_mutex_lock(&fake_lock);
    j->next_captured = fake_captured;
    fake_captured = j;
    pthread_mutex_unlock(&fake_lock);
  }
  if (cr != CUDA_SUCCESS) {
    if (!j->captured) atomic_fetch_sub(&fake_pending, 1);
    free(j);
    return fake_refuse(CUBLAS_STATUS_EXECUTION_FAILED, "queueing on stream %p: CUresult %d",
                       (void *)stream, (int)cr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- for the tests ---- */

/* Handles, descriptors and preferences not destroyed, and matmuls queued
 * but not run; listed on stderr when `verbose`. */
int kiln_fake_cublaslt_live_objects(int verbose) {
  int count[FAKE_KINDS] = {0};
  pthread_mutex_lock(&fake_lock);
  for (fake_obj *o = fake_objects; o; o = o->next) count[o->kind]++;
  pthread_mutex_unlock(&fake_lock);
  int pending = (int)atomic_load(&fake_pending);
  int n = pending;
  for (int k = 0; k < FAKE_KINDS; k++) n += count[k];
  if (verbose && n)
    fake_say("live: %d handles, %d matmul descriptors, %d layouts, %d preferences, %d matmuls queued",
             count[FAKE_HANDLE], count[FAKE_DESC], count[FAKE_LAYOUT], count[FAKE_PREF], pending);
  return n;
}

/* The sticky error (0 if none), cleared. */
int kiln_fake_cublaslt_take_error(void) { return atomic_exchange(&fake_sticky, 0); }

unsigned long long kiln_fake_cublaslt_matmuls_run(void) { return atomic_load(&fake_matmuls_run); }
