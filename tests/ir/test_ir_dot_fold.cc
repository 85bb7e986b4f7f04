// Transposes folded into the dot_generals they feed (kir_simplify, through
// src/ir/dot_layout.c): the rewritten program as text, and the same values
// as the program before on random inputs through the reference evaluator;
// the cases that must not fold; and the CPU executor's GEMMs on transposed
// operand layouts (BLAS transpose flags) against naive loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"
#include "kiln/trace.h"
#include "support/ir_program.h"

namespace {

using kiln_test::Parse;
using kiln_test::Print;
using kiln_test::Program;

// Random bytes of each invar of p (f32 or bf16 values in [-1, 1]).
std::vector<std::vector<uint8_t>> RandomInputs(const kir_program *p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<uint8_t>> in;
  for (int i = 0; i < p->n_invars; i++) {
    const kir_aval *a = kir_var_aval(p, p->invars[i]);
    int64_t n = kir_aval_size(a);
    std::vector<uint8_t> b((size_t)n * kiln_dtype_size(a->dtype) + 1);
    for (int64_t j = 0; j < n; j++) {
      float f = u(rng);
      if (a->dtype == KILN_BF16) {
        uint16_t h = kiln_f32_to_bf16(f);
        memcpy(&b[(size_t)j * 2], &h, 2);
      } else {
        memcpy(&b[(size_t)j * 4], &f, 4);
      }
    }
    in.push_back(b);
  }
  return in;
}

// The first output of p on `in`, as floats.
std::vector<float> Run(const kir_program *p, std::vector<std::vector<uint8_t>> &in) {
  std::vector<kir_buffer> ib;
  for (int i = 0; i < p->n_invars; i++) {
    const kir_aval *a = kir_var_aval(p, p->invars[i]);
    ib.push_back(kir_buffer{*a, in[i].data(), in[i].size() - 1});
  }
  std::vector<kir_buffer> ob;
  std::vector<std::vector<uint8_t>> rest(p->n_outvars);
  for (int i = 0; i < p->n_outvars; i++) {
    const kir_aval *a = kir_var_aval(p, p->outvars[i]);
    rest[i].resize((size_t)kir_aval_size(a) * kiln_dtype_size(a->dtype) + 1);
    ob.push_back(kir_buffer{*a, rest[i].data(), rest[i].size() - 1});
  }
  const kir_aval *oa = &ob[0].aval;
  int64_t n = kir_aval_size(oa);
  kir_eval_env env;
  kir_eval_env_init(&env, kir_reference_evals());
  EXPECT_EQ(kir_eval_program(&env, p, ib.data(), ob.data()), KILN_OK) << kiln_last_error();
  std::vector<float> v((size_t)n);
  for (int64_t j = 0; j < n; j++) {
    if (oa->dtype == KILN_BF16) {
      uint16_t h;
      memcpy(&h, &rest[0][(size_t)j * 2], 2);
      v[j] = kiln_bf16_to_f32(h);
    } else {
      memcpy(&v[j], &rest[0][(size_t)j * 4], 4);
    }
  }
  return v;
}

// Simplifies (and DCEs) `before`; expects the text `after` (the same text:
// nothing folds) and the same first output on random inputs.
void ExpectFold(const std::string &before, const std::string &after, int want_folded) {
  Program ref = Parse(before), p = Parse(before);
  ASSERT_TRUE(ref && p);
  int n = 0;
  ASSERT_EQ(kir_simplify(p.get(), &n), KILN_OK) << kiln_last_error();
  EXPECT_EQ(n, want_folded);
  ASSERT_EQ(kir_dce(p.get(), nullptr), KILN_OK);
  ASSERT_EQ(kir_verify(p.get()), KILN_OK) << kiln_last_error();
  EXPECT_EQ(Print(p.get()), after);
  for (uint32_t seed = 1; seed <= 3; seed++) {
    auto in = RandomInputs(ref.get(), seed);
    std::vector<float> want = Run(ref.get(), in), got = Run(p.get(), in);
    ASSERT_EQ(got.size(), want.size());
    bool bf16 = kir_var_aval(p.get(), p->outvars[0])->dtype == KILN_BF16;
    for (size_t i = 0; i < got.size(); i++)  // BLAS may sum in another order
      EXPECT_NEAR(got[i], want[i], (bf16 ? 1e-2 : 1e-5) * (1 + std::fabs(want[i]))) << i;
  }
}

TEST(DotFold, LhsTransposeBecomesContractingDimZero) {
  ExpectFold(
      "{ lambda ; a:f32[6,4] b:f32[6,5]. let\n"
      "    c:f32[4,6] = transpose[permutation=(1, 0)] a\n"
      "    d:f32[4,5] = dot_general[dimension_numbers=(([1], [0]), ([], [])) "
      "preferred_element_type=None] c b\n"
      "  in (d,) }",
      "{ lambda ; a:f32[6,4] b:f32[6,5]. let\n"
      "    c:f32[4,5] = dot_general[\n"
      "      dimension_numbers=(([0], [0]), ([], []))\n"
      "      preferred_element_type=None\n"
      "    ] a b\n"
      "  in (c,) }",
      1);
}

// q . transpose(k): the attention scores, in bf16 with f32 results
TEST(DotFold, RhsTransposeBf16) {
  ExpectFold(
      "{ lambda ; a:bf16[8,16] b:bf16[7,16]. let\n"
      "    c:bf16[16,7] = transpose[permutation=(1, 0)] b\n"
      "    d:f32[8,7] = dot_general[dimension_numbers=(([1], [0]), ([], [])) "
      "preferred_element_type=float32] a c\n"
      "  in (d,) }",
      "{ lambda ; a:bf16[8,16] b:bf16[7,16]. let\n"
      "    c:f32[8,7] = dot_general[\n"
      "      dimension_numbers=(([1], [1]), ([], []))\n"
      "      preferred_element_type=float32\n"
      "    ] a b\n"
      "  in (c,) }",
      1);
}

TEST(DotFold, BothOperandsWithBatchDims) {
  ExpectFold(
      "{ lambda ; a:f32[3,5,4] b:f32[6,3,5]. let\n"
      "    c:f32[3,4,5] = transpose[permutation=(0, 2, 1)] a\n"
      "    d:f32[3,5,6] = transpose[permutation=(1, 2, 0)] b\n"
      "    e:f32[3,4,6] = dot_general[dimension_numbers=(([2], [1]), ([0], [0])) "
      "preferred_element_type=None] c d\n"
      "  in (e,) }",
      "{ lambda ; a:f32[3,5,4] b:f32[6,3,5]. let\n"
      "    c:f32[3,5,6] = transpose[permutation=(1, 2, 0)] b\n"
      "    d:f32[3,4,6] = dot_general[\n"
      "      dimension_numbers=(([1], [1]), ([0], [0]))\n"
      "      preferred_element_type=None\n"
      "    ] a c\n"
      "  in (d,) }",
      1);
  // Above, folding b's transpose would leave its batch dim in the middle:
  // only a's folds. With b stored batch-leading both fold.
  ExpectFold(
      "{ lambda ; a:f32[3,5,4] b:f32[3,6,5]. let\n"
      "    c:f32[3,4,5] = transpose[permutation=(0, 2, 1)] a\n"
      "    d:f32[3,5,6] = transpose[permutation=(0, 2, 1)] b\n"
      "    e:f32[3,4,6] = dot_general[dimension_numbers=(([2], [1]), ([0], [0])) "
      "preferred_element_type=None] c d\n"
      "  in (e,) }",
      "{ lambda ; a:f32[3,5,4] b:f32[3,6,5]. let\n"
      "    c:f32[3,4,6] = dot_general[\n"
      "      dimension_numbers=(([1], [2]), ([0], [0]))\n"
      "      preferred_element_type=None\n"
      "    ] a b\n"
      "  in (c,) }",
      2);
}

TEST(DotFold, TransposeOfTransposeAndOtherUsersStay) {
  ExpectFold(
      "{ lambda ; a:f32[4,6] b:f32[6,5]. let\n"
      "    c:f32[6,4] = transpose[permutation=(1, 0)] a\n"
      "    d:f32[4,6] = transpose[permutation=(1, 0)] c\n"
      "    e:f32[4,5] = dot_general[dimension_numbers=(([1], [0]), ([], [])) "
      "preferred_element_type=None] d b\n"
      "  in (e, c) }",
      "{ lambda ; a:f32[4,6] b:f32[6,5]. let\n"
      "    c:f32[6,4] = transpose[permutation=(1, 0)] a\n"
      "    d:f32[4,5] = dot_general[\n"
      "      dimension_numbers=(([1], [0]), ([], []))\n"
      "      preferred_element_type=None\n"
      "    ] a b\n"
      "  in (d, c) }",
      2);
}

// Folding would reorder the result (the lhs's free dims swap) or leave no
// GEMM layout (contracting dims 0 and 2 of the transpose's operand).
TEST(DotFold, KeepsTransposesThatChangeTheResultOrTheGemm) {
  const char *reorders =
      "{ lambda ; a:f32[3,2,4] b:f32[4,5]. let\n"
      "    c:f32[2,3,4] = transpose[permutation=(1, 0, 2)] a\n"
      "    d:f32[2,3,5] = dot_general[\n"
      "      dimension_numbers=(([2], [0]), ([], []))\n"
      "      preferred_element_type=None\n"
      "    ] c b\n"
      "  in (d,) }";
  ExpectFold(reorders, reorders, 0);
  const char *no_gemm =
      "{ lambda ; a:f32[3,4,5] b:f32[3,5,6]. let\n"
      "    c:f32[4,3,5] = transpose[permutation=(1, 0, 2)] a\n"
      "    d:f32[4,6] = dot_general[\n"
      "      dimension_numbers=(([1, 2], [0, 1]), ([], []))\n"
      "      preferred_element_type=None\n"
      "    ] c b\n"
      "  in (d,) }";
  ExpectFold(no_gemm, no_gemm, 0);
}

TEST(DotFold, GemmLayouts) {
  kir_aval a, b;
  ASSERT_EQ(kir_aval_parse("f32[2,6,4]", &a), KILN_OK);
  ASSERT_EQ(kir_aval_parse("f32[2,5,6]", &b), KILN_OK);
  kir_dot_dims d;
  memset(&d, 0, sizeof d);
  d.lhs_contracting = {1, {1}};
  d.rhs_contracting = {1, {2}};
  d.lhs_batch = {1, {0}};
  d.rhs_batch = {1, {0}};
  kir_gemm_layout g;
  ASSERT_TRUE(kir_dot_gemm_layout(&a, &b, &d, &g));
  EXPECT_EQ(g.batch, 2);
  EXPECT_EQ(g.m, 4);
  EXPECT_EQ(g.n, 5);
  EXPECT_EQ(g.k, 6);
  EXPECT_TRUE(g.trans_a);
  EXPECT_TRUE(g.trans_b);
  d.rhs_batch = {1, {1}};  // batch not leading
  EXPECT_FALSE(kir_dot_gemm_layout(&a, &b, &d, &g));
}

// ---- the CPU executor's GEMMs on transposed layouts ----

struct DotCase {
  int64_t a_shape[3], b_shape[3];
  int rank;
  kiln_dot_dims dims;
};

kiln_tree *DotFn(kiln_trace *t, const kiln_tree *args, void *user) {
  const DotCase *c = (const DotCase *)user;
  kiln_val *a = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *b = kiln_tree_leaf_get(kiln_tree_child(args, 1))->u.val;
  return kiln_tree_val(kiln_dot_general(t, a, b, &c->dims, KILN_INVALID_DTYPE));
}

kiln_tree *Leaf(kiln_device *dev, int rank, const int64_t *shape, const std::vector<float> &v) {
  kiln_array *arr = nullptr;
  EXPECT_EQ(kiln_array_from_host(dev, KILN_F32, rank, shape, v.data(), v.size() * 4, &arr), KILN_OK);
  kiln_tree *t = kiln_tree_array(arr);
  kiln_array_release(arr);
  return t;
}

// The value at index idx (row-major over shape) of x.
float At(const std::vector<float> &x, const int64_t *shape, int rank, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < rank; i++) off = off * shape[i] + idx[i];
  return x[(size_t)off];
}

TEST(DotFold, CpuGemmTakesTransposedOperandsInPlace) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *ctx = nullptr;
  kiln_device *dev = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_device_get(ctx, 0, &dev), KILN_OK);
  // [batch 2] x {TN, NT, TT} with m = 3, k = 4, n = 5
  const DotCase cases[] = {
      {{2, 4, 3}, {2, 4, 5}, 3, {1, {1}, {1}, 1, {0}, {0}}},
      {{2, 3, 4}, {2, 5, 4}, 3, {1, {2}, {2}, 1, {0}, {0}}},
      {{2, 4, 3}, {2, 5, 4}, 3, {1, {1}, {2}, 1, {0}, {0}}},
      {{4, 3, 0}, {5, 4, 0}, 2, {1, {0}, {1}, 0, {0}, {0}}},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const DotCase &c : cases) {
    int64_t na = 1, nb = 1;
    for (int i = 0; i < c.rank; i++) na *= c.a_shape[i], nb *= c.b_shape[i];
    std::vector<float> a((size_t)na), b((size_t)nb);
    for (float &x : a) x = u(rng);
    for (float &x : b) x = u(rng);
    kiln_func *f = nullptr;
    ASSERT_EQ(kiln_func_new(DotFn, (void *)&c, "dot", &f), KILN_OK);
    kiln_jit *j = nullptr;
    ASSERT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK);
    kiln_tree *leaves[2] = {Leaf(dev, c.rank, c.a_shape, a), Leaf(dev, c.rank, c.b_shape, b)};
    kiln_tree *args = kiln_tree_tuple(2, leaves), *out = nullptr;
    ASSERT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
    kiln_array *r = kiln_tree_leaf_array(out);
    std::vector<float> got(kiln_array_size(r));
    ASSERT_EQ(kiln_array_to_host(r, got.data(), got.size() * 4), KILN_OK);
    // naive: out[b, i, j] = sum_p a[.., i, p ..] b[.., p, j ..], dims from c.dims
    bool batched = c.dims.n_batch == 1;
    int64_t B = batched ? 2 : 1, M = 3, N = 5, K = 4;
    ASSERT_EQ((int64_t)got.size(), B * M * N);
    int la = c.dims.lhs_contract[0], lb = c.dims.rhs_contract[0];
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t jj = 0; jj < N; jj++) {
          double s = 0;
          for (int64_t p = 0; p < K; p++) {
            int64_t ia[3], ib[3];
            int off = batched ? 1 : 0;
            if (batched) ia[0] = ib[0] = bi;
            ia[la] = p, ia[la == off ? off + 1 : off] = i;
            ib[lb] = p, ib[lb == off ? off + 1 : off] = jj;
            s += (double)At(a, c.a_shape, c.rank, ia) * At(b, c.b_shape, c.rank, ib);
          }
          EXPECT_NEAR(got[(size_t)((bi * M + i) * N + jj)], s, 1e-5);
        }
    kiln_tree_free(out);
    kiln_tree_free(args);
    kiln_jit_free(j);
    kiln_func_free(f);
  }
  kiln_ctx_free(ctx);
}

}  // namespace
