/* C shims for test_dtype.cc: out-of-range integers as dtypes and modes,
 * and core internals (core.h is C only). */
#ifndef KILN_TEST_DTYPE_SHIMS_H
#define KILN_TEST_DTYPE_SHIMS_H

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

kiln_status dtype_test_promote(int a, int a_weak, int b, int b_weak, int mode, int result_type,
                               kiln_wdtype *out);
/* Bit 0 valid, 1 bool, 2 integer, 3 signed, 4 unsigned, 5 float. */
int dtype_test_predicates(int d);
size_t dtype_test_size(int d);
const char *dtype_test_name(int d);
const char *dtype_test_short_name(int d);
kiln_status dtype_test_check(const char *op, int d);

#ifdef __cplusplus
}
#endif
#endif
