/* C shims over backend/cuda's NCCL collectives for the C++ tests (the
 * backend's door cannot be read by C++; see cuda_test_support.h). */
#ifndef KILN_TESTS_NCCL_TEST_SUPPORT_H
#define KILN_TESTS_NCCL_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include "support/cuda_test_support.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kctn_mesh kctn_mesh;
enum { KCTN_ALL_REDUCE, KCTN_ALL_GATHER, KCTN_REDUCE_SCATTER, KCTN_ALL_TO_ALL, KCTN_PPERMUTE };
/* NCCL from `library` (a path: the stand-in), or the process's (NULL), and a
 * mesh over the context's first n devices. */
kiln_status kctn_mesh_new(const char *library, kiln_ctx *ctx, int n, double timeout_s,
                          kctn_mesh **out);
void kctn_mesh_free(kctn_mesh *m);
/* Selects (making it on first use) the axis group; NULL color/rank: all. */
kiln_status kctn_group(kctn_mesh *m, const char *axis, const int *color, const int *rank);
/* One collective over the selected group; red: 0 sum, 1 max, 2 min. */
kiln_status kctn_collective(kctn_mesh *m, int kind, kiln_dtype dtype, int64_t count,
                            kct_buffer *const *in, kct_buffer *const *out, int red, int npairs,
                            const int (*pairs)[2]);
/* leaves[l * n + i]: leaf l on device i. */
kiln_status kctn_all_reduce_leaves(kctn_mesh *m, int nleaves, const kiln_dtype *dtypes,
                                   const int64_t *counts, kct_buffer *const *leaves,
                                   size_t bucket_bytes);
kiln_status kctn_wait(kctn_mesh *m);
/* Calls the stand-in NCCL at `library` directly where NCCL would hang or be
 * undefined; out[] gets its ncclResult_t codes (nccl_test_support.c). */
kiln_status kctn_stand_in_checks(const char *library, kiln_ctx *ctx, int out[4]);

#ifdef __cplusplus
}
#endif
#endif
