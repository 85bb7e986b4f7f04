// Programs and fused groups for the code generator's tests (test_codegen.cc,
// test_codegen_registers.cc): parsing IR text, a group over a program's
// equations, and the row programs JAX traces for softmax and LayerNorm.
#ifndef KILN_TESTS_CODEGEN_TEST_PROGRAMS_H
#define KILN_TESTS_CODEGEN_TEST_PROGRAMS_H

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuse/fuse.h"
#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"

namespace codegen_test {

using kiln_test::Parse;
using kiln_test::Program;

// A group over equations of p; by default all of them, reading the invars
// then the constvars and writing the outvars.
struct Group {
  std::vector<int> eqns;
  std::vector<kir_vid> in, out;
  kfuse_group g{};

  Group() = default;
  Group(const kir_program *p, kfuse_kind kind) {
    for (int i = 0; i < p->n_eqns; i++) eqns.push_back(i);
    in.assign(p->invars, p->invars + p->n_invars);
    in.insert(in.end(), p->constvars, p->constvars + p->n_constvars);
    out.assign(p->outvars, p->outvars + p->n_outvars);
    g.kind = kind;
    Sync();
  }
  const kfuse_group *get() {
    Sync();
    return &g;
  }
  void Sync() {
    g.n_eqns = (int)eqns.size();
    g.eqns = eqns.data();
    g.n_in = (int)in.size();
    g.in = in.data();
    g.n_out = (int)out.size();
    g.out = out.data();
  }
};

// jax.nn.softmax over the last axis, as JAX traces it.
inline std::string Softmax(int64_t rows, int64_t len, const char *t = "f32") {
  std::string r = std::to_string(rows), l = std::to_string(len), T = t;
  std::string row = T + "[" + r + "," + l + "]", col = T + "[" + r + ",1]", vec = T + "[" + r + "]";
  return "{ lambda ; a:" + row + ". let\n"
         "  b:" + vec + " = reduce_max[axes=(1,)] a\n"
         "  c:" + vec + " = max -inf:" + T + "[] b\n"
         "  d:" + col + " = broadcast_in_dim[broadcast_dimensions=(0,) shape=(" + r + ", 1)] c\n"
         "  e:" + row + " = sub a d\n"
         "  f:" + row + " = exp e\n"
         "  g:" + vec + " = reduce_sum[axes=(1,)] f\n"
         "  h:" + col + " = broadcast_in_dim[broadcast_dimensions=(0,) shape=(" + r + ", 1)] g\n"
         "  i:" + row + " = div f h\n"
         "  in (i,) }";
}

// flax's LayerNorm (fast variance: E[x^2] - E[x]^2) with scale and bias;
// the per-row mean and variance are outputs too.
inline std::string LayerNorm(int64_t rows, int64_t len) {
  std::string r = std::to_string(rows), l = std::to_string(len);
  std::string row = "f32[" + r + "," + l + "]", col = "f32[" + r + ",1]", vec = "f32[" + r + "]";
  char inv[64];
  snprintf(inv, sizeof inv, "%.9g", 1.0 / (double)len);
  std::string n = std::string(inv) + (strchr(inv, '.') || strchr(inv, 'e') ? "" : ".0") + ":f32[]";
  return "{ lambda ; x:" + row + " gamma:f32[" + l + "] beta:f32[" + l + "]. let\n"
         "  s:" + vec + " = reduce_sum[axes=(1,)] x\n"
         "  m:" + vec + " = mul s " + n + "\n"
         "  x2:" + row + " = mul x x\n"
         "  s2:" + vec + " = reduce_sum[axes=(1,)] x2\n"
         "  m2:" + vec + " = mul s2 " + n + "\n"
         "  mm:" + vec + " = mul m m\n"
         "  v0:" + vec + " = sub m2 mm\n"
         "  v:" + vec + " = max 0.0:f32[] v0\n"
         "  ve:" + vec + " = add v 1e-06:f32[]\n"
         "  rs:" + vec + " = rsqrt ve\n"
         "  mc:" + col + " = broadcast_in_dim[broadcast_dimensions=(0,) shape=(" + r + ", 1)] m\n"
         "  rc:" + col + " = broadcast_in_dim[broadcast_dimensions=(0,) shape=(" + r + ", 1)] rs\n"
         "  xc:" + row + " = sub x mc\n"
         "  y0:" + row + " = mul xc rc\n"
         "  g:" + row + " = broadcast_in_dim[broadcast_dimensions=(1,) shape=(" + r + ", " + l + ")] gamma\n"
         "  b:" + row + " = broadcast_in_dim[broadcast_dimensions=(1,) shape=(" + r + ", " + l + ")] beta\n"
         "  y1:" + row + " = mul y0 g\n"
         "  y:" + row + " = add y1 b\n"
         "  in (y, m, v) }";
}

}  // namespace codegen_test

#endif
