/* Status names and the thread-local message behind kiln_last_error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"

#define KCORE_MSG_CAP 4096
static _Thread_local char kcore_msg[KCORE_MSG_CAP];

const char *kiln_status_str(kiln_status s) {
  switch (s) {
#define KCORE_NAME(x) \
  case x:             \
    return #x;
    KCORE_NAME(KILN_OK)
    KCORE_NAME(KILN_ERR_ARGUMENT)
    KCORE_NAME(KILN_ERR_OUT_OF_RANGE)
    KCORE_NAME(KILN_ERR_TREE)
    KCORE_NAME(KILN_ERR_CONFIG)
    KCORE_NAME(KILN_ERR_NONFINITE)
    KCORE_NAME(KILN_ERR_SHAPE)
    KCORE_NAME(KILN_ERR_SIZE_OVERFLOW)
    KCORE_NAME(KILN_ERR_DTYPE)
    KCORE_NAME(KILN_ERR_PROMOTION)
    KCORE_NAME(KILN_ERR_OUT_OF_MEMORY)
    KCORE_NAME(KILN_ERR_DEVICE)
    KCORE_NAME(KILN_ERR_WRONG_DEVICE)
    KCORE_NAME(KILN_ERR_COMPILE)
    KCORE_NAME(KILN_ERR_COLLECTIVE)
    KCORE_NAME(KILN_ERR_DELETED)
    KCORE_NAME(KILN_ERR_UNIMPLEMENTED)
    KCORE_NAME(KILN_ERR_IO)
    KCORE_NAME(KILN_ERR_NOT_FOUND)
    KCORE_NAME(KILN_ERR_INTERNAL)
#undef KCORE_NAME
  }
  return "KILN_ERR_UNKNOWN";
}

kiln_status_kind kiln_status_kind_of(kiln_status s) {
  int code = (int)s; /* the enum may be unsigned: compare as int */
  int kind = code / 100;
  if (code < 0 || kind > KILN_KIND_INTERNAL) return KILN_KIND_INTERNAL;
  return (kiln_status_kind)kind;
}

const char *kiln_last_error(void) { return kcore_msg; }

void kiln_clear_error(void) { kcore_msg[0] = '\0'; }

/* Formats into a copy first: an argument may be kiln_last_error() itself
 * ("...: %s", kiln_last_error()), and vsnprintf must not read the buffer it
 * writes (glibc then repeats the new text where the old one was). */
kiln_status kcore_vfail(kiln_status s, const char *fmt, va_list ap) {
  char tmp[KCORE_MSG_CAP];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  memcpy(kcore_msg, tmp, sizeof kcore_msg);
  return s;
}

kiln_status kcore_fail(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcore_vfail(s, fmt, ap);
  va_end(ap);
  return s;
}

static kiln_status kcore_vfail_wrap(kiln_status s, const char *fmt, va_list ap) {
  char old[KCORE_MSG_CAP];
  memcpy(old, kcore_msg, sizeof old);
  kcore_vfail(s, fmt, ap);
  /* Append ": <old>", cut to what is left of the buffer. */
  size_t used = strlen(kcore_msg), room = sizeof kcore_msg - 1;
  if (old[0] != '\0' && used + 2 < room) {
    size_t len = strlen(old);
    if (len > room - used - 2) len = room - used - 2;
    memcpy(kcore_msg + used, ": ", 2);
    memcpy(kcore_msg + used + 2, old, len);
    kcore_msg[used + 2 + len] = '\0';
  }
  return s;
}

_Noreturn void kcore_assert_failed(const char *expr, const char *file, int line, const char *fn) {
  fprintf(stderr, "kiln: internal invariant broken: %s (%s:%d in %s)\n", expr, file, line, fn);
  abort();
}

kiln_status kiln_fail(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcore_vfail(s, fmt, ap);
  va_end(ap);
  return s;
}

kiln_status kcore_fail_wrap(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcore_vfail_wrap(s, fmt, ap);
  va_end(ap);
  return s;
}

kiln_status kiln_fail_wrap(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcore_vfail_wrap(s, fmt, ap);
  va_end(ap);
  return s;
}
