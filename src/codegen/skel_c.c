/* The C target's skeleton: one loop over the work items [begin, end) this
 * call covers (the runtime splits the range across threads), restrict
 * pointers, and plain inner loops the host compiler can vectorize;
 * reductions over a contiguous last axis keep KILN_LANES accumulators.
 * Kernels run with denormals flushed, as XLA:CPU does (kernels/prelude.h). */
#include <stdlib.h>
#include "codegen/codegen.h"

/* A REDUCE group over leading axes (column sums: a bias gradient over
 * batch and pixels) walks the rows of its operand once per tile of
 * KCG_C_COL_TILE results, each result's accumulator in a stack array, so
 * the inner loop reads contiguous elements instead of one per row per
 * result; each result still adds its elements in row order. */
#define KCG_C_COL_TILE 64

/* Row values kept between passes take at most this much stack per row;
 * beyond it they are recomputed. */
#define KCG_C_ROW_CACHE_BYTES (128.0 * 1024.0)
/* A LOOP group runs as rows (kcg_c_items) when its rows have at least
 * KCG_C_MIN_ROW elements and there are at least KCG_C_MIN_ROWS of them. */
#define KCG_C_MIN_ROW 16
#define KCG_C_MIN_ROWS 32
/* KILN_ROW_LANES of kernels/host.h: a ROW pass's accumulators. */
#define KCG_C_ROW_LANES 32

/* A REDUCE group of one reduction set over contiguous elements (a full
 * reduction, or a few long rows) splits each item into shares of about
 * KCG_C_SPLIT_CHUNK elements, at most KCG_C_SPLIT_PARTS work items in all,
 * so that the runtime's threads share even one item. */
#define KCG_C_SPLIT_CHUNK 65536
#define KCG_C_SPLIT_PARTS 256

typedef struct kcg_c_split {
  int64_t parts, chunk, count; /* per item: shares, elements per share, in all */
  int slot;                    /* args.ptr[] of the scratch */
  int64_t counter_bytes, partial_bytes;
  int scope;                   /* one work item's */
} kcg_c_split;

typedef struct kcg_c_col {
  int64_t rows; /* reduced elements per result: the leading axes' product */
  int tile;     /* the tile loop's scope */
  int item;     /* one result's scope */
} kcg_c_col;

typedef struct kcg_c_row {
  int scope;        /* one row's scope */
  int ix;           /* the row's index over the leading dimensions */
  kcg_term rowbase; /* linear index of the row's first element */
  int64_t length;
  bool cache;
} kcg_c_row;

static void kcg_c_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  kcg_reduce_nested(c, eqns, n, ix, out, true);
}

/* The linear index of the first element of the row at ix (of the leading
 * dimensions). */
static kcg_term kcg_c_rowbase(kcg_ctx *c, const kcg_c_row *row, int ix) {
  if (ix == row->ix) return row->rowbase;
  kcg_term lin = kcg_index_lin(c, ix);
  if (strcmp(lin.expr, "0") == 0) return lin;
  return kcg_term_make(kcg_strf(c, "(%s * %lld)", lin.expr, (long long)row->length), lin.scope);
}

static int kcg_c_row_loop(kcg_ctx *c, const kcg_c_row *row, int parent, int ix, kcg_term base,
                          int64_t from, int64_t to) {
  const char *j = kcg_fresh(c, "j");
  return kcg_row_loop_open(
      c, parent, ix, base,
      kcg_strf(c, "for (kiln_i64 %s = %lld; %s < %lld; ++%s) {", j, (long long)from, j,
               (long long)to, j),
      j, row->cache ? j : NULL, row->length);
}

/* KILN_ROW_LANES accumulators per reducer (kernels/host.h), or one. */
static void kcg_c_row_acc_declare(kcg_ctx *c, int scope, const kcg_reducer *r, int n, bool lanes,
                                  const char **acc) {
  if (!lanes) {
    kcg_acc_declare(c, scope, r, n, false, acc);
    return;
  }
  for (int k = 0; k < n; k++) {
    acc[k] = kcg_fresh(c, "acc");
    kcg_line(c, scope, "%s %s[KILN_ROW_LANES];", r[k].ctype, acc[k]);
    kcg_line(c, scope, "for (int l = 0; l < KILN_ROW_LANES; ++l) %s[l] = %s;", acc[k],
             r[k].identity);
    kcg_helper(c, kcg_strf(c, "KILN_DEFINE_ROW_LANES_REDUCE(%s, %s, %s)", r[k].name, r[k].ctype,
                           r[k].combine));
  }
}

/* A pass over the row: KILN_ROW_LANES accumulators over the bulk of it, one
 * for the rest. */
static void kcg_c_row_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  kcg_c_row *row = c->skel;
  int64_t len = row->length;
  int64_t main = len >= 2 * KCG_C_ROW_LANES ? len - len % KCG_C_ROW_LANES : 0;
  int scope = kcg_index_scope(c, ix), oix[KCG_MAX_SET];
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  kcg_term base = kcg_c_rowbase(c, row, ix);
  int saved_pass = c->pass;
  c->pass = c->next_name++;
  kcg_reducers(c, eqns, n, r);
  kcg_c_row_acc_declare(c, scope, r, n, main > 0, acc);
  if (main > 0) {
    const char *jb = kcg_fresh(c, "jb"), *l = kcg_fresh(c, "l"), *j = kcg_fresh(c, "j");
    int s = kcg_row_loop_open(
        c, scope, ix, base,
        kcg_strf(c,
                 "for (kiln_i64 %s = 0; %s < %lld; %s += KILN_ROW_LANES) {\n"
                 "  KILN_LANES_LOOP for (int %s = 0; %s < KILN_ROW_LANES; ++%s) {\n"
                 "    const kiln_i64 %s = %s + %s;",
                 jb, jb, (long long)main, jb, l, l, l, j, jb, l),
        j, row->cache ? j : NULL, len);
    c->scopes[s].indent++;
    free(c->scopes[s].footer);
    c->scopes[s].footer = kcore_strdup("  }\n}");
    for (int k = 0; k < n; k++) oix[k] = kcg_row_loop_index(c, s);
    kcg_accumulate(c, eqns, n, oix, r, acc, kcg_strf(c, "[%s]", l));
    kcg_scope_close(c, s);
  }
  if (main < len) {
    int s = kcg_c_row_loop(c, row, scope, ix, base, main, len);
    for (int k = 0; k < n; k++) oix[k] = kcg_row_loop_index(c, s);
    kcg_accumulate(c, eqns, n, oix, r, acc, main > 0 ? "[0]" : "");
    kcg_scope_close(c, s);
  }
  kcg_row_pass_end(c);
  c->pass = saved_pass;
  for (int k = 0; k < n; k++)
    out[k] = kcg_acc_result(
        c, scope, &r[k], main > 0 ? kcg_strf(c, "kiln_row_lanes_%s(%s)", r[k].name, acc[k]) : acc[k]);
}

/* The row length of a LOOP group's nested form, or 0 for the flat one: all
 * outputs of one shape of rank 2 or more, rows long enough for a vector loop
 * and enough of them to share among threads. */
static int64_t kcg_c_loop_rows(kcg_ctx *c) {
  const kir_aval *a = kir_var_aval(c->p, c->g->out[0]);
  if (a->rank < 2) return 0;
  for (int k = 1; k < c->g->n_out; k++)
    if (!kir_aval_same_shape(a, kir_var_aval(c->p, c->g->out[k]))) return 0;
  int64_t len = a->shape[a->rank - 1], rows = len > 0 ? kir_aval_size(a) / len : 0;
  return len >= KCG_C_MIN_ROW && rows >= KCG_C_MIN_ROWS ? len : 0;
}

/* One element of every output per item; or, nested, one row of every output
 * per item: the coordinates of the row are derived once per row, and the
 * inner loop runs over the last dimension with unit stride, so that
 * broadcast and transposed operands are read without a division per element. */
static void kcg_c_items(kcg_ctx *c, int64_t len) {
  const kir_aval *a0 = kir_var_aval(c->p, c->g->out[0]);
  int ix = -1, s, rs = 0;
  kcg_term it = {0};
  if (len == 0) {
    s = kcg_scope_open(c, 0, "for (kiln_i64 i = begin; i < end; ++i) {", "}");
    it = kcg_term_make("i", s);
  } else {
    int rank = a0->rank;
    rs = kcg_scope_open(c, 0, "for (kiln_i64 row = begin; row < end; ++row) {", "}");
    kcg_term r = kcg_term_make("row", rs), coords[KIR_MAX_RANK];
    memcpy(coords, kcg_index_coords(c, kcg_index_get(c, rank - 1, a0->shape, &r, NULL)),
           sizeof(kcg_term) * (size_t)(rank - 1));
    kcg_line(c, rs, "const kiln_i64 rowbase = row * %lld;", (long long)len);
    s = kcg_scope_open(c, rs, kcg_strf(c, "for (kiln_i64 j = 0; j < %lld; ++j) {", (long long)len),
                       "}");
    coords[rank - 1] = kcg_term_make("j", s);
    kcg_term lin = kcg_term_make("(rowbase + j)", s);
    ix = kcg_index_get(c, rank, a0->shape, &lin, coords);
  }
  for (int k = 0; k < c->g->n_out; k++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[k]);
    kcg_store(c, c->g->n_in + k, c->g->out[k],
              len ? ix : kcg_index_get(c, a->rank, a->shape, &it, NULL));
  }
  kcg_scope_close(c, s);
  if (len) kcg_scope_close(c, rs);
}

/* Every output's element of the item at linear index it. */
static void kcg_c_store_items(kcg_ctx *c, kcg_term it) {
  for (int k = 0; k < c->g->n_out; k++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[k]);
    kcg_store(c, c->g->n_in + k, c->g->out[k], kcg_index_get(c, a->rank, a->shape, &it, NULL));
  }
}

/* ---- split reductions ---- */

/* The split of the group, or false: one set, over trailing axes (an item's
 * elements are contiguous), long enough for two shares, and an argument slot
 * left for the scratch. */
static bool kcg_c_split_plan(const kcg_ctx *c, kcg_c_split *sp) {
  if (c->g->kind != KFUSE_REDUCE || c->n_sets != 1 || c->g->n_in + c->g->n_out >= KCG_MAX_ARGS)
    return false;
  const kir_eqn *e = &c->p->eqns[c->set_eqns[0]];
  const kir_aval *a = kir_var_aval(c->p, e->in[0]);
  int axes[KIR_MAX_RANK], m = kcg_reduce_axes(c, e, axes, &sp->count);
  for (int k = 0; k < m; k++)
    if (axes[k] != a->rank - m + k) return false;
  int64_t items = kcg_items(c), parts = (sp->count + KCG_C_SPLIT_CHUNK - 1) / KCG_C_SPLIT_CHUNK;
  if (m == 0 || items < 1 || items > KCG_C_SPLIT_PARTS / 2) return false;
  if (parts > KCG_C_SPLIT_PARTS / items) parts = KCG_C_SPLIT_PARTS / items;
  if (parts < 2) return false;
  /* Whole lane groups per share, then as many shares as that covers. */
  sp->chunk = (sp->count + parts - 1) / parts;
  sp->chunk = (sp->chunk + KCG_LANES - 1) / KCG_LANES * KCG_LANES;
  sp->parts = (sp->count + sp->chunk - 1) / sp->chunk;
  sp->slot = c->g->n_in + c->g->n_out;
  sp->counter_bytes = (items * 4 + 15) / 16 * 16;
  sp->partial_bytes = items * sp->parts * 8; /* 8 bytes hold every accumulator */
  return sp->parts >= 2;
}

/* One share of an item: KILN_LANES accumulators over its elements (blocked
 * for float sums, reduce.c), its partials to scratch, a count of the item's
 * shares done; the share that completes the count combines the item's
 * partials in order 0..parts-1, pairwise for float sums (the result does not
 * depend on which thread ran which share), resets the count and goes on to
 * the epilogue; the others go to their next share. */
static void kcg_c_split_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_c_split *sp = c->skel;
  int scope = sp->scope, oix[KCG_MAX_SET];
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  kcg_reducers(c, eqns, n, r);
  kcg_acc_declare(c, scope, r, n, true, acc);
  const char *rf = kcg_fresh(c, "rf"), *rt = kcg_fresh(c, "rt"), *rb = kcg_fresh(c, "rb");
  const char *l = kcg_fresh(c, "l"), *v = kcg_fresh(c, "r"), *v2 = kcg_fresh(c, "r");
  long long ch = (long long)sp->chunk, count = (long long)sp->count;
  kcg_line(c, scope, "const kiln_i64 %s = part * %lld, %s = %s + %lld < %lld ? %s + %lld : %lld;",
           rf, ch, rt, rf, ch, count, rf, ch, count);
  /* A long share runs in blocks of KCG_BLOCK elements per lane (reduce.c). */
  bool blocked = kcg_blocked(r, n) && sp->chunk / KCG_LANES > KCG_BLOCK;
  const char *lo = rf, *hi = rt;
  int host = scope;
  kcg_cascade cas;
  if (blocked) {
    const char *bb = kcg_fresh(c, "bb"), *be = kcg_fresh(c, "be");
    long long b = (long long)KCG_BLOCK * KCG_LANES;
    kcg_cascade_declare(c, scope, r, n, "KILN_LANES", (sp->chunk + b - 1) / b, &cas);
    host = kcg_scope_open(c, scope,
                          kcg_strf(c, "for (kiln_i64 %s = %s; %s < %s; %s += %lld) {\n"
                                   "  const kiln_i64 %s = %s + %lld < %s ? %s + %lld : %s;",
                                   bb, rf, bb, rt, bb, b, be, bb, b, rt, bb, b, rt),
                          "}");
    lo = bb;
    hi = be;
  }
  int s = kcg_scope_open(
      c, host,
      kcg_strf(c,
               "for (kiln_i64 %s = %s; %s + KILN_LANES <= %s; %s += KILN_LANES) {\n"
               "  KILN_LANES_LOOP for (int %s = 0; %s < KILN_LANES; ++%s) {\n"
               "    const kiln_i64 %s = %s + %s;",
               rb, lo, rb, hi, rb, l, l, l, v, rb, l),
      "  }\n}");
  c->scopes[s].indent++;
  kcg_term rl = kcg_term_make(v, s);
  for (int q = 0; q < n; q++)
    oix[q] = kcg_reduce_operand_index(c, &c->p->eqns[eqns[q]], ix, NULL, &rl);
  kcg_accumulate(c, eqns, n, oix, r, acc, kcg_strf(c, "[%s]", l));
  kcg_scope_close(c, s);
  if (blocked) {
    kcg_cascade_step(c, host, r, n, acc, &cas, NULL, false);
    kcg_scope_close(c, host);
  }
  s = kcg_scope_open(c, scope,
                     kcg_strf(c, "for (kiln_i64 %s = %s + (%s - %s) / KILN_LANES * KILN_LANES; "
                              "%s < %s; ++%s) {", v2, rf, rt, rf, v2, rt, v2),
                     "}");
  rl = kcg_term_make(v2, s);
  for (int q = 0; q < n; q++)
    oix[q] = kcg_reduce_operand_index(c, &c->p->eqns[eqns[q]], ix, NULL, &rl);
  kcg_accumulate(c, eqns, n, oix, r, acc, "[0]");
  kcg_scope_close(c, s);
  if (blocked) kcg_cascade_step(c, scope, r, n, acc, &cas, NULL, true);
  const char *pq[KCG_MAX_SET];
  for (int q = 0; q < n; q++) {
    pq[q] = kcg_fresh(c, "part");
    kcg_line(c, scope, "%s *const %s = (%s *)(tpart + %lld) + i * %lld;", r[q].ctype, pq[q],
             r[q].ctype, (long long)(q * sp->partial_bytes), (long long)sp->parts);
    kcg_line(c, scope, "%s[part] = kiln_lanes_%s(%s);", pq[q], r[q].name, acc[q]);
  }
  kcg_line(c, scope, "if (__atomic_add_fetch(&tcount[i], 1u, __ATOMIC_ACQ_REL) != %lldu) continue;",
           (long long)sp->parts);
  kcg_line(c, scope, "__atomic_store_n(&tcount[i], 0u, __ATOMIC_RELAXED);");
  for (int q = 0; q < n; q++) {
    const char *res = kcg_fresh(c, "acc"), *p = kcg_fresh(c, "p");
    kcg_line(c, scope, "%s %s = %s;", r[q].ctype, res, r[q].identity);
    if (r[q].block) { /* the partials of a float sum pairwise, as blocks */
      kcg_cascade pc;
      kcg_cascade_declare(c, scope, &r[q], 1, NULL, sp->parts, &pc);
      int s = kcg_scope_open(c, scope, kcg_strf(c, "while (%s < %lld) {", pc.count,
                                                (long long)sp->parts), "}");
      kcg_line(c, s, "%s = %s[%s];", res, pq[q], pc.count);
      kcg_cascade_step(c, s, &r[q], 1, &res, &pc, NULL, false);
      kcg_scope_close(c, s);
      kcg_cascade_step(c, scope, &r[q], 1, &res, &pc, NULL, true);
    } else {
      kcg_line(c, scope, "for (kiln_i64 %s = 0; %s < %lld; ++%s) %s = %s(%s, %s[%s]);", p, p,
               (long long)sp->parts, p, res, r[q].combine, res, pq[q], p);
    }
    out[q] = kcg_term_make(res, scope);
  }
}

/* The work items w = i * parts + part of a split group. */
static void kcg_c_split_items(kcg_ctx *c, kcg_c_split *sp) {
  kcg_line(c, 0, "kiln_u32 *const tcount = (kiln_u32 *)args.ptr[%d];", sp->slot);
  kcg_line(c, 0, "unsigned char *const tpart = (unsigned char *)args.ptr[%d] + %lld;", sp->slot,
           (long long)sp->counter_bytes);
  sp->scope = kcg_scope_open(
      c, 0,
      kcg_strf(c, "for (kiln_i64 w = begin; w < end; ++w) {\n"
               "  const kiln_i64 i = w / %lld, part = w %% %lld;",
               (long long)sp->parts, (long long)sp->parts),
      "}");
  c->skel = sp;
  c->reduce = kcg_c_split_reduce;
  kcg_c_store_items(c, kcg_term_make("i", sp->scope));
  kcg_scope_close(c, sp->scope);
}

/* ---- reductions over leading axes ---- */

/* Whether the group is one reduction set over the leading axes of its
 * operands (the results' elements contiguous in each row), of two rows or
 * more. */
static bool kcg_c_col_plan(const kcg_ctx *c, kcg_c_col *col) {
  if (c->g->kind != KFUSE_REDUCE || c->n_sets != 1) return false;
  const kir_eqn *e = &c->p->eqns[c->set_eqns[0]];
  const kir_aval *a = kir_var_aval(c->p, e->in[0]);
  int axes[KIR_MAX_RANK], m = kcg_reduce_axes(c, e, axes, &col->rows);
  for (int k = 0; k < m; k++)
    if (axes[k] != k) return false;
  return m >= 1 && m < a->rank && col->rows >= 2 && kcg_items(c) >= 2;
}

/* The set's accumulators, one stack array per reduction in the tile's
 * scope, filled by one pass over the rows; the result of item t is
 * element t. */
static void kcg_c_col_reduce(kcg_ctx *c, const int *eqns, int n, int ix, kcg_term *out) {
  const kcg_c_col *col = c->skel;
  int oix[KCG_MAX_SET];
  kcg_reducer r[KCG_MAX_SET];
  const char *acc[KCG_MAX_SET];
  kcg_reducers(c, eqns, n, r);
  const char *u = kcg_fresh(c, "u"), *v = kcg_fresh(c, "r");
  for (int k = 0; k < n; k++) {
    acc[k] = kcg_fresh(c, "acc");
    kcg_line(c, col->tile, "%s %s[%d];", r[k].ctype, acc[k], KCG_C_COL_TILE);
    kcg_line(c, col->tile, "for (kiln_i64 %s = 0; %s < tn; ++%s) %s[%s] = %s;", u, u, u, acc[k], u,
             r[k].identity);
  }
  /* Long columns run in blocks of KCG_BLOCK rows (reduce.c). */
  bool blocked = kcg_blocked(r, n) && col->rows > KCG_BLOCK;
  const char *lo = "0", *hi = kcg_strf(c, "%lld", (long long)col->rows);
  int host = col->tile;
  kcg_cascade cas;
  if (blocked) {
    const char *bb = kcg_fresh(c, "bb"), *be = kcg_fresh(c, "be");
    kcg_cascade_declare(c, col->tile, r, n, kcg_strf(c, "%d", KCG_C_COL_TILE),
                        (col->rows + KCG_BLOCK - 1) / KCG_BLOCK, &cas);
    host = kcg_scope_open(c, col->tile,
                          kcg_strf(c, "for (kiln_i64 %s = 0; %s < %s; %s += %d) {\n"
                                   "  const kiln_i64 %s = %s + %d < %s ? %s + %d : %s;",
                                   bb, bb, hi, bb, KCG_BLOCK, be, bb, KCG_BLOCK, hi, bb,
                                   KCG_BLOCK, hi),
                          "}");
    lo = bb;
    hi = be;
  }
  int rs = kcg_scope_open(c, host,
                          kcg_strf(c, "for (kiln_i64 %s = %s; %s < %s; ++%s) {", v, lo, v, hi, v),
                          "}");
  int us = kcg_scope_open(c, rs, kcg_strf(c, "for (kiln_i64 %s = 0; %s < tn; ++%s) {", u, u, u),
                          "}");
  kcg_term lin = kcg_term_make(kcg_strf(c, "(%s * %lld + i0 + %s)", v, (long long)kcg_items(c), u), us);
  for (int q = 0; q < n; q++) {
    const kir_aval *a = kir_var_aval(c->p, c->p->eqns[eqns[q]].in[0]);
    oix[q] = kcg_index_get(c, a->rank, a->shape, &lin, NULL);
  }
  kcg_accumulate(c, eqns, n, oix, r, acc, kcg_strf(c, "[%s]", u));
  kcg_scope_close(c, us);
  kcg_scope_close(c, rs);
  if (blocked) {
    kcg_cascade_step(c, host, r, n, acc, &cas, "(int)tn", false);
    kcg_scope_close(c, host);
    kcg_cascade_step(c, col->tile, r, n, acc, &cas, "(int)tn", true);
  }
  int scope = kcg_index_scope(c, ix);
  for (int k = 0; k < n; k++) out[k] = kcg_acc_result(c, scope, &r[k], kcg_strf(c, "%s[t]", acc[k]));
}

/* Tiles of results [i0, i0 + tn); within one, the results one by one. */
static void kcg_c_cols(kcg_ctx *c, kcg_c_col *col) {
  col->tile = kcg_scope_open(
      c, 0,
      kcg_strf(c, "for (kiln_i64 i0 = begin; i0 < end; i0 += %d) {\n"
               "  const kiln_i64 tn = end - i0 < %d ? end - i0 : %d;",
               KCG_C_COL_TILE, KCG_C_COL_TILE, KCG_C_COL_TILE),
      "}");
  col->item = kcg_scope_open(c, col->tile,
                             "for (kiln_i64 t = 0; t < tn; ++t) {\n  const kiln_i64 i = i0 + t;", "}");
  c->skel = col;
  c->reduce = kcg_c_col_reduce;
  kcg_c_store_items(c, kcg_term_make("i", col->item));
  kcg_scope_close(c, col->item);
  kcg_scope_close(c, col->tile);
}

/* Row values several passes read stay in stack arrays of one row. */
static bool kcg_c_row_cache_fits(const kcg_ctx *c, int64_t length) {
  int n = 0;
  for (int v = 0; v < c->p->n_vars; v++) n += c->cacheable[v];
  return length > 0 && (double)n * (double)length * 8.0 <= KCG_C_ROW_CACHE_BYTES;
}

static void kcg_c_rows(kcg_ctx *c, kcg_c_row *row) {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  row->length = shape[rank - 1];
  row->cache = kcg_c_row_cache_fits(c, row->length);
  row->scope = kcg_scope_open(c, 0, "for (kiln_i64 row = begin; row < end; ++row) {", "}");
  kcg_term r = kcg_term_make("row", row->scope);
  row->ix = kcg_index_get(c, rank - 1, shape, &r, NULL);
  kcg_index_coords(c, row->ix);
  kcg_term lin = kcg_index_lin(c, row->ix);
  if (strcmp(lin.expr, "0") == 0) {
    row->rowbase = lin;
  } else {
    kcg_line(c, row->scope, "const kiln_i64 rowbase = %s * %lld;", lin.expr, (long long)row->length);
    row->rowbase = kcg_term_make("rowbase", row->scope);
  }
  c->skel = row;
  /* Reductions first, in pass order, so that the values they keep are kept
   * before any later loop reads them. */
  for (int s = 0; s < c->n_sets; s++) kcg_value(c, c->p->eqns[c->set_eqns[c->set_start[s]]].out[0], row->ix);
  kir_aval rowav = kir_aval_make(KILN_F32, rank, shape, false);
  bool any_row_out = false;
  for (int k = 0; k < c->g->n_out; k++) {
    const kir_aval *a = kir_var_aval(c->p, c->g->out[k]);
    if (kir_aval_same_shape(a, &rowav)) {
      any_row_out = true;
      continue;
    }
    kcg_store(c, c->g->n_in + k, c->g->out[k], kcg_index_get(c, a->rank, a->shape, &r, NULL));
  }
  if (any_row_out) {
    int saved_pass = c->pass;
    c->pass = c->next_name++;
    int s = kcg_c_row_loop(c, row, row->scope, row->ix, row->rowbase, 0, row->length);
    for (int k = 0; k < c->g->n_out; k++)
      if (kir_aval_same_shape(kir_var_aval(c->p, c->g->out[k]), &rowav))
        kcg_store(c, c->g->n_in + k, c->g->out[k], kcg_row_loop_index(c, s));
    kcg_scope_close(c, s);
    kcg_row_pass_end(c);
    c->pass = saved_pass;
  }
  kcg_scope_close(c, row->scope);
}

kiln_status kcg_c_kernel(kcg_ctx *c, kcg_body *out) {
  kcg_c_row row;
  kcg_c_split split;
  kcg_c_col col;
  memset(&row, 0, sizeof row);
  memset(&split, 0, sizeof split);
  memset(&col, 0, sizeof col);
  c->idx_type = "kiln_i64";
  c->reduce = c->g->kind == KFUSE_ROW ? kcg_c_row_reduce : kcg_c_reduce;
  int64_t loop_row = c->g->kind == KFUSE_LOOP ? kcg_c_loop_rows(c) : 0;
  bool split_on = kcg_c_split_plan(c, &split);
  if (c->g->kind == KFUSE_ROW)
    kcg_c_rows(c, &row);
  else if (split_on)
    kcg_c_split_items(c, &split);
  else if (kcg_c_col_plan(c, &col))
    kcg_c_cols(c, &col);
  else
    kcg_c_items(c, loop_row);
  c->skel = NULL;
  if (c->st != KILN_OK) return c->st;
  int rank;
  int64_t shape[KIR_MAX_RANK];
  out->n_items = kcg_items(c);
  if (c->g->kind == KFUSE_ROW) {
    kcg_row_shape(c, &rank, shape);
    out->row_length = shape[rank - 1];
  } else if (loop_row > 0) {
    out->n_items /= loop_row;
    out->row_length = loop_row;
  }
  out->block_threads = 1;
  out->items_per_block = 1;
  if (split_on) {
    out->n_items *= split.parts;
    out->split = (int)split.parts;
    out->scratch_bytes = split.counter_bytes + (int64_t)(c->set_start[1] - c->set_start[0]) * split.partial_bytes;
  }
  kcg_buf_add(&out->text, "{\n");
  kcg_declare_args(c, &out->text);
  kcg_buf_add(&out->text, "  const kiln_fpmode fpmode = kiln_flush_denormals();\n");
  if (c->scopes[0].text.s) kcg_buf_add(&out->text, c->scopes[0].text.s);
  kcg_buf_add(&out->text, "  kiln_restore_fpmode(fpmode);\n}\n");
  if (out->text.oom || c->scopes[0].text.oom)
    return kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  return KILN_OK;
}
