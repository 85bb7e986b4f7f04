/* optax's sgd, adam, adamw and rmsprop as traced init/update pairs, with
 * optax's formulas term for term: moments as (1 - decay) * g + decay * m,
 * bias correction by 1 - decay ** count, eps outside the sqrt for adam and
 * inside it for rmsprop, nesterov as g + decay * (g + decay * trace). */
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "nn/nn.h"

kiln_optimizer kiln_sgd(kiln_schedule lr, double momentum, int nesterov) {
  kiln_optimizer o;
  memset(&o, 0, sizeof o);
  o.kind = KILN_OPTIM_SGD;
  o.learning_rate = lr;
  o.momentum = momentum;
  o.nesterov = nesterov;
  return o;
}

kiln_optimizer kiln_adam(kiln_schedule lr, double b1, double b2, double eps) {
  kiln_optimizer o = kiln_sgd(lr, 0, 0);
  o.kind = KILN_OPTIM_ADAM;
  o.b1 = b1;
  o.b2 = b2;
  o.eps = eps;
  return o;
}

kiln_optimizer kiln_adamw(kiln_schedule lr, double b1, double b2, double eps, double weight_decay) {
  kiln_optimizer o = kiln_adam(lr, b1, b2, eps);
  o.kind = KILN_OPTIM_ADAMW;
  o.weight_decay = weight_decay;
  return o;
}

kiln_optimizer kiln_rmsprop(kiln_schedule lr, double decay, double eps) {
  kiln_optimizer o = kiln_sgd(lr, 0, 0);
  o.kind = KILN_OPTIM_RMSPROP;
  o.decay = decay;
  o.eps = eps;
  return o;
}

static kiln_val *wk(kiln_trace *t, double v) { return kiln_scalar_f(t, v); }

static kiln_val *full_like(kiln_trace *t, kiln_val *x, double v) {
  return kiln_full(t, kiln_val_dtype(x), kiln_val_rank(x), kiln_val_shape(x), v);
}

static int has_trace(const kiln_optimizer *o) {
  return (o->kind == KILN_OPTIM_SGD || o->kind == KILN_OPTIM_RMSPROP) && o->momentum != 0;
}

/* The state's dict, keys sorted as JAX sorts dict keys. */
static kiln_tree *state_dict(kiln_trace *t, kiln_val *count, kiln_tree *mu, kiln_tree *nu,
                             kiln_tree *trace) {
  const char *keys[4];
  kiln_tree *kids[4];
  size_t n = 0;
  keys[n] = "count", kids[n++] = kiln_tree_val(count);
  if (mu) keys[n] = "mu", kids[n++] = mu;
  if (nu) keys[n] = "nu", kids[n++] = nu;
  if (trace) keys[n] = "trace", kids[n++] = trace;
  if (kiln_trace_status(t) != KILN_OK || !kids[0]) {
    for (size_t i = 0; i < n; i++) kiln_tree_free(kids[i]);
    return NULL;
  }
  return kiln_tree_dict(n, keys, kids);
}

static int known(kiln_trace *t, const char *op, const kiln_optimizer *o) {
  if (kiln_trace_status(t) != KILN_OK) return 0;
  if (o && o->kind >= KILN_OPTIM_SGD && o->kind <= KILN_OPTIM_RMSPROP) return 1;
  kiln_trace_fail(t, KILN_ERR_ARGUMENT, o ? "kiln optimizer: unknown kind" : "optimizer is NULL");
  (void)op;
  return 0;
}

/* A tree like f with every leaf full of v. */
static kiln_tree *filled(kiln_trace *t, const knn_flat *f, double v) {
  knn_flat o;
  if (!knn_like(t, "kiln_optim_init", f, &o)) return NULL;
  for (size_t i = 0; i < f->n; i++) o.vals[i] = full_like(t, f->vals[i], v);
  kiln_tree *r = knn_unflatten(t, &o);
  knn_flat_free(&o);
  return r;
}

kiln_tree *kiln_optim_init(kiln_trace *t, const kiln_optimizer *o, const kiln_tree *params) {
  static const char *const op = "kiln_optim_init";
  knn_flat p;
  if (!known(t, op, o) || !knn_flatten(t, op, "params", params, &p)) return NULL;
  kiln_tree *mu = NULL, *nu = NULL, *tr = NULL;
  if (o->kind == KILN_OPTIM_ADAM || o->kind == KILN_OPTIM_ADAMW) {
    mu = filled(t, &p, 0);
    nu = filled(t, &p, 0);
  }
  if (o->kind == KILN_OPTIM_RMSPROP) nu = filled(t, &p, o->initial_scale);
  if (has_trace(o)) tr = filled(t, &p, 0);
  knn_flat_free(&p);
  return state_dict(t, kiln_scalar(t, KILN_I32, 0), mu, nu, tr);
}

/* (1 - decay) * g + decay * m, or with g * g for the second moment. */
static kiln_val *moment(kiln_trace *t, kiln_val *g, kiln_val *m, double decay, int order) {
  kiln_val *x = order == 2 ? kiln_mul(t, g, g) : g;
  return kiln_add(t, kiln_mul(t, wk(t, 1 - decay), x), kiln_mul(t, wk(t, decay), m));
}

/* m / (1 - decay ** count), the power in float32 as JAX computes it. */
static kiln_val *bias_correct(kiln_trace *t, kiln_val *m, double decay, kiln_val *count) {
  kiln_val *p = kiln_pow(t, kiln_scalar(t, KILN_F32, decay), kiln_convert(t, count, KILN_F32));
  kiln_val *bc = kiln_convert(t, kiln_sub(t, wk(t, 1), p), kiln_val_dtype(m));
  return kiln_div(t, m, bc);
}

typedef struct update_ctx {
  kiln_trace *t;
  const kiln_optimizer *o;
  knn_flat g, p, mu, nu, tr;           /* inputs (mu, nu, tr as the state has them) */
  knn_flat u, new_mu, new_nu, new_tr; /* outputs */
  kiln_val *count, *count_inc, *lr;
  unsigned char *decayed;             /* adamw's mask per leaf */
} update_ctx;

static int read_state(update_ctx *c, const kiln_tree *state) {
  static const char *const op = "kiln_optim_update";
  const kiln_optimizer *o = c->o;
  const kiln_tree *cnt = kiln_tree_get(state, "count");
  const kiln_leaf *cl = cnt ? kiln_tree_leaf_get(cnt) : NULL;
  if (!cl || cl->kind != KILN_LEAF_VAL) {
    kiln_trace_fail(c->t, KILN_ERR_TREE, "kiln_optim_update: state has no traced ['count']");
    return 0;
  }
  c->count = cl->u.val;
  int adam = o->kind == KILN_OPTIM_ADAM || o->kind == KILN_OPTIM_ADAMW;
  struct { int want; const char *key, *name; knn_flat *f; } parts[] = {
      {adam, "mu", "state['mu']", &c->mu},
      {adam || o->kind == KILN_OPTIM_RMSPROP, "nu", "state['nu']", &c->nu},
      {has_trace(o), "trace", "state['trace']", &c->tr}};
  for (size_t i = 0; i < 3; i++) {
    if (!parts[i].want) continue;
    if (!knn_flatten(c->t, op, parts[i].name, kiln_tree_get(state, parts[i].key), parts[i].f) ||
        !knn_same_structure(c->t, op, "grads", &c->g, parts[i].name, parts[i].f) ||
        !knn_like(c->t, op, &c->g, i == 0 ? &c->new_mu : i == 1 ? &c->new_nu : &c->new_tr))
      return 0;
  }
  return knn_like(c->t, op, &c->g, &c->u);
}

/* optax.trace over u, in place. */
static void momentum_trace(update_ctx *c) {
  kiln_trace *t = c->t;
  for (size_t i = 0; i < c->g.n; i++) {
    kiln_val *f = kiln_add(t, c->u.vals[i], kiln_mul(t, wk(t, c->o->momentum), c->tr.vals[i]));
    c->new_tr.vals[i] = f;
    c->u.vals[i] = c->o->nesterov
                       ? kiln_add(t, c->u.vals[i], kiln_mul(t, wk(t, c->o->momentum), f))
                       : f;
  }
}

/* scale_by_learning_rate: u * -lr(count), lr cast to u's dtype. */
static void scale_lr(update_ctx *c) {
  kiln_trace *t = c->t;
  for (size_t i = 0; i < c->g.n; i++)
    c->u.vals[i] = kiln_mul(t, kiln_convert(t, kiln_neg(t, c->lr), kiln_val_dtype(c->u.vals[i])),
                            c->u.vals[i]);
}

static void compute(update_ctx *c) {
  kiln_trace *t = c->t;
  const kiln_optimizer *o = c->o;
  for (size_t i = 0; i < c->g.n; i++) c->u.vals[i] = c->g.vals[i];
  switch (o->kind) {
    case KILN_OPTIM_SGD:
      if (has_trace(o)) momentum_trace(c);
      scale_lr(c);
      break;
    case KILN_OPTIM_ADAM:
    case KILN_OPTIM_ADAMW:
      for (size_t i = 0; i < c->g.n; i++) {
        kiln_val *g = c->u.vals[i];
        kiln_val *mu = c->new_mu.vals[i] = moment(t, g, c->mu.vals[i], o->b1, 1);
        kiln_val *nu = c->new_nu.vals[i] = moment(t, g, c->nu.vals[i], o->b2, 2);
        kiln_val *mh = bias_correct(t, mu, o->b1, c->count_inc);
        kiln_val *nh = bias_correct(t, nu, o->b2, c->count_inc);
        kiln_val *den = kiln_add(t, kiln_sqrt(t, kiln_add(t, nh, wk(t, o->eps_root))), wk(t, o->eps));
        c->u.vals[i] = kiln_div(t, mh, den);
        if (o->kind == KILN_OPTIM_ADAMW && c->decayed[i])
          c->u.vals[i] = kiln_add(t, c->u.vals[i], kiln_mul(t, wk(t, o->weight_decay), c->p.vals[i]));
      }
      scale_lr(c);
      break;
    case KILN_OPTIM_RMSPROP:
      for (size_t i = 0; i < c->g.n; i++) {
        kiln_val *nu = c->new_nu.vals[i] = moment(t, c->u.vals[i], c->nu.vals[i], o->decay, 2);
        c->u.vals[i] = kiln_mul(t, kiln_rsqrt(t, kiln_add(t, nu, wk(t, o->eps))), c->u.vals[i]);
      }
      scale_lr(c);
      if (has_trace(o)) momentum_trace(c);
      break;
  }
}

/* adamw's mask per leaf: every leaf unless o->mask says otherwise. */
static int read_mask(update_ctx *c, const kiln_tree *params) {
  c->decayed = malloc(c->g.n ? c->g.n : 1);
  if (!c->decayed) {
    kiln_trace_fail(c->t, KILN_ERR_OUT_OF_MEMORY, "kiln_optim_update: out of memory");
    return 0;
  }
  memset(c->decayed, 1, c->g.n ? c->g.n : 1);
  if (!c->o->mask) return 1;
  kiln_path *paths = NULL;
  size_t n = 0;
  if (kiln_tree_leaf_paths(params, &paths, &n) != KILN_OK) return 0;
  for (size_t i = 0; i < n && i < c->g.n; i++) c->decayed[i] = c->o->mask(&paths[i], c->o->mask_user) != 0;
  kiln_paths_free(paths, n);
  return 1;
}

kiln_tree *kiln_optim_update(kiln_trace *t, const kiln_optimizer *o, const kiln_tree *grads,
                             const kiln_tree *state, const kiln_tree *params,
                             kiln_tree **new_state) {
  static const char *const op = "kiln_optim_update";
  if (new_state) *new_state = NULL;
  if (!known(t, op, o)) return NULL;
  if (!new_state || !state) {
    kiln_trace_fail(t, KILN_ERR_ARGUMENT, "kiln_optim_update: state or new_state is NULL");
    return NULL;
  }
  update_ctx c;
  memset(&c, 0, sizeof c);
  c.t = t;
  c.o = o;
  kiln_tree *updates = NULL;
  int need_params = o->kind == KILN_OPTIM_ADAMW;
  if (!knn_flatten(t, op, "grads", grads, &c.g)) goto done;
  if (need_params && (!knn_flatten(t, op, "params", params, &c.p) ||
                      !knn_same_structure(t, op, "grads", &c.g, "params", &c.p) ||
                      !read_mask(&c, params)))
    goto done;
  if (!read_state(&c, state)) goto done;
  kiln_tree *clipped = NULL;
  if (o->clip_norm > 0) { /* chain(clip_by_global_norm, ...): clip the gradients first */
    clipped = kiln_clip_by_global_norm(t, grads, o->clip_norm);
    knn_flat_free(&c.g);
    int ok = knn_flatten(t, op, "clipped grads", clipped, &c.g);
    kiln_tree_free(clipped);
    if (!ok) goto done;
  }
  c.count_inc = knn_safe_increment(t, c.count);
  c.lr = kiln_schedule_value(t, &o->learning_rate, c.count);
  compute(&c);
  updates = knn_unflatten(t, &c.u);
  *new_state = state_dict(t, c.count_inc, c.new_mu.def ? knn_unflatten(t, &c.new_mu) : NULL,
                          c.new_nu.def ? knn_unflatten(t, &c.new_nu) : NULL,
                          c.new_tr.def ? knn_unflatten(t, &c.new_tr) : NULL);
  if (!*new_state) {
    kiln_tree_free(updates);
    updates = NULL;
  }
done:;
  knn_flat *all[] = {&c.g, &c.p, &c.mu, &c.nu, &c.tr, &c.u, &c.new_mu, &c.new_nu, &c.new_tr};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) knn_flat_free(all[i]);
  free(c.decayed);
  return updates;
}

kiln_tree *kiln_apply_updates(kiln_trace *t, const kiln_tree *params, const kiln_tree *updates) {
  static const char *const op = "kiln_apply_updates";
  knn_flat p, u, out;
  if (!knn_flatten(t, op, "params", params, &p)) return NULL;
  kiln_tree *r = NULL;
  if (knn_flatten(t, op, "updates", updates, &u)) {
    if (knn_same_structure(t, op, "params", &p, "updates", &u) && knn_like(t, op, &p, &out)) {
      for (size_t i = 0; i < p.n; i++) /* optax: (p + u).astype(p.dtype) */
        out.vals[i] = kiln_convert(t, kiln_add(t, p.vals[i], u.vals[i]), kiln_val_dtype(p.vals[i]));
      r = knn_unflatten(t, &out);
      knn_flat_free(&out);
    }
    knn_flat_free(&u);
  }
  knn_flat_free(&p);
  return r;
}

kiln_val *kiln_global_norm(kiln_trace *t, const kiln_tree *tree) {
  knn_flat f;
  if (!knn_flatten(t, "kiln_global_norm", "tree", tree, &f)) return NULL;
  kiln_val *sum = NULL;
  for (size_t i = 0; i < f.n; i++) {
    kiln_val *x = f.vals[i];
    int axes[KILN_MAX_RANK];
    for (int d = 0; d < kiln_val_rank(x); d++) axes[d] = d;
    kiln_val *s = kiln_reduce_sum(t, kiln_mul(t, x, x), kiln_val_rank(x), axes);
    sum = sum ? kiln_add(t, sum, s) : s;
  }
  knn_flat_free(&f);
  return sum ? kiln_sqrt(t, sum) : kiln_scalar(t, KILN_F32, 0);
}

kiln_tree *kiln_clip_by_global_norm(kiln_trace *t, const kiln_tree *updates, double max_norm) {
  static const char *const op = "kiln_clip_by_global_norm";
  kiln_val *norm = kiln_global_norm(t, updates);
  knn_flat u, out;
  if (!knn_flatten(t, op, "updates", updates, &u)) return NULL;
  kiln_tree *r = NULL;
  if (knn_like(t, op, &u, &out)) {
    kiln_val *trigger = kiln_lt(t, norm, wk(t, max_norm));
    for (size_t i = 0; i < u.n; i++) {
      kiln_val *x = u.vals[i];
      kiln_val *scaled =
          kiln_mul(t, kiln_div(t, x, kiln_convert(t, norm, kiln_val_dtype(x))), wk(t, max_norm));
      out.vals[i] = kiln_where(t, trigger, x, scaled);
    }
    r = knn_unflatten(t, &out);
    knn_flat_free(&out);
  }
  knn_flat_free(&u);
  return r;
}
