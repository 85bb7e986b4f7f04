/* Optimizers with optax's semantics, as init/update pairs over pytrees of
 * traced values: they are built from kiln's trace ops, so they go inside a
 * jitted train step. Learning rates are schedules of the step count.
 *
 * A state is a dict tree of traced values: {"count": i32[]} plus, by
 * optimizer, "mu" and "nu" (adam, adamw), "nu" (rmsprop), "trace" (momentum),
 * each with the structure of the params. Errors are sticky on the trace (see
 * trace.h): a failing call records the error and returns NULL. */
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H

#include <stdint.h>
#include "kiln/trace.h"
#include "kiln/tree.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- schedules: optax.schedules ---- */

typedef enum kiln_schedule_kind {
  KILN_SCHEDULE_CONSTANT = 0,      /* optax.constant_schedule(init_value) */
  KILN_SCHEDULE_LINEAR,            /* optax.linear_schedule */
  KILN_SCHEDULE_COSINE_DECAY,      /* optax.cosine_decay_schedule */
  KILN_SCHEDULE_WARMUP_COSINE_DECAY, /* optax.warmup_cosine_decay_schedule */
  KILN_SCHEDULE_EXPONENTIAL_DECAY  /* optax.exponential_decay */
} kiln_schedule_kind;

typedef struct kiln_schedule {
  kiln_schedule_kind kind;
  double init_value, peak_value, end_value; /* exponential: end_value NAN means none */
  int64_t transition_steps, transition_begin; /* linear, exponential */
  int64_t warmup_steps, decay_steps;          /* cosine decays */
  double alpha, exponent;                     /* cosine decays */
  double decay_rate;                          /* exponential */
  int staircase;                              /* exponential */
} kiln_schedule;

kiln_schedule kiln_constant_schedule(double value);
kiln_schedule kiln_linear_schedule(double init_value, double end_value, int64_t transition_steps,
                                   int64_t transition_begin);
kiln_schedule kiln_cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha,
                                         double exponent);
kiln_schedule kiln_warmup_cosine_decay_schedule(double init_value, double peak_value,
                                                int64_t warmup_steps, int64_t decay_steps,
                                                double end_value, double exponent);
kiln_schedule kiln_exponential_decay(double init_value, int64_t transition_steps,
                                     double decay_rate, int64_t transition_begin, int staircase,
                                     double end_value /* NAN: none */);
/* The schedule's f32 value at `count` (an integer scalar). */
kiln_val *kiln_schedule_value(kiln_trace *t, const kiln_schedule *s, kiln_val *count);

/* ---- optimizers: optax.sgd, adam, adamw, rmsprop ---- */

typedef enum kiln_optim_kind {
  KILN_OPTIM_SGD = 1,
  KILN_OPTIM_ADAM,
  KILN_OPTIM_ADAMW,
  KILN_OPTIM_RMSPROP
} kiln_optim_kind;

/* adamw's mask: nonzero where weight decay applies to the leaf at path. */
typedef int (*kiln_optim_mask_fn)(const kiln_path *path, void *user);

typedef struct kiln_optimizer {
  kiln_optim_kind kind;
  kiln_schedule learning_rate;
  double momentum;       /* sgd, rmsprop: 0 means none (optax's None) */
  int nesterov;          /* with momentum */
  double b1, b2, eps, eps_root; /* adam, adamw */
  double decay, initial_scale;  /* rmsprop (eps shared; added inside the sqrt) */
  double weight_decay;          /* adamw */
  kiln_optim_mask_fn mask;      /* adamw; NULL: every leaf, as optax's mask=None */
  void *mask_user;
  double clip_norm; /* > 0: optax.chain(clip_by_global_norm(clip_norm), <optimizer>) */
} kiln_optimizer;

/* optax's defaults for the rest of the fields. */
kiln_optimizer kiln_sgd(kiln_schedule lr, double momentum, int nesterov);
kiln_optimizer kiln_adam(kiln_schedule lr, double b1, double b2, double eps);
kiln_optimizer kiln_adamw(kiln_schedule lr, double b1, double b2, double eps,
                          double weight_decay);
kiln_optimizer kiln_rmsprop(kiln_schedule lr, double decay, double eps);

/* The initial state for params (a tree of traced values). */
kiln_tree *kiln_optim_init(kiln_trace *t, const kiln_optimizer *o, const kiln_tree *params);
/* optax's update(grads, state, params): returns the updates and writes the
 * new state; grads and params must have the same structure. */
kiln_tree *kiln_optim_update(kiln_trace *t, const kiln_optimizer *o, const kiln_tree *grads,
                             const kiln_tree *state, const kiln_tree *params,
                             kiln_tree **new_state);
/* optax.apply_updates: params + updates, leaf by leaf, in the params' dtypes. */
kiln_tree *kiln_apply_updates(kiln_trace *t, const kiln_tree *params, const kiln_tree *updates);

/* optax.tree.norm: sqrt of the sum of squares of every leaf. */
kiln_val *kiln_global_norm(kiln_trace *t, const kiln_tree *tree);
/* optax.clip_by_global_norm's update: leaves scaled by max_norm / norm when
 * the norm reaches max_norm. */
kiln_tree *kiln_clip_by_global_norm(kiln_trace *t, const kiln_tree *updates, double max_norm);

#ifdef __cplusplus
}
#endif
#endif
