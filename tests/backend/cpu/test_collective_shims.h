/* The CPU collectives for the C++ tests, which cannot include the backend's
 * C-only header: the same calls under plain types (reduce: 0 sum, 1 max, 2 min). */
#ifndef KILN_TEST_COLLECTIVE_SHIMS_H
#define KILN_TEST_COLLECTIVE_SHIMS_H
#include <stdint.h>
#include "kiln/kiln.h"
#ifdef __cplusplus
extern "C" {
#endif
typedef struct kcpu_coll_group kcpu_coll_group;
kiln_status coll_test_group_new(int n, const char *axis, double timeout_s, kcpu_coll_group **out);
void coll_test_group_free(kcpu_coll_group *g);
kiln_status coll_test_fail(kcpu_coll_group *g, int rank, const char *op, const char *why);
kiln_status coll_test_all_reduce(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out, int reduce);
kiln_status coll_test_all_gather(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out);
kiln_status coll_test_reduce_scatter(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                     const void *in, void *out);
kiln_status coll_test_all_to_all(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out);
kiln_status coll_test_ppermute(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                               const void *in, void *out, int npairs, const int (*pairs)[2]);
#ifdef __cplusplus
}
#endif
#endif
