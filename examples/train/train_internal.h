/* What the trainer's files share: the error recorder behind
 * train_last_error, the training state a checkpoint holds, and helpers
 * over tree leaves. */
#ifndef KILN_EXAMPLE_TRAIN_INTERNAL_H
#define KILN_EXAMPLE_TRAIN_INTERNAL_H

#include <kiln/kiln.h>
#include <stddef.h>
#include <stdint.h>

/* Records "<what>: <kiln's message>" as train_last_error() and returns s
 * (clear kiln's error first when it is not the cause). */
kiln_status train_fail(kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Metrics since the last metrics line (sums over `steps` steps): saved in
 * the checkpoint so that a resumed run writes the lines an uninterrupted one
 * would have written. */
enum { WINDOW_LOSS, WINDOW_ACCURACY, WINDOW_GRAD_NORM, WINDOW_STEPS, WINDOW_N };

typedef struct train_state {
  kiln_tree *params, *opt_state;
  uint32_t key[2]; /* the key at the start of epoch step / steps_per_epoch */
  int64_t step;
  double time; /* seconds of training before this run */
  double window[WINDOW_N];
} train_state;

/* path <- text: a temporary file in the same directory, fsynced, renamed
 * over path, the directory fsynced (runfile.c). */
kiln_status train_write_atomic(const char *path, const char *text);

kiln_tree *train_host_leaf(kiln_device *dev, const kiln_host_data *d);
kiln_tree *train_key_leaf(kiln_device *dev, const uint32_t key[2]);
kiln_status train_read_leaf(const kiln_tree *t, void *dst, size_t size);

#endif
