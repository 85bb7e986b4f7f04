// The trainer data-parallel (examples/train/dp.c) on 2 CPU devices, on the
// synthetic data set of test_train_support.h for one epoch (20 steps of 32):
// the per-step losses equal the one-device trainer's on the same global
// batches, the parameters stay identical on both devices after every step,
// and the losses and accuracies equal those of the same step under
// jax.shard_map on 2 CPU devices (tests/golden/train_dp.py). The test set
// (201 images) is evaluated through pad_shard_unpad, which pads it on 2
// devices: its loss and accuracy equal the one-device evaluation's. A batch
// that does not split over the devices is refused.
#include "test_train_support.h"

namespace {

using train_test::kStepsPerEpoch;
using train_test::read_metrics;
using train_test::Record;

// f32 losses after up to 20 adam steps, summed in other orders (per-device
// means averaged by pmean; XLA's reductions for the golden).
constexpr double kRtol = 1e-5;

struct GoldenStep {
  double loss, accuracy;
};

// tests/golden/train_dp.txt: "step <k> <loss> <accuracy>".
std::map<long, GoldenStep> read_golden() {
  std::map<long, GoldenStep> out;
  std::ifstream f(KILN_GOLDEN_DIR "/train_dp.txt");
  std::string line;
  while (std::getline(f, line)) {
    long k;
    double loss, acc;
    if (std::sscanf(line.c_str(), "step %ld %lf %lf", &k, &loss, &acc) == 3) out[k] = {loss, acc};
  }
  return out;
}

class TrainDp : public train_test::TrainTest {
 protected:
  // As the golden: one epoch, a constant learning rate.
  train_config dp_config(const std::string &out, int devices) {
    train_config c = config(out);
    c.epochs = 1;
    c.cosine = 0;
    c.devices = devices;
    c.check_replicas = devices > 1;
    return c;
  }
};

TEST_F(TrainDp, TwoDevicesMatchOneDeviceAndJaxShardMap) {
  train_config one = dp_config("one", 1), two = dp_config("two", 2);
  train_summary s1, s2;
  ASSERT_EQ(train_run(&one, &s1), KILN_OK) << train_last_error();
  ASSERT_EQ(train_run(&two, &s2), KILN_OK) << train_last_error();
  EXPECT_EQ(s2.steps, kStepsPerEpoch);
  EXPECT_EQ(s2.replica_spread, 0.0) << "the devices' parameters differ";
  int lines1 = 0, lines2 = 0;
  std::map<long, Record> m1 = read_metrics(one.out_dir, &lines1);
  std::map<long, Record> m2 = read_metrics(two.out_dir, &lines2);
  ASSERT_EQ(lines1, kStepsPerEpoch);
  ASSERT_EQ(lines2, kStepsPerEpoch);
  std::map<long, GoldenStep> golden = read_golden();
  ASSERT_EQ(golden.size(), static_cast<size_t>(kStepsPerEpoch)) << "tests/golden/train_dp.txt";
  for (long k = 1; k <= kStepsPerEpoch; k++) {
    double l1 = m1[k].loss, l2 = m2[k].loss, lj = golden[k].loss;
    EXPECT_NEAR(l2, l1, kRtol * std::fabs(l1)) << "step " << k << ": 2 devices vs 1";
    EXPECT_NEAR(l2, lj, kRtol * std::fabs(lj)) << "step " << k << ": kiln vs jax.shard_map";
    EXPECT_NEAR(m2[k].accuracy, golden[k].accuracy, 1e-6) << "step " << k;
  }
  EXPECT_NEAR(s2.test_loss, s1.test_loss, kRtol * s1.test_loss);
  EXPECT_EQ(s2.test_accuracy, s1.test_accuracy);
}

// The batches come through kiln_prefetch and the state is replicated with
// kiln_replicate: the curve does not depend on how far ahead the
// prefetcher runs, a run stopped mid-epoch and resumed from its checkpoint
// (saved unreplicated, replicated again on restore) continues it step for
// step, and that checkpoint holds one copy of each parameter, so a
// one-device run restores it too.
TEST_F(TrainDp, PrefetchSizesAndResumeKeepTheCurve) {
  train_config a = dp_config("ring1", 2), b = dp_config("ring3", 2);
  a.prefetch = 1;
  b.prefetch = 3;
  b.max_steps = 7;
  ASSERT_EQ(train_run(&a, nullptr), KILN_OK) << train_last_error();
  ASSERT_EQ(train_run(&b, nullptr), KILN_OK) << train_last_error();
  b.max_steps = 0;
  b.resume = 1;
  train_summary sb;
  ASSERT_EQ(train_run(&b, &sb), KILN_OK) << train_last_error();
  EXPECT_EQ(sb.resumed_from, 7);
  EXPECT_EQ(sb.replica_spread, 0.0) << "the devices' parameters differ after the restore";
  int la = 0, lb = 0;
  std::map<long, Record> ma = read_metrics(a.out_dir, &la), mb = read_metrics(b.out_dir, &lb);
  ASSERT_EQ(la, kStepsPerEpoch);
  ASSERT_EQ(lb, kStepsPerEpoch);
  for (long k = 1; k <= kStepsPerEpoch; k++) {
    EXPECT_EQ(mb[k].loss, ma[k].loss) << "step " << k;
    EXPECT_EQ(mb[k].accuracy, ma[k].accuracy) << "step " << k;
  }
  train_config one = dp_config("ring3", 1);  // the same directory, one device
  one.out_dir = b.out_dir;
  one.epochs = 2;
  one.max_steps = kStepsPerEpoch + 1;
  one.resume = 1;
  train_summary s1;
  ASSERT_EQ(train_run(&one, &s1), KILN_OK) << train_last_error();
  EXPECT_EQ(s1.resumed_from, kStepsPerEpoch);
  EXPECT_EQ(s1.steps, kStepsPerEpoch + 1);
}

// devices 0, the main job's default: every device of the context, on CPU
// KILN_NUM_CPU_DEVICES of them, 2 when it is unset.
TEST_F(TrainDp, DevicesZeroTakesEveryDeviceOfTheContext) {
  const char *env = getenv("KILN_NUM_CPU_DEVICES");
  std::string saved = env ? env : "";
  for (const char *n : {(const char *)nullptr, "4"}) {
    if (n) setenv("KILN_NUM_CPU_DEVICES", n, 1);
    else unsetenv("KILN_NUM_CPU_DEVICES");
    train_config c = dp_config(n ? "every4" : "every", 0);
    c.max_steps = 2;
    train_summary s;
    ASSERT_EQ(train_run(&c, &s), KILN_OK) << train_last_error();
    EXPECT_EQ(s.devices, n ? 4 : 2);
    EXPECT_EQ(s.steps, 2);
  }
  if (env) setenv("KILN_NUM_CPU_DEVICES", saved.c_str(), 1);
  else unsetenv("KILN_NUM_CPU_DEVICES");
}

TEST_F(TrainDp, ABatchThatDoesNotSplitIsRefused) {
  train_config c = dp_config("odd", 3);  // 32 rows over 3 devices
  EXPECT_EQ(train_run(&c, nullptr), KILN_ERR_ARGUMENT);
  EXPECT_NE(std::string(train_last_error()).find("3 devices"), std::string::npos)
      << train_last_error();
}

}  // namespace
