// What tests check about a jit besides its values: the program it compiled
// to (its text: which kernels, host steps, library calls), on a context of
// the CPU backend's fused executor.
#ifndef KILN_TESTS_JIT_CHECK_H
#define KILN_TESTS_JIT_CHECK_H

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/jit.h"
#include "kiln/kiln.h"

// The compiled text of jit j for args ("" after a failed expectation).
inline std::string JitText(kiln_jit *j, const kiln_tree *args) {
  kiln_lowered *l = nullptr;
  kiln_compiled *c = nullptr;
  char *text = nullptr;
  EXPECT_EQ(kiln_jit_lower(j, args, &l), KILN_OK) << kiln_last_error();
  if (l) {
    EXPECT_EQ(kiln_lowered_compile(l, &c), KILN_OK) << kiln_last_error();
  }
  if (c) {
    EXPECT_EQ(kiln_compiled_as_text(c, &text), KILN_OK) << kiln_last_error();
  }
  std::string s = text ? text : "";
  free(text);
  kiln_compiled_free(c);
  kiln_lowered_free(l);
  return s;
}

// A context on the CPU backend with the fused executor and its first device
// (the caller frees the context; NULL after a failed expectation).
inline kiln_ctx *FusedCpuContext(kiln_device **dev) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.executor = KILN_EXECUTOR_FUSED;
  kiln_ctx *ctx = nullptr;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  if (ctx) {
    EXPECT_EQ(kiln_device_get(ctx, 0, dev), KILN_OK);
  }
  return ctx;
}

// fn (user data u) under kiln_jit on ctx, called on args (consumed): the
// bytes of its one result, and, when text is not NULL, the compiled text.
inline std::vector<uint8_t> JitBytes(kiln_ctx *ctx, kiln_fn fn, void *u, kiln_tree *args,
                                     std::string *text) {
  kiln_func *f = nullptr;
  kiln_jit *j = nullptr;
  kiln_tree *out = nullptr;
  std::vector<uint8_t> bytes;
  EXPECT_EQ(kiln_func_new(fn, u, "f", &f), KILN_OK);
  if (f) {
    EXPECT_EQ(kiln_jit_new(ctx, f, nullptr, &j), KILN_OK) << kiln_last_error();
  }
  if (j) {
    EXPECT_EQ(kiln_jit_call(j, args, &out), KILN_OK) << kiln_last_error();
  }
  kiln_array *a = out ? kiln_tree_leaf_array(out) : nullptr;
  if (a) {
    bytes.resize((size_t)kiln_array_size(a) * kiln_dtype_size(kiln_array_dtype(a)));
    EXPECT_EQ(kiln_array_to_host(a, bytes.data(), bytes.size()), KILN_OK) << kiln_last_error();
  }
  if (j && text) *text = JitText(j, args);
  kiln_tree_free(out);
  kiln_tree_free(args);
  kiln_jit_free(j);
  kiln_func_free(f);
  return bytes;
}

#endif
