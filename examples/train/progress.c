/* Progress bar and periodic lines. */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_init(progress *p, FILE *out, int epochs, int64_t steps_per_epoch, int64_t last_step,
                   int64_t batch_size) {
  memset(p, 0, sizeof *p);
  p->out = out;
  p->tty = out && isatty(fileno(out));
  p->epochs = epochs;
  p->steps_per_epoch = steps_per_epoch;
  p->last_step = last_step;
  p->batch_size = batch_size;
}

double progress_examples_per_s(const progress *p) {
  return p->run_seconds > 0 ? (double)(p->run_steps * p->batch_size) / p->run_seconds : 0;
}

static void format_eta(double seconds, char *buf, size_t cap) {
  long s = seconds > 0 && seconds < 1e7 ? (long)(seconds + 0.5) : 0;
  if (s >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    snprintf(buf, cap, "%02ld:%02ld", s / 60, s % 60);
}

/* The plain lines: this often when stdout is a file or a pipe. */
#define PLAIN_EVERY 100

void progress_step(progress *p, int64_t step, double loss, double accuracy) {
  if (!p->out) return;
  double now = progress_now();
  int last = step == p->last_step || step % p->steps_per_epoch == 0;
  if (p->tty ? now - p->last_draw < 0.1 && !last : step % PLAIN_EVERY != 0) return;
  p->last_draw = now;
  double rate = p->run_seconds > 0 ? (double)p->run_steps / p->run_seconds : 0;
  char eta[32];
  format_eta(rate > 0 ? (double)(p->last_step - step) / rate : 0, eta, sizeof eta);
  int64_t epoch = (step - 1) / p->steps_per_epoch + 1,
          in_epoch = step - (epoch - 1) * p->steps_per_epoch;
  if (p->tty) {
    enum { WIDTH = 24 };
    char bar[WIDTH + 1];
    int filled = (int)(WIDTH * in_epoch / p->steps_per_epoch);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(p->out,
            "\r\033[Kepoch %lld/%d [%s] %lld/%lld  loss %.4f  acc %5.1f%%  %.0f ex/s  ETA %s",
            (long long)epoch, p->epochs, bar, (long long)in_epoch, (long long)p->steps_per_epoch,
            loss, 100 * accuracy, progress_examples_per_s(p), eta);
  } else {
    fprintf(p->out,
            "epoch %lld/%d step %lld (%lld/%lld)  loss %.4f  acc %.1f%%  %.0f ex/s  ETA %s\n",
            (long long)epoch, p->epochs, (long long)step, (long long)in_epoch,
            (long long)p->steps_per_epoch, loss, 100 * accuracy, progress_examples_per_s(p), eta);
  }
  fflush(p->out);
}

void progress_eval(progress *p, int64_t step, double test_loss, double test_accuracy) {
  if (!p->out) return;
  double epoch = (double)step / (double)p->steps_per_epoch;
  fprintf(p->out, "%sepoch %.2f (step %lld): test loss %.4f  test accuracy %.2f%%  %.0f ex/s\n",
          p->tty ? "\r\033[K" : "", epoch, (long long)step, test_loss, 100 * test_accuracy,
          progress_examples_per_s(p));
  fflush(p->out);
}
