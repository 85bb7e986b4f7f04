// Building pytrees: dict keys sorted, leaf kinds, bad leaves, ownership of
// the builders' children on success and on failure, depth, custom nodes
// (dataclasses, objects, aux rendering) and the node-type registry.
#include <gtest/gtest.h>

#include "tree_checks.h"

using namespace tree_test;

namespace {

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

}  // namespace
