// The jvp and gradient of reduce_prod against JAX (golden/reduce_prod_grad.txt,
// from reduce_prod_grad.py): no zero, one zero, two zeros in a row and in
// different rows, all zeros, along each axis, several and all, 2-D and 3-D.
// JAX multiplies the other factors, so a zero gives exact derivatives (a
// rule dividing y / x would give NaN or 0 there).
#include <string>
#include <vector>

#include "support/transform_test_util.h"

namespace {

using namespace ktest;

const char kFile[] = "reduce_prod_grad.txt";

struct Case {
  std::string name;
  std::vector<int> axes;
};

kiln_tree *Prod(kiln_trace *t, const kiln_tree *args, void *user) {
  const Case &c = *static_cast<const Case *>(user);
  kiln_val *y = kiln_reduce_prod(t, ArgVal(args, 0), (int)c.axes.size(), c.axes.data());
  return y ? kiln_tree_val(y) : nullptr;
}

kiln_tree *Loss(kiln_trace *t, const kiln_tree *args, void *user) {
  const Case &c = *static_cast<const Case *>(user);
  kiln_val *y = kiln_reduce_prod(t, ArgVal(args, 0), (int)c.axes.size(), c.axes.data());
  kiln_val *s = SumAll(t, kiln_mul(t, y, ArgVal(args, 1)));
  return s ? kiln_tree_val(s) : nullptr;
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const char *in : {"none", "one", "two_row", "two_apart", "zeros"})
    for (std::vector<int> a : {std::vector<int>{0}, {1}, {0, 1}}) out.push_back({in, a});
  for (std::vector<int> a : {std::vector<int>{0}, {2}, {0, 2}, {1, 2}, {0, 1, 2}})
    out.push_back({"cube", a});
  for (Case &c : out)
    for (size_t k = 0; k < c.axes.size(); k++) c.name += (k ? "." : "_") + std::to_string(c.axes[k]);
  return out;
}

TEST(ReduceProdAutodiff, JvpAndGradMatchJaxWithZeros) {
  // the reference executor: 40 programs compiled by the C backend would take
  // tens of seconds, and the rule is the same IR either way
  Ctx c(KILN_EXECUTOR_REFERENCE);
  if (!c.ctx) GTEST_SKIP() << "no device";
  int ran = 0;
  for (Case &k : Cases()) {
    SCOPED_TRACE(k.name);
    Func loss(Loss, &k, "prod_loss"), prod(Prod, &k, "prod");
    kiln_func *g = nullptr, *j = nullptr;
    int argnums[1] = {0};
    ASSERT_EQ(kiln_grad(loss.f, argnums, 1, 0, &g), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_jvp(prod.f, &j), KILN_OK) << kiln_last_error();
    Func gf(g), jf(j);
    kiln_tree *out = Jit(c, g, Tuple({Leaf(c.dev, G(k.name, "x", kFile)),
                                      Leaf(c.dev, G(k.name, "c", kFile))}));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(out), G(k.name, "grad", kFile), k.name + " grad");
    kiln_tree_free(out);
    out = Jit(c, j, Tuple({Tuple({Leaf(c.dev, G(k.name, "x", kFile))}),
                           Tuple({Leaf(c.dev, G(k.name, "t", kFile))})}));
    ASSERT_NE(out, nullptr);
    ExpectNear(Values<float>(kiln_tree_child(out, 0)), G(k.name, "y", kFile), k.name + " y");
    ExpectNear(Values<float>(kiln_tree_child(out, 1)), G(k.name, "jvp", kFile), k.name + " jvp");
    kiln_tree_free(out);
    ran++;
  }
  EXPECT_EQ(ran, 20);
}

}  // namespace
