/* NVRTC: loading the library at run time, and compiling CUDA C with it.
 * _GNU_SOURCE is for RTLD_NODELETE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_backend.h"

/* Each table entry has exactly the header's prototype. _Generic does not
 * evaluate its operand, so this references no symbol of the library. */
#define KCUDA_NVRTC_CHECK_PROTOTYPE(fn, ret, params)            \
  _Static_assert(_Generic(&fn, kcuda_pfn_##fn: 1, default: 0), \
                 #fn " does not have the prototype kiln was written against");
KCUDA_NVRTC_FUNCTIONS(KCUDA_NVRTC_CHECK_PROTOTYPE)
#undef KCUDA_NVRTC_CHECK_PROTOTYPE

/* ---- the library ---- */

static kiln_status kcuda_nvrtc_resolve(kcuda_nvrtc *nv) {
  void *p;
#define KCUDA_NVRTC_RESOLVE(fn, ret, params)                                              \
  dlerror();                                                                              \
  if (!(p = dlsym(nv->library, #fn)))                                                     \
    return kcore_fail(KILN_ERR_DEVICE, "%s is not a usable NVRTC: it has no entry point " \
                      #fn, nv->name);                                                      \
  nv->fn = (kcuda_pfn_##fn)p;
  KCUDA_NVRTC_FUNCTIONS(KCUDA_NVRTC_RESOLVE)
#undef KCUDA_NVRTC_RESOLVE
  if (nv->nvrtcVersion(&nv->major, &nv->minor) != NVRTC_SUCCESS)
    return kcore_fail(KILN_ERR_DEVICE, "%s: nvrtcVersion failed", nv->name);
  if (nv->major != CUDA_VERSION / 1000)
    return kcore_fail(KILN_ERR_DEVICE, "%s is NVRTC %d.%d; kiln is built with CUDA %d.%d and needs "
                      "NVRTC %d.x", nv->name, nv->major, nv->minor, CUDA_VERSION / 1000,
                      CUDA_VERSION % 1000 / 10, CUDA_VERSION / 1000);
  return KILN_OK;
}

kiln_status kcuda_nvrtc_open_library(const char *library, kcuda_nvrtc **out) {
  *out = NULL;
  kcuda_nvrtc *nv = calloc(1, sizeof *nv);
  if (!nv) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "NVRTC: out of host memory");
  snprintf(nv->name, sizeof nv->name, "%s", library);
  /* NODELETE: NVRTC keeps its builtins library loaded and registers exit
   * handlers, so its code must stay mapped after dlclose. */
  nv->library = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!nv->library) {
    kiln_status st = kcore_fail(KILN_ERR_DEVICE,
                                "no NVRTC library (dlopen %s: %s): CUDA kernels cannot be "
                                "compiled; install NVRTC of CUDA %d",
                                library, dlerror(), CUDA_VERSION / 1000);
    free(nv);
    return st;
  }
  kiln_status st = kcuda_nvrtc_resolve(nv);
  if (st) {
    kcuda_nvrtc_close(nv);
    return st;
  }
  *out = nv;
  return KILN_OK;
}

void kcuda_nvrtc_close(kcuda_nvrtc *nv) {
  if (!nv) return;
  if (nv->library) dlclose(nv->library);
  free(nv);
}

/* The process's table, opened once; a failure is kept as its message and
 * repeated to every caller. */
static struct {
  pthread_once_t once;
  kcuda_nvrtc *nv;
  kiln_status status;
  char error[1024];
} kcuda_nvrtc_process = {PTHREAD_ONCE_INIT, NULL, KILN_OK, ""};

static void kcuda_nvrtc_open_process(void) {
  kcuda_nvrtc_process.status =
      kcuda_nvrtc_open_library(KCUDA_NVRTC_LIBRARY, &kcuda_nvrtc_process.nv);
  if (kcuda_nvrtc_process.status)
    snprintf(kcuda_nvrtc_process.error, sizeof kcuda_nvrtc_process.error, "%s", kiln_last_error());
}

kiln_status kcuda_nvrtc_get(const kcuda_nvrtc **out) {
  pthread_once(&kcuda_nvrtc_process.once, kcuda_nvrtc_open_process);
  *out = kcuda_nvrtc_process.nv;
  if (kcuda_nvrtc_process.status)
    return kcore_fail(kcuda_nvrtc_process.status, "%s", kcuda_nvrtc_process.error);
  return KILN_OK;
}

kiln_status kcuda_nvrtc_fail(nvrtcResult rc, const char *call, const char *where) {
  /* NVRTC names its codes; without the library (nothing was called then),
   * the number does. */
  const kcuda_nvrtc *nv;
  char number[32];
  const char *text = NULL;
  if (kcuda_nvrtc_get(&nv) == KILN_OK) text = nv->nvrtcGetErrorString(rc);
  if (!text) {
    snprintf(number, sizeof number, "nvrtcResult %d", (int)rc);
    text = number;
  }
  return kcuda_call_fail(kcuda_nvrtc_status(rc), where, call, text);
}

/* ---- compiling ---- */

/* A program that does not compile: the message carries NVRTC's log, which
 * names the line and the error. */
static kiln_status kcuda_nvrtc_log_fail(const kcuda_nvrtc *nv, nvrtcProgram prog,
                                        const char *name) {
  size_t size = 0;
  char *log = NULL;
  if (nv->nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0 &&
      (log = malloc(size)) && nv->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
    log[0] = '\0';
  kiln_status st =
      kcore_fail(KILN_ERR_COMPILE, "%s: nvrtcCompileProgram failed: %s\n%s", name,
                 nv->nvrtcGetErrorString(NVRTC_ERROR_COMPILATION), log ? log : "(no log)");
  free(log);
  return st;
}

static kiln_status kcuda_nvrtc_compile_unranged(const char *name, const char *source,
                                                const char *const *options, int num_options,
                                                bool cubin, char **out, size_t *out_size) {
  const kcuda_nvrtc *nv;
  nvrtcProgram prog = NULL;
  char *code = NULL;
  size_t size = 0;
  *out = NULL;
  *out_size = 0;
  kiln_status st = kcuda_nvrtc_get(&nv);
  if (st) return st;
  KCUDA_NVRTC(nv, name, nvrtcCreateProgram, (&prog, source, name, 0, NULL, NULL), done);
  nvrtcResult rc = nv->nvrtcCompileProgram(prog, num_options, options);
  if (rc == NVRTC_ERROR_COMPILATION) {
    st = kcuda_nvrtc_log_fail(nv, prog, name);
    goto done;
  }
  if (rc != NVRTC_SUCCESS) {
    st = kcuda_nvrtc_fail(rc, "nvrtcCompileProgram", name);
    goto done;
  }
  if (cubin)
    KCUDA_NVRTC(nv, name, nvrtcGetCUBINSize, (prog, &size), done);
  else
    KCUDA_NVRTC(nv, name, nvrtcGetPTXSize, (prog, &size), done);
  if (!(code = malloc(size ? size : 1))) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes of code", name,
                    size);
    goto done;
  }
  if (cubin)
    KCUDA_NVRTC(nv, name, nvrtcGetCUBIN, (prog, code), done);
  else
    KCUDA_NVRTC(nv, name, nvrtcGetPTX, (prog, code), done);
  *out = code;
  *out_size = size;
  code = NULL;
done:
  free(code);
  if (prog) nv->nvrtcDestroyProgram(&prog);
  return st;
}

/* The same, inside an NVTX range. */
kiln_status kcuda_nvrtc_compile(const char *name, const char *source, const char *const *options,
                                int num_options, bool cubin, char **out, size_t *out_size) {
  kcore_range_push("kiln NVRTC compile");
  kiln_status st =
      kcuda_nvrtc_compile_unranged(name, source, options, num_options, cubin, out, out_size);
  kcore_range_pop();
  return st;
}
