/* Virtual CPU devices: each a separate memory space as far as the API can
 * tell, with an optional byte limit so that running out of device memory
 * behaves (and is tested) as on a GPU. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"

typedef struct kcpu_device {
  uint64_t limit; /* 0: unlimited */
  _Atomic uint64_t reserved;
} kcpu_device;

static kcpu_device *kcpu_impl(kiln_device *dev) { return dev->impl; }

/* Reserves nbytes against the limit; false when they do not fit. */
static bool kcpu_reserve(kcpu_device *d, uint64_t nbytes) {
  uint64_t cur = atomic_load(&d->reserved);
  do {
    if (d->limit && (nbytes > d->limit || cur > d->limit - nbytes)) return false;
  } while (!atomic_compare_exchange_weak(&d->reserved, &cur, cur + nbytes));
  return true;
}

static kiln_status kcpu_alloc(kiln_device *dev, size_t nbytes, kdev_buffer *out) {
  kcpu_device *d = kcpu_impl(dev);
  uint64_t in_use = atomic_load(&d->reserved);
  if (!kcpu_reserve(d, nbytes))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY,
                      "%s: out of device memory: %zu bytes requested, %llu of %llu in use",
                      dev->info.name, nbytes, (unsigned long long)in_use,
                      (unsigned long long)d->limit);
  size_t rounded = (nbytes + KCPU_ALIGNMENT - 1) / KCPU_ALIGNMENT * KCPU_ALIGNMENT;
  void *p = rounded >= nbytes ? aligned_alloc(KCPU_ALIGNMENT, rounded) : NULL;
  if (!p) {
    atomic_fetch_sub(&d->reserved, nbytes);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory: %zu bytes requested",
                      dev->info.name, nbytes);
  }
  out->ptr = (uintptr_t)p;
  out->nbytes = nbytes;
  out->ready = NULL;
  return KILN_OK;
}

static void kcpu_release(kiln_device *dev, kdev_buffer *buf) {
  free((void *)buf->ptr);
  atomic_fetch_sub(&kcpu_impl(dev)->reserved, buf->nbytes);
}

/* Host memory is host memory: staging does not apply, both modes copy directly. */
static kiln_status kcpu_upload(kiln_device *dev, kdev_buffer *dst, const void *src, size_t nbytes,
                               kdev_copy_mode mode) {
  (void)dev, (void)mode;
  memcpy((void *)dst->ptr, src, nbytes);
  return KILN_OK;
}

static kiln_status kcpu_download(kiln_device *dev, const kdev_buffer *src, void *dst, size_t nbytes,
                                 kdev_copy_mode mode) {
  (void)dev, (void)mode;
  memcpy(dst, (const void *)src->ptr, nbytes);
  return KILN_OK;
}

static kiln_status kcpu_wait(kiln_device *dev, const kdev_buffer *buf) {
  (void)dev, (void)buf;
  return KILN_OK;
}

static kiln_status kcpu_copy(kiln_device *dst_dev, kdev_buffer *dst, kiln_device *src_dev,
                             const kdev_buffer *src, size_t nbytes) {
  (void)dst_dev, (void)src_dev;
  memcpy((void *)dst->ptr, (const void *)src->ptr, nbytes);
  return KILN_OK;
}

static kiln_status kcpu_synchronize(kiln_device *dev) {
  (void)dev;
  return KILN_OK;
}

static const kdev_ops kcpu_ops = {
    .alloc = kcpu_alloc,
    .release = kcpu_release,
    .upload = kcpu_upload,
    .download = kcpu_download,
    .wait = kcpu_wait,
    .copy = kcpu_copy,
    .synchronize = kcpu_synchronize,
};

static void kcpu_backend_close(kdev_backend *b) {
  kcpu_state_free(b->state);
  b->state = NULL;
  for (int i = 0; i < b->num_devices; i++) free(b->devices[i].impl);
  free(b->devices);
  b->devices = NULL;
  b->num_devices = 0;
}

static uint64_t kcpu_host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* The cores this process may run on (its affinity mask, else all online). */
static int kcpu_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

/* Device index of n gets its share of the cores for its own worker pool
 * (the first cores % n devices one more), at least one: n devices never run
 * more threads than max(cores, n). */
static void kcpu_fill_info(kiln_device *dev, int index, int n, int cores, uint64_t limit) {
  kiln_device_info *info = &dev->info;
  info->index = index;
  info->platform = KILN_BACKEND_CPU;
  snprintf(info->name, sizeof info->name, "cpu:%d", index);
  int share = cores / n + (index < cores % n);
  info->multiprocessors = share > 0 ? share : 1;
  info->total_memory = limit ? limit : kcpu_host_memory();
}

kiln_status kcpu_backend_open(const kcore_config *config, kdev_backend *b) {
  int n = config->opts.num_cpu_devices;
  uint64_t limit = config->opts.cpu_device_memory;
  int cores = kcpu_cores();
  kiln_device *devs = calloc((size_t)n, sizeof *devs);
  if (!devs) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
  for (int i = 0; i < n; i++) {
    kcpu_device *d = calloc(1, sizeof *d);
    if (!d) {
      b->devices = devs;
      b->num_devices = i;
      kcpu_backend_close(b);
      return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_ctx_new: out of host memory");
    }
    d->limit = limit;
    devs[i].impl = d;
    devs[i].ops = &kcpu_ops;
    kcpu_fill_info(&devs[i], i, n, cores, limit);
  }
  b->devices = devs;
  b->num_devices = n;
  b->kind = KILN_BACKEND_CPU;
  b->close = kcpu_backend_close;
  b->exec = &kcpu_exec_ops;
  kcpu_state *state = NULL;
  kiln_status st = kcpu_state_new(b, &state);
  b->state = state;
  if (st) kcpu_backend_close(b);
  return st;
}
