/* The main job, on one device or data-parallel: a CNN or an MLP trained on
 * an MNIST-format data set (Fashion-MNIST by default) with adam; checkpoints
 * every N steps, at each epoch's end and when asked to stop; metrics as JSON
 * lines. main.c parses the flags; the tests drive train_run directly and
 * the built binary from outside. Public kiln headers only. */
#ifndef KILN_EXAMPLE_TRAIN_H
#define KILN_EXAMPLE_TRAIN_H

#include <kiln/kiln.h>
#include <signal.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_MAX_LAYERS 8

typedef struct train_config {
  const char *data_dir; /* train-/t10k-{images-idx3,labels-idx1}-ubyte[.gz] */
  const char *out_dir;  /* run.json, metrics.jsonl, checkpoint_<step>.safetensors,
                           latest (created) */
  int epochs;
  int64_t batch_size;
  double learning_rate;
  int cosine; /* decay it to 0 over `epochs` with a cosine (optax.cosine_decay_schedule) */
  uint32_t seed;
  int64_t max_steps; /* stop at this global step (<= 0: no limit) */
  /* TRAIN_FRESH: an out dir holding a previous run is refused unless
   * `overwrite` (which removes its files); TRAIN_RESUME: continue from its
   * newest checkpoint (none is an error), its run.json must match;
   * TRAIN_RESUME_AUTO: resume when there is a checkpoint, else start. */
  int resume;
  int overwrite;
  int64_t log_every; /* a metrics line every this many steps */
  int classes;       /* labels must lie in [0, classes) */
  /* A checkpoint every this many steps (0: none but at epoch ends, the run's
   * end and a stop), and when this many minutes passed since the last one
   * (0: no time limit); the newest `keep` checkpoints are kept. */
  int64_t checkpoint_every;
  double checkpoint_minutes;
  int keep;
  /* Checked after each step: nonzero (the signal's number) finishes the
   * step, saves a checkpoint and returns with outcome TRAIN_STOPPED. main.c
   * points it at its SIGTERM/SIGINT flag. */
  const volatile sig_atomic_t *stop;
  int n_conv;        /* a CNN: 3x3 convs of these features, each relu and 2x2
                        average pool, before the dense layers (0: an MLP) */
  int64_t conv[TRAIN_MAX_LAYERS];
  int n_hidden;      /* hidden dense layer widths */
  int64_t hidden[TRAIN_MAX_LAYERS];
  int quiet; /* no progress output */
  /* Data-parallel over the context's first `devices` devices (1: the
   * one-device step); on CPU the context gets that many virtual devices.
   * 0: every device of the context (all GPUs; on CPU KILN_NUM_CPU_DEVICES
   * devices, 2 when it is unset). batch_size must be a multiple of it. */
  int devices;
  int check_replicas; /* measure train_summary.replica_spread each step */
  /* Batches uploaded ahead of the step by kiln_prefetch (flax's
   * prefetch_to_device size; 0: its default, 2). */
  int prefetch;
} train_config;

enum { TRAIN_FRESH = 0, TRAIN_RESUME = 1, TRAIN_RESUME_AUTO = 2 };

/* The MLP 784-512-256-10, batch 128, adam 1e-3, 10 epochs, seed 0, 10
 * classes, data in /usr/share/datasets/fashion-mnist, out dir "train-out",
 * a checkpoint every 100 steps, 3 kept. */
train_config train_default_config(void);
/* Makes c the main job's CNN: conv 32, conv 64, dense 256, classes. */
void train_use_cnn(train_config *c);

typedef enum train_outcome {
  TRAIN_FINISHED, /* trained to the last step */
  TRAIN_STOPPED,  /* *cfg->stop: stopped after a step, its checkpoint saved */
  TRAIN_FAILED,   /* an error (I/O, kiln, data that fails its checks) */
  TRAIN_DIVERGED, /* a non-finite loss or gradient norm: stopped, that state not saved */
  TRAIN_REFUSED   /* the out dir: a previous run, nothing to resume, other settings */
} train_outcome;

typedef struct train_summary {
  train_outcome outcome;
  int stop_signal;      /* TRAIN_STOPPED: *cfg->stop's value */
  int64_t steps;        /* global step reached */
  int64_t resumed_from; /* the checkpoint's step, or -1 */
  double test_accuracy; /* of the last evaluation */
  double test_loss;
  double seconds;        /* training (steps only) in this run */
  double examples_per_s; /* over this run's steps */
  double replica_spread; /* check_replicas: the largest difference of a
                            parameter between two devices after any step */
  int devices;           /* the devices the run was data-parallel over */
  int64_t checkpoint_step; /* the step of the newest checkpoint, -1 if none */
  char checkpoint[1100];   /* its path */
} train_summary;

/* Trains as configured; a failure returns its status with kiln_last_error()
 * describing it (the file, the op, the shapes) in train_last_error().
 * summary may be NULL. Not thread safe (one run at a time). */
kiln_status train_run(const train_config *cfg, train_summary *summary);
/* What the last failing train_run said went wrong ("" if nothing). */
const char *train_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
