// The random programs' effects, control flow (cond, while, scan), calls,
// shard_map, and whole programs (ir_program_gen.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "ir_program_gen.h"

namespace ir_test {

void Gen::Effects(Scope &s) {
  kir_params par = Zero();
  std::vector<kir_vid> in;
  for (int i = Int(0, 2); i > 0; i--) in.push_back(AnyVar(s));
  if (Coin()) {
    static const char *fmts[] = {"x={}", "", "tab\there \"quoted\" \\ {x} \x7f\x01", "{} {}",
                                 "caf\xc3\xa9"};
    par.debug_print.fmt = fmts[Int(0, 4)];
    Add(s, KIR_PRIM_DEBUG_PRINT, &par, in);
  } else {
    kir_aval results[2] = {Aval(), Aval()};
    par.host_callback.callback = Int(0, 1000);
    par.host_callback.result_avals.n = Int(0, 2);
    par.host_callback.result_avals.v = results;
    Add(s, KIR_PRIM_HOST_CALLBACK, &par, in);
  }
}

// A sub-program taking `types`; `finish` sets its outputs.
kir_program *Gen::SubProgram(Scope &s, const std::vector<kir_aval> &types, int n_eqns,
                           std::vector<kir_vid> *invars) {
  kir_program *sub = nullptr;
  EXPECT_EQ(kir_program_new_sub(s.p, &sub), KILN_OK);
  Scope inner{sub, {}, s.depth + 1};
  for (const kir_aval &t : types) {
    kir_vid v;
    EXPECT_EQ(kir_add_invar(sub, &t, &v), KILN_OK);
    inner.pool.push_back(v);
    invars->push_back(v);
  }
  if (inner.pool.empty()) inner.pool.push_back(Literal(sub, Dtype(), Coin()));
  Body(inner, n_eqns);
  scratch_pool_ = inner.pool;
  return sub;
}

std::vector<kir_vid> Gen::Operands(Scope &s, int lo, int hi) {
  std::vector<kir_vid> v;
  for (int i = Int(lo, hi); i > 0; i--) v.push_back(AnyVar(s));
  return v;
}

std::vector<kir_aval> Gen::TypesOf(const Scope &s, const std::vector<kir_vid> &vs) {
  std::vector<kir_aval> t;
  for (kir_vid v : vs) t.push_back(Type(s, v));
  return t;
}

void Gen::Cond(Scope &s) {
  std::vector<kir_vid> ops = Operands(s, 1, 2);
  std::vector<kir_aval> types = TypesOf(s, ops);
  std::vector<kir_program *> branches;
  for (int b = Int(1, 3); b > 0; b--) {
    std::vector<kir_vid> invars;
    kir_program *br = SubProgram(s, types, Int(0, 3), &invars);
    Scope bs{br, scratch_pool_, s.depth + 1};
    std::vector<kir_vid> outs;
    for (kir_vid v : invars) outs.push_back(Keep(bs, v));
    EXPECT_EQ(kir_set_outputs(br, (int)outs.size(), outs.data()), KILN_OK);
    branches.push_back(br);
  }
  kir_params par = Zero();
  par.cond.branches.n = (int)branches.size();
  par.cond.branches.v = branches.data();
  kir_vid index = Literal(s.p, KILN_I32, false);
  for (kir_vid v : s.pool)
    if (Type(s, v).dtype == KILN_I32 && Type(s, v).rank == 0 && Coin()) index = v;
  ops.insert(ops.begin(), index);
  Add(s, KIR_PRIM_COND, &par, ops);
}

// A bool[] from the first carry value (the loop's condition).
kir_vid Gen::Predicate(Scope &s, kir_vid v) {
  const kir_aval t = Type(s, v);
  kir_params par = Zero();
  std::vector<int> all;
  for (int i = 0; i < t.rank; i++) all.push_back(i);
  par.axes.axes = Dims(all);
  std::vector<kir_vid> out;
  if (kiln_dtype_is_bool(t.dtype)) {
    if (!Add(s, KIR_PRIM_REDUCE_OR, &par, {v}, &out)) return KIR_NO_VAR;
    return out[0];
  }
  if (!Add(s, KIR_PRIM_REDUCE_MAX, &par, {v}, &out)) return KIR_NO_VAR;
  kir_vid m = out[0];
  out.clear();
  if (!Add(s, KIR_PRIM_LT, nullptr, {m, Literal(s.p, t.dtype, Type(s, m).weak)}, &out))
    return KIR_NO_VAR;
  return out[0];
}

void Gen::While(Scope &s) {
  std::vector<kir_vid> cconsts = Operands(s, 0, 1), bconsts = Operands(s, 0, 1),
                       carry = Operands(s, 1, 2);
  std::vector<kir_aval> ctypes = TypesOf(s, cconsts), btypes = TypesOf(s, bconsts),
                        carry_t = TypesOf(s, carry);
  std::vector<kir_aval> cin = ctypes, bin = btypes;
  cin.insert(cin.end(), carry_t.begin(), carry_t.end());
  bin.insert(bin.end(), carry_t.begin(), carry_t.end());
  std::vector<kir_vid> cv, bv;
  kir_program *c = SubProgram(s, cin, Int(0, 2), &cv);
  Scope cs{c, scratch_pool_, s.depth + 1};
  kir_vid pred = Predicate(cs, cv[ctypes.size()]);
  if (pred == KIR_NO_VAR) return;
  EXPECT_EQ(kir_set_outputs(c, 1, &pred), KILN_OK);
  kir_program *b = SubProgram(s, bin, Int(0, 3), &bv);
  Scope bs{b, scratch_pool_, s.depth + 1};
  std::vector<kir_vid> outs;
  for (size_t i = btypes.size(); i < bv.size(); i++) outs.push_back(Keep(bs, bv[i]));
  EXPECT_EQ(kir_set_outputs(b, (int)outs.size(), outs.data()), KILN_OK);
  kir_params par = Zero();
  par.while_loop.cond_jaxpr = c;
  par.while_loop.body_jaxpr = b;
  par.while_loop.cond_nconsts = (int64_t)cconsts.size();
  par.while_loop.body_nconsts = (int64_t)bconsts.size();
  std::vector<kir_vid> ops = cconsts;
  ops.insert(ops.end(), bconsts.begin(), bconsts.end());
  ops.insert(ops.end(), carry.begin(), carry.end());
  Add(s, KIR_PRIM_WHILE, &par, ops);
}

void Gen::Scan(Scope &s) {
  std::vector<kir_vid> consts = Operands(s, 0, 1), carry = Operands(s, 0, 2), xs;
  int64_t length = Int(0, 4);
  for (kir_vid v : s.pool) {
    const kir_aval &t = Type(s, v);
    if (xs.empty() && t.rank >= 1 && Coin(0.3)) length = t.shape[0];
    if (xs.size() < 2 && t.rank >= 1 && t.shape[0] == length && Coin()) xs.push_back(v);
  }
  std::vector<kir_aval> in = TypesOf(s, consts), ct = TypesOf(s, carry);
  in.insert(in.end(), ct.begin(), ct.end());
  for (kir_vid v : xs) {
    const kir_aval &t = Type(s, v);
    in.push_back(kir_aval_make(t.dtype, t.rank - 1, t.shape + 1, t.weak));
  }
  std::vector<kir_vid> bv;
  kir_program *body = SubProgram(s, in, Int(0, 3), &bv);
  Scope bs{body, scratch_pool_, s.depth + 1};
  std::vector<kir_vid> outs;
  for (size_t i = 0; i < carry.size(); i++) outs.push_back(Keep(bs, bv[consts.size() + i]));
  for (int y = Int(0, 2); y > 0; y--) {
    kir_vid v = Pick(bs.pool);
    if (Type(bs, v).rank < KIR_MAX_RANK) outs.push_back(v);
  }
  EXPECT_EQ(kir_set_outputs(body, (int)outs.size(), outs.data()), KILN_OK);
  kir_params par = Zero();
  par.scan.jaxpr = body;
  par.scan.length = length;
  par.scan.num_consts = (int64_t)consts.size();
  par.scan.num_carry = (int64_t)carry.size();
  par.scan.reverse = Coin();
  std::vector<kir_vid> ops = consts;
  ops.insert(ops.end(), carry.begin(), carry.end());
  ops.insert(ops.end(), xs.begin(), xs.end());
  Add(s, KIR_PRIM_SCAN, &par, ops);
}

// A sub-program over types that returns its invars picked by `outs`.
kir_program *Gen::Passing(Scope &s, const std::vector<kir_aval> &types,
                          const std::vector<int> &outs) {
  std::vector<kir_vid> iv, ov;
  kir_program *sub = SubProgram(s, types, 0, &iv);
  for (int i : outs) ov.push_back(iv[i]);
  EXPECT_EQ(kir_set_outputs(sub, (int)ov.size(), ov.data()), KILN_OK);
  return sub;
}

// checkpoint, custom_jvp_call, custom_vjp_call, custom_lin over 1-2 args:
// each returns its first argument (checkpoint's body computes a little).
void Gen::Calls(Scope &s) {
  std::vector<kir_vid> args = Operands(s, 1, 2);
  std::vector<kir_aval> in = TypesOf(s, args), twice = in, with_ct = in;
  int n = (int)in.size();
  twice.insert(twice.end(), in.begin(), in.end());
  with_ct.push_back(in[0]);
  std::vector<int> all;
  for (int i = 0; i < n; i++) all.push_back(i);
  kir_params par = Zero();
  switch (Int(0, 3)) {
    case 0: {
      std::vector<kir_vid> bv;
      kir_program *body = SubProgram(s, in, Int(0, 2), &bv);
      Scope bs{body, scratch_pool_, s.depth + 1};
      kir_vid out = Keep(bs, bv[0]);
      EXPECT_EQ(kir_set_outputs(body, 1, &out), KILN_OK);
      par.checkpoint.jaxpr = body;
      par.checkpoint.policy = Int(0, 2);
      par.checkpoint.prevent_cse = Coin();
      Add(s, KIR_PRIM_CHECKPOINT, &par, args);
      break;
    }
    case 1:
      par.custom_jvp.call_jaxpr = Passing(s, in, {0});
      par.custom_jvp.jvp_jaxpr = Passing(s, twice, {0, n});
      Add(s, KIR_PRIM_CUSTOM_JVP_CALL, &par, args);
      break;
    case 2: {
      std::vector<int> fwd = {0};
      fwd.insert(fwd.end(), all.begin(), all.end());
      par.custom_vjp.call_jaxpr = Passing(s, in, {0});
      par.custom_vjp.fwd_jaxpr = Passing(s, in, fwd);
      par.custom_vjp.bwd_jaxpr = Passing(s, with_ct, all);
      Add(s, KIR_PRIM_CUSTOM_VJP_CALL, &par, args);
      break;
    }
    default: {
      kir_aval out = in[0];
      out.weak = false;
      par.custom_lin.bwd_jaxpr = Passing(s, with_ct, all);
      par.custom_lin.num_res = n;
      par.custom_lin.out_avals.n = 1;
      par.custom_lin.out_avals.v = &out;
      std::vector<kir_vid> ops = args;
      ops.insert(ops.end(), args.begin(), args.end());
      Add(s, KIR_PRIM_CUSTOM_LIN, &par, ops);
    }
  }
}

// A shard_map over a random mesh whose body applies collectives to a
// replicated operand (P() in, P() out: the types stay whole).
void Gen::ShardMap(Scope &s) {
  static const char *meshes[] = {"i=2", "a=2,b=3", "data=4,model=1"};
  static const char *axes[][4] = {{"i"}, {"a", "b", "a,b", "b,a"}, {"data", "model", "data,model"}};
  static const int n_axes[] = {1, 4, 3};
  static const int64_t sizes[][4] = {{2}, {2, 3, 6, 6}, {4, 1, 4}};
  int m = Int(0, 2), k = Int(0, n_axes[m] - 1);
  kir_vid x = VarIn(s, KIR_DT_NUM);
  if (x == KIR_NO_VAR) return;
  std::vector<kir_vid> bv;
  kir_program *body = SubProgram(s, {Type(s, x)}, 0, &bv);
  Scope bs{body, {bv[0]}, s.depth + 1};
  kir_params par = Zero();
  const kir_aval &t = Type(s, x);
  int64_t size = sizes[m][k];
  switch (Int(0, 5)) {
    case 0:
      par.collective = {axes[m][k], size};
      Add(bs, Pick(std::vector<kir_prim>{KIR_PRIM_PSUM, KIR_PRIM_PMAX, KIR_PRIM_PMIN}), &par, {bv[0]});
      break;
    case 1:
      par.collective = {axes[m][k], size};
      Add(bs, KIR_PRIM_AXIS_INDEX, &par, {});
      break;
    case 2:
      par.all_gather = {Int(0, t.rank), axes[m][k], size, false};
      if (t.rank < KIR_MAX_RANK) Add(bs, KIR_PRIM_ALL_GATHER, &par, {bv[0]});
      break;
    case 3:
      par.ppermute = {axes[m][k], size, size > 1 ? "((0, 1), (1, 0))" : "((0, 0),)"};
      Add(bs, KIR_PRIM_PPERMUTE, &par, {bv[0]});
      break;
    case 4:
      if (t.rank == 0 || t.shape[0] % size) break;
      par.all_to_all = {axes[m][k], size, 0, 0, true};
      Add(bs, KIR_PRIM_ALL_TO_ALL, &par, {bv[0]});
      break;
    default:
      if (t.rank == 0 || t.shape[0] % size) break;
      par.psum_scatter = {axes[m][k], size, 0, true};
      Add(bs, KIR_PRIM_PSUM_SCATTER, &par, {bv[0]});
  }
  kir_vid out = bs.pool.back();
  EXPECT_EQ(kir_set_outputs(body, 1, &out), KILN_OK);
  par = Zero();
  par.device_put = {meshes[m], ""};  // moved to P() first, as jit does for another layout
  if (k == 0 && Add(s, KIR_PRIM_DEVICE_PUT, &par, {x})) x = s.pool.back();
  par = Zero();
  par.shard_map = {Coin(), "", body, meshes[m], ""};
  Add(s, KIR_PRIM_SHARD_MAP, &par, {x});
}

void Gen::Body(Scope &s, int n_eqns) {
  for (int i = 0; i < n_eqns; i++) {
    int r = Int(0, s.depth < 2 ? 11 : 6);
    if (r <= 2) Elementwise(s);
    else if (r <= 4) Structure(s);
    else if (r == 5) Reduction(s);
    else if (r == 6) Effects(s);
    else if (r == 7) Cond(s);
    else if (r == 8) While(s);
    else if (r == 9) Calls(s);
    else if (r == 10) Scan(s);
    else ShardMap(s);
  }
}

Program Gen::Make() {
  Program prog;
  kir_program *p = nullptr;
  EXPECT_EQ(kir_program_new(&p), KILN_OK);
  prog.reset(p);
  Scope s{p, {}, 0};
  for (int i = Int(0, 2); i > 0; i--) {
    kir_aval t = Aval();
    t.weak = false;
    kir_vid v;
    EXPECT_EQ(kir_add_const(p, &t, &v), KILN_OK);
    s.pool.push_back(v);
  }
  for (int i = Int(1, 4); i > 0; i--) {
    kir_aval t = Aval();
    kir_vid v;
    EXPECT_EQ(kir_add_invar(p, &t, &v), KILN_OK);
    s.pool.push_back(v);
  }
  Body(s, Int(1, 12));
  std::vector<kir_vid> outs;
  for (int i = Int(0, 3); i > 0; i--) outs.push_back(Coin(0.1) ? Literal(p, Dtype(), Coin()) : AnyVar(s));
  EXPECT_EQ(kir_set_outputs(p, (int)outs.size(), outs.data()), KILN_OK);
  return prog;
}
}  // namespace ir_test
