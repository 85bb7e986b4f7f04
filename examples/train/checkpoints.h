/* The out dir's checkpoints: checkpoint-<step, 10 digits>.safetensors, the
 * newest `keep` of them kept, and "latest", a one-line file naming the
 * newest, replaced atomically (written to a temporary file, fsynced, renamed
 * over, the directory fsynced) after each save. A checkpoint is the tree
 * {"key", "opt_state", "params", "step", "time", "window"} (train_state),
 * written by kiln_checkpoint_save (itself atomic: a crash mid-save leaves the
 * older files intact). */
#ifndef KILN_EXAMPLE_TRAIN_CHECKPOINTS_H
#define KILN_EXAMPLE_TRAIN_CHECKPOINTS_H

#include <kiln/kiln.h>
#include <stddef.h>

#include "train_internal.h"

#define CKPT_POINTER "latest"

/* Saves st as dir's checkpoint of st->step (replicated state, with a leading
 * device axis, as its first device's copy: flax's unreplicate), points
 * "latest" at it, and removes the checkpoints of later steps (a run resumed
 * from an earlier one redoes them) and all but the newest `keep`. The file's
 * path goes to path. */
kiln_status ckpt_save(const char *dir, int keep, kiln_device *dev, const train_state *st,
                      int replicated, char *path, size_t cap);

/* Restores into st (whose params and opt_state give the expected structure)
 * the checkpoint "latest" names or, when that one is missing or does not
 * restore, the newest that does (a warning on stderr says which was passed
 * over and why). *found 0 with KILN_OK: dir holds no checkpoint. One or
 * more checkpoints of which none restores is an error naming them. */
kiln_status ckpt_restore(const char *dir, kiln_device *dev, train_state *st, int *found,
                         char *path, size_t cap);

/* The steps of dir's checkpoint files, newest first, in a new array (free
 * it; NULL when there are none), their count in *n. */
int64_t *ckpt_list(const char *dir, size_t *n);

#endif
