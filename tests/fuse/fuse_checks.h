// The fusion planner's test harness (test_fuse_*.cc): programs built through
// the IR API (Builder), Build(), which plans a program and checks every
// invariant fuse.h promises on the plan (groups' inputs and outputs, kinds,
// placement, slots that never overlap, donation), the plan's shape and text,
// and row-wise chains (softmax, LayerNorm) built as JAX traces them.
#ifndef KILN_TESTS_FUSE_CHECKS_H
#define KILN_TESTS_FUSE_CHECKS_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fuse/fuse.h"
#include "ir/ir.h"
#include "kiln/kiln.h"
#include "support/ir_program.h"
#include "support/text.h"

namespace fuse_test {

using namespace kiln_test;

// A program under construction through the IR API.
class Builder {
 public:
  Builder() {
    kir_program *p = nullptr;
    EXPECT_EQ(kir_program_new(&p), KILN_OK) << kiln_last_error();
    p_.reset(p);
  }
  kir_program *get() const { return p_.get(); }

  kir_vid In(const char *type) {
    kir_aval a;
    EXPECT_EQ(kir_aval_parse(type, &a), KILN_OK) << type;
    kir_vid v = KIR_NO_VAR;
    EXPECT_EQ(kir_add_invar(get(), &a, &v), KILN_OK) << kiln_last_error();
    return v;
  }
  kir_vid Lit(double value, kiln_dtype dt = KILN_F32) {
    kir_vid v = KIR_NO_VAR;
    kir_scalar s = kiln_dtype_is_float(dt) ? kir_scalar_f(value) : kir_scalar_i((int64_t)value);
    EXPECT_EQ(kir_add_literal(get(), dt, false, s, &v), KILN_OK) << kiln_last_error();
    return v;
  }
  // prim(ins)[params]; all its outputs.
  std::vector<kir_vid> OpN(const char *prim, std::vector<kir_vid> ins, const char *params = "") {
    kir_prim pr = KIR_NUM_PRIMS;
    EXPECT_TRUE(kir_prim_lookup(prim, strlen(prim), &pr)) << prim;
    kir_params par;
    memset(&par, 0, sizeof par);
    EXPECT_EQ(kir_params_parse(get(), pr, params, &par), KILN_OK)
        << prim << ": " << kiln_last_error();
    return Add(pr, &par, ins);
  }
  std::vector<kir_vid> Add(kir_prim pr, const kir_params *par, std::vector<kir_vid> ins) {
    int idx = -1;
    kiln_status st = kir_add_eqn(get(), pr, par, (int)ins.size(), ins.data(), &idx);
    EXPECT_EQ(st, KILN_OK) << kir_prim_name(pr) << ": " << kiln_last_error();
    if (st != KILN_OK) return {};
    const kir_eqn &e = get()->eqns[idx];
    return std::vector<kir_vid>(e.out, e.out + e.n_out);
  }
  kir_vid Op(const char *prim, std::vector<kir_vid> ins, const char *params = "") {
    std::vector<kir_vid> outs = OpN(prim, ins, params);
    return outs.empty() ? KIR_NO_VAR : outs[0];
  }
  void Out(std::vector<kir_vid> outs) {
    ASSERT_EQ(kir_set_outputs(get(), (int)outs.size(), outs.data()), KILN_OK) << kiln_last_error();
  }

 private:
  Program p_;
};

inline kfuse_options Defaults() {
  kfuse_options o;
  kfuse_options_default(&o);
  return o;
}

// ---------------------------------------------------------------------------
// The invariants fuse.h promises, checked exhaustively on any plan.

inline const kir_aval &Aval(const kir_program *p, kir_vid v) { return p->vars[v].aval; }

inline kfuse_class Class(const kir_program *p, int eqn) { return kfuse_classify(p, &p->eqns[eqn]); }

struct Facts {
  std::vector<int> group_of;              // per equation
  std::vector<std::vector<int>> readers;  // per var: reading equations
  std::vector<std::vector<int>> users;    // per var: grouped equations reading it or an alias of it
  std::vector<kir_vid> root;              // per var: itself, or an alias's first operand
  std::vector<bool> outvar, written;
};

// A reshape, squeeze or expand_dims in no group: fuse.h's alias.
inline bool AliasPrim(kir_prim prim) {
  return prim == KIR_PRIM_RESHAPE || prim == KIR_PRIM_SQUEEZE || prim == KIR_PRIM_EXPAND_DIMS;
}

inline Facts Gather(const kir_program *p, const kfuse_plan *plan) {
  Facts f;
  f.group_of.assign(p->n_eqns, -1);
  f.readers.resize(p->n_vars);
  f.outvar.assign(p->n_vars, false);
  f.written.assign(p->n_vars, false);
  for (int gi = 0; gi < plan->n_groups; gi++) {
    const kfuse_group &g = plan->groups[gi];
    for (int i = 0; i < g.n_eqns; i++) {
      EXPECT_EQ(f.group_of[g.eqns[i]], -1) << "equation " << g.eqns[i] << " in two groups";
      f.group_of[g.eqns[i]] = gi;
      if (i > 0) {
        EXPECT_LT(g.eqns[i - 1], g.eqns[i]) << "group " << gi << " not ascending";
      }
    }
    for (int i = 0; i < g.n_out; i++) f.written[g.out[i]] = true;
  }
  for (int k = 0; k < p->n_outvars; k++) f.outvar[p->outvars[k]] = true;
  f.users.resize(p->n_vars);
  f.root.resize(p->n_vars);
  for (kir_vid v = 0; v < p->n_vars; v++) f.root[v] = v;
  for (int e = 0; e < p->n_eqns; e++) {
    const kir_eqn &q = p->eqns[e];
    for (int k = 0; k < q.n_in; k++) f.readers[q.in[k]].push_back(e);
    if (f.group_of[e] >= 0) {
      for (int k = 0; k < q.n_in; k++) f.users[f.root[q.in[k]]].push_back(e);
      continue;
    }
    kir_var_kind in = p->vars[q.in[0]].kind;
    EXPECT_TRUE(AliasPrim(q.prim) && in != KIR_VAR_CONSTVAR && in != KIR_VAR_LITERAL &&
                !f.outvar[q.out[0]])
        << "equation " << e << " (" << kir_prim_name(q.prim) << ") in no group";
    f.root[q.out[0]] = f.root[q.in[0]];
  }
  return f;
}

inline bool IsAlias(const Facts &f, kir_vid v) { return f.root[v] != v; }

// The last group reading v or an alias of it, at least `from`.
inline int LastRead(const Facts &f, kir_vid v, int from) {
  int end = from;
  for (int r : f.users[v]) end = std::max(end, f.group_of[r]);
  return end;
}

inline void CheckInOut(const kir_program *p, const kfuse_plan *plan, const Facts &f, int gi) {
  const kfuse_group &g = plan->groups[gi];
  std::vector<kir_vid> arrays, literals, outs;
  std::set<kir_vid> seen;
  for (int i = 0; i < g.n_eqns; i++) {
    const kir_eqn &e = p->eqns[g.eqns[i]];
    for (int k = 0; k < e.n_in; k++) {
      kir_vid v = e.in[k];
      const kir_var &var = p->vars[v];
      if ((var.kind == KIR_VAR_EQN && f.group_of[var.eqn] == gi) || !seen.insert(v).second)
        continue;
      (var.kind == KIR_VAR_LITERAL ? literals : arrays).push_back(v);
      const kir_var &home = p->vars[f.root[v]];
      if (home.kind == KIR_VAR_EQN) {  // topological, and materialised by its group
        int src = f.group_of[home.eqn];
        v = f.root[v];
        EXPECT_LT(src, gi) << "group " << gi << " reads v" << v << " of a later group";
        const kfuse_group &sg = plan->groups[src];
        EXPECT_TRUE(std::find(sg.out, sg.out + sg.n_out, v) != sg.out + sg.n_out)
            << "v" << v << " read by group " << gi << " but not written by group " << src;
      }
    }
    for (int k = 0; k < e.n_out; k++) {
      kir_vid x = e.out[k];
      bool elsewhere = f.readers[x].empty() || f.outvar[x] || g.kind == KFUSE_OPAQUE;
      for (int r : f.readers[x]) elsewhere = elsewhere || f.group_of[r] != gi;
      if (elsewhere) outs.push_back(x);
    }
  }
  arrays.insert(arrays.end(), literals.begin(), literals.end());
  EXPECT_EQ(std::vector<kir_vid>(g.in, g.in + g.n_in), arrays) << "inputs of group " << gi;
  EXPECT_EQ(g.n_in_literals, (int)literals.size()) << "group " << gi;
  EXPECT_EQ(std::vector<kir_vid>(g.out, g.out + g.n_out), outs) << "outputs of group " << gi;
}

inline std::vector<const kir_eqn *> Reductions(const kir_program *p, const kfuse_group &g) {
  std::vector<const kir_eqn *> r;
  for (int i = 0; i < g.n_eqns; i++)
    if (Class(p, g.eqns[i]) == KFUSE_CLASS_REDUCE) r.push_back(&p->eqns[g.eqns[i]]);
  return r;
}

inline void CheckKind(const kir_program *p, const kfuse_plan *plan, const kfuse_options &o,
                      int gi) {
  const kfuse_group &g = plan->groups[gi];
  SCOPED_TRACE("group " + std::to_string(gi) + " " + kfuse_kind_name(g.kind));
  std::vector<const kir_eqn *> red = Reductions(p, g);
  if (g.kind == KFUSE_LOOP || g.kind == KFUSE_REDUCE || g.kind == KFUSE_ROW) {
    EXPECT_LE(g.n_eqns, o.max_group_eqns);
    if (g.n_eqns > 1) {
      EXPECT_LE(g.n_in + g.n_out, o.max_group_args);
    }
    for (int i = 0; i < g.n_eqns; i++) EXPECT_TRUE(kfuse_class_fusible(Class(p, g.eqns[i])));
    ASSERT_GE(g.n_out, 1);
  }
  switch (g.kind) {
    case KFUSE_LOOP:
      EXPECT_TRUE(red.empty());
      for (int i = 0; i < g.n_out; i++)
        EXPECT_TRUE(kir_aval_same_shape(&Aval(p, g.out[i]), &Aval(p, g.out[0])));
      EXPECT_EQ(g.n_items, kir_aval_size(&Aval(p, g.out[0])));
      break;
    case KFUSE_REDUCE:
      ASSERT_FALSE(red.empty());
      for (auto *r : red) {
        EXPECT_TRUE(kir_aval_same_shape(&Aval(p, r->in[0]), &Aval(p, red[0]->in[0])));
        EXPECT_EQ(r->params.axes.axes.n, red[0]->params.axes.axes.n);
      }
      EXPECT_EQ(g.n_items, kir_aval_size(&Aval(p, red[0]->out[0])));
      if (g.n_items > 0) {
        EXPECT_EQ(g.n_items * g.row_length, kir_aval_size(&Aval(p, red[0]->in[0])));
      }
      for (int i = 0; i < g.n_out; i++) EXPECT_EQ(kir_aval_size(&Aval(p, g.out[i])), g.n_items);
      break;
    case KFUSE_ROW: {
      ASSERT_FALSE(red.empty());
      const kir_aval &t = Aval(p, red[0]->in[0]);
      EXPECT_EQ(g.row_length, t.shape[t.rank - 1]);
      EXPECT_LE(g.row_length, o.row_max_elements);
      EXPECT_TRUE(o.allow_row);
      for (auto *r : red) {
        EXPECT_TRUE(kir_aval_same_shape(&Aval(p, r->in[0]), &t));
        ASSERT_EQ(r->params.axes.axes.n, 1);
        EXPECT_EQ(r->params.axes.axes.v[0], t.rank - 1);
      }
      for (int i = 0; i < g.n_out; i++) {
        const kir_aval &a = Aval(p, g.out[i]);
        EXPECT_TRUE(kir_aval_size(&a) == g.n_items || kir_aval_same_shape(&a, &t))
            << "output v" << g.out[i];
      }
      break;
    }
    case KFUSE_DOT: {
      int dots = 0;
      for (int i = 0; i < g.n_eqns; i++) dots += p->eqns[g.eqns[i]].prim == KIR_PRIM_DOT_GENERAL;
      EXPECT_EQ(dots, 1);
      int expect = g.epilogue == KFUSE_EPILOGUE_NONE   ? 1
                   : g.epilogue == KFUSE_EPILOGUE_BIAS ? 3
                                                       : 4;
      EXPECT_EQ(g.n_eqns, expect);
      if (g.epilogue != KFUSE_EPILOGUE_NONE) {
        EXPECT_EQ(g.n_out, 1);
        EXPECT_TRUE(std::find(g.in, g.in + g.n_in, g.bias) != g.in + g.n_in);
      }
      break;
    }
    case KFUSE_OPAQUE: EXPECT_EQ(g.n_eqns, 1); break;
  }
}

inline void CheckPlaces(const kir_program *p, const kfuse_plan *plan, const Facts &f) {
  ASSERT_EQ(plan->n_places, p->n_vars);
  for (kir_vid v = 0; v < p->n_vars; v++) {
    kfuse_place pl = plan->places[v];
    const kir_var &var = p->vars[v];
    int first_out = -1;
    for (int k = p->n_outvars - 1; k >= 0; k--)
      if (p->outvars[k] == v) first_out = k;
    if (IsAlias(f, v)) {
      EXPECT_EQ(pl.home, plan->places[f.root[v]].home) << "alias v" << v;
      EXPECT_EQ(pl.index, plan->places[f.root[v]].index) << "alias v" << v;
    } else if (var.kind == KIR_VAR_INVAR) {
      EXPECT_EQ(pl.home, KFUSE_HOME_INPUT);
      EXPECT_EQ(p->invars[pl.index], v);
    } else if (var.kind == KIR_VAR_CONSTVAR || var.kind == KIR_VAR_LITERAL) {
      EXPECT_EQ(pl.home, KFUSE_HOME_CONST);
      EXPECT_EQ(pl.index, v);
    } else if (first_out >= 0) {
      EXPECT_EQ(pl.home, KFUSE_HOME_OUTPUT);
      EXPECT_EQ(pl.index, first_out);
    } else if (f.written[v]) {
      EXPECT_EQ(pl.home, KFUSE_HOME_SLOT) << "v" << v;
    } else {
      EXPECT_EQ(pl.home, KFUSE_HOME_NONE) << "v" << v;
    }
  }
}

inline size_t Bytes(const kir_aval &a) {
  return (size_t)kir_aval_size(&a) * kiln_dtype_size(a.dtype);
}

// Every pair of values sharing a slot, against each other: no overlap.
inline void CheckSlots(const kir_program *p, const kfuse_plan *plan, const Facts &f) {
  std::vector<std::vector<kir_vid>> members(plan->n_slots);
  for (kir_vid v = 0; v < p->n_vars; v++) {
    if (plan->places[v].home != KFUSE_HOME_SLOT || IsAlias(f, v)) continue;
    ASSERT_GE(plan->places[v].index, 0);
    ASSERT_LT(plan->places[v].index, plan->n_slots);
    members[plan->places[v].index].push_back(v);
  }
  size_t sum = 0;
  for (int s = 0; s < plan->n_slots; s++) {
    ASSERT_FALSE(members[s].empty()) << "slot " << s << " holds nothing";
    size_t biggest = 0;
    for (size_t a = 0; a < members[s].size(); a++) {
      kir_vid x = members[s][a];
      biggest = std::max(biggest, Bytes(Aval(p, x)));
      int xs = f.group_of[p->vars[x].eqn], xe = LastRead(f, x, xs);
      for (size_t b = a + 1; b < members[s].size(); b++) {
        kir_vid y = members[s][b];
        int ys = f.group_of[p->vars[y].eqn], ye = LastRead(f, y, ys);
        EXPECT_TRUE(xe < ys || ye < xs) << "slot " << s << ": v" << x << " [g" << xs << ", g" << xe
                                        << "] overlaps v" << y << " [g" << ys << ", g" << ye << "]";
      }
    }
    EXPECT_EQ(plan->slot_bytes[s], biggest);
    EXPECT_EQ(plan->slot_offset[s] % KFUSE_SLOT_ALIGN, 0u);
    size_t next = s + 1 < plan->n_slots ? plan->slot_offset[s + 1] : plan->arena_bytes;
    EXPECT_LE(plan->slot_offset[s] + plan->slot_bytes[s], next);
    sum += plan->slot_bytes[s];
  }
  EXPECT_EQ(plan->temp_bytes, sum);
}

// Value x of group gi: computed only at each work item's own element
// (every read of it in the group an identity edge from such a value).
inline bool AtItem(const kir_program *p, const Facts &f, int gi, kir_vid x,
                   std::map<kir_vid, bool> &memo) {
  auto it = memo.find(x);
  if (it != memo.end()) return it->second;
  bool ok = true;
  for (int e : f.readers[x]) {
    if (f.group_of[e] != gi) continue;
    const kir_eqn &q = p->eqns[e];
    for (int k = 0; k < q.n_in; k++)
      if (q.in[k] == x && !(kfuse_edge_identity(p, &q, k) && AtItem(p, f, gi, q.out[0], memo)))
        ok = false;
  }
  return memo[x] = ok;
}

// Whether value x of group gi feeds `to` inside the group (or is it).
inline bool Feeds(const kir_program *p, const Facts &f, int gi, kir_vid x, kir_vid to,
                  std::set<kir_vid> &seen) {
  if (x == to) return true;
  if (!seen.insert(x).second) return false;
  for (int e : f.readers[x])
    if (f.group_of[e] == gi && Feeds(p, f, gi, p->eqns[e].out[0], to, seen)) return true;
  return false;
}

// An output written over the donated input its own group reads: a LOOP,
// and every read of it or of an alias of it there at the item's own
// element by an equation feeding the output (each item loads, then stores).
inline void CheckInPlace(const kir_program *p, const kfuse_plan *plan, const Facts &f, int gi,
                         kir_vid in, kir_vid out) {
  EXPECT_EQ(plan->groups[gi].kind, KFUSE_LOOP) << "in place outside a LOOP";
  for (int e : f.users[in]) {
    if (f.group_of[e] != gi) continue;
    const kir_eqn &q = p->eqns[e];
    for (int k = 0; k < q.n_in; k++)
      if (f.root[q.in[k]] == in) {
        EXPECT_TRUE(kfuse_edge_identity(p, &q, k)) << "equation " << e << " reads elsewhere";
      }
    std::map<kir_vid, bool> memo;
    std::set<kir_vid> seen;
    EXPECT_TRUE(AtItem(p, f, gi, q.out[0], memo)) << "equation " << e << " off the item";
    EXPECT_TRUE(Feeds(p, f, gi, q.out[0], out, seen)) << "equation " << e << " not feeding it";
  }
}

inline void CheckDonors(const kir_program *p, const kfuse_plan *plan, const Facts &f,
                        const bool *donated) {
  ASSERT_EQ(plan->n_outputs, p->n_outvars);
  std::set<int> used;
  for (int k = 0; k < p->n_outvars; k++) {
    int j = plan->output_donor[k];
    if (j < 0) continue;
    ASSERT_TRUE(donated && donated[j]);
    EXPECT_TRUE(used.insert(j).second) << "input " << j << " donated twice";
    kir_vid out = p->outvars[k], in = p->invars[j];
    EXPECT_TRUE(kir_aval_typematch(&Aval(p, out), &Aval(p, in)));
    EXPECT_FALSE(f.outvar[in]);
    ASSERT_EQ(p->vars[out].kind, KIR_VAR_EQN);
    EXPECT_EQ(plan->places[out].index, k);
    int made = f.group_of[p->vars[out].eqn];
    EXPECT_LE(LastRead(f, in, -1), made);
    if (LastRead(f, in, -1) == made) CheckInPlace(p, plan, f, made, in, out);
  }
}

inline void CheckPlan(const kir_program *p, const kfuse_plan *plan, const kfuse_options &o,
                      const bool *donated = nullptr) {
  Facts f = Gather(p, plan);
  if (::testing::Test::HasFailure()) return;
  if (!o.fuse) {  // one group per equation that is no alias, in order
    int gi = 0;
    for (int e = 0; e < p->n_eqns; e++)
      if (f.group_of[e] >= 0) {
        EXPECT_EQ(f.group_of[e], gi++);
      }
    ASSERT_EQ(plan->n_groups, gi);
  }
  int last_effect = -1;
  for (int e = 0; e < p->n_eqns; e++) {
    if (!kir_eqn_has_effect(&p->eqns[e])) continue;
    EXPECT_GT(f.group_of[e], last_effect) << "effects out of program order";
    last_effect = f.group_of[e];
  }
  for (int gi = 0; gi < plan->n_groups; gi++) {
    CheckInOut(p, plan, f, gi);
    CheckKind(p, plan, o, gi);
  }
  CheckPlaces(p, plan, f);
  CheckSlots(p, plan, f);
  CheckDonors(p, plan, f, donated);
}

inline Plan Build(const kir_program *p, const kfuse_options &o, const bool *donated = nullptr) {
  kfuse_plan *plan = nullptr;
  kiln_status st = kfuse_plan_build(p, &o, donated, &plan);
  EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  if (plan) CheckPlan(p, plan, o, donated);
  return Plan(plan);
}

inline Plan Build(const Builder &b, const kfuse_options &o = Defaults(),
                  const bool *donated = nullptr) {
  return Build(b.get(), o, donated);
}

// "LOOP(exp neg) OPAQUE(sort)": kinds and primitives, group by group.
inline std::string Shape(const kir_program *p, const kfuse_plan *plan) {
  std::string s;
  for (int gi = 0; gi < plan->n_groups; gi++) {
    const kfuse_group &g = plan->groups[gi];
    s += (gi ? " " : "") + std::string(kfuse_kind_name(g.kind)) + "(";
    for (int i = 0; i < g.n_eqns; i++)
      s += (i ? " " : "") + std::string(kir_prim_name(p->eqns[g.eqns[i]].prim));
    s += ")";
  }
  return s;
}

inline std::string Text(const kir_program *p, const kfuse_plan *plan) {
  char *text = nullptr;
  EXPECT_EQ(kfuse_plan_print(plan, p, &text), KILN_OK) << kiln_last_error();
  std::string s = text ? text : "";
  free(text);
  return s;
}

inline int GroupOf(const kfuse_plan *plan, kir_vid v, const kir_program *p) {
  for (int gi = 0; gi < plan->n_groups; gi++)
    for (int i = 0; i < plan->groups[gi].n_eqns; i++)
      if (plan->groups[gi].eqns[i] == p->vars[v].eqn) return gi;
  return -1;
}

inline std::vector<kir_vid> Ins(const kfuse_group &g) {
  return std::vector<kir_vid>(g.in, g.in + g.n_in);
}
inline std::vector<kir_vid> Outs(const kfuse_group &g) {
  return std::vector<kir_vid>(g.out, g.out + g.n_out);
}

// ---------------------------------------------------------------------------
// Row-wise chains, built as JAX traces them (explicit broadcast_in_dim).

// f32[4] -> f32[4,8] along rows; f32[8] -> f32[4,8] per column; the last axis.
constexpr const char *kRow = "shape=(4, 8) broadcast_dimensions=(0,)";
constexpr const char *kCol = "shape=(4, 8) broadcast_dimensions=(1,)";
constexpr const char *kLast = "axes=(1,)";

inline kir_vid Softmax(Builder &b, kir_vid x) {
  kir_vid m = b.Op("reduce_max", {x}, kLast);
  kir_vid d = b.Op("sub", {x, b.Op("broadcast_in_dim", {m}, kRow)});
  kir_vid e = b.Op("exp", {d});
  kir_vid s = b.Op("reduce_sum", {e}, kLast);
  return b.Op("div", {e, b.Op("broadcast_in_dim", {s}, kRow)});
}

inline kir_vid Mean(Builder &b, kir_vid x) {
  return b.Op("div", {b.Op("reduce_sum", {x}, kLast), b.Lit(8.0)});
}

inline kir_vid LayerNorm(Builder &b, kir_vid x, kir_vid gamma, kir_vid beta) {
  kir_vid c = b.Op("sub", {x, b.Op("broadcast_in_dim", {Mean(b, x)}, kRow)});
  kir_vid var = Mean(b, b.Op("mul", {c, c}));
  kir_vid r = b.Op("rsqrt", {b.Op("add", {var, b.Lit(1e-5)})});
  kir_vid n = b.Op("mul", {c, b.Op("broadcast_in_dim", {r}, kRow)});
  kir_vid ng = b.Op("mul", {n, b.Op("broadcast_in_dim", {gamma}, kCol)});
  return b.Op("add", {ng, b.Op("broadcast_in_dim", {beta}, kCol)});
}

// A dot_general of two matrices.
constexpr const char *kMatmul = "dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=None";

}  // namespace fuse_test

#endif  // KILN_TESTS_FUSE_CHECKS_H
