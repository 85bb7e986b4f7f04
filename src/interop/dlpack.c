/* DLPack 1.x export (zero-copy, read-only) and import of kiln arrays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "interop/interop.h"

/* What an exported tensor owns: kiln's reference and the shape/strides the
 * DLTensor points at. manager_ctx points here; the deleter frees it. */
typedef struct kinterop_export {
  kiln_array *array;
  int64_t shape[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK];
  union {
    DLManagedTensorVersioned versioned;
    DLManagedTensor unversioned;
  } tensor;
} kinterop_export;

static const struct {
  kiln_dtype dtype;
  DLDataType dl;
} kinterop_dtypes[] = {
    {KILN_BOOL, {kDLBool, 8, 1}},  {KILN_I8, {kDLInt, 8, 1}},      {KILN_I16, {kDLInt, 16, 1}},
    {KILN_I32, {kDLInt, 32, 1}},   {KILN_I64, {kDLInt, 64, 1}},    {KILN_U8, {kDLUInt, 8, 1}},
    {KILN_U16, {kDLUInt, 16, 1}},  {KILN_U32, {kDLUInt, 32, 1}},   {KILN_U64, {kDLUInt, 64, 1}},
    {KILN_F16, {kDLFloat, 16, 1}}, {KILN_BF16, {kDLBfloat, 16, 1}}, {KILN_F32, {kDLFloat, 32, 1}},
    {KILN_F64, {kDLFloat, 64, 1}},
};
#define KINTEROP_NUM_DTYPES (sizeof kinterop_dtypes / sizeof kinterop_dtypes[0])

static DLDataType kinterop_dl_dtype(kiln_dtype d) {
  for (size_t i = 0; i < KINTEROP_NUM_DTYPES; i++)
    if (kinterop_dtypes[i].dtype == d) return kinterop_dtypes[i].dl;
  return (DLDataType){kDLOpaqueHandle, 0, 0};
}

static kiln_dtype kinterop_kiln_dtype(DLDataType dl) {
  for (size_t i = 0; i < KINTEROP_NUM_DTYPES; i++) {
    DLDataType k = kinterop_dtypes[i].dl;
    if (k.code == dl.code && k.bits == dl.bits && k.lanes == dl.lanes)
      return kinterop_dtypes[i].dtype;
  }
  return KILN_INVALID_DTYPE;
}

/* Fills the DLTensor of a new export of `a` after the stream handshake. */
static kiln_status kinterop_export_new(const char *op, kiln_array *a, int64_t stream,
                                       kinterop_export **out, DLTensor **tensor_slot,
                                       int versioned) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "%s: array is NULL", op);
  char t[200];
  if (kiln_array_is_deleted(a)) {
    kiln_array_describe(a, t, sizeof t);
    return kcore_fail(KILN_ERR_DELETED, "%s: array %s has been deleted (donated or deleted)", op, t);
  }
  if (kiln_array_is_sharded(a)) { /* a DLTensor is one buffer on one device */
    kiln_array_describe(a, t, sizeof t);
    return kcore_fail(KILN_ERR_WRONG_DEVICE, "%s: array %s is sharded; export one shard "
                      "(kiln_array_shard)", op, t);
  }
  kiln_status st = KILN_OK;
  /* The consumer may use the memory as soon as it has the tensor: its
   * stream (the host on CPU) is ordered after the pending writes;
   * STREAM_NONE leaves ordering to the consumer. */
  if (stream != KILN_DLPACK_STREAM_NONE && (st = kinterop_array_order(a, stream))) {
    kiln_array_describe(a, t, sizeof t);
    return kcore_fail_wrap(st, "%s: ordering stream %lld after %s's pending writes", op,
                           (long long)stream, t);
  }
  kinterop_export *e = calloc(1, sizeof *e);
  if (!e) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  int rank = kiln_array_rank(a);
  const int64_t *shape = kiln_array_shape(a);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; i--) {
    e->shape[i] = shape[i];
    e->strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  kiln_array_retain(a);
  e->array = a;
  DLTensor *dl = versioned ? &e->tensor.versioned.dl_tensor : &e->tensor.unversioned.dl_tensor;
  dl->data = (void *)kinterop_array_address(a);
  dl->device.device_type = (DLDeviceType)kinterop_device_type(kiln_array_device(a));
  dl->device.device_id = kinterop_device_ordinal(kiln_array_device(a));
  dl->ndim = rank;
  dl->dtype = kinterop_dl_dtype(kiln_array_dtype(a));
  dl->shape = e->shape;
  dl->strides = e->strides;
  dl->byte_offset = 0;
  *tensor_slot = dl;
  *out = e;
  return KILN_OK;
}

static void kinterop_delete_versioned(DLManagedTensorVersioned *self) {
  if (!self) return;
  kinterop_export *e = self->manager_ctx;
  kiln_array_release(e->array);
  free(e);
}

static void kinterop_delete_unversioned(DLManagedTensor *self) {
  if (!self) return;
  kinterop_export *e = self->manager_ctx;
  kiln_array_release(e->array);
  free(e);
}

kiln_status kiln_array_to_dlpack(kiln_array *a, int64_t stream, DLManagedTensorVersioned **out) {
  kinterop_export *e;
  DLTensor *dl;
  if (out) *out = NULL;
  kiln_status st = kinterop_export_new("kiln_array_to_dlpack", a, stream, out ? &e : NULL, &dl, 1);
  if (st) return st;
  DLManagedTensorVersioned *m = &e->tensor.versioned;
  m->version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->manager_ctx = e;
  m->deleter = kinterop_delete_versioned;
  m->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  *out = m;
  return KILN_OK;
}

kiln_status kiln_array_to_dlpack_unversioned(kiln_array *a, int64_t stream,
                                             DLManagedTensor **out) {
  kinterop_export *e;
  DLTensor *dl;
  if (out) *out = NULL;
  kiln_status st =
      kinterop_export_new("kiln_array_to_dlpack_unversioned", a, stream, out ? &e : NULL, &dl, 0);
  if (st) return st;
  DLManagedTensor *m = &e->tensor.unversioned;
  m->manager_ctx = e;
  m->deleter = kinterop_delete_unversioned;
  *out = m;
  return KILN_OK;
}

static const char *kinterop_device_name(DLDeviceType t) {
  switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLROCM: return "kDLROCM";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLOneAPI: return "kDLOneAPI";
    default: return "an unknown device type";
  }
}

/* Copies a strided tensor element by element into compact row-major `dst`. */
static void kinterop_gather(const DLTensor *t, size_t esize, int64_t count, char *dst) {
  const char *base = (const char *)t->data + t->byte_offset;
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t n = 0; n < count; n++) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    memcpy(dst + (size_t)n * esize, base + off * (int64_t)esize, esize);
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}

/* Whether kiln's device `dev` can use memory of the tensor's device as it
 * is: host memory (pinned and managed included) for devices whose memory
 * the host addresses; otherwise memory of the device's own type and ordinal
 * (managed memory included). */
static bool kinterop_same_memory(kiln_device *dev, const DLDevice *d) {
  if (kinterop_host_memory(dev))
    return d->device_type == kDLCPU || d->device_type == kDLCUDAHost ||
           d->device_type == kDLCUDAManaged;
  return ((int)d->device_type == kinterop_device_type(dev) ||
          d->device_type == kDLCUDAManaged) &&
         d->device_id == kinterop_device_ordinal(dev);
}

/* Imports `t`. A compact, element-aligned tensor in memory dev uses directly
 * becomes an array over that memory (unless KILN_DLPACK_COPY), which calls
 * release(managed) when it is released, and *kept is set; anything else is
 * copied, and release stays the caller's business. */
static kiln_status kinterop_import(const char *op, kiln_device *dev, const DLTensor *t,
                                   unsigned flags, void (*release)(void *), void *managed,
                                   bool *kept, kiln_array **out) {
  *kept = false;
  if (!dev) return kcore_fail(KILN_ERR_ARGUMENT, "%s: device is NULL", op);
  if (t->ndim < 0 || t->ndim > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: rank %d (kiln holds ranks 0..%d)", op, (int)t->ndim,
                      KILN_MAX_RANK);
  kiln_dtype dtype = kinterop_kiln_dtype(t->dtype);
  if (dtype == KILN_INVALID_DTYPE)
    return kcore_fail(KILN_ERR_DTYPE, "%s: DLPack dtype code %u, %u bits, %u lanes has no kiln dtype",
                      op, t->dtype.code, t->dtype.bits, t->dtype.lanes);
  DLDeviceType dt = t->device.device_type;
  kiln_device_info info;
  kiln_status st = kiln_device_info_get(dev, &info);
  if (st) return st;
  bool same = kinterop_same_memory(dev, &t->device);
  if (!same && dt != kDLCPU && dt != kDLCUDAHost && dt != kDLCUDAManaged)
    return kcore_fail(KILN_ERR_WRONG_DEVICE,
                      "%s: a tensor on %s (device %d) is neither in %s's memory nor readable "
                      "from the host",
                      op, kinterop_device_name(dt), (int)t->device.device_id,
                      info.name);
  int64_t count = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return kcore_fail(KILN_ERR_SHAPE, "%s: dimension %d is %lld", op, d, (long long)t->shape[d]);
    count *= t->shape[d];
  }
  size_t esize = kiln_dtype_size(dtype), nbytes = (size_t)count * esize;
  int compact = t->strides == NULL || count == 0;
  if (!compact) {
    int64_t expect = 1;
    compact = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (t->shape[d] != 1 && t->strides[d] != expect) compact = 0;
      expect *= t->shape[d];
    }
  }
  uintptr_t addr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  if (same && compact && count > 0 && addr % esize == 0 && !(flags & KILN_DLPACK_COPY)) {
    *kept = true;
    return kinterop_wrap(op, dev, dtype, t->ndim, t->shape, addr, release, managed, out);
  }
  if (dt == kDLCUDA)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "%s: a %s tensor on kDLCUDA device %d with %s cannot be used in place, and "
                      "kiln copies only host-readable tensors",
                      op, kiln_dtype_name(dtype), (int)t->device.device_id,
                      compact ? "a byte offset that breaks element alignment" : "non-compact strides");
  if (compact)
    return kiln_array_from_host(dev, dtype, t->ndim, t->shape, count ? (const char *)addr : NULL,
                                nbytes, out);
  if (!(flags & KILN_DLPACK_ALLOW_COPY)) {
    char layout[256];
    size_t n = 0;
    n += (size_t)snprintf(layout + n, sizeof layout - n, "strides (");
    for (int d = 0; d < t->ndim && n < sizeof layout; d++)
      n += (size_t)snprintf(layout + n, sizeof layout - n, "%s%lld", d ? ", " : "",
                            (long long)t->strides[d]);
    if (n < sizeof layout) snprintf(layout + n, sizeof layout - n, ")");
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "%s: non-compact layout %s of a %s tensor; pass KILN_DLPACK_ALLOW_COPY to "
                      "copy it",
                      op, layout, kiln_dtype_name(dtype));
  }
  char *tmp = malloc(nbytes);
  if (!tmp) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kinterop_gather(t, esize, count, tmp);
  st = kiln_array_from_host(dev, dtype, t->ndim, t->shape, tmp, nbytes, out);
  free(tmp);
  return st;
}

static void kinterop_release_versioned(void *managed) {
  DLManagedTensorVersioned *t = managed;
  if (t->deleter) t->deleter(t);
}

static void kinterop_release_unversioned(void *managed) {
  DLManagedTensor *t = managed;
  if (t->deleter) t->deleter(t);
}

kiln_status kiln_array_from_dlpack(kiln_device *dev, DLManagedTensorVersioned *t, unsigned flags,
                                   kiln_array **out) {
  static const char op[] = "kiln_array_from_dlpack";
  if (!out) {
    if (t) kinterop_release_versioned(t);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  }
  *out = NULL;
  if (!t) return kcore_fail(KILN_ERR_ARGUMENT, "%s: tensor is NULL", op);
  kiln_status st;
  bool kept = false;
  if (t->version.major != DLPACK_MAJOR_VERSION)
    st = kcore_fail(KILN_ERR_UNIMPLEMENTED, "%s: DLPack version %u.%u (kiln reads %d.x)", op,
                    t->version.major, t->version.minor, DLPACK_MAJOR_VERSION);
  else
    st = kinterop_import(op, dev, &t->dl_tensor, flags, kinterop_release_versioned, t, &kept, out);
  if (!kept) kinterop_release_versioned(t);
  return st;
}

kiln_status kiln_array_from_dlpack_unversioned(kiln_device *dev, DLManagedTensor *t,
                                               unsigned flags, kiln_array **out) {
  static const char op[] = "kiln_array_from_dlpack_unversioned";
  if (!out) {
    if (t) kinterop_release_unversioned(t);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  }
  *out = NULL;
  if (!t) return kcore_fail(KILN_ERR_ARGUMENT, "%s: tensor is NULL", op);
  bool kept = false;
  kiln_status st =
      kinterop_import(op, dev, &t->dl_tensor, flags, kinterop_release_unversioned, t, &kept, out);
  if (!kept) kinterop_release_unversioned(t);
  return st;
}

kiln_status kiln_device_dlpack_stream(const kiln_device *dev, int64_t *stream) {
  if (!dev || !stream)
    return kcore_fail(KILN_ERR_ARGUMENT, "kiln_device_dlpack_stream: device or stream is NULL");
  *stream = kinterop_device_stream(dev);
  return KILN_OK;
}
