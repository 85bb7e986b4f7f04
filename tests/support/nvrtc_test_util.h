// NVRTC compiles of kernels/ headers for the tests. NVRTC needs no GPU, so
// these run everywhere: the headers must compile as CUDA C with no standard
// headers, exactly as the runtime embeds them. Needs KILN_KERNELS_DIR.
#ifndef KILN_TESTS_NVRTC_TEST_UTIL_H
#define KILN_TESTS_NVRTC_TEST_UTIL_H

#include <gtest/gtest.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "test_files.h"

// The PTX of `source` (compute_80) with the named kernels/ headers
// available to #include; "" after a failed expectation carrying the log.
inline std::string NvrtcPtx(const char *source, const std::vector<std::string> &header_names) {
  std::vector<std::string> texts;
  std::vector<const char *> headers, names;
  for (const std::string &n : header_names) {
    texts.push_back(ReadFile(std::string(KILN_KERNELS_DIR) + "/" + n));
    EXPECT_FALSE(texts.back().empty()) << n;
  }
  for (size_t i = 0; i < texts.size(); i++) {
    headers.push_back(texts[i].c_str());
    names.push_back(header_names[i].c_str());
  }
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, source, "kiln_test.cu", (int)headers.size(), headers.data(),
                         names.data()) != NVRTC_SUCCESS) {
    ADD_FAILURE() << "nvrtcCreateProgram failed";
    return "";
  }
  const char *opts[] = {"--gpu-architecture=compute_80"};
  nvrtcResult rc = nvrtcCompileProgram(prog, 1, opts);
  size_t log_size = 0, ptx_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0'), ptx;
  nvrtcGetProgramLog(prog, log.data());
  EXPECT_EQ(rc, NVRTC_SUCCESS) << log;
  if (rc == NVRTC_SUCCESS) {
    EXPECT_EQ(nvrtcGetPTXSize(prog, &ptx_size), NVRTC_SUCCESS);
    ptx.assign(ptx_size, '\0');
    EXPECT_EQ(nvrtcGetPTX(prog, ptx.data()), NVRTC_SUCCESS);
  }
  nvrtcDestroyProgram(&prog);
  return ptx;
}

#endif
