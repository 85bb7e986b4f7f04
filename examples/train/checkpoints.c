/* The out dir's checkpoints over the library's rotating checkpoint
 * directory (kiln_checkpoint_save_step, kiln_checkpoint_latest): what a
 * checkpoint holds, which steps are abandoned, and the fall-back past a
 * checkpoint that passes the library's checks but does not restore into
 * this run's state. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoints.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

int64_t *ckpt_list(const char *dir, size_t *n) {
  int64_t *steps = NULL;
  if (kiln_checkpoint_all_steps(dir, &steps, n)) kiln_clear_error(); /* none */
  return steps;
}

static void ckpt_path(const char *dir, int64_t step, char *path, size_t cap) {
  snprintf(path, cap, "%s/checkpoint_%" PRId64 ".safetensors", dir, step);
}

kiln_tree *train_host_leaf(kiln_device *dev, const kiln_host_data *d) {
  kiln_array *a = NULL;
  if (kiln_host_data_to_array(d, dev, &a)) return NULL;
  kiln_tree *t = kiln_tree_array(a);
  kiln_array_release(a);
  return t;
}

kiln_tree *train_key_leaf(kiln_device *dev, const uint32_t key[2]) {
  kiln_host_data d = {.dtype = KILN_U32, .rank = 1, .shape = {2}, .data = (void *)key, .nbytes = 8};
  return train_host_leaf(dev, &d);
}

kiln_status train_read_leaf(const kiln_tree *t, void *dst, size_t size) {
  kiln_array *a = kiln_tree_leaf_array(t);
  return a ? kiln_array_to_host(a, dst, size) : KILN_ERR_TREE;
}

static kiln_tree *f64_leaf(kiln_device *dev, int rank, int64_t n, const double *v) {
  kiln_host_data d = {.dtype = KILN_F64, .rank = rank, .shape = {n}, .data = (void *)v,
                      .nbytes = (size_t)n * sizeof *v};
  return train_host_leaf(dev, &d);
}

/* The checkpoint's tree, with these params and opt_state (taken). */
static kiln_tree *state_tree(kiln_device *dev, const train_state *st, kiln_tree *params,
                             kiln_tree *opt_state) {
  int64_t step = st->step;
  kiln_host_data step_leaf = {.dtype = KILN_I64, .rank = 0, .data = &step, .nbytes = 8};
  const char *keys[6] = {"key", "opt_state", "params", "step", "time", "window"};
  return kiln_tree_dict(6, keys,
                        (kiln_tree *[]){train_key_leaf(dev, st->key), opt_state, params,
                                        train_host_leaf(dev, &step_leaf),
                                        f64_leaf(dev, 0, 1, &st->time),
                                        f64_leaf(dev, 1, WINDOW_N, st->window)});
}

/* Removes the checkpoints of steps past `step`: a run resumed from an
 * earlier checkpoint redoes them, and the library's rotation, which keeps
 * the highest steps, would otherwise keep them (and fall back to them). */
static void drop_abandoned(const char *dir, int64_t step) {
  size_t n;
  int64_t *steps = ckpt_list(dir, &n);
  for (size_t i = 0; i < n && steps[i] > step; i++) {
    char path[1200];
    ckpt_path(dir, steps[i], path, sizeof path);
    if (unlink(path) && errno != ENOENT)
      fprintf(stderr, "train: warning: removing %s: %s\n", path, strerror(errno));
  }
  free(steps);
}

kiln_status ckpt_save(const char *dir, int keep, kiln_device *dev, const train_state *st,
                      int replicated, const char *run_json, char *path, size_t cap) {
  ckpt_path(dir, st->step, path, cap);
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
  if (!s && !t) s = KILN_ERR_ARGUMENT;
  if (!s) {
    drop_abandoned(dir, st->step);
    const char *key = CKPT_RUN_KEY;
    kiln_checkpoint_options o = {.n_metadata = 1, .metadata_keys = &key,
                                 .metadata_values = &run_json};
    s = kiln_checkpoint_save_step(dir, st->step, t, &o, keep);
  }
  kiln_tree_free(t);
  return s ? train_fail(s, "saving %s", path) : KILN_OK;
}

/* Restores path into st when it holds the step its name says. */
static kiln_status restore_file(const char *path, int64_t step, kiln_device *dev,
                                train_state *st) {
  kiln_tree *expected = state_tree(dev, st, kiln_tree_clone(st->params),
                                   kiln_tree_clone(st->opt_state)),
            *got = NULL;
  kiln_status s = expected ? kiln_checkpoint_restore(path, expected, dev, &got) : KILN_ERR_ARGUMENT;
  kiln_tree_free(expected);
  if (s) return train_fail(s, "restoring %s", path);
  train_state r = *st;
  r.params = kiln_tree_clone(kiln_tree_get(got, "params"));
  r.opt_state = kiln_tree_clone(kiln_tree_get(got, "opt_state"));
  if (!(s = train_read_leaf(kiln_tree_get(got, "key"), r.key, 8)) &&
      !(s = train_read_leaf(kiln_tree_get(got, "step"), &r.step, 8)) &&
      !(s = train_read_leaf(kiln_tree_get(got, "time"), &r.time, 8)))
    s = train_read_leaf(kiln_tree_get(got, "window"), r.window, sizeof r.window);
  kiln_tree_free(got);
  if (!s && r.step != step) {
    kiln_clear_error();
    s = train_fail(KILN_ERR_TREE, "restoring %s: it holds step %lld", path, (long long)r.step);
  } else if (s || !r.params || !r.opt_state) {
    s = train_fail(s ? s : KILN_ERR_TREE, "restoring %s", path);
  }
  if (s) {
    kiln_tree_free(r.params);
    kiln_tree_free(r.opt_state);
    return s;
  }
  kiln_tree_free(st->params);
  kiln_tree_free(st->opt_state);
  *st = r;
  return KILN_OK;
}

kiln_status ckpt_restore(const char *dir, kiln_device *dev, train_state *st, int *found,
                         char *path, size_t cap) {
  *found = 0;
  char *newest = NULL;
  int64_t step = -1;
  kiln_status s = kiln_checkpoint_latest(dir, &newest, &step);
  size_t n;
  int64_t *steps = ckpt_list(dir, &n);
  if (s == KILN_ERR_NOT_FOUND && !n) { /* nothing to resume */
    kiln_clear_error();
    return KILN_OK;
  }
  if (s) {
    free(steps);
    return train_fail(s == KILN_ERR_NOT_FOUND ? KILN_ERR_IO : s, "no checkpoint in %s restores",
                      dir);
  }
  for (size_t i = 0; i < n && steps[i] > step; i++)
    fprintf(stderr, "train: warning: passing over %s/checkpoint_%" PRId64 ".safetensors: "
            "\"latest\" does not name it, or it fails its checks\n", dir, steps[i]);
  snprintf(path, cap, "%s", newest);
  free(newest);
  /* The library's choice, then the older ones, newest first. */
  char why[1024] = ""; /* the first failure */
  for (size_t next = 0;;) {
    if (!(s = restore_file(path, step, dev, st))) {
      *found = 1;
      break;
    }
    fprintf(stderr, "train: warning: passing over %s\n", train_last_error());
    if (!*why) snprintf(why, sizeof why, "%s", train_last_error());
    while (next < n && steps[next] >= step) next++;
    if (next == n) break;
    ckpt_path(dir, step = steps[next], path, cap);
  }
  free(steps);
  if (!*found) {
    kiln_clear_error();
    return train_fail(KILN_ERR_IO, "no checkpoint in %s restores (the newest: %s)", dir, why);
  }
  return KILN_OK;
}
