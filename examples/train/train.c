/* The training loop: data, keys, jitted steps, evaluation, checkpoints and
 * metrics. Batches reach the step through kiln_prefetch (flax's
 * prefetch_to_device): a producer thread cuts each one from the shuffled
 * training set and uploads it while the previous step runs. Params live on
 * the context's first device; with --devices N the step is dp.c's pmap,
 * params and optimizer state replicated over the N devices by
 * kiln_replicate (and unreplicated for checkpoints) and each batch split
 * over them by the prefetcher. Evaluation runs over the same devices
 * through pad_shard_unpad (dp.c); key splits run on the first device. */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp.h"
#include "model.h"
#include "progress.h"

static char last_error[2048];
const char *train_last_error(void) { return last_error; }

/* Records "<what>: <kiln's message>" and returns s. */
static kiln_status fail(kiln_status s, const char *fmt, ...) {
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

/* ---- data ---- */

typedef struct dataset {
  kiln_host_data x, y; /* u8[n, features], u8[n] */
  int64_t height, cols; /* the image shape (features = height * cols) */
} dataset;

static void dataset_free(dataset *d) {
  kiln_host_data_free(&d->x);
  kiln_host_data_free(&d->y);
}

/* dir/name.gz, else dir/name. */
static void data_path(const char *dir, const char *name, char *buf, size_t cap) {
  struct stat st;
  snprintf(buf, cap, "%s/%s.gz", dir, name);
  if (stat(buf, &st) != 0) snprintf(buf, cap, "%s/%s", dir, name);
}

static kiln_status load_split(const char *dir, const char *prefix, dataset *d) {
  char images[1024], labels[1024], name[64];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  data_path(dir, name, images, sizeof images);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  data_path(dir, name, labels, sizeof labels);
  kiln_status s;
  if ((s = kiln_load_idx(images, &d->x))) return fail(s, "loading %s", images);
  if ((s = kiln_load_idx(labels, &d->y))) return fail(s, "loading %s", labels);
  if (d->x.dtype != KILN_U8 || d->x.rank < 2 || d->y.dtype != KILN_U8 || d->y.rank != 1 ||
      d->x.shape[0] != d->y.shape[0]) {
    kiln_clear_error();
    return fail(KILN_ERR_SHAPE,
                "%s and %s: expected u8 images [n, ...] and u8 labels [n], got rank %d and %d with "
                "%lld and %lld examples",
                images, labels, d->x.rank, d->y.rank, (long long)d->x.shape[0],
                (long long)d->y.shape[0]);
  }
  int64_t features = 1; /* images as rows of pixels */
  for (int i = 1; i < d->x.rank; i++) features *= d->x.shape[i];
  d->height = d->x.rank == 3 ? d->x.shape[1] : features;
  d->cols = d->x.rank == 3 ? d->x.shape[2] : 1;
  d->x.rank = 2;
  d->x.shape[1] = features;
  return KILN_OK;
}

static int max_label(const kiln_host_data *y) {
  int m = 0;
  for (int64_t i = 0; i < y->shape[0]; i++)
    m = ((uint8_t *)y->data)[i] > m ? ((uint8_t *)y->data)[i] : m;
  return m;
}

/* ---- small helpers over trees and arrays ---- */

static kiln_tree *host_leaf(kiln_device *dev, const kiln_host_data *d) {
  kiln_array *a = NULL;
  if (kiln_host_data_to_array(d, dev, &a)) return NULL;
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

static kiln_tree *scalar_leaf(kiln_device *dev, kiln_dtype dtype, const void *v, size_t size) {
  kiln_host_data d = {.dtype = dtype, .rank = 0, .data = (void *)v, .nbytes = size};
  return host_leaf(dev, &d);
}

static kiln_tree *key_leaf(kiln_device *dev, const uint32_t key[2]) {
  kiln_host_data d = {.dtype = KILN_U32, .rank = 1, .shape = {2}, .data = (void *)key, .nbytes = 8};
  return host_leaf(dev, &d);
}

static kiln_status read_leaf(const kiln_tree *t, void *dst, size_t size) {
  kiln_array *a = kiln_tree_leaf_array(t);
  return a ? kiln_array_to_host(a, dst, size) : KILN_ERR_TREE;
}

/* jax.random.split(key): key <- row 0, sub <- row 1. */
static kiln_status split_key(model *m, kiln_device *dev, uint32_t key[2], uint32_t sub[2]) {
  kiln_tree *args = kiln_tree_tuple(1, (kiln_tree *[]){key_leaf(dev, key)}), *out = NULL;
  if (!args) return fail(KILN_ERR_ARGUMENT, "key split");
  kiln_status s = kiln_jit_call(m->split, args, &out);
  kiln_tree_free(args);
  uint32_t both[4];
  if (!s) s = read_leaf(kiln_tree_child(out, 0), both, sizeof both);
  kiln_tree_free(out);
  if (s) return fail(s, "key split");
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
  kiln_status s = v ? read_leaf(t, v, (size_t)n * sizeof *v) : KILN_ERR_OUT_OF_MEMORY;
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
          3, (kiln_tree *[]){kiln_tree_clone(params), host_leaf(dev, &bx), host_leaf(dev, &by)});
      s = args ? kiln_padded_call(eval, args, &out) : KILN_ERR_ARGUMENT;
    }
    if (!s) s = sum_leaf(kiln_tree_child(out, 0), by.shape[0], &loss_sum);
    if (!s) s = sum_leaf(kiln_tree_child(out, 1), by.shape[0], &correct);
    kiln_tree_free(out);
    kiln_tree_free(args);
    kiln_host_data_free(&bx);
    kiln_host_data_free(&by);
    if (s) return fail(s, "evaluating test batch %lld of %lld", (long long)b, (long long)batches);
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

/* ---- the training state and its checkpoint ---- */

typedef struct train_state {
  kiln_tree *params, *opt_state;
  uint32_t key[2]; /* the key at the start of epoch step / steps_per_epoch */
  int64_t step;
  double time; /* seconds of training before this run */
} train_state;

/* {"key", "opt_state", "params", "step", "time"}: the checkpoint's tree,
 * with these params and opt_state (taken). */
static kiln_tree *state_tree(kiln_device *dev, const train_state *st, kiln_tree *params,
                             kiln_tree *opt_state) {
  int64_t step = st->step;
  const char *keys[5] = {"key", "opt_state", "params", "step", "time"};
  return kiln_tree_dict(5, keys,
                        (kiln_tree *[]){key_leaf(dev, st->key), opt_state, params,
                                        scalar_leaf(dev, KILN_I64, &step, 8),
                                        scalar_leaf(dev, KILN_F64, &st->time, 8)});
}

static kiln_status restore(const char *path, kiln_device *dev, train_state *st) {
  kiln_tree *expected = state_tree(dev, st, kiln_tree_clone(st->params),
                                   kiln_tree_clone(st->opt_state)),
            *got = NULL;
  kiln_status s = expected ? kiln_checkpoint_restore(path, expected, dev, &got) : KILN_ERR_ARGUMENT;
  kiln_tree_free(expected);
  if (s) return fail(s, "restoring %s", path);
  kiln_tree_free(st->params);
  kiln_tree_free(st->opt_state);
  st->params = kiln_tree_clone(kiln_tree_get(got, "params"));
  st->opt_state = kiln_tree_clone(kiln_tree_get(got, "opt_state"));
  if (!(s = read_leaf(kiln_tree_get(got, "key"), st->key, 8)) &&
      !(s = read_leaf(kiln_tree_get(got, "step"), &st->step, 8)))
    s = read_leaf(kiln_tree_get(got, "time"), &st->time, 8);
  kiln_tree_free(got);
  return s || !st->params || !st->opt_state ? fail(s ? s : KILN_ERR_TREE, "restoring %s", path)
                                            : KILN_OK;
}

/* Replicated state (a leading device axis) is saved as its first device's
 * copy, flax's unreplicate. */
static kiln_status save(const char *path, kiln_device *dev, const train_state *st,
                        int replicated) {
  kiln_tree *params = NULL, *opt_state = NULL;
  kiln_status s = KILN_OK;
  if (!replicated) {
    params = kiln_tree_clone(st->params);
    opt_state = kiln_tree_clone(st->opt_state);
  } else if (!(s = kiln_unreplicate(st->params, &params))) {
    s = kiln_unreplicate(st->opt_state, &opt_state);
  }
  kiln_tree *t = s ? NULL : state_tree(dev, st, params, opt_state);
  if (s) kiln_tree_free(params);
  if (!s) s = t ? kiln_checkpoint_save(path, t) : KILN_ERR_ARGUMENT;
  kiln_tree_free(t);
  return s ? fail(s, "saving %s", path) : KILN_OK;
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

/* One jitted step on a batch {x, y} from the prefetcher (taken); params
 * and opt_state are donated and replaced by the step's results. A fifth
 * result (the replicas' spread) goes to *spread. */
static kiln_status train_step(kiln_jit *step, train_state *st, kiln_tree *batch, float *loss,
                              float *accuracy, float *spread) {
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
    if (!(s = read_first(kiln_tree_child(out, 2), loss)))
      s = read_first(kiln_tree_child(out, 3), accuracy);
    if (!s && kiln_tree_num_children(out) > 4) s = read_first(kiln_tree_child(out, 4), spread);
  }
  kiln_tree_free(out);
  return s ? fail(s, "train step %lld", (long long)st->step + 1) : KILN_OK;
}

static int make_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0777) && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
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
  char ckpt[1100];
} run;

static kiln_status setup(run *r, train_summary *sum) {
  const train_config *cfg = r->cfg;
  kiln_status s;
  if (cfg->batch_size < 1 || cfg->epochs < 1 || cfg->n_hidden < 0 ||
      cfg->n_hidden > TRAIN_MAX_LAYERS || cfg->n_conv < 0 || cfg->n_conv > TRAIN_MAX_LAYERS ||
      cfg->log_every < 1 || cfg->devices < 0 ||
      cfg->devices > 1024 || (cfg->devices && cfg->batch_size % cfg->devices)) {
    kiln_clear_error();
    return fail(KILN_ERR_ARGUMENT,
                "train: invalid configuration (batch %lld, epochs %d, %d conv and %d hidden "
                "layers, log every %lld, %d devices; the batch must split evenly over the devices)",
                (long long)cfg->batch_size, cfg->epochs, cfg->n_conv, cfg->n_hidden,
                (long long)cfg->log_every, cfg->devices);
  }
  if (make_dirs(cfg->out_dir)) {
    kiln_clear_error();
    return fail(KILN_ERR_IO, "creating %s: %s", cfg->out_dir, strerror(errno));
  }
  snprintf(r->ckpt, sizeof r->ckpt, "%s/checkpoint.safetensors", cfg->out_dir);
  kiln_options opts;
  kiln_options_init(&opts);
  /* used when the backend is CPU; devices 0: KILN_NUM_CPU_DEVICES, else 2 */
  if (cfg->devices > 1) opts.num_cpu_devices = cfg->devices;
  if (cfg->devices == 0 && !getenv("KILN_NUM_CPU_DEVICES")) opts.num_cpu_devices = 2;
  if ((s = kiln_ctx_new(&opts, &r->ctx)) || (s = kiln_device_get(r->ctx, 0, &r->dev)))
    return fail(s, "opening a kiln context");
  if (r->own.devices == 0 && (r->own.devices = kiln_device_count(r->ctx)) > 1024)
    r->own.devices = 1024;
  if (cfg->batch_size % cfg->devices) {
    kiln_clear_error();
    return fail(KILN_ERR_ARGUMENT, "train: a batch of %lld does not split evenly over the "
                "context's %d devices (pass --devices)", (long long)cfg->batch_size, cfg->devices);
  }
  sum->devices = cfg->devices;
  if (kiln_device_count(r->ctx) < cfg->devices) {
    kiln_clear_error();
    return fail(KILN_ERR_ARGUMENT, "train: --devices %d, but the context has %d", cfg->devices,
                kiln_device_count(r->ctx));
  }
  if ((s = load_split(cfg->data_dir, "train", &r->train)) ||
      (s = load_split(cfg->data_dir, "t10k", &r->test)))
    return s;
  model_spec spec = {.n_conv = cfg->n_conv,
                     .height = r->train.height,
                     .cols = r->train.cols,
                     .n_dense = cfg->n_hidden + 1};
  memcpy(spec.conv, cfg->conv, (size_t)cfg->n_conv * sizeof *cfg->conv);
  memcpy(spec.dense, cfg->hidden, (size_t)cfg->n_hidden * sizeof *cfg->hidden);
  spec.dense[cfg->n_hidden] = max_label(&r->train.y) + 1;
  if (cfg->n_conv && (r->train.x.shape[1] != r->train.height * r->train.cols ||
                      r->train.height >> cfg->n_conv < 1 || r->train.cols >> cfg->n_conv < 1)) {
    kiln_clear_error();
    return fail(KILN_ERR_SHAPE, "train: %d convs, each halving the image, need images of at "
                "least %d x %d pixels (got %lld x %lld)", cfg->n_conv, 1 << cfg->n_conv,
                1 << cfg->n_conv, (long long)r->train.height, (long long)r->train.cols);
  }
  int64_t total = (int64_t)cfg->epochs * kiln_batch_count(r->train.x.shape[0], cfg->batch_size, 1);
  kiln_schedule lr = cfg->cosine ? kiln_cosine_decay_schedule(cfg->learning_rate, total, 0.0, 1.0)
                                 : kiln_constant_schedule(cfg->learning_rate);
  if ((s = model_new(r->ctx, &spec, lr, &r->m)))
    return fail(s, "building the model");
  if (cfg->devices > 1 &&
      (s = dp_step_new(r->ctx, &r->m, cfg->devices, cfg->check_replicas, &r->dp)))
    return fail(s, "building the data-parallel step over %d devices", cfg->devices);
  if ((s = dp_eval_new(r->ctx, &r->m, cfg->devices, cfg->devices > 1, &r->eval)))
    return fail(s, "building the evaluation over %d devices", cfg->devices);

  /* key, init_key = jax.random.split(jax.random.PRNGKey(seed)) */
  uint32_t init_key[2];
  r->st.key[0] = 0;
  r->st.key[1] = cfg->seed;
  if ((s = split_key(&r->m, r->dev, r->st.key, init_key))) return s;
  kiln_tree *args = kiln_tree_tuple(1, (kiln_tree *[]){key_leaf(r->dev, init_key)}), *out = NULL;
  s = args ? kiln_jit_call(r->m.init, args, &out) : KILN_ERR_ARGUMENT;
  kiln_tree_free(args);
  if (!s) {
    r->st.params = kiln_tree_clone(kiln_tree_child(out, 0));
    r->st.opt_state = kiln_tree_clone(kiln_tree_child(out, 1));
  }
  kiln_tree_free(out);
  if (s) return fail(s, "initialising the parameters");

  struct stat sb;
  if (cfg->resume && stat(r->ckpt, &sb) == 0) {
    if ((s = restore(r->ckpt, r->dev, &r->st))) return s;
    sum->resumed_from = r->st.step;
  }
  if (r->dp.jit && ((s = dp_replicate(r->ctx, &r->dp, &r->st.params)) ||
                    (s = dp_replicate(r->ctx, &r->dp, &r->st.opt_state))))
    return fail(s, "replicating the state over %d devices", cfg->devices);
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
  if (!(r->metrics = metrics_open(path, sum->resumed_from))) {
    kiln_clear_error();
    return fail(KILN_ERR_IO, "opening %s: %s", path, strerror(errno));
  }
  r->order = malloc((size_t)r->train.x.shape[0] * sizeof *r->order);
  if (!r->order) return fail(KILN_ERR_OUT_OF_MEMORY, "allocating the permutation");
  return KILN_OK;
}

/* Metrics averaged over the steps since the last metrics line. */
typedef struct window {
  double loss, accuracy;
  int64_t steps;
} window;

/* The rest of the epoch (from st->step, at most up to step `last`) in
 * r->order, its batches through kiln_prefetch. */
static kiln_status train_epoch(run *r, train_summary *sum, progress *p, int64_t last,
                               int64_t spe, double start, window *win) {
  const train_config *cfg = r->cfg;
  train_state *st = &r->st;
  int64_t b0 = st->step % spe;
  batch_source src = {.data = &r->train, .order = r->order, .batch = cfg->batch_size,
                      .next = b0, .end = b0 + (last - st->step < spe - b0 ? last - st->step : spe - b0),
                      .devices = cfg->devices};
  kiln_prefetch *pf = NULL;
  kiln_device *const *devs = r->dp.jit ? r->dp.devices : &r->dev;
  kiln_status s = kiln_prefetch_new(r->ctx, next_batch, &src, cfg->prefetch, devs, cfg->devices, &pf);
  if (s) return fail(s, "starting the batch prefetcher");
  kiln_jit *step = r->dp.jit ? r->dp.jit : r->m.step;
  for (;;) {
    double t0 = progress_now();
    kiln_tree *batch = NULL;
    if ((s = kiln_prefetch_next(pf, &batch))) {
      s = fail(s, "batch for step %lld", (long long)st->step + 1);
      break;
    }
    if (!batch) break;
    if (!r->dp.jit) { /* one device: its part is the batch */
      kiln_tree *one = kiln_tree_clone(kiln_tree_child(batch, 0));
      kiln_tree_free(batch);
      batch = one;
    } else if ((s = dp_batch(&r->dp, &batch))) {
      kiln_tree_free(batch);
      s = fail(s, "laying out the batch for step %lld", (long long)st->step + 1);
      break;
    }
    float loss, acc, spread = 0;
    if ((s = train_step(step, st, batch, &loss, &acc, &spread))) break;
    if (spread > sum->replica_spread) sum->replica_spread = spread;
    st->step++;
    p->run_steps++;
    p->run_seconds += progress_now() - t0;
    progress_step(p, st->step, loss, acc);
    win->loss += loss;
    win->accuracy += acc;
    if (++win->steps, st->step % cfg->log_every == 0) {
      fprintf(r->metrics,
              "{\"step\": %lld, \"epoch\": %.4f, \"loss\": %.9g, \"accuracy\": %.6g, \"time\": "
              "%.6f}\n",
              (long long)st->step, (double)st->step / (double)spe, win->loss / (double)win->steps,
              win->accuracy / (double)win->steps, st->time + progress_now() - start);
      *win = (window){0};
    }
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
  int64_t spe = kiln_batch_count(n, bs, 1); /* steps per epoch: full batches */
  if (spe < 1) {
    kiln_clear_error();
    return fail(KILN_ERR_SHAPE, "train: %lld examples make no batch of %lld", (long long)n,
                (long long)bs);
  }
  int64_t last = (int64_t)cfg->epochs * spe;
  if (cfg->max_steps > 0 && cfg->max_steps < last) last = cfg->max_steps;
  progress p;
  progress_init(&p, cfg->quiet ? NULL : stdout, cfg->epochs, spe, last, bs);
  double start = progress_now();
  window win = {0};
  kiln_status s = KILN_OK;
  int evaluated = 0;
  while (st->step < last) {
    uint32_t next_key[2] = {st->key[0], st->key[1]}, perm_key[2];
    if ((s = split_key(&r->m, r->dev, next_key, perm_key))) return s;
    if ((s = kiln_permutation(perm_key, n, r->order))) return fail(s, "shuffling");
    if ((s = train_epoch(r, sum, &p, last, spe, start, &win))) return s;
    if (st->step % spe == 0) memcpy(st->key, next_key, sizeof next_key); /* epoch done */
    if ((s = evaluate(r->eval.padded, r->dev, st->params, &r->test, kEvalBatch, &sum->test_loss,
                      &sum->test_accuracy)))
      return s;
    evaluated = 1;
    double now = progress_now();
    fprintf(r->metrics,
            "{\"step\": %lld, \"epoch\": %.4f, \"test_loss\": %.9g, \"test_accuracy\": %.6g, "
            "\"time\": %.3f}\n",
            (long long)st->step, (double)st->step / (double)spe, sum->test_loss, sum->test_accuracy,
            st->time + now - start);
    fflush(r->metrics);
    progress_eval(&p, st->step, sum->test_loss, sum->test_accuracy);
    double time_before = st->time;
    st->time += now - start;
    s = save(r->ckpt, r->dev, st, r->dp.jit != NULL);
    st->time = time_before;
    if (s) return s;
  }
  if (!evaluated && (s = evaluate(r->eval.padded, r->dev, st->params, &r->test, kEvalBatch,
                                  &sum->test_loss, &sum->test_accuracy)))
    return s;
  sum->steps = st->step;
  sum->seconds = p.run_seconds;
  sum->examples_per_s = progress_examples_per_s(&p);
  return KILN_OK;
}

kiln_status train_run(const train_config *cfg, train_summary *summary) {
  last_error[0] = 0;
  train_summary sum = {.resumed_from = -1};
  run r = {.own = *cfg};
  r.cfg = &r.own;
  kiln_status s = setup(&r, &sum);
  if (!s) s = train_loop(&r, &sum);
  if (r.metrics && fclose(r.metrics) && !s) {
    kiln_clear_error();
    s = fail(KILN_ERR_IO, "writing the metrics in %s: %s", cfg->out_dir, strerror(errno));
  }
  free(r.order);
  kiln_tree_free(r.st.params);
  kiln_tree_free(r.st.opt_state);
  dp_step_free(&r.dp);
  dp_eval_free(&r.eval);
  if (r.m.init_f) model_free(&r.m);
  dataset_free(&r.train);
  dataset_free(&r.test);
  kiln_ctx_free(r.ctx);
  if (summary) *summary = sum;
  return s;
}
