/* Copies between pageable host memory and a device, and between devices.
 *
 * Staged copies move the data through the device's two pinned buffers on its
 * copy stream, chunk by chunk: the host copies chunk i into one buffer while
 * the DMA engine moves chunk i-1 out of the other. Direct copies hand the
 * pageable pointer to the driver, which stages it itself; they are the
 * baseline bench/copy_bandwidth measures staging against.
 *
 * Buffers are allocated and freed on the compute stream, so a copy stream
 * first waits for what the compute stream has queued (the allocation, or a
 * kernel still using the buffer) and for the buffer's last write. */
#include <string.h>
#include "backend/cuda/cuda_backend.h"

static size_t kcuda_chunk(size_t nbytes, size_t offset) {
  size_t left = nbytes - offset;
  return left < KCUDA_STAGING_BYTES ? left : KCUDA_STAGING_BYTES;
}

/* ---- host to device ---- */

/* Returns once all of src sits in staging buffers (the caller may reuse it);
 * the last chunks may still be in flight on the copy stream. */
static kiln_status kcuda_upload_staged(kcuda_device *d, CUdeviceptr dst, const char *src,
                                       size_t nbytes) {
  kiln_status st = KILN_OK;
  for (size_t off = 0, i = 0; off < nbytes; off += KCUDA_STAGING_BYTES, i++) {
    int k = (int)(i & 1);
    size_t n = kcuda_chunk(nbytes, off);
    /* Buffer k is free once the DMA that last used it is done. */
    KCUDA_CU(d->drv, d->where, cuEventSynchronize, (d->staging_done[k]), out);
    memcpy(d->staging[k], src + off, n);
    KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, (dst + off, d->staging[k], n, d->copy), out);
    KCUDA_CU(d->drv, d->where, cuEventRecord, (d->staging_done[k], d->copy), out);
  }
out:
  return st;
}

/* Waits for the copy: the driver may still read a pageable source after an
 * asynchronous call returns (on systems where the GPU reads host memory
 * directly), and the caller may reuse src at once. */
static kiln_status kcuda_upload_direct(kcuda_device *d, CUdeviceptr dst, const void *src,
                                       size_t nbytes) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuMemcpyHtoDAsync, (dst, src, nbytes, d->copy), out);
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->copy), out);
out:
  return st;
}

/* After a failure, nothing may still be in flight through the staging
 * buffers when the lock is released; errors here are beside the point. */
static void kcuda_drain_copy_stream(kcuda_device *d) {
  CUresult rc = d->drv->cuStreamSynchronize(d->copy);
  if (rc != CUDA_SUCCESS) kcuda_log_failure(d, rc, "cuStreamSynchronize (after a failed copy)");
}

static kiln_status kcuda_check_size(const char *what, const kcuda_device *d, size_t nbytes,
                                    size_t capacity) {
  if (nbytes <= capacity) return KILN_OK;
  return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s of %zu bytes does not fit a buffer of %zu bytes",
                    d->where, what, nbytes, capacity);
}

static kiln_status kcuda_upload_unranged(kiln_device *dev, kdev_buffer *dst, const void *src,
                                         size_t nbytes, kdev_copy_mode mode) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_check_size("upload", d, nbytes, dst->nbytes);
  if (st || nbytes == 0) return st;
  if ((st = kcuda_enter(d))) return st;
  if ((st = kcuda_trail_settle(d))) {
    kcuda_leave(d);
    return st;
  }
  pthread_mutex_lock(&d->staging_lock);
  CUdeviceptr to = (CUdeviceptr)dst->ptr;
  if ((st = kcuda_after_compute(d, d->copy)) || (st = kcuda_after_ready(d, d->copy, dst))) goto out;
  if (mode == KDEV_COPY_DIRECT) {
    st = kcuda_upload_direct(d, to, src, nbytes);
  } else if ((st = kcuda_upload_staged(d, to, src, nbytes)) == KILN_OK) {
    st = kcuda_mark_ready(d, dst, d->copy);
  }
out:
  if (st) kcuda_drain_copy_stream(d);
  pthread_mutex_unlock(&d->staging_lock);
  kcuda_leave(d);
  /* The driver call's message already names the device. */
  if (st) return kcore_fail_wrap(st, "uploading %zu bytes", nbytes);
  return KILN_OK;
}

/* ---- device to host ---- */

static kiln_status kcuda_fetch_chunk(kcuda_device *d, CUdeviceptr src, size_t nbytes, size_t i) {
  kiln_status st = KILN_OK;
  int k = (int)(i & 1);
  size_t off = i * KCUDA_STAGING_BYTES;
  KCUDA_CU(d->drv, d->where, cuMemcpyDtoHAsync,
           (d->staging[k], src + off, kcuda_chunk(nbytes, off), d->copy), out);
  KCUDA_CU(d->drv, d->where, cuEventRecord, (d->staging_done[k], d->copy), out);
out:
  return st;
}

/* Keeps two chunks in flight: while the host copies chunk i out of its
 * buffer, the DMA engine fills the other with chunk i+1. */
static kiln_status kcuda_download_staged(kcuda_device *d, char *dst, CUdeviceptr src,
                                         size_t nbytes) {
  kiln_status st = KILN_OK;
  size_t chunks = (nbytes + KCUDA_STAGING_BYTES - 1) / KCUDA_STAGING_BYTES;
  for (size_t i = 0; i < chunks && i < 2; i++)
    if ((st = kcuda_fetch_chunk(d, src, nbytes, i))) goto out;
  for (size_t i = 0; i < chunks; i++) {
    int k = (int)(i & 1);
    size_t off = i * KCUDA_STAGING_BYTES;
    KCUDA_CU(d->drv, d->where, cuEventSynchronize, (d->staging_done[k]), out);
    memcpy(dst + off, d->staging[k], kcuda_chunk(nbytes, off));
    if (i + 2 < chunks && (st = kcuda_fetch_chunk(d, src, nbytes, i + 2))) goto out;
  }
out:
  return st;
}

static kiln_status kcuda_download_direct(kcuda_device *d, void *dst, CUdeviceptr src,
                                         size_t nbytes) {
  kiln_status st = KILN_OK;
  KCUDA_CU(d->drv, d->where, cuMemcpyDtoHAsync, (dst, src, nbytes, d->copy), out);
  KCUDA_CU(d->drv, d->where, cuStreamSynchronize, (d->copy), out);
out:
  return st;
}

static kiln_status kcuda_download_unranged(kiln_device *dev, const kdev_buffer *src, void *dst,
                                           size_t nbytes, kdev_copy_mode mode) {
  kcuda_device *d = kcuda_impl(dev);
  kiln_status st = kcuda_check_size("download", d, nbytes, src->nbytes);
  if (st || nbytes == 0) return st;
  if ((st = kcuda_enter(d))) return st;
  if ((st = kcuda_trail_settle(d))) {
    kcuda_leave(d);
    return st;
  }
  pthread_mutex_lock(&d->staging_lock);
  CUdeviceptr from = (CUdeviceptr)src->ptr;
  if ((st = kcuda_after_compute(d, d->copy)) || (st = kcuda_after_ready(d, d->copy, src))) goto out;
  st = mode == KDEV_COPY_DIRECT ? kcuda_download_direct(d, dst, from, nbytes)
                                : kcuda_download_staged(d, dst, from, nbytes);
out:
  if (st) kcuda_drain_copy_stream(d);
  pthread_mutex_unlock(&d->staging_lock);
  st = kcuda_trail_blame(d, st);
  kcuda_leave(d);
  if (st && src->origin[0])
    return kcore_fail_wrap(st, "downloading %zu bytes written by %s", nbytes, src->origin);
  if (st) return kcore_fail_wrap(st, "downloading %zu bytes", nbytes);
  return KILN_OK;
}

/* ---- device to device ---- */

/* On one device the copy runs on the compute stream, which also frees both
 * buffers, so no later free can overtake it. */
static kiln_status kcuda_copy_local(kcuda_device *d, kdev_buffer *dst, const kdev_buffer *src,
                                    size_t nbytes) {
  kiln_status st = kcuda_enter(d);
  if (st) return st;
  if ((st = kcuda_trail_settle(d)) || (st = kcuda_after_ready(d, d->compute, src)) ||
      (st = kcuda_after_ready(d, d->compute, dst)))
    goto out;
  KCUDA_CU(d->drv, d->where, cuMemcpyDtoDAsync,
           ((CUdeviceptr)dst->ptr, (CUdeviceptr)src->ptr, nbytes, d->compute), out);
  st = kcuda_mark_ready(d, dst, d->compute);
out:
  kcuda_leave(d);
  return st;
}

/* Between devices the copy runs on the destination's compute stream (which
 * allocated dst), after the source's compute stream and last write; then the
 * source's compute stream waits for the copy, so that freeing src there
 * cannot overtake the read. */
static kiln_status kcuda_copy_peer(kcuda_device *dd, kdev_buffer *dst, kcuda_device *sd,
                                   const kdev_buffer *src, size_t nbytes) {
  kiln_status st = kcuda_enter(sd);
  if (st) return st;
  if ((st = kcuda_trail_settle(sd))) goto src_out;
  KCUDA_CU(sd->drv, sd->where, cuEventRecord, (sd->handoff, sd->compute), src_out);
src_out:
  kcuda_leave(sd);
  if (st || (st = kcuda_enter(dd))) return st;
  if ((st = kcuda_trail_settle(dd))) goto dst_out;
  KCUDA_CU(dd->drv, dd->where, cuStreamWaitEvent, (dd->compute, sd->handoff, 0), dst_out);
  if ((st = kcuda_after_ready(dd, dd->compute, src)) ||
      (st = kcuda_after_ready(dd, dd->compute, dst)))
    goto dst_out;
  KCUDA_CU(
      dd->drv, dd->where, cuMemcpyPeerAsync,
      ((CUdeviceptr)dst->ptr, dd->context, (CUdeviceptr)src->ptr, sd->context, nbytes, dd->compute),
      dst_out);
  st = kcuda_mark_ready(dd, dst, dd->compute);
dst_out:
  kcuda_leave(dd);
  if (st || (st = kcuda_enter(sd))) return st;
  st = kcuda_after_ready(sd, sd->compute, dst);
  kcuda_leave(sd);
  return st;
}

kiln_status kcuda_copy(kiln_device *dst_dev, kdev_buffer *dst, kiln_device *src_dev,
                       const kdev_buffer *src, size_t nbytes) {
  kcuda_device *dd = kcuda_impl(dst_dev), *sd = kcuda_impl(src_dev);
  kiln_status st;
  if ((st = kcuda_check_size("copy", sd, nbytes, src->nbytes)) ||
      (st = kcuda_check_size("copy", dd, nbytes, dst->nbytes)) || nbytes == 0)
    return st;
  st =
      dd == sd ? kcuda_copy_local(dd, dst, src, nbytes) : kcuda_copy_peer(dd, dst, sd, src, nbytes);
  if (st)
    return kcore_fail_wrap(st, "copying %zu bytes from %s to %s", nbytes, sd->where, dd->where);
  return KILN_OK;
}

/* The same, inside an NVTX range. */
kiln_status kcuda_upload(kiln_device *dev, kdev_buffer *dst, const void *src, size_t nbytes,
                         kdev_copy_mode mode) {
  kcore_range_push("kiln host-to-device copy");
  kiln_status st = kcuda_upload_unranged(dev, dst, src, nbytes, mode);
  kcore_range_pop();
  return st;
}

/* The same, inside an NVTX range. */
kiln_status kcuda_download(kiln_device *dev, const kdev_buffer *src, void *dst, size_t nbytes,
                           kdev_copy_mode mode) {
  kcore_range_push("kiln device-to-host copy");
  kiln_status st = kcuda_download_unranged(dev, src, dst, nbytes, mode);
  kcore_range_pop();
  return st;
}
