// Tracing: every op's bad input is a sticky, named error; control flow
// structure checks; closures and captures; the IR each op records.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/jit.h"
#include "kiln/kiln.h"

namespace {

using Body = std::function<kiln_val *(kiln_trace *, kiln_val *, kiln_val *)>;

struct Traced {
  kiln_status status;
  std::string error;  // kiln_last_error() after the trace
  std::string text;   // the program on success
};

kiln_tree *RunBody(kiln_trace *t, const kiln_tree *args, void *user) {
  auto *body = static_cast<Body *>(user);
  kiln_val *x = kiln_tree_leaf_get(kiln_tree_child(args, 0))->u.val;
  kiln_val *y = kiln_tree_leaf_get(kiln_tree_child(args, 1))->u.val;
  return kiln_tree_val((*body)(t, x, y));
}

kiln_aval Aval(kiln_dtype d, std::initializer_list<int64_t> shape) {
  kiln_aval a{};
  a.dtype = d;
  for (int64_t s : shape) a.shape[a.rank++] = s;
  return a;
}

// Traces body over (x, y) of the given types with make_jaxpr.
Traced Trace(kiln_aval x, kiln_aval y, Body body,
             kiln_promotion_option promotion = KILN_PROMOTION_DEFAULT) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.promotion = promotion;
  kiln_ctx *ctx = nullptr;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK);
  kiln_func *f = nullptr;
  EXPECT_EQ(kiln_func_new(RunBody, &body, "body", &f), KILN_OK);
  kiln_tree *parts[2] = {kiln_tree_ptr(&x), kiln_tree_ptr(&y)};
  kiln_tree *args = kiln_tree_tuple(2, parts);
  char *text = nullptr;
  Traced r;
  r.status = kiln_make_jaxpr(ctx, f, args, &text);
  r.error = kiln_last_error();
  if (text) r.text = text;
  free(text);
  kiln_tree_free(args);
  kiln_func_free(f);
  kiln_ctx_free(ctx);
  return r;
}

void ExpectError(const Traced &r, kiln_status want, std::initializer_list<const char *> parts) {
  EXPECT_EQ(r.status, want) << r.error;
  for (const char *p : parts) EXPECT_NE(r.error.find(p), std::string::npos) << r.error;
}

const kiln_aval F32_2x3 = Aval(KILN_F32, {2, 3});
const kiln_aval F32_3 = Aval(KILN_F32, {3});
const kiln_aval I32_3 = Aval(KILN_I32, {3});

TEST(Trace, BroadcastingAndPromotionRecordExplicitOps) {
  Traced r = Trace(Aval(KILN_I8, {2, 1}), Aval(KILN_U8, {3}),
                   [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_add(t, x, y); });
  ASSERT_EQ(r.status, KILN_OK) << r.error;
  // jnp.add(int8[2,1], uint8[3]) -> int16[2,3]: converts, a rank-aligning broadcast, add.
  EXPECT_EQ(r.text,
            "{ lambda ; a:i8[2,1] b:u8[3]. let\n"
            "    c:i16[2,1] = convert_element_type[new_dtype=int16 weak_type=False] a\n"
            "    d:i16[3] = convert_element_type[new_dtype=int16 weak_type=False] b\n"
            "    e:i16[1,3] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(1, 3)] d\n"
            "    f:i16[2,3] = add c e\n"
            "  in (f,) }");
}

TEST(Trace, ElementwiseBadInput) {
  ExpectError(Trace(F32_2x3, Aval(KILN_F32, {4}),
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_mul(t, x, y); }),
              KILN_ERR_SHAPE, {"kiln_mul", "f32[2,3]", "f32[4]"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) {
                      (void)x;
                      return kiln_exp(t, y);  // lax.exp takes floats only
                    }),
              KILN_ERR_DTYPE, {"exp", "i32[3]"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) {
                      (void)y;
                      return kiln_shift_left(t, x, x);  // shifts take integers
                    }),
              KILN_ERR_DTYPE, {"shift_left", "f32[3]"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_add(t, x, y); },
                    KILN_PROMOTION_OPT_STRICT),
              KILN_ERR_PROMOTION, {"kiln_add", "f32[3]", "i32[3]"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) { return kiln_add(t, x, nullptr); }),
              KILN_ERR_ARGUMENT, {"kiln_add", "operand 1 is NULL"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      return kiln_convert(t, x, static_cast<kiln_dtype>(77));
                    }),
              KILN_ERR_DTYPE, {"kiln_convert", "invalid dtype"});
  ExpectError(Trace(F32_3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      return kiln_bitcast(t, x, KILN_F64);  // 4 bytes into 8
                    }),
              KILN_ERR_SHAPE, {"bitcast_convert_type"});
}

TEST(Trace, StructureBadInput) {
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int64_t shape[2] = {4, 2};
                      return kiln_reshape(t, x, 2, shape);
                    }),
              KILN_ERR_SHAPE, {"reshape", "f32[2,3]"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int perm[2] = {0, 0};
                      return kiln_transpose(t, x, perm);
                    }),
              KILN_ERR_ARGUMENT, {"transpose", "permutation"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int64_t start[2] = {0, 0}, limit[2] = {3, 3};
                      return kiln_slice(t, x, start, limit, nullptr);
                    }),
              KILN_ERR_SHAPE, {"slice", "f32[2,3]"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int d = 0;
                      return kiln_squeeze(t, x, 1, &d);  // dimension 0 has size 2
                    }),
              KILN_ERR_SHAPE, {"squeeze"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) {
                      kiln_val *xs[2] = {x, y};
                      return kiln_concatenate(t, 2, xs, 0);  // ranks differ
                    }),
              KILN_ERR_SHAPE, {"concatenate"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int64_t shape[1] = {3};
                      return kiln_broadcast_to(t, x, 1, shape);
                    }),
              KILN_ERR_SHAPE, {"kiln_broadcast_to", "rank 2 to rank 1"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_take(t, x, y, 0); }),
              KILN_ERR_DTYPE, {"kiln_take", "indices must be integers", "f32[3]"});
  ExpectError(Trace(F32_2x3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_take(t, x, y, 2); }),
              KILN_ERR_OUT_OF_RANGE, {"kiln_take", "axis 2", "rank 2"});
  ExpectError(Trace(F32_2x3, I32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) {
                      return kiln_take_along_axis(t, x, y, 1);
                    }),
              KILN_ERR_SHAPE, {"kiln_take_along_axis", "i32[3]", "f32[2,3]"});
  ExpectError(Trace(F32_2x3, I32_3,
                    [](kiln_trace *t, kiln_val *, kiln_val *y) {
                      return kiln_one_hot(t, y, -1, KILN_F32);
                    }),
              KILN_ERR_ARGUMENT, {"kiln_one_hot", "num_classes=-1"});
}

TEST(Trace, ReductionAndDotBadInput) {
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int axes[1] = {5};
                      return kiln_reduce_sum(t, x, 1, axes);
                    }),
              KILN_ERR_OUT_OF_RANGE, {"kiln_reduce_sum", "axis 5", "rank 2"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      int axes[2] = {1, -1};
                      return kiln_reduce_max(t, x, 2, axes);
                    }),
              KILN_ERR_ARGUMENT, {"kiln_reduce_max", "appears twice"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      return kiln_argmax(t, x, 1, KILN_F32);
                    }),
              KILN_ERR_DTYPE, {"argmax", "index_dtype"});
  ExpectError(Trace(F32_2x3, Aval(KILN_F32, {2, 4}),
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) { return kiln_matmul(t, x, y); }),
              KILN_ERR_SHAPE, {"dot_general", "f32[2,3]", "f32[2,4]"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      return kiln_dot_general(t, x, x, nullptr, KILN_INVALID_DTYPE);
                    }),
              KILN_ERR_ARGUMENT, {"kiln_dot_general", "dims is NULL"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      return kiln_cumsum(t, x, -3, 0);
                    }),
              KILN_ERR_OUT_OF_RANGE, {"kiln_cumsum"});
}

TEST(Trace, FirstErrorWinsAndLaterOpsAreNoOps) {
  Traced r = Trace(F32_2x3, F32_3, [](kiln_trace *t, kiln_val *x, kiln_val *) {
    int64_t bad[1] = {7};
    kiln_val *a = kiln_reshape(t, x, 1, bad);           // first error
    kiln_val *b = kiln_exp(t, kiln_transpose(t, a, nullptr));
    EXPECT_EQ(b, nullptr);
    kiln_trace_fail(t, KILN_ERR_IO, "a later user error");  // not kept
    EXPECT_EQ(kiln_trace_status(t), KILN_ERR_SHAPE);
    return b;
  });
  ExpectError(r, KILN_ERR_SHAPE, {"reshape"});
  EXPECT_EQ(r.error.find("later user error"), std::string::npos);
}

// ---- control flow ----

kiln_tree *ReturnsTuple(kiln_trace *, const kiln_tree *a, void *) {
  kiln_val *v = kiln_tree_leaf_get(a)->u.val;
  kiln_tree *p[2] = {kiln_tree_val(v), kiln_tree_val(v)};
  return kiln_tree_tuple(2, p);
}

kiln_tree *Identity(kiln_trace *, const kiln_tree *a, void *) { return kiln_tree_clone(a); }

// A fori_loop body: (i, x) -> x as f64, which the f32 carry cannot take.
kiln_tree *ToF64(kiln_trace *t, const kiln_tree *a, void *) {
  return kiln_tree_val(kiln_convert(t, kiln_tree_leaf_get(kiln_tree_child(a, 1))->u.val, KILN_F64));
}

struct Funcs {
  kiln_func *tuple = nullptr, *identity = nullptr, *to_f64 = nullptr;
  Funcs() {
    kiln_func_new(ReturnsTuple, nullptr, "returns_tuple", &tuple);
    kiln_func_new(Identity, nullptr, "identity", &identity);
    kiln_func_new(ToF64, nullptr, "to_f64", &to_f64);
  }
  ~Funcs() {
    kiln_func_free(tuple);
    kiln_func_free(identity);
    kiln_func_free(to_f64);
  }
};

TEST(Trace, ControlFlowStructureMismatches) {
  static Funcs f;
  ExpectError(Trace(F32_3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      kiln_tree *ops = kiln_tree_val(x);
                      kiln_tree *out = kiln_cond(t, kiln_scalar(t, KILN_BOOL, 1), f.identity,
                                                 f.tuple, ops);
                      kiln_tree_free(ops);
                      EXPECT_EQ(out, nullptr);
                      return static_cast<kiln_val *>(nullptr);
                    }),
              KILN_ERR_TREE, {"kiln_cond", "branch 1 returns another structure"});
  ExpectError(Trace(F32_3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      kiln_tree *ops = kiln_tree_val(x);
                      kiln_tree *out = kiln_cond(t, x, f.identity, f.identity, ops);
                      kiln_tree_free(ops);
                      EXPECT_EQ(out, nullptr);
                      return static_cast<kiln_val *>(nullptr);
                    }),
              KILN_ERR_DTYPE, {"kiln_cond", "bool scalar", "f32[3]"});
  ExpectError(Trace(F32_3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      kiln_tree *init = kiln_tree_val(x);
                      kiln_tree *out = kiln_while(t, f.identity, f.identity, init);  // cond not bool
                      kiln_tree_free(init);
                      EXPECT_EQ(out, nullptr);
                      return static_cast<kiln_val *>(nullptr);
                    }),
              KILN_ERR_DTYPE, {"kiln_while", "cond must return one bool scalar"});
  ExpectError(Trace(F32_3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *) {
                      kiln_tree *init = kiln_tree_val(x);
                      kiln_tree *out = kiln_fori_loop(t, 0, 3, f.to_f64, init);  // f32 -> f64
                      kiln_tree_free(init);
                      EXPECT_EQ(out, nullptr);
                      return static_cast<kiln_val *>(nullptr);
                    }),
              KILN_ERR_SHAPE, {"kiln_while", "enters as f32[3] and leaves the body as f64[3]"});
  ExpectError(Trace(F32_2x3, F32_3,
                    [](kiln_trace *t, kiln_val *x, kiln_val *y) {
                      kiln_tree *init = kiln_tree_val(y);
                      kiln_tree *xs = kiln_tree_val(x);
                      kiln_tree *out = kiln_scan(t, f.identity, init, xs, 5, 0);  // length 2 != 5
                      kiln_tree_free(init);
                      kiln_tree_free(xs);
                      EXPECT_EQ(out, nullptr);
                      return static_cast<kiln_val *>(nullptr);
                    }),
              KILN_ERR_SHAPE, {"kiln_scan", "leading axis of length 5"});
}

// A branch that uses a value of the enclosing trace: the capture becomes an
// explicit operand of the cond (JAX's closure conversion).
kiln_tree *AddCaptured(kiln_trace *t, const kiln_tree *a, void *captured) {
  return kiln_tree_val(kiln_add(t, kiln_tree_leaf_get(a)->u.val, static_cast<kiln_val *>(captured)));
}

TEST(Trace, BranchesCaptureEnclosingValuesAsOperands) {
  Traced r = Trace(F32_3, F32_3, [](kiln_trace *t, kiln_val *x, kiln_val *y) {
    kiln_func *with_y = nullptr;
    static Funcs f;
    kiln_func_new(AddCaptured, y, "add_y", &with_y);
    kiln_tree *ops = kiln_tree_val(x);
    kiln_tree *out = kiln_cond(t, kiln_lt(t, kiln_scalar_i(t, 0), kiln_scalar_i(t, 1)), with_y,
                               f.identity, ops);
    kiln_tree_free(ops);
    kiln_func_free(with_y);
    kiln_val *v = out ? kiln_tree_leaf_get(out)->u.val : nullptr;
    kiln_tree_free(out);
    return v;
  });
  ASSERT_EQ(r.status, KILN_OK) << r.error;
  // Both branches take (y, x), the captured y first; branch 1 is the true one.
  EXPECT_NE(r.text.find("{ lambda ; f:f32[3] g:f32[3]. let  in (g,) }"), std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("{ lambda ; h:f32[3] i:f32[3]. let j:f32[3] = add i h in (j,) }"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("] d b a"), std::string::npos) << r.text;
}

}  // namespace
