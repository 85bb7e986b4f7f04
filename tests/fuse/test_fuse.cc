// The fusion planner and the memory planner (src/fuse): loops, row-wise
// chains (softmax, norms and their backward passes), reductions with
// producers and epilogues, dot epilogues, cuts, the cost rule, multi-output
// loops, slots and donation, the unfused baseline, the printed plan, and
// every invariant of fuse.h checked over random programs.
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

namespace {

struct ProgramFree {
  void operator()(kir_program *p) const { kir_program_free(p); }
};
using Program = std::unique_ptr<kir_program, ProgramFree>;

struct PlanFree {
  void operator()(kfuse_plan *p) const { kfuse_plan_free(p); }
};
using Plan = std::unique_ptr<kfuse_plan, PlanFree>;

bool Contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

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

kfuse_options Defaults() {
  kfuse_options o;
  kfuse_options_default(&o);
  return o;
}

// ---------------------------------------------------------------------------
// The invariants fuse.h promises, checked exhaustively on any plan.

const kir_aval &Aval(const kir_program *p, kir_vid v) { return p->vars[v].aval; }

kfuse_class Class(const kir_program *p, int eqn) { return kfuse_classify(p, &p->eqns[eqn]); }

struct Facts {
  std::vector<int> group_of;              // per equation
  std::vector<std::vector<int>> readers;  // per var: reading equations
  std::vector<std::vector<int>> users;    // per var: grouped equations reading it or an alias of it
  std::vector<kir_vid> root;              // per var: itself, or an alias's first operand
  std::vector<bool> outvar, written;
};

// A reshape, squeeze or expand_dims in no group: fuse.h's alias.
bool AliasPrim(kir_prim prim) {
  return prim == KIR_PRIM_RESHAPE || prim == KIR_PRIM_SQUEEZE || prim == KIR_PRIM_EXPAND_DIMS;
}

Facts Gather(const kir_program *p, const kfuse_plan *plan) {
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

bool IsAlias(const Facts &f, kir_vid v) { return f.root[v] != v; }

// The last group reading v or an alias of it, at least `from`.
int LastRead(const Facts &f, kir_vid v, int from) {
  int end = from;
  for (int r : f.users[v]) end = std::max(end, f.group_of[r]);
  return end;
}

void CheckInOut(const kir_program *p, const kfuse_plan *plan, const Facts &f, int gi) {
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

std::vector<const kir_eqn *> Reductions(const kir_program *p, const kfuse_group &g) {
  std::vector<const kir_eqn *> r;
  for (int i = 0; i < g.n_eqns; i++)
    if (Class(p, g.eqns[i]) == KFUSE_CLASS_REDUCE) r.push_back(&p->eqns[g.eqns[i]]);
  return r;
}

void CheckKind(const kir_program *p, const kfuse_plan *plan, const kfuse_options &o, int gi) {
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

void CheckPlaces(const kir_program *p, const kfuse_plan *plan, const Facts &f) {
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

size_t Bytes(const kir_aval &a) { return (size_t)kir_aval_size(&a) * kiln_dtype_size(a.dtype); }

// Every pair of values sharing a slot, against each other: no overlap.
void CheckSlots(const kir_program *p, const kfuse_plan *plan, const Facts &f) {
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
bool AtItem(const kir_program *p, const Facts &f, int gi, kir_vid x,
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
bool Feeds(const kir_program *p, const Facts &f, int gi, kir_vid x, kir_vid to,
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
void CheckInPlace(const kir_program *p, const kfuse_plan *plan, const Facts &f, int gi,
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

void CheckDonors(const kir_program *p, const kfuse_plan *plan, const Facts &f,
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

void CheckPlan(const kir_program *p, const kfuse_plan *plan, const kfuse_options &o,
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

Plan Build(const kir_program *p, const kfuse_options &o, const bool *donated = nullptr) {
  kfuse_plan *plan = nullptr;
  kiln_status st = kfuse_plan_build(p, &o, donated, &plan);
  EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  if (plan) CheckPlan(p, plan, o, donated);
  return Plan(plan);
}

Plan Build(const Builder &b, const kfuse_options &o = Defaults(), const bool *donated = nullptr) {
  return Build(b.get(), o, donated);
}

// "LOOP(exp neg) OPAQUE(sort)": kinds and primitives, group by group.
std::string Shape(const kir_program *p, const kfuse_plan *plan) {
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

std::string Text(const kir_program *p, const kfuse_plan *plan) {
  char *text = nullptr;
  EXPECT_EQ(kfuse_plan_print(plan, p, &text), KILN_OK) << kiln_last_error();
  std::string s = text ? text : "";
  free(text);
  return s;
}

int GroupOf(const kfuse_plan *plan, kir_vid v, const kir_program *p) {
  for (int gi = 0; gi < plan->n_groups; gi++)
    for (int i = 0; i < plan->groups[gi].n_eqns; i++)
      if (plan->groups[gi].eqns[i] == p->vars[v].eqn) return gi;
  return -1;
}

std::vector<kir_vid> Ins(const kfuse_group &g) { return std::vector<kir_vid>(g.in, g.in + g.n_in); }
std::vector<kir_vid> Outs(const kfuse_group &g) {
  return std::vector<kir_vid>(g.out, g.out + g.n_out);
}

// ---------------------------------------------------------------------------
// Row-wise chains, built as JAX traces them (explicit broadcast_in_dim).

const char *kRow = "shape=(4, 8) broadcast_dimensions=(0,)";  // f32[4] -> f32[4,8] along rows
const char *kCol = "shape=(4, 8) broadcast_dimensions=(1,)";  // f32[8] -> f32[4,8] per column
const char *kLast = "axes=(1,)";

kir_vid Softmax(Builder &b, kir_vid x) {
  kir_vid m = b.Op("reduce_max", {x}, kLast);
  kir_vid d = b.Op("sub", {x, b.Op("broadcast_in_dim", {m}, kRow)});
  kir_vid e = b.Op("exp", {d});
  kir_vid s = b.Op("reduce_sum", {e}, kLast);
  return b.Op("div", {e, b.Op("broadcast_in_dim", {s}, kRow)});
}

kir_vid Mean(Builder &b, kir_vid x) {
  return b.Op("div", {b.Op("reduce_sum", {x}, kLast), b.Lit(8.0)});
}

kir_vid LayerNorm(Builder &b, kir_vid x, kir_vid gamma, kir_vid beta) {
  kir_vid c = b.Op("sub", {x, b.Op("broadcast_in_dim", {Mean(b, x)}, kRow)});
  kir_vid var = Mean(b, b.Op("mul", {c, c}));
  kir_vid r = b.Op("rsqrt", {b.Op("add", {var, b.Lit(1e-5)})});
  kir_vid n = b.Op("mul", {c, b.Op("broadcast_in_dim", {r}, kRow)});
  kir_vid ng = b.Op("mul", {n, b.Op("broadcast_in_dim", {gamma}, kCol)});
  return b.Op("add", {ng, b.Op("broadcast_in_dim", {beta}, kCol)});
}

TEST(FuseLoop, ElementwiseChainIsOneLoop) {
  Builder b;
  kir_vid x = b.In("f32[16,32]"), y = b.In("f32[16,32]");
  kir_vid v = b.Op("neg", {x});
  v = b.Op("exp", {v});
  v = b.Op("add", {v, y});
  v = b.Op("mul", {v, b.Lit(0.5)});
  v = b.Op("tanh", {v});
  v = b.Op("max", {v, x});
  v = b.Op("select_n", {b.Op("gt", {v, y}), v, y});
  v = b.Op("convert_element_type", {v}, "new_dtype=float16 weak_type=False");
  b.Out({v});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(neg exp add mul tanh max gt select_n convert_element_type)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 16 * 32);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{x, y, b.get()->eqns[3].in[1]}));
  EXPECT_EQ(g.n_in_literals, 1);
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{v});
  EXPECT_EQ(plan->n_slots, 0);
  EXPECT_EQ(plan->places[b.get()->eqns[2].out[0]].home, KFUSE_HOME_NONE);
  EXPECT_EQ(plan->places[v].home, KFUSE_HOME_OUTPUT);
}

TEST(FuseLoop, BroadcastsReshapesTransposesFuse) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), col = b.In("f32[8]"), row = b.In("f32[4]"), s = b.In("f32[]");
  kir_vid t = b.Op("transpose", {b.Op("reshape", {x}, "new_sizes=(8, 4)")}, "permutation=(1, 0)");
  kir_vid v = b.Op("add", {t, b.Op("broadcast_in_dim", {col}, kCol)});
  v = b.Op("mul", {v, b.Op("broadcast_in_dim", {row}, kRow)});
  v = b.Op("sub", {v, s});  // lax's implicit broadcast of a rank-0 operand
  kir_vid io = b.Op("iota", {}, "dimension=1 dtype=float32 shape=(4, 8)");
  v = b.Op("add", {v, b.Op("rev", {io}, "dimensions=(1,)")});
  kir_vid k = b.Op("expand_dims",
                   {b.Op("slice", {row}, "start_indices=(0,) limit_indices=(4,) strides=(1,)")},
                   "dimensions=(1,)");
  v = b.Op("mul", {v, k});  // [4,8] * [4,1]: implicit size-1 broadcast
  v = b.Op("squeeze", {b.Op("reshape", {v}, "new_sizes=(1, 4, 8)")}, "dimensions=(0,)");
  b.Out({v});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_LOOP);
  EXPECT_EQ(plan->groups[0].n_eqns, b.get()->n_eqns);
  EXPECT_EQ(Ins(plan->groups[0]), (std::vector<kir_vid>{x, col, row, s}));
}

TEST(FuseRow, SoftmaxIsOneRowGroup) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid y = Softmax(b, x);
  b.Out({y});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "ROW(reduce_max broadcast_in_dim sub exp reduce_sum broadcast_in_dim div)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 4);
  EXPECT_EQ(g.row_length, 8);
  EXPECT_EQ(Ins(g), std::vector<kir_vid>{x});
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{y});
  EXPECT_EQ(plan->n_slots, 0);
}

TEST(FuseRow, SoftmaxWithKeepdimsAndImplicitBroadcast) {
  Builder b;
  kir_vid x = b.In("f32[2,3,16]");
  const char *axes = "axes=(2,)", *keep = "dimensions=(2,)";
  kir_vid m = b.Op("expand_dims", {b.Op("reduce_max", {x}, axes)}, keep);  // [2,3,1]
  kir_vid e = b.Op("exp", {b.Op("sub", {x, m})});
  kir_vid s = b.Op("expand_dims", {b.Op("reduce_sum", {e}, axes)}, keep);
  kir_vid y = b.Op("div", {e, s});
  b.Out({y, s});  // the per-row sums are an output too
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[0].n_items, 6);
  EXPECT_EQ(plan->groups[0].row_length, 16);
  EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{s, y}));
}

TEST(FuseRow, LayerNormAndRmsNormAreOneRowGroupEach) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), gamma = b.In("f32[8]"), beta = b.In("f32[8]");
  kir_vid ln = LayerNorm(b, x, gamma, beta);
  int ln_eqns = b.get()->n_eqns;
  // RMSnorm of a different tensor.
  kir_vid z = b.In("f32[4,8]");
  kir_vid ms = Mean(b, b.Op("mul", {z, z}));
  kir_vid r = b.Op("rsqrt", {b.Op("add", {ms, b.Lit(1e-6)})});
  kir_vid n = b.Op("mul", {z, b.Op("broadcast_in_dim", {r}, kRow)});
  kir_vid rms = b.Op("mul", {n, b.Op("broadcast_in_dim", {gamma}, kCol)});
  b.Out({ln, rms});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  int g_ln = GroupOf(plan.get(), ln, b.get()), g_rms = GroupOf(plan.get(), rms, b.get());
  ASSERT_NE(g_ln, g_rms);
  EXPECT_EQ(plan->groups[g_ln].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[g_ln].n_eqns, ln_eqns);
  std::vector<kir_vid> ins = Ins(plan->groups[g_ln]);
  ins.resize((size_t)(plan->groups[g_ln].n_in - plan->groups[g_ln].n_in_literals));
  EXPECT_EQ(ins, (std::vector<kir_vid>{x, gamma, beta}));
  EXPECT_EQ(plan->groups[g_ln].n_in_literals, 3);  // 8.0 twice and the epsilon
  EXPECT_EQ(plan->groups[g_rms].kind, KFUSE_ROW);
  EXPECT_EQ(plan->groups[g_rms].n_eqns, b.get()->n_eqns - ln_eqns);
  EXPECT_EQ(plan->n_slots, 0);
}

TEST(FuseRow, LogSoftmaxIsOneRowGroup) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid d = b.Op("sub", {x, b.Op("broadcast_in_dim", {b.Op("reduce_max", {x}, kLast)}, kRow)});
  kir_vid lse = b.Op("log", {b.Op("reduce_sum", {b.Op("exp", {d})}, kLast)});
  kir_vid y = b.Op("sub", {d, b.Op("broadcast_in_dim", {lse}, kRow)});
  b.Out({y});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "ROW(reduce_max broadcast_in_dim sub exp reduce_sum log broadcast_in_dim sub)");
}

TEST(FuseRow, SoftmaxBackwardIsOneRowGroup) {
  Builder b;
  kir_vid y = b.In("f32[4,8]"), g = b.In("f32[4,8]");
  kir_vid s = b.Op("reduce_sum", {b.Op("mul", {g, y})}, kLast);
  kir_vid dx = b.Op("mul", {y, b.Op("sub", {g, b.Op("broadcast_in_dim", {s}, kRow)})});
  b.Out({dx});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "ROW(mul reduce_sum broadcast_in_dim sub mul)");
}

TEST(FuseRow, LayerNormBackwardKeepsRowsTogether) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), dy = b.In("f32[4,8]"), gamma = b.In("f32[8]");
  kir_vid c = b.Op("sub", {x, b.Op("broadcast_in_dim", {Mean(b, x)}, kRow)});
  kir_vid rstd = b.Op("rsqrt", {b.Op("add", {Mean(b, b.Op("mul", {c, c})), b.Lit(1e-5)})});
  kir_vid rb = b.Op("broadcast_in_dim", {rstd}, kRow);
  kir_vid xhat = b.Op("mul", {c, rb});
  kir_vid g = b.Op("mul", {dy, b.Op("broadcast_in_dim", {gamma}, kCol)});
  kir_vid m1 = b.Op("broadcast_in_dim", {Mean(b, g)}, kRow);
  kir_vid m2 = b.Op("broadcast_in_dim", {Mean(b, b.Op("mul", {g, xhat}))}, kRow);
  kir_vid t = b.Op("sub", {b.Op("sub", {g, m1}), b.Op("mul", {xhat, m2})});
  kir_vid dx = b.Op("mul", {rb, t});
  kir_vid dgamma = b.Op("reduce_sum", {b.Op("mul", {dy, xhat})}, "axes=(0,)");
  kir_vid dbeta = b.Op("reduce_sum", {dy}, "axes=(0,)");
  b.Out({dx, dgamma, dbeta});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  int row = GroupOf(plan.get(), dx, b.get());
  ASSERT_EQ(plan->groups[row].kind, KFUSE_ROW) << Shape(b.get(), plan.get());
  // Every last-axis reduction is in the ROW group; the column sums form
  // one REDUCE group with two reductions.
  for (int e = 0; e < b.get()->n_eqns; e++) {
    const kir_eqn &q = b.get()->eqns[e];
    if (q.prim == KIR_PRIM_REDUCE_SUM && q.params.axes.axes.v[0] == 1) {
      EXPECT_EQ(GroupOf(plan.get(), q.out[0], b.get()), row) << "equation " << e;
    }
  }
  // The column sums (over axis 0) are REDUCE groups of their own: the ROW
  // group writes dy * xhat for dgamma, dbeta reads dy.
  for (kir_vid v : {dgamma, dbeta}) {
    const kfuse_group &g = plan->groups[GroupOf(plan.get(), v, b.get())];
    EXPECT_EQ(g.kind, KFUSE_REDUCE);
    EXPECT_EQ(g.n_items, 8);
    EXPECT_EQ(g.row_length, 4);
  }
  EXPECT_EQ(plan->n_groups, 3) << Shape(b.get(), plan.get());
}

TEST(FuseRow, LimitsAndSwitch) {
  for (int variant = 0; variant < 2; variant++) {
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    b.Out({Softmax(b, x)});
    kfuse_options o = Defaults();
    if (variant == 0)
      o.row_max_elements = 4;  // rows of 8 do not fit
    else
      o.allow_row = false;
    Plan plan = Build(b, o);
    ASSERT_TRUE(plan);
    // Without ROW the reductions stand alone: each is read again after its
    // broadcast, which a REDUCE epilogue cannot express.
    EXPECT_EQ(Shape(b.get(), plan.get()),
              "REDUCE(reduce_max) LOOP(broadcast_in_dim sub exp) REDUCE(reduce_sum) "
              "LOOP(broadcast_in_dim div)");
  }
}

TEST(FuseRow, ResidualAddJoinsTheNormAndStaysAnOutput) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), h = b.In("f32[4,8]"), gamma = b.In("f32[8]"), beta = b.In("f32[8]");
  kir_vid res = b.Op("add", {x, h});
  kir_vid y = LayerNorm(b, res, gamma, beta);
  kir_vid after = b.Op("sort", {res}, "dimension=1 is_stable=True num_keys=1");
  b.Out({y, after});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  EXPECT_EQ(plan->groups[0].kind, KFUSE_ROW);
  EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{res, y}));
  EXPECT_EQ(plan->places[res].home, KFUSE_HOME_SLOT);
}

// ---------------------------------------------------------------------------
// Reductions and dots

TEST(FuseReduce, ProducersAndEpilogueShareTheReduction) {
  Builder b;
  kir_vid x = b.In("f32[16,8]"), scale = b.In("f32[8]"), bias = b.In("f32[8]");
  kir_vid w = b.Op("mul", {b.Op("exp", {x}), b.Op("broadcast_in_dim", {scale},
                                                  "shape=(16, 8) broadcast_dimensions=(1,)")});
  kir_vid s = b.Op("reduce_sum", {w}, "axes=(0,)");
  kir_vid o = b.Op("add", {b.Op("sqrt", {s}), bias});
  b.Out({o});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "REDUCE(exp broadcast_in_dim mul reduce_sum sqrt add)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.n_items, 8);
  EXPECT_EQ(g.row_length, 16);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{x, scale, bias}));
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{o});
}

TEST(FuseReduce, SiblingReductionsShareOneGroupAndProducersStayInternal) {
  Builder b;
  kir_vid x = b.In("f32[6,5,4]");
  kir_vid sq = b.Op("mul", {x, x});
  kir_vid s1 = b.Op("reduce_sum", {x}, "axes=(0, 2)");
  kir_vid s2 = b.Op("reduce_sum", {sq}, "axes=(0, 2)");
  kir_vid mx = b.Op("reduce_max", {x}, "axes=(0, 2)");
  kir_vid other = b.Op("reduce_sum", {x}, "axes=(0,)");  // different axes: its own group
  b.Out({s1, s2, mx, other});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 2) << Shape(b.get(), plan.get());
  int g = GroupOf(plan.get(), s1, b.get());
  EXPECT_EQ(GroupOf(plan.get(), s2, b.get()), g);
  EXPECT_EQ(GroupOf(plan.get(), mx, b.get()), g);
  EXPECT_EQ(plan->groups[g].kind, KFUSE_REDUCE);
  EXPECT_EQ(plan->groups[g].n_items, 5);
  EXPECT_EQ(plan->groups[g].row_length, 24);
  EXPECT_EQ(plan->places[sq].home, KFUSE_HOME_NONE);
}

TEST(FuseReduce, ProducerValueUsedElsewhereIsMaterialised) {
  Builder b;
  kir_vid x = b.In("f32[16,8]");
  kir_vid e = b.Op("exp", {x});
  kir_vid s = b.Op("reduce_sum", {e}, "axes=(0,)");
  kir_vid srt = b.Op("sort", {e}, "dimension=0 is_stable=True num_keys=1");
  b.Out({s, srt});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) REDUCE(reduce_sum) OPAQUE(sort)");
  EXPECT_EQ(plan->places[e].home, KFUSE_HOME_SLOT);
}

const char *kMatmul = "dimension_numbers=(([1], [0]), ([], [])) preferred_element_type=None";

// A reshape, squeeze or expand_dims alone in its group runs nothing: its
// result is its operand's bytes in place (pmap's squeeze of a parameter
// before a matmul, a reshape between two opaque steps).
TEST(FuseAlias, ALoneReshapeTakesItsOperandsPlace) {
  {  // of an input, read by a matmul
    Builder b;
    kir_vid x = b.In("f32[1,4,16]"), w = b.In("f32[16,8]");
    kir_vid sq = b.Op("squeeze", {x}, "dimensions=(0,)");
    kir_vid d = b.Op("dot_general", {sq, w}, kMatmul);
    b.Out({d});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general)");
    EXPECT_EQ(plan->places[sq].home, KFUSE_HOME_INPUT);
    EXPECT_EQ(plan->places[sq].index, 0);
  }
  {  // a chain over a temporary, which lives until the chain's last reader
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid e = b.Op("exp", {x});
    kir_vid srt = b.Op("sort", {e}, "dimension=1 is_stable=True num_keys=1");
    kir_vid r = b.Op("expand_dims", {b.Op("reshape", {e}, "new_sizes=(32,)")}, "dimensions=(0,)");
    kir_vid s2 = b.Op("sort", {r}, "dimension=1 is_stable=True num_keys=1");
    b.Out({srt, s2});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) OPAQUE(sort) OPAQUE(sort)");
    ASSERT_EQ(plan->places[r].home, KFUSE_HOME_SLOT);
    EXPECT_EQ(plan->places[r].index, plan->places[e].index);
  }
  {  // a result the program returns is written to its own buffer
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid r = b.Op("reshape", {x}, "new_sizes=(32,)");
    b.Out({r});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(reshape)");
    EXPECT_EQ(plan->places[r].home, KFUSE_HOME_OUTPUT);
  }
  {  // an input donated to an output is not taken while an alias is still read
    Builder b;
    kir_vid x = b.In("f32[64]"), w = b.In("f32[16,4]");
    kir_vid n = b.Op("neg", {x});
    kir_vid r = b.Op("reshape", {x}, "new_sizes=(4, 16)");
    kir_vid d = b.Op("dot_general", {r, w}, kMatmul);
    b.Out({n, d});
    bool donated[2] = {true, false};
    Plan plan = Build(b.get(), Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->places[r].home, KFUSE_HOME_INPUT);
    int made = GroupOf(plan.get(), n, b.get()), read = GroupOf(plan.get(), d, b.get());
    EXPECT_EQ(plan->output_donor[0], made > read ? 0 : -1);
  }
}

TEST(FuseDot, BiasAndReluJoinTheDot) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)});
  kir_vid zero = b.Lit(0.0);
  kir_vid r = b.Op("max", {s, zero});
  b.Out({r});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general broadcast_in_dim add max)");
  const kfuse_group &g = plan->groups[0];
  EXPECT_EQ(g.epilogue, KFUSE_EPILOGUE_BIAS_RELU);
  EXPECT_EQ(g.bias, bias);
  EXPECT_EQ(Ins(g), (std::vector<kir_vid>{a, w, bias, zero}));
  EXPECT_EQ(Outs(g), std::vector<kir_vid>{r});
}

TEST(FuseDot, BiasOnlyThenActivationLoop) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid bb = b.Op("broadcast_in_dim", {bias}, kCol);
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {bb, d});
  kir_vid t = b.Op("tanh", {s});
  b.Out({t});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(broadcast_in_dim dot_general add) LOOP(tanh)");
  EXPECT_EQ(plan->groups[0].epilogue, KFUSE_EPILOGUE_BIAS);
}

TEST(FuseDot, NoEpilogueWhenTheDotIsReadTwice) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid s = b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)});
  b.Out({s, d});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "DOT(dot_general) LOOP(broadcast_in_dim add)");
  EXPECT_EQ(plan->groups[0].epilogue, KFUSE_EPILOGUE_NONE);
  EXPECT_EQ(plan->groups[0].bias, KIR_NO_VAR);
}

// ---------------------------------------------------------------------------
// Cuts, cost, multi-output, limits

kir_program *Sub(kir_program *parent) {
  kir_program *s = nullptr;
  EXPECT_EQ(kir_program_new_sub(parent, &s), KILN_OK) << kiln_last_error();
  return s;
}

TEST(FuseCut, DotCondScanSortAreBoundaries) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), w = b.In("f32[8,8]"), i = b.In("i32[]");
  kir_vid a = b.Op("exp", {x});
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid n = b.Op("neg", {d});
  kir_vid srt = b.Op("sort", {n}, "dimension=1 is_stable=True num_keys=1");
  kir_vid m = b.Op("mul", {srt, a});
  // cond: branch 0 negates, branch 1 doubles.
  kir_program *b0 = Sub(b.get()), *b1 = Sub(b.get());
  kir_aval t;
  ASSERT_EQ(kir_aval_parse("f32[4,8]", &t), KILN_OK);
  kir_vid y0, y1;
  ASSERT_EQ(kir_add_invar(b0, &t, &y0), KILN_OK);
  ASSERT_EQ(kir_add_invar(b1, &t, &y1), KILN_OK);
  int idx;
  ASSERT_EQ(kir_add_eqn(b0, KIR_PRIM_NEG, nullptr, 1, &y0, &idx), KILN_OK);
  ASSERT_EQ(kir_set_outputs(b0, 1, &b0->eqns[idx].out[0]), KILN_OK);
  ASSERT_EQ(kir_add_eqn(b1, KIR_PRIM_EXP, nullptr, 1, &y1, &idx), KILN_OK);
  ASSERT_EQ(kir_set_outputs(b1, 1, &b1->eqns[idx].out[0]), KILN_OK);
  kir_params par;
  memset(&par, 0, sizeof par);
  kir_program *branches[] = {b0, b1};
  par.cond.branches.n = 2;
  par.cond.branches.v = branches;
  kir_vid c = b.Add(KIR_PRIM_COND, &par, {i, m})[0];
  kir_vid c2 = b.Op("add", {c, a});
  // scan over the rows of c2 with a running sum.
  kir_program *body = Sub(b.get());
  kir_aval r8;
  ASSERT_EQ(kir_aval_parse("f32[8]", &r8), KILN_OK);
  kir_vid acc, row;
  ASSERT_EQ(kir_add_invar(body, &r8, &acc), KILN_OK);
  ASSERT_EQ(kir_add_invar(body, &r8, &row), KILN_OK);
  kir_vid ab[] = {acc, row};
  ASSERT_EQ(kir_add_eqn(body, KIR_PRIM_ADD, nullptr, 2, ab, &idx), KILN_OK);
  kir_vid bo[] = {body->eqns[idx].out[0], body->eqns[idx].out[0]};
  ASSERT_EQ(kir_set_outputs(body, 2, bo), KILN_OK);
  memset(&par, 0, sizeof par);
  par.scan.jaxpr = body;
  par.scan.length = 4;
  par.scan.num_carry = 1;
  kir_vid init = b.Op("reduce_sum", {x}, "axes=(0,)");
  std::vector<kir_vid> sc = b.Add(KIR_PRIM_SCAN, &par, {init, c2});
  kir_vid out = b.Op("sub", {sc[1], c2});
  b.Out({out, sc[0]});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(exp) DOT(dot_general) LOOP(neg) OPAQUE(sort) LOOP(mul) OPAQUE(cond) LOOP(add) "
            "REDUCE(reduce_sum) OPAQUE(scan) LOOP(sub)");
}

TEST(FuseCost, ExpensiveValueReadThroughTwoMapsIsMaterialised) {
  for (const char *prim : {"exp", "neg"}) {
    Builder b;
    kir_vid x = b.In("f32[8,8]");
    kir_vid e = b.Op(prim, {x});
    kir_vid y = b.Op("add", {e, b.Op("transpose", {e}, "permutation=(1, 0)")});
    b.Out({y});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    if (std::string(prim) == "exp") {
      EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) LOOP(transpose add)");
      EXPECT_EQ(plan->places[e].home, KFUSE_HOME_SLOT);
    } else {  // cheap work is recomputed rather than written
      EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(neg transpose add)");
    }
  }
}

TEST(FuseCost, ExpensiveValueBroadcastIsMaterialised) {
  for (const char *prim : {"log", "abs"}) {
    Builder b;
    kir_vid v = b.In("f32[8]"), x = b.In("f32[4,8]");
    kir_vid e = b.Op(prim, {v});
    b.Out({b.Op("mul", {x, b.Op("broadcast_in_dim", {e}, kCol)})});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), std::string(prim) == "log"
                                              ? "LOOP(log) LOOP(broadcast_in_dim mul)"
                                              : "LOOP(abs broadcast_in_dim mul)");
  }
}

TEST(FuseCost, ExpensiveValueReadTwiceThroughOneMapFuses) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid e = b.Op("exp", {x});
  b.Out({b.Op("mul", {e, b.Op("add", {e, b.Lit(1.0)})})});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp add mul)");
}

TEST(FuseLoop, MultiOutputLoops) {
  {  // siblings reading one array
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid a = b.Op("exp", {x}), c = b.Op("log", {x});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    ASSERT_EQ(Shape(b.get(), plan.get()), "LOOP(exp log)");
    EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{a, c}));
  }
  {  // one producer, two consumers
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid y = b.Op("exp", {x});
    kir_vid a = b.Op("add", {y, b.Lit(1.0)}), c = b.Op("mul", {y, b.Lit(2.0)});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    ASSERT_EQ(Shape(b.get(), plan.get()), "LOOP(exp add mul)");
    EXPECT_EQ(Outs(plan->groups[0]), (std::vector<kir_vid>{a, c}));
    EXPECT_EQ(plan->places[y].home, KFUSE_HOME_NONE);
  }
  {  // outputs of different shapes do not share a loop
    Builder b;
    kir_vid x = b.In("f32[4,8]");
    kir_vid a = b.Op("exp", {x});
    kir_vid c = b.Op("neg", {b.Op("reshape", {x}, "new_sizes=(32,)")});
    b.Out({a, c});
    Plan plan = Build(b);
    ASSERT_TRUE(plan);
    EXPECT_EQ(Shape(b.get(), plan.get()), "LOOP(exp) LOOP(reshape neg)");
  }
}

TEST(FuseLoop, SizeLimits) {
  Builder b;
  kir_vid x = b.In("f32[64]");
  kir_vid v = x;
  for (int i = 0; i < 8; i++) v = b.Op(i % 2 ? "neg" : "abs", {v});
  b.Out({v});
  kfuse_options o = Defaults();
  o.max_group_eqns = 3;
  Plan plan = Build(b, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->n_groups, 3);
  // Kernel arguments: a sum of ten inputs, at most four buffers per group.
  Builder s;
  std::vector<kir_vid> ins;
  for (int i = 0; i < 10; i++) ins.push_back(s.In("f32[64]"));
  kir_vid acc = ins[0];
  for (int i = 1; i < 10; i++) acc = s.Op("add", {acc, ins[i]});
  s.Out({acc});
  o = Defaults();
  o.max_group_args = 4;
  plan = Build(s, o);
  ASSERT_TRUE(plan);
  EXPECT_GT(plan->n_groups, 1);
  // A single equation with more operands than kernels take runs unfused.
  Builder wide;
  std::vector<kir_vid> cases = {wide.In("i32[64]")};
  for (int i = 0; i < 5; i++) cases.push_back(wide.In("f32[64]"));
  wide.Out({wide.Op("select_n", cases)});
  o.max_group_args = 4;
  plan = Build(wide, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(wide.get(), plan.get()), "OPAQUE(select_n)");
}

TEST(FuseLoop, EffectsKeepTheirOrder) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  kir_params par;
  memset(&par, 0, sizeof par);
  par.debug_print.fmt = "first {}";
  kir_vid a = b.Op("exp", {x});
  b.Add(KIR_PRIM_DEBUG_PRINT, &par, {x});
  kir_vid c = b.Op("neg", {a});
  par.debug_print.fmt = "second {}";
  b.Add(KIR_PRIM_DEBUG_PRINT, &par, {c});
  kir_vid d = b.Op("mul", {a, c});
  b.Out({d});
  Plan plan = Build(b);  // CheckPlan checks the order of the two prints
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "LOOP(exp neg mul) OPAQUE(debug_print) OPAQUE(debug_print)");
}

// ---------------------------------------------------------------------------
// Memory

TEST(FuseMemory, SlotsAreReusedAlongAChain) {
  Builder b;
  kir_vid v = b.In("f32[64]");
  int boundary = 0;
  for (int i = 0; i < 6; i++) {
    v = b.Op("exp", {v});
    v = b.Op("sort", {v}, "dimension=0 is_stable=True num_keys=1");
    boundary += 2;
  }
  b.Out({v});
  boundary--;  // the last sort writes the output
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->n_groups, 12);
  int slot_values = 0;
  for (int i = 0; i < plan->n_places; i++) slot_values += plan->places[i].home == KFUSE_HOME_SLOT;
  EXPECT_EQ(slot_values, boundary);
  EXPECT_EQ(plan->n_slots, 2);  // lives overlap pairwise only
  EXPECT_EQ(plan->temp_bytes, 2 * 64 * sizeof(float));
  EXPECT_EQ(plan->arena_bytes, 2 * (size_t)KFUSE_SLOT_ALIGN);
}

TEST(FuseMemory, SlotsFitTheLargestValue) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid big = b.Op("sort", {b.Op("exp", {x})}, "dimension=1 is_stable=True num_keys=1");
  kir_vid small =
      b.Op("sort", {b.Op("reduce_sum", {big}, kLast)}, "dimension=0 is_stable=True num_keys=1");
  b.Out({b.Op("neg", {small})});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  // exp -> [sort] -> reduce -> [sort] -> neg: four boundary values, two
  // slots sized for the f32[4,8] ones.
  EXPECT_EQ(plan->n_slots, 2);
  EXPECT_EQ(plan->slot_bytes[0], 128u);
  EXPECT_EQ(plan->slot_bytes[1], 128u);
}

TEST(FuseMemory, DonatedInputsHoldOutputs) {
  Builder b;
  kir_vid x = b.In("f32[4,8]"), y = b.In("f32[4,8]"), z = b.In("f32[8]"), kept = b.In("f32[4,8]");
  kir_vid s = b.Op("sort", {y}, "dimension=1 is_stable=True num_keys=1");
  kir_vid o0 = b.Op("add", {s, x});  // x and y are read before o0's group ends
  kir_vid o1 = b.Op("neg", {b.Op("sort", {o0}, "dimension=1 is_stable=True num_keys=1")});
  kir_vid o2 = b.Op("abs", {z});
  b.Out({o0, o1, o2, kept});
  bool donated[] = {true, true, true, true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->output_donor[0], 1);   // y: last read by the first sort, before o0's group
  EXPECT_EQ(plan->output_donor[1], 0);   // x: read by o0's group, before o1's
  EXPECT_EQ(plan->output_donor[2], 2);   // z: read at each element by o2's loop, in place
  EXPECT_EQ(plan->output_donor[3], -1);  // an input returned as is
  bool none[] = {false, false, false, false};
  plan = Build(b, Defaults(), none);
  ASSERT_TRUE(plan);
  for (int k = 0; k < 4; k++) EXPECT_EQ(plan->output_donor[k], -1);
}

// An optimizer update (SGD's p - lr * g, Adam's moments) writes each
// result over the donated input its own loop reads at the same element.
TEST(FuseInPlace, OptimizerUpdatesWriteOverTheirDonatedInputs) {
  Builder b;
  kir_vid p = b.In("f32[4,8]"), g = b.In("f32[4,8]"), m = b.In("f32[4,8]"), v = b.In("f32[4,8]");
  kir_vid m2 = b.Op("add", {b.Op("mul", {m, b.Lit(0.9)}), b.Op("mul", {g, b.Lit(0.1)})});
  kir_vid g2 = b.Op("mul", {b.Op("mul", {g, g}), b.Lit(0.001)});
  kir_vid v2 = b.Op("add", {b.Op("mul", {v, b.Lit(0.999)}), g2});
  kir_vid step = b.Op("div", {m2, b.Op("add", {b.Op("sqrt", {v2}), b.Lit(1e-8)})});
  kir_vid p2 = b.Op("sub", {p, b.Op("mul", {step, b.Lit(0.01)})});
  b.Out({p2, m2, v2});
  bool donated[] = {true, false, true, true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->n_groups, 1);
  EXPECT_EQ(plan->groups[0].kind, KFUSE_LOOP);
  EXPECT_EQ(plan->output_donor[0], 0);  // p_new over p
  EXPECT_EQ(plan->output_donor[1], 2);  // m_new over m
  EXPECT_EQ(plan->output_donor[2], 3);  // v_new over v
  bool none[] = {false, false, false, false};
  plan = Build(b, Defaults(), none);
  ASSERT_TRUE(plan);
  for (int k = 0; k < 3; k++) EXPECT_EQ(plan->output_donor[k], -1);
}

// p_new = p + f(p) where f reads p at other elements, or a later group, an
// alias or another output of the loop reads p: no output takes p.
TEST(FuseInPlace, OtherReadsOfTheInputKeepItsBuffer) {
  bool donated[] = {true};
  auto donor = [&](kir_vid (*f)(Builder &, kir_vid)) {
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    b.Out({b.Op("sub", {p, f(b, p)})});
    Plan plan = Build(b, Defaults(), donated);
    return plan ? plan->output_donor[0] : -2;
  };
  EXPECT_EQ(donor([](Builder &b, kir_vid p) { return b.Op("mul", {p, b.Lit(2)}); }), 0);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {
              return b.Op("transpose", {p}, "permutation=(1, 0)");
            }),
            -1);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {  // row 0 broadcast down the rows
              kir_vid s = b.Op("slice", {p},
                               "start_indices=(0, 0) limit_indices=(1, 8) strides=(1, 1)");
              kir_vid r = b.Op("reshape", {s}, "new_sizes=(8,)");
              return b.Op("broadcast_in_dim", {r}, "shape=(8, 8) broadcast_dimensions=(1,)");
            }),
            -1);
  EXPECT_EQ(donor([](Builder &b, kir_vid p) {  // a ROW group: p minus its row max
              return b.Op("broadcast_in_dim", {b.Op("reduce_max", {p}, kLast)},
                          "shape=(8, 8) broadcast_dimensions=(0,)");
            }),
            -1);
  {  // a later group reads p
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    kir_vid o = b.Op("neg", {p});
    b.Out({o, b.Op("sort", {p}, "dimension=1 is_stable=True num_keys=1")});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->output_donor[0], -1);
  }
  {  // two outputs of one loop read p: neither may store over it first
    Builder b;
    kir_vid p = b.In("f32[8,8]");
    b.Out({b.Op("mul", {p, b.Lit(2)}), b.Op("add", {p, b.Lit(1)})});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    ASSERT_EQ(plan->n_groups, 1);
    EXPECT_EQ(plan->output_donor[0], -1);
    EXPECT_EQ(plan->output_donor[1], -1);
  }
  {  // an alias of p, also read by a dot, read through a transpose in the loop
    Builder b;
    kir_vid p = b.In("f32[1,8,8]");
    kir_vid s = b.Op("squeeze", {p}, "dimensions=(0,)");
    kir_vid d = b.Op("dot_general", {s, s}, kMatmul);
    kir_vid t = b.Op("transpose", {s}, "permutation=(1, 0)");
    b.Out({b.Op("expand_dims", {b.Op("sub", {t, d})}, "dimensions=(0,)")});
    Plan plan = Build(b, Defaults(), donated);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->output_donor[0], -1);
  }
}

// A pmapped update reads its parameter through a squeeze that a dot reads
// too (an alias: the same bytes) and expands the result again: in place.
TEST(FuseInPlace, AnAliasOfTheInputReadAtTheItemIsTheInput) {
  Builder b;
  kir_vid p = b.In("f32[1,8,8]");
  kir_vid s = b.Op("squeeze", {p}, "dimensions=(0,)");
  kir_vid d = b.Op("dot_general", {s, s}, kMatmul);
  b.Out({b.Op("expand_dims", {b.Op("sub", {s, d})}, "dimensions=(0,)")});
  bool donated[] = {true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->places[s].home, KFUSE_HOME_INPUT);  // an alias
  EXPECT_EQ(plan->output_donor[0], 0);
}

TEST(FuseMemory, OutputsThatAreInputsOrLiterals) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  kir_vid lit = b.Lit(3.0);
  kir_vid e = b.Op("exp", {x});
  b.Out({e, x, lit, e});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->places[x].home, KFUSE_HOME_INPUT);
  EXPECT_EQ(plan->places[lit].home, KFUSE_HOME_CONST);
  EXPECT_EQ(plan->places[e].home, KFUSE_HOME_OUTPUT);
  EXPECT_EQ(plan->places[e].index, 0);
}

// ---------------------------------------------------------------------------
// The unfused baseline and the text

TEST(FuseBaseline, OneGroupPerEquation) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  b.Out({Softmax(b, x)});
  kfuse_options o = Defaults();
  o.fuse = false;
  Plan plan = Build(b, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Shape(b.get(), plan.get()),
            "REDUCE(reduce_max) LOOP(broadcast_in_dim) LOOP(sub) LOOP(exp) REDUCE(reduce_sum) "
            "LOOP(broadcast_in_dim) LOOP(div)");
  int slot_values = 0;
  for (int i = 0; i < plan->n_places; i++) slot_values += plan->places[i].home == KFUSE_HOME_SLOT;
  EXPECT_EQ(slot_values, 6);
  EXPECT_LT(plan->n_slots, 6);
}

TEST(FusePrint, ExactText) {
  Builder b;
  kir_vid x = b.In("f32[4,8]");
  kir_vid v = b.Op("neg", {b.Op("exp", {x})});
  v = b.Op("sort", {v}, "dimension=1 is_stable=True num_keys=1");
  v = b.Op("mul", {v, b.Lit(2.0)});
  kir_vid s = b.Op("reduce_sum", {v}, kLast);
  b.Out({v, s});
  bool donated[] = {true};
  Plan plan = Build(b, Defaults(), donated);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Text(b.get(), plan.get()),
            "plan: 3 groups, 2 slots, 256 temp bytes\n"
            "g0 LOOP items=32: exp#0 neg#1 | in v0:f32[4,8]@in0 | out v2:f32[4,8]@slot0\n"
            "g1 OPAQUE: sort#2 | in v2:f32[4,8]@slot0 | out v3:f32[4,8]@slot1\n"
            "g2 ROW rows=4x8: mul#3 reduce_sum#4 | in v3:f32[4,8]@slot1 v4:f32[]@const"
            " | out v5:f32[4,8]@out0 v6:f32[4]@out1\n"
            "slot0 128 bytes at 0: v2 g0-g1\n"
            "slot1 128 bytes at 256: v3 g1-g2\n"
            "out0 reuses donated in0\n");
}

TEST(FusePrint, DotEpilogueAndRowText) {
  Builder b;
  kir_vid a = b.In("f32[4,16]"), w = b.In("f32[16,8]"), bias = b.In("f32[8]");
  kir_vid d = b.Op("dot_general", {a, w}, kMatmul);
  kir_vid r = b.Op("max", {b.Op("add", {d, b.Op("broadcast_in_dim", {bias}, kCol)}), b.Lit(0.0)});
  b.Out({Softmax(b, r)});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  std::string text = Text(b.get(), plan.get());
  EXPECT_TRUE(
      Contains(text, "g0 DOT epilogue=bias_relu(v2): dot_general#0 broadcast_in_dim#1 add#2 max#3"))
      << text;
  EXPECT_TRUE(Contains(text, "g1 ROW rows=4x8: reduce_max#4")) << text;
}

// ---------------------------------------------------------------------------
// Bad input

TEST(FuseErrors, BadArgumentsAreRefused) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  kfuse_options o = Defaults();
  kfuse_plan *plan = nullptr;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: out is NULL"));
  EXPECT_EQ(kfuse_plan_build(nullptr, &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: program is NULL"));
  EXPECT_EQ(plan, nullptr);
  o.max_group_eqns = 0;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: max_group_eqns=0"));
  o = Defaults();
  o.max_group_args = -1;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: max_group_args=-1"));
  o = Defaults();
  o.row_max_elements = 0;
  EXPECT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: row_max_elements=0"));
  // max_group_args 0 (options filled without the field) means 64.
  o = Defaults();
  o.max_group_args = 0;
  ASSERT_EQ(kfuse_plan_build(b.get(), &o, nullptr, &plan), KILN_OK) << kiln_last_error();
  kfuse_plan_free(plan);
  // NULL options mean the defaults.
  ASSERT_EQ(kfuse_plan_build(b.get(), nullptr, nullptr, &plan), KILN_OK) << kiln_last_error();
  Plan owned(plan);
  EXPECT_EQ(owned->n_groups, 1);
}

TEST(FuseErrors, AnInvalidProgramIsRefused) {
  Builder b;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  kir_vid saved = b.get()->eqns[0].in[0];
  b.get()->eqns[0].in[0] = 999;  // a var that does not exist
  kfuse_plan *plan = nullptr;
  kfuse_options o = Defaults();
  kiln_status st = kfuse_plan_build(b.get(), &o, nullptr, &plan);
  b.get()->eqns[0].in[0] = saved;
  EXPECT_NE(st, KILN_OK);
  EXPECT_EQ(plan, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_build: invalid program"))
      << kiln_last_error();
}

TEST(FuseErrors, PrintRefusesBadArguments) {
  Builder b, other;
  kir_vid x = b.In("f32[4]");
  b.Out({b.Op("exp", {x})});
  other.Out({other.In("f32[4]")});
  Plan plan = Build(b);
  ASSERT_TRUE(plan);
  char *text = nullptr;
  EXPECT_EQ(kfuse_plan_print(plan.get(), b.get(), nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: text is NULL"));
  EXPECT_EQ(kfuse_plan_print(nullptr, b.get(), &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: plan or program is NULL"));
  EXPECT_EQ(kfuse_plan_print(plan.get(), other.get(), &text), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kfuse_plan_print: the plan has 2 places"));
  EXPECT_EQ(text, nullptr);
  kfuse_plan_free(nullptr);
  EXPECT_STREQ(kfuse_kind_name((kfuse_kind)99), "invalid");
}

// ---------------------------------------------------------------------------
// Random programs: every invariant, under every option set

class RandomProgram {
 public:
  explicit RandomProgram(uint64_t seed) : rng_(seed) {
    for (const char *t :
         {"f32[4,8]", "f32[4,8]", "f32[8]", "f32[4]", "f32[]", "f32[8,4]", "f32[8,8]"})
      pool_.push_back(b_.In(t));
    int steps = Int(5, 40);
    for (int i = 0; i < steps; i++) Step();
    std::vector<kir_vid> outs;
    int n_out = Int(1, 4);
    for (int i = 0; i < n_out; i++) outs.push_back(Coin(0.8) ? Latest() : Pick(pool_));
    b_.Out(outs);
  }
  const kir_program *get() const { return b_.get(); }
  int n_invars() const { return b_.get()->n_invars; }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  kir_vid Pick(const std::vector<kir_vid> &v) { return v[(size_t)Int(0, (int)v.size() - 1)]; }
  kir_vid Latest() {
    return pool_[(size_t)Int(std::max(0, (int)pool_.size() - 4), (int)pool_.size() - 1)];
  }

  std::string Type(kir_vid v) {
    char buf[KIR_AVAL_STR_CAP];
    return kir_aval_str(&b_.get()->vars[v].aval, buf, sizeof buf);
  }
  // A var of the type, recent ones preferred (longer chains); or -1.
  kir_vid Of(const std::string &type) {
    std::vector<kir_vid> c;
    for (kir_vid v : pool_)
      if (Type(v) == type) c.push_back(v);
    if (c.empty()) return KIR_NO_VAR;
    return Coin(0.6) ? c.back() : Pick(c);
  }
  void Keep(kir_vid v) {
    if (v != KIR_NO_VAR) pool_.push_back(v);
  }

  void Step() {
    static const char *unary[] = {"neg", "exp", "tanh", "log", "abs", "sqrt", "logistic"};
    static const char *binary[] = {"add", "mul", "max", "sub", "div"};
    static const char *types[] = {"f32[4,8]", "f32[8]",   "f32[4]",
                                  "f32[8,4]", "f32[4,4]", "f32[8,8]"};
    kir_vid x = Pick(pool_);
    std::string t = Type(x);
    switch (Int(0, 15)) {
      case 0:
      case 1:
      case 2: Keep(b_.Op(unary[Int(0, 6)], {x})); break;
      case 3:
      case 4:
      case 5: {
        kir_vid y = Coin(0.3) ? b_.Lit(1.5) : Of(t);
        Keep(b_.Op(binary[Int(0, 4)], {x, y == KIR_NO_VAR ? x : y}));
        break;
      }
      case 6:  // broadcasts into [4,8]
        if ((x = Of("f32[8]")) != KIR_NO_VAR && Coin())
          Keep(b_.Op("broadcast_in_dim", {x}, kCol));
        else if ((x = Of("f32[4]")) != KIR_NO_VAR)
          Keep(b_.Op("broadcast_in_dim", {x}, kRow));
        break;
      case 7: {  // reductions of [4,8]
        if ((x = Of("f32[4,8]")) == KIR_NO_VAR) break;
        const char *prim = Coin() ? "reduce_sum" : "reduce_max";
        Keep(b_.Op(prim, {x}, Coin(0.7) ? "axes=(1,)" : "axes=(0,)"));
        break;
      }
      case 8:
        if (t == "f32[4,8]" || t == "f32[8,4]")
          Keep(b_.Op("transpose", {x}, "permutation=(1, 0)"));
        else if (t == "f32[4]" || t == "f32[8]")
          Keep(b_.Op("reduce_sum", {x}, "axes=(0,)"));
        break;
      case 9:
        if (t == "f32[4,8]")
          Keep(b_.Op("reshape", {x}, "new_sizes=(8, 4)"));
        else if (t == "f32[4]")
          Keep(b_.Op("expand_dims", {x}, "dimensions=(1,)"));
        else if (t == "f32[4,1]" && (x = Of("f32[4,8]")) != KIR_NO_VAR)
          Keep(b_.Op("sub", {x, Of("f32[4,1]")}));
        break;
      case 10:
        if (t == "f32[4,8]")
          Keep(b_.Op("rev", {x}, "dimensions=(1,)"));
        else if (t == "f32[8,8]")
          Keep(b_.Op("slice", {x}, "start_indices=(2, 0) limit_indices=(6, 8) strides=(1, 1)"));
        else
          Keep(b_.Op("iota", {}, "dimension=0 dtype=float32 shape=(4, 8)"));
        break;
      case 11: {  // a dense layer, sometimes with bias and relu
        kir_vid a = Of("f32[4,8]"), w = Of("f32[8,8]");
        if (a == KIR_NO_VAR || w == KIR_NO_VAR) break;
        kir_vid d = b_.Op("dot_general", {a, w}, kMatmul);
        if (Coin(0.6) && (x = Of("f32[8]")) != KIR_NO_VAR) {
          d = b_.Op("add", {d, b_.Op("broadcast_in_dim", {x}, kCol)});
          if (Coin()) d = b_.Op("max", {d, b_.Lit(0.0)});
        }
        Keep(d);
        break;
      }
      case 12:
        if (t == "f32[4,8]")
          Keep(b_.Op("sort", {x}, "dimension=1 is_stable=True num_keys=1"));
        else if (t == "f32[8]")
          Keep(b_.Op("cumsum", {x}, "axis=0 reverse=False"));
        else
          Keep(b_.Op("exp", {x}));
        break;
      case 13:
        if (t == "f32[4,8]")
          Keep(b_.Op("convert_element_type", {b_.Op("argmax", {x}, "axes=(1,) index_dtype=int32")},
                     "new_dtype=float32 weak_type=False"));
        break;
      case 14: {
        kir_params par;
        memset(&par, 0, sizeof par);
        par.debug_print.fmt = "{}";
        b_.Add(KIR_PRIM_DEBUG_PRINT, &par, {x});
        break;
      }
      default:
        if ((x = Of(types[Int(0, 5)])) != KIR_NO_VAR) Keep(b_.Op("mul", {x, x}));
        break;
    }
  }

  std::mt19937_64 rng_;
  Builder b_;
  std::vector<kir_vid> pool_;
};

TEST(FuseRandom, PlansKeepEveryInvariant) {
  std::vector<kfuse_options> variants;
  kfuse_options o = Defaults();
  variants.push_back(o);
  o.fuse = false;
  variants.push_back(o);
  o = Defaults();
  o.allow_row = false;
  variants.push_back(o);
  o = Defaults();
  o.max_group_eqns = 3;
  o.max_group_args = 5;
  variants.push_back(o);
  o = Defaults();
  o.row_max_elements = 4;
  variants.push_back(o);
  std::map<kfuse_kind, int> kinds;
  for (uint64_t seed = 1; seed <= 150; seed++) {
    RandomProgram r(seed);
    std::unique_ptr<bool[]> donated(new bool[(size_t)r.n_invars()]);
    std::mt19937 flip((unsigned)seed);
    for (int i = 0; i < r.n_invars(); i++) donated[i] = flip() % 2 == 1;
    for (size_t vi = 0; vi < variants.size(); vi++) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " variant " + std::to_string(vi));
      Plan plan = Build(r.get(), variants[vi], donated.get());
      ASSERT_TRUE(plan);
      for (int gi = 0; gi < plan->n_groups; gi++) kinds[plan->groups[gi].kind]++;
      Plan again = Build(r.get(), variants[vi], donated.get());
      ASSERT_EQ(Text(r.get(), plan.get()), Text(r.get(), again.get()))
          << "planning is not deterministic";
      if (::testing::Test::HasFailure()) {
        char *text = nullptr;
        kir_print(r.get(), &text);
        ADD_FAILURE() << text << "\n" << Text(r.get(), plan.get());
        free(text);
        return;
      }
    }
  }
  for (kfuse_kind k : {KFUSE_LOOP, KFUSE_REDUCE, KFUSE_ROW, KFUSE_DOT, KFUSE_OPAQUE})
    EXPECT_GT(kinds[k], 10) << "random programs rarely make " << kfuse_kind_name(k) << " groups";
}

}  // namespace
