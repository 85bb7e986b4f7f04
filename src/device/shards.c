/* Sharded arrays at the device level: the list of per-device shards with
 * their blocks, assembling the global value on the host, and the geometry
 * of copying one block of a row-major array into another in contiguous
 * runs (which device_put and resharding build on). What the layout means
 * (meshes, partition specs) is dist's business, kept in `owner`. */
#include <stdlib.h>
#include <string.h>
#include "device/device.h"

void kdev_shards_free(kdev_shards *s) {
  if (!s) return;
  for (int64_t i = 0; s->arrays && i < s->count; i++) kiln_array_release(s->arrays[i]);
  if (s->owner && s->owner_free) s->owner_free(s->owner);
  free(s->arrays);
  free(s->start);
  free(s->stop);
  free(s);
}

kiln_status kdev_array_new_sharded(const char *op, kiln_dtype dtype, int rank,
                                   const int64_t *shape, int64_t count,
                                   kiln_array *const *shards,
                                   const int64_t (*start)[KILN_MAX_RANK],
                                   const int64_t (*stop)[KILN_MAX_RANK], void *owner,
                                   void (*owner_free)(void *owner), kiln_array **out) {
  int64_t elements;
  size_t nbytes;
  kiln_status st = kcore_shape_bytes(op, dtype, rank, shape, &elements, &nbytes);
  if (st) return st;
  KCORE_ASSERT(count >= 1 && shards && shards[0]);
  kiln_array *a = calloc(1, sizeof *a);
  kdev_shards *s = calloc(1, sizeof *s);
  if (s) {
    s->arrays = calloc((size_t)count, sizeof *s->arrays);
    s->start = calloc((size_t)count, sizeof *s->start);
    s->stop = calloc((size_t)count, sizeof *s->stop);
  }
  if (!a || !s || !s->arrays || !s->start || !s->stop) {
    free(a);
    kdev_shards_free(s);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  s->count = count;
  for (int64_t i = 0; i < count; i++) {
    kiln_array_retain(shards[i]);
    s->arrays[i] = shards[i];
    if (rank > 0) {
      memcpy(s->start[i], start[i], (size_t)rank * sizeof start[i][0]);
      memcpy(s->stop[i], stop[i], (size_t)rank * sizeof stop[i][0]);
    }
  }
  s->owner = owner;
  s->owner_free = owner_free;
  kdev_array_init(a, shards[0]->device, dtype, rank, shape, elements);
  a->shards = s;
  *out = a;
  return KILN_OK;
}

void kdev_block_whole(int rank, const int64_t *shape, kdev_block *out) {
  memset(out, 0, sizeof *out);
  for (int d = 0; d < rank; d++) out->stop[d] = shape[d];
}

static bool kdev_block_equal(int rank, const kdev_block *x, const kdev_block *y) {
  for (int d = 0; d < rank; d++)
    if (x->start[d] != y->start[d] || x->stop[d] != y->stop[d]) return false;
  return true;
}

kiln_status kdev_block_runs(int rank, size_t elem_size, const kdev_block *src,
                            const kdev_block *dst, kdev_run_fn fn, void *user, int64_t *runs) {
  int64_t lo[KILN_MAX_RANK], ext[KILN_MAX_RANK], sstride[KILN_MAX_RANK], dstride[KILN_MAX_RANK];
  if (runs) *runs = 0;
  for (int d = 0; d < rank; d++) {
    lo[d] = src->start[d] > dst->start[d] ? src->start[d] : dst->start[d];
    int64_t hi = src->stop[d] < dst->stop[d] ? src->stop[d] : dst->stop[d];
    if (hi <= lo[d]) return KILN_OK;
    ext[d] = hi - lo[d];
  }
  /* Row-major strides of each block, in elements. */
  for (int d = rank - 1, ss = 1, ds = 1; d >= 0; d--) {
    sstride[d] = ss, dstride[d] = ds;
    ss *= src->stop[d] - src->start[d];
    ds *= dst->stop[d] - dst->start[d];
  }
  /* A run spans dimension k (partially) and every later dimension, which
   * the intersection must cover whole in both blocks. */
  int k = rank - 1;
  while (k > 0 && ext[k] == src->stop[k] - src->start[k] && ext[k] == dst->stop[k] - dst->start[k])
    k--;
  int64_t run = 1, outer = 1;
  for (int d = k < 0 ? 0 : k; d < rank; d++) run *= ext[d];
  for (int d = 0; d < k; d++) outer *= ext[d];
  if (runs) *runs = outer;
  if (!fn) return KILN_OK;
  int64_t idx[KILN_MAX_RANK] = {0};
  for (int64_t r = 0; r < outer; r++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < rank; d++) {
      int64_t g = lo[d] + (d < k ? idx[d] : 0);
      so += (g - src->start[d]) * sstride[d];
      dof += (g - dst->start[d]) * dstride[d];
    }
    kiln_status st = fn(user, (size_t)so * elem_size, (size_t)dof * elem_size,
                        (size_t)run * elem_size);
    if (st) return st;
    for (int d = k - 1; d >= 0 && ++idx[d] == ext[d]; d--) idx[d] = 0;
  }
  return KILN_OK;
}

typedef struct kdev_host_copy {
  const char *src;
  char *dst;
} kdev_host_copy;

static kiln_status kdev_host_run(void *user, size_t src_off, size_t dst_off, size_t nbytes) {
  kdev_host_copy *c = user;
  memcpy(c->dst + dst_off, c->src + src_off, nbytes);
  return KILN_OK;
}

void kdev_block_copy_host(int rank, size_t elem_size, const kdev_block *src, const void *src_data,
                          const kdev_block *dst, void *dst_data) {
  kdev_host_copy c = {src_data, dst_data};
  (void)kdev_block_runs(rank, elem_size, src, dst, kdev_host_run, &c, NULL);
}

/* The block shard i holds. */
static void kdev_shard_block(const kiln_array *a, int64_t i, kdev_block *out) {
  memset(out, 0, sizeof *out);
  for (int d = 0; d < a->rank; d++) {
    out->start[d] = a->shards->start[i][d];
    out->stop[d] = a->shards->stop[i][d];
  }
}

kiln_status kdev_shards_to_host(const kiln_array *a, void *dst) {
  const kdev_shards *s = a->shards;
  size_t elem = kiln_dtype_size(a->dtype);
  kdev_block whole, blk, other;
  kdev_block_whole(a->rank, a->shape, &whole);
  void *tmp = NULL;
  size_t tmp_size = 0;
  kiln_status st = KILN_OK;
  for (int64_t i = 0; i < s->count && !st; i++) {
    kiln_array *sh = s->arrays[i];
    size_t nb = kiln_array_nbytes(sh);
    if (nb == 0) continue;
    kdev_shard_block(a, i, &blk);
    bool seen = false; /* a replica of an earlier shard's block */
    for (int64_t j = 0; j < i && !seen; j++) {
      kdev_shard_block(a, j, &other);
      seen = kdev_block_equal(a->rank, &blk, &other);
    }
    if (seen) continue;
    int64_t runs;
    (void)kdev_block_runs(a->rank, elem, &whole, &blk, NULL, NULL, &runs);
    if (runs == 1) { /* contiguous in dst: no staging copy */
      int64_t flat = 0;
      for (int d = 0; d < a->rank; d++) flat = flat * a->shape[d] + blk.start[d];
      st = sh->device->ops->download(sh->device, &sh->buf, (char *)dst + (size_t)flat * elem, nb,
                                     KDEV_COPY_STAGED);
      continue;
    }
    if (nb > tmp_size) {
      free(tmp);
      if (!(tmp = malloc(nb))) {
        st = kcore_fail(KILN_ERR_OUT_OF_MEMORY,
                        "kiln_array_to_host: out of host memory (%zu bytes)", nb);
        break;
      }
      tmp_size = nb;
    }
    if ((st = sh->device->ops->download(sh->device, &sh->buf, tmp, nb, KDEV_COPY_STAGED))) break;
    kdev_block_copy_host(a->rank, elem, &blk, tmp, &whole, dst);
  }
  free(tmp);
  return st;
}

/* ---- filling one device buffer from other shards or from the host ---- */

/* Beyond this many runs per source piece a non-host device goes through
 * host memory: one staged download and upload beat thousands of tiny
 * copies. */
#define KDEV_MAX_DEVICE_RUNS 64

typedef struct kdev_view_copy {
  kiln_array *dst;
  const kiln_array *src;
} kdev_view_copy;

/* One run, device to device, as a copy between views into both buffers;
 * the destination's completion marker carries over to its buffer. */
static kiln_status kdev_view_run(void *user, size_t src_off, size_t dst_off, size_t nbytes) {
  kdev_view_copy *c = user;
  kdev_buffer dv = c->dst->buf, sv = c->src->buf;
  dv.ptr += dst_off, dv.nbytes = nbytes;
  sv.ptr += src_off, sv.nbytes = nbytes;
  kiln_device *dd = c->dst->device;
  kiln_status st = dd->ops->copy(dd, &dv, c->src->device, &sv, nbytes);
  if (!st && !c->dst->buf.ready) c->dst->buf.ready = dv.ready;
  return st;
}

/* A view of `a` as shards: an ordinary array is one shard holding it all. */
static int64_t kdev_piece_count(const kiln_array *a) { return a->shards ? a->shards->count : 1; }

static const kiln_array *kdev_piece(const kiln_array *a, int64_t i, kdev_block *blk) {
  if (!a->shards) {
    kdev_block_whole(a->rank, a->shape, blk);
    return a;
  }
  kdev_shard_block(a, i, blk);
  return a->shards->arrays[i];
}

/* The piece to read block i's data from: i itself unless it replicates an
 * earlier piece (then -1, skipped), or a replica of it on `prefer`. */
static int64_t kdev_pick_piece(const kiln_array *a, int64_t i, const kiln_device *prefer) {
  kdev_block blk, other;
  kdev_piece(a, i, &blk);
  for (int64_t j = 0; j < i; j++) {
    kdev_piece(a, j, &other);
    if (kdev_block_equal(a->rank, &blk, &other)) return -1;
  }
  for (int64_t j = i; j < kdev_piece_count(a); j++) {
    const kiln_array *p = kdev_piece(a, j, &other);
    if (p->device == prefer && kdev_block_equal(a->rank, &blk, &other)) return j;
  }
  return i;
}

static kiln_status kdev_gather_via_host(const kiln_array *src, kiln_array *dst,
                                        const kdev_block *dst_blk) {
  size_t elem = kiln_dtype_size(src->dtype), nb = kiln_array_nbytes(dst);
  char *packed = malloc(nb ? nb : 1), *piece = NULL;
  size_t piece_size = 0;
  kiln_status st = packed ? KILN_OK
                          : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", nb);
  for (int64_t i = 0; i < kdev_piece_count(src) && !st; i++) {
    kdev_block blk;
    int64_t j = kdev_pick_piece(src, i, dst->device), runs;
    if (j < 0) continue;
    const kiln_array *p = kdev_piece(src, j, &blk);
    size_t pnb = kiln_array_nbytes(p);
    (void)kdev_block_runs(src->rank, elem, &blk, dst_blk, NULL, NULL, &runs);
    if (runs == 0 || pnb == 0) continue;
    if (pnb > piece_size) {
      free(piece);
      if (!(piece = malloc(pnb))) {
        st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", pnb);
        break;
      }
      piece_size = pnb;
    }
    if ((st = p->device->ops->download(p->device, &p->buf, piece, pnb, KDEV_COPY_STAGED))) break;
    kdev_block_copy_host(src->rank, elem, &blk, piece, dst_blk, packed);
  }
  if (!st && nb) st = dst->device->ops->upload(dst->device, &dst->buf, packed, nb, KDEV_COPY_STAGED);
  free(packed);
  free(piece);
  return st;
}

kiln_status kdev_gather(const kiln_array *src, kiln_array *dst, const kdev_block *dst_blk) {
  size_t elem = kiln_dtype_size(src->dtype);
  bool host = (dst->device->backend->caps & KDEV_CAP_HOST_MEMORY) != 0;
  int64_t total = 0;
  for (int64_t i = 0; i < kdev_piece_count(src); i++) {
    kdev_block blk;
    int64_t runs;
    if (kdev_pick_piece(src, i, dst->device) < 0) continue;
    kdev_piece(src, i, &blk);
    (void)kdev_block_runs(src->rank, elem, &blk, dst_blk, NULL, NULL, &runs);
    if (!host && runs > KDEV_MAX_DEVICE_RUNS)
      return kdev_gather_via_host(src, dst, dst_blk);
    total += runs;
  }
  for (int64_t i = 0; i < kdev_piece_count(src) && total > 0; i++) {
    kdev_block blk;
    int64_t j = kdev_pick_piece(src, i, dst->device);
    if (j < 0) continue;
    kdev_view_copy c = {dst, kdev_piece(src, j, &blk)};
    kiln_status st = kdev_block_runs(src->rank, elem, &blk, dst_blk, kdev_view_run, &c, NULL);
    if (st) return st;
  }
  return KILN_OK;
}

kiln_status kdev_fill_from_host(kiln_array *dst, const kdev_block *dst_blk, const void *data,
                                const int64_t *shape) {
  size_t nb = kiln_array_nbytes(dst), elem = kiln_dtype_size(dst->dtype);
  if (nb == 0) return KILN_OK;
  kdev_block whole;
  int64_t runs, flat = 0;
  kdev_block_whole(dst->rank, shape, &whole);
  (void)kdev_block_runs(dst->rank, elem, &whole, dst_blk, NULL, NULL, &runs);
  kiln_device *dev = dst->device;
  if (runs == 1) { /* contiguous in the host array: no packing */
    for (int d = 0; d < dst->rank; d++) flat = flat * shape[d] + dst_blk->start[d];
    return dev->ops->upload(dev, &dst->buf, (const char *)data + (size_t)flat * elem, nb,
                            KDEV_COPY_STAGED);
  }
  void *packed = malloc(nb);
  if (!packed) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", nb);
  kdev_block_copy_host(dst->rank, elem, &whole, data, dst_blk, packed);
  kiln_status st = dev->ops->upload(dev, &dst->buf, packed, nb, KDEV_COPY_STAGED);
  free(packed);
  return st;
}
