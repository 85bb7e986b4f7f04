/* The benchmarks' functions and arguments (see cases.h). */
#include "cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_cases.h"

static kiln_val *kbench_arg(const kiln_tree *args, size_t i) {
  return kiln_tree_leaf_get(kiln_tree_child(args, i))->u.val;
}

kiln_tree *kbench_chain(kiln_trace *t, const kiln_tree *args, void *user) {
  int n = *(const int *)user;
  kiln_val *x = kbench_arg(args, 0);
  for (int i = 0; i < n / 2; i++)
    x = kiln_add(t, kiln_mul(t, x, kiln_scalar_f(t, 1.0001)), kiln_scalar_f(t, 0.5));
  return kiln_tree_val(x);
}

static kiln_tree *kbench_broadcast(kiln_trace *t, const kiln_tree *a, void *u) {
  (void)u;
  kiln_val *x = kbench_arg(a, 0), *y = kbench_arg(a, 1), *z = kbench_arg(a, 2);
  return kiln_tree_val(kiln_sub(t, kiln_mul(t, kiln_add(t, x, y), z), x));
}

/* softmax and layernorm are the functions the jit tests check against
 * jax.jit (tests/support/jit_cases.c), so the benchmarks time verified code. */
static kiln_fn kbench_verified(const char *name) {
  for (const jit_case *c = kJitCases; c->name; c++)
    if (strcmp(c->name, name) == 0) return c->fn;
  return NULL;
}

int kbench_fusion_cases(double scale, kbench_case *out) {
  static int eight = 8;
  int64_t n = (int64_t)((double)KBENCH_FUSION_ELEMENTS * scale);
  if (n < 1) n = 1;
  int64_t s = (int64_t)sqrt((double)n);
  int nc = 0;
  out[nc++] = (kbench_case){"chain8_f32", kbench_chain, &eight, KBENCH_ELEMENTWISE, KILN_F32, 1,
                            {1}, {{n}}, n};
  out[nc++] = (kbench_case){"broadcast_f32", kbench_broadcast, NULL, KBENCH_ELEMENTWISE, KILN_F32,
                            3, {2, 2, 1}, {{s, 1}, {1, s}, {s}}, s * s};
  const char *fns[2] = {"softmax", "layernorm"};
  const kiln_dtype dtypes[2] = {KILN_F32, KILN_BF16};
  for (int64_t len = 1024; len <= 8192; len *= 2)
    for (int d = 0; d < 2; d++)
      for (int f = 0; f < 2; f++) {
        int64_t rows = n / len > 0 ? n / len : 1;
        kbench_case *c = &out[nc++];
        *c = (kbench_case){"", kbench_verified(fns[f]), NULL, KBENCH_ROW, dtypes[d], 1, {2},
                           {{rows, len}}, rows * len};
        snprintf(c->name, sizeof c->name, "%s_%lld_%s", fns[f], (long long)len,
                 kiln_dtype_short_name(dtypes[d]));
      }
  return nc;
}

bool kbench_fusion_case(double scale, const char *name, kbench_case *out) {
  kbench_case all[KBENCH_MAX_FUSION_CASES];
  int n = kbench_fusion_cases(scale, all);
  for (int i = 0; i < n; i++)
    if (strcmp(all[i].name, name) == 0) {
      *out = all[i];
      return true;
    }
  return false;
}

static int64_t kbench_elements(const kbench_case *c, int i) {
  int64_t n = 1;
  for (int d = 0; d < c->rank[i]; d++) n *= c->shape[i][d];
  return n;
}

/* One input array with the values bench/jax_reference.py generates. */
static kiln_status kbench_input(kiln_device *dev, const kbench_case *c, int i, kiln_array **out) {
  int64_t n = kbench_elements(c, i);
  size_t es = kiln_dtype_size(c->dtype);
  unsigned char *data = malloc((size_t)n * es);
  if (!data)
    return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "%s: no host memory for input %d (%lld elements)",
                      c->name, i, (long long)n);
  for (int64_t k = 0; k < n; k++) {
    float v = (float)((k * 2654435761u) % 1000) / 500.0f - 1.0f;
    if (c->dtype == KILN_BF16) {
      uint16_t b = kiln_f32_to_bf16(v);
      memcpy(data + k * 2, &b, 2);
    } else {
      memcpy(data + k * 4, &v, 4);
    }
  }
  kiln_status st =
      kiln_array_from_host(dev, c->dtype, c->rank[i], c->shape[i], data, (size_t)n * es, out);
  free(data);
  return st;
}

kiln_status kbench_case_args(kiln_device *dev, const kbench_case *c, kiln_tree **out) {
  kiln_tree *leaves[KBENCH_MAX_INPUTS] = {NULL, NULL, NULL};
  kiln_status st = KILN_OK;
  *out = NULL;
  for (int i = 0; i < c->n_in && !st; i++) {
    kiln_array *a = NULL;
    st = kbench_input(dev, c, i, &a);
    if (!st && !(leaves[i] = kiln_tree_array(a)))
      st = kiln_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
    kiln_array_release(a);
  }
  if (st) {
    for (int i = 0; i < c->n_in; i++) kiln_tree_free(leaves[i]);
    return st;
  }
  /* The tuple takes the leaves, and drops them if it fails. */
  if (!(*out = kiln_tree_tuple((size_t)c->n_in, leaves)))
    return kiln_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", c->name);
  return KILN_OK;
}

double kbench_case_bytes(const kbench_case *c) {
  double elements = (double)c->out_elements;
  for (int i = 0; i < c->n_in; i++) elements += (double)kbench_elements(c, i);
  return elements * (double)kiln_dtype_size(c->dtype);
}
