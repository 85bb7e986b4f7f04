/* A tiny program built against an installed kiln. */
#include <kiln/kiln.h>
#include <stdio.h>

int main(void) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.num_cpu_devices = 2;
  kiln_ctx *ctx = NULL;
  kiln_device *d1 = NULL;
  kiln_array *a = NULL, *b = NULL;
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  const int64_t shape[1] = {4};
  int rc = 1;
  if (kiln_ctx_new(&o, &ctx) || kiln_device_get(ctx, 1, &d1)) goto done;
  if (kiln_array_from_host(d1, KILN_F32, 1, shape, in, sizeof in, &a)) goto done;
  if (kiln_array_to_host(a, out, sizeof out)) goto done;
  rc = out[3] == 4.0f ? 0 : 1;
  printf("kiln %s: consumer ok (%s)\n", kiln_version(), rc ? "wrong data" : "data round-tripped");
done:
  if (rc && kiln_last_error()[0]) fprintf(stderr, "%s\n", kiln_last_error());
  kiln_array_release(b);
  kiln_array_release(a);
  kiln_ctx_free(ctx);
  return rc;
}
