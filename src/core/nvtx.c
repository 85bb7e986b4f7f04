/* NVTX ranges for Nsight Systems. NVTX v3 is header-only: without a tool
 * attached each call is a cheap no-op, so ranges stay on in every build. */
#include <nvtx3/nvToolsExt.h>
#include "core/core.h"

void kcore_range_push(const char *name) { nvtxRangePushA(name); }

void kcore_range_pop(void) { nvtxRangePop(); }
