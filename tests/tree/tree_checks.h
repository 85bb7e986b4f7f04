// Helpers of the pytree tests (test_tree_*.cc): trees and treedefs as text,
// owning wrappers, leaves that are ids, and the custom node types of the
// golden trees, registered once for the process (T()).
#ifndef KILN_TESTS_TREE_CHECKS_H
#define KILN_TESTS_TREE_CHECKS_H

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
#include "support/text.h"
#include "tree/tree.h"  // ktree_structure_hash and friends
}

namespace tree_test {

using kiln_test::Contains;

// ---------------------------------------------------------------- helpers

// Leaves of the golden trees are ints; kiln holds them as PTR leaves.
inline void *IdPtr(long id) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(0x10000 + id));
}
inline long PtrId(const void *p) {
  return static_cast<long>(reinterpret_cast<uintptr_t>(p)) - 0x10000;
}
inline kiln_tree *Leaf(long id) { return kiln_tree_ptr(IdPtr(id)); }

inline std::string DefStr(const kiln_treedef *d) {
  size_t n = kiln_treedef_str(d, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_treedef_str(d, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

inline std::string TreeStr(const kiln_tree *t) {
  size_t n = kiln_tree_str(t, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_tree_str(t, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

inline std::string PathStr(const kiln_path &p) {
  size_t n = kiln_path_str(&p, nullptr, 0);
  std::string s(n + 1, '\0');
  EXPECT_EQ(kiln_path_str(&p, s.data(), s.size()), n);
  s.resize(n);
  return s;
}

// The treedef of t (no is_leaf), as a string.
inline std::string Structure(const kiln_tree *t) {
  kiln_treedef *d = nullptr;
  EXPECT_EQ(kiln_tree_flatten(t, nullptr, nullptr, nullptr, nullptr, &d), KILN_OK)
      << kiln_last_error();
  std::string s = DefStr(d);
  kiln_treedef_free(d);
  return s;
}

inline std::string Diff(const kiln_treedef *a, const kiln_treedef *b) {
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

inline kiln_tree *List(std::vector<kiln_tree *> c) { return kiln_tree_list(c.size(), c.data()); }
inline kiln_tree *Tuple(std::vector<kiln_tree *> c) { return kiln_tree_tuple(c.size(), c.data()); }
inline kiln_tree *Dict(std::vector<const char *> k, std::vector<kiln_tree *> c) {
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

inline kiln_status NodeFlatten(const void *obj, void *, kiln_tree ***children, size_t *n,
                               void **aux, size_t *aux_size) {
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

inline kiln_status NodeUnflatten(const void *aux, size_t aux_size, const kiln_tree *const *children,
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
inline void BoxPrint(const void *aux, size_t aux_size, char *buf, size_t cap) {
  int64_t v = 0;
  if (aux_size == sizeof v) memcpy(&v, aux, sizeof v);
  snprintf(buf, cap, "%lld", static_cast<long long>(v));
}

inline kiln_status Unused(const void *, void *, kiln_tree ***, size_t *, void **, size_t *) {
  return KILN_ERR_INTERNAL;
}
inline kiln_status UnusedUn(const void *, size_t, const kiln_tree *const *, size_t, void *,
                            void **) {
  return KILN_ERR_INTERNAL;
}

struct Types {
  const kiln_node_type *linear = nullptr, *point = nullptr, *node = nullptr, *box = nullptr;
};

// The types of the golden trees, registered once for the process.
inline const Types &T() {
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

}  // namespace tree_test

#endif  // KILN_TESTS_TREE_CHECKS_H
