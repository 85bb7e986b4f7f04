/* What every backend's executor of a plan shares: constants' host data, and
 * running a group's equations one by one on the reference evaluators (groups
 * the emitter declines, OPAQUE groups, and on the CPU the DOT groups). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fuse/fuse.h"

/* ---- constants ---- */

/* Host data of constant or literal v. */
static kiln_status kfuse_const_one(kfuse_consts *k, const kir_program *p, kir_vid v) {
  const kir_var *var = &p->vars[v];
  if (k->data[v] || (var->kind != KIR_VAR_CONSTVAR && var->kind != KIR_VAR_LITERAL)) return KILN_OK;
  size_t nb = (size_t)kir_aval_size(&var->aval) * kiln_dtype_size(var->aval.dtype);
  if (var->kind == KIR_VAR_CONSTVAR && var->u.constant.source == KIR_CONST_HOST) {
    k->data[v] = (void *)var->u.constant.host;
    return KILN_OK;
  }
  if (!(k->data[v] = malloc(nb ? nb : 1)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  k->owned[v] = true;
  if (var->kind == KIR_VAR_LITERAL) {
    kir_scalar_store(var->aval.dtype, var->u.literal, k->data[v]);
    return KILN_OK;
  }
  if (var->u.constant.source == KIR_CONST_ARRAY)
    return kiln_array_to_host(var->u.constant.array, k->data[v], nb);
  char t[KIR_AVAL_STR_CAP];
  return kcore_fail(KILN_ERR_ARGUMENT, "fuse: constant %d (%s) has no value bound", v,
                    kir_aval_str(&var->aval, t, sizeof t));
}

kiln_status kfuse_consts_init(kfuse_consts *k, const kfuse_plan *plan, const kir_program *p) {
  k->n = p->n_vars;
  k->data = calloc((size_t)(k->n ? k->n : 1), sizeof *k->data);
  k->owned = calloc((size_t)(k->n ? k->n : 1), sizeof *k->owned);
  if (!k->data || !k->owned) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "fuse: out of host memory");
  kiln_status st = KILN_OK;
  for (int g = 0; g < plan->n_groups && !st; g++)
    for (int i = 0; i < plan->groups[g].n_in && !st; i++)
      st = kfuse_const_one(k, p, plan->groups[g].in[i]);
  for (int o = 0; o < p->n_outvars && !st; o++) st = kfuse_const_one(k, p, p->outvars[o]);
  return st;
}

void kfuse_consts_free(kfuse_consts *k) {
  for (int v = 0; k->owned && v < k->n; v++)
    if (k->owned[v]) free(k->data[v]);
  free(k->data);
  free(k->owned);
  memset(k, 0, sizeof *k);
}

/* ---- a group on the reference evaluators ---- */

static kir_buffer kfuse_buffer_of(const kir_program *p, kir_vid v, void *data) {
  const kir_aval *a = kir_var_aval(p, v);
  return (kir_buffer){*a, data, (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype)};
}

/* A dot_general BLAS runs on its operands as stored (kir_dot_gemm_layout:
 * batch dims leading, either operand maybe transposed) in f32 or f64, the
 * result in the operands' dtype. */
static bool kfuse_plain_gemm(const kir_program *p, const kir_eqn *e, kir_gemm_layout *g) {
  const kir_aval *a = kir_var_aval(p, e->in[0]), *b = kir_var_aval(p, e->in[1]);
  kiln_dtype pref = e->params.dot.preferred_element_type;
  if ((a->dtype != KILN_F32 && a->dtype != KILN_F64) || b->dtype != a->dtype ||
      (pref != KILN_INVALID_DTYPE && pref != a->dtype) ||
      !kir_dot_gemm_layout(a, b, &e->params.dot.dimension_numbers, g))
    return false;
  return g->m > 0 && g->n > 0 && g->k > 0 && g->m <= INT32_MAX && g->n <= INT32_MAX &&
         g->k <= INT32_MAX;
}

/* A GEMM straight through CBLAS, the transposed operands through its
 * transpose flags: the reference evaluator also emulates XLA:CPU's flushing
 * of subnormal operands, which costs passes over the data and changes
 * nothing beyond tolerance. */
static void kfuse_run_gemm(const kir_gemm_layout *g, kiln_dtype dt, const void *a, const void *b,
                           void *c) {
  int m = (int)g->m, n = (int)g->n, k = (int)g->k;
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  int lda = g->trans_a ? m : k, ldb = g->trans_b ? k : n;
  for (int64_t i = 0; i < g->batch; i++) {
    if (dt == KILN_F32)
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, (const float *)a + i * g->m * g->k, lda,
                  (const float *)b + i * g->k * g->n, ldb, 0.0f, (float *)c + i * g->m * g->n, n);
    else
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, (const double *)a + i * g->m * g->k, lda,
                  (const double *)b + i * g->k * g->n, ldb, 0.0, (double *)c + i * g->m * g->n, n);
  }
}

typedef struct kfuse_group_run {
  const kir_program *p;
  const kfuse_plan *plan;
  const kir_eval_env *env;
  kfuse_addr_fn addr;
  void *user;
  void **temp; /* values internal to the group (place NONE) */
} kfuse_group_run;

static char kfuse_empty[1]; /* the address of zero-size data */

static void *kfuse_where(const kfuse_group_run *r, kir_vid v) {
  void *a = r->temp && r->temp[v] ? r->temp[v] : r->addr(r->user, v);
  return a ? a : kfuse_empty;
}

static kiln_status kfuse_run_eqn(kfuse_group_run *r, int index) {
  const kir_program *p = r->p;
  const kir_eqn *e = &p->eqns[index];
  kir_eval_fn fn = r->env->table->fn[e->prim];
  if (!fn)
    return kcore_fail(KILN_ERR_UNIMPLEMENTED, "equation %d (%s): no reference evaluator", index,
                      kir_prim_name(e->prim));
  kir_buffer small[16];
  int n = e->n_in + e->n_out;
  kir_buffer *b = n <= 16 ? small : malloc((size_t)n * sizeof *b);
  if (!b) return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kiln_status st = KILN_OK;
  for (int i = 0; i < e->n_in; i++) b[i] = kfuse_buffer_of(p, e->in[i], kfuse_where(r, e->in[i]));
  for (int i = 0; i < e->n_out && !st; i++) {
    kir_vid v = e->out[i];
    kir_buffer *o = &b[e->n_in + i];
    *o = kfuse_buffer_of(p, v, NULL);
    if (r->plan->places[v].home != KFUSE_HOME_NONE)
      o->data = kfuse_where(r, v);
    else if (!(o->data = r->temp[v] = malloc(o->nbytes + 1)))
      st = kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  }
  kir_gemm_layout gemm;
  if (!st && e->prim == KIR_PRIM_DOT_GENERAL && kfuse_plain_gemm(p, e, &gemm))
    kfuse_run_gemm(&gemm, b[0].aval.dtype, b[0].data, b[1].data, b[2].data);
  else if (!st && (st = fn(e, b, b + e->n_in, (void *)r->env)))
    kcore_fail_wrap(st, "equation %d (%s)", index, kir_prim_name(e->prim));
  if (b != small) free(b);
  return st;
}

/* A DOT group with a bias (and relu) epilogue over a plain GEMM: the GEMM
 * writes the group's output and one pass over it adds the bias and takes
 * max(., +0) as the reference's IEEE maximum does (NaN stays NaN, -0
 * becomes +0), in place: no temporaries, no reference evaluation of the
 * epilogue. False when the group is not of that form. */
static bool kfuse_gemm_epilogue(const kfuse_group_run *r, const kfuse_group *g) {
  const kir_program *p = r->p;
  const kir_eqn *d = &p->eqns[g->eqns[0]];
  kir_gemm_layout gemm;
  if (g->kind != KFUSE_DOT || g->epilogue == KFUSE_EPILOGUE_NONE || g->n_out != 1 ||
      d->prim != KIR_PRIM_DOT_GENERAL || !kfuse_plain_gemm(p, d, &gemm) ||
      kir_var_aval(p, g->bias)->dtype != kir_var_aval(p, d->in[0])->dtype ||
      kir_aval_size(kir_var_aval(p, g->bias)) != gemm.n) /* one value per column */
    return false;
  kiln_dtype dt = kir_var_aval(p, d->in[0])->dtype;
  bool relu = g->epilogue == KFUSE_EPILOGUE_BIAS_RELU;
  if (relu) { /* max(s, -0) keeps a +0 s: only the +0 literal's form here */
    const kir_eqn *mx = &p->eqns[g->eqns[g->n_eqns - 1]];
    kir_vid z = p->vars[mx->in[0]].kind == KIR_VAR_LITERAL ? mx->in[0] : mx->in[1];
    if (mx->prim != KIR_PRIM_MAX || p->vars[z].kind != KIR_VAR_LITERAL ||
        signbit(p->vars[z].u.literal.f))
      return false;
  }
  void *c = kfuse_where(r, g->out[0]);
  const void *bias = kfuse_where(r, g->bias);
  kfuse_run_gemm(&gemm, dt, kfuse_where(r, d->in[0]), kfuse_where(r, d->in[1]), c);
  int64_t rows = gemm.batch * gemm.m, n = gemm.n;
  for (int64_t i = 0; i < rows; i++) {
    if (dt == KILN_F32) {
      float *y = (float *)c + i * n;
      const float *bv = bias;
      for (int64_t j = 0; j < n; j++) {
        float s = y[j] + bv[j];
        y[j] = !relu || s > 0.0f || isnan(s) ? s : 0.0f;
      }
    } else {
      double *y = (double *)c + i * n;
      const double *bv = bias;
      for (int64_t j = 0; j < n; j++) {
        double s = y[j] + bv[j];
        y[j] = !relu || s > 0.0 || isnan(s) ? s : 0.0;
      }
    }
  }
  return true;
}

kiln_status kfuse_eval_group(const kir_program *p, const kfuse_plan *plan, const kfuse_group *g,
                             const kir_eval_env *env, kfuse_addr_fn addr, void *user) {
  kfuse_group_run r = {p, plan, env, addr, user, NULL};
  if (kfuse_gemm_epilogue(&r, g)) return KILN_OK;
  if (!(r.temp = calloc((size_t)(p->n_vars ? p->n_vars : 1), sizeof *r.temp)))
    return kcore_fail(KILN_ERR_OUT_OF_MEMORY, "execute: out of host memory");
  kiln_status st = KILN_OK;
  for (int k = 0; k < g->n_eqns && !st; k++) st = kfuse_run_eqn(&r, g->eqns[k]);
  for (int v = 0; v < p->n_vars; v++) free(r.temp[v]);
  free(r.temp);
  return st;
}
