// The reference evaluator of dot_general (src/ir/dot.c) against JAX:
// tests/golden/eval_reduce.py writes what JAX computes (eval_dot.txt).
#include "eval_reduce_golden.h"

namespace {

TEST(EvalDot, HasAnEvaluator) {
  EXPECT_NE(kir_reference_evals()->fn[KIR_PRIM_DOT_GENERAL], nullptr);
}

TEST(EvalDot, MatchesJax) {
  std::map<std::string, int> covered = eval_golden::RunFile("eval_dot.txt", {});
  EXPECT_GT(covered["dot_general"], 300);
}

// dot_general of two operands of `type`, contracting both dims. No such
// operand fits in memory, but the evaluator fails before reading one, so it
// is called directly with small buffers standing in for them (the program
// walker would refuse the mismatched buffers).
kiln_status HugeDot(const char *type) {
  kiln_test::Program p = kiln_test::NewProgram();
  kir_aval a;
  EXPECT_EQ(kir_aval_parse(type, &a), KILN_OK);
  kir_vid v[2];
  for (kir_vid &x : v) EXPECT_EQ(kir_add_invar(p.get(), &a, &x), KILN_OK);
  kir_params par;
  memset(&par, 0, sizeof par);
  EXPECT_EQ(kir_params_parse(p.get(), KIR_PRIM_DOT_GENERAL,
                             "dimension_numbers=(([0, 1], [0, 1]), ([], [])) "
                             "preferred_element_type=None",
                             &par),
            KILN_OK);
  int eqn = -1;
  EXPECT_EQ(kir_add_eqn(p.get(), KIR_PRIM_DOT_GENERAL, &par, 2, v, &eqn), KILN_OK)
      << kiln_last_error();
  const kir_eqn *e = &p->eqns[eqn];
  std::vector<uint8_t> small(64, 0), result(8, 0);
  kir_buffer in[2] = {{a, small.data(), small.size()}, {a, small.data(), small.size()}};
  kir_buffer out = {*kir_var_aval(p.get(), e->out[0]), result.data(), kiln_dtype_size(a.dtype)};
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  return env.table->fn[KIR_PRIM_DOT_GENERAL](e, in, &out, &env);
}

TEST(EvalDot, HugeIntegerOperandsFailAsOutOfMemory) {
  EXPECT_EQ(HugeDot("i32[1073741824,1073741824]"), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_NE(strstr(kiln_last_error(), "dot_general"), nullptr) << kiln_last_error();
  EXPECT_NE(strstr(kiln_last_error(), "i32[1073741824,1073741824]"), nullptr);
}

TEST(EvalDot, GemmBeyondBlasIntRangeIsUnimplemented) {
  EXPECT_EQ(HugeDot("f32[1073741824,1073741824]"), KILN_ERR_UNIMPLEMENTED);
  EXPECT_NE(strstr(kiln_last_error(), "dot_general"), nullptr) << kiln_last_error();
  EXPECT_NE(strstr(kiln_last_error(), "K=1152921504606846976"), nullptr) << kiln_last_error();
}

}  // namespace
