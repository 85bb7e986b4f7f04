/* kcg_emit: checks a group, analyses it (which vars it reads, its
 * reductions and their passes, the ROW values worth keeping on chip), runs
 * the target's skeleton and assembles the complete source. */
#include <stdio.h>
#include <stdlib.h>
#include "codegen/codegen.h"

bool kcg_prim_fusable(kir_prim p) {
  if (kcg_is_reduction(p)) return true;
  switch (kir_prim_get(p)->family) {
    case KIR_FAMILY_ELEMENTWISE: return true;
    case KIR_FAMILY_SHAPE:
      return p == KIR_PRIM_BROADCAST_IN_DIM || p == KIR_PRIM_RESHAPE || p == KIR_PRIM_TRANSPOSE ||
             p == KIR_PRIM_SQUEEZE || p == KIR_PRIM_EXPAND_DIMS || p == KIR_PRIM_REV ||
             p == KIR_PRIM_SLICE || p == KIR_PRIM_IOTA;
    default: return false;
  }
}

bool kcg_is_reduction(kir_prim p) {
  return p == KIR_PRIM_REDUCE_SUM || p == KIR_PRIM_REDUCE_MAX || p == KIR_PRIM_REDUCE_MIN ||
         p == KIR_PRIM_REDUCE_PROD || p == KIR_PRIM_REDUCE_AND || p == KIR_PRIM_REDUCE_OR;
}

static const kir_aval *kcg_out_aval(const kcg_ctx *c, int k) {
  return kir_var_aval(c->p, c->g->out[k]);
}

int64_t kcg_items(const kcg_ctx *c) {
  if (c->g->kind == KFUSE_ROW) {
    int rank;
    int64_t shape[KIR_MAX_RANK], rows = 1;
    kcg_row_shape(c, &rank, shape);
    for (int d = 0; d < rank - 1; d++) rows *= shape[d];
    return rows;
  }
  return kir_aval_size(kcg_out_aval(c, 0));
}

int64_t kcg_pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

/* The operand shape of the group's reductions, [rows..., row_length]. */
void kcg_row_shape(const kcg_ctx *c, int *rank, int64_t *shape) {
  for (int i = 0; i < c->g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    if (!kcg_is_reduction(e->prim)) continue;
    const kir_aval *a = kir_var_aval(c->p, e->in[0]);
    *rank = a->rank;
    memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->rank);
    return;
  }
  KCORE_ASSERT(!"a ROW group has a reduction");
}

/* The arguments as typed pointers: restrict, unless an output of the group
 * is written over one of its inputs (in-place donation), where they alias
 * (and CUDA must not read that input through the read-only cache). */
void kcg_declare_args(kcg_ctx *c, kcg_buf *out) {
  const char *restrict_kw = c->g->in_place ? "" : "KILN_RESTRICT ";
  for (int s = 0; s < c->g->n_in + c->g->n_out; s++) {
    if (!c->arg_used[s]) continue;
    bool in = s < c->g->n_in;
    kir_vid v = in ? c->g->in[s] : c->g->out[s - c->g->n_in];
    const char *t = kcg_stype(kir_var_aval(c->p, v)->dtype);
    kcg_buf_addf(out, "  %s%s *%s%s = (%s%s *)args.ptr[%d];\n", in ? "const " : "", t,
                 restrict_kw, kcg_arg_name(c, s), in ? "const " : "", t, s);
  }
}

/* ---- checks ---- */

static kiln_status kcg_check_group(kcg_ctx *c) {
  const kir_program *p = c->p;
  const kfuse_group *g = c->g;
  if (g->n_eqns < 0 || g->n_in < 0 || g->n_out < 1 || (g->n_eqns && !g->eqns) ||
      (g->n_in && !g->in) || !g->out)
    return kcg_fail(c, KILN_ERR_ARGUMENT,
                    "kcg_emit: malformed group (%d equations, %d inputs, %d outputs)", g->n_eqns,
                    g->n_in, g->n_out);
  if (g->n_in + g->n_out > KCG_MAX_ARGS)
    return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                    "kcg_emit: %s group has %d inputs and %d outputs, more than the %d kernel "
                    "arguments",
                    kfuse_kind_name(g->kind), g->n_in, g->n_out, KCG_MAX_ARGS);
  for (int i = 0; i < g->n_eqns; i++) {
    int q = g->eqns[i];
    if (q < 0 || q >= p->n_eqns || (i > 0 && q <= g->eqns[i - 1]))
      return kcg_fail(c, KILN_ERR_ARGUMENT,
                      "kcg_emit: group equation %d is %d, not a program equation in order", i, q);
    const kir_eqn *e = &p->eqns[q];
    if (!kcg_prim_fusable(e->prim))
      return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                      "kcg_emit: %s (equation %d) is not fused by the code generator",
                      kir_prim_name(e->prim), q);
    if (e->n_in > KCG_MAX_OPERANDS)
      return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                      "kcg_emit: %s (equation %d) has %d operands, more than the %d fused "
                      "equations may have",
                      kir_prim_name(e->prim), q, e->n_in, KCG_MAX_OPERANDS);
    for (int k = 0; k < e->n_out; k++) c->def[e->out[k]] = q;
  }
  for (int s = 0; s < g->n_in; s++) {
    kir_vid v = g->in[s];
    if (v < 0 || v >= p->n_vars)
      return kcg_fail(c, KILN_ERR_ARGUMENT, "kcg_emit: group input %d is var %d, not a var of "
                      "the program", s, (int)v);
    if (c->def[v] >= 0)
      return kcg_fail(c, KILN_ERR_ARGUMENT, "kcg_emit: group input %d (var %d) is defined by the "
                      "group's equation %d", s, (int)v, c->def[v]);
    if (c->arg[v] < 0 && p->vars[v].kind != KIR_VAR_LITERAL) c->arg[v] = s;
  }
  for (int k = 0; k < g->n_out; k++) {
    kir_vid v = g->out[k];
    if (v < 0 || v >= p->n_vars)
      return kcg_fail(c, KILN_ERR_ARGUMENT, "kcg_emit: group output %d is var %d, not a var of "
                      "the program", k, (int)v);
  }
  return KILN_OK;
}

/* The group's own shape rules per kind (see codegen.h). */
static kiln_status kcg_check_kind(kcg_ctx *c) {
  const kfuse_group *g = c->g;
  char t0[KIR_AVAL_STR_CAP], t1[KIR_AVAL_STR_CAP];
  int n_red = 0, first_red = -1;
  for (int i = 0; i < g->n_eqns; i++)
    if (kcg_is_reduction(c->p->eqns[g->eqns[i]].prim) && n_red++ == 0) first_red = g->eqns[i];
  const char *kind = kfuse_kind_name(g->kind);
  if (g->kind == KFUSE_LOOP && n_red > 0)
    return kcg_fail(c, KILN_ERR_UNIMPLEMENTED, "kcg_emit: LOOP group holds %s (equation %d); "
                    "reductions need a REDUCE or ROW group",
                    kir_prim_name(c->p->eqns[first_red].prim), first_red);
  if (g->kind != KFUSE_LOOP && n_red == 0)
    return kcg_fail(c, KILN_ERR_UNIMPLEMENTED, "kcg_emit: %s group holds no reduction", kind);
  if (g->kind != KFUSE_ROW) {
    int64_t n = kir_aval_size(kcg_out_aval(c, 0));
    for (int k = 1; k < g->n_out; k++)
      if (kir_aval_size(kcg_out_aval(c, k)) != n)
        return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                        "kcg_emit: %s group outputs %s and %s differ in size", kind,
                        kir_aval_str(kcg_out_aval(c, 0), t0, sizeof t0),
                        kir_aval_str(kcg_out_aval(c, k), t1, sizeof t1));
    return KILN_OK;
  }
  const kir_aval *row = kir_var_aval(c->p, c->p->eqns[first_red].in[0]);
  for (int i = 0; i < g->n_eqns; i++) {
    const kir_eqn *e = &c->p->eqns[g->eqns[i]];
    if (!kcg_is_reduction(e->prim)) continue;
    const kir_aval *a = kir_var_aval(c->p, e->in[0]);
    const kir_dims *ax = &e->params.axes.axes;
    if (!kir_aval_same_shape(a, row) || ax->n != 1 || ax->v[0] != a->rank - 1)
      return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                      "kcg_emit: ROW group reduction %s (equation %d) over %s is not over the "
                      "last axis of the row shape %s",
                      kir_prim_name(e->prim), g->eqns[i], kir_aval_str(a, t0, sizeof t0),
                      kir_aval_str(row, t1, sizeof t1));
  }
  int64_t rows = 1;
  for (int d = 0; d < row->rank - 1; d++) rows *= row->shape[d];
  for (int k = 0; k < g->n_out; k++) {
    const kir_aval *o = kcg_out_aval(c, k);
    if (!kir_aval_same_shape(o, row) && kir_aval_size(o) != rows)
      return kcg_fail(c, KILN_ERR_UNIMPLEMENTED,
                      "kcg_emit: ROW group output %s is neither row-shaped (%s) nor one element "
                      "per row",
                      kir_aval_str(o, t0, sizeof t0), kir_aval_str(row, t1, sizeof t1));
  }
  return KILN_OK;
}

/* ---- analysis ---- */

/* Reductions of one depth (the number of reductions on their longest input
 * path), operand shape and axes form a set, computed in one loop. Sets are
 * ordered by depth, then by first appearance. */
static kiln_status kcg_find_sets(kcg_ctx *c) {
  const kfuse_group *g = c->g;
  int nv = c->p->n_vars, n = g->n_eqns;
  int *depth = calloc((size_t)(nv ? nv : 1), sizeof(int));
  int *red = malloc(sizeof(int) * (size_t)(n ? n : 1));
  int *red_depth = malloc(sizeof(int) * (size_t)(n ? n : 1));
  bool *taken = calloc((size_t)(n ? n : 1), sizeof(bool));
  c->set_start = malloc(sizeof(int) * (size_t)(n + 1));
  c->set_eqns = malloc(sizeof(int) * (size_t)(n ? n : 1));
  c->set_depth = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!depth || !red || !red_depth || !taken || !c->set_start || !c->set_eqns || !c->set_depth) {
    kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
    goto done;
  }
  int n_red = 0, max_depth = 0;
  for (int i = 0; i < n; i++) {
    const kir_eqn *e = &c->p->eqns[g->eqns[i]];
    int d = 0;
    for (int k = 0; k < e->n_in; k++) d = depth[e->in[k]] > d ? depth[e->in[k]] : d;
    if (kcg_is_reduction(e->prim)) {
      red[n_red] = g->eqns[i];
      red_depth[n_red++] = ++d;
      max_depth = d > max_depth ? d : max_depth;
    }
    for (int k = 0; k < e->n_out; k++) depth[e->out[k]] = d;
  }
  int placed = 0;
  c->n_sets = 0;
  for (int d = 1; d <= max_depth; d++) {
    for (int i = 0; i < n_red; i++) {
      if (taken[i] || red_depth[i] != d) continue;
      const kir_eqn *a = &c->p->eqns[red[i]];
      c->set_start[c->n_sets] = placed;
      c->set_depth[c->n_sets] = d;
      for (int j = i; j < n_red; j++) {
        const kir_eqn *b = &c->p->eqns[red[j]];
        if (taken[j] || red_depth[j] != d || placed - c->set_start[c->n_sets] == KCG_MAX_SET ||
            !kir_aval_same_shape(kir_var_aval(c->p, a->in[0]), kir_var_aval(c->p, b->in[0])) ||
            !kir_params_equal(KIR_PARAMS_AXES, &a->params, &b->params))
          continue;
        taken[j] = true;
        c->reduce_set[red[j]] = c->n_sets;
        c->set_eqns[placed++] = red[j];
      }
      c->n_sets++;
    }
  }
  c->set_start[c->n_sets] = placed;
done:
  free(depth);
  free(red);
  free(red_depth);
  free(taken);
  return c->st;
}

/* ROW: which row values several passes read (pass k computes the sets of
 * depth k; the last pass writes the row outputs). Walking back from each
 * pass's uses through elementwise equations over the row shape (which all
 * read at the same position): a value needed by several passes is kept,
 * computed once in the first of them, so its operands are needed there
 * only. */
static kiln_status kcg_find_cacheable(kcg_ctx *c) {
  int rank;
  int64_t shape[KIR_MAX_RANK];
  kcg_row_shape(c, &rank, shape);
  kir_aval row = kir_aval_make(KILN_F32, rank, shape, false);
  int nv = c->p->n_vars, last = 0;
  uint64_t *need = calloc((size_t)(nv ? nv : 1), sizeof(uint64_t));
  if (!need) return kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  for (int s = 0; s < c->n_sets; s++) {
    last = c->set_depth[s] > last ? c->set_depth[s] : last;
    for (int i = c->set_start[s]; i < c->set_start[s + 1]; i++)
      need[c->p->eqns[c->set_eqns[i]].in[0]] |= 1ull << (c->set_depth[s] % 64);
  }
  for (int k = 0; k < c->g->n_out; k++)
    if (kir_aval_same_shape(kcg_out_aval(c, k), &row))
      need[c->g->out[k]] |= 1ull << ((last + 1) % 64);
  for (int i = c->g->n_eqns - 1; i >= 0; i--) {
    const kir_eqn *e = &c->p->eqns[c->g->eqns[i]];
    uint64_t m = need[e->out[0]];
    if (kir_prim_get(e->prim)->family != KIR_FAMILY_ELEMENTWISE ||
        e->prim == KIR_PRIM_BITCAST_CONVERT_TYPE || !m)
      continue;
    if (m & (m - 1)) m &= ~m + 1; /* kept: computed in its first pass only */
    for (int k = 0; k < e->n_in; k++)
      if (kir_aval_same_shape(kir_var_aval(c->p, e->in[k]), &row)) need[e->in[k]] |= m;
  }
  for (int v = 0; v < nv; v++) {
    uint64_t m = need[v];
    c->cacheable[v] = (m & (m - 1)) != 0 && c->p->vars[v].kind != KIR_VAR_LITERAL &&
                      (c->def[v] >= 0 || c->arg[v] >= 0);
  }
  free(need);
  return KILN_OK;
}

/* ---- assembly ---- */

static const char *kcg_kind_word(kfuse_kind k) {
  return k == KFUSE_LOOP ? "loop" : k == KFUSE_REDUCE ? "reduce" : "row";
}

/* kiln_<kind>_<first primitives>_<digest of the text>: stable across runs,
 * so that the kernel cache recognizes it, and unique per source. */
static char *kcg_kernel_name(const kcg_ctx *c, const kcg_buf *body) {
  uint64_t h = kcore_hash_str(KCORE_HASH_SEED, body->s ? body->s : "");
  h = kcore_hash_str(h, c->helpers.s ? c->helpers.s : "");
  h = kcore_hash_u64(h, (uint64_t)c->t.target * 1000u + (uint64_t)c->t.sm);
  char name[160];
  int n = snprintf(name, sizeof name, "kiln_%s", kcg_kind_word(c->g->kind));
  int shown = 0;
  for (int i = 0; i < c->g->n_eqns && shown < 2; i++) {
    kir_prim pr = c->p->eqns[c->g->eqns[i]].prim;
    if (kir_prim_get(pr)->family == KIR_FAMILY_SHAPE && pr != KIR_PRIM_IOTA) continue;
    n += snprintf(name + n, sizeof name - (size_t)n, "_%s", kir_prim_name(pr));
    shown++;
  }
  snprintf(name + n, sizeof name - (size_t)n, "_%016llx", (unsigned long long)h);
  for (char *q = name; *q; q++)
    if (*q == '-') *q = '_';
  return kcore_strdup(name);
}

/* ---- what a host kernel's prelude keeps ---- */

static bool kcg_ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* The integer suffixes of kernels/prelude.h's KILN_USE_<suffix> groups. */
static const char *const kcg_int_sfx[] = {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"};
#define KCG_NUM_INT_SFX ((int)(sizeof kcg_int_sfx / sizeof *kcg_int_sfx))

typedef struct kcg_uses {
  bool sfx[KCG_NUM_INT_SFX];
  bool special; /* kernels/special.h's functions */
} kcg_uses;

/* Whether kernels/special.h defines the function ident[0, n): the text
 * names it followed by '(' after a space (its definition, or a call from
 * another of its functions), so a new special function needs no list. */
static bool kcg_special_defines(const char *ident, size_t n) {
  const char *special = kcg_embedded_source("special.h");
  for (const char *p = special; (p = strstr(p, " kiln_")) != NULL; p++)
    if (!strncmp(p + 1, ident, n) && p[1 + n] == '(') return true;
  return false;
}

/* Marks what the kiln_ identifiers of text name: an integer type by the
 * suffix of a helper (kiln_add_i32, kiln_f32_to_u8; the type names such as
 * kiln_i64 need no helper), special.h by what it defines. */
static void kcg_scan_uses(const char *text, kcg_uses *u) {
  for (const char *p = text ? text : ""; *p;) {
    if (!kcg_ident_char(*p)) {
      p++;
      continue;
    }
    const char *start = p;
    while (kcg_ident_char(*p)) p++;
    size_t n = (size_t)(p - start);
    if (n < 5 || strncmp(start, "kiln_", 5) != 0) continue;
    if (!u->special && kcg_special_defines(start, n)) u->special = true;
    for (int i = 0; i < KCG_NUM_INT_SFX; i++) {
      size_t k = strlen(kcg_int_sfx[i]);
      if (n > k + 6 && start[n - k - 1] == '_' && !strncmp(start + n - k, kcg_int_sfx[i], k))
        u->sfx[i] = true;
    }
  }
}

/* A host kernel's text without the prelude groups it never names: each is
 * parsed by every compile, used or not. */
static void kcg_add_trim(kcg_buf *src, const kcg_uses *u) {
  kcg_buf_add(src, "#define KILN_PRELUDE_TRIM 1\n");
  for (int i = 0; i < KCG_NUM_INT_SFX; i++)
    if (u->sfx[i]) kcg_buf_addf(src, "#define KILN_USE_%s 1\n", kcg_int_sfx[i]);
}

static kiln_status kcg_assemble(kcg_ctx *c, kcg_body *b, kcg_kernel *out) {
  const char *prelude = kcg_embedded_source("prelude.h");
  const char *reduce = kcg_embedded_source("reduce.h"), *host = kcg_embedded_source("host.h");
  const char *special = kcg_embedded_source("special.h");
  KCORE_ASSERT(prelude && reduce && host && special);
  char *name = kcg_kernel_name(c, &b->text);
  kcg_buf src = {0};
  bool cuda = c->t.target == KCG_TARGET_CUDA;
  kcg_buf_addf(&src, "/* %s: a %s group of %d equations, for %s%s.\n", name ? name : "",
               kfuse_kind_name(c->g->kind), c->g->n_eqns, cuda ? "CUDA sm_" : "the host C compiler",
               cuda ? kcg_strf(c, "%d", c->t.sm) : "");
  kcg_buf_add(&src, " * Generated by kiln's code generator; the ABI is in src/codegen/codegen.h. */\n");
  kcg_uses uses = {.special = cuda};
  if (!cuda) {
    kcg_scan_uses(b->text.s, &uses);
    kcg_scan_uses(c->helpers.s, &uses);
    if (c->uses_reduce_h) kcg_scan_uses(reduce, &uses);
    kcg_buf_add(&src, KCG_HOST_KERNEL_MARK);
    kcg_add_trim(&src, &uses);
  }
  kcg_buf_add(&src, prelude);
  if (uses.special) kcg_buf_add(&src, special);
  if (!cuda) kcg_buf_add(&src, host);
  if (c->uses_reduce_h) kcg_buf_add(&src, reduce);
  kcg_buf_addf(&src, "\ntypedef struct kiln_kernel_args {\n  void *ptr[%d];\n} kiln_kernel_args;\n",
               KCG_MAX_ARGS);
  if (c->helpers.s) kcg_buf_addf(&src, "\n%s", c->helpers.s);
  if (cuda)
    kcg_buf_addf(&src,
                 "\nextern \"C\" __global__ void __launch_bounds__(%d%s)\n%s(kiln_kernel_args args, "
                 "long long begin, long long end) ",
                 b->block_threads, b->min_blocks > 0 ? kcg_strf(c, ", %d", b->min_blocks) : "",
                 name ? name : "");
  else
    kcg_buf_addf(&src, "\nvoid %s(kiln_kernel_args args, int64_t begin, int64_t end) ",
                 name ? name : "");
  kcg_buf_add(&src, b->text.s ? b->text.s : "{}\n");
  if (!name || src.oom || b->text.oom || c->helpers.oom) {
    free(name);
    kcg_buf_free(&src);
    return kcg_fail(c, KILN_ERR_OUT_OF_MEMORY, "kcg_emit: out of host memory");
  }
  out->name = name;
  out->source = src.s;
  out->kind = c->g->kind;
  out->n_args = c->g->n_in + c->g->n_out;
  out->n_items = b->n_items;
  out->row_length = b->row_length;
  out->block_threads = b->block_threads;
  out->items_per_block = b->items_per_block;
  out->split = b->split > 1 ? b->split : 1;
  out->scratch_bytes = b->scratch_bytes;
  return KILN_OK;
}

kiln_status kcg_emit(const kir_program *p, const kfuse_group *g, const kcg_target_info *t,
                     kcg_kernel *out) {
  if (!out) return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit: NULL output");
  memset(out, 0, sizeof *out);
  if (!p || !g || !t)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit: NULL %s",
                      !p ? "program" : !g ? "group" : "target");
  if (t->target != KCG_TARGET_C && t->target != KCG_TARGET_CUDA)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit: unknown target %d", (int)t->target);
  if (t->target == KCG_TARGET_CUDA && (t->sm < 50 || t->sm > 199))
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit: compute capability sm_%d is not supported "
                      "(sm_50 and up)", t->sm);
  if (g->kind != KFUSE_LOOP && g->kind != KFUSE_REDUCE && g->kind != KFUSE_ROW)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED,
                      "kcg_emit: %s groups are not generated code (library calls or the "
                      "reference executor run them)",
                      kfuse_kind_name(g->kind));
  kcg_ctx c;
  kcg_body body;
  memset(&body, 0, sizeof body);
  kiln_status st = kcg_ctx_init(&c, p, g, t);
  if (st == KILN_OK) st = kcg_check_group(&c);
  if (st == KILN_OK) st = kcg_check_kind(&c);
  if (st == KILN_OK) st = kcg_find_sets(&c);
  if (st == KILN_OK && g->kind == KFUSE_ROW) st = kcg_find_cacheable(&c);
  if (st == KILN_OK)
    st = t->target == KCG_TARGET_C ? kcg_c_kernel(&c, &body) : kcg_cuda_kernel(&c, &body);
  if (st == KILN_OK) st = c.st;
  if (st == KILN_OK) st = kcg_assemble(&c, &body, out);
  kcg_buf_free(&body.text);
  kcg_ctx_free(&c);
  if (st != KILN_OK) kcg_kernel_free(out);
  return st;
}

void kcg_kernel_free(kcg_kernel *k) {
  if (!k) return;
  free(k->name);
  free(k->source);
  memset(k, 0, sizeof *k);
}
