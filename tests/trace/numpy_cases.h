// The C side of tests/golden/numpy_api.py: each function mirrors its JAX
// twin with kiln's numpy-level API, so their jitted results can be compared.
#ifndef KILN_TESTS_NUMPY_CASES_H
#define KILN_TESTS_NUMPY_CASES_H

#include "support/jit_cases.h"

#ifdef __cplusplus
extern "C" {
#endif

// The cases, ended by a {NULL, NULL} entry.
extern const jit_case kNumpyCases[];

#ifdef __cplusplus
}
#endif
#endif
