// The CPU collectives engine (psum/pmax/pmin, all_gather, psum_scatter,
// all_to_all, ppermute) against jax.lax collectives inside shard_map on
// 8 CPU devices (golden/dist_collectives.txt): one thread per participant,
// groups of 8, 4 and 2. Also: bit-identical results on every participant,
// timeout, a failing participant and mismatched calls fail every participant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/text.h"
#include "test_collective_shims.h"

namespace {

using kiln_test::Split;

kiln_dtype DtypeOf(const std::string &name) {
  for (int d = 1; d < KILN_NUM_DTYPES; d++)
    if (name == kiln_dtype_name((kiln_dtype)d)) return (kiln_dtype)d;
  return KILN_INVALID_DTYPE;
}

// Parses "a,b,c;d,e,f" into one byte buffer per device of the given dtype.
std::vector<std::vector<char>> Buffers(const std::string &text, kiln_dtype dt) {
  std::vector<std::vector<char>> out;
  size_t size = kiln_dtype_size(dt);
  for (const std::string &dev : Split(text, ';')) {
    std::vector<std::string> vals = Split(dev, ',');
    std::vector<char> buf(vals.size() * size);
    for (size_t i = 0; i < vals.size(); i++) {
      double v = std::stod(vals[i]);
      char *p = buf.data() + i * size;
      switch (dt) {
        case KILN_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
        case KILN_F64: memcpy(p, &v, 8); break;
        case KILN_I32: { int32_t x = (int32_t)std::stoll(vals[i]); memcpy(p, &x, 4); break; }
        case KILN_I64: { int64_t x = std::stoll(vals[i]); memcpy(p, &x, 8); break; }
        case KILN_U8: { uint8_t x = (uint8_t)std::stoll(vals[i]); memcpy(p, &x, 1); break; }
        default: ADD_FAILURE() << "dtype " << kiln_dtype_name(dt);
      }
    }
    out.push_back(buf);
  }
  return out;
}

double ValueAt(const std::vector<char> &buf, kiln_dtype dt, size_t i) {
  const char *p = buf.data() + i * kiln_dtype_size(dt);
  switch (dt) {
    case KILN_F32: { float f; memcpy(&f, p, 4); return f; }
    case KILN_F64: { double d; memcpy(&d, p, 8); return d; }
    case KILN_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case KILN_I64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case KILN_U8: return *(const uint8_t *)p;
    default: return NAN;
  }
}

// Runs body(rank) on n threads; returns each participant's status.
std::vector<kiln_status> RunGroup(int n, const std::function<kiln_status(int)> &body) {
  std::vector<kiln_status> st(n, KILN_OK);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) threads.emplace_back([&, r] { st[r] = body(r); });
  for (auto &t : threads) t.join();
  return st;
}

TEST(CollectiveCpu, MatchesJax) {
  std::ifstream in(KILN_GOLDEN_DIR "/dist_collectives.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, '|');
    ASSERT_EQ(f.size(), 7u);
    const std::string op = f[0];
    int n = std::stoi(f[1]);
    kiln_dtype dt = DtypeOf(f[2]);
    int64_t count = std::stoll(f[3]);
    SCOPED_TRACE(op + " n=" + f[1] + " " + f[2]);
    std::vector<std::vector<char>> x = Buffers(f[5], dt), want = Buffers(f[6], dt);
    ASSERT_EQ((int)x.size(), n);
    std::vector<std::vector<char>> got(n, std::vector<char>(want[0].size()));
    std::vector<int> pairs_flat;
    for (const std::string &p : Split(f[4], ',')) {
      size_t gt = p.find('>');
      pairs_flat.push_back(std::stoi(p.substr(0, gt)));
      pairs_flat.push_back(std::stoi(p.substr(gt + 1)));
    }
    kcpu_coll_group *g = nullptr;
    ASSERT_EQ(coll_test_group_new(n, "i", 30.0, &g), KILN_OK);
    auto st = RunGroup(n, [&](int r) -> kiln_status {
      const void *src = x[r].data();
      void *dst = got[r].data();
      if (op == "psum") return coll_test_all_reduce(g, r, dt, count, src, dst, 0);
      if (op == "pmax") return coll_test_all_reduce(g, r, dt, count, src, dst, 1);
      if (op == "pmin") return coll_test_all_reduce(g, r, dt, count, src, dst, 2);
      if (op == "all_gather") return coll_test_all_gather(g, r, dt, count, src, dst);
      if (op == "psum_scatter") return coll_test_reduce_scatter(g, r, dt, count, src, dst);
      if (op == "all_to_all") return coll_test_all_to_all(g, r, dt, count, src, dst);
      return coll_test_ppermute(g, r, dt, count, src, dst, (int)pairs_flat.size() / 2,
                                reinterpret_cast<const int(*)[2]>(pairs_flat.data()));
    });
    coll_test_group_free(g);
    double tol = dt == KILN_F32 ? 1e-6 : dt == KILN_F64 ? 1e-15 : 0;  // relative, as JAX's f32/f64
    for (int r = 0; r < n; r++) {
      ASSERT_EQ(st[r], KILN_OK) << kiln_last_error();
      for (size_t i = 0; i < want[r].size() / kiln_dtype_size(dt); i++) {
        double a = ValueAt(got[r], dt, i), b = ValueAt(want[r], dt, i);
        EXPECT_LE(std::fabs(a - b), tol * std::fabs(b) + (tol ? 1e-6 : 0)) << "rank " << r << " elem " << i;
      }
      EXPECT_EQ(0, memcmp(got[r].data(), got[0].data(), op == "ppermute" || op == "psum_scatter" || op == "all_to_all" ? 0 : got[r].size()))
          << "participants disagree bitwise";
    }
    cases++;
  }
  EXPECT_EQ(cases, 105);
}

TEST(CollectiveCpu, ManyRoundsInPlaceAreBitIdentical) {
  const int n = 4, count = 1000, rounds = 50;
  std::vector<std::vector<float>> buf(n, std::vector<float>(count));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < count; i++) buf[r][i] = 1.0f / (float)(1 + r + i) * (r % 2 ? -3.1f : 7.3f);
  kcpu_coll_group *g = nullptr;
  ASSERT_EQ(coll_test_group_new(n, "data", 30.0, &g), KILN_OK);
  auto st = RunGroup(n, [&](int r) {
    for (int k = 0; k < rounds; k++) {
      kiln_status s = coll_test_all_reduce(g, r, KILN_F32, count, buf[r].data(), buf[r].data(), 0);
      if (s) return s;
      if (r == k % n) std::this_thread::yield();
    }
    return KILN_OK;
  });
  coll_test_group_free(g);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(st[r], KILN_OK) << kiln_last_error();
    EXPECT_EQ(0, memcmp(buf[r].data(), buf[0].data(), count * sizeof(float)));
  }
}

TEST(CollectiveCpu, TimeoutNamesMissingParticipant) {
  kcpu_coll_group *g = nullptr;
  ASSERT_EQ(coll_test_group_new(3, "data", 0.2, &g), KILN_OK);
  std::vector<std::string> msgs(3);
  float x[4] = {1, 2, 3, 4}, y[4];
  auto st = RunGroup(3, [&](int r) {
    if (r == 1) return KILN_OK;  // never arrives
    kiln_status s = coll_test_all_reduce(g, r, KILN_F32, 4, x, y, 0);
    msgs[r] = kiln_last_error();
    return s;
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(st[r], KILN_ERR_COLLECTIVE);
    // Named from the side of those that waited.
    EXPECT_NE(msgs[r].find("psum over axis 'data' (float32[4]): participant 1 did not arrive "
                           "within 0.2 s (participants 0, 2 waited)"),
              std::string::npos)
        << msgs[r];
  }
  // The group stays broken: a late participant fails at once.
  EXPECT_EQ(coll_test_all_reduce(g, 1, KILN_F32, 4, x, y, 0), KILN_ERR_COLLECTIVE);
  coll_test_group_free(g);
}

TEST(CollectiveCpu, FailingParticipantFailsEveryone) {
  kcpu_coll_group *g = nullptr;
  ASSERT_EQ(coll_test_group_new(4, "model", 30.0, &g), KILN_OK);
  std::vector<std::string> msgs(4);
  int32_t x[2] = {1, 2}, y[4][8];
  auto st = RunGroup(4, [&](int r) {
    kiln_status s = r == 2 ? coll_test_fail(g, r, "all_gather", "injected fault")
                           : coll_test_all_gather(g, r, KILN_I32, 2, x, y[r]);
    msgs[r] = kiln_last_error();
    return r == 2 ? KILN_ERR_COLLECTIVE : s;
  });
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(st[r], KILN_ERR_COLLECTIVE);
    EXPECT_NE(msgs[r].find("participant 2 failed: injected fault"), std::string::npos) << msgs[r];
  }
  coll_test_group_free(g);
}

TEST(CollectiveCpu, MismatchedCallsAreAnErrorNotAHang) {
  kcpu_coll_group *g = nullptr;
  ASSERT_EQ(coll_test_group_new(2, "data", 30.0, &g), KILN_OK);
  float x[8] = {0}, y[8];
  std::vector<std::string> msgs(2);
  auto st = RunGroup(2, [&](int r) {
    kiln_status s = coll_test_all_reduce(g, r, KILN_F32, r ? 8 : 4, x, y, 0);
    msgs[r] = kiln_last_error();
    return s;
  });
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(st[r], KILN_ERR_COLLECTIVE);
    EXPECT_NE(msgs[r].find("participants disagree: 0 calls psum(float32[4]"), std::string::npos) << msgs[r];
    EXPECT_NE(msgs[r].find("1 calls psum(float32[8]"), std::string::npos) << msgs[r];
  }
  coll_test_group_free(g);
  ASSERT_EQ(coll_test_group_new(2, "data", 30.0, &g), KILN_OK);
  int bad[2][2] = {{0, 1}, {1, 1}};
  EXPECT_EQ(coll_test_ppermute(g, 0, KILN_F32, 1, x, y, 2, bad), KILN_ERR_ARGUMENT);
  coll_test_group_free(g);
}

}  // namespace
