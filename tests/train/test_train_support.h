// The trainer tests' shared pieces: a synthetic MNIST-format data set (IDX
// files) that a small MLP learns in a few dozen steps, the metrics.jsonl
// reader, and a fixture that writes the data and makes reduced configs.
// tests/golden/train_dp.py writes the same data set in Python.
#ifndef KILN_TESTS_TEST_TRAIN_SUPPORT_H
#define KILN_TESTS_TEST_TRAIN_SUPPORT_H

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../../examples/train/train.h"

namespace train_test {

constexpr int kSide = 8, kClasses = 10, kTrain = 640, kTest = 201, kBatch = 32;
constexpr int kStepsPerEpoch = kTrain / kBatch, kEpochs = 2;

// An IDX file: magic 0 0 type rank, big-endian dimensions, the bytes.
inline void write_idx(const std::string &path, const std::vector<int> &dims,
               const std::vector<uint8_t> &data) {
  std::ofstream f(path, std::ios::binary);
  const char head[4] = {0, 0, 0x08, static_cast<char>(dims.size())};
  f.write(head, 4);
  for (int d : dims) {
    const char be[4] = {static_cast<char>(d >> 24), static_cast<char>(d >> 16),
                        static_cast<char>(d >> 8), static_cast<char>(d)};
    f.write(be, 4);
  }
  f.write(reinterpret_cast<const char *>(data.data()), static_cast<std::streamsize>(data.size()));
}

// Class c lights a 2x2 block at a place of its own on top of noise, so an MLP
// learns it in a few dozen steps.
inline void write_split(const std::string &dir, const char *prefix, int n, uint32_t seed) {
  std::vector<uint8_t> images(static_cast<size_t>(n) * kSide * kSide), labels(n);
  uint32_t s = seed;
  auto next = [&s] { return (s = s * 1664525u + 1013904223u) >> 24; };
  for (int i = 0; i < n; i++) {
    int c = static_cast<int>(next() % kClasses);
    labels[i] = static_cast<uint8_t>(c);
    uint8_t *img = &images[static_cast<size_t>(i) * kSide * kSide];
    for (int p = 0; p < kSide * kSide; p++) img[p] = static_cast<uint8_t>(next() % 64);
    int r0 = (c / 4) * 3, c0 = (c % 4) * 2;
    for (int r = r0; r < r0 + 2; r++)
      for (int q = c0; q < c0 + 2; q++)
        img[r * kSide + q] = static_cast<uint8_t>(192 + next() % 64);
  }
  write_idx(dir + "/" + prefix + "-images-idx3-ubyte", {n, kSide, kSide}, images);
  write_idx(dir + "/" + prefix + "-labels-idx1-ubyte", {n}, labels);
}

struct Record {
  double loss = NAN, accuracy = NAN, test_accuracy = NAN;
};

// metrics.jsonl: step -> train loss and accuracy and (another line) test
// accuracy.
inline std::map<long, Record> read_metrics(const std::string &dir, int *train_lines) {
  std::map<long, Record> out;
  std::ifstream f(dir + "/metrics.jsonl");
  std::string line;
  *train_lines = 0;
  auto field = [&line](const char *name) {
    size_t at = line.find(std::string("\"") + name + "\": ");
    return at == std::string::npos
               ? NAN
               : std::strtod(line.c_str() + at + std::strlen(name) + 4, nullptr);
  };
  while (std::getline(f, line)) {
    long step = static_cast<long>(field("step"));
    if (!std::isnan(field("loss"))) {
      out[step].loss = field("loss");
      out[step].accuracy = field("accuracy");
      ++*train_lines;
    }
    if (!std::isnan(field("test_accuracy"))) out[step].test_accuracy = field("test_accuracy");
  }
  return out;
}

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char *t = std::getenv("TMPDIR");
    root = std::string(t && *t ? t : "/tmp") + "/kiln_train_" + std::to_string(getpid());
    data = root + "/data";
    ASSERT_EQ(std::system(("mkdir -p " + data).c_str()), 0);
    write_split(data, "train", kTrain, 1);
    write_split(data, "t10k", kTest, 2);
  }
  void TearDown() override { std::system(("rm -rf " + root).c_str()); }

  train_config config(const std::string &out) {
    train_config c = train_default_config();
    c.data_dir = data.c_str();
    out_dirs.push_back(root + "/" + out);
    c.out_dir = out_dirs.back().c_str();
    c.epochs = kEpochs;
    c.batch_size = kBatch;
    c.learning_rate = 1e-2;
    c.seed = 7;
    c.log_every = 1;
    c.n_hidden = 1;
    c.hidden[0] = 32;
    c.cosine = 1;  // the schedule's count must survive resume too
    c.quiet = 1;
    return c;
  }

  std::string root, data;
  std::deque<std::string> out_dirs{};  // stable: configs point into it
};

}  // namespace train_test

#endif
