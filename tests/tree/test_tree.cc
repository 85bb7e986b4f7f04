// Pytrees: structure, printing, key paths and map against JAX (golden/trees.txt),
// ownership of builders, custom node types, arrays as leaves, bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
extern "C" {
#include "tree/tree.h"  // ktree_structure_hash and friends
}

namespace {

// ---------------------------------------------------------------- helpers

bool Contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

// Leaves of the golden trees are ints; kiln holds them as PTR leaves.
void *IdPtr(long id) { return reinterpret_cast<void *>(static_cast<uintptr_t>(0x10000 + id)); }
long PtrId(const void *p) { return static_cast<long>(reinterpret_cast<uintptr_t>(p)) - 0x10000; }
kiln_tree *Leaf(long id) { return kiln_tree_ptr(IdPtr(id)); }

std::string DefStr(const kiln_treedef *d) {
  size_t n = kiln_treedef_str(d, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_treedef_str(d, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

std::string TreeStr(const kiln_tree *t) {
  size_t n = kiln_tree_str(t, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_tree_str(t, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

std::string PathStr(const kiln_path &p) {
  size_t n = kiln_path_str(&p, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_path_str(&p, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

// The treedef of t (no is_leaf), as a string.
std::string Structure(const kiln_tree *t) {
  kiln_treedef *d = nullptr;
  EXPECT_EQ(kiln_tree_flatten(t, nullptr, nullptr, nullptr, nullptr, &d), KILN_OK)
      << kiln_last_error();
  std::string s = DefStr(d);
  kiln_treedef_free(d);
  return s;
}

std::string Diff(const kiln_treedef *a, const kiln_treedef *b) {
  char buf[512];
  kiln_treedef_diff(a, b, buf, sizeof buf);
  return buf;
}

// Owns a treedef for the length of a test.
struct Def {
  kiln_treedef *d = nullptr;
  explicit Def(const kiln_tree *t) {
    EXPECT_EQ(kiln_tree_flatten(t, nullptr, nullptr, nullptr, nullptr, &d), KILN_OK)
        << kiln_last_error();
  }
  ~Def() { kiln_treedef_free(d); }
};

// Owns a tree for the length of a test.
struct Tree {
  kiln_tree *t;
  explicit Tree(kiln_tree *tree) : t(tree) {}
  ~Tree() { kiln_tree_free(t); }
  Tree(const Tree &) = delete;
  Tree &operator=(const Tree &) = delete;
};

kiln_tree *List(std::vector<kiln_tree *> c) { return kiln_tree_list(c.size(), c.data()); }
kiln_tree *Tuple(std::vector<kiln_tree *> c) { return kiln_tree_tuple(c.size(), c.data()); }
kiln_tree *Dict(std::vector<const char *> k, std::vector<kiln_tree *> c) {
  EXPECT_EQ(k.size(), c.size());
  return kiln_tree_dict(c.size(), k.data(), c.data());
}

// ---------------------------------------------------------------- custom node types

// The object behind the "Node" type: leaf pointers and an optional str aux.
struct NodeObj {
  std::vector<void *> leaves;
  bool has_aux = false;
  std::string aux;
};

kiln_status NodeFlatten(const void *obj, void *, kiln_tree ***children, size_t *n, void **aux,
                        size_t *aux_size) {
  if (!obj) return KILN_ERR_ARGUMENT;
  const NodeObj *o = static_cast<const NodeObj *>(obj);
  kiln_tree **c = static_cast<kiln_tree **>(calloc(o->leaves.size() + 1, sizeof *c));
  for (size_t i = 0; i < o->leaves.size(); i++) c[i] = kiln_tree_ptr(o->leaves[i]);
  *children = c;
  *n = o->leaves.size();
  *aux = nullptr;
  *aux_size = 0;
  if (o->has_aux && !o->aux.empty()) {
    *aux = malloc(o->aux.size());
    memcpy(*aux, o->aux.data(), o->aux.size());
    *aux_size = o->aux.size();
  }
  return KILN_OK;
}

kiln_status NodeUnflatten(const void *aux, size_t aux_size, const kiln_tree *const *children,
                          size_t n, void *, void **obj) {
  auto *o = new NodeObj;
  for (size_t i = 0; i < n; i++) {
    const kiln_leaf *l = kiln_tree_leaf_get(children[i]);
    if (!l || l->kind != KILN_LEAF_PTR) {
      delete o;
      return KILN_ERR_TREE;
    }
    o->leaves.push_back(l->u.ptr);
  }
  o->has_aux = aux_size > 0;
  o->aux.assign(static_cast<const char *>(aux), aux_size);
  *obj = o;
  return KILN_OK;
}

// Box's aux is an int64 scale, printed as a number (as JAX prints an int aux).
void BoxPrint(const void *aux, size_t aux_size, char *buf, size_t cap) {
  int64_t v = 0;
  if (aux_size == sizeof v) memcpy(&v, aux, sizeof v);
  snprintf(buf, cap, "%lld", static_cast<long long>(v));
}

kiln_status Unused(const void *, void *, kiln_tree ***, size_t *, void **, size_t *) {
  return KILN_ERR_INTERNAL;
}
kiln_status UnusedUn(const void *, size_t, const kiln_tree *const *, size_t, void *, void **) {
  return KILN_ERR_INTERNAL;
}

struct Types {
  const kiln_node_type *linear = nullptr, *point = nullptr, *node = nullptr, *box = nullptr;
};

// The types of the golden trees, registered once for the process.
const Types &T() {
  static const Types types = [] {
    Types t;
    const char *lin_fields[] = {"w", "b"}, *lin_meta[] = {"name"}, *pt_fields[] = {"x", "y"};
    EXPECT_EQ(kiln_register_dataclass_meta("Linear", 2, lin_fields, 1, lin_meta, &t.linear),
              KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(kiln_register_dataclass("Point", 2, pt_fields, &t.point), KILN_OK);
    kiln_node_callbacks node = {NodeFlatten, NodeUnflatten, nullptr, nullptr};
    EXPECT_EQ(kiln_register_node("Node", &node, &t.node), KILN_OK) << kiln_last_error();
    kiln_node_callbacks box = {Unused, UnusedUn, BoxPrint, nullptr};
    EXPECT_EQ(kiln_register_node("Box", &box, &t.box), KILN_OK) << kiln_last_error();
    return t;
  }();
  return types;
}

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

// ---------------------------------------------------------------- building and reading

TEST(TreeBuild, DictKeysAreSortedAndReadable) {
  Tree t(Dict({"w", "b", "a"}, {Leaf(0), List({Leaf(1), Leaf(2)}), kiln_tree_none()}));
  ASSERT_NE(t.t, nullptr);
  EXPECT_EQ(kiln_tree_kind(t.t), KILN_NODE_DICT);
  ASSERT_EQ(kiln_tree_num_children(t.t), 3u);
  EXPECT_STREQ(kiln_tree_key(t.t, 0), "a");
  EXPECT_STREQ(kiln_tree_key(t.t, 1), "b");
  EXPECT_STREQ(kiln_tree_key(t.t, 2), "w");
  EXPECT_EQ(kiln_tree_key(t.t, 3), nullptr);
  EXPECT_EQ(kiln_tree_kind(kiln_tree_child(t.t, 0)), KILN_NODE_NONE);
  EXPECT_EQ(kiln_tree_child(t.t, 3), nullptr);
  EXPECT_EQ(kiln_tree_get(t.t, "b"), kiln_tree_child(t.t, 1));
  EXPECT_EQ(kiln_tree_get(t.t, "x"), nullptr);
  EXPECT_EQ(kiln_tree_get(kiln_tree_child(t.t, 1), "b"), nullptr);  // a list has no keys
  const kiln_leaf *w = kiln_tree_leaf_get(kiln_tree_get(t.t, "w"));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->kind, KILN_LEAF_PTR);
  EXPECT_EQ(PtrId(w->u.ptr), 0);
  EXPECT_EQ(kiln_tree_leaf_get(t.t), nullptr);
  EXPECT_EQ(kiln_tree_leaf_array(kiln_tree_get(t.t, "w")), nullptr);
  EXPECT_EQ(kiln_tree_num_leaves(t.t), 3u);
  EXPECT_EQ(kiln_tree_key(kiln_tree_child(t.t, 1), 0), nullptr);
}

TEST(TreeBuild, LeafKinds) {
  int x = 0;
  kiln_val *v = reinterpret_cast<kiln_val *>(&x);  // opaque to the tree: never read
  Tree val(kiln_tree_val(v));
  ASSERT_NE(val.t, nullptr);
  EXPECT_EQ(kiln_tree_leaf_get(val.t)->kind, KILN_LEAF_VAL);
  EXPECT_EQ(kiln_tree_leaf_get(val.t)->u.val, v);
  Tree null_ptr(kiln_tree_ptr(nullptr));  // a NULL user pointer is a valid leaf
  ASSERT_NE(null_ptr.t, nullptr);
  EXPECT_EQ(kiln_tree_num_leaves(null_ptr.t), 1u);
  kiln_leaf l = {};
  l.kind = KILN_LEAF_PTR;
  l.u.ptr = &x;
  Tree p(kiln_tree_leaf(l));
  ASSERT_NE(p.t, nullptr);
  EXPECT_EQ(kiln_tree_leaf_get(p.t)->u.ptr, &x);
  // A TREE leaf is the tree itself, taken over.
  kiln_tree *sub = Tuple({Leaf(1), Leaf(2)});
  l.kind = KILN_LEAF_TREE;
  l.u.tree = sub;
  Tree spliced(kiln_tree_leaf(l));
  EXPECT_EQ(spliced.t, sub);
}

TEST(TreeBuild, BadLeaves) {
  kiln_clear_error();
  EXPECT_EQ(kiln_tree_array(nullptr), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_array")) << kiln_last_error();
  EXPECT_EQ(kiln_tree_val(nullptr), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_val")) << kiln_last_error();
  kiln_leaf l = {};
  l.kind = static_cast<kiln_leaf_kind>(42);
  EXPECT_EQ(kiln_tree_leaf(l), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_leaf: leaf 0 has an invalid kind 42"))
      << kiln_last_error();
  l.kind = KILN_LEAF_TREE;
  l.u.tree = nullptr;
  EXPECT_EQ(kiln_tree_leaf(l), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_leaf")) << kiln_last_error();
  // A TREE leaf that belongs to another tree is refused and left alone.
  Tree owner(List({Leaf(0)}));
  l.u.tree = const_cast<kiln_tree *>(kiln_tree_child(owner.t, 0));
  EXPECT_EQ(kiln_tree_leaf(l), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_leaf: the tree of leaf 0 belongs to another"))
      << kiln_last_error();
  EXPECT_EQ(Structure(owner.t), "PyTreeDef([*])");
}

// ---------------------------------------------------------------- ownership of builders
// The failing cases free what they were given exactly once: AddressSanitizer
// reports a leak, a double free or a use after free otherwise.

TEST(TreeOwnership, NullChildFailsAndFreesTheOthers) {
  kiln_clear_error();
  EXPECT_EQ(List({Leaf(0), nullptr, Dict({"a"}, {Leaf(1)})}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_list: child 1 is NULL")) << kiln_last_error();
  EXPECT_EQ(kiln_tree_tuple(2, nullptr), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_tuple: children is NULL"))
      << kiln_last_error();
}

TEST(TreeOwnership, NestedFailureIsReportedOnceAtTheTop) {
  // The inner dict fails (repeated key); the outer list sees a NULL child and
  // keeps the inner message.
  kiln_tree *t = List({Leaf(0), Dict({"k", "k"}, {Leaf(1), Leaf(2)}), Tuple({Leaf(3)})});
  EXPECT_EQ(t, nullptr);
  std::string msg = kiln_last_error();
  EXPECT_TRUE(Contains(msg,
                       "kiln_tree_list: child 1 is NULL: kiln_tree_dict: key 'k' appears "
                       "more than once"))
      << msg;
}

TEST(TreeOwnership, SameChildTwiceIsFreedOnce) {
  kiln_tree *a = Tuple({Leaf(0), Leaf(1)});
  EXPECT_EQ(List({Leaf(7), a, a}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_list: child 2 is the same tree as child 1"))
      << kiln_last_error();
  kiln_tree *b = Leaf(3);
  EXPECT_EQ(Dict({"x", "y"}, {b, b}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_dict: child 1 is the same tree as child 0"))
      << kiln_last_error();
}

TEST(TreeOwnership, ChildOfAnotherTreeIsRefusedAndLeftToIt) {
  Tree owner(Dict({"w"}, {Leaf(0)}));
  kiln_tree *inner = const_cast<kiln_tree *>(kiln_tree_get(owner.t, "w"));
  EXPECT_EQ(List({Leaf(1), inner}), nullptr);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_TREE), KILN_KIND_ARGUMENT);
  EXPECT_TRUE(
      Contains(kiln_last_error(), "kiln_tree_list: child 1 already belongs to another tree"))
      << kiln_last_error();
  // The owner is intact.
  EXPECT_EQ(Structure(owner.t), "PyTreeDef({'w': *})");
  EXPECT_EQ(PtrId(kiln_tree_leaf_get(kiln_tree_get(owner.t, "w"))->u.ptr), 0);
}

TEST(TreeOwnership, ARootWithItsOwnChildIsFreedOnce) {
  kiln_tree *root = List({Leaf(0), Leaf(1)});
  kiln_tree *child = const_cast<kiln_tree *>(kiln_tree_child(root, 1));
  // The root is given (and freed with its child); the child is refused.
  EXPECT_EQ(Tuple({child, root}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_tuple: child 0 already belongs"))
      << kiln_last_error();
}

TEST(TreeOwnership, AttachedChildCannotBeFreed) {
  Tree root(List({Leaf(0)}));
  kiln_clear_error();
  kiln_tree_free(const_cast<kiln_tree *>(kiln_tree_child(root.t, 0)));
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_free: the tree is a child of another tree"))
      << kiln_last_error();
  EXPECT_EQ(Structure(root.t), "PyTreeDef([*])");
  kiln_tree_free(nullptr);  // allowed
}

TEST(TreeOwnership, DictKeyProblemsFreeTheChildren) {
  EXPECT_EQ(Dict({"a", nullptr}, {Leaf(0), List({Leaf(1)})}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_dict: key 1 is NULL")) << kiln_last_error();
  kiln_tree *c[] = {Leaf(0)};
  EXPECT_EQ(kiln_tree_dict(1, nullptr, c), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_dict: keys is NULL")) << kiln_last_error();
  EXPECT_EQ(Dict({"b", "a", "b"}, {Leaf(0), Leaf(1), Leaf(2)}), nullptr);
  EXPECT_EQ(std::string(kiln_last_error()), "kiln_tree_dict: key 'b' appears more than once");
}

TEST(TreeOwnership, DepthIsBounded) {
  kiln_tree *t = Leaf(0);
  for (int i = 1; i < KILN_TREE_MAX_DEPTH; i++) t = List({t});
  ASSERT_NE(t, nullptr) << kiln_last_error();
  // Everything still works at the limit.
  kiln_path *paths = nullptr;
  size_t n = 0;
  ASSERT_EQ(kiln_tree_leaf_paths(t, &paths, &n), KILN_OK);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(paths[0].len, static_cast<size_t>(KILN_TREE_MAX_DEPTH - 1));
  kiln_paths_free(paths, n);
  kiln_tree *copy = kiln_tree_clone(t);
  ASSERT_NE(copy, nullptr);
  // One more level fails, and frees the whole chain.
  EXPECT_EQ(List({t}), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_list: the tree would nest deeper than 1000"))
      << kiln_last_error();
  // Unflatten splicing the chain under a list is too deep as well.
  Tree shell(List({Leaf(0)}));
  Def d(shell.t);
  kiln_leaf l = {};
  l.kind = KILN_LEAF_TREE;
  l.u.tree = copy;
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_tree_unflatten(d.d, &l, 1, &out), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_unflatten: the tree would nest deeper"))
      << kiln_last_error();
  kiln_tree_free(copy);
}

// ---------------------------------------------------------------- custom nodes

TEST(TreeCustom, DataclassNodes) {
  const Types &ty = T();
  EXPECT_EQ(kiln_node_type_find("Linear"), ty.linear);
  EXPECT_STREQ(kiln_node_type_name(ty.linear), "Linear");
  kiln_tree *c[] = {Leaf(0), Leaf(1)};
  Tree t(kiln_tree_custom(ty.linear, 2, c, "lin", 4));
  ASSERT_NE(t.t, nullptr) << kiln_last_error();
  EXPECT_EQ(kiln_tree_kind(t.t), KILN_NODE_CUSTOM);
  EXPECT_EQ(kiln_tree_node_type(t.t), ty.linear);
  EXPECT_STREQ(kiln_tree_key(t.t, 0), "w");
  EXPECT_STREQ(kiln_tree_key(t.t, 1), "b");
  size_t size = 0;
  EXPECT_EQ(memcmp(kiln_tree_aux(t.t, &size), "lin", 4), 0);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(kiln_tree_aux(kiln_tree_child(t.t, 0), &size), nullptr);
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(Structure(t.t), "PyTreeDef(CustomNode(Linear[('lin',)], [*, *]))");
  // Aux data take part in equality.
  kiln_tree *c2[] = {Leaf(0), Leaf(1)};
  Tree other(kiln_tree_custom(ty.linear, 2, c2, "out", 4));
  Def a(t.t), b(other.t);
  EXPECT_FALSE(kiln_treedef_equal(a.d, b.d));
  EXPECT_EQ(Diff(a.d, b.d), "at the root: CustomNode Linear with aux [('lin',)] vs [('out',)]");
  // A repr of a meta string with a quote in it, as Python writes it.
  kiln_tree *c3[] = {Leaf(0), Leaf(1)};
  Tree quoted(kiln_tree_custom(ty.linear, 2, c3, "it's", 5));
  EXPECT_EQ(Structure(quoted.t), "PyTreeDef(CustomNode(Linear[(\"it's\",)], [*, *]))");
}

TEST(TreeCustom, BadCustomNodes) {
  const Types &ty = T();
  kiln_clear_error();
  EXPECT_EQ(kiln_node_type_find("NoSuchType"), nullptr);
  EXPECT_TRUE(
      Contains(kiln_last_error(), "kiln_node_type_find: no node type is named 'NoSuchType'"))
      << kiln_last_error();
  EXPECT_EQ(kiln_node_type_find(nullptr), nullptr);
  // Unknown type: the children are still freed.
  kiln_tree *c[] = {Leaf(0), List({Leaf(1)})};
  EXPECT_EQ(kiln_tree_custom(kiln_node_type_find("NoSuchType"), 2, c, nullptr, 0), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_custom: the node type is NULL"))
      << kiln_last_error();
  kiln_tree *one[] = {Leaf(0)};
  EXPECT_EQ(kiln_tree_custom(ty.point, 1, one, nullptr, 0), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kiln_tree_custom: dataclass Point has 2 data fields, got 1 children"))
      << kiln_last_error();
  kiln_tree *two[] = {Leaf(0), Leaf(1)};
  EXPECT_EQ(kiln_tree_custom(ty.linear, 2, two, "no-nul", 6), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_custom: dataclass Linear has 1 meta field"))
      << kiln_last_error();
  kiln_tree *three[] = {Leaf(0), Leaf(1)};
  EXPECT_EQ(kiln_tree_custom(ty.node, 2, three, nullptr, 3), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_custom: aux is NULL with aux_size 3"))
      << kiln_last_error();
  Tree empty(kiln_tree_custom(ty.node, 0, nullptr, nullptr, 0));  // no children, no aux: fine
  EXPECT_NE(empty.t, nullptr) << kiln_last_error();
}

TEST(TreeCustom, EmptyCustomNodeIsFreed) {
  Tree t(kiln_tree_custom(T().node, 0, nullptr, "x", 1));
  ASSERT_NE(t.t, nullptr);
  EXPECT_EQ(Structure(t.t), "PyTreeDef(CustomNode(Node[x], []))");
}

TEST(TreeCustom, AuxRendering) {
  const Types &ty = T();
  unsigned char bin[] = {0x00, 0x01, 0xfe};
  kiln_tree *c[] = {Leaf(0)};
  Tree hex(kiln_tree_custom(ty.node, 1, c, bin, sizeof bin));
  EXPECT_EQ(Structure(hex.t), "PyTreeDef(CustomNode(Node[0x0001fe], [*]))");
  kiln_tree *c2[] = {Leaf(0)};
  Tree text(kiln_tree_custom(ty.node, 1, c2, "abc", 4));  // one trailing NUL is allowed
  EXPECT_EQ(Structure(text.t), "PyTreeDef(CustomNode(Node[abc], [*]))");
}

TEST(TreeCustom, ObjectsRoundTrip) {
  const Types &ty = T();
  int a = 1, b = 2;
  NodeObj obj;
  obj.leaves = {&a, &b};
  obj.has_aux = true;
  obj.aux = "tag";
  Tree t(kiln_tree_from_object(ty.node, &obj));
  ASSERT_NE(t.t, nullptr) << kiln_last_error();
  EXPECT_EQ(Structure(t.t), "PyTreeDef(CustomNode(Node[tag], [*, *]))");
  EXPECT_EQ(kiln_tree_leaf_get(kiln_tree_child(t.t, 1))->u.ptr, &b);
  void *back = nullptr;
  ASSERT_EQ(kiln_tree_to_object(t.t, &back), KILN_OK) << kiln_last_error();
  auto *o = static_cast<NodeObj *>(back);
  EXPECT_EQ(o->leaves, obj.leaves);
  EXPECT_EQ(o->aux, "tag");
  delete o;
}

TEST(TreeCustom, ObjectErrors) {
  const Types &ty = T();
  EXPECT_EQ(kiln_tree_from_object(ty.node, nullptr), nullptr);  // NodeFlatten refuses NULL
  EXPECT_TRUE(
      Contains(kiln_last_error(),
               "kiln_tree_from_object: the flatten callback of Node failed (KILN_ERR_ARGUMENT)"))
      << kiln_last_error();
  EXPECT_EQ(kiln_tree_from_object(ty.point, &ty), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_from_object: Point has no flatten callback"))
      << kiln_last_error();
  EXPECT_EQ(kiln_tree_from_object(nullptr, &ty), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_from_object: the node type is NULL"));
  void *obj = nullptr;
  Tree list(List({Leaf(0)}));
  EXPECT_EQ(kiln_tree_to_object(list.t, &obj), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_to_object: the tree is no custom node"));
  EXPECT_EQ(kiln_tree_to_object(nullptr, &obj), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_to_object"));
  // The unflatten callback's failure comes back with its status.
  kiln_tree *c[] = {Tuple({})};
  Tree bad(kiln_tree_custom(ty.node, 1, c, nullptr, 0));
  EXPECT_EQ(kiln_tree_to_object(bad.t, &obj), KILN_ERR_TREE);
  EXPECT_TRUE(
      Contains(kiln_last_error(), "kiln_tree_to_object: the unflatten callback of Node failed"))
      << kiln_last_error();
  // A dataclass has no unflatten callback.
  kiln_tree *p[] = {Leaf(0), Leaf(1)};
  Tree point(kiln_tree_custom(ty.point, 2, p, nullptr, 0));
  EXPECT_EQ(kiln_tree_to_object(point.t, &obj), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_to_object: Point has no unflatten callback"));
}

TEST(TreeRegistry, BadRegistrations) {
  T();
  kiln_node_callbacks cb = {NodeFlatten, NodeUnflatten, nullptr, nullptr};
  EXPECT_EQ(kiln_register_node("Node", &cb, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(),
                       "kiln_register_node: a node type named 'Node' is already registered"))
      << kiln_last_error();
  const char *f[] = {"x"};
  EXPECT_EQ(kiln_register_dataclass("Node", 1, f, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_dataclass: a node type named 'Node'"));
  EXPECT_EQ(kiln_register_node(nullptr, &cb, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_node: the name is NULL"));
  EXPECT_EQ(kiln_register_node("", &cb, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_node: the name is empty"));
  EXPECT_EQ(kiln_register_node("NoCallbacks", nullptr, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_node: the callbacks are NULL"));
  kiln_node_callbacks half = {NodeFlatten, nullptr, nullptr, nullptr};
  EXPECT_EQ(kiln_register_node("Half", &half, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_node: the unflatten callback is NULL"));
  const char *dup[] = {"a", "b", "a"};
  EXPECT_EQ(kiln_register_dataclass("Dup", 3, dup, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_dataclass: the name 'a' is used twice"));
  const char *meta[] = {"b"};
  EXPECT_EQ(kiln_register_dataclass_meta("Clash", 2, dup, 1, meta, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(
      Contains(kiln_last_error(), "kiln_register_dataclass_meta: the name 'b' is used twice"))
      << kiln_last_error();
  const char *holes[] = {"a", nullptr};
  EXPECT_EQ(kiln_register_dataclass("Holes", 2, holes, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_dataclass: field 1 is NULL"));
  EXPECT_EQ(kiln_register_dataclass("NoFields", 2, nullptr, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_register_dataclass: field is NULL for 2"));
  // None of the failed names were registered.
  for (const char *name : {"NoCallbacks", "Half", "Dup", "Clash", "Holes", "NoFields"})
    EXPECT_EQ(kiln_node_type_find(name), nullptr) << name;
}

TEST(TreeRegistry, ConcurrentRegistrationKeepsNamesUnique) {
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  std::vector<const kiln_node_type *> mine(8);
  for (int i = 0; i < 8; i++) {
    threads.emplace_back([i, &won, &mine] {
      const char *f[] = {"v"};
      if (kiln_register_dataclass("Contested", 1, f, nullptr) == KILN_OK) won++;
      std::string own = "Own" + std::to_string(i);
      EXPECT_EQ(kiln_register_dataclass(own.c_str(), 1, f, &mine[i]), KILN_OK);
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  for (int i = 0; i < 8; i++)
    EXPECT_EQ(kiln_node_type_find(("Own" + std::to_string(i)).c_str()), mine[i]);
}

// ---------------------------------------------------------------- flatten / unflatten

TEST(TreeFlatten, OutputsAreOptional) {
  Tree t(Dict({"b", "a"}, {Leaf(1), Leaf(0)}));
  size_t n = 0;
  ASSERT_EQ(kiln_tree_flatten(t.t, nullptr, nullptr, nullptr, &n, nullptr), KILN_OK);
  EXPECT_EQ(n, 2u);
  kiln_leaf *leaves = nullptr;
  ASSERT_EQ(kiln_tree_flatten(t.t, nullptr, nullptr, &leaves, nullptr, nullptr), KILN_OK);
  EXPECT_EQ(PtrId(leaves[0].u.ptr), 0);
  EXPECT_EQ(PtrId(leaves[1].u.ptr), 1);
  kiln_leaves_free(leaves, 2);
  kiln_leaves_free(nullptr, 0);
  EXPECT_EQ(kiln_tree_flatten(nullptr, nullptr, nullptr, &leaves, &n, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_flatten: the tree is NULL"));
}

TEST(TreeFlatten, IsLeafIsAskedOncePerInnerNode) {
  Tree t(List({Leaf(0), Tuple({Leaf(1), kiln_tree_none()}), Dict({"a"}, {Leaf(2)})}));
  struct Count {
    int calls = 0;
  } count;
  auto pred = [](const kiln_tree *s, void *user) -> int {
    static_cast<Count *>(user)->calls++;
    EXPECT_NE(kiln_tree_kind(s), KILN_NODE_LEAF);
    return 0;
  };
  kiln_treedef *d = nullptr;
  ASSERT_EQ(kiln_tree_flatten(t.t, pred, &count, nullptr, nullptr, &d), KILN_OK);
  EXPECT_EQ(count.calls, 4);  // list, tuple, None, dict
  EXPECT_EQ(DefStr(d), "PyTreeDef([*, (*, None), {'a': *}])");
  kiln_treedef_free(d);
  count.calls = 0;
  kiln_path *paths = nullptr;
  size_t n = 0;
  ASSERT_EQ(kiln_tree_flatten_with_path(t.t, pred, &count, nullptr, &paths, &n), KILN_OK);
  EXPECT_EQ(count.calls, 4);
  EXPECT_EQ(n, 3u);
  kiln_paths_free(paths, n);
}

TEST(TreeFlatten, IsLeafAtTheRoot) {
  Tree t(Tuple({Leaf(0), Leaf(1)}));
  auto all = [](const kiln_tree *, void *) -> int { return 1; };
  kiln_leaf *leaves = nullptr;
  size_t n = 0;
  kiln_treedef *d = nullptr;
  ASSERT_EQ(kiln_tree_flatten(t.t, all, nullptr, &leaves, &n, &d), KILN_OK);
  EXPECT_EQ(DefStr(d), "PyTreeDef(*)");
  ASSERT_EQ(n, 1u);
  ASSERT_EQ(leaves[0].kind, KILN_LEAF_TREE);
  EXPECT_NE(leaves[0].u.tree, t.t);  // a copy
  EXPECT_EQ(Structure(leaves[0].u.tree), "PyTreeDef((*, *))");
  kiln_leaves_free(leaves, n);
  kiln_treedef_free(d);
}

TEST(TreeFlatten, UnflattenBadInput) {
  Tree t(Dict({"w", "b"}, {Leaf(0), List({Leaf(1), Leaf(2)})}));
  Def d(t.t);
  kiln_leaf leaves[4] = {};
  for (auto &l : leaves) l.kind = KILN_LEAF_PTR;
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_tree_unflatten(d.d, leaves, 2, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_unflatten: PyTreeDef({'b': [*, *], 'w': *}) has 3 leaves, got 2");
  EXPECT_EQ(kiln_tree_unflatten(d.d, leaves, 4, &out), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "has 3 leaves, got 4"));
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(kiln_tree_unflatten(nullptr, leaves, 3, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_unflatten: def is NULL"));
  EXPECT_EQ(kiln_tree_unflatten(d.d, nullptr, 3, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_unflatten: leaves is NULL"));
  EXPECT_EQ(kiln_tree_unflatten(d.d, leaves, 3, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_unflatten: out is NULL"));
  leaves[1].kind = KILN_LEAF_ARRAY;
  leaves[1].u.array = nullptr;
  EXPECT_EQ(kiln_tree_unflatten(d.d, leaves, 3, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_unflatten: leaf 1 of kind 1 holds NULL"))
      << kiln_last_error();
  // A treedef of no leaves takes none.
  Tree none(kiln_tree_none());
  Def dn(none.t);
  ASSERT_EQ(kiln_tree_unflatten(dn.d, nullptr, 0, &out), KILN_OK);
  EXPECT_EQ(kiln_tree_kind(out), KILN_NODE_NONE);
  kiln_tree_free(out);
}

TEST(TreeFlatten, UnflattenCopiesTreeLeaves) {
  // A TREE leaf that belongs to another tree is copied, not taken.
  Tree src(List({Tuple({Leaf(5), Leaf(6)})}));
  Tree shell(List({Leaf(0), Leaf(1)}));
  Def d(shell.t);
  kiln_leaf leaves[2] = {};
  leaves[0].kind = KILN_LEAF_PTR;
  leaves[0].u.ptr = IdPtr(4);
  leaves[1].kind = KILN_LEAF_TREE;
  leaves[1].u.tree = const_cast<kiln_tree *>(kiln_tree_child(src.t, 0));
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_tree_unflatten(d.d, leaves, 2, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Structure(out), "PyTreeDef([*, (*, *)])");
  EXPECT_NE(kiln_tree_child(out, 1), kiln_tree_child(src.t, 0));
  kiln_tree_free(out);
  EXPECT_EQ(Structure(src.t), "PyTreeDef([(*, *)])");
}

// ---------------------------------------------------------------- treedefs

TEST(TreeDef, DiffNamesTheFirstDifference) {
  Tree a(Dict({"params", "step"}, {Dict({"w", "b"}, {Leaf(0), Leaf(1)}), Leaf(2)}));
  Tree b(Dict({"params", "step"}, {Dict({"x", "b"}, {Leaf(0), Leaf(1)}), Leaf(2)}));
  Tree c(Dict({"params", "step"}, {Dict({"w", "b"}, {Leaf(0), Leaf(1)}), List({Leaf(2)})}));
  Tree d(List({Leaf(0), Leaf(1)}));
  Tree e(List({Leaf(0), Leaf(1), Leaf(2)}));
  Tree f(Tuple({Leaf(0), Leaf(1)}));
  Def da(a.t), db(b.t), dc(c.t), dd(d.t), de(e.t), df(f.t);
  EXPECT_EQ(Diff(da.d, db.d), "at ['params']['w']: dict keys ['b','w'] vs ['b','x']");
  EXPECT_EQ(Diff(da.d, dc.d), "at ['step']: leaf vs list");
  EXPECT_EQ(Diff(dd.d, de.d), "at the root: list of 2 children vs 3");
  EXPECT_EQ(Diff(dd.d, df.d), "at the root: list vs tuple");
  EXPECT_EQ(Diff(da.d, da.d), "");
  EXPECT_EQ(Diff(da.d, nullptr), "at the root: one treedef is NULL");
  EXPECT_FALSE(kiln_treedef_equal(da.d, db.d));
  EXPECT_FALSE(kiln_treedef_equal(da.d, nullptr));
  EXPECT_TRUE(kiln_treedef_equal(nullptr, nullptr));
  EXPECT_FALSE(ktree_structure_matches(da.d, b.t));
  EXPECT_FALSE(ktree_structure_matches(dd.d, f.t));
  EXPECT_TRUE(ktree_structure_matches(da.d, a.t));
  // Fewer keys: the first key the shorter dict lacks.
  Tree g(Dict({"a"}, {Leaf(0)}));
  Tree h(Dict({"a", "b"}, {Leaf(0), Leaf(1)}));
  Def dg(g.t), dh(h.t);
  EXPECT_EQ(Diff(dg.d, dh.d), "at ['b']: dict keys ['a'] vs ['a','b']");
  // Custom node types.
  kiln_tree *n1[] = {Leaf(0)}, *n2[] = {Leaf(0)};
  int64_t one = 1;
  Tree node(kiln_tree_custom(T().node, 1, n1, nullptr, 0));
  Tree box(kiln_tree_custom(T().box, 1, n2, &one, sizeof one));
  Def dnode(node.t), dbox(box.t);
  EXPECT_EQ(Diff(dnode.d, dbox.d), "at the root: CustomNode Node vs CustomNode Box");
}

TEST(TreeDef, StrTruncatesLikeSnprintf) {
  Tree t(Dict({"b", "w"}, {List({Leaf(0), Leaf(1)}), Leaf(2)}));
  Def d(t.t);
  char buf[12];
  size_t n = kiln_treedef_str(d.d, buf, sizeof buf);
  EXPECT_EQ(n, strlen("PyTreeDef({'b': [*, *], 'w': *})"));
  EXPECT_STREQ(buf, "PyTreeDef({");
  EXPECT_EQ(kiln_treedef_str(d.d, nullptr, 0), n);
  EXPECT_EQ(DefStr(nullptr), "PyTreeDef(<NULL>)");
  EXPECT_EQ(kiln_treedef_clone(nullptr), nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_treedef_clone: the treedef is NULL"));
}

TEST(TreeDef, BorrowedLeaves) {
  Tree t(Dict({"b", "a"}, {List({Leaf(1), Leaf(2)}), Leaf(0)}));
  const kiln_leaf *got[2];
  EXPECT_EQ(ktree_leaves_borrow(t.t, got, 2), 3u);  // the count, even past cap
  EXPECT_EQ(PtrId(got[0]->u.ptr), 0);
  EXPECT_EQ(PtrId(got[1]->u.ptr), 1);
}

// ---------------------------------------------------------------- key paths

TEST(TreePath, LookupAndErrors) {
  kiln_tree *lin[] = {Leaf(1), List({Leaf(2)})};
  kiln_tree *node_c[] = {Leaf(3)};
  Tree t(Dict({"params", "seq", "node"},
              {kiln_tree_custom(T().linear, 2, lin, "l", 2), Tuple({Leaf(0), kiln_tree_none()}),
               kiln_tree_custom(T().node, 1, node_c, nullptr, 0)}));
  ASSERT_NE(t.t, nullptr) << kiln_last_error();
  auto at = [&](std::vector<kiln_key> keys, const kiln_tree **out) {
    kiln_path p = {keys.size(), keys.data()};
    return kiln_tree_at(t.t, &p, out);
  };
  const kiln_tree *out = nullptr;
  kiln_key params = {KILN_KEY_DICT, 0, "params"}, b = {KILN_KEY_ATTR, 0, "b"};
  kiln_key i0 = {KILN_KEY_INDEX, 0, nullptr}, i1 = {KILN_KEY_INDEX, 1, nullptr};
  kiln_key f0 = {KILN_KEY_FLAT, 0, nullptr}, node = {KILN_KEY_DICT, 0, "node"};
  ASSERT_EQ(at({params, b, i0}, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(PtrId(kiln_tree_leaf_get(out)->u.ptr), 2);
  ASSERT_EQ(at({node, f0}, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(PtrId(kiln_tree_leaf_get(out)->u.ptr), 3);
  ASSERT_EQ(at({}, &out), KILN_OK);
  EXPECT_EQ(out, t.t);
  kiln_key seq = {KILN_KEY_DICT, 0, "seq"}, missing = {KILN_KEY_DICT, 0, "missing"};
  ASSERT_EQ(at({seq, i1}, &out), KILN_OK);
  EXPECT_EQ(kiln_tree_kind(out), KILN_NODE_NONE);

  EXPECT_EQ(at({missing}, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_at: key ['missing'] at the root is missing from a dict of 3 children");
  kiln_key i5 = {KILN_KEY_INDEX, 5, nullptr};
  EXPECT_EQ(at({seq, i5}, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_at: key [5] at ['seq'] is out of range for a tuple of 2 children");
  kiln_key c = {KILN_KEY_ATTR, 0, "c"};
  EXPECT_EQ(at({params, c}, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_at: key .c at ['params'] is missing from a CustomNode Linear of 2 children");
  EXPECT_EQ(at({seq, b}, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_at: key .b at ['seq'] needs a dataclass, found a tuple");
  EXPECT_EQ(at({params, b, i0, i0}, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_at: key [0] at ['params'].b[0] needs a list or tuple, found a leaf");
  kiln_key f3 = {KILN_KEY_FLAT, 3, nullptr};
  EXPECT_EQ(at({node, f3}, &out), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "key [<flat index 3>] at ['node'] is out of range"));
  kiln_key noname = {KILN_KEY_DICT, 0, nullptr};
  EXPECT_EQ(at({noname}, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_at: key 0 has a NULL name"));
  kiln_path p = {1, nullptr};
  EXPECT_EQ(kiln_tree_at(t.t, &p, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_at: path->keys is NULL"));
  EXPECT_EQ(kiln_tree_at(nullptr, &p, &out), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_tree_at(t.t, nullptr, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_at: path is NULL"));
}

TEST(TreePath, PathsOwnTheirNames) {
  kiln_path *paths = nullptr;
  size_t n = 0;
  {
    Tree t(Dict({"outer"}, {Dict({"inner"}, {Leaf(0)})}));
    ASSERT_EQ(kiln_tree_leaf_paths(t.t, &paths, &n), KILN_OK);
  }  // the tree is gone; the paths stay valid
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(PathStr(paths[0]), "['outer']['inner']");
  kiln_paths_free(paths, n);
  kiln_path root = {0, nullptr};
  EXPECT_EQ(PathStr(root), "");
  EXPECT_EQ(kiln_tree_leaf_paths(nullptr, &paths, &n), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_leaf_paths: t is NULL"));
  EXPECT_EQ(kiln_treedef_leaf_paths(nullptr, &paths, &n), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_treedef_leaf_paths: d is NULL"));
}

// ---------------------------------------------------------------- map

kiln_status SumIds(const kiln_leaf *const *leaves, size_t n_trees, void *, kiln_leaf *out) {
  long sum = 0;
  for (size_t k = 0; k < n_trees; k++) sum += PtrId(leaves[k]->u.ptr);
  out->kind = KILN_LEAF_PTR;
  out->u.ptr = IdPtr(sum);
  return KILN_OK;
}

TEST(TreeMap, ThreeTrees) {
  Tree a(Dict({"w", "b"}, {Leaf(1), List({Leaf(2), Leaf(3)})}));
  Tree b(Dict({"b", "w"}, {List({Leaf(10), Leaf(20)}), Leaf(30)}));
  Tree c(kiln_tree_clone(b.t));
  const kiln_tree *trees[] = {a.t, b.t, c.t};
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_tree_map(SumIds, nullptr, 3, trees, &out), KILN_OK) << kiln_last_error();
  kiln_leaf *leaves = nullptr;
  size_t n = 0;
  ASSERT_EQ(kiln_tree_flatten(out, nullptr, nullptr, &leaves, &n, nullptr), KILN_OK);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(PtrId(leaves[0].u.ptr), 2 + 10 + 10);
  EXPECT_EQ(PtrId(leaves[1].u.ptr), 3 + 20 + 20);
  EXPECT_EQ(PtrId(leaves[2].u.ptr), 1 + 30 + 30);
  kiln_leaves_free(leaves, n);
  kiln_tree_free(out);
}

TEST(TreeMap, MismatchMessage) {
  Tree a(Dict({"params"}, {Dict({"b", "w"}, {Leaf(0), Leaf(1)})}));
  Tree b(Dict({"params"}, {Dict({"b", "x"}, {Leaf(0), Leaf(1)})}));
  const kiln_tree *trees[] = {a.t, a.t, b.t};
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_tree_map(SumIds, nullptr, 3, trees, &out), KILN_ERR_TREE);
  EXPECT_EQ(std::string(kiln_last_error()),
            "kiln_tree_map: tree 2 differs from tree 0 at ['params']['w']: dict keys ['b','w'] "
            "vs ['b','x']");
  EXPECT_EQ(out, nullptr);
}

kiln_status FailAtSecond(const kiln_leaf *const *leaves, size_t, void *user, kiln_leaf *out) {
  int *calls = static_cast<int *>(user);
  if (++*calls == 2) return KILN_ERR_DTYPE;
  // A fresh subtree per leaf: taken over by the result, freed on failure.
  out->kind = KILN_LEAF_TREE;
  out->u.tree = List({kiln_tree_ptr(leaves[0]->u.ptr)});
  return KILN_OK;
}

TEST(TreeMap, FunctionFailureReleasesResults) {
  Tree a(List({Leaf(0), Leaf(1), Leaf(2)}));
  const kiln_tree *trees[] = {a.t};
  int calls = 0;
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_tree_map(FailAtSecond, &calls, 1, trees, &out), KILN_ERR_DTYPE);
  EXPECT_TRUE(
      Contains(kiln_last_error(), "kiln_tree_map: the function failed at leaf 1 (KILN_ERR_DTYPE)"))
      << kiln_last_error();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(out, nullptr);
}

kiln_status ToSubtree(const kiln_leaf *const *leaves, size_t, void *, kiln_leaf *out) {
  out->kind = KILN_LEAF_TREE;
  out->u.tree = Tuple({kiln_tree_ptr(leaves[0]->u.ptr), kiln_tree_none()});
  return KILN_OK;
}

TEST(TreeMap, ResultsMayBeSubtrees) {
  Tree a(Dict({"x", "y"}, {Leaf(0), Leaf(1)}));
  const kiln_tree *trees[] = {a.t};
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_tree_map(ToSubtree, nullptr, 1, trees, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Structure(out), "PyTreeDef({'x': (*, None), 'y': (*, None)})");
  kiln_tree_free(out);
}

kiln_status SameTreeTwice(const kiln_leaf *const *, size_t, void *user, kiln_leaf *out) {
  out->kind = KILN_LEAF_TREE;
  out->u.tree = static_cast<kiln_tree *>(user);
  return KILN_OK;
}

kiln_status BadLeaf(const kiln_leaf *const *, size_t, void *, kiln_leaf *out) {
  out->kind = KILN_LEAF_ARRAY;
  out->u.array = nullptr;
  return KILN_OK;
}

TEST(TreeMap, BadResultsAndArguments) {
  Tree a(List({Leaf(0), Leaf(1)}));
  const kiln_tree *trees[] = {a.t};
  kiln_tree *out = nullptr;
  // The same tree handed over twice: the first is taken (and freed), the
  // second refused.
  kiln_tree *shared = Tuple({Leaf(9)});
  EXPECT_EQ(kiln_tree_map(SameTreeTwice, shared, 1, trees, &out), KILN_ERR_TREE);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: the tree of leaf 1 belongs to another"))
      << kiln_last_error();
  EXPECT_EQ(kiln_tree_map(BadLeaf, nullptr, 1, trees, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: leaf 0 of kind 1 holds NULL"));
  EXPECT_EQ(kiln_tree_map(nullptr, nullptr, 1, trees, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: f is NULL"));
  EXPECT_EQ(kiln_tree_map(SumIds, nullptr, 0, trees, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: no trees to map over"));
  const kiln_tree *with_null[] = {a.t, nullptr};
  EXPECT_EQ(kiln_tree_map(SumIds, nullptr, 2, with_null, &out), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: tree 1 is NULL"));
  EXPECT_EQ(kiln_tree_map(SumIds, nullptr, 1, trees, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_tree_map: out is NULL"));
}

// ---------------------------------------------------------------- arrays as leaves

class TreeArrays : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_options o;
    kiln_options_init(&o);
    o.backend = KILN_BACKEND_CPU;
    o.num_cpu_devices = 1;
    ASSERT_EQ(kiln_ctx_new(&o, &ctx_), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_device_get(ctx_, 0, &dev_), KILN_OK);
  }
  void TearDown() override { kiln_ctx_free(ctx_); }
  kiln_array *Floats(std::vector<int64_t> shape, float start) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++) v[i] = start + static_cast<float>(i);
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev_, KILN_F32, static_cast<int>(shape.size()), shape.data(),
                                   v.data(), v.size() * sizeof(float), &a),
              KILN_OK)
        << kiln_last_error();
    return a;
  }
  // Bytes the device holds: an array's buffer goes when its last reference does.
  uint64_t InUse() {
    uint64_t bytes = 0;
    EXPECT_EQ(kiln_device_memory_in_use(dev_, &bytes), KILN_OK);
    return bytes;
  }
  kiln_ctx *ctx_ = nullptr;
  kiln_device *dev_ = nullptr;
};

TEST_F(TreeArrays, TreesRetainAndReleaseTheirArrays) {
  kiln_array *w = Floats({2, 3}, 0), *b = Floats({3}, 10);
  const uint64_t both = 9 * sizeof(float);
  ASSERT_EQ(InUse(), both);
  kiln_tree *t = Dict({"w", "b"}, {kiln_tree_array(w), kiln_tree_array(b)});
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(TreeStr(t), "{'b': f32[3], 'w': f32[2,3]}");
  EXPECT_EQ(kiln_tree_leaf_array(kiln_tree_get(t, "w")), w);
  kiln_array_release(w);  // the tree keeps its own references
  kiln_array_release(b);
  EXPECT_EQ(InUse(), both);
  kiln_leaf *leaves = nullptr;
  size_t n = 0;
  kiln_treedef *d = nullptr;
  ASSERT_EQ(kiln_tree_flatten(t, nullptr, nullptr, &leaves, &n, &d), KILN_OK);
  kiln_tree *clone = kiln_tree_clone(t);
  ASSERT_NE(clone, nullptr);
  kiln_tree_free(t);
  EXPECT_EQ(InUse(), both);  // held by the flat leaves and the clone
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_tree_unflatten(d, leaves, n, &back), KILN_OK);
  kiln_leaves_free(leaves, n);
  kiln_tree_free(clone);
  EXPECT_EQ(InUse(), both);  // held by the unflattened tree
  EXPECT_EQ(kiln_tree_leaf_array(kiln_tree_get(back, "b")), b);
  kiln_leaf l = {};
  l.kind = KILN_LEAF_ARRAY;
  l.u.array = b;
  kiln_tree *leaf = kiln_tree_leaf(l);  // retains, as kiln_tree_array does
  ASSERT_NE(leaf, nullptr);
  kiln_tree_free(back);
  EXPECT_EQ(InUse(), 3 * sizeof(float));
  kiln_tree_free(leaf);
  EXPECT_EQ(InUse(), 0u);
  kiln_treedef_free(d);
}

TEST_F(TreeArrays, FailedBuildReleasesArrays) {
  kiln_array *w = Floats({4}, 0);
  kiln_tree *leaf = kiln_tree_array(w);
  kiln_array_release(w);
  EXPECT_EQ(Dict({"a", "a"}, {leaf, kiln_tree_none()}), nullptr);
  EXPECT_EQ(InUse(), 0u);
}

// out = leaves[0] * by + leaves[1] (when given), as a new array.
kiln_status ScaleAdd(const kiln_leaf *const *leaves, size_t n_trees, void *user, kiln_leaf *out) {
  float by = *static_cast<float *>(user);
  kiln_array *x = leaves[0]->u.array;
  std::vector<float> v(kiln_array_size(x)), y(v.size(), 0.0f);
  kiln_status st = kiln_array_to_host(x, v.data(), v.size() * sizeof(float));
  if (!st && n_trees > 1)
    st = kiln_array_to_host(leaves[1]->u.array, y.data(), y.size() * sizeof(float));
  if (st) return st;
  for (size_t i = 0; i < v.size(); i++) v[i] = v[i] * by + y[i];
  kiln_array *r = nullptr;
  st = kiln_array_from_host(kiln_array_device(x), KILN_F32, kiln_array_rank(x), kiln_array_shape(x),
                            v.data(), v.size() * sizeof(float), &r);
  if (st) return st;
  out->kind = KILN_LEAF_ARRAY;
  out->u.array = r;  // handed over: the result tree takes this reference
  return KILN_OK;
}

TEST_F(TreeArrays, MapBuildsNewArrays) {
  kiln_array *w = Floats({2, 2}, 1), *b = Floats({2}, 5);
  Tree params(Dict({"w", "b"}, {kiln_tree_array(w), kiln_tree_array(b)}));
  kiln_array_release(w);
  kiln_array_release(b);
  Tree grads(kiln_tree_clone(params.t));
  const kiln_tree *trees[] = {params.t, grads.t};
  float by = -0.5f;
  kiln_tree *out = nullptr;
  ASSERT_EQ(kiln_tree_map(ScaleAdd, &by, 2, trees, &out), KILN_OK) << kiln_last_error();
  EXPECT_EQ(TreeStr(out), "{'b': f32[2], 'w': f32[2,2]}");
  EXPECT_EQ(InUse(), 2 * 6 * sizeof(float));
  float got[4];
  ASSERT_EQ(kiln_array_to_host(kiln_tree_leaf_array(kiln_tree_get(out, "w")), got, sizeof got),
            KILN_OK);
  EXPECT_FLOAT_EQ(got[0], 0.5f);  // 1 * -0.5 + 1
  EXPECT_FLOAT_EQ(got[3], 2.0f);  // 4 * -0.5 + 4
  kiln_tree_free(out);
  EXPECT_EQ(InUse(), 6 * sizeof(float));  // the new arrays went with the result
}

kiln_status FailOnSecond(const kiln_leaf *const *leaves, size_t n, void *user, kiln_leaf *out) {
  int *calls = static_cast<int *>(user);
  if (++*calls == 2) return KILN_ERR_OUT_OF_MEMORY;
  float one = 1.0f;
  return ScaleAdd(leaves, n, &one, out);
}

TEST_F(TreeArrays, MapFailureReleasesNewArrays) {
  Tree params(List({kiln_tree_array(Floats({3}, 0)), kiln_tree_array(Floats({3}, 1))}));
  // The arrays Floats made have two references each: the test's and the tree's.
  kiln_array_release(kiln_tree_leaf_array(kiln_tree_child(params.t, 0)));
  kiln_array_release(kiln_tree_leaf_array(kiln_tree_child(params.t, 1)));
  const kiln_tree *trees[] = {params.t};
  int calls = 0;
  kiln_tree *out = nullptr;
  EXPECT_EQ(kiln_tree_map(FailOnSecond, &calls, 1, trees, &out), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(InUse(), 6 * sizeof(float));  // the first result was released
}

}  // namespace
