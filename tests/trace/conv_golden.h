// The cases of golden/conv.py (JAX's conv_general_dilated) as kiln calls:
// shared by test_conv (C target, reference executor) and test_cuda_layers
// (the CUDA target).
#ifndef KILN_TESTS_CONV_GOLDEN_H
#define KILN_TESTS_CONV_GOLDEN_H

#include "support/transform_test_util.h"

namespace ktest {

inline const char kConvFile[] = "conv.txt";
inline const GoldenArray &C(const std::string &c, const std::string &n) { return G(c, n, kConvFile); }

struct ConvCase {
  const char *name, *lhs, *rhs, *out;
};
// The specs of each case of golden/conv.py (its other params are in the file).
inline const ConvCase kConvCases[] = {
    {"c1d", "NCH", "OIH", "NCH"},           {"c1d_negpad", "NCH", "OIH", "NCH"},
    {"nchw", "NCHW", "OIHW", "NCHW"},       {"nhwc", "NHWC", "HWIO", "NHWC"},
    {"lhs_dil", "NCHW", "OIHW", "NCHW"},    {"mixed", "NCHW", "HWIO", "NHWC"},
    {"depthwise", "NHWC", "HWIO", "NHWC"},  {"groups", "NCHW", "OIHW", "NCHW"},
    {"batch_groups", "NCHW", "OIHW", "NCHW"}, {"wide", "NHWC", "HWIO", "NHWC"}};

inline std::vector<int64_t> Ints(const GoldenArray &a) {
  return std::vector<int64_t>(a.v.begin(), a.v.end());
}

// A case's kiln_conv_params, owning the arrays it points at.
struct ConvSpec {
  ConvSpec(const ConvCase &c, kiln_dtype pref = KILN_INVALID_DTYPE)
      : strides(Ints(C(c.name, "strides"))), padding(Ints(C(c.name, "padding"))),
        ld(Ints(C(c.name, "lhs_dil"))), rd(Ints(C(c.name, "rhs_dil"))) {
    std::vector<int64_t> g = Ints(C(c.name, "groups"));
    p.window_strides = strides.data();
    p.padding = padding.data();
    p.lhs_dilation = ld.data();
    p.rhs_dilation = rd.data();
    p.lhs_spec = c.lhs, p.rhs_spec = c.rhs, p.out_spec = c.out;
    p.feature_group_count = g.at(0), p.batch_group_count = g.at(1);
    p.preferred_element_type = pref;
  }
  std::vector<int64_t> strides, padding, ld, rd;
  kiln_conv_params p{};
};

inline kiln_tree *ConvFn(kiln_trace *t, const kiln_tree *a, void *u) {
  return kiln_tree_val(
      kiln_conv_general_dilated(t, ArgVal(a, 0), ArgVal(a, 1), &((ConvSpec *)u)->p));
}

// Tolerance for f32 convolutions against XLA's (sums of up to ~100
// products in a different order).
inline void Near(const std::vector<float> &got, const GoldenArray &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_NEAR(got[i], want.v[i], 5e-5 + 5e-5 * std::fabs(want.v[i])) << what << " [" << i << "]";
}

}  // namespace ktest
#endif
