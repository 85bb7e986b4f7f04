/* The training loop: keys, jitted steps, evaluation, and when to
 * checkpoint (checkpoints.c, runfile.c, metrics.c and dataset.c hold the
 * files). Batches reach the step through kiln_prefetch (flax's
 * prefetch_to_device): a producer thread cuts each one from the shuffled
 * training set and uploads it while the previous step runs. Params live on
 * the context's first device; with --devices N the step is dp.c's pmap,
 * params and optimizer state replicated over the N devices by
 * kiln_replicate (and unreplicated for checkpoints) and each batch split
 * over them by the prefetcher. Evaluation runs over the same devices
 * through pad_shard_unpad (dp.c); key splits run on the first device.
 *
 * After each step the host reads the loss and the gradient's global norm
 * (computed inside the step) and stops at the first that is not finite,
 * before anything saves that state. A checkpoint holds the key at the start
 * of the current epoch and the step, from which a resumed run derives the
 * epoch's permutation and its place in it, and the metrics window, so that
 * a run stopped anywhere (a signal, --max-steps, a kill after a periodic
 * checkpoint) continues the same curve bit for bit. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints.h"
#include "dataset.h"
#include "dp.h"
#include "metrics.h"
#include "model.h"
#include "progress.h"
#include "runfile.h"
#include "train_internal.h"

static char last_error[2048];
const char *train_last_error(void) { return last_error; }

kiln_status train_fail(kiln_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof last_error && *kiln_last_error())
    snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", kiln_last_error());
  return s;
}

train_config train_default_config(void) {
  train_config c = {.data_dir = "/usr/share/datasets/fashion-mnist",
                    .out_dir = "train-out",
                    .epochs = 10,
                    .batch_size = 128,
                    .learning_rate = 1e-3,
                    .seed = 0,
                    .max_steps = 0,
                    .log_every = 50,
                    .classes = 10,
                    /* 100 steps: the CNN's checkpoint (9.9 MB) is written and
                       fsynced in ~65 ms on this machine, ~1% of its 100 steps on 2
                       CPU devices (6.8 s), and a kill loses at most that much work;
                       on a GPU, whose steps are ~20x faster, --checkpoint-minutes
                       bounds the cost instead */
                    .checkpoint_every = 100,
                    .keep = 3,
                    .n_hidden = 2,
                    .hidden = {512, 256},
                    .devices = 1};
  return c;
}

void train_use_cnn(train_config *c) {
  c->n_conv = 2;
  c->conv[0] = 32, c->conv[1] = 64;
  c->n_hidden = 1;
  c->hidden[0] = 256;
}

/* ---- small helpers over trees and arrays ---- */

/* jax.random.split(key): key <- row 0, sub <- row 1. */
static kiln_status split_key(model *m, kiln_device *dev, uint32_t key[2], uint32_t sub[2]) {
  kiln_tree *args = kiln_tree_tuple(1, (kiln_tree *[]){train_key_leaf(dev, key)}), *out = NULL;
  if (!args) return train_fail(KILN_ERR_ARGUMENT, "key split");
  kiln_status s = kiln_jit_call(m->split, args, &out);
  kiln_tree_free(args);
  uint32_t both[4];
  if (!s) s = train_read_leaf(kiln_tree_child(out, 0), both, sizeof both);
  kiln_tree_free(out);
  if (s) return train_fail(s, "key split");
  memcpy(key, both, 8);
  memcpy(sub, both + 2, 8);
  return KILN_OK;
}

/* Test rows per evaluation call: on purpose not a multiple of 2, 4 or 8,
 * so that pad_shard_unpad pads every call on a multi-device run, as flax's
 * examples evaluate a test set that does not split over the devices. */
enum { kEvalBatch = 999 };

/* The sum of the first n floats of a result leaf. */
static kiln_status sum_leaf(const kiln_tree *t, int64_t n, double *sum) {
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  kiln_status s = v ? train_read_leaf(t, v, (size_t)n * sizeof *v) : KILN_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; !s && i < n; i++) *sum += v[i];
  free(v);
  return s;
}

/* The test set in batches of eval_batch, the last one partial, each
 * through pad_shard_unpad (dp.c): a batch the devices do not divide is
 * padded, and only its own rows are summed. */
static kiln_status evaluate(kiln_padded *eval, kiln_device *dev, const kiln_tree *params,
                            const dataset *test, int64_t eval_batch, double *loss,
                            double *accuracy) {
  int64_t n = test->x.shape[0], batches = kiln_batch_count(n, eval_batch, 0);
  double loss_sum = 0, correct = 0;
  kiln_status s = KILN_OK;
  for (int64_t b = 0; b < batches && !s; b++) {
    kiln_host_data bx = {0}, by = {0};
    kiln_tree *args = NULL, *out = NULL;
    if (!(s = kiln_host_data_batch(&test->x, NULL, eval_batch, b, &bx)) &&
        !(s = kiln_host_data_batch(&test->y, NULL, eval_batch, b, &by))) {
      args = kiln_tree_tuple(
          3, (kiln_tree *[]){kiln_tree_clone(params), train_host_leaf(dev, &bx),
                             train_host_leaf(dev, &by)});
      s = args ? kiln_padded_call(eval, args, &out) : KILN_ERR_ARGUMENT;
    }
    if (!s) s = sum_leaf(kiln_tree_child(out, 0), by.shape[0], &loss_sum);
    if (!s) s = sum_leaf(kiln_tree_child(out, 1), by.shape[0], &correct);
    kiln_tree_free(out);
    kiln_tree_free(args);
    kiln_host_data_free(&bx);
    kiln_host_data_free(&by);
    if (s)
      return train_fail(s, "evaluating test batch %lld of %lld", (long long)b, (long long)batches);
  }
  *loss = loss_sum / (double)n;
  *accuracy = correct / (double)n;
  return KILN_OK;
}

/* ---- batches: prefetch_to_device over the shuffled training set ---- */

/* Batches next..end-1 of one epoch in `order`, for kiln_prefetch's producer
 * thread: each {x u8[B, F], y u8[B]}, reshaped for n > 1 devices to [n,
 * B/n, ...] as flax's shard() does, which the prefetcher splits over them. */
typedef struct batch_source {
  const dataset *data;
  const int64_t *order;
  int64_t batch, next, end;
  int devices;
  kiln_host_data x, y; /* the batch handed out last, valid until the next call */
} batch_source;

static void split_leading(kiln_host_data *d, int n) {
  if (n == 1) return;
  memmove(d->shape + 2, d->shape + 1, (size_t)(d->rank - 1) * sizeof *d->shape);
  d->shape[1] = d->shape[0] / n;
  d->shape[0] = n;
  d->rank++;
}

static kiln_status next_batch(void *user, kiln_tree **out) {
  batch_source *src = user;
  kiln_host_data_free(&src->x);
  kiln_host_data_free(&src->y);
  *out = NULL;
  if (src->next >= src->end) return KILN_OK;
  kiln_status s = kiln_host_data_batch(&src->data->x, src->order, src->batch, src->next, &src->x);
  if (!s) s = kiln_host_data_batch(&src->data->y, src->order, src->batch, src->next, &src->y);
  if (s) return s;
  src->next++;
  split_leading(&src->x, src->devices);
  split_leading(&src->y, src->devices);
  *out = kiln_tree_tuple(2, (kiln_tree *[]){kiln_tree_ptr(&src->x), kiln_tree_ptr(&src->y)});
  return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

/* The first float of a result leaf (a pmapped result holds one per device). */
static kiln_status read_first(const kiln_tree *t, float *v) {
  kiln_array *a = kiln_tree_leaf_array(t);
  size_t n = a ? kiln_array_nbytes(a) / sizeof *v : 0;
  float buf[64], *all = n <= 64 ? buf : malloc(n * sizeof *v);
  kiln_status s = !a || !n ? KILN_ERR_TREE : all ? kiln_array_to_host(a, all, n * sizeof *v)
                                                 : KILN_ERR_OUT_OF_MEMORY;
  if (!s) *v = all[0];
  if (all != buf) free(all);
  return s;
}

/* What one step gives the host. */
typedef struct step_result {
  float loss, accuracy, grad_norm;
  float finite; /* 1: the new params and optimizer state are all finite */
  float spread; /* check_replicas */
} step_result;

/* One jitted step on a batch {x, y} from the prefetcher (taken); params
 * and opt_state are donated and replaced by the step's results. A seventh
 * result (the replicas' spread) goes to r->spread. */
static kiln_status train_step(kiln_jit *step, train_state *st, kiln_tree *batch, step_result *r) {
  kiln_tree *out = NULL;
  kiln_tree *args = kiln_tree_tuple(
      4, (kiln_tree *[]){st->params, st->opt_state, kiln_tree_clone(kiln_tree_child(batch, 0)),
                         kiln_tree_clone(kiln_tree_child(batch, 1))});
  st->params = st->opt_state = NULL; /* the tuple owns them now */
  kiln_tree_free(batch);
  kiln_status s = args ? kiln_jit_call(step, args, &out) : KILN_ERR_ARGUMENT;
  kiln_tree_free(args);
  if (!s) {
    st->params = kiln_tree_clone(kiln_tree_child(out, 0));
    st->opt_state = kiln_tree_clone(kiln_tree_child(out, 1));
    if (!(s = read_first(kiln_tree_child(out, 2), &r->loss)) &&
        !(s = read_first(kiln_tree_child(out, 3), &r->accuracy)))
      s = read_first(kiln_tree_child(out, 4), &r->grad_norm);
    if (!s) s = read_first(kiln_tree_child(out, 5), &r->finite);
    if (!s && kiln_tree_num_children(out) > 6) s = read_first(kiln_tree_child(out, 6), &r->spread);
  }
  kiln_tree_free(out);
  return s ? train_fail(s, "train step %lld", (long long)st->step + 1) : KILN_OK;
}

/* ---- the run ---- */

typedef struct run {
  const train_config *cfg; /* &own */
  train_config own;        /* the caller's, with devices resolved */
  kiln_ctx *ctx;
  kiln_device *dev;
  dataset train, test;
  model m;
  dp_step dp; /* devices > 1 */
  dp_eval eval;
  train_state st;
  FILE *metrics;
  int64_t *order;
  int resuming; /* from a checkpoint in the out dir, if it holds one */
  int lock_fd;  /* holds the out dir's lock */
  int64_t spe, last; /* steps per epoch; the step the run ends at */
  double start;      /* progress_now() when the steps began */
  double last_save;  /* ... when the last checkpoint was saved */
  char run_json[RUNFILE_TEXT_MAX]; /* this run's record, kept in its checkpoints */
} run;

static kiln_status setup(run *r, train_summary *sum) {
  const train_config *cfg = r->cfg;
  kiln_status s;
  if (cfg->batch_size < 1 || cfg->epochs < 1 || cfg->n_hidden < 0 ||
      cfg->n_hidden > TRAIN_MAX_LAYERS || cfg->n_conv < 0 || cfg->n_conv > TRAIN_MAX_LAYERS ||
      cfg->log_every < 1 || cfg->devices < 0 || cfg->devices > 1024 ||
      (cfg->devices && cfg->batch_size % cfg->devices) || cfg->classes < 2 ||
      cfg->classes > 256 || !isfinite(cfg->learning_rate) || !(cfg->learning_rate > 0) ||
      cfg->checkpoint_every < 0 || !(cfg->checkpoint_minutes >= 0) ||
      !isfinite(cfg->checkpoint_minutes) || cfg->keep < 1 || cfg->resume < TRAIN_FRESH ||
      cfg->resume > TRAIN_RESUME_AUTO) {
    kiln_clear_error();
    return train_fail(KILN_ERR_ARGUMENT,
                      "train: invalid configuration (batch %lld, epochs %d, lr %g, %d classes, %d "
                      "conv and %d hidden layers, log every %lld, a checkpoint every %lld steps "
                      "and %g minutes, keep %d, %d devices; the batch must split evenly over the "
                      "devices)",
                      (long long)cfg->batch_size, cfg->epochs, cfg->learning_rate, cfg->classes,
                      cfg->n_conv, cfg->n_hidden, (long long)cfg->log_every,
                      (long long)cfg->checkpoint_every, cfg->checkpoint_minutes, cfg->keep,
                      cfg->devices);
  }
  if ((s = outdir_prepare(cfg, sum, &r->resuming, &r->lock_fd))) return s;
  /* the data before the context: a bad label is refused in a moment */
  if ((s = dataset_load(cfg->data_dir, "train", cfg->classes, &r->train)) ||
      (s = dataset_load(cfg->data_dir, "t10k", cfg->classes, &r->test)) ||
      (s = dataset_check_pair(&r->train, &r->test)))
    return s;
  if (cfg->n_conv && (r->train.x.shape[1] != r->train.height * r->train.cols ||
                      r->train.height >> cfg->n_conv < 1 || r->train.cols >> cfg->n_conv < 1)) {
    kiln_clear_error();
    return train_fail(KILN_ERR_SHAPE, "train: %d convs, each halving the image, need images of at "
                      "least %d x %d pixels (got %lld x %lld)", cfg->n_conv, 1 << cfg->n_conv,
                      1 << cfg->n_conv, (long long)r->train.height, (long long)r->train.cols);
  }
  char train_fp[128], test_fp[128];
  dataset_fingerprint(&r->train, train_fp, sizeof train_fp);
  dataset_fingerprint(&r->test, test_fp, sizeof test_fp);
  if ((s = runfile_settle(cfg, r->resuming, train_fp, test_fp, sum, r->run_json,
                          sizeof r->run_json)))
    return s;
  kiln_options opts;
  kiln_options_init(&opts);
  /* used when the backend is CPU; devices 0: KILN_NUM_CPU_DEVICES, else 2 */
  if (cfg->devices > 1) opts.num_cpu_devices = cfg->devices;
  if (cfg->devices == 0 && !getenv("KILN_NUM_CPU_DEVICES")) opts.num_cpu_devices = 2;
  if ((s = kiln_ctx_new(&opts, &r->ctx)) || (s = kiln_device_get(r->ctx, 0, &r->dev)))
    return train_fail(s, "opening a kiln context");
  if (r->own.devices == 0 && (r->own.devices = kiln_device_count(r->ctx)) > 1024)
    r->own.devices = 1024;
  if (cfg->batch_size % cfg->devices) {
    kiln_clear_error();
    return train_fail(KILN_ERR_ARGUMENT, "train: a batch of %lld does not split evenly over the "
                      "context's %d devices (pass --devices)", (long long)cfg->batch_size,
                      cfg->devices);
  }
  sum->devices = cfg->devices;
  if (kiln_device_count(r->ctx) < cfg->devices) {
    kiln_clear_error();
    return train_fail(KILN_ERR_ARGUMENT, "train: --devices %d, but the context has %d",
                      cfg->devices, kiln_device_count(r->ctx));
  }
  model_spec spec = {.n_conv = cfg->n_conv,
                     .height = r->train.height,
                     .cols = r->train.cols,
                     .n_dense = cfg->n_hidden + 1};
  memcpy(spec.conv, cfg->conv, (size_t)cfg->n_conv * sizeof *cfg->conv);
  memcpy(spec.dense, cfg->hidden, (size_t)cfg->n_hidden * sizeof *cfg->hidden);
  spec.dense[cfg->n_hidden] = cfg->classes;
  int64_t total = (int64_t)cfg->epochs * kiln_batch_count(r->train.x.shape[0], cfg->batch_size, 1);
  kiln_schedule lr = cfg->cosine ? kiln_cosine_decay_schedule(cfg->learning_rate, total, 0.0, 1.0)
                                 : kiln_constant_schedule(cfg->learning_rate);
  if ((s = model_new(r->ctx, &spec, lr, &r->m)))
    return train_fail(s, "building the model");
  if (cfg->devices > 1 &&
      (s = dp_step_new(r->ctx, &r->m, cfg->devices, cfg->check_replicas, &r->dp)))
    return train_fail(s, "building the data-parallel step over %d devices", cfg->devices);
  if ((s = dp_eval_new(r->ctx, &r->m, cfg->devices, cfg->devices > 1, &r->eval)))
    return train_fail(s, "building the evaluation over %d devices", cfg->devices);

  /* key, init_key = jax.random.split(jax.random.PRNGKey(seed)) */
  uint32_t init_key[2];
  r->st.key[0] = 0;
  r->st.key[1] = cfg->seed;
  if ((s = split_key(&r->m, r->dev, r->st.key, init_key))) return s;
  kiln_tree *args = kiln_tree_tuple(1, (kiln_tree *[]){train_key_leaf(r->dev, init_key)}),
            *out = NULL;
  s = args ? kiln_jit_call(r->m.init, args, &out) : KILN_ERR_ARGUMENT;
  kiln_tree_free(args);
  if (!s) {
    r->st.params = kiln_tree_clone(kiln_tree_child(out, 0));
    r->st.opt_state = kiln_tree_clone(kiln_tree_child(out, 1));
  }
  kiln_tree_free(out);
  if (s) return train_fail(s, "initialising the parameters");

  int found = 0;
  if (r->resuming && (s = ckpt_restore(cfg->out_dir, r->dev, &r->st, &found, sum->checkpoint,
                                       sizeof sum->checkpoint)))
    return s;
  if (found) sum->resumed_from = sum->checkpoint_step = r->st.step;
  if (found && !cfg->quiet) printf("resuming from %s (step %lld)\n", sum->checkpoint,
                                   (long long)r->st.step);
  if (r->dp.jit && ((s = dp_replicate(r->ctx, &r->dp, &r->st.params)) ||
                    (s = dp_replicate(r->ctx, &r->dp, &r->st.opt_state))))
    return train_fail(s, "replicating the state over %d devices", cfg->devices);
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
  if (!(r->metrics = metrics_open(path, found ? r->st.step : -1))) {
    kiln_clear_error();
    return train_fail(KILN_ERR_IO, "opening %s: %s", path, strerror(errno));
  }
  r->order = malloc((size_t)r->train.x.shape[0] * sizeof *r->order);
  if (!r->order) return train_fail(KILN_ERR_OUT_OF_MEMORY, "allocating the permutation");
  return KILN_OK;
}

static kiln_status write_metrics(run *r, int n, const char *const *names, const double *values) {
  if (!metrics_write(r->metrics, r->st.step, (double)r->st.step / (double)r->spe, n, names,
                     values, r->st.time + progress_now() - r->start))
    return KILN_OK;
  kiln_clear_error();
  return train_fail(KILN_ERR_IO, "writing %s/metrics.jsonl: %s", r->cfg->out_dir,
                    strerror(errno));
}

static kiln_status save_checkpoint(run *r, train_summary *sum) {
  train_state *st = &r->st;
  double time_before = st->time;
  st->time += progress_now() - r->start;
  kiln_status s = ckpt_save(r->cfg->out_dir, r->cfg->keep, r->dev, st, r->dp.jit != NULL,
                            r->run_json, sum->checkpoint, sizeof sum->checkpoint);
  st->time = time_before;
  if (s) return s;
  sum->checkpoint_step = st->step;
  r->last_save = progress_now();
  return KILN_OK;
}

static int stop_requested(const run *r) { return r->cfg->stop && *r->cfg->stop; }

static int step_finite(const step_result *res) {
  return isfinite(res->loss) && isfinite(res->grad_norm) && res->finite == 1;
}

/* A step whose loss, gradient norm or new state is not finite: its line
 * (nulls flagged; "state": null for the state) goes to the metrics, the
 * state it made is not saved, and the run ends with KILN_ERR_NONFINITE. */
static kiln_status diverged(run *r, train_summary *sum, const step_result *res) {
  static const char *const names[4] = {"loss", "accuracy", "grad_norm", "state"};
  const double values[4] = {res->loss, res->accuracy, res->grad_norm, NAN};
  kiln_status s = write_metrics(r, res->finite == 1 ? 3 : 4, names, values);
  if (s) return s;
  char kept[1300] = "no checkpoint was saved before it";
  if (sum->checkpoint_step >= 0)
    snprintf(kept, sizeof kept, "the last checkpoint, %s (step %lld), is kept", sum->checkpoint,
             (long long)sum->checkpoint_step);
  sum->outcome = TRAIN_DIVERGED;
  kiln_clear_error();
  int loss_bad = !isfinite(res->loss), norm_bad = !isfinite(res->grad_norm);
  return train_fail(KILN_ERR_NONFINITE,
                    "step %lld: non-finite %s (loss %g, gradient norm %g%s); stopped without "
                    "saving this state: %s (a smaller --lr may help)",
                    (long long)r->st.step,
                    loss_bad && norm_bad ? "loss and gradient norm"
                    : loss_bad           ? "loss"
                    : norm_bad           ? "gradient norm"
                                         : "parameters or optimizer state after the update",
                    res->loss, res->grad_norm,
                    res->finite == 1 ? "" : "; the updated state holds NaN or inf", kept);
}

/* After step `step`: a checkpoint due by step count or by time (epoch ends
 * and the run's end are saved by train_loop). */
static int checkpoint_due(const run *r) {
  const train_config *cfg = r->cfg;
  int64_t step = r->st.step;
  if (step % r->spe == 0 || step == r->last) return 0;
  return (cfg->checkpoint_every > 0 && step % cfg->checkpoint_every == 0) ||
         (cfg->checkpoint_minutes > 0 &&
          progress_now() - r->last_save >= 60 * cfg->checkpoint_minutes);
}

/* The rest of the epoch (from st->step, at most up to r->last) in
 * r->order, its batches through kiln_prefetch; returns early when a stop is
 * requested. */
static kiln_status train_epoch(run *r, train_summary *sum, progress *p) {
  const train_config *cfg = r->cfg;
  train_state *st = &r->st;
  int64_t spe = r->spe, b0 = st->step % spe;
  batch_source src = {.data = &r->train, .order = r->order, .batch = cfg->batch_size,
                      .next = b0,
                      .end = b0 + (r->last - st->step < spe - b0 ? r->last - st->step : spe - b0),
                      .devices = cfg->devices};
  kiln_prefetch *pf = NULL;
  kiln_device *const *devs = r->dp.jit ? r->dp.devices : &r->dev;
  kiln_status s =
      kiln_prefetch_new(r->ctx, next_batch, &src, cfg->prefetch, devs, cfg->devices, &pf);
  if (s) return train_fail(s, "starting the batch prefetcher");
  kiln_jit *step = r->dp.jit ? r->dp.jit : r->m.step;
  while (!stop_requested(r)) {
    double t0 = progress_now();
    kiln_tree *batch = NULL;
    if ((s = kiln_prefetch_next(pf, &batch))) {
      s = train_fail(s, "batch for step %lld", (long long)st->step + 1);
      break;
    }
    if (!batch) break;
    if (!r->dp.jit) { /* one device: its part is the batch */
      kiln_tree *one = kiln_tree_clone(kiln_tree_child(batch, 0));
      kiln_tree_free(batch);
      batch = one;
    } else if ((s = dp_batch(&r->dp, &batch))) {
      kiln_tree_free(batch);
      s = train_fail(s, "laying out the batch for step %lld", (long long)st->step + 1);
      break;
    }
    step_result res = {0};
    if ((s = train_step(step, st, batch, &res))) break;
    if (res.spread > sum->replica_spread) sum->replica_spread = res.spread;
    st->step++;
    if (!step_finite(&res)) {
      s = diverged(r, sum, &res);
      break;
    }
    p->run_steps++;
    p->run_seconds += progress_now() - t0;
    progress_step(p, st->step, res.loss, res.accuracy);
    double *w = st->window;
    w[WINDOW_LOSS] += res.loss;
    w[WINDOW_ACCURACY] += res.accuracy;
    w[WINDOW_GRAD_NORM] += res.grad_norm;
    if (++w[WINDOW_STEPS], st->step % cfg->log_every == 0) {
      static const char *const names[3] = {"loss", "accuracy", "grad_norm"};
      const double mean[3] = {w[WINDOW_LOSS] / w[WINDOW_STEPS],
                              w[WINDOW_ACCURACY] / w[WINDOW_STEPS],
                              w[WINDOW_GRAD_NORM] / w[WINDOW_STEPS]};
      if ((s = write_metrics(r, 3, names, mean))) break;
      memset(w, 0, sizeof st->window);
    }
    if (checkpoint_due(r) && (s = save_checkpoint(r, sum))) break;
  }
  kiln_prefetch_free(pf); /* stops the producer: src's buffers are ours again */
  kiln_host_data_free(&src.x);
  kiln_host_data_free(&src.y);
  return s;
}

static kiln_status train_loop(run *r, train_summary *sum) {
  const train_config *cfg = r->cfg;
  train_state *st = &r->st;
  int64_t n = r->train.x.shape[0], bs = cfg->batch_size;
  r->spe = kiln_batch_count(n, bs, 1); /* steps per epoch: full batches */
  if (r->spe < 1) {
    kiln_clear_error();
    return train_fail(KILN_ERR_SHAPE, "train: %lld examples make no batch of %lld", (long long)n,
                      (long long)bs);
  }
  r->last = (int64_t)cfg->epochs * r->spe;
  if (cfg->max_steps > 0 && cfg->max_steps < r->last) r->last = cfg->max_steps;
  progress p;
  progress_init(&p, cfg->quiet ? NULL : stdout, cfg->epochs, r->spe, r->last, bs);
  r->start = r->last_save = progress_now();
  kiln_status s = KILN_OK;
  int evaluated = 0;
  while (st->step < r->last && !stop_requested(r)) {
    uint32_t next_key[2] = {st->key[0], st->key[1]}, perm_key[2];
    if ((s = split_key(&r->m, r->dev, next_key, perm_key))) return s;
    if ((s = kiln_permutation(perm_key, n, r->order))) return train_fail(s, "shuffling");
    if ((s = train_epoch(r, sum, &p))) return s;
    if (st->step % r->spe && st->step < r->last) break; /* stopped mid-epoch */
    if (st->step % r->spe == 0) memcpy(st->key, next_key, sizeof next_key); /* epoch done */
    if ((s = evaluate(r->eval.padded, r->dev, st->params, &r->test, kEvalBatch, &sum->test_loss,
                      &sum->test_accuracy)))
      return s;
    evaluated = 1;
    static const char *const names[2] = {"test_loss", "test_accuracy"};
    if ((s = write_metrics(r, 2, names, (const double[]){sum->test_loss, sum->test_accuracy})))
      return s;
    progress_eval(&p, st->step, sum->test_loss, sum->test_accuracy);
    if ((s = save_checkpoint(r, sum))) return s;
  }
  sum->steps = st->step;
  sum->seconds = p.run_seconds;
  sum->examples_per_s = progress_examples_per_s(&p);
  if (st->step < r->last) { /* stopped: save where it stands, evaluate nothing */
    sum->outcome = TRAIN_STOPPED;
    sum->stop_signal = *cfg->stop;
    if (!evaluated) sum->test_loss = sum->test_accuracy = NAN;
    return sum->checkpoint_step == st->step ? KILN_OK : save_checkpoint(r, sum);
  }
  if (!evaluated && (s = evaluate(r->eval.padded, r->dev, st->params, &r->test, kEvalBatch,
                                  &sum->test_loss, &sum->test_accuracy)))
    return s;
  return KILN_OK;
}

kiln_status train_run(const train_config *cfg, train_summary *summary) {
  last_error[0] = 0;
  train_summary sum = {.outcome = TRAIN_FINISHED, .resumed_from = -1, .checkpoint_step = -1};
  run r = {.own = *cfg, .lock_fd = -1};
  r.cfg = &r.own;
  kiln_status s = setup(&r, &sum);
  if (!s) s = train_loop(&r, &sum);
  if (r.metrics && fclose(r.metrics) && !s) {
    kiln_clear_error();
    s = train_fail(KILN_ERR_IO, "writing the metrics in %s: %s", cfg->out_dir, strerror(errno));
  }
  if (s && sum.outcome == TRAIN_FINISHED) sum.outcome = TRAIN_FAILED;
  free(r.order);
  kiln_tree_free(r.st.params);
  kiln_tree_free(r.st.opt_state);
  dp_step_free(&r.dp);
  dp_eval_free(&r.eval);
  if (r.m.init_f) model_free(&r.m);
  dataset_free(&r.train);
  dataset_free(&r.test);
  kiln_ctx_free(r.ctx);
  if (r.lock_fd >= 0) close(r.lock_fd);
  if (summary) *summary = sum;
  return s;
}
