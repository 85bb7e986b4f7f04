/* The main job, on one device or data-parallel: a CNN or an MLP trained on an MNIST-format data set
 * (Fashion-MNIST by default) with adam, checkpoints each epoch, metrics as
 * JSON lines. main.c parses the flags; the test drives train_run directly.
 * Public kiln headers only. */
#ifndef KILN_EXAMPLE_TRAIN_H
#define KILN_EXAMPLE_TRAIN_H

#include <kiln/kiln.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_MAX_LAYERS 8

typedef struct train_config {
  const char *data_dir; /* train-/t10k-{images-idx3,labels-idx1}-ubyte[.gz] */
  const char *out_dir;  /* metrics.jsonl, checkpoint.safetensors (created) */
  int epochs;
  int64_t batch_size;
  double learning_rate;
  int cosine; /* decay it to 0 over `epochs` with a cosine (optax.cosine_decay_schedule) */
  uint32_t seed;
  int64_t max_steps; /* stop at this global step (<= 0: no limit) */
  int resume;        /* continue from out_dir's checkpoint when there is one */
  int64_t log_every; /* a metrics line every this many steps */
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

/* The MLP 784-512-256-10, batch 128, adam 1e-3, 10 epochs, seed 0, data in
 * /usr/share/datasets/fashion-mnist, out dir "train-out". */
train_config train_default_config(void);
/* Makes c the main job's CNN: conv 32, conv 64, dense 256, classes. */
void train_use_cnn(train_config *c);

typedef struct train_summary {
  int64_t steps;        /* global step reached */
  int64_t resumed_from; /* the checkpoint's step, or -1 */
  double test_accuracy; /* of the last evaluation */
  double test_loss;
  double seconds;        /* training (steps only) in this run */
  double examples_per_s; /* over this run's steps */
  double replica_spread; /* check_replicas: the largest difference of a
                            parameter between two devices after any step */
  int devices;           /* the devices the run was data-parallel over */
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
