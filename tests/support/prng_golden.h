// Reader for the golden records that tests/golden/prng.py and
// trace_random.py write: "<kind> <head fields...> : <values...>" per line.
// Shared by test_prng.cc and test_trace_random.cc.
#ifndef KILN_TESTS_PRNG_GOLDEN_H
#define KILN_TESTS_PRNG_GOLDEN_H

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace prng_golden {

struct Record {
  std::string kind;
  std::vector<std::string> head;  // fields before ':' (after the kind)
  std::vector<std::string> vals;  // fields after ':'
};

inline std::vector<Record> LoadRecords(const std::string &file) {
  std::vector<Record> out;
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/" + file);
  EXPECT_TRUE(in.good()) << "cannot open " << file << "; run tests/golden/"
                         << file.substr(0, file.find('.')) << ".py";
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Record r;
    ss >> r.kind;
    bool after = false;
    for (std::string t; ss >> t;) {
      if (t == ":")
        after = true;
      else
        (after ? r.vals : r.head).push_back(t);
    }
    out.push_back(std::move(r));
  }
  return out;
}

inline std::vector<const Record *> Golden(const std::string &file, const std::string &kind) {
  static std::map<std::string, std::vector<Record>> files;
  if (!files.count(file)) files[file] = LoadRecords(file);
  std::vector<const Record *> out;
  for (const Record &r : files[file])
    if (r.kind == kind) out.push_back(&r);
  EXPECT_FALSE(out.empty()) << "no '" << kind << "' records in " << file;
  return out;
}

inline uint64_t Hex(const std::string &s) { return std::stoull(s, nullptr, 16); }
inline uint32_t Hex32(const std::string &s) { return static_cast<uint32_t>(Hex(s)); }
inline double Float(const std::string &s) { return std::strtod(s.c_str(), nullptr); }

inline kiln_dtype Dtype(const std::string &name) {
  kiln_dtype d = KILN_INVALID_DTYPE;
  EXPECT_EQ(kiln_dtype_from_name(name.c_str(), &d), KILN_OK) << name;
  return d;
}

// An array record: key, `nparams` parameters, then rank, dims and step.
struct ArrayCase {
  uint32_t key[2];
  std::vector<std::string> params;
  std::vector<int64_t> shape;
  size_t step = 1, count = 1;
  std::string Name() const {
    std::ostringstream s;
    s << std::hex << "key (" << key[0] << ", " << key[1] << ")" << std::dec;
    for (const std::string &p : params) s << " " << p;
    s << " shape [";
    for (size_t i = 0; i < shape.size(); i++) s << (i ? "," : "") << shape[i];
    return s.str() + "]";
  }
};

inline ArrayCase ParseArray(const Record &r, size_t nparams) {
  ArrayCase c;
  c.key[0] = Hex32(r.head.at(0));
  c.key[1] = Hex32(r.head.at(1));
  c.params.assign(r.head.begin() + 2, r.head.begin() + 2 + nparams);
  size_t at = 2 + nparams;
  int rank = std::stoi(r.head.at(at++));
  for (int i = 0; i < rank; i++) c.shape.push_back(std::stoll(r.head.at(at++)));
  c.step = std::stoul(r.head.at(at));
  for (int64_t d : c.shape) c.count *= static_cast<size_t>(d);
  EXPECT_EQ(r.vals.size(), (c.count + c.step - 1) / c.step) << c.Name();
  return c;
}

// The raw bits of element i of a buffer with `size`-byte elements.
inline uint64_t BitsAt(size_t size, const void *buf, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char *>(buf) + i * size, size);  // little-endian host
  return v;
}

inline uint64_t BitsAt(size_t size, const std::vector<unsigned char> &buf, size_t i) {
  return BitsAt(size, buf.data(), i);
}

// A float given by its bit pattern, widened to double.
inline double FloatFromBits(kiln_dtype dtype, uint64_t bits) {
  switch (dtype) {
    case KILN_F16: return kiln_f16_to_f32(static_cast<uint16_t>(bits));
    case KILN_BF16: return kiln_bf16_to_f32(static_cast<uint16_t>(bits));
    case KILN_F32: {
      float f;
      uint32_t b = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b, sizeof f);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
  }
}

}  // namespace prng_golden

#endif
