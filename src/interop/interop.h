/* interop: exchange of arrays with other frameworks (DLPack). The only door
 * of src/interop; prefix kinterop_. It sits above runtime. */
#ifndef KILN_SRC_INTEROP_H
#define KILN_SRC_INTEROP_H

#include <stdint.h>
#include "kiln/interop.h"

/* The one place interop reaches into runtime internals (runtime_access.c):
 * the address of an array's memory (a host pointer, or a CUdeviceptr) and a
 * wait for its pending writes. */
uintptr_t kinterop_array_address(const kiln_array *a);
kiln_status kinterop_array_wait(const kiln_array *a);

#endif
