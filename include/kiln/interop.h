/* Exchanging arrays with other frameworks through DLPack 1.x.
 *
 * The DLPack declarations below follow the DLPack specification (ABI 1.1):
 * struct layouts, enum values and flag bits are those of the standard, so a
 * pointer produced here may be handed to any DLPack consumer (NumPy, JAX,
 * PyTorch, CuPy). They are skipped when the reference dlpack.h has already
 * been included (its guard), so both headers can live in one unit. */
#ifndef KILN_INTEROP_H
#define KILN_INTEROP_H

#include <stdint.h>
#include "kiln/array.h"
#include "kiln/device.h"
#include "kiln/status.h"
#include "kiln/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 1

typedef struct DLPackVersion {
  uint32_t major; /* ABI-breaking changes */
  uint32_t minor; /* compatible additions */
} DLPackVersion;

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3, /* pinned host memory, readable from the CPU */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17
} DLDeviceType;

typedef struct DLDevice {
  DLDeviceType device_type; /* an int32 in the ABI */
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6
} DLDataTypeCode;

typedef struct DLDataType {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;   /* bits per lane */
  uint16_t lanes; /* 1 for every kiln dtype */
} DLDataType;

typedef struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* The pre-1.0 capsule ("dltensor"): no version, no flags. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* The 1.x capsule ("dltensor_versioned"). */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif /* DLPACK_DLPACK_H_ */

/* DLPack's stream conventions (the Python array API's `stream` argument):
 * KILN_DLPACK_STREAM_NONE asks for no synchronisation at all (the consumer
 * orders the access itself); any other value names the consumer's stream:
 * on CUDA a CUstream as an integer, the array API's 1 and 2 being the
 * driver's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD handles (0 is the NULL
 * stream); on CPU the value is ignored. */
#define KILN_DLPACK_STREAM_NONE INT64_C(-1)

/* Flags for kiln_array_from_dlpack. */
typedef enum kiln_dlpack_flag {
  /* A layout kiln cannot hold as it is (non-compact strides, a byte offset
   * that breaks alignment) may be copied into a new compact array; without
   * this flag it is refused with KILN_ERR_UNIMPLEMENTED naming the layout. */
  KILN_DLPACK_ALLOW_COPY = 1,
  /* Always copy (the array API's copy=True), even where kiln could use the
   * producer's memory in place. */
  KILN_DLPACK_COPY = 2
} kiln_dlpack_flag;

/* Exports `a` (retained until the consumer calls the deleter; the kiln
 * reference the caller holds may be released at once). The tensor is
 * zero-copy and marked read-only: kiln arrays are immutable and shared.
 * Pending writes to `a` are made visible to `stream` first: on CUDA the
 * consumer's stream is made to wait on a's ready event (no host wait, no
 * device-wide sync), on CPU the host waits for them; nothing is ordered
 * with KILN_DLPACK_STREAM_NONE. Strides are given explicitly (compact
 * row-major). KILN_ERR_DELETED for a deleted array. */
kiln_status kiln_array_to_dlpack(kiln_array *a, int64_t stream, DLManagedTensorVersioned **out);
/* The same as a pre-1.0 DLManagedTensor, for consumers that do not accept
 * the versioned struct (which cannot carry the read-only flag: the consumer
 * must not write through it). */
kiln_status kiln_array_to_dlpack_unversioned(kiln_array *a, int64_t stream,
                                             DLManagedTensor **out);

/* Imports a producer's tensor onto `dev`. kiln takes ownership of `t`: its
 * deleter is called exactly once, on success and on failure.
 * Zero-copy: a compact, element-aligned tensor in memory `dev` uses
 * directly (host memory -- kDLCPU, kDLCUDAHost, kDLCUDAManaged -- for a CPU
 * device; kDLCUDA or kDLCUDAManaged memory of the same GPU for a CUDA
 * device) becomes an array over the producer's memory, and the deleter runs
 * when that array is released, once kiln's queued work on it is done (on
 * CUDA without a host wait: the deleter then runs on a kiln thread, at a
 * later release, wait or synchronize on the device, or kiln_ctx_free), so
 * the producer's data stays alive while kiln holds it. kiln never writes
 * it: such an array cannot be donated. On CUDA the producer must have made
 * the data ready on kiln_device_dlpack_stream's stream (DLPack's
 * __dlpack__(stream=...) handshake).
 * Copied otherwise (and with KILN_DLPACK_COPY), the deleter running as soon
 * as the copy is made: host-readable tensors in another layout (strided
 * ones with KILN_DLPACK_ALLOW_COPY), and host tensors onto a GPU. Every
 * kiln dtype with lanes == 1; a major version other than 1 is refused (the
 * layout may differ). */
kiln_status kiln_array_from_dlpack(kiln_device *dev, DLManagedTensorVersioned *t, unsigned flags,
                                   kiln_array **out);
kiln_status kiln_array_from_dlpack_unversioned(kiln_device *dev, DLManagedTensor *t,
                                               unsigned flags, kiln_array **out);

/* The stream a DLPack producer is asked to make its data ready on before
 * kiln_array_from_dlpack onto `dev` (the `stream` of the Python array API's
 * __dlpack__): the device's compute stream, a CUstream as an integer, on
 * CUDA; 0 on CPU, where no stream applies (pass None in Python). */
kiln_status kiln_device_dlpack_stream(const kiln_device *dev, int64_t *stream);

/* A function from IR text (kir's printed form, jaxpr style: what a
 * framework's frontend produces from its own program, e.g. kiln.jit of a JAX
 * function). The text is parsed and verified now; each trace of the function
 * copies its equations into the caller's program, so it jits, transforms and
 * nests like any kiln_func. Its argument tree's leaves must match the
 * program's invars in order, dtype and shape; the result is the tuple of its
 * outputs. Constvars are refused: constants are passed as inputs. `name`
 * (NULL: "ir_func") names the function in errors. Free with kiln_func_free. */
kiln_status kiln_func_from_ir(const char *text, const char *name, kiln_func **out);

#ifdef __cplusplus
}
#endif
#endif
