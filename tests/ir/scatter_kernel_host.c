/* Runs the CUDA target's gather and scatter index walk (kernels/scatter.h,
 * kiln_scatter_target) on the host with the geometry those kernels bake in
 * (codegen's kcg_scatter_geom), combining updates in index order as the
 * ordered form does, so tests can check both against the reference
 * evaluator's bits without a GPU. C, because the walk is C on the host. */
#include "scatter_kernel_host.h"

#include <string.h>

#include "../../kernels/scatter.h"
#include "codegen/codegen.h"

/* *p combined with b by scatter prim over dtype dt; -1 if the kernels have
 * no such combine. */
static int kct_combine(kir_prim prim, kiln_dtype dt, void *p, const void *b) {
  if (prim == KIR_PRIM_SCATTER) {
    memcpy(p, b, kiln_dtype_size(dt));
    return 0;
  }
  int op = prim == KIR_PRIM_SCATTER_ADD ? 0 : prim == KIR_PRIM_SCATTER_MUL ? 1
           : prim == KIR_PRIM_SCATTER_MIN ? 2 : 3;
#define KCT_APPLY(T, ADD, MUL, MIN, MAX)                                        \
  do {                                                                          \
    T a = *(T *)p, u = *(const T *)b;                                           \
    *(T *)p = op == 0 ? ADD(a, u) : op == 1 ? MUL(a, u) : op == 2 ? MIN(a, u) : MAX(a, u); \
    return 0;                                                                   \
  } while (0)
  switch (dt) {
    case KILN_F32: KCT_APPLY(float, KILN_SC_ADD, KILN_SC_MUL, KILN_SC_MIN, KILN_SC_MAX);
    case KILN_I32: KCT_APPLY(int, KILN_SC_IADD, KILN_SC_IMUL, KILN_SC_IMIN, KILN_SC_IMAX);
    case KILN_F16: KCT_APPLY(kiln_half, KILN_SC_H_ADD, KILN_SC_H_MUL, KILN_SC_H_MIN, KILN_SC_H_MAX);
    case KILN_BF16:
      KCT_APPLY(kiln_half, KILN_SC_BH_ADD, KILN_SC_BH_MUL, KILN_SC_BH_MIN, KILN_SC_BH_MAX);
    default: return -1;
  }
#undef KCT_APPLY
}

int kct_scatter_host(const kir_program *p, const kir_eqn *e, const void *const *in, void *out) {
  kiln_scatter_geom g;
  kcg_scatter_geom(p, e, &g);
  const kir_aval *x = kir_var_aval(p, e->in[0]);
  size_t es = kiln_dtype_size(x->dtype);
  const char *xs = in[0];
  char *o = out;
  kiln_i64 off;
  if (e->prim == KIR_PRIM_GATHER) {
    uint64_t fill = 0;
    kir_gather_fill(x->dtype, e->params.gather.fill_value, &fill);
    int64_t n = kir_aval_size(kir_var_aval(p, e->out[0]));
    for (int64_t i = 0; i < n; i++)
      memcpy(o + i * es, kiln_scatter_target(&g, in[1], i, &off) ? xs + off * es : (char *)&fill,
             es);
    return 0;
  }
  memcpy(o, xs, (size_t)kir_aval_size(x) * es);
  int64_t n_u = kir_aval_size(kir_var_aval(p, e->in[2]));
  const char *u = in[2];
  for (int64_t i = 0; i < n_u; i++)
    if (kiln_scatter_target(&g, in[1], i, &off) &&
        kct_combine(e->prim, x->dtype, o + off * es, u + i * es) < 0)
      return -1;
  return 0;
}
