// Reference evaluators of the reduction family (src/ir/reduce.c) against
// JAX: tests/golden/eval_reduce.py writes what JAX computes.
#include "eval_reduce_golden.h"
#include "support/jit_check.h"

namespace {

using eval_golden::RunFile;

void ExpectCovered(const std::map<std::string, int> &covered,
                   const std::vector<std::string> &prims) {
  for (const std::string &p : prims) EXPECT_GT(covered.count(p) ? covered.at(p) : 0, 0) << p;
}

TEST(EvalReduce, EveryPrimitiveOfTheFamilyHasAnEvaluator) {
  const kir_eval_table *t = kir_reference_evals();
  int n = 0;
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    const kir_prim_info *info = kir_prim_get((kir_prim)p);
    if (info->family != KIR_FAMILY_REDUCE) continue;
    EXPECT_NE(t->fn[p], nullptr) << info->name;
    n++;
  }
  EXPECT_EQ(n, 15); // with top_k and cumlogsumexp (tests in test_topk.cc)
}

TEST(EvalReduce, ReductionsMatchJax) {
  std::vector<std::string> prims = {"reduce_sum", "reduce_prod", "reduce_max",
                                    "reduce_min", "reduce_and",  "reduce_or"};
  ExpectCovered(RunFile("eval_reduce.txt", prims), prims);
}

TEST(EvalReduce, ArgMinMaxMatchJax) {
  std::vector<std::string> prims = {"argmax", "argmin"};
  ExpectCovered(RunFile("eval_reduce_sort.txt", prims), prims);
}

// argmax/argmin through kiln_jit on the CPU's fused executor, which runs
// the C kernel of codegen/argmax.c: JAX's indices on every golden case.
struct ArgCase {
  bool is_max;
  int axis;
  kiln_dtype index_dtype;
};
kiln_tree *ArgFn(kiln_trace *t, const kiln_tree *a, void *u) {
  const ArgCase *c = (const ArgCase *)u;
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(a, 0))->u.val;
  return kiln_tree_val(c->is_max ? kiln_argmax(t, x, c->axis, c->index_dtype)
                                 : kiln_argmin(t, x, c->axis, c->index_dtype));
}

TEST(EvalReduce, ArgMinMaxKernelsOnTheCTargetMatchJax) {
  kiln_device *dev = nullptr;
  kiln_ctx *ctx = FusedCpuContext(&dev);
  ASSERT_TRUE(ctx && dev);
  int n = 0;
  for (const eval_golden::Case &c : eval_golden::Load("eval_reduce_sort.txt")) {
    if (c.prim != "argmax" && c.prim != "argmin") continue;
    SCOPED_TRACE(c.text);
    kir_program *p = nullptr;
    ASSERT_EQ(kir_program_new(&p), KILN_OK);
    kir_params par;
    std::memset(&par, 0, sizeof par);
    kir_prim prim;
    ASSERT_TRUE(kir_prim_lookup(c.prim.c_str(), c.prim.size(), &prim));
    ASSERT_EQ(kir_params_parse(p, prim, c.params.c_str(), &par), KILN_OK) << kiln_last_error();
    kir_program_free(p);
    ArgCase ac{c.prim == "argmax", par.argminmax.axes.v[0], par.argminmax.index_dtype};
    const eval_golden::Array &x = c.in[0];
    kiln_array *arr = nullptr;
    ASSERT_EQ(kiln_array_from_host(dev, x.aval.dtype, x.aval.rank, x.aval.shape, x.bytes.data(),
                                   (size_t)kir_aval_size(&x.aval) * kiln_dtype_size(x.aval.dtype),
                                   &arr),
              KILN_OK)
        << kiln_last_error();
    kiln_tree *leaf = kiln_tree_array(arr), *args = kiln_tree_tuple(1, &leaf);
    kiln_array_release(arr);
    std::string text;
    std::vector<uint8_t> got = JitBytes(ctx, ArgFn, &ac, args, n == 0 ? &text : nullptr);
    const eval_golden::Array &want = c.out[0];
    size_t nb = (size_t)kir_aval_size(&want.aval) * kiln_dtype_size(want.aval.dtype);
    ASSERT_EQ(got.size(), nb);
    EXPECT_TRUE(nb == 0 || std::memcmp(got.data(), want.bytes.data(), nb) == 0);
    if (n == 0) {  // the kernel ran, not the reference evaluator
      EXPECT_NE(text.find("void kiln_arg"), std::string::npos) << text;
    }
    n++;
  }
  EXPECT_GE(n, 10);
  kiln_ctx_free(ctx);
}

TEST(EvalReduce, CumulativeMatchJax) {
  std::vector<std::string> prims = {"cumsum", "cumprod", "cummax", "cummin"};
  ExpectCovered(RunFile("eval_reduce_cum.txt", prims), prims);
}

TEST(EvalReduce, SortMatchesJax) {
  std::vector<std::string> prims = {"sort"};
  ExpectCovered(RunFile("eval_reduce_sort.txt", prims), prims);
}

// An equation whose operand is too large for the evaluator's temporaries
// fails cleanly, naming the primitive. No such operand fits in memory, but
// evaluators allocate their temporaries before reading an operand, so the
// evaluator is called directly with a small buffer standing in for it (the
// program walker would refuse the mismatched buffer).
void ExpectOutOfMemory(const char *prim_name, const char *params, const char *type) {
  SCOPED_TRACE(prim_name);
  kiln_test::Program p = kiln_test::NewProgram();
  ASSERT_TRUE(p);
  kir_aval a;
  ASSERT_EQ(kir_aval_parse(type, &a), KILN_OK);
  kir_vid x = KIR_NO_VAR;
  ASSERT_EQ(kir_add_invar(p.get(), &a, &x), KILN_OK);
  kir_prim prim;
  ASSERT_TRUE(kir_prim_lookup(prim_name, strlen(prim_name), &prim));
  kir_params par;
  memset(&par, 0, sizeof par);
  ASSERT_EQ(kir_params_parse(p.get(), prim, params, &par), KILN_OK) << kiln_last_error();
  int eqn = -1;
  ASSERT_EQ(kir_add_eqn(p.get(), prim, &par, 1, &x, &eqn), KILN_OK) << kiln_last_error();
  const kir_aval *ya = kir_var_aval(p.get(), p->eqns[eqn].out[0]);
  std::vector<uint8_t> small(64, 0), result(64, 0);
  kir_buffer in = {a, small.data(), small.size()};
  kir_buffer out = {*ya, result.data(), (size_t)kir_aval_size(ya) * kiln_dtype_size(ya->dtype)};
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  EXPECT_EQ(env.table->fn[prim](&p->eqns[eqn], &in, &out, &env), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_NE(strstr(kiln_last_error(), prim_name), nullptr) << kiln_last_error();
}

TEST(EvalReduce, HugeOperandsFailAsOutOfMemory) {
  ExpectOutOfMemory("reduce_sum", "axes=(0, 1)", "f32[1099511627776,1048576]");
  ExpectOutOfMemory("reduce_max", "axes=(0, 1)", "i8[1099511627776,1048576]");
  ExpectOutOfMemory("argmax", "axes=(1,) index_dtype=int32", "f32[1,1099511627776]");
}

}  // namespace
