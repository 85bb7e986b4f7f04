/* The CUDA target's skeleton: grid-stride loops over the work items, 32-bit
 * indices when every array the kernel touches has fewer than 2^31 elements,
 * and 128-bit loads and stores for elementwise (LOOP) kernels whose
 * operands are read in order; what the three kinds share (the prologue, the
 * item loops, the combination over the threads of an item). REDUCE kernels
 * are in skel_cuda_reduce.c, ROW kernels in skel_cuda_row.c. */
#include <stdlib.h>
#include "codegen/codegen.h"

/* LOOP kernels repeat their body once per item of a vector access: at most
 * this many simple operations in all. */
#define KCG_VECTOR_BUDGET 64

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
void kcg_cuda_prologue(kcg_ctx *c, const kcg_cuda *k) {
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
    case KCG_COOP_TILE:
      kcg_cuda_tile_prologue(c, k);
      break;
  }
}

int kcg_cuda_item_loop(kcg_ctx *c, kcg_cuda *k, const char *var) {
  if (k->coop == KCG_COOP_TILE) return k->item_scope = kcg_cuda_tile_loop(c, k, var);
  const char *from = k->coop == KCG_COOP_THREAD ? "tid" : k->coop == KCG_COOP_WARP ? "wid" : "blockIdx.x";
  const char *step = k->coop == KCG_COOP_THREAD  ? "stride"
                     : k->coop == KCG_COOP_WARP ? "nwarps"
                                                : "gridDim.x";
  return k->item_scope = kcg_scope_open(
             c, 0,
             kcg_strf(c, "for (%s %s = lo + %s; %s < hi; %s += %s) {", c->idx_type, var, from, var,
                      var, step),
             "}");
}

int kcg_cuda_store_guard(kcg_ctx *c, const kcg_cuda *k, int parent) {
  if (k->coop == KCG_COOP_THREAD) return -1;
  int s = kcg_scope_open(c, parent,
                         k->coop == KCG_COOP_TILE ? "if (tr == 0 && valid) {"
                                                  : kcg_strf(c, "if (%s == 0) {", k->me),
                         "}");
  c->scopes[s].divergent = true;
  return s;
}

kcg_term kcg_cuda_combine(kcg_ctx *c, const kcg_cuda *k, int scope, const kcg_reducer *r,
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

void kcg_cuda_set_coop(kcg_cuda *k) {
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
const char *kcg_vector_type(int bytes, int *count) {
  *count = bytes > 16 ? bytes / 16 : 1;
  return bytes >= 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "kiln_u32" : "kiln_u16";
}

/* Slots accessed in item order: inputs read at the item, and outputs. */
static bool kcg_vector_slot(const kcg_ctx *c, int s) {
  return s >= c->g->n_in || c->arg_at_item[s];
}

size_t kcg_slot_size(const kcg_ctx *c, int s) {
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
                         : k.coop == KCG_COOP_TILE ? k.tile_items
                                                   : 1;
  if (k.vector) out->items_per_block = (int64_t)k.threads * k.vector;
  out->min_blocks = k.min_blocks;
  out->split = k.split > 1 ? k.split : 1;
  out->scratch_bytes = k.scratch_bytes;
  kcg_buf_add(&out->text, "{\n");
  kcg_declare_args(c, &out->text);
  if (c->scopes[0].text.s) kcg_buf_add(&out->text, c->scopes[0].text.s);
  kcg_buf_add(&out->text, "}\n");
  if (out->text.oom || c->scopes[0].text.oom)
    return kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  return KILN_OK;
}
