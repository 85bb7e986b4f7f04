/* The functions the elementwise records' jvp and transpose columns name
 * (see prims.def), declared from the records themselves: a record that says
 * COEFF, PARTIALS or OWN gets its declaration here, and the build fails
 * until some family file of src/ir defines it. The ir module's own header,
 * for elementwise_ad.c (which registers them) and the family files. */
#ifndef KILN_IR_ELEMENTWISE_AD_H
#define KILN_IR_ELEMENTWISE_AD_H

#include "core/core.h"
#include "ir/ir.h"

/* d y / d x of a unary primitive, whose derivative is a primal value: x is
 * the operand and y the result (vars of p). */
typedef kiln_status (*kir_ew_coeff_fn)(kir_program *p, kir_vid x, kir_vid y, kir_vid *c);

/* A binary primitive's partials: with operands a, b and result y, set *ca /
 * *cb to d y / d a and d y / d b (KIR_NO_VAR: 1), or rewrite the tangent
 * *ta / *tb itself (a symbolic zero, KIR_NO_VAR, needs no partial). */
typedef kiln_status (*kir_ew_partials_fn)(kir_program *p, kir_vid a, kir_vid b, kir_vid y,
                                          kir_vid *ta, kir_vid *tb, kir_vid *ca, kir_vid *cb);

#define KIR_EW_DECLARE_JVP_COEFF(name) \
  kiln_status kir_ew_d_##name(kir_program *p, kir_vid x, kir_vid y, kir_vid *c);
#define KIR_EW_DECLARE_JVP_PARTIALS(name)                                                   \
  kiln_status kir_ew_partials_##name(kir_program *p, kir_vid a, kir_vid b, kir_vid y,       \
                                     kir_vid *ta, kir_vid *tb, kir_vid *ca, kir_vid *cb);
#define KIR_EW_DECLARE_JVP_OWN(name)                                                      \
  kiln_status kir_ew_jvp_##name(kir_program *p, const kir_eqn *e, const kir_vid *x,       \
                                const kir_vid *y, const kir_vid *tx, kir_vid *ty);
#define KIR_EW_DECLARE_JVP_ZERO(name)
#define KIR_EW_DECLARE_JVP_LINEAR(name)
#define KIR_EW_DECLARE_TR_OWN(name)                                                          \
  kiln_status kir_ew_tr_##name(kir_program *p, const kir_program *src, const kir_eqn *e,     \
                               const bool *lin, const kir_vid *x, const kir_vid *ct,         \
                               kir_vid *ct_x);
#define KIR_EW_DECLARE_TR_LIKE(name)
#define KIR_EW_DECLARE_TR_NONE(name)
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags)
#define KIR_ELEMENTWISE(ID, name, n_in, params, rule, accepts, cost, builder, c_float, c_int, \
                        eval_float, eval_int, jvp, transpose)                                 \
  KIR_EW_DECLARE_JVP_##jvp(name) KIR_EW_DECLARE_TR_##transpose(name)
#include "ir/prims.def"
#undef KIR_ELEMENTWISE
#undef KIR_PRIM

/* x op literal v (the literal of x's type and shape class) */
static inline kiln_status kir_ew_lit_op(kir_program *p, kir_prim prim, kir_vid x, double v,
                                       kir_vid *out) {
  kir_vid c;
  kiln_status st = kir_emit_scalar(p, x, v, &c);
  return st ? st : kir_emit2(p, prim, x, c, out);
}

#endif
