// String helpers the tests share: a substring test, splitting a line on a
// separator (std::getline's fields: a trailing separator adds none) and
// trimming the spaces around a field.
#ifndef KILN_TESTS_SUPPORT_TEXT_H
#define KILN_TESTS_SUPPORT_TEXT_H

#include <sstream>
#include <string>
#include <vector>

namespace kiln_test {

inline bool Contains(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

inline std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

inline std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace kiln_test

#endif  // KILN_TESTS_SUPPORT_TEXT_H
