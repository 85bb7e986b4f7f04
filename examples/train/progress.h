/* Progress output: a redrawn bar on a terminal, plain periodic lines
 * otherwise. */
#ifndef KILN_EXAMPLE_TRAIN_PROGRESS_H
#define KILN_EXAMPLE_TRAIN_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

double progress_now(void); /* monotonic seconds */

typedef struct progress {
  FILE *out; /* NULL: quiet */
  int tty;
  int epochs;
  int64_t steps_per_epoch, last_step, batch_size;
  int64_t run_steps;  /* steps taken in this run */
  double run_seconds; /* their time */
  double last_draw;
} progress;

void progress_init(progress *p, FILE *out, int epochs, int64_t steps_per_epoch, int64_t last_step,
                   int64_t batch_size);
/* After each step: the global step just finished (1-based) and its loss and
 * accuracy. */
void progress_step(progress *p, int64_t step, double loss, double accuracy);
/* After an evaluation: ends the bar's line and prints the epoch's summary. */
void progress_eval(progress *p, int64_t step, double test_loss, double test_accuracy);
double progress_examples_per_s(const progress *p);

#endif
