/* The host run of kernels/conv.h (conv_kernel_host.c). */
#ifndef KILN_TESTS_CONV_KERNEL_HOST_H
#define KILN_TESTS_CONV_KERNEL_HOST_H

#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* conv_general_dilated of f32 operands through the CUDA target's copies and
 * a plain GEMM; 0 on success, -1 out of memory. */
int kct_conv_host_f32(const kir_p_conv *c, const kir_aval *lhs_aval, const kir_aval *rhs_aval,
                      const kir_aval *out_aval, const float *lhs, const float *rhs, float *out);

#ifdef __cplusplus
}
#endif
#endif
