/* Every use of runtime internals by interop lives here, so that moving
 * struct kiln_array to another module changes this file only. */
#include "interop/interop.h"
#include "runtime/runtime.h"

uintptr_t kinterop_array_address(const kiln_array *a) { return a->buf.ptr; }

kiln_status kinterop_array_wait(const kiln_array *a) {
  if (a->buf.nbytes == 0) return KILN_OK;
  return a->device->ops->wait(a->device, &a->buf);
}
