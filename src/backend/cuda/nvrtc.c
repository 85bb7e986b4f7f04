/* Compiling CUDA C with NVRTC. */
#include <stdlib.h>
#include "backend/cuda/cuda_backend.h"

/* A program that does not compile: the message carries NVRTC's log, which
 * names the line and the error. */
static kiln_status kcuda_nvrtc_log_fail(nvrtcProgram prog, const char *name) {
  size_t size = 0;
  char *log = NULL;
  if (nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0 && (log = malloc(size)) &&
      nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
    log[0] = '\0';
  kiln_status st = kcore_fail(KILN_ERR_COMPILE, "%s: nvrtcCompileProgram failed: %s\n%s", name,
                              nvrtcGetErrorString(NVRTC_ERROR_COMPILATION), log ? log : "(no log)");
  free(log);
  return st;
}

static kiln_status kcuda_nvrtc_compile_unranged(const char *name, const char *source, const char *const *options,
                                int num_options, bool cubin, char **out, size_t *out_size) {
  kiln_status st = KILN_OK;
  nvrtcProgram prog = NULL;
  char *code = NULL;
  size_t size = 0;
  *out = NULL;
  *out_size = 0;
  KCUDA_NVRTC_CHECK(name, nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL), done);
  nvrtcResult rc = nvrtcCompileProgram(prog, num_options, options);
  if (rc == NVRTC_ERROR_COMPILATION) {
    st = kcuda_nvrtc_log_fail(prog, name);
    goto done;
  }
  if (rc != NVRTC_SUCCESS) {
    st = kcuda_nvrtc_fail(rc, "nvrtcCompileProgram", name);
    goto done;
  }
  if (cubin)
    KCUDA_NVRTC_CHECK(name, nvrtcGetCUBINSize(prog, &size), done);
  else
    KCUDA_NVRTC_CHECK(name, nvrtcGetPTXSize(prog, &size), done);
  if (!(code = malloc(size ? size : 1))) {
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes of code", name,
                    size);
    goto done;
  }
  if (cubin)
    KCUDA_NVRTC_CHECK(name, nvrtcGetCUBIN(prog, code), done);
  else
    KCUDA_NVRTC_CHECK(name, nvrtcGetPTX(prog, code), done);
  *out = code;
  *out_size = size;
  code = NULL;
done:
  free(code);
  if (prog) nvrtcDestroyProgram(&prog);
  return st;
}

/* The same, inside an NVTX range. */
kiln_status kcuda_nvrtc_compile(const char *name, const char *source, const char *const *options,
                                int num_options, bool cubin, char **out, size_t *out_size) {
  kcore_range_push("kiln NVRTC compile");
  kiln_status st = kcuda_nvrtc_compile_unranged(name, source, options, num_options, cubin, out, out_size);
  kcore_range_pop();
  return st;
}
