/* The out dir's checkpoints, a rotating checkpoint directory of the
 * library's (kiln_checkpoint_save_step): checkpoint_<step>.safetensors, the
 * newest `keep` of them kept, and "latest", naming the newest, replaced
 * atomically after each save. A checkpoint is the tree {"key", "opt_state",
 * "params", "step", "time", "window"} (train_state); its metadata's
 * "train.run" holds the record of the run that saved it, as run.json holds
 * it (so a checkpoint copied elsewhere still says how it was trained). */
#ifndef KILN_EXAMPLE_TRAIN_CHECKPOINTS_H
#define KILN_EXAMPLE_TRAIN_CHECKPOINTS_H

#include <kiln/kiln.h>
#include <stddef.h>

#include "train_internal.h"

#define CKPT_POINTER "latest" /* the library's pointer file */
#define CKPT_RUN_KEY "train.run"

/* Saves st as dir's checkpoint of st->step (replicated state, with a leading
 * device axis, as its first device's copy: flax's unreplicate), points
 * "latest" at it, and removes the checkpoints of later steps (a run resumed
 * from an earlier one redoes them) and all but the newest `keep`. run_json
 * goes to its metadata (CKPT_RUN_KEY). The file's path goes to path. */
kiln_status ckpt_save(const char *dir, int keep, kiln_device *dev, const train_state *st,
                      int replicated, const char *run_json, char *path, size_t cap);

/* Restores into st (whose params and opt_state give the expected structure)
 * the checkpoint kiln_checkpoint_latest picks ("latest"'s, or the newest
 * intact one) or, when that one does not restore into st (another model, a
 * step other than its name's), the newest older one that does (a warning on
 * stderr says which were passed over and why). *found 0 with KILN_OK: dir
 * holds no checkpoint. One or more checkpoints of which none restores is an
 * error naming the dir. */
kiln_status ckpt_restore(const char *dir, kiln_device *dev, train_state *st, int *found,
                         char *path, size_t cap);

/* The steps of dir's checkpoint files, newest first, in a new array (free
 * it; NULL when there are none), their count in *n: kiln_checkpoint_all_steps,
 * with a dir that cannot be read holding none. */
int64_t *ckpt_list(const char *dir, size_t *n);

#endif
