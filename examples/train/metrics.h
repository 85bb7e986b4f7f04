/* metrics.jsonl: one JSON object a line, flushed as it is written (a kill
 * loses at most the line being written). A value that is not finite is
 * written as null and named in the line's "nonfinite" list, so the file
 * stays JSON. A resumed run appends: the lines of steps past its
 * checkpoint (written by the run that was stopped or killed after it, and
 * about to be written again) are dropped first, by rewriting the file
 * atomically, so that each step has one line and the file reads as one
 * uninterrupted run. */
#ifndef KILN_EXAMPLE_TRAIN_METRICS_H
#define KILN_EXAMPLE_TRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

/* Opens path: created (truncated) when keep_until_step < 0; else the lines
 * past that step and a partial last line are dropped and the file opened
 * for appending. NULL on failure, with errno. */
FILE *metrics_open(const char *path, int64_t keep_until_step);

/* {"step": step, "epoch": epoch, names[i]: values[i]..., "time": time
 * [, "nonfinite": [names of the values that are not finite]]}, flushed.
 * 0, or -1 with errno. */
int metrics_write(FILE *f, int64_t step, double epoch, int n, const char *const *names,
                  const double *values, double time);

#endif
