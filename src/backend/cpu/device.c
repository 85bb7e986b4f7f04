/* Virtual CPU devices: each a separate memory space as far as the API can
 * tell, with an optional byte limit so that running out of device memory
 * behaves (and is tested) as on a GPU.
 *
 * Large blocks are kept for reuse when released: a block the C library
 * would return to the system (it maps blocks of this size afresh) costs a
 * page fault and a zeroed page per 4 KiB when written again, which for a
 * program called in a loop (a new output of the same size every call) cost
 * more than the kernel writing it. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_backend.h"

/* Released blocks of at least KCPU_KEEP_MIN bytes are kept, up to
 * KCPU_KEEP_BLOCKS of them and KCPU_KEEP_BYTES in all, per device. */
#define KCPU_KEEP_MIN ((size_t)1 << 20)
#define KCPU_KEEP_BLOCKS 64
#define KCPU_KEEP_BYTES ((size_t)1 << 30)

typedef struct kcpu_block {
  void *p;     /* NULL: an empty slot */
  size_t size; /* rounded to KCPU_ALIGNMENT */
} kcpu_block;

typedef struct kcpu_device {
  uint64_t limit; /* 0: unlimited */
  _Atomic uint64_t reserved;
  pthread_mutex_t lock; /* keep, kept_bytes, next */
  kcpu_block keep[KCPU_KEEP_BLOCKS];
  size_t kept_bytes;
  int next; /* the slot a full cache gives up next */
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

static size_t kcpu_rounded(size_t nbytes) {
  return (nbytes + KCPU_ALIGNMENT - 1) / KCPU_ALIGNMENT * KCPU_ALIGNMENT;
}

/* A kept block of exactly `size` bytes, taken out of the cache; NULL if none. */
static void *kcpu_reuse(kcpu_device *d, size_t size) {
  void *p = NULL;
  pthread_mutex_lock(&d->lock);
  for (int i = 0; i < KCPU_KEEP_BLOCKS && !p; i++)
    if (d->keep[i].p && d->keep[i].size == size) {
      p = d->keep[i].p;
      d->keep[i].p = NULL;
      d->kept_bytes -= size;
    }
  pthread_mutex_unlock(&d->lock);
  return p;
}

static int kcpu_empty_slot(const kcpu_device *d) {
  for (int i = 0; i < KCPU_KEEP_BLOCKS; i++)
    if (!d->keep[i].p) return i;
  return -1;
}

/* Keeps p (of `size` bytes) for reuse, giving up kept blocks in turn until
 * it fits; frees it when it is larger than the whole cache. */
static void kcpu_keep(kcpu_device *d, void *p, size_t size) {
  void *drop[KCPU_KEEP_BLOCKS];
  int n_drop = 0;
  pthread_mutex_lock(&d->lock);
  if (size <= KCPU_KEEP_BYTES) {
    while (d->kept_bytes + size > KCPU_KEEP_BYTES || kcpu_empty_slot(d) < 0) {
      kcpu_block *b = &d->keep[d->next];
      d->next = (d->next + 1) % KCPU_KEEP_BLOCKS;
      if (!b->p) continue;
      drop[n_drop++] = b->p;
      d->kept_bytes -= b->size;
      b->p = NULL;
    }
    d->keep[kcpu_empty_slot(d)] = (kcpu_block){p, size};
    d->kept_bytes += size;
    p = NULL;
  }
  pthread_mutex_unlock(&d->lock);
  for (int i = 0; i < n_drop; i++) free(drop[i]);
  free(p);
}

static kiln_status kcpu_alloc(kiln_device *dev, size_t nbytes, kdev_buffer *out) {
  kcpu_device *d = kcpu_impl(dev);
  uint64_t in_use = atomic_load(&d->reserved);
  if (!kcpu_reserve(d, nbytes))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY,
                      "%s: out of device memory: %zu bytes requested, %llu of %llu in use",
                      dev->info.name, nbytes, (unsigned long long)in_use,
                      (unsigned long long)d->limit);
  size_t rounded = kcpu_rounded(nbytes);
  void *p = rounded >= KCPU_KEEP_MIN ? kcpu_reuse(d, rounded) : NULL;
  if (!p && rounded >= nbytes) p = aligned_alloc(KCPU_ALIGNMENT, rounded);
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
  kcpu_device *d = kcpu_impl(dev);
  size_t rounded = kcpu_rounded(buf->nbytes);
  /* Memory an abandoned device thread may still touch is never reused. */
  if (kcore_hold_defer_free((void *)buf->ptr, buf->nbytes)) (void)0;
  else if (buf->ptr && rounded >= KCPU_KEEP_MIN) kcpu_keep(d, (void *)buf->ptr, rounded);
  else free((void *)buf->ptr);
  atomic_fetch_sub(&d->reserved, buf->nbytes);
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
  for (int i = 0; i < b->num_devices; i++) {
    kcpu_device *d = b->devices[i].impl;
    for (int k = 0; k < KCPU_KEEP_BLOCKS; k++) free(d->keep[k].p);
    pthread_mutex_destroy(&d->lock);
    free(d);
  }
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

/* The host BLAS runs its GEMMs on its own threads, one pool for the whole
 * process. With n devices each device thread calls it at once, so a pool
 * sized for every core runs n times too many threads, and OpenBLAS's
 * spinning workers (sched_yield) then took more time than its GEMMs on 2
 * devices of 2 cores. The pool is capped to the smallest device share when
 * the BLAS is OpenBLAS (looked up, so any other CBLAS links too) and the
 * user did not size it with OPENBLAS_NUM_THREADS. */
static void kcpu_share_blas_threads(int share) {
  if (getenv("OPENBLAS_NUM_THREADS")) return;
  void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
  if (set && get && get() > share) set(share);
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
    pthread_mutex_init(&d->lock, NULL);
    devs[i].impl = d;
    devs[i].ops = &kcpu_ops;
    kcpu_fill_info(&devs[i], i, n, cores, limit);
  }
  if (n > 1) kcpu_share_blas_threads(cores / n > 0 ? cores / n : 1);
  b->devices = devs;
  b->num_devices = n;
  b->kind = KILN_BACKEND_CPU;
  b->caps = KDEV_CAP_HOST_MEMORY;
  b->device_kind = "CPU";
  b->dlpack_device_type = 1; /* kDLCPU */
  b->close = kcpu_backend_close;
  b->exec = &kcpu_exec_ops;
  b->coll = &kcpu_coll_ops;
  kcpu_state *state = NULL;
  kiln_status st = kcpu_state_new(b, &state);
  b->state = state;
  if (st) kcpu_backend_close(b);
  return st;
}
