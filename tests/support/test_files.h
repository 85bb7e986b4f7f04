// File helpers shared by the tests that look at what kiln writes to disk.
#ifndef KILN_TESTS_TEST_FILES_H
#define KILN_TESTS_TEST_FILES_H

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

// The whole file, bytes as they are ("" if it cannot be read).
inline std::string ReadFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh directory under /tmp, removed with its contents at the end of the
// test. `tag` names it for whoever finds one left behind.
class TempDir {
 public:
  explicit TempDir(const std::string &tag = "test") {
    std::string templ = "/tmp/kiln-" + tag + "-XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

#endif
