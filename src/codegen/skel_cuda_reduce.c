/* The CUDA skeleton's REDUCE kernels (one work item = one output element).
 * The threads of a block cooperate on the items in one of three ways,
 * chosen per kernel from its widest reduction:
 *   THREAD  one thread per item: short reductions, and columns over so many
 *           items that a thread each fills the device (neighbouring threads
 *           read neighbouring elements);
 *   WARP    one warp per item: lanes stride over a contiguous last axis and
 *           meet through shuffles;
 *   TILE    a block per tile of IX consecutive items: thread (tk, tr) =
 *           (threadIdx.x % IX, threadIdx.x / IX) reduces the elements
 *           tr, tr + RY, ... (RY = threads / IX) of item tk, so a warp reads
 *           IX consecutive items (columns, middle axes) or, with IX = 1, 32
 *           consecutive elements of one item; the RY values of an item meet
 *           in a fixed tree in shared memory (kiln_tile_* of reduce.h).
 * With few items TILE splits each tile across S blocks: block `part` takes
 * the elements part * RY + tr + k * S * RY, writes its partials to scratch,
 * and counts itself done on an integer counter per tile; the last of the S
 * blocks combines the S partials in order 0..S-1 (the same tree) and resets
 * the counter. Every partial is a fixed function of the data, so the result
 * does not depend on which block finishes last: no float atomics. */
#include "codegen/codegen.h"

#define KCG_TILE_THREADS 256
/* Tiles of at most KCG_TILE_LIGHT accumulator registers are built for full
 * occupancy: 8 blocks of 256 threads per SM, 32 registers a thread; more
 * accumulators (six reductions spilled 20 bytes at 32) get 64 registers at
 * half occupancy (tests/codegen/test_codegen_registers.cc reads the cubins). */
#define KCG_TILE_LIGHT 2
/* A split stops where a thread would reduce fewer elements than this. */
#define KCG_TILE_PER_THREAD 16
/* The blocks a split aims for: about one wave of 256-thread blocks on an
 * H100 (132 SMs x 8); fixed, so that results do not depend on the device. */
#define KCG_TILE_BLOCKS 1024
/* Items from which a column reduction gives each item a thread. */
#define KCG_THREAD_ITEMS 65536

/* ---- THREAD, WARP (and BLOCK, which ROW kernels use) ---- */

static void kcg_cuda_tile_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out);

/* In `scope`: the set's accumulators at ix over its reduced elements
 * from, from + step, ... (this thread's share). */
static void kcg_cuda_strided(kcg_ctx *c, const int *eqns, int n, int ix, int scope,
                             const char *from, int64_t step, kcg_reducer *r, const char **acc) {
  int64_t count;
  int axes[KIR_MAX_RANK], oix[KCG_MAX_SET];
  kcg_reduce_axes(c, &c->p->eqns[eqns[0]], axes, &count);
  const char *v = kcg_fresh(c, "r");
  kcg_reducers(c, eqns, n, r);
  kcg_acc_declare(c, scope, r, n, false, acc);
  /* A thread's long share runs in blocks of KCG_BLOCK elements (reduce.c). */
  bool blocked = kcg_blocked(r, n) && count / step > KCG_BLOCK;
  const char *lo = from, *hi = kcg_strf(c, "%lld", (long long)count);
  int host = scope;
  kcg_cascade cas;
  if (blocked) {
    const char *bb = kcg_fresh(c, "bb"), *be = kcg_fresh(c, "be");
    long long b = (long long)KCG_BLOCK * step;
    kcg_cascade_declare(c, scope, r, n, NULL, (count + b - 1) / b, &cas);
    host = kcg_scope_open(c, scope,
                          kcg_strf(c, "for (%s %s = %s; %s < %s; %s += %lld) {\n"
                                   "  const %s %s = %s + %lld < %s ? %s + %lld : %s;",
                                   c->idx_type, bb, from, bb, hi, bb, b, c->idx_type, be, bb, b,
                                   hi, bb, b, hi),
                          "}");
    c->scopes[host].divergent = true;
    lo = bb;
    hi = be;
  }
  int s = kcg_scope_open(c, host,
                         kcg_strf(c, "for (%s %s = %s; %s < %s; %s += %lld) {", c->idx_type, v,
                                  lo, v, hi, v, (long long)step),
                         "}");
  c->scopes[s].divergent = true;
  kcg_term rl = kcg_term_make(v, s);
  for (int q = 0; q < n; q++)
    oix[q] = kcg_reduce_operand_index(c, &c->p->eqns[eqns[q]], ix, NULL, &rl);
  kcg_accumulate(c, eqns, n, oix, r, acc, "");
  kcg_scope_close(c, s);
  if (blocked) {
    kcg_cascade_step(c, host, r, n, acc, &cas, NULL, false);
    kcg_scope_close(c, host);
    kcg_cascade_step(c, scope, r, n, acc, &cas, NULL, true);
  }
}

void kcg_cuda_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_cuda *k = c->skel;
  if (k->coop == KCG_COOP_TILE) {
    kcg_cuda_tile_reduce(c, eqns, n, ix, out);
    return;
  }
  int scope = kcg_index_scope(c, ix);
  /* Lanes that may disagree on getting here cannot meet: reduce alone. */
  if (k->coop == KCG_COOP_THREAD || c->scopes[scope].divergent) {
    kcg_reduce_nested(c, eqns, n, ix, out, false);
    return;
  }
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  kcg_cuda_strided(c, eqns, n, ix, scope, k->me, k->per_item, r, acc);
  for (int q = 0; q < n; q++) out[q] = kcg_cuda_combine(c, k, scope, &r[q], acc[q]);
}

/* ---- choosing the mode ---- */

/* The group's widest reduction: its reduced count, whether it runs over
 * the operand's last axis, and how many kept elements lie side by side
 * after its last reduced axis. */
static void kcg_cuda_widest(const kcg_ctx *c, int64_t *widest, bool *inner, int64_t *run) {
  *widest = 0;
  *inner = false;
  *run = 1;
  for (int i = 0; i < c->g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    if (!kcg_is_reduction(e->prim)) continue;
    int axes[KIR_MAX_RANK];
    int64_t count;
    int m = kcg_reduce_axes(c, e, axes, &count);
    if (count <= *widest) continue;
    const kir_aval *a = kir_var_aval(c->p, e->in[0]);
    *widest = count;
    *inner = m > 0 && axes[m - 1] == a->rank - 1;
    *run = 1;
    for (int d = m > 0 ? axes[m - 1] + 1 : 0; d < a->rank; d++) *run *= a->shape[d];
  }
}

/* Registers the group's accumulators take: two for 8-byte types. */
static int kcg_cuda_acc_regs(const kcg_ctx *c) {
  int regs = 0;
  for (int i = 0; i < c->g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    if (kcg_is_reduction(e->prim))
      regs += kiln_dtype_size(kir_var_aval(c->p, e->in[0])->dtype) > 4 ? 2 : 1;
  }
  return regs;
}

/* Blocks per tile: enough to give the device about KCG_TILE_BLOCKS blocks,
 * as long as each thread keeps KCG_TILE_PER_THREAD elements. Only a group of
 * one reduction set splits (a later set would need every block's result),
 * and only when an argument slot is left for the scratch. */
static void kcg_cuda_split(const kcg_ctx *c, kcg_cuda *k, int64_t widest, int64_t items) {
  int64_t ry = k->threads / k->tile_items, per_block = ry * KCG_TILE_PER_THREAD;
  int64_t tiles = (items + k->tile_items - 1) / k->tile_items;
  int64_t s = (widest + per_block - 1) / per_block;
  if (tiles < 1 || c->n_sets != 1 || c->g->n_in + c->g->n_out >= KCG_MAX_ARGS) return;
  if (s > KCG_TILE_BLOCKS / tiles) s = KCG_TILE_BLOCKS / tiles;
  if (s < 2) return;
  int n = c->set_start[1] - c->set_start[0];
  k->split = (int)s;
  k->scratch_slot = c->g->n_in + c->g->n_out;
  k->counter_bytes = (tiles * 4 + 15) / 16 * 16;
  k->partial_bytes = tiles * k->tile_items * s * 8; /* 8 bytes hold every accumulator */
  k->scratch_bytes = k->counter_bytes + n * k->partial_bytes;
}

/* Long reductions over too few items to fill the device, and columns over
 * fewer than KCG_THREAD_ITEMS items, take tiles; other reductions over the
 * contiguous last axis a warp each; the rest (short ones, columns over many
 * items) a thread each. */
void kcg_cuda_reduce_mode(const kcg_ctx *c, kcg_cuda *k) {
  int64_t items = kcg_items(c), widest, run;
  bool inner;
  kcg_cuda_widest(c, &widest, &inner, &run);
  k->threads = 256;
  k->split = 1;
  k->tile_items = 1;
  if (inner ? widest >= 4096 && items < 512 : widest >= 64 && items < KCG_THREAD_ITEMS) {
    k->coop = KCG_COOP_TILE;
    k->threads = KCG_TILE_THREADS;
    k->min_blocks = kcg_cuda_acc_regs(c) <= KCG_TILE_LIGHT ? 8 : 4;
    k->tile_items = inner ? 1 : (int)(run >= 32 ? 32 : kcg_pow2_at_least(run));
    kcg_cuda_split(c, k, widest, items);
  } else {
    k->coop = inner && widest >= 32 ? KCG_COOP_WARP : KCG_COOP_THREAD;
  }
}

/* ---- TILE ---- */

void kcg_cuda_tile_prologue(kcg_ctx *c, const kcg_cuda *k) {
  const char *t = c->idx_type;
  int ix = k->tile_items;
  kcg_line(c, 0, "const kiln_u32 tk = threadIdx.x %% %du, tr = threadIdx.x / %du;", ix, ix);
  kcg_line(c, 0, "const %s ntiles = (hi - lo + %du) / %du;", t, ix - 1, ix);
  /* One tree buffer for every reducer: 8 bytes hold each accumulator type. */
  kcg_line(c, 0, "__shared__ __align__(8) unsigned char tsm[%d * 8];", k->threads);
  if (k->split < 2) return;
  kcg_line(c, 0, "const kiln_u32 part = blockIdx.x %% %du;", k->split);
  kcg_line(c, 0, "kiln_u32 *const tcount = (kiln_u32 *)args.ptr[%d];", k->scratch_slot);
  kcg_line(c, 0, "unsigned char *const tpart = (unsigned char *)args.ptr[%d] + %lld;",
           k->scratch_slot, (long long)k->counter_bytes);
  kcg_line(c, 0, "__shared__ bool tlast;");
}

/* The loop over this block's tiles: every thread of the block runs it the
 * same number of times (they meet in barriers); a thread past the end
 * computes the last item again (in bounds) and stores nothing. */
int kcg_cuda_tile_loop(kcg_ctx *c, kcg_cuda *k, const char *var) {
  const char *t = c->idx_type;
  int ix = k->tile_items, s = k->split;
  return kcg_scope_open(
      c, 0,
      kcg_strf(c,
               "for (%s tile = blockIdx.x / %du; tile < ntiles; tile += gridDim.x / %du) {\n"
               "  const %s %s0 = lo + tile * %du + tk;\n"
               "  const bool valid = %s0 < hi;\n"
               "  const %s %s = valid ? %s0 : hi - 1;",
               t, s, s, t, var, ix, var, t, var, var),
      "}");
}

/* kiln_tile_<name>(v, tree, IX): the item's combination, in every thread. */
static const char *kcg_tile_call(kcg_ctx *c, const kcg_cuda *k, const kcg_reducer *r,
                                 const char *v) {
  c->uses_reduce_h = true;
  kcg_helper(c, kcg_strf(c, "KILN_DEFINE_TILE_REDUCE(%s, %s, %s)", r->name, r->ctype, r->combine));
  return kcg_strf(c, "kiln_tile_%s(%s, (%s *)tsm, %du)", r->name, v, r->ctype, k->tile_items);
}

/* A split's end: partials to scratch, the count, and in the last block the
 * partials' combination; the other blocks go on to their next tile. */
static void kcg_cuda_tile_finish(kcg_ctx *c, const kcg_cuda *k, int scope, const kcg_reducer *r,
                                 int n, kcg_term *out) {
  const char *at = kcg_fresh(c, "pt"), *pq[KCG_MAX_SET];
  int S = k->split, ry = k->threads / k->tile_items;
  kcg_line(c, scope, "const %s %s = (tile * %du + tk) * %du;", c->idx_type, at, k->tile_items, S);
  for (int q = 0; q < n; q++) {
    pq[q] = kcg_fresh(c, "part");
    kcg_line(c, scope, "%s *const %s = (%s *)(tpart + %lld);", r[q].ctype, pq[q], r[q].ctype,
             (long long)(q * k->partial_bytes));
    kcg_line(c, scope, "if (tr == 0) %s[%s + part] = %s;", pq[q], at, out[q].expr);
  }
  /* Partials visible device-wide before the count says they are there. */
  kcg_line(c, scope, "__threadfence();");
  kcg_line(c, scope, "__syncthreads();");
  kcg_line(c, scope, "if (threadIdx.x == 0) tlast = atomicAdd(&tcount[tile], 1u) == %du;", S - 1);
  kcg_line(c, scope, "__syncthreads();");
  kcg_line(c, scope, "if (!tlast) continue;");
  kcg_line(c, scope, "__threadfence();");
  for (int q = 0; q < n; q++) {
    const char *acc = kcg_fresh(c, "acc"), *p = kcg_fresh(c, "p");
    kcg_line(c, scope, "%s %s = %s;", r[q].ctype, acc, r[q].identity);
    kcg_line(c, scope,
             "for (kiln_u32 %s = tr; %s < %du; %s += %du) %s = %s(%s, ((volatile %s *)%s)[%s + %s]);",
             p, p, S, p, ry, acc, r[q].combine, acc, r[q].ctype, pq[q], at, p);
    out[q] = kcg_acc_result(c, scope, &r[q], kcg_tile_call(c, k, &r[q], acc));
  }
  kcg_line(c, scope, "if (threadIdx.x == 0) tcount[tile] = 0u;");
}

/* The set's reductions at the tile's items, all in the tile loop's scope
 * (also a rank-0 result's, whose index lives outside): its threads meet in
 * barriers there, and a split's other blocks leave the tile from there. */
static void kcg_cuda_tile_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_cuda *k = c->skel;
  int scope = k->item_scope, axes[KIR_MAX_RANK];
  int64_t count, ry = k->threads / k->tile_items;
  kcg_reduce_axes(c, &c->p->eqns[eqns[0]], axes, &count);
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  const char *first = k->split > 1 ? kcg_strf(c, "part * %lldu + tr", (long long)ry) : "tr";
  kcg_cuda_strided(c, eqns, n, ix, scope, kcg_strf(c, "valid ? %s : %lld", first, (long long)count),
                   ry * k->split, r, acc);
  for (int q = 0; q < n; q++)
    out[q] = kcg_acc_result(c, scope, &r[q], kcg_tile_call(c, k, &r[q], acc[q]));
  if (k->split > 1) kcg_cuda_tile_finish(c, k, scope, r, n, out);
}
