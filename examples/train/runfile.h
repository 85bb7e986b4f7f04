/* The out dir as a record of one run: run.json, written atomically when the
 * run starts, holds the settings a resumed run must share with it (batch
 * size, seed, learning rate and schedule, model, classes, a fingerprint of
 * the data); what does not change the curve (devices, prefetch, logging,
 * checkpoint cadence, --max-steps, and --epochs without --cosine) is free.
 * Also: what a previous run left in a directory, and clearing it for
 * --overwrite. */
#ifndef KILN_EXAMPLE_TRAIN_RUNFILE_H
#define KILN_EXAMPLE_TRAIN_RUNFILE_H

#include <kiln/kiln.h>
#include <stddef.h>

#include "train.h"

#define RUNFILE_NAME "run.json"
#define RUNFILE_LOCK ".train.lock"
enum { RUNFILE_MAX_FIELDS = 16, RUNFILE_TEXT_MAX = RUNFILE_MAX_FIELDS * 1200 };

typedef struct run_field {
  const char *key;  /* run.json's key */
  const char *flag; /* the flag that sets it */
  int checked;      /* must match on resume */
  char value[1100]; /* as JSON */
} run_field;

typedef struct run_record {
  int n;
  run_field f[RUNFILE_MAX_FIELDS];
} run_record;

/* The record of cfg, whose data's fingerprints (dataset_fingerprint) are
 * train_fp and test_fp. */
void runfile_describe(const train_config *cfg, const char *train_fp, const char *test_fp,
                      run_record *r);
/* r as run.json holds it. */
void runfile_text(const run_record *r, char *text, size_t cap);
kiln_status runfile_write(const char *dir, const run_record *r);
/* Compares dir/run.json with r: the first checked field that differs is
 * KILN_ERR_ARGUMENT naming the flag, both values and the file. *found 0:
 * there is no run.json. A data directory moved with the same contents is
 * noted on stderr, not refused. */
kiln_status runfile_check(const char *dir, const run_record *r, int *found);

/* What a previous run left in dir, e.g. "metrics.jsonl, run.json, 3
 * checkpoints" ("" when nothing). */
void outdir_previous_run(const char *dir, char *buf, size_t cap);
/* Removes what outdir_previous_run reports, and leftover temporary files. */
kiln_status outdir_clear(const char *dir);

/* Creates cfg's out dir, locks it (*lock_fd: close it when the run ends;
 * a dir another train holds is refused) and removes what a killed run left
 * as temporary files; then holds what it contains against what was asked:
 * a previous run is resumed (*resuming: it holds a checkpoint and cfg
 * resumes), replaced (--overwrite, or --resume=auto over a run that saved
 * no checkpoint: its files are removed) or refused; --resume with no
 * checkpoint is refused, naming the dir. Refusals set sum->outcome to
 * TRAIN_REFUSED. */
kiln_status outdir_prepare(const train_config *cfg, train_summary *sum, int *resuming,
                           int *lock_fd);
/* run.json: written for a run that does not resume; compared with cfg's
 * settings for one that does (a difference, or checkpoints without a
 * run.json, is refused). text: this run's record, as run.json holds it
 * (cap RUNFILE_TEXT_MAX). */
kiln_status runfile_settle(const train_config *cfg, int resuming, const char *train_fp,
                           const char *test_fp, train_summary *sum, char *text, size_t cap);

#endif
