/* train: the main job, on one device or data-parallel (--devices N).
 * Trains a CNN (conv 32, conv 64, dense 256; --model mlp: an MLP) on
 * Fashion-MNIST (or any MNIST-format directory) with adam; writes run.json,
 * metrics.jsonl and checkpoints (every --checkpoint-every steps, each
 * epoch's end, and on SIGTERM/SIGINT) into the out dir; --resume continues
 * from the newest checkpoint.
 *
 *   ./train --epochs 10 --out train-out
 *   python3 examples/train/plot.py train-out/metrics.jsonl train-out/curves.png
 *
 * Exit codes: 0 trained, or stopped by SIGTERM/SIGINT with a checkpoint
 * saved; 1 an error (I/O, data that fails its checks, kiln); 2 a bad flag
 * or value; 3 diverged (a non-finite loss or gradient norm; that state is
 * not saved); 4 the out dir refused (a previous run without --resume or
 * --overwrite, --resume with nothing to resume, settings that differ from
 * the run's). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

enum { EXIT_ERROR = 1, EXIT_USAGE = 2, EXIT_DIVERGED = 3, EXIT_REFUSED = 4 };

static void usage(FILE *f) {
  train_config d = train_default_config();
  fprintf(f,
          "usage: train [options]\n"
          "  --data DIR        MNIST-format directory (default %s)\n"
          "  --out DIR         run.json, metrics.jsonl, checkpoints (default %s)\n"
          "  --epochs N        (default %d)\n"
          "  --batch-size N    (default %lld)\n"
          "  --lr X            adam's learning rate, > 0 and finite in f32 (default %g)\n"
          "  --cosine          decay it to 0 over the epochs (cosine)\n"
          "  --seed N          PRNG seed: init and shuffling (default %u)\n"
          "  --classes N       labels must lie in [0, N) (default %d, Fashion-MNIST's)\n"
          "  --model cnn|mlp   conv 32, conv 64, dense 256 (default), or an MLP 512, 256\n"
          "  --conv A,B,...    the CNN's conv features (3x3, relu, 2x2 average pool)\n"
          "  --hidden A,B,...  hidden dense widths\n"
          "  --max-steps N     stop at global step N\n"
          "  --log-every N     a metrics line every N steps (default %lld)\n"
          "  --checkpoint-every N    a checkpoint every N steps, 0: epoch ends only\n"
          "                    (default %lld); also at each epoch's end, the run's end\n"
          "                    and on SIGTERM/SIGINT (finish the step, save, exit 0)\n"
          "  --checkpoint-minutes M  also one when M minutes passed since the last\n"
          "  --keep K          keep the newest K checkpoints (default %d)\n"
          "  --resume          continue from the out dir's newest checkpoint (an error\n"
          "                    if there is none); the settings must match its run.json\n"
          "  --resume=auto     resume if there is a checkpoint, else start afresh\n"
          "  --overwrite       replace a previous run in the out dir\n"
          "  --devices N       data-parallel over N devices (CPU: N virtual devices;\n"
          "                    the batch size must be a multiple of N; default: every\n"
          "                    device of the context, on CPU KILN_NUM_CPU_DEVICES or 2)\n"
          "  --prefetch N      batches uploaded ahead of the step (1-8, default 2)\n"
          "  --quiet           no progress output\n"
          "exit codes: 0 done or stopped by a signal (checkpoint saved), 1 error,\n"
          "  2 bad flag, 3 diverged (non-finite loss or gradient norm), 4 out dir refused\n",
          d.data_dir, d.out_dir, d.epochs, (long long)d.batch_size, d.learning_rate, d.seed,
          d.classes, (long long)d.log_every, (long long)d.checkpoint_every, d.keep);
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* A finite number in [lo, hi] (lo excluded when open). */
static int parse_real(const char *s, double lo, int open, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || (open && v == lo) || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* "A,B,..." into *n widths ("" gives none). */
static int parse_widths(const char *s, int *n, int64_t *widths) {
  *n = 0;
  while (*s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 1 || v > (1 << 20) || *n == TRAIN_MAX_LAYERS) return -1;
    widths[(*n)++] = v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return 0;
}

/* SIGTERM (a scheduler's preemption) and SIGINT: the handler only records
 * the signal; the run finishes its step, saves and returns. A second one
 * while saving changes nothing (the save is atomic). */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

static int install_stop_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sa.sa_flags = SA_RESTART; /* system calls in progress go on */
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL) ? -1 : 0;
}

int main(int argc, char **argv) {
  /* Keep freed buffers (tens of MB each) in the main heap rather than
   * returned with munmap. The per-step page faults this was meant for came
   * from the device threads' own glibc heaps, which this does not cover;
   * kiln now reuses an executable's arena and the device's released
   * blocks itself. Kept for the host-side buffers of loading and
   * evaluation (not measured without it). */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (install_stop_handlers()) { /* first: a stop asked for at any time is honoured */
    perror("train: sigaction");
    return EXIT_ERROR;
  }
  train_config c = train_default_config();
  train_use_cnn(&c);
  c.devices = 0; /* every device of the context, as flax examples use jax.devices() */
  int n_hidden = -1, n_conv = -1; /* --hidden, --conv: applied after --model */
  int64_t hidden[TRAIN_MAX_LAYERS], conv[TRAIN_MAX_LAYERS];
  for (int i = 1; i < argc; i++) {
    char flag[64];
    const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '='), *v;
    int inline_value = eq && eq - a < (int)sizeof flag;
    if (inline_value) { /* --flag=value */
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
      a = flag, v = eq + 1;
    } else {
      v = i + 1 < argc ? argv[i + 1] : NULL;
    }
    long long n = 0;
    const char *need = "a valid value";
    int bad = 0, takes = !inline_value;
    if (!strcmp(a, "--resume") && inline_value)
      bad = strcmp(v, "auto"), c.resume = TRAIN_RESUME_AUTO, need = "'auto' after '='";
    else if (!strcmp(a, "--resume"))
      c.resume = TRAIN_RESUME, takes = 0;
    else if (!strcmp(a, "--overwrite") && !inline_value)
      c.overwrite = 1, takes = 0;
    else if (!strcmp(a, "--quiet") && !inline_value)
      c.quiet = 1, takes = 0;
    else if (!strcmp(a, "--cosine") && !inline_value)
      c.cosine = 1, takes = 0;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
      return usage(stdout), 0;
    else if (!v)
      bad = 1;
    else if (!strcmp(a, "--data"))
      c.data_dir = v, bad = !*v, need = "a directory";
    else if (!strcmp(a, "--out"))
      c.out_dir = v, bad = !*v, need = "a directory";
    else if (!strcmp(a, "--epochs"))
      bad = parse_int(v, 1, 1000000, &n), c.epochs = (int)n, need = "an integer in [1, 1000000]";
    else if (!strcmp(a, "--batch-size"))
      bad = parse_int(v, 1, 1 << 24, &n), c.batch_size = n, need = "an integer in [1, 16777216]";
    else if (!strcmp(a, "--seed"))
      bad = parse_int(v, 0, 0xffffffffLL, &n), c.seed = (uint32_t)n,
      need = "an integer in [0, 4294967295]";
    else if (!strcmp(a, "--classes"))
      bad = parse_int(v, 2, 256, &n), c.classes = (int)n,
      need = "an integer in [2, 256] (u8 labels)";
    else if (!strcmp(a, "--max-steps"))
      bad = parse_int(v, 1, 1LL << 50, &n), c.max_steps = n, need = "an integer >= 1";
    else if (!strcmp(a, "--log-every"))
      bad = parse_int(v, 1, 1LL << 50, &n), c.log_every = n, need = "an integer >= 1";
    else if (!strcmp(a, "--checkpoint-every"))
      bad = parse_int(v, 0, 1LL << 50, &n), c.checkpoint_every = n,
      need = "an integer >= 0 (0: epoch ends only)";
    else if (!strcmp(a, "--checkpoint-minutes"))
      bad = parse_real(v, 0, 0, 1e6, &c.checkpoint_minutes),
      need = "a finite number of minutes in [0, 1e6] (0: no time limit)";
    else if (!strcmp(a, "--keep"))
      bad = parse_int(v, 1, 1000000, &n), c.keep = (int)n, need = "an integer >= 1";
    else if (!strcmp(a, "--devices"))
      bad = parse_int(v, 1, 1024, &n), c.devices = (int)n, need = "an integer in [1, 1024]";
    else if (!strcmp(a, "--prefetch"))
      bad = parse_int(v, 1, 8, &n), c.prefetch = (int)n, need = "an integer in [1, 8]";
    else if (!strcmp(a, "--model") && !strcmp(v, "cnn"))
      train_use_cnn(&c);
    else if (!strcmp(a, "--model") && !strcmp(v, "mlp")) {
      train_config d = train_default_config();
      c.n_conv = 0, c.n_hidden = d.n_hidden;
      memcpy(c.hidden, d.hidden, sizeof c.hidden);
    } else if (!strcmp(a, "--model"))
      bad = 1, need = "cnn or mlp";
    else if (!strcmp(a, "--conv"))
      bad = parse_widths(v, &n_conv, conv), need = "widths A,B,... (at most 8, each >= 1)";
    else if (!strcmp(a, "--hidden"))
      bad = parse_widths(v, &n_hidden, hidden), need = "widths A,B,... (at most 8, each >= 1)";
    else if (!strcmp(a, "--lr"))
      bad = parse_real(v, 0, 1, FLT_MAX, &c.learning_rate),
      need = "a number > 0 and finite in f32, the update's dtype (at most 3.4e38)";
    else {
      fprintf(stderr, "train: unknown option %s\n", argv[i]);
      usage(stderr);
      return EXIT_USAGE;
    }
    if (bad) {
      fprintf(stderr, "train: %s needs %s%s%s%s\n", a, need, v ? ", not '" : "", v ? v : "",
              v ? "'" : "");
      return EXIT_USAGE;
    }
    i += takes;
  }
  if (c.overwrite && c.resume) {
    fprintf(stderr, "train: --overwrite and --resume exclude each other\n");
    return EXIT_USAGE;
  }
  if (n_hidden >= 0) {
    c.n_hidden = n_hidden;
    memcpy(c.hidden, hidden, sizeof hidden);
  }
  if (n_conv >= 0) {
    c.n_conv = n_conv;
    memcpy(c.conv, conv, sizeof conv);
  }
  c.stop = &stop_signal;
  train_summary s;
  if (train_run(&c, &s) != KILN_OK) {
    fprintf(stderr, "train: %s\n", train_last_error());
    return s.outcome == TRAIN_DIVERGED ? EXIT_DIVERGED
           : s.outcome == TRAIN_REFUSED ? EXIT_REFUSED
                                        : EXIT_ERROR;
  }
  if (s.outcome == TRAIN_STOPPED) {
    fprintf(stderr,
            "train: %s: stopped after step %lld; checkpoint %s; --resume continues the run\n",
            s.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)s.steps, s.checkpoint);
    return 0;
  }
  printf(
      "done: step %lld, test accuracy %.2f%%, test loss %.4f, %.1f s of steps, %.0f examples/s%s\n",
      (long long)s.steps, 100 * s.test_accuracy, s.test_loss, s.seconds, s.examples_per_s,
      s.resumed_from >= 0 ? " (resumed)" : "");
  return 0;
}
