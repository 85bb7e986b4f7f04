/* kiln_jit_call_arrays: the common case of a jitted function over a flat
 * list of arrays, without building or walking trees by hand. */
#include <stdlib.h>
#include "runtime/runtime.h"

kiln_status kiln_jit_call_arrays(kiln_jit *j, size_t n_in, kiln_array *const *in, size_t n_out,
                                 kiln_array **out) {
  static const char fn[] = "kiln_jit_call_arrays";
  if (!j || (n_in && !in) || (n_out && !out))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: %s is NULL", fn, !j ? "jit" : !in ? "in" : "out");
  for (size_t i = 0; i < n_out; i++) out[i] = NULL;
  kiln_tree *stack[16] = {NULL}, **leaves = n_in <= 16 ? stack : malloc(n_in * sizeof *leaves);
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  size_t made = 0;
  while (made < n_in && (leaves[made] = kiln_tree_array(in[made]))) made++;
  kiln_tree *args = made == n_in ? kiln_tree_tuple(n_in, leaves) : NULL;
  if (!args) {
    for (size_t i = 0; i < made; i++) kiln_tree_free(leaves[i]);
    if (leaves != stack) free(leaves);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: input %zu is not an array", fn, made);
  }
  if (leaves != stack) free(leaves);
  kiln_tree *res = NULL;
  kiln_status st = kiln_jit_call(j, args, &res);
  kiln_tree_free(args);
  if (st) return st;
  kiln_leaf *ol = NULL;
  size_t no = 0;
  st = kiln_tree_flatten(res, NULL, NULL, &ol, &no, NULL);
  kiln_tree_free(res);
  if (st) return st;
  if (no != n_out) {
    kiln_leaves_free(ol, no);
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: the function returned %zu arrays, the caller "
                      "expects %zu", fn, no, n_out);
  }
  for (size_t i = 0; i < no; i++) {
    out[i] = ol[i].u.array;
    kiln_array_retain(out[i]);
  }
  kiln_leaves_free(ol, no);
  return KILN_OK;
}
