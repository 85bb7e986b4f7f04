/* The stand-in driver's modules and kernel launches: images checked to be
 * cubins or PTX naming the kernels looked up, launches copying kiln's
 * kernel ABI (fake_cuda_driver.c). */
#include "fake_cuda_internal.h"

/* ---- modules and kernels ---- */

/* The byte size of a module image: an ELF cubin's section headers end it;
 * PTX is text. */
static size_t fake_image_size(const char *image) {
  static const char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (memcmp(image, elf, 4) != 0) return strlen(image);
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, image + 0x28, sizeof shoff);
  memcpy(&shentsize, image + 0x3a, sizeof shentsize);
  memcpy(&shnum, image + 0x3c, sizeof shnum);
  return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

static bool fake_module_ok(CUmodule m) {
  for (struct CUmod_st *p = fake_modules; p; p = p->next)
    if (p == m) return !p->unloaded;
  return false;
}

static bool fake_function_ok(CUfunction f) {
  for (struct CUfunc_st *p = fake_functions; p; p = p->next)
    if (p == f) return fake_module_ok(p->module);
  return false;
}

CUresult fake_cuModuleLoadData(CUmodule *out, const void *image) {
  FAKE_BEGIN(true);
  if (fake_current_device() < 0) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  if (!image) return fake_leave(CUDA_ERROR_INVALID_VALUE);
  const char *text = image;
  bool ptx = strstr(text, ".version") != NULL;
  if (memcmp(text, "\177ELF", 4) != 0 && !ptx) return fake_leave(CUDA_ERROR_INVALID_IMAGE);
  struct CUmod_st *m = calloc(1, sizeof *m);
  size_t n = fake_image_size(text);
  if (m) m->image = malloc(n);
  if (!m || !m->image) {
    free(m);
    return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  }
  memcpy(m->image, text, n);
  m->size = n;
  m->next = fake_modules;
  fake_modules = m;
  *out = m;
  return fake_leave(CUDA_SUCCESS);
}

CUresult fake_cuModuleUnload(CUmodule m) {
  FAKE_BEGIN(true);
  if (!fake_module_ok(m)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  m->unloaded = true;
  free(m->image);
  m->image = NULL;
  return fake_leave(CUDA_SUCCESS);
}

/* A kernel is found when its name, NUL-terminated, is in the image (the
 * cubin's string table; PTX names it after .entry). */
CUresult fake_cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
  FAKE_BEGIN(true);
  if (!fake_module_ok(m)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  size_t len = strlen(name);
  if (len >= sizeof ((struct CUfunc_st *)0)->name) return fake_leave(CUDA_ERROR_NOT_FOUND);
  if (!memmem(m->image, m->size, name, len + 1) && !memmem(m->image, m->size, name, len))
    return fake_leave(CUDA_ERROR_NOT_FOUND);
  struct CUfunc_st *f = calloc(1, sizeof *f);
  if (!f) return fake_leave(CUDA_ERROR_OUT_OF_MEMORY);
  f->module = m;
  memcpy(f->name, name, len + 1);
  f->next = fake_functions;
  fake_functions = f;
  *out = f;
  return fake_leave(CUDA_SUCCESS);
}

/* Checks a launch's shape and copies its parameters (kiln's ABI). */
CUresult fake_launch_make(CUfunction f, const unsigned grid[3], const unsigned block[3],
                          unsigned shared, void **params, void **extra, fake_launch *out) {
  if (!fake_function_ok(f)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
  if (!params || extra || threads == 0 || threads > 1024 || grid[0] == 0 || grid[1] == 0 ||
      grid[2] == 0 || grid[1] > 65535 || grid[2] > 65535 || shared > 48 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  *out = (fake_launch){.func = f, .shared = shared};
  memcpy(out->grid, grid, sizeof out->grid);
  memcpy(out->block, block, sizeof out->block);
  memcpy(out->ptr, params[0], sizeof out->ptr);
  memcpy(&out->begin, params[1], sizeof out->begin);
  memcpy(&out->end, params[2], sizeof out->end);
  return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned shared,
                             CUstream s, void **params, void **extra) {
  FAKE_BEGIN(true);
  if (!fake_stream_ok(&s)) return fake_leave(CUDA_ERROR_INVALID_HANDLE);
  if (fake_current_device() != s->device) return fake_leave(CUDA_ERROR_INVALID_CONTEXT);
  fake_op op = {.kind = FAKE_KERNEL, .dst_device = s->device};
  CUresult rc = fake_launch_make(f, (unsigned[]){gx, gy, gz}, (unsigned[]){bx, by, bz}, shared,
                                 params, extra, &op.launch);
  if (rc == CUDA_SUCCESS) rc = fake_enqueue(s, op);
  return fake_leave(rc);
}
