/* kiln_prefetch: flax.jax_utils.prefetch_to_device over kiln's devices.
 *
 * One producer thread per prefetcher calls the user's iterator, checks each
 * batch against the first, and uploads every leaf's shards to the devices
 * through their ops (on CUDA: the device's pinned staging buffers and copy
 * stream, each buffer's `ready` an event). The finished batches wait in a
 * ring of `size` slots; the consumer takes them in order.
 *
 * A batch is published only once its copies are done (ops->wait in the
 * producer): the consumer may donate or delete the arrays the moment it has
 * them, which moves their buffers, so the producer cannot look at their
 * events afterwards. The wait costs little: a staged upload returns once its
 * data sits in the pinned buffers, with at most the last two chunks still
 * moving, and meanwhile the consumer computes on the batches already in the
 * ring. So a slot is refilled only after its copies completed, and the
 * consumer never waits on the host for a copy. */
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "data/data.h"
#include "device/device.h"

enum { KDATA_PREFETCH_DEFAULT_SIZE = 2 };

/* What the producer hands over: a batch, the end, or an error. */
typedef struct kdata_slot {
  kiln_tree *batch; /* NULL at the end or on error */
  kiln_status st;
  char *msg; /* the error's message, carried across threads */
} kdata_slot;

/* The first batch's leaves, which every later batch must match. */
typedef struct kdata_layout {
  kiln_treedef *def;
  kiln_path *paths;
  size_t n;
  kiln_host_data *leaf; /* dtype, rank and shape of each leaf (no data) */
} kdata_layout;

struct kiln_prefetch {
  kiln_batch_fn next;
  void *user;
  int size, n_devices;
  kiln_device **devices;
  kdata_layout first;

  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t changed; /* a slot was filled or emptied, or stop was set */
  kdata_slot *ring;
  int head, count; /* the oldest filled slot; how many are filled */
  bool stop;       /* set by kiln_prefetch_free */
  bool ended;      /* the consumer has taken the end or an error */
};

static const char op[] = "kiln_prefetch";

static void kdata_layout_free(kdata_layout *l) {
  kiln_treedef_free(l->def);
  kiln_paths_free(l->paths, l->n);
  free(l->leaf);
  memset(l, 0, sizeof *l);
}

static const char *kdata_path(const kdata_layout *l, size_t i, char *buf, size_t cap) {
  kiln_path_str(&l->paths[i], buf, cap);
  if (!buf[0]) snprintf(buf, cap, "the root");
  return buf;
}

/* Flattens a host batch into its layout (data pointers kept in leaf[i]),
 * checking that every leaf is host data whose leading dimension splits
 * evenly over n_devices. */
static kiln_status kdata_flatten_batch(const kiln_tree *t, int64_t index, int n_devices,
                                       kdata_layout *out) {
  memset(out, 0, sizeof *out);
  kiln_leaf *leaves = NULL;
  kiln_status st = kiln_tree_flatten(t, NULL, NULL, &leaves, &out->n, &out->def);
  if (st) return kcore_fail_wrap(st, "%s: batch %lld", op, (long long)index);
  size_t n_paths = 0;
  if ((st = kiln_tree_leaf_paths(t, &out->paths, &n_paths))) goto fail;
  KCORE_ASSERT(n_paths == out->n);
  out->leaf = calloc(out->n ? out->n : 1, sizeof *out->leaf);
  if (!out->leaf) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: batch %lld: out of host memory", op, (long long)index);
    goto fail;
  }
  char path[256];
  for (size_t i = 0; i < out->n; i++) {
    const kiln_host_data *d = leaves[i].kind == KILN_LEAF_PTR ? leaves[i].u.ptr : NULL;
    if (!d || !d->data) {
      st = kcore_fail(KILN_ERR_TREE, "%s: batch %lld: leaf %s is not a pointer to kiln_host_data "
                      "with data", op, (long long)index, kdata_path(out, i, path, sizeof path));
      goto fail;
    }
    char ty[160];
    int64_t elements;
    size_t bytes;
    if ((st = kcore_shape_bytes(op, d->dtype, d->rank, d->shape, &elements, &bytes))) {
      st = kcore_fail_wrap(st, "%s: batch %lld: leaf %s", op, (long long)index,
                           kdata_path(out, i, path, sizeof path));
      goto fail;
    }
    kcore_format_type(d->dtype, d->rank, d->shape, ty, sizeof ty);
    if (bytes != d->nbytes) {
      st = kcore_fail(KILN_ERR_SHAPE, "%s: batch %lld: leaf %s is %s (%zu bytes) but holds %zu "
                      "bytes", op, (long long)index, kdata_path(out, i, path, sizeof path), ty,
                      bytes, d->nbytes);
      goto fail;
    }
    if (d->rank < 1 || d->shape[0] % n_devices != 0) {
      st = kcore_fail(KILN_ERR_SHAPE, "%s: batch %lld: leaf %s is %s, whose leading dimension "
                      "does not split over %d devices", op, (long long)index,
                      kdata_path(out, i, path, sizeof path), ty, n_devices);
      goto fail;
    }
    out->leaf[i] = *d;
  }
  kiln_leaves_free(leaves, out->n);
  return KILN_OK;
fail:
  kiln_leaves_free(leaves, out->n);
  kdata_layout_free(out);
  return st;
}

/* KILN_OK when b has the first batch's structure, dtypes and shapes. */
static kiln_status kdata_check_batch(const kdata_layout *first, const kdata_layout *b,
                                     int64_t index) {
  if (!kiln_treedef_equal(first->def, b->def)) {
    char diff[256];
    kiln_treedef_diff(first->def, b->def, diff, sizeof diff);
    return kcore_fail(KILN_ERR_TREE, "%s: batch %lld's structure differs from batch 0's: %s", op,
                      (long long)index, diff);
  }
  for (size_t i = 0; i < b->n; i++) {
    const kiln_host_data *x = &first->leaf[i], *y = &b->leaf[i];
    bool same = x->dtype == y->dtype && x->rank == y->rank;
    for (int k = 0; same && k < x->rank; k++) same = x->shape[k] == y->shape[k];
    if (same) continue;
    char path[256], tx[160], ty[160];
    kcore_format_type(x->dtype, x->rank, x->shape, tx, sizeof tx);
    kcore_format_type(y->dtype, y->rank, y->shape, ty, sizeof ty);
    return kcore_fail(KILN_ERR_SHAPE, "%s: batch %lld: leaf %s is %s, batch 0's is %s", op,
                      (long long)index, kdata_path(b, i, path, sizeof path), ty, tx);
  }
  return KILN_OK;
}

/* Allocates and uploads device d's shard of every leaf (arrays[i]). */
static kiln_status kdata_upload_shard(const kiln_prefetch *pf, const kdata_layout *b, int d,
                                      int64_t index, kiln_leaf *arrays) {
  kiln_device *dev = pf->devices[d];
  char path[256];
  for (size_t i = 0; i < b->n; i++) {
    const kiln_host_data *h = &b->leaf[i];
    int64_t shape[KILN_MAX_RANK];
    memcpy(shape, h->shape, sizeof shape);
    shape[0] /= pf->n_devices;
    size_t bytes = h->nbytes / (size_t)pf->n_devices;
    kiln_array *a;
    kiln_status st = kdev_array_alloc(op, dev, h->dtype, h->rank, shape, &a);
    if (!st) {
      arrays[i].kind = KILN_LEAF_ARRAY;
      arrays[i].u.array = a;
      st = dev->ops->upload(dev, &a->buf, (const char *)h->data + (size_t)d * bytes, bytes,
                            KDEV_COPY_STAGED);
    }
    if (st)
      return kcore_fail_wrap(st, "%s: batch %lld: leaf %s to device %d", op, (long long)index,
                             kdata_path(b, i, path, sizeof path), d);
  }
  return KILN_OK;
}

/* Uploads a checked batch: every device's copies are queued before any is
 * waited for, so the devices' copy engines run together. */
static kiln_status kdata_upload_batch(const kiln_prefetch *pf, const kdata_layout *b,
                                      int64_t index, kiln_tree **out) {
  size_t n = b->n, total = n * (size_t)pf->n_devices;
  kiln_leaf *arrays = calloc(total ? total : 1, sizeof *arrays);
  kiln_tree **trees = calloc((size_t)pf->n_devices, sizeof *trees);
  kiln_status st = KILN_OK;
  if (!arrays || !trees)
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: batch %lld: out of host memory", op, (long long)index);
  for (int d = 0; !st && d < pf->n_devices; d++)
    st = kdata_upload_shard(pf, b, d, index, arrays + (size_t)d * n);
  for (size_t k = 0; !st && k < total; k++) {
    kiln_array *a = arrays[k].u.array;
    if ((st = a->device->ops->wait(a->device, &a->buf)))
      st = kcore_fail_wrap(st, "%s: batch %lld: waiting for its copy to device %d", op,
                           (long long)index, (int)(k / (n ? n : 1)));
  }
  for (int d = 0; !st && d < pf->n_devices; d++)
    st = kiln_tree_unflatten(b->def, arrays + (size_t)d * n, n, &trees[d]);
  if (st && trees)
    for (int d = 0; d < pf->n_devices; d++) kiln_tree_free(trees[d]);
  /* The list takes the trees over, and frees them itself on failure. */
  if (!st && !(*out = kiln_tree_list((size_t)pf->n_devices, trees)))
    st = kcore_fail_wrap(KILN_ERR_OUT_OF_MEMORY, "%s: batch %lld", op, (long long)index);
  if (arrays)
    for (size_t k = 0; k < total; k++) kiln_array_release(arrays[k].u.array);
  free(arrays);
  free(trees);
  return st;
}

/* One step of the producer: the next batch on the devices, the end
 * (*out NULL) or an error. */
static kiln_status kdata_produce(kiln_prefetch *pf, int64_t index, kiln_tree **out) {
  *out = NULL;
  kiln_tree *host = NULL;
  kiln_status st = pf->next(pf->user, &host);
  if (st) return kcore_fail_wrap(st, "%s: batch %lld: the iterator failed", op, (long long)index);
  if (!host) return KILN_OK;
  kdata_layout b;
  st = kdata_flatten_batch(host, index, pf->n_devices, &b);
  if (!st && index > 0) st = kdata_check_batch(&pf->first, &b, index);
  if (!st) st = kdata_upload_batch(pf, &b, index, out);
  kiln_tree_free(host);
  if (!st && index == 0) {
    pf->first = b; /* its data pointers are stale from here on; only types are read */
    return KILN_OK;
  }
  kdata_layout_free(&b);
  return st;
}

static void *kdata_producer(void *arg) {
  kiln_prefetch *pf = arg;
  for (int64_t index = 0;; index++) {
    pthread_mutex_lock(&pf->lock);
    while (!pf->stop && pf->count == pf->size) pthread_cond_wait(&pf->changed, &pf->lock);
    bool stop = pf->stop;
    pthread_mutex_unlock(&pf->lock);
    if (stop) break;

    kdata_slot slot = {0};
    slot.st = kdata_produce(pf, index, &slot.batch);
    if (slot.st) slot.msg = strdup(kiln_last_error());

    pthread_mutex_lock(&pf->lock);
    pf->ring[(pf->head + pf->count) % pf->size] = slot;
    pf->count++;
    pthread_cond_broadcast(&pf->changed);
    pthread_mutex_unlock(&pf->lock);
    if (!slot.batch) break; /* the end or an error ends the stream */
  }
  return NULL;
}

static kiln_status kdata_pick_devices(kiln_ctx *ctx, kiln_device *const *devices, int n_devices,
                                      kiln_device ***out, int *n_out) {
  int n = devices ? n_devices : kiln_device_count(ctx);
  if (n < 1) return kcore_fail(KILN_ERR_ARGUMENT, "%s: %d devices", op, n);
  kiln_device **devs = calloc((size_t)n, sizeof *devs);
  if (!devs) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int i = 0; i < n; i++) {
    kiln_status st = KILN_OK;
    if (!devices) st = kiln_device_get(ctx, i, &devs[i]);
    else if (!(devs[i] = devices[i])) st = kcore_fail(KILN_ERR_ARGUMENT, "%s: devices[%d] is NULL", op, i);
    else if (kiln_device_ctx(devs[i]) != ctx)
      st = kcore_fail(KILN_ERR_WRONG_DEVICE, "%s: devices[%d] belongs to another context", op, i);
    if (st) {
      free(devs);
      return st;
    }
  }
  *out = devs;
  *n_out = n;
  return KILN_OK;
}

kiln_status kiln_prefetch_new(kiln_ctx *ctx, kiln_batch_fn next, void *user, int size,
                              kiln_device *const *devices, int n_devices, kiln_prefetch **out) {
  if (!ctx || !next || !out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: ctx, next or out is NULL", op);
  if (size < 0) return kcore_fail(KILN_ERR_ARGUMENT, "%s: size %d is negative", op, size);
  kiln_prefetch *pf = calloc(1, sizeof *pf);
  if (!pf) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  pf->next = next;
  pf->user = user;
  pf->size = size ? size : KDATA_PREFETCH_DEFAULT_SIZE;
  kiln_status st = kdata_pick_devices(ctx, devices, n_devices, &pf->devices, &pf->n_devices);
  if (st) {
    free(pf);
    return st;
  }
  pf->ring = calloc((size_t)pf->size, sizeof *pf->ring);
  if (!pf->ring) {
    free(pf->devices);
    free(pf);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  pthread_mutex_init(&pf->lock, NULL);
  pthread_cond_init(&pf->changed, NULL);
  int rc = pthread_create(&pf->thread, NULL, kdata_producer, pf);
  if (rc) {
    pthread_cond_destroy(&pf->changed);
    pthread_mutex_destroy(&pf->lock);
    free(pf->ring);
    free(pf->devices);
    free(pf);
    return kcore_fail(KILN_ERR_INTERNAL, "%s: cannot start the producer thread: %s", op, strerror(rc));
  }
  *out = pf;
  return KILN_OK;
}

kiln_status kiln_prefetch_next(kiln_prefetch *pf, kiln_tree **out) {
  if (!pf || !out) return kcore_fail(KILN_ERR_ARGUMENT, "%s_next: pf or out is NULL", op);
  *out = NULL;
  pthread_mutex_lock(&pf->lock);
  if (pf->ended) {
    pthread_mutex_unlock(&pf->lock);
    return KILN_OK;
  }
  while (pf->count == 0) pthread_cond_wait(&pf->changed, &pf->lock);
  kdata_slot slot = pf->ring[pf->head];
  memset(&pf->ring[pf->head], 0, sizeof slot);
  pf->head = (pf->head + 1) % pf->size;
  pf->count--;
  pf->ended = !slot.batch;
  pthread_cond_broadcast(&pf->changed);
  pthread_mutex_unlock(&pf->lock);
  if (!slot.st) {
    *out = slot.batch;
    return KILN_OK;
  }
  kiln_status st = kcore_fail(slot.st, "%s", slot.msg ? slot.msg : "kiln_prefetch: producer failed");
  free(slot.msg);
  return st;
}

void kiln_prefetch_free(kiln_prefetch *pf) {
  if (!pf) return;
  pthread_mutex_lock(&pf->lock);
  pf->stop = true;
  pthread_cond_broadcast(&pf->changed);
  pthread_mutex_unlock(&pf->lock);
  pthread_join(pf->thread, NULL);
  for (int i = 0; i < pf->count; i++) {
    kdata_slot *s = &pf->ring[(pf->head + i) % pf->size];
    kiln_tree_free(s->batch);
    free(s->msg);
  }
  kdata_layout_free(&pf->first);
  pthread_cond_destroy(&pf->changed);
  pthread_mutex_destroy(&pf->lock);
  free(pf->ring);
  free(pf->devices);
  free(pf);
}
