// The elementwise records (src/ir/elementwise_*.def): the Python
// translator's PLAIN names are the records' (so that list cannot drift).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "ir/ir.h"

namespace {

// ---- the Python translator's PLAIN list against the records ----

std::set<std::string> PythonPlain() {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/python/kiln/_jaxpr_ops.py");
  std::stringstream s;
  s << f.rdbuf();
  std::string text = s.str();
  size_t a = text.find("PLAIN = \"\"\"");
  EXPECT_NE(a, std::string::npos) << "no PLAIN list in _jaxpr_ops.py";
  if (a == std::string::npos) return {};
  a += std::strlen("PLAIN = \"\"\"");
  std::istringstream names(text.substr(a, text.find("\"\"\"", a) - a));
  std::set<std::string> out;
  for (std::string n; names >> n;) out.insert(n);
  return out;
}

TEST(OpsRecords, PythonPlainNamesAreTheRecordsWithoutParams) {
  // copy and select_n have translation rules of their own (the identity;
  // select_n broadcasts a predicate over PRNG key data).
  const std::set<std::string> own_rule = {"copy", "select_n"};
  std::set<std::string> want;
  for (int p = 0; p < KIR_NUM_PRIMS; p++) {
    const kir_prim_info *info = kir_prim_get((kir_prim)p);
    if (info->family == KIR_FAMILY_ELEMENTWISE && info->params == KIR_PARAMS_NONE &&
        !own_rule.count(info->name))
      want.insert(info->name);
  }
  std::set<std::string> got = PythonPlain();
  for (const std::string &n : want)
    EXPECT_TRUE(got.count(n)) << n << " has a record without params but is not in PLAIN";
  for (const std::string &n : got)
    EXPECT_TRUE(want.count(n)) << n << " is in PLAIN but is no elementwise record without params";
}

}  // namespace
