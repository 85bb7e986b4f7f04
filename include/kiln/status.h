/* kiln status codes and the per-thread error message. */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Codes are grouped by kind: the hundreds digit names the kind
 * (kiln_status_kind), the rest tells cases of one kind apart. */
typedef enum kiln_status {
  KILN_OK = 0,

  KILN_ERR_ARGUMENT = 100,      /* a null pointer or an invalid value */
  KILN_ERR_OUT_OF_RANGE = 101,  /* an index (device, axis, leaf) out of range */
  KILN_ERR_TREE = 102,          /* pytree structure mismatch or misuse */
  KILN_ERR_CONFIG = 103,        /* an invalid option or KILN_* variable */
  KILN_ERR_NONFINITE = 104,     /* a NaN or infinity where finite values are required */

  KILN_ERR_SHAPE = 200,         /* wrong rank, dimensions or element count */
  KILN_ERR_SIZE_OVERFLOW = 201, /* a byte count that does not fit in size_t */

  KILN_ERR_DTYPE = 300,         /* an unsupported or mismatched dtype */
  KILN_ERR_PROMOTION = 301,     /* implicit promotion refused (strict mode) */

  KILN_ERR_OUT_OF_MEMORY = 400, /* host or device memory exhausted */

  KILN_ERR_DEVICE = 500,        /* no driver/device, or a device call failed */
  KILN_ERR_WRONG_DEVICE = 501,  /* operands live on different devices */

  KILN_ERR_COMPILE = 600,       /* NVRTC or the host compiler failed */
  KILN_ERR_COLLECTIVE = 700,    /* NCCL or a thread collective failed */
  KILN_ERR_DELETED = 800,       /* use of a deleted (donated) array */
  KILN_ERR_UNIMPLEMENTED = 900, /* valid request kiln does not support */
  KILN_ERR_IO = 1000,           /* file system or stream error */
  KILN_ERR_NOT_FOUND = 1001,    /* no such file entry, metadata key or checkpoint */
  KILN_ERR_INTERNAL = 1100      /* a broken invariant inside kiln or a library */
} kiln_status;

typedef enum kiln_status_kind {
  KILN_KIND_OK = 0,
  KILN_KIND_ARGUMENT = 1,
  KILN_KIND_SHAPE = 2,
  KILN_KIND_DTYPE = 3,
  KILN_KIND_MEMORY = 4,
  KILN_KIND_DEVICE = 5,
  KILN_KIND_COMPILE = 6,
  KILN_KIND_COLLECTIVE = 7,
  KILN_KIND_DELETED = 8,
  KILN_KIND_UNIMPLEMENTED = 9,
  KILN_KIND_IO = 10,
  KILN_KIND_INTERNAL = 11
} kiln_status_kind;

/* The code's name, e.g. "KILN_ERR_SHAPE"; "KILN_ERR_UNKNOWN" for others. */
const char *kiln_status_str(kiln_status s);
kiln_status_kind kiln_status_kind_of(kiln_status s);

/* The calling thread's message for its last failed call ("" if none). Valid
 * until the thread's next failing kiln call. */
const char *kiln_last_error(void);
void kiln_clear_error(void);

/* Sets the calling thread's message (printf-style) and returns s, so that
 * code built on kiln (a traced function, a tool, a benchmark) reports its
 * own failures the way kiln's calls do: `return kiln_fail(KILN_ERR_IO, ...)`.
 * kiln_fail_wrap keeps the message already there after the new one
 * ("<new>: <old>"), to say what was being done when a kiln call failed. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define KILN_PRINTF_LIKE(f, a)
#endif
kiln_status kiln_fail(kiln_status s, const char *fmt, ...) KILN_PRINTF_LIKE(2, 3);
kiln_status kiln_fail_wrap(kiln_status s, const char *fmt, ...) KILN_PRINTF_LIKE(2, 3);

#ifdef __cplusplus
}
#endif
#endif
