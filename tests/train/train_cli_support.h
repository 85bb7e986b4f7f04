// The trainer binary seen from outside (tests/train/test_train_cli.cc): running
// the built `train` as a child process with its output captured, reading
// what it leaves in its out dir (metrics.jsonl as JSON lines, the
// checkpoint files as safetensors), and signalling it mid-run.
#ifndef KILN_TESTS_TRAIN_CLI_SUPPORT_H
#define KILN_TESTS_TRAIN_CLI_SUPPORT_H

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_train_support.h"

namespace train_cli {

inline std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The names in a directory, sorted.
inline std::vector<std::string> list_dir(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = opendir(dir.c_str())) {
    while (struct dirent *e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A running or finished trainer: its pid and where its output goes.
struct Child {
  pid_t pid = -1;
  std::string out_path, err_path;
  int code = -1000;  // exit code, or -signal; -1000 until waited for
  std::string out() const { return slurp(out_path); }
  std::string err() const { return slurp(err_path); }
};

// Starts KILN_TRAIN_BINARY with args, stdout and stderr to files under log_dir.
inline Child start(const std::vector<std::string> &args, const std::string &log_dir) {
  static int serial = 0;
  Child c;
  std::string base = log_dir + "/run" + std::to_string(serial++);
  c.out_path = base + ".out";
  c.err_path = base + ".err";
  std::vector<char *> argv;
  std::string bin = KILN_TRAIN_BINARY;
  argv.push_back(const_cast<char *>(bin.c_str()));
  for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  c.pid = fork();
  if (c.pid == 0) {
    int o = open(c.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(c.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(120);
    execv(argv[0], argv.data());
    _exit(121);
  }
  return c;
}

inline int wait_for(Child *c) {
  int status = 0;
  while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
  }
  c->code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return c->code;
}

inline Child run(const std::vector<std::string> &args, const std::string &log_dir) {
  Child c = start(args, log_dir);
  wait_for(&c);
  return c;
}

inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

// The complete lines of a file.
inline std::vector<std::string> lines(const std::string &path) {
  std::vector<std::string> out;
  std::string text = slurp(path);
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  return out;
}

// Waits (up to 60 s) until path has at least n complete lines or the child
// has exited; true in the first case.
inline bool wait_for_lines(const Child &c, const std::string &path, size_t n) {
  for (int i = 0; i < 60000; i++) {
    if (lines(path).size() >= n) return true;
    int status;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) return false;  // reaped: code lost
    sleep_ms(1);
  }
  return false;
}

// The "step" of a metrics line.
inline long line_step(const std::string &line) {
  size_t at = line.find("\"step\": ");
  return at == std::string::npos ? -1 : std::strtol(line.c_str() + at + 8, nullptr, 10);
}

// A metrics line without its "time" field (the one value that differs
// between an interrupted run and an uninterrupted one).
inline std::string without_time(const std::string &line) {
  size_t at = line.find(", \"time\": ");
  if (at == std::string::npos) return line;
  size_t end = line.find_first_of(",}", at + 2);
  return line.substr(0, at) + line.substr(end);
}

// Every line of path parses as JSON (Python's json module, a strict
// parser: NaN and -nan are not JSON; python3 is a build requirement).
inline ::testing::AssertionResult json_lines(const std::string &path) {
  std::string cmd =
      "python3 -c 'import json, sys\n"
      "for i, l in enumerate(open(sys.argv[1])):\n"
      "    json.loads(l, parse_constant=lambda c: sys.exit(f\"line {i + 1}: {c}\"))\n' " +
      path;
  int rc = std::system(cmd.c_str());
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << path << " is not JSON lines:\n" << slurp(path);
}

// A safetensors file's tensors: name -> (dtype, bytes).
struct Tensor {
  std::string dtype, bytes;
};

inline std::map<std::string, Tensor> read_safetensors(const std::string &path) {
  std::map<std::string, Tensor> out;
  std::string f = slurp(path);
  if (f.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | static_cast<uint8_t>(f[i]);
  if (8 + n > f.size()) return out;
  std::string head = f.substr(8, n);
  const std::string data = f.substr(8 + n);
  for (size_t at = 0; (at = head.find(":{\"dtype\":\"", at)) != std::string::npos; at++) {
    size_t name_end = head.rfind('"', at - 1), name_start = head.rfind('"', name_end - 1);
    std::string name = head.substr(name_start + 1, name_end - name_start - 1);
    size_t dt = at + 11;
    std::string dtype = head.substr(dt, head.find('"', dt) - dt);
    size_t off = head.find("\"data_offsets\":[", at) + 16;
    unsigned long long a = 0, b = 0;
    std::sscanf(head.c_str() + off, "%llu,%llu", &a, &b);
    out[name] = {dtype, b <= data.size() && a <= b ? data.substr(a, b - a) : std::string()};
  }
  return out;
}

// Every element of every F32 tensor is finite.
inline ::testing::AssertionResult all_finite(const std::map<std::string, Tensor> &t) {
  for (const auto &[name, tensor] : t) {
    if (tensor.dtype != "F32") continue;
    for (size_t i = 0; i + 4 <= tensor.bytes.size(); i += 4) {
      float v;
      std::memcpy(&v, tensor.bytes.data() + i, 4);
      if (!std::isfinite(v))
        return ::testing::AssertionFailure() << name << " element " << i / 4 << " is " << v;
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::string ckpt_name(long step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "checkpoint_%ld.safetensors", step);
  return buf;
}

// The file the out dir's "latest" names ("" without one).
inline std::string latest(const std::string &out) {
  std::string s = slurp(out + "/latest");
  return s.empty() ? s : s.substr(0, s.find('\n'));
}

}  // namespace train_cli

#endif
