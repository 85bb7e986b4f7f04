/* train: the main job, on one device or data-parallel (--devices N).
 * Trains a CNN (conv 32, conv 64, dense 256; --model mlp: an MLP) on
 * Fashion-MNIST (or any MNIST-format directory) with adam;
 * writes metrics.jsonl and a checkpoint per epoch into the out dir; --resume
 * continues from the checkpoint.
 *
 *   ./train --epochs 10 --out train-out
 *   python3 examples/train/plot.py train-out/metrics.jsonl train-out/curves.png
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

static void usage(FILE *f) {
  train_config d = train_default_config();
  fprintf(f,
          "usage: train [options]\n"
          "  --data DIR        MNIST-format directory (default %s)\n"
          "  --out DIR         metrics, checkpoint (default %s)\n"
          "  --epochs N        (default %d)\n"
          "  --batch-size N    (default %lld)\n"
          "  --lr X            adam's learning rate (default %g)\n"
          "  --cosine          decay it to 0 over the epochs (cosine)\n"
          "  --seed N          PRNG seed: init and shuffling (default %u)\n"
          "  --model cnn|mlp   conv 32, conv 64, dense 256 (default), or an MLP 512, 256\n"
          "  --conv A,B,...    the CNN's conv features (3x3, relu, 2x2 average pool)\n"
          "  --hidden A,B,...  hidden dense widths\n"
          "  --max-steps N     stop at global step N\n"
          "  --log-every N     a metrics line every N steps (default %lld)\n"
          "  --resume          continue from DIR/checkpoint.safetensors\n"
          "  --devices N       data-parallel over N devices (CPU: N virtual devices;\n"
          "                    the batch size must be a multiple of N; default: every\n"
          "                    device of the context, on CPU KILN_NUM_CPU_DEVICES or 2)\n"
          "  --prefetch N      batches uploaded ahead of the step (1-8, default 2)\n"
          "  --quiet           no progress output\n",
          d.data_dir, d.out_dir, d.epochs, (long long)d.batch_size, d.learning_rate, d.seed,
          (long long)d.log_every);
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
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

int main(int argc, char **argv) {
  /* Keep freed buffers (tens of MB each) in the main heap rather than
   * returned with munmap. The per-step page faults this was meant for came
   * from the device threads' own glibc heaps, which this does not cover;
   * kiln now reuses an executable's arena and the device's released
   * blocks itself. Kept for the host-side buffers of loading and
   * evaluation (not measured without it). */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  train_config c = train_default_config();
  train_use_cnn(&c);
  c.devices = 0; /* every device of the context, as flax examples use jax.devices() */
  int n_hidden = -1, n_conv = -1; /* --hidden, --conv: applied after --model */
  int64_t hidden[TRAIN_MAX_LAYERS], conv[TRAIN_MAX_LAYERS];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long n = 0;
    int bad = 0, takes = 1;
    if (!strcmp(a, "--resume"))
      c.resume = 1, takes = 0;
    else if (!strcmp(a, "--quiet"))
      c.quiet = 1, takes = 0;
    else if (!strcmp(a, "--cosine"))
      c.cosine = 1, takes = 0;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
      return usage(stdout), 0;
    else if (!v)
      bad = 1;
    else if (!strcmp(a, "--data"))
      c.data_dir = v;
    else if (!strcmp(a, "--out"))
      c.out_dir = v;
    else if (!strcmp(a, "--epochs"))
      bad = parse_int(v, 1, 1000000, &n), c.epochs = (int)n;
    else if (!strcmp(a, "--batch-size"))
      bad = parse_int(v, 1, 1 << 24, &n), c.batch_size = n;
    else if (!strcmp(a, "--seed"))
      bad = parse_int(v, 0, 0xffffffffLL, &n), c.seed = (uint32_t)n;
    else if (!strcmp(a, "--max-steps"))
      bad = parse_int(v, 1, 1LL << 50, &n), c.max_steps = n;
    else if (!strcmp(a, "--log-every"))
      bad = parse_int(v, 1, 1LL << 50, &n), c.log_every = n;
    else if (!strcmp(a, "--devices"))
      bad = parse_int(v, 1, 1024, &n), c.devices = (int)n;
    else if (!strcmp(a, "--prefetch"))
      bad = parse_int(v, 1, 8, &n), c.prefetch = (int)n;
    else if (!strcmp(a, "--model") && !strcmp(v, "cnn"))
      train_use_cnn(&c);
    else if (!strcmp(a, "--model") && !strcmp(v, "mlp")) {
      train_config d = train_default_config();
      c.n_conv = 0, c.n_hidden = d.n_hidden;
      memcpy(c.hidden, d.hidden, sizeof c.hidden);
    } else if (!strcmp(a, "--model"))
      bad = 1;
    else if (!strcmp(a, "--conv"))
      bad = parse_widths(v, &n_conv, conv);
    else if (!strcmp(a, "--hidden"))
      bad = parse_widths(v, &n_hidden, hidden);
    else if (!strcmp(a, "--lr")) {
      char *end;
      c.learning_rate = strtod(v, &end);
      bad = end == v || *end || !(c.learning_rate > 0);
    } else {
      fprintf(stderr, "train: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "train: %s needs a valid value%s%s\n", a, v ? ", not " : "", v ? v : "");
      return 2;
    }
    i += takes;
  }
  if (n_hidden >= 0) {
    c.n_hidden = n_hidden;
    memcpy(c.hidden, hidden, sizeof hidden);
  }
  if (n_conv >= 0) {
    c.n_conv = n_conv;
    memcpy(c.conv, conv, sizeof conv);
  }
  train_summary s;
  if (train_run(&c, &s) != KILN_OK) {
    fprintf(stderr, "train: %s\n", train_last_error());
    return 1;
  }
  printf(
      "done: step %lld, test accuracy %.2f%%, test loss %.4f, %.1f s of steps, %.0f examples/s%s\n",
      (long long)s.steps, 100 * s.test_accuracy, s.test_loss, s.seconds, s.examples_per_s,
      s.resumed_from >= 0 ? " (resumed)" : "");
  return 0;
}
