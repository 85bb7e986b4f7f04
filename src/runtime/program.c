/* Signatures, tracing a function into a program, and compiling it: the
 * passes, then cost and memory analyses. */
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"
#include "tree/tree.h"

void krt_signature_free(krt_signature *s) {
  kiln_treedef_free(s->def);
  free(s->avals);
  free(s->static_key);
  free(s->layout);
  memset(s, 0, sizeof *s);
}

kiln_status krt_signature_clone(const krt_signature *in, krt_signature *out) {
  memset(out, 0, sizeof *out);
  out->def = kiln_treedef_clone(in->def);
  out->avals = malloc((size_t)(in->n ? in->n : 1) * sizeof *out->avals);
  out->static_key = in->static_key_size ? malloc(in->static_key_size) : NULL;
  out->layout = in->layout ? kcore_strdup(in->layout) : NULL;
  if (!out->def || !out->avals || (in->static_key_size && !out->static_key) ||
      (in->layout && !out->layout)) {
    krt_signature_free(out);
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "signature: out of host memory");
  }
  out->n = in->n;
  memcpy(out->avals, in->avals, (size_t)in->n * sizeof *out->avals);
  if (in->static_key_size) memcpy(out->static_key, in->static_key, in->static_key_size);
  out->static_key_size = in->static_key_size;
  out->hash = in->hash;
  return KILN_OK;
}

static uint64_t krt_signature_hash(const krt_signature *s) {
  uint64_t h = kcore_hash_u64(KCORE_HASH_SEED, kiln_treedef_hash(s->def));
  for (int i = 0; i < s->n; i++) {
    const kir_aval *a = &s->avals[i];
    h = kcore_hash_u64(h, (uint64_t)a->dtype | (uint64_t)a->rank << 8 | (uint64_t)a->weak << 16);
    h = kcore_hash_bytes(h, a->shape, (size_t)a->rank * sizeof *a->shape);
  }
  return kcore_hash_bytes(kcore_hash_u64(h, s->static_key_size), s->static_key, s->static_key_size);
}

/* The aval of a leaf: an array's own (strong), or a kiln_aval behind a PTR
 * leaf (eval_shape's ShapeDtypeStruct). */
static kiln_status krt_leaf_aval(const char *op, const kiln_leaf *l, size_t i, bool allow_avals,
                                 kir_aval *out) {
  if (l->kind == KILN_LEAF_ARRAY) { /* sharded: the jit's shard hooks run it */
    kiln_status st = kdev_array_check_any(op, l->u.array);
    if (st) return kcore_fail_wrap(st, "%s: argument leaf %zu", op, i);
    const kiln_array *a = l->u.array;
    *out = kir_aval_make(a->dtype, a->rank, a->shape, false);
    return KILN_OK;
  }
  if (allow_avals && l->kind == KILN_LEAF_PTR && l->u.ptr) {
    *out = ktr_aval_import(l->u.ptr);
    return kir_aval_check(op, out);
  }
  return kcore_fail(KILN_ERR_TREE, "%s: argument leaf %zu is not an array%s", op, i,
                    allow_avals ? " or a kiln_aval" : "");
}

static kiln_status krt_signature_build(const char *op, const kiln_tree *args, bool allow_avals,
                                       const void *key, size_t key_size, krt_signature *out) {
  memset(out, 0, sizeof *out);
  if (!args) return kcore_fail(KILN_ERR_ARGUMENT, "%s: args is NULL", op);
  kiln_leaf *leaves = NULL;
  size_t n = 0;
  kiln_status st = kiln_tree_flatten(args, NULL, NULL, &leaves, &n, &out->def);
  if (st) return st;
  out->n = (int)n;
  out->avals = calloc(n ? n : 1, sizeof *out->avals);
  if (!out->avals) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (size_t i = 0; i < n && !st; i++) st = krt_leaf_aval(op, &leaves[i], i, allow_avals, &out->avals[i]);
  if (!st && key_size) {
    if (!key) st = kcore_fail(KILN_ERR_ARGUMENT, "%s: static key is NULL", op);
    else if (!(out->static_key = malloc(key_size)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    else
      memcpy(out->static_key, key, key_size);
    out->static_key_size = key_size;
  }
  kiln_leaves_free(leaves, n);
  if (st) {
    krt_signature_free(out);
    return st;
  }
  out->hash = krt_signature_hash(out);
  return KILN_OK;
}

kiln_status krt_signature_of(const char *op, const kiln_tree *args, const void *static_key,
                             size_t static_key_size, krt_signature *out) {
  return krt_signature_build(op, args, false, static_key, static_key_size, out);
}

kiln_status krt_signature_of_avals(const char *op, const kiln_tree *args, krt_signature *out) {
  return krt_signature_build(op, args, true, NULL, 0, out);
}

void krt_program_free(krt_program *p) {
  /* Before the program: the plan's executables point into it. */
  if (p->shard_state) atomic_load(&p->ctx->shard_hooks)->state_free(p->shard_state);
  krt_signature_free(&p->sig);
  free(p->donated);
  kir_program_free(p->prog);
  kiln_treedef_free(p->out_def);
  ktr_host_table_free(p->hosts);
  memset(p, 0, sizeof *p);
}

static kiln_status krt_trace_into(kiln_trace *t, const kiln_func *f, const krt_signature *sig,
                                  krt_program *out) {
  kiln_leaf *leaves = calloc(sig->n ? (size_t)sig->n : 1, sizeof *leaves);
  kiln_tree *args = NULL, *res = NULL;
  kiln_val **vals = NULL;
  int n_out = 0;
  kiln_status st = leaves ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  for (int i = 0; i < sig->n && !st; i++) {
    kir_vid vid;
    st = kir_add_invar(t->prog, &sig->avals[i], &vid);
    kiln_val *v = st ? NULL : ktr_val(t, vid);
    if (!st && !v) st = t->status;
    leaves[i] = (kiln_leaf){.kind = KILN_LEAF_VAL, .u.val = v};
  }
  if (!st) st = kiln_tree_unflatten(sig->def, leaves, (size_t)sig->n, &args);
  if (!st) st = ktr_trace_call(t, f, args, &res);
  if (!st) st = ktr_flatten_vals(t, f->name, res, &vals, &n_out, &out->out_def);
  kir_vid *outs = NULL;
  if (!st && n_out && !(outs = kir_alloc(t->prog, (size_t)n_out * sizeof *outs)))
    st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  for (int i = 0; i < n_out && !st; i++) outs[i] = vals[i]->vid;
  if (!st) st = kir_set_outputs(t->prog, n_out, outs);
  if (!st) st = t->status;
  if (st && t->status) kcore_fail(t->status, "%s", kiln_trace_error(t));
  out->n_out = n_out;
  free(vals);
  kiln_tree_free(res);
  kiln_tree_free(args);
  free(leaves);
  return st;
}

kiln_status krt_trace(kiln_ctx *ctx, kiln_device *dev, const kiln_func *f, const krt_signature *sig,
                      krt_program *out) {
  memset(out, 0, sizeof *out);
  kiln_promotion_mode mode = ctx->config.opts.promotion == KILN_PROMOTION_OPT_STRICT
                                 ? KILN_PROMOTION_STRICT
                                 : KILN_PROMOTION_STANDARD;
  kiln_trace *t = NULL;
  kiln_status st = ktr_trace_new(mode, &t);
  if (st) return st;
  out->ctx = ctx;
  out->dev = dev;
  out->f = f;
  st = krt_trace_into(t, f, sig, out);
  if (!st) st = kir_verify(t->prog);
  if (st) {
    kcore_fail_wrap(st, "tracing %s", f->name);
    kiln_treedef_free(out->out_def);
    out->out_def = NULL;
    ktr_trace_free(t, false);
    return st;
  }
  out->prog = t->prog;
  out->hosts = ktr_take_hosts(t);
  ktr_trace_free(t, true);
  return KILN_OK;
}
