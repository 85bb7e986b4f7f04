/* backend/cpu: virtual CPU devices over host memory. The only door of
 * src/backend/cpu; prefix kcpu_. The backend's entry point,
 * kcpu_backend_open, is declared in runtime/runtime.h. */
#ifndef KILN_SRC_BACKEND_CPU_H
#define KILN_SRC_BACKEND_CPU_H

#include "runtime/runtime.h"

/* Buffers are aligned for the widest vector loads the C target emits. */
#define KCPU_ALIGNMENT 64

#endif
