// Arrays as pytree leaves: trees retain and release them, a failed build
// releases them, and tree_map builds new ones (releasing them on failure).
#include <gtest/gtest.h>

#include "support/arrays.h"
#include "tree_checks.h"

using namespace tree_test;

namespace {

// ---------------------------------------------------------------- arrays as leaves

// One CPU device; Floats(shape, start) counts from start.
class TreeArrays : public kiln_test::CpuDeviceTest {
 protected:
  // Bytes the device holds: an array's buffer goes when its last reference does.
  uint64_t InUse() {
    uint64_t bytes = 0;
    EXPECT_EQ(kiln_device_memory_in_use(dev_, &bytes), KILN_OK);
    return bytes;
  }
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
