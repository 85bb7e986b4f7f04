// Reference evaluators of the reduction family (src/ir/reduce.c) against
// JAX: tests/golden/eval_reduce.py writes what JAX computes.
#include "eval_reduce_golden.h"

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
  kir_program *raw = nullptr;
  ASSERT_EQ(kir_program_new(&raw), KILN_OK);
  std::unique_ptr<kir_program, eval_golden::ProgramDeleter> p(raw);
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
