/* jnp.matmul with numpy's batching rules, and jnp.einsum for two operands,
 * both lowered to one dot_general (plus transposes and reductions);
 * jnp.linalg.norm's vector and matrix norms from reductions. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace/trace.h"

static kiln_val *ktr_np_shape_fail(kiln_trace *t, const char *op, kiln_val *a, kiln_val *b,
                                   const char *why) {
  char ta[KIR_AVAL_STR_CAP], tb[KIR_AVAL_STR_CAP];
  return ktr_failf(t, KILN_ERR_SHAPE, "%s: %s for %s and %s", op, why,
                   kir_aval_str(ktr_aval(a), ta, sizeof ta), kir_aval_str(ktr_aval(b), tb, sizeof tb));
}

/* The last two axes of x swapped. */
static kiln_val *ktr_np_swap_last(kiln_trace *t, kiln_val *x) {
  int r = kiln_val_rank(x), perm[KIR_MAX_RANK];
  for (int d = 0; d < r; d++) perm[d] = d;
  perm[r - 2] = r - 1, perm[r - 1] = r - 2;
  return kiln_transpose(t, x, perm);
}

kiln_val *kiln_matmul(kiln_trace *t, kiln_val *a, kiln_val *b) {
  static const char op[] = "kiln_matmul";
  kiln_val *v[2] = {a, b};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  const kir_aval *xa = ktr_aval(a), *xb = ktr_aval(b);
  int ra = xa->rank, rb = xb->rank;
  if (ra < 1 || rb < 1) return ktr_np_shape_fail(t, op, a, b, "scalars cannot be multiplied");
  int kb = rb == 1 ? 0 : rb - 2; /* b's contracted axis */
  if (xa->shape[ra - 1] != xb->shape[kb])
    return ktr_np_shape_fail(t, op, a, b, "contracted sizes differ (the dot_general contracts "
                             "a's last axis with b's second to last)");
  kiln_dot_dims d;
  memset(&d, 0, sizeof d);
  d.n_contract = 1;
  if (rb <= 2) { /* a's leading axes stay free: no batch needed */
    d.lhs_contract[0] = ra - 1, d.rhs_contract[0] = kb;
    return kiln_dot_general(t, a, b, &d, KILN_INVALID_DTYPE);
  }
  if (ra <= 2) { /* b @ a as (batch..., m, [n]), then [n] before m */
    d.lhs_contract[0] = rb - 2, d.rhs_contract[0] = ra - 1;
    kiln_val *r = kiln_dot_general(t, b, a, &d, KILN_INVALID_DTYPE);
    return ra == 2 && r ? ktr_np_swap_last(t, r) : r;
  }
  /* Both batched: broadcast the batch axes (right-aligned) to one shape. */
  int nb = (ra > rb ? ra : rb) - 2;
  int64_t batch[KIR_MAX_RANK], sa[KIR_MAX_RANK], sb[KIR_MAX_RANK];
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
    int64_t da = ia >= 0 ? xa->shape[ia] : 1, db = ib >= 0 ? xb->shape[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return ktr_np_shape_fail(t, op, a, b, "batch axes do not broadcast");
    batch[i] = da == 1 ? db : da;
  }
  memcpy(sa, batch, (size_t)nb * sizeof *sa);
  memcpy(sb, batch, (size_t)nb * sizeof *sb);
  memcpy(sa + nb, xa->shape + ra - 2, 2 * sizeof *sa);
  memcpy(sb + nb, xb->shape + rb - 2, 2 * sizeof *sb);
  d.lhs_contract[0] = nb + 1, d.rhs_contract[0] = nb;
  d.n_batch = nb;
  for (int i = 0; i < nb; i++) d.lhs_batch[i] = d.rhs_batch[i] = i;
  return kiln_dot_general(t, kiln_broadcast_to(t, a, nb + 2, sa), kiln_broadcast_to(t, b, nb + 2, sb),
                          &d, KILN_INVALID_DTYPE);
}

/* ---- einsum ---- */

typedef struct ktr_np_spec {
  char in[2][KIR_MAX_RANK + 1], out[KIR_MAX_RANK + 1];
} ktr_np_spec;

/* Copies the letters of [s, end) into dst; false unless they are letters,
 * unique, and at most KIR_MAX_RANK. */
static bool ktr_np_labels(const char *s, const char *end, char *dst) {
  size_t n = (size_t)(end - s);
  if (n > KIR_MAX_RANK) return false;
  for (size_t i = 0; i < n; i++) {
    if (!isalpha((unsigned char)s[i]) || memchr(s, s[i], i)) return false;
    dst[i] = s[i];
  }
  dst[n] = '\0';
  return true;
}

/* "ab,bc->ac" (or implicit "ab,bc": the labels used once, sorted). */
static bool ktr_np_parse(const char *spec, ktr_np_spec *p) {
  char buf[128];
  size_t len = 0;
  for (const char *c = spec; *c && len + 1 < sizeof buf; c++)
    if (!isspace((unsigned char)*c)) buf[len++] = *c;
  buf[len] = '\0';
  char *comma = strchr(buf, ','), *arrow = strstr(buf, "->");
  if (!comma || (arrow && arrow < comma) || strchr(comma + 1, ',')) return false;
  char *end1 = arrow ? arrow : buf + len;
  if (!ktr_np_labels(buf, comma, p->in[0]) || !ktr_np_labels(comma + 1, end1, p->in[1]))
    return false;
  if (arrow) return ktr_np_labels(arrow + 2, buf + len, p->out);
  size_t n = 0;
  for (int c = 'A'; c <= 'z'; c++) {
    int uses = (strchr(p->in[0], c) && c) + (strchr(p->in[1], c) && c);
    if (isalpha(c) && uses == 1) {
      if (n == KIR_MAX_RANK) return false;
      p->out[n++] = (char)c;
    }
  }
  p->out[n] = '\0';
  return true;
}

kiln_val *kiln_einsum(kiln_trace *t, const char *spec, kiln_val *a, kiln_val *b) {
  static const char op[] = "kiln_einsum";
  kiln_val *v[2] = {a, b};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  ktr_np_spec p;
  if (!spec || !ktr_np_parse(spec, &p))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: unsupported spec \"%s\" (two operands of unique "
                     "letters, as \"ij,jk->ik\"; no \"...\" or repeated labels)", op,
                     spec ? spec : "(null)");
  for (int i = 0; i < 2; i++)
    if ((int)strlen(p.in[i]) != ktr_aval(v[i])->rank) {
      char ty[KIR_AVAL_STR_CAP];
      return ktr_failf(t, KILN_ERR_SHAPE, "%s: spec \"%s\" gives operand %d %zu labels but it is %s",
                       op, spec, i, strlen(p.in[i]), kir_aval_str(ktr_aval(v[i]), ty, sizeof ty));
    }
  for (const char *c = p.out; *c; c++)
    if (!strchr(p.in[0], *c) && !strchr(p.in[1], *c))
      return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: output label '%c' of \"%s\" is in no operand",
                       op, *c, spec);
  /* Labels of one operand only and not in the output are summed out first. */
  for (int i = 0; i < 2; i++) {
    int axes[KIR_MAX_RANK], n = 0;
    char kept[KIR_MAX_RANK + 1];
    size_t nk = 0;
    for (int d = 0; p.in[i][d]; d++) {
      char c = p.in[i][d];
      if (!strchr(p.in[1 - i], c) && !strchr(p.out, c)) axes[n++] = d;
      else kept[nk++] = c;
    }
    kept[nk] = '\0';
    if (n && !(v[i] = kiln_sum(t, v[i], n, axes, 0))) return NULL;
    memcpy(p.in[i], kept, nk + 1);
  }
  /* Shared labels: batch if kept in the output, else contracted. */
  kiln_dot_dims d;
  memset(&d, 0, sizeof d);
  char order[KIR_MAX_RANK * 2 + 1];
  size_t no = 0;
  for (int k = 0; p.in[0][k]; k++) {
    char c = p.in[0][k];
    const char *in_b = strchr(p.in[1], c);
    if (!in_b) continue;
    int ib = (int)(in_b - p.in[1]);
    if (ktr_aval(v[0])->shape[k] != ktr_aval(v[1])->shape[ib]) {
      char m[80];
      snprintf(m, sizeof m, "label '%c' of \"%s\" has two sizes", c, spec);
      return ktr_np_shape_fail(t, op, v[0], v[1], m);
    }
    if (strchr(p.out, c)) {
      d.lhs_batch[d.n_batch] = k, d.rhs_batch[d.n_batch++] = ib;
      order[no++] = c;
    } else {
      d.lhs_contract[d.n_contract] = k, d.rhs_contract[d.n_contract++] = ib;
    }
  }
  /* dot_general's result: batch, then a's free labels, then b's. */
  for (int i = 0; i < 2; i++)
    for (const char *c = p.in[i]; *c; c++)
      if (!strchr(p.in[1 - i], *c)) order[no++] = *c;
  order[no] = '\0';
  kiln_val *r = kiln_dot_general(t, v[0], v[1], &d, KILN_INVALID_DTYPE);
  if (!r || strcmp(order, p.out) == 0) return r;
  int perm[KIR_MAX_RANK];
  for (size_t k = 0; k < no; k++) perm[k] = (int)(strchr(order, p.out[k]) - order);
  return kiln_transpose(t, r, perm);
}

/* ---- jnp.linalg.norm ---- */

/* ord as jnp.linalg.norm takes it: NULL (None), "fro"/"f", "nuc", or a
 * number ("2", "1", "-1", "0", "inf", "-inf", "3.5"). */
typedef struct ktr_np_ord {
  bool none, fro, nuc;
  double p;
} ktr_np_ord;

static bool ktr_np_parse_ord(const char *s, ktr_np_ord *o) {
  memset(o, 0, sizeof *o);
  if (!s || strcmp(s, "None") == 0) return o->none = true;
  if (strcmp(s, "fro") == 0 || strcmp(s, "f") == 0) return o->fro = true;
  if (strcmp(s, "nuc") == 0) return o->nuc = true;
  char *end;
  o->p = strtod(s, &end);
  return end != s && *end == '\0' && !isnan(o->p);
}

/* sqrt(sum(x * x)) over the marked axes: the 2-norm and Frobenius norm. */
static kiln_val *ktr_np_norm2(kiln_trace *t, const char *op, kiln_val *x, const bool red[KIR_MAX_RANK],
                              bool keepdims) {
  return kiln_sqrt(t, ktr_np_sum(t, op, kiln_mul(t, x, x), red, keepdims));
}

static kiln_val *ktr_np_vector_norm(kiln_trace *t, const char *op, kiln_val *x, const ktr_np_ord *o,
                                    int axis, bool keepdims) {
  bool red[KIR_MAX_RANK] = {false};
  red[axis] = true;
  double p = o->none ? 2 : o->p;
  if (o->fro || o->nuc)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: invalid order '%s' for a vector norm", op,
                     o->fro ? "fro" : "nuc");
  if (p == 2) return ktr_np_norm2(t, op, x, red, keepdims);
  kiln_val *a = kiln_abs(t, x);
  /* amax(..., initial=0): max with 0 (0 for an empty axis). */
  if (p == INFINITY)
    return kiln_max(t, ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MAX, a, red, keepdims), ktr_np_like(t, x, 0));
  if (p == -INFINITY) return ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MIN, a, red, keepdims);
  if (p == 0) return ktr_np_sum(t, op, kiln_convert(t, kiln_ne(t, x, ktr_np_like(t, x, 0)),
                                                   kiln_val_dtype(x)), red, keepdims);
  if (p == 1) return ktr_np_sum(t, op, a, red, keepdims);
  kiln_val *s = ktr_np_sum(t, op, kiln_pow(t, a, ktr_np_like(t, x, p)), red, keepdims);
  return kiln_pow(t, s, ktr_np_like(t, x, 1.0 / p));
}

/* The 1 / -1 / inf / -inf matrix norms: sum |x| over `inner`, then the
 * max (min) over `outer` (axes counted before the sum removed `inner`). */
static kiln_val *ktr_np_matrix_norm(kiln_trace *t, const char *op, kiln_val *x, int inner,
                                    int outer, bool take_max, bool keepdims) {
  bool red[KIR_MAX_RANK] = {false}, red2[KIR_MAX_RANK] = {false};
  red[inner] = true;
  kiln_val *s = ktr_np_sum(t, op, kiln_abs(t, x), red, keepdims);
  red2[!keepdims && outer > inner ? outer - 1 : outer] = true;
  if (!take_max) return ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MIN, s, red2, keepdims);
  return kiln_max(t, ktr_np_reduce(t, op, KIR_PRIM_REDUCE_MAX, s, red2, keepdims),
                  ktr_np_like(t, x, 0));
}

kiln_val *kiln_norm(kiln_trace *t, kiln_val *x, const char *ord, int n, const int *axes,
                    int keepdims) {
  static const char op[] = "kiln_norm";
  if (!ktr_ok(t, op, 1, &x)) return NULL;
  /* promote_dtypes_inexact: floats stay (f16 too), 64-bit integers become
   * f64, other integers and bool f32. */
  kiln_dtype d = kiln_val_dtype(x);
  kiln_dtype back = kiln_dtype_is_float(d) ? d : kiln_dtype_size(d) == 8 ? KILN_F64 : KILN_F32;
  ktr_np_ord o;
  if (!ktr_np_parse_ord(ord, &o))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: invalid order '%s' (None, 'fro', 'nuc' or a number)",
                     op, ord);
  if (!(x = ktr_convert(t, op, x, back, false))) return NULL;
  int r = kiln_val_rank(x), ax[2];
  bool red[KIR_MAX_RANK];
  if (n == KILN_ALL_AXES && o.none) { /* every axis, any rank: sqrt(sum(x * x)) */
    if (!ktr_np_axes(t, op, x, n, axes, red)) return NULL;
    return ktr_np_norm2(t, op, x, red, keepdims != 0);
  }
  if (n == KILN_ALL_AXES) n = r, axes = NULL;
  if (n != 1 && n != 2)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: improper number of axes for a norm (%d): one axis "
                     "computes a vector norm, two a matrix norm", op, n);
  for (int i = 0; i < n; i++)
    if (ktr_axis(op, axes ? axes[i] : i, r, &ax[i])) return ktr_fail(t, KILN_ERR_OUT_OF_RANGE);
  if (n == 1) return ktr_np_vector_norm(t, op, x, &o, ax[0], keepdims != 0);
  if (ax[0] == ax[1])
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: the two axes of a matrix norm are both %d", op, ax[0]);
  if (o.none || o.fro) {
    memset(red, 0, sizeof red);
    red[ax[0]] = red[ax[1]] = true;
    return ktr_np_norm2(t, op, x, red, keepdims != 0);
  }
  if (o.p == 1 || o.p == -1) return ktr_np_matrix_norm(t, op, x, ax[0], ax[1], o.p > 0, keepdims != 0);
  if (o.p == INFINITY || o.p == -INFINITY)
    return ktr_np_matrix_norm(t, op, x, ax[1], ax[0], o.p > 0, keepdims != 0);
  if (o.nuc || o.p == 2 || o.p == -2)
    return ktr_failf(t, KILN_ERR_UNIMPLEMENTED, "%s: the %s matrix norm needs singular values, "
                     "which kiln does not compute", op, o.nuc ? "nuclear" : o.p > 0 ? "2" : "-2");
  return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: invalid order '%s' for a matrix norm", op, ord);
}
