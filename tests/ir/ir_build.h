// Helpers of the IR tests (test_ir_*.cc): types from their text, programs
// built equation by equation through the IR API, and a rule run alone on
// operand types (Infer).
#ifndef KILN_TESTS_IR_IR_BUILD_H
#define KILN_TESTS_IR_IR_BUILD_H

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"
#include "support/text.h"

namespace ir_test {

using namespace kiln_test;

inline kir_aval A(const char *text) {
  kir_aval a;
  EXPECT_EQ(kir_aval_parse(text, &a), KILN_OK) << text << ": " << kiln_last_error();
  return a;
}

inline std::string Str(const kir_aval &a) {
  char buf[KIR_AVAL_STR_CAP];
  return kir_aval_str(&a, buf, sizeof buf);
}

inline kir_prim Prim(const std::string &name) {
  kir_prim p = KIR_NUM_PRIMS;
  EXPECT_TRUE(kir_prim_lookup(name.data(), name.size(), &p)) << name;
  return p;
}

inline kir_vid Invar(kir_program *p, const char *type) {
  kir_aval a = A(type);
  kir_vid v = KIR_NO_VAR;
  EXPECT_EQ(kir_add_invar(p, &a, &v), KILN_OK) << kiln_last_error();
  return v;
}

inline kir_vid Lit(kir_program *p, kiln_dtype dt, double v, bool weak = false) {
  kir_vid out = KIR_NO_VAR;
  kir_scalar s = kiln_dtype_is_float(dt) ? kir_scalar_f(v) : kir_scalar_i((int64_t)v);
  EXPECT_EQ(kir_add_literal(p, dt, weak, s, &out), KILN_OK) << kiln_last_error();
  return out;
}

// Adds prim(ins)[params text]; returns the first output (or KIR_NO_VAR).
inline kir_vid Eqn(kir_program *p, const char *prim, std::vector<kir_vid> ins,
                   const char *params = "") {
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_prim pr = Prim(prim);
  EXPECT_EQ(kir_params_parse(p, pr, params, &par), KILN_OK) << kiln_last_error();
  int idx = -1;
  kiln_status st = kir_add_eqn(p, pr, &par, (int)ins.size(), ins.data(), &idx);
  EXPECT_EQ(st, KILN_OK) << prim << ": " << kiln_last_error();
  if (st != KILN_OK || p->eqns[idx].n_out == 0) return KIR_NO_VAR;
  return p->eqns[idx].out[0];
}

inline void Outputs(kir_program *p, std::vector<kir_vid> outs) {
  ASSERT_EQ(kir_set_outputs(p, (int)outs.size(), outs.data()), KILN_OK) << kiln_last_error();
}

// Runs prim's rule on the types; returns "ERROR: <message>" on failure.
inline std::string Infer(const std::string &prim, const std::vector<std::string> &types,
                         const std::string &params, kiln_status *status = nullptr) {
  Program p = NewProgram();
  std::vector<kir_aval> in;
  for (auto &t : types) in.push_back(A(t.c_str()));
  kir_params par;
  kir_prim pr = Prim(prim);
  kiln_status st = kir_params_parse(p.get(), pr, params.c_str(), &par);
  EXPECT_EQ(st, KILN_OK) << prim << " [" << params << "]: " << kiln_last_error();
  if (st != KILN_OK) return "PARAMS";
  kir_avals outs;
  kir_avals_init(&outs);
  st = kir_infer(pr, &par, (int)in.size(), in.data(), &outs);
  if (status) *status = st;
  std::string r;
  if (st != KILN_OK) {
    r = std::string("ERROR: ") + kiln_last_error();
  } else {
    for (int i = 0; i < outs.n; i++) r += (i ? " " : "") + Str(outs.v[i]);
  }
  kir_avals_free(&outs);
  return r;
}

}  // namespace ir_test

#endif  // KILN_TESTS_IR_IR_BUILD_H
