/* Compiled with -std=c11 -pedantic -Werror: the umbrella header and every
 * area header must be clean C11, and the library must link from plain C. */
#include <kiln/kiln.h>
#include <kiln/array.h>
#include <kiln/config.h>
#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/interop.h>
#include <kiln/status.h>
#include <kiln/tree.h>
#include <kiln/trace.h>
#include <kiln/jit.h>
#include <kiln/numpy.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  kiln_options o;
  kiln_ctx *ctx = NULL;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  if (kiln_ctx_new(&o, &ctx) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  int ok = kiln_device_count(ctx) == 1 && strcmp(kiln_dtype_name(KILN_BF16), "bfloat16") == 0 &&
           KILN_MAX_RANK == 8 && strlen(kiln_version()) > 0;
  kiln_ctx_free(ctx);
  return ok ? 0 : 1;
}
