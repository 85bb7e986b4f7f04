/* Calls into the dtype API with integers that are not enumerators. In C an
 * enum holds any int of its underlying type; C++ (and UBSan's enum check)
 * forbids loading such values, so test_dtype.cc reaches them through here. */
#include "test_dtype_shims.h"

#include "core/core.h"

kiln_status dtype_test_promote(int a, int a_weak, int b, int b_weak, int mode, int result_type,
                               kiln_wdtype *out) {
  kiln_wdtype wa = {(kiln_dtype)a, a_weak}, wb = {(kiln_dtype)b, b_weak};
  if (result_type) return kiln_result_type(wa, wb, (kiln_promotion_mode)mode, out);
  return kiln_promote_types(wa, wb, (kiln_promotion_mode)mode, out);
}

int dtype_test_predicates(int d) {
  kiln_dtype t = (kiln_dtype)d;
  return kiln_dtype_is_valid(t) | kiln_dtype_is_bool(t) << 1 | kiln_dtype_is_integer(t) << 2 |
         kiln_dtype_is_signed(t) << 3 | kiln_dtype_is_unsigned(t) << 4 |
         kiln_dtype_is_float(t) << 5;
}

size_t dtype_test_size(int d) { return kiln_dtype_size((kiln_dtype)d); }

const char *dtype_test_name(int d) { return kiln_dtype_name((kiln_dtype)d); }

const char *dtype_test_short_name(int d) { return kiln_dtype_short_name((kiln_dtype)d); }

kiln_status dtype_test_check(const char *op, int d) { return kcore_check_dtype(op, (kiln_dtype)d); }
