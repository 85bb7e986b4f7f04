// The main job's trainer (examples/train) in a reduced form: a small MLP on a
// synthetic MNIST-format data set written here (IDX files), a few dozen
// steps. The loss falls and the test accuracy rises far above chance; a run
// stopped mid-epoch and resumed from its checkpoint gives the same per-step
// losses as an uninterrupted one (same keys, data order, params and adam
// state); resuming a finished run trains no more; a missing data set is an
// error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../examples/train/train.h"

namespace {

constexpr int kSide = 8, kClasses = 10, kTrain = 640, kTest = 200, kBatch = 32;
constexpr int kStepsPerEpoch = kTrain / kBatch, kEpochs = 2;

// An IDX file: magic 0 0 type rank, big-endian dimensions, the bytes.
void write_idx(const std::string &path, const std::vector<int> &dims,
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
void write_split(const std::string &dir, const char *prefix, int n, uint32_t seed) {
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
  double loss = NAN, test_accuracy = NAN;
};

// metrics.jsonl: step -> train loss and (another line) test accuracy.
std::map<long, Record> read_metrics(const std::string &dir, int *train_lines) {
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
      ++*train_lines;
    }
    if (!std::isnan(field("test_accuracy"))) out[step].test_accuracy = field("test_accuracy");
  }
  return out;
}

class Train : public ::testing::Test {
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
  std::vector<std::string> out_dirs{};
};

TEST_F(Train, LossFallsAndResumeContinuesTheSameCurve) {
  constexpr int kTotal = kEpochs * kStepsPerEpoch;
  train_config a = config("a");
  train_summary sa;
  ASSERT_EQ(train_run(&a, &sa), KILN_OK) << train_last_error();
  EXPECT_EQ(sa.steps, kTotal);
  EXPECT_EQ(sa.resumed_from, -1);
  EXPECT_GT(sa.test_accuracy, 0.8);  // chance is 0.1
  int lines = 0;
  std::map<long, Record> ma = read_metrics(a.out_dir, &lines);
  ASSERT_EQ(lines, kTotal);
  double first = 0, last = 0;
  for (int s = 1; s <= 5; s++) first += ma[s].loss / 5;
  for (int s = kTotal - 4; s <= kTotal; s++) last += ma[s].loss / 5;
  EXPECT_LT(last, 0.5 * first) << "first steps " << first << ", last steps " << last;
  EXPECT_FALSE(std::isnan(ma[kStepsPerEpoch].test_accuracy)) << "no evaluation after epoch 1";
  EXPECT_NEAR(ma[kTotal].test_accuracy, sa.test_accuracy, 1e-6);

  // Stopped mid-epoch 2, then resumed: the same steps, the same losses.
  train_config b = config("b");
  b.max_steps = kStepsPerEpoch + 7;
  train_summary sb;
  ASSERT_EQ(train_run(&b, &sb), KILN_OK) << train_last_error();
  EXPECT_EQ(sb.steps, kStepsPerEpoch + 7);
  b.max_steps = 0;
  b.resume = 1;
  ASSERT_EQ(train_run(&b, &sb), KILN_OK) << train_last_error();
  EXPECT_EQ(sb.resumed_from, kStepsPerEpoch + 7);
  EXPECT_EQ(sb.steps, kTotal);
  std::map<long, Record> mb = read_metrics(b.out_dir, &lines);
  ASSERT_EQ(lines, kTotal);
  for (int s = 1; s <= kTotal; s++)
    EXPECT_NEAR(mb[s].loss, ma[s].loss, 1e-5 * std::fabs(ma[s].loss)) << "step " << s;
  EXPECT_NEAR(sb.test_accuracy, sa.test_accuracy, 1e-6);
  EXPECT_NEAR(sb.test_loss, sa.test_loss, 1e-5 * sa.test_loss);

  // Resuming a finished run trains nothing and evaluates the same params.
  train_summary sc;
  ASSERT_EQ(train_run(&b, &sc), KILN_OK) << train_last_error();
  EXPECT_EQ(sc.resumed_from, kTotal);
  EXPECT_EQ(sc.steps, kTotal);
  EXPECT_NEAR(sc.test_loss, sb.test_loss, 1e-6 * sb.test_loss);
  read_metrics(b.out_dir, &lines);
  EXPECT_EQ(lines, kTotal);
}

TEST_F(Train, MissingDataIsAnErrorNamingTheFile) {
  train_config c = config("missing");
  std::string nowhere = root + "/nowhere";
  c.data_dir = nowhere.c_str();
  train_summary s;
  EXPECT_EQ(train_run(&c, &s), KILN_ERR_IO);
  EXPECT_NE(std::string(train_last_error()).find(nowhere + "/train-images-idx3-ubyte"),
            std::string::npos)
      << train_last_error();
}

TEST_F(Train, ACheckpointOfAnotherModelIsRefused) {
  train_config c = config("other");
  c.max_steps = 3;
  ASSERT_EQ(train_run(&c, nullptr), KILN_OK) << train_last_error();
  c.hidden[0] = 16;  // the checkpoint holds 32-wide layers
  c.resume = 1;
  EXPECT_EQ(train_run(&c, nullptr), KILN_ERR_TREE);
  EXPECT_NE(std::string(train_last_error()).find("Dense_0"), std::string::npos)
      << train_last_error();
}

}  // namespace
