/* flax.jax_utils.pad_shard_unpad: pads the batch axis of every non-static
 * argument with zeros on the host to a multiple of the device count (and of
 * min_device_batch per device), lays it out as [devices, per-device batch,
 * ...] split over the devices (pmap's layout), calls the wrapped function,
 * and cuts the padding off every output leaf after bringing it back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/dist.h"
#include "kiln/jit.h"

struct kiln_padded {
  kiln_apply_fn f;
  void *user;
  int *static_argnums;
  int num_static_argnums;
  char **static_argnames;
  int num_static_argnames;
  int static_return;
  int64_t min_device_batch;
  kiln_sharding *layout; /* pmap's: [devices, ...] split along axis 0 */
  int64_t ndevices;
};

static const char kdist_psu[] = "kiln_pad_shard_unpad";

kiln_status kiln_apply_jit(void *jit, const kiln_tree *args, kiln_tree **out) {
  return kiln_jit_call(jit, args, out);
}

void kiln_pad_shard_unpad_options_init(kiln_pad_shard_unpad_options *o) {
  static const int first[1] = {0}; /* flax's default: params, the first argument */
  memset(o, 0, sizeof *o);
  o->static_argnums = first;
  o->num_static_argnums = 1;
}

void kiln_padded_free(kiln_padded *p) {
  if (!p) return;
  for (int i = 0; i < p->num_static_argnames; i++) free(p->static_argnames[i]);
  free(p->static_argnames);
  free(p->static_argnums);
  kiln_sharding_free(p->layout);
  free(p);
}

kiln_status kiln_pad_shard_unpad(kiln_ctx *ctx, kiln_apply_fn f, void *user,
                                 const kiln_pad_shard_unpad_options *opts, kiln_padded **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", kdist_psu);
  *out = NULL;
  if (!f) return kcore_fail(KILN_ERR_ARGUMENT, "%s: the wrapped function is null", kdist_psu);
  kiln_pad_shard_unpad_options o;
  if (opts) o = *opts;
  else kiln_pad_shard_unpad_options_init(&o);
  if (o.min_device_batch < 0 || o.num_static_argnums < 0 || o.num_static_argnames < 0 ||
      (o.num_static_argnums && !o.static_argnums) || (o.num_static_argnames && !o.static_argnames))
    return kcore_fail(KILN_ERR_ARGUMENT, "%s: invalid options (min_device_batch %lld, %d static "
                      "argnums, %d static argnames)", kdist_psu, (long long)o.min_device_batch,
                      o.num_static_argnums, o.num_static_argnames);
  kiln_padded *p = calloc(1, sizeof *p);
  if (!p) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kdist_psu);
  p->f = f, p->user = user, p->static_return = o.static_return;
  p->min_device_batch = o.min_device_batch;
  kiln_status st = kdist_stack_sharding(kdist_psu, ctx, o.ndevices, o.devices, &p->layout);
  p->static_argnums = calloc((size_t)o.num_static_argnums + 1, sizeof *p->static_argnums);
  p->static_argnames = calloc((size_t)o.num_static_argnames + 1, sizeof *p->static_argnames);
  if (!st && (!p->static_argnums || !p->static_argnames))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kdist_psu);
  for (int i = 0; !st && i < o.num_static_argnums; i++)
    p->static_argnums[p->num_static_argnums++] = o.static_argnums[i];
  for (int i = 0; !st && i < o.num_static_argnames; i++) {
    if (!(p->static_argnames[i] = kcore_strdup(o.static_argnames[i] ? o.static_argnames[i] : "")))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kdist_psu);
    p->num_static_argnames = i + 1;
  }
  if (st) {
    kiln_padded_free(p);
    return st;
  }
  p->ndevices = kiln_sharding_device_count(p->layout);
  *out = p;
  return KILN_OK;
}

/* Whether the leaf at path belongs to a static argument: one whose
 * position (or, when the arguments are a dict of keywords, name) the
 * options list. Its leaves are forwarded as they are. */
static bool kdist_is_static(const void *user, const kiln_path *path) {
  const kiln_padded *p = user;
  if (path->len == 0) return false;
  const kiln_key *k = &path->keys[0];
  for (int i = 0; k->kind == KILN_KEY_INDEX && i < p->num_static_argnums; i++)
    if (p->static_argnums[i] == (int)k->index) return true;
  for (int i = 0; k->kind == KILN_KEY_DICT && i < p->num_static_argnames; i++)
    if (strcmp(p->static_argnames[i], k->name) == 0) return true;
  return false;
}

/* The call's batch size: every leaf of every padded argument must be an
 * array with a leading axis, all of one length (flax asserts the same). */
typedef struct kdist_batch {
  int64_t b; /* -1 until the first leaf */
  char first[256];
} kdist_batch;

static kiln_status kdist_batch_leaf(void *user, const char *where, kiln_array *x,
                                    kiln_array **out) {
  kdist_batch *bs = user;
  char t[200];
  kiln_status st = kdev_array_check_any(kdist_psu, x);
  if (st) return kcore_fail_wrap(st, "%s: argument leaf %s", kdist_psu, where);
  kiln_array_describe(x, t, sizeof t);
  if (x->rank == 0)
    return kcore_fail(KILN_ERR_SHAPE, "%s: argument leaf %s is a scalar %s with no batch axis to "
                      "pad (make it static)", kdist_psu, where, t);
  if (bs->b >= 0 && x->shape[0] != bs->b)
    return kcore_fail(KILN_ERR_SHAPE, "%s: inconsistent batch sizes: %lld at %s, %lld at %s (%s)",
                      kdist_psu, (long long)bs->b, bs->first, (long long)x->shape[0], where, t);
  if (bs->b < 0) {
    bs->b = x->shape[0];
    snprintf(bs->first, sizeof bs->first, "%s", where);
  }
  kiln_array_retain(x);
  *out = x;
  return KILN_OK;
}

typedef struct kdist_pad {
  const kiln_padded *p;
  int64_t rows; /* per device, after padding */
} kdist_pad;

/* x [b, ...] padded with zero rows to [d * rows, ...] on the host and put
 * on the devices as [d, rows, ...] (flax pads with np.zeros). */
static kiln_status kdist_pad_leaf(void *user, const char *where, kiln_array *x,
                                  kiln_array **out) {
  const kdist_pad *pad = user;
  int64_t shape[KILN_MAX_RANK + 1] = {pad->p->ndevices, pad->rows};
  if (x->rank + 1 > KILN_MAX_RANK)
    return kcore_fail(KILN_ERR_SHAPE, "%s: argument leaf %s has rank %d; the device axis would "
                      "pass the limit of %d", kdist_psu, where, x->rank, KILN_MAX_RANK);
  for (int d = 1; d < x->rank; d++) shape[d + 1] = x->shape[d];
  size_t have = kiln_array_nbytes(x), row = x->shape[0] ? have / (size_t)x->shape[0] : 0;
  if (!row) { /* rows of zero bytes, or an empty batch: only the size matters */
    row = kiln_dtype_size(x->dtype);
    for (int d = 1; d < x->rank; d++) row *= (size_t)x->shape[d];
  }
  size_t total = (size_t)(pad->p->ndevices * pad->rows) * row;
  char *host = calloc(total ? total : 1, 1);
  if (!host) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kdist_psu);
  kiln_status st = have ? kiln_array_to_host(x, host, have) : KILN_OK;
  if (!st)
    st = kiln_device_put_host(pad->p->layout, x->dtype, x->rank + 1, shape, host, total, out);
  free(host);
  if (st) return kcore_fail_wrap(st, "%s: padding argument leaf %s", kdist_psu, where);
  return KILN_OK;
}

typedef struct kdist_unpad {
  int64_t b;
  kiln_device *dev;
} kdist_unpad;

/* [d, rows, ...] back to the host, as [d * rows, ...], cut to [b, ...] on
 * the first device (flax: device_get, reshape, [:b]). */
static kiln_status kdist_unpad_leaf(void *user, const char *where, kiln_array *x,
                                    kiln_array **out) {
  const kdist_unpad *u = user;
  char t[200];
  kiln_status st = kdev_array_check_any(kdist_psu, x);
  if (st) return kcore_fail_wrap(st, "%s: output leaf %s", kdist_psu, where);
  kiln_array_describe(x, t, sizeof t);
  if (x->rank < 2 || x->shape[0] * x->shape[1] < u->b)
    return kcore_fail(KILN_ERR_SHAPE, "%s: output leaf %s is %s; unpadding needs [devices, "
                      "per-device batch, ...] holding the batch of %lld (or static_return)",
                      kdist_psu, where, t, (long long)u->b);
  size_t nb = kiln_array_nbytes(x);
  char *host = malloc(nb ? nb : 1);
  if (!host) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", kdist_psu);
  int64_t shape[KILN_MAX_RANK] = {u->b};
  for (int d = 2; d < x->rank; d++) shape[d - 1] = x->shape[d];
  size_t rows = (size_t)(x->shape[0] * x->shape[1]), keep = rows ? nb / rows * (size_t)u->b : 0;
  st = nb ? kiln_array_to_host(x, host, nb) : KILN_OK;
  if (!st) st = kiln_array_from_host(u->dev, x->dtype, x->rank - 1, shape, host, keep, out);
  free(host);
  if (st) return kcore_fail_wrap(st, "%s: unpadding output leaf %s", kdist_psu, where);
  return KILN_OK;
}

kiln_status kiln_padded_call(kiln_padded *p, const kiln_tree *args, kiln_tree **out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "%s: out is null", kdist_psu);
  *out = NULL;
  if (!p || !args) return kcore_fail(KILN_ERR_ARGUMENT, "%s: null argument", kdist_psu);
  kiln_node_kind kind = kiln_tree_kind(args);
  if (kind != KILN_NODE_TUPLE && kind != KILN_NODE_LIST && kind != KILN_NODE_DICT)
    return kcore_fail(KILN_ERR_TREE, "%s: the arguments must be a tuple or list (positional) or "
                      "a dict (keywords)", kdist_psu);
  kdist_batch bs = {.b = -1};
  kiln_tree *seen = NULL, *padded = NULL, *result = NULL;
  kiln_status st =
      kdist_map_arrays_except(kdist_psu, args, kdist_is_static, p, kdist_batch_leaf, &bs, &seen);
  kiln_tree_free(seen);
  if (!st && bs.b < 0)
    st = kcore_fail(KILN_ERR_ARGUMENT, "%s: no argument leaf to take the batch size from (every "
                    "argument is static or empty)", kdist_psu);
  if (st) return st;
  int64_t d = p->ndevices, rows = bs.b / d + (bs.b % d != 0);
  if (p->min_device_batch && rows < p->min_device_batch) rows = p->min_device_batch;
  kdist_pad pad = {p, rows};
  if ((st = kdist_map_arrays_except(kdist_psu, args, kdist_is_static, p, kdist_pad_leaf, &pad,
                                    &padded))) return st;
  st = p->f(p->user, padded, &result);
  kiln_tree_free(padded);
  if (st || p->static_return) {
    *out = result;
    return st;
  }
  kdist_unpad u = {bs.b, kiln_sharding_device(p->layout, 0)};
  st = kdist_map_arrays(kdist_psu, result, kdist_unpad_leaf, &u, out);
  kiln_tree_free(result);
  return st;
}
