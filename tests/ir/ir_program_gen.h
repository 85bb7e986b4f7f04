// Random well-typed IR programs for the parser's round trips
// (test_ir_parse.cc): Gen draws types, literals and equations of every
// kind (elementwise, structural, reductions, windows, effects, control flow,
// calls, shard_map) and counts the primitives it covered. The equations'
// generators are in ir_program_gen_ops.cc and ir_program_gen_control.cc.
#ifndef KILN_TESTS_IR_IR_PROGRAM_GEN_H
#define KILN_TESTS_IR_IR_PROGRAM_GEN_H

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"

namespace ir_test {

using kiln_test::Program;

const kiln_dtype kAllDtypes[] = {KILN_BOOL, KILN_I8,  KILN_I16,  KILN_I32, KILN_I64,
                                 KILN_U8,   KILN_U16, KILN_U32,  KILN_U64, KILN_F16,
                                 KILN_BF16, KILN_F32, KILN_F64};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T &Pick(const std::vector<T> &v) { return v[(size_t)Int(0, (int)v.size() - 1)]; }

  kiln_dtype Dtype() { return kAllDtypes[Int(0, 12)]; }

  kir_aval Aval(int max_rank = 3) {
    int64_t shape[KIR_MAX_RANK];
    int rank = Int(0, max_rank);
    for (int i = 0; i < rank; i++) shape[i] = Int(0, 4) == 0 ? 1 : Int(1, 5);
    return kir_aval_make(Dtype(), rank, shape, Coin(0.2));
  }

  kir_vid Literal(kir_program *p, kiln_dtype dt, bool weak) {
    kir_scalar s;
    if (kiln_dtype_is_float(dt)) {
      const double specials[] = {0.5, -2.25, 1e-7, 3.0e38, NAN, INFINITY, -INFINITY, -0.0, 1e300};
      s.f = Coin(0.4) ? specials[Int(0, 8)]
                      : std::uniform_real_distribution<double>(-1000, 1000)(rng_);
      if (dt != KILN_F64 && s.f == 1e300) s.f = 7.0;
    } else if (kiln_dtype_is_bool(dt)) {
      s.i = Int(0, 1);
    } else {
      int bits = (int)kiln_dtype_size(dt) * 8;
      uint64_t r = rng_();
      if (bits < 64) r &= (1ull << bits) - 1;
      if (kiln_dtype_is_unsigned(dt)) {
        s.u = r;
      } else {
        // sign-extend the low bits
        s.i = bits < 64 ? (int64_t)(r << (64 - bits)) >> (64 - bits) : (int64_t)r;
      }
    }
    kir_vid v = KIR_NO_VAR;
    EXPECT_EQ(kir_add_literal(p, dt, weak, s, &v), KILN_OK) << kiln_last_error();
    return v;
  }

  // ---- the program builder ----

  struct Scope {
    kir_program *p;
    std::vector<kir_vid> pool;
    int depth;
  };

  const kir_aval &Type(const Scope &s, kir_vid v) { return s.p->vars[v].aval; }

  bool Add(Scope &s, kir_prim prim, const kir_params *par, std::vector<kir_vid> in,
           std::vector<kir_vid> *outs = nullptr) {
    int idx;
    if (kir_add_eqn(s.p, prim, par, (int)in.size(), in.data(), &idx) != KILN_OK) {
      rejected_++;
      return false;
    }
    covered_.insert(prim);
    accepted_++;
    const kir_eqn &e = s.p->eqns[idx];
    for (int k = 0; k < e.n_out; k++) {
      s.pool.push_back(e.out[k]);
      if (outs) outs->push_back(e.out[k]);
    }
    return true;
  }

  kir_params Zero() {
    kir_params par;
    memset(&par, 0, sizeof par);
    return par;
  }

  kir_vid AnyVar(const Scope &s) { return Pick(s.pool); }

  // A var whose dtype is in `classes`, or KIR_NO_VAR.
  kir_vid VarIn(const Scope &s, unsigned classes, int min_rank = 0) {
    std::vector<kir_vid> c;
    for (kir_vid v : s.pool)
      if (kir_dtype_in(Type(s, v).dtype, classes) && Type(s, v).rank >= min_rank) c.push_back(v);
    return c.empty() ? KIR_NO_VAR : Pick(c);
  }

  // An operand matching x's dtype: x itself, a literal, or another var of x's type.
  kir_vid Partner(Scope &s, kir_vid x) {
    const kir_aval t = Type(s, x);
    int r = Int(0, 2);
    if (r == 0) return Literal(s.p, t.dtype, Coin());
    if (r == 1) {
      for (kir_vid v : s.pool)
        if (v != x && kir_aval_typematch(&Type(s, v), &t) && Coin()) return v;
    }
    return x;
  }

  // A type-preserving unary op (used for loop/branch outputs).
  kir_vid Keep(Scope &s, kir_vid v) {
    if (Coin(0.4)) return v;
    kir_prim prim = kiln_dtype_is_bool(Type(s, v).dtype) ? KIR_PRIM_NOT : KIR_PRIM_NEG;
    std::vector<kir_vid> out;
    return Add(s, prim, nullptr, {v}, &out) ? out[0] : v;
  }

  kir_dims Dims(std::vector<int> v) {
    kir_dims d;
    memset(&d, 0, sizeof d);
    d.n = (int)v.size();
    for (size_t i = 0; i < v.size(); i++) d.v[i] = (int8_t)v[i];
    return d;
  }

  kir_sizes Sizes(const int64_t *v, int n) {
    kir_sizes s;
    memset(&s, 0, sizeof s);
    s.n = n;
    for (int i = 0; i < n; i++) s.v[i] = v[i];
    return s;
  }

  std::vector<int> Subset(int rank) {
    std::vector<int> out;
    for (int i = 0; i < rank; i++)
      if (Coin()) out.push_back(i);
    return out;
  }

  // ---- the equations (ir_program_gen_ops.cc) ----

  void Elementwise(Scope &s);
  void Structure(Scope &s);
  void Reduction(Scope &s);
  void Window(Scope &s);

  // ---- control flow, calls and whole programs (ir_program_gen_control.cc) ----

  void Effects(Scope &s);
  kir_program *SubProgram(Scope &s, const std::vector<kir_aval> &types, int n_eqns,
                          std::vector<kir_vid> *invars);
  std::vector<kir_vid> Operands(Scope &s, int lo, int hi);
  std::vector<kir_aval> TypesOf(const Scope &s, const std::vector<kir_vid> &vs);
  void Cond(Scope &s);
  kir_vid Predicate(Scope &s, kir_vid v);
  void While(Scope &s);
  void Scan(Scope &s);
  kir_program *Passing(Scope &s, const std::vector<kir_aval> &types, const std::vector<int> &outs);
  void Calls(Scope &s);
  void ShardMap(Scope &s);
  void Body(Scope &s, int n_eqns);
  Program Make();

  std::mt19937_64 rng_;
  std::set<kir_prim> covered_;
  int accepted_ = 0, rejected_ = 0;
  size_t next_unary_ = 0;  // cycles through the float unary ops
  std::vector<kir_vid> scratch_pool_;
};

}  // namespace ir_test

#endif  // KILN_TESTS_IR_IR_PROGRAM_GEN_H
