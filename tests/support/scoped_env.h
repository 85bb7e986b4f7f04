// Sets (or, with NULL, unsets) an environment variable for one scope and
// restores the previous value; shared by the tests that read KILN_* or $CC.
#ifndef KILN_TESTS_SCOPED_ENV_H
#define KILN_TESTS_SCOPED_ENV_H

#include <stdlib.h>

#include <string>

class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

#endif
