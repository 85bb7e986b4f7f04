/* Lookup of the kernels/ files that cmake/KilnEmbed.cmake compiled in. */
#include "codegen/codegen.h"

const char *kcg_embedded_source(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < kcg_num_embedded_files; i++)
    if (strcmp(kcg_embedded_files[i].name, name) == 0) return kcg_embedded_files[i].text;
  return NULL;
}
