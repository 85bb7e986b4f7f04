// The C side of tests/golden/trace_jit.py: each function mirrors its JAX
// twin op for op, so their jitted results can be compared.
#ifndef KILN_TESTS_JIT_CASES_H
#define KILN_TESTS_JIT_CASES_H

#include "kiln/jit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jit_case {
  const char *name;
  kiln_fn fn;
} jit_case;

// The cases, ended by a {NULL, NULL} entry.
extern const jit_case kJitCases[];

#ifdef __cplusplus
}
#endif
#endif
