// The same headers from C++: extern "C" linkage and no C-only constructs.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstring>

int main() {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *ctx = nullptr;
  if (kiln_ctx_new(&o, &ctx) != KILN_OK) {
    std::fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  kiln_leaf leaf{};
  leaf.kind = KILN_LEAF_PTR;
  bool ok = kiln_device_count(ctx) == 1 && std::strcmp(kiln_status_str(KILN_OK), "KILN_OK") == 0 &&
            leaf.u.ptr == nullptr;
  kiln_ctx_free(ctx);
  return ok ? 0 : 1;
}
