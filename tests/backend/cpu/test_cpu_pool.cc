// The CPU backend's thread pool (backend/cpu/pool.c): every item of every
// job visited exactly once, back to back (the spin-then-sleep hand-off
// between jobs), small ranges inline, a worker's failure reported with its
// message and the pool usable after it, and several callers sharing a pool.
#include <gtest/gtest.h>

#include <string>

#include "cpu_pool_checks.h"

TEST(CpuPool, BackToBackJobsVisitEveryItemOnce) {
  for (int threads : {1, 2, 4}) {
    SCOPED_TRACE(threads);
    int chunks = 0;
    EXPECT_EQ(kpt_back_to_back(threads, 3000, 1001, 1, &chunks), 0);
    EXPECT_EQ(chunks, threads);
  }
}

TEST(CpuPool, SmallRangesRunInlineInOneChunk) {
  int chunks = 0;
  EXPECT_EQ(kpt_back_to_back(4, 100, 63, 32, &chunks), 0);
  EXPECT_EQ(chunks, 1);
}

TEST(CpuPool, AWorkersFailureIsReportedAndThePoolGoesOn) {
  char msg[256] = "";
  EXPECT_EQ(kpt_failing_last_chunk(3, 300, msg, sizeof msg), KILN_ERR_ARGUMENT);
  EXPECT_EQ(std::string(msg), "chunk [200, 300) failed");
}

TEST(CpuPool, CallersSharingAPoolTakeTurns) {
  EXPECT_EQ(kpt_shared_by_callers(2, 4, 300), 0);
}
