/* quickstart: list the devices, build a pytree of arrays, move it from one
 * device to another, and print it.
 *
 *   KILN_NUM_CPU_DEVICES=2 ./quickstart
 */
#include <kiln/kiln.h>
#include <stdio.h>
#include <stdlib.h>

/* A kiln_tree_map callback: the leaf copied to the device in `user`. */
static kiln_status put_leaf(const kiln_leaf *const *leaves, size_t n, void *user, kiln_leaf *out) {
  (void)n;
  out->kind = KILN_LEAF_ARRAY;
  return kiln_device_put(leaves[0]->u.array, (kiln_device *)user, &out->u.array);
}

static kiln_tree *array_leaf(kiln_device *dev, kiln_dtype dtype, int rank, const int64_t *shape,
                             const void *data, size_t nbytes) {
  kiln_array *a = NULL;
  if (kiln_array_from_host(dev, dtype, rank, shape, data, nbytes, &a) != KILN_OK) return NULL;
  kiln_tree *leaf = kiln_tree_array(a); /* the tree takes its own reference */
  kiln_array_release(a);
  return leaf;
}

static void print_devices(kiln_ctx *ctx) {
  printf("backend %s, %d device(s)\n", kiln_backend_name(kiln_ctx_backend(ctx)),
         kiln_device_count(ctx));
  for (int i = 0; i < kiln_device_count(ctx); i++) {
    kiln_device *d;
    kiln_device_info info;
    kiln_device_get(ctx, i, &d);
    kiln_device_info_get(d, &info);
    if (info.platform == KILN_BACKEND_CUDA)
      printf("  [%d] %-24s sm_%d%d  %d SMs  %.1f GiB\n", i, info.name, info.compute_major,
             info.compute_minor, info.multiprocessors, (double)info.total_memory / (1 << 30));
    else
      printf("  [%d] %-24s %d cores  %.1f GiB\n", i, info.name, info.multiprocessors,
             (double)info.total_memory / (1 << 30));
  }
}

/* Prints "  [0, 1, ...]" for small f32/i32 arrays, after waiting for them. */
static void print_values(const kiln_array *a) {
  double v[8];
  int64_t n = kiln_array_size(a);
  if (n > 8) return;
  if (kiln_array_dtype(a) == KILN_F32) {
    float f[8];
    if (kiln_array_to_host(a, f, kiln_array_nbytes(a))) return;
    for (int64_t i = 0; i < n; i++) v[i] = f[i];
  } else if (kiln_array_dtype(a) == KILN_I32) {
    int32_t k[8];
    if (kiln_array_to_host(a, k, kiln_array_nbytes(a))) return;
    for (int64_t i = 0; i < n; i++) v[i] = k[i];
  } else {
    return;
  }
  printf(" =");
  for (int64_t i = 0; i < n; i++) printf(" %g", v[i]);
}

static void print_tree(const char *title, const kiln_tree *t) {
  char buf[512];
  kiln_tree_str(t, buf, sizeof buf);
  printf("%s: %s\n", title, buf);
  kiln_path *paths = NULL;
  kiln_leaf *leaves = NULL;
  size_t n = 0;
  if (kiln_tree_leaf_paths(t, &paths, &n) == KILN_OK &&
      kiln_tree_flatten(t, NULL, NULL, &leaves, &n, NULL) == KILN_OK) {
    for (size_t i = 0; i < n; i++) {
      char path[128], desc[128];
      kiln_path_str(&paths[i], path, sizeof path);
      kiln_array_describe(leaves[i].u.array, desc, sizeof desc);
      printf("  %-18s %s", path, desc);
      print_values(leaves[i].u.array);
      printf("\n");
    }
  }
  kiln_leaves_free(leaves, n);
  kiln_paths_free(paths, n);
}

int main(void) {
  kiln_ctx *ctx = NULL;
  kiln_tree *params = NULL, *moved = NULL;
  int rc = 1;
  if (kiln_ctx_new(NULL, &ctx) != KILN_OK) goto done;
  print_devices(ctx);

  kiln_device *src, *dst;
  kiln_device_get(ctx, 0, &src);
  kiln_device_get(ctx, kiln_device_count(ctx) - 1, &dst);

  float w[2][3] = {{1, 2, 3}, {4, 5, 6}}, b[3] = {0.5f, -0.5f, 0};
  int32_t step = 7;
  const int64_t w_shape[] = {2, 3}, b_shape[] = {3};
  params = kiln_tree_dict(
      2, (const char *[]){"params", "step"},
      (kiln_tree *[]){
          kiln_tree_dict(2, (const char *[]){"w", "b"},
                         (kiln_tree *[]){
                             array_leaf(src, KILN_F32, 2, w_shape, w, sizeof w),
                             array_leaf(src, KILN_F32, 1, b_shape, b, sizeof b),
                         }),
          array_leaf(src, KILN_I32, 0, NULL, &step, sizeof step),
      });
  if (!params) goto done;
  print_tree("on the first device", params);

  const kiln_tree *trees[] = {params};
  if (kiln_tree_map(put_leaf, dst, 1, trees, &moved) != KILN_OK) goto done;
  print_tree("on the last device", moved);

  rc = 0;
done:
  if (rc) fprintf(stderr, "quickstart: %s\n", kiln_last_error());
  kiln_tree_free(moved);
  kiln_tree_free(params);
  kiln_ctx_free(ctx);
  return rc;
}
