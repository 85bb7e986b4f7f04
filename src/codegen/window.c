/* Kernels of the window ops for both targets: one work item per result
 * element, a direct loop nest over its window with the geometry baked in as
 * constants. select_and_scatter_add is computed gather-wise (each operand
 * element sums the source of the windows that select it, in row-major
 * window order, as XLA's scatter adds them), so it needs no atomics and is
 * deterministic; on the C target, windows that cannot overlap (max_pool
 * 2x2/2) are instead walked once each, writing their selection (the same
 * bits). Float dtypes only; f16/bf16 compute in f32, rounded after every
 * sum step as the reference executor. Both executables run these for an
 * OPAQUE group of one window op (codegen/lone.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/codegen.h"


static const char *kcg_wstorage(kiln_dtype d) {
  return d == KILN_F64 ? "double" : d == KILN_F32 ? "float" : "kiln_half";
}
static const char *kcg_wload(kiln_dtype d) {
  return d == KILN_F16 ? "kiln_h2f" : d == KILN_BF16 ? "kiln_bh2f" : "";
}
static const char *kcg_wstore(kiln_dtype d) {
  return d == KILN_F16 ? "kiln_f2h" : d == KILN_BF16 ? "kiln_f2bh" : "";
}
static const char *kcg_wround(kiln_dtype d) {
  return d == KILN_F16 ? "kiln_rnd_f16" : d == KILN_BF16 ? "kiln_rnd_bf16" : "";
}


/* The window's operand offset for result index o[] and flat window index w
 * into `off`, or `continue` past a padding or base-dilation hole. */
static void kcg_window_offset(kcg_buf *b, const char *indent) {
  kcg_buf_addf(b,
               "%slong long rem = w, off = 0; int ok = 1;\n"
               "%sfor (int d = R - 1; d >= 0 && ok; d--) {\n"
               "%s  long long pos = o[d] * STR[d] + (rem %% WIN[d]) * WDIL[d] - LO[d];\n"
               "%s  rem /= WIN[d];\n"
               "%s  ok = pos >= 0 && pos %% BASE[d] == 0 && pos / BASE[d] < IN[d];\n"
               "%s  off += pos / BASE[d] * XS[d];\n"
               "%s}\n"
               "%sif (!ok) continue;\n",
               indent, indent, indent, indent, indent, indent, indent, indent);
}

static void kcg_unflatten(kcg_buf *b, const char *var, const char *shape, const char *flat) {
  kcg_buf_addf(b, "    long long %s[R], r_ = %s;\n", var, flat);
  kcg_buf_addf(b, "    for (int d = R - 1; d >= 0; d--) { %s[d] = r_ %% %s[d]; r_ /= %s[d]; }\n",
               var, shape, shape);
}

/* The start value of a window's accumulator; +-inf from bits: NVRTC has no
 * INFINITY. select_and_gather_add starts at its select order's identity. */
static const char *kcg_window_init(const kir_eqn *e, kiln_dtype dt) {
  bool f64 = dt == KILN_F64, lo = e->prim == KIR_PRIM_REDUCE_WINDOW_MIN ||
                                  (e->prim == KIR_PRIM_SELECT_AND_GATHER_ADD &&
                                   e->params.window.select_prim != KIR_PRIM_GE);
  if (e->prim == KIR_PRIM_REDUCE_WINDOW_SUM) return "0";
  if (f64) return lo ? "kiln_bits_f64(0x7ff0000000000000ull)" : "kiln_bits_f64(0xfff0000000000000ull)";
  return lo ? "kiln_bits_f32(0x7f800000u)" : "kiln_bits_f32(0xff800000u)";
}

/* acc (an lvalue) folds in the window element v: reduce_window's ops. */
static void kcg_window_fold(kcg_buf *b, kir_prim prim, kiln_dtype dt, const char *acc,
                            const char *indent) {
  if (prim == KIR_PRIM_REDUCE_WINDOW_SUM)
    kcg_buf_addf(b, "%s%s = %s(%s + v);\n", indent, acc, kcg_wround(dt), acc);
  else
    kcg_buf_addf(b, "%s%s = v != v || v %c %s ? v : %s;\n", indent, acc,
                 prim == KIR_PRIM_REDUCE_WINDOW_MAX ? '>' : '<', acc, acc);
}

/* The leading dims before the trailing ones a window leaves alone (window 1,
 * stride 1, no padding or dilation: NHWC's features), whose elements, `run`
 * of them, lie contiguous in operand and result alike. */
static int kcg_window_outer_rank(const kir_window_geom *g, int64_t *run) {
  int k = g->rank;
  for (*run = 1; k > 0 && g->win[k - 1] == 1 && g->stride[k - 1] == 1 && g->lo[k - 1] == 0 &&
                 g->base[k - 1] == 1 && g->in[k - 1] == g->out[k - 1];
       k--)
    *run *= g->in[k - 1];
  return k;
}

#define KCG_WINDOW_MIN_RUN 4
#define KCG_WINDOW_TILE 256

/* Operand element at[]'s candidate windows: per dim the first (lo_) and
 * the count (n_) of the result indices whose windows may read it; nw in all. */
static void kcg_window_candidates(kcg_buf *b) {
  kcg_buf_add(b, "    long long lo_[R], n_[R], o[R], nw = 1;\n"
                 "    for (int d = 0; d < R; d++) {\n"
                 "      long long hi = at[d] + LO[d] >= 0 ? (at[d] + LO[d]) / STR[d] : -1;\n"
                 "      long long first = at[d] + LO[d] - WIN[d] + 1;\n"
                 "      first = first <= 0 ? 0 : (first + STR[d] - 1) / STR[d];\n"
                 "      if (hi > OUT[d] - 1) hi = OUT[d] - 1;\n"
                 "      lo_[d] = first; n_[d] = hi >= first ? hi - first + 1 : 0; nw *= n_[d];\n"
                 "    }\n");
}

/* The rows form's selection over window o[]: for each of the run's n
 * features the offset (sel) of its first maximum (or minimum) in row-major
 * window order; any: some window element lies in the operand. zero: also
 * clears the window's elements of y. */
static void kcg_window_rows_select(const kir_eqn *e, kiln_dtype dt, bool zero, const char *in,
                                   kcg_buf *b) {
  const char *T = kcg_wstorage(dt), *F = dt == KILN_F64 ? "double" : "float";
  const char *ge = e->params.window.select_prim == KIR_PRIM_GE ? ">=" : "<=";
  char in2[16];
  snprintf(in2, sizeof in2, "%s  ", in);
  kcg_buf_addf(b, "%sfor (long long w = 0; w < NWIN; w++) {\n", in);
  kcg_window_offset(b, in2);
  kcg_buf_addf(b, "%s  const %s *xr = x + off + c0;\n"
                  "%s  for (long long c = 0; c < n; c++) {\n"
                  "%s    %s v = %s(xr[c]);\n"
                  "%s    if (!any || !(best[c] %s v)) { sel[c] = off; best[c] = v; }\n",
               in, T, in, in, F, kcg_wload(dt), in, ge);
  if (zero) kcg_buf_addf(b, "%s    y[off + c0 + c] = 0;\n", in);
  kcg_buf_addf(b, "%s  }\n%s  any = 1;\n%s}\n", in, in, in);
}

/* The C rows form's select_and_scatter_add: per operand pixel the windows
 * that may read it and their window walks are found once for its run of
 * features, each selecting (in row-major order, as the gather form) for
 * the whole run at once; the same sums in the same order as the gather
 * form, without its index arithmetic per element. */
static void kcg_window_rows_scatter(const kir_eqn *e, kiln_dtype dt, kcg_buf *b) {
  const char *T = kcg_wstorage(dt), *F = dt == KILN_F64 ? "double" : "float";
  kcg_window_candidates(b);
  kcg_buf_addf(b, "    long long sel[TILE];\n    %s acc[TILE], best[TILE];\n"
                  "    for (long long c = 0; c < n; c++) acc[c] = 0;\n", F);
  kcg_buf_add(b, "    for (long long v_ = 0; v_ < nw; v_++) {\n"
                 "      long long rc = v_, src = 0, any = 0;\n"
                 "      for (int d = R - 1; d >= 0; d--) { o[d] = lo_[d] + rc % n_[d]; rc /= n_[d]; }\n"
                 "      for (int d = 0; d < R; d++) src = src * OUT[d] + o[d];\n");
  kcg_window_rows_select(e, dt, false, "      ", b);
  kcg_buf_addf(b, "      const %s *sr = a0 + src * RUN + c0;\n"
                  "      for (long long c = 0; c < n && any; c++)\n"
                  "        if (sel[c] == i - c0) acc[c] = %s(acc[c] + %s(sr[c]));\n    }\n",
               T, kcg_wround(dt), kcg_wload(dt));
}

/* The rows form's select_and_scatter_add where windows cannot overlap
 * (stride >= window, no dilation: max_pool's usual 2x2/2): every operand
 * element is read by at most one window, whose first in-bounds pixel (its
 * anchor) zeroes the window, selects once and stores round(0 + src) at the
 * selection: the gather form's sum, with each window walked once instead of
 * once per pixel. A run's item (pixel, feature) alone writes the elements
 * of that feature of the windows it anchors; pixels in no window zero
 * themselves. */
static void kcg_window_rows_tiles(const kir_eqn *e, kiln_dtype dt, kcg_buf *b) {
  const char *T = kcg_wstorage(dt), *F = dt == KILN_F64 ? "double" : "float";
  kcg_buf_add(b, "    long long o[R], sel[TILE], src = 0, any = 0; int anchor = 1, inside = 1;\n"
                 "    for (int d = 0; d < R; d++) {\n"
                 "      long long p = at[d] + LO[d];\n"
                 "      o[d] = p >= 0 ? p / STR[d] : 0;\n"
                 "      inside = inside && p >= 0 && o[d] < OUT[d] && p - o[d] * STR[d] < WIN[d];\n"
                 "      long long start = o[d] * STR[d] - LO[d];\n"
                 "      anchor = anchor && at[d] == (start > 0 ? start : 0);\n"
                 "      src = src * OUT[d] + o[d];\n"
                 "    }\n"
                 "    if (!inside) { for (long long c = 0; c < n; c++) y[i + c] = 0; continue; }\n"
                 "    if (!anchor) continue;\n");
  kcg_buf_addf(b, "    %s best[TILE];\n", F);
  kcg_window_rows_select(e, dt, true, "    ", b);
  kcg_buf_addf(b, "    const %s *sr = a0 + src * RUN + c0;\n"
                  "    for (long long c = 0; c < n && any; c++)\n"
                  "      y[sel[c] + c0 + c] = %s(%s((%s)0 + %s(sr[c])));\n  }\n}\n",
               T, kcg_wstore(dt), kcg_wround(dt), F, kcg_wload(dt));
}

/* C target, reduce_window over operands with such a run (avg/max pooling,
 * its transpose): a result pixel's window is walked once, each of its
 * elements folding a run of up to TILE results at unit stride (the compiler
 * vectorises it), instead of the window walk per result element. Each
 * element still folds its window in row-major order: the same bits.
 * select_and_scatter_add: kcg_window_rows_scatter over operand pixels. */
static void kcg_window_rows_body(const kir_eqn *e, const kir_window_geom *g, int k, int64_t run,
                                 kiln_dtype dt, kcg_buf *b) {
  const char *T = kcg_wstorage(dt), *F = dt == KILN_F64 ? "double" : "float";
  bool scatter = e->prim == KIR_PRIM_SELECT_AND_SCATTER_ADD;
  int64_t xs[KIR_MAX_RANK], nwin = 1, nin = run;
  for (int d = k - 1; d >= 0; d--) {
    xs[d] = nin;
    nin *= g->in[d];
    nwin *= g->win[d];
  }
  kcg_buf_addf(b, "{\n  enum { R = %d, TILE = %d };\n", k, KCG_WINDOW_TILE);
  kcg_buf_addf(b, "  const long long NWIN = %lldLL, RUN = %lldLL;\n", (long long)nwin,
               (long long)run);
  kcg_lone_array(b, "IN", k, g->in);
  kcg_lone_array(b, "OUT", k, g->out);
  kcg_lone_array(b, "WIN", k, g->win);
  kcg_lone_array(b, "STR", k, g->stride);
  kcg_lone_array(b, "LO", k, g->lo);
  kcg_lone_array(b, "BASE", k, g->base);
  kcg_lone_array(b, "WDIL", k, g->wdil);
  kcg_lone_array(b, "XS", k, xs);
  /* operands: reduce_window x; select_and_scatter_add (src, x) */
  kcg_buf_addf(b, "  const %s *KILN_RESTRICT %s = (const %s *)args.ptr[0];\n", T,
               scatter ? "a0" : "x", T);
  if (scatter) kcg_buf_addf(b, "  const %s *KILN_RESTRICT x = (const %s *)args.ptr[1];\n", T, T);
  kcg_buf_addf(b, "  %s *KILN_RESTRICT y = (%s *)args.ptr[%d];\n", T, T, scatter ? 2 : 1);
  kcg_buf_add(b, "  for (long long i = begin, n; i < end; i += n) {\n"
                 "    long long c0 = i % RUN;\n"
                 "    n = RUN - c0 < end - i ? RUN - c0 : end - i;\n"
                 "    if (n > TILE) n = TILE;\n");
  bool tiles = scatter;
  for (int d = 0; d < k; d++)
    tiles = tiles && g->stride[d] >= g->win[d] && g->base[d] == 1 && g->wdil[d] == 1;
  if (scatter) kcg_unflatten(b, "at", "IN", "i / RUN");
  if (tiles) {
    kcg_window_rows_tiles(e, dt, b);
    return;
  }
  if (scatter) {
    kcg_window_rows_scatter(e, dt, b);
  } else {
    kcg_unflatten(b, "o", "OUT", "i / RUN");
    kcg_buf_addf(b, "    %s acc[TILE];\n    for (long long c = 0; c < n; c++) acc[c] = %s;\n", F,
                 kcg_window_init(e, dt));
    kcg_buf_add(b, "    for (long long w = 0; w < NWIN; w++) {\n");
    kcg_window_offset(b, "      ");
    kcg_buf_addf(b, "      const %s *xr = x + off + c0;\n", T);
    kcg_buf_addf(b, "      for (long long c = 0; c < n; c++) {\n        %s v = %s(xr[c]);\n", F,
                 kcg_wload(dt));
    kcg_window_fold(b, e->prim, dt, "acc[c]", "        ");
    kcg_buf_add(b, "      }\n    }\n");
  }
  kcg_buf_addf(b, "    for (long long c = 0; c < n; c++) y[i + c] = %s(acc[c]);\n  }\n}\n",
               kcg_wstore(dt));
}

static kiln_status kcg_window_body(const kir_eqn *e, const kir_window_geom *g, kiln_dtype dt,
                                   bool cuda, kcg_buf *b, int64_t *n_items) {
  const char *T = kcg_wstorage(dt), *F = dt == KILN_F64 ? "double" : "float";
  int64_t run = 1;
  int outer = kcg_window_outer_rank(g, &run);
  bool scatter = e->prim == KIR_PRIM_SELECT_AND_SCATTER_ADD;
  if (!cuda && outer > 0 && run >= KCG_WINDOW_MIN_RUN && (e->n_in == 1 || scatter)) {
    *n_items = 1;
    for (int d = 0; d < g->rank; d++) *n_items *= scatter ? g->in[d] : g->out[d];
    kcg_window_rows_body(e, g, outer, run, dt, b);
    return KILN_OK;
  }
  int64_t xs[KIR_MAX_RANK], nwin = 1, nout = 1, nin = 1;
  for (int d = g->rank - 1; d >= 0; d--) {
    xs[d] = nin;
    nin *= g->in[d];
    nwin *= g->win[d];
    nout *= g->out[d];
  }
  bool two = scatter || e->prim == KIR_PRIM_SELECT_AND_GATHER_ADD;
  const char *ge = e->params.window.select_prim == KIR_PRIM_GE ? ">=" : "<=";
  *n_items = scatter ? nin : nout;
  kcg_buf_add(b, "{\n");
  kcg_buf_addf(b, "  enum { R = %d };\n  const long long NWIN = %lldLL;\n", g->rank > 0 ? g->rank : 1,
               (long long)nwin);
  kcg_lone_array(b, "IN", g->rank, g->in);
  kcg_lone_array(b, "OUT", g->rank, g->out);
  kcg_lone_array(b, "WIN", g->rank, g->win);
  kcg_lone_array(b, "STR", g->rank, g->stride);
  kcg_lone_array(b, "LO", g->rank, g->lo);
  kcg_lone_array(b, "BASE", g->rank, g->base);
  kcg_lone_array(b, "WDIL", g->rank, g->wdil);
  kcg_lone_array(b, "XS", g->rank, xs);
  /* operands: reduce_window x; select_and_gather_add (t, x); scatter (src, x) */
  kcg_buf_addf(b, "  const %s *KILN_RESTRICT a0 = (const %s *)args.ptr[0];\n", T, T);
  if (two) kcg_buf_addf(b, "  const %s *KILN_RESTRICT x = (const %s *)args.ptr[1];\n", T, T);
  else kcg_buf_addf(b, "  const %s *x = a0;\n", T);
  kcg_buf_addf(b, "  %s *KILN_RESTRICT y = (%s *)args.ptr[%d];\n", T, T, two ? 2 : 1);
  kcg_lone_items(b, cuda);
  if (!scatter) {
    kcg_unflatten(b, "o", "OUT", "i");
    kcg_buf_addf(b, "    %s acc = %s, tan = 0;\n", F, kcg_window_init(e, dt));
    kcg_buf_add(b, "    for (long long w = 0; w < NWIN; w++) {\n");
    kcg_window_offset(b, "      ");
    kcg_buf_addf(b, "      %s v = %s(x[off]);\n", F, kcg_wload(dt));
    if (two)
      kcg_buf_addf(b, "      if (!(acc %s v)) { acc = v; tan = %s(a0[off]); }\n", ge, kcg_wload(dt));
    else
      kcg_window_fold(b, e->prim, dt, "acc", "      ");
    kcg_buf_add(b, "    }\n");
    kcg_buf_addf(b, "    y[i] = %s(%s);\n  }\n}\n", kcg_wstore(dt), two ? "tan" : "acc");
    return KILN_OK;
  }
  /* operand element i: the windows that may read it, row-major */
  kcg_unflatten(b, "at", "IN", "i");
  kcg_window_candidates(b);
  kcg_buf_addf(b, "    %s acc = 0;\n    long long self = i;\n", F);
  kcg_buf_add(b, "    for (long long c = 0; c < nw; c++) {\n"
                 "      long long rc = c, src = 0;\n"
                 "      for (int d = R - 1; d >= 0; d--) { o[d] = lo_[d] + rc % n_[d]; rc /= n_[d]; }\n"
                 "      for (int d = 0; d < R; d++) src = src * OUT[d] + o[d];\n");
  kcg_buf_addf(b, "      long long sel = -1; %s best = 0;\n", F);
  kcg_buf_add(b, "      for (long long w = 0; w < NWIN; w++) {\n");
  kcg_window_offset(b, "        ");
  kcg_buf_addf(b, "        %s v = %s(x[off]);\n", F, kcg_wload(dt));
  kcg_buf_addf(b, "        if (sel < 0 || !(best %s v)) { sel = off; best = v; }\n", ge);
  kcg_buf_add(b, "      }\n");
  kcg_buf_addf(b, "      if (sel == self) acc = %s(acc + %s(a0[src]));\n", kcg_wround(dt), kcg_wload(dt));
  kcg_buf_addf(b, "    }\n    y[i] = %s(acc);\n  }\n}\n", kcg_wstore(dt));
  return KILN_OK;
}

kiln_status kcg_emit_window(const kir_program *p, const kir_eqn *e, const kcg_target_info *t,
                            kcg_kernel *out) {
  memset(out, 0, sizeof *out);
  const char *op = kir_prim_name(e->prim);
  if (kir_prim_get(e->prim)->family != KIR_FAMILY_WINDOW)
    return kcore_fail(KILN_ERR_ARGUMENT, "kcg_emit_window: %s is not a window op", op);
  kiln_status lit = kcg_lone_no_literals(p, e);
  if (lit) return lit;
  const kir_aval *x = kir_var_aval(p, e->in[e->n_in - 1]);
  kiln_dtype dt = kir_var_aval(p, e->out[0])->dtype;
  if (!kiln_dtype_is_float(dt) || x->dtype != dt) {
    char ts[KIR_AVAL_STR_CAP];
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "kcg_emit_window: %s of %s: float operands only", op,
                      kir_aval_str(x, ts, sizeof ts));
  }
  kir_window_geom g;
  kiln_status st = kir_window_geom_make(e->prim, &e->params.window, x, &g);
  if (st != KILN_OK) return st;
  bool cuda = t->target == KCG_TARGET_CUDA;
  kcg_buf body = {0};
  int64_t n_items = 0;
  kcg_window_body(e, &g, dt, cuda, &body, &n_items);
  char name[96], prefix[64];
  snprintf(prefix, sizeof prefix, "kiln_window_%s", op);
  kcg_lone_name(t, prefix, &body, name, sizeof name);
  st = kcg_lone_finish(t, name, "a window kernel", NULL, &body, true, n_items, out);
  out->kind = KFUSE_LOOP;
  out->n_args = e->n_in + 1;
  return st;
}
