// IR programs and fusion plans in the tests: owning handles, a new empty
// program, and text parsed and a program printed, each failing the test
// (with kiln's message and the text) where kiln refuses.
#ifndef KILN_TESTS_SUPPORT_IR_PROGRAM_H
#define KILN_TESTS_SUPPORT_IR_PROGRAM_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "fuse/fuse.h"
#include "ir/ir.h"
#include "kiln/kiln.h"

namespace kiln_test {

struct ProgramFree {
  void operator()(kir_program *p) const { kir_program_free(p); }
};
using Program = std::unique_ptr<kir_program, ProgramFree>;

struct PlanFree {
  void operator()(kfuse_plan *p) const { kfuse_plan_free(p); }
};
using Plan = std::unique_ptr<kfuse_plan, PlanFree>;

inline Program NewProgram() {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_program_new(&p), KILN_OK) << kiln_last_error();
  return Program(p);
}

inline Program Parse(const std::string &text) {
  kir_program *p = nullptr;
  EXPECT_EQ(kir_parse(text.c_str(), &p), KILN_OK) << kiln_last_error() << "\n" << text;
  return Program(p);
}

// A new sub-program (a branch, a loop body) of parent.
inline kir_program *Sub(kir_program *parent) {
  kir_program *s = nullptr;
  EXPECT_EQ(kir_program_new_sub(parent, &s), KILN_OK) << kiln_last_error();
  return s;
}

inline std::string Print(const kir_program *p) {
  char *text = nullptr;
  EXPECT_EQ(kir_print(p, &text), KILN_OK) << kiln_last_error();
  std::string s = text ? text : "";
  free(text);
  return s;
}

}  // namespace kiln_test

#endif  // KILN_TESTS_SUPPORT_IR_PROGRAM_H
