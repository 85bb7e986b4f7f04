// The main job's trainer (examples/train) in a reduced form: a small MLP on a
// synthetic MNIST-format data set (test_train_support.h), a few dozen
// steps. The loss falls and the test accuracy rises far above chance; a run
// stopped mid-epoch and resumed from its checkpoint gives the same per-step
// losses as an uninterrupted one (same keys, data order, params and adam
// state); resuming a finished run trains no more; a missing data set is an
// error naming the file; resuming with another model is refused; a damaged
// newest checkpoint falls back to an older one. The CNN, reduced (conv 4, conv 8, dense 16), gives
// Flax's per-step losses on 1 and 2 devices (tests/golden/train_cnn.py).
#include "test_train_support.h"

namespace {

using train_test::kBatch;
using train_test::kEpochs;
using train_test::kStepsPerEpoch;
using train_test::read_metrics;
using train_test::Record;
using Train = train_test::TrainTest;

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

// A data path that is not UTF-8 (Linux paths may hold any byte) trains:
// run.json, and the checkpoints' copy of it, say U+FFFD for the bad bytes
// and keep the valid ones.
TEST_F(Train, ADataPathThatIsNotUtf8IsRecordedAsValidUtf8) {
  train_config c = config("latin1");
  std::string odd = root + "/d\xff\xc3\xa9\xed\xa0\x80";  // a bad byte, an e-acute, a surrogate
  ASSERT_EQ(symlink(data.c_str(), odd.c_str()), 0);
  c.data_dir = odd.c_str();
  c.max_steps = 2;
  train_summary s;
  ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
  std::ifstream f(std::string(c.out_dir) + "/run.json");
  std::string run_json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string want = "\"" + root + "/d\\ufffd\xc3\xa9\\ufffd\\ufffd\\ufffd\"";
  EXPECT_NE(run_json.find("\"data\": " + want), std::string::npos) << run_json;
  char *record = nullptr;
  ASSERT_EQ(kiln_checkpoint_read_metadata(s.checkpoint, "train.run", &record), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(std::string(record), run_json);
  std::free(record);
}

TEST_F(Train, ResumingWithAnotherModelIsRefusedNamingTheFlag) {
  train_config c = config("other");
  c.max_steps = 3;
  ASSERT_EQ(train_run(&c, nullptr), KILN_OK) << train_last_error();
  c.hidden[0] = 16;  // the run recorded 32-wide layers
  c.resume = TRAIN_RESUME;
  train_summary s;
  EXPECT_EQ(train_run(&c, &s), KILN_ERR_ARGUMENT);
  EXPECT_EQ(s.outcome, TRAIN_REFUSED);
  std::string says = "--model/--hidden is [16], but the run in " + std::string(c.out_dir) +
                     " was started with [32]";
  EXPECT_NE(std::string(train_last_error()).find(says), std::string::npos)
      << train_last_error();
}

// Checkpoints at steps 5, 10 and 12: a damaged newest one, a "latest"
// naming a file that is gone (both kiln_checkpoint_latest's fall-back), or
// one that is intact but not this run's (the trainer's) falls back to the
// newest that restores; when none restores the error names the directory.
TEST_F(Train, ResumeFallsBackToTheNewestIntactCheckpoint) {
  train_config c = config("fallback");
  c.max_steps = 12;
  c.checkpoint_every = 5;
  train_summary s;
  ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
  EXPECT_EQ(s.checkpoint_step, 12);
  std::string dir = c.out_dir;
  auto path = [&dir](int step) {
    char name[64];
    std::snprintf(name, sizeof name, "/checkpoint_%d.safetensors", step);
    return dir + name;
  };
  // each checkpoint holds the run's record, as run.json does
  char *record = nullptr;
  ASSERT_EQ(kiln_checkpoint_read_metadata(path(12).c_str(), "train.run", &record), KILN_OK)
      << kiln_last_error();
  std::ifstream run_json(dir + "/run.json");
  EXPECT_EQ(std::string(record), std::string((std::istreambuf_iterator<char>(run_json)),
                                             std::istreambuf_iterator<char>()));
  EXPECT_NE(std::string(record).find("\"batch_size\": "), std::string::npos) << record;
  std::free(record);
  // cut the newest in half, as a disk that filled up might
  std::ifstream in(path(12), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  std::ofstream(path(12), std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  c.resume = TRAIN_RESUME;
  c.max_steps = 12;
  ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
  EXPECT_EQ(s.resumed_from, 10);
  EXPECT_EQ(s.steps, 12);
  EXPECT_EQ(s.checkpoint_step, 12);  // saved again, whole
  // "latest" naming a file that is gone
  ASSERT_EQ(std::remove(path(12).c_str()), 0);
  ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
  EXPECT_EQ(s.resumed_from, 10);
  // one that passes the library's checks but holds another step: passed
  // over for the newest older one, and deleted by the first save after it
  // (its step is redone), so --keep counts this run's checkpoints only
  {
    std::ifstream five(path(5), std::ios::binary);
    std::ofstream(path(12), std::ios::binary | std::ios::trunc) << five.rdbuf();
  }
  c.max_steps = 11;
  ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
  EXPECT_EQ(s.resumed_from, 10);
  EXPECT_EQ(s.checkpoint_step, 11);
  EXPECT_FALSE(std::ifstream(path(12)).good()) << "the abandoned step 12 stayed";
  EXPECT_TRUE(std::ifstream(path(5)).good());
  EXPECT_TRUE(std::ifstream(path(10)).good());
  // none that restores
  for (int step : {5, 10, 11}) std::ofstream(path(step), std::ios::trunc) << "not a checkpoint";
  EXPECT_EQ(train_run(&c, &s), KILN_ERR_IO);
  EXPECT_NE(std::string(train_last_error()).find("no checkpoint in " + dir + " restores"),
            std::string::npos)
      << train_last_error();
}

// tests/golden/train_cnn.txt: "cnn <devices> step <k> <loss> <accuracy>".
std::map<long, Record> read_cnn_golden(int devices) {
  std::map<long, Record> out;
  std::ifstream f(KILN_GOLDEN_DIR "/train_cnn.txt");
  std::string line;
  while (std::getline(f, line)) {
    int n;
    long k;
    double loss, acc;
    if (std::sscanf(line.c_str(), "cnn %d step %ld %lf %lf", &n, &k, &loss, &acc) == 4 &&
        n == devices)
      out[k].loss = loss, out[k].accuracy = acc;
  }
  return out;
}

TEST_F(Train, CnnMatchesFlaxOnOneAndTwoDevices) {
  for (int devices : {1, 2}) {
    train_config c = config("cnn" + std::to_string(devices));
    c.epochs = 1;
    c.cosine = 0;
    c.learning_rate = 1e-3;  // as the golden
    c.devices = devices;
    c.n_conv = 2;
    c.conv[0] = 4, c.conv[1] = 8;
    c.hidden[0] = 16;
    train_summary s;
    ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
    int lines = 0;
    std::map<long, Record> m = read_metrics(c.out_dir, &lines);
    std::map<long, Record> golden = read_cnn_golden(devices);
    ASSERT_EQ(lines, kStepsPerEpoch);
    ASSERT_EQ(golden.size(), static_cast<size_t>(kStepsPerEpoch)) << "tests/golden/train_cnn.txt";
    for (long k = 1; k <= kStepsPerEpoch; k++) {
      // f32 convolutions summed in another order than XLA's, through 20 adam steps
      EXPECT_NEAR(m[k].loss, golden[k].loss, 1e-4 * golden[k].loss)
          << devices << " devices, step " << k;
      EXPECT_NEAR(m[k].accuracy, golden[k].accuracy, 1e-6) << devices << " devices, step " << k;
    }
  }
}

// A learning rate that is inf in f32 (the library takes any finite double):
// the first step's loss and gradient are finite, but the update makes the
// params inf. The step's own check of its new state stops the run before
// any checkpoint holds them.
TEST_F(Train, AnUpdateThatOverflowsIsNotSaved) {
  train_config c = config("overflow");
  c.learning_rate = 1e39;
  c.checkpoint_every = 1;
  train_summary s;
  EXPECT_EQ(train_run(&c, &s), KILN_ERR_NONFINITE);
  EXPECT_EQ(s.outcome, TRAIN_DIVERGED);
  EXPECT_EQ(s.checkpoint_step, -1);
  EXPECT_NE(std::string(train_last_error())
                .find("step 1: non-finite parameters or optimizer state after the update"),
            std::string::npos)
      << train_last_error();
  std::ifstream latest(std::string(c.out_dir) + "/latest");
  EXPECT_FALSE(latest.good()) << "a checkpoint was saved";
}

TEST_F(Train, ImagesTooSmallForTheConvsAreRefused) {
  train_config c = config("small");
  c.n_conv = 4;  // 8x8 images halve to nothing
  for (int i = 0; i < 4; i++) c.conv[i] = 2;
  EXPECT_EQ(train_run(&c, nullptr), KILN_ERR_SHAPE);
  EXPECT_NE(std::string(train_last_error()).find("16 x 16"), std::string::npos)
      << train_last_error();
}

}  // namespace
