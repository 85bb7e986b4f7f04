// Reference evaluators of control flow (cond, while, scan), the effects
// (debug_print, host_callback) and threefry2x32, against values and printed
// text computed by JAX (tests/golden/eval_control.py); constant folding of
// control flow; failures that name the op and the path to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/core.h"
#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"
#include "support/text.h"

namespace {

using kiln_test::Contains;
using kiln_test::NewProgram;
using kiln_test::Program;

kir_aval A(const std::string &text) {
  kir_aval a;
  EXPECT_EQ(kir_aval_parse(text.c_str(), &a), KILN_OK) << text << ": " << kiln_last_error();
  return a;
}

std::string Str(const kir_aval &a) {
  char buf[KIR_AVAL_STR_CAP];
  return kir_aval_str(&a, buf, sizeof buf);
}

// ---------------------------------------------------------------------------
// Values and the golden files

struct Value {
  kir_aval aval;
  std::vector<uint8_t> bytes;
};

std::string Unescape(const std::string &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      r += s[i + 1] == 'n' ? '\n' : s[i + 1];
      i++;
    } else {
      r += s[i];
    }
  }
  return r;
}

// "f32 4,3 <hex>" (shape "-" for a scalar, hex "-" for no bytes).
Value ParseValue(const std::string &text) {
  std::istringstream in(text);
  std::string dtype, shape, hex;
  in >> dtype >> shape >> hex;
  Value v;
  v.aval = A(dtype + "[" + (shape == "-" ? "" : shape) + "]");
  if (hex != "-")
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      v.bytes.push_back((uint8_t)std::stoul(hex.substr(i, 2), nullptr, 16));
  EXPECT_EQ(v.bytes.size(), (size_t)kir_aval_size(&v.aval) * kiln_dtype_size(v.aval.dtype)) << text;
  return v;
}

std::string Describe(const Value &v) {
  std::ostringstream o;
  o << Str(v.aval) << " ";
  for (uint8_t b : v.bytes) o << std::hex << (b >> 4) << (b & 15);
  return o.str();
}

// Splits "tag rest" lines of a golden file (comments and blanks skipped).
std::vector<std::pair<std::string, std::string>> ReadGolden(const char *name) {
  std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/" + name);
  EXPECT_TRUE(f.good()) << "missing " << name << "; run tests/golden/eval_control.py";
  std::vector<std::pair<std::string, std::string>> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.find(' ');
    lines.emplace_back(line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1));
  }
  return lines;
}

struct Case {
  std::string name;
  std::vector<Value> in, out;
  std::vector<std::string> lines;
};

std::vector<Case> ReadCases() {
  std::vector<Case> cases;
  for (auto &[tag, rest] : ReadGolden("eval_control.txt")) {
    if (tag == "case")
      cases.push_back(Case{rest, {}, {}, {}});
    else if (tag == "in")
      cases.back().in.push_back(ParseValue(rest));
    else if (tag == "out")
      cases.back().out.push_back(ParseValue(rest));
    else if (tag == "line")
      cases.back().lines.push_back(Unescape(rest));
    else
      EXPECT_EQ(tag, "end");
  }
  return cases;
}

// ---------------------------------------------------------------------------
// Evaluation

// The real reference evaluators: the bodies use the elementwise family's.
const kir_eval_table *Table() { return kir_reference_evals(); }

void Capture(void *user, const char *text) {
  static_cast<std::vector<std::string> *>(user)->push_back(text);
}

struct Result {
  kiln_status status = KILN_OK;
  std::string error;
  std::vector<Value> out;
  std::vector<std::string> lines;
};

// Evaluates p on `in` with debug_print lines captured.
Result Evaluate(const kir_program *p, const std::vector<Value> &in, kir_eval_env *env_in = nullptr,
                const kir_eval_table *table = Table()) {
  Result r;
  kir_eval_env env;
  if (env_in)
    env = *env_in;
  else
    kir_eval_env_init(&env, table);
  env.print = Capture;
  env.print_user = &r.lines;
  std::vector<kir_buffer> ib, ob;
  std::vector<Value> inputs = in;
  for (auto &v : inputs)
    ib.push_back(kir_buffer{v.aval, v.bytes.empty() ? (void *)"" : v.bytes.data(), v.bytes.size()});
  for (int i = 0; i < p->n_outvars; i++) {
    Value v;
    v.aval = p->vars[p->outvars[i]].aval;
    v.bytes.assign((size_t)kir_aval_size(&v.aval) * kiln_dtype_size(v.aval.dtype) + 1, 0xcd);
    r.out.push_back(v);
  }
  // One canary byte past each output.
  for (auto &v : r.out) ob.push_back(kir_buffer{v.aval, v.bytes.data(), v.bytes.size() - 1});
  r.status = kir_eval_program(&env, p, ib.data(), ob.data());
  if (r.status != KILN_OK) r.error = kiln_last_error();
  for (auto &v : r.out) {
    EXPECT_EQ(v.bytes.back(), 0xcd) << "written past the end of an output " << Str(v.aval);
    v.bytes.pop_back();
  }
  return r;
}

// ---------------------------------------------------------------------------
// Building programs

kir_vid Invar(kir_program *p, const kir_aval &a) {
  kir_vid v = KIR_NO_VAR;
  EXPECT_EQ(kir_add_invar(p, &a, &v), KILN_OK) << kiln_last_error();
  return v;
}

kir_vid Lit(kir_program *p, kiln_dtype dt, double v) {
  kir_vid out = KIR_NO_VAR;
  kir_scalar s = kiln_dtype_is_float(dt) ? kir_scalar_f(v) : kir_scalar_i((int64_t)v);
  EXPECT_EQ(kir_add_literal(p, dt, false, s, &out), KILN_OK) << kiln_last_error();
  return out;
}

// Appends prim(in)[par]; returns all its outputs.
std::vector<kir_vid> Eqns(kir_program *p, kir_prim prim, std::vector<kir_vid> in,
                          const kir_params *par = nullptr) {
  int idx = -1;
  kiln_status st = kir_add_eqn(p, prim, par, (int)in.size(), in.data(), &idx);
  EXPECT_EQ(st, KILN_OK) << kir_prim_name(prim) << ": " << kiln_last_error();
  if (st != KILN_OK) return {};
  return std::vector<kir_vid>(p->eqns[idx].out, p->eqns[idx].out + p->eqns[idx].n_out);
}

kir_vid Eqn(kir_program *p, kir_prim prim, std::vector<kir_vid> in,
            const kir_params *par = nullptr) {
  std::vector<kir_vid> out = Eqns(p, prim, in, par);
  return out.empty() ? KIR_NO_VAR : out[0];
}

void Outputs(kir_program *p, std::vector<kir_vid> outs) {
  ASSERT_EQ(kir_set_outputs(p, (int)outs.size(), outs.data()), KILN_OK) << kiln_last_error();
}

// A sub-program of `parent` with invars of the given types.
kir_program *Sub(kir_program *parent, std::vector<std::string> types, std::vector<kir_vid> *in) {
  kir_program *s = nullptr;
  EXPECT_EQ(kir_program_new_sub(parent, &s), KILN_OK) << kiln_last_error();
  in->clear();
  for (auto &t : types) in->push_back(Invar(s, A(t)));
  return s;
}

kir_params Params() {
  kir_params par;
  memset(&par, 0, sizeof par);
  return par;
}

std::vector<kir_vid> Cond(kir_program *p, std::vector<kir_program *> branches,
                          std::vector<kir_vid> in) {
  kir_params par = Params();
  par.cond.branches.n = (int)branches.size();
  par.cond.branches.v = branches.data();
  return Eqns(p, KIR_PRIM_COND, in, &par);
}

std::vector<kir_vid> While(kir_program *p, kir_program *cond, int64_t cond_nconsts,
                           kir_program *body, int64_t body_nconsts, std::vector<kir_vid> in) {
  kir_params par = Params();
  par.while_loop.cond_jaxpr = cond;
  par.while_loop.cond_nconsts = cond_nconsts;
  par.while_loop.body_jaxpr = body;
  par.while_loop.body_nconsts = body_nconsts;
  return Eqns(p, KIR_PRIM_WHILE, in, &par);
}

std::vector<kir_vid> Scan(kir_program *p, kir_program *body, int64_t length, int64_t num_consts,
                          int64_t num_carry, bool reverse, std::vector<kir_vid> in) {
  kir_params par = Params();
  par.scan.jaxpr = body;
  par.scan.length = length;
  par.scan.num_consts = num_consts;
  par.scan.num_carry = num_carry;
  par.scan.reverse = reverse;
  return Eqns(p, KIR_PRIM_SCAN, in, &par);
}

void DebugPrint(kir_program *p, const char *fmt, std::vector<kir_vid> in) {
  kir_params par = Params();
  par.debug_print.fmt = fmt;
  Eqns(p, KIR_PRIM_DEBUG_PRINT, in, &par);
}

const kir_prim ADD = KIR_PRIM_ADD, SUB = KIR_PRIM_SUB, MUL = KIR_PRIM_MUL, LT = KIR_PRIM_LT;

// The builders of the golden cases: each mirrors the JAX function of the
// same name in eval_control.py. `in` are the program's invars.
using Builder = std::function<void(kir_program *p, const std::vector<kir_vid> &in)>;

// branches3: (x+y, x), (x*y, y), (x-y, x*x) over x, y: f32[3]
std::vector<kir_program *> Branches3(kir_program *p) {
  std::vector<kir_program *> b;
  std::vector<kir_vid> v;
  b.push_back(Sub(p, {"f32[3]", "f32[3]"}, &v));
  Outputs(b.back(), {Eqn(b.back(), ADD, {v[0], v[1]}), v[0]});
  b.push_back(Sub(p, {"f32[3]", "f32[3]"}, &v));
  Outputs(b.back(), {Eqn(b.back(), MUL, {v[0], v[1]}), v[1]});
  b.push_back(Sub(p, {"f32[3]", "f32[3]"}, &v));
  Outputs(b.back(), {Eqn(b.back(), SUB, {v[0], v[1]}), Eqn(b.back(), MUL, {v[0], v[0]})});
  return b;
}

// A loop test over invars of `types`: invar i < invar `bound`, or, for a
// negative `bound`, i < the literal -bound.
kir_program *LessThan(kir_program *p, std::vector<std::string> types, int i, int bound) {
  std::vector<kir_vid> v;
  kir_program *c = Sub(p, types, &v);
  kir_vid b = bound < 0 ? Lit(c, KILN_I32, -bound) : v[bound];
  Outputs(c, {Eqn(c, LT, {v[i], b})});
  return c;
}

std::map<std::string, Builder> Builders() {
  std::map<std::string, Builder> m;
  m["cond_raw"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    Outputs(p, Cond(p, Branches3(p), {in[0], in[1], in[2]}));
  };
  // lax.switch: clamp(0, i, 2), then cond
  m["switch"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_vid i = Eqn(p, KIR_PRIM_CLAMP, {Lit(p, KILN_I32, 0), in[0], Lit(p, KILN_I32, 2)});
    Outputs(p, Cond(p, Branches3(p), {i, in[1], in[2]}));
  };
  // while (i < n): (i + 1, x * 2 + w); cond const n, body const w
  m["while_count"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_program *c = LessThan(p, {"i32[]", "i32[]", "f32[3]"}, 1, 0);
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"f32[3]", "i32[]", "f32[3]"}, &v);
    Outputs(b, {Eqn(b, ADD, {v[1], Lit(b, KILN_I32, 1)}),
                Eqn(b, ADD, {Eqn(b, MUL, {v[2], Lit(b, KILN_F32, 2)}), v[0]})});
    Outputs(p, While(p, c, 1, b, 1, {in[0], in[1], Lit(p, KILN_I32, 0), in[2]}));
  };
  // fori_loop(0, n, x * 2 + f32(i)): a while over (i, upper, x)
  m["fori_loop"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_program *c = LessThan(p, {"i32[]", "i32[]", "f32[2]"}, 0, 1);
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"i32[]", "i32[]", "f32[2]"}, &v);
    kir_params cv = Params();
    cv.convert.new_dtype = KILN_F32;
    kir_vid fi = Eqn(b, KIR_PRIM_CONVERT_ELEMENT_TYPE, {v[0]}, &cv);
    Outputs(b, {Eqn(b, ADD, {v[0], Lit(b, KILN_I32, 1)}), v[1],
                Eqn(b, ADD, {Eqn(b, MUL, {v[2], Lit(b, KILN_F32, 2)}), fi})});
    Outputs(p, {While(p, c, 0, b, 0, {Lit(p, KILN_I32, 0), in[0], in[1]})[2]});
  };
  // scan (c, x) -> (c + x, c + x) from 0
  auto cumsum = [](bool reverse) {
    return [reverse](kir_program *p, const std::vector<kir_vid> &in) {
      std::vector<kir_vid> v;
      kir_program *b = Sub(p, {"f32[]", "f32[]"}, &v);
      kir_vid s = Eqn(b, ADD, {v[0], v[1]});
      Outputs(b, {s, s});
      Outputs(p, Scan(p, b, 5, 0, 1, reverse, {Lit(p, KILN_F32, 0), in[0]}));
    };
  };
  m["scan_cumsum"] = cumsum(false);
  m["scan_cumsum_reverse"] = cumsum(true);
  // scan (c, x) -> (c * w + x, c * w - x), w a const
  auto consts = [](bool reverse) {
    return [reverse](kir_program *p, const std::vector<kir_vid> &in) {
      std::vector<kir_vid> v;
      kir_program *b = Sub(p, {"f32[3]", "f32[3]", "f32[3]"}, &v);
      kir_vid cw = Eqn(b, MUL, {v[1], v[0]});
      Outputs(b, {Eqn(b, ADD, {cw, v[2]}), Eqn(b, SUB, {cw, v[2]})});
      Outputs(p, Scan(p, b, 4, 1, 1, reverse, {in[0], in[1], in[2]}));
    };
  };
  m["scan_consts"] = consts(false);
  m["scan_consts_reverse"] = consts(true);
  // carry (k, acc), xs (x, j) -> (k + j, acc + x), ys (acc, k * j, x)
  m["scan_multi"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"i32[]", "f32[2]", "f32[2]", "i32[]"}, &v);
    Outputs(b, {Eqn(b, ADD, {v[0], v[3]}), Eqn(b, ADD, {v[1], v[2]}), v[1],
                Eqn(b, MUL, {v[0], v[3]}), v[2]});
    Outputs(p, Scan(p, b, 6, 0, 2, false, {in[0], in[1], in[2], in[3]}));
  };
  m["scan_empty"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"f32[3]", "f32[3]"}, &v);
    Outputs(b, {Eqn(b, ADD, {v[0], v[1]}), Eqn(b, MUL, {v[0], v[1]})});
    Outputs(p, Scan(p, b, 0, 0, 1, false, {in[0], in[1]}));
  };
  // while (i < n): v = scan((c, r) -> (c * 2 + r, c), v, xs).carry; i += 1
  m["while_nested_scan"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_program *c = LessThan(p, {"i32[]", "i32[]", "f32[2]"}, 1, 0);
    std::vector<kir_vid> v, w;
    kir_program *b = Sub(p, {"f32[4,2]", "i32[]", "f32[2]"}, &v);
    kir_program *inner = Sub(b, {"f32[2]", "f32[2]"}, &w);
    Outputs(inner,
            {Eqn(inner, ADD, {Eqn(inner, MUL, {w[0], Lit(inner, KILN_F32, 2)}), w[1]}), w[0]});
    kir_vid vf = Scan(b, inner, 4, 0, 1, false, {v[2], v[0]})[0];
    Outputs(b, {Eqn(b, ADD, {v[1], Lit(b, KILN_I32, 1)}), vf});
    Outputs(p, While(p, c, 1, b, 1, {in[0], in[1], Lit(p, KILN_I32, 0), in[2]}));
  };
  // scan over (x, k): c = cond(k; c + x, c * x, c - x), ys the carries
  m["scan_nested_cond"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_vid> v, w;
    kir_program *b = Sub(p, {"f32[]", "f32[]", "i32[]"}, &v);
    std::vector<kir_program *> br;
    for (kir_prim op : {ADD, MUL, SUB}) {
      br.push_back(Sub(b, {"f32[]", "f32[]"}, &w));
      Outputs(br.back(), {Eqn(br.back(), op, {w[0], w[1]})});
    }
    kir_vid c2 = Cond(b, br, {v[2], v[0], v[1]})[0];
    Outputs(b, {c2, c2});
    Outputs(p, Scan(p, b, 5, 0, 1, false, {in[0], in[1], in[2]}));
  };
  Builder threefry = [](kir_program *p, const std::vector<kir_vid> &in) {
    Outputs(p, Eqns(p, KIR_PRIM_THREEFRY2X32, in));
  };
  for (const char *n : {"threefry_vectors", "threefry_scalar_keys", "threefry_broadcast",
                        "threefry_scalars", "threefry_empty"})
    m[n] = threefry;
  // while (i < 3): (i + 1, b, a + 1)
  m["while_swap"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_program *c = LessThan(p, {"i32[]", "f32[2]", "f32[2]"}, 0, -3);
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"i32[]", "f32[2]", "f32[2]"}, &v);
    Outputs(b, {Eqn(b, ADD, {v[0], Lit(b, KILN_I32, 1)}), v[2],
                Eqn(b, ADD, {v[1], Lit(b, KILN_F32, 1)})});
    Outputs(p, While(p, c, 0, b, 0, {Lit(p, KILN_I32, 0), in[0], in[1]}));
  };
  // scan ((a, b), x) -> ((b * x, a), a)
  m["scan_swap"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"f32[2]", "f32[2]", "f32[]"}, &v);
    Outputs(b, {Eqn(b, MUL, {v[1], v[2]}), v[0], v[0]});
    Outputs(p, Scan(p, b, 4, 0, 2, false, {in[0], in[1], in[2]}));
  };
  // cond(i; print "branch 0 got {}" x; x + 0, print "branch 1 got {}" x; x + 1)
  m["cond_print"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_program *> br;
    std::vector<kir_vid> v;
    for (int k = 0; k < 2; k++) {
      br.push_back(Sub(p, {"f32[2]"}, &v));
      DebugPrint(br.back(), k ? "branch 1 got {}" : "branch 0 got {}", {v[0]});
      Outputs(br.back(), {Eqn(br.back(), ADD, {v[0], Lit(br.back(), KILN_F32, k)})});
    }
    Outputs(p, Cond(p, br, {in[0], in[1]}));
  };
  // scan (c, x): print "c={} x={}"; c + x
  m["scan_print"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"f32[]", "f32[]"}, &v);
    DebugPrint(b, "c={} x={}", {v[0], v[1]});
    Outputs(b, {Eqn(b, ADD, {v[0], v[1]})});
    Outputs(p, Scan(p, b, 3, 0, 1, false, {in[0], in[1]}));
  };
  // while (i < 3): print "i={} v={}"; (i + 1, v * 2)
  m["while_print"] = [](kir_program *p, const std::vector<kir_vid> &in) {
    kir_program *c = LessThan(p, {"i32[]", "f32[2]"}, 0, -3);
    std::vector<kir_vid> v;
    kir_program *b = Sub(p, {"i32[]", "f32[2]"}, &v);
    DebugPrint(b, "i={} v={}", {v[0], v[1]});
    Outputs(b,
            {Eqn(b, ADD, {v[0], Lit(b, KILN_I32, 1)}), Eqn(b, MUL, {v[1], Lit(b, KILN_F32, 2)})});
    Outputs(p, While(p, c, 0, b, 0, {Lit(p, KILN_I32, 0), in[0]}));
  };
  return m;
}

// The program of a golden case, built over invars of the case's input types.
Program BuildCase(const Case &c) {
  static const std::map<std::string, Builder> builders = Builders();
  Program p = NewProgram();
  auto it = builders.find(c.name.substr(0, c.name.find('/')));
  EXPECT_NE(it, builders.end()) << "no builder for case " << c.name;
  if (it == builders.end()) return p;
  std::vector<kir_vid> in;
  for (auto &v : c.in) in.push_back(Invar(p.get(), v.aval));
  it->second(p.get(), in);
  EXPECT_EQ(kir_verify(p.get()), KILN_OK) << c.name << ": " << kiln_last_error();
  return p;
}

const Case &FindCase(const std::vector<Case> &cases, const std::string &name) {
  for (auto &c : cases)
    if (c.name == name) return c;
  ADD_FAILURE() << "no golden case " << name;
  static Case none;
  return none;
}

// ---------------------------------------------------------------------------
// Control flow and threefry2x32 against JAX

TEST(EvalControl, MatchesJax) {
  std::vector<Case> cases = ReadCases();
  EXPECT_GE(cases.size(), 35u);
  std::set<std::string> builders_used;
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    Program p = BuildCase(c);
    builders_used.insert(c.name.substr(0, c.name.find('/')));
    ASSERT_EQ(p->n_outvars, (int)c.out.size());
    Result r = Evaluate(p.get(), c.in);
    ASSERT_EQ(r.status, KILN_OK) << r.error;
    for (size_t i = 0; i < c.out.size(); i++) {
      EXPECT_TRUE(kir_aval_typematch(&r.out[i].aval, &c.out[i].aval))
          << "output " << i << ": " << Str(r.out[i].aval) << " vs JAX " << Str(c.out[i].aval);
      EXPECT_EQ(r.out[i].bytes, c.out[i].bytes)
          << "output " << i << "\n  kiln " << Describe(r.out[i]) << "\n  JAX  "
          << Describe(c.out[i]);
    }
    EXPECT_EQ(r.lines, c.lines);
  }
  EXPECT_EQ(builders_used.size(), Builders().size()) << "a builder has no golden case";
}

// The inputs are only read: evaluating twice gives the same, and a loop's
// carry never lands in its operands.
TEST(EvalControl, OperandsAreNotWritten) {
  std::vector<Case> cases = ReadCases();
  for (const char *name : {"while_swap", "scan_swap", "scan_consts_reverse", "while_nested_scan"}) {
    const Case &c = FindCase(cases, name);
    Program p = BuildCase(c);
    std::vector<Value> in = c.in;
    std::vector<kir_buffer> ib, ob;
    for (auto &v : in) ib.push_back(kir_buffer{v.aval, v.bytes.data(), v.bytes.size()});
    std::vector<Value> out = c.out;
    for (auto &v : out) ob.push_back(kir_buffer{v.aval, v.bytes.data(), v.bytes.size()});
    kir_eval_env env;
    kir_eval_env_init(&env, Table());
    for (int rep = 0; rep < 2; rep++) {
      for (auto &v : out) std::fill(v.bytes.begin(), v.bytes.end(), 0xcd);
      ASSERT_EQ(kir_eval_program(&env, p.get(), ib.data(), ob.data()), KILN_OK)
          << kiln_last_error();
      for (size_t i = 0; i < in.size(); i++) EXPECT_EQ(in[i].bytes, c.in[i].bytes) << name;
      for (size_t i = 0; i < out.size(); i++) EXPECT_EQ(out[i].bytes, c.out[i].bytes) << name;
    }
  }
}

// A long scan and a long while: one sub-program evaluation per iteration,
// no per-iteration growth (this runs in milliseconds).
TEST(EvalControl, LongLoops) {
  const int64_t n = 20000;
  Program p = NewProgram();
  kir_vid xs = Invar(p.get(), A("i32[20000]"));
  std::vector<kir_vid> v;
  kir_program *b = Sub(p.get(), {"i32[]", "i32[]"}, &v);
  kir_vid s = Eqn(b, ADD, {v[0], v[1]});
  Outputs(b, {s, s});
  std::vector<kir_vid> r = Scan(p.get(), b, n, 0, 1, true, {Lit(p.get(), KILN_I32, 0), xs});
  kir_program *c = LessThan(p.get(), {"i32[]", "i32[]"}, 0, -(int)n);
  kir_program *w = Sub(p.get(), {"i32[]", "i32[]"}, &v);
  Outputs(w, {Eqn(w, ADD, {v[0], Lit(w, KILN_I32, 1)}), Eqn(w, ADD, {v[1], v[0]})});
  kir_vid total =
      While(p.get(), c, 0, w, 0, {Lit(p.get(), KILN_I32, 0), Lit(p.get(), KILN_I32, 0)})[1];
  Outputs(p.get(), {r[0], r[1], total});
  Value in{A("i32[20000]"), std::vector<uint8_t>(n * 4)};
  for (int64_t i = 0; i < n; i++) {
    int32_t x = (int32_t)(i % 7) - 3;
    memcpy(&in.bytes[i * 4], &x, 4);
  }
  Result run = Evaluate(p.get(), {in});
  ASSERT_EQ(run.status, KILN_OK) << run.error;
  int32_t acc = 0, got;
  for (int64_t i = n - 1; i >= 0; i--) {  // reverse cumulative sums
    acc += (int32_t)(i % 7) - 3;
    memcpy(&got, &run.out[1].bytes[i * 4], 4);
    ASSERT_EQ(got, acc) << i;
  }
  memcpy(&got, run.out[0].bytes.data(), 4);
  EXPECT_EQ(got, acc);
  memcpy(&got, run.out[2].bytes.data(), 4);
  EXPECT_EQ(got, (int32_t)(n * (n - 1) / 2));
}

// ---------------------------------------------------------------------------
// debug_print

struct PrintCase {
  std::string fmt;
  std::vector<Value> values;
  bool reject = false;
  std::string expect;
};

std::vector<PrintCase> ReadPrintCases() {
  std::vector<PrintCase> cases;
  for (auto &[tag, rest] : ReadGolden("eval_control_print.txt")) {
    if (tag == "print" || tag == "reject")
      cases.push_back(PrintCase{Unescape(rest), {}, tag == "reject", ""});
    else if (tag == "value")
      cases.back().values.push_back(ParseValue(rest));
    else if (tag == "expect")
      cases.back().expect = Unescape(rest);
    else
      ADD_FAILURE() << "bad tag " << tag;
  }
  return cases;
}

// A program that prints fmt over invars of the values' types.
Program PrintProgram(const std::string &fmt, const std::vector<Value> &values) {
  Program p = NewProgram();
  std::vector<kir_vid> in;
  for (auto &v : values) in.push_back(Invar(p.get(), v.aval));
  DebugPrint(p.get(), fmt.c_str(), in);
  Outputs(p.get(), {});
  return p;
}

TEST(EvalDebugPrint, MatchesJax) {
  std::vector<PrintCase> cases = ReadPrintCases();
  int accepted = 0, rejected = 0;
  for (const PrintCase &c : cases) {
    SCOPED_TRACE("format \"" + c.fmt + "\"" +
                 (c.values.empty() ? "" : " with " + Describe(c.values[0])));
    Program p = PrintProgram(c.fmt, c.values);
    Result r = Evaluate(p.get(), c.values);
    if (c.reject) {
      rejected++;
      EXPECT_EQ(r.status, KILN_ERR_ARGUMENT) << r.error;
      EXPECT_TRUE(Contains(r.error, "equation 0 (debug_print): debug_print: format")) << r.error;
      EXPECT_TRUE(r.lines.empty());
      continue;
    }
    accepted++;
    ASSERT_EQ(r.status, KILN_OK) << r.error;
    ASSERT_EQ(r.lines.size(), 1u);
    EXPECT_EQ(r.lines[0], c.expect);
  }
  EXPECT_GE(accepted, 80);
  EXPECT_GE(rejected, 8);
}

// What JAX accepts but kiln does not format: named KILN_ERR_UNIMPLEMENTED.
TEST(EvalDebugPrint, UnsupportedFieldsAreNamed) {
  Value x{A("f32[]"), {0, 0, 0xc0, 0x3f}};
  const std::pair<const char *, const char *> cases[] = {
      {"{:.2f}", "field {:.2f} uses a format spec"},
      {"{!r}", "field {!r} uses a conversion"},
      {"{0.shape}", "field {0.shape} uses attribute or item access"},
      {"{0[0]}", "field {0[0]} uses attribute or item access"},
      {"{:{}}", "nested fields are not supported"},
  };
  for (auto &[fmt, msg] : cases) {
    Program p = PrintProgram(fmt, {x});
    Result r = Evaluate(p.get(), {x});
    EXPECT_EQ(r.status, KILN_ERR_UNIMPLEMENTED) << fmt;
    EXPECT_TRUE(Contains(r.error, std::string("debug_print: format \"") + fmt + "\": " + msg))
        << r.error;
  }
  // kir_debug_format on its own names the op too, and refuses a NULL format.
  char *text = nullptr;
  kir_buffer b{x.aval, x.bytes.data(), 4};
  EXPECT_EQ(kir_debug_format(nullptr, 1, &b, &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "debug_print: fmt is NULL"));
  EXPECT_EQ(text, nullptr);
  ASSERT_EQ(kir_debug_format("{} and {{}}", 1, &b, &text), KILN_OK);
  EXPECT_STREQ(text, "1.5 and {}");
  free(text);
}

// Without a print hook, each line goes to stderr with its newline.
TEST(EvalDebugPrint, WritesToStderrWithoutAHook) {
  Value x{A("i32[2]"), {1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}};
  Program p = PrintProgram("x={}", {x});
  kir_eval_env env;
  kir_eval_env_init(&env, Table());
  kir_buffer b{x.aval, x.bytes.data(), x.bytes.size()};
  testing::internal::CaptureStderr();
  kiln_status st = kir_eval_program(&env, p.get(), &b, nullptr);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(st, KILN_OK) << kiln_last_error();
  EXPECT_EQ(err, "x=[ 1 -2]\n");
}

// ---------------------------------------------------------------------------
// host_callback

struct Calls {
  int n = 0;
  int64_t last_id = -1;
  bool fail = false;
};

// Callback 3 returns (in0 * 2 + in1) as f32[2]; with `fail` set it fails.
kiln_status HostCall(void *user, int64_t id, int n_in, const kir_buffer *in, int n_out,
                     kir_buffer *out) {
  Calls *c = static_cast<Calls *>(user);
  c->n++;
  c->last_id = id;
  if (c->fail) return kcore_fail(KILN_ERR_IO, "test callback %lld: disk on fire", (long long)id);
  if (n_in != 2 || n_out != 1 || out[0].nbytes != 8)
    return kcore_fail(KILN_ERR_INTERNAL, "test callback: unexpected buffers");
  float a[2], b;
  memcpy(a, in[0].data, 8);
  memcpy(&b, in[1].data, 4);
  float r[2] = {a[0] * 2 + b, a[1] * 2 + b};
  memcpy(out[0].data, r, 8);
  return KILN_OK;
}

// scan (c: f32[2], x: f32[]) -> (host_callback[3](c, x), nothing)
Program CallbackScan() {
  Program p = NewProgram();
  kir_vid c0 = Invar(p.get(), A("f32[2]")), xs = Invar(p.get(), A("f32[3]"));
  std::vector<kir_vid> v;
  kir_program *b = Sub(p.get(), {"f32[2]", "f32[]"}, &v);
  kir_params par = Params();
  kir_aval result = A("f32[2]");
  par.host_callback.callback = 3;
  par.host_callback.result_avals.n = 1;
  par.host_callback.result_avals.v = &result;
  Outputs(b, {Eqn(b, KIR_PRIM_HOST_CALLBACK, {v[0], v[1]}, &par)});
  Outputs(p.get(), Scan(p.get(), b, 3, 0, 1, false, {c0, xs}));
  return p;
}

TEST(EvalHostCallback, RunsEveryIteration) {
  Program p = CallbackScan();
  Value c0{A("f32[2]"), std::vector<uint8_t>(8)}, xs{A("f32[3]"), std::vector<uint8_t>(12)};
  float c[2] = {1, -1}, x[3] = {0.5f, 1, -2};
  memcpy(c0.bytes.data(), c, 8);
  memcpy(xs.bytes.data(), x, 12);
  Calls calls;
  kir_eval_env env;
  kir_eval_env_init(&env, Table());
  env.host_call = HostCall;
  env.host_user = &calls;
  Result r = Evaluate(p.get(), {c0, xs}, &env);
  ASSERT_EQ(r.status, KILN_OK) << r.error;
  EXPECT_EQ(calls.n, 3);
  EXPECT_EQ(calls.last_id, 3);
  float got[2];
  memcpy(got, r.out[0].bytes.data(), 8);
  // ((1*2 + .5)*2 + 1)*2 - 2 = 10, ((-1*2 + .5)*2 + 1)*2 - 2 = -6
  EXPECT_EQ(got[0], 10.0f);
  EXPECT_EQ(got[1], -6.0f);
}

TEST(EvalHostCallback, FailuresPassThrough) {
  Program p = CallbackScan();
  Value c0{A("f32[2]"), std::vector<uint8_t>(8)}, xs{A("f32[3]"), std::vector<uint8_t>(12)};
  Calls calls;
  calls.fail = true;
  kir_eval_env env;
  kir_eval_env_init(&env, Table());
  env.host_call = HostCall;
  env.host_user = &calls;
  Result r = Evaluate(p.get(), {c0, xs}, &env);
  EXPECT_EQ(r.status, KILN_ERR_IO);
  EXPECT_TRUE(Contains(r.error,
                       "equation 0 (scan): jaxpr (iteration 0): equation 0 "
                       "(host_callback): test callback 3: disk on fire"))
      << r.error;
  EXPECT_EQ(calls.n, 1);  // the loop stops at the first failure

  // No host callbacks in the env at all.
  r = Evaluate(p.get(), {c0, xs});
  EXPECT_EQ(r.status, KILN_ERR_UNIMPLEMENTED);
  EXPECT_TRUE(Contains(r.error, "host_callback: no host callbacks in this evaluation (callback 3)"))
      << r.error;
}

// ---------------------------------------------------------------------------
// Failures inside sub-programs name the path to them

kiln_status EvalFails(const kir_eqn *e, const kir_buffer *, kir_buffer *, void *) {
  return kcore_fail(KILN_ERR_INTERNAL, "%s: test failure", kir_prim_name(e->prim));
}

TEST(EvalControl, SubProgramFailuresNameThePath) {
  kir_eval_table t = *Table();
  t.fn[KIR_PRIM_MUL] = EvalFails;
  std::vector<Case> cases = ReadCases();
  const std::pair<const char *, const char *> expect[] = {
      {"while_count/5",
       "equation 0 (while): body_jaxpr (iteration 0): equation 1 (mul): "
       "mul: test failure"},
      {"while_nested_scan",
       "equation 0 (while): body_jaxpr (iteration 0): equation 0 (scan): "
       "jaxpr (iteration 0): equation 0 (mul): mul: test failure"},
      {"scan_consts", "equation 0 (scan): jaxpr (iteration 0): equation 0 (mul)"},
      {"scan_consts_reverse", "equation 0 (scan): jaxpr (iteration 0): equation 0 (mul)"},
      {"cond_raw/1", "equation 0 (cond): branches[1]: equation 0 (mul): mul: test failure"},
      {"switch/9", "equation 1 (cond): branches[2]: equation 1 (mul): mul: test failure"},
      {"scan_nested_cond",
       "equation 0 (scan): jaxpr (iteration 1): equation 0 (cond): "
       "branches[1]: equation 0 (mul)"},
  };
  for (auto &[name, msg] : expect) {
    const Case &c = FindCase(cases, name);
    Program p = BuildCase(c);
    Result r = Evaluate(p.get(), c.in, nullptr, &t);
    EXPECT_EQ(r.status, KILN_ERR_INTERNAL) << name;
    EXPECT_TRUE(Contains(r.error, msg)) << name << ": " << r.error;
  }
  // A while whose cond fails on its first test; a sub-program primitive
  // without an evaluator.
  t = *Table();
  t.fn[KIR_PRIM_LT] = EvalFails;
  const Case &c = FindCase(cases, "while_count/0");
  Program p = BuildCase(c);
  Result r = Evaluate(p.get(), c.in, nullptr, &t);
  EXPECT_EQ(r.status, KILN_ERR_INTERNAL);
  EXPECT_TRUE(Contains(r.error, "equation 0 (while): cond_jaxpr (iteration 0): equation 0 (lt)"))
      << r.error;
  t = *Table();
  t.fn[KIR_PRIM_ADD] = nullptr;
  const Case &s = FindCase(cases, "scan_cumsum");
  p = BuildCase(s);
  r = Evaluate(p.get(), s.in, nullptr, &t);
  EXPECT_EQ(r.status, KILN_ERR_UNIMPLEMENTED);
  EXPECT_TRUE(Contains(r.error,
                       "equation 0 (scan): jaxpr (iteration 0): equation 0 (add): the reference "
                       "executor has no evaluator for it"))
      << r.error;
}

// ---------------------------------------------------------------------------
// Constant folding runs control flow through the same evaluators

// Rebuilds a golden case with its inputs as constants: scalars as literals,
// arrays as host constvars.
Program ConstantCase(const Case &c) {
  static const std::map<std::string, Builder> builders = Builders();
  Program p = NewProgram();
  std::vector<kir_vid> in;
  for (auto &v : c.in) {
    kir_vid id = KIR_NO_VAR;
    if (v.aval.rank == 0) {
      kir_scalar s = kir_scalar_load(v.aval.dtype, v.bytes.data());
      EXPECT_EQ(kir_add_literal(p.get(), v.aval.dtype, false, s, &id), KILN_OK);
    } else {
      EXPECT_EQ(kir_add_const_host(p.get(), &v.aval, v.bytes.data(), v.bytes.size(), &id), KILN_OK)
          << kiln_last_error();
    }
    in.push_back(id);
  }
  builders.at(c.name.substr(0, c.name.find('/')))(p.get(), in);
  return p;
}

TEST(EvalControl, FoldEvaluatesConstantControlFlow) {
  std::vector<Case> cases = ReadCases();
  for (const char *name :
       {"cond_raw/3", "switch/-5", "scan_consts_reverse", "scan_multi", "threefry_broadcast"}) {
    SCOPED_TRACE(name);
    const Case &c = FindCase(cases, name);
    Program p = ConstantCase(c);
    int folded = 0;
    ASSERT_EQ(kir_fold(p.get(), Table(), 1 << 20, &folded), KILN_OK) << kiln_last_error();
    EXPECT_GE(folded, 1);
    ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
    EXPECT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
    EXPECT_EQ(p->n_eqns, 0);  // everything became constants
    ASSERT_EQ(p->n_outvars, (int)c.out.size());
    for (int i = 0; i < p->n_outvars; i++) {
      const kir_var &v = p->vars[p->outvars[i]];
      std::vector<uint8_t> got(c.out[i].bytes.size());
      if (v.kind == KIR_VAR_LITERAL) {
        kir_scalar_store(v.aval.dtype, v.u.literal, got.data());
      } else {
        ASSERT_EQ(v.kind, KIR_VAR_CONSTVAR);
        ASSERT_EQ(v.u.constant.nbytes, got.size());
        if (!got.empty()) memcpy(got.data(), v.u.constant.host, got.size());
      }
      EXPECT_EQ(got, c.out[i].bytes) << "output " << i;
    }
  }
  // A while loop is never run at compile time (its trip count is unbounded).
  {
    const Case &w = FindCase(cases, "while_nested_scan");
    Program p = ConstantCase(w);
    int folded = 0;
    ASSERT_EQ(kir_fold(p.get(), Table(), 1 << 20, &folded), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
    EXPECT_EQ(p->n_eqns, 1);
    EXPECT_EQ(p->eqns[0].prim, KIR_PRIM_WHILE);
  }
  // A print is an effect: its scan stays, and folding prints nothing.
  const Case &c = FindCase(cases, "scan_print");
  Program p = ConstantCase(c);
  testing::internal::CaptureStderr();
  int folded = -1;
  ASSERT_EQ(kir_fold(p.get(), Table(), 1 << 20, &folded), KILN_OK) << kiln_last_error();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(folded, 0);
  EXPECT_EQ(p->n_eqns, 1);
  Result r = Evaluate(p.get(), {});
  ASSERT_EQ(r.status, KILN_OK) << r.error;
  EXPECT_EQ(r.lines, c.lines);
}

}  // namespace
