/* Hashing, checked sizes, type strings, the clock and logging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include "core/core.h"

uint64_t kcore_hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t kcore_hash_u64(uint64_t h, uint64_t v) { return kcore_hash_bytes(h, &v, sizeof v); }

uint64_t kcore_hash_str(uint64_t h, const char *s) {
  return kcore_hash_bytes(h, s, strlen(s) + 1); /* the NUL separates "ab","c" from "a","bc" */
}

bool kcore_mul_size(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return false;
  *out = a * b;
  return true;
}

char *kcore_format_type(kiln_dtype dtype, int rank, const int64_t *shape, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", kiln_dtype_short_name(dtype));
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

kiln_status kcore_shape_bytes(const char *op, kiln_dtype dtype, int rank, const int64_t *shape,
                              int64_t *elements, size_t *bytes) {
  if (!kiln_dtype_is_valid(dtype))
    return kcore_fail(KILN_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: rank %d is outside [0, %d]", op, rank, KILN_MAX_RANK);
  if (rank > 0 && !shape)
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: shape is NULL for rank %d", op, rank);
  size_t count = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0) {
      char t[160];
      return kcore_fail(KILN_ERR_SHAPE, "%s: dimension %d of %s is negative", op, i,
                        kcore_format_type(dtype, rank, shape, t, sizeof t));
    }
    if ((uint64_t)shape[i] > SIZE_MAX || !kcore_mul_size(count, (size_t)shape[i], &count) ||
        count > (size_t)INT64_MAX) {
      char t[160];
      return kcore_fail(KILN_ERR_SIZE_OVERFLOW, "%s: the element count of %s overflows", op,
                        kcore_format_type(dtype, rank, shape, t, sizeof t));
    }
  }
  size_t nb;
  if (!kcore_mul_size(count, kiln_dtype_size(dtype), &nb)) {
    char t[160];
    return kcore_fail(KILN_ERR_SIZE_OVERFLOW, "%s: the byte size of %s overflows size_t", op,
                      kcore_format_type(dtype, rank, shape, t, sizeof t));
  }
  if (elements) *elements = (int64_t)count;
  if (bytes) *bytes = nb;
  return KILN_OK;
}

char *kcore_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

uint64_t kcore_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kcore_log(kiln_log_level threshold, kiln_log_level level, const char *fmt, ...) {
  if (level > threshold || threshold <= KILN_LOG_OFF) return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "kiln[%s]: %s\n", kiln_log_level_name(level), line);
}

const char *kiln_version(void) { return KILN_VERSION_STRING; }

int kcore_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}
