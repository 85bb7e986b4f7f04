/* The CUDA skeleton's ROW kernels: each row goes to a thread (rows of a
 * few elements), a warp (up to KCG_ROW_WARP_MAX) or a block, and the row
 * values several passes read stay in registers: each thread owns the
 * elements j = lane + k * T, k < EPT, and a kept value lives in a
 * per-thread array indexed by the unrolled k. How many values a thread may
 * keep follows from the registers the block size leaves it, so that nothing
 * spills (tests/codegen/test_codegen_registers.cc reads the counts from the cubin). */
#include <stdlib.h>
#include "codegen/codegen.h"

/* ROW rows up to these lengths go to a thread / a warp; longer ones to a
 * block (kcg_cuda_row_geometry), so that no thread keeps more than 32 bytes
 * of a row of up to 1024 elements: NVRTC compiles a 32-way unrolled warp
 * loop of a 1024-element softmax in twice the time of the block version. */
#define KCG_ROW_THREAD_MAX 8
#define KCG_ROW_WARP_MAX 256
/* Row kernels are built for this many resident threads per SM (half of
 * sm_80/sm_90's 2048): __launch_bounds__(T, KCG_ROW_SM_THREADS / T) lets
 * each thread have 64K / KCG_ROW_SM_THREADS = 64 registers. Of those, the
 * kept row values may take KCG_ROW_KEPT_REGS; the rest hold addresses,
 * accumulators and temporaries. Beyond that kept values spilled (a softmax
 * of 30000 floats kept 60 values: 484 bytes of spills on sm_90), so longer
 * rows are read again instead. A thread keeps at most KCG_ROW_MAX_EPT
 * elements of each kept value (the unrolled loops' length). */
#define KCG_ROW_SM_THREADS 1024
#define KCG_ROW_KEPT_REGS 40
#define KCG_ROW_MAX_EPT 32

/* Whether slot s (an input or output) is an array of the row's shape, read
 * or written along the rows. */
static bool kcg_cuda_row_slot(const kcg_ctx *c, int s) {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  kir_aval row = kir_aval_make(KILN_F32, rank, shape, false);
  kir_vid v = s < c->g->n_in ? c->g->in[s] : c->g->out[s - c->g->n_in];
  return kir_aval_same_shape(kir_var_aval(c->p, v), &row);
}

/* Bytes per element of the narrowest row array; 0 if none. */
static size_t kcg_cuda_row_narrowest(const kcg_ctx *c) {
  size_t narrowest = 0;
  for (int s = 0; s < c->g->n_in + c->g->n_out; s++)
    if (kcg_cuda_row_slot(c, s) && (!narrowest || kcg_slot_size(c, s) < narrowest))
      narrowest = kcg_slot_size(c, s);
  return narrowest;
}

/* Elements per 16-byte access of the narrowest row array, when every
 * thread's share of a kept row splits into whole vectors; 0 otherwise. Then
 * a thread owns the vectors q = me + per_item * kq (elements q * V + ke):
 * one coalesced 16-byte load or store where there were V narrow ones, which
 * is what bf16 rows (8 two-byte loads per 16 bytes) are bound by. */
static int kcg_cuda_row_vector(const kcg_ctx *c, const kcg_cuda *k) {
  if (!k->cache || k->coop == KCG_COOP_THREAD) return 0;
  size_t narrowest = kcg_cuda_row_narrowest(c);
  int v = narrowest ? (int)(16 / narrowest) : 0;
  if (v > 8) v = 8;
  return v >= 2 && k->length % ((int64_t)k->per_item * v) == 0 ? v : 0;
}

void kcg_cuda_row_geometry(const kcg_ctx *c, kcg_cuda *k) {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  int64_t len = shape[rank - 1];
  k->length = len;
  if (len <= KCG_ROW_THREAD_MAX) {
    k->coop = KCG_COOP_THREAD;
    k->threads = 256;
  } else if (len <= KCG_ROW_WARP_MAX) {
    k->coop = KCG_COOP_WARP;
    k->threads = 256;
  } else {
    /* Each thread takes 32 bytes of the narrowest row array (8 f32, 16
     * bf16), at least 8 elements, in blocks of 64 to 512 threads. Measured
     * on an H200 (bench/results/summary-h200.md): row kernels are bound by
     * instructions, not bytes, so bf16 rows gain from fewer threads doing
     * the same per-row reduction work (layernorm 0.044 -> 0.036 ms), and
     * rows of 8192 from two blocks of 512 per SM over one of 1024 (softmax
     * f32 0.080 -> 0.060 ms: a lone block idles its SM at each barrier). */
    size_t narrowest = kcg_cuda_row_narrowest(c);
    int64_t per = narrowest && narrowest < 4 ? (int64_t)(32 / narrowest) : 8;
    int64_t t = kcg_pow2_at_least((len + per - 1) / per);
    k->coop = KCG_COOP_BLOCK;
    k->threads = (int)(t < 64 ? 64 : t > 512 ? 512 : t);
  }
  kcg_cuda_set_coop(k);
  k->min_blocks = KCG_ROW_SM_THREADS / k->threads;
  k->ept = (len + k->per_item - 1) / k->per_item;
  int kept = 0; /* registers per kept element: two for 8-byte values */
  for (int v = 0; v < c->p->n_vars; v++)
    if (c->cacheable[v]) kept += kiln_dtype_size(kir_var_aval(c->p, v)->dtype) > 4 ? 2 : 1;
  k->cache = len > 0 && k->ept <= KCG_ROW_MAX_EPT && k->ept * kept <= KCG_ROW_KEPT_REGS;
  k->vec = kcg_cuda_row_vector(c, k);
}

static kcg_term kcg_cuda_rowbase(kcg_ctx *c, const kcg_cuda *k, int ix) {
  if (ix == k->row_ix) return k->rowbase;
  kcg_term lin = kcg_index_lin(c, ix);
  if (strcmp(lin.expr, "0") == 0) return lin;
  return kcg_term_make(kcg_strf(c, "(%s * %lld)", lin.expr, (long long)k->length), lin.scope);
}

/* The cached loop over this thread's vectors of the row at ix: the row
 * inputs are loaded a vector at a time (element by element where a pointer
 * is not 16-byte aligned) and their elements memoised as the stored values
 * at the loop's index; with `stores`, elem[s] names the element of output
 * slot s's vector that the pass sets, stored after the vector's elements. */
static int kcg_cuda_row_loop_vector(kcg_ctx *c, const kcg_cuda *k, int parent, int ix, bool stores,
                                    const char **elem) {
  const kfuse_group *g = c->g;
  const char *t = c->idx_type, *kq = kcg_fresh(c, "kq"), *ke = kcg_fresh(c, "ke");
  const char *jb = kcg_fresh(c, "jb"), *j = kcg_fresh(c, "j"), *slot = kcg_fresh(c, "k");
  int V = k->vec;
  kcg_term base = kcg_cuda_rowbase(c, k, ix);
  const char *at = strcmp(base.expr, "0") == 0 ? jb : kcg_strf(c, "%s + %s", base.expr, jb);
  kcg_buf head = {0}, tail = {0};
  kcg_buf_addf(&head, "#pragma unroll\nfor (int %s = 0; %s < %lld; ++%s) {\n  const %s %s = (%s + %du * %s) * %du;",
               kq, kq, (long long)(k->ept / V), kq, t, jb, k->me, k->per_item, kq, V);
  for (int s = 0; s < g->n_in + g->n_out; s++) {
    bool in = s < g->n_in;
    elem[s] = NULL;
    if (!kcg_cuda_row_slot(c, s) || (!in && !stores)) continue;
    kir_vid v = in ? g->in[s] : g->out[s - g->n_in];
    int n;
    const char *vt = kcg_vector_type(V * (int)kcg_slot_size(c, s), &n), *u = kcg_fresh(c, "u");
    const char *a = kcg_arg_name(c, s);
    kcg_buf_addf(&head, "\n  union { %s v[%d]; %s e[%d]; } %s;", vt, n,
                 kcg_stype(kir_var_aval(c->p, v)->dtype), V, u);
    kcg_buf *b = in ? &head : &tail;
    kcg_buf_addf(b, "\n  if (aligned) {");
    for (int w = 0; w < n; w++)
      if (in)
        kcg_buf_addf(b, "\n    %s.v[%d] = ((const %s *)(%s + %s))[%d];", u, w, vt, a, at, w);
      else
        kcg_buf_addf(b, "\n    ((%s *)(%s + %s))[%d] = %s.v[%d];", vt, a, at, w, u, w);
    kcg_buf_addf(b, "\n  } else {\n    #pragma unroll\n    for (int e = 0; e < %d; ++e) %s;\n  }", V,
                 in ? kcg_strf(c, "%s.e[e] = %s[%s + e]", u, a, at)
                    : kcg_strf(c, "%s[%s + e] = %s.e[e]", a, at, u));
    elem[s] = kcg_strf(c, "%s.e[%s]", u, ke);
    c->arg_used[s] = true;
  }
  kcg_buf_addf(&head, "\n  #pragma unroll\n  for (int %s = 0; %s < %d; ++%s) {\n    const %s %s = %s + %s;\n    const int %s = %s * %d + %s;",
               ke, ke, V, ke, t, j, jb, ke, slot, kq, V, ke);
  kcg_buf_addf(&tail, "\n}");
  int s = kcg_row_loop_open(c, parent, ix, base, head.s ? head.s : "", j, slot, k->ept);
  free(c->scopes[s].footer);
  c->scopes[s].footer = kcore_strdup(kcg_strf(c, "}%s", tail.s ? tail.s : ""));
  if (head.oom || tail.oom || !c->scopes[s].footer) kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  kcg_buf_free(&head);
  kcg_buf_free(&tail);
  int lix = kcg_row_loop_index(c, s);
  for (int q = 0; q < g->n_in; q++)
    if (elem[q]) kcg_memo_put(c, g->in[q], lix, true, kcg_term_make(elem[q], s));
  return s;
}

/* A loop over this thread's elements of the row at ix. */
static int kcg_cuda_row_loop(kcg_ctx *c, const kcg_cuda *k, int parent, int ix, bool stores,
                             const char **elem) {
  if (k->vec) return kcg_cuda_row_loop_vector(c, k, parent, ix, stores, elem);
  const char *t = c->idx_type, *j = kcg_fresh(c, "j");
  kcg_term base = kcg_cuda_rowbase(c, k, ix);
  long long len = (long long)k->length;
  int s;
  if (k->coop == KCG_COOP_THREAD) {
    s = kcg_row_loop_open(c, parent, ix, base,
                          kcg_strf(c, "#pragma unroll\nfor (%s %s = 0; %s < %lld; ++%s) {", t, j, j,
                                   len, j),
                          j, k->cache ? j : NULL, k->length);
    return s;
  }
  if (!k->cache) {
    s = kcg_row_loop_open(c, parent, ix, base,
                          kcg_strf(c, "for (%s %s = %s; %s < %lld; %s += %d) {", t, j, k->me, j,
                                   len, j, k->per_item),
                          j, NULL, 0);
    c->scopes[s].divergent = true;
    return s;
  }
  const char *slot = kcg_fresh(c, "k");
  bool ragged = k->length % k->per_item != 0;
  s = kcg_row_loop_open(
      c, parent, ix, base,
      kcg_strf(c, "#pragma unroll\nfor (int %s = 0; %s < %lld; ++%s) {\n  const %s %s = %s + %du * %s;%s",
               slot, slot, (long long)k->ept, slot, t, j, k->me, k->per_item, slot,
               ragged ? kcg_strf(c, "\n  if (%s >= %lld) break;", j, len) : ""),
      j, slot, k->ept);
  c->scopes[s].divergent = ragged;
  return s;
}

void kcg_cuda_row_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_cuda *k = c->skel;
  int scope = kcg_index_scope(c, ix), oix[KCG_MAX_SET];
  if (c->scopes[scope].divergent) {
    kcg_reduce_nested(c, eqns, n, ix, out, false);
    return;
  }
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  int saved_pass = c->pass;
  c->pass = c->next_name++;
  kcg_reducers(c, eqns, n, r);
  kcg_acc_declare(c, scope, r, n, false, acc);
  const char *elem[KCG_MAX_ARGS];
  int s = kcg_cuda_row_loop(c, k, scope, ix, false, elem);
  for (int q = 0; q < n; q++) oix[q] = kcg_row_loop_index(c, s);
  kcg_accumulate(c, eqns, n, oix, r, acc, "");
  kcg_scope_close(c, s);
  kcg_row_pass_end(c);
  c->pass = saved_pass;
  for (int q = 0; q < n; q++) out[q] = kcg_cuda_combine(c, k, scope, &r[q], acc[q]);
}

void kcg_cuda_rows(kcg_ctx *c, kcg_cuda *k) {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  if (k->vec) {
    kcg_buf aligned = {0};
    for (int s = 0; s < c->g->n_in + c->g->n_out; s++)
      if (kcg_cuda_row_slot(c, s))
        kcg_buf_addf(&aligned, "%s(kiln_uptr)%s", aligned.len ? " | " : "", kcg_arg_name(c, s));
    kcg_line(c, 0, "const bool aligned = ((%s) & 15u) == 0;", aligned.s ? aligned.s : "0");
    kcg_buf_free(&aligned);
  }
  int rs = kcg_cuda_item_loop(c, k, "row");
  kcg_term r = kcg_term_make("row", rs);
  k->row_ix = kcg_index_get(c, rank - 1, shape, &r, NULL);
  kcg_index_coords(c, k->row_ix);
  kcg_term lin = kcg_index_lin(c, k->row_ix);
  if (strcmp(lin.expr, "0") == 0) {
    k->rowbase = lin;
  } else {
    kcg_line(c, rs, "const %s rowbase = %s * %lld;", c->idx_type, lin.expr, (long long)k->length);
    k->rowbase = kcg_term_make("rowbase", rs);
  }
  /* Reductions first, in pass order (see skel_c.c). */
  for (int s = 0; s < c->n_sets; s++)
    kcg_value(c, c->p->eqns[c->set_eqns[c->set_start[s]]].out[0], k->row_ix);
  kir_aval rowav = kir_aval_make(KILN_F32, rank, shape, false);
  bool any_row_out = false;
  int per_row[KCG_MAX_ARGS], n_per_row = 0;
  for (int q = 0; q < c->g->n_out; q++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[q]);
    if (kir_aval_same_shape(a, &rowav)) {
      any_row_out = true;
      continue;
    }
    per_row[n_per_row] = kcg_index_get(c, a->rank, a->shape, &r, NULL);
    kcg_value(c, c->g->out[q], per_row[n_per_row++]);
  }
  if (n_per_row) {
    int guard = kcg_cuda_store_guard(c, k, rs);
    for (int q = 0, p = 0; q < c->g->n_out; q++)
      if (!kir_aval_same_shape(kir_var_aval(c->p, c->g->out[q]), &rowav))
        kcg_store(c, c->g->n_in + q, c->g->out[q], per_row[p++]);
    if (guard >= 0) kcg_scope_close(c, guard);
  }
  if (any_row_out) {
    int saved_pass = c->pass;
    c->pass = c->next_name++;
    const char *elem[KCG_MAX_ARGS];
    int s = kcg_cuda_row_loop(c, k, rs, k->row_ix, true, elem);
    for (int q = 0; q < c->g->n_out; q++)
      if (kir_aval_same_shape(kir_var_aval(c->p, c->g->out[q]), &rowav))
        kcg_store_to(c, c->g->n_in + q, c->g->out[q], kcg_row_loop_index(c, s),
                     k->vec ? elem[c->g->n_in + q] : NULL);
    kcg_scope_close(c, s);
    kcg_row_pass_end(c);
    c->pass = saved_pass;
  }
  kcg_scope_close(c, rs);
}
