// The rule-coverage matrix: every primitive of src/ir/prims.def against the
// tables that implement it (shape rule, reference evaluator, jvp, transpose,
// batching, C and CUDA emission), asked of those tables at run time. A cell
// the tables leave empty is a hole, and every hole needs a stated reason in
// docs/primitives-holes.txt; docs/primitives.md is the matrix as generated
// here. Regenerate it with
//   KILN_WRITE_PRIMITIVES_DOC=1 build/tests/test_prim_coverage
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "transform/transform.h"

namespace {

const std::string kSource = KILN_SOURCE_DIR;
const std::string kHolesPath = kSource + "/docs/primitives-holes.txt";
const std::string kDocPath = kSource + "/docs/primitives.md";

enum Col { kRule, kEval, kJvp, kTranspose, kBatch, kC, kCuda, kNumCols };
const char *const kColName[kNumCols] = {"rule", "eval", "jvp", "transpose", "batch", "C", "CUDA"};

// Each row's family token, from prims.def itself.
const char *const kFamily[KIR_NUM_PRIMS] = {
#define KIR_PRIM(ID, name, family, n_in, n_out, params, rule, flags) #family,
#include "ir/prims.def"
#undef KIR_PRIM
};

// "" for a hole, else how the column is implemented ("✓", "✓ fused", ...).
std::string Cell(kir_prim p, Col c) {
  const std::string yes = "\u2713";
  switch (c) {
    case kRule: return kir_prim_get(p)->rule ? yes : "";
    case kEval: return kir_reference_evals()->fn[p] ? yes : "";
    case kJvp:
      if (kir_ad_rules_get()->jvp[p] == kir_ad_jvp_zero) return yes + " zero";  // no tangent
      return ktf_jvp_full_rule(p) || kir_ad_rules_get()->jvp[p] ? yes : "";
    case kTranspose: return ktf_transpose_rule(p) ? yes : "";
    case kBatch: return ktf_batch_rule(p) ? yes : "";
    case kC:
    case kCuda: {
      kcg_target t = c == kC ? KCG_TARGET_C : KCG_TARGET_CUDA;
      switch (kcg_emits_prim(p, t)) {
        case KCG_EMITS_FUSED: return yes + " fused";
        case KCG_EMITS_LONE: return yes + " kernel";
        case KCG_EMITS_PARTS: return yes + " kernels";
        case KCG_EMITS_NONE: break;
      }
      // A DOT group is a matmul library call on either executor.
      if (kfuse_prim_class(p) == KFUSE_CLASS_DOT) return yes + (c == kC ? " BLAS" : " cuBLASLt");
      return "";
    }
    case kNumCols: break;
  }
  return "";
}

// The primitive a golden record's first word names: the word, or the word
// less trailing "_<case>" parts ("cumprod_0", "cond_false"); "" if none.
std::string PrimOfWord(std::string w) {
  for (;;) {
    kir_prim p;
    if (kir_prim_lookup(w.c_str(), w.size(), &p)) return kir_prim_name(p);
    size_t cut = w.rfind('_');
    if (cut == std::string::npos || cut == 0) return "";
    w.resize(cut);
  }
}

// Per primitive, the kinds of golden records (values JAX wrote,
// tests/golden/*.txt) that name it: "e" a reference-evaluator record
// ("name | ..."), "d" an autodiff record (the first word of a line of a
// transform_*.txt file), "v" a vmap record (transform_vmap.txt's
// "name@<axes>"). Cheap and conservative: records named otherwise are missed.
std::map<std::string, std::string> GoldenRecords() {
  std::map<std::string, std::set<char>> kinds;
  for (const auto &f : std::filesystem::directory_iterator(KILN_GOLDEN_DIR)) {
    std::string file = f.path().filename().string();
    if (f.path().extension() != ".txt") continue;
    bool vmap = file == "transform_vmap.txt", ad = !vmap && file.rfind("transform_", 0) == 0;
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      size_t bar = line.find(" | ");
      std::string word = line.substr(0, line.find(' '));
      std::string prim;
      if (bar != std::string::npos && !(prim = PrimOfWord(line.substr(0, bar))).empty())
        kinds[prim].insert('e');
      if (vmap && word.find('@') != std::string::npos &&
          !(prim = PrimOfWord(word.substr(0, word.find('@')))).empty())
        kinds[prim].insert('v');
      if (ad && !word.empty() && word[0] != '#' && !(prim = PrimOfWord(word)).empty())
        kinds[prim].insert('d');
    }
  }
  std::map<std::string, std::string> out;
  for (const auto &k : kinds)
    for (char c : std::string("edv"))
      if (k.second.count(c)) out[k.first] += c;
  return out;
}

struct Holes {
  std::map<std::string, std::string> reasons;                  // key -> text
  std::map<std::pair<std::string, std::string>, std::string> cell;  // (prim, column) -> key
  std::vector<std::string> errors;                             // malformed or duplicate lines
};

Holes ReadHoles() {
  Holes h;
  std::ifstream in(kHolesPath);
  if (!in) {
    h.errors.push_back("cannot read " + kHolesPath);
    return h;
  }
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    std::istringstream ls(line);
    std::string head, key;
    if (!(ls >> head) || head[0] == '#') continue;
    std::string where = kHolesPath + ":" + std::to_string(n) + ": ";
    if (!(ls >> key)) {
      h.errors.push_back(where + "a line names a column (or `reason`) then a key");
      continue;
    }
    if (head == "reason") {
      std::string text;
      std::getline(ls >> std::ws, text);
      if (text.empty() || !h.reasons.emplace(key, text).second)
        h.errors.push_back(where + "reason " + key + " is empty or given twice");
      continue;
    }
    bool column = false;
    for (const char *c : kColName) column |= head == c;
    if (!column) {
      h.errors.push_back(where + "unknown column " + head);
      continue;
    }
    for (std::string prim; ls >> prim;)
      if (!h.cell.emplace(std::make_pair(prim, head), key).second)
        h.errors.push_back(where + prim + " " + head + " has a reason already");
  }
  return h;
}

std::string Lower(std::string s) {
  for (char &ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

std::string Generate(const Holes &h, const std::map<std::string, std::string> &golden) {
  std::ostringstream o;
  int holes[kNumCols] = {0}, gaps[kNumCols] = {0};
  std::set<std::string> used;
  std::ostringstream rows;
  for (kir_prim p = (kir_prim)0; p < KIR_NUM_PRIMS; p = (kir_prim)(p + 1)) {
    std::string name = kir_prim_name(p);
    rows << "| `" << name << "` | " << Lower(kFamily[p]);
    for (int c = 0; c < kNumCols; c++) {
      std::string v = Cell(p, (Col)c);
      if (v.empty()) {
        holes[c]++;
        auto it = h.cell.find({name, kColName[c]});
        v = it == h.cell.end() ? "**?**" : it->second;
        if (it != h.cell.end()) used.insert(it->second);
        if (it != h.cell.end() && it->second.rfind("not-yet", 0) == 0) gaps[c]++;
      }
      rows << " | " << v;
    }
    auto g = golden.find(name);
    rows << " | " << (g == golden.end() ? "" : g->second) << " |\n";
  }
  o << "# Primitives: the rule-coverage matrix\n\n"
    << "<!-- Generated by tests/ir/test_prim_coverage.cc from kiln's own tables and\n"
    << "     docs/primitives-holes.txt; do not edit. Regenerate with\n"
    << "     KILN_WRITE_PRIMITIVES_DOC=1 build/tests/test_prim_coverage -->\n\n"
    << "Every primitive of `src/ir/prims.def`, and for each what implements it,\n"
    << "asked of the tables at run time: its shape/dtype rule (the row's rule\n"
    << "column), its reference evaluator (`kir_reference_evals()`), its jvp and\n"
    << "transpose rules (`kir_ad_rules`, or the sub-program transformations\n"
    << "`ktf_jvp_full_rule` / `ktf_transpose_rule`), its batching rule\n"
    << "(`ktf_batch_rule`), and how the C and CUDA executors run it\n"
    << "(`kcg_emits_prim`: an expression of fused kernels, a kernel of its own,\n"
    << "several kernels, or, for a DOT group, a BLAS / cuBLASLt matmul); jvp's\n"
    << "`\u2713 zero` is the rule of primitives without tangents. A cell\n"
    << "without \u2713 is a hole; its key names the reason listed below (from\n"
    << "`docs/primitives-holes.txt`, which the test `test_prim_coverage` keeps\n"
    << "exact: a hole without a reason, or a reason for a cell that is no longer\n"
    << "a hole, fails it). The golden column says which records of\n"
    << "`tests/golden/*.txt` (values JAX wrote) name the primitive: `e` its\n"
    << "reference evaluator's, `d` autodiff's (`transform_*.txt`), `v` vmap's\n"
    << "(`transform_vmap.txt`); records named otherwise (whole models, scatter\n"
    << "gradients, collectives, kernels) are not counted, so a blank is no proof\n"
    << "that nothing checks it.\n\n";
  o << "| primitive | family |";
  for (const char *c : kColName) o << " " << c << " |";
  o << " golden |\n|---|---|";
  for (int c = 0; c < kNumCols; c++) o << "---|";
  o << "---|\n" << rows.str();
  o << "\n" << KIR_NUM_PRIMS << " primitives. Holes per column (of which gaps, reasons"
    << " `not-yet-*`):";
  for (int c = 0; c < kNumCols; c++)
    o << (c ? ", " : " ") << kColName[c] << " " << holes[c] << " (" << gaps[c] << ")";
  o << ".\n\n## Reasons\n\n";
  for (const auto &r : h.reasons)
    if (used.count(r.first)) o << "- `" << r.first << "`: " << r.second << "\n";
  return o.str();
}

// Every hole the tables leave, as "column prim".
std::vector<std::pair<std::string, std::string>> TableHoles() {
  std::vector<std::pair<std::string, std::string>> out;
  for (kir_prim p = (kir_prim)0; p < KIR_NUM_PRIMS; p = (kir_prim)(p + 1))
    for (int c = 0; c < kNumCols; c++)
      if (Cell(p, (Col)c).empty()) out.push_back({kir_prim_name(p), kColName[c]});
  return out;
}

}  // namespace

TEST(PrimCoverage, HolesFileIsWellFormed) {
  Holes h = ReadHoles();
  for (const std::string &e : h.errors) ADD_FAILURE() << e;
  for (const auto &c : h.cell)
    EXPECT_TRUE(h.reasons.count(c.second))
        << kHolesPath << ": " << c.first.first << " " << c.first.second << " names reason "
        << c.second << ", which no `reason` line defines";
}

TEST(PrimCoverage, EveryHoleHasAReason) {
  Holes h = ReadHoles();
  for (const auto &hole : TableHoles())
    EXPECT_TRUE(h.cell.count(hole))
        << hole.first << ": its " << hole.second << " cell is a hole and " << kHolesPath
        << " gives no reason: add the rule, or a line `" << hole.second << " <key> "
        << hole.first << "` (and `reason <key> <why>` if the key is new)";
}

TEST(PrimCoverage, NoStaleReason) {
  Holes h = ReadHoles();
  auto holes = TableHoles();
  std::set<std::pair<std::string, std::string>> is_hole(holes.begin(), holes.end());
  std::set<std::string> used;
  for (const auto &c : h.cell) {
    kir_prim p;
    const std::string &name = c.first.first;
    EXPECT_TRUE(kir_prim_lookup(name.c_str(), name.size(), &p))
        << kHolesPath << ": " << name << " is not a primitive of src/ir/prims.def";
    EXPECT_TRUE(is_hole.count(c.first))
        << kHolesPath << ": " << name << " " << c.first.second << " has a reason ("
        << c.second << ") but the tables implement it now: remove " << name << " from that line";
    used.insert(c.second);
  }
  for (const auto &r : h.reasons)
    EXPECT_TRUE(used.count(r.first)) << kHolesPath << ": reason " << r.first << " is not used";
}

TEST(PrimCoverage, DocIsCurrent) {
  std::string want = Generate(ReadHoles(), GoldenRecords());
  const char *write = std::getenv("KILN_WRITE_PRIMITIVES_DOC");
  if (write && *write && std::string(write) != "0") {
    std::ofstream(kDocPath, std::ios::binary) << want;
    GTEST_SKIP() << "wrote " << kDocPath;
  }
  std::ifstream in(kDocPath, std::ios::binary);
  std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;  // the first line that differs
  while (at < have.size() && at < want.size() && have[at] == want[at]) at++;
  at = have.rfind('\n', at) == std::string::npos ? 0 : have.rfind('\n', at) + 1;
  EXPECT_TRUE(have == want)
      << kDocPath << " (from \"" << have.substr(at, 80)
      << "\") is not what the tables and docs/primitives-holes.txt generate; regenerate it with "
         "KILN_WRITE_PRIMITIVES_DOC=1 build/tests/test_prim_coverage "
         "--gtest_filter=PrimCoverage.DocIsCurrent";
}

// The queries answer from the tables the transformations and executors use.
TEST(PrimCoverage, QueriesAgreeWithTheDispatch) {
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_ADD, KCG_TARGET_C), KCG_EMITS_FUSED);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_REDUCE_SUM, KCG_TARGET_CUDA), KCG_EMITS_FUSED);
  // erf_inv stays on the reference evaluator although codegen could spell it
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_ERF_INV, KCG_TARGET_CUDA), KCG_EMITS_NONE);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_PAD, KCG_TARGET_C), KCG_EMITS_LONE);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_GATHER, KCG_TARGET_C), KCG_EMITS_NONE);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_GATHER, KCG_TARGET_CUDA), KCG_EMITS_LONE);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_SCATTER_MAX, KCG_TARGET_CUDA), KCG_EMITS_PARTS);
  EXPECT_EQ(kcg_emits_prim(KIR_PRIM_SORT, KCG_TARGET_CUDA), KCG_EMITS_NONE);
  EXPECT_EQ(kfuse_prim_class(KIR_PRIM_DOT_GENERAL), KFUSE_CLASS_DOT);
  EXPECT_EQ(Cell(KIR_PRIM_WHILE, kJvp), "\u2713");      // found through ktf_jvp_full_rule
  EXPECT_EQ(Cell(KIR_PRIM_COND, kTranspose), "\u2713"); // ktf_transpose_rule
  EXPECT_EQ(Cell(KIR_PRIM_EXP, kTranspose), "");        // not linear
}

// A fused cell is a promise kcg_emit keeps: every elementwise row without
// params becomes a LOOP kernel for both targets (f32 operands, or i32 where
// the row has no float spelling).
TEST(PrimCoverage, FusedElementwiseCellsEmit) {
  int checked = 0;
  for (kir_prim prim = (kir_prim)0; prim < KIR_NUM_PRIMS; prim = (kir_prim)(prim + 1)) {
    const kir_prim_info *info = kir_prim_get(prim);
    if (info->family != KIR_FAMILY_ELEMENTWISE || info->params != KIR_PARAMS_NONE ||
        info->n_in < 1 || Cell(prim, kC) != "\u2713 fused")
      continue;
    kiln_dtype dt = info->c_float.kind != KIR_SPELL_NONE ? KILN_F32 : KILN_I32;
    int64_t shape[1] = {8};
    kir_aval aval = kir_aval_make(dt, 1, shape, false);
    kir_program *p = nullptr;
    kfuse_plan *plan = nullptr;
    std::vector<kir_vid> in((size_t)info->n_in);  // clamp and select_n take three
    int at = -1;
    ASSERT_EQ(kir_program_new(&p), KILN_OK);
    for (int i = 0; i < info->n_in; i++) ASSERT_EQ(kir_add_invar(p, &aval, &in[i]), KILN_OK);
    ASSERT_EQ(kir_add_eqn(p, prim, nullptr, info->n_in, in.data(), &at), KILN_OK)
        << info->name << ": " << kiln_last_error();
    ASSERT_EQ(kir_set_outputs(p, 1, p->eqns[at].out), KILN_OK);
    ASSERT_EQ(kfuse_plan_build(p, nullptr, nullptr, &plan), KILN_OK) << kiln_last_error();
    ASSERT_EQ(plan->n_groups, 1) << info->name;
    EXPECT_EQ(plan->groups[0].kind, KFUSE_LOOP) << info->name;
    for (kcg_target t : {KCG_TARGET_C, KCG_TARGET_CUDA}) {
      kcg_target_info target = {t, 80};
      kcg_kernel k;
      EXPECT_EQ(kcg_emit(p, &plan->groups[0], &target, &k), KILN_OK)
          << info->name << " for " << (t == KCG_TARGET_C ? "C" : "CUDA") << ": "
          << kiln_last_error();
      kcg_kernel_free(&k);
    }
    kfuse_plan_free(plan);
    kir_program_free(p);
    checked++;
  }
  EXPECT_GE(checked, 50);  // the matrix's fused elementwise rows, not a vacuous loop
}
