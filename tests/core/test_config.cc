// Options: explicit values over KILN_* variables over defaults; bad values fail.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "kiln/kiln.h"
#include "support/scoped_env.h"

namespace {

bool Contains(const char *haystack, const char *needle) {
  return std::string(haystack).find(needle) != std::string::npos;
}

TEST(Config, DefaultsWithNoEnvironment) {
  ScopedEnv e("KILN_EXECUTOR", nullptr), m("KILN_MATMUL_PRECISION", nullptr);
  ScopedEnv b("KILN_BACKEND", nullptr), n("KILN_NUM_CPU_DEVICES", nullptr), l("KILN_LOG", nullptr),
      d("KILN_DUMP_DIR", nullptr), c("KILN_CACHE_DIR", nullptr), x("XDG_CACHE_HOME", "/tmp/xdg");
  ScopedEnv nans("KILN_DEBUG_NANS", nullptr), to("KILN_COLLECTIVE_TIMEOUT", nullptr),
      bucket("KILN_COLLECTIVE_BUCKET_BYTES", nullptr), nccl("KILN_NCCL_LIBRARY", nullptr);
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;  // auto would try CUDA first: fine, but keep this test CPU-only
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  const kiln_options *r = kiln_ctx_options(ctx);
  EXPECT_EQ(r->backend, KILN_BACKEND_CPU);
  EXPECT_EQ(r->num_cpu_devices, 1);
  EXPECT_EQ(r->log_level, KILN_LOG_WARN);
  EXPECT_EQ(r->promotion, KILN_PROMOTION_OPT_STANDARD);
  EXPECT_EQ(r->executor, KILN_EXECUTOR_FUSED);
  EXPECT_EQ(r->matmul_precision, KILN_MATMUL_HIGHEST);
  EXPECT_EQ(r->deterministic, KILN_DETERMINISM_OFF);
  EXPECT_EQ(r->debug_nans, KILN_DEBUG_NANS_OFF);
  EXPECT_EQ(r->collective_timeout_s, 300.0);
  EXPECT_EQ(r->collective_bucket_bytes, 32u << 20);
  EXPECT_EQ(r->nccl_library, nullptr);
  EXPECT_STREQ(r->cache_dir, "/tmp/xdg/kiln");
  EXPECT_EQ(r->dump_dir, nullptr);
  EXPECT_EQ(kiln_device_count(ctx), 1);
  kiln_ctx_free(ctx);
}

TEST(Config, EnvironmentFillsDefaults) {
  ScopedEnv e("KILN_EXECUTOR", "unfused"), m("KILN_MATMUL_PRECISION", "TensorFloat32"),
      det("KILN_DETERMINISTIC", "on");
  ScopedEnv nans("KILN_DEBUG_NANS", "ON"), to("KILN_COLLECTIVE_TIMEOUT", "2.5"),
      bucket("KILN_COLLECTIVE_BUCKET_BYTES", "1048576"), nccl("KILN_NCCL_LIBRARY", "/opt/nccl.so");
  ScopedEnv b("KILN_BACKEND", "cpu"), n("KILN_NUM_CPU_DEVICES", "4"), l("KILN_LOG", "error"),
      d("KILN_DUMP_DIR", "/tmp/kiln-dump"), c("KILN_CACHE_DIR", "/tmp/kiln-cache");
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_OK) << kiln_last_error();
  const kiln_options *r = kiln_ctx_options(ctx);
  EXPECT_EQ(kiln_ctx_backend(ctx), KILN_BACKEND_CPU);
  EXPECT_EQ(kiln_device_count(ctx), 4);
  EXPECT_EQ(r->log_level, KILN_LOG_ERROR);
  EXPECT_STREQ(r->dump_dir, "/tmp/kiln-dump");
  EXPECT_STREQ(r->cache_dir, "/tmp/kiln-cache");
  EXPECT_EQ(r->executor, KILN_EXECUTOR_UNFUSED);
  EXPECT_EQ(r->matmul_precision, KILN_MATMUL_TENSORFLOAT32);
  EXPECT_EQ(r->deterministic, KILN_DETERMINISM_ON);
  EXPECT_EQ(r->debug_nans, KILN_DEBUG_NANS_ON);
  EXPECT_EQ(r->collective_timeout_s, 2.5);
  EXPECT_EQ(r->collective_bucket_bytes, 1u << 20);
  EXPECT_STREQ(r->nccl_library, "/opt/nccl.so");
  kiln_ctx_free(ctx);
}

TEST(Config, ExplicitOptionsWinOverEnvironment) {
  ScopedEnv n("KILN_NUM_CPU_DEVICES", "4"), c("KILN_CACHE_DIR", "/tmp/from-env");
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  o.num_cpu_devices = 2;
  o.cache_dir = "/tmp/explicit";
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_device_count(ctx), 2);
  EXPECT_STREQ(kiln_ctx_options(ctx)->cache_dir, "/tmp/explicit");
  kiln_ctx_free(ctx);
}

struct BadEnv {
  const char *var, *value, *expect;
};

class ConfigBadEnv : public ::testing::TestWithParam<BadEnv> {};

TEST_P(ConfigBadEnv, IsAClearErrorAtContextCreation) {
  const BadEnv &p = GetParam();
  ScopedEnv v(p.var, p.value);
  kiln_ctx *ctx = reinterpret_cast<kiln_ctx *>(0x1);
  EXPECT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_ERR_CONFIG);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_TRUE(Contains(kiln_last_error(), "kiln_ctx_new")) << kiln_last_error();
  EXPECT_TRUE(Contains(kiln_last_error(), p.expect)) << kiln_last_error();
}

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigBadEnv,
    ::testing::Values(BadEnv{"KILN_BACKEND", "tpu", "KILN_BACKEND='tpu'"},
                      BadEnv{"KILN_NUM_CPU_DEVICES", "0", "KILN_NUM_CPU_DEVICES='0'"},
                      BadEnv{"KILN_NUM_CPU_DEVICES", "-2", "KILN_NUM_CPU_DEVICES='-2'"},
                      BadEnv{"KILN_NUM_CPU_DEVICES", "3x", "KILN_NUM_CPU_DEVICES='3x'"},
                      BadEnv{"KILN_NUM_CPU_DEVICES", "99999999999", "[1, 1024]"},
                      BadEnv{"KILN_LOG", "verbose", "KILN_LOG='verbose'"},
                      BadEnv{"KILN_EXECUTOR", "fast", "KILN_EXECUTOR='fast'"},
                      BadEnv{"KILN_MATMUL_PRECISION", "bf16",
                             "KILN_MATMUL_PRECISION='bf16' is invalid (expected highest or "
                             "tensorfloat32)"}));

TEST(Config, BadExplicitOptions) {
  kiln_options o;
  kiln_ctx *ctx = nullptr;
  kiln_options_init(&o);
  o.num_cpu_devices = -1;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  EXPECT_TRUE(Contains(kiln_last_error(), "num_cpu_devices=-1"));
  kiln_options_init(&o);
  o.backend = static_cast<kiln_backend>(17);
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  kiln_options_init(&o);
  o.log_level = static_cast<kiln_log_level>(9);
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  kiln_options_init(&o);
  o.matmul_precision = static_cast<kiln_matmul_precision>(3);
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  EXPECT_TRUE(Contains(kiln_last_error(), "options.matmul_precision 3 is not a kiln_matmul_precision"))
      << kiln_last_error();
  kiln_options_init(&o);
  o.deterministic = static_cast<kiln_determinism>(3);
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  EXPECT_TRUE(Contains(kiln_last_error(), "options.deterministic 3 is not a kiln_determinism"))
      << kiln_last_error();
  {
    ScopedEnv bad("KILN_DETERMINISTIC", "maybe");
    EXPECT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_ERR_CONFIG);
    EXPECT_TRUE(Contains(kiln_last_error(), "KILN_DETERMINISTIC='maybe' is invalid (expected off or on)"))
        << kiln_last_error();
  }
  for (const char *bad : {"abc", "0", "-1", "inf", "nan", "5s", "1e999"}) {
    ScopedEnv t("KILN_COLLECTIVE_TIMEOUT", bad);
    EXPECT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_ERR_CONFIG) << bad;
    EXPECT_TRUE(Contains(kiln_last_error(), "KILN_COLLECTIVE_TIMEOUT='")) << kiln_last_error();
    EXPECT_TRUE(Contains(kiln_last_error(), "expected a finite number of seconds > 0"))
        << kiln_last_error();
  }
  for (const char *bad : {"0", "-5", "32MiB", "99999999999999999999999"}) {
    ScopedEnv b("KILN_COLLECTIVE_BUCKET_BYTES", bad);
    EXPECT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_ERR_CONFIG) << bad;
    EXPECT_TRUE(Contains(kiln_last_error(), "expected a number of bytes > 0")) << kiln_last_error();
  }
  {
    ScopedEnv bad("KILN_DEBUG_NANS", "1");
    EXPECT_EQ(kiln_ctx_new(nullptr, &ctx), KILN_ERR_CONFIG);
    EXPECT_TRUE(Contains(kiln_last_error(), "KILN_DEBUG_NANS='1' is invalid (expected off or on)"))
        << kiln_last_error();
  }
  kiln_options_init(&o);
  o.collective_timeout_s = -3;
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  EXPECT_TRUE(Contains(kiln_last_error(), "options.collective_timeout_s=-3 is invalid"))
      << kiln_last_error();
  kiln_options_init(&o);
  o.debug_nans = static_cast<kiln_debug_nans>(3);
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  kiln_options_init(&o);
  o.cache_dir = "";
  EXPECT_EQ(kiln_ctx_new(&o, &ctx), KILN_ERR_CONFIG);
  EXPECT_EQ(kiln_ctx_new(nullptr, nullptr), KILN_ERR_ARGUMENT);
}

TEST(Config, VariablesAreReadOnceAtCreation) {
  ScopedEnv n("KILN_NUM_CPU_DEVICES", "3");
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_CPU;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK);
  setenv("KILN_NUM_CPU_DEVICES", "junk", 1);  // later changes do not reach the context
  EXPECT_EQ(kiln_ctx_options(ctx)->num_cpu_devices, 3);
  EXPECT_EQ(kiln_device_count(ctx), 3);
  kiln_ctx_free(ctx);
}

TEST(Config, AutoFallsBackToCpuWithoutAGpu) {
  kiln_options o;
  kiln_options_init(&o);
  o.backend = KILN_BACKEND_AUTO;
  kiln_ctx *ctx = nullptr;
  ASSERT_EQ(kiln_ctx_new(&o, &ctx), KILN_OK) << kiln_last_error();
  kiln_device *d = nullptr;
  ASSERT_EQ(kiln_device_get(ctx, 0, &d), KILN_OK);
  kiln_device_info info;
  ASSERT_EQ(kiln_device_info_get(d, &info), KILN_OK);
  // On a GPU machine auto picks CUDA; everywhere else it must be the CPU.
  EXPECT_EQ(info.platform, kiln_ctx_backend(ctx));
  kiln_ctx_free(ctx);
}

TEST(Config, NamesOfEnums) {
  EXPECT_STREQ(kiln_backend_name(KILN_BACKEND_CUDA), "cuda");
  EXPECT_STREQ(kiln_backend_name(static_cast<kiln_backend>(42)), "invalid");
  EXPECT_STREQ(kiln_log_level_name(KILN_LOG_INFO), "info");
  EXPECT_STREQ(kiln_executor_name(KILN_EXECUTOR_REFERENCE), "reference");
  EXPECT_STREQ(kiln_matmul_precision_name(KILN_MATMUL_TENSORFLOAT32), "tensorfloat32");
  EXPECT_STREQ(kiln_determinism_name(KILN_DETERMINISM_ON), "on");
  EXPECT_STREQ(kiln_determinism_name(static_cast<kiln_determinism>(5)), "invalid");
  EXPECT_STREQ(kiln_debug_nans_name(KILN_DEBUG_NANS_ON), "on");
}

}  // namespace
