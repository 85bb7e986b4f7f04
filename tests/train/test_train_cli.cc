// The built `train` binary run as a user runs it, on the synthetic data set
// of test_train_support.h (640 training images of 8x8, batches of 32: 20
// steps an epoch) with a small MLP on one CPU device: exit codes, messages,
// and what it leaves in its out dir. A huge learning rate stops the run at
// the first non-finite loss (exit 3) with the previous checkpoint intact and
// finite and metrics.jsonl still JSON; SIGTERM mid-run saves the current
// step and exits 0, and --resume then ends on the uninterrupted run's
// checkpoint and metrics, bit for bit, as it does after a SIGKILL (the
// metrics lines past the checkpoint are dropped); checkpoints by steps and
// by minutes; --keep; no clobbering of
// a previous run, nor of a run in progress; --resume with nothing;
// --resume=auto; settings that differ on resume; labels outside the
// classes; bad flags.
#include "train_cli_support.h"

namespace {

using namespace train_cli;

class TrainCli : public train_test::TrainTest {
 protected:
  // A small MLP on one device, every step logged.
  std::vector<std::string> args(const std::string &out, std::vector<std::string> more = {},
                                const std::string &from = "") {
    std::vector<std::string> a = {"--data", from.empty() ? data : from,
                                  "--out", root + "/" + out,
                                  "--model", "mlp", "--hidden", "16", "--batch-size", "32",
                                  "--lr", "0.01", "--seed", "7", "--devices", "1",
                                  "--log-every", "1", "--quiet"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  Child run_train(const std::string &out, std::vector<std::string> more = {},
                  const std::string &from = "") {
    return run(args(out, std::move(more), from), root);
  }
  // 3,200 training images: 100 steps an epoch, few evaluations and
  // epoch-end checkpoints for runs long enough to signal mid-way.
  std::string big_data() {
    std::string d = root + "/big";
    EXPECT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
    train_test::write_split(d, "train", 3200, 3);
    train_test::write_split(d, "t10k", train_test::kTest, 2);
    return d;
  }
  std::string dir(const std::string &out) { return root + "/" + out; }
};

std::string describe(const Child &c) {
  return "exit " + std::to_string(c.code) + "\nstdout:\n" + c.out() + "\nstderr:\n" + c.err();
}

// The checkpoints and metrics of two out dirs are the same run's: every
// metrics line equal but for its time, and the newest checkpoints' tensors
// equal bit for bit but for the seconds of training.
void expect_same_run(const std::string &a, const std::string &b) {
  std::vector<std::string> la = lines(a + "/metrics.jsonl"), lb = lines(b + "/metrics.jsonl");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); i++) EXPECT_EQ(without_time(lb[i]), without_time(la[i]));
  ASSERT_EQ(latest(a), latest(b));
  std::map<std::string, Tensor> ta = read_safetensors(a + "/" + latest(a)),
                                tb = read_safetensors(b + "/" + latest(b));
  ASSERT_GT(ta.size(), 5u);
  ASSERT_EQ(ta.size(), tb.size());
  for (const auto &[name, t] : ta) {
    if (name == "['time']") continue;
    EXPECT_EQ(tb[name].dtype, t.dtype) << name;
    EXPECT_TRUE(tb[name].bytes == t.bytes) << name << " differs";
  }
}

TEST_F(TrainCli, ANonFiniteLossStopsTheRunAndKeepsTheLastCheckpoint) {
  Child c = run_train("nan", {"--epochs", "1", "--lr", "1e30", "--checkpoint-every", "1"});
  ASSERT_EQ(c.code, 3) << describe(c);
  std::vector<std::string> m = lines(dir("nan") + "/metrics.jsonl");
  ASSERT_FALSE(m.empty());
  long bad = line_step(m.back());
  EXPECT_NE(m.back().find("\"nonfinite\": [\"loss\""), std::string::npos) << m.back();
  EXPECT_NE(m.back().find("\"loss\": null"), std::string::npos) << m.back();
  EXPECT_NE(c.err().find("step " + std::to_string(bad) + ": non-finite loss"), std::string::npos)
      << describe(c);
  EXPECT_TRUE(json_lines(dir("nan") + "/metrics.jsonl"));
  // every earlier step was finite and saved; the diverged one was not
  ASSERT_GE(bad, 2);
  EXPECT_EQ(latest(dir("nan")), ckpt_name(bad - 1));
  EXPECT_FALSE(exists(dir("nan") + "/" + ckpt_name(bad)));
  std::map<std::string, Tensor> t = read_safetensors(dir("nan") + "/" + ckpt_name(bad - 1));
  ASSERT_GT(t.size(), 5u);
  EXPECT_TRUE(all_finite(t));
  EXPECT_NE(c.err().find(ckpt_name(bad - 1) + " (step " + std::to_string(bad - 1) + "), is kept"),
            std::string::npos)
      << describe(c);
}

// SIGTERM (a scheduler's preemption) after some steps: the step finishes,
// its checkpoint is saved, exit 0; --resume continues to the end of the
// uninterrupted run bit for bit. Every third step logged: the partial
// window of metrics is carried by the checkpoint too.
TEST_F(TrainCli, SigtermSavesTheCurrentStepAndResumeEndsOnTheSameRun) {
  const std::vector<std::string> more = {"--epochs", "6", "--log-every", "3"};
  std::string big = big_data();
  Child whole = run_train("whole", more, big);
  ASSERT_EQ(whole.code, 0) << describe(whole);
  for (int sig : {SIGTERM, SIGINT}) {
    std::string out = sig == SIGTERM ? "term" : "int";
    Child c = start(args(out, more, big), root);
    ASSERT_TRUE(wait_for_lines(c, dir(out) + "/metrics.jsonl", 2)) << describe(c);
    kill(c.pid, sig);
    if (sig == SIGTERM) {  // a second one, in the step or the save, changes nothing
      sleep_ms(2);
      kill(c.pid, sig);
    }
    ASSERT_EQ(wait_for(&c), 0) << describe(c);
    std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    EXPECT_NE(c.err().find("train: " + name + ": stopped after step "), std::string::npos)
        << describe(c);
    std::vector<std::string> m = lines(dir(out) + "/metrics.jsonl");
    ASSERT_FALSE(m.empty());
    long stopped = std::strtol(c.err().c_str() + c.err().find("after step ") + 11, nullptr, 10);
    EXPECT_GT(stopped, 0);
    EXPECT_LT(stopped, 600) << "the run ended before the signal came";
    EXPECT_EQ(latest(dir(out)), ckpt_name(stopped));
    EXPECT_LE(line_step(m.back()), stopped);
    EXPECT_GT(line_step(m.back()), stopped - 3);  // flushed as written
    std::vector<std::string> resume = more;
    resume.push_back("--resume");
    Child r = run_train(out, resume, big);
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_NE(r.out().find("done: step 600"), std::string::npos) << describe(r);
    EXPECT_NE(r.out().find("(resumed)"), std::string::npos) << describe(r);
    expect_same_run(dir("whole"), dir(out));
    EXPECT_TRUE(json_lines(dir(out) + "/metrics.jsonl"));
  }
}

// SIGKILL: no chance to save; the run resumes from its last periodic
// checkpoint, the metrics lines written after it are dropped, and the run
// ends as the uninterrupted one.
TEST_F(TrainCli, AfterSigkillResumeDropsTheLinesPastTheCheckpoint) {
  const std::vector<std::string> more = {"--epochs", "6", "--checkpoint-every", "30"};
  std::string big = big_data();
  Child whole = run_train("whole", more, big);
  ASSERT_EQ(whole.code, 0) << describe(whole);
  Child c = start(args("killed", more, big), root);
  ASSERT_TRUE(wait_for_lines(c, dir("killed") + "/metrics.jsonl", 40)) << describe(c);
  kill(c.pid, SIGKILL);
  ASSERT_EQ(wait_for(&c), -SIGKILL);
  // as if killed mid-line: a partial last line goes too
  std::ofstream(dir("killed") + "/metrics.jsonl", std::ios::app) << "{\"step\": 9999, \"lo";
  // and a checkpoint half written (kiln_checkpoint_save's temporary)
  std::string tmp = dir("killed") + "/" + ckpt_name(9999) + ".tmp.99999";
  std::ofstream(tmp) << "half";
  std::vector<std::string> resume = more;
  resume.push_back("--resume");
  Child r = run_train("killed", resume, big);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_FALSE(exists(tmp)) << "a killed run's temporary file stayed";
  expect_same_run(dir("whole"), dir("killed"));
}

// Two trainers on one out dir would interleave their checkpoints and
// metrics: the second is refused while the first runs.
TEST_F(TrainCli, AnOutDirInUseIsRefused) {
  std::string big = big_data();
  Child first = start(args("busy", {"--epochs", "6"}, big), root);
  ASSERT_TRUE(wait_for_lines(first, dir("busy") + "/metrics.jsonl", 1)) << describe(first);
  Child second = run_train("busy", {"--resume=auto"}, big);
  EXPECT_EQ(second.code, 4) << describe(second);
  EXPECT_NE(second.err().find(dir("busy") + " is in use by another train (pid " +
                              std::to_string(first.pid) + ")"),
            std::string::npos)
      << describe(second);
  kill(first.pid, SIGTERM);
  EXPECT_EQ(wait_for(&first), 0) << describe(first);
}

// --checkpoint-every 0: epoch ends and the run's end only; a time limit
// that every step passes saves every step.
TEST_F(TrainCli, CheckpointsByStepsAndByMinutes) {
  Child e = run_train("epochs", {"--epochs", "2", "--max-steps", "30", "--checkpoint-every", "0",
                                 "--keep", "100"});
  ASSERT_EQ(e.code, 0) << describe(e);
  std::vector<std::string> want = {ckpt_name(20), ckpt_name(30), "latest", "metrics.jsonl",
                                   "run.json"};
  EXPECT_EQ(list_dir(dir("epochs")), want);
  Child m = run_train("minutes", {"--max-steps", "6", "--checkpoint-every", "0",
                                  "--checkpoint-minutes", "1e-9", "--keep", "100"});
  ASSERT_EQ(m.code, 0) << describe(m);
  want = {ckpt_name(1), ckpt_name(2), ckpt_name(3), ckpt_name(4), ckpt_name(5), ckpt_name(6),
          "latest", "metrics.jsonl", "run.json"};
  EXPECT_EQ(list_dir(dir("minutes")), want);
}

TEST_F(TrainCli, KeepTwoLeavesTheNewestTwo) {
  Child c = run_train("keep", {"--epochs", "2", "--checkpoint-every", "5", "--keep", "2"});
  ASSERT_EQ(c.code, 0) << describe(c);
  std::vector<std::string> want = {ckpt_name(35), ckpt_name(40), "latest", "metrics.jsonl",
                                   "run.json"};
  EXPECT_EQ(list_dir(dir("keep")), want);
  EXPECT_EQ(latest(dir("keep")), ckpt_name(40));
}

TEST_F(TrainCli, APreviousRunIsNotClobbered) {
  ASSERT_EQ(run_train("prev", {"--max-steps", "3"}).code, 0);
  std::string metrics = slurp(dir("prev") + "/metrics.jsonl");
  std::vector<std::string> files = list_dir(dir("prev"));
  Child c = run_train("prev", {"--max-steps", "5"});
  EXPECT_EQ(c.code, 4) << describe(c);
  EXPECT_NE(c.err().find(dir("prev") + " holds a previous run (metrics.jsonl, run.json, latest, "
                                       "1 checkpoint): --resume continues it, --overwrite"),
            std::string::npos)
      << describe(c);
  EXPECT_EQ(slurp(dir("prev") + "/metrics.jsonl"), metrics);
  EXPECT_EQ(list_dir(dir("prev")), files);
  Child both = run_train("prev", {"--resume", "--overwrite"});
  EXPECT_EQ(both.code, 2) << describe(both);
  Child o = run_train("prev", {"--max-steps", "2", "--overwrite"});
  ASSERT_EQ(o.code, 0) << describe(o);
  EXPECT_EQ(lines(dir("prev") + "/metrics.jsonl").size(), 3u);  // 2 steps, 1 evaluation
  EXPECT_EQ(latest(dir("prev")), ckpt_name(2));
  EXPECT_FALSE(exists(dir("prev") + "/" + ckpt_name(3)));
}

TEST_F(TrainCli, ResumeWithNothingToResumeNamesTheDirectory) {
  Child c = run_train("empty", {"--resume"});
  EXPECT_EQ(c.code, 4) << describe(c);
  EXPECT_NE(c.err().find("--resume: " + dir("empty") + " holds no checkpoint to resume"),
            std::string::npos)
      << describe(c);
}

// --resume=auto: starts afresh where there is no checkpoint (replacing what a
// run that never reached one left), resumes where there is one.
TEST_F(TrainCli, ResumeAutoStartsOrResumes) {
  ASSERT_EQ(std::system(("mkdir -p " + dir("auto")).c_str()), 0);
  std::ofstream(dir("auto") + "/metrics.jsonl") << "{\"step\": 1, \"loss\": 9}\n";
  Child a = run_train("auto", {"--resume=auto", "--max-steps", "5"});
  ASSERT_EQ(a.code, 0) << describe(a);
  EXPECT_NE(a.out().find("done: step 5,"), std::string::npos) << describe(a);
  EXPECT_EQ(a.out().find("(resumed)"), std::string::npos) << describe(a);
  Child b = run_train("auto", {"--resume=auto", "--max-steps", "9"});
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_NE(b.out().find("done: step 9,"), std::string::npos) << describe(b);
  EXPECT_NE(b.out().find("(resumed)"), std::string::npos) << describe(b);
  std::vector<std::string> m = lines(dir("auto") + "/metrics.jsonl");
  std::vector<long> steps;
  for (const std::string &l : m)
    if (l.find("\"loss\"") != std::string::npos) steps.push_back(line_step(l));
  EXPECT_EQ(steps, (std::vector<long>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST_F(TrainCli, ResumeWithOtherSettingsIsRefusedNamingThem) {
  ASSERT_EQ(run_train("mis", {"--max-steps", "3"}).code, 0);
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case &k : std::vector<Case>{
           {{"--batch-size", "64"}, "--batch-size is 64, but the run in " + dir("mis") +
                                        " was started with 32"},
           {{"--seed", "8"}, "--seed is 8, but"},
           {{"--hidden", "8"}, "--model/--hidden is [8], but"},
           {{"--lr", "0.02"}, "--lr is 0.02"},
           {{"--classes", "12"}, "--classes is 12"}}) {
    std::vector<std::string> flags = k.flags;
    flags.push_back("--resume");
    Child c = run_train("mis", flags);
    EXPECT_EQ(c.code, 4) << describe(c);
    EXPECT_NE(c.err().find(k.says), std::string::npos) << describe(c);
  }
  // other data: the same file names, other images and labels
  train_test::write_split(data, "train", train_test::kTrain, 99);
  Child d = run_train("mis", {"--resume"});
  EXPECT_EQ(d.code, 4) << describe(d);
  EXPECT_NE(d.err().find("--data (its training split) is \"640x8x8 fnv1a64:"), std::string::npos)
      << describe(d);
  train_test::write_split(data, "train", train_test::kTrain, 1);
  // what does not change the curve may change: the devices, the logging
  Child ok =
      run_train("mis", {"--resume", "--devices", "2", "--log-every", "2", "--max-steps", "4"});
  EXPECT_EQ(ok.code, 0) << describe(ok);
}

// Labels outside [0, classes): a label of 200 would otherwise make a
// 201-class model; a test label of 10 would be scored.
TEST_F(TrainCli, LabelsOutsideTheClassesAreRefusedNamingFileAndIndex) {
  std::string labels = data + "/train-labels-idx1-ubyte";
  std::string good = slurp(labels);
  std::string bad = good;
  bad[8 + 17] = static_cast<char>(200);
  std::ofstream(labels, std::ios::binary) << bad;
  Child c = run_train("badtrain", {"--max-steps", "1"});
  EXPECT_EQ(c.code, 1) << describe(c);
  EXPECT_NE(c.err().find(labels + ": label 200 at index 17 is outside [0, 10) (--classes 10)"),
            std::string::npos)
      << describe(c);
  std::ofstream(labels, std::ios::binary) << good;
  std::string test_labels = data + "/t10k-labels-idx1-ubyte";
  bad = slurp(test_labels);
  bad[8 + 3] = 10;
  std::ofstream(test_labels, std::ios::binary) << bad;
  Child t = run_train("badtest", {"--max-steps", "1"});
  EXPECT_EQ(t.code, 1) << describe(t);
  EXPECT_NE(t.err().find(test_labels + ": label 10 at index 3 is outside [0, 10)"),
            std::string::npos)
      << describe(t);
  Child more = run_train("classes11", {"--max-steps", "1", "--classes", "11"});
  EXPECT_EQ(more.code, 0) << describe(more);
}

TEST_F(TrainCli, BadFlagsAreUsageErrorsNamingFlagAndValue) {
  for (const auto &[flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--lr", "inf"},
           {"--lr", "nan"},
           {"--lr", "0"},
           {"--lr", "-1e-3"},
           {"--lr", "1e999"},
           {"--lr", "1e39"},  // inf in f32
           {"--batch-size", "0"},
           {"--epochs", "0"},
           {"--epochs", "2x"},
           {"--log-every", "0"},
           {"--keep", "0"},
           {"--checkpoint-every", "-1"},
           {"--checkpoint-minutes", "nan"},
           {"--checkpoint-minutes", "-5"},
           {"--classes", "1"},
           {"--classes", "300"},
           {"--devices", "0"},
           {"--hidden", "16,0"},
           {"--model", "rnn"}}) {
    Child c = run_train("flags", {flag, value});
    EXPECT_EQ(c.code, 2) << flag << " " << value << "\n" << describe(c);
    EXPECT_NE(c.err().find("train: " + flag + " needs "), std::string::npos) << describe(c);
    EXPECT_NE(c.err().find("not '" + value + "'"), std::string::npos) << describe(c);
  }
  Child r = run_train("flags", {"--resume=sometimes"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err().find("--resume needs 'auto' after '=', not 'sometimes'"), std::string::npos)
      << describe(r);
  EXPECT_FALSE(exists(dir("flags"))) << "a refused command line wrote its out dir";
}

}  // namespace
