/* The training and test splits of an MNIST-format directory, checked at the
 * door (labels within the declared classes, test images shaped as the
 * training ones), and a fingerprint of their contents for the run file. */
#ifndef KILN_EXAMPLE_TRAIN_DATASET_H
#define KILN_EXAMPLE_TRAIN_DATASET_H

#include <kiln/kiln.h>
#include <stddef.h>

typedef struct dataset {
  kiln_host_data x, y;  /* u8[n, features], u8[n] */
  int64_t height, cols; /* the image shape (features = height * cols) */
  char labels_path[1024];
} dataset;

/* dir/<prefix>-{images-idx3,labels-idx1}-ubyte[.gz]; every label must lie in
 * [0, classes): one outside is KILN_ERR_ARGUMENT naming the file, the index
 * and the label (a label of 200 must not make a 201-class model). */
kiln_status dataset_load(const char *dir, const char *prefix, int classes, dataset *d);
/* The test split must have the training split's image shape. */
kiln_status dataset_check_pair(const dataset *train, const dataset *test);
/* "<n>x<h>x<w> fnv1a64:<hex of images and labels>". */
void dataset_fingerprint(const dataset *d, char *buf, size_t cap);
void dataset_free(dataset *d);

#endif
