// Status codes, their kinds and names, and the per-thread message.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/core.h"
#include "kiln/kiln.h"

TEST(Status, KindsGroupCodes) {
  EXPECT_EQ(kiln_status_kind_of(KILN_OK), KILN_KIND_OK);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_ARGUMENT), KILN_KIND_ARGUMENT);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_OUT_OF_RANGE), KILN_KIND_ARGUMENT);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_TREE), KILN_KIND_ARGUMENT);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_CONFIG), KILN_KIND_ARGUMENT);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_SIZE_OVERFLOW), KILN_KIND_SHAPE);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_PROMOTION), KILN_KIND_DTYPE);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_OUT_OF_MEMORY), KILN_KIND_MEMORY);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_WRONG_DEVICE), KILN_KIND_DEVICE);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_COMPILE), KILN_KIND_COMPILE);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_COLLECTIVE), KILN_KIND_COLLECTIVE);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_DELETED), KILN_KIND_DELETED);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_UNIMPLEMENTED), KILN_KIND_UNIMPLEMENTED);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_IO), KILN_KIND_IO);
  EXPECT_EQ(kiln_status_kind_of(KILN_ERR_INTERNAL), KILN_KIND_INTERNAL);
  EXPECT_EQ(kiln_status_kind_of(static_cast<kiln_status>(-3)), KILN_KIND_INTERNAL);
}

TEST(Status, NamesEveryCode) {
  EXPECT_STREQ(kiln_status_str(KILN_OK), "KILN_OK");
  EXPECT_STREQ(kiln_status_str(KILN_ERR_SHAPE), "KILN_ERR_SHAPE");
  EXPECT_STREQ(kiln_status_str(KILN_ERR_DELETED), "KILN_ERR_DELETED");
  EXPECT_STREQ(kiln_status_str(static_cast<kiln_status>(12345)), "KILN_ERR_UNKNOWN");
}

TEST(Status, MessageIsPerThread) {
  kiln_clear_error();
  EXPECT_EQ(kcore_fail(KILN_ERR_SHAPE, "op: %s", "main"), KILN_ERR_SHAPE);
  std::string other;
  std::thread t([&] {
    EXPECT_STREQ(kiln_last_error(), "");
    kcore_fail(KILN_ERR_DTYPE, "op: %s", "worker");
    other = kiln_last_error();
  });
  t.join();
  EXPECT_EQ(other, "op: worker");
  EXPECT_STREQ(kiln_last_error(), "op: main");
}

TEST(Status, WrapPrefixesContext) {
  kcore_fail(KILN_ERR_OUT_OF_MEMORY, "cpu:0: out of device memory");
  EXPECT_EQ(kcore_fail_wrap(KILN_ERR_OUT_OF_MEMORY, "kiln_array_from_host"), KILN_ERR_OUT_OF_MEMORY);
  EXPECT_STREQ(kiln_last_error(), "kiln_array_from_host: cpu:0: out of device memory");
}

TEST(Status, ShapeBytesChecks) {
  int64_t n = 0;
  size_t b = 0;
  const int64_t ok[] = {2, 3, 0};
  EXPECT_EQ(kcore_shape_bytes("op", KILN_F32, 3, ok, &n, &b), KILN_OK);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(b, 0u);
  const int64_t neg[] = {2, -1};
  EXPECT_EQ(kcore_shape_bytes("op", KILN_F32, 2, neg, &n, &b), KILN_ERR_SHAPE);
  EXPECT_NE(std::string(kiln_last_error()).find("dimension 1 of f32[2,-1] is negative"),
            std::string::npos);
  const int64_t huge[] = {INT64_MAX / 2, 4};
  EXPECT_EQ(kcore_shape_bytes("op", KILN_F32, 2, huge, &n, &b), KILN_ERR_SIZE_OVERFLOW);
  const int64_t big_bytes[] = {INT64_MAX / 2};  // fits as a count, not as f64 bytes
  EXPECT_EQ(kcore_shape_bytes("op", KILN_F64, 1, big_bytes, &n, &b), KILN_ERR_SIZE_OVERFLOW);
  EXPECT_EQ(kcore_shape_bytes("op", KILN_F32, 9, ok, &n, &b), KILN_ERR_SHAPE);
  EXPECT_EQ(kcore_shape_bytes("op", KILN_INVALID_DTYPE, 1, ok, &n, &b), KILN_ERR_DTYPE);
}

TEST(Status, HashIsStableAndSeparatesStrings) {
  uint64_t a = kcore_hash_str(kcore_hash_str(KCORE_HASH_SEED, "ab"), "c");
  uint64_t b = kcore_hash_str(kcore_hash_str(KCORE_HASH_SEED, "a"), "bc");
  EXPECT_NE(a, b);
  // FNV-1a of "a" (plus the separating NUL) is a fixed value on every machine.
  EXPECT_EQ(kcore_hash_bytes(KCORE_HASH_SEED, "a", 1), 0xaf63dc4c8601ec8cull);
}
