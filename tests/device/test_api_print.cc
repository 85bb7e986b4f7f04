// Printing arrays as print(x) shows a JAX array (golden/api_print.py: NumPy's
// str), printing trees leaf by leaf, leaves by key path (kiln_get) and
// jax.device_put of a whole tree.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "nn/train_support.h"

namespace {

struct PrintCase {
  std::string name, dtype, text;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

std::vector<PrintCase> load_cases() {
  std::vector<PrintCase> out;
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/api_print.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string part; std::getline(ss, part, '|');) f.push_back(part);
    if (f.size() == 4) f.push_back(""); // an empty text
    EXPECT_EQ(f.size(), 5u) << line;
    if (f.size() != 5) continue;
    PrintCase c{f[0], f[1], "", {}, {}};
    std::stringstream sh(f[2]);
    for (std::string d; std::getline(sh, d, ',');) c.shape.push_back(std::stoll(d));
    for (size_t i = 0; i + 1 < f[3].size(); i += 2)
      c.bytes.push_back(static_cast<unsigned char>(std::stoul(f[3].substr(i, 2), nullptr, 16)));
    for (size_t i = 0; i < f[4].size(); i++) {
      if (f[4][i] == '\\' && i + 1 < f[4].size()) {
        c.text += f[4][i + 1] == 'n' ? '\n' : f[4][i + 1];
        i++;
      } else {
        c.text += f[4][i];
      }
    }
    out.push_back(c);
  }
  return out;
}

class Print : public CpuFixture {
 protected:
  kiln_array *make(const PrintCase &c) {
    kiln_dtype d;
    EXPECT_EQ(kiln_dtype_from_name(c.dtype.c_str(), &d), KILN_OK) << c.dtype;
    kiln_array *a = nullptr;
    EXPECT_EQ(kiln_array_from_host(dev, d, static_cast<int>(c.shape.size()), c.shape.data(),
                                   c.bytes.data(), c.bytes.size(), &a),
              KILN_OK)
        << c.name << ": " << kiln_last_error();
    return a;
  }
  static std::string format(const kiln_array *a) {
    size_t n = 0;
    EXPECT_EQ(kiln_array_format(a, nullptr, 0, &n), KILN_OK) << kiln_last_error();
    std::string s(n + 1, '\0');
    size_t again = 0;
    EXPECT_EQ(kiln_array_format(a, s.data(), s.size(), &again), KILN_OK);
    EXPECT_EQ(again, n);
    s.resize(n);
    return s;
  }
};

TEST_F(Print, ArraysPrintAsNumpyPrintsThem) {
  std::vector<PrintCase> cases = load_cases();
  ASSERT_GT(cases.size(), 30u) << "missing tests/golden/api_print.txt";
  for (const PrintCase &c : cases) {
    kiln_array *a = make(c);
    if (!a) continue;
    EXPECT_EQ(format(a), c.text) << c.name;
    kiln_array_release(a);
  }
}

TEST_F(Print, FormatTruncatesPrintAppendsANewline) {
  float v[4] = {1, 2.5f, 3, 4};
  int64_t shape[2] = {2, 2};
  kiln_array *a = nullptr;
  ASSERT_EQ(kiln_array_from_host(dev, KILN_F32, 2, shape, v, sizeof v, &a), KILN_OK);
  char small[6];
  size_t n = 0;
  ASSERT_EQ(kiln_array_format(a, small, sizeof small, &n), KILN_OK);
  EXPECT_STREQ(small, "[[1. ");
  EXPECT_EQ(n, std::string("[[1.  2.5]\n [3.  4. ]]").size());
  FILE *f = tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(kiln_array_print(a, f), KILN_OK);
  rewind(f);
  char buf[64] = {0};
  EXPECT_EQ(fread(buf, 1, sizeof buf - 1, f), n + 1);
  EXPECT_STREQ(buf, "[[1.  2.5]\n [3.  4. ]]\n");
  fclose(f);
  // A deleted array says so; a NULL buffer with room is refused.
  ASSERT_EQ(kiln_array_delete(a), KILN_OK);
  EXPECT_EQ(kiln_array_format(a, nullptr, 0, &n), KILN_ERR_DELETED);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_array_format"), std::string::npos);
  EXPECT_EQ(kiln_array_format(a, nullptr, 4, &n), KILN_ERR_ARGUMENT);
  kiln_array_release(a);
}

TEST_F(Print, TreesByPathAndOnADevice) {
  float b[2] = {0, 0.5f}, w[4] = {1, 2, 3, 4};
  int32_t step = 7;
  const char *pk[2] = {"b", "w"};
  kiln_tree *pkids[2] = {array(KILN_F32, b, {2}), array(KILN_F32, w, {2, 2})};
  const char *keys[2] = {"params", "step"};
  kiln_tree *kids[2] = {kiln_tree_dict(2, pk, pkids), array(KILN_I32, &step, {})};
  kiln_tree *tree = kiln_tree_dict(2, keys, kids);
  ASSERT_NE(tree, nullptr) << kiln_last_error();

  // Leaves by path.
  kiln_array *wa = kiln_get(tree, "['params']['w']");
  ASSERT_NE(wa, nullptr) << kiln_last_error();
  EXPECT_EQ(kiln_array_rank(wa), 2);
  EXPECT_EQ(kiln_get(tree, "['params']['x']"), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("kiln_get"), std::string::npos) << kiln_last_error();
  EXPECT_NE(std::string(kiln_last_error()).find("'x'"), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_get(tree, "['params']"), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("the subtree at ['params'] is not an array"),
            std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_get(tree, "['params'"), nullptr);
  EXPECT_NE(std::string(kiln_last_error()).find("cannot parse"), std::string::npos);

  // The tree printed leaf by leaf.
  size_t n = 0;
  ASSERT_EQ(kiln_tree_format(tree, nullptr, 0, &n), KILN_OK) << kiln_last_error();
  std::string text(n + 1, '\0');
  ASSERT_EQ(kiln_tree_format(tree, text.data(), text.size(), nullptr), KILN_OK);
  text.resize(n);
  EXPECT_EQ(text,
            "['params']['b']: [0.  0.5]\n"
            "['params']['w']: [[1. 2.]\n"
            "                  [3. 4.]]\n"
            "['step']: 7\n");

  // device_put of the whole tree: same structure and values, on the device.
  kiln_tree *moved = nullptr;
  ASSERT_EQ(kiln_device_put_tree(tree, dev, &moved), KILN_OK) << kiln_last_error();
  size_t m = 0;
  ASSERT_EQ(kiln_tree_format(moved, nullptr, 0, &m), KILN_OK);
  EXPECT_EQ(m, n);
  EXPECT_EQ(kiln_array_device(kiln_get(moved, "['params']['w']")), dev);
  // On its own device an array is shared, as jax.device_put returns it.
  EXPECT_EQ(kiln_get(moved, "['params']['w']"), wa);
  kiln_tree_free(moved);

  // A leaf that is not an array is named by its path.
  kiln_tree *ptr = kiln_tree_ptr(nullptr);
  const char *k1[1] = {"opaque"};
  kiln_tree *bad = kiln_tree_dict(1, k1, &ptr);
  EXPECT_EQ(kiln_device_put_tree(bad, dev, &moved), KILN_ERR_TREE);
  EXPECT_NE(std::string(kiln_last_error()).find("at ['opaque']: the leaf is not an array"),
            std::string::npos) << kiln_last_error();
  EXPECT_EQ(moved, nullptr);
  EXPECT_EQ(kiln_tree_format(bad, nullptr, 0, &n), KILN_OK);
  EXPECT_EQ(n, std::string("['opaque']: <pointer>\n").size());
  EXPECT_EQ(kiln_device_put_tree(tree, nullptr, &moved), KILN_ERR_ARGUMENT);
  kiln_tree_free(bad);
  kiln_tree_free(tree);
}

}  // namespace
