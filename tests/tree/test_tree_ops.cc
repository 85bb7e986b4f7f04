// Pytree operations: flatten and unflatten, treedefs (diff, printing,
// borrowed leaves), key paths, and tree_map over several trees with its
// failures and bad results.
#include <gtest/gtest.h>

#include "tree_checks.h"

using namespace tree_test;

namespace {

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

}  // namespace
