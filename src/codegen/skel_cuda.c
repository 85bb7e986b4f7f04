/* The CUDA target's skeleton: grid-stride loops over the work items, 32-bit
 * indices when every array the kernel touches has fewer than 2^31 elements,
 * 128-bit loads and stores for elementwise kernels whose operands are read
 * in order, and warp-shuffle / block reductions.
 *
 * Reductions cooperate in one of three ways, chosen per kernel:
 *   THREAD  one thread per work item (reductions over a strided axis, or
 *           short ones: neighbouring threads read neighbouring elements);
 *   WARP    one warp per item: lanes stride over the reduced elements and
 *           meet through shuffles;
 *   BLOCK   one block per item, for long reductions over few items.
 * ROW kernels give each row to a thread (rows of a few elements), a warp
 * (up to 1024) or a block, and keep the row values several passes read in
 * registers: each thread owns the elements j = lane + k * T, k < EPT, and a
 * kept value lives in a per-thread array indexed by the unrolled k. */
#include <stdlib.h>
#include "codegen/codegen.h"

typedef enum kcg_coop { KCG_COOP_THREAD, KCG_COOP_WARP, KCG_COOP_BLOCK } kcg_coop;

/* ROW rows up to these lengths go to a thread / a warp; longer ones to a
 * block of at least 128 threads, so that no thread keeps more than 8
 * elements of a row of up to 1024: NVRTC compiles a 32-way unrolled warp
 * loop of a 1024-element softmax in twice the time of the block version. */
#define KCG_ROW_THREAD_MAX 8
#define KCG_ROW_WARP_MAX 256
/* A thread keeps at most this many elements of each kept row value, and
 * this many registers' worth of them in all. */
#define KCG_ROW_MAX_EPT 32
#define KCG_ROW_MAX_KEPT 96
/* LOOP kernels repeat their body once per item of a vector access: at most
 * this many simple operations in all. */
#define KCG_VECTOR_BUDGET 64

typedef struct kcg_cuda {
  kcg_coop coop;
  int threads;         /* per block */
  const char *me;      /* this thread's rank within its item: "lane", "tx", NULL */
  int per_item;        /* threads per item: 1, 32 or threads */
  int vector;          /* LOOP: items per vector access, 0 for none */
  /* ROW */
  int row_ix;
  kcg_term rowbase;
  int64_t length, ept; /* row length, elements per thread */
  bool cache;
  int vec;             /* ROW: elements per vector access, 0 for none */
} kcg_cuda;

/* 32-bit indices if every var the group touches stays below 2^31. */
static const char *kcg_cuda_index_type(const kcg_ctx *c) {
  int64_t big = (int64_t)1 << 31;
  for (int k = 0; k < c->g->n_in; k++)
    if (kir_aval_size(kir_var_aval(c->p, c->g->in[k])) >= big) return "kiln_u64";
  for (int i = 0; i < c->g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    for (int k = 0; k < e->n_in; k++)
      if (kir_aval_size(kir_var_aval(c->p, e->in[k])) >= big) return "kiln_u64";
    for (int k = 0; k < e->n_out; k++)
      if (kir_aval_size(kir_var_aval(c->p, e->out[k])) >= big) return "kiln_u64";
  }
  return "kiln_u32";
}

/* Names every mode defines at the top of the kernel. */
static void kcg_cuda_prologue(kcg_ctx *c, const kcg_cuda *k) {
  const char *t = c->idx_type;
  kcg_line(c, 0, "const %s lo = (%s)begin, hi = (%s)end;", t, t, t);
  switch (k->coop) {
    case KCG_COOP_THREAD:
      kcg_line(c, 0, "const %s tid = (%s)blockIdx.x * blockDim.x + threadIdx.x;", t, t);
      kcg_line(c, 0, "const %s stride = (%s)gridDim.x * blockDim.x;", t, t);
      break;
    case KCG_COOP_WARP:
      kcg_line(c, 0, "const %s lane = threadIdx.x & 31u;", t);
      kcg_line(c, 0, "const %s wid = ((%s)blockIdx.x * blockDim.x + threadIdx.x) >> 5;", t, t);
      kcg_line(c, 0, "const %s nwarps = ((%s)gridDim.x * blockDim.x) >> 5;", t, t);
      break;
    case KCG_COOP_BLOCK:
      kcg_line(c, 0, "const %s tx = threadIdx.x;", t);
      break;
  }
}

/* The loop over items (or rows) for the mode, and its stores' guard. */
static int kcg_cuda_item_loop(kcg_ctx *c, const kcg_cuda *k, const char *var) {
  const char *t = c->idx_type;
  switch (k->coop) {
    case KCG_COOP_THREAD:
      return kcg_scope_open(c, 0,
                            kcg_strf(c, "for (%s %s = lo + tid; %s < hi; %s += stride) {", t, var,
                                     var, var),
                            "}");
    case KCG_COOP_WARP:
      return kcg_scope_open(c, 0,
                            kcg_strf(c, "for (%s %s = lo + wid; %s < hi; %s += nwarps) {", t, var,
                                     var, var),
                            "}");
    default:
      return kcg_scope_open(c, 0,
                            kcg_strf(c, "for (%s %s = lo + blockIdx.x; %s < hi; %s += gridDim.x) {",
                                     t, var, var, var),
                            "}");
  }
}

/* Stores of per-item values: by one thread of the item. */
static int kcg_cuda_store_guard(kcg_ctx *c, const kcg_cuda *k, int parent) {
  if (k->coop == KCG_COOP_THREAD) return -1;
  int s = kcg_scope_open(c, parent, kcg_strf(c, "if (%s == 0) {", k->me), "}");
  c->scopes[s].divergent = true;
  return s;
}

/* The combination over the threads of an item, after each has reduced its
 * share into acc. */
static kcg_term kcg_cuda_combine(kcg_ctx *c, const kcg_cuda *k, int scope, const kcg_reducer *r,
                                 const char *acc) {
  if (k->coop == KCG_COOP_THREAD || k->per_item == 1) return kcg_acc_result(c, scope, r, acc);
  c->uses_reduce_h = true;
  kcg_helper(c, kcg_strf(c, "KILN_DEFINE_WARP_REDUCE(%s, %s, %s)", r->name, r->ctype, r->combine));
  if (k->coop == KCG_COOP_WARP)
    return kcg_acc_result(c, scope, r, kcg_strf(c, "kiln_warp_%s(%s)", r->name, acc));
  kcg_helper(c, kcg_strf(c, "KILN_DEFINE_BLOCK_REDUCE(%s, %s, %s)", r->name, r->ctype,
                         r->identity));
  const char *scratch = kcg_fresh(c, "red");
  kcg_line(c, 0, "__shared__ %s %s[32];", r->ctype, scratch);
  return kcg_acc_result(c, scope, r, kcg_strf(c, "kiln_block_%s(%s, %s)", r->name, acc, scratch));
}

/* ---- REDUCE ---- */

static void kcg_cuda_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_cuda *k = c->skel;
  int scope = kcg_index_scope(c, ix);
  /* Lanes that may disagree on getting here cannot meet: reduce alone. */
  if (k->coop == KCG_COOP_THREAD || c->scopes[scope].divergent) {
    kcg_reduce_nested(c, eqns, n, ix, out, false);
    return;
  }
  int64_t count;
  int axes[KIR_MAX_RANK], oix[KCG_MAX_SET];
  kcg_reduce_axes(c, &c->p->eqns[eqns[0]], axes, &count);
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET], *v = kcg_fresh(c, "r");
  kcg_reducers(c, eqns, n, r);
  kcg_acc_declare(c, scope, r, n, false, acc);
  int s = kcg_scope_open(c, scope,
                         kcg_strf(c, "for (%s %s = %s; %s < %lld; %s += %d) {", c->idx_type, v,
                                  k->me, v, (long long)count, v, k->per_item),
                         "}");
  c->scopes[s].divergent = true;
  kcg_term rl = kcg_term_make(v, s);
  for (int q = 0; q < n; q++)
    oix[q] = kcg_reduce_operand_index(c, &c->p->eqns[eqns[q]], ix, NULL, &rl);
  kcg_accumulate(c, eqns, n, oix, r, acc, "");
  kcg_scope_close(c, s);
  for (int q = 0; q < n; q++) out[q] = kcg_cuda_combine(c, k, scope, &r[q], acc[q]);
}

/* The widest reduction decides: long ones over too few items to fill the
 * device take a block each, ones over the contiguous last axis a warp each,
 * the rest (strided columns, short rows) a thread each. */
static void kcg_cuda_reduce_mode(const kcg_ctx *c, kcg_cuda *k) {
  int64_t items = kcg_items(c), widest = 0;
  bool inner = false;
  for (int i = 0; i < c->g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    if (!kcg_is_reduction(e->prim)) continue;
    int axes[KIR_MAX_RANK];
    int64_t count;
    int m = kcg_reduce_axes(c, e, axes, &count);
    if (count > widest) {
      widest = count;
      inner = m > 0 && axes[m - 1] == kir_var_aval(c->p, e->in[0])->rank - 1;
    }
  }
  bool block = inner ? widest >= 4096 && items < 512 : widest >= 1024 && items < 256;
  if (block) {
    k->coop = KCG_COOP_BLOCK;
    k->threads = 512;
  } else if (inner && widest >= 32) {
    k->coop = KCG_COOP_WARP;
    k->threads = 256;
  } else {
    k->coop = KCG_COOP_THREAD;
    k->threads = 256;
  }
}

static void kcg_cuda_set_coop(kcg_cuda *k) {
  k->me = k->coop == KCG_COOP_WARP ? "lane" : k->coop == KCG_COOP_BLOCK ? "tx" : NULL;
  k->per_item = k->coop == KCG_COOP_WARP ? 32 : k->coop == KCG_COOP_BLOCK ? k->threads : 1;
}

/* Items of a kernel without vector accesses: every output at the item. */
static void kcg_cuda_items(kcg_ctx *c, kcg_cuda *k) {
  int s = kcg_cuda_item_loop(c, k, "i");
  kcg_term it = kcg_term_make("i", s);
  int ix[KCG_MAX_ARGS];
  for (int q = 0; q < c->g->n_out; q++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[q]);
    ix[q] = kcg_index_get(c, a->rank, a->shape, &it, NULL);
    kcg_value(c, c->g->out[q], ix[q]); /* computed by every thread of the item */
  }
  int guard = kcg_cuda_store_guard(c, k, s);
  for (int q = 0; q < c->g->n_out; q++) kcg_store(c, c->g->n_in + q, c->g->out[q], ix[q]);
  if (guard >= 0) kcg_scope_close(c, guard);
  kcg_scope_close(c, s);
}

/* ---- LOOP: vector accesses ---- */

/* The access type of a chunk of `bytes`, and how many of them it takes:
 * wider chunks (8 halves beside 8 floats) are several 16-byte accesses. */
static const char *kcg_vector_type(int bytes, int *count) {
  *count = bytes > 16 ? bytes / 16 : 1;
  return bytes >= 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "kiln_u32" : "kiln_u16";
}

/* Slots accessed in item order: inputs read at the item, and outputs. */
static bool kcg_vector_slot(const kcg_ctx *c, int s) {
  return s >= c->g->n_in || c->arg_at_item[s];
}

static size_t kcg_slot_size(const kcg_ctx *c, int s) {
  kir_vid v = s < c->g->n_in ? c->g->in[s] : c->g->out[s - c->g->n_in];
  return kiln_dtype_size(kir_var_aval(c->p, v)->dtype);
}

/* A chunk of V consecutive items per thread: one aligned load per input
 * read in order, V scalar bodies, one store per output. Arrays whose
 * pointers are not all 16-byte aligned, and the ends of the range, take the
 * scalar loop. */
static void kcg_cuda_vector_chunk(kcg_ctx *c, int V) {
  const kfuse_group *g = c->g;
  const char *t = c->idx_type;
  kcg_buf aligned = {0};
  for (int s = 0; s < g->n_in + g->n_out; s++)
    if (kcg_vector_slot(c, s))
      kcg_buf_addf(&aligned, "%s(kiln_uptr)%s", aligned.len ? " | " : "", kcg_arg_name(c, s));
  kcg_line(c, 0, "const bool aligned = ((%s) & 15u) == 0;", aligned.s ? aligned.s : "0");
  kcg_buf_free(&aligned);
  kcg_line(c, 0, "const %s vb = aligned && (lo + %du) / %du * %du < hi ? (lo + %du) / %du * %du : hi;",
           t, V - 1, V, V, V - 1, V, V);
  kcg_line(c, 0, "const %s ve = aligned && hi / %du * %du > vb ? hi / %du * %du : vb;", t, V, V, V,
           V);
  kcg_line(c, 0, "const %s n_head = vb - lo, n_scalar = n_head + (hi - ve);", t);
  int vs = kcg_scope_open(
      c, 0,
      kcg_strf(c, "for (%s q = vb / %du + tid; q < ve / %du; q += stride) {\n  const %s base = q * %du;",
               t, V, V, t, V),
      "}");
  const char *unions[KCG_MAX_ARGS];
  for (int s = 0; s < g->n_in + g->n_out; s++) {
    if (!kcg_vector_slot(c, s)) continue;
    kir_vid v = s < g->n_in ? g->in[s] : g->out[s - g->n_in];
    int n;
    const char *vt = kcg_vector_type(V * (int)kcg_slot_size(c, s), &n);
    unions[s] = kcg_fresh(c, s < g->n_in ? "ld" : "st");
    kcg_line(c, vs, "union { %s v[%d]; %s e[%d]; } %s;", vt, n,
             kcg_stype(kir_var_aval(c->p, v)->dtype), V, unions[s]);
    for (int j = 0; s < g->n_in && j < n; j++)
      kcg_line(c, vs, "%s.v[%d] = ((const %s *)(%s + base))[%d];", unions[s], j, vt,
               kcg_arg_name(c, s), j);
  }
  for (int l = 0; l < V; l++) {
    kcg_term lin = kcg_term_make(l ? kcg_strf(c, "(base + %d)", l) : "base", vs);
    for (int s = 0; s < g->n_in; s++) {
      if (!kcg_vector_slot(c, s)) continue;
      const kir_aval *a = kir_var_aval(c->p, g->in[s]);
      const char *name = kcg_fresh(c, "v"), *stored = kcg_strf(c, "%s.e[%d]", unions[s], l);
      int ix = kcg_index_get(c, a->rank, a->shape, &lin, NULL);
      kcg_line(c, vs, "const %s %s = %s;", kcg_ctype(a->dtype), name,
               kcg_load_expr(c, a->dtype, stored));
      kcg_memo_put(c, g->in[s], ix, false, kcg_term_make(name, vs));
      kcg_memo_put(c, g->in[s], ix, true, kcg_term_make(stored, vs));
    }
    for (int q = 0; q < g->n_out; q++) {
      const kir_aval *a = kir_var_aval(c->p, g->out[q]);
      kcg_term x = kcg_value(c, g->out[q], kcg_index_get(c, a->rank, a->shape, &lin, NULL));
      kcg_line(c, vs, "%s.e[%d] = %s;", unions[g->n_in + q], l,
               kcg_store_expr(c, a->dtype, x.expr));
    }
  }
  for (int q = 0; q < g->n_out; q++) {
    int s = g->n_in + q, n;
    const char *vt = kcg_vector_type(V * (int)kcg_slot_size(c, s), &n);
    for (int j = 0; j < n; j++)
      kcg_line(c, vs, "((%s *)(%s + base))[%d] = %s.v[%d];", vt, kcg_arg_name(c, s), j, unions[s],
               j);
  }
  kcg_scope_close(c, vs);
}

/* The body's cost in simple operations; transcendental functions expand to
 * dozens of instructions. */
static int kcg_cuda_body_cost(const kcg_ctx *c) {
  int cost = 0;
  for (int i = 0; i < c->g->n_eqns; i++) {
    kir_prim p = c->p->eqns[c->g->eqns[i]].prim;
    if (kir_prim_get(p)->family != KIR_FAMILY_ELEMENTWISE) continue;
    cost += kir_prim_cost(p) == KIR_COST_CHEAP ? 1 : 8;
  }
  return cost;
}

/* Items per vector access: 16 bytes of the narrowest array read or written
 * in item order, at most 8 (wider arrays take several 16-byte accesses), and
 * fewer for costly bodies (each item repeats the body; such kernels are bound
 * by arithmetic, not memory) -- but never fewer than 8 where a 2-byte array
 * is accessed, so bf16/f16 loads and stores stay 16 bytes wide. */
static int kcg_cuda_vector_width(const kcg_ctx *c) {
  size_t narrowest = 16;
  for (int q = 0; q < c->g->n_in + c->g->n_out; q++)
    if (kcg_vector_slot(c, q) && kcg_slot_size(c, q) < narrowest) narrowest = kcg_slot_size(c, q);
  int v = (int)(16 / narrowest) < 8 ? (int)(16 / narrowest) : 8;
  int floor = narrowest == 2 ? 8 : 1;
  int cost = kcg_cuda_body_cost(c);
  while (v > floor && v * cost > KCG_VECTOR_BUDGET) v /= 2;
  return v >= 2 && kcg_items(c) >= 2 * v ? v : 0;
}

static void kcg_cuda_loop(kcg_ctx *c, kcg_cuda *k) {
  const char *t = c->idx_type;
  /* The scalar loop first: it finds which inputs are read in item order. */
  int s = kcg_scope_open(c, 0, "", "}");
  kcg_term it = kcg_term_make("i", s);
  c->item_lin = "i";
  for (int q = 0; q < c->g->n_out; q++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[q]);
    kcg_store(c, c->g->n_in + q, c->g->out[q], kcg_index_get(c, a->rank, a->shape, &it, NULL));
  }
  c->item_lin = NULL;
  const char *header;
  k->vector = kcg_cuda_vector_width(c);
  if (k->vector) {
    kcg_cuda_vector_chunk(c, k->vector);
    header = kcg_strf(c,
                      "for (%s t = tid; t < n_scalar; t += stride) {\n"
                      "  const %s i = t < n_head ? lo + t : ve + (t - n_head);",
                      t, t);
  } else {
    header = kcg_strf(c, "for (%s i = lo + tid; i < hi; i += stride) {", t);
  }
  free(c->scopes[s].header);
  c->scopes[s].header = kcore_strdup(header);
  if (!c->scopes[s].header) kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  kcg_scope_close(c, s);
}

/* ---- ROW ---- */

static int64_t kcg_pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

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

/* Elements per 16-byte access of the narrowest row array, when every
 * thread's share of a kept row splits into whole vectors; 0 otherwise. Then
 * a thread owns the vectors q = me + per_item * kq (elements q * V + ke):
 * one coalesced 16-byte load or store where there were V narrow ones, which
 * is what bf16 rows (8 two-byte loads per 16 bytes) are bound by. */
static int kcg_cuda_row_vector(const kcg_ctx *c, const kcg_cuda *k) {
  if (!k->cache || k->coop == KCG_COOP_THREAD) return 0;
  size_t narrowest = 0;
  for (int s = 0; s < c->g->n_in + c->g->n_out; s++)
    if (kcg_cuda_row_slot(c, s) && (!narrowest || kcg_slot_size(c, s) < narrowest))
      narrowest = kcg_slot_size(c, s);
  int v = narrowest ? (int)(16 / narrowest) : 0;
  if (v > 8) v = 8;
  return v >= 2 && k->length % ((int64_t)k->per_item * v) == 0 ? v : 0;
}

static void kcg_cuda_row_geometry(const kcg_ctx *c, kcg_cuda *k) {
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
    int64_t t = kcg_pow2_at_least((len + 7) / 8);
    k->coop = KCG_COOP_BLOCK;
    k->threads = (int)(t < 128 ? 128 : t > 1024 ? 1024 : t);
  }
  kcg_cuda_set_coop(k);
  k->ept = (len + k->per_item - 1) / k->per_item;
  int kept = 0;
  for (int v = 0; v < c->p->n_vars; v++) kept += c->cacheable[v];
  k->cache = len > 0 && k->ept <= KCG_ROW_MAX_EPT && k->ept * kept <= KCG_ROW_MAX_KEPT;
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

static void kcg_cuda_row_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
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

static void kcg_cuda_rows(kcg_ctx *c, kcg_cuda *k) {
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

kiln_status kcg_cuda_kernel(kcg_ctx *c, kcg_body *out) {
  kcg_cuda k;
  memset(&k, 0, sizeof k);
  c->idx_type = kcg_cuda_index_type(c);
  c->skel = &k;
  switch (c->g->kind) {
    case KFUSE_LOOP:
      k.coop = KCG_COOP_THREAD;
      k.threads = 256;
      kcg_cuda_set_coop(&k);
      kcg_cuda_prologue(c, &k);
      kcg_cuda_loop(c, &k);
      break;
    case KFUSE_REDUCE:
      c->reduce = kcg_cuda_reduce;
      kcg_cuda_reduce_mode(c, &k);
      kcg_cuda_set_coop(&k);
      kcg_cuda_prologue(c, &k);
      kcg_cuda_items(c, &k);
      break;
    default:
      c->reduce = kcg_cuda_row_reduce;
      kcg_cuda_row_geometry(c, &k);
      kcg_cuda_prologue(c, &k);
      kcg_cuda_rows(c, &k);
      out->row_length = k.length;
      break;
  }
  c->skel = NULL;
  if (c->st != KILN_OK) return c->st;
  out->n_items = kcg_items(c);
  out->block_threads = k.threads;
  out->items_per_block = k.coop == KCG_COOP_THREAD ? k.threads
                         : k.coop == KCG_COOP_WARP ? k.threads / 32
                                                   : 1;
  if (k.vector) out->items_per_block = (int64_t)k.threads * k.vector;
  kcg_buf_add(&out->text, "{\n");
  kcg_declare_args(c, &out->text);
  if (c->scopes[0].text.s) kcg_buf_add(&out->text, c->scopes[0].text.s);
  kcg_buf_add(&out->text, "}\n");
  if (out->text.oom || c->scopes[0].text.oom)
    return kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  return KILN_OK;
}
