/* Loading the CUDA driver library at run time and resolving its entry points.
 * _GNU_SOURCE is for RTLD_NODELETE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

typedef CUresult (*kcuda_get_version_fn)(int *version);

/* cuGetProcAddress as exported by the library: _v2 (CUDA 12.0) takes a
 * query-result argument, the original does not. */
typedef struct kcuda_proc_lookup {
  PFN_cuGetProcAddress_v12000 v2;
  PFN_cuGetProcAddress_v11030 v1;
} kcuda_proc_lookup;

static void *kcuda_symbol(void *library, const char *name) {
  dlerror();
  return dlsym(library, name);
}

/* Resolves `name` at exactly the ABI version `abi`. */
static kiln_status kcuda_resolve(const kcuda_driver *drv, const kcuda_proc_lookup *lookup,
                                 const char *name, int abi, void **out) {
  *out = NULL;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult rc = lookup->v2 ? lookup->v2(name, out, abi, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found)
                           : lookup->v1(name, out, abi, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  if (rc != CUDA_SUCCESS) return kcuda_driver_fail(drv, rc, "cuGetProcAddress", name);
  if (!*out || found != CU_GET_PROC_ADDRESS_SUCCESS)
    return kcore_fail(
        KILN_ERR_DEVICE, "the CUDA driver (CUDA %d.%d) has no entry point %s for CUDA %d.%d",
        drv->version / 1000, drv->version % 1000 / 10, name, abi / 1000, abi % 1000 / 10);
  return KILN_OK;
}

/* Fills the table. The error functions come first so that later failures are
 * reported by name. */
static kiln_status kcuda_resolve_all(kcuda_driver *drv, const kcuda_proc_lookup *lookup) {
  kiln_status st = KILN_OK;
  void *p;
#define KCUDA_RESOLVE(name, abi)                                               \
  if ((st = kcuda_resolve(drv, lookup, #name, abi, &p)) != KILN_OK) return st; \
  drv->name = (PFN_##name##_v##abi)p;
  KCUDA_DRIVER_FUNCTIONS(KCUDA_RESOLVE)
#undef KCUDA_RESOLVE
  return st;
}

/* Reads the version before anything else: cuDriverGetVersion is exported by
 * every driver and needs no cuInit, so an old driver is reported as such
 * rather than as a missing entry point. */
static kiln_status kcuda_check_version(kcuda_driver *drv, const char *library) {
  kcuda_get_version_fn get_version =
      (kcuda_get_version_fn)kcuda_symbol(drv->library, "cuDriverGetVersion");
  if (!get_version)
    return kcore_fail(KILN_ERR_DEVICE, "%s has no cuDriverGetVersion: not a CUDA driver", library);
  CUresult rc = get_version(&drv->version);
  if (rc == CUDA_ERROR_STUB_LIBRARY)
    return kcore_fail(KILN_ERR_DEVICE,
                      "%s is the CUDA toolkit's stub library, not a driver "
                      "(CUDA_ERROR_STUB_LIBRARY): no NVIDIA driver is installed",
                      library);
  if (rc != CUDA_SUCCESS) return kcuda_driver_fail(NULL, rc, "cuDriverGetVersion", library);
  if (drv->version < KCUDA_MIN_DRIVER_VERSION)
    return kcore_fail(KILN_ERR_DEVICE,
                      "driver too old: supports CUDA %d.%d, kiln is built with CUDA %d.%d and "
                      "needs a driver for CUDA %d.%d or newer",
                      drv->version / 1000, drv->version % 1000 / 10, CUDA_VERSION / 1000,
                      CUDA_VERSION % 1000 / 10, KCUDA_MIN_DRIVER_VERSION / 1000,
                      KCUDA_MIN_DRIVER_VERSION % 1000 / 10);
  return KILN_OK;
}

static kiln_status kcuda_find_lookup(const kcuda_driver *drv, const char *library,
                                     kcuda_proc_lookup *lookup) {
  lookup->v2 = (PFN_cuGetProcAddress_v12000)kcuda_symbol(drv->library, "cuGetProcAddress_v2");
  lookup->v1 = (PFN_cuGetProcAddress_v11030)kcuda_symbol(drv->library, "cuGetProcAddress");
  if (!lookup->v2 && !lookup->v1)
    return kcore_fail(KILN_ERR_DEVICE, "%s (CUDA %d.%d) exports no cuGetProcAddress", library,
                      drv->version / 1000, drv->version % 1000 / 10);
  return KILN_OK;
}

kiln_status kcuda_driver_load(const char *library, kcuda_driver *drv) {
  memset(drv, 0, sizeof *drv);
  /* NODELETE: the driver starts threads that outlive any context, so its code
   * must stay mapped after dlclose. */
  drv->library = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!drv->library)
    return kcore_fail(KILN_ERR_DEVICE, "no CUDA driver library (dlopen %s: %s)", library,
                      dlerror());
  kiln_status st;
  kcuda_proc_lookup lookup;
  if ((st = kcuda_check_version(drv, library)) || (st = kcuda_find_lookup(drv, library, &lookup)) ||
      (st = kcuda_resolve_all(drv, &lookup)))
    goto fail;
  KCUDA_CU(drv, NULL, cuInit, (0), fail);
  return KILN_OK;
fail:
  kcuda_driver_unload(drv);
  return st;
}

void kcuda_driver_unload(kcuda_driver *drv) {
  if (drv->library) dlclose(drv->library);
  memset(drv, 0, sizeof *drv);
}
