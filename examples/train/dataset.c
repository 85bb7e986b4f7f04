/* Loading and checking the data set. */
#include "dataset.h"

#include <stdio.h>
#include <sys/stat.h>

#include "train_internal.h"

void dataset_free(dataset *d) {
  kiln_host_data_free(&d->x);
  kiln_host_data_free(&d->y);
}

/* dir/name.gz, else dir/name. */
static void data_path(const char *dir, const char *name, char *buf, size_t cap) {
  struct stat st;
  snprintf(buf, cap, "%s/%s.gz", dir, name);
  if (stat(buf, &st) != 0) snprintf(buf, cap, "%s/%s", dir, name);
}

kiln_status dataset_load(const char *dir, const char *prefix, int classes, dataset *d) {
  char images[1024], name[64];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  data_path(dir, name, images, sizeof images);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  data_path(dir, name, d->labels_path, sizeof d->labels_path);
  const char *labels = d->labels_path;
  kiln_status s;
  if ((s = kiln_load_idx(images, &d->x))) return train_fail(s, "loading %s", images);
  if ((s = kiln_load_idx(labels, &d->y))) return train_fail(s, "loading %s", labels);
  if (d->x.dtype != KILN_U8 || d->x.rank < 2 || d->y.dtype != KILN_U8 || d->y.rank != 1 ||
      d->x.shape[0] != d->y.shape[0]) {
    kiln_clear_error();
    return train_fail(KILN_ERR_SHAPE,
                      "%s and %s: expected u8 images [n, ...] and u8 labels [n], got rank %d and "
                      "%d with %lld and %lld examples",
                      images, labels, d->x.rank, d->y.rank, (long long)d->x.shape[0],
                      (long long)d->y.shape[0]);
  }
  const uint8_t *y = d->y.data;
  for (int64_t i = 0; i < d->y.shape[0]; i++)
    if (y[i] >= classes) {
      kiln_clear_error();
      return train_fail(KILN_ERR_ARGUMENT,
                        "%s: label %d at index %lld is outside [0, %d) (--classes %d)", labels,
                        y[i], (long long)i, classes, classes);
    }
  int64_t features = 1; /* images as rows of pixels */
  for (int i = 1; i < d->x.rank; i++) features *= d->x.shape[i];
  d->height = d->x.rank == 3 ? d->x.shape[1] : features;
  d->cols = d->x.rank == 3 ? d->x.shape[2] : 1;
  d->x.rank = 2;
  d->x.shape[1] = features;
  return KILN_OK;
}

kiln_status dataset_check_pair(const dataset *train, const dataset *test) {
  if (train->height == test->height && train->cols == test->cols) return KILN_OK;
  kiln_clear_error();
  return train_fail(KILN_ERR_SHAPE,
                    "the test images are %lld x %lld, the training images %lld x %lld",
                    (long long)test->height, (long long)test->cols, (long long)train->height,
                    (long long)train->cols);
}

/* FNV-1a, 64 bits: any changed byte changes it (not a cryptographic hash;
 * it tells a re-generated or different data set from the recorded one). */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void dataset_fingerprint(const dataset *d, char *buf, size_t cap) {
  uint64_t h = fnv1a(0xcbf29ce484222325ull, d->x.data, d->x.nbytes);
  h = fnv1a(h, d->y.data, d->y.nbytes);
  snprintf(buf, cap, "%lldx%lldx%lld fnv1a64:%016llx", (long long)d->x.shape[0],
           (long long)d->height, (long long)d->cols, (unsigned long long)h);
}
