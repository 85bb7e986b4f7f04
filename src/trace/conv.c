/* kiln_conv_general_dilated and kiln_conv: JAX's string dimension specs
 * and padding modes turned into conv_general_dilated's params. */
#include <string.h>

#include "trace/trace.h"

/* One spec as JAX's conv_general_permutations reads it: (index of c0,
 * index of c1, spatial dims), the spatial ones of lhs/out ordered by where
 * their letter stands in the rhs spec. */
static bool ktr_conv_spec(kiln_trace *t, const char *op, const char *name, const char *spec,
                          const char *rhs, int rank, char c0, char c1, kir_dims *out) {
  out->n = rank;
  if (!spec) {
    for (int i = 0; i < rank; i++) out->v[i] = (int8_t)i;
    return true;
  }
  const char *p0 = strchr(spec, c0), *p1 = strchr(spec, c1);
  if ((int)strlen(spec) != rank || !p0 || !p1) {
    ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s \"%s\" must have %d letters with '%c' and '%c'", op,
              name, spec, rank, c0, c1);
    return false;
  }
  out->v[0] = (int8_t)(p0 - spec), out->v[1] = (int8_t)(p1 - spec);
  int n = 2;
  if (spec == rhs) {
    for (int i = 0; i < rank; i++)
      if (spec[i] != c0 && spec[i] != c1) out->v[n++] = (int8_t)i;
    return true;
  }
  for (int j = 0; rhs[j] && n < rank; j++) {
    if (strchr("OINC", rhs[j])) continue; /* the order spec's own non-spatial letters */
    const char *q = strchr(spec, rhs[j]);
    if (!q || q == p0 || q == p1) break;
    out->v[n++] = (int8_t)(q - spec);
  }
  if (n == rank) return true;
  ktr_failf(t, KILN_ERR_ARGUMENT, "%s: %s \"%s\" and rhs_spec \"%s\" name different spatial "
            "dimensions", op, name, spec, rhs);
  return false;
}

static void ktr_conv_fill(kir_sizes *s, int n, const int64_t *v) {
  s->n = n;
  for (int i = 0; i < n; i++) s->v[i] = v ? v[i] : 1;
}

kiln_val *kiln_conv_general_dilated(kiln_trace *t, kiln_val *lhs, kiln_val *rhs,
                                    const kiln_conv_params *params) {
  static const char op[] = "kiln_conv_general_dilated";
  kiln_val *v[2] = {lhs, rhs};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  if (!params) return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: params is NULL", op);
  int rank = ktr_aval(lhs)->rank, n_sp = rank - 2;
  if (rank < 2 || rank != ktr_aval(rhs)->rank)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: lhs and rhs need one rank of at least 2 (got %d "
                     "and %d)", op, rank, ktr_aval(rhs)->rank);
  if (params->rhs_spec && (int)strlen(params->rhs_spec) != rank)
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: rhs_spec \"%s\" must have %d letters", op,
                     params->rhs_spec, rank);
  kir_params p;
  memset(&p, 0, sizeof p);
  kir_p_conv *c = &p.conv;
  const char *rs = params->rhs_spec;
  /* lhs/out spatial order follows rhs's letters; without an rhs spec it is
   * the lhs's own order */
  const char *order = rs ? rs : params->lhs_spec;
  if (!ktr_conv_spec(t, op, "rhs_spec", rs, rs, rank, 'O', 'I', &c->dimension_numbers.rhs_spec) ||
      !ktr_conv_spec(t, op, "lhs_spec", params->lhs_spec, order, rank, 'N', 'C',
                     &c->dimension_numbers.lhs_spec) ||
      !ktr_conv_spec(t, op, "out_spec", params->out_spec, order ? order : params->out_spec, rank,
                     'N', 'C', &c->dimension_numbers.out_spec))
    return NULL;
  ktr_conv_fill(&c->window_strides, n_sp, params->window_strides);
  ktr_conv_fill(&c->lhs_dilation, n_sp, params->lhs_dilation);
  ktr_conv_fill(&c->rhs_dilation, n_sp, params->rhs_dilation);
  c->padding.n = n_sp;
  for (int s = 0; s < n_sp && params->padding; s++)
    c->padding.lo[s] = params->padding[2 * s], c->padding.hi[s] = params->padding[2 * s + 1];
  c->feature_group_count = params->feature_group_count ? params->feature_group_count : 1;
  c->batch_group_count = params->batch_group_count ? params->batch_group_count : 1;
  c->preferred_element_type = params->preferred_element_type;
  return ktr_bind(t, op, KIR_PRIM_CONV_GENERAL_DILATED, &p, 2, v, 1, NULL);
}

kiln_val *kiln_conv(kiln_trace *t, kiln_val *x, kiln_val *w, const int64_t *strides,
                    const char *padding) {
  static const char op[] = "kiln_conv";
  kiln_val *v[2] = {x, w};
  if (!ktr_ok(t, op, 2, v)) return NULL;
  const kir_aval *xa = ktr_aval(x), *wa = ktr_aval(w);
  int rank = xa->rank, n_sp = rank - 2;
  bool same = padding && strcmp(padding, "SAME") == 0;
  if (!padding || (!same && strcmp(padding, "VALID") != 0))
    return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: padding must be \"SAME\" or \"VALID\"", op);
  if (rank < 3 || rank > 5 || wa->rank != rank)
    return ktr_failf(t, KILN_ERR_SHAPE, "%s: x (NHWC-like) and w (HWIO-like) need one rank "
                     "from 3 to 5 (got %d and %d)", op, rank, wa->rank);
  static const char *const lhs_specs[] = {"NWC", "NHWC", "NDHWC"};
  static const char *const rhs_specs[] = {"WIO", "HWIO", "DHWIO"};
  int64_t pad[2 * KIR_MAX_RANK] = {0};
  for (int s = 0; s < n_sp && same; s++) {
    int64_t in = xa->shape[1 + s], k = wa->shape[s], st = strides ? strides[s] : 1;
    if (st < 1) return ktr_failf(t, KILN_ERR_ARGUMENT, "%s: strides must be positive", op);
    int64_t out = (in + st - 1) / st, total = (out - 1) * st + k - in;
    if (total < 0) total = 0;
    pad[2 * s] = total / 2, pad[2 * s + 1] = total - total / 2;
  }
  kiln_conv_params p = {.window_strides = strides,
                        .padding = pad,
                        .lhs_spec = lhs_specs[n_sp - 1],
                        .rhs_spec = rhs_specs[n_sp - 1],
                        .out_spec = lhs_specs[n_sp - 1]};
  return kiln_conv_general_dilated(t, x, w, &p);
}
