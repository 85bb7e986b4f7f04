// Shared by test_eval_reduce.cc and test_eval_dot.cc: reads the golden
// cases written by tests/golden/eval_reduce.py, evaluates each as a
// one-equation program with the reference evaluators, and compares.
//
// A case line is  prim | params | tol | operand ; ... | result ; ...
// with every array as "type hex hex ..." (raw bits in C order, bool 0/1).
#ifndef KILN_TESTS_EVAL_REDUCE_GOLDEN_H
#define KILN_TESTS_EVAL_REDUCE_GOLDEN_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/core.h"
#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"

namespace eval_golden {

struct Array {
  kir_aval aval;
  std::vector<uint8_t> bytes;  // never empty, so data is never NULL
};

struct Case {
  int line = 0;
  std::string text, prim, params;
  double rtol = 0, atol = 0;  // both 0: bit for bit
  std::vector<Array> in, out;
};

inline std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

inline std::vector<std::string> Split(const std::string &s, const std::string &sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.push_back(Trim(s.substr(start, at == std::string::npos ? std::string::npos : at - start)));
    if (at == std::string::npos) return out;
    start = at + sep.size();
  }
}

inline bool ParseArray(const std::string &text, Array *a) {
  std::istringstream ss(text);
  std::string type, word;
  ss >> type;
  if (kir_aval_parse(type.c_str(), &a->aval) != KILN_OK) return false;
  size_t es = kiln_dtype_size(a->aval.dtype);
  int64_t n = kir_aval_size(&a->aval);
  a->bytes.assign(n ? (size_t)n * es : 1, 0);
  for (int64_t i = 0; i < n; i++) {
    if (!(ss >> word)) return false;
    uint64_t bits = std::stoull(word, nullptr, 16);
    std::memcpy(a->bytes.data() + i * es, &bits, es);  // little-endian hosts
  }
  return !(ss >> word);
}

inline std::vector<Case> Load(const char *file) {
  std::vector<Case> cases;
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/" + file);
  EXPECT_TRUE(f.good()) << "missing " << file << "; run tests/golden/eval_reduce.py";
  std::string line;
  for (int no = 1; std::getline(f, line); no++) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f5 = Split(line, " | ");
    EXPECT_EQ(f5.size(), 5u) << file << ":" << no;
    if (f5.size() != 5) continue;
    Case c;
    c.line = no;
    c.text = line.size() > 300 ? line.substr(0, 300) + " ..." : line;
    c.prim = f5[0];
    c.params = f5[1];
    std::istringstream tol(f5[2]);
    tol >> c.rtol;
    if (!(tol >> c.atol)) c.atol = 0;
    bool ok = true;
    for (int side = 0; side < 2; side++)
      for (const std::string &t : Split(f5[3 + side], " ; ")) {
        Array a;
        ok = ok && ParseArray(t, &a);
        (side ? c.out : c.in).push_back(std::move(a));
      }
    EXPECT_TRUE(ok) << file << ":" << no << ": unreadable array";
    if (ok) cases.push_back(std::move(c));
  }
  return cases;
}

// Element i of a float array as a double.
inline double FloatAt(const Array &a, int64_t i) {
  kir_scalar s = kir_scalar_load(a.aval.dtype, a.bytes.data() + i * kiln_dtype_size(a.aval.dtype));
  return s.f;
}

inline std::string ElementHex(const Array &a, int64_t i) {
  size_t es = kiln_dtype_size(a.aval.dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, a.bytes.data() + i * es, es);
  std::ostringstream s;
  s << std::hex << bits;
  return s.str();
}

// Empty when equal; otherwise the first differing element.
inline std::string Compare(const Case &c, const Array &want, const Array &got, bool *exact) {
  kiln_dtype dt = want.aval.dtype;
  size_t es = kiln_dtype_size(dt);
  int64_t n = kir_aval_size(&want.aval);
  bool is_float = kiln_dtype_is_float(dt);
  for (int64_t i = 0; i < n; i++) {
    bool same = std::memcmp(want.bytes.data() + i * es, got.bytes.data() + i * es, es) == 0;
    if (same) continue;
    bool ok = false;
    if (is_float) {
      double w = FloatAt(want, i), g = FloatAt(got, i);
      if (std::isnan(w) || std::isnan(g)) {
        ok = std::isnan(w) && std::isnan(g);  // any NaN bits
      } else if (std::isinf(w) || std::isinf(g)) {
        ok = w == g;
      } else {
        *exact = false;
        bool tolerant = c.rtol != 0 || c.atol != 0;
        ok = tolerant && std::fabs(g - w) <= c.atol + c.rtol * std::fabs(w);
      }
    }
    if (!ok) {
      std::ostringstream s;
      s << "element " << i << ": want " << ElementHex(want, i) << " got " << ElementHex(got, i);
      if (is_float) s << " (" << FloatAt(want, i) << " vs " << FloatAt(got, i) << ")";
      return s.str();
    }
  }
  return "";
}

// Builds prim(operands)[params] as a one-equation program, evaluates it with
// the reference evaluators and compares every result. *exact tells whether
// all float results matched bit for bit.
inline void RunCase(const Case &c, bool *exact) {
  SCOPED_TRACE(testing::Message() << "line " << c.line << ": " << c.text);
  kiln_test::Program p = kiln_test::NewProgram();
  ASSERT_TRUE(p);
  kir_prim prim;
  ASSERT_TRUE(kir_prim_lookup(c.prim.c_str(), c.prim.size(), &prim)) << c.prim;
  std::vector<kir_vid> ins;
  for (const Array &a : c.in) {
    kir_vid v = KIR_NO_VAR;
    ASSERT_EQ(kir_add_invar(p.get(), &a.aval, &v), KILN_OK) << kiln_last_error();
    ins.push_back(v);
  }
  kir_params params;
  std::memset(&params, 0, sizeof params);
  ASSERT_EQ(kir_params_parse(p.get(), prim, c.params.c_str(), &params), KILN_OK)
      << kiln_last_error();
  int eqn = -1;
  ASSERT_EQ(kir_add_eqn(p.get(), prim, &params, (int)ins.size(), ins.data(), &eqn), KILN_OK)
      << kiln_last_error();
  const kir_eqn *e = &p->eqns[eqn];
  ASSERT_EQ((size_t)e->n_out, c.out.size());
  std::vector<kir_vid> outs(e->out, e->out + e->n_out);
  ASSERT_EQ(kir_set_outputs(p.get(), (int)outs.size(), outs.data()), KILN_OK);

  std::vector<Array> got(c.out.size());
  std::vector<kir_buffer> in_bufs, out_bufs;
  for (size_t i = 0; i < c.in.size(); i++)
    in_bufs.push_back({c.in[i].aval, (void *)c.in[i].bytes.data(),
                       (size_t)kir_aval_size(&c.in[i].aval) * kiln_dtype_size(c.in[i].aval.dtype)});
  for (size_t i = 0; i < c.out.size(); i++) {
    const kir_aval *a = kir_var_aval(p.get(), outs[i]);
    ASSERT_TRUE(kir_aval_same_shape(a, &c.out[i].aval) && a->dtype == c.out[i].aval.dtype)
        << "result " << i << " type";
    got[i].aval = *a;
    got[i].bytes.assign(c.out[i].bytes.size(), 0xa5);  // poisoned: every byte must be written
    out_bufs.push_back({*a, got[i].bytes.data(),
                        (size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype)});
  }
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  ASSERT_EQ(kir_eval_program(&env, p.get(), in_bufs.data(), out_bufs.data()), KILN_OK)
      << kiln_last_error();
  for (size_t i = 0; i < c.out.size(); i++) {
    std::string diff = Compare(c, c.out[i], got[i], exact);
    EXPECT_EQ(diff, "") << "result " << i;
  }
}

// Runs every case of `file` whose prim is in `prims` (all when empty) and
// reports how many floats were bit-exact; returns the prims covered.
inline std::map<std::string, int> RunFile(const char *file, const std::vector<std::string> &prims) {
  std::map<std::string, int> covered;
  int exact_cases = 0, total = 0;
  for (const Case &c : Load(file)) {
    bool wanted = prims.empty();
    for (const std::string &p : prims) wanted |= p == c.prim;
    if (!wanted) continue;
    bool exact = true;
    RunCase(c, &exact);
    covered[c.prim]++;
    total++;
    exact_cases += exact;
  }
  std::cout << file << ": " << total << " cases, " << exact_cases << " bit-exact\n";
  return covered;
}

}  // namespace eval_golden

#endif
