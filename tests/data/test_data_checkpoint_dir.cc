// Checkpoint files over time (src/data): temporaries of killed writers, and
// rotating checkpoint directories (kiln_checkpoint_save_step / _latest).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cmath>

#include "checkpoint_fixture.h"

namespace {

// A child process that writes `file` (a would-be temporary of its own pid
// when file ends in ".tmp.") and dies by SIGKILL: its pid, reaped.
pid_t killed_writer(const std::string &prefix) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string p = prefix + std::to_string(getpid());
    FILE *f = fopen(p.c_str(), "wb");
    if (f) fputs("half a checkpoint", f), fclose(f);
    raise(SIGKILL);
    _exit(1);
  }
  int st = 0;
  EXPECT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  return pid;
}

// A child process killed and reaped when the test ends, however it ends.
struct Child {
  pid_t pid;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Temporaries whose writer is dead are removed by the next save to the path
// and by the next restore from it; a live writer's, and any other file, stay.
TEST_F(Checkpoint, TemporariesOfKilledWritersAreRemoved) {
  pid_t dead = killed_writer(path + ".tmp.");
  const std::string dead_tmp = path + ".tmp." + std::to_string(dead);
  ASSERT_EQ(access(dead_tmp.c_str(), F_OK), 0);
  Child writer{fork()};  // a writer still at work
  if (writer.pid == 0) {
    pause();
    _exit(0);
  }
  const pid_t live = writer.pid;
  const std::string live_tmp = path + ".tmp." + std::to_string(live);
  write_bytes(live_tmp, "in progress");
  // Not ours to remove: other stems, other suffixes, no pid, a pid with a
  // leading zero.
  const std::string d = std::to_string(dead);
  const std::vector<std::string> others = {
      "other.safetensors.tmp." + d, "state.safetensors.tmpx." + d, "state.safetensors.tmp.",
      "state.safetensors.tmp.abc",  "state.safetensors.tmp.0" + d,  "state.safetensors.tmp." + d + ".bak"};
  for (const std::string &o : others) write_bytes(dir + "/" + o, "x");
  ASSERT_EQ(kiln_checkpoint_save(path.c_str(), train_state(1)), KILN_OK) << kiln_last_error();
  std::vector<std::string> want = others;
  want.push_back("state.safetensors");
  want.push_back("state.safetensors.tmp." + std::to_string(live));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dir_entries(), want);
  // The live writer dies: the next restore clears its temporary, not one
  // of this process's own.
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);
  writer.pid = -1;
  const std::string own = "state.safetensors.tmp." + std::to_string(getpid());
  write_bytes(dir + "/" + own, "x");
  want.push_back(own);
  std::sort(want.begin(), want.end());
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(path.c_str(), train_state(0), dev0, &back), KILN_OK)
      << kiln_last_error();
  keep(back);
  want.erase(std::find(want.begin(), want.end(), "state.safetensors.tmp." + std::to_string(live)));
  EXPECT_EQ(dir_entries(), want);
}

std::string step_name(int64_t step) { return "checkpoint_" + std::to_string(step) + ".safetensors"; }

// Five saves keeping three: the three newest step files, and "latest"
// naming the newest; kiln_checkpoint_latest finds it and it restores.
TEST_F(Checkpoint, SaveStepKeepsTheNewest) {
  std::string ckdir = dir + "/run";  // created by the first save
  for (int step = 1; step <= 5; step++)
    ASSERT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), step, train_state(static_cast<float>(step)),
                                        nullptr, 3),
              KILN_OK)
        << kiln_last_error();
  EXPECT_EQ(entries_of(ckdir),
            (std::vector<std::string>{step_name(3), step_name(4), step_name(5), "latest"}));
  EXPECT_EQ(read_bytes(ckdir + "/latest"), step_name(5) + "\n");
  char *p = nullptr;
  int64_t step = -1;
  ASSERT_EQ(kiln_checkpoint_latest(ckdir.c_str(), &p, &step), KILN_OK) << kiln_last_error();
  EXPECT_EQ(step, 5);
  EXPECT_EQ(std::string(p), ckdir + "/" + step_name(5));
  kiln_tree *back = nullptr;
  ASSERT_EQ(kiln_checkpoint_restore(p, train_state(0), dev0, &back), KILN_OK) << kiln_last_error();
  free(p);
  keep(back);
  expect_same_values(train_state(5), back);
  // Saving an older step (a run restarted from step 3) keeps it, with the
  // keep - 1 highest others, and points at it; keep 0 keeps everything.
  ASSERT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), 2, train_state(2), nullptr, 2), KILN_OK);
  EXPECT_EQ(entries_of(ckdir), (std::vector<std::string>{step_name(2), step_name(5), "latest"}));
  ASSERT_EQ(kiln_checkpoint_latest(ckdir.c_str(), &p, &step), KILN_OK) << kiln_last_error();
  EXPECT_EQ(step, 2);
  free(p);
  for (int s = 6; s <= 8; s++)
    ASSERT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), s, train_state(1), nullptr, 0), KILN_OK);
  EXPECT_EQ(entries_of(ckdir).size(), 6u);
  // Options pass through: metadata, and the NaN refusal that leaves the
  // directory as it was.
  const char *k[] = {"flags"}, *v[] = {"--lr=1"};
  kiln_checkpoint_options o;
  kiln_checkpoint_options_init(&o);
  o.n_metadata = 1;
  o.metadata_keys = k;
  o.metadata_values = v;
  ASSERT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), 9, train_state(1), &o, 0), KILN_OK);
  char *flags = nullptr;
  ASSERT_EQ(kiln_checkpoint_read_metadata((ckdir + "/" + step_name(9)).c_str(), "flags", &flags),
            KILN_OK);
  EXPECT_STREQ(flags, "--lr=1");
  free(flags);
  float nan = NAN;
  EXPECT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), 10, keep(arr(KILN_F32, {}, &nan)), nullptr, 1),
            KILN_ERR_NONFINITE);
  EXPECT_EQ(read_bytes(ckdir + "/latest"), step_name(9) + "\n");
  EXPECT_EQ(entries_of(ckdir).size(), 7u);
  // Bad arguments.
  EXPECT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), -1, train_state(1), nullptr, 1), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), 1, train_state(1), nullptr, -1), KILN_ERR_ARGUMENT);
  EXPECT_EQ(kiln_checkpoint_latest(ckdir.c_str(), nullptr, &step), KILN_ERR_ARGUMENT);
}

// The states a crash can leave, and damage: latest falls back to the highest
// step file that passes every check.
TEST_F(Checkpoint, LatestFallsBackToTheHighestUsableStep) {
  char *p = nullptr;
  int64_t step = -1;
  EXPECT_EQ(kiln_checkpoint_latest((dir + "/missing").c_str(), &p, &step), KILN_ERR_NOT_FOUND);
  EXPECT_EQ(kiln_checkpoint_latest(dir.c_str(), &p, &step), KILN_ERR_NOT_FOUND);
  EXPECT_NE(std::string(kiln_last_error()).find("holds no usable checkpoint"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(p, nullptr);
  for (int s = 1; s <= 2; s++)
    ASSERT_EQ(kiln_checkpoint_save_step(dir.c_str(), s, train_state(static_cast<float>(s)), nullptr, 3),
              KILN_OK);
  auto latest = [&]() {
    p = nullptr;
    step = -1;
    EXPECT_EQ(kiln_checkpoint_latest(dir.c_str(), &p, &step), KILN_OK) << kiln_last_error();
    if (p) {
      EXPECT_EQ(std::string(p), dir + "/" + step_name(step));
    }
    free(p);
    return step;
  };
  // A crash between the step file and the pointer: the pointer still names
  // step 2, complete; the newer file is only the fallback's.
  ASSERT_EQ(kiln_checkpoint_save((dir + "/" + step_name(3)).c_str(), train_state(3)), KILN_OK);
  EXPECT_EQ(latest(), 2);
  // A crash in the middle of the step file: only a temporary, ignored.
  write_bytes(dir + "/" + step_name(4) + ".tmp.999999", "partial");
  EXPECT_EQ(latest(), 2);
  // No pointer: the highest complete step.
  ASSERT_EQ(unlink((dir + "/latest").c_str()), 0);
  EXPECT_EQ(latest(), 3);
  // A pointer naming a missing file, or garbage.
  write_bytes(dir + "/latest", step_name(7) + "\n");
  EXPECT_EQ(latest(), 3);
  write_bytes(dir + "/latest", "checkpoint_02.safetensors\n");
  EXPECT_EQ(latest(), 3);
  // The newest file damaged (a flipped bit: its checksum fails; cut short:
  // its layout fails): the next one.
  std::string f3 = dir + "/" + step_name(3), good3 = read_bytes(f3);
  std::string bad3 = good3;
  bad3[bad3.size() - 1] = static_cast<char>(bad3.back() ^ 1);
  write_bytes(f3, bad3);
  EXPECT_EQ(latest(), 2);
  write_bytes(dir + "/latest", step_name(3) + "\n");
  EXPECT_EQ(latest(), 2);
  write_bytes(f3, good3.substr(0, good3.size() - 5));
  EXPECT_EQ(latest(), 2);
  // Files that are not step files are never candidates.
  write_bytes(dir + "/checkpoint_9.safetensors.bak", good3);
  write_bytes(dir + "/checkpoint_-9.safetensors", good3);
  EXPECT_EQ(latest(), 2);
}

// all_steps: every step file, highest first (numerically, not by name),
// whatever its contents; no other file.
TEST_F(Checkpoint, AllStepsListsTheStepFilesHighestFirst) {
  int64_t *steps = reinterpret_cast<int64_t *>(1);
  size_t n = 7;
  ASSERT_EQ(kiln_checkpoint_all_steps((dir + "/missing").c_str(), &steps, &n), KILN_OK);
  EXPECT_EQ(steps, nullptr);
  EXPECT_EQ(n, 0u);
  for (int s : {2, 10, 1})
    ASSERT_EQ(kiln_checkpoint_save_step(dir.c_str(), s, train_state(1), nullptr, 0), KILN_OK);
  write_bytes(dir + "/" + step_name(30), "damaged");
  for (const char *other : {"checkpoint_040.safetensors", "checkpoint_-5.safetensors",
                            "checkpoint_50.safetensors.tmp.1", "checkpoint_6.safetensors.bak",
                            "checkpoint_.safetensors", "checkpoint_99999999999999999999.safetensors"})
    write_bytes(dir + "/" + other, "x");
  ASSERT_EQ(kiln_checkpoint_all_steps(dir.c_str(), &steps, &n), KILN_OK) << kiln_last_error();
  EXPECT_EQ(std::vector<int64_t>(steps, steps + n), (std::vector<int64_t>{30, 10, 2, 1}));
  free(steps);
  EXPECT_EQ(kiln_checkpoint_all_steps((dir + "/latest").c_str(), &steps, &n), KILN_ERR_IO);
  EXPECT_NE(std::string(kiln_last_error()).find(dir + "/latest"), std::string::npos)
      << kiln_last_error();
  EXPECT_EQ(kiln_checkpoint_all_steps(dir.c_str(), nullptr, &n), KILN_ERR_ARGUMENT);
}

// Real crashes: a child saves steps in a loop and is killed at some point;
// whatever it was doing, latest names a step that restores with that step's
// values, and the next save clears the child's temporaries.
TEST_F(Checkpoint, KilledSaverLeavesAUsableDirectory) {
  std::string ckdir = dir + "/run";
  int64_t last = 1;
  for (int round = 0; round < 3; round++) {
    // The child builds its own context: nothing of the parent's crosses the fork.
    Child saver{fork()};
    const pid_t pid = saver.pid;
    if (pid == 0) {
      kiln_options o;
      kiln_options_init(&o);
      o.backend = KILN_BACKEND_CPU;
      kiln_ctx *c = nullptr;
      kiln_device *d = nullptr;
      if (kiln_ctx_new(&o, &c) != KILN_OK || kiln_device_get(c, 0, &d) != KILN_OK) _exit(2);
      for (int64_t s = 100 * round + 1;; s++) {
        float w[256];
        for (int i = 0; i < 256; i++) w[i] = static_cast<float>(s) + static_cast<float>(i);
        int64_t shape[1] = {256};
        kiln_array *a = nullptr, *b = nullptr;
        if (kiln_array_from_host(d, KILN_F32, 1, shape, w, sizeof w, &a) != KILN_OK ||
            kiln_array_from_host(d, KILN_I64, 0, nullptr, &s, sizeof s, &b) != KILN_OK)
          _exit(3);
        const char *keys[] = {"step", "w"};
        kiln_tree *kids[] = {kiln_tree_array(b), kiln_tree_array(a)};
        kiln_tree *t = kiln_tree_dict(2, keys, kids);
        kiln_array_release(a);
        kiln_array_release(b);
        if (kiln_checkpoint_save_step(ckdir.c_str(), s, t, nullptr, 2) != KILN_OK) _exit(4);
        kiln_tree_free(t);
      }
    }
    // Kill it a little after its first save of this round.
    std::string first = ckdir + "/" + step_name(100 * round + 1);
    for (int i = 0; i < 2000 && access(first.c_str(), F_OK) != 0; i++) usleep(5000);
    ASSERT_EQ(access(first.c_str(), F_OK), 0) << "the child never saved";
    usleep(static_cast<useconds_t>(1000 * (round * 7 + 1)));
    kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    saver.pid = -1;
    ASSERT_TRUE(WIFSIGNALED(st)) << "child exited with " << WEXITSTATUS(st);
    char *p = nullptr;
    int64_t step = -1;
    ASSERT_EQ(kiln_checkpoint_latest(ckdir.c_str(), &p, &step), KILN_OK) << kiln_last_error();
    // The pointer may lag the newest file (killed between the two), never
    // go back.
    EXPECT_GE(step, last);
    last = step;
    std::vector<float> zeros(256, 0.0f);
    int64_t zero = 0;
    kiln_tree *want = keep(dict({"step", "w"}, {arr(KILN_I64, {}, &zero), arr(KILN_F32, {256}, zeros.data())}));
    kiln_tree *back = nullptr;
    ASSERT_EQ(kiln_checkpoint_restore(p, want, dev0, &back), KILN_OK) << kiln_last_error();
    free(p);
    keep(back);
    std::vector<char> got_step = host(kiln_tree_get(back, "step"));
    std::vector<char> got_w = host(kiln_tree_get(back, "w"));
    int64_t saved_step;
    memcpy(&saved_step, got_step.data(), sizeof saved_step);
    EXPECT_EQ(saved_step, step);
    EXPECT_EQ(reinterpret_cast<float *>(got_w.data())[255], static_cast<float>(step + 255));
  }
  // The parent's next save removes whatever temporaries the child left.
  int64_t s = 1000;
  float w[256] = {0};
  ASSERT_EQ(kiln_checkpoint_save_step(ckdir.c_str(), s, keep(dict({"step", "w"}, {arr(KILN_I64, {}, &s), arr(KILN_F32, {256}, w)})), nullptr, 2), KILN_OK);
  for (const std::string &e : entries_of(ckdir)) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
  EXPECT_EQ(entries_of(ckdir).size(), 3u);
}

}  // namespace
