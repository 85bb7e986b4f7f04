/* The host run of kernels/scatter.h's index walk (scatter_kernel_host.c). */
#ifndef KILN_TESTS_SCATTER_KERNEL_HOST_H
#define KILN_TESTS_SCATTER_KERNEL_HOST_H

#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Gather or scatter e of p (operands in[], result out, storage form)
 * through the walk and geometry of the CUDA target's kernels, updates
 * combined in index order; 0 on success, -1 for a combine or dtype those
 * kernels do not have. */
int kct_scatter_host(const kir_program *p, const kir_eqn *e, const void *const *in, void *out);

#ifdef __cplusplus
}
#endif
#endif
