/* KILN_DEBUG_NANS: after each jitted call, the floating-point results are
 * scanned for NaN and infinity. On a hit the call fails with
 * KILN_ERR_NONFINITE, and the message says where the value came from, as
 * jax_debug_nans does: an argument that already held one, else the first
 * equation that made one, found by running the program again one primitive
 * at a time on the reference evaluator (inside cond/while/scan bodies,
 * custom calls and shard_map bodies too) with the call's inputs. Donated
 * inputs are copied to the host before the run, so the re-run can read them
 * after the call consumed them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"
#include "tree/tree.h"

/* One leaf's values on the host: in place on a CPU device, else a copy. */
typedef struct krt_host_leaf {
  kir_buffer buf;
  bool owned;
} krt_host_leaf;

static kiln_status krt_host_leaf_of(kiln_array *a, krt_host_leaf *out) {
  static char empty[1];
  size_t nb = kiln_array_nbytes(a);
  *out = (krt_host_leaf){.buf = {.data = empty, .nbytes = nb}};
  out->buf.aval = kir_aval_make(a->dtype, a->rank, a->shape, false);
  if (nb == 0) return KILN_OK;
  kiln_status st;
  if (!a->shards && (a->device->backend->caps & KDEV_CAP_HOST_MEMORY)) {
    if ((st = kiln_array_block_until_ready(a))) return st;
    out->buf.data = (void *)a->buf.ptr;
    return KILN_OK;
  }
  if (!(out->buf.data = malloc(nb)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory for %zu bytes", nb);
  out->owned = true;
  return kiln_array_to_host(a, out->buf.data, nb);
}

static void krt_host_leaves_free(krt_host_leaf *v, int n) {
  for (int i = 0; v && i < n; i++)
    if (v[i].owned) free(v[i].buf.data);
  free(v);
}

static bool krt_holds(const kir_nonfinite *nf, bool nan) { return nan ? nf->nan > 0 : nf->inf > 0; }
static const char *krt_kind(bool nan) { return nan ? "a NaN" : "an infinity"; }

static void krt_scan_buffer(const kir_buffer *b, kir_nonfinite *nf) {
  kir_nonfinite_scan(b->aval.dtype, b->data, kir_aval_size(&b->aval), nf);
}

/* ---- the equation hunt: an observer of the reference re-run ---- */

/* Where an equation ran: its program, index and shard_map member (-1). */
typedef struct krt_site {
  const kir_program *p;
  int eqn;
  int64_t member;
} krt_site;

typedef struct krt_hunt {
  bool nan;          /* hunting NaN (else infinity) */
  bool found;        /* culprit: its results hold the kind, its operands none */
  krt_site culprit;
  int out_index;     /* the culprit's result holding it */
  kir_nonfinite out_nf;
  bool other_in;     /* the culprit's operands held the other kind */
  bool inf_seen;     /* hunting NaN: the first equation that made an infinity */
  krt_site inf_origin;
  bool const_seen;   /* the first equation passing the kind on from a literal or constant */
  krt_site const_origin;
  int const_operand;
} krt_hunt;

static kiln_status krt_observe(void *user, const kir_program *p, int eqn, int64_t member,
                               const kir_buffer *in, const kir_buffer *out) {
  krt_hunt *h = user;
  const kir_eqn *e = &p->eqns[eqn];
  bool in_kind = false, in_nonfinite = false;
  int const_k = -1;
  for (int k = 0; k < e->n_in; k++) {
    kir_nonfinite nf;
    krt_scan_buffer(&in[k], &nf);
    in_nonfinite |= nf.nan || nf.inf;
    if (!krt_holds(&nf, h->nan)) continue;
    in_kind = true;
    kir_var_kind vk = p->vars[e->in[k]].kind;
    if (const_k < 0 && (vk == KIR_VAR_LITERAL || vk == KIR_VAR_CONSTVAR)) const_k = k;
  }
  for (int k = 0; k < e->n_out; k++) {
    kir_nonfinite nf;
    krt_scan_buffer(&out[k], &nf);
    krt_site here = {p, eqn, member};
    if (h->nan && !h->inf_seen && nf.inf && !in_nonfinite) {
      h->inf_seen = true;
      h->inf_origin = here;
    }
    if (!krt_holds(&nf, h->nan)) continue;
    if (in_kind) {
      if (const_k >= 0 && !h->const_seen) {
        h->const_seen = true;
        h->const_origin = here;
        h->const_operand = const_k;
      }
      continue;
    }
    h->found = true;
    h->culprit = here;
    h->out_index = k;
    h->out_nf = nf;
    h->other_in = in_nonfinite;
    return kcore_fail(KILN_ERR_NONFINITE, "debug_nans: found"); /* stops the re-run */
  }
  return KILN_OK;
}

static void krt_discard_print(void *user, const char *text) {
  (void)user;
  (void)text; /* the call printed its debug_print lines already */
}

/* Runs c's program on the reference evaluator over the host inputs with
 * the hunt watching. A stop by the hunt is no failure. */
static kiln_status krt_rerun(const kiln_compiled *c, const krt_host_leaf *in, krt_hunt *h) {
  const kir_program *p = c->p.prog;
  int n_in = c->p.sig.n, n_out = p->n_outvars;
  kir_buffer *ins = calloc((size_t)n_in + 1, sizeof *ins);
  kir_buffer *outs = calloc((size_t)n_out + 1, sizeof *outs);
  kiln_status st = ins && outs ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of "
                                                      "host memory");
  for (int i = 0; !st && i < n_in; i++) {
    ins[i] = in[i].buf;
    ins[i].aval = c->p.sig.avals[i];
  }
  for (int i = 0; !st && i < n_out; i++) {
    const kir_aval *a = kir_var_aval(p, p->outvars[i]);
    outs[i].aval = *a;
    outs[i].nbytes = (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype);
    if (!(outs[i].data = malloc(outs[i].nbytes ? outs[i].nbytes : 1)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory");
  }
  if (!st) {
    kir_eval_env env;
    kir_eval_env_init(&env, kir_reference_evals()); /* shard_map bodies in lockstep, one thread */
    env.host_call = c->env.host_call;
    env.host_user = c->env.host_user;
    env.print = krt_discard_print;
    env.observe = krt_observe;
    env.observe_user = h;
    st = kir_eval_program(&env, p, ins, outs);
    if (h->found) st = KILN_OK;
  }
  for (int i = 0; outs && i < n_out; i++) free(outs[i].data);
  free(ins);
  free(outs);
  return st;
}

/* ---- the message ---- */

typedef struct krt_msg {
  char buf[3072];
  size_t len;
} krt_msg;

static void krt_put(krt_msg *m, const char *fmt, ...) KCORE_PRINTF(2, 3);
static void krt_put(krt_msg *m, const char *fmt, ...) {
  if (m->len >= sizeof m->buf - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(m->buf + m->len, sizeof m->buf - m->len, fmt, ap);
  va_end(ap);
  if (n > 0) m->len += (size_t)n < sizeof m->buf - m->len ? (size_t)n : sizeof m->buf - 1 - m->len;
}

/* "equation 1 of body_jaxpr of equation 4 (scan)", on which device. */
static void krt_put_position(krt_msg *m, const krt_site *s) {
  krt_put(m, "equation %d", s->eqn);
  for (const kir_program *q = s->p; q->parent; q = q->parent) {
    char field[64];
    int owner = kir_program_owner(q, field, sizeof field);
    if (owner < 0) {
      krt_put(m, " of sub-program %d", q->index);
      continue;
    }
    krt_put(m, " of %s of equation %d (%s)", field, owner,
            kir_prim_name(q->parent->eqns[owner].prim));
  }
  krt_put(m, " of the compiled program");
  if (s->member >= 0) krt_put(m, " on mesh device %lld", (long long)s->member);
}

/* "`c:f32[3] = log b:f32[3]` (equation 2 ..., traced by kiln_log)" */
static void krt_put_site(krt_msg *m, const krt_site *s) {
  const kir_eqn *e = &s->p->eqns[s->eqn];
  char *text = NULL;
  if (kir_print_eqn(s->p, s->eqn, &text) == KILN_OK) {
    krt_put(m, "`%s` (", text);
    free(text);
  } else {
    krt_put(m, "%s (", kir_prim_name(e->prim));
  }
  krt_put_position(m, s);
  if (e->source) krt_put(m, ", traced by %s", e->source);
  krt_put(m, ")");
}

/* "argument 1 ['params']['w']", "result ['loss']": the first key of an
 * argument path is the argument's position. */
static void krt_put_leaf(krt_msg *m, const char *what, const kiln_path *paths, int leaf,
                         bool positional) {
  char key[512] = "";
  if (!paths) {
    krt_put(m, "%s leaf %d", what, leaf);
    return;
  }
  kiln_path p = paths[leaf];
  if (positional && p.len > 0 && p.keys[0].kind == KILN_KEY_INDEX) {
    kiln_path rest = {p.len - 1, p.keys + 1};
    kiln_path_str(&rest, key, sizeof key);
    krt_put(m, "%s %zu%s%s", what, p.keys[0].index, key[0] ? " " : "", key);
    return;
  }
  kiln_path_str(&p, key, sizeof key);
  krt_put(m, "%s%s%s", what, key[0] ? " " : "", key);
}

static void krt_put_count(krt_msg *m, const kir_nonfinite *nf, bool nan, int64_t size) {
  krt_put(m, " (%lld of %lld elements, the first at flat index %lld)",
          (long long)(nan ? nf->nan : nf->inf), (long long)size,
          (long long)(nan ? nf->first_nan : nf->first_inf));
}

/* Whether the program reads invar i at all: an argument it never reads is
 * no cause, whatever it holds. */
static bool krt_reads_input(const kir_program *p, int i) {
  if (i >= p->n_invars) return true;
  kir_vid v = p->invars[i];
  for (int k = 0; k < p->n_outvars; k++)
    if (p->outvars[k] == v) return true;
  for (int e = 0; e < p->n_eqns; e++)
    for (int k = 0; k < p->eqns[e].n_in; k++)
      if (p->eqns[e].in[k] == v) return true;
  return false;
}

/* Names where the kind came from after the results showed it. */
static void krt_explain(const kiln_compiled *c, const kiln_tree *args, const krt_host_leaf *in,
                        bool nan, krt_msg *m) {
  int n = c->p.sig.n;
  kiln_path *paths = NULL;
  size_t np = 0;
  if (kiln_tree_leaf_paths(args, &paths, &np) || np != (size_t)n) {
    kiln_paths_free(paths, np);
    paths = NULL;
    np = 0;
  }
  for (int i = 0; i < n; i++) {
    kir_nonfinite nf;
    krt_scan_buffer(&in[i].buf, &nf);
    if (!krt_holds(&nf, nan) || !krt_reads_input(c->p.prog, i)) continue;
    krt_put(m, "; ");
    krt_put_leaf(m, "argument", paths, i, true);
    krt_put(m, " already holds %s", krt_kind(nan));
    krt_put_count(m, &nf, nan, kir_aval_size(&in[i].buf.aval));
    krt_put(m, ": it was passed in, no equation made it");
    kiln_paths_free(paths, np);
    return;
  }
  kiln_paths_free(paths, np);
  if (c->p.shard_state) {
    krt_put(m, "; a program over sharded arguments is not re-run equation by equation: call the "
            "function on unsharded arrays to find the equation");
    return;
  }
  krt_hunt h = {.nan = nan};
  kiln_status st = krt_rerun(c, in, &h);
  if (st) {
    krt_put(m, "; re-running it equation by equation on the reference executor failed: %s",
            kiln_last_error());
    return;
  }
  if (h.found) {
    const kir_aval *a = &h.culprit.p->vars[h.culprit.p->eqns[h.culprit.eqn].out[h.out_index]].aval;
    krt_put(m, "; re-run equation by equation, the first %s comes from ", nan ? "NaN" : "infinity");
    krt_put_site(m, &h.culprit);
    krt_put(m, ": its result %d holds %s", h.out_index, krt_kind(nan));
    krt_put_count(m, &h.out_nf, nan, kir_aval_size(a));
    if (!h.other_in) {
      krt_put(m, " while its operands hold no NaN or infinity");
    } else {
      krt_put(m, " from operands holding %s", krt_kind(!nan));
      if (h.inf_seen) {
        krt_put(m, ", the first made by ");
        krt_put_site(m, &h.inf_origin);
      }
    }
  } else if (h.const_seen) {
    krt_put(m, "; re-run equation by equation, it comes from constant operand %d of ",
            h.const_operand);
    krt_put_site(m, &h.const_origin);
  } else {
    krt_put(m, "; re-run equation by equation on the reference executor the program made no %s: "
            "the compiled run differs from the reference (fused kernel rounding, or a bug)",
            nan ? "NaN" : "infinity");
  }
}

/* ---- the call ---- */

static kiln_status krt_check_results(const kiln_compiled *c, const kiln_tree *args,
                                     const krt_host_leaf *saved, kiln_tree *res) {
  size_t n_res = kiln_tree_num_leaves(res);
  const kiln_leaf **leaves = calloc(n_res + 1, sizeof *leaves);
  if (!leaves) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory");
  ktree_leaves_borrow(res, leaves, n_res);
  /* The first result with a NaN, else the first with an infinity. */
  int hit = -1;
  bool nan = false;
  kir_nonfinite hit_nf = {0};
  int64_t hit_size = 0;
  kiln_status st = KILN_OK;
  for (size_t i = 0; !st && i < n_res && !(hit >= 0 && nan); i++) {
    if (leaves[i]->kind != KILN_LEAF_ARRAY ||
        !kiln_dtype_is_float(kiln_array_dtype(leaves[i]->u.array)))
      continue;
    krt_host_leaf h;
    if ((st = krt_host_leaf_of(leaves[i]->u.array, &h))) break;
    kir_nonfinite nf;
    krt_scan_buffer(&h.buf, &nf);
    if (h.owned) free(h.buf.data);
    if ((nf.nan && !nan) || (nf.inf && hit < 0)) {
      hit = (int)i;
      nan = nf.nan > 0;
      hit_nf = nf;
      hit_size = kir_aval_size(&h.buf.aval);
    }
  }
  free(leaves);
  if (st || hit < 0) return st;

  krt_msg m = {.len = 0};
  kiln_path *paths = NULL;
  size_t np = 0;
  krt_put(&m, "jit(%s): ", c->p.f->name);
  if (kiln_tree_leaf_paths(res, &paths, &np) == KILN_OK && np == n_res)
    krt_put_leaf(&m, "result", paths, hit, false);
  else
    krt_put(&m, "result leaf %d", hit);
  kiln_paths_free(paths, np);
  krt_put(&m, " holds %s", krt_kind(nan));
  krt_put_count(&m, &hit_nf, nan, hit_size);
  /* The inputs as they were: the saved copies of donated leaves. */
  int n = c->p.sig.n;
  const kiln_leaf **argl = calloc((size_t)n + 1, sizeof *argl);
  krt_host_leaf *in = calloc((size_t)n + 1, sizeof *in);
  if (!argl || !in) st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory");
  if (!st) ktree_leaves_borrow(args, argl, (size_t)n);
  for (int i = 0; !st && i < n; i++) {
    if (saved[i].buf.data) {
      in[i] = saved[i];
      in[i].owned = false; /* the caller frees the saved copies */
    } else {
      st = krt_host_leaf_of(argl[i]->u.array, &in[i]);
    }
  }
  if (!st) krt_explain(c, args, in, nan, &m);
  krt_host_leaves_free(in, n);
  free(argl);
  if (st) return st;
  return kcore_fail(KILN_ERR_NONFINITE, "%s", m.buf);
}

kiln_status krt_debug_nans_run(const kiln_compiled *c, const kiln_tree *args, krt_run_fn run,
                               kiln_tree **out) {
  int n = c->p.sig.n;
  const kiln_leaf **argl = calloc((size_t)n + 1, sizeof *argl);
  krt_host_leaf *saved = calloc((size_t)n + 1, sizeof *saved);
  kiln_status st =
      argl && saved ? KILN_OK : kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory");
  if (!st && kiln_tree_num_leaves(args) != (size_t)n)
    st = kcore_fail(KILN_ERR_TREE, "jit(%s): the arguments have %zu leaves, the program %d",
                    c->p.f->name, kiln_tree_num_leaves(args), n);
  if (!st) ktree_leaves_borrow(args, argl, (size_t)n);
  /* A donated input is gone after the call: keep a host copy to re-run. */
  for (int i = 0; !st && i < n; i++) {
    if (!c->p.donated[i] || argl[i]->kind != KILN_LEAF_ARRAY) continue;
    kiln_array *a = argl[i]->u.array;
    size_t nb = kiln_array_nbytes(a);
    saved[i].buf.aval = kir_aval_make(a->dtype, a->rank, a->shape, false);
    saved[i].buf.nbytes = nb;
    saved[i].owned = true;
    if (!(saved[i].buf.data = malloc(nb ? nb : 1)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "debug_nans: out of host memory");
    else if (nb)
      st = kiln_array_to_host(a, saved[i].buf.data, nb);
  }
  free(argl);
  if (!st) st = run(c, args, out);
  if (!st && (st = krt_check_results(c, args, saved, *out))) {
    kiln_tree_free(*out); /* the results are released on the failure */
    *out = NULL;
  }
  krt_host_leaves_free(saved, n);
  return st;
}
