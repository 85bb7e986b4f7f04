/* Traces, values, sticky errors and lifting values into sub-traces. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

/* Trace ids only ever grow, so a value of a finished trace never matches a
 * live one, even if the memory of its trace is reused. */
static _Atomic uint64_t ktr_next_id = 1;

static kiln_status ktr_trace_alloc(kiln_trace *parent, kir_program *prog, kiln_trace **out) {
  kiln_trace *t = calloc(1, sizeof *t);
  if (!t) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  t->id = atomic_fetch_add(&ktr_next_id, 1);
  t->parent = parent;
  t->root = parent ? parent->root : t;
  t->prog = prog;
  t->promotion = parent ? parent->promotion : KILN_PROMOTION_STANDARD;
  t->hosts = parent ? parent->hosts : NULL;
  *out = t;
  return KILN_OK;
}

kiln_status ktr_trace_new(kiln_promotion_mode promotion, kiln_trace **out) {
  kir_program *p;
  kiln_status st = kir_program_new(&p);
  if (st) return st;
  ktr_host_table *hosts = calloc(1, sizeof *hosts);
  if (!hosts || (st = ktr_trace_alloc(NULL, p, out))) {
    free(hosts);
    kir_program_free(p);
    return st ? st : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  }
  (*out)->promotion = promotion;
  (*out)->hosts = hosts;
  return KILN_OK;
}

kiln_status ktr_subtrace_new(kiln_trace *parent, kiln_trace **out) {
  kir_program *sub;
  kiln_status st = kir_program_new_sub(parent->prog, &sub);
  if (st) return st;
  return ktr_trace_alloc(parent, sub, out);
}

void ktr_trace_free(kiln_trace *t, bool keep_program) {
  if (!t) return;
  if (!t->parent) {
    if (!keep_program) kir_program_free(t->prog);
    ktr_host_table_free(t->hosts);
  }
  free(t->captures);
  free(t->error);
  free(t);
}

ktr_host_table *ktr_take_hosts(kiln_trace *t) {
  ktr_host_table *h = t->hosts;
  t->hosts = NULL;
  return h;
}

void ktr_host_table_free(ktr_host_table *h) {
  if (!h) return;
  free(h->v);
  free(h);
}

/* ---- sticky errors ---- */

kiln_val *ktr_fail(kiln_trace *t, kiln_status st) {
  if (t && t->status == KILN_OK) {
    t->status = st;
    t->error = kcore_strdup(kiln_last_error());
  } else if (t) {
    ktr_sticky(t, "trace"); /* a later error: the first one stays the message */
  }
  return NULL;
}

kiln_val *ktr_sticky(const kiln_trace *t, const char *op) {
  if (!t)
    kcore_fail(KILN_ERR_ARGUMENT, "%s: trace is NULL", op);
  else if (t->status)
    kcore_fail(t->status, "%s", t->error ? t->error : kiln_status_str(t->status));
  return NULL;
}

kiln_val *ktr_failf(kiln_trace *t, kiln_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kcore_vfail(st, fmt, ap);
  va_end(ap);
  return ktr_fail(t, st);
}

/* Whether v belongs to t or a trace enclosing it, without reading v->trace. */
static bool ktr_reachable(const kiln_trace *t, const kiln_val *v) {
  for (; t; t = t->parent)
    if (t->id == v->trace_id) return true;
  return false;
}

bool ktr_ok(kiln_trace *t, const char *op, int n, kiln_val *const *vals) {
  if (!t) {
    kcore_fail(KILN_ERR_ARGUMENT, "%s: trace is NULL", op);
    return false;
  }
  if (t->status) {
    ktr_sticky(t, op);
    return false;
  }
  for (int i = 0; i < n; i++) {
    if (!vals[i]) {
      /* A NULL from kiln_arg / kiln_arg_path: its message names the path. */
      char why[512]; /* copied: ktr_failf rewrites the thread's message */
      snprintf(why, sizeof why, "%s", kiln_last_error());
      bool from_arg = strncmp(why, "kiln_arg", 8) == 0;
      ktr_failf(t, KILN_ERR_ARGUMENT, "%s: operand %d is NULL%s%s", op, i, from_arg ? ": " : "",
                from_arg ? why : "");
      return false;
    }
    if (!ktr_reachable(t, vals[i])) {
      ktr_failf(t, KILN_ERR_ARGUMENT,
                "%s: operand %d is a value of another trace (it escaped the function that "
                "traced it, or comes from an unrelated jit)", op, i);
      return false;
    }
  }
  return true;
}

kiln_status kiln_trace_status(const kiln_trace *t) {
  ktr_sticky(t, "kiln_trace_status");
  return t ? t->status : KILN_ERR_ARGUMENT;
}

const char *kiln_trace_error(const kiln_trace *t) {
  return t && t->error ? t->error : "";
}

void kiln_trace_fail(kiln_trace *t, kiln_status s, const char *msg) {
  if (!t) return;
  if (s == KILN_OK) s = KILN_ERR_ARGUMENT;
  ktr_failf(t, s, "%s", msg ? msg : "user error");
}

/* ---- values ---- */

kiln_val *ktr_val(kiln_trace *t, kir_vid vid) {
  kiln_val *v = kir_alloc(t->prog, sizeof *v);
  if (!v) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
  v->trace = t;
  v->trace_id = t->id;
  v->vid = vid;
  return v;
}

const kir_aval *ktr_aval(const kiln_val *v) { return kir_var_aval(v->trace->prog, v->vid); }

static kiln_status ktr_add_capture(kiln_trace *t, kiln_val *outer, kir_vid *out) {
  for (int i = 0; i < t->n_captures; i++)
    if (t->captures[i].outer->vid == outer->vid) {
      *out = t->captures[i].inner;
      return KILN_OK;
    }
  if (t->n_captures == t->cap_captures) {
    int cap = t->cap_captures ? 2 * t->cap_captures : 8;
    ktr_capture *c = realloc(t->captures, (size_t)cap * sizeof *c);
    if (!c) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "trace: out of host memory");
    t->captures = c;
    t->cap_captures = cap;
  }
  kiln_status st = kir_add_invar(t->prog, ktr_aval(outer), out);
  if (st) return st;
  t->captures[t->n_captures++] = (ktr_capture){outer, *out};
  return KILN_OK;
}

kiln_status ktr_use(kiln_trace *t, const char *op, kiln_val *v, kir_vid *out) {
  if (v->trace == t) {
    *out = v->vid;
    return KILN_OK;
  }
  if (!ktr_reachable(t, v))
    return kcore_fail(KILN_ERR_ARGUMENT,
                      "%s: a value of another trace was used (a traced value escaped its "
                      "function, or came from an unrelated jit)",
                      op);
  /* Lift into the parent first, then capture the parent's value here. */
  kir_vid in_parent;
  kiln_status st = ktr_use(t->parent, op, v, &in_parent);
  if (st) return st;
  kiln_val *pv = v->trace == t->parent ? v : ktr_val(t->parent, in_parent);
  if (!pv) return t->parent->status;
  return ktr_add_capture(t, pv, out);
}

kiln_val *ktr_bind(kiln_trace *t, const char *op, kir_prim prim, const kir_params *params,
                   int n_in, kiln_val *const *in, int n_out, kiln_val **outs) {
  if (!ktr_ok(t, op, n_in, in)) return NULL;
  kir_vid small[8], *vids = n_in <= 8 ? small : malloc((size_t)n_in * sizeof *vids);
  if (!vids) return ktr_failf(t, KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  kiln_status st = KILN_OK;
  for (int i = 0; i < n_in && !st; i++) st = ktr_use(t, op, in[i], &vids[i]);
  int e = -1;
  if (!st) st = kir_add_eqn(t->prog, prim, params, n_in, vids, &e);
  if (!st) st = kir_eqn_set_source(t->prog, e, op); /* for messages about this equation */
  if (vids != small) free(vids);
  if (st) {
    if (strncmp(kiln_last_error(), op, strlen(op)) != 0) kcore_fail_wrap(st, "%s", op);
    return ktr_fail(t, st);
  }
  const kir_eqn *eq = &t->prog->eqns[e];
  kiln_val *first = NULL;
  for (int i = 0; i < eq->n_out; i++) {
    kiln_val *v = ktr_val(t, eq->out[i]);
    if (!v) return NULL;
    if (i == 0) first = v;
    if (outs && i < n_out) outs[i] = v;
  }
  return first; /* NULL for an effect without results: callers read t->status */
}

kiln_val *ktr_literal(kiln_trace *t, kiln_dtype dtype, bool weak, kir_scalar v) {
  if (!t || t->status) return ktr_sticky(t, "kiln_scalar");
  kir_vid vid;
  kiln_status st = kir_add_literal(t->prog, dtype, weak, v, &vid);
  if (st) return ktr_fail(t, st);
  return ktr_val(t, vid);
}

kiln_status kiln_val_aval(const kiln_val *v, kiln_aval *out) {
  if (!v || !out) return kcore_fail(KILN_ERR_ARGUMENT, "kiln_val_aval: value or out is NULL");
  ktr_aval_export(ktr_aval(v), out);
  return KILN_OK;
}

kiln_dtype kiln_val_dtype(const kiln_val *v) { return v ? ktr_aval(v)->dtype : KILN_INVALID_DTYPE; }
int kiln_val_rank(const kiln_val *v) { return v ? ktr_aval(v)->rank : 0; }
const int64_t *kiln_val_shape(const kiln_val *v) {
  if (!v) kcore_fail(KILN_ERR_ARGUMENT, "kiln_val_shape: the value is NULL");
  return v ? ktr_aval(v)->shape : NULL;
}

void ktr_aval_export(const kir_aval *in, kiln_aval *out) {
  memset(out, 0, sizeof *out);
  out->dtype = in->dtype;
  out->rank = in->rank;
  out->weak = in->weak;
  memcpy(out->shape, in->shape, sizeof out->shape);
}

kir_aval ktr_aval_import(const kiln_aval *in) {
  return kir_aval_make(in->dtype, in->rank, in->shape, in->weak != 0);
}

kiln_status ktr_axis(const char *op, int axis, int rank, int *out) {
  if (axis < -rank || axis >= rank || (rank == 0))
    return kcore_fail(KILN_ERR_OUT_OF_RANGE, "%s: axis %d is out of range for rank %d", op, axis,
                      rank);
  *out = axis < 0 ? axis + rank : axis;
  return KILN_OK;
}
