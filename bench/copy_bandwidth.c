/* copy_bandwidth: host <-> device copy bandwidth on every device of the
 * context (backend auto, or KILN_BACKEND), through the device's pinned
 * staging buffers versus straight from pageable memory, for sizes from
 * 1 MiB up by powers of 4.
 *
 *   bench_copy_bandwidth [--max-bytes N[K|M|G]] [--iters N] [--json PATH]
 *
 * Each case is timed around the device's own operations (runtime.h):
 * host -> device is upload + wait (a staged upload may return before its
 * last chunk lands), device -> host is download (which waits). After warm-up
 * runs, the median of --iters runs is reported in GB/s (10^9 bytes/s). On CPU
 * devices there is nothing to stage through: only the direct path (a memcpy)
 * is measured, and the staged columns say n/a. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "report.h"
#include "runtime/runtime.h"

#define KBENCH_MIN_BYTES ((size_t)1 << 20)
#define KBENCH_WARMUP 2

typedef struct bandwidth_args {
  size_t max_bytes;
  int iters;
  const char *json;
} bandwidth_args;

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_copy_bandwidth [--max-bytes N[K|M|G]] [--iters N] [--json PATH]\n"
          "  --max-bytes  largest copy (default 1G; capped by device and host memory)\n"
          "  --iters      timed runs per case, the median is reported (default 10)\n"
          "  --json       where to write the results (default bench/results/"
          "copy_bandwidth-<device>.json)\n");
}

static bool parse_size(const char *text, size_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift) end++;
  if (*end != '\0' || v == 0 || v > (SIZE_MAX >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

static bool parse_args(int argc, char **argv, bandwidth_args *a) {
  *a = (bandwidth_args){.max_bytes = (size_t)1 << 30, .iters = 10, .json = NULL};
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (!value) {
      fprintf(stderr, "bench_copy_bandwidth: %s needs a value\n", flag);
      return false;
    }
    i++;
    if (strcmp(flag, "--max-bytes") == 0) {
      if (!parse_size(value, &a->max_bytes) || a->max_bytes < KBENCH_MIN_BYTES) {
        fprintf(stderr, "bench_copy_bandwidth: --max-bytes '%s' is not a size >= 1M\n", value);
        return false;
      }
    } else if (strcmp(flag, "--iters") == 0) {
      char *end = NULL;
      long n = strtol(value, &end, 10);
      if (*end != '\0' || n < 1 || n > 100000) {
        fprintf(stderr, "bench_copy_bandwidth: --iters '%s' is not in [1, 100000]\n", value);
        return false;
      }
      a->iters = (int)n;
    } else if (strcmp(flag, "--json") == 0) {
      a->json = value;
    } else {
      fprintf(stderr, "bench_copy_bandwidth: unknown flag %s\n", flag);
      return false;
    }
  }
  return true;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_u64);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One timed operation on one device: a copy in one direction and mode. */
typedef struct copy_case {
  kiln_device *dev;
  kdev_buffer *buf;
  void *host;
  size_t nbytes;
  kdev_copy_mode mode;
  bool to_device;
} copy_case;

static kiln_status run_once(const copy_case *c) {
  const kdev_ops *ops = c->dev->ops;
  if (!c->to_device) return ops->download(c->dev, c->buf, c->host, c->nbytes, c->mode);
  kiln_status st = ops->upload(c->dev, c->buf, c->host, c->nbytes, c->mode);
  return st ? st : ops->wait(c->dev, c->buf);
}

/* GB/s of the median run, after warm-up runs. */
static kiln_status time_case(const copy_case *c, int iters, uint64_t *times, double *gbps) {
  kiln_status st;
  for (int i = 0; i < KBENCH_WARMUP; i++)
    if ((st = run_once(c))) return st;
  for (int i = 0; i < iters; i++) {
    uint64_t t0 = kbench_now_ns();
    if ((st = run_once(c))) return st;
    times[i] = kbench_now_ns() - t0;
  }
  uint64_t ns = median(times, iters);
  *gbps = ns ? (double)c->nbytes / (double)ns : INFINITY;
  return KILN_OK;
}

/* Fails loudly if a round trip in `mode` does not bring the data back. */
static kiln_status check_round_trip(kiln_device *dev, kdev_buffer *buf, const unsigned char *src,
                                    unsigned char *dst, size_t n, kdev_copy_mode mode) {
  memset(dst, 0, n);
  kiln_status st = dev->ops->upload(dev, buf, src, n, mode);
  if (!st) st = dev->ops->download(dev, buf, dst, n, mode);
  if (st) return st;
  if (memcmp(src, dst, n) != 0)
    return kiln_fail(KILN_ERR_INTERNAL, "copy_bandwidth: %s: %zu bytes came back different",
                      dev->info.name, n);
  return KILN_OK;
}

/* Measures both directions in one mode; NaN when the mode does not apply. */
static kiln_status measure_mode(kiln_device *dev, kdev_buffer *buf, unsigned char *src,
                                unsigned char *dst, size_t n, kdev_copy_mode mode, int iters,
                                uint64_t *times, double *h2d, double *d2h) {
  *h2d = *d2h = NAN;
  if (mode == KDEV_COPY_STAGED && dev->info.platform != KILN_BACKEND_CUDA) return KILN_OK;
  kiln_status st = check_round_trip(dev, buf, src, dst, n, mode);
  copy_case up = {dev, buf, src, n, mode, true}, down = {dev, buf, dst, n, mode, false};
  if (!st) st = time_case(&up, iters, times, h2d);
  if (!st) st = time_case(&down, iters, times, d2h);
  return st;
}

static kiln_status add_row(kbench_report *r, kiln_device *dev, size_t n, const double *gbps) {
  char name[96];
  snprintf(name, sizeof name, "dev%d %zu MiB", dev->index, n >> 20);
  kiln_status st;
  if ((st = kbench_report_row(r, name)) || (st = kbench_report_value(r, "device", dev->index)) ||
      (st = kbench_report_value(r, "bytes", (double)n)) ||
      (st = kbench_report_value(r, "h2d_staged_GBps", gbps[0])) ||
      (st = kbench_report_value(r, "h2d_direct_GBps", gbps[1])) ||
      (st = kbench_report_value(r, "d2h_staged_GBps", gbps[2])) ||
      (st = kbench_report_value(r, "d2h_direct_GBps", gbps[3])))
    return st;
  return KILN_OK;
}

static kiln_status measure_size(kbench_report *r, kiln_device *dev, size_t n, int iters,
                                uint64_t *times) {
  unsigned char *src = malloc(n), *dst = malloc(n);
  kdev_buffer buf = {0};
  kiln_status st = KILN_OK;
  if (!src || !dst) {
    st = kiln_fail(KILN_ERR_OUT_OF_MEMORY, "copy_bandwidth: no host memory for 2 x %zu bytes", n);
    goto out;
  }
  for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 131 + (i >> 12));
  if ((st = dev->ops->alloc(dev, n, &buf))) goto out;
  double gbps[4];
  if ((st = measure_mode(dev, &buf, src, dst, n, KDEV_COPY_STAGED, iters, times, &gbps[0],
                         &gbps[2])) ||
      (st = measure_mode(dev, &buf, src, dst, n, KDEV_COPY_DIRECT, iters, times, &gbps[1],
                         &gbps[3])))
    goto out;
  st = add_row(r, dev, n, gbps);
out:
  if (buf.ptr || buf.ready) dev->ops->release(dev, &buf);
  free(src);
  free(dst);
  return st;
}

/* Room for the buffer on the device and for source and destination on the
 * host (and the device's copy too, when the device is host memory). */
static size_t largest_size(const kiln_device *dev, size_t wanted) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t host = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
  uint64_t cap = dev->info.total_memory / 4;
  if (host / 8 < cap) cap = host / 8;
  return (uint64_t)wanted < cap ? wanted : (size_t)cap;
}

static kiln_status measure_device(kbench_report *r, kiln_device *dev, const bandwidth_args *a,
                                  uint64_t *times) {
  size_t top = largest_size(dev, a->max_bytes);
  for (size_t n = KBENCH_MIN_BYTES; n <= top; n *= 4) {
    kiln_status st = measure_size(r, dev, n, a->iters, times);
    if (st) return st;
    if (n > SIZE_MAX / 4) break;
  }
  return KILN_OK;
}

static kiln_status run(kiln_ctx *ctx, const bandwidth_args *a, kbench_report *r) {
  kiln_status st = KILN_OK;
  uint64_t *times = malloc((size_t)a->iters * sizeof *times);
  if (!times) return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "copy_bandwidth: out of host memory");
  if ((st = kbench_report_param(r, "iters", a->iters)) ||
      (st = kbench_report_param(r, "warmup", KBENCH_WARMUP)) ||
      (st = kbench_report_param(r, "max_bytes", (double)a->max_bytes)))
    goto out;
  for (int i = 0; i < kiln_device_count(ctx); i++) {
    kiln_device *dev = &ctx->be.devices[i];
    if ((st = kbench_report_add_device(r, dev->info.name, kiln_backend_name(dev->info.platform))))
      goto out;
  }
  for (int i = 0; i < kiln_device_count(ctx); i++)
    if ((st = measure_device(r, &ctx->be.devices[i], a, times))) goto out;
out:
  free(times);
  return st;
}

int main(int argc, char **argv) {
  bandwidth_args args;
  if (!parse_args(argc, argv, &args)) {
    usage(stderr);
    return 2;
  }
  kiln_ctx *ctx = NULL;
  kbench_report *report = NULL;
  char path[4096];
  kiln_status st = kiln_ctx_new(NULL, &ctx);
  if (!st) st = kbench_report_new("copy_bandwidth", &report);
  if (!st) st = run(ctx, &args, report);
  if (!st) {
    kbench_report_print(report, stdout);
    st = kbench_report_write_json(report, args.json, path, sizeof path);
  }
  if (!st) printf("wrote %s\n", path);
  if (st) fprintf(stderr, "bench_copy_bandwidth: %s\n", kiln_last_error());
  kbench_report_free(report);
  kiln_ctx_free(ctx);
  return st ? 1 : 0;
}
