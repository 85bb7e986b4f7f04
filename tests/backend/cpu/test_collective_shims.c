/* Plain-typed wrappers over the CPU collectives (collective.c). */
#include "test_collective_shims.h"
#include "backend/cpu/cpu_backend.h"

kiln_status coll_test_group_new(int n, const char *axis, double timeout_s, kcpu_coll_group **out) {
  return kcpu_coll_group_new(n, axis, timeout_s, out);
}
void coll_test_group_free(kcpu_coll_group *g) { kcpu_coll_group_free(g); }
kiln_status coll_test_fail(kcpu_coll_group *g, int rank, const char *op, const char *why) {
  return kcpu_coll_fail(g, rank, op, why);
}
kiln_status coll_test_all_reduce(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out, int reduce) {
  static const kcpu_coll_reduce ops[] = {KCPU_COLL_SUM, KCPU_COLL_MAX, KCPU_COLL_MIN};
  return kcpu_coll_all_reduce(g, rank, dtype, count, in, out, ops[reduce]);
}
kiln_status coll_test_all_gather(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out) {
  return kcpu_coll_all_gather(g, rank, dtype, count, in, out);
}
kiln_status coll_test_reduce_scatter(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                     const void *in, void *out) {
  return kcpu_coll_reduce_scatter(g, rank, dtype, count, in, out);
}
kiln_status coll_test_all_to_all(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                                 const void *in, void *out) {
  return kcpu_coll_all_to_all(g, rank, dtype, count, in, out);
}
kiln_status coll_test_ppermute(kcpu_coll_group *g, int rank, kiln_dtype dtype, int64_t count,
                               const void *in, void *out, int npairs, const int (*pairs)[2]) {
  return kcpu_coll_ppermute(g, rank, dtype, count, in, out, npairs, pairs);
}
