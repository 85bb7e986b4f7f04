/* Arrays: one immutable buffer on one device, shared by reference count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "device/device.h"

static void kdev_buffer_free(kiln_array *a) {
  if (a->buf.foreign_free) {
    /* Kernels still reading the memory are queued work: the producer may
     * reuse it only after they finish. The backend releases only its own
     * state of the buffer (its ready marker), with no memory to free. */
    if (a->device->ops->release_foreign) {
      a->device->ops->release_foreign(a->device, &a->buf);
      memset(&a->buf, 0, sizeof a->buf);
      return;
    }
    kdev_buffer own = a->buf;
    if (a->device->ops->synchronize(a->device) != KILN_OK)
      kcore_log(KILN_LOG_ERROR, KILN_LOG_ERROR, "releasing a DLPack import on %s: %s",
                a->device->info.name, kiln_last_error());
    own.ptr = 0;
    own.nbytes = 0;
    a->device->ops->release(a->device, &own);
    a->buf.foreign_free(a->buf.foreign);
    memset(&a->buf, 0, sizeof a->buf);
    return;
  }
  if (a->buf.nbytes == 0 && a->buf.ptr == 0 && !a->buf.ready) return;
  a->device->ops->release(a->device, &a->buf);
  atomic_fetch_sub(&a->device->bytes_in_use, (uint64_t)a->buf.nbytes);
  memset(&a->buf, 0, sizeof a->buf);
}

kiln_status kdev_array_alloc(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                             const int64_t *shape, kiln_array **out) {
  int64_t elements;
  size_t nbytes;
  kiln_status st = kcore_shape_bytes(op, dtype, rank, shape, &elements, &nbytes);
  if (st) return st;
  kiln_array *a = calloc(1, sizeof *a);
  if (!a) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  if (nbytes > 0 && (st = dev->ops->alloc(dev, nbytes, &a->buf)) != KILN_OK) {
    free(a);
    char t[160];
    return kcore_fail_wrap(st, "%s: allocating %s", op,
                           kcore_format_type(dtype, rank, shape, t, sizeof t));
  }
  atomic_fetch_add(&dev->bytes_in_use, (uint64_t)nbytes);
  kdev_array_init(a, dev, dtype, rank, shape, elements);
  *out = a;
  return KILN_OK;
}

void kdev_array_init(kiln_array *a, kiln_device *dev, kiln_dtype dtype, int rank,
                     const int64_t *shape, int64_t elements) {
  atomic_init(&a->refs, 1);
  atomic_init(&a->deleted, false);
  a->dtype = dtype;
  a->rank = rank;
  if (rank > 0) memcpy(a->shape, shape, (size_t)rank * sizeof *shape);
  a->size = elements;
  a->device = dev;
  atomic_fetch_add(&dev->backend->live_arrays, 1);
}

kiln_status kdev_array_wrap(const char *op, kiln_device *dev, kiln_dtype dtype, int rank,
                            const int64_t *shape, uintptr_t ptr, void (*foreign_free)(void *),
                            void *foreign, kiln_array **out) {
  int64_t elements;
  size_t nbytes;
  kiln_status st = kcore_shape_bytes(op, dtype, rank, shape, &elements, &nbytes);
  kiln_array *a = st ? NULL : calloc(1, sizeof *a);
  if (!a) {
    foreign_free(foreign);
    return st ? st : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  kdev_array_init(a, dev, dtype, rank, shape, elements);
  a->buf.ptr = ptr;
  a->buf.nbytes = nbytes;
  a->buf.foreign_free = foreign_free;
  a->buf.foreign = foreign;
  snprintf(a->buf.origin, sizeof a->buf.origin, "%s", op);
  *out = a;
  return KILN_OK;
}

kiln_status kdev_array_check_donation(const char *op, const kiln_array *a, int index) {
  if (!a || !a->buf.foreign_free) return KILN_OK;
  char t[200];
  kiln_array_describe(a, t, sizeof t);
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: argument %d (%s) is donated but views another "
                    "framework's memory (a zero-copy DLPack import); kiln cannot take it over",
                    op, index, t);
}

kiln_status kdev_check_host_data(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                                 const void *data, size_t nbytes) {
  size_t need;
  kiln_status st = kcore_shape_bytes(op, dtype, rank, shape, NULL, &need);
  if (st) return st;
  char t[160];
  if (nbytes != need)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %zu bytes given, %s needs %zu", op, nbytes,
                      kcore_format_type(dtype, rank, shape, t, sizeof t), need);
  if (!data && need > 0) return kcore_fail(KILN_ERR_ARGUMENT, "%s: data is NULL", op);
  return KILN_OK;
}

kiln_status kdev_array_check_any(const char *op, const kiln_array *a) {
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "%s: array is NULL", op);
  if (kiln_array_is_deleted(a)) {
    char t[200];
    kiln_array_describe(a, t, sizeof t);
    return kcore_fail(KILN_ERR_DELETED, "%s: array %s has been deleted (donated or deleted)", op,
                      t);
  }
  return KILN_OK;
}

kiln_status kdev_array_check(const char *op, const kiln_array *a) {
  kiln_status st = kdev_array_check_any(op, a);
  if (st || !a->shards) return st;
  char t[200];
  kiln_array_describe(a, t, sizeof t);
  return kcore_fail(KILN_ERR_WRONG_DEVICE,
                    "%s: array %s is sharded over %lld devices; this takes an array on one device "
                    "(kiln_array_shard gives one shard, kiln_device_put gathers it)",
                    op, t, (long long)a->shards->count);
}

kiln_status kiln_array_from_host(kiln_device *dev, kiln_dtype dtype, int rank, const int64_t *shape,
                                 const void *data, size_t nbytes, kiln_array **out) {
  static const char op[] = "kiln_array_from_host";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  if (!dev) return kcore_fail(KILN_ERR_ARGUMENT, "%s: device is NULL", op);
  kiln_status st = kdev_check_host_data(op, dtype, rank, shape, data, nbytes);
  if (st) return st;
  size_t need = nbytes;
  char t[160];
  kiln_array *a;
  if ((st = kdev_array_alloc(op, dev, dtype, rank, shape, &a))) return st;
  if (need > 0 && (st = dev->ops->upload(dev, &a->buf, data, need, KDEV_COPY_STAGED))) {
    kiln_array_release(a);
    return kcore_fail_wrap(st, "%s: copying %s to %s", op,
                           kcore_format_type(dtype, rank, shape, t, sizeof t), dev->info.name);
  }
  *out = a;
  return KILN_OK;
}

kiln_status kiln_array_to_host(const kiln_array *a, void *dst, size_t nbytes) {
  static const char op[] = "kiln_array_to_host";
  kiln_status st = kdev_array_check_any(op, a);
  if (st) return st;
  size_t need = kiln_array_nbytes(a);
  if (nbytes != need) {
    char t[200];
    kiln_array_describe(a, t, sizeof t);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: destination holds %zu bytes, %s has %zu", op, nbytes,
                      t, need);
  }
  if (need == 0) return KILN_OK;
  if (!dst) return kcore_fail(KILN_ERR_ARGUMENT, "%s: dst is NULL", op);
  if (a->shards) return kdev_shards_to_host(a, dst);
  return a->device->ops->download(a->device, &a->buf, dst, need, KDEV_COPY_STAGED);
}

kiln_status kiln_array_block_until_ready(const kiln_array *a) {
  kiln_status st = kdev_array_check_any("kiln_array_block_until_ready", a);
  for (int64_t i = 0; !st && a->shards && i < a->shards->count; i++)
    st = kiln_array_block_until_ready(a->shards->arrays[i]);
  if (st || a->buf.nbytes == 0) return st;
  return a->device->ops->wait(a->device, &a->buf);
}

kiln_status kiln_device_put(kiln_array *a, kiln_device *dev, kiln_array **out) {
  static const char op[] = "kiln_device_put";
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is NULL", op);
  *out = NULL;
  kiln_status st = kdev_array_check_any(op, a);
  if (st) return st;
  if (!dev) return kcore_fail(KILN_ERR_ARGUMENT, "%s: device is NULL", op);
  if (dev->ctx != a->device->ctx)
    return kcore_fail(KILN_ERR_WRONG_DEVICE,
                      "%s: %s belongs to another context than the array's device %s", op,
                      dev->info.name, a->device->info.name);
  if (dev == a->device && !a->shards) {
    kiln_array_retain(a);
    *out = a;
    return KILN_OK;
  }
  kiln_array *b;
  if ((st = kdev_array_alloc(op, dev, a->dtype, a->rank, a->shape, &b))) return st;
  kdev_block whole;
  kdev_block_whole(a->rank, a->shape, &whole);
  if (b->buf.nbytes > 0 && (st = kdev_gather(a, b, &whole))) {
    kiln_array_release(b);
    return kcore_fail_wrap(st, "%s: %s -> %s", op, a->device->info.name, dev->info.name);
  }
  *out = b;
  return KILN_OK;
}

void kiln_array_retain(kiln_array *a) {
  if (a) atomic_fetch_add(&a->refs, 1);
}

void kiln_array_release(kiln_array *a) {
  if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
  if (!atomic_load(&a->deleted)) kdev_buffer_free(a);
  kdev_shards_free(a->shards);
  atomic_fetch_sub(&a->device->backend->live_arrays, 1);
  free(a);
}

kiln_status kiln_array_delete(kiln_array *a) {
  if (!a) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_array_delete: array is NULL");
  if (atomic_exchange(&a->deleted, true))
    return KILN_OK; /* deleting twice is harmless, as in JAX */
  kdev_buffer_free(a);
  for (int64_t i = 0; a->shards && i < a->shards->count; i++)
    (void)kiln_array_delete(a->shards->arrays[i]);
  return KILN_OK;
}

int kiln_array_is_deleted(const kiln_array *a) {
  if (!a) return 0;
  if (atomic_load(&((kiln_array *)a)->deleted)) return 1;
  for (int64_t i = 0; a->shards && i < a->shards->count; i++)
    if (kiln_array_is_deleted(a->shards->arrays[i])) return 1;
  return 0;
}

int64_t kiln_array_shard_count(const kiln_array *a) {
  return !a ? 0 : a->shards ? a->shards->count : 1;
}

int kiln_array_is_sharded(const kiln_array *a) { return a && a->shards; }

kiln_status kiln_array_shard(const kiln_array *a, int64_t i, kiln_array **shard, int64_t *start,
                             int64_t *stop) {
  static const char op[] = "kiln_array_shard";
  if (shard) *shard = NULL;
  kiln_status st = kdev_array_check_any(op, a);
  if (st) return st;
  if (i < 0 || i >= kiln_array_shard_count(a))
    return kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: shard %lld is outside [0, %lld)", op,
                      (long long)i, (long long)kiln_array_shard_count(a));
  for (int d = 0; d < a->rank; d++) {
    if (start) start[d] = a->shards ? a->shards->start[i][d] : 0;
    if (stop) stop[d] = a->shards ? a->shards->stop[i][d] : a->shape[d];
  }
  if (shard) {
    *shard = a->shards ? a->shards->arrays[i] : (kiln_array *)a;
    kiln_array_retain(*shard);
  }
  return KILN_OK;
}

kiln_dtype kiln_array_dtype(const kiln_array *a) { return a ? a->dtype : KILN_INVALID_DTYPE; }
int kiln_array_rank(const kiln_array *a) { return a ? a->rank : 0; }
const int64_t *kiln_array_shape(const kiln_array *a) { return a ? a->shape : NULL; }
int64_t kiln_array_size(const kiln_array *a) { return a ? a->size : 0; }
size_t kiln_array_nbytes(const kiln_array *a) {
  return a ? (size_t)a->size * kiln_dtype_size(a->dtype) : 0;
}
kiln_device *kiln_array_device(const kiln_array *a) {
  if (!a) kcore_fail(KILN_ERR_ARGUMENT, "kiln_array_device: the array is NULL");
  return a ? a->device : NULL;
}

void kiln_array_describe(const kiln_array *a, char *buf, size_t cap) {
  if (!buf || cap == 0) return;
  if (!a) {
    snprintf(buf, cap, "(null)");
    return;
  }
  char t[160];
  kcore_format_type(a->dtype, a->rank, a->shape, t, sizeof t);
  if (!a->shards) {
    snprintf(buf, cap, "%s{%s}", t, a->device->info.name);
    return;
  }
  /* "f32[8,2]{sharded: cpu:0,cpu:1,...}", cut short with "..." to fit. */
  size_t n = (size_t)snprintf(buf, cap, "%s{sharded: ", t);
  for (int64_t i = 0; i < a->shards->count && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "",
                          a->shards->arrays[i]->device->info.name);
  if (n < cap) snprintf(buf + n, cap - n, "}");
  else if (cap > 5) snprintf(buf + cap - 5, 5, "...}");
}

kiln_status kdev_array_take_buffer(kiln_array *donor, kiln_dtype dtype, int rank,
                                   const int64_t *shape, kiln_array **out) {
  static const char op[] = "donation";
  kiln_status st = kdev_array_check(op, donor);
  if (st) return st;
  int64_t elements;
  size_t nbytes;
  if ((st = kcore_shape_bytes(op, dtype, rank, shape, &elements, &nbytes))) return st;
  KCORE_ASSERT(nbytes == kiln_array_nbytes(donor));
  kiln_array *b = calloc(1, sizeof *b);
  if (!b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kdev_array_init(b, donor->device, dtype, rank, shape, elements);
  b->buf = donor->buf;
  memset(&donor->buf, 0, sizeof donor->buf);
  atomic_store(&donor->deleted, true);
  *out = b;
  return KILN_OK;
}
