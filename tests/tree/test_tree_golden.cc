// Pytrees against JAX (golden/trees.txt, from golden/trees.py): flatten,
// key paths, printing, cloning and hashing, and tree_map.
#include <gtest/gtest.h>

#include "tree_checks.h"

using namespace tree_test;

namespace {

// ---------------------------------------------------------------- golden data

std::string Decode(const std::string &s) {
  if (s == "%") return "";
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Tokens {
  std::vector<std::string> t;
  size_t i = 0;
  explicit Tokens(const std::string &line) {
    std::istringstream in(line);
    for (std::string w; in >> w;) t.push_back(w);
  }
  std::string Next() { return i < t.size() ? t[i++] : std::string("<end>"); }
  size_t Count() { return std::stoul(Next()); }
};

// Builds a tree from its golden spec with kiln's builders.
kiln_tree *Build(Tokens &tk) {
  std::string w = tk.Next();
  if (w == "leaf") return Leaf(std::stol(tk.Next()));
  if (w == "none") return kiln_tree_none();
  if (w == "tuple" || w == "list") {
    std::vector<kiln_tree *> c(tk.Count());
    for (auto &x : c) x = Build(tk);
    return w == "tuple" ? kiln_tree_tuple(c.size(), c.data()) : kiln_tree_list(c.size(), c.data());
  }
  if (w == "dict") {
    size_t n = tk.Count();
    std::vector<std::string> keys(n);
    std::vector<const char *> kp(n);
    std::vector<kiln_tree *> c(n);
    for (size_t i = 0; i < n; i++) {
      keys[i] = Decode(tk.Next());
      kp[i] = keys[i].c_str();
      c[i] = Build(tk);
    }
    return kiln_tree_dict(n, kp.data(), c.data());
  }
  std::string aux;
  const kiln_node_type *type = nullptr;
  if (w == "node") {
    std::string a = tk.Next();
    if (a != "-") aux = Decode(a);
    type = T().node;
  } else if (w == "box") {
    int64_t v = std::stoll(tk.Next());
    aux.assign(reinterpret_cast<const char *>(&v), sizeof v);
    type = T().box;
  } else if (w == "data") {
    type = kiln_node_type_find(tk.Next().c_str());
    for (size_t m = tk.Count(); m > 0; m--) aux += Decode(tk.Next()) + '\0';
  } else {
    ADD_FAILURE() << "unknown spec token " << w;
    return nullptr;
  }
  std::vector<kiln_tree *> c(tk.Count());
  for (auto &x : c) x = Build(tk);
  return kiln_tree_custom(type, c.size(), c.data(), aux.data(), aux.size());
}

kiln_tree *Build(const std::string &spec) {
  Tokens tk(spec);
  kiln_tree *t = Build(tk);
  EXPECT_EQ(tk.i, tk.t.size()) << "unread tokens in " << spec;
  return t;
}

struct GoldenLeaf {
  std::string label, path;
};
struct GoldenCase {
  std::string name, is_leaf, build, treedef;
  size_t num_leaves = 0, num_nodes = 0;
  std::vector<GoldenLeaf> leaves;
};
struct GoldenMap {
  std::string name, tree0, tree1;
  std::vector<std::pair<long, std::string>> matches;
  bool mismatch = false;
  std::string path;
};

struct Golden {
  std::vector<GoldenCase> cases;
  std::vector<GoldenMap> maps;
};

// "word rest-of-line": rest is everything after the first space ("" if none).
std::string Rest(const std::string &line, const std::string &word) {
  return line.size() > word.size() ? line.substr(word.size() + 1) : "";
}

const Golden &Load() {
  static const Golden g = [] {
    Golden out;
    std::ifstream in(KILN_GOLDEN_DIR "/trees.txt");
    EXPECT_TRUE(in.good()) << "cannot read " KILN_GOLDEN_DIR "/trees.txt";
    GoldenCase *c = nullptr;
    GoldenMap *m = nullptr;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::string w = line.substr(0, line.find(' ')), rest = Rest(line, w);
      if (w == "case") {
        c = &out.cases.emplace_back();
        c->name = rest;
      } else if (w == "map") {
        m = &out.maps.emplace_back();
        m->name = rest;
      } else if (w == "end") {
        c = nullptr;
        m = nullptr;
      } else if (c) {
        if (w == "is_leaf") c->is_leaf = rest;
        if (w == "build") c->build = rest;
        if (w == "treedef") c->treedef = rest;
        if (w == "num_leaves") c->num_leaves = std::stoul(rest);
        if (w == "num_nodes") c->num_nodes = std::stoul(rest);
        if (w == "leaf") {
          size_t sp = rest.find(' ');
          c->leaves.push_back(
              {rest.substr(0, sp), sp == std::string::npos ? "" : rest.substr(sp + 1)});
        }
      } else if (m) {
        if (w == "tree0") m->tree0 = rest;
        if (w == "tree1") m->tree1 = rest;
        if (w == "match") {
          Tokens tk(rest);
          long id = std::stol(tk.Next());
          m->matches.push_back({id, Decode(tk.Next())});
        }
        if (w == "mismatch") {
          m->mismatch = true;
          m->path = rest;
        }
      } else {
        ADD_FAILURE() << "trees.txt: a line outside any record: " << line;
      }
    }
    return out;
  }();
  return g;
}

int GoldenIsLeaf(const kiln_tree *t, void *user) {
  std::string pred = static_cast<const char *>(user);
  if (pred == "none") return kiln_tree_kind(t) == KILN_NODE_NONE;
  if (pred == "tuple") return kiln_tree_kind(t) == KILN_NODE_TUPLE;
  if (pred == "Linear") return kiln_tree_node_type(t) == T().linear;
  return 0;
}

// ---------------------------------------------------------------- golden tests

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    T();
    ASSERT_GE(Load().cases.size(), 20u);
    ASSERT_GE(Load().maps.size(), 10u);
  }
};

TEST_F(GoldenTest, FlattenMatchesJax) {
  for (const GoldenCase &c : Load().cases) {
    SCOPED_TRACE(c.name);
    Tree t(Build(c.build));
    ASSERT_NE(t.t, nullptr) << kiln_last_error();
    kiln_is_leaf_fn pred = c.is_leaf == "-" ? nullptr : GoldenIsLeaf;
    void *user = const_cast<char *>(c.is_leaf.c_str());
    kiln_leaf *leaves = nullptr;
    size_t n = 0;
    kiln_treedef *def = nullptr;
    ASSERT_EQ(kiln_tree_flatten(t.t, pred, user, &leaves, &n, &def), KILN_OK) << kiln_last_error();
    EXPECT_EQ(DefStr(def), c.treedef);
    EXPECT_EQ(n, c.num_leaves);
    EXPECT_EQ(kiln_treedef_num_leaves(def), c.num_leaves);
    EXPECT_EQ(kiln_treedef_num_nodes(def), c.num_nodes);
    ASSERT_EQ(c.leaves.size(), n);
    for (size_t i = 0; i < n; i++) {
      const std::string &label = c.leaves[i].label;
      if (label.rfind("T:", 0) == 0) {
        ASSERT_EQ(leaves[i].kind, KILN_LEAF_TREE) << "leaf " << i;
        EXPECT_EQ(Structure(leaves[i].u.tree), Decode(label.substr(2))) << "leaf " << i;
      } else {
        ASSERT_EQ(leaves[i].kind, KILN_LEAF_PTR) << "leaf " << i;
        EXPECT_EQ(PtrId(leaves[i].u.ptr), std::stol(label)) << "leaf " << i;
      }
    }
    // Unflattening puts the is_leaf subtrees back in place: the full structure.
    kiln_tree *back = nullptr;
    ASSERT_EQ(kiln_tree_unflatten(def, leaves, n, &back), KILN_OK) << kiln_last_error();
    EXPECT_EQ(Structure(back), Structure(t.t));
    kiln_tree_free(back);
    kiln_leaves_free(leaves, n);
    kiln_treedef_free(def);
  }
}

TEST_F(GoldenTest, KeyPathsMatchJax) {
  for (const GoldenCase &c : Load().cases) {
    SCOPED_TRACE(c.name);
    Tree t(Build(c.build));
    ASSERT_NE(t.t, nullptr) << kiln_last_error();
    kiln_is_leaf_fn pred = c.is_leaf == "-" ? nullptr : GoldenIsLeaf;
    void *user = const_cast<char *>(c.is_leaf.c_str());
    kiln_path *paths = nullptr;
    kiln_leaf *leaves = nullptr;
    size_t n = 0;
    ASSERT_EQ(kiln_tree_flatten_with_path(t.t, pred, user, &leaves, &paths, &n), KILN_OK)
        << kiln_last_error();
    ASSERT_EQ(n, c.leaves.size());
    for (size_t i = 0; i < n; i++) {
      EXPECT_EQ(PathStr(paths[i]), c.leaves[i].path) << "leaf " << i;
      // The path leads back to the leaf (or the subtree is_leaf chose).
      const kiln_tree *at = nullptr;
      ASSERT_EQ(kiln_tree_at(t.t, &paths[i], &at), KILN_OK) << kiln_last_error();
      if (leaves[i].kind == KILN_LEAF_TREE)
        EXPECT_EQ(Structure(at), Structure(leaves[i].u.tree));
      else
        EXPECT_EQ(kiln_tree_leaf_get(at)->u.ptr, leaves[i].u.ptr);
    }
    kiln_paths_free(paths, n);
    kiln_leaves_free(leaves, n);
    if (pred) continue;
    // Without is_leaf, kiln_tree_leaf_paths gives the same paths.
    ASSERT_EQ(kiln_tree_leaf_paths(t.t, &paths, &n), KILN_OK) << kiln_last_error();
    ASSERT_EQ(n, c.leaves.size());
    for (size_t i = 0; i < n; i++) EXPECT_EQ(PathStr(paths[i]), c.leaves[i].path);
    kiln_paths_free(paths, n);
  }
}

TEST_F(GoldenTest, TreeStrCloneAndHash) {
  std::vector<kiln_treedef *> defs;
  for (const GoldenCase &c : Load().cases) {
    SCOPED_TRACE(c.name);
    if (c.is_leaf != "-") continue;
    Tree t(Build(c.build));
    ASSERT_NE(t.t, nullptr) << kiln_last_error();
    EXPECT_EQ(kiln_tree_num_leaves(t.t), c.num_leaves);
    // PTR leaves print as "*": the tree prints as its treedef's inside.
    std::string inner = c.treedef.substr(10, c.treedef.size() - 11);
    EXPECT_EQ(TreeStr(t.t), inner);
    Def d(t.t);
    EXPECT_EQ(kiln_treedef_hash(d.d), ktree_structure_hash(t.t));
    EXPECT_TRUE(ktree_structure_matches(d.d, t.t));
    // A clone has the same structure and the same leaves, in new nodes.
    Tree clone(kiln_tree_clone(t.t));
    ASSERT_NE(clone.t, nullptr);
    EXPECT_NE(clone.t, t.t);
    Def dc(clone.t);
    EXPECT_TRUE(kiln_treedef_equal(d.d, dc.d));
    EXPECT_EQ(kiln_treedef_hash(d.d), kiln_treedef_hash(dc.d));
    EXPECT_EQ(Diff(d.d, dc.d), "");
    // A treedef clone is equal too, and outlives its source.
    defs.push_back(kiln_treedef_clone(d.d));
    EXPECT_EQ(DefStr(defs.back()), c.treedef);
  }
  // Different structures: never equal, and (FNV-1a over the nodes) no collision.
  std::set<uint64_t> hashes;
  for (size_t i = 0; i < defs.size(); i++) {
    hashes.insert(kiln_treedef_hash(defs[i]));
    for (size_t j = 0; j < defs.size(); j++)
      EXPECT_EQ(kiln_treedef_equal(defs[i], defs[j]), i == j) << i << " " << j;
  }
  EXPECT_EQ(hashes.size(), defs.size());
  for (auto *d : defs) kiln_treedef_free(d);
}

struct MapRecord {
  std::vector<std::pair<long, std::string>> seen;
};

kiln_status RecordPair(const kiln_leaf *const *leaves, size_t n_trees, void *user, kiln_leaf *out) {
  auto *r = static_cast<MapRecord *>(user);
  if (n_trees != 2 || leaves[0]->kind != KILN_LEAF_PTR) return KILN_ERR_INTERNAL;
  std::string s = leaves[1]->kind == KILN_LEAF_TREE ? Structure(leaves[1]->u.tree) : "PyTreeDef(*)";
  r->seen.push_back({PtrId(leaves[0]->u.ptr), s});
  out->kind = KILN_LEAF_PTR;
  out->u.ptr = leaves[0]->u.ptr;
  return KILN_OK;
}

TEST_F(GoldenTest, MapMatchesJax) {
  for (const GoldenMap &g : Load().maps) {
    SCOPED_TRACE(g.name);
    Tree t0(Build(g.tree0)), t1(Build(g.tree1));
    ASSERT_TRUE(t0.t && t1.t) << kiln_last_error();
    const kiln_tree *trees[] = {t0.t, t1.t};
    MapRecord rec;
    kiln_tree *out = nullptr;
    kiln_status st = kiln_tree_map(RecordPair, &rec, 2, trees, &out);
    if (g.mismatch) {
      EXPECT_EQ(st, KILN_ERR_TREE);
      EXPECT_EQ(out, nullptr);
      EXPECT_TRUE(rec.seen.empty()) << "f ran before the structures were checked";
      // kiln names the same node as JAX (then, for dict keys, the key).
      std::string where = g.path.empty() ? "at the root" : "at " + g.path;
      EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: tree 1 differs from tree 0 " + where))
          << kiln_last_error() << " / JAX: " << where;
      continue;
    }
    ASSERT_EQ(st, KILN_OK) << kiln_last_error();
    EXPECT_EQ(rec.seen, g.matches);
    EXPECT_EQ(Structure(out), Structure(t0.t));
    kiln_tree_free(out);
  }
}

}  // namespace
