// Every public function that returns NULL says why in kiln_last_error():
// trace ops (on a NULL trace, a failed trace, NULL operands), tree and
// device accessors, and a user function that returns NULL (its message
// once, with a separator).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "nn/train_support.h"

namespace {

// Clobbers the thread's message, so a function that returns NULL without
// writing its own is caught.
void stale() { kiln_fail(KILN_ERR_IO, "stale message"); }
bool is_stale() { return std::string(kiln_last_error()) == "stale message"; }

int count(const std::string &s, const std::string &what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) n++;
  return n;
}

// ---- user functions returning NULL (ktr_run) ----

kiln_tree *returns_null(kiln_trace *, const kiln_tree *, void *) { return nullptr; }
kiln_tree *fails_then_null(kiln_trace *, const kiln_tree *, void *) {
  kiln_fail(KILN_ERR_IO, "the disk is on fire");
  return nullptr;
}

class ApiErrors : public CpuFixture {
 protected:
  // make_jaxpr of fn over one f32[2,3]; returns the failure's message.
  std::string trace_failure(kiln_fn fn, void *user, const char *name) {
    kiln_func *f = nullptr;
    EXPECT_EQ(kiln_func_new(fn, user, name, &f), KILN_OK);
    float v[6] = {0};
    kiln_tree *leaf = array(KILN_F32, v, {2, 3});
    kiln_tree *args = kiln_tree_tuple(1, &leaf);
    char *text = nullptr;
    kiln_status st = kiln_make_jaxpr(ctx, f, args, &text);
    std::string msg = kiln_last_error();
    EXPECT_NE(st, KILN_OK) << name;
    free(text);
    kiln_tree_free(args);
    kiln_func_free(f);
    return msg;
  }
};

TEST_F(ApiErrors, UserFunctionReturningNullIsReportedOnce) {
  std::string m = trace_failure(returns_null, nullptr, "silent_fn");
  EXPECT_EQ(count(m, "silent_fn returned NULL without recording an error"), 1) << m;
  EXPECT_EQ(count(m, "returned NULL"), 1) << m;
  m = trace_failure(fails_then_null, nullptr, "loud_fn");
  EXPECT_NE(m.find("loud_fn returned NULL: the disk is on fire"), std::string::npos) << m;
  EXPECT_EQ(count(m, "the disk is on fire"), 1) << m;
}

TEST(ApiErrorsMessage, WrapAndFailMayQuoteTheCurrentMessage) {
  // An argument that is kiln_last_error() itself must not be overwritten
  // while it is formatted.
  kiln_fail(KILN_ERR_IO, "inner");
  kiln_fail(KILN_ERR_IO, "outer: %s", kiln_last_error());
  EXPECT_STREQ(kiln_last_error(), "outer: inner");
  kiln_fail(KILN_ERR_IO, "inner");
  kiln_fail_wrap(KILN_ERR_IO, "while %s", kiln_last_error());
  EXPECT_STREQ(kiln_last_error(), "while inner: inner");
}

// ---- every trace-level op ----

#define CASE_ARGS                                                                     \
  kiln_trace *t, [[maybe_unused]] kiln_val *V, [[maybe_unused]] kiln_val *const *VS,      \
      [[maybe_unused]] const kiln_tree *TR, [[maybe_unused]] const kiln_func *F,          \
      [[maybe_unused]] const kiln_func *const *FS, [[maybe_unused]] kiln_tree *&out_tree
using CaseFn = void *(*)(CASE_ARGS);
struct OpCase {
  const char *name;
  bool has_operand; // takes a value or tree that may be given as NULL
  CaseFn call;
};

const int64_t ONES[KILN_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};
const int ZEROS[KILN_MAX_RANK] = {0};
const kiln_window W = {};
const kiln_dot_dims DD = {};
const kiln_conv_params CP = {};

const OpCase kOps[] = {
#define KILN_UNARY_OP(n) {"kiln_" #n, true, [](CASE_ARGS) -> void * { return kiln_##n(t, V); }},
#define KILN_BINARY_OP(n) {"kiln_" #n, true, [](CASE_ARGS) -> void * { return kiln_##n(t, V, V); }},
#include "kiln/ops.def"
#undef KILN_UNARY_OP
#undef KILN_BINARY_OP
    // The kiln_val * / kiln_tree * functions of include/kiln/*.h whose first
    // parameter is the trace (generated from the headers, then extended).
    {"kiln_relu", true, [](CASE_ARGS) -> void * { return kiln_relu(t, V); }},
    {"kiln_gelu", true, [](CASE_ARGS) -> void * { return kiln_gelu(t, V, 1); }},
    {"kiln_silu", true, [](CASE_ARGS) -> void * { return kiln_silu(t, V); }},
    {"kiln_stack", true, [](CASE_ARGS) -> void * { return kiln_stack(t, 2, VS, 0); }},
    {"kiln_tile", true, [](CASE_ARGS) -> void * { return kiln_tile(t, V, 1, ONES); }},
    {"kiln_getitem", true, [](CASE_ARGS) -> void * { return kiln_getitem(t, V, "0"); }},
    {"kiln_index", true, [](CASE_ARGS) -> void * { return kiln_index(t, V, 0); }},
    {"kiln_norm", true, [](CASE_ARGS) -> void * { return kiln_norm(t, V, nullptr, KILN_ALL_AXES, nullptr, 0); }},
    {"kiln_psum", true, [](CASE_ARGS) -> void * { return kiln_psum(t, V, "i"); }},
    {"kiln_pmax", true, [](CASE_ARGS) -> void * { return kiln_pmax(t, V, "i"); }},
    {"kiln_pmin", true, [](CASE_ARGS) -> void * { return kiln_pmin(t, V, "i"); }},
    {"kiln_pmean", true, [](CASE_ARGS) -> void * { return kiln_pmean(t, V, "i"); }},
    {"kiln_all_gather", true, [](CASE_ARGS) -> void * { return kiln_all_gather(t, V, "i", 1, 1); }},
    {"kiln_psum_scatter", true, [](CASE_ARGS) -> void * { return kiln_psum_scatter(t, V, "i", 1, 1); }},
    {"kiln_ppermute", true, [](CASE_ARGS) -> void * { return kiln_ppermute(t, V, "i", 1, nullptr); }},
    {"kiln_all_to_all", true, [](CASE_ARGS) -> void * { return kiln_all_to_all(t, V, "i", 1, 1, 1); }},
    {"kiln_axis_index", false, [](CASE_ARGS) -> void * { return kiln_axis_index(t, "i"); }},
    {"kiln_psum_tree", true, [](CASE_ARGS) -> void * { return kiln_psum_tree(t, TR, "i"); }},
    {"kiln_pmean_tree", true, [](CASE_ARGS) -> void * { return kiln_pmean_tree(t, TR, "i"); }},
    {"kiln_nn_truncated_normal", true, [](CASE_ARGS) -> void * { return kiln_nn_truncated_normal(t, V, 1, 1, KILN_F32, 1, ONES); }},
    {"kiln_nn_lecun_normal", true, [](CASE_ARGS) -> void * { return kiln_nn_lecun_normal(t, V, KILN_F32, 1, ONES); }},
    {"kiln_nn_dense_init", true, [](CASE_ARGS) -> void * { return kiln_nn_dense_init(t, V, 1, 1, KILN_F32); }},
    {"kiln_nn_dense", true, [](CASE_ARGS) -> void * { return kiln_nn_dense(t, TR, V); }},
    {"kiln_nn_conv_init", true, [](CASE_ARGS) -> void * { return kiln_nn_conv_init(t, V, 1, ONES, 1, 1, KILN_F32); }},
    {"kiln_nn_conv", true, [](CASE_ARGS) -> void * { return kiln_nn_conv(t, TR, V, ONES, "SAME"); }},
    {"kiln_nn_layernorm_init", false, [](CASE_ARGS) -> void * { return kiln_nn_layernorm_init(t, 1, KILN_F32); }},
    {"kiln_nn_layernorm", true, [](CASE_ARGS) -> void * { return kiln_nn_layernorm(t, TR, V, 1); }},
    {"kiln_nn_dropout", true, [](CASE_ARGS) -> void * { return kiln_nn_dropout(t, V, V, 1, 1); }},
    {"kiln_nn_softmax_cross_entropy", true, [](CASE_ARGS) -> void * { return kiln_nn_softmax_cross_entropy(t, V, V); }},
    {"kiln_nn_batchnorm_init", false, [](CASE_ARGS) -> void * { return kiln_nn_batchnorm_init(t, 1, KILN_F32, &out_tree); }},
    {"kiln_nn_batchnorm", true, [](CASE_ARGS) -> void * { return kiln_nn_batchnorm(t, TR, TR, V, nullptr, &out_tree); }},
    {"kiln_nn_embed_init", true, [](CASE_ARGS) -> void * { return kiln_nn_embed_init(t, V, 1, 1, KILN_F32); }},
    {"kiln_nn_embed", true, [](CASE_ARGS) -> void * { return kiln_nn_embed(t, TR, V); }},
    {"kiln_nn_embed_attend", true, [](CASE_ARGS) -> void * { return kiln_nn_embed_attend(t, TR, V); }},
    {"kiln_nn_mha_init", true, [](CASE_ARGS) -> void * { return kiln_nn_mha_init(t, VS, 1, 1, 1, 1, 1, KILN_F32); }},
    {"kiln_nn_mha", true, [](CASE_ARGS) -> void * { return kiln_nn_mha(t, TR, V, nullptr, nullptr); }},
    {"kiln_nn_causal_mask", true, [](CASE_ARGS) -> void * { return kiln_nn_causal_mask(t, V); }},
    {"kiln_sum", true, [](CASE_ARGS) -> void * { return kiln_sum(t, V, 1, ZEROS, 1); }},
    {"kiln_prod", true, [](CASE_ARGS) -> void * { return kiln_prod(t, V, 1, ZEROS, 1); }},
    {"kiln_amax", true, [](CASE_ARGS) -> void * { return kiln_amax(t, V, 1, ZEROS, 1); }},
    {"kiln_amin", true, [](CASE_ARGS) -> void * { return kiln_amin(t, V, 1, ZEROS, 1); }},
    {"kiln_mean", true, [](CASE_ARGS) -> void * { return kiln_mean(t, V, 1, ZEROS, 1); }},
    {"kiln_var", true, [](CASE_ARGS) -> void * { return kiln_var(t, V, 1, ZEROS, 1, 1); }},
    {"kiln_std", true, [](CASE_ARGS) -> void * { return kiln_std(t, V, 1, ZEROS, 1, 1); }},
    {"kiln_logsumexp", true, [](CASE_ARGS) -> void * { return kiln_logsumexp(t, V, 1, ZEROS, 1, nullptr); }},
    {"kiln_softmax", true, [](CASE_ARGS) -> void * { return kiln_softmax(t, V, 1, nullptr); }},
    {"kiln_log_softmax", true, [](CASE_ARGS) -> void * { return kiln_log_softmax(t, V, 1, nullptr); }},
    {"kiln_clip", true, [](CASE_ARGS) -> void * { return kiln_clip(t, V, V, V); }},
    {"kiln_floor_divide", true, [](CASE_ARGS) -> void * { return kiln_floor_divide(t, V, V); }},
    {"kiln_remainder", true, [](CASE_ARGS) -> void * { return kiln_remainder(t, V, V); }},
    {"kiln_take_mode", true, [](CASE_ARGS) -> void * { return kiln_take_mode(t, V, V, 1, KILN_INDEX_FILL); }},
    {"kiln_take_along_axis_mode", true, [](CASE_ARGS) -> void * { return kiln_take_along_axis_mode(t, V, V, 1, KILN_INDEX_FILL); }},
    {"kiln_at_set", true, [](CASE_ARGS) -> void * { return kiln_at_set(t, V, V, 1, V, KILN_INDEX_FILL, 1); }},
    {"kiln_at_add", true, [](CASE_ARGS) -> void * { return kiln_at_add(t, V, V, 1, V, KILN_INDEX_FILL, 1); }},
    {"kiln_at_mul", true, [](CASE_ARGS) -> void * { return kiln_at_mul(t, V, V, 1, V, KILN_INDEX_FILL, 1); }},
    {"kiln_at_min", true, [](CASE_ARGS) -> void * { return kiln_at_min(t, V, V, 1, V, KILN_INDEX_FILL, 1); }},
    {"kiln_at_max", true, [](CASE_ARGS) -> void * { return kiln_at_max(t, V, V, 1, V, KILN_INDEX_FILL, 1); }},
    {"kiln_argsort", true, [](CASE_ARGS) -> void * { return kiln_argsort(t, V, 1, 1); }},
    {"kiln_top_k", true, [](CASE_ARGS) -> void * { return kiln_top_k(t, V, 1, nullptr); }},
    {"kiln_einsum", true, [](CASE_ARGS) -> void * { return kiln_einsum(t, "ij,jk->ik", V, V); }},
    {"kiln_schedule_value", true, [](CASE_ARGS) -> void * { return kiln_schedule_value(t, nullptr, V); }},
    {"kiln_optim_init", true, [](CASE_ARGS) -> void * { return kiln_optim_init(t, nullptr, TR); }},
    {"kiln_optim_update", true, [](CASE_ARGS) -> void * { return kiln_optim_update(t, nullptr, TR, TR, TR, &out_tree); }},
    {"kiln_apply_updates", true, [](CASE_ARGS) -> void * { return kiln_apply_updates(t, TR, TR); }},
    {"kiln_global_norm", true, [](CASE_ARGS) -> void * { return kiln_global_norm(t, TR); }},
    {"kiln_clip_by_global_norm", true, [](CASE_ARGS) -> void * { return kiln_clip_by_global_norm(t, TR, 1); }},
    {"kiln_call", true, [](CASE_ARGS) -> void * { return kiln_call(t, F, TR); }},
    {"kiln_const_array", false, [](CASE_ARGS) -> void * { return kiln_const_array(t, nullptr); }},
    {"kiln_scalar_f", false, [](CASE_ARGS) -> void * { return kiln_scalar_f(t, 1); }},
    {"kiln_scalar_i", false, [](CASE_ARGS) -> void * { return kiln_scalar_i(t, 1); }},
    {"kiln_scalar", false, [](CASE_ARGS) -> void * { return kiln_scalar(t, KILN_F32, 1); }},
    {"kiln_full", false, [](CASE_ARGS) -> void * { return kiln_full(t, KILN_F32, 1, ONES, 1); }},
    {"kiln_iota", false, [](CASE_ARGS) -> void * { return kiln_iota(t, KILN_F32, 1, ONES, 1); }},
    {"kiln_round", true, [](CASE_ARGS) -> void * { return kiln_round(t, V); }},
    {"kiln_integer_pow", true, [](CASE_ARGS) -> void * { return kiln_integer_pow(t, V, 1); }},
    {"kiln_reduce_precision", true, [](CASE_ARGS) -> void * { return kiln_reduce_precision(t, V, 1, 1); }},
    {"kiln_stop_gradient", true, [](CASE_ARGS) -> void * { return kiln_stop_gradient(t, V); }},
    {"kiln_select_n", true, [](CASE_ARGS) -> void * { return kiln_select_n(t, V, 1, VS); }},
    {"kiln_where", true, [](CASE_ARGS) -> void * { return kiln_where(t, V, V, V); }},
    {"kiln_clamp", true, [](CASE_ARGS) -> void * { return kiln_clamp(t, V, V, V); }},
    {"kiln_convert", true, [](CASE_ARGS) -> void * { return kiln_convert(t, V, KILN_F32); }},
    {"kiln_bitcast", true, [](CASE_ARGS) -> void * { return kiln_bitcast(t, V, KILN_F32); }},
    {"kiln_broadcast_in_dim", true, [](CASE_ARGS) -> void * { return kiln_broadcast_in_dim(t, V, 1, ONES, ZEROS); }},
    {"kiln_broadcast_to", true, [](CASE_ARGS) -> void * { return kiln_broadcast_to(t, V, 1, ONES); }},
    {"kiln_reshape", true, [](CASE_ARGS) -> void * { return kiln_reshape(t, V, 1, ONES); }},
    {"kiln_transpose", true, [](CASE_ARGS) -> void * { return kiln_transpose(t, V, nullptr); }},
    {"kiln_squeeze", true, [](CASE_ARGS) -> void * { return kiln_squeeze(t, V, 1, ZEROS); }},
    {"kiln_expand_dims", true, [](CASE_ARGS) -> void * { return kiln_expand_dims(t, V, 1, ZEROS); }},
    {"kiln_rev", true, [](CASE_ARGS) -> void * { return kiln_rev(t, V, 1, ZEROS); }},
    {"kiln_slice", true, [](CASE_ARGS) -> void * { return kiln_slice(t, V, ONES, ONES, ONES); }},
    {"kiln_dynamic_slice", true, [](CASE_ARGS) -> void * { return kiln_dynamic_slice(t, V, VS, ONES); }},
    {"kiln_dynamic_update_slice", true, [](CASE_ARGS) -> void * { return kiln_dynamic_update_slice(t, V, V, VS); }},
    {"kiln_concatenate", true, [](CASE_ARGS) -> void * { return kiln_concatenate(t, 1, VS, 1); }},
    {"kiln_pad", true, [](CASE_ARGS) -> void * { return kiln_pad(t, V, V, ONES, ONES, ONES); }},
    {"kiln_take", true, [](CASE_ARGS) -> void * { return kiln_take(t, V, V, 1); }},
    {"kiln_take_along_axis", true, [](CASE_ARGS) -> void * { return kiln_take_along_axis(t, V, V, 1); }},
    {"kiln_one_hot", true, [](CASE_ARGS) -> void * { return kiln_one_hot(t, V, 1, KILN_F32); }},
    {"kiln_scatter", true, [](CASE_ARGS) -> void * { return kiln_scatter(t, V, V, V, 1); }},
    {"kiln_scatter_add", true, [](CASE_ARGS) -> void * { return kiln_scatter_add(t, V, V, V, 1); }},
    {"kiln_scatter_mul", true, [](CASE_ARGS) -> void * { return kiln_scatter_mul(t, V, V, V, 1); }},
    {"kiln_scatter_min", true, [](CASE_ARGS) -> void * { return kiln_scatter_min(t, V, V, V, 1); }},
    {"kiln_scatter_max", true, [](CASE_ARGS) -> void * { return kiln_scatter_max(t, V, V, V, 1); }},
    {"kiln_reduce_window_sum", true, [](CASE_ARGS) -> void * { return kiln_reduce_window_sum(t, V, &W); }},
    {"kiln_reduce_window_max", true, [](CASE_ARGS) -> void * { return kiln_reduce_window_max(t, V, &W); }},
    {"kiln_reduce_window_min", true, [](CASE_ARGS) -> void * { return kiln_reduce_window_min(t, V, &W); }},
    {"kiln_select_and_scatter_add", true, [](CASE_ARGS) -> void * { return kiln_select_and_scatter_add(t, V, V, 1, &W); }},
    {"kiln_max_pool", true, [](CASE_ARGS) -> void * { return kiln_max_pool(t, V, 1, ONES, ONES, "SAME", ONES); }},
    {"kiln_avg_pool", true, [](CASE_ARGS) -> void * { return kiln_avg_pool(t, V, 1, ONES, ONES, "SAME", ONES, 1); }},
    {"kiln_reduce_sum", true, [](CASE_ARGS) -> void * { return kiln_reduce_sum(t, V, 1, ZEROS); }},
    {"kiln_reduce_max", true, [](CASE_ARGS) -> void * { return kiln_reduce_max(t, V, 1, ZEROS); }},
    {"kiln_reduce_min", true, [](CASE_ARGS) -> void * { return kiln_reduce_min(t, V, 1, ZEROS); }},
    {"kiln_reduce_prod", true, [](CASE_ARGS) -> void * { return kiln_reduce_prod(t, V, 1, ZEROS); }},
    {"kiln_reduce_and", true, [](CASE_ARGS) -> void * { return kiln_reduce_and(t, V, 1, ZEROS); }},
    {"kiln_reduce_or", true, [](CASE_ARGS) -> void * { return kiln_reduce_or(t, V, 1, ZEROS); }},
    {"kiln_argmax", true, [](CASE_ARGS) -> void * { return kiln_argmax(t, V, 1, KILN_F32); }},
    {"kiln_argmin", true, [](CASE_ARGS) -> void * { return kiln_argmin(t, V, 1, KILN_F32); }},
    {"kiln_cumsum", true, [](CASE_ARGS) -> void * { return kiln_cumsum(t, V, 1, 1); }},
    {"kiln_cumprod", true, [](CASE_ARGS) -> void * { return kiln_cumprod(t, V, 1, 1); }},
    {"kiln_cummax", true, [](CASE_ARGS) -> void * { return kiln_cummax(t, V, 1, 1); }},
    {"kiln_cummin", true, [](CASE_ARGS) -> void * { return kiln_cummin(t, V, 1, 1); }},
    {"kiln_cumlogsumexp", true, [](CASE_ARGS) -> void * { return kiln_cumlogsumexp(t, V, 1, 1); }},
    {"kiln_sort", true, [](CASE_ARGS) -> void * { return kiln_sort(t, V, 1, nullptr); }},
    {"kiln_dot_general", true, [](CASE_ARGS) -> void * { return kiln_dot_general(t, V, V, &DD, KILN_F32); }},
    {"kiln_matmul", true, [](CASE_ARGS) -> void * { return kiln_matmul(t, V, V); }},
    {"kiln_conv_general_dilated", true, [](CASE_ARGS) -> void * { return kiln_conv_general_dilated(t, V, V, &CP); }},
    {"kiln_conv", true, [](CASE_ARGS) -> void * { return kiln_conv(t, V, V, ONES, "SAME"); }},
    {"kiln_switch", true, [](CASE_ARGS) -> void * { return kiln_switch(t, V, 1, FS, TR); }},
    {"kiln_cond", true, [](CASE_ARGS) -> void * { return kiln_cond(t, V, F, F, TR); }},
    {"kiln_while", true, [](CASE_ARGS) -> void * { return kiln_while(t, F, F, TR); }},
    {"kiln_fori_loop", true, [](CASE_ARGS) -> void * { return kiln_fori_loop(t, 1, 1, F, TR); }},
    {"kiln_scan", true, [](CASE_ARGS) -> void * { return kiln_scan(t, F, TR, TR, 1, 1); }},
    {"kiln_map", true, [](CASE_ARGS) -> void * { return kiln_map(t, F, TR); }},
    {"kiln_random_key", false, [](CASE_ARGS) -> void * { return kiln_random_key(t, 1); }},
    {"kiln_random_split", true, [](CASE_ARGS) -> void * { return kiln_random_split(t, V, 1); }},
    {"kiln_random_fold_in", true, [](CASE_ARGS) -> void * { return kiln_random_fold_in(t, V, V); }},
    {"kiln_random_bits", true, [](CASE_ARGS) -> void * { return kiln_random_bits(t, V, 1, 1, ONES); }},
    {"kiln_random_uniform", true, [](CASE_ARGS) -> void * { return kiln_random_uniform(t, V, KILN_F32, 1, ONES, 1, 1); }},
    {"kiln_random_normal", true, [](CASE_ARGS) -> void * { return kiln_random_normal(t, V, KILN_F32, 1, ONES); }},
    {"kiln_random_bernoulli", true, [](CASE_ARGS) -> void * { return kiln_random_bernoulli(t, V, 1, 1, ONES); }},
};

kiln_tree *identity(kiln_trace *, const kiln_tree *args, void *) { return kiln_tree_clone(args); }

enum class Mode { kFailedTrace, kNullOperand };
struct CaseRun {
  const OpCase *op;
  Mode mode;
  std::vector<std::string> problems;
};

// Calls the op on a trace that has failed (every op must leave the trace's
// first error as the message) or with NULL operands (the op must fail the
// trace, and the message must be the trace's).
kiln_tree *run_case(kiln_trace *t, const kiln_tree *args, void *user) {
  CaseRun *r = static_cast<CaseRun *>(user);
  kiln_func *f = nullptr;
  kiln_func_new(identity, nullptr, "identity", &f);
  const kiln_func *fs[2] = {f, f};
  kiln_val *x = r->mode == Mode::kFailedTrace ? kiln_arg(args, 0) : nullptr;
  kiln_val *xs[4] = {x, x, x, x}; // kiln_nn_mha_init reads 4 keys
  kiln_tree *tr = x ? kiln_tuple_of(1, &x) : nullptr;
  if (r->mode == Mode::kFailedTrace) kiln_trace_fail(t, KILN_ERR_SHAPE, "planted failure");
  stale();
  kiln_tree *out_tree = nullptr;
  void *res = r->op->call(t, x, xs, tr, f, fs, out_tree);
  std::string msg = kiln_last_error();  // read before kiln_trace_status rewrites it
  std::string what = std::string(r->op->name) +
                     (r->mode == Mode::kFailedTrace ? " on a failed trace" : " with NULL operands");
  if (res) r->problems.push_back(what + ": returned non-NULL");
  if (msg == "stale message") r->problems.push_back(what + ": returned NULL silently");
  if (r->mode == Mode::kFailedTrace && msg != "planted failure")
    r->problems.push_back(what + ": message \"" + msg + "\" is not the trace's first error");
  if (r->mode == Mode::kNullOperand) {
    if (kiln_trace_status(t) == KILN_OK)
      r->problems.push_back(what + ": the trace did not fail");
    else if (msg != kiln_trace_error(t) || msg.empty())
      r->problems.push_back(what + ": message \"" + msg + "\" is not the trace's \"" +
                            kiln_trace_error(t) + "\"");
  }
  kiln_tree_free(out_tree);
  kiln_tree_free(tr);
  kiln_func_free(f);
  return nullptr;
}

TEST_F(ApiErrors, EveryTraceOpExplainsItsNull) {
  std::vector<std::string> problems;
  size_t n_null_operand = 0;
  for (const OpCase &op : kOps) {
    // A NULL trace: nothing to record on, the message says so.
    stale();
    kiln_tree *out_tree = nullptr;
    const kiln_func *fs[2] = {nullptr, nullptr};
    kiln_val *xs[4] = {nullptr, nullptr, nullptr, nullptr};
    void *res = op.call(nullptr, nullptr, xs, nullptr, nullptr, fs, out_tree);
    std::string msg = kiln_last_error();
    if (res || is_stale() || msg.find("NULL") == std::string::npos)
      problems.push_back(std::string(op.name) + " on a NULL trace: \"" + msg + "\"");
    for (Mode mode : {Mode::kFailedTrace, Mode::kNullOperand}) {
      if (mode == Mode::kNullOperand && !op.has_operand) continue;
      n_null_operand += mode == Mode::kNullOperand;
      CaseRun r{&op, mode, {}};
      trace_failure(run_case, &r, "op_case");
      problems.insert(problems.end(), r.problems.begin(), r.problems.end());
    }
  }
  EXPECT_GT(sizeof kOps / sizeof kOps[0], 150u);
  EXPECT_GT(n_null_operand, 140u);
  for (const std::string &p : problems) ADD_FAILURE() << p;
}

// Every trace-level function the public headers declare is in kOps, so a
// new op cannot skip the checks above.
TEST(ApiErrorsCoverage, EveryTraceFunctionOfTheHeadersIsChecked) {
  std::set<std::string> checked;
  for (const OpCase &op : kOps) checked.insert(op.name);
  std::string dir = std::string(KILN_GOLDEN_DIR) + "/../../include/kiln";
  const std::regex decl(R"(^(?:const )?kiln_(?:val|tree) \*(kiln_\w+)\(kiln_trace \*t\b)");
  size_t seen = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
      if (std::regex_search(line, m, decl)) {
        seen++;
        EXPECT_TRUE(checked.count(m[1])) << m[1] << " (" << entry.path().filename().string()
                                         << ") is not in kOps";
      }
  }
  EXPECT_GT(seen, 130u);
}

// ---- accessors outside traces ----

TEST_F(ApiErrors, AccessorsExplainTheirNull) {
  auto expect_says = [](const void *res, const char *fn, const char *what) {
    EXPECT_EQ(res, nullptr) << fn;
    std::string m = kiln_last_error();
    EXPECT_NE(m.find(fn), std::string::npos) << fn << ": " << m;
    EXPECT_NE(m.find(what), std::string::npos) << fn << ": " << m;
  };
  float v[2] = {1, 2};
  const char *keys[2] = {"b", "w"};
  kiln_tree *kids[2] = {array(KILN_F32, v, {2}), kiln_tree_ptr(nullptr)};
  kiln_tree *d = kiln_tree_dict(2, keys, kids);
  kiln_tree *one = kiln_tree_none();
  kiln_tree *l = kiln_tree_list(1, &one);
  ASSERT_NE(d, nullptr);
  ASSERT_NE(l, nullptr);

  stale();
  expect_says(kiln_tree_get(d, "x"), "kiln_tree_get", "no key 'x' in the dict (keys: 'b', 'w')");
  stale();
  expect_says(kiln_tree_get(l, "x"), "kiln_tree_get", "a list, not a dict");
  stale();
  expect_says(kiln_tree_get(d, nullptr), "kiln_tree_get", "key is NULL");
  stale();
  expect_says(kiln_tree_child(d, 2), "kiln_tree_child", "child 2 is out of range (a dict of 2");
  stale();
  expect_says(kiln_tree_child(nullptr, 0), "kiln_tree_child", "NULL");
  stale();
  expect_says(kiln_tree_key(l, 0), "kiln_tree_key", "a list");
  stale();
  expect_says(kiln_tree_leaf_get(d), "kiln_tree_leaf_get", "a dict, not a leaf");
  stale();
  expect_says(kiln_tree_leaf_array(kiln_tree_get(d, "w")), "kiln_tree_leaf_array",
              "a pointer leaf");
  stale();
  expect_says(kiln_tree_node_type(d), "kiln_tree_node_type", "not a custom node");
  stale();
  size_t aux_size = 7;
  expect_says(kiln_tree_aux(l, &aux_size), "kiln_tree_aux", "a list, not a custom node");
  EXPECT_EQ(aux_size, 0u);
  stale();
  expect_says(kiln_tree_at_str(d, "['q']"), "kiln_tree_at", "key ['q'] at the root is missing");
  stale();
  expect_says(kiln_node_type_find("NoSuchNode"), "kiln_node_type_find", "NoSuchNode");
  stale();
  expect_says(kiln_node_type_name(nullptr), "kiln_node_type_name", "NULL");
  stale();
  expect_says(kiln_axis(KILN_MAX_RANK + 1), "kiln_axis", "out of range");
  stale();
  expect_says(kiln_arg(d, 5), "kiln_arg", "argument 5 is out of range");
  stale();
  expect_says(kiln_tuple_of(1, nullptr), "kiln_tuple_of", "NULL");
  stale();
  expect_says(kiln_tree_clone(nullptr), "kiln_tree_clone", "NULL");
  stale();
  expect_says(kiln_treedef_clone(nullptr), "kiln_treedef_clone", "NULL");
  stale();
  expect_says(kiln_tree_array(nullptr), "kiln_tree_array", "NULL");
  stale();
  expect_says(kiln_tree_val(nullptr), "kiln_tree_val", "NULL");
  stale();
  expect_says(kiln_val_shape(nullptr), "kiln_val_shape", "NULL");
  stale();
  expect_says(kiln_array_device(nullptr), "kiln_array_device", "NULL");
  stale();
  expect_says(kiln_device_ctx(nullptr), "kiln_device_ctx", "NULL");
  stale();
  expect_says(kiln_ctx_options(nullptr), "kiln_ctx_options", "NULL");
  kiln_tree_free(d);
  kiln_tree_free(l);

  // The mesh, spec and sharding accessors.
  int64_t shape[1] = {1};
  const char *names[1] = {"i"};
  kiln_mesh *mesh = nullptr;
  ASSERT_EQ(kiln_mesh_new(ctx, 1, shape, names, nullptr, &mesh), KILN_OK) << kiln_last_error();
  stale();
  expect_says(kiln_mesh_axis_name(mesh, 3), "kiln_mesh_axis_name", "axis 3 is out of range");
  kiln_pspec *spec = nullptr;
  ASSERT_EQ(kiln_pspec_parse("i, None", &spec), KILN_OK);
  stale();
  expect_says(kiln_pspec_entry_axis(spec, 1, 0), "kiln_pspec_entry_axis", "dimension 1 has no axis 0");
  stale();
  expect_says(kiln_pspec_format(spec, nullptr, 0), "kiln_pspec_format", "buf is NULL");
  kiln_sharding *s = nullptr;
  ASSERT_EQ(kiln_sharding_named(mesh, spec, &s), KILN_OK) << kiln_last_error();
  stale();
  expect_says(kiln_sharding_device(s, 4), "kiln_sharding_device", "device 4 is out of range");
  kiln_sharding_free(s);
  kiln_pspec_free(spec);
  kiln_mesh_free(mesh);
}

}  // namespace
