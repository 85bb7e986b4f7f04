/* NCCL: loading libnccl.so.2 at run time and resolving its entry points.
 * _GNU_SOURCE is for RTLD_NODELETE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

/* Each table entry has exactly the header's prototype (_Generic evaluates
 * nothing, so no symbol of the library is referenced). */
#define KCUDA_NCCL_CHECK_PROTOTYPE(fn, ret, params)            \
  _Static_assert(_Generic(&fn, kcuda_pfn_##fn: 1, default: 0), \
                 #fn " does not have the prototype kiln was written against");
KCUDA_NCCL_FUNCTIONS(KCUDA_NCCL_CHECK_PROTOTYPE)
#undef KCUDA_NCCL_CHECK_PROTOTYPE

static kiln_status kcuda_nccl_resolve(kcuda_nccl *nc) {
  void *p;
#define KCUDA_NCCL_RESOLVE(fn, ret, params)                                                  \
  dlerror();                                                                                 \
  if (!(p = dlsym(nc->library, #fn)))                                                        \
    return kcore_fail(KILN_ERR_COLLECTIVE, "%s is not a usable NCCL: it has no entry point " \
                      #fn, nc->name);                                                         \
  nc->fn = (kcuda_pfn_##fn)p;
  KCUDA_NCCL_FUNCTIONS(KCUDA_NCCL_RESOLVE)
#undef KCUDA_NCCL_RESOLVE
  if (nc->ncclGetVersion(&nc->version) != ncclSuccess)
    return kcore_fail(KILN_ERR_COLLECTIVE, "%s: ncclGetVersion failed", nc->name);
  if (nc->version / 10000 != NCCL_MAJOR || nc->version < KCUDA_NCCL_MIN_VERSION)
    return kcore_fail(KILN_ERR_COLLECTIVE,
                      "%s is NCCL %d.%d.%d; kiln needs NCCL %d.%d or newer within major %d", nc->name,
                      nc->version / 10000, nc->version / 100 % 100, nc->version % 100,
                      KCUDA_NCCL_MIN_VERSION / 10000, KCUDA_NCCL_MIN_VERSION / 100 % 100, NCCL_MAJOR);
  return KILN_OK;
}

kiln_status kcuda_nccl_open_library(const char *library, kcuda_nccl **out) {
  *out = NULL;
  kcuda_nccl *nc = calloc(1, sizeof *nc);
  if (!nc) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NCCL: out of host memory");
  snprintf(nc->name, sizeof nc->name, "%s", library);
  /* NODELETE: NCCL starts proxy threads that may outlive a communicator's
   * teardown, so its code must stay mapped. */
  nc->library = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!nc->library) {
    kiln_status st = kcore_fail(KILN_ERR_COLLECTIVE,
                                "no NCCL library (dlopen %s: %s): collectives over CUDA devices "
                                "need NCCL %d.%d or newer",
                                library, dlerror(), KCUDA_NCCL_MIN_VERSION / 10000,
                                KCUDA_NCCL_MIN_VERSION / 100 % 100);
    free(nc);
    return st;
  }
  kiln_status st = kcuda_nccl_resolve(nc);
  if (st) {
    kcuda_nccl_close(nc);
    return st;
  }
  *out = nc;
  return KILN_OK;
}

void kcuda_nccl_close(kcuda_nccl *nc) {
  if (!nc) return;
  if (nc->library) dlclose(nc->library);
  free(nc);
}

/* The process's table, opened once; a failure is kept and repeated. */
static struct {
  pthread_once_t once;
  kcuda_nccl *nc;
  kiln_status status;
  char error[1024];
} kcuda_nccl_process = {PTHREAD_ONCE_INIT, NULL, KILN_OK, ""};

static void kcuda_nccl_open_process(void) {
  kcuda_nccl_process.status = kcuda_nccl_open_library(KCUDA_NCCL_LIBRARY, &kcuda_nccl_process.nc);
  if (kcuda_nccl_process.status)
    snprintf(kcuda_nccl_process.error, sizeof kcuda_nccl_process.error, "%s", kiln_last_error());
}

kiln_status kcuda_nccl_get(const kcuda_nccl **out) {
  pthread_once(&kcuda_nccl_process.once, kcuda_nccl_open_process);
  *out = kcuda_nccl_process.nc;
  if (kcuda_nccl_process.status)
    return kcore_fail(kcuda_nccl_process.status, "%s", kcuda_nccl_process.error);
  return KILN_OK;
}

kiln_status kcuda_nccl_table_fail(const kcuda_nccl *nc, ncclResult_t rc, const char *call,
                                  const char *where) {
  char number[48];
  const char *text = nc && nc->ncclGetErrorString ? nc->ncclGetErrorString(rc) : NULL;
  snprintf(number, sizeof number, "ncclResult %d", (int)rc);
  char what[320];
  snprintf(what, sizeof what, "%s (%s)", text ? text : number, number);
  return kcuda_call_fail(KILN_ERR_COLLECTIVE, where, call, what);
}
